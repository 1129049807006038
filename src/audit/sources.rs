//! Reading what the parts left behind, streamed: the proxy's audit log
//! line by line (its chain checked as it goes; each message request joined
//! with its completion), and the router's reply log page by page. The
//! demo's timeline reads the same way.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use gatehouse_proxy::audit::{Chain, Outcome, Record};
use gatehouse_router::live::outbox;
use gatehouse_router::store::{LoggedReply, OutboxState, Store};
use gatehouse_router::trigger::Source;
use sha2::{Digest, Sha256};

use super::model::{ProxyMessage, Reply, ReplyState};

pub use gatehouse_proxy::audit::rfc3339_ms;

/// The time of a record (ms; 0 when it has none that parses).
pub fn record_time(record: &Record) -> u64 {
    let time = match record {
        Record::Request(r) => &r.time,
        Record::Completion(c) => &c.time,
        Record::Recovery(r) => &r.time,
        Record::Suppressed(s) => &s.time,
        Record::Header(h) => &h.time,
    };
    rfc3339_ms(time).unwrap_or(0)
}

/// One step through the proxy's log.
#[derive(Debug)]
pub enum Step {
    /// A line was read: the log's clock is at `now`.
    Line { now: u64 },
    /// A message call is complete (or the log ended without its completion).
    Message(ProxyMessage),
    /// The chain breaks here.
    Broken { at: u64, place: String, why: String },
    /// The line's record, after its `Line` (only [`ProxyLog::with_records`]).
    Record(Record),
}

/// The proxy's audit log (one file, or every file of a rotated set in
/// order), read line by line with its chain checked across files.
pub struct ProxyLog {
    name: String,
    reader: Box<dyn BufRead>,
    /// The set's files still to read.
    next: std::collections::VecDeque<std::path::PathBuf>,
    chain: Chain,
    line: usize,
    buf: Vec<u8>,
    /// Message requests waiting for their completion.
    open: HashMap<String, ProxyMessage>,
    /// Hand every record on too.
    records: bool,
    /// The last time read (for a break's finding).
    now: u64,
    done: bool,
    queue: std::collections::VecDeque<Step>,
}

impl ProxyLog {
    /// The log at `path`: a file, the active file of a rotated set, or a
    /// directory holding a set.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let set = gatehouse_proxy::audit::LogSet::find(path)?;
        let mut files: std::collections::VecDeque<_> = set.files().iter().cloned().collect();
        let first = files
            .pop_front()
            .with_context(|| format!("no audit log at {}", path.display()))?;
        let mut log = Self::from_reader("", Box::new(std::io::empty()));
        log.open_file(&first)?;
        log.next = files;
        Ok(log)
    }

    /// Every record is handed on as a [`Step::Record`] too.
    pub fn with_records(mut self) -> Self {
        self.records = true;
        self
    }

    fn open_file(&mut self, path: &Path) -> anyhow::Result<()> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening the audit log {}", path.display()))?;
        self.reader = Box::new(std::io::BufReader::with_capacity(1 << 16, file));
        self.name = path.display().to_string();
        self.line = 0;
        Ok(())
    }

    pub fn from_reader(name: &str, reader: Box<dyn BufRead>) -> Self {
        ProxyLog {
            name: name.to_owned(),
            reader,
            next: std::collections::VecDeque::new(),
            chain: Chain::new(),
            line: 0,
            buf: Vec::with_capacity(1024),
            open: HashMap::new(),
            records: false,
            now: 0,
            done: false,
            queue: std::collections::VecDeque::new(),
        }
    }

    fn place(&self) -> String {
        format!("{}:{}", self.name, self.line)
    }

    fn read_line(&mut self) -> anyhow::Result<()> {
        self.buf.clear();
        if self.reader.read_until(b'\n', &mut self.buf)? == 0 {
            if let Some(next) = self.next.pop_front() {
                self.open_file(&next)?;
                self.chain.next_file();
                return Ok(());
            }
            self.done = true;
            // What never completed is reported as such.
            let mut open: Vec<ProxyMessage> = self.open.drain().map(|(_, m)| m).collect();
            open.sort_by(|a, b| (a.at, &a.request_id).cmp(&(b.at, &b.request_id)));
            self.queue.extend(open.into_iter().map(Step::Message));
            return Ok(());
        }
        self.line += 1;
        let whole = self.buf.last() == Some(&b'\n');
        if whole {
            self.buf.pop();
        }
        let pushed = if whole {
            self.chain.push(&self.buf).map_err(|b| b.why)
        } else {
            Err("the last line is incomplete (no newline): a write was cut off".into())
        };
        let record = match pushed {
            Ok(line) => line.record,
            Err(why) => {
                self.queue.push_back(Step::Broken {
                    at: self.now,
                    place: self.place(),
                    why,
                });
                match self.chain.resume(&self.buf) {
                    Some(line) => line.record,
                    None => return Ok(()),
                }
            }
        };
        self.now = self.now.max(record_time(&record));
        // The clock first: the driver brings the reply log up to it before
        // a completed call is matched.
        let now = self.now;
        self.queue.push_back(Step::Line { now });
        self.join(&record);
        if self.records {
            self.queue.push_back(Step::Record(record));
        }
        Ok(())
    }

    /// Joins a message request with its completion.
    fn join(&mut self, record: &Record) {
        match record {
            Record::Request(r) => {
                let (Some(m), Outcome::Allow { rule_set, rule }) = (&r.message, &r.outcome) else {
                    return;
                };
                self.open.insert(
                    r.request_id.clone(),
                    ProxyMessage {
                        place: self.place(),
                        at: rfc3339_ms(&r.time).unwrap_or(0),
                        request_id: r.request_id.clone(),
                        identity: r.identity.clone(),
                        rule: format!("{rule_set}/{rule}"),
                        kind: m.kind.clone(),
                        target: m.target.clone(),
                        body_sha256: m.body_sha256.clone(),
                        status: None,
                        message_id: None,
                        ticket_known: false,
                    },
                );
            }
            Record::Completion(c) => {
                if let Some(mut m) = self.open.remove(&c.request_id) {
                    m.status = Some(c.status);
                    m.message_id = c.message_id.clone();
                    self.queue.push_back(Step::Message(m));
                }
            }
            _ => {}
        }
    }
}

impl Iterator for ProxyLog {
    type Item = anyhow::Result<Step>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(step) = self.queue.pop_front() {
                return Some(Ok(step));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.read_line() {
                self.done = true;
                return Some(Err(e.context(format!("reading {}", self.name))));
            }
        }
    }
}

/// The SHA-256 of the body the router sends for a reply, and the message
/// kind and target the proxy records for it (see `router::live::outbox`).
pub fn reply_call(r: &LoggedReply) -> (String, String, String) {
    let (body, kind, target) = match r.platform {
        Source::Github => (
            outbox::github_body(&r.reply, &r.text),
            "github_issue_comment",
            outbox::github_target(&r.thread_key)
                .map(|(repo, n)| format!("{repo}#{n}"))
                .unwrap_or_else(|| r.thread_key.clone()),
        ),
        Source::Feishu => (
            outbox::feishu_body(&r.reply, &r.text),
            "feishu_reply",
            r.target_message.clone(),
        ),
    };
    (hex::encode(Sha256::digest(&body)), kind.to_owned(), target)
}

/// A reply-log entry as the reconciliation sees it.
pub fn reply_of(r: &LoggedReply) -> Reply {
    let (body_sha256, kind, target) = reply_call(r);
    Reply {
        reply: r.reply.to_string(),
        ticket: r.ticket.to_string(),
        purpose: r.purpose.as_str().to_owned(),
        at: r.at,
        state: match r.outbox {
            None => ReplyState::Unqueued,
            Some(OutboxState::Pending) => ReplyState::Pending,
            Some(OutboxState::Unknown) => ReplyState::Unknown,
            Some(OutboxState::Sent) => ReplyState::Sent,
            Some(OutboxState::Failed) => ReplyState::Failed,
        },
        message_id: r.platform_message_id.clone(),
        kind,
        target,
        body_sha256,
    }
}

/// The router's reply log from `from_ms` on, a page at a time.
pub struct ReplyLog<'s> {
    store: &'s Store,
    from_ms: u64,
    after: u64,
    page: std::vec::IntoIter<LoggedReply>,
    done: bool,
}

const PAGE: usize = 512;

impl<'s> ReplyLog<'s> {
    pub fn new(store: &'s Store, from_ms: u64) -> Self {
        ReplyLog {
            store,
            from_ms,
            after: 0,
            page: Vec::new().into_iter(),
            done: false,
        }
    }
}

impl Iterator for ReplyLog<'_> {
    type Item = anyhow::Result<LoggedReply>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(r) = self.page.next() {
            return Some(Ok(r));
        }
        if self.done {
            return None;
        }
        match self
            .store
            .read()
            .logged_replies(self.after, self.from_ms, PAGE)
        {
            Ok(page) => {
                self.done = page.len() < PAGE;
                self.after = page.last().map_or(self.after, |r| r.seq);
                self.page = page.into_iter();
                self.page.next().map(Ok)
            }
            Err(e) => {
                self.done = true;
                Some(Err(
                    anyhow::Error::new(e).context("reading the router's reply log")
                ))
            }
        }
    }
}

/// Does the router's state know this ticket?
pub fn ticket_known(store: &Store, identity: &str) -> anyhow::Result<bool> {
    let Some(id) = gatehouse_router::id::TicketId::parse(identity) else {
        return Ok(false);
    };
    match store.read().ticket(&id) {
        Ok(_) => Ok(true),
        Err(gatehouse_router::store::StoreError::NotFound { .. }) => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("reading the router's tickets")),
    }
}

/// Every record of an audit log as JSON, in order (small logs: the demo's).
pub fn audit_values(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if let Ok(v) = serde_json::from_str(&line) {
            out.push(v);
        }
    }
    Ok(out)
}

/// The router's database.
pub fn open_store(path: &Path) -> anyhow::Result<Store> {
    Store::open(path, gatehouse_router::store::Durability::Normal)
        .with_context(|| format!("opening the router's state {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_proxy::audit::{
        now_rfc3339, AuditLog, CompletionRecord, MessageRecord, RequestRecord, Rotation,
    };

    fn pair(i: usize) -> [Record; 2] {
        let id = format!("req-{i}");
        [
            Record::Request(RequestRecord {
                time: "2026-12-01T00:00:00.000Z".into(),
                request_id: id.clone(),
                identity: "router-gh-1".into(),
                method: "POST".into(),
                host: "api.github.com".into(),
                path: "/repos/acme/widgets/issues/1/comments".into(),
                query_keys: vec![],
                outcome: Outcome::Allow {
                    rule_set: "router-github".into(),
                    rule: "reply-comment-create".into(),
                },
                message: Some(MessageRecord {
                    kind: "github_issue_comment".into(),
                    target: "acme/widgets#1".into(),
                    body_sha256: format!("{i:064}"),
                }),
                truncated: Default::default(),
            }),
            Record::Completion(CompletionRecord {
                time: "2026-12-01T00:00:00.040Z".into(),
                request_id: id,
                status: 201,
                bytes_sent: 1,
                bytes_received: 1,
                duration_ms: 40,
                message_id: Some(i.to_string()),
                error: None,
                truncated: Default::default(),
            }),
        ]
    }

    fn read(path: &Path) -> (Vec<ProxyMessage>, Vec<String>) {
        let (mut messages, mut broken) = (Vec::new(), Vec::new());
        for step in ProxyLog::open(path).unwrap() {
            match step.unwrap() {
                Step::Message(m) => messages.push(m),
                Step::Broken { place, why, .. } => broken.push(format!("{place}: {why}")),
                Step::Line { .. } | Step::Record(_) => {}
            }
        }
        (messages, broken)
    }

    #[test]
    fn a_rotated_set_reads_as_one_log_and_a_missing_file_is_a_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let rotation = Rotation::new(Some(1_500), None, None).unwrap();
        let mut log = AuditLog::open_rotating(&path, rotation, &now_rfc3339()).unwrap();
        for i in 0..12 {
            log.append_all(&pair(i)).unwrap();
        }
        assert!(log.file_number() >= 4);
        drop(log);
        let (messages, broken) = read(dir.path());
        assert!(broken.is_empty(), "{broken:?}");
        assert_eq!(messages.len(), 12);
        assert!(messages.iter().all(|m| m.status == Some(201)));
        std::fs::remove_file(dir.path().join("audit.jsonl.000002")).unwrap();
        let (messages, broken) = read(&path);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(broken[0].contains("audit.jsonl.000003:1"), "{broken:?}");
        assert!(broken[0].contains("missing or out of order"), "{broken:?}");
        assert!(messages.len() < 12);
    }
}
