//! Polling GitHub for what webhooks would have delivered, as pure functions.
//!
//! ```text
//! per repository, per round (PollState: one cursor and ETag per listing):
//!   issues           GET /repos/{r}/issues?state=all&sort=updated&direction=asc&since=C
//!   pulls            GET /repos/{r}/pulls?state=all&sort=updated&direction=desc   (no `since`)
//!   issue comments   GET /repos/{r}/issues/comments?sort=updated&direction=asc&since=C
//!   review comments  GET /repos/{r}/pulls/comments?sort=updated&direction=asc&since=C
//!   reviews          GET /repos/{r}/pulls/{n}/reviews         (each pull updated since C)
//! items ─► webhook-shaped deliveries (event, meaning, body) ─► the deliveries table
//! ```
//!
//! A polled item becomes the delivery a webhook would have carried
//! ([`synthesize`]), so it is deduplicated by the same meaning
//! ([`super::github::meaning`]) and mapped by the same function
//! ([`super::github::map`]): an item delivered both ways is one trigger.
//! Only creations are found this way (comments, review comments, reviews,
//! issues and pull requests opened): the list endpoints do not say who
//! assigned, requested a review or closed, nor when, so those stay with
//! webhooks.
//!
//! Each listing keeps its own cursor ([`Listing`]): the largest
//! `updated_at` it has seen. `since` is inclusive, so the items at the
//! cursor are seen again next round and dropped as duplicates; the cursor
//! never passes an item the listing has not returned. Timestamps are
//! GitHub's ISO 8601 UTC (`2026-12-01T21:47:46Z`), which sort as text.
//!
//! [`pace`] reads the rate-limit headers of every answer into when the
//! next request may go.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The four listings of a round (reviews follow the pulls listing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Listing {
    Issues,
    Pulls,
    IssueComments,
    ReviewComments,
}

impl Listing {
    pub const ALL: [Listing; 4] = [
        Listing::Issues,
        Listing::Pulls,
        Listing::IssueComments,
        Listing::ReviewComments,
    ];

    /// The path and query of page `page` of this listing on `repo`.
    /// Shapes from GitHub's REST description (github/rest-api-description):
    /// the issue and review comment listings and the issue listing take
    /// `since` (items updated at or after it), `sort` and `direction`; the
    /// pull listing takes `sort` and `direction` but no `since`.
    pub fn path(self, repo: &str, since: &str, page: u32) -> String {
        let since = since.replace(':', "%3A");
        match self {
            Listing::Issues => format!(
                "/repos/{repo}/issues?state=all&sort=updated&direction=asc&since={since}&per_page={PER_PAGE}&page={page}"
            ),
            Listing::Pulls => format!(
                "/repos/{repo}/pulls?state=all&sort=updated&direction=desc&per_page={PER_PAGE}&page={page}"
            ),
            Listing::IssueComments => format!(
                "/repos/{repo}/issues/comments?sort=updated&direction=asc&since={since}&per_page={PER_PAGE}&page={page}"
            ),
            Listing::ReviewComments => format!(
                "/repos/{repo}/pulls/comments?sort=updated&direction=asc&since={since}&per_page={PER_PAGE}&page={page}"
            ),
        }
    }

    /// Whether the listing comes newest first (the pulls: no `since`, so a
    /// round reads until it passes the cursor).
    pub fn newest_first(self) -> bool {
        self == Listing::Pulls
    }
}

/// Items per page (GitHub's maximum).
pub const PER_PAGE: u32 = 100;
/// Pages one listing reads in one round; the rest waits for the next round
/// (the cursor has moved past what was read).
pub const MAX_PAGES: u32 = 10;

/// The reviews of pull `number`, page `page`.
pub fn reviews_path(repo: &str, number: u64, page: u32) -> String {
    format!("/repos/{repo}/pulls/{number}/reviews?per_page={PER_PAGE}&page={page}")
}

/// One issue or pull request, for a comment whose parent the round's
/// listings did not return.
pub fn issue_path(repo: &str, number: u64) -> String {
    format!("/repos/{repo}/issues/{number}")
}

pub fn pull_path(repo: &str, number: u64) -> String {
    format!("/repos/{repo}/pulls/{number}")
}

/// Where one listing stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The largest `updated_at` seen: the next round's `since`.
    pub since: String,
    /// The first page's URL and the `ETag` it was answered with, for
    /// `If-None-Match` when the next round asks the same URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<(String, String)>,
}

/// A repository's polling state, stored as JSON (`poll_state`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollState {
    pub cursors: BTreeMap<Listing, Cursor>,
}

impl PollState {
    /// A repository polled for the first time starts at `start` (ISO time):
    /// what happened before is not brought in.
    pub fn starting_at(start: &str) -> Self {
        Self {
            cursors: Listing::ALL
                .iter()
                .map(|l| {
                    (
                        *l,
                        Cursor {
                            since: start.to_owned(),
                            etag: None,
                        },
                    )
                })
                .collect(),
        }
    }

    pub fn since(&self, listing: Listing) -> &str {
        self.cursors.get(&listing).map_or("", |c| c.since.as_str())
    }

    /// The `ETag` to send with `url`, if the last round stored one for it.
    pub fn etag_for(&self, listing: Listing, url: &str) -> Option<&str> {
        self.cursors
            .get(&listing)
            .and_then(|c| c.etag.as_ref())
            .filter(|(u, _)| u == url)
            .map(|(_, e)| e.as_str())
    }
}

/// `updated_at` of a listed item ("" when absent).
pub fn updated_at(item: &Value) -> &str {
    item.get("updated_at").and_then(Value::as_str).unwrap_or("")
}

fn created_at(item: &Value) -> &str {
    item.get("created_at").and_then(Value::as_str).unwrap_or("")
}

/// The cursor after a listing returned `items`: the largest `updated_at`
/// among them and the old cursor (it never goes back).
pub fn advance(since: &str, items: &[Value]) -> String {
    items
        .iter()
        .map(updated_at)
        .chain(std::iter::once(since))
        .max()
        .unwrap_or(since)
        .to_owned()
}

/// Whether a newest-first page (the pulls) leaves nothing newer than the
/// cursor on later pages: its last item is older than `since`.
pub fn passed_cursor(since: &str, page: &[Value]) -> bool {
    page.last().is_some_and(|item| updated_at(item) < since)
}

/// The number in an `issue_url` / `pull_request_url`
/// (`https://api.github.com/repos/o/r/issues/12` ─► 12).
pub fn number_from_url(item: &Value, field: &str) -> Option<u64> {
    item.get(field)?.as_str()?.rsplit('/').next()?.parse().ok()
}

/// A polled item as the webhook delivery it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub event: &'static str,
    /// The webhook payload this item would have been delivered in.
    pub payload: Value,
}

impl Polled {
    /// The delivery id under which it is stored: `poll:` + its meaning (a
    /// webhook's GUID never starts so).
    pub fn delivery_id(meaning: &str) -> String {
        format!("poll:{meaning}")
    }
}

/// What a listing's item is, for [`synthesize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    /// An issue comment, on `issue` (the issue or pull request listed as an issue).
    IssueComment { issue: &'a Value },
    /// A review comment on `pull`.
    ReviewComment { pull: &'a Value },
    /// An issue from the issue listing (pull requests there are skipped:
    /// the pull listing carries what a `pull_request` delivery needs).
    Issue,
    /// A pull request from the pull listing.
    Pull,
    /// A review of `pull`.
    Review { pull: &'a Value },
}

/// The delivery `item` stands for, when it is a creation at or after
/// `since` (an older item was listed because it changed since: an edit,
/// which webhooks do not act on either); `None` otherwise. A pending review
/// (not submitted) is nothing yet.
pub fn synthesize(repo: &str, kind: Item<'_>, item: &Value, since: &str) -> Option<Polled> {
    let repository = json!({ "full_name": repo });
    let user = item.get("user").cloned().unwrap_or(Value::Null);
    let envelope =
        |action: &str| json!({"action": action, "repository": repository, "sender": user});
    let (event, payload) = match kind {
        Item::IssueComment { issue } => {
            if created_at(item) < since {
                return None;
            }
            let mut v = envelope("created");
            v["issue"] = issue.clone();
            v["comment"] = item.clone();
            ("issue_comment", v)
        }
        Item::ReviewComment { pull } => {
            if created_at(item) < since {
                return None;
            }
            let mut v = envelope("created");
            v["pull_request"] = pull.clone();
            v["comment"] = item.clone();
            ("pull_request_review_comment", v)
        }
        Item::Issue => {
            if created_at(item) < since || item.get("pull_request").is_some() {
                return None;
            }
            let mut v = envelope("opened");
            v["issue"] = item.clone();
            ("issues", v)
        }
        Item::Pull => {
            if created_at(item) < since {
                return None;
            }
            let mut v = envelope("opened");
            v["number"] = item.get("number").cloned().unwrap_or(Value::Null);
            v["pull_request"] = item.clone();
            ("pull_request", v)
        }
        Item::Review { pull } => {
            let submitted = item.get("submitted_at").and_then(Value::as_str)?;
            let state = item.get("state").and_then(Value::as_str).unwrap_or("");
            if submitted < since || state.eq_ignore_ascii_case("pending") {
                return None;
            }
            let mut v = envelope("submitted");
            v["pull_request"] = pull.clone();
            v["review"] = item.clone();
            ("pull_request_review", v)
        }
    };
    Some(Polled { event, payload })
}

// === Pace: the rate-limit headers ===

/// The rate-limit headers of one answer (absent ones `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// `X-RateLimit-Remaining`.
    pub remaining: Option<u64>,
    /// `X-RateLimit-Reset`: Unix seconds when the window resets.
    pub reset: Option<u64>,
    /// `Retry-After`: seconds (GitHub's secondary limits).
    pub retry_after: Option<u64>,
    /// `X-Poll-Interval`: the least seconds between polls GitHub asks for.
    pub poll_interval: Option<u64>,
}

impl RateHeaders {
    pub fn from_headers(h: &http::HeaderMap) -> Self {
        let num = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Self {
            remaining: num("x-ratelimit-remaining"),
            reset: num("x-ratelimit-reset"),
            retry_after: num("retry-after"),
            poll_interval: num("x-poll-interval"),
        }
    }
}

/// Requests left in the window below which the poller waits for the reset,
/// so that the router's replies (the same installation's budget) still go.
pub const RESERVE: u64 = 50;
/// How long a limit without a reset time holds (GitHub: wait at least a
/// minute after a secondary limit that gives no `Retry-After`).
pub const DEFAULT_HOLD_SECS: u64 = 60;

/// When the poller may send its next request, after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// No request before this Unix second (`None`: go on now).
    pub hold_until: Option<u64>,
    /// Seconds between rounds from now on: the configured interval, or
    /// more when GitHub asks (`X-Poll-Interval`).
    pub interval: u64,
}

/// Reads one answer's status and rate-limit headers (pure: `now` in Unix
/// seconds). `Retry-After` holds for its seconds; a limit answer (403 or
/// 429) or a window spent to [`RESERVE`] holds until `X-RateLimit-Reset`
/// (or [`DEFAULT_HOLD_SECS`] without one); `X-Poll-Interval` lengthens the
/// interval, never shortens it.
pub fn pace(status: u16, h: &RateHeaders, now: u64, interval: u64) -> Pace {
    let interval = h.poll_interval.map_or(interval, |p| p.max(interval));
    let limited = is_limit(status, h);
    let spent = h.remaining.is_some_and(|r| r <= RESERVE);
    let hold_until = if let Some(after) = h.retry_after {
        Some(now.saturating_add(after.max(1)))
    } else if limited || spent {
        Some(match h.reset {
            Some(reset) if reset > now => reset,
            Some(_) if !limited => now,
            _ => now.saturating_add(DEFAULT_HOLD_SECS),
        })
    } else {
        None
    };
    Pace {
        hold_until: hold_until.filter(|t| *t > now),
        interval,
    }
}

/// Whether an answer was a rate limit (the round stops and waits).
pub fn is_limit(status: u16, h: &RateHeaders) -> bool {
    status == 429 || (status == 403 && (h.retry_after.is_some() || h.remaining == Some(0)))
}

/// ISO 8601 UTC of Unix seconds, as GitHub writes times.
pub fn iso8601(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

#[cfg(test)]
mod tests;
