//! Durable state in SQLite (WAL): jobs, idempotency keys, reports, inbox
//! messages and the event log. One connection behind a mutex: every write is
//! one short transaction, so event sequence numbers are assigned in commit
//! order and a reader's cursor never skips one.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Value};

use super::report::{InboxMessage, Report};
use super::spec::JobSpec;
use super::state::{admission, next_state, Admission, JobEvent, JobState, StateError};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// the database failed
    #[error("state database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// a stored value could not be read back
    #[error("state database holds a malformed {what} for job {job_id}")]
    Corrupt { what: &'static str, job_id: String },
    /// no job has this id
    #[error("no job {0}")]
    NotFound(String),
    /// the transition is not allowed from the job's current state
    #[error(transparent)]
    State(#[from] StateError),
}

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

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredMessage {
    pub seq: i64,
    pub at: i64,
    #[serde(flatten)]
    pub message: InboxMessage,
}

pub struct Store {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
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

const JOB_COLUMNS: &str = "id, spec, state, created_at, deadline_at, started_at, ended_at, \
     exit_code, exit_signal, end_reason, cancel_requested, pid, pid_start, identity, \
     work_dir, stdout_log, stderr_log";

fn job_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(JobRecord, String, String)> {
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

fn decode((mut record, spec, state): (JobRecord, String, String)) -> Result<JobRecord, StoreError> {
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

fn get_job(conn: &Connection, id: &str) -> Result<Option<JobRecord>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    conn.query_row(&sql, [id], job_from_row)
        .optional()?
        .map(decode)
        .transpose()
}

fn append_event(
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
fn state_event(job: &JobRecord) -> Value {
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

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (the
        // transaction rolls back on drop), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a job under an idempotency key, or answers with the job the
    /// key already names. Returns the event sequence number when created.
    pub fn insert_job(
        &self,
        key: &str,
        body_hash: &str,
        new: NewJob<'_>,
    ) -> Result<(Inserted, Option<i64>), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let existing: Option<(String, String)> = tx
            .query_row(
                "SELECT body_sha256, job_id FROM idempotency WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let decision = admission(
            existing.as_ref().map(|(h, j)| (h.as_str(), j.as_str())),
            body_hash,
        );
        match decision {
            Admission::Replay { job_id } => {
                let job = get_job(&tx, &job_id)?.ok_or(StoreError::NotFound(job_id))?;
                return Ok((Inserted::Replayed(Box::new(job)), None));
            }
            Admission::Conflict { job_id } => {
                return Ok((Inserted::KeyConflict { job_id }, None));
            }
            Admission::Create => {}
        }
        let busy: Option<String> = tx
            .query_row(
                "SELECT id FROM jobs WHERE ticket = ?1 AND state IN ('queued', 'running')",
                [&new.spec.ticket],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(job_id) = busy {
            return Ok((Inserted::TicketBusy { job_id }, None));
        }
        let spec_json = serde_json::to_string(new.spec).unwrap_or_default();
        let deadline_at = new
            .now
            .saturating_add((new.spec.deadline_secs as i64).saturating_mul(1000));
        tx.execute(
            "INSERT INTO jobs (id, ticket, spec, state, created_at, deadline_at, work_dir, stdout_log, stderr_log)
             VALUES (?1, ?2, ?3, 'queued', ?4, ?5, ?6, ?7, ?8)",
            params![
                new.id,
                new.spec.ticket,
                spec_json,
                new.now,
                deadline_at,
                new.work_dir.to_string_lossy(),
                new.stdout_log.to_string_lossy(),
                new.stderr_log.to_string_lossy(),
            ],
        )?;
        tx.execute(
            "INSERT INTO idempotency (key, body_sha256, job_id) VALUES (?1, ?2, ?3)",
            params![key, body_hash, new.id],
        )?;
        let job = get_job(&tx, new.id)?.ok_or_else(|| StoreError::NotFound(new.id.into()))?;
        let seq = append_event(&tx, new.now, new.id, "job_state", &state_event(&job))?;
        tx.commit()?;
        Ok((Inserted::Created(Box::new(job)), Some(seq)))
    }

    pub fn job(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        get_job(&self.conn(), id)
    }

    /// Jobs recorded as queued or running, oldest first.
    pub fn live_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ('queued', 'running') ORDER BY created_at, id"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], job_from_row)?;
        let mut out = vec![];
        for row in rows {
            out.push(decode(row?)?);
        }
        Ok(out)
    }

    /// Records the proxy identity name before it is created, so a crash
    /// between creating and recording it can never leak it.
    pub fn set_identity(&self, id: &str, identity: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE jobs SET identity = ?2 WHERE id = ?1",
            params![id, identity],
        )?;
        Ok(())
    }

    /// Forgets the identity once the proxy has revoked it.
    pub fn clear_identity(&self, id: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("UPDATE jobs SET identity = NULL WHERE id = ?1", [id])?;
        Ok(())
    }

    /// Ended jobs whose identity was never confirmed revoked.
    pub fn unrevoked_identities(&self) -> Result<Vec<JobRecord>, StoreError> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE identity IS NOT NULL AND state NOT IN ('queued', 'running')"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], job_from_row)?;
        let mut out = vec![];
        for row in rows {
            out.push(decode(row?)?);
        }
        Ok(out)
    }

    /// Marks a cancel as requested. Returns the job's state at that moment.
    pub fn request_cancel(&self, id: &str) -> Result<Option<JobState>, StoreError> {
        let conn = self.conn();
        conn.execute(
            "UPDATE jobs SET cancel_requested = 1 WHERE id = ?1 AND state IN ('queued', 'running')",
            [id],
        )?;
        Ok(get_job(&conn, id)?.map(|j| j.state))
    }

    /// Applies one state-machine event and logs it. `process` is recorded on
    /// `Started`; `exit` and `reason` on the way to a final state.
    pub fn transition(
        &self,
        id: &str,
        event: JobEvent,
        now: i64,
        process: Option<(i32, u64)>,
        exit: Option<ExitStatus>,
        reason: Option<&str>,
    ) -> Result<(JobRecord, i64), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let job = get_job(&tx, id)?.ok_or_else(|| StoreError::NotFound(id.into()))?;
        let to = next_state(job.state, event)?;
        if to == JobState::Running {
            tx.execute(
                "UPDATE jobs SET state = ?2, started_at = ?3, pid = ?4, pid_start = ?5 WHERE id = ?1",
                params![
                    id,
                    to.as_str(),
                    now,
                    process.map(|p| p.0),
                    process.map(|p| p.1 as i64)
                ],
            )?;
        } else {
            tx.execute(
                "UPDATE jobs SET state = ?2, ended_at = ?3, exit_code = ?4, exit_signal = ?5, end_reason = ?6
                 WHERE id = ?1",
                params![
                    id,
                    to.as_str(),
                    now,
                    exit.and_then(|e| e.code),
                    exit.and_then(|e| e.signal),
                    reason
                ],
            )?;
        }
        let job = get_job(&tx, id)?.ok_or_else(|| StoreError::NotFound(id.into()))?;
        let seq = append_event(&tx, now, id, "job_state", &state_event(&job))?;
        tx.commit()?;
        Ok((job, seq))
    }

    /// Stores a validated report from a job's own control socket.
    pub fn add_report(
        &self,
        job_id: &str,
        report: &Report,
        now: i64,
    ) -> Result<(StoredReport, i64), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let job = get_job(&tx, job_id)?.ok_or_else(|| StoreError::NotFound(job_id.into()))?;
        let body = serde_json::to_string(report).unwrap_or_default();
        tx.execute(
            "INSERT INTO reports (job_id, at, body) VALUES (?1, ?2, ?3)",
            params![job_id, now, body],
        )?;
        let stored = StoredReport {
            id: tx.last_insert_rowid(),
            at: now,
            report: report.clone(),
        };
        let data = json!({"job_id": job_id, "ticket": job.spec.ticket, "report": stored});
        let seq = append_event(&tx, now, job_id, "report", &data)?;
        tx.commit()?;
        Ok((stored, seq))
    }

    pub fn latest_report(&self, job_id: &str) -> Result<Option<StoredReport>, StoreError> {
        let conn = self.conn();
        let row: Option<(i64, i64, String)> = conn
            .query_row(
                "SELECT id, at, body FROM reports WHERE job_id = ?1 ORDER BY id DESC LIMIT 1",
                [job_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        row.map(|(id, at, body)| {
            let report = serde_json::from_str(&body).map_err(|_| StoreError::Corrupt {
                what: "report",
                job_id: job_id.into(),
            })?;
            Ok(StoredReport { id, at, report })
        })
        .transpose()
    }

    pub fn push_inbox(
        &self,
        job_id: &str,
        message: &InboxMessage,
        now: i64,
    ) -> Result<i64, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO inbox (job_id, at, body) VALUES (?1, ?2, ?3)",
            params![
                job_id,
                now,
                serde_json::to_string(message).unwrap_or_default()
            ],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// The messages the worker has not acknowledged yet, oldest first. They
    /// stay until [`Store::ack_inbox`]: delivery is at least once, so a
    /// response lost on the way to the worker loses nothing.
    pub fn pending_inbox(&self, job_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let conn = self.conn();
        let mut out = vec![];
        let mut stmt = conn.prepare_cached(
            "SELECT seq, at, body FROM inbox WHERE job_id = ?1 AND delivered = 0 ORDER BY seq",
        )?;
        let rows = stmt.query_map([job_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for row in rows {
            let (seq, at, body) = row?;
            let message = serde_json::from_str(&body).map_err(|_| StoreError::Corrupt {
                what: "inbox message",
                job_id: job_id.into(),
            })?;
            out.push(StoredMessage { seq, at, message });
        }
        Ok(out)
    }

    /// Marks job `job_id`'s messages up to `through` delivered; returns how
    /// many were still pending. Another job's messages are never touched.
    pub fn ack_inbox(&self, job_id: &str, through: i64) -> Result<usize, StoreError> {
        Ok(self.conn().execute(
            "UPDATE inbox SET delivered = 1 WHERE job_id = ?1 AND seq <= ?2 AND delivered = 0",
            params![job_id, through],
        )?)
    }

    /// Events with a sequence number above `after`, in order, at most `limit`.
    pub fn events_after(&self, after: i64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at, job_id, kind, data FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after, limit as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
            ))
        })?;
        let mut out = vec![];
        for row in rows {
            let (seq, at, job_id, kind, data) = row?;
            let data = serde_json::from_str(&data).map_err(|_| StoreError::Corrupt {
                what: "event",
                job_id: job_id.clone(),
            })?;
            out.push(EventRecord {
                seq,
                at,
                job_id,
                kind,
                data,
            });
        }
        Ok(out)
    }

    pub fn last_event_seq(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM events", [], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::report::ReportState;
    use crate::jobs::state::{ExitKind, StopReason};

    fn spec(ticket: &str) -> JobSpec {
        JobSpec {
            ticket: ticket.into(),
            team: "core".into(),
            profile: "default".into(),
            rule_sets: vec![],
            tunnel_hosts: vec![],
            variables: Default::default(),
            task: "t".into(),
            deadline_secs: 10,
            command: None,
        }
    }

    fn insert(store: &Store, key: &str, hash: &str, id: &str, s: &JobSpec) -> Inserted {
        let p = Path::new("/x");
        store
            .insert_job(
                key,
                hash,
                NewJob {
                    id,
                    spec: s,
                    now: 1000,
                    work_dir: p,
                    stdout_log: p,
                    stderr_log: p,
                },
            )
            .unwrap()
            .0
    }

    #[test]
    fn idempotent_insert_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        let s = spec("tkt_a");
        assert!(
            matches!(insert(&store, "k1", "h", "job_1", &s), Inserted::Created(j) if j.deadline_at == 11_000)
        );
        assert!(
            matches!(insert(&store, "k1", "h", "job_2", &s), Inserted::Replayed(j) if j.id == "job_1")
        );
        assert!(
            matches!(insert(&store, "k1", "h2", "job_2", &s), Inserted::KeyConflict { job_id } if job_id == "job_1")
        );
        assert!(
            matches!(insert(&store, "k2", "h", "job_2", &s), Inserted::TicketBusy { job_id } if job_id == "job_1")
        );
        store
            .transition("job_1", JobEvent::Started, 1100, Some((42, 7)), None, None)
            .unwrap();
        let exit = ExitStatus {
            code: Some(0),
            signal: None,
        };
        let (job, _) = store
            .transition(
                "job_1",
                JobEvent::Exited(ExitKind::Success),
                1200,
                None,
                Some(exit),
                None,
            )
            .unwrap();
        assert_eq!(job.state, JobState::Done);
        // A final state takes no further event.
        assert!(store
            .transition(
                "job_1",
                JobEvent::Stopped(StopReason::Cancel),
                1300,
                None,
                None,
                None
            )
            .is_err());
        drop(store);
        let store = Store::open(&path).unwrap();
        let job = store.job("job_1").unwrap().unwrap();
        assert_eq!(job.state, JobState::Done);
        assert_eq!(job.process, Some((42, 7)));
        assert_eq!(job.exit, Some(exit));
        assert_eq!(store.job("job_9").unwrap(), None);
        // The ticket is free again.
        assert!(matches!(
            insert(&store, "k2", "h", "job_2", &s),
            Inserted::Created(_)
        ));
        let events = store.events_after(0, 100).unwrap();
        let states: Vec<_> = events.iter().map(|e| e.data["state"].clone()).collect();
        assert_eq!(states, ["queued", "running", "done", "queued"]);
        assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
        assert_eq!(
            store.events_after(events[1].seq, 1).unwrap()[0].seq,
            events[2].seq
        );
    }

    #[test]
    fn reports_and_inbox() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        insert(&store, "k", "h", "job_1", &spec("tkt_a"));
        assert_eq!(store.latest_report("job_1").unwrap(), None);
        let r = Report {
            state: ReportState::Working,
            summary: "s".into(),
            question: None,
            answers: None,
            links: vec![],
        };
        store.add_report("job_1", &r, 5).unwrap();
        let r2 = Report {
            state: ReportState::Ready,
            ..r
        };
        store.add_report("job_1", &r2, 6).unwrap();
        assert_eq!(store.latest_report("job_1").unwrap().unwrap().report, r2);
        assert!(store.add_report("job_nope", &r2, 6).is_err());
        let m = InboxMessage {
            text: "hi".into(),
            trigger: None,
        };
        let first = store.push_inbox("job_1", &m, 7).unwrap();
        let second = store.push_inbox("job_1", &m, 8).unwrap();
        // Read, not yet acknowledged: read again (at least once).
        assert_eq!(store.pending_inbox("job_1").unwrap().len(), 2);
        assert_eq!(store.pending_inbox("job_1").unwrap().len(), 2);
        // Acknowledging the first leaves the second.
        assert_eq!(store.ack_inbox("job_1", first).unwrap(), 1);
        let left = store.pending_inbox("job_1").unwrap();
        assert_eq!((left.len(), left[0].seq), (1, second));
        assert_eq!(store.ack_inbox("job_1", second).unwrap(), 1);
        assert!(store.pending_inbox("job_1").unwrap().is_empty());
        assert_eq!(store.ack_inbox("job_1", second).unwrap(), 0);
        // Another job's acknowledgement never touches this job's messages.
        insert(&store, "k2", "h2", "job_2", &spec("tkt_b"));
        let third = store.push_inbox("job_1", &m, 9).unwrap();
        assert_eq!(store.ack_inbox("job_2", third).unwrap(), 0);
        assert_eq!(store.pending_inbox("job_1").unwrap()[0].at, 9);
        // Survives reopening until acknowledged.
        drop(store);
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        assert_eq!(store.pending_inbox("job_1").unwrap()[0].seq, third);
    }
}
