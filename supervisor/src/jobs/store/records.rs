//! The records the store holds and returns: plain data, no I/O.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::jobs::report::Report;
use crate::jobs::spec::JobSpec;
use crate::jobs::state::JobState;

/// How a job ended, as far as the launched process says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExitStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// One job as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    pub id: String,
    pub spec: JobSpec,
    pub state: JobState,
    pub created_at: i64,
    pub deadline_at: i64,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub exit: Option<ExitStatus>,
    pub end_reason: Option<String>,
    pub cancel_requested: bool,
    /// The launched process: pid and its start time (clock ticks since boot,
    /// `/proc/<pid>/stat` field 22), so a recycled pid is never mistaken for it.
    pub process: Option<(i32, u64)>,
    pub identity: Option<String>,
    pub work_dir: PathBuf,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
}

/// What a new job needs besides its spec.
pub struct NewJob<'a> {
    pub id: &'a str,
    pub spec: &'a JobSpec,
    pub now: i64,
    pub work_dir: &'a Path,
    pub stdout_log: &'a Path,
    pub stderr_log: &'a Path,
}

/// The result of an idempotent insert.
#[derive(Debug)]
pub enum Inserted {
    Created(Box<JobRecord>),
    Replayed(Box<JobRecord>),
    KeyConflict {
        job_id: String,
    },
    /// The ticket already has a live job; one ticket runs one job at a time
    /// (its work dir is shared across its jobs).
    TicketBusy {
        job_id: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    pub seq: i64,
    pub at: i64,
    pub job_id: String,
    pub kind: String,
    pub data: Value,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredReport {
    pub id: i64,
    pub at: i64,
    #[serde(flatten)]
    pub report: Report,
}
