//! What the audit reasons about, as plain data: the proxy's message calls,
//! the router's reply-log entries, the platforms' own record of what the bot
//! account posted, and the findings.

use serde::Serialize;

/// Who made a message call through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sender {
    /// The router (or any identity that is not a ticket's): only its reply
    /// log can explain what it posts.
    Router,
    /// A ticket's worker, through a rule that marks the call as a message.
    Worker,
    /// Nobody gatehouse knows: found on a platform only.
    Unknown,
}

impl Sender {
    /// A ticket's identity is its ticket id; every other is the router's.
    pub fn of_identity(identity: &str) -> Sender {
        if gatehouse_types::TicketId::is_valid(identity) {
            Sender::Worker
        } else {
            Sender::Router
        }
    }
}

/// A message-bearing call in the proxy's log: its request line joined with
/// its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyMessage {
    /// Where its request line is (`file:line`).
    pub place: String,
    /// When the request was made (ms).
    pub at: u64,
    pub request_id: String,
    pub identity: String,
    /// `rule_set/rule` that allowed it.
    pub rule: String,
    pub kind: String,
    pub target: String,
    pub body_sha256: String,
    /// The answer's status; `None` when the log has no completion.
    pub status: Option<u16>,
    /// The platform's id of the created message.
    pub message_id: Option<String>,
    /// For a worker: whether the router's state knows its ticket.
    pub ticket_known: bool,
}

impl ProxyMessage {
    pub fn sender(&self) -> Sender {
        Sender::of_identity(&self.identity)
    }

    /// A message reached the platform (a 2xx).
    pub fn posted(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// The platform's key of what it created (see [`PlatformMessage::key`]);
    /// edits create nothing.
    pub fn platform_key(&self) -> Option<String> {
        // A GraphQL answer names the object by its url.
        let id = gatehouse_proxy::audit::platform_id(&self.kind, self.message_id.as_deref()?);
        let key = match self.kind.as_str() {
            "github_issue_comment" => format!("github:comment:{id}"),
            "github_review_comment_reply" => format!("github:review_comment:{id}"),
            "github_pull_request" => format!("github:pull:{}#{id}", self.target),
            "github_review" => format!("github:review:{id}"),
            "feishu_message" | "feishu_reply" => format!("feishu:message:{id}"),
            _ => return None,
        };
        Some(key)
    }
}

/// Where a reply-log entry stands in the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyState {
    /// Logged but never queued.
    Unqueued,
    Pending,
    Unknown,
    Sent,
    Failed,
}

/// A reply-log entry, with the call the router makes to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub reply: String,
    pub ticket: String,
    pub purpose: String,
    /// When it was logged (ms).
    pub at: u64,
    pub state: ReplyState,
    /// The platform's id of the posted message, once sent.
    pub message_id: Option<String>,
    /// The message kind and target of the proxy's record of the send.
    pub kind: String,
    pub target: String,
    /// SHA-256 of the request body the router sends for it.
    pub body_sha256: String,
}

/// A message the bot account posted, as the platform lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformMessage {
    /// `github:comment:<id>`, `github:review_comment:<id>`,
    /// `github:pull:<owner/repo>#<n>`, `github:review:<id>`,
    /// `feishu:message:<id>`: what a proxy record's created id names.
    pub key: String,
    /// When the platform says it was created (ms).
    pub at: u64,
    /// Where to see it (a URL or a chat).
    pub place: String,
}

/// What one finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    // Explained.
    /// A reply-log entry, its proxy record and the posted message agree.
    ReplyDelivered,
    /// A proxy record of a reply's send that posted nothing (refused,
    /// failed, or no answer), matched to its entry.
    ReplyAttempt,
    /// A reply logged but not sent (pending, failed, never queued): no
    /// message reached anyone; listed, not unexplained.
    ReplyUndelivered,
    /// A worker's message through a rule that marks it as one, tied to a
    /// ticket the router opened.
    WorkerDirect,
    /// A platform message a proxy record created.
    PlatformExplained,
    // Unexplained.
    /// A reply marked sent with no proxy record of its send.
    ReplyNotForwarded,
    /// A router message call no reply-log entry explains.
    MessageWithoutReply,
    /// A message call whose body matches a reply-log entry but whose target
    /// or created message disagrees with it.
    ReplyMismatch,
    /// A worker's message call from an identity that is no known ticket.
    WorkerWithoutTicket,
    /// A message the bot account posted that no proxy record created.
    PlatformUnexplained,
    /// The audit log's chain is broken, or a file of the set is missing.
    AuditLogBroken,
}

impl Kind {
    pub fn explained(self) -> bool {
        matches!(
            self,
            Kind::ReplyDelivered
                | Kind::ReplyAttempt
                | Kind::ReplyUndelivered
                | Kind::WorkerDirect
                | Kind::PlatformExplained
        )
    }
}

/// One line of the reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: Kind,
    pub explained: bool,
    /// When (ms): the call's, the entry's or the platform's time.
    pub at: u64,
    pub sender: Sender,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ticket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// The proxy record (`file:line`, request id), if one is involved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    /// The message's kind (`github_issue_comment`, `feishu_reply`, …).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Where it went (or where to see it, for a platform message).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// A proxy call that posted (a 2xx): a message reached people.
    pub posted: bool,
    /// Why it is (or is not) explained, in words.
    pub why: String,
}

impl Finding {
    pub fn new(kind: Kind, at: u64, sender: Sender, why: String) -> Self {
        Finding {
            kind,
            explained: kind.explained(),
            at,
            sender,
            ticket: None,
            purpose: None,
            reply: None,
            record: None,
            message: String::new(),
            target: String::new(),
            message_id: None,
            posted: false,
            why,
        }
    }

    fn with_reply(mut self, r: &Reply) -> Self {
        self.ticket = Some(r.ticket.clone());
        self.purpose = Some(r.purpose.clone());
        self.reply = Some(r.reply.clone());
        if self.message.is_empty() {
            self.message = r.kind.clone();
            self.target = r.target.clone();
        }
        if self.message_id.is_none() {
            self.message_id = r.message_id.clone();
        }
        self
    }

    fn with_message(mut self, m: &ProxyMessage) -> Self {
        self.record = Some(format!("{} ({})", m.place, m.request_id));
        self.message = m.kind.clone();
        self.target = m.target.clone();
        self.message_id = m.message_id.clone();
        self.posted = m.posted();
        if m.sender() == Sender::Worker {
            self.ticket = Some(m.identity.clone());
        }
        self
    }

    /// A finding about a reply-log entry.
    pub fn of_reply(kind: Kind, r: &Reply, why: String) -> Self {
        Finding::new(kind, r.at, Sender::Router, why).with_reply(r)
    }

    /// A finding about a proxy message call.
    pub fn of_message(kind: Kind, m: &ProxyMessage, why: String) -> Self {
        Finding::new(kind, m.at, m.sender(), why).with_message(m)
    }

    /// A finding about a proxy call matched to a reply.
    pub fn of_match(kind: Kind, m: &ProxyMessage, r: &Reply, why: String) -> Self {
        Finding::new(kind, m.at, Sender::Router, why)
            .with_message(m)
            .with_reply(r)
    }
}
