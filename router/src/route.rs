//! Routing one trigger: gate, then the thread's ticket, then eval.
//!
//! `route_trigger` is pure: it takes the trigger, the policy, a judge and the
//! thread's most recent ticket, and says what should happen. The engine
//! records that in the store.

use serde::{Deserialize, Serialize};

use crate::eval::{evaluate, Evaluation, Judge};
use crate::gate::{gate, scope_for, Admission, Author};
use crate::id::TicketId;
use crate::policy::Policy;
use crate::ticket::{revalidate, Mandate, RevalidationFailure, Ticket};
use crate::trigger::Trigger;

/// Why a trigger opened or resumed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoTicket {
    /// The gate ignored it.
    Ignored,
    /// No auto rule accepted the candidate (observe rules may have matched).
    NotAccepted,
    /// A bot wrote on a thread whose ticket ended; bots never resume work.
    BotCannotResume,
    /// The request has no scope: a direct message from a person whose team
    /// has no default repository.
    NoScope,
}

/// What happens to the thread's work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum TicketAction {
    None {
        why: NoTicket,
    },
    /// The thread's ticket is live: the trigger goes to its inbox, no eval.
    PassThrough {
        ticket: TicketId,
    },
    /// Open a new ticket under this mandate.
    Open {
        mandate: Mandate,
    },
    /// The ended ticket's mandate holds: resume it under the refreshed mandate.
    Resume {
        ticket: TicketId,
        mandate: Mandate,
    },
    /// The ended ticket's mandate no longer holds; it stays ended.
    StaysEnded {
        ticket: TicketId,
        reason: RevalidationFailure,
    },
}

/// The full routing decision for one trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRoute {
    pub admission: Admission,
    /// Present when eval ran (candidates on threads without a live ticket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<Evaluation>,
    pub ticket: TicketAction,
    /// An explicit request on a thread whose ended ticket could not resume
    /// opens a new ticket; this records the refused resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_resume: Option<(TicketId, RevalidationFailure)>,
}

/// Routes a stored trigger. `latest` is the thread's most recent ticket.
pub fn route_trigger(
    trigger: &Trigger,
    policy: &Policy,
    judge: &dyn Judge,
    latest: Option<&Ticket>,
) -> TriggerRoute {
    let admission = gate(&trigger.input, policy);
    let mut route = TriggerRoute {
        admission: admission.clone(),
        eval: None,
        ticket: TicketAction::None {
            why: NoTicket::Ignored,
        },
        refused_resume: None,
    };
    if admission.is_ignore() {
        return route;
    }
    match latest {
        // Pass-through: humans and listed bots alike reach the worker, as
        // information; nothing here can stop the ticket.
        Some(t) if t.is_live() => {
            route.ticket = TicketAction::PassThrough {
                ticket: t.id.clone(),
            };
            return route;
        }
        Some(t) => {
            if admission.human().is_none() {
                route.ticket = TicketAction::None {
                    why: NoTicket::BotCannotResume,
                };
                return route;
            }
            match revalidate(&t.mandate, policy) {
                Ok(mandate) => {
                    route.ticket = TicketAction::Resume {
                        ticket: t.id.clone(),
                        mandate,
                    };
                    return route;
                }
                Err(reason) => {
                    if !matches!(admission, Admission::Explicit { .. }) {
                        route.ticket = TicketAction::StaysEnded {
                            ticket: t.id.clone(),
                            reason,
                        };
                        return route;
                    }
                    // An explicit request is its own authority: fall through
                    // and open a new ticket, recording the refused resume.
                    route.refused_resume = Some((t.id.clone(), reason));
                }
            }
        }
        None => {}
    }
    let Some(scope) = scope_for(&trigger.input, &admission, policy) else {
        route.ticket = TicketAction::None {
            why: NoTicket::NoScope,
        };
        return route;
    };
    let mandate = |requester: Author, matched_rules: Vec<String>| Mandate {
        policy_version: policy.version().clone(),
        scope: scope.clone(),
        matched_rules,
        requester,
        trigger: trigger.id.clone(),
    };
    route.ticket = match &admission {
        Admission::Explicit { requester, .. } => TicketAction::Open {
            mandate: mandate(Author::Human(requester.clone()), Vec::new()),
        },
        Admission::Candidate { author } => {
            let eval = evaluate(&trigger.input, author, &scope, policy, judge);
            let accepted = eval.accepted();
            route.eval = Some(eval);
            if accepted.is_empty() {
                TicketAction::None {
                    why: NoTicket::NotAccepted,
                }
            } else {
                TicketAction::Open {
                    mandate: mandate(author.clone(), accepted),
                }
            }
        }
        Admission::Ignore { .. } => TicketAction::None {
            why: NoTicket::Ignored,
        },
    };
    route
}
