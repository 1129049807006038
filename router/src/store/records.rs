//! The records the store hands out.

use serde::{Deserialize, Serialize};

use crate::gate::Admission;
use crate::id::{ReplyId, ThreadId, TicketId, TriggerId};
use crate::reply::{Purpose, Writer};
use crate::trigger::{Source, TriggerKind};

/// A thread as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRecord {
    pub id: ThreadId,
    pub key: String,
    pub created_at: u64,
}

/// A trigger's hot row, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerSummary {
    pub id: TriggerId,
    pub at: u64,
    pub source: Source,
    pub kind: TriggerKind,
    pub sender: String,
    pub admission: Admission,
    pub summary: String,
}

/// One page of a thread's triggers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub triggers: Vec<TriggerSummary>,
    /// Pass back to get the next page; present even on the last page, so
    /// that triggers arriving later are found from where this page ended.
    pub next_cursor: String,
}

/// The message a reply answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTarget {
    pub platform: Source,
    /// The platform's id of the message replied to.
    pub message_id: String,
    pub trigger: TriggerId,
}

/// One entry of the reply log, as exported (JSONL) for the audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyRecord {
    pub reply: ReplyId,
    pub ticket: TicketId,
    pub thread_key: String,
    pub purpose: Purpose,
    pub target: ReplyTarget,
    /// SHA-256 of the exact text, hex.
    pub text_sha256: String,
    pub words: usize,
    pub at: u64,
    /// Who wrote the text (absent: the template).
    #[serde(default, skip_serializing_if = "Writer::is_template")]
    pub writer: Writer,
}

/// What a ticket's worker receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxItem {
    Trigger(TriggerId),
    Note(String),
}
