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
//!
//! Layout: this file opens the database and runs transactions; `schema`
//! holds the migrations, `writes` the decision's [`Tx`], `reads` the
//! [`Reader`] (inside a transaction or not), `cache` what the decision path
//! would otherwise read back, `codec` how values map to columns, `records`
//! the types handed out, `deliveries` the platform deliveries waiting for
//! their decision, and `checkpoint` the WAL checkpoint thread.

mod audit;
mod cache;
mod checkpoint;
mod codec;
mod deliveries;
mod gate;
mod live;
mod reads;
mod records;
mod schema;
mod writes;

use std::path::Path;

use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::id::IdClock;

pub use audit::LoggedReply;
use cache::Cache;
use checkpoint::Checkpointer;
pub use deliveries::{DeliveryLog, Inserted, NewDelivery, Processed, StoredDelivery};
use gate::WriteGate;
pub use live::{JobStage, LiveJob, OutboxItem, OutboxState, OutboxUpdate};
pub use reads::{ExportError, Reader};
pub use records::{InboxItem, Page, ReplyRecord, ReplyTarget, ThreadRecord, TriggerSummary};
use schema::clock_rows;
pub use writes::Tx;

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
    /// A record does not encode; nothing of the decision was stored.
    #[error(transparent)]
    Encode(#[from] crate::json::EncodeError),
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The background checkpoint thread could not start.
    #[error("cannot start the WAL checkpoint thread: {0}")]
    Thread(std::io::Error),
    /// The database file, just opened, could not be looked at again.
    #[error("cannot identify the database file: {0}")]
    File(std::io::Error),
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

/// The SQLite store.
pub struct Store {
    // Declared first so that it stops before the main connection closes.
    checkpointer: Option<Checkpointer>,
    conn: Connection,
    /// Shared with this process's other connections on the file; none for
    /// a private in-memory database.
    gate: Option<std::sync::Arc<WriteGate>>,
    clock: IdClock,
    /// `PRAGMA data_version` when the clock was last loaded; it changes when
    /// another connection commits, and then the clock is reloaded.
    data_version: i64,
    cache: Cache,
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
        store.gate = Some(WriteGate::for_file(path).map_err(StoreError::File)?);
        Ok(store)
    }

    /// Every decision as `(seq, at, body)`, oldest first, from a state
    /// opened read-only: nothing is created, migrated or written (the
    /// statistics; a router may be running on it).
    pub fn read_decision_log(path: &Path) -> Result<Vec<(u64, u64, String)>> {
        use rusqlite::OpenFlags;
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let known = schema::version();
        if version > known {
            return Err(StoreError::SchemaTooNew {
                found: version,
                known,
            });
        }
        let mut stmt = conn.prepare("SELECT seq, at, body FROM decisions ORDER BY seq")?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    codec::from_sql_u64(r.get(0)?),
                    codec::from_sql_u64(r.get(1)?),
                    r.get::<_, String>(2)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?, Durability::Normal)
    }

    fn init(mut conn: Connection, durability: Durability) -> Result<Self> {
        // The page cache stays at SQLite's default (2 MiB): every commit
        // scans the cache's hash table (pcache1 truncate), and a 16 MiB cache
        // cost about 10% more CPU per decision in the benchmark.
        schema::prepare(&mut conn, durability)?;
        let clock = IdClock::from_rows(clock_rows(&conn)?);
        let data_version = conn.query_row("PRAGMA data_version", [], |r| r.get(0))?;
        Ok(Self {
            checkpointer: None,
            conn,
            gate: None,
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
            gate,
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
            // In line behind this process's other writers (fair, unlike
            // SQLite's lock), and held until the commit or rollback.
            let _turn = match gate {
                Some(g) => Some(g.enter().ok_or_else(|| StoreError::from(gate::busy()))?),
                None => None,
            };
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

/// SHA-256 of `text`, hex.
pub fn text_sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests;
