//! `gatehouse audit`: relating the proxy's audit log, the router's reply
//! log and what the platforms say the bot account posted.
//!
//! ```text
//! proxy audit log ──(sources: streamed, chain checked)──┐
//! router reply log + outbox ──(sources: pages)──────────┼─► reconcile (pure) ─► findings (table | JSONL)
//! platforms via the router's identity ──(platform)──────┘
//! ```
//!
//! The matching is plain functions over data (`reconcile`, `attention`);
//! reading files, the database and the platforms happens at the edges
//! (`sources`, `platform`), one record at a time.

pub mod attention;
pub mod model;
pub mod ocsf;
pub mod platform;
pub mod reconcile;
pub mod sources;

use gatehouse_router::store::Store;

use model::{Finding, PlatformMessage};
use reconcile::{Reconciler, Summary, Window};
use sources::{ProxyLog, ReplyLog, Step};

/// How far ahead of the proxy's clock a reply may be logged (the two
/// processes read the same clock; this covers the write order).
const SKEW_MS: u64 = 5_000;

/// Reconciles `log` with the router's `store` (and the platform's
/// `platform` messages), handing each finding to `out` as it is made.
pub fn reconcile(
    log: ProxyLog,
    store: &Store,
    window: Window,
    horizon_ms: u64,
    platform: Vec<PlatformMessage>,
    mut out: impl FnMut(&Finding) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    let from = window.since.map_or(0, |s| s.saturating_sub(horizon_ms));
    let stop = window.until.map(|u| u.saturating_add(horizon_ms));
    let mut replies = ReplyLog::new(store, from).peekable();
    let mut rec = Reconciler::new(window, horizon_ms);
    rec.platform(platform);
    let mut feed = |rec: &mut Reconciler, upto: Option<u64>| -> anyhow::Result<()> {
        while let Some(next) = replies.next_if(|r| match (r, upto) {
            (Ok(r), Some(upto)) => r.at <= upto,
            _ => true,
        }) {
            rec.reply(sources::reply_of(&next?));
        }
        Ok(())
    };
    for step in log {
        match step? {
            Step::Line { now } => {
                if stop.is_some_and(|s| now > s) {
                    break;
                }
                feed(&mut rec, Some(now.saturating_add(SKEW_MS)))?;
                rec.advance(now);
            }
            Step::Message(mut m) => {
                if m.sender() == model::Sender::Worker {
                    m.ticket_known = sources::ticket_known(store, &m.identity)?;
                }
                rec.message(m);
            }
            Step::Broken { at, place, why } => rec.broken(at, &place, &why),
            Step::Record(_) => {}
        }
        for f in rec.drain() {
            out(&f)?;
        }
    }
    feed(&mut rec, stop)?;
    let (rest, summary) = rec.finish();
    for f in &rest {
        out(f)?;
    }
    Ok(summary)
}
