//! Sending the outbox through the proxy (the I/O half; the state machine is
//! `outbox`). One entry at a time: `unknown` is committed before the
//! request goes out, the outcome after.

use std::path::PathBuf;
use std::time::Duration;

use http::Method;

use super::http::{Answer, HttpError};
use super::outbox::{self, SendOutcome};
use super::runner::{Live, PassError};
use crate::eval::Judge;
use crate::intake::wall_clock_ms;
use crate::store::OutboxItem;
use crate::trigger::Source;

/// The platforms' API hosts (the router's rule sets name these).
pub const GITHUB_API: &str = "api.github.com";
pub const FEISHU_API: &str = "open.feishu.cn";

/// One request through the proxy answers within this.
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
/// Comments listed per page, and pages looked through for a marker.
const PER_PAGE: usize = 100;
const MAX_PAGES: usize = 20;

/// Sends every due entry of the outbox.
pub(super) async fn send_due<J: Judge>(live: &mut Live<J>) -> Result<(), PassError> {
    let due = live.router.store.read().due_outbox(wall_clock_ms(), 20)?;
    for item in due {
        let now = wall_clock_ms();
        let Some((socket, what)) = route(live, &item) else {
            let outcome = SendOutcome::Refused {
                why: format!(
                    "no router identity for `{}` in [proxy] (a {} reply)",
                    item.thread_key,
                    platform_name(item.platform)
                ),
            };
            tracing::error!(reply = %item.reply, "{outcome:?}");
            let update = outbox::after_send(item.attempts, outcome, now);
            live.router
                .store
                .transaction(|tx| tx.update_outbox(&item.reply, &update, now))?;
            continue;
        };
        // A rate limit on this identity holds its other replies, untried.
        if live.holds.held(&socket, now) {
            continue;
        }
        let before = outbox::before_send(&item, now);
        live.router
            .store
            .transaction(|tx| tx.update_outbox(&item.reply, &before, now))?;
        let outcome = attempt(live, &item, &socket, &what, before.attempts).await;
        let outcome = outbox::keep_doubt(&item, outcome);
        match &outcome {
            SendOutcome::NotSent { why } => live.down("proxy", why),
            SendOutcome::Limited { why, until, .. } => {
                live.up("proxy");
                live.holds.hold(&socket, *until);
                let wait_ms = until.saturating_sub(wall_clock_ms());
                tracing::warn!(reply = %item.reply, %why, wait_ms, "a reply was rate-limited; it and this identity's other replies wait, then it is sent once");
            }
            SendOutcome::Sent { message_id } | SendOutcome::Found { message_id } => {
                live.up("proxy");
                tracing::info!(reply = %item.reply, purpose = item.purpose.as_str(), %message_id, "reply sent");
            }
            SendOutcome::Unknown { why } => {
                tracing::warn!(reply = %item.reply, %why, "a reply's outcome is unknown; it is looked for before it is sent again");
            }
            SendOutcome::Refused { why } => {
                live.up("proxy");
                tracing::error!(reply = %item.reply, %why, "a reply was refused; it is not sent");
            }
        }
        let now = wall_clock_ms();
        let update = outbox::after_send(before.attempts, outcome, now);
        live.router
            .store
            .transaction(|tx| tx.update_outbox(&item.reply, &update, now))?;
    }
    Ok(())
}

fn platform_name(p: Source) -> &'static str {
    match p {
        Source::Github => "GitHub",
        Source::Feishu => "Feishu",
    }
}

/// Where a reply goes.
enum Target {
    Github { repo: String, number: u64 },
    Feishu { message_id: String },
}

/// The identity socket for the entry, and its target.
fn route<J: Judge>(live: &Live<J>, item: &OutboxItem) -> Option<(PathBuf, Target)> {
    match item.platform {
        Source::Github => {
            let (repo, number) = outbox::github_target(&item.thread_key)?;
            let socket = live.config.proxy.github_sockets.get(repo)?.clone();
            Some((
                socket,
                Target::Github {
                    repo: repo.to_owned(),
                    number,
                },
            ))
        }
        Source::Feishu => {
            let socket = live.config.proxy.feishu_socket.clone()?;
            let id = &item.target_message;
            // A Feishu message id goes into the path: one segment of its characters.
            let ok = !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            ok.then(|| {
                (
                    socket,
                    Target::Feishu {
                        message_id: id.clone(),
                    },
                )
            })
        }
    }
}

async fn attempt<J: Judge>(
    live: &Live<J>,
    item: &OutboxItem,
    socket: &std::path::Path,
    target: &Target,
    attempts: u32,
) -> SendOutcome {
    match target {
        Target::Github { repo, number } => {
            let path = format!("/repos/{repo}/issues/{number}/comments");
            if outbox::look_first(item) {
                match look_for(live, item, socket, &path, attempts).await {
                    Ok(Some(message_id)) => return SendOutcome::Found { message_id },
                    Ok(None) => {}
                    // Not known either way: do not post; try later.
                    Err(outcome) => return outcome,
                }
            }
            let body = outbox::github_body(&item.reply, &item.text);
            let answer = live
                .proxy
                .request(
                    socket,
                    GITHUB_API,
                    Method::POST,
                    &path,
                    Some(body),
                    SEND_TIMEOUT,
                )
                .await;
            judge(Source::Github, answer, attempts)
        }
        Target::Feishu { message_id } => {
            let path = format!("/open-apis/im/v1/messages/{message_id}/reply");
            let body = outbox::feishu_body(&item.reply, &item.text);
            let answer = live
                .proxy
                .request(
                    socket,
                    FEISHU_API,
                    Method::POST,
                    &path,
                    Some(body),
                    SEND_TIMEOUT,
                )
                .await;
            judge(Source::Feishu, answer, attempts)
        }
    }
}

/// Looks through the comments for the reply's marker.
async fn look_for<J: Judge>(
    live: &Live<J>,
    item: &OutboxItem,
    socket: &std::path::Path,
    path: &str,
    attempts: u32,
) -> Result<Option<String>, SendOutcome> {
    for page in 1..=MAX_PAGES {
        let answer = live
            .proxy
            .request(
                socket,
                GITHUB_API,
                Method::GET,
                &format!("{path}?per_page={PER_PAGE}&page={page}"),
                None,
                SEND_TIMEOUT,
            )
            .await
            .map_err(|e| match e {
                // The proxy will not let this identity look: it never will.
                HttpError::Refused(why) => SendOutcome::Refused {
                    why: format!("looking for the reply: {why}; it may have been posted, so it is not posted again"),
                },
                // Still in doubt: look again later.
                e => SendOutcome::Unknown {
                    why: format!("looking for the reply: {e}"),
                },
            })?;
        if !answer.status.is_success() {
            return Err(outbox::classify_look(
                answer.status.as_u16(),
                &outbox::LimitHeaders::from_headers(&answer.headers),
                &answer.body,
                format!("looking for the reply: {}", answer.status),
                wall_clock_ms(),
                attempts,
            ));
        }
        if let Some(id) = outbox::find_marked(&answer.body, &item.reply) {
            return Ok(Some(id));
        }
        let count =
            serde_json::from_slice::<Vec<serde_json::Value>>(&answer.body).map_or(0, |v| v.len());
        if count < PER_PAGE {
            return Ok(None);
        }
    }
    Ok(None)
}

fn judge(platform: Source, answer: Result<Answer, HttpError>, attempts: u32) -> SendOutcome {
    match answer {
        Err(HttpError::NotSent(why)) => SendOutcome::NotSent { why },
        Err(HttpError::Refused(why)) => SendOutcome::Refused { why },
        Err(e) => SendOutcome::Unknown { why: e.to_string() },
        Ok(a) => {
            if a.status.is_success() {
                if let Some(message_id) = outbox::created_id(platform, &a.body) {
                    return SendOutcome::Sent { message_id };
                }
            }
            let why = format!(
                "{} answered {}: {}",
                platform_name(platform),
                a.status,
                String::from_utf8_lossy(&a.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
            outbox::classify(
                platform,
                a.status.as_u16(),
                &outbox::LimitHeaders::from_headers(&a.headers),
                &a.body,
                why,
                wall_clock_ms(),
                attempts,
            )
        }
    }
}
