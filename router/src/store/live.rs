//! The live loop's durable work (schema 5): cursors, jobs per ticket
//! generation, pass-throughs to forward, planned steps, and the outbox
//! over the reply log. Each write runs in the transaction of the decision
//! or event that caused it, so a crash leaves both or neither.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::codec::{enum_from, enum_str, from_sql_u64, sql_u64};
use super::reads::Reader;
use super::writes::Tx;
use super::{Result, StoreError};
use crate::id::{ReplyId, TicketId, TriggerId};
use crate::reply::Purpose;
use crate::trigger::Source;

/// Where a ticket generation's job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStage {
    /// Wanted; not yet accepted by the supervisor.
    Wanted,
    /// The supervisor accepted it (`job_id`).
    Submitted,
    /// Not submitted: the ticket ended first, or the supervisor refused it.
    Skipped,
}

/// One job per ticket generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveJob {
    pub ticket: TicketId,
    /// The trigger that opened or resumed the ticket.
    pub generation: TriggerId,
    pub stage: JobStage,
    pub job_id: Option<String>,
    /// A cancel is wanted (`Some(false)`) or was sent (`Some(true)`).
    pub cancel: Option<bool>,
    /// The supervisor's final state for the job, once seen.
    pub job_state: Option<String>,
    /// How many times the generation's job was started again after it was
    /// lost with the supervisor (0: the first job).
    pub attempt: u32,
}

/// Where an outbox entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxState {
    /// Not sent (or sent and certainly refused); due at `next_at`.
    Pending,
    /// A send began and its outcome is not known (a crash or a timeout
    /// after the request left): look before sending again.
    Unknown,
    Sent,
    /// Given up; `error` says why.
    Failed,
}

/// An outbox entry with what sending it needs from the reply log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    pub reply: ReplyId,
    pub ticket: TicketId,
    pub thread_key: String,
    pub purpose: Purpose,
    pub platform: Source,
    /// The platform's id of the message replied to.
    pub target_message: String,
    pub text: String,
    pub state: OutboxState,
    pub attempts: u32,
    pub platform_message_id: Option<String>,
    pub error: Option<String>,
    pub next_at: u64,
}

/// An outbox entry's new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxUpdate {
    pub state: OutboxState,
    pub attempts: u32,
    pub platform_message_id: Option<String>,
    pub error: Option<String>,
    pub next_at: u64,
}

fn ticket_id(s: &str) -> Result<TicketId> {
    TicketId::parse(s).ok_or_else(|| bad_id("ticket", s))
}

fn trigger_id(s: &str) -> Result<TriggerId> {
    TriggerId::parse(s).ok_or_else(|| bad_id("trigger", s))
}

fn bad_id(kind: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        id: id.to_owned(),
    }
}

/// An outbox entry's reply (`r`) is the first of its thread still to be
/// sent: a thread's replies reach people in the order they were logged. A
/// later one never overtakes an earlier one that waits for a rate limit, a
/// backoff or a look for its marker (an ack held by a 429 and the result
/// queued behind it go out ack first); a failed one no longer holds the
/// rest. Computed once from the entries waiting (`live_outbox_due`), not
/// per candidate: an outage's backlog costs one scan of it a pass.
const FIRST_OF_THREAD: &str = "r.seq IN (
    SELECT min(f.seq) FROM live_outbox w CROSS JOIN replies f ON f.id = w.reply_id
    WHERE w.state IN ('pending', 'unknown') GROUP BY f.thread_key)";

const JOB_COLUMNS: &str = "ticket_id, generation, state, job_id, cancel, job_state, attempt";

type JobRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
);

fn job_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

fn job_from(
    (ticket, generation, stage, job_id, cancel, job_state, attempt): JobRow,
) -> Result<LiveJob> {
    Ok(LiveJob {
        ticket: ticket_id(&ticket)?,
        generation: trigger_id(&generation)?,
        stage: enum_from("job stage", &stage)?,
        job_id,
        cancel: cancel.map(|c| c == "sent"),
        job_state,
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
    })
}

// === impl Reader ===

impl Reader<'_> {
    /// A cursor of the live loop (0 before its first step).
    pub fn live_cursor(&self, name: &str) -> Result<u64> {
        let v: Option<i64> = self
            .conn
            .prepare_cached("SELECT value FROM live_cursors WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?;
        Ok(v.map_or(0, from_sql_u64))
    }

    /// Decisions after `seq`, oldest first: (seq, JSON body).
    pub fn decisions_after(&self, seq: u64, limit: usize) -> Result<Vec<(u64, String)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, body FROM decisions WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(params![sql_u64(seq), limit_sql(limit)], |r| {
                Ok((from_sql_u64(r.get(0)?), r.get(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Jobs wanted and not yet submitted, oldest first.
    pub fn wanted_jobs(&self, limit: usize) -> Result<Vec<LiveJob>> {
        self.jobs_where(
            "state = 'wanted' ORDER BY created_at, ticket_id LIMIT ?1",
            limit,
        )
    }

    /// Submitted jobs whose cancel is wanted and not yet sent.
    pub fn cancels_wanted(&self, limit: usize) -> Result<Vec<LiveJob>> {
        self.jobs_where(
            "cancel = 'wanted' AND job_id IS NOT NULL ORDER BY created_at LIMIT ?1",
            limit,
        )
    }

    fn jobs_where(&self, clause: &str, limit: usize) -> Result<Vec<LiveJob>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {JOB_COLUMNS} FROM live_jobs WHERE {clause}"
        ))?;
        let rows = stmt
            .query_map([limit_sql(limit)], job_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().map(job_from).collect()
    }

    /// The job the supervisor knows as `job_id`, if the loop submitted it.
    pub fn live_job_by_id(&self, job_id: &str) -> Result<Option<LiveJob>> {
        let row = self
            .conn
            .prepare_cached(&format!(
                "SELECT {JOB_COLUMNS} FROM live_jobs WHERE job_id = ?1"
            ))?
            .query_row([job_id], job_row)
            .optional()?;
        row.map(job_from).transpose()
    }

    /// The ticket's current generation's job (the latest generation).
    pub fn current_live_job(&self, ticket: &TicketId) -> Result<Option<LiveJob>> {
        let row = self
            .conn
            .prepare_cached(&format!(
                "SELECT {JOB_COLUMNS} FROM live_jobs WHERE ticket_id = ?1 ORDER BY generation DESC LIMIT 1"
            ))?
            .query_row([ticket.as_str()], job_row)
            .optional()?;
        row.map(job_from).transpose()
    }

    /// Every job of the loop, oldest first (tests, inspection).
    pub fn live_jobs(&self) -> Result<Vec<LiveJob>> {
        self.jobs_where(
            "1 = 1 ORDER BY created_at, ticket_id, generation LIMIT ?1",
            usize::MAX,
        )
    }

    /// Pass-throughs not yet forwarded: (trigger, ticket), oldest first.
    pub fn pending_forwards(&self, limit: usize) -> Result<Vec<(TriggerId, TicketId)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT trigger_id, ticket_id FROM live_forwards WHERE state = 'pending'
             ORDER BY trigger_id LIMIT ?1",
        )?;
        let rows = stmt
            .query_map([limit_sql(limit)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.iter()
            .map(|(trg, tkt)| Ok((trigger_id(trg)?, ticket_id(tkt)?)))
            .collect()
    }

    /// A forward's state (`pending`, `forwarded`, `dropped`), if planned.
    pub fn forward_state(&self, trigger: &TriggerId) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT state FROM live_forwards WHERE trigger_id = ?1")?
            .query_row([trigger.as_str()], |r| r.get(0))
            .optional()?)
    }

    /// Steps planned and not yet decided: (seq, JSON), oldest first.
    pub fn pending_steps(&self, limit: usize) -> Result<Vec<(u64, String)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, step FROM live_steps WHERE done_at IS NULL ORDER BY seq LIMIT ?1",
        )?;
        let rows = stmt
            .query_map([limit_sql(limit)], |r| {
                Ok((from_sql_u64(r.get(0)?), r.get(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Has a `result` reply been logged for the ticket at or after `since`?
    pub fn result_logged_since(&self, ticket: &TicketId, since: u64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM replies WHERE ticket_id = ?1 AND purpose = 'result' AND at >= ?2)",
            )?
            .query_row(params![ticket.as_str(), sql_u64(since)], |r| r.get(0))?)
    }

    /// Outbox entries due at `now` (pending or unknown), oldest first; an
    /// entry waits while an earlier one of its thread is still to be sent
    /// ([`FIRST_OF_THREAD`]).
    pub fn due_outbox(&self, now: u64, limit: usize) -> Result<Vec<OutboxItem>> {
        self.outbox_where(
            &format!(
                "o.state IN ('pending', 'unknown') AND o.next_at <= ?1 AND {FIRST_OF_THREAD}
                 ORDER BY r.seq LIMIT ?2"
            ),
            params![sql_u64(now), limit_sql(limit)],
        )
    }

    /// The whole outbox, in reply-log order.
    pub fn outbox(&self) -> Result<Vec<OutboxItem>> {
        self.outbox_where("1 = 1 ORDER BY r.seq", params![])
    }

    /// The earliest time an entry is due, if any is waiting.
    pub fn next_outbox_due(&self) -> Result<Option<u64>> {
        let v: Option<i64> = self
            .conn
            .prepare_cached(&format!(
                "SELECT min(o.next_at) FROM live_outbox o JOIN replies r ON r.id = o.reply_id
                 WHERE o.state IN ('pending', 'unknown') AND {FIRST_OF_THREAD}"
            ))?
            .query_row([], |r| r.get(0))?;
        Ok(v.map(from_sql_u64))
    }

    fn outbox_where(&self, clause: &str, p: impl rusqlite::Params) -> Result<Vec<OutboxItem>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT r.id, r.ticket_id, r.thread_key, r.purpose, r.platform, r.target_message, r.text,
                    o.state, o.attempts, o.platform_message_id, o.error, o.next_at
             FROM live_outbox o JOIN replies r ON r.id = o.reply_id WHERE {clause}"
        ))?;
        type Row = ([String; 8], i64, Option<String>, Option<String>, i64);
        let rows: Vec<Row> = stmt
            .query_map(p, |r| {
                Ok((
                    [
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ],
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                    r.get(11)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(
                |(
                    [id, ticket, thread_key, purpose, platform, target, text, state],
                    attempts,
                    mid,
                    error,
                    next_at,
                )| {
                    Ok(OutboxItem {
                        reply: ReplyId::parse(&id).ok_or_else(|| bad_id("reply", &id))?,
                        ticket: ticket_id(&ticket)?,
                        thread_key,
                        purpose: enum_from("purpose", &purpose)?,
                        platform: enum_from("platform", &platform)?,
                        target_message: target,
                        text,
                        state: enum_from("outbox state", &state)?,
                        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                        platform_message_id: mid,
                        error,
                        next_at: from_sql_u64(next_at),
                    })
                },
            )
            .collect()
    }
}

fn limit_sql(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

// === impl Tx ===

impl Tx<'_> {
    pub fn set_live_cursor(&mut self, name: &str, value: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO live_cursors (name, value) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![name, sql_u64(value)])?;
        Ok(())
    }

    /// A job is wanted for this ticket generation (once: a second call is a no-op).
    pub fn want_job(&mut self, ticket: &TicketId, generation: &TriggerId, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO live_jobs (ticket_id, generation, state, created_at, updated_at)
                 VALUES (?1, ?2, 'wanted', ?3, ?3)",
            )?
            .execute(params![ticket.as_str(), generation.as_str(), sql_u64(now)])?;
        Ok(())
    }

    /// The generation's job was accepted (`job_id`) or will not be (`None`: skipped).
    pub fn set_job_submitted(
        &mut self,
        ticket: &TicketId,
        generation: &TriggerId,
        job_id: Option<&str>,
        now: u64,
    ) -> Result<()> {
        let stage = enum_str(
            "job stage",
            &if job_id.is_some() {
                JobStage::Submitted
            } else {
                JobStage::Skipped
            },
        )?;
        self.tx
            .prepare_cached(
                "UPDATE live_jobs SET state = ?3, job_id = ?4, updated_at = ?5
                 WHERE ticket_id = ?1 AND generation = ?2",
            )?
            .execute(params![
                ticket.as_str(),
                generation.as_str(),
                stage,
                job_id,
                sql_u64(now)
            ])?;
        Ok(())
    }

    /// The supervisor reported the job's final state.
    pub fn set_job_ended(&mut self, job_id: &str, job_state: &str, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE live_jobs SET job_state = ?2, updated_at = ?3 WHERE job_id = ?1",
            )?
            .execute(params![job_id, job_state, sql_u64(now)])?;
        Ok(())
    }

    /// The job `job_id` was lost (the supervisor restarted and ended it):
    /// its generation wants a new one, attempt `attempt`. The lost job's id
    /// is forgotten, so a late event about it speaks for nobody.
    pub fn retry_lost_job(&mut self, job_id: &str, attempt: u32, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE live_jobs SET state = 'wanted', job_id = NULL, job_state = NULL,
                     cancel = NULL, attempt = ?2, updated_at = ?3
                 WHERE job_id = ?1",
            )?
            .execute(params![job_id, i64::from(attempt), sql_u64(now)])?;
        Ok(())
    }

    /// Every job of the ticket that may still run is to be cancelled.
    pub fn want_cancel(&mut self, ticket: &TicketId, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE live_jobs SET cancel = 'wanted', updated_at = ?2
                 WHERE ticket_id = ?1 AND cancel IS NULL AND job_state IS NULL AND state <> 'skipped'",
            )?
            .execute(params![ticket.as_str(), sql_u64(now)])?;
        Ok(())
    }

    /// The cancel was sent (or is moot: the job had ended).
    pub fn set_cancel_sent(&mut self, job_id: &str, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE live_jobs SET cancel = 'sent', updated_at = ?2 WHERE job_id = ?1",
            )?
            .execute(params![job_id, sql_u64(now)])?;
        Ok(())
    }

    /// A pass-through to forward to the ticket's job (once).
    pub fn want_forward(&mut self, trigger: &TriggerId, ticket: &TicketId, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO live_forwards (trigger_id, ticket_id, state, updated_at)
                 VALUES (?1, ?2, 'pending', ?3)",
            )?
            .execute(params![trigger.as_str(), ticket.as_str(), sql_u64(now)])?;
        Ok(())
    }

    /// `forwarded`, or `dropped` (the job had ended; nobody to read it).
    pub fn set_forward(&mut self, trigger: &TriggerId, state: &str, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE live_forwards SET state = ?2, updated_at = ?3 WHERE trigger_id = ?1",
            )?
            .execute(params![trigger.as_str(), state, sql_u64(now)])?;
        Ok(())
    }

    /// Plans a step (JSON) for the ticket.
    pub fn push_live_step(&mut self, ticket: &TicketId, step: &str, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO live_steps (ticket_id, step, planned_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![ticket.as_str(), step, sql_u64(now)])?;
        Ok(())
    }

    pub fn set_live_step_done(&mut self, seq: u64, now: u64) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE live_steps SET done_at = ?2 WHERE seq = ?1")?
            .execute(params![sql_u64(seq), sql_u64(now)])?;
        Ok(())
    }

    /// Queues a logged reply for sending, due now.
    pub fn queue_reply(&mut self, reply: &ReplyId, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT OR IGNORE INTO live_outbox (reply_id, state, attempts, next_at, updated_at)
                 VALUES (?1, 'pending', 0, ?2, ?2)",
            )?
            .execute(params![reply.as_str(), sql_u64(now)])?;
        Ok(())
    }

    pub fn update_outbox(&mut self, reply: &ReplyId, u: &OutboxUpdate, now: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE live_outbox SET state = ?2, attempts = ?3, platform_message_id = ?4,
                        error = ?5, next_at = ?6, updated_at = ?7 WHERE reply_id = ?1",
            )?
            .execute(params![
                reply.as_str(),
                enum_str("outbox state", &u.state)?,
                i64::from(u.attempts),
                u.platform_message_id,
                u.error,
                sql_u64(u.next_at),
                sql_u64(now)
            ])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
