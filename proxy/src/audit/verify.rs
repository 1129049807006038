//! Verifying the chain, line by line: [`Chain`] checks one line at a time
//! and keeps only what the next line needs (its number, the previous hash,
//! the requests still without a completion), so a log of any size is read
//! in constant memory; [`verify`] streams a file, or a rotated set of
//! files, through it.
//!
//! A rotated set continues one chain across its files: every file after
//! the first opens with a `header` line whose `prev` is the last hash of the
//! file before and whose `file` is its number in the set, so a missing,
//! reordered or replaced file breaks the chain at its header. The first file
//! read may open with a header too (earlier files removed by retention): its
//! `prev` is then taken as given.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::set::LogSet;
use super::{AuditError, BrokenAt, Line, Record, RecoveryRecord, GENESIS};

/// What [`verify`] found in an intact log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Lines in every file read.
    pub lines: u64,
    pub requests: u64,
    pub completions: u64,
    /// Each start-up that cut a torn last line off: its recovery line.
    pub recoveries: Vec<Recovery>,
    /// Requests with no completion line (in flight, or cut off by a crash).
    pub open_requests: Vec<String>,
    /// Refusals counted in `suppressed` lines rather than written one by one.
    pub suppressed_refusals: u64,
    /// Hex SHA-256 of the last line.
    pub last_hash: String,
    /// The number of the first file read in its set (1 unless earlier
    /// files were removed by retention) and of the last.
    pub first_file: u64,
    pub last_file: u64,
    /// Lines of the last file read (its next line's `seq`).
    pub file_lines: u64,
}

/// A recovery line found by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// 1-based line number of the recovery line.
    pub line: usize,
    pub record: RecoveryRecord,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.record;
        write!(
            f,
            "line {}: at {} the proxy found the last line torn (a crash or a full disk during a write), cut its {} bytes off (SHA-256 {}) and went on from line {}, the last whole record (a request whose line was torn was not forwarded: its line is written first; a torn completion leaves its request without one)",
            self.line,
            r.time,
            r.truncated_bytes,
            r.truncated_sha256,
            self.line - 1
        )
    }
}

/// One verified line: its number, its hash and its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainedLine {
    /// 1-based line number in its file.
    pub line: usize,
    /// Hex SHA-256 of the line's bytes.
    pub hash: String,
    pub record: Record,
}

/// Where the chain is between files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The first line of the first file: a plain first line or a header.
    First,
    /// The first line of a later file: its header must follow the file before.
    Next,
    /// Inside a file.
    Within,
}

/// The chain's state between lines (pure: the caller reads the lines).
#[derive(Debug, Clone)]
pub struct Chain {
    report: VerifyReport,
    /// Requests without their completion yet (sorted when reported).
    open: HashSet<String>,
    start: Start,
    /// The first file read opened with a header: requests of the files
    /// before it may complete in it.
    partial: bool,
}

impl Default for Chain {
    fn default() -> Self {
        Self::new()
    }
}

impl Chain {
    /// A chain that starts at the first line of a log (or of a set).
    pub fn new() -> Self {
        Self {
            report: VerifyReport {
                lines: 0,
                requests: 0,
                completions: 0,
                recoveries: Vec::new(),
                open_requests: Vec::new(),
                suppressed_refusals: 0,
                last_hash: GENESIS.to_owned(),
                first_file: 1,
                last_file: 1,
                file_lines: 0,
            },
            open: HashSet::new(),
            start: Start::First,
            partial: false,
        }
    }

    /// Lines checked so far in the current file.
    pub fn file_lines(&self) -> u64 {
        self.report.file_lines
    }

    /// The next line is the first of the set's next file.
    pub fn next_file(&mut self) {
        self.start = Start::Next;
        self.report.file_lines = 0;
    }

    /// Checks the next line (without its newline): complete, valid,
    /// numbered in order and chained to the one before.
    pub fn push(&mut self, line: &[u8]) -> Result<ChainedLine, BrokenAt> {
        let line_number = self.report.file_lines as usize + 1;
        let broken = |why: String| BrokenAt {
            line: line_number,
            why,
        };
        let parsed = Line::parse(line).map_err(|e| broken(format!("not a valid record: {e}")))?;
        self.check_place(&parsed).map_err(broken)?;
        self.count(&parsed.record, line_number).map_err(broken)?;
        self.start = Start::Within;
        self.report.lines += 1;
        self.report.file_lines += 1;
        set_hash(&mut self.report.last_hash, line);
        Ok(ChainedLine {
            line: line_number,
            hash: self.report.last_hash.clone(),
            record: parsed.record,
        })
    }

    /// The line's `seq`, `prev` and (for a header) file number are where
    /// the chain says.
    fn check_place(&mut self, parsed: &Line<Record>) -> Result<(), String> {
        let report = &mut self.report;
        let header = match &parsed.record {
            Record::Header(h) => Some(h),
            _ => None,
        };
        if parsed.seq != report.file_lines {
            return Err(format!(
                "seq is {}, expected {}",
                parsed.seq, report.file_lines
            ));
        }
        match (self.start, header) {
            (Start::First, Some(h)) => {
                // Files before this one are not here (retention): the
                // header's `prev` is taken as given.
                report.first_file = h.file;
                report.last_file = h.file;
                self.partial = true;
                return Ok(());
            }
            (Start::Next, Some(h)) if h.file != report.last_file + 1 => {
                return Err(format!(
                    "this file is number {} of the set, expected {}: a file is missing or out of order",
                    h.file,
                    report.last_file + 1
                ));
            }
            (Start::Next, Some(h)) => report.last_file = h.file,
            (Start::Next, None) => {
                return Err(format!(
                    "this file does not open with a header naming file {} of the set: it is not the next file",
                    report.last_file + 1
                ))
            }
            (Start::Within, Some(_)) => {
                return Err("a header inside a file: files were joined".into())
            }
            (Start::First | Start::Within, None) => {}
        }
        if parsed.prev != report.last_hash {
            return Err(match (self.start, report.file_lines) {
                (Start::Next, _) => format!(
                    "the header's prev does not match the last line of file {}: a file is missing, out of order or changed",
                    report.last_file - 1
                ),
                (_, 0) => "prev of the first line is not the genesis hash".into(),
                (_, n) => format!(
                    "prev does not match the SHA-256 of line {n}: that line was changed, or a line was inserted or removed"
                ),
            });
        }
        Ok(())
    }

    /// Request and completion bookkeeping, and what the report lists.
    fn count(&mut self, record: &Record, line_number: usize) -> Result<(), String> {
        let report = &mut self.report;
        match record {
            Record::Request(r) => {
                report.requests += 1;
                if !self.open.insert(r.request_id.clone()) {
                    return Err(format!("request id {} appears twice", r.request_id));
                }
            }
            Record::Completion(c) => {
                report.completions += 1;
                if !self.open.remove(&c.request_id) && !self.partial {
                    return Err(format!(
                        "completion for unknown or completed request {}",
                        c.request_id
                    ));
                }
            }
            Record::Recovery(record) => report.recoveries.push(Recovery {
                line: line_number,
                record: record.clone(),
            }),
            Record::Suppressed(s) => report.suppressed_refusals += s.refusals,
            Record::Header(_) => {}
        }
        Ok(())
    }

    /// Takes `line` as the chain's new head after a break (see
    /// [`Chain::push`]'s error), so a reader can go on and find later
    /// breaks: its record if it is one.
    pub fn resume(&mut self, line: &[u8]) -> Option<ChainedLine> {
        let parsed = Line::parse(line).ok()?;
        let line_number = self.report.file_lines as usize + 1;
        match &parsed.record {
            Record::Request(r) => {
                self.report.requests += 1;
                self.open.insert(r.request_id.clone());
            }
            Record::Completion(c) => {
                self.report.completions += 1;
                self.open.remove(&c.request_id);
            }
            Record::Header(h) => self.report.last_file = h.file,
            other => {
                let _ = self.count(other, line_number);
            }
        }
        self.start = Start::Within;
        self.report.lines += 1;
        self.report.file_lines = parsed.seq.saturating_add(1);
        self.report.last_hash = hex::encode(Sha256::digest(line));
        Some(ChainedLine {
            line: line_number,
            hash: self.report.last_hash.clone(),
            record: parsed.record,
        })
    }

    /// The report of the lines pushed so far.
    pub fn finish(mut self) -> VerifyReport {
        self.report.open_requests = self.open.into_iter().collect();
        self.report.open_requests.sort();
        self.report
    }
}

/// `hash` := the hex SHA-256 of `line`, in the string's own buffer (one
/// line after another, no allocation).
fn set_hash(hash: &mut String, line: &[u8]) {
    let mut hex = [0u8; 64];
    if hex::encode_to_slice(Sha256::digest(line), &mut hex).is_ok() {
        hash.clear();
        hash.extend(hex.iter().map(|b| char::from(*b)));
    }
}

/// The error for a last line without its newline.
fn incomplete(line: usize) -> BrokenAt {
    BrokenAt {
        line,
        why: "the last line is incomplete (no newline): a write was cut off; the proxy cuts it back to the last whole record, and records that, when it next opens the log".into(),
    }
}

/// Read and verify the log at `path`, streamed: one file, or, for the
/// active file of a rotated set or a directory holding one, every file of
/// the set in order.
pub fn verify(path: &Path) -> Result<VerifyReport, AuditError> {
    let set = LogSet::find(path)?;
    let mut chain = Chain::new();
    for (i, file_path) in set.files().iter().enumerate() {
        let io = |source| AuditError::Io {
            path: file_path.clone(),
            source,
        };
        let broken = |broken| AuditError::Broken {
            path: file_path.clone(),
            broken,
        };
        if i > 0 {
            chain.next_file();
        }
        let file = std::fs::File::open(file_path).map_err(io)?;
        let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
                break;
            }
            if line.pop() != Some(b'\n') {
                return Err(broken(incomplete(chain.file_lines() as usize + 1)));
            }
            chain.push(&line).map_err(broken)?;
        }
    }
    Ok(chain.finish())
}

/// Verify a log's bytes: every line complete, valid, numbered in order, and
/// chained to the one before.
pub fn verify_bytes(bytes: &[u8]) -> Result<VerifyReport, BrokenAt> {
    let mut chain = Chain::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(incomplete(chain.file_lines() as usize + 1));
        };
        chain.push(&rest[..end])?;
        rest = &rest[end + 1..];
    }
    Ok(chain.finish())
}
