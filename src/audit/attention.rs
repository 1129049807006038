//! The attention report (pure): per finished ticket, the messages that
//! reached people, by purpose and by sender, from the reconciliation's
//! findings. The seed's measure was messages per finished task: two (an ack
//! and a result) is the norm; a ticket over two is listed with what its
//! messages were. Progress-style messages must be none: the router has no
//! progress purpose, so any is a worker posting status on its own. A pull
//! request a worker opens (or edits) is the work itself, counted apart as
//! an artifact, not as a message.

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::{Finding, Kind, Sender};

/// Messages per ticket above this are listed.
pub const USUAL: usize = 2;

/// A finished ticket, as the router's state has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub ticket: String,
    pub outcome: String,
    /// When it ended (ms).
    pub ended_at: u64,
}

/// One message that reached people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub at: u64,
    pub sender: Sender,
    /// The reply's purpose, or for a worker the message's kind.
    pub what: String,
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// One finished ticket's messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TicketAttention {
    pub ticket: String,
    pub outcome: String,
    pub messages: usize,
    pub by_purpose: BTreeMap<String, usize>,
    pub by_sender: BTreeMap<Sender, usize>,
    /// Worker messages that are status-like (a comment or chat message
    /// posted directly, not a pull request or a review reply).
    pub progress_style: usize,
    /// Pull requests opened or edited, by kind.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub artifacts: BTreeMap<String, usize>,
    /// Every message, when there are more than [`USUAL`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listed: Vec<Message>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub finished_tickets: usize,
    pub messages: usize,
    /// Messages per finished ticket.
    pub per_ticket: f64,
    pub progress_style: usize,
    pub over_usual: Vec<String>,
    pub tickets: Vec<TicketAttention>,
}

/// A worker's direct message of this kind reads as a status update.
pub fn progress_style(message_kind: &str) -> bool {
    matches!(
        message_kind,
        "github_issue_comment" | "github_issue_comment_edit" | "feishu_message" | "feishu_reply"
    )
}

/// A worker's call of this kind produces the work, not a message.
pub fn artifact(message_kind: &str) -> bool {
    matches!(
        message_kind,
        "github_pull_request" | "github_pull_request_edit"
    )
}

/// The messages of one finding that reached people, with its ticket.
fn reached(f: &Finding) -> Option<(&str, Message)> {
    if !f.posted || !matches!(f.kind, Kind::ReplyDelivered | Kind::WorkerDirect) {
        return None;
    }
    let ticket = f.ticket.as_deref()?;
    let what = match f.sender {
        Sender::Router => f.purpose.clone().unwrap_or_else(|| "reply".into()),
        _ => f.message.clone(),
    };
    Some((
        ticket,
        Message {
            at: f.at,
            sender: f.sender,
            what,
            target: f.target.clone(),
            message_id: f.message_id.clone(),
        },
    ))
}

/// Collects the findings of the finished tickets (memory: their messages).
#[derive(Debug, Default)]
pub struct Collector {
    tickets: BTreeMap<String, Vec<Message>>,
}

impl Collector {
    pub fn add(&mut self, f: &Finding) {
        if let Some((ticket, m)) = reached(f) {
            self.tickets.entry(ticket.to_owned()).or_default().push(m);
        }
    }

    /// The report over `finished` tickets (in their order).
    pub fn report(mut self, finished: &[Finished]) -> Report {
        let mut tickets = Vec::new();
        for t in finished {
            let (artifacts, mut messages): (Vec<Message>, Vec<Message>) = self
                .tickets
                .remove(&t.ticket)
                .unwrap_or_default()
                .into_iter()
                .partition(|m| m.sender == Sender::Worker && artifact(&m.what));
            messages.sort_by_key(|m| m.at);
            let mut artifact_kinds = BTreeMap::new();
            for a in artifacts {
                *artifact_kinds.entry(a.what).or_default() += 1;
            }
            let mut by_purpose = BTreeMap::new();
            let mut by_sender = BTreeMap::new();
            let mut progress = 0;
            for m in &messages {
                *by_purpose.entry(m.what.clone()).or_default() += 1;
                *by_sender.entry(m.sender).or_default() += 1;
                if m.sender == Sender::Worker && progress_style(&m.what) {
                    progress += 1;
                }
            }
            let count = messages.len();
            tickets.push(TicketAttention {
                ticket: t.ticket.clone(),
                outcome: t.outcome.clone(),
                messages: count,
                by_purpose,
                by_sender,
                progress_style: progress,
                artifacts: artifact_kinds,
                listed: if count > USUAL { messages } else { Vec::new() },
            });
        }
        let messages: usize = tickets.iter().map(|t| t.messages).sum();
        Report {
            finished_tickets: tickets.len(),
            messages,
            per_ticket: if tickets.is_empty() {
                0.0
            } else {
                messages as f64 / tickets.len() as f64
            },
            progress_style: tickets.iter().map(|t| t.progress_style).sum(),
            over_usual: tickets
                .iter()
                .filter(|t| t.messages > USUAL)
                .map(|t| t.ticket.clone())
                .collect(),
            tickets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(kind: Kind, sender: Sender, ticket: &str, what: &str, posted: bool) -> Finding {
        let mut f = Finding::new(kind, 1, sender, String::new());
        f.ticket = Some(ticket.into());
        f.posted = posted;
        match sender {
            Sender::Router => f.purpose = Some(what.into()),
            _ => f.message = what.into(),
        }
        f
    }

    fn finished(ticket: &str) -> Finished {
        Finished {
            ticket: ticket.into(),
            outcome: "completed".into(),
            ended_at: 10,
        }
    }

    #[test]
    fn counts_messages_per_finished_ticket_by_purpose_and_sender() {
        let mut c = Collector::default();
        for f in [
            finding(Kind::ReplyDelivered, Sender::Router, "tkt_a", "ack", true),
            finding(
                Kind::ReplyDelivered,
                Sender::Router,
                "tkt_a",
                "result",
                true,
            ),
            // An attempt that posted nothing reached nobody.
            finding(Kind::ReplyAttempt, Sender::Router, "tkt_a", "result", false),
            finding(Kind::ReplyDelivered, Sender::Router, "tkt_b", "ack", true),
            finding(
                Kind::WorkerDirect,
                Sender::Worker,
                "tkt_b",
                "github_pull_request",
                true,
            ),
            finding(
                Kind::WorkerDirect,
                Sender::Worker,
                "tkt_b",
                "github_issue_comment",
                true,
            ),
            finding(
                Kind::WorkerDirect,
                Sender::Worker,
                "tkt_b",
                "github_issue_comment",
                false,
            ),
            finding(
                Kind::ReplyDelivered,
                Sender::Router,
                "tkt_b",
                "result",
                true,
            ),
            // A live ticket is not in the report.
            finding(
                Kind::ReplyDelivered,
                Sender::Router,
                "tkt_live",
                "ack",
                true,
            ),
        ] {
            c.add(&f);
        }
        let r = c.report(&[finished("tkt_a"), finished("tkt_b")]);
        assert_eq!(r.finished_tickets, 2);
        assert_eq!(r.messages, 5);
        assert_eq!(r.per_ticket, 2.5);
        assert_eq!(r.progress_style, 1);
        assert_eq!(r.over_usual, vec!["tkt_b".to_owned()]);
        let a = &r.tickets[0];
        assert_eq!((a.messages, a.progress_style), (2, 0));
        assert_eq!(a.by_purpose["ack"], 1);
        assert_eq!(a.by_sender[&Sender::Router], 2);
        assert!(a.listed.is_empty());
        let b = &r.tickets[1];
        // The pull request is the work, not a message.
        assert_eq!(b.by_sender[&Sender::Worker], 1);
        assert_eq!(b.artifacts["github_pull_request"], 1);
        assert_eq!(b.listed.len(), 3);
    }

    #[test]
    fn no_messages_is_zero_not_a_division_by_zero() {
        let r = Collector::default().report(&[]);
        assert_eq!((r.messages, r.per_ticket), (0, 0.0));
        let r = Collector::default().report(&[finished("tkt_a")]);
        assert_eq!(r.tickets[0].messages, 0);
    }
}
