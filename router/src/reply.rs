//! Replies: the router's only way to speak to people, one of four purposes,
//! each allowed by state the router holds, never by what the text claims.
//!
//! | purpose     | allowed when                                                              |
//! |-------------|---------------------------------------------------------------------------|
//! | `ack`       | the ticket is live, the target an admitted person's message on its thread, not acked before |
//! | `answer`    | the target is a person's message a worker report answers, not answered before |
//! | `result`    | the latest report is `ready`, or the ticket ended completed/merged/dropped |
//! | `attention` | the text is, word for word, the `question` of the latest report           |
//!
//! There is no progress purpose. Every reply is at most the policy's reply
//! word limit (100), every note to a worker at most its note limit (30),
//! counted by [`crate::words`].

use serde::{Deserialize, Serialize};

use crate::gate::Admission;
use crate::id::{ThreadId, TicketId, TriggerId};
use crate::policy::Limits;
use crate::ticket::{Ticket, TicketState};
use crate::trigger::Trigger;
use crate::words::{count_words, words};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    Ack,
    Answer,
    Result,
    Attention,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Ack => "ack",
            Purpose::Answer => "answer",
            Purpose::Result => "result",
            Purpose::Attention => "attention",
        }
    }
}

/// Who wrote a reply's text: the template, or the router model's draft
/// (which passed the draft checks; the reply rules check both alike).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Writer {
    #[default]
    Template,
    Model,
}

impl Writer {
    pub fn is_template(&self) -> bool {
        *self == Writer::Template
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Writer::Template => "template",
            Writer::Model => "model",
        }
    }
}

/// A reply the router wants to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyAttempt {
    pub ticket: TicketId,
    pub purpose: Purpose,
    /// The message replied to; defaults to the trigger that opened the ticket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<TriggerId>,
    pub text: String,
}

/// A stored trigger with the facts the reply checks need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRecord {
    pub trigger: Trigger,
    pub thread: ThreadId,
    pub admission: Admission,
}

/// What the reply log already holds about the target message, and what the
/// ticket's reports said about it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplyHistory {
    pub target_acked: bool,
    pub target_answered: bool,
    /// Some report on the ticket named the target in `answers`.
    pub target_reported_answered: bool,
}

/// Why a reply may not go out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum Refusal {
    #[error("the text is empty")]
    Empty,
    #[error("the text has {words} words; the limit is {limit}")]
    TooLong { words: usize, limit: usize },
    #[error("the message replied to is not on the ticket's thread")]
    TargetNotOnThread,
    #[error("the message replied to is not an allowlisted person's")]
    NotHumanMessage,
    #[error("that message was already acknowledged")]
    AlreadyAcked,
    #[error("that message was already answered")]
    AlreadyAnswered,
    #[error("no worker report says it answers that message")]
    NotAnswered,
    /// `result` before the latest report is ready and before a completed,
    /// merged or dropped end.
    #[error("the ticket is not ready: its latest report is not `ready` and it has not ended completed, merged or dropped")]
    NotReady,
    /// `attention` whose text is not the worker's open question.
    #[error("the text is not, word for word, the question of the ticket's latest report")]
    NotAttention,
    /// Acks and notes go to live tickets only.
    #[error("the ticket has ended")]
    TicketEnded,
}

/// Checks a reply against the ticket, the target message and the reply log.
pub fn check_reply(
    attempt: &ReplyAttempt,
    ticket: &Ticket,
    target: &TriggerRecord,
    history: ReplyHistory,
    limits: &Limits,
) -> Result<(), Refusal> {
    check_length(&attempt.text, limits.reply_words)?;
    if target.thread != ticket.thread {
        return Err(Refusal::TargetNotOnThread);
    }
    let from_person = target.admission.human().is_some();
    match attempt.purpose {
        Purpose::Ack => {
            // "On it" about a ticket that will do nothing is a false promise.
            if !ticket.is_live() {
                return Err(Refusal::TicketEnded);
            }
            if !from_person {
                return Err(Refusal::NotHumanMessage);
            }
            if history.target_acked {
                return Err(Refusal::AlreadyAcked);
            }
        }
        Purpose::Answer => {
            if !from_person {
                return Err(Refusal::NotHumanMessage);
            }
            if !history.target_reported_answered {
                return Err(Refusal::NotAnswered);
            }
            if history.target_answered {
                return Err(Refusal::AlreadyAnswered);
            }
        }
        Purpose::Result => {
            let ready = ticket.state == TicketState::Ready
                && ticket
                    .latest_report
                    .as_ref()
                    .is_some_and(|r| r.state == crate::ticket::ReportState::Ready);
            let ended_well = ticket.outcome.is_some_and(|o| o.allows_result());
            if !(ready || ended_well) {
                return Err(Refusal::NotReady);
            }
        }
        Purpose::Attention => {
            let question = ticket
                .latest_report
                .as_ref()
                .filter(|_| ticket.is_live())
                .and_then(|r| r.question.as_deref());
            match question {
                Some(q) if words(q) == words(&attempt.text) => {}
                _ => return Err(Refusal::NotAttention),
            }
        }
    }
    Ok(())
}

/// Checks a note the router sends to a worker.
pub fn check_note(text: &str, limits: &Limits) -> Result<(), Refusal> {
    check_length(text, limits.note_words)
}

fn check_length(text: &str, limit: usize) -> Result<(), Refusal> {
    let n = count_words(text);
    if n == 0 {
        return Err(Refusal::Empty);
    }
    if n > limit {
        return Err(Refusal::TooLong { words: n, limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;
    use crate::gate::{Author, IgnoreReason, Via};
    use crate::id::IdClock;
    use crate::ticket::tests::{mandate, ticket_with};
    use crate::ticket::{Outcome, Report, ReportState};
    use crate::trigger::TriggerKind;

    fn record(ticket: &Ticket, admission: Admission) -> TriggerRecord {
        TriggerRecord {
            trigger: Trigger {
                id: IdClock::default().issue(1),
                at: 1,
                input: gh(alice_gh(), TriggerKind::IssueComment),
            },
            thread: ticket.thread.clone(),
            admission,
        }
    }
    fn person() -> Admission {
        Admission::Explicit {
            requester: "alice".into(),
            via: Via::Mention,
        }
    }
    fn bot() -> Admission {
        Admission::Candidate {
            author: Author::Bot("ci".into()),
        }
    }
    fn attempt(purpose: Purpose, text: &str) -> ReplyAttempt {
        ReplyAttempt {
            ticket: IdClock::default().issue(1),
            purpose,
            in_reply_to: None,
            text: text.into(),
        }
    }
    fn report(state: ReportState, question: Option<&str>) -> Report {
        Report {
            state,
            summary: "s".into(),
            question: question.map(Into::into),
            answers: None,
            links: vec![],
        }
    }
    fn with(state: TicketState, outcome: Option<Outcome>, latest: Option<Report>) -> Ticket {
        let mut t = ticket_with(mandate(Author::Human("alice".into()), &[]));
        t.state = state;
        t.outcome = outcome;
        t.latest_report = latest;
        t
    }

    type Checked = std::result::Result<(), Refusal>;

    #[test]
    fn purposes_allowed_and_refused() {
        use Purpose::*;
        use TicketState as S;
        let limits = Limits::default();
        let none = ReplyHistory::default();
        let acked = ReplyHistory {
            target_acked: true,
            ..none
        };
        let reported = ReplyHistory {
            target_reported_answered: true,
            ..none
        };
        let answered = ReplyHistory {
            target_answered: true,
            ..reported
        };
        let q = "Should I drop support for Rust 1.70?";
        let open = with(S::Open, None, None);
        let ready = with(S::Ready, None, Some(report(ReportState::Ready, None)));
        let working = with(S::Working, None, Some(report(ReportState::Working, None)));
        let blocked = with(
            S::Blocked,
            None,
            Some(report(ReportState::Blocked, Some(q))),
        );
        let ended = |o| with(S::Ended, Some(o), Some(report(ReportState::Working, None)));
        let long = vec!["word"; 101].join(" ");
        type Case = (
            &'static str,
            Ticket,
            Admission,
            ReplyHistory,
            ReplyAttempt,
            Checked,
        );
        let cases: Vec<Case> = vec![
            (
                "ack a person",
                open.clone(),
                person(),
                none,
                attempt(Ack, "On it."),
                Ok(()),
            ),
            (
                "ack twice",
                open.clone(),
                person(),
                acked,
                attempt(Ack, "On it."),
                Err(Refusal::AlreadyAcked),
            ),
            (
                "ack a bot",
                open.clone(),
                bot(),
                none,
                attempt(Ack, "On it."),
                Err(Refusal::NotHumanMessage),
            ),
            (
                "ack an ignored sender",
                open.clone(),
                Admission::Ignore {
                    reason: IgnoreReason::NotAllowlisted,
                },
                none,
                attempt(Ack, "On it."),
                Err(Refusal::NotHumanMessage),
            ),
            (
                "ack too long",
                open.clone(),
                person(),
                none,
                attempt(Ack, &long),
                Err(Refusal::TooLong {
                    words: 101,
                    limit: 100,
                }),
            ),
            (
                "ack empty",
                open.clone(),
                person(),
                none,
                attempt(Ack, " … "),
                Err(Refusal::Empty),
            ),
            (
                "answer reported",
                working.clone(),
                person(),
                reported,
                attempt(Answer, "Yes, 1.70 is the minimum."),
                Ok(()),
            ),
            (
                "answer unreported",
                working.clone(),
                person(),
                none,
                attempt(Answer, "Yes."),
                Err(Refusal::NotAnswered),
            ),
            (
                "answer twice",
                working.clone(),
                person(),
                answered,
                attempt(Answer, "Yes."),
                Err(Refusal::AlreadyAnswered),
            ),
            (
                "answer a bot",
                working.clone(),
                bot(),
                reported,
                attempt(Answer, "Yes."),
                Err(Refusal::NotHumanMessage),
            ),
            (
                "result when ready",
                ready.clone(),
                person(),
                none,
                attempt(Result, "Done: https://github.com/acme/widgets/pull/9"),
                Ok(()),
            ),
            (
                "result when working",
                working.clone(),
                person(),
                none,
                attempt(Result, "Done!"),
                Err(Refusal::NotReady),
            ),
            (
                "result when open",
                open.clone(),
                person(),
                none,
                attempt(Result, "Done!"),
                Err(Refusal::NotReady),
            ),
            (
                "result when blocked",
                blocked.clone(),
                person(),
                none,
                attempt(Result, "Done!"),
                Err(Refusal::NotReady),
            ),
            (
                "result after completed",
                ended(Outcome::Completed),
                person(),
                none,
                attempt(Result, "Done."),
                Ok(()),
            ),
            (
                "result after merged",
                ended(Outcome::Merged),
                person(),
                none,
                attempt(Result, "Merged."),
                Ok(()),
            ),
            (
                "result after dropped",
                ended(Outcome::Dropped),
                person(),
                none,
                attempt(Result, "Dropped."),
                Ok(()),
            ),
            (
                "result after failed",
                ended(Outcome::Failed),
                person(),
                none,
                attempt(Result, "Done."),
                Err(Refusal::NotReady),
            ),
            (
                "result after cancelled",
                ended(Outcome::Cancelled),
                person(),
                none,
                attempt(Result, "Done."),
                Err(Refusal::NotReady),
            ),
            (
                "result after timed out",
                ended(Outcome::TimedOut),
                person(),
                none,
                attempt(Result, "Done."),
                Err(Refusal::NotReady),
            ),
            (
                "attention, the question",
                blocked.clone(),
                person(),
                none,
                attempt(Attention, q),
                Ok(()),
            ),
            (
                "attention, respaced",
                blocked.clone(),
                person(),
                none,
                attempt(Attention, "Should  I drop support\nfor Rust 1.70 ?"),
                Ok(()),
            ),
            (
                "attention, reworded",
                blocked.clone(),
                person(),
                none,
                attempt(Attention, "Should I drop support for Rust 1.71?"),
                Err(Refusal::NotAttention),
            ),
            (
                "attention, with extra",
                blocked.clone(),
                person(),
                none,
                attempt(Attention, "Quick one: Should I drop support for Rust 1.70?"),
                Err(Refusal::NotAttention),
            ),
            (
                "attention, no question",
                working.clone(),
                person(),
                none,
                attempt(Attention, "Still working on it"),
                Err(Refusal::NotAttention),
            ),
            (
                "attention to a bot's message",
                blocked.clone(),
                bot(),
                none,
                attempt(Attention, q),
                Ok(()),
            ),
            (
                "progress as attention",
                ready.clone(),
                person(),
                none,
                attempt(Attention, "50% done"),
                Err(Refusal::NotAttention),
            ),
        ];
        for (name, ticket, admission, history, attempt, want) in cases {
            let target = record(&ticket, admission);
            assert_eq!(
                check_reply(&attempt, &ticket, &target, history, &limits),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn target_must_be_on_the_thread() {
        let ticket = with(TicketState::Open, None, None);
        let mut target = record(&ticket, person());
        let mut c = IdClock::default();
        c.issue::<ThreadId>(1);
        target.thread = c.issue(1);
        assert_eq!(
            check_reply(
                &attempt(Purpose::Ack, "ok"),
                &ticket,
                &target,
                ReplyHistory::default(),
                &Limits::default()
            ),
            Err(Refusal::TargetNotOnThread)
        );
    }

    #[test]
    fn notes_are_thirty_words() {
        let limits = Limits::default();
        assert_eq!(check_note(&vec!["w"; 30].join(" "), &limits), Ok(()));
        assert_eq!(
            check_note(&vec!["w"; 31].join(" "), &limits),
            Err(Refusal::TooLong {
                words: 31,
                limit: 30
            })
        );
        // 31 Chinese words, 62 characters.
        let zh = "我们".repeat(31);
        assert_eq!(
            check_note(&zh, &limits),
            Err(Refusal::TooLong {
                words: 31,
                limit: 30
            })
        );
    }
}
