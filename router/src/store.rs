//! The durable store: SQLite (bundled) in WAL mode.
//!
//! Every decision is one transaction ([`Store::transaction`]): the id clock,
//! the trigger (with the ticket whose inbox it joins), the ticket change, a
//! note, the reply log entry and the decision record commit together or not
//! at all, so a crash (kill -9 included) leaves either the whole decision or
//! none of it.
//!
//! Contracts:
//! - ids never change and are never reused: every issued id is stored in the
//!   transaction that issued it, and on open the id clock resumes from the
//!   largest id of each kind in the database (ids embed their time and
//!   sequence), so a restart continues after the last committed id;
//! - get-by-id returns exactly that record; an unknown id is
//!   [`StoreError::NotFound`], never an empty success;
//! - a thread's triggers are listed by a cursor over their ids: ids are
//!   issued inside the write transaction from a clock that never goes back
//!   (and is reloaded when another connection has committed), so they grow
//!   in commit order and pages never skip or repeat, even while triggers
//!   arrive;
//! - a trigger's full content (text and raw payload) is stored once in
//!   `payloads` with its SHA-256, referenced by id; the hot row keeps a
//!   short summary;
//! - one live ticket per thread is a unique index, not a convention; so are
//!   "ack once" and "answer once" per message.

use std::io::Write;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::gate::Admission;
use crate::id::{IdClock, IdKind, ReplyId, ThreadId, TicketId, TriggerId};
use crate::policy::PolicyVersion;
use crate::reply::{Purpose, ReplyHistory, TriggerRecord};
use crate::ticket::{Outcome, Report, Ticket, TicketState};
use crate::trigger::{summarize, Source, Trigger, TriggerInput, TriggerKind};

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No record has this id.
    #[error("no {kind} with id `{id}`")]
    NotFound { kind: &'static str, id: String },
    /// A cursor that this store did not hand out.
    #[error("`{0}` is not a cursor of this store")]
    BadCursor(String),
    /// The database was written by a newer gatehouse.
    #[error("the database schema is version {found}, newer than this gatehouse knows ({known}); upgrade gatehouse")]
    SchemaTooNew { found: i64, known: i64 },
    /// A stored record does not decode; the database was changed outside gatehouse.
    #[error("stored {what} does not decode: {source}")]
    Corrupt {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The background checkpoint thread could not start.
    #[error("cannot start the WAL checkpoint thread: {0}")]
    Thread(std::io::Error),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// `synchronous=FULL`: every commit is on disk before it returns; survives
    /// power loss.
    Full,
    /// `synchronous=NORMAL` (WAL): every commit survives a crash or kill of
    /// the process; the last commits may be lost on power loss.
    #[default]
    Normal,
}

/// Migrations, in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE payloads (
    id INTEGER PRIMARY KEY,
    sha256 TEXT NOT NULL,
    body TEXT NOT NULL
) STRICT;
CREATE TABLE threads (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE triggers (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    at INTEGER NOT NULL,
    source TEXT NOT NULL,
    kind TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    admission TEXT NOT NULL,
    summary TEXT NOT NULL,
    payload INTEGER NOT NULL REFERENCES payloads(id)
) STRICT, WITHOUT ROWID;
CREATE INDEX triggers_by_thread ON triggers(thread_id, id);
CREATE TABLE tickets (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id),
    thread_key TEXT NOT NULL,
    state TEXT NOT NULL,
    outcome TEXT,
    mandate TEXT NOT NULL,
    latest_report TEXT,
    opened_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX one_live_ticket_per_thread ON tickets(thread_id) WHERE state <> 'ended';
CREATE INDEX tickets_by_thread ON tickets(thread_id, id);
CREATE TABLE reports (
    seq INTEGER PRIMARY KEY,
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    at INTEGER NOT NULL,
    answers TEXT,
    body TEXT NOT NULL
) STRICT;
CREATE INDEX reports_answering ON reports(ticket_id, answers) WHERE answers IS NOT NULL;
CREATE TABLE inbox (
    seq INTEGER PRIMARY KEY,
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    trigger_id TEXT REFERENCES triggers(id),
    note TEXT,
    at INTEGER NOT NULL,
    CHECK ((trigger_id IS NULL) <> (note IS NULL))
) STRICT;
CREATE INDEX inbox_by_ticket ON inbox(ticket_id, seq);
CREATE TABLE replies (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    thread_key TEXT NOT NULL,
    purpose TEXT NOT NULL,
    target_trigger TEXT NOT NULL REFERENCES triggers(id),
    platform TEXT NOT NULL,
    target_message TEXT NOT NULL,
    text TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    words INTEGER NOT NULL,
    at INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX ack_once ON replies(target_trigger) WHERE purpose = 'ack';
CREATE UNIQUE INDEX answer_once ON replies(target_trigger) WHERE purpose = 'answer';
CREATE TABLE decisions (
    seq INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    body TEXT NOT NULL
) STRICT;
CREATE TABLE policies (
    seq INTEGER PRIMARY KEY,
    version TEXT NOT NULL,
    loaded_at INTEGER NOT NULL,
    body TEXT NOT NULL
) STRICT;
"#,
    // 2: a trigger's row names the ticket whose inbox it went to, instead of
    // an inbox row and its index entry (two fewer B-tree pages written per
    // pass-through). Notes keep a table of their own; each records the last
    // trigger id issued before it, which places it among the triggers.
    r#"
ALTER TABLE triggers ADD COLUMN ticket_id TEXT REFERENCES tickets(id);
UPDATE triggers SET ticket_id = inbox.ticket_id
    FROM inbox WHERE inbox.trigger_id = triggers.id;
CREATE TABLE notes (
    seq INTEGER PRIMARY KEY,
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    after_trigger TEXT NOT NULL,
    body TEXT NOT NULL,
    at INTEGER NOT NULL
) STRICT;
CREATE INDEX notes_by_ticket ON notes(ticket_id, seq);
INSERT INTO notes (seq, ticket_id, after_trigger, body, at)
    SELECT seq, ticket_id,
           coalesce((SELECT max(earlier.trigger_id) FROM inbox earlier
                     WHERE earlier.ticket_id = inbox.ticket_id AND earlier.seq < inbox.seq), ''),
           note, at
    FROM inbox WHERE note IS NOT NULL;
DROP TABLE inbox;
"#,
];

/// A thread as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRecord {
    pub id: ThreadId,
    pub key: String,
    pub created_at: u64,
}

/// A trigger's hot row, for listings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerSummary {
    pub id: TriggerId,
    pub at: u64,
    pub source: Source,
    pub kind: TriggerKind,
    pub sender: String,
    pub admission: Admission,
    pub summary: String,
}

/// One page of a thread's triggers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub triggers: Vec<TriggerSummary>,
    /// Pass back to get the next page; present even on the last page, so
    /// that triggers arriving later are found from where this page ended.
    pub next_cursor: String,
}

/// The message a reply answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTarget {
    pub platform: Source,
    /// The platform's id of the message replied to.
    pub message_id: String,
    pub trigger: TriggerId,
}

/// One entry of the reply log, as exported (JSONL) for the audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyRecord {
    pub reply: ReplyId,
    pub ticket: TicketId,
    pub thread_key: String,
    pub purpose: Purpose,
    pub target: ReplyTarget,
    /// SHA-256 of the exact text, hex.
    pub text_sha256: String,
    pub words: usize,
    pub at: u64,
}

/// The SQLite store.
pub struct Store {
    // Declared first so that it stops before the main connection closes.
    checkpointer: Option<Checkpointer>,
    conn: Connection,
    clock: IdClock,
    /// `PRAGMA data_version` when the clock was last loaded; it changes when
    /// another connection commits, and then the clock is reloaded.
    data_version: i64,
    cache: Cache,
}

/// What the decision path would otherwise read back at every decision.
///
/// Threads never change once stored, so an entry stays true for good. A
/// thread's latest ticket changes only through writes: this store's own
/// (which update the cache in the same transaction) or another
/// connection's, which change `PRAGMA data_version` and empty the cache
/// before the next decision reads it. A rolled-back transaction empties it
/// too, so nothing it wrote survives here.
#[derive(Default)]
struct Cache {
    threads: std::collections::HashMap<String, ThreadRecord>,
    latest: std::collections::HashMap<ThreadId, Option<Ticket>>,
    /// Set while a transaction runs; still set at the next one when the
    /// last one unwound (a panic), whose writes were rolled back.
    in_transaction: bool,
}

/// Past this many entries a map is emptied rather than grown: the cache
/// only saves reads, so forgetting is always correct.
const CACHE_ENTRIES: usize = 1 << 16;

impl Cache {
    fn clear(&mut self) {
        self.threads.clear();
        self.latest.clear();
    }

    fn remember_thread(&mut self, t: &ThreadRecord) {
        if self.threads.len() >= CACHE_ENTRIES {
            self.threads.clear();
        }
        self.threads.insert(t.key.clone(), t.clone());
    }

    fn remember_latest(&mut self, thread: &ThreadId, ticket: Option<&Ticket>) {
        if self.latest.len() >= CACHE_ENTRIES {
            self.latest.clear();
        }
        self.latest.insert(thread.clone(), ticket.cloned());
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path` and migrates it.
    pub fn open(path: &Path, durability: Durability) -> Result<Self> {
        let mut store = Self::init(Connection::open(path)?, durability)?;
        store.checkpointer = Some(Checkpointer::start(path)?);
        Ok(store)
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?, Durability::Normal)
    }

    fn init(mut conn: Connection, durability: Durability) -> Result<Self> {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(
            None,
            "synchronous",
            match durability {
                Durability::Full => "FULL",
                Durability::Normal => "NORMAL",
            },
        )?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // The background checkpointer copies most of the WAL off the
        // decision path. A WAL only restarts after a checkpoint that no
        // writer overlapped, so under sustained load this autocheckpoint
        // (every 16 384 frames, 64 MiB) finishes the copy and the database
        // fsync in the writer: about one decision in 3 000 waits for it.
        // The page cache stays at SQLite's default (2 MiB): every commit
        // scans the cache's hash table (pcache1 truncate), and a 16 MiB cache
        // cost about 10% more CPU per decision in the benchmark.
        conn.pragma_update(None, "wal_autocheckpoint", 16384)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&mut conn)?;
        let clock = IdClock::from_rows(clock_rows(&conn)?);
        let data_version = conn.query_row("PRAGMA data_version", [], |r| r.get(0))?;
        Ok(Self {
            checkpointer: None,
            conn,
            clock,
            data_version,
            cache: Cache::default(),
        })
    }

    /// Runs `f` in one immediate transaction; commits if it returns `Ok`.
    pub fn transaction<T, E: From<StoreError>>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_>) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let Self {
            conn,
            clock,
            data_version,
            cache,
            ..
        } = self;
        let saved = (clock.clone(), *data_version);
        let result = (|| {
            if std::mem::replace(&mut cache.in_transaction, true) {
                // The last transaction unwound; what it cached was rolled back.
                cache.clear();
            }
            // BEGIN and COMMIT are prepared once and kept (rusqlite's
            // `Transaction` prepares them again at every decision).
            let tx = Open::begin(conn).map_err(StoreError::from)?;
            // Holding the write lock: if another connection committed since
            // the clock was loaded, its ids are in the tables; resume after them.
            let version: i64 = conn
                .prepare_cached("PRAGMA data_version")
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(StoreError::from)?;
            if version != *data_version {
                *clock = IdClock::from_rows(clock_rows(conn)?);
                *data_version = version;
                cache.clear();
            }
            let mut wrapped = Tx {
                tx: conn,
                clock,
                cache,
            };
            let value = f(&mut wrapped)?;
            tx.commit().map_err(StoreError::from)?;
            Ok(value)
        })();
        cache.in_transaction = false;
        if result.is_err() {
            // Ids issued in a rolled-back transaction were never stored; the
            // clock goes back to what the database holds, and the cache
            // forgets what the transaction wrote.
            (*clock, *data_version) = saved;
            cache.clear();
        }
        result
    }

    /// Read-only access outside a decision.
    pub fn read(&self) -> Reader<'_> {
        Reader { conn: &self.conn }
    }
}

/// An open `BEGIN IMMEDIATE` transaction; rolled back when dropped
/// uncommitted (an error or a panic in the decision).
struct Open<'c> {
    conn: &'c Connection,
    done: bool,
}

impl<'c> Open<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self { conn, done: false })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.done && !self.conn.is_autocommit() {
            if let Err(e) = self.conn.execute_batch("ROLLBACK") {
                tracing::warn!("rolling back a failed decision: {e}");
            }
        }
    }
}

/// Checkpoints the WAL from its own connection and thread every
/// [`CHECKPOINT_EVERY`], so that most checkpoint work happens off the
/// decision path (see the `wal_autocheckpoint` note in `Store::init`).
/// Checkpoints do not change what a commit guarantees; they only move
/// committed pages from the WAL into the database file.
struct Checkpointer {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Checkpointer {
    fn start(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gatehouse-wal-checkpoint".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    // PASSIVE never blocks the writer; a busy or failed
                    // checkpoint is retried on the next tick, and the
                    // writer's autocheckpoint is the backstop.
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!("WAL checkpoint: {e}");
                    }
                }
            })
            .map_err(StoreError::Thread)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let known = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > known {
        return Err(StoreError::SchemaTooNew {
            found: current,
            known,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        tx.execute_batch(sql)?;
        tx.pragma_update(
            None,
            "user_version",
            i64::try_from(i + 1).unwrap_or(i64::MAX),
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// The largest stored id of each kind, where the id clock resumes.
fn clock_rows(conn: &Connection) -> Result<Vec<(String, u64, u32)>> {
    let mut rows = Vec::new();
    for (prefix, table) in [
        (TriggerId::PREFIX, "triggers"),
        (ThreadId::PREFIX, "threads"),
        (TicketId::PREFIX, "tickets"),
        (ReplyId::PREFIX, "replies"),
    ] {
        let max: Option<String> = conn
            .prepare_cached(&format!("SELECT max(id) FROM {table}"))?
            .query_row([], |r| r.get(0))?;
        if let Some((ms, seq)) = max.as_deref().and_then(crate::id::position) {
            rows.push((prefix.to_owned(), ms, seq));
        }
    }
    Ok(rows)
}

fn sql_u64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_sql_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_json<T: Serialize>(v: &T) -> String {
    // The types stored here are plain data whose serialisation cannot fail.
    serde_json::to_string(v).unwrap_or_default()
}

fn from_json<T: for<'de> Deserialize<'de>>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|source| StoreError::Corrupt { what, source })
}

/// Enum values stored as their serde names.
fn enum_str<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn enum_from<T: for<'de> Deserialize<'de>>(what: &'static str, s: &str) -> Result<T> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|source| StoreError::Corrupt { what, source })
}

// === impl Reader ===

/// Queries that work both inside and outside a transaction.
pub struct Reader<'c> {
    conn: &'c Connection,
}

const TICKET_COLUMNS: &str =
    "id, thread_id, thread_key, state, outcome, mandate, latest_report, opened_at, updated_at";

fn ticket_from_row(r: &Row<'_>) -> rusqlite::Result<[Option<String>; 7]> {
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
                "SELECT EXISTS(SELECT 1 FROM reports WHERE ticket_id = ?1 AND answers = ?2)",
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
                    text_sha256, words, at FROM replies ORDER BY seq",
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
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(
                |(
                    [id, ticket, thread_key, purpose, platform, message, trigger, hash],
                    words,
                    at,
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
                    })
                },
            )
            .collect()
    }

    /// Writes the reply log as JSON lines.
    pub fn export_replies(&self, out: &mut dyn Write) -> Result<usize, ExportError> {
        let replies = self.replies()?;
        for r in &replies {
            let mut line = serde_json::to_vec(r).unwrap_or_default();
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

/// What a ticket's worker receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxItem {
    Trigger(TriggerId),
    Note(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write the export: {0}")]
    Write(std::io::Error),
}

fn not_found(kind: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        id: id.to_owned(),
    }
}

fn thread_from_row(r: &Row<'_>) -> rusqlite::Result<ThreadRecord> {
    let id: String = r.get(0)?;
    Ok(ThreadRecord {
        id: ThreadId::parse(&id).ok_or(rusqlite::Error::InvalidColumnName(id))?,
        key: r.get(1)?,
        created_at: from_sql_u64(r.get(2)?),
    })
}

fn decode_ticket(cols: [Option<String>; 7], opened: i64, updated: i64) -> Result<Ticket> {
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

const CURSOR_PREFIX: &str = "cur_";
const CURSOR_START: &str = "start";

/// A cursor names the last trigger listed (or the start of the thread).
fn format_cursor(after: &str) -> String {
    if after.is_empty() {
        format!("{CURSOR_PREFIX}{CURSOR_START}")
    } else {
        format!("{CURSOR_PREFIX}{after}")
    }
}

fn parse_cursor(c: &str) -> Result<String> {
    match c.strip_prefix(CURSOR_PREFIX) {
        Some(CURSOR_START) => Ok(String::new()),
        Some(id) if TriggerId::parse(id).is_some() => Ok(id.to_owned()),
        _ => Err(StoreError::BadCursor(c.to_owned())),
    }
}

// === impl Tx ===

/// One decision's transaction.
pub struct Tx<'c> {
    tx: &'c Connection,
    clock: &'c mut IdClock,
    cache: &'c mut Cache,
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
        let body = to_json(&record.trigger.input);
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
                enum_str(&input.source),
                enum_str(&input.kind),
                input.sender.id,
                input.message_id,
                to_json(&record.admission),
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
                t.outcome.map(|o| enum_str(&o)),
                to_json(&t.mandate),
                t.latest_report.as_ref().map(to_json),
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
                t.outcome.map(|o| enum_str(&o)),
                to_json(&t.mandate),
                t.latest_report.as_ref().map(to_json),
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
                to_json(report),
            ])?;
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
                                      target_message, text, text_sha256, words, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                r.reply.as_str(),
                r.ticket.as_str(),
                r.thread_key,
                r.purpose.as_str(),
                r.target.trigger.as_str(),
                enum_str(&r.target.platform),
                r.target.message_id,
                text,
                r.text_sha256,
                i64::try_from(r.words).unwrap_or(i64::MAX),
                sql_u64(r.at),
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

/// SHA-256 of `text`, hex.
pub fn text_sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests;
