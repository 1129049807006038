//! How values are written to and read from rows: integers, JSON, enum
//! names, ticket and thread rows, and cursors.

use rusqlite::Row;
use serde::{Deserialize, Serialize};

use super::{Result, StoreError, ThreadRecord};
use crate::id::{ThreadId, TicketId, TriggerId};
use crate::json;
use crate::ticket::{Outcome, Ticket, TicketState};

pub(super) fn sql_u64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn from_sql_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn to_json<T: Serialize>(what: &'static str, v: &T) -> Result<String> {
    Ok(json::encode(what, v)?)
}

pub(super) fn from_json<T: for<'de> Deserialize<'de>>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|source| StoreError::Corrupt { what, source })
}

/// Enum values stored as their serde names.
pub(super) fn enum_str<T: Serialize>(what: &'static str, v: &T) -> Result<String> {
    Ok(json::encode_name(what, v)?)
}

pub(super) fn enum_from<T: for<'de> Deserialize<'de>>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|source| StoreError::Corrupt { what, source })
}

pub(super) const TICKET_COLUMNS: &str =
    "id, thread_id, thread_key, state, outcome, mandate, latest_report, opened_at, updated_at";

pub(super) fn ticket_from_row(r: &Row<'_>) -> rusqlite::Result<[Option<String>; 7]> {
    Ok([
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ])
}

pub(super) fn not_found(kind: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        id: id.to_owned(),
    }
}

pub(super) fn thread_from_row(r: &Row<'_>) -> rusqlite::Result<ThreadRecord> {
    let id: String = r.get(0)?;
    Ok(ThreadRecord {
        id: ThreadId::parse(&id).ok_or(rusqlite::Error::InvalidColumnName(id))?,
        key: r.get(1)?,
        created_at: from_sql_u64(r.get(2)?),
    })
}

pub(super) fn decode_ticket(
    cols: [Option<String>; 7],
    opened: i64,
    updated: i64,
) -> Result<Ticket> {
    let [id, thread, thread_key, state, outcome, mandate, report] = cols;
    let id = id.unwrap_or_default();
    let thread = thread.unwrap_or_default();
    Ok(Ticket {
        id: TicketId::parse(&id).ok_or_else(|| not_found("ticket", &id))?,
        thread: ThreadId::parse(&thread).ok_or_else(|| not_found("thread", &thread))?,
        thread_key: thread_key.unwrap_or_default(),
        state: enum_from::<TicketState>("ticket state", &state.unwrap_or_default())?,
        outcome: outcome
            .map(|o| enum_from::<Outcome>("ticket outcome", &o))
            .transpose()?,
        mandate: from_json("mandate", &mandate.unwrap_or_default())?,
        latest_report: report.map(|r| from_json("report", &r)).transpose()?,
        opened_at: from_sql_u64(opened),
        updated_at: from_sql_u64(updated),
    })
}

pub(super) const CURSOR_PREFIX: &str = "cur_";
pub(super) const CURSOR_START: &str = "start";

/// A cursor names the last trigger listed (or the start of the thread).
pub(super) fn format_cursor(after: &str) -> String {
    if after.is_empty() {
        format!("{CURSOR_PREFIX}{CURSOR_START}")
    } else {
        format!("{CURSOR_PREFIX}{after}")
    }
}

pub(super) fn parse_cursor(c: &str) -> Result<String> {
    match c.strip_prefix(CURSOR_PREFIX) {
        Some(CURSOR_START) => Ok(String::new()),
        Some(id) if TriggerId::parse(id).is_some() => Ok(id.to_owned()),
        _ => Err(StoreError::BadCursor(c.to_owned())),
    }
}
