//! The webhook recovery loop (the I/O half of [`recovery`](super::recovery)):
//! every interval, through the router's App identity (rule set
//! `router-github-app`; the proxy injects a freshly signed App JWT, the
//! router holds no key):
//!
//! ```text
//! GET /app/hook/deliveries?per_page=100 (newest first, cursor pages)
//!   until an item at or below the stored cursor ─► plan
//! POST /app/hook/deliveries/{id}/attempts for each failed, unstored one
//! store the new cursor (after the asks: a crash asks again, harmlessly)
//! every answer ─► pace (rate-limit headers): hold, or go on
//! ```

use std::path::PathBuf;
use std::time::Duration;

use http::Method;
use serde_json::Value;
use tokio::sync::watch;

use super::poll::{self, Pace, RateHeaders};
use super::recovery::{self, Item, RecoveryState};
use super::wall_clock_ms;
use crate::live::http::{Answer, ProxyClient};
use crate::live::send::GITHUB_API;
use crate::store::DeliveryLog;

/// What the recovery loop needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// Seconds between rounds.
    pub interval_secs: u64,
    /// The router's App identity socket (rule set `router-github-app`).
    pub socket: PathBuf,
    /// The gatehouse CA (the only root the client trusts).
    pub ca_cert: PathBuf,
}

/// Where the state is stored (the polling state's table).
const SOURCE: &str = "github-app:hook-deliveries";
/// At most this many pages a round (100 items each).
const MAX_PAGES: usize = 10;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Failed rounds back off from this, doubling, up to the interval.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

struct Recoverer {
    client: ProxyClient,
    log: DeliveryLog,
    config: RecoveryConfig,
    /// No request before this Unix second.
    hold_until: u64,
}

/// Starts the loop's thread; it stops when `stopped` turns true.
pub(super) fn spawn(
    log: DeliveryLog,
    config: RecoveryConfig,
    mut stopped: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>, super::IntakeError> {
    let client = ProxyClient::new(&config.ca_cert)
        .map_err(|e| super::IntakeError::Start(std::io::Error::other(e.to_string())))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(super::IntakeError::Start)?;
    let interval = Duration::from_secs(config.interval_secs.max(1));
    let mut r = Recoverer {
        client,
        log,
        config,
        hold_until: 0,
    };
    std::thread::Builder::new()
        .name("intake-recovery".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut backoff = FIRST_BACKOFF;
                loop {
                    let wait = match r.round().await {
                        Ok(asked) => {
                            if asked > 0 {
                                tracing::info!(asked, "asked GitHub to redeliver failed webhooks");
                            }
                            backoff = FIRST_BACKOFF;
                            interval
                        }
                        Err(why) => {
                            tracing::warn!(%why, "a webhook recovery round failed; it is tried again");
                            let wait = backoff;
                            backoff = (backoff * 2).min(interval);
                            wait
                        }
                    };
                    if super::poller::rest(wait, r.hold_until, &mut stopped).await {
                        return;
                    }
                }
            });
        })
        .map_err(super::IntakeError::Start)
}

impl Recoverer {
    /// One round: the list read to the cursor, the failed deliveries asked
    /// for, the new state stored. Returns how many were asked for.
    async fn round(&mut self) -> Result<usize, String> {
        let before: RecoveryState = match self.log.read().poll_state(SOURCE) {
            Ok(Some(text)) => serde_json::from_str(&text)
                .map_err(|e| format!("the stored recovery state: {e}"))?,
            Ok(None) => RecoveryState::default(),
            Err(e) => return Err(e.to_string()),
        };
        let mut items = Vec::new();
        let mut path = "/app/hook/deliveries?per_page=100".to_owned();
        for _ in 0..MAX_PAGES {
            let answer = self.call(Method::GET, &path).await?;
            let page: Vec<Value> = serde_json::from_slice(&answer.body)
                .map_err(|e| format!("the deliveries list is not a JSON array: {e}"))?;
            let page: Vec<Item> = page.iter().filter_map(Item::from_json).collect();
            let reached = recovery::reached(&page, &before);
            items.extend(page);
            let next = answer
                .headers
                .get_all(http::header::LINK)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(recovery::next_page);
            match next {
                Some(next) if !reached => path = next,
                _ => break,
            }
        }
        let reader = self.log.read();
        let plan = recovery::plan(&items, &before, |guid| {
            // Unknown counts as not stored: asking again is harmless.
            reader.has_delivery("github", guid).unwrap_or(false)
        });
        for guid in &plan.given_up {
            tracing::warn!(%guid, asks = recovery::MAX_ASKS, "a webhook delivery keeps failing; not asked for again");
        }
        for id in &plan.redeliver {
            self.call(Method::POST, &format!("/app/hook/deliveries/{id}/attempts"))
                .await?;
        }
        if plan.after != before {
            let state = serde_json::to_string(&plan.after)
                .map_err(|e| format!("the recovery state: {e}"))?;
            self.log
                .insert_polled(&[], SOURCE, &state, wall_clock_ms())
                .map_err(|e| format!("storing the recovery state: {e}"))?;
        }
        Ok(plan.redeliver.len())
    }

    /// One call through the App identity; every answer is paced.
    async fn call(&mut self, method: Method, path: &str) -> Result<Answer, String> {
        let now = wall_clock_ms().div_ceil(1000);
        if self.hold_until > now {
            return Err(format!(
                "GitHub's rate limit holds until {}",
                self.hold_until
            ));
        }
        let body = (method == Method::POST).then(|| b"{}".to_vec());
        let headers = [
            ("accept", "application/vnd.github+json"),
            ("content-type", "application/json"),
        ];
        let answer = self
            .client
            .request_with(
                &self.config.socket,
                GITHUB_API,
                method.clone(),
                path,
                &headers,
                body,
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let rate = RateHeaders::from_headers(&answer.headers);
        let Pace { hold_until, .. } = poll::pace(
            answer.status.as_u16(),
            &rate,
            now,
            self.config.interval_secs,
        );
        if let Some(until) = hold_until {
            self.hold_until = self.hold_until.max(until);
        }
        if !answer.status.is_success() {
            return Err(format!(
                "{method} {path}: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        Ok(answer)
    }
}
