//! The database's shape: the schema, and how a job row is read and an
//! event appended. A row that cannot be decoded is [`StoreError::Corrupt`],
//! never a default.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{json, Value};

use super::records::{ExitStatus, JobRecord};
use super::StoreError;
use crate::jobs::spec::JobSpec;
use crate::jobs::state::JobState;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    ticket TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    deadline_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER,
    exit_code INTEGER,
    exit_signal INTEGER,
    end_reason TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    pid_start INTEGER,
    identity TEXT,
    work_dir TEXT NOT NULL,
    stdout_log TEXT NOT NULL,
    stderr_log TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_live ON jobs(state) WHERE state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS jobs_ticket ON jobs(ticket);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    body_sha256 TEXT NOT NULL,
    job_id TEXT NOT NULL REFERENCES jobs(id)
);
CREATE TABLE IF NOT EXISTS reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_job ON reports(job_id, id);
CREATE TABLE IF NOT EXISTS inbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    at INTEGER NOT NULL,
    body TEXT NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS inbox_job ON inbox(job_id, seq);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
";

pub(super) const JOB_COLUMNS: &str =
    "id, spec, state, created_at, deadline_at, started_at, ended_at, \
     exit_code, exit_signal, end_reason, cancel_requested, pid, pid_start, identity, \
     work_dir, stdout_log, stderr_log";

pub(super) fn job_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<(JobRecord, String, String)> {
    let id: String = row.get(0)?;
    let spec: String = row.get(1)?;
    let state: String = row.get(2)?;
    let exit_code: Option<i32> = row.get(7)?;
    let exit_signal: Option<i32> = row.get(8)?;
    let pid: Option<i32> = row.get(11)?;
    let pid_start: Option<i64> = row.get(12)?;
    let work_dir: String = row.get(14)?;
    let stdout_log: String = row.get(15)?;
    let stderr_log: String = row.get(16)?;
    let record = JobRecord {
        id,
        // Filled in by `decode` below, which can report corruption properly.
        spec: JobSpec {
            ticket: String::new(),
            team: String::new(),
            profile: String::new(),
            rule_sets: vec![],
            tunnel_hosts: vec![],
            variables: Default::default(),
            task: String::new(),
            deadline_secs: 0,
            command: None,
        },
        state: JobState::Queued,
        created_at: row.get(3)?,
        deadline_at: row.get(4)?,
        started_at: row.get(5)?,
        ended_at: row.get(6)?,
        exit: (exit_code.is_some() || exit_signal.is_some()).then_some(ExitStatus {
            code: exit_code,
            signal: exit_signal,
        }),
        end_reason: row.get(9)?,
        cancel_requested: row.get::<_, i64>(10)? != 0,
        process: pid.zip(pid_start.map(|s| s as u64)),
        identity: row.get(13)?,
        work_dir: work_dir.into(),
        stdout_log: stdout_log.into(),
        stderr_log: stderr_log.into(),
    };
    Ok((record, spec, state))
}

pub(super) fn decode(
    (mut record, spec, state): (JobRecord, String, String),
) -> Result<JobRecord, StoreError> {
    record.spec = serde_json::from_str(&spec).map_err(|_| StoreError::Corrupt {
        what: "spec",
        job_id: record.id.clone(),
    })?;
    record.state = JobState::parse(&state).ok_or_else(|| StoreError::Corrupt {
        what: "state",
        job_id: record.id.clone(),
    })?;
    Ok(record)
}

pub(super) fn get_job(conn: &Connection, id: &str) -> Result<Option<JobRecord>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    conn.query_row(&sql, [id], job_from_row)
        .optional()?
        .map(decode)
        .transpose()
}

pub(super) fn append_event(
    conn: &Connection,
    at: i64,
    job_id: &str,
    kind: &str,
    data: &Value,
) -> Result<i64, StoreError> {
    conn.execute(
        "INSERT INTO events (at, job_id, kind, data) VALUES (?1, ?2, ?3, ?4)",
        params![at, job_id, kind, data.to_string()],
    )?;
    Ok(conn.last_insert_rowid())
}

/// The event body for a job's state change.
pub(super) fn state_event(job: &JobRecord) -> Value {
    let mut v = json!({
        "job_id": job.id,
        "ticket": job.spec.ticket,
        "state": job.state,
    });
    if let Some(exit) = job.exit {
        v["exit"] = json!(exit);
    }
    if let Some(reason) = &job.end_reason {
        v["reason"] = json!(reason);
    }
    v
}
