//! Durable state in SQLite (WAL): jobs, idempotency keys, reports, inbox
//! messages and the event log. One connection behind a mutex: every write is
//! one short transaction, so event sequence numbers are assigned in commit
//! order and a reader's cursor never skips one.

use std::path::Path;
use std::sync::Mutex;

use gatehouse_types::wire::InboxDelivery;
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

use super::codec::{to_json, CodecError};
use super::report::{InboxMessage, Report};
use super::state::{admission, next_state, Admission, JobEvent, JobState, StateError};

mod records;
mod rows;

pub use records::{EventRecord, ExitStatus, Inserted, JobRecord, NewJob, StoredReport};
use rows::{append_event, decode, get_job, job_from_row, state_event, JOB_COLUMNS, SCHEMA};

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
    /// a value could not be encoded for storage
    #[error(transparent)]
    Codec(#[from] CodecError),
}

pub struct Store {
    conn: Mutex<Connection>,
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
        let spec_json = to_json("job spec", new.spec)?;
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
        carry_lost_inbox(&tx, new.id, &new.spec.ticket)?;
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
        let body = to_json("report", report)?;
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

    /// Queues a message for job `job_id`'s worker, if its inbox is open:
    /// the job is live, or it was lost ([`LOST_REASON`]) and its ticket has
    /// no later job yet (the message then goes to that job when it is
    /// created, [`carry_lost_inbox`]). Decided in the transaction that
    /// writes it, so a message never lands in an inbox nobody will carry.
    pub fn push_inbox(
        &self,
        job_id: &str,
        message: &InboxMessage,
        now: i64,
    ) -> Result<Pushed, StoreError> {
        let body = to_json("inbox message", message)?;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let job = get_job(&tx, job_id)?.ok_or_else(|| StoreError::NotFound(job_id.into()))?;
        let succeeded: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE ticket = ?1
                 AND rowid > (SELECT rowid FROM jobs WHERE id = ?2))",
            params![job.spec.ticket, job_id],
            |r| r.get(0),
        )?;
        if !inbox_open(job.state, job.end_reason.as_deref(), succeeded) {
            return Ok(Pushed::Closed(job.state));
        }
        tx.execute(
            "INSERT INTO inbox (job_id, at, body) VALUES (?1, ?2, ?3)",
            params![job_id, now, body],
        )?;
        let seq = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Pushed::Queued(seq))
    }

    /// The messages the worker has not acknowledged yet, oldest first. They
    /// stay until [`Store::ack_inbox`]: delivery is at least once, so a
    /// response lost on the way to the worker loses nothing.
    pub fn pending_inbox(&self, job_id: &str) -> Result<Vec<InboxDelivery>, StoreError> {
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
            out.push(InboxDelivery::new(seq, at, message));
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

/// Why a job ended when the supervisor restarted under it: it was lost, not
/// failed by its worker (the router starts its ticket's work again).
pub const LOST_REASON: &str = "supervisor_restarted";

/// `inbox.delivered` of a lost job's message handed on to its ticket's next
/// job (0: waiting for the worker, 1: acknowledged by it).
const CARRIED: i64 = 2;

/// What became of a message for a job's inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued under this sequence number.
    Queued(i64),
    /// The job ended (in this state) and nobody will read it.
    Closed(JobState),
}

/// Whether a job's inbox takes messages (pure): while it is live, and once
/// lost until its ticket has a later job.
pub fn inbox_open(state: JobState, end_reason: Option<&str>, succeeded: bool) -> bool {
    !state.is_final()
        || (state == JobState::Failed && end_reason == Some(LOST_REASON) && !succeeded)
}

/// A ticket's new job inherits, in their order, the messages its lost jobs'
/// workers had not acknowledged (nor those they had: no duplicate); each is
/// handed on once, marked [`CARRIED`] where it was.
fn carry_lost_inbox(
    tx: &rusqlite::Transaction<'_>,
    job_id: &str,
    ticket: &str,
) -> Result<usize, StoreError> {
    const LOST: &str = "SELECT id FROM jobs WHERE ticket = ?2 AND id <> ?1
                        AND state = 'failed' AND end_reason = ?3";
    let args = params![job_id, ticket, LOST_REASON];
    let carried = tx.execute(
        &format!(
            "INSERT INTO inbox (job_id, at, body)
             SELECT ?1, at, body FROM inbox WHERE delivered = 0 AND job_id IN ({LOST})
             ORDER BY seq"
        ),
        args,
    )?;
    tx.execute(
        &format!(
            "UPDATE inbox SET delivered = {CARRIED} WHERE delivered = 0 AND job_id IN ({LOST})"
        ),
        args,
    )?;
    if carried > 0 {
        tracing::info!(job = %job_id, %ticket, carried, "messages a lost job had not acknowledged go to the new one");
    }
    Ok(carried)
}

#[cfg(test)]
mod tests;
