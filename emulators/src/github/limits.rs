//! GitHub's rate limits: the bookkeeping is pure (the caller passes `now`),
//! the two hooks on [`GithubState`] are the only I/O-side code.
//!
//! ```text
//! authenticated call ─► rate_limited() ── a refusal ─► 403 / 429 / GraphQL error, nothing done
//!                            └─ none ─► handler ─► finish ─► rate_headers() ─► x-ratelimit-* (counted)
//! ```
//!
//! Facts (GitHub docs, "Rate limits for the REST API" and "… for the
//! GraphQL API"; github/docs#22607 for the GraphQL answer):
//! - primary limits count per token and per resource: `core` for REST,
//!   `graphql` for `/graphql`, each in a window that starts with its first
//!   call; every answer carries `x-ratelimit-limit|remaining|used|reset|resource`;
//! - a conditional request answered 304 does not count, nor does
//!   `GET /rate_limit`;
//! - a spent REST budget answers 403 `API rate limit exceeded for user ID N.`
//!   (`installation ID N.` for an App's token) with `x-ratelimit-remaining: 0`;
//!   GraphQL answers 200 with an error of type `RATE_LIMITED`;
//! - secondary limits hit content creation (REST POST/PATCH/PUT/DELETE,
//!   GraphQL mutations): 403 or 429 with `retry-after`, before anything is made;
//!   "in general, no more than 80 content-generating requests per minute and
//!   no more than 500 content-generating requests per hour".

use std::collections::{HashMap, VecDeque};

use http::StatusCode;
use serde_json::{json, Value};

use super::{rest, GithubState, RecordedRequest};
use crate::record::lock;

/// What a primary limit allows (GitHub: 5000 an hour for a token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateBudgets {
    /// REST calls per window and token.
    pub core: u64,
    /// GraphQL calls per window and token (GitHub counts points; one a call here).
    pub graphql: u64,
    /// The window's length in seconds, from its first call.
    pub window_secs: u64,
    /// Content creations per token in any 60 s (GitHub: 80), a secondary limit.
    pub creations_per_minute: u64,
    /// Content creations per token in any hour (GitHub: 500).
    pub creations_per_hour: u64,
}

impl Default for RateBudgets {
    fn default() -> Self {
        Self {
            core: 5000,
            graphql: 5000,
            window_secs: 3600,
            creations_per_minute: 80,
            creations_per_hour: 500,
        }
    }
}

/// Unauthenticated calls share one small budget (GitHub: 60 an hour per IP).
const ANONYMOUS_BUDGET: u64 = 60;

const PRIMARY_DOCS: &str =
    "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits";
const SECONDARY_DOCS: &str =
    "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits";

/// The budget a call counts against (`x-ratelimit-resource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Resource {
    Core,
    Graphql,
}

impl Resource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Resource::Core => "core",
            Resource::Graphql => "graphql",
        }
    }
}

/// One call as the limits see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The token as sent (`None`: unauthenticated).
    pub token: Option<String>,
    pub resource: Resource,
    /// Creates content: the secondary limit applies.
    pub creation: bool,
    /// Counts against the budget (`GET /rate_limit` does not).
    pub counted: bool,
}

impl Call {
    /// Reads a call from its method, path and body (enterprise prefixes
    /// `/api/v3` and `/api/graphql` as the dispatcher reads them).
    pub(crate) fn of(method: &str, path: &str, body: &[u8], token: Option<&str>) -> Self {
        let path = path.strip_prefix("/api/v3").unwrap_or(path);
        let graphql = matches!(path, "/graphql" | "/api/graphql");
        let creation = if graphql {
            method == "POST" && is_mutation(body)
        } else {
            matches!(method, "POST" | "PATCH" | "PUT" | "DELETE")
        };
        Self {
            token: token.map(str::to_owned),
            resource: if graphql {
                Resource::Graphql
            } else {
                Resource::Core
            },
            creation,
            counted: !(method == "GET" && path == "/rate_limit"),
        }
    }
}

/// Whether a GraphQL request body runs a mutation (the operation
/// `operationName` names, or the only one). A document that does not parse
/// is no mutation: the executor answers its error.
pub(crate) fn is_mutation(body: &[u8]) -> bool {
    use graphql_parser::query::{Definition, OperationDefinition};
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let Some(query) = request.get("query").and_then(Value::as_str) else {
        return false;
    };
    let wanted = request.get("operationName").and_then(Value::as_str);
    let Ok(document) = graphql_parser::parse_query::<String>(query) else {
        return false;
    };
    let mut operations = document.definitions.iter().filter_map(|d| match d {
        Definition::Operation(op) => Some(op),
        Definition::Fragment(_) => None,
    });
    let chosen = operations.find(|op| {
        let name = match op {
            OperationDefinition::Mutation(m) => m.name.as_deref(),
            OperationDefinition::Query(q) => q.name.as_deref(),
            OperationDefinition::Subscription(s) => s.name.as_deref(),
            OperationDefinition::SelectionSet(_) => None,
        };
        wanted.is_none() || name == wanted
    });
    matches!(chosen, Some(OperationDefinition::Mutation(_)))
}

/// Creations refused until `until` (Unix seconds) with `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    until: u64,
    status: StatusCode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    used: u64,
    /// Unix seconds when the window ends.
    reset: u64,
}

/// The `x-ratelimit-*` values of one answer, and `retry-after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateHeaders {
    pub limit: u64,
    pub remaining: u64,
    pub used: u64,
    pub reset: u64,
    pub resource: Resource,
    pub retry_after: Option<u64>,
}

impl RateHeaders {
    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![
            ("x-ratelimit-limit", self.limit.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            ("x-ratelimit-used", self.used.to_string()),
            ("x-ratelimit-reset", self.reset.to_string()),
            ("x-ratelimit-resource", self.resource.as_str().to_owned()),
        ];
        if let Some(after) = self.retry_after {
            pairs.push(("retry-after", after.to_string()));
        }
        pairs
    }
}

/// A call refused by a limit: the answer to give instead.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub body: Value,
}

/// Every token's windows, the budgets and the creation hold.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    budgets: RateBudgets,
    windows: HashMap<(Option<String>, Resource), Window>,
    hold: Option<Hold>,
    /// Each token's admitted creations of the last hour (Unix seconds),
    /// oldest first.
    creations: HashMap<Option<String>, VecDeque<u64>>,
    /// Until when a token's creations are refused by the counted secondary
    /// limit (the `retry-after` of its refusals).
    creations_refused_until: HashMap<Option<String>, u64>,
}

impl Limits {
    /// New budgets; every window starts afresh.
    pub(crate) fn set_budgets(&mut self, budgets: RateBudgets) {
        self.budgets = budgets;
        self.windows.clear();
        self.creations.clear();
        self.creations_refused_until.clear();
    }

    /// Creations are refused with `status` (403 or 429) for `secs` from `now`
    /// (`secs` 0: no longer).
    pub(crate) fn hold_creations(&mut self, secs: u64, status: StatusCode, now: u64) {
        self.hold = (secs > 0).then_some(Hold {
            until: now.saturating_add(secs),
            status,
        });
    }

    fn budget(&self, call: &Call) -> u64 {
        match (&call.token, call.resource) {
            (None, _) => ANONYMOUS_BUDGET,
            (Some(_), Resource::Core) => self.budgets.core,
            (Some(_), Resource::Graphql) => self.budgets.graphql,
        }
    }

    /// The call's window at `now`: the current one, or a fresh one.
    fn window(&self, call: &Call, now: u64) -> Window {
        self.windows
            .get(&(call.token.clone(), call.resource))
            .copied()
            .filter(|w| now < w.reset)
            .unwrap_or(Window {
                used: 0,
                reset: now.saturating_add(self.budgets.window_secs),
            })
    }

    fn held(&self, now: u64) -> Option<Hold> {
        self.hold.filter(|h| now < h.until)
    }

    /// Whether the call is refused, and how (`subject`: "user ID 1" or
    /// "installation ID 7", as GitHub names who spent the budget). Counts
    /// nothing: [`Limits::charge`] does, when the answer goes.
    /// An admitted creation is counted here, against the secondary limits.
    pub(crate) fn admit(&mut self, call: &Call, subject: &str, now: u64) -> Option<Refusal> {
        let spent = call.counted && self.window(call, now).used >= self.budget(call);
        if spent {
            let message = format!("API rate limit exceeded for {subject}.");
            return Some(match call.resource {
                Resource::Core => Refusal {
                    status: StatusCode::FORBIDDEN,
                    body: json!({"message": message, "documentation_url": PRIMARY_DOCS}),
                },
                // GraphQL answers its primary limit inside a 200 (github/docs#22607).
                Resource::Graphql => Refusal {
                    status: StatusCode::OK,
                    body: json!({"errors": [{"type": "RATE_LIMITED", "message": message}]}),
                },
            });
        }
        if !call.creation {
            return None;
        }
        let secondary = |status| Refusal {
            status,
            body: json!({
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "documentation_url": SECONDARY_DOCS,
            }),
        };
        if let Some(hold) = self.held(now) {
            return Some(secondary(hold.status));
        }
        let made = self.creations.entry(call.token.clone()).or_default();
        while made.front().is_some_and(|&t| t + 3600 <= now) {
            made.pop_front();
        }
        let in_minute = made.iter().rev().take_while(|&&t| t + 60 > now).count() as u64;
        // Refused until the creation that fills the window leaves it.
        let leaves = |budget: u64, window: u64| {
            let index = made.len().saturating_sub(budget as usize);
            made.get(index).map_or(now + window, |&t| t + window)
        };
        let until = if in_minute >= self.budgets.creations_per_minute {
            Some(leaves(self.budgets.creations_per_minute, 60))
        } else if made.len() as u64 >= self.budgets.creations_per_hour {
            Some(leaves(self.budgets.creations_per_hour, 3600))
        } else {
            None
        };
        match until {
            Some(until) => {
                self.creations_refused_until
                    .insert(call.token.clone(), until);
                Some(secondary(StatusCode::FORBIDDEN))
            }
            None => {
                made.push_back(now);
                None
            }
        }
    }

    /// Counts an answered call (unless it was a 304 or is not counted) and
    /// gives the headers its answer carries. `retry-after` goes on a
    /// creation while creations are held.
    pub(crate) fn charge(&mut self, call: &Call, not_modified: bool, now: u64) -> RateHeaders {
        let budget = self.budget(call);
        let mut window = self.window(call, now);
        if call.counted && !not_modified {
            window.used = window.used.saturating_add(1).min(budget);
            self.windows
                .insert((call.token.clone(), call.resource), window);
        }
        let counted_until = self
            .creations_refused_until
            .get(&call.token)
            .copied()
            .filter(|&until| now < until);
        let retry_after = self
            .held(now)
            .map(|h| h.until)
            .or(counted_until)
            .filter(|_| call.creation)
            .map(|until| until.saturating_sub(now).max(1));
        RateHeaders {
            limit: budget,
            remaining: budget.saturating_sub(window.used),
            used: window.used,
            reset: window.reset,
            resource: call.resource,
            retry_after,
        }
    }

    /// `GET /rate_limit`'s body for the caller's token.
    pub(crate) fn overview(&self, token: Option<&str>, now: u64) -> Value {
        let entry = |resource: Resource| {
            let call = Call {
                token: token.map(str::to_owned),
                resource,
                creation: false,
                counted: false,
            };
            let w = self.window(&call, now);
            let limit = self.budget(&call);
            json!({"limit": limit, "remaining": limit.saturating_sub(w.used), "used": w.used,
                   "reset": w.reset, "resource": resource.as_str()})
        };
        let core = entry(Resource::Core);
        json!({
            // `rate-limit-overview` requires `core` and `search`; search
            // is not limited here, so it shows GitHub's budget untouched.
            "resources": {"core": core, "graphql": entry(Resource::Graphql),
                          "search": {"limit": 30, "remaining": 30, "used": 0,
                                     "reset": now + 60, "resource": "search"}},
            "rate": core,
        })
    }
}

// === impl GithubState: the hooks ===

impl GithubState {
    /// Before any handler: a spent budget or held creations answer here, so
    /// nothing is created; `GET /rate_limit` is answered from the counts.
    pub(super) fn rate_limited(
        &self,
        record: &RecordedRequest,
        token: Option<&str>,
        login: &str,
        minted: bool,
    ) -> Option<rest::Reply> {
        let now = crate::time::unix_now();
        let subject = self.limit_subject(token);
        let call = Call::of(
            &record.method,
            &record.path,
            &record.body,
            subject.as_deref(),
        );
        let mut limits = lock(&self.limits);
        if !call.counted {
            return Some(reply(
                StatusCode::OK,
                limits.overview(subject.as_deref(), now),
            ));
        }
        let subject = match self.apps.installation_id().filter(|_| minted) {
            Some(id) => format!("installation ID {id}"),
            None => format!("user ID {}", super::user_id(login)),
        };
        let refusal = limits.admit(&call, &subject, now)?;
        Some(reply(refusal.status, refusal.body))
    }

    /// The rate-limit headers of an answer about to go, the call counted.
    pub(super) fn rate_headers(
        &self,
        record: &RecordedRequest,
        token: Option<&str>,
        not_modified: bool,
    ) -> RateHeaders {
        let subject = self.limit_subject(token);
        let call = Call::of(
            &record.method,
            &record.path,
            &record.body,
            subject.as_deref(),
        );
        lock(&self.limits).charge(&call, not_modified, crate::time::unix_now())
    }

    /// Whom a call with `token` counts against (see [`limit_subject`]).
    fn limit_subject(&self, token: Option<&str>) -> Option<String> {
        let installation = self
            .apps
            .installation_id()
            .filter(|_| token.is_some_and(|t| self.apps.is_minted(t)));
        limit_subject(token, installation)
    }
}

/// Whom a call's limits count against: an installation token against its
/// installation, so every token minted for it shares one budget and one
/// secondary limit (GitHub: "rate limits for GitHub App installations"),
/// any other token against itself; `None`: unauthenticated.
pub(crate) fn limit_subject(token: Option<&str>, installation: Option<u64>) -> Option<String> {
    match installation {
        Some(id) => Some(format!("installation {id}")),
        None => token.map(str::to_owned),
    }
}

fn reply(status: StatusCode, body: Value) -> rest::Reply {
    rest::Reply {
        status,
        body,
        created_id: None,
        location: None,
        pages: None,
        media: None,
    }
}

#[cfg(test)]
mod tests;
