//! The hash-chained audit log: append-only JSONL, one line per event.
//!
//! Every request gets a `request` line written *before* it is forwarded, and
//! a `completion` line with the same `request_id` after (status, bytes,
//! duration, the created message's id). Each line carries `seq` (0, 1, …) and
//! `prev`, the hex SHA-256 of the previous line's bytes (64 zeros for the
//! first), so changing, inserting or removing a line breaks the chain at that
//! point; [`verify`] finds the first broken line. Cutting lines off the end is
//! only detectable against a copy of a later [`AuditLog::head`], so anchor
//! that elsewhere if the threat needs it.
//!
//! [`AuditLog::append`] writes whole lines and `fdatasync`s before returning,
//! so a record the proxy has acted on survives a crash. A record is written
//! whole or not at all: a failed write (disk full, I/O error) is cut back to
//! the last whole record. A log whose last line was torn by a crash is cut
//! back the same way when it is next opened, and a `recovery` line records
//! what was cut, so the chain stays verifiable and [`verify`] can say so. Records carry no
//! secret, no query value and no body text: query keys only, and a SHA-256 of
//! a message's body. Their fields are bounded ([`bounded`]): a long value is
//! cut, with its length and hash kept.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub mod bounded;
mod rotate;
mod set;
mod verify;
pub use bounded::{bound, Cut, Truncated};
pub use rotate::Rotation;
pub use set::{rotated_number, rotated_path, LogSet};
pub use verify::{verify, verify_bytes, Chain, ChainedLine, Recovery, VerifyReport};

/// `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Why the audit log could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Reading, writing or syncing the file failed.
    #[error("audit log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The existing file's chain is broken; it is not appended to.
    #[error("audit log {path}: {broken}; move it aside and investigate before starting again")]
    Broken { path: PathBuf, broken: BrokenAt },
    /// A record could not be serialised.
    #[error("audit record could not be serialised: {0}")]
    Serialize(String),
    /// The files of a rotated set could not be told apart or found.
    #[error("audit log {path}: {why}")]
    Set { path: PathBuf, why: String },
}

/// Where and why the chain breaks. A changed line is found at the line after
/// it, whose `prev` no longer matches; the message names both.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct BrokenAt {
    /// 1-based line number.
    pub line: usize,
    pub why: String,
}

/// A message-bearing call: what kind, to whom, and the hash of what was said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageRecord {
    pub kind: String,
    pub target: String,
    /// Hex SHA-256 of the request body as sent.
    pub body_sha256: String,
}

/// The platform's id of a created message of `kind`, from its id as
/// answered: a GitHub url (what a GraphQL mutation answers, as gh selects
/// it) names the object by the number it ends in, `…#issuecomment-<id>`
/// for a comment and `…/pull/<number>` for a pull request; any other id
/// is itself.
pub fn platform_id<'a>(kind: &str, message_id: &'a str) -> &'a str {
    let suffix = match kind {
        "github_issue_comment" => "#issuecomment-",
        "github_pull_request" => "/pull/",
        _ => return message_id,
    };
    let number = message_id
        .strip_prefix("https://")
        .and_then(|rest| rest.rsplit_once(suffix))
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    number.unwrap_or(message_id)
}

/// Written before a request is forwarded (or when it is denied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRecord {
    /// RFC 3339 UTC, see [`rfc3339_utc`].
    pub time: String,
    pub request_id: String,
    pub identity: String,
    pub method: String,
    pub host: String,
    pub path: String,
    /// Query keys only, never values.
    pub query_keys: Vec<String>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<MessageRecord>,
    /// Fields cut to their bound, with their full length and hash.
    #[serde(default, skip_serializing_if = "Truncated::is_empty")]
    pub truncated: Truncated,
}

/// The rule decision of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    Allow {
        rule_set: String,
        rule: String,
    },
    Deny {
        reason: String,
        rule_sets_tried: Vec<String>,
    },
}

/// Written after the response (or failure) of a forwarded request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRecord {
    pub time: String,
    pub request_id: String,
    /// The upstream status, or the proxy's own (e.g. 403 for a body check, 502).
    pub status: u16,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub duration_ms: u64,
    /// For messages: the platform's id of the created comment/message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Fields cut to their bound, with their full length and hash.
    #[serde(default, skip_serializing_if = "Truncated::is_empty")]
    pub truncated: Truncated,
}

/// Written when the log is opened after its last line was torn (a crash
/// or a full disk mid-write): what was cut off to get back to the last whole
/// record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryRecord {
    pub time: String,
    /// Bytes of the torn line that were cut off.
    pub truncated_bytes: u64,
    /// Hex SHA-256 of those bytes.
    pub truncated_sha256: String,
}

/// Refusals of one identity that were counted rather than written one by
/// one, because it was refused faster than its rate of refusal records
/// (each refusal is still refused; a flood of them does not fill the disk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuppressedRecord {
    pub time: String,
    pub identity: String,
    /// How many refusals were not written.
    pub refusals: u64,
    /// When the first and the last of them were refused.
    pub first: String,
    pub last: String,
}

/// The first line of every file after the first of a rotated set. Its
/// `prev` is the previous file's last hash, so the chain runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRecord {
    pub time: String,
    /// This file's number in the set (the first file is 1).
    pub file: u64,
    /// Lines of the previous file.
    pub previous_lines: u64,
}

/// One audit event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Record {
    Request(RequestRecord),
    Completion(CompletionRecord),
    Recovery(RecoveryRecord),
    Suppressed(SuppressedRecord),
    Header(HeaderRecord),
}

/// A line as stored: chain fields first, then the record.
#[derive(Serialize, Deserialize)]
struct Line<R> {
    seq: u64,
    prev: String,
    #[serde(flatten)]
    record: R,
}

impl Line<Record> {
    /// Parses a line. The proxy writes `seq`, `prev` and `event` first,
    /// then the record's fields: such a line is read in one pass, straight
    /// into its record type. serde's `flatten` and internally tagged enums
    /// would first copy every field into a buffer of owned values, twice
    /// (the flattened map, then the tagged variant), which cost most of a
    /// reconciliation's time. A line in any other order, or that the fast
    /// pass refuses for any reason, is read by the derived (buffering)
    /// `Deserialize`, which decides: both accept and refuse the same lines,
    /// and its error is the one reported.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Line<Record>, serde_json::Error> {
        match parse_in_order(bytes) {
            Ok(line) => Ok(line),
            Err(_) => serde_json::from_slice(bytes),
        }
    }
}

/// [`Line::parse`]'s fast pass.
fn parse_in_order(bytes: &[u8]) -> Result<Line<Record>, serde_json::Error> {
    use serde::de::value::MapAccessDeserializer;
    use serde::de::{Error, MapAccess, Visitor};

    struct InOrder;

    impl<'de> Visitor<'de> for InOrder {
        type Value = Line<Record>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an audit line whose keys start seq, prev, event")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Line<Record>, A::Error> {
            let expect = |map: &mut A, key: &'static str| match map.next_key::<&'de str>()? {
                Some(k) if k == key => Ok(()),
                _ => Err(A::Error::custom("not in the written order")),
            };
            expect(&mut map, "seq")?;
            let seq: u64 = map.next_value()?;
            expect(&mut map, "prev")?;
            let prev: String = map.next_value()?;
            expect(&mut map, "event")?;
            let event: &'de str = map.next_value()?;
            let rest = MapAccessDeserializer::new(map);
            let record = match event {
                "request" => Record::Request(RequestRecord::deserialize(rest)?),
                "completion" => Record::Completion(CompletionRecord::deserialize(rest)?),
                "recovery" => Record::Recovery(RecoveryRecord::deserialize(rest)?),
                "suppressed" => Record::Suppressed(SuppressedRecord::deserialize(rest)?),
                "header" => Record::Header(HeaderRecord::deserialize(rest)?),
                _ => return Err(A::Error::custom("unknown event")),
            };
            Ok(Line { seq, prev, record })
        }
    }

    let mut de = serde_json::Deserializer::from_slice(bytes);
    let line = serde::Deserializer::deserialize_map(&mut de, InOrder)?;
    de.end()?;
    Ok(line)
}

/// The position of the last line written.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Lines in the (current) file.
    pub lines: u64,
    /// Hex SHA-256 of the last line ([`GENESIS`] when empty).
    pub hash: String,
}

impl Clone for Head {
    fn clone(&self) -> Self {
        Self {
            lines: self.lines,
            hash: self.hash.clone(),
        }
    }

    /// Into the hash's own buffer (the derived one would allocate anew).
    fn clone_from(&mut self, source: &Self) {
        self.lines = source.lines;
        self.hash.clone_from(&source.hash);
    }
}

/// An open audit log, positioned at the end of a verified chain.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    /// Shared with the sync thread, which syncs the current file.
    file: Arc<File>,
    head: Head,
    rotation: Rotation,
    /// The current file's number in its set, and when it was started (ms).
    file_number: u64,
    started_ms: u64,
    /// Bytes of whole records in the file: where a failed write is cut back to.
    len: u64,
    /// A failed write's tail could not be cut off yet; cut it before the next.
    torn: bool,
    /// Lines chained but not yet written ([`AuditLog::defer`]): they go out
    /// ahead of the next write's.
    deferred: Vec<u8>,
    /// The chain's head after the deferred lines; meaningless while none
    /// are deferred.
    deferred_head: Head,
    /// A head to chain new lines onto before they are kept. The three
    /// heads trade places instead of being cloned: twice a request, a
    /// clone was an allocation of its hash.
    spare_head: Head,
    /// A sync of the file failed: what it held may not be on disk, and a
    /// later sync of the same file can succeed without having written it
    /// (the error is reported once). Nothing more is written.
    sync_failed: bool,
}

/// A log's bytes split at the end of its last whole line: the whole lines,
/// and a torn tail (empty when the last line is complete).
pub fn split_torn_tail(bytes: &[u8]) -> (&[u8], &[u8]) {
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes.split_at(whole)
}

/// A line as written: the chain fields borrowed, then the record.
#[derive(Serialize)]
struct LineOut<'a> {
    seq: u64,
    prev: &'a str,
    #[serde(flatten)]
    record: &'a Record,
}

/// Serialises `records` as chained lines after `head` into `buffer`,
/// moving `head` to the last of them. Each line is serialised in place at
/// the end of `buffer` and hashed there (no line of its own, no hex string
/// built a char at a time): this runs twice for every request. On an
/// error, `buffer` may hold part of a line and `head` be part way: the
/// caller cuts the one back and drops the other.
fn chain_into(records: &[Record], head: &mut Head, buffer: &mut Vec<u8>) -> Result<(), AuditError> {
    for record in records {
        let start = buffer.len();
        let line = LineOut {
            seq: head.lines,
            prev: &head.hash,
            record,
        };
        serde_json::to_writer(&mut *buffer, &line)
            .map_err(|e| AuditError::Serialize(e.to_string()))?;
        let mut hex = [0u8; 64];
        hex::encode_to_slice(Sha256::digest(&buffer[start..]), &mut hex)
            .map_err(|e| AuditError::Serialize(e.to_string()))?;
        buffer.push(b'\n');
        head.lines += 1;
        head.hash.clear();
        head.hash
            .push_str(std::str::from_utf8(&hex).map_err(|e| AuditError::Serialize(e.to_string()))?);
    }
    Ok(())
}

impl AuditLog {
    /// Open (or create, mode 0600) the log at `path`. An existing file is
    /// verified first; a broken one is refused. A torn last line (no
    /// newline) is cut off, and a [`RecoveryRecord`] saying so is appended,
    /// timed `now`, before the log is used.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        Self::open_at(path, &now_rfc3339())
    }

    /// [`AuditLog::open`] with the time a recovery record would carry.
    pub fn open_at(path: &Path, now: &str) -> Result<Self, AuditError> {
        Self::open_rotating(path, Rotation::default(), now)
    }

    /// [`AuditLog::open_at`], moving to a new file when `rotation` says.
    pub fn open_rotating(path: &Path, rotation: Rotation, now: &str) -> Result<Self, AuditError> {
        let io = |source| AuditError::Io {
            path: path.to_owned(),
            source,
        };
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        let mut existing = Vec::new();
        file.read_to_end(&mut existing).map_err(io)?;
        let (whole, torn) = split_torn_tail(&existing);
        let report = verify_bytes(whole).map_err(|broken| AuditError::Broken {
            path: path.to_owned(),
            broken,
        })?;
        if created {
            // Make the new directory entry durable too.
            file.sync_all().map_err(io)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            }
        }
        let first_time = whole
            .split(|&b| b == b'\n')
            .next()
            .and_then(|l| Line::parse(l).ok())
            .and_then(|l| record_time_ms(&l.record));
        let mut log = Self {
            path: path.to_owned(),
            file: Arc::new(file),
            head: Head {
                lines: report.file_lines,
                hash: report.last_hash,
            },
            rotation,
            file_number: report.last_file,
            started_ms: first_time.unwrap_or_else(|| rfc3339_ms(now).unwrap_or(0)),
            len: whole.len() as u64,
            torn: !torn.is_empty(),
            deferred: Vec::new(),
            deferred_head: Head::default(),
            spare_head: Head::default(),
            sync_failed: false,
        };
        if whole.is_empty() {
            if let Some((number, last)) = rotate::last_rotated(path)? {
                tracing::warn!(
                    path = %path.display(),
                    previous = number,
                    "the active audit file has no header after a rotation (a crash during it); \
                     starting it as the next file of the set"
                );
                log.resume_after(number, &last, rfc3339_ms(now).unwrap_or_else(now_unix_ms))?;
            }
        }
        if !torn.is_empty() {
            let recovery = Record::Recovery(RecoveryRecord {
                time: now.to_owned(),
                truncated_bytes: torn.len() as u64,
                truncated_sha256: hex::encode(Sha256::digest(torn)),
            });
            tracing::warn!(
                path = %path.display(),
                bytes = torn.len(),
                "the audit log's last line was torn; cut back to the last whole record"
            );
            log.append(&recovery)?;
        }
        Ok(log)
    }

    /// The last line written; anchor it elsewhere to detect truncation.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// Append one record and sync it to disk before returning.
    pub fn append(&mut self, record: &Record) -> Result<Head, AuditError> {
        self.append_all(std::slice::from_ref(record))
    }

    /// Append several records with one write and one sync (group commit).
    pub fn append_all(&mut self, records: &[Record]) -> Result<Head, AuditError> {
        self.write_all(records)?;
        self.sync()?;
        Ok(self.head.clone())
    }

    /// Write records without syncing; a later [`AuditLog::sync`] makes them
    /// durable. For a writer that syncs ordinary records in batches and
    /// message records at once. Deferred lines are written first, in the
    /// same write.
    pub fn write_all(&mut self, records: &[Record]) -> Result<(), AuditError> {
        let now_ms = now_unix_ms();
        if self.rotation.due(self.len, self.started_ms, now_ms) {
            // Deferred lines are chained in the file they were deferred
            // in: they go out there before it is left.
            if !self.deferred.is_empty() {
                self.write_lines(&[])?;
            }
            self.rotate(now_ms)?;
        }
        self.write_lines(records)
    }

    /// The head new lines are chained onto: after the deferred lines, or
    /// the file's last.
    fn chain_end(&self) -> &Head {
        if self.deferred.is_empty() {
            &self.head
        } else {
            &self.deferred_head
        }
    }

    /// Writes the deferred lines and `records` in one write.
    fn write_lines(&mut self, records: &[Record]) -> Result<(), AuditError> {
        let mut next = std::mem::take(&mut self.spare_head);
        next.clone_from(self.chain_end());
        let mut buffer = std::mem::take(&mut self.deferred);
        let deferred = buffer.len();
        if let Err(e) = chain_into(records, &mut next, &mut buffer) {
            buffer.truncate(deferred);
            self.deferred = buffer;
            self.spare_head = next;
            return Err(e);
        }
        let written = self.write_out(&buffer);
        // Written or lost, the lines are gone from the buffer; its
        // capacity is kept for the next lines deferred.
        buffer.clear();
        self.deferred = buffer;
        if written.is_ok() {
            std::mem::swap(&mut self.head, &mut next);
        }
        self.spare_head = next;
        written
    }

    /// Chains a record now and keeps its line to go out with the next
    /// write ([`AuditLog::write_all`], [`AuditLog::write_deferred`]): one
    /// `write(2)` for many lines. For lines nothing waits on (completions);
    /// until written they are lost if the process dies.
    pub fn defer(&mut self, record: &Record) -> Result<(), AuditError> {
        self.refuse_after_failed_sync()?;
        let mut next = std::mem::take(&mut self.spare_head);
        next.clone_from(self.chain_end());
        let kept = self.deferred.len();
        let chained = chain_into(std::slice::from_ref(record), &mut next, &mut self.deferred);
        match chained {
            Ok(()) => std::mem::swap(&mut self.deferred_head, &mut next),
            Err(_) => self.deferred.truncate(kept),
        }
        self.spare_head = next;
        chained
    }

    /// Writes the deferred lines, if any.
    pub fn write_deferred(&mut self) -> Result<(), AuditError> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        self.write_all(&[])
    }

    /// Writes whole chained lines (the caller moves the head onto them once
    /// written). A failed write is cut back to the last whole record, where
    /// the chain stays: the lines of this write (deferred ones too) are
    /// lost, never half in the file.
    fn write_out(&mut self, buffer: &[u8]) -> Result<(), AuditError> {
        self.refuse_after_failed_sync()?;
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        if self.torn {
            self.file.set_len(self.len).map_err(io)?;
            self.torn = false;
        }
        let mut file = &*self.file;
        // One write call per batch: lines are never interleaved or split by
        // us. A failed write may have written part of the batch: cut it
        // back, so the file ends on the whole record the head is on.
        if let Err(source) = file.write_all(buffer) {
            self.torn = self.file.set_len(self.len).is_err();
            return Err(io(source));
        }
        self.len += buffer.len() as u64;
        Ok(())
    }

    /// A second descriptor of the file, to sync it without this log's
    /// lock (its `fdatasync` makes everything written through this log
    /// durable).
    pub fn sync_handle(&self) -> Result<File, std::io::Error> {
        self.file.try_clone()
    }

    /// The current file (it changes when the log rotates), to sync it
    /// without this log's lock.
    pub fn current_file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// The current file's number in its set.
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// Make everything written so far durable (`fdatasync`).
    pub fn sync(&mut self) -> Result<(), AuditError> {
        self.file.sync_data().map_err(|source| {
            self.sync_failed = true;
            AuditError::Io {
                path: self.path.clone(),
                source,
            }
        })
    }

    /// A sync of this log failed (here or in a rotation): nothing more is
    /// written until it is reopened.
    pub fn sync_failed(&self) -> bool {
        self.sync_failed
    }

    fn refuse_after_failed_sync(&self) -> Result<(), AuditError> {
        if !self.sync_failed {
            return Ok(());
        }
        Err(AuditError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(
                "an earlier sync of the audit log failed; nothing more is written until it is reopened",
            ),
        })
    }

    /// As if a sync had failed (for tests of what follows).
    #[cfg(test)]
    pub(crate) fn fail_syncs(&mut self) {
        self.sync_failed = true;
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A record's time (ms), if it has one that parses.
fn record_time_ms(record: &Record) -> Option<u64> {
    let time = match record {
        Record::Request(r) => &r.time,
        Record::Completion(c) => &c.time,
        Record::Recovery(r) => &r.time,
        Record::Suppressed(s) => &s.time,
        Record::Header(h) => &h.time,
    };
    rfc3339_ms(time)
}

/// RFC 3339 UTC as [`rfc3339_utc`] writes it (`2026-12-01T05:00:00.123Z`,
/// the fraction optional) to milliseconds since the Unix epoch.
pub fn rfc3339_ms(s: &str) -> Option<u64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    let ms: i64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(((days * 24 + h) * 60 + min) * 60 * 1000 + sec * 1000 + ms).ok()
}

/// Now, as [`rfc3339_utc`] renders it.
pub fn now_rfc3339() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    rfc3339_utc(ms)
}

/// Render milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds,
/// e.g. `2026-11-29T16:30:00.123Z` (the caller passes `now`).
pub fn rfc3339_utc(unix_ms: u64) -> String {
    let (days, ms_of_day) = (unix_ms / 86_400_000, unix_ms % 86_400_000);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, ms) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    // Digits written directly: every audit line carries a time, and the
    // formatting machinery was ~2% of the proxy's CPU per request.
    let mut out = String::with_capacity(24);
    if !(0..=9999).contains(&year) {
        // Not reached from a clock (year 10000 is 2.5e14 ms away).
        out.push_str(&format!("{year:04}"));
    } else {
        push_digits(&mut out, year as u64, 4);
    }
    for (sep, value, width) in [
        ('-', month as u64, 2),
        ('-', day as u64, 2),
        ('T', h, 2),
        (':', m, 2),
        (':', s, 2),
        ('.', ms, 3),
    ] {
        out.push(sep);
        push_digits(&mut out, value, width);
    }
    out.push('Z');
    out
}

/// `value`'s last `width` decimal digits, zero-padded.
fn push_digits(out: &mut String, value: u64, width: u32) {
    for place in (0..width).rev() {
        let digit = (value / 10u64.pow(place) % 10) as u8;
        out.push(char::from(b'0' + digit));
    }
}

#[cfg(test)]
mod tests;
