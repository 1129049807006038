//! Pure planning: what a decision or a supervisor event asks the live loop
//! to do. No I/O, no clock: `now` comes in, intents and attempts go out.
//!
//! ```text
//! trigger decision ─► plan_trigger ─► Job{generation} | Step(ack) | Forward | Step(End cancelled)
//! report            ─► plan_report  ─► ReplyAttempts (answer, result | attention)
//! job ended         ─► end_outcome  ─► Outcome (completed only after a ready report)
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{TicketOutcome, TriggerDecision};
use crate::gate::Admission;
use crate::id::{TicketId, TriggerId};
use crate::reply::{Purpose, ReplyAttempt};
use crate::ticket::{Outcome, Report, ReportState, Ticket, TicketState};
use crate::trigger::{TriggerInput, TriggerKind};
use crate::words::words;

/// Something the loop must do, recorded durably before it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// A job for this ticket generation (the trigger that opened or resumed it).
    Job {
        ticket: TicketId,
        generation: TriggerId,
    },
    /// A step to decide through the core.
    Step(Step),
    /// Post this pass-through to the ticket's job's inbox.
    Forward {
        trigger: TriggerId,
        ticket: TicketId,
    },
}

/// A step the loop decides through the router core (checked, logged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// A reply: checked by `Router::on_reply`, then queued for sending.
    Reply { attempt: ReplyAttempt },
    /// An end: decided by `Router::on_end`, then the job is cancelled.
    End {
        ticket: TicketId,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requested_by: Option<TriggerId>,
    },
    /// A person closed (or merged) the ticket's issue or pull request: an end whose
    /// outcome [`close_outcome`] takes from the ticket's state when the step
    /// runs, requested by the closing trigger.
    Close {
        ticket: TicketId,
        trigger: TriggerId,
    },
}

impl Step {
    pub fn ticket(&self) -> &TicketId {
        match self {
            Step::Reply { attempt } => &attempt.ticket,
            Step::End { ticket, .. } | Step::Close { ticket, .. } => ticket,
        }
    }
}

/// What the loop does about one trigger decision. `input` is the trigger
/// as received (its text decides whether it asks to stop).
pub fn plan_trigger(d: &TriggerDecision, input: &TriggerInput, reply_words: usize) -> Vec<Intent> {
    let explicit_human = matches!(d.admission, Admission::Explicit { .. });
    match &d.ticket {
        TicketOutcome::Opened { ticket, .. } | TicketOutcome::Resumed { ticket, .. } => {
            let mut out = vec![Intent::Job {
                ticket: ticket.clone(),
                generation: d.trigger.clone(),
            }];
            // Only a person who asked the bot hears "on it" (reopening
            // the issue or pull request asks too); work a rule accepted on
            // its own is not announced.
            let reopened = input.kind.is_resume_signal() && d.admission.human().is_some();
            if explicit_human || reopened {
                out.push(Intent::Step(Step::Reply {
                    attempt: ReplyAttempt {
                        ticket: ticket.clone(),
                        purpose: Purpose::Ack,
                        in_reply_to: Some(d.trigger.clone()),
                        text: fit_words(&ack_text(ticket), reply_words),
                    },
                }));
            }
            out
        }
        TicketOutcome::PassThrough { ticket } if input.kind.is_lifecycle() => {
            vec![plan_lifecycle(d, input.kind, ticket)]
        }
        TicketOutcome::PassThrough { ticket } => {
            if explicit_human && is_stop(&input.text) {
                vec![Intent::Step(Step::End {
                    ticket: ticket.clone(),
                    outcome: Outcome::Cancelled,
                    requested_by: Some(d.trigger.clone()),
                })]
            } else {
                vec![Intent::Forward {
                    trigger: d.trigger.clone(),
                    ticket: ticket.clone(),
                }]
            }
        }
        TicketOutcome::None { .. } | TicketOutcome::StaysEnded { .. } => Vec::new(),
    }
}

/// A lifecycle trigger that joined live work. A close or merge done by a
/// person ends the work, requested by that close or merge (the core's end
/// rules apply, as to a "stop"); done by a listed bot (a merge queue, a
/// stale-issue bot) it reaches the worker as information and ends nothing:
/// a bot never stops a ticket. A recalled message is information whoever
/// recalled it.
fn plan_lifecycle(d: &TriggerDecision, kind: TriggerKind, ticket: &TicketId) -> Intent {
    if kind.ends_work() && d.admission.human().is_some() {
        Intent::Step(Step::Close {
            ticket: ticket.clone(),
            trigger: d.trigger.clone(),
        })
    } else {
        Intent::Forward {
            trigger: d.trigger.clone(),
            ticket: ticket.clone(),
        }
    }
}

/// How a ticket ends when a person closes its issue or pull request: an
/// issue closed after the worker reported ready is done; anything else
/// (work still going, or the bot's pull request closed unmerged) is
/// cancelled.
pub fn close_outcome(kind: TriggerKind, state: TicketState) -> Outcome {
    match (kind, state) {
        (TriggerKind::PullRequestMerged, _) => Outcome::Merged,
        (TriggerKind::IssueClosed, TicketState::Ready) => Outcome::Completed,
        _ => Outcome::Cancelled,
    }
}

/// Words that ask the bot to stop, alone in a message that addresses it
/// (mentions removed, case and surrounding punctuation ignored).
const STOP_WORDS: &[&str] = &["stop", "/stop", "cancel", "/cancel", "停止", "停", "取消"];

/// Does this message (which addressed the bot, structurally) ask it to
/// stop? Only the whole message counts: "stop" alone, not "don't stop".
pub fn is_stop(text: &str) -> bool {
    let rest: Vec<&str> = text
        .split_whitespace()
        .filter(|w| !w.starts_with('@'))
        .collect();
    let [word] = rest.as_slice() else {
        return false;
    };
    let word = word
        .trim_matches(|c: char| c.is_ascii_punctuation() && c != '/' || "。！，".contains(c))
        .to_lowercase();
    STOP_WORDS.contains(&word.as_str())
}

/// The replies a report accepted by the core asks for: an `answer` to the
/// message it says it answers, then `result` when ready or `attention`
/// (the question, word for word) when blocked.
pub fn plan_report(ticket: &TicketId, report: &Report, reply_words: usize) -> Vec<ReplyAttempt> {
    let mut out = Vec::new();
    if let Some(answered) = &report.answers {
        if let Some(target) = TriggerId::parse(answered.as_str()) {
            out.push(ReplyAttempt {
                ticket: ticket.clone(),
                purpose: Purpose::Answer,
                in_reply_to: Some(target),
                text: fit_words(&report.summary, reply_words),
            });
        }
    }
    match report.state {
        ReportState::Ready => out.push(ReplyAttempt {
            ticket: ticket.clone(),
            purpose: Purpose::Result,
            in_reply_to: None,
            text: result_text(&report.summary, &report.links, reply_words),
        }),
        ReportState::Blocked => {
            if let Some(q) = &report.question {
                // Word for word, or the core refuses it: never shortened.
                out.push(ReplyAttempt {
                    ticket: ticket.clone(),
                    purpose: Purpose::Attention,
                    in_reply_to: None,
                    text: q.clone(),
                });
            }
        }
        ReportState::Working => {}
    }
    out
}

/// The `result` for a ticket that ended completed without a `result`
/// logged since its generation began (a `ready` report usually sent one).
pub fn result_on_end(ticket: &Ticket, reply_words: usize) -> Option<ReplyAttempt> {
    let report = ticket.latest_report.as_ref()?;
    Some(ReplyAttempt {
        ticket: ticket.id.clone(),
        purpose: Purpose::Result,
        in_reply_to: None,
        text: result_text(&report.summary, &report.links, reply_words),
    })
}

/// How a ticket ends when its job ends in `job_state` (the supervisor's
/// final states): `None` for a state that is not final.
pub fn end_outcome(job_state: &str, latest: Option<&Report>) -> Option<Outcome> {
    Some(match job_state {
        // A worker that exits 0 without saying it is ready did not finish.
        "done" if latest.is_some_and(|r| r.state == ReportState::Ready) => Outcome::Completed,
        "done" | "failed" => Outcome::Failed,
        "timed_out" => Outcome::TimedOut,
        "cancelled" => Outcome::Cancelled,
        _ => return None,
    })
}

fn ack_text(ticket: &TicketId) -> String {
    format!("On it: I am working on this (ticket {ticket}). I will reply here when there is a result or a question.")
}

fn result_text(summary: &str, links: &[String], reply_words: usize) -> String {
    // Links are one word each and go last; the summary yields room to them.
    let room = reply_words.saturating_sub(links.len() + 1);
    let mut text = format!("Done: {}", fit_words(summary, room));
    for link in links.iter().take(reply_words.saturating_sub(2)) {
        text.push('\n');
        text.push_str(link);
    }
    text
}

/// `text` cut after its `max`-th word (as the reply check counts words).
pub fn fit_words(text: &str, max: usize) -> String {
    let w = words(text);
    if w.len() <= max {
        return text.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let Some(last) = w.get(max - 1) else {
        return text.to_owned();
    };
    // `words` returns slices of `text`: the end of the last kept word.
    let end = (last.as_ptr() as usize)
        .saturating_sub(text.as_ptr() as usize)
        .saturating_add(last.len());
    match text.get(..end) {
        Some(kept) => format!("{kept}…"),
        None => w[..max].join(" "),
    }
}

/// The `Idempotency-Key` of a ticket generation's job: a retry after a
/// crash is the same job, a resume (a new generation) a new one, and so is
/// a start after the job was lost with the supervisor (`attempt` > 0).
pub fn idempotency_key(ticket: &TicketId, generation: &TriggerId, attempt: u32) -> String {
    match attempt {
        0 => format!("{ticket}:{generation}"),
        n => format!("{ticket}:{generation}:again{n}"),
    }
}

/// How many times a generation's job is started again after it was lost
/// with the supervisor; past that, the ticket fails.
pub const LOST_JOB_RETRIES: u32 = 1;

/// What to do when the job of a live ticket's generation, started
/// `attempt` times before, was lost: `Some(next attempt)` to start it
/// again, `None` to fail the ticket.
pub fn after_lost(attempt: u32) -> Option<u32> {
    (attempt < LOST_JOB_RETRIES).then(|| attempt + 1)
}

/// `POST /jobs`'s body, built from the ticket's mandate and the trigger
/// that opened or resumed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobBody {
    pub ticket: String,
    pub team: String,
    pub profile: String,
    pub rule_sets: Vec<String>,
    pub variables: BTreeMap<String, String>,
    pub task: String,
    pub deadline_secs: u64,
}

pub fn job_body(
    ticket: &Ticket,
    generation: &TriggerId,
    input: &TriggerInput,
    deadline_secs: u64,
) -> JobBody {
    let scope = &ticket.mandate.scope;
    let task = format!(
        "{}\n\n(thread {}, message {generation})",
        input.text.trim(),
        ticket.thread_key
    );
    JobBody {
        ticket: ticket.id.to_string(),
        team: scope.team.clone(),
        profile: scope.sandbox_profile.clone(),
        rule_sets: scope.rule_sets.clone(),
        variables: [
            Some(("repo".to_owned(), scope.repo.clone())),
            scope.fork.clone().map(|fork| ("fork".to_owned(), fork)),
        ]
        .into_iter()
        .flatten()
        .collect(),
        task,
        deadline_secs,
    }
}

#[cfg(test)]
mod tests;
