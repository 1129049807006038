//! Verifying the chain, line by line: [`Chain`] checks one line at a time
//! and keeps only what the next line needs (its number, the previous hash,
//! the requests still without a completion), so a log of any size is read
//! in constant memory; [`verify`] streams a file through it.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{AuditError, BrokenAt, Line, Record, RecoveryRecord, GENESIS};

/// What [`verify`] found in an intact log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
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
    /// 1-based line number.
    pub line: usize,
    /// Hex SHA-256 of the line's bytes.
    pub hash: String,
    pub record: Record,
}

/// The chain's state between lines (pure: the caller reads the lines).
#[derive(Debug, Clone)]
pub struct Chain {
    report: VerifyReport,
    open: BTreeSet<String>,
}

impl Default for Chain {
    fn default() -> Self {
        Self::new()
    }
}

impl Chain {
    /// A chain that starts at the first line of a log.
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
            },
            open: BTreeSet::new(),
        }
    }

    /// Lines checked so far.
    pub fn lines(&self) -> u64 {
        self.report.lines
    }

    /// Checks the next line (without its newline): complete, valid,
    /// numbered in order and chained to the one before.
    pub fn push(&mut self, line: &[u8]) -> Result<ChainedLine, BrokenAt> {
        let report = &mut self.report;
        let line_number = report.lines as usize + 1;
        let broken = |why: String| BrokenAt {
            line: line_number,
            why,
        };
        let parsed: Line<Record> =
            serde_json::from_slice(line).map_err(|e| broken(format!("not a valid record: {e}")))?;
        if parsed.seq != report.lines {
            return Err(broken(format!(
                "seq is {}, expected {}",
                parsed.seq, report.lines
            )));
        }
        if parsed.prev != report.last_hash {
            return Err(broken(format!(
                "prev does not match the SHA-256 of line {}: that line was changed, or a line was inserted or removed",
                line_number - 1
            )));
        }
        match &parsed.record {
            Record::Request(r) => {
                report.requests += 1;
                if !self.open.insert(r.request_id.clone()) {
                    return Err(broken(format!("request id {} appears twice", r.request_id)));
                }
            }
            Record::Completion(c) => {
                report.completions += 1;
                if !self.open.remove(&c.request_id) {
                    return Err(broken(format!(
                        "completion for unknown or completed request {}",
                        c.request_id
                    )));
                }
            }
            Record::Recovery(record) => report.recoveries.push(Recovery {
                line: line_number,
                record: record.clone(),
            }),
            Record::Suppressed(s) => report.suppressed_refusals += s.refusals,
        }
        report.lines += 1;
        report.last_hash = hex::encode(Sha256::digest(line));
        Ok(ChainedLine {
            line: line_number,
            hash: report.last_hash.clone(),
            record: parsed.record,
        })
    }

    /// Takes `line` as the chain's new head after a break (see
    /// [`Chain::push`]'s error), so a reader can go on and find later
    /// breaks: its record if it is one.
    pub fn resume(&mut self, line: &[u8]) -> Option<ChainedLine> {
        let parsed: Line<Record> = serde_json::from_slice(line).ok()?;
        let report = &mut self.report;
        match &parsed.record {
            Record::Request(r) => {
                report.requests += 1;
                self.open.insert(r.request_id.clone());
            }
            Record::Completion(c) => {
                report.completions += 1;
                self.open.remove(&c.request_id);
            }
            Record::Recovery(_) => {}
            Record::Suppressed(s) => report.suppressed_refusals += s.refusals,
        }
        report.lines = parsed.seq.saturating_add(1);
        report.last_hash = hex::encode(Sha256::digest(line));
        Some(ChainedLine {
            line: report.lines as usize,
            hash: report.last_hash.clone(),
            record: parsed.record,
        })
    }

    /// The report of the lines pushed so far.
    pub fn finish(mut self) -> VerifyReport {
        self.report.open_requests = self.open.into_iter().collect();
        self.report
    }
}

/// The error for a last line without its newline.
fn incomplete(line: usize) -> BrokenAt {
    BrokenAt {
        line,
        why: "the last line is incomplete (no newline): a write was cut off; the proxy cuts it back to the last whole record, and records that, when it next opens the log".into(),
    }
}

/// Read and verify the log at `path`, streamed.
pub fn verify(path: &Path) -> Result<VerifyReport, AuditError> {
    let io = |source| AuditError::Io {
        path: path.to_owned(),
        source,
    };
    let broken = |broken| AuditError::Broken {
        path: path.to_owned(),
        broken,
    };
    let mut reader = std::io::BufReader::new(std::fs::File::open(path).map_err(io)?);
    let mut chain = Chain::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            return Ok(chain.finish());
        }
        if line.pop() != Some(b'\n') {
            return Err(broken(incomplete(chain.lines() as usize + 1)));
        }
        chain.push(&line).map_err(broken)?;
    }
}

/// Verify a log's bytes: every line complete, valid, numbered in order, and
/// chained to the one before.
pub fn verify_bytes(bytes: &[u8]) -> Result<VerifyReport, BrokenAt> {
    let mut chain = Chain::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(incomplete(chain.lines() as usize + 1));
        };
        chain.push(&rest[..end])?;
        rest = &rest[end + 1..];
    }
    Ok(chain.finish())
}
