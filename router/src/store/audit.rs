//! What `gatehouse audit` reads of the router's state: the reply log with
//! each entry's outbox state, in pages by log position (keyset paging, so
//! a reader holds one page at a time however long the log is).

use rusqlite::params;

use super::codec::{enum_from, from_sql_u64, not_found, sql_u64};
use super::reads::Reader;
use super::{OutboxState, Result};
use crate::id::{ReplyId, TicketId};
use crate::reply::Purpose;
use crate::trigger::Source;

/// A reply-log entry with what the outbox knows of its sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedReply {
    /// Position in the reply log (pass back as `after` for the next page).
    pub seq: u64,
    pub reply: ReplyId,
    pub ticket: TicketId,
    pub thread_key: String,
    pub purpose: Purpose,
    pub platform: Source,
    /// The platform's id of the message replied to.
    pub target_message: String,
    pub text: String,
    /// When it was logged (ms).
    pub at: u64,
    /// `None`: logged but never queued for sending.
    pub outbox: Option<OutboxState>,
    /// The platform's id of the posted message, once sent.
    pub platform_message_id: Option<String>,
}

impl Reader<'_> {
    /// Up to `limit` reply-log entries after position `after`, logged at or
    /// after `from_ms`, in log order.
    pub fn logged_replies(
        &self,
        after: u64,
        from_ms: u64,
        limit: usize,
    ) -> Result<Vec<LoggedReply>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT r.seq, r.id, r.ticket_id, r.thread_key, r.purpose, r.platform,
                    r.target_message, r.text, r.at, o.state, o.platform_message_id
             FROM replies r LEFT JOIN live_outbox o ON o.reply_id = r.id
             WHERE r.seq > ?1 AND r.at >= ?2 ORDER BY r.seq LIMIT ?3",
        )?;
        type Row = (i64, [String; 7], i64, Option<String>, Option<String>);
        let rows: Vec<Row> = stmt
            .query_map(
                params![
                    sql_u64(after),
                    sql_u64(from_ms),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok((
                        r.get(0)?,
                        [
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
                    ))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(
                |(
                    seq,
                    [id, ticket, thread_key, purpose, platform, target, text],
                    at,
                    state,
                    mid,
                )| {
                    Ok(LoggedReply {
                        seq: from_sql_u64(seq),
                        reply: ReplyId::parse(&id).ok_or_else(|| not_found("reply", &id))?,
                        ticket: TicketId::parse(&ticket)
                            .ok_or_else(|| not_found("ticket", &ticket))?,
                        thread_key,
                        purpose: enum_from("purpose", &purpose)?,
                        platform: enum_from("platform", &platform)?,
                        target_message: target,
                        text,
                        at: from_sql_u64(at),
                        outbox: state.map(|s| enum_from("outbox state", &s)).transpose()?,
                        platform_message_id: mid,
                    })
                },
            )
            .collect()
    }
}
