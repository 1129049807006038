//! The reconciliation (pure): every message call in the proxy's log is
//! explained by a reply-log entry (the router's identity) or by a ticket
//! (a worker's rule that marks the call as a message); every reply marked
//! sent has its call; every message the platform says the bot posted was
//! created by a call. Whatever is not is a finding with its reason.
//!
//! Streamed: the driver feeds both logs in time order ([`Reconciler::reply`]
//! as the proxy's clock reaches an entry's time, [`Reconciler::message`] per
//! call) and advances the clock ([`Reconciler::advance`]). A reply waits for
//! its call at most `horizon` after it was logged (the outbox sends within
//! seconds; retries back off to a minute), so memory holds the replies of
//! one horizon, whatever the logs' length.
//!
//! ```text
//! reply log ──(time order)──► waiting[body hash] ◄── proxy message call (router)
//!                                 │ horizon passed: sent? ─► ReplyNotForwarded
//! proxy message call (worker) ─► ticket known? ─► WorkerDirect | WorkerWithoutTicket
//! platform listing ─► keys ◄── created ids of posted calls; left over ─► PlatformUnexplained
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use super::model::{Finding, Kind, PlatformMessage, ProxyMessage, Reply, ReplyState, Sender};

/// The time window reported on (ms, inclusive); what lies outside is still
/// read to match what lies inside.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub since: Option<u64>,
    pub until: Option<u64>,
}

impl Window {
    pub fn contains(&self, at: u64) -> bool {
        self.since.is_none_or(|s| at >= s) && self.until.is_none_or(|u| at <= u)
    }
}

/// Counts of what was reconciled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Message calls in the window.
    pub message_calls: u64,
    /// Reply-log entries in the window.
    pub replies: u64,
    /// Platform messages in the window.
    pub platform_messages: u64,
    pub by_kind: BTreeMap<Kind, u64>,
    pub unexplained: u64,
}

/// A reply waiting for (or matched to) its calls.
#[derive(Debug)]
struct Entry {
    reply: Reply,
    /// Calls matched to it, and the ids of the messages they posted.
    calls: u32,
    posted: Vec<String>,
}

/// The reconciliation's state between inputs.
#[derive(Debug)]
pub struct Reconciler {
    window: Window,
    horizon: u64,
    /// Replies of the last horizon, by the SHA-256 of the body the router
    /// sends (it carries the reply id, so it is unique per reply).
    entries: HashMap<String, Entry>,
    /// Their hashes in the order they were logged, for expiry.
    order: VecDeque<(u64, String)>,
    platform: HashMap<String, PlatformMessage>,
    findings: Vec<Finding>,
    summary: Summary,
}

impl Reconciler {
    pub fn new(window: Window, horizon_ms: u64) -> Self {
        Reconciler {
            window,
            horizon: horizon_ms,
            entries: HashMap::new(),
            order: VecDeque::new(),
            platform: HashMap::new(),
            findings: Vec::new(),
            summary: Summary::default(),
        }
    }

    /// What the platforms list as the bot's messages (in the window).
    pub fn platform(&mut self, messages: impl IntoIterator<Item = PlatformMessage>) {
        for m in messages {
            if self.window.contains(m.at) {
                self.summary.platform_messages += 1;
                self.platform.insert(m.key.clone(), m);
            }
        }
    }

    /// The next reply-log entry, in log order.
    pub fn reply(&mut self, reply: Reply) {
        if self.window.contains(reply.at) {
            self.summary.replies += 1;
        }
        self.order.push_back((reply.at, reply.body_sha256.clone()));
        self.entries.insert(
            reply.body_sha256.clone(),
            Entry {
                reply,
                calls: 0,
                posted: Vec::new(),
            },
        );
    }

    /// A break in the audit log's chain (or its set of files).
    pub fn broken(&mut self, at: u64, place: &str, why: &str) {
        let mut f = Finding::new(
            Kind::AuditLogBroken,
            at,
            Sender::Unknown,
            format!("{place}: {why}"),
        );
        f.record = Some(place.to_owned());
        // Always reported: a broken log puts every window in doubt.
        self.push(f, true);
    }

    /// The next message call of the proxy's log.
    pub fn message(&mut self, m: ProxyMessage) {
        let in_window = self.window.contains(m.at);
        if in_window {
            self.summary.message_calls += 1;
        }
        if m.posted() {
            if let Some(key) = m.platform_key() {
                if let Some(p) = self.platform.remove(&key) {
                    let mut f = Finding::new(
                        Kind::PlatformExplained,
                        p.at,
                        m.sender(),
                        format!("created by the proxy call {} ({})", m.place, m.request_id),
                    );
                    f.target = p.place.clone();
                    f.message_id = m.message_id.clone();
                    self.push(f, true);
                }
            }
        }
        let finding = match m.sender() {
            Sender::Worker => judge_worker(&m),
            _ => match self.entries.get_mut(&m.body_sha256) {
                Some(entry) => {
                    let f = judge_reply_call(&m, entry);
                    entry.calls += 1;
                    // Only a delivery of the reply as logged counts as its send.
                    if let (Kind::ReplyDelivered, Some(id)) = (f.kind, &m.message_id) {
                        entry.posted.push(id.clone());
                    }
                    f
                }
                None => Finding::of_message(
                    Kind::MessageWithoutReply,
                    &m,
                    format!(
                        "no reply-log entry (of the last horizon) has this body (SHA-256 {}): the router's identity {} made a message call the router never logged{}",
                        m.body_sha256,
                        m.identity,
                        not_posted(&m)
                    ),
                ),
            },
        };
        self.push(finding, in_window);
    }

    /// The proxy's log has reached `now` (ms): replies logged more than a
    /// horizon earlier get no more calls.
    pub fn advance(&mut self, now: u64) {
        while let Some((at, _)) = self.order.front() {
            if at.saturating_add(self.horizon) >= now {
                break;
            }
            if let Some((_, hash)) = self.order.pop_front() {
                self.close(&hash);
            }
        }
    }

    fn close(&mut self, hash: &str) {
        let Some(entry) = self.entries.remove(hash) else {
            return;
        };
        let in_window = self.window.contains(entry.reply.at);
        if let Some(f) = judge_closed(&entry) {
            self.push(f, in_window);
        }
    }

    /// Findings so far (to write out as they come).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Finding> {
        self.findings.drain(..)
    }

    /// Closes every reply still waiting and reports the platform messages
    /// no call created.
    pub fn finish(mut self) -> (Vec<Finding>, Summary) {
        while let Some((_, hash)) = self.order.pop_front() {
            self.close(&hash);
        }
        let mut left: Vec<PlatformMessage> = self.platform.drain().map(|(_, m)| m).collect();
        left.sort_by(|a, b| (a.at, &a.key).cmp(&(b.at, &b.key)));
        for p in left {
            let mut f = Finding::new(
                Kind::PlatformUnexplained,
                p.at,
                Sender::Unknown,
                format!(
                    "the bot account posted {} and no proxy record created it: its credential was used outside gatehouse",
                    p.key
                ),
            );
            f.target = p.place;
            self.push(f, true);
        }
        (self.findings, self.summary)
    }

    fn push(&mut self, f: Finding, report: bool) {
        if !report {
            return;
        }
        *self.summary.by_kind.entry(f.kind).or_default() += 1;
        if !f.explained {
            self.summary.unexplained += 1;
        }
        self.findings.push(f);
    }
}

fn not_posted(m: &ProxyMessage) -> String {
    match m.status {
        _ if m.posted() => String::new(),
        Some(s) => format!(" (nothing was posted: the answer was {s})"),
        None => " (no completion: its outcome is not on record)".into(),
    }
}

/// A worker's message call: explained by its ticket.
pub fn judge_worker(m: &ProxyMessage) -> Finding {
    if m.ticket_known {
        Finding::of_message(
            Kind::WorkerDirect,
            m,
            format!(
                "ticket {}'s worker, allowed by {} which marks it as a message{}",
                m.identity,
                m.rule,
                not_posted(m)
            ),
        )
    } else {
        Finding::of_message(
            Kind::WorkerWithoutTicket,
            m,
            format!(
                "identity {} looks like a ticket's, but the router's state has no such ticket{}",
                m.identity,
                not_posted(m)
            ),
        )
    }
}

/// A router message call whose body is a logged reply's: the same target,
/// and the message the outbox recorded.
fn judge_reply_call(m: &ProxyMessage, entry: &Entry) -> Finding {
    let r = &entry.reply;
    if (m.kind.as_str(), m.target.as_str()) != (r.kind.as_str(), r.target.as_str()) {
        return Finding::of_match(
            Kind::ReplyMismatch,
            m,
            r,
            format!(
                "the body is reply {}'s, but the call was {} {} where the reply log says {} {}",
                r.reply, m.kind, m.target, r.kind, r.target
            ),
        );
    }
    if !m.posted() {
        return Finding::of_match(
            Kind::ReplyAttempt,
            m,
            r,
            format!("an attempt to send reply {}{}", r.reply, not_posted(m)),
        );
    }
    let Some(id) = &m.message_id else {
        return Finding::of_match(
            Kind::ReplyMismatch,
            m,
            r,
            format!(
                "reply {} was posted ({}) but the platform's answer named no message",
                r.reply,
                m.status.unwrap_or_default()
            ),
        );
    };
    match (&r.message_id, r.state) {
        (Some(logged), _) if logged != id => Finding::of_match(
            Kind::ReplyMismatch,
            m,
            r,
            format!(
                "posted message {id}, but the outbox records reply {} as message {logged}: a copy the router does not know of",
                r.reply
            ),
        ),
        (_, ReplyState::Sent) => Finding::of_match(
            Kind::ReplyDelivered,
            m,
            r,
            format!("reply {} ({}), posted as message {id}", r.reply, r.purpose),
        ),
        (_, state) => Finding::of_match(
            Kind::ReplyDelivered,
            m,
            r,
            format!(
                "reply {} ({}), posted as message {id}; the outbox has it {} (the router did not learn the outcome)",
                r.reply,
                r.purpose,
                state_name(state)
            ),
        ),
    }
}

fn state_name(s: ReplyState) -> &'static str {
    match s {
        ReplyState::Unqueued => "never queued",
        ReplyState::Pending => "pending",
        ReplyState::Unknown => "unknown",
        ReplyState::Sent => "sent",
        ReplyState::Failed => "failed",
    }
}

/// A reply no more calls can match: a sent one needs a posted call; an
/// unsent one is listed as undelivered.
fn judge_closed(entry: &Entry) -> Option<Finding> {
    let r = &entry.reply;
    if !entry.posted.is_empty() {
        return None;
    }
    let tried = match entry.calls {
        0 => "no proxy record of its send".to_owned(),
        n => format!("{n} proxy record(s) of attempts, none posted"),
    };
    Some(match r.state {
        ReplyState::Sent => Finding::of_reply(
            Kind::ReplyNotForwarded,
            r,
            format!(
                "the outbox marks reply {} sent{}, but there is {tried}",
                r.reply,
                r.message_id
                    .as_deref()
                    .map(|id| format!(" as message {id}"))
                    .unwrap_or_default()
            ),
        ),
        state => Finding::of_reply(
            Kind::ReplyUndelivered,
            r,
            format!(
                "reply {} is {} and {tried}: it reached nobody",
                r.reply,
                state_name(state)
            ),
        ),
    })
}

#[cfg(test)]
mod tests;
