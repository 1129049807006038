//! The outbox over the reply log (pure): how each logged reply is sent,
//! and how an attempt's outcome moves its entry.
//!
//! ```text
//! pending ──before_send──► unknown ──Sent/Found──► sent
//!    ▲                        │ ├──NotSent (nothing left the router; proxy down, 5xx)──► pending (backoff)
//!    │                        │ ├──Unknown (timeout, cut after sending)──► unknown (backoff; look first)
//!    └────────────────────────┘ └──Refused (4xx: the proxy's rules, the platform)──► failed
//! ```
//!
//! The entry is `unknown` while a request may be out: a crash then leaves
//! it `unknown`, and a GitHub reply in that state is first looked for by
//! its marker among the issue's comments, and posted only if absent. Feishu
//! replies carry `uuid` = the reply id, which Feishu deduplicates, so they
//! are simply posted again.

use serde_json::{json, Value};

use crate::id::ReplyId;
use crate::store::{OutboxItem, OutboxState, OutboxUpdate};
use crate::trigger::Source;

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Posted; the platform's id of the new message.
    Sent { message_id: String },
    /// Found already posted (by its marker).
    Found { message_id: String },
    /// Certainly not posted, and worth trying again (the proxy
    /// unreachable, a 408 or 429).
    NotSent { why: String },
    /// It may have been posted (a timeout or a cut after the request left, a 5xx).
    Unknown { why: String },
    /// Refused for good (a 4xx: the proxy's rules, the platform).
    Refused { why: String },
}

/// The first wait after a failed attempt, and the longest.
const BACKOFF_BASE_MS: u64 = 1_000;
const BACKOFF_MAX_MS: u64 = 60_000;

/// The wait before attempt `attempts + 1`: doubling, capped.
pub fn backoff_ms(attempts: u32) -> u64 {
    let shift = attempts.saturating_sub(1).min(20);
    (BACKOFF_BASE_MS << shift).min(BACKOFF_MAX_MS)
}

/// Should the attempt look for the reply before posting it?
pub fn look_first(item: &OutboxItem) -> bool {
    item.state == OutboxState::Unknown && item.platform == Source::Github
}

/// Written (and committed) before a request goes out.
pub fn before_send(item: &OutboxItem, now: u64) -> OutboxUpdate {
    let attempts = item.attempts.saturating_add(1);
    OutboxUpdate {
        state: OutboxState::Unknown,
        attempts,
        platform_message_id: None,
        error: None,
        // If the process dies mid-send, the next run retries after a wait.
        next_at: now + backoff_ms(attempts),
    }
}

/// The entry after an attempt (`attempts` counts it already).
pub fn after_send(attempts: u32, outcome: SendOutcome, now: u64) -> OutboxUpdate {
    let retry = |state, why| OutboxUpdate {
        state,
        attempts,
        platform_message_id: None,
        error: Some(why),
        next_at: now + backoff_ms(attempts),
    };
    match outcome {
        SendOutcome::Sent { message_id } | SendOutcome::Found { message_id } => OutboxUpdate {
            state: OutboxState::Sent,
            attempts,
            platform_message_id: Some(message_id),
            error: None,
            next_at: now,
        },
        SendOutcome::NotSent { why } => retry(OutboxState::Pending, why),
        SendOutcome::Unknown { why } => retry(OutboxState::Unknown, why),
        SendOutcome::Refused { why } => OutboxUpdate {
            state: OutboxState::Failed,
            attempts,
            platform_message_id: None,
            error: Some(why),
            next_at: now,
        },
    }
}

/// Where a reply goes on GitHub: `gh:owner/repo#N` ─► (`owner/repo`, N).
pub fn github_target(thread_key: &str) -> Option<(&str, u64)> {
    let rest = thread_key.strip_prefix("gh:")?;
    let (repo, n) = rest.rsplit_once('#')?;
    let n: u64 = n.parse().ok()?;
    let (owner, name) = repo.split_once('/')?;
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (part_ok(owner) && part_ok(name) && !name.contains('/')).then_some((repo, n))
}

/// The hidden marker a GitHub reply carries, so it can be found again.
pub fn marker(reply: &ReplyId) -> String {
    format!("<!-- gatehouse:{reply} -->")
}

/// The comment body: the text, then the marker on its own line.
pub fn github_body(reply: &ReplyId, text: &str) -> Vec<u8> {
    json!({ "body": format!("{text}\n\n{}", marker(reply)) })
        .to_string()
        .into_bytes()
}

/// The id of the comment in a `GET …/comments` page that carries the
/// reply's marker, if one does.
pub fn find_marked(comments: &[u8], reply: &ReplyId) -> Option<String> {
    let marker = marker(reply);
    let list: Vec<Value> = serde_json::from_slice(comments).ok()?;
    list.iter()
        .find(|c| c["body"].as_str().is_some_and(|b| b.contains(&marker)))
        .and_then(|c| id_string(&c["id"]))
}

/// Feishu's reply body: plain text, `uuid` = the reply id (Feishu drops a
/// second send with the same uuid).
pub fn feishu_body(reply: &ReplyId, text: &str) -> Vec<u8> {
    json!({
        "msg_type": "text",
        "content": json!({ "text": text }).to_string(),
        "uuid": reply.to_string(),
    })
    .to_string()
    .into_bytes()
}

/// The new message's id in a platform's answer to a post.
pub fn created_id(platform: Source, body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    match platform {
        Source::Github => id_string(&v["id"]),
        Source::Feishu => {
            if v["code"].as_i64().unwrap_or(0) != 0 {
                return None;
            }
            v.pointer("/data/message_id").and_then(id_string)
        }
    }
}

fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// What an HTTP status means for an attempt.
pub fn classify(status: u16, why: String) -> SendOutcome {
    match status {
        200..=299 => SendOutcome::Unknown {
            why: format!("{why}: no message id in the answer"),
        },
        408 | 429 => SendOutcome::NotSent { why },
        // The platform may have acted before failing: look before posting again.
        500..=599 => SendOutcome::Unknown { why },
        _ => SendOutcome::Refused { why },
    }
}

#[cfg(test)]
mod tests;
