//! The engine: runs each input through the pure decision functions and
//! records the result in the store, one transaction per decision.
//!
//! The live router and `gatehouse router replay` both drive a [`Router`];
//! replay passes each input's own `at` as `now`, the live router the wall
//! clock. Nothing here reads a clock or draws randomness.

use serde::{Deserialize, Serialize};

use crate::eval::{Ask, Evaluation, Judge};
use crate::gate::{Admission, Author};
use crate::id::{ReplyId, ThreadId, TicketId, TriggerId};
use crate::json;
use crate::model::judge::{context_item, CONTEXT_TRIGGERS};
use crate::policy::{Policy, PolicyVersion};
use crate::reply::{
    check_note, check_reply, Purpose, Refusal, ReplyAttempt, TriggerRecord, Writer,
};
use crate::route::{claim_holds, judge_ask, route_trigger, NoTicket, TicketAction};
use crate::store::{text_sha256, ReplyRecord, ReplyTarget, Store, StoreError, ThreadRecord, Tx};
use crate::ticket::{
    apply_report, end_ticket, EndRefusal, EndRequester, Mandate, Outcome, Report, ReportRefusal,
    RevalidationFailure, Ticket, TicketState,
};
use crate::trigger::{Trigger, TriggerInput};
use crate::words::count_words;

/// Errors that stop a decision (refusals are decisions, not errors).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What happened to a trigger's thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum TicketOutcome {
    None {
        why: NoTicket,
    },
    PassThrough {
        ticket: TicketId,
    },
    Opened {
        ticket: TicketId,
        mandate: Mandate,
    },
    Resumed {
        ticket: TicketId,
        mandate: Mandate,
    },
    StaysEnded {
        ticket: TicketId,
        reason: RevalidationFailure,
    },
}

impl TicketOutcome {
    /// The ticket whose inbox the trigger joins, if any.
    pub fn inbox(&self) -> Option<&TicketId> {
        match self {
            TicketOutcome::PassThrough { ticket }
            | TicketOutcome::Opened { ticket, .. }
            | TicketOutcome::Resumed { ticket, .. } => Some(ticket),
            TicketOutcome::None { .. } | TicketOutcome::StaysEnded { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerDecision {
    pub trigger: TriggerId,
    pub thread: ThreadId,
    #[serde(flatten)]
    pub admission: Admission,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<Evaluation>,
    pub ticket: TicketOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_resume: Option<RefusedResume>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedResume {
    pub ticket: TicketId,
    pub reason: RevalidationFailure,
}

/// A refusal with its reason in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused<R> {
    #[serde(flatten)]
    pub refusal: R,
    pub message: String,
}

impl<R: std::fmt::Display> Refused<R> {
    fn new(refusal: R) -> Self {
        Self {
            message: refusal.to_string(),
            refusal,
        }
    }
}

/// One decision, as replay prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    Trigger(Box<TriggerDecision>),
    Report {
        ticket: TicketId,
        #[serde(flatten)]
        result: Checked<ReportRefusal, ReportAccepted>,
    },
    Reply {
        ticket: TicketId,
        purpose: Purpose,
        #[serde(flatten)]
        result: Checked<Refusal, ReplyRecord>,
    },
    End {
        ticket: TicketId,
        outcome: Outcome,
        #[serde(flatten)]
        result: Checked<EndRefusal, Ended>,
    },
    Note {
        ticket: TicketId,
        #[serde(flatten)]
        result: Checked<Refusal, NoteAccepted>,
    },
    /// A policy came into force; `previous` is the one it replaced.
    Policy {
        version: PolicyVersion,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<PolicyVersion>,
    },
}

/// A checked request (a report, a reply, an end, a note): allowed (with
/// details) or refused (with the reason). Not to be confused with a rule's
/// [`Verdict`](crate::eval::Verdict) in eval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Checked<R, A> {
    Allowed { allowed: Accepted<A> },
    Refused { refused: Refused<R> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Accepted<A>(pub A);

fn allowed<R, A>(a: A) -> Checked<R, A> {
    Checked::Allowed {
        allowed: Accepted(a),
    }
}

fn refused<R: std::fmt::Display, A>(r: R) -> Checked<R, A> {
    Checked::Refused {
        refused: Refused::new(r),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportAccepted {
    pub state: TicketState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub state: TicketState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteAccepted {
    pub words: usize,
}

/// A report arriving for a ticket, as the supervisor forwards it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportInput {
    pub ticket: TicketId,
    #[serde(flatten)]
    pub report: Report,
}

/// The router core over a store.
pub struct Router<J: Judge> {
    pub(crate) store: Store,
    policy: Policy,
    judge: J,
}

impl<J: Judge> Router<J> {
    /// A router over `store`, with `policy` in force from `now`.
    ///
    /// The rule for which policy is in force: the one the router is started
    /// (or [`Router::set_policy`]) with, never an older one the store
    /// remembers. When it differs from the last recorded version (or none is
    /// recorded), the change is written as a `policy` decision naming the
    /// version it replaced; a restart on the same policy records nothing.
    pub fn new(mut store: Store, policy: Policy, judge: J, now: u64) -> Result<Self, EngineError> {
        let previous = store.read().current_policy_version()?;
        if previous.as_ref() != Some(policy.version()) {
            record_policy(&mut store, &policy, previous, now)?;
        }
        Ok(Self {
            store,
            policy,
            judge,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn judge(&self) -> &J {
        &self.judge
    }

    /// Replaces the policy; later decisions and revalidations use it.
    pub fn set_policy(&mut self, policy: Policy, now: u64) -> Result<Decision, EngineError> {
        let previous = Some(self.policy.version().clone());
        let decision = record_policy(&mut self.store, &policy, previous, now)?;
        self.policy = policy;
        Ok(decision)
    }

    /// Lets a batching judge answer, in one call, every candidate the
    /// coming `inputs` will ask about (a turn); decisions follow one by one.
    pub fn prepare_turn(&mut self, inputs: &[TriggerInput]) -> Result<(), EngineError> {
        if !self.judge.batches() {
            return Ok(());
        }
        let asks = self.judge_asks(inputs)?.into_iter().flatten().collect();
        self.prepare_asks(asks);
        Ok(())
    }

    /// What a judge would be asked about each input (`None`: nothing, the
    /// input is decided without a judge), each ask with its thread's most
    /// recent earlier triggers as context. Read-only.
    pub fn judge_asks(&self, inputs: &[TriggerInput]) -> Result<Vec<Option<Ask>>, EngineError> {
        let read = self.store.read();
        let mut asks = Vec::with_capacity(inputs.len());
        for input in inputs {
            let thread = read.thread_by_key(&input.thread)?;
            let had_ticket = match &thread {
                Some(thread) => read.latest_ticket(&thread.id)?.is_some(),
                None => false,
            };
            // Two candidates of one turn on one new thread: the first may
            // open a ticket; the second is asked anyway (cheap, never wrong),
            // without the first as context (it is not stored yet).
            let mut ask = judge_ask(input, &self.policy, had_ticket);
            if let (Some(ask), Some(thread)) = (&mut ask, &thread) {
                ask.context = read
                    .recent_triggers(&thread.id, CONTEXT_TRIGGERS)?
                    .into_iter()
                    .map(|(id, earlier, admission)| context_item(id, &earlier, &admission))
                    .collect();
            }
            asks.push(ask);
        }
        Ok(asks)
    }

    /// Hands a batching judge the asks of a turn (see [`Router::judge_asks`]).
    pub fn prepare_asks(&mut self, asks: Vec<Ask>) {
        if self.judge.batches() {
            self.judge.prepare(asks);
        }
    }

    /// Whether the judge batches (and so whether asks are worth computing).
    pub fn judge_batches(&self) -> bool {
        self.judge.batches()
    }

    /// How long the judge's candidates may wait for company.
    pub fn judge_window(&self) -> crate::model::window::WindowConfig {
        self.judge.window()
    }

    /// Gate, then pass-through, revalidation or eval; records it all.
    pub fn on_trigger(&mut self, input: TriggerInput, now: u64) -> Result<Decision, EngineError> {
        self.on_trigger_with(input, now, |_, _| Ok(()))
    }

    /// [`Router::on_trigger`], and `also` in the same transaction once the
    /// decision is recorded (a source marks the delivery the trigger came
    /// from processed); if `also` fails, the decision is rolled back too.
    pub fn on_trigger_with(
        &mut self,
        input: TriggerInput,
        now: u64,
        also: impl FnOnce(&mut Tx<'_>, &TriggerDecision) -> Result<(), StoreError>,
    ) -> Result<Decision, EngineError> {
        let Self {
            store,
            policy,
            judge,
        } = self;
        store
            .transaction(|tx| {
                let thread = tx.ensure_thread(&input.thread, now)?;
                let trigger = Trigger {
                    id: tx.issue(now)?,
                    at: now,
                    input,
                };
                let mut latest = tx.latest_ticket(&thread.id)?;
                if !latest.as_ref().is_some_and(Ticket::is_live) {
                    if let Some(claimed) = claimed_ticket(tx, &trigger.input)? {
                        latest = Some(claimed);
                    }
                }
                let route = route_trigger(&trigger, policy, judge, latest.as_ref());
                let trigger_id = trigger.id.clone();
                // The ticket is written first: the trigger's row names the ticket
                // whose inbox it went to.
                let ticket = apply_ticket_action(tx, route.ticket, &thread, now)?;
                let inbox = ticket.inbox();
                tx.insert_trigger(
                    &TriggerRecord {
                        trigger,
                        thread: thread.id.clone(),
                        admission: route.admission.clone(),
                    },
                    inbox,
                )?;
                let decision = Decision::Trigger(Box::new(TriggerDecision {
                    trigger: trigger_id,
                    thread: thread.id,
                    admission: route.admission,
                    eval: route.eval,
                    ticket,
                    refused_resume: route
                        .refused_resume
                        .map(|(ticket, reason)| RefusedResume { ticket, reason }),
                }));
                record(tx, now, &decision)?;
                if let Decision::Trigger(d) = &decision {
                    also(tx, d)?;
                }
                Ok(decision)
            })
            .inspect(crate::metrics::decided)
    }

    /// A worker's report on its ticket.
    pub fn on_report(&mut self, input: ReportInput, now: u64) -> Result<Decision, EngineError> {
        self.on_report_with(input, now, |_, _| Ok(()))
    }

    /// [`Router::on_report`], and `also` in the same transaction once the
    /// decision is recorded (the live loop records what the report causes
    /// and its event cursor); if `also` fails, the decision is rolled back.
    pub fn on_report_with(
        &mut self,
        input: ReportInput,
        now: u64,
        also: impl FnOnce(&mut Tx<'_>, &Decision) -> Result<(), StoreError>,
    ) -> Result<Decision, EngineError> {
        self.store.transaction(|tx| {
            let mut ticket = tx.read().ticket(&input.ticket)?;
            let result = match &input.report.answers {
                Some(answered)
                    if tx.read().trigger(&issued(answered)?)?.thread != ticket.thread =>
                {
                    Err(ReportRefusal::AnswersOtherThread)
                }
                _ => apply_report(&mut ticket, input.report.clone(), now),
            };
            let result = match result {
                Ok(()) => {
                    tx.update_ticket(&ticket)?;
                    tx.insert_report(&ticket.id, &input.report, now)?;
                    allowed(ReportAccepted {
                        state: ticket.state,
                    })
                }
                Err(r) => refused(r),
            };
            let decision = Decision::Report {
                ticket: input.ticket,
                result,
            };
            record(tx, now, &decision)?;
            also(tx, &decision)?;
            Ok(decision)
        })
    }

    /// A reply the router wants to send: checked, and if allowed, logged.
    pub fn on_reply(&mut self, attempt: ReplyAttempt, now: u64) -> Result<Decision, EngineError> {
        self.on_reply_with(attempt, now, |_, _| Ok(()))
    }

    /// [`Router::on_reply`], and `also` in the same transaction once the
    /// decision is recorded (the live loop queues the logged reply for
    /// sending); if `also` fails, the decision is rolled back.
    pub fn on_reply_with(
        &mut self,
        attempt: ReplyAttempt,
        now: u64,
        also: impl FnOnce(&mut Tx<'_>, &Decision) -> Result<(), StoreError>,
    ) -> Result<Decision, EngineError> {
        self.on_reply_written(attempt, Writer::Template, now, also)
    }

    /// [`Router::on_reply_with`] for a text `writer` wrote; the reply log
    /// records which. The checks are the same whoever wrote it.
    pub fn on_reply_written(
        &mut self,
        attempt: ReplyAttempt,
        writer: Writer,
        now: u64,
        also: impl FnOnce(&mut Tx<'_>, &Decision) -> Result<(), StoreError>,
    ) -> Result<Decision, EngineError> {
        let limits = self.policy.limits;
        self.store
            .transaction(|tx| {
                let ticket = tx.read().ticket(&attempt.ticket)?;
                let target_id = attempt
                    .in_reply_to
                    .clone()
                    .unwrap_or_else(|| ticket.mandate.trigger.clone());
                let target = tx.read().trigger(&target_id)?;
                let history = tx.read().reply_history(&ticket.id, &target_id)?;
                let result = match check_reply(&attempt, &ticket, &target, history, &limits) {
                    Ok(()) => {
                        let record = ReplyRecord {
                            reply: tx.issue::<ReplyId>(now)?,
                            ticket: ticket.id.clone(),
                            thread_key: ticket.thread_key.clone(),
                            purpose: attempt.purpose,
                            target: ReplyTarget {
                                platform: target.trigger.input.source,
                                message_id: target.trigger.input.message_id.clone(),
                                trigger: target_id,
                            },
                            text_sha256: text_sha256(&attempt.text),
                            words: count_words(&attempt.text),
                            at: now,
                            writer,
                        };
                        // Logged before it is sent: the live router sends only
                        // what this transaction committed.
                        tx.insert_reply(&record, &attempt.text)?;
                        allowed(record)
                    }
                    Err(r) => refused(r),
                };
                let decision = Decision::Reply {
                    ticket: attempt.ticket,
                    purpose: attempt.purpose,
                    result,
                };
                record(tx, now, &decision)?;
                also(tx, &decision)?;
                Ok(decision)
            })
            .inspect(crate::metrics::decided)
    }

    /// The end of a ticket: by the system, or asked for by a message.
    pub fn on_end(
        &mut self,
        ticket_id: TicketId,
        outcome: Outcome,
        requested_by: Option<TriggerId>,
        now: u64,
    ) -> Result<Decision, EngineError> {
        self.on_end_with(ticket_id, outcome, requested_by, now, |_, _| Ok(()))
    }

    /// [`Router::on_end`], and `also` in the same transaction once the
    /// decision is recorded; if `also` fails, the decision is rolled back.
    pub fn on_end_with(
        &mut self,
        ticket_id: TicketId,
        outcome: Outcome,
        requested_by: Option<TriggerId>,
        now: u64,
        also: impl FnOnce(&mut Tx<'_>, &Decision) -> Result<(), StoreError>,
    ) -> Result<Decision, EngineError> {
        self.store.transaction(|tx| {
            let mut ticket = tx.read().ticket(&ticket_id)?;
            let by = match &requested_by {
                None => EndRequester::System,
                Some(id) => {
                    let t = tx.read().trigger(id)?;
                    // A close of the ticket's own pull request sits on the
                    // pull request's thread; routing sent it to this ticket's
                    // inbox only after checking its claim, so it counts as
                    // said on the ticket's thread.
                    let thread = if tx.read().trigger_inbox(id)?.as_ref() == Some(&ticket_id) {
                        ticket.thread.clone()
                    } else {
                        t.thread
                    };
                    EndRequester::Message {
                        thread,
                        author: match t.admission {
                            Admission::Explicit { requester, .. } => Some(Author::Human(requester)),
                            Admission::Candidate { author } => Some(author),
                            Admission::Ignore { .. } => None,
                        },
                    }
                }
            };
            let result = match end_ticket(&mut ticket, outcome, &by, now) {
                Ok(()) => {
                    tx.update_ticket(&ticket)?;
                    allowed(Ended {
                        state: ticket.state,
                    })
                }
                Err(r) => refused(r),
            };
            let decision = Decision::End {
                ticket: ticket_id,
                outcome,
                result,
            };
            record(tx, now, &decision)?;
            also(tx, &decision)?;
            Ok(decision)
        })
    }

    /// A note from the router to a ticket's worker (≤ the note word limit).
    pub fn on_note(
        &mut self,
        ticket_id: TicketId,
        text: String,
        now: u64,
    ) -> Result<Decision, EngineError> {
        let limits = self.policy.limits;
        self.store.transaction(|tx| {
            let ticket = tx.read().ticket(&ticket_id)?;
            let result = if !ticket.is_live() {
                refused(Refusal::TicketEnded)
            } else {
                match check_note(&text, &limits) {
                    Ok(()) => {
                        tx.push_note(&ticket.id, &text, now)?;
                        allowed(NoteAccepted {
                            words: count_words(&text),
                        })
                    }
                    Err(r) => refused(r),
                }
            };
            let decision = Decision::Note {
                ticket: ticket_id,
                result,
            };
            record(tx, now, &decision)?;
            Ok(decision)
        })
    }
}

/// Writes what routing decided for the thread's ticket: a new ticket, or
/// the resumed one under its refreshed mandate.
fn apply_ticket_action(
    tx: &mut Tx<'_>,
    action: TicketAction,
    thread: &ThreadRecord,
    now: u64,
) -> Result<TicketOutcome, StoreError> {
    Ok(match action {
        TicketAction::None { why } => TicketOutcome::None { why },
        TicketAction::PassThrough { ticket } => TicketOutcome::PassThrough { ticket },
        TicketAction::Open { mandate } => {
            let ticket = Ticket {
                id: tx.issue(now)?,
                thread: thread.id.clone(),
                thread_key: thread.key.clone(),
                state: TicketState::Open,
                outcome: None,
                mandate,
                latest_report: None,
                opened_at: now,
                updated_at: now,
            };
            tx.insert_ticket(&ticket)?;
            TicketOutcome::Opened {
                ticket: ticket.id,
                mandate: ticket.mandate,
            }
        }
        TicketAction::Resume { ticket, mandate } => {
            let mut t = tx.read().ticket(&ticket)?;
            t.state = TicketState::Open;
            t.outcome = None;
            // Reports from before the end say nothing about the new work,
            // and authorise no reply about it.
            t.latest_report = None;
            tx.clear_reports(&ticket)?;
            t.mandate = mandate.clone();
            t.updated_at = now;
            tx.update_ticket(&t)?;
            TicketOutcome::Resumed { ticket, mandate }
        }
        TicketAction::StaysEnded { ticket, reason } => TicketOutcome::StaysEnded { ticket, reason },
    })
}

/// The live ticket a pull request's work branch names, when the claim holds
/// ([`claim_holds`]); `None` otherwise.
fn claimed_ticket(tx: &mut Tx<'_>, input: &TriggerInput) -> Result<Option<Ticket>, StoreError> {
    let Some(id) = input.head_ticket.as_deref().and_then(TicketId::parse) else {
        return Ok(None);
    };
    let Some(url) = input.pull_url.as_deref() else {
        return Ok(None);
    };
    let read = tx.read();
    match read.ticket(&id) {
        Ok(t) => {
            let reported = read.reported_link(&t.id, url)?;
            Ok(claim_holds(input, &t, reported).then_some(t))
        }
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The router's trigger id for one a report names. The wire's rule is
/// wider than the shape the router issues; an id of another shape was never
/// issued here, so it is not found, as an unknown one is.
fn issued(id: &gatehouse_types::TriggerId) -> Result<TriggerId, StoreError> {
    TriggerId::parse(id.as_str()).ok_or_else(|| StoreError::NotFound {
        kind: "trigger",
        id: id.to_string(),
    })
}

fn record(tx: &mut Tx<'_>, now: u64, decision: &Decision) -> Result<(), StoreError> {
    let body = json::encode("decision", decision)?;
    tx.insert_decision(now, &body)
}

fn record_policy(
    store: &mut Store,
    policy: &Policy,
    previous: Option<PolicyVersion>,
    now: u64,
) -> Result<Decision, EngineError> {
    let decision = Decision::Policy {
        version: policy.version().clone(),
        previous,
    };
    let body = json::encode("policy", policy).map_err(StoreError::from)?;
    store.transaction(|tx| {
        tx.insert_policy(policy.version(), now, &body)?;
        record(tx, now, &decision)?;
        Ok(decision)
    })
}

#[cfg(test)]
mod tests;
