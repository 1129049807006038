//! The outbox over the reply log (pure): how each logged reply is sent,
//! and how an attempt's outcome moves its entry.
//!
//! ```text
//! pending ──before_send──► unknown ──Sent/Found──► sent
//!    ▲                        │ ├──NotSent (nothing left the router; proxy down, 5xx)──► pending (backoff)
//!    │                        │ ├──Limited (a rate limit: nothing made)──► pending (until the limit lifts)
//!    │                        │ ├──Unknown (timeout, cut after sending)──► unknown (backoff; look first)
//!    └────────────────────────┘ └──Refused (4xx: the proxy's rules, the platform)──► failed
//! ```
//!
//! Feishu's answers are judged by their `code` first: a rate code is a
//! limit, any other non-zero code on a 2xx or 4xx a refusal recorded with
//! its meaning ([`FEISHU_REFUSALS`]: 230002, the bot is not in the chat;
//! 230025, the reply is too long; …), never retried.
//!
//! A rate limit (GitHub: 429, or 403 with `Retry-After` or
//! `X-RateLimit-Remaining: 0`; Feishu: 429 or the codes 99991400 and
//! 230020) is answered before the platform acts, so the reply stays pending
//! until `Retry-After`, else the window's reset, else a backoff doubling from
//! a minute to two hours; meanwhile the same identity's other replies wait
//! untried ([`Holds`]).
//!
//! The entry is `unknown` while a request may be out: a crash then leaves
//! it `unknown`, and a GitHub reply in that state is first looked for by
//! its marker among the issue's comments, and posted only if absent. Feishu
//! replies carry `uuid` = the reply id, which Feishu deduplicates, so they
//! are simply posted again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::id::ReplyId;
use crate::intake::poll::{self, RateHeaders};
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
    /// Refused by a rate limit before anything was made: tried again at
    /// `until` (Unix ms), the identity's other replies held till then.
    /// `in_doubt`: an earlier attempt may have posted it (look first).
    Limited {
        why: String,
        until: u64,
        in_doubt: bool,
    },
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

/// The first wait after a rate limit that names no time (GitHub: wait at
/// least a minute after a secondary limit without `Retry-After`), and the
/// longest.
const LIMIT_BACKOFF_BASE_MS: u64 = poll::DEFAULT_HOLD_SECS * 1_000;
const LIMIT_BACKOFF_MAX_MS: u64 = 2 * 3_600 * 1_000;

/// Feishu's rate-limit codes: 99991400 the app's request rate (the
/// gateway's 429), 11232 the tenant's message-creation rate, 230020 a
/// chat's message rate (on HTTP 400), per Feishu's error code list.
pub const FEISHU_RATE_CODES: [i64; 3] = [99_991_400, 11_232, 230_020];

/// Feishu codes that refuse a reply for good, and what they mean for it
/// (HTTP 400 each, per the error table of Feishu's "Reply to a message").
/// Any other non-zero code on a 2xx or 4xx is a refusal too.
pub const FEISHU_REFUSALS: [(i64, &str); 7] = [
    (
        230_001,
        "an invalid parameter (the message replied to may be gone)",
    ),
    (230_002, "the bot is not in the chat"),
    (230_006, "the app's bot ability is not activated"),
    (230_011, "the message replied to was recalled"),
    (230_025, "the reply is over Feishu's size limit"),
    (230_027, "the app lacks a permission"),
    (230_028, "the reply did not pass Feishu's content audit"),
];

/// The `code` of a Feishu answer, if its body has one.
pub fn feishu_code(body: &[u8]) -> Option<i64> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["code"].as_i64())
}

/// Why Feishu refused a reply, by its code.
pub fn feishu_refusal(code: i64) -> String {
    match FEISHU_REFUSALS.iter().find(|(c, _)| *c == code) {
        Some((_, meaning)) => format!("Feishu refused it: {meaning} (code {code})"),
        None => format!("Feishu refused it (code {code})"),
    }
}

/// Feishu's `x-ogw-ratelimit-reset`: seconds until its window resets.
const FEISHU_RESET: &str = "x-ogw-ratelimit-reset";

/// What a rate-limit answer says about waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitHeaders {
    /// GitHub's headers (the poller's parser).
    pub rate: RateHeaders,
    /// Feishu's `x-ogw-ratelimit-reset` (seconds from now).
    pub feishu_reset: Option<u64>,
}

impl LimitHeaders {
    pub fn from_headers(h: &http::HeaderMap) -> Self {
        Self {
            rate: RateHeaders::from_headers(h),
            feishu_reset: h
                .get(FEISHU_RESET)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok()),
        }
    }
}

/// Whether an answer is a rate limit of `platform` (nothing was made).
pub fn is_rate_limit(platform: Source, status: u16, h: &LimitHeaders, body: &[u8]) -> bool {
    match platform {
        Source::Github => poll::is_limit(status, &h.rate),
        Source::Feishu => {
            status == 429 || feishu_code(body).is_some_and(|c| FEISHU_RATE_CODES.contains(&c))
        }
    }
}

/// When a rate-limited reply may go again (Unix ms), after its
/// `attempts`-th attempt: `Retry-After`, else the reset the headers name,
/// else a backoff doubling from a minute, capped at two hours.
pub fn limited_until(h: &LimitHeaders, now: u64, attempts: u32) -> u64 {
    let secs = |s: u64| s.saturating_mul(1_000);
    if let Some(after) = h.rate.retry_after.or(h.feishu_reset) {
        return now.saturating_add(secs(after.max(1)));
    }
    match h.rate.reset.map(secs) {
        Some(reset) if reset > now => reset.min(now.saturating_add(LIMIT_BACKOFF_MAX_MS)),
        _ => {
            let shift = attempts.saturating_sub(1).min(20);
            now.saturating_add((LIMIT_BACKOFF_BASE_MS << shift).min(LIMIT_BACKOFF_MAX_MS))
        }
    }
}

/// The identities (proxy sockets) held by a rate limit, until when (Unix
/// ms): their replies wait untried, so a spent budget is not spent again.
#[derive(Debug, Default)]
pub struct Holds(HashMap<PathBuf, u64>);

impl Holds {
    pub fn held(&self, identity: &Path, now: u64) -> bool {
        self.0.get(identity).is_some_and(|until| *until > now)
    }

    /// Holds `identity` until `until`, if that is later than its hold.
    pub fn hold(&mut self, identity: &Path, until: u64) {
        let entry = self.0.entry(identity.to_path_buf()).or_insert(until);
        *entry = (*entry).max(until);
    }
}

/// A limited attempt at an entry in doubt leaves it in doubt: the rate
/// limit says this attempt made nothing, not that an earlier one did not.
pub fn keep_doubt(item: &OutboxItem, outcome: SendOutcome) -> SendOutcome {
    match outcome {
        SendOutcome::Limited { why, until, .. } => SendOutcome::Limited {
            why,
            until,
            in_doubt: look_first(item),
        },
        other => other,
    }
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
        SendOutcome::Limited {
            why,
            until,
            in_doubt,
        } => OutboxUpdate {
            // Limited means not posted now; an earlier attempt in doubt stays so.
            state: if in_doubt {
                OutboxState::Unknown
            } else {
                OutboxState::Pending
            },
            attempts,
            platform_message_id: None,
            error: Some(format!("rate-limited: {why}")),
            next_at: until.max(now),
        },
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

/// What an answer means for an attempt (`now` Unix ms; `attempts`
/// counts this one): a rate limit first, then by status.
pub fn classify(
    platform: Source,
    status: u16,
    h: &LimitHeaders,
    body: &[u8],
    why: String,
    now: u64,
    attempts: u32,
) -> SendOutcome {
    if is_rate_limit(platform, status, h, body) {
        return SendOutcome::Limited {
            why,
            until: limited_until(h, now, attempts),
            in_doubt: false,
        };
    }
    // Feishu's code says what it did, whatever the status short of a 5xx
    // (where it may have acted before failing).
    if platform == Source::Feishu && status < 500 {
        if let Some(code) = feishu_code(body).filter(|c| *c != 0) {
            return SendOutcome::Refused {
                why: format!("{}; {why}", feishu_refusal(code)),
            };
        }
    }
    match status {
        200..=299 => SendOutcome::Unknown {
            why: format!("{why}: no message id in the answer"),
        },
        408 => SendOutcome::NotSent { why },
        // The platform may have acted before failing: look before posting again.
        500..=599 => SendOutcome::Unknown { why },
        _ => SendOutcome::Refused { why },
    }
}

/// What a failed look for a GitHub reply's marker (its answer's `status`,
/// not a success) means for the entry, which stays in doubt: judged as a
/// post's answer is ([`classify`]), except that a rate limit waits in
/// doubt, a 408 looks again later (as a 5xx does), and any other status
/// (the issue gone, the listing forbidden), which trying again will not
/// change, fails the reply unposted, since it may already be there. Left
/// in doubt, it would be tried forever and hold its thread's later
/// replies ([`crate::store`]'s outbox sends a thread's replies in order).
pub fn classify_look(
    status: u16,
    h: &LimitHeaders,
    body: &[u8],
    why: String,
    now: u64,
    attempts: u32,
) -> SendOutcome {
    match classify(Source::Github, status, h, body, why, now, attempts) {
        SendOutcome::Limited { why, until, .. } => SendOutcome::Limited {
            why,
            until,
            in_doubt: true,
        },
        SendOutcome::NotSent { why } => SendOutcome::Unknown { why },
        SendOutcome::Refused { why } => SendOutcome::Refused {
            why: format!("{why}; it may have been posted, so it is not posted again"),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
