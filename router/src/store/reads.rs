//! Reads: get-by-id, listings, the cursor over a thread's triggers, the
//! reply log and its export.

use std::io::Write;

use rusqlite::{params, Connection, OptionalExtension};

use super::codec::*;
use super::{
    InboxItem, Page, ReplyRecord, ReplyTarget, Result, StoreError, ThreadRecord, TriggerSummary,
};
use crate::id::{ReplyId, ThreadId, TicketId, TriggerId};
use crate::json;
use crate::policy::PolicyVersion;
use crate::reply::{ReplyHistory, TriggerRecord};
use crate::ticket::Ticket;
use crate::trigger::{Trigger, TriggerInput};

// === impl Reader ===

/// Queries that work both inside and outside a transaction.
pub struct Reader<'c> {
    pub(super) conn: &'c Connection,
}

impl Reader<'_> {
    fn ticket_row(&self, sql_where: &str, arg: &str) -> Result<Option<Ticket>> {
        let sql = format!("SELECT {TICKET_COLUMNS} FROM tickets WHERE {sql_where}");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let row = stmt
            .query_row([arg], |r| {
                Ok((
                    ticket_from_row(r)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, i64>(8)?,
                ))
            })
            .optional()?;
        row.map(|(cols, opened, updated)| decode_ticket(cols, opened, updated))
            .transpose()
    }

    /// The ticket with this id.
    pub fn ticket(&self, id: &TicketId) -> Result<Ticket> {
        self.ticket_row("id = ?1", id.as_str())?
            .ok_or_else(|| not_found("ticket", id.as_str()))
    }

    /// The thread's most recent ticket.
    pub fn latest_ticket(&self, thread: &ThreadId) -> Result<Option<Ticket>> {
        self.ticket_row("thread_id = ?1 ORDER BY id DESC LIMIT 1", thread.as_str())
    }

    /// Tickets in id (= opening) order.
    pub fn tickets(&self) -> Result<Vec<Ticket>> {
        let sql = format!("SELECT {TICKET_COLUMNS} FROM tickets ORDER BY id");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    ticket_from_row(r)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, i64>(8)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(cols, o, u)| decode_ticket(cols, o, u))
            .collect()
    }

    /// The thread with this id.
    pub fn thread(&self, id: &ThreadId) -> Result<ThreadRecord> {
        self.conn
            .prepare_cached("SELECT id, key, created_at FROM threads WHERE id = ?1")?
            .query_row([id.as_str()], thread_from_row)
            .optional()?
            .ok_or_else(|| not_found("thread", id.as_str()))
    }

    /// The thread with this key, if it exists.
    pub fn thread_by_key(&self, key: &str) -> Result<Option<ThreadRecord>> {
        Ok(self
            .conn
            .prepare_cached("SELECT id, key, created_at FROM threads WHERE key = ?1")?
            .query_row([key], thread_from_row)
            .optional()?)
    }

    /// The thread's tickets, oldest first.
    pub fn thread_tickets(&self, thread: &ThreadId) -> Result<Vec<TicketId>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM tickets WHERE thread_id = ?1 ORDER BY id")?;
        let ids = stmt
            .query_map([thread.as_str()], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(ids.iter().filter_map(|s| TicketId::parse(s)).collect())
    }

    /// The stored trigger with this id, with its thread and admission.
    pub fn trigger(&self, id: &TriggerId) -> Result<TriggerRecord> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT t.thread_id, t.at, t.admission, p.body FROM triggers t
                 JOIN payloads p ON p.id = t.payload WHERE t.id = ?1",
            )?
            .query_row([id.as_str()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .optional()?;
        let Some((thread, at, admission, body)) = row else {
            return Err(not_found("trigger", id.as_str()));
        };
        Ok(TriggerRecord {
            trigger: Trigger {
                id: id.clone(),
                at: from_sql_u64(at),
                input: from_json::<TriggerInput>("trigger payload", &body)?,
            },
            thread: ThreadId::parse(&thread).ok_or_else(|| not_found("thread", &thread))?,
            admission: from_json("admission", &admission)?,
        })
    }

    /// The thread's `limit` most recent triggers, oldest first, each with
    /// its content and admission (the judge's context for a candidate).
    pub fn recent_triggers(
        &self,
        thread: &ThreadId,
        limit: usize,
    ) -> Result<Vec<(TriggerId, TriggerInput, crate::gate::Admission)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT t.id, t.admission, p.body FROM triggers t JOIN payloads p ON p.id = t.payload
             WHERE t.thread_id = ?1 ORDER BY t.id DESC LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(
                params![thread.as_str(), i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, admission, body) in rows.into_iter().rev() {
            out.push((
                TriggerId::parse(&id).ok_or_else(|| not_found("trigger", &id))?,
                from_json::<TriggerInput>("trigger payload", &body)?,
                from_json("admission", &admission)?,
            ));
        }
        Ok(out)
    }

    /// Whether a report of the ticket's current generation (reports a resume
    /// cleared do not count) names `link` among its links.
    pub fn reported_link(&self, ticket: &TicketId, link: &str) -> Result<bool> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT body FROM reports WHERE ticket_id = ?1 AND cleared = 0")?;
        let bodies = stmt
            .query_map([ticket.as_str()], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for body in bodies {
            let report: crate::ticket::Report = from_json("report", &body)?;
            if report.links.iter().any(|l| l == link) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The ticket whose inbox the trigger went to, if any.
    pub fn trigger_inbox(&self, id: &TriggerId) -> Result<Option<TicketId>> {
        let row: Option<Option<String>> = self
            .conn
            .prepare_cached("SELECT ticket_id FROM triggers WHERE id = ?1")?
            .query_row([id.as_str()], |r| r.get(0))
            .optional()?;
        match row {
            None => Err(not_found("trigger", id.as_str())),
            Some(ticket) => Ok(ticket.as_deref().and_then(TicketId::parse)),
        }
    }

    /// Up to `limit` of the thread's triggers after `cursor` (from the start
    /// when `None`), oldest first.
    pub fn thread_triggers(
        &self,
        thread: &ThreadId,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page> {
        let after = match cursor {
            None => String::new(),
            Some(c) => parse_cursor(c)?,
        };
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, at, source, kind, sender_id, admission, summary FROM triggers
             WHERE thread_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(
                params![
                    thread.as_str(),
                    after,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, String>(6)?,
                    ))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut triggers = Vec::with_capacity(rows.len());
        for (id, at, source, kind, sender, admission, summary) in rows {
            triggers.push(TriggerSummary {
                id: TriggerId::parse(&id).ok_or_else(|| not_found("trigger", &id))?,
                at: from_sql_u64(at),
                source: enum_from("source", &source)?,
                kind: enum_from("kind", &kind)?,
                sender,
                admission: from_json("admission", &admission)?,
                summary,
            });
        }
        let next_cursor = match triggers.last() {
            Some(last) => format_cursor(last.id.as_str()),
            None => format_cursor(&after),
        };
        Ok(Page {
            triggers,
            next_cursor,
        })
    }

    /// What the reply log and the reports say about replies to `target`.
    pub fn reply_history(&self, ticket: &TicketId, target: &TriggerId) -> Result<ReplyHistory> {
        let count = |purpose: &str| -> Result<bool> {
            Ok(self
                .conn
                .prepare_cached(
                    "SELECT EXISTS(SELECT 1 FROM replies WHERE target_trigger = ?1 AND purpose = ?2)",
                )?
                .query_row([target.as_str(), purpose], |r| r.get::<_, bool>(0))?)
        };
        let reported = self
            .conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM reports WHERE ticket_id = ?1 AND answers = ?2 AND cleared = 0)",
            )?
            .query_row([ticket.as_str(), target.as_str()], |r| r.get::<_, bool>(0))?;
        Ok(ReplyHistory {
            target_acked: count("ack")?,
            target_answered: count("answer")?,
            target_reported_answered: reported,
        })
    }

    /// The reply log, oldest first.
    pub fn replies(&self) -> Result<Vec<ReplyRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, ticket_id, thread_key, purpose, platform, target_message, target_trigger,
                    text_sha256, words, at, writer FROM replies ORDER BY seq",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    [
                        r.get::<_, String>(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ],
                    r.get::<_, i64>(8)?,
                    r.get::<_, i64>(9)?,
                    r.get::<_, String>(10)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(
                |(
                    [id, ticket, thread_key, purpose, platform, message, trigger, hash],
                    words,
                    at,
                    writer,
                )| {
                    Ok(ReplyRecord {
                        reply: ReplyId::parse(&id).ok_or_else(|| not_found("reply", &id))?,
                        ticket: TicketId::parse(&ticket)
                            .ok_or_else(|| not_found("ticket", &ticket))?,
                        thread_key,
                        purpose: enum_from("purpose", &purpose)?,
                        target: ReplyTarget {
                            platform: enum_from("platform", &platform)?,
                            message_id: message,
                            trigger: TriggerId::parse(&trigger)
                                .ok_or_else(|| not_found("trigger", &trigger))?,
                        },
                        text_sha256: hash,
                        words: usize::try_from(words).unwrap_or(0),
                        at: from_sql_u64(at),
                        writer: enum_from("writer", &writer)?,
                    })
                },
            )
            .collect()
    }

    /// Writes the reply log as JSON lines.
    pub fn export_replies(&self, out: &mut dyn Write) -> Result<usize, ExportError> {
        let replies = self.replies()?;
        for r in &replies {
            let mut line = json::encode_bytes("reply record", r)?;
            line.push(b'\n');
            out.write_all(&line).map_err(ExportError::Write)?;
        }
        Ok(replies.len())
    }

    /// The ticket's inbox: triggers passed through and notes, oldest first.
    /// A note comes after the triggers up to its `after_trigger` and before
    /// later ones; notes after the same trigger keep their order.
    pub fn inbox(&self, ticket: &TicketId) -> Result<Vec<InboxItem>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, NULL, id AS pos, 0 AS n FROM triggers
               WHERE thread_id = (SELECT thread_id FROM tickets WHERE id = ?1) AND ticket_id = ?1
             UNION ALL
             SELECT NULL, body, after_trigger, seq FROM notes WHERE ticket_id = ?1
             ORDER BY pos, n",
        )?;
        let rows = stmt
            .query_map([ticket.as_str()], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows
            .into_iter()
            .filter_map(|(trigger, note)| match (trigger, note) {
                (Some(t), _) => TriggerId::parse(&t).map(InboxItem::Trigger),
                (None, Some(n)) => Some(InboxItem::Note(n)),
                (None, None) => None,
            })
            .collect())
    }

    /// The recorded decisions, oldest first, as JSON text.
    pub fn decisions(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT body FROM decisions ORDER BY seq")?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// The decision log with each decision's time (ms), oldest first.
    pub fn decision_log(&self) -> Result<Vec<(u64, String)>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT at, body FROM decisions ORDER BY seq")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((from_sql_u64(r.get(0)?), r.get::<_, String>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// The version of the most recently recorded policy.
    pub fn current_policy_version(&self) -> Result<Option<PolicyVersion>> {
        Ok(self
            .conn
            .prepare_cached("SELECT version FROM policies ORDER BY seq DESC LIMIT 1")?
            .query_row([], |r| r.get::<_, String>(0))
            .optional()?
            .map(PolicyVersion))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Encode(#[from] json::EncodeError),
    #[error("cannot write the export: {0}")]
    Write(std::io::Error),
}
