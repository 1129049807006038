//! Deliveries: platform events stored before they are acknowledged, then
//! processed into decisions.
//!
//! The listener writes through its own connection ([`DeliveryLog`]) so that
//! receiving never waits for the engine's decisions beyond the write lock,
//! which every writer of the process takes in turn (`gate`). A delivery is inserted once: a second one with the same platform
//! delivery id, or with the same meaning (object, action, update time), is
//! reported as a duplicate and nothing is written. The processor reads the
//! pending deliveries and marks each processed ([`Tx::mark_delivery`]) in
//! the transaction that records its decision, so a crash leaves either both
//! or neither: every stored delivery is processed exactly once.

use std::path::Path;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::codec::{from_sql_u64, sql_u64};
use super::gate::{self, WriteGate};
use super::reads::Reader;
use super::schema::prepare;
use super::writes::Tx;
use super::{Durability, Result, StoreError};
use crate::id::TriggerId;

/// A delivery as received, before it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery<'a> {
    /// `github` (later `feishu`).
    pub platform: &'a str,
    /// The platform's delivery id (`X-GitHub-Delivery`).
    pub delivery_id: &'a str,
    /// The platform's event name (`issue_comment`, …).
    pub event: &'a str,
    /// What the event means: object, action and update time.
    pub meaning: &'a str,
    /// The exact body that was verified.
    pub body: &'a [u8],
    pub received_at: u64,
}

/// What storing a delivery did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Inserted {
    /// Stored; it will be processed.
    New,
    /// A delivery with this delivery id is already stored.
    DuplicateDelivery,
    /// A delivery meaning the same event is already stored.
    DuplicateMeaning,
}

/// A stored delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDelivery {
    pub seq: i64,
    pub platform: String,
    pub delivery_id: String,
    pub event: String,
    pub meaning: String,
    pub body: Vec<u8>,
    pub received_at: u64,
    pub processed: Option<Processed>,
}

/// How a delivery was processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed {
    pub at: u64,
    pub outcome: String,
    pub trigger: Option<TriggerId>,
}

// === impl DeliveryLog ===

/// The listener's connection: stores deliveries, nothing else.
pub struct DeliveryLog {
    conn: Connection,
    /// Shared with this process's other connections on the file.
    gate: Arc<WriteGate>,
}

impl std::fmt::Debug for DeliveryLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryLog").finish_non_exhaustive()
    }
}

impl DeliveryLog {
    /// Opens the router's database (creating and migrating it if needed).
    pub fn open(path: &Path, durability: Durability) -> Result<Self> {
        let mut conn = Connection::open(path)?;
        prepare(&mut conn, durability)?;
        let gate = WriteGate::for_file(path).map_err(StoreError::File)?;
        Ok(Self { conn, gate })
    }

    /// Stores `d` unless it duplicates a stored delivery; when this returns
    /// [`Inserted::New`], the delivery is committed (durable at the log's
    /// durability) and may be acknowledged.
    pub fn insert(&mut self, d: &NewDelivery<'_>) -> Result<Inserted> {
        // In line behind this process's other writers (the processor's
        // decisions) until the commit.
        let _turn = self.gate.enter().ok_or_else(gate::busy)?;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let existing: Option<String> = tx
            .prepare_cached(
                "SELECT delivery_id FROM deliveries
                 WHERE platform = ?1 AND (delivery_id = ?2 OR meaning = ?3) LIMIT 1",
            )?
            .query_row(params![d.platform, d.delivery_id, d.meaning], |r| r.get(0))
            .optional()?;
        let result = match existing {
            Some(id) if id == d.delivery_id => Inserted::DuplicateDelivery,
            Some(_) => Inserted::DuplicateMeaning,
            None => {
                tx.prepare_cached(
                    "INSERT INTO deliveries (platform, delivery_id, event, meaning, body, received_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![
                    d.platform,
                    d.delivery_id,
                    d.event,
                    d.meaning,
                    d.body,
                    sql_u64(d.received_at)
                ])?;
                Inserted::New
            }
        };
        tx.commit()?;
        Ok(result)
    }

    /// Stores what one polling round found and the source's new polling
    /// state, in one transaction: after a crash either both are stored or
    /// neither (the round is asked again, and what it finds again is a
    /// duplicate). Deliveries that duplicate a stored one (by id or by
    /// meaning: a webhook brought it first) are left out. Returns how many
    /// were new.
    pub fn insert_polled(
        &mut self,
        deliveries: &[NewDelivery<'_>],
        source: &str,
        state: &str,
        now: u64,
    ) -> Result<usize> {
        // In line behind this process's other writers (the processor's
        // decisions) until the commit.
        let _turn = self.gate.enter().ok_or_else(gate::busy)?;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut new = 0;
        for d in deliveries {
            new += tx
                .prepare_cached(
                    "INSERT INTO deliveries (platform, delivery_id, event, meaning, body, received_at)
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6
                     WHERE NOT EXISTS (SELECT 1 FROM deliveries
                                       WHERE platform = ?1 AND (delivery_id = ?2 OR meaning = ?4))",
                )?
                .execute(params![
                    d.platform,
                    d.delivery_id,
                    d.event,
                    d.meaning,
                    d.body,
                    sql_u64(d.received_at)
                ])?;
        }
        tx.prepare_cached(
            "INSERT INTO poll_state (source, state, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (source) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        )?
        .execute(params![source, state, sql_u64(now)])?;
        tx.commit()?;
        Ok(new)
    }

    pub fn read(&self) -> Reader<'_> {
        Reader { conn: &self.conn }
    }
}

const DELIVERY_COLUMNS: &str = "seq, platform, delivery_id, event, meaning, body, received_at,
                                processed_at, outcome, trigger_id";

fn delivery_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredDelivery> {
    let processed_at: Option<i64> = r.get(7)?;
    let outcome: Option<String> = r.get(8)?;
    let trigger: Option<String> = r.get(9)?;
    Ok(StoredDelivery {
        seq: r.get(0)?,
        platform: r.get(1)?,
        delivery_id: r.get(2)?,
        event: r.get(3)?,
        meaning: r.get(4)?,
        body: r.get(5)?,
        received_at: from_sql_u64(r.get(6)?),
        processed: processed_at.map(|at| Processed {
            at: from_sql_u64(at),
            outcome: outcome.unwrap_or_default(),
            trigger: trigger.as_deref().and_then(TriggerId::parse),
        }),
    })
}

impl Reader<'_> {
    /// Up to `limit` deliveries not yet processed, oldest first.
    pub fn pending_deliveries(&self, limit: usize) -> Result<Vec<StoredDelivery>> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE processed_at IS NULL
             ORDER BY seq LIMIT ?1"
        );
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map(
                [i64::try_from(limit).unwrap_or(i64::MAX)],
                delivery_from_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// A polled source's state as last stored (`None`: never polled).
    pub fn poll_state(&self, source: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT state FROM poll_state WHERE source = ?1")?
            .query_row([source], |r| r.get(0))
            .optional()?)
    }

    /// Whether a delivery with this id from `platform` is stored.
    pub fn has_delivery(&self, platform: &str, delivery_id: &str) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM deliveries WHERE platform = ?1 AND delivery_id = ?2")?
            .query_row([platform, delivery_id], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// The delivery from `platform` stored with this meaning, if any.
    pub fn delivery_by_meaning(
        &self,
        platform: &str,
        meaning: &str,
    ) -> Result<Option<StoredDelivery>> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE platform = ?1 AND meaning = ?2"
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row([platform, meaning], delivery_from_row)
            .optional()?)
    }

    /// Every stored delivery, oldest first.
    pub fn deliveries(&self) -> Result<Vec<StoredDelivery>> {
        let sql = format!("SELECT {DELIVERY_COLUMNS} FROM deliveries ORDER BY seq");
        let rows = self
            .conn
            .prepare_cached(&sql)?
            .query_map([], delivery_from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl Tx<'_> {
    /// Marks a pending delivery processed. Fails (and so rolls back the
    /// decision it is part of) when the delivery is unknown or already
    /// processed: a delivery's decision is recorded at most once.
    pub fn mark_delivery(
        &mut self,
        seq: i64,
        outcome: &str,
        trigger: Option<&TriggerId>,
        now: u64,
    ) -> Result<()> {
        let n = self
            .tx
            .prepare_cached(
                "UPDATE deliveries SET processed_at = ?2, outcome = ?3, trigger_id = ?4
                 WHERE seq = ?1 AND processed_at IS NULL",
            )?
            .execute(params![
                seq,
                sql_u64(now),
                outcome,
                trigger.map(TriggerId::as_str)
            ])?;
        if n == 0 {
            return Err(StoreError::NotFound {
                kind: "pending delivery",
                id: seq.to_string(),
            });
        }
        Ok(())
    }
}
