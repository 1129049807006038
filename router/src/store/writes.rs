//! Writes: everything one decision's transaction stores.

use rusqlite::{params, Connection};
use sha2::{Digest, Sha256};

use super::cache::Cache;
use super::codec::*;
use super::reads::Reader;
use super::{ReplyRecord, Result, ThreadRecord};
use crate::id::{IdClock, IdKind, ThreadId, TicketId, TriggerId};
use crate::policy::PolicyVersion;
use crate::reply::TriggerRecord;
use crate::ticket::{Report, Ticket};
use crate::trigger::summarize;

// === impl Tx ===

/// One decision's transaction.
pub struct Tx<'c> {
    pub(super) tx: &'c Connection,
    pub(super) clock: &'c mut IdClock,
    pub(super) cache: &'c mut Cache,
}

impl Tx<'_> {
    pub fn read(&self) -> Reader<'_> {
        Reader { conn: self.tx }
    }

    /// Issues a new id. The caller stores it in this transaction; that is
    /// what keeps it from being issued again after a restart.
    pub fn issue<K: IdKind>(&mut self, now: u64) -> Result<K> {
        Ok(self.clock.issue(now))
    }

    /// The thread with this key, created if new.
    pub fn ensure_thread(&mut self, key: &str, now: u64) -> Result<ThreadRecord> {
        if let Some(t) = self.cache.threads.get(key) {
            return Ok(t.clone());
        }
        if let Some(t) = self.read().thread_by_key(key)? {
            self.cache.remember_thread(&t);
            return Ok(t);
        }
        let id: ThreadId = self.issue(now)?;
        self.tx
            .prepare_cached("INSERT INTO threads (id, key, created_at) VALUES (?1, ?2, ?3)")?
            .execute(params![id.as_str(), key, sql_u64(now)])?;
        let t = ThreadRecord {
            id,
            key: key.to_owned(),
            created_at: now,
        };
        self.cache.remember_thread(&t);
        // A new thread has no ticket yet.
        self.cache.remember_latest(&t.id, None);
        Ok(t)
    }

    /// The thread's most recent ticket (see [`Reader::latest_ticket`]).
    pub fn latest_ticket(&mut self, thread: &ThreadId) -> Result<Option<Ticket>> {
        if let Some(t) = self.cache.latest.get(thread) {
            return Ok(t.clone());
        }
        let t = self.read().latest_ticket(thread)?;
        self.cache.remember_latest(thread, t.as_ref());
        Ok(t)
    }

    /// Creates a thread with a given id; for tests that build tickets by hand.
    #[cfg(test)]
    pub(crate) fn ensure_thread_with_id(
        &mut self,
        id: &ThreadId,
        key: &str,
        now: u64,
    ) -> Result<()> {
        self.tx
            .prepare_cached("INSERT INTO threads (id, key, created_at) VALUES (?1, ?2, ?3)")?
            .execute(params![id.as_str(), key, sql_u64(now)])?;
        Ok(())
    }

    /// Stores a trigger: its content once in `payloads`, its hot row with a
    /// summary and, when it went to a ticket's inbox, that ticket.
    pub fn insert_trigger(
        &mut self,
        record: &TriggerRecord,
        inbox: Option<&TicketId>,
    ) -> Result<()> {
        let body = to_json("trigger payload", &record.trigger.input)?;
        let hash = hex::encode(Sha256::digest(body.as_bytes()));
        self.tx
            .prepare_cached("INSERT INTO payloads (sha256, body) VALUES (?1, ?2)")?
            .execute(params![hash, body])?;
        let payload = self.tx.last_insert_rowid();
        let input = &record.trigger.input;
        self.tx
            .prepare_cached(
                "INSERT INTO triggers (id, thread_id, at, source, kind, sender_id, message_id,
                                       admission, summary, payload, ticket_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                record.trigger.id.as_str(),
                record.thread.as_str(),
                sql_u64(record.trigger.at),
                enum_str("source", &input.source)?,
                enum_str("kind", &input.kind)?,
                input.sender.id,
                input.message_id,
                to_json("admission", &record.admission)?,
                summarize(&input.text),
                payload,
                inbox.map(TicketId::as_str),
            ])?;
        Ok(())
    }

    pub fn insert_ticket(&mut self, t: &Ticket) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO tickets (id, thread_id, thread_key, state, outcome, mandate,
                                      latest_report, opened_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                t.id.as_str(),
                t.thread.as_str(),
                t.thread_key,
                t.state.as_str(),
                t.outcome
                    .map(|o| enum_str("ticket outcome", &o))
                    .transpose()?,
                to_json("mandate", &t.mandate)?,
                t.latest_report
                    .as_ref()
                    .map(|r| to_json("report", r))
                    .transpose()?,
                sql_u64(t.opened_at),
                sql_u64(t.updated_at),
            ])?;
        // Ticket ids grow, so the new ticket is its thread's latest.
        self.cache.remember_latest(&t.thread, Some(t));
        Ok(())
    }

    /// Writes a ticket's mutable fields; its id and thread never change.
    pub fn update_ticket(&mut self, t: &Ticket) -> Result<()> {
        let n = self
            .tx
            .prepare_cached(
                "UPDATE tickets SET state = ?2, outcome = ?3, mandate = ?4, latest_report = ?5,
                                    updated_at = ?6 WHERE id = ?1",
            )?
            .execute(params![
                t.id.as_str(),
                t.state.as_str(),
                t.outcome
                    .map(|o| enum_str("ticket outcome", &o))
                    .transpose()?,
                to_json("mandate", &t.mandate)?,
                t.latest_report
                    .as_ref()
                    .map(|r| to_json("report", r))
                    .transpose()?,
                sql_u64(t.updated_at),
            ])?;
        if n == 0 {
            return Err(not_found("ticket", t.id.as_str()));
        }
        // Read back from the table when next needed.
        self.cache.latest.remove(&t.thread);
        Ok(())
    }

    pub fn insert_report(&mut self, ticket: &TicketId, report: &Report, at: u64) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO reports (ticket_id, at, answers, body) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                ticket.as_str(),
                sql_u64(at),
                report.answers.as_ref().map(|a| a.as_str()),
                to_json("report", report)?,
            ])?;
        Ok(())
    }

    /// Marks every report of `ticket` so far as cleared (a resume): they stay
    /// on the record but authorise no reply any more.
    pub fn clear_reports(&mut self, ticket: &TicketId) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE reports SET cleared = 1 WHERE ticket_id = ?1")?
            .execute([ticket.as_str()])?;
        Ok(())
    }

    /// A note to the ticket's worker, placed in its inbox after every
    /// trigger issued so far (later triggers get larger ids).
    pub fn push_note(&mut self, ticket: &TicketId, note: &str, at: u64) -> Result<()> {
        let after = self.clock.last_issued::<TriggerId>();
        self.tx
            .prepare_cached(
                "INSERT INTO notes (ticket_id, after_trigger, body, at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                ticket.as_str(),
                after.as_ref().map_or("", TriggerId::as_str),
                note,
                sql_u64(at)
            ])?;
        Ok(())
    }

    /// Appends to the reply log; `text` is kept for the sender, its hash exported.
    pub fn insert_reply(&mut self, r: &ReplyRecord, text: &str) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO replies (id, ticket_id, thread_key, purpose, target_trigger, platform,
                                      target_message, text, text_sha256, words, at, writer)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                r.reply.as_str(),
                r.ticket.as_str(),
                r.thread_key,
                r.purpose.as_str(),
                r.target.trigger.as_str(),
                enum_str("platform", &r.target.platform)?,
                r.target.message_id,
                text,
                r.text_sha256,
                i64::try_from(r.words).unwrap_or(i64::MAX),
                sql_u64(r.at),
                r.writer.as_str(),
            ])?;
        Ok(())
    }

    /// Records a decision (JSON) in the decision log.
    pub fn insert_decision(&mut self, at: u64, body: &str) -> Result<()> {
        self.tx
            .prepare_cached("INSERT INTO decisions (at, body) VALUES (?1, ?2)")?
            .execute(params![sql_u64(at), body])?;
        Ok(())
    }

    pub fn insert_policy(&mut self, version: &PolicyVersion, at: u64, body: &str) -> Result<()> {
        self.tx
            .prepare_cached("INSERT INTO policies (version, loaded_at, body) VALUES (?1, ?2, ?3)")?
            .execute(params![version.0, sql_u64(at), body])?;
        Ok(())
    }
}
