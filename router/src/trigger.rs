//! Triggers: one normalised incoming event, whatever its platform.
//!
//! A source (GitHub webhook or poll, Feishu event) turns a platform payload
//! into a [`TriggerInput`]; the store gives it a [`TriggerId`]. Whether the
//! bot was addressed is carried as structured data (mention targets, the
//! assignee, the chat kind), never inferred from the text, so that nothing a
//! person writes can change an admission.

use serde::{Deserialize, Serialize};

use crate::id::TriggerId;

/// Where a trigger came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Github,
    Feishu,
}

/// What kind of event a trigger is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    /// A Feishu chat message.
    ChatMessage,
    IssueOpened,
    IssueComment,
    PullRequestOpened,
    PullRequestComment,
    ReviewComment,
    Review,
    /// A CI run finished (check run, workflow run).
    CiResult,
    /// Someone was assigned to an issue or PR.
    Assignment,
    /// Someone was asked to review a PR.
    ReviewRequest,
    /// An issue was closed. Lifecycle kinds ([`TriggerKind::is_lifecycle`])
    /// never open or resume work; on a live ticket they may end it.
    IssueClosed,
    /// A pull request was closed without being merged.
    PullRequestClosed,
    /// A pull request was merged.
    PullRequestMerged,
    /// A chat message was recalled: lifecycle, and information only (it
    /// never ends work: [`TriggerKind::ends_work`]).
    MessageRecalled,
    /// Its sender recalled the message that opened the thread's live
    /// ticket: the request is withdrawn, which ends the work as a close
    /// does.
    RequestRecalled,
    /// An issue or pull request was reopened: a resume signal
    /// ([`TriggerKind::is_resume_signal`]).
    Reopened,
}

impl TriggerKind {
    /// A change of an issue's or PR's state rather than a message: it asks
    /// the bot for nothing, so it is never evaluated and never opens or
    /// resumes a ticket.
    pub fn is_lifecycle(self) -> bool {
        matches!(
            self,
            TriggerKind::IssueClosed
                | TriggerKind::PullRequestClosed
                | TriggerKind::PullRequestMerged
                | TriggerKind::MessageRecalled
                | TriggerKind::RequestRecalled
        )
    }

    /// A lifecycle kind that, done by a person, ends the live work it joins
    /// (a close, a merge, the request recalled); the others only inform it.
    pub fn ends_work(self) -> bool {
        matches!(
            self,
            TriggerKind::IssueClosed
                | TriggerKind::PullRequestClosed
                | TriggerKind::PullRequestMerged
                | TriggerKind::RequestRecalled
        )
    }

    /// A reopen: it may resume the thread's ended ticket (a person's, under
    /// a mandate that still holds) but never opens one and is never
    /// evaluated; on live work it is information.
    pub fn is_resume_signal(self) -> bool {
        self == TriggerKind::Reopened
    }

    /// A change of state (lifecycle or resume signal), not a message: no
    /// rule can match it.
    pub fn is_state_change(self) -> bool {
        self.is_lifecycle() || self.is_resume_signal()
    }
}

/// Who sent a trigger, as the platform reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sender {
    /// The platform's stable id: GitHub numeric user id, Feishu open_id.
    pub id: String,
    /// GitHub login, when the platform has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// Display name; informational only.
    #[serde(default)]
    pub name: String,
    /// The platform marks the sender as a bot or app.
    #[serde(default)]
    pub is_bot: bool,
}

/// How a trigger may address the bot, besides a direct message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressKind {
    Mention,
    Assignment,
    ReviewRequest,
}

/// One account a trigger addresses in a structured field (a mention entry,
/// the assignee, the requested reviewer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Address {
    pub kind: AddressKind,
    /// The addressed account: GitHub login or numeric id, Feishu open_id.
    pub account: String,
}

/// A chat's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    /// A one-to-one chat with the bot (Feishu `p2p`).
    Direct,
    Group,
    Topic,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chat {
    pub id: String,
    pub kind: ChatKind,
}

/// A trigger as a source produces it, before the store gives it an id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerInput {
    pub source: Source,
    pub kind: TriggerKind,
    /// Stable thread key, e.g. `gh:owner/repo#412`, `fs:<chat_id>:<root_message_id>`.
    pub thread: String,
    /// The platform's id of this message (comment id, Feishu message_id);
    /// replies point at it.
    pub message_id: String,
    pub sender: Sender,
    #[serde(default)]
    pub addressed: Vec<Address>,
    /// Feishu only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<Chat>,
    /// GitHub only: `owner/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The branch a PR targets or a CI run ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default)]
    pub text: String,
    /// For a pull request the bot itself opened from a `gatehouse/<ticket>`
    /// branch: that ticket id, and the pull request's web address. The
    /// branch name only claims the ticket (any worker can push any
    /// `gatehouse/` branch); the router believes the claim only when a report
    /// of that ticket's current generation names this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_ticket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_url: Option<String>,
    /// The platform payload as received; stored once, referenced by hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<serde_json::Value>,
}

/// A stored trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    pub id: TriggerId,
    /// Milliseconds since the Unix epoch.
    pub at: u64,
    #[serde(flatten)]
    pub input: TriggerInput,
}

/// How many characters of a trigger's text its hot record keeps.
pub const SUMMARY_CHARS: usize = 120;

/// A short, single-line summary of `text` for listings.
pub fn summarize(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut chars = one_line.chars();
    let head: String = chars.by_ref().take(SUMMARY_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_one_bounded_line() {
        assert_eq!(summarize("a\n b\tc"), "a b c");
        let long = "x".repeat(500);
        let s = summarize(&long);
        assert_eq!(s.chars().count(), SUMMARY_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
