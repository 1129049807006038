//! Routing one trigger: gate, then the thread's ticket, then eval.
//!
//! `route_trigger` is pure: it takes the trigger, the policy, a judge and the
//! thread's most recent ticket, and says what should happen. The engine
//! records that in the store.

use serde::{Deserialize, Serialize};

use crate::eval::{evaluate, rules_to_judge, Ask, Evaluation, Judge};
use crate::gate::{gate, scope_for, Admission, Author};
use crate::id::TicketId;
use crate::policy::Policy;
use crate::ticket::{revalidate, Mandate, RevalidationFailure, Ticket};
use crate::trigger::{Trigger, TriggerInput};

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
    /// A close, merge or reopen on a thread with no work to join or
    /// resume: it asks for nothing.
    NoLiveWork,
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
    let decided = |ticket| TriggerRoute {
        admission: admission.clone(),
        eval: None,
        ticket,
        refused_resume: None,
    };
    if admission.is_ignore() {
        return decided(TicketAction::None {
            why: NoTicket::Ignored,
        });
    }
    // A change of state joins live work, as information the loop may act
    // on; it never opens, resumes or is evaluated.
    if trigger.input.kind.is_lifecycle() {
        return decided(match latest {
            Some(t) if t.is_live() => TicketAction::PassThrough {
                ticket: t.id.clone(),
            },
            _ => TicketAction::None {
                why: NoTicket::NoLiveWork,
            },
        });
    }
    if trigger.input.kind.is_resume_signal() {
        return decided(on_reopen(latest, &admission, policy));
    }
    let refused_resume = match latest.map(|t| on_latest_ticket(t, &admission, policy)) {
        Some(Latest::Decided(ticket)) => return decided(ticket),
        Some(Latest::OpenNew { refused_resume }) => Some(refused_resume),
        None => None,
    };
    let (eval, ticket) = open_or_evaluate(trigger, &admission, policy, judge);
    TriggerRoute {
        admission,
        eval,
        ticket,
        refused_resume,
    }
}

/// Whether a lifecycle trigger on a pull request may act on `claimed`, the
/// ticket its work branch names: only a live ticket whose work is in the
/// trigger's repository and whose worker reported this pull request
/// (`reported`: a report of its current generation names the pull
/// request's address). The mapping already refused the claim for a pull
/// request the bot did not open; the report is what ties the pull request
/// to this ticket's worker rather than to another worker of the same bot.
pub fn claim_holds(input: &TriggerInput, claimed: &Ticket, reported: bool) -> bool {
    input.kind.is_lifecycle()
        && claimed.is_live()
        && input.repo.as_deref() == Some(claimed.mandate.scope.repo.as_str())
        && input.pull_url.is_some()
        && reported
}

/// What a judge will be asked about `input`, if anything (pure): only a
/// candidate on a thread that has never had a ticket reaches eval (a live
/// ticket takes it as pass-through, an ended one resumes or stays ended),
/// and only rules whose structured conditions hold reach the judge; a
/// lifecycle trigger (a close, a merge) is never evaluated.
pub fn judge_ask(input: &TriggerInput, policy: &Policy, thread_had_ticket: bool) -> Option<Ask> {
    if thread_had_ticket || input.kind.is_state_change() {
        return None;
    }
    let admission = gate(input, policy);
    let Admission::Candidate { author } = &admission else {
        return None;
    };
    let scope = scope_for(input, &admission, policy)?;
    let rules: Vec<_> = rules_to_judge(input, author, &scope, policy)
        .into_iter()
        .cloned()
        .collect();
    (!rules.is_empty()).then(|| Ask {
        trigger: input.clone(),
        rules,
        context: Vec::new(),
    })
}

/// What the thread's most recent ticket decides for an admitted trigger.
enum Latest {
    /// Pass-through, resume, stays ended, or nothing (a bot).
    Decided(TicketAction),
    /// An explicit request on a thread whose ended ticket may not resume: a
    /// new ticket may open; the refused resume is recorded.
    OpenNew {
        refused_resume: (TicketId, RevalidationFailure),
    },
}

fn on_latest_ticket(t: &Ticket, admission: &Admission, policy: &Policy) -> Latest {
    // Pass-through: humans and listed bots alike reach the worker, as
    // information; nothing here can stop the ticket.
    if t.is_live() {
        return Latest::Decided(TicketAction::PassThrough {
            ticket: t.id.clone(),
        });
    }
    if admission.human().is_none() {
        return Latest::Decided(TicketAction::None {
            why: NoTicket::BotCannotResume,
        });
    }
    match revalidate(&t.mandate, policy) {
        Ok(mandate) => Latest::Decided(TicketAction::Resume {
            ticket: t.id.clone(),
            mandate,
        }),
        Err(reason) if !matches!(admission, Admission::Explicit { .. }) => {
            Latest::Decided(TicketAction::StaysEnded {
                ticket: t.id.clone(),
                reason,
            })
        }
        // An explicit request is its own authority: open a new ticket,
        // recording the refused resume.
        Err(reason) => Latest::OpenNew {
            refused_resume: (t.id.clone(), reason),
        },
    }
}

/// A reopen: joins live work as information, and resumes an ended ticket by
/// the same rule as a comment on it (a person, a mandate that still holds);
/// it asks for no new work, so it never opens a ticket, even where an
/// explicit request would.
fn on_reopen(latest: Option<&Ticket>, admission: &Admission, policy: &Policy) -> TicketAction {
    let Some(t) = latest else {
        return TicketAction::None {
            why: NoTicket::NoLiveWork,
        };
    };
    match on_latest_ticket(t, admission, policy) {
        Latest::Decided(action) => action,
        Latest::OpenNew {
            refused_resume: (ticket, reason),
        } => TicketAction::StaysEnded { ticket, reason },
    }
}

/// An admitted trigger with no live ticket to join: an explicit request
/// opens one; a candidate goes to eval and opens one only if a rule accepts.
fn open_or_evaluate(
    trigger: &Trigger,
    admission: &Admission,
    policy: &Policy,
    judge: &dyn Judge,
) -> (Option<Evaluation>, TicketAction) {
    let Some(scope) = scope_for(&trigger.input, admission, policy) else {
        let why = NoTicket::NoScope;
        return (None, TicketAction::None { why });
    };
    let mandate = |requester: Author, matched_rules: Vec<String>| Mandate {
        policy_version: policy.version().clone(),
        scope: scope.clone(),
        matched_rules,
        requester,
        trigger: trigger.id.clone(),
    };
    match admission {
        Admission::Explicit { requester, .. } => {
            let mandate = mandate(Author::Human(requester.clone()), Vec::new());
            (None, TicketAction::Open { mandate })
        }
        Admission::Candidate { author } => {
            let eval = evaluate(&trigger.input, author, &scope, policy, judge);
            let accepted = eval.accepted();
            let ticket = if accepted.is_empty() {
                TicketAction::None {
                    why: NoTicket::NotAccepted,
                }
            } else {
                TicketAction::Open {
                    mandate: mandate(author.clone(), accepted),
                }
            };
            (Some(eval), ticket)
        }
        Admission::Ignore { .. } => {
            let why = NoTicket::Ignored;
            (None, TicketAction::None { why })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::base;
    use crate::ticket::tests::{mandate, ticket_with};
    use crate::ticket::TicketState;

    fn explicit(name: &str) -> Admission {
        Admission::Explicit {
            requester: name.into(),
            via: crate::gate::Via::Mention,
        }
    }

    fn candidate(author: Author) -> Admission {
        Admission::Candidate { author }
    }

    fn ended(requester: &str) -> Ticket {
        let mut t = ticket_with(mandate(Author::Human(requester.into()), &[]));
        t.state = TicketState::Ended;
        t
    }

    fn decided(l: Latest) -> TicketAction {
        match l {
            Latest::Decided(a) => a,
            Latest::OpenNew { refused_resume } => panic!("opens anew: {refused_resume:?}"),
        }
    }

    #[test]
    fn a_live_ticket_takes_everyone_as_pass_through() {
        let live = ticket_with(mandate(Author::Human("alice".into()), &[]));
        for admission in [explicit("alice"), candidate(Author::Bot("ci".into()))] {
            assert_eq!(
                decided(on_latest_ticket(&live, &admission, &base())),
                TicketAction::PassThrough {
                    ticket: live.id.clone()
                }
            );
        }
    }

    #[test]
    fn an_ended_ticket_resumes_only_for_a_human_under_a_mandate_that_holds() {
        let p = base();
        let t = ended("alice");
        let bot = candidate(Author::Bot("ci".into()));
        assert_eq!(
            decided(on_latest_ticket(&t, &bot, &p)),
            TicketAction::None {
                why: NoTicket::BotCannotResume
            }
        );
        let resumed = decided(on_latest_ticket(&t, &explicit("bob"), &p));
        assert!(
            matches!(&resumed, TicketAction::Resume { ticket, .. } if *ticket == t.id),
            "{resumed:?}"
        );
        // The requester is gone from the policy: a candidate leaves it ended,
        // an explicit request opens anew and records why it did not resume.
        let gone = ended("zed");
        let removed = RevalidationFailure::RequesterRemoved { name: "zed".into() };
        assert_eq!(
            decided(on_latest_ticket(
                &gone,
                &candidate(Author::Human("alice".into())),
                &p
            )),
            TicketAction::StaysEnded {
                ticket: gone.id.clone(),
                reason: removed.clone()
            }
        );
        match on_latest_ticket(&gone, &explicit("alice"), &p) {
            Latest::OpenNew { refused_resume } => {
                assert_eq!(refused_resume, (gone.id.clone(), removed));
            }
            Latest::Decided(a) => panic!("expected a new ticket, got {a:?}"),
        }
    }

    #[test]
    fn a_reopen_resumes_a_persons_ended_ticket_and_never_opens_one() {
        let p = base();
        let t = ended("alice");
        let live = ticket_with(mandate(Author::Human("alice".into()), &[]));
        let gone = ended("zed");
        let removed = RevalidationFailure::RequesterRemoved { name: "zed".into() };
        let person = candidate(Author::Human("alice".into()));
        let bot = candidate(Author::Bot("ci".into()));
        let asked = explicit("alice");
        let nothing = TicketAction::None {
            why: NoTicket::NoLiveWork,
        };
        let cases: Vec<(Option<&Ticket>, &Admission, Option<TicketAction>)> = vec![
            // No ticket ever: a reopen asks for nothing, from anyone.
            (None, &person, Some(nothing.clone())),
            (None, &asked, Some(nothing)),
            // Live work: information for the worker.
            (
                Some(&live),
                &bot,
                Some(TicketAction::PassThrough {
                    ticket: live.id.clone(),
                }),
            ),
            // Ended: a person resumes it (None: a Resume, checked below) ...
            (Some(&t), &person, None),
            // ... a bot only informs ...
            (
                Some(&t),
                &bot,
                Some(TicketAction::None {
                    why: NoTicket::BotCannotResume,
                }),
            ),
            // ... and a mandate that no longer holds stays ended, even
            // where an explicit request would open a new ticket.
            (
                Some(&gone),
                &person,
                Some(TicketAction::StaysEnded {
                    ticket: gone.id.clone(),
                    reason: removed.clone(),
                }),
            ),
            (
                Some(&gone),
                &asked,
                Some(TicketAction::StaysEnded {
                    ticket: gone.id.clone(),
                    reason: removed,
                }),
            ),
        ];
        for (latest, admission, expected) in cases {
            let got = on_reopen(latest, admission, &p);
            match expected {
                Some(e) => assert_eq!(got, e, "{admission:?}"),
                None => assert!(
                    matches!(&got, TicketAction::Resume { ticket, .. } if *ticket == t.id),
                    "{got:?}"
                ),
            }
        }
    }
}
