//! Writes audit records on the request path and makes them durable in
//! batches.
//!
//! A request's record is *written* (one `write(2)` of the whole line) by
//! the task that is about to forward it, before it does: if the write
//! fails (disk full, I/O error) the caller gets [`AuditUnavailable`] and
//! forwards nothing, and the log is cut back to its last whole record. So
//! no forwarded request, no spliced tunnel, is missing from the file.
//!
//! Making records *durable* (`fdatasync`) is the sync thread's: records of
//! message-bearing calls are waited for until they are on disk, so an
//! acknowledged message is never missing after a crash; other records are
//! synced in batches (group commit), which keeps an fsync off the path of
//! every ordinary request. Completion lines, which nothing waits on, are
//! chained at once but written with the next line that is (or by the sync
//! thread before it syncs): one `write(2)` a request instead of two. After
//! the first record of a batch the sync
//! thread waits up to [`GATHER`] for more; a caller that waits for the disk
//! cuts that short. A failed sync leaves the file's state unknown, so the
//! log refuses every later record (503) until the proxy is restarted and
//! the log reopened.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::audit::{AuditLog, Record};

/// The audit log could not be written: the request is refused.
#[derive(Debug, thiserror::Error)]
#[error("the audit log could not be written; refusing to forward")]
pub struct AuditUnavailable;

/// The longest an ordinary record waits before the sync thread takes it.
/// A `fdatasync` of the log costs 50–100 µs of CPU on ext4 (the journal
/// commit of the file's new size): at 1 ms the proxy synced ~800 times a
/// second under load, a tenth of its CPU. About 10 ms (plus a sync in
/// progress) is then what a machine crash can lose of ordinary records; a
/// crash of the proxy loses no request line (each is written before its
/// request is forwarded), only completion lines still deferred
/// ([`AuditWriter::record_later`]). Records of messages are on disk
/// before they are sent, whatever this is.
const GATHER: Duration = Duration::from_millis(10);

/// What the sync thread is asked to do.
#[derive(Default)]
struct Pending {
    /// Records were written since the last sync.
    dirty: bool,
    /// Callers waiting until everything written so far is on disk.
    waiters: Vec<oneshot::Sender<bool>>,
    /// Every handle is gone: sync once more and end.
    closed: bool,
}

/// What the writers and the sync thread share.
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// A sync failed: nothing more is accepted.
    failed: AtomicBool,
}

impl Shared {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ends the sync thread when the last [`AuditWriter`] is dropped.
struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.pending().closed = true;
        self.0.wake.notify_one();
    }
}

/// A cloneable handle to the audit log.
#[derive(Clone)]
pub struct AuditWriter {
    log: Arc<Mutex<AuditLog>>,
    shared: Arc<Shared>,
    _closer: Arc<Closer>,
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditWriter")
    }
}

impl AuditWriter {
    /// Starts the sync thread over `log`.
    pub fn start(log: AuditLog) -> Result<Self, std::io::Error> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            failed: AtomicBool::new(false),
        });
        let thread_shared = shared.clone();
        let log = Arc::new(Mutex::new(log));
        let thread_log = log.clone();
        std::thread::Builder::new()
            .name("gatehouse-audit".into())
            .spawn(move || sync_loop(&thread_shared, &thread_log))?;
        Ok(Self {
            log,
            _closer: Arc::new(Closer(shared.clone())),
            shared,
        })
    }

    /// Writes a record after every record written before it; `Err` when it
    /// could not be written (nothing of it is in the file then).
    /// Its fields are bounded first ([`crate::audit::bound`]).
    pub fn record(&self, record: Record) -> Result<(), AuditUnavailable> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(AuditUnavailable);
        }
        let record = crate::audit::bound(record);
        let started = std::time::Instant::now();
        let written = {
            let mut log = self.log.lock().map_err(|_| AuditUnavailable)?;
            log.write_all(std::slice::from_ref(&record))
        };
        crate::metrics::audit("write", started.elapsed(), written.is_ok());
        if let Err(error) = written {
            tracing::error!(%error, "writing the audit log");
            return Err(AuditUnavailable);
        }
        self.mark_dirty();
        Ok(())
    }

    /// Chains a record after every record before it and writes it with the
    /// next record written, or within [`GATHER`] by the sync thread (one
    /// write for many). For records no caller acts on once recorded
    /// (completions): until written, a crash of the process loses them.
    pub fn record_later(&self, record: Record) -> Result<(), AuditUnavailable> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(AuditUnavailable);
        }
        let record = crate::audit::bound(record);
        let chained = {
            let mut log = self.log.lock().map_err(|_| AuditUnavailable)?;
            log.defer(&record)
        };
        if let Err(error) = chained {
            tracing::error!(%error, "chaining an audit record");
            return Err(AuditUnavailable);
        }
        self.mark_dirty();
        Ok(())
    }

    /// Tells the sync thread there is something to write or sync.
    fn mark_dirty(&self) {
        let mut pending = self.shared.pending();
        if !pending.dirty {
            pending.dirty = true;
            self.shared.wake.notify_one();
        }
    }

    /// Waits until every record written so far is on disk.
    pub async fn flush(&self) -> Result<(), AuditUnavailable> {
        let (done, wait) = oneshot::channel();
        {
            let mut pending = self.shared.pending();
            pending.waiters.push(done);
            self.shared.wake.notify_one();
        }
        match wait.await {
            Ok(true) => Ok(()),
            _ => Err(AuditUnavailable),
        }
    }

    /// Writes a record and waits until it is on disk.
    pub async fn record_durably(&self, record: Record) -> Result<(), AuditUnavailable> {
        self.record(record)?;
        self.flush().await
    }
}

/// The sync thread: waits for written records, gathers a batch, writes the
/// deferred lines, syncs, answers the callers waiting for it. A state
/// machine over [`Pending`].
fn sync_loop(shared: &Shared, log: &Mutex<AuditLog>) {
    loop {
        let mut pending = shared.pending();
        while !pending.dirty && pending.waiters.is_empty() && !pending.closed {
            pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
        }
        if pending.waiters.is_empty() && !pending.closed {
            // Ordinary records only: let more of them gather first.
            pending = shared
                .wake
                .wait_timeout(pending, GATHER)
                .map_or_else(|p| p.into_inner().0, |(p, _)| p);
        }
        let waiters = std::mem::take(&mut pending.waiters);
        let closed = pending.closed;
        pending.dirty = false;
        drop(pending);
        // Deferred lines written, and the current file taken, under the
        // log's lock; the sync runs without it: writers never wait for a
        // sync. A rotation syncs the file it leaves before any record goes
        // to the next one.
        let file = {
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            if !shared.failed.load(Ordering::Acquire) {
                let started = std::time::Instant::now();
                let written = log.write_deferred();
                crate::metrics::audit("write", started.elapsed(), written.is_ok());
                if let Err(error) = written {
                    tracing::error!(%error, "writing deferred audit records; they are lost");
                }
            }
            log.current_file()
        };
        let started = std::time::Instant::now();
        let ok = !shared.failed.load(Ordering::Acquire) && file.sync_data().is_ok();
        crate::metrics::audit("sync", started.elapsed(), ok);
        if !ok && !shared.failed.swap(true, Ordering::AcqRel) {
            tracing::error!("syncing the audit log failed; refusing every request from now on");
        }
        for waiter in waiters {
            let _ = waiter.send(ok);
        }
        if closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{CompletionRecord, Outcome, RequestRecord};

    fn request(id: &str) -> Record {
        Record::Request(RequestRecord {
            time: "2026-01-01T00:00:00.000Z".into(),
            request_id: id.into(),
            identity: "tkt_1".into(),
            method: "GET".into(),
            host: "api.github.com".into(),
            path: "/".into(),
            query_keys: vec![],
            outcome: Outcome::Deny {
                reason: "r".into(),
                rule_sets_tried: vec![],
            },
            message: None,
            truncated: Default::default(),
        })
    }

    #[tokio::test]
    async fn records_are_in_the_file_when_record_returns_and_durable_after_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let writer = AuditWriter::start(AuditLog::open(&path).unwrap()).unwrap();
        for i in 0..50 {
            writer.record(request(&format!("r{i}"))).unwrap();
            // Written, not merely queued: the file already holds it.
            let report = crate::audit::verify(&path).unwrap();
            assert_eq!(report.lines, i + 1);
        }
        writer
            .record_durably(Record::Completion(CompletionRecord {
                time: "2026-01-01T00:00:00.000Z".into(),
                request_id: "r0".into(),
                status: 200,
                bytes_sent: 0,
                bytes_received: 0,
                duration_ms: 0,
                message_id: None,
                error: None,
                truncated: Default::default(),
            }))
            .await
            .unwrap();
        writer.flush().await.unwrap();
        drop(writer);
        assert_eq!(crate::audit::verify(&path).unwrap().lines, 51);
    }

    fn completion(id: &str) -> Record {
        Record::Completion(CompletionRecord {
            time: "2026-01-01T00:00:00.000Z".into(),
            request_id: id.into(),
            status: 200,
            bytes_sent: 0,
            bytes_received: 0,
            duration_ms: 0,
            message_id: None,
            error: None,
            truncated: Default::default(),
        })
    }

    #[tokio::test]
    async fn deferred_records_go_out_in_order_with_the_next_write_or_the_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let writer = AuditWriter::start(AuditLog::open(&path).unwrap()).unwrap();
        writer.record(request("a")).unwrap();
        writer.record_later(completion("a")).unwrap();
        writer.record(request("b")).unwrap();
        // The next record written carries the deferred one ahead of it (or
        // the sync thread wrote it first): in the file, in chain order.
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let events: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| {
                (
                    l["event"].as_str().unwrap(),
                    l["request_id"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            events,
            [("request", "a"), ("completion", "a"), ("request", "b")]
        );
        // With nothing written after it, the sync thread writes it.
        writer.record_later(completion("b")).unwrap();
        writer.flush().await.unwrap();
        let report = crate::audit::verify(&path).unwrap();
        assert_eq!((report.lines, report.completions), (4, 2));
        assert!(report.open_requests.is_empty());
        writer.record_later(request("c")).unwrap();
        drop(writer);
        // The last handle gone, the sync thread writes what is left.
        for _ in 0..200 {
            if crate::audit::verify(&path).unwrap().lines == 5 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the deferred record was not written at the end");
    }
}
