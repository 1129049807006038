//! The GitHub poller: rounds of [`poll`](super::poll) requests through the
//! router's proxy identities (the I/O half).
//!
//! ```text
//! every interval, per repository in scope (its router-github identity):
//!   listings (If-None-Match) ─► items ─► synthesize ─► meaning
//!   ─► DeliveryLog::insert_polled (deliveries + the new PollState, one transaction)
//!   ─► wake the processor, which decides them like webhook deliveries
//! every answer ─► pace (rate-limit headers): hold, or go on
//! ```
//!
//! The poller holds no credential: the proxy injects the installation
//! token into each allowed GET. A round stores nothing until it has read
//! every listing, so a crash (kill -9 too) or a limit mid-round leaves the
//! cursors where they were and the next round asks again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::watch;

use super::github;
use super::poll::{self, Item, Listing, Pace, PollState, Polled, RateHeaders};
use super::wall_clock_ms;
use crate::live::http::{Answer, ProxyClient};
use crate::live::send::GITHUB_API;
use crate::store::{DeliveryLog, NewDelivery};

/// What the poller needs: the repositories in scope with their identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollConfig {
    /// Seconds between rounds (GitHub's `X-Poll-Interval` may lengthen it).
    pub interval_secs: u64,
    /// `owner/name` ─► the router's identity socket on it (rule set `router-github`).
    pub repos: BTreeMap<String, PathBuf>,
    /// The gatehouse CA (the only root the client trusts).
    pub ca_cert: PathBuf,
}

/// How far back a repository polled for the first time looks: the
/// router's clock may run ahead of GitHub's.
pub const FIRST_LOOK_BACK_SECS: u64 = 60;
/// One request answers within this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Failed rounds back off from this, doubling, up to the interval.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Why a round stopped before storing anything.
#[derive(Debug)]
enum RoundError {
    /// A rate limit: no request before this Unix second.
    Held(u64),
    /// The request failed or was refused; the next round tries again.
    Failed(String),
}

/// The poller's state across rounds.
struct Poller {
    client: ProxyClient,
    log: DeliveryLog,
    config: PollConfig,
    /// The interval in force (the configured one, or GitHub's longer).
    interval: u64,
    /// No request before this Unix second.
    hold_until: u64,
    wake: SyncSender<()>,
}

/// Starts the poller's thread; it stops when `stopped` turns true.
pub(super) fn spawn(
    log: DeliveryLog,
    config: PollConfig,
    wake: SyncSender<()>,
    mut stopped: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>, super::IntakeError> {
    let client = ProxyClient::new(&config.ca_cert)
        .map_err(|e| super::IntakeError::Start(std::io::Error::other(e.to_string())))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(super::IntakeError::Start)?;
    let mut poller = Poller {
        client,
        log,
        interval: config.interval_secs.max(1),
        config,
        hold_until: 0,
        wake,
    };
    std::thread::Builder::new()
        .name("intake-poller".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut backoff = FIRST_BACKOFF;
                loop {
                    let wait = match poller.round_all().await {
                        Ok(()) => {
                            backoff = FIRST_BACKOFF;
                            Duration::from_secs(poller.interval)
                        }
                        Err(()) => {
                            let wait = backoff;
                            backoff = (backoff * 2).min(Duration::from_secs(poller.interval));
                            wait
                        }
                    };
                    if rest(wait, poller.hold_until, &mut stopped).await {
                        return;
                    }
                }
            });
        })
        .map_err(super::IntakeError::Start)
}

/// Between two rounds of a periodic loop through the proxy: `wait`, or
/// longer while GitHub holds requests until `hold_until` (Unix seconds).
/// Whether `stopped` turned true meanwhile.
pub(super) async fn rest(
    wait: Duration,
    hold_until: u64,
    stopped: &mut watch::Receiver<bool>,
) -> bool {
    let held = Duration::from_millis(
        hold_until
            .saturating_mul(1000)
            .saturating_sub(wall_clock_ms()),
    );
    tokio::select! {
        _ = tokio::time::sleep(wait.max(held)) => {}
        _ = stopped.changed() => {}
    }
    *stopped.borrow()
}

fn source_key(repo: &str) -> String {
    format!("github:{repo}")
}

impl Poller {
    /// One round over every repository; `Err` when one failed.
    async fn round_all(&mut self) -> Result<(), ()> {
        let repos: Vec<(String, PathBuf)> = self
            .config
            .repos
            .iter()
            .map(|(r, s)| (r.clone(), s.clone()))
            .collect();
        let mut ok = true;
        for (repo, socket) in repos {
            if self.hold_until.saturating_mul(1000) > wall_clock_ms() {
                return Err(());
            }
            match self.round(&repo, &socket).await {
                Ok(0) => {}
                Ok(new) => {
                    tracing::info!(%repo, new, "polling found deliveries");
                    let _ = self.wake.try_send(());
                }
                Err(RoundError::Held(until)) => {
                    tracing::warn!(%repo, until, "GitHub's rate limit: polling waits");
                    self.hold_until = self.hold_until.max(until);
                    return Err(());
                }
                Err(RoundError::Failed(why)) => {
                    tracing::warn!(%repo, %why, "a polling round failed; it is tried again");
                    ok = false;
                }
            }
        }
        if ok {
            Ok(())
        } else {
            Err(())
        }
    }

    /// One round on `repo`: every listing read, then what it found stored
    /// with the new state in one transaction. Returns how many deliveries
    /// were new.
    async fn round(&mut self, repo: &str, socket: &Path) -> Result<usize, RoundError> {
        let key = source_key(repo);
        let before = match self.log.read().poll_state(&key) {
            Ok(Some(text)) => serde_json::from_str(&text)
                .map_err(|e| RoundError::Failed(format!("the stored polling state: {e}")))?,
            Ok(None) => PollState::starting_at(&poll::iso8601(
                (wall_clock_ms() / 1000).saturating_sub(FIRST_LOOK_BACK_SECS),
            )),
            Err(e) => return Err(RoundError::Failed(e.to_string())),
        };
        let mut after = before.clone();
        let mut listed: BTreeMap<Listing, Vec<Value>> = BTreeMap::new();
        for listing in Listing::ALL {
            let items = self
                .listing(repo, socket, listing, &before, &mut after)
                .await?;
            listed.insert(listing, items);
        }
        let take = |l| listed.get(&l).cloned().unwrap_or_default();
        let (issues, pulls) = (take(Listing::Issues), take(Listing::Pulls));
        let issue_comments = take(Listing::IssueComments);
        let review_comments = take(Listing::ReviewComments);

        let mut found: Vec<Polled> = Vec::new();
        let since = |l| before.since(l).to_owned();
        let issues_since = since(Listing::Issues);
        found.extend(
            issues
                .iter()
                .filter_map(|i| poll::synthesize(repo, Item::Issue, i, &issues_since)),
        );
        let pulls_since = since(Listing::Pulls);
        for pull in &pulls {
            found.extend(poll::synthesize(repo, Item::Pull, pull, &pulls_since));
            let Some(number) = pull.get("number").and_then(Value::as_u64) else {
                continue;
            };
            for review in self
                .pages(socket, |p| poll::reviews_path(repo, number, p))
                .await?
            {
                let kind = Item::Review { pull };
                found.extend(poll::synthesize(repo, kind, &review, &pulls_since));
            }
        }
        let mut parents: BTreeMap<(bool, u64), Value> = BTreeMap::new();
        for i in &issues {
            if let Some(n) = i.get("number").and_then(Value::as_u64) {
                parents.insert((false, n), i.clone());
            }
        }
        for p in &pulls {
            if let Some(n) = p.get("number").and_then(Value::as_u64) {
                parents.insert((true, n), p.clone());
            }
        }
        let comments_since = since(Listing::IssueComments);
        for c in &issue_comments {
            let Some(issue) = self.parent(repo, socket, &mut parents, false, c).await? else {
                continue;
            };
            let kind = Item::IssueComment { issue: &issue };
            found.extend(poll::synthesize(repo, kind, c, &comments_since));
        }
        let review_since = since(Listing::ReviewComments);
        for c in &review_comments {
            let Some(pull) = self.parent(repo, socket, &mut parents, true, c).await? else {
                continue;
            };
            let kind = Item::ReviewComment { pull: &pull };
            found.extend(poll::synthesize(repo, kind, c, &review_since));
        }
        self.store(repo, &key, &found, &after)
    }

    /// Stores the round's deliveries with the new state.
    fn store(
        &mut self,
        repo: &str,
        key: &str,
        found: &[Polled],
        after: &PollState,
    ) -> Result<usize, RoundError> {
        let now = wall_clock_ms();
        let mut rows = Vec::new();
        for p in found {
            match github::meaning(p.event, &p.payload) {
                Ok(meaning) => rows.push((p, meaning, p.payload.to_string().into_bytes())),
                Err(e) => tracing::warn!(%repo, event = p.event, %e, "a polled item is left out"),
            }
        }
        let ids: Vec<String> = rows
            .iter()
            .map(|(_, m, _)| Polled::delivery_id(m))
            .collect();
        let deliveries: Vec<NewDelivery<'_>> = rows
            .iter()
            .zip(&ids)
            .map(|((p, meaning, body), id)| NewDelivery {
                platform: "github",
                delivery_id: id,
                event: p.event,
                meaning,
                body,
                received_at: now,
            })
            .collect();
        let state = serde_json::to_string(after)
            .map_err(|e| RoundError::Failed(format!("the polling state: {e}")))?;
        self.log
            .insert_polled(&deliveries, key, &state, now)
            .map_err(|e| RoundError::Failed(format!("storing what polling found: {e}")))
    }

    /// Reads one listing from the cursor in `before`; its new cursor and
    /// first page's ETag go into `after`.
    async fn listing(
        &mut self,
        repo: &str,
        socket: &Path,
        listing: Listing,
        before: &PollState,
        after: &mut PollState,
    ) -> Result<Vec<Value>, RoundError> {
        let since = before.since(listing).to_owned();
        let mut items = Vec::new();
        for page in 1..=poll::MAX_PAGES {
            let url = listing.path(repo, &since, page);
            let etag = (page == 1)
                .then(|| before.etag_for(listing, &url))
                .flatten()
                .map(str::to_owned);
            let answer = self.get(socket, &url, etag.as_deref()).await?;
            if answer.status == StatusCode::NOT_MODIFIED {
                // Nothing changed since the round that stored this ETag.
                return Ok(items);
            }
            let page_items = json_array(&answer)?;
            if page == 1 {
                let cursor = after.cursors.entry(listing).or_default();
                cursor.etag = answer
                    .headers
                    .get(http::header::ETAG)
                    .and_then(|v| v.to_str().ok())
                    .map(|e| (url.clone(), e.to_owned()));
            }
            let passed = listing.newest_first() && poll::passed_cursor(&since, &page_items);
            items.extend(
                page_items
                    .into_iter()
                    .filter(|i| !listing.newest_first() || poll::updated_at(i) >= since.as_str()),
            );
            if passed || !has_next(&answer) {
                break;
            }
        }
        let cursor = after.cursors.entry(listing).or_default();
        cursor.since = poll::advance(&since, &items);
        Ok(items)
    }

    /// Every page of a listing without a cursor (a pull's reviews).
    async fn pages(
        &mut self,
        socket: &Path,
        path: impl Fn(u32) -> String,
    ) -> Result<Vec<Value>, RoundError> {
        let mut items = Vec::new();
        for page in 1..=poll::MAX_PAGES {
            let answer = self.get(socket, &path(page), None).await?;
            items.extend(json_array(&answer)?);
            if !has_next(&answer) {
                break;
            }
        }
        Ok(items)
    }

    /// The issue (or pull request, `pull`) a comment is on: from the
    /// round's listings, else asked for once.
    async fn parent(
        &mut self,
        repo: &str,
        socket: &Path,
        parents: &mut BTreeMap<(bool, u64), Value>,
        pull: bool,
        comment: &Value,
    ) -> Result<Option<Value>, RoundError> {
        let field = if pull {
            "pull_request_url"
        } else {
            "issue_url"
        };
        let Some(number) = poll::number_from_url(comment, field) else {
            return Ok(None);
        };
        if let Some(p) = parents.get(&(pull, number)) {
            return Ok(Some(p.clone()));
        }
        let path = if pull {
            poll::pull_path(repo, number)
        } else {
            poll::issue_path(repo, number)
        };
        let answer = self.get(socket, &path, None).await?;
        let value: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| RoundError::Failed(format!("GET {path}: {e}")))?;
        parents.insert((pull, number), value.clone());
        Ok(Some(value))
    }

    /// One GET through the identity; every answer is paced.
    async fn get(
        &mut self,
        socket: &Path,
        path: &str,
        etag: Option<&str>,
    ) -> Result<Answer, RoundError> {
        let headers: Vec<(&str, &str)> = etag.map(|e| ("if-none-match", e)).into_iter().collect();
        let headers: Vec<(&str, &str)> = headers
            .into_iter()
            .chain([("accept", "application/vnd.github+json")])
            .collect();
        let answer = self
            .client
            .request_with(
                socket,
                GITHUB_API,
                Method::GET,
                path,
                &headers,
                None,
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|e| RoundError::Failed(format!("GET {path}: {e}")))?;
        let rate = RateHeaders::from_headers(&answer.headers);
        // Rounded up: a hold of N seconds is never shorter than N.
        let now = wall_clock_ms().div_ceil(1000);
        let Pace {
            hold_until,
            interval,
        } = poll::pace(
            answer.status.as_u16(),
            &rate,
            now,
            self.config.interval_secs,
        );
        self.interval = interval;
        if let Some(until) = hold_until {
            self.hold_until = self.hold_until.max(until);
        }
        if poll::is_limit(answer.status.as_u16(), &rate) {
            return Err(RoundError::Held(self.hold_until.max(now + 1)));
        }
        let ok = answer.status.is_success() || answer.status == StatusCode::NOT_MODIFIED;
        if !ok {
            return Err(RoundError::Failed(format!(
                "GET {path}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            )));
        }
        if let Some(until) = hold_until {
            // The window is nearly spent: this answer counts, the round stops.
            return Err(RoundError::Held(until));
        }
        Ok(answer)
    }
}

fn json_array(answer: &Answer) -> Result<Vec<Value>, RoundError> {
    serde_json::from_slice::<Vec<Value>>(&answer.body)
        .map_err(|e| RoundError::Failed(format!("a listing that is not a JSON array: {e}")))
}

/// Whether the answer's `Link` names a next page.
fn has_next(answer: &Answer) -> bool {
    answer
        .headers
        .get_all(http::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("rel=\"next\""))
}
