//! GitHub webhook deliveries ─► triggers, as pure functions.
//!
//! - [`route`]: `X-GitHub-Event` + `action` ─► store it, ignore it (a known
//!   event we do not act on: answered 2xx, not stored), or refuse it
//!   (unknown event: 4xx).
//! - [`meaning`]: what a delivery means (object id, action, update time and
//!   the account it names), the second deduplication key.
//! - [`map`]: a stored delivery ─► a [`TriggerInput`], or a reason to skip.
//!
//! Senders are identified by numeric id, and marked bots by type (`Bot`) or
//! a `[bot]` login, never by login alone; an assignee or requested reviewer
//! is the bot when its id is the policy's bot id (its login only when the
//! policy gives no id). The raw payload is not copied into the trigger: the
//! trigger points at the stored delivery.

mod map;
mod payload;

use serde_json::Value;

use super::mention::mentions;
use crate::policy::Policy;
use crate::trigger::TriggerInput;

pub use map::map;
use payload::User;

/// What to do with a delivery, from its event and action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// GitHub's hook test; answered, not stored.
    Ping,
    /// Stored and mapped.
    Store,
    /// A known event whose action leads nowhere; answered, not stored.
    Ignore,
}

/// Events this source knows.
const EVENTS: &[&str] = &[
    "ping",
    "issue_comment",
    "issues",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "check_run",
    "check_suite",
    "workflow_run",
];

/// Routes on event and action; `None` for an event this source does not know.
pub fn route(event: &str, action: Option<&str>) -> Option<Route> {
    let stored = match (event, action.unwrap_or("")) {
        ("ping", _) => return Some(Route::Ping),
        ("issue_comment", "created")
        | ("issues", "opened" | "assigned" | "closed" | "reopened")
        | ("pull_request", "opened" | "assigned" | "review_requested" | "closed" | "reopened")
        | ("pull_request_review", "submitted")
        | ("pull_request_review_comment", "created")
        | ("check_run" | "check_suite" | "workflow_run", "completed") => true,
        _ => false,
    };
    if stored {
        Some(Route::Store)
    } else if EVENTS.contains(&event) {
        Some(Route::Ignore)
    } else {
        None
    }
}

/// A payload that lacks what its event must carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {event} payload has no {field}")]
pub struct PayloadError {
    pub event: String,
    pub field: &'static str,
}

/// The object a stored event is about, per event.
fn object_field(event: &str) -> &'static str {
    match event {
        "issue_comment" | "pull_request_review_comment" => "comment",
        "issues" => "issue",
        "pull_request" => "pull_request",
        "pull_request_review" => "review",
        "check_suite" => "check_suite",
        "workflow_run" => "workflow_run",
        _ => "check_run",
    }
}

/// Which of the object's times places an event with `action`, first found
/// first. A creation (`created`, `opened`) is placed by `created_at`, which
/// never changes: the webhook (sent when `updated_at` equals it) and a
/// poll that finds the object after an edit (`updated_at` moved) then mean
/// the same event. Other actions are placed by the update they made.
fn meaning_time(action: &str) -> &'static [&'static str] {
    match action {
        "created" | "opened" => &["created_at", "updated_at"],
        _ => &["updated_at", "submitted_at", "completed_at"],
    }
}

/// What a delivery means: `event:object id:action:time`, and the
/// account an assignment or review request names. Two deliveries with the
/// same meaning are the same event, whatever their delivery ids.
pub fn meaning(event: &str, payload: &Value) -> Result<String, PayloadError> {
    let missing = |field| PayloadError {
        event: event.to_owned(),
        field,
    };
    let field = object_field(event);
    let object = payload.get(field).ok_or_else(|| missing(field))?;
    let id = object
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| missing("object id"))?;
    let action = payload
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("action"))?;
    let time = meaning_time(action)
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))
        .ok_or_else(|| missing("update time"))?;
    let target = ["assignee", "requested_reviewer", "requested_team"]
        .iter()
        .find_map(|k| {
            payload
                .get(*k)
                .and_then(|v| v.get("id"))
                .and_then(Value::as_u64)
        });
    Ok(match target {
        Some(t) => format!("{event}:{id}:{action}:{time}:{t}"),
        None => format!("{event}:{id}:{action}:{time}"),
    })
}

/// The bot's GitHub account, from the policy's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotAccount {
    pub login: String,
    pub id: Option<u64>,
}

impl BotAccount {
    pub fn from_policy(policy: &Policy) -> Option<Self> {
        policy.identity.github.as_ref().map(|gh| Self {
            login: gh.login.clone(),
            id: gh.id,
        })
    }

    fn is(&self, user: &User) -> bool {
        match self.id {
            Some(id) => user.id == id,
            None => user.login.eq_ignore_ascii_case(&self.login),
        }
    }

    /// How an address names the bot: its id when known.
    fn account(&self) -> String {
        self.id
            .map_or_else(|| self.login.clone(), |id| id.to_string())
    }

    fn mentioned_in(&self, text: &str) -> bool {
        let slug = self.login.strip_suffix("[bot]").unwrap_or(&self.login);
        mentions(text, &[&self.login, slug])
    }
}

/// Why a delivery makes no trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Assigned to, or a review requested from, someone else.
    NotTheBot,
    /// A CI result about no pull request and no branch.
    NoPlace,
    /// An event this source stores but does not map.
    NotMapped,
    /// A review with no body that only comments: what GitHub makes around
    /// each review comment posted on its own (and around a review's draft
    /// comments); its comments arrive as events of their own.
    CommentsOnly,
    /// A recall of a message the bot never received.
    NeverReceived,
    /// A message recalled before it was decided (its recall is stored).
    Recalled,
    /// The bot was added to a chat.
    BotAdded,
    /// The bot was removed from a chat.
    BotRemoved,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::NotTheBot => "not_the_bot",
            Skip::NoPlace => "no_place",
            Skip::NotMapped => "not_mapped",
            Skip::CommentsOnly => "comments_only",
            Skip::NeverReceived => "never_received",
            Skip::Recalled => "recalled",
            Skip::BotAdded => "bot_added",
            Skip::BotRemoved => "bot_removed",
        }
    }
}

/// A stored delivery's mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    Trigger(Box<TriggerInput>),
    Skip(Skip),
}

#[cfg(test)]
mod tests;
