//! The schema: migrations in order, and where the id clock resumes.

use rusqlite::{Connection, TransactionBehavior};

use super::{Result, StoreError};
use crate::id::{ReplyId, ThreadId, TicketId, TriggerId};

/// Migrations, in order; `PRAGMA user_version` counts those applied.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 3: platform deliveries (webhooks), stored before they are acknowledged
    // and deduplicated twice: by the platform's delivery id (a redelivery
    // reuses it) and by what the event means (object, action, update time),
    // so a delivery that reaches the router twice by any path counts once.
    // A delivery is marked processed in the transaction of its decision.
    r#"
CREATE TABLE deliveries (
    seq INTEGER PRIMARY KEY,
    platform TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    event TEXT NOT NULL,
    meaning TEXT NOT NULL,
    body BLOB NOT NULL,
    received_at INTEGER NOT NULL,
    processed_at INTEGER,
    outcome TEXT,
    trigger_id TEXT REFERENCES triggers(id)
) STRICT;
CREATE UNIQUE INDEX deliveries_by_id ON deliveries(platform, delivery_id);
CREATE UNIQUE INDEX deliveries_by_meaning ON deliveries(platform, meaning);
CREATE INDEX deliveries_pending ON deliveries(seq) WHERE processed_at IS NULL;
"#,
    // A resumed ticket's earlier reports are kept for the record but no
    // longer authorise anything (an `answer` needs a report since the resume).
    r#"
ALTER TABLE reports ADD COLUMN cleared INTEGER NOT NULL DEFAULT 0;
DROP INDEX reports_answering;
CREATE INDEX reports_answering ON reports(ticket_id, answers) WHERE answers IS NOT NULL AND cleared = 0;
"#,
    // 5: the live loop's durable work (`store::live`). Cursors over the
    // decision log and the supervisor's events, each advanced in the
    // transaction of what it caused; one job per ticket generation (the
    // trigger that opened or resumed it); pass-throughs to forward; steps
    // (replies to check, ends to decide) planned but not yet decided; and
    // the outbox over the reply log.
    r#"
CREATE TABLE live_cursors (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;
CREATE TABLE live_jobs (
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    generation TEXT NOT NULL REFERENCES triggers(id),
    state TEXT NOT NULL,
    job_id TEXT UNIQUE,
    cancel TEXT,
    job_state TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (ticket_id, generation)
) STRICT;
CREATE INDEX live_jobs_open ON live_jobs(created_at) WHERE state = 'wanted' OR cancel = 'wanted';
CREATE TABLE live_forwards (
    trigger_id TEXT PRIMARY KEY REFERENCES triggers(id),
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    state TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX live_forwards_pending ON live_forwards(trigger_id) WHERE state = 'pending';
CREATE TABLE live_steps (
    seq INTEGER PRIMARY KEY,
    ticket_id TEXT NOT NULL REFERENCES tickets(id),
    step TEXT NOT NULL,
    planned_at INTEGER NOT NULL,
    done_at INTEGER
) STRICT;
CREATE INDEX live_steps_pending ON live_steps(seq) WHERE done_at IS NULL;
CREATE TABLE live_outbox (
    reply_id TEXT PRIMARY KEY REFERENCES replies(id),
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    platform_message_id TEXT,
    error TEXT,
    next_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX live_outbox_due ON live_outbox(next_at) WHERE state IN ('pending', 'unknown');
"#,
    // 6: a generation's job lost with the supervisor (it restarted and
    // ended the job) is started again, a bounded number of times: the
    // attempt counts them and names the new job's idempotency key.
    r#"
ALTER TABLE live_jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
"#,
    // 7: the reply log says who wrote each text: the template or the
    // router model's draft.
    r#"
ALTER TABLE replies ADD COLUMN writer TEXT NOT NULL DEFAULT 'template';
"#,
    // 8: polling GitHub: per source (`github:owner/repo`) the listings'
    // cursors and ETags (JSON), written in the transaction that stores the
    // deliveries a round found.
    r#"
CREATE TABLE poll_state (
    source TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
"#,
];

/// The schema version this gatehouse writes.
pub(super) fn version() -> i64 {
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

/// What every connection to the router's database sets before it is used:
/// WAL, the commit durability, foreign keys, a wait for another
/// connection's write lock (the listener and the router write the same
/// file); then the schema is migrated.
pub(super) fn prepare(conn: &mut Connection, durability: super::Durability) -> Result<()> {
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // The background checkpointer copies most of the WAL off the write
    // path. A WAL only restarts after a checkpoint that no writer
    // overlapped, so under sustained load this autocheckpoint (every
    // 16 384 frames, 64 MiB) finishes the copy and the database fsync in a
    // writer: about one decision in 3 000 waits for it. Every connection
    // that writes sets it: at SQLite's default (1 000 frames) the
    // listener's inserts ran the checkpoint in their commit during a
    // backlog, 2–6 ms each, and the webhooks behind them waited.
    conn.pragma_update(None, "wal_autocheckpoint", 16384)?;
    conn.pragma_update(
        None,
        "synchronous",
        match durability {
            super::Durability::Full => "FULL",
            super::Durability::Normal => "NORMAL",
        },
    )?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_handler(Some(wait_for_lock))?;
    migrate(conn)
}

/// How long a connection waits for another's write lock, in steps of
/// [`LOCK_POLL`]: at least 5 s, as `busy_timeout(5 s)` did.
const LOCK_TRIES: i32 = 50_000;
const LOCK_POLL: std::time::Duration = std::time::Duration::from_micros(100);

/// SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25 … ms between
/// tries, so a listener's insert that meets one decision's transaction
/// (well under 1 ms) waits 1–33 ms: the webhook's p99 time-to-2xx was
/// 28 ms at 500 deliveries/s (router README, Benchmark). Polling every
/// 100 µs takes the lock soon after it is released.
fn wait_for_lock(tries: i32) -> bool {
    if tries >= LOCK_TRIES {
        return false;
    }
    std::thread::sleep(LOCK_POLL);
    true
}

pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
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
pub(super) fn clock_rows(conn: &Connection) -> Result<Vec<(String, u64, u32)>> {
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
