//! Writes audit records on the request path and makes them durable in
//! batches.
//!
//! A request's record is *written* (one `write(2)` of the whole line) by
//! the task that is about to forward it, before it does: if the write
//! fails (disk full, I/O error) the caller gets [`AuditUnavailable`] and
//! forwards nothing, and the log is cut back to its last whole record. So
//! no forwarded request, no spliced tunnel, is missing from the file, even
//! if the proxy is killed the moment after.
//!
//! Making records *durable* (`fdatasync`) is the sync thread's: records of
//! message-bearing calls are waited for until they are on disk, so an
//! acknowledged message is never missing after a crash; other records are
//! synced within the *sync window* ([`DEFAULT_SYNC_WINDOW`], `[audit]
//! sync_window_ms`) of being written (plus a sync or rotation in
//! progress), one sync for all of them (group commit), which keeps an
//! fsync off the path of every ordinary request; the completion naming a
//! created message's id is synced at once. A failing disk is then noticed
//! at the next sync: up to a window later, unless a caller waits first.
//! Completion lines, which nothing waits on, are chained at once but
//! written with the next line that is, or by the sync thread within
//! [`WRITE_WINDOW`]: one `write(2)` a request instead of two. A failed
//! sync (this thread's or a rotation's) leaves the file's state unknown, so
//! the log refuses every later record (503) until the proxy is restarted
//! and the log reopened.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::audit::{AuditLog, Record};

/// The audit log could not be written: the request is refused.
#[derive(Debug, thiserror::Error)]
#[error("the audit log could not be written; refusing to forward")]
pub struct AuditUnavailable;

/// The longest a deferred line ([`AuditWriter::record_later`]) waits for
/// the sync thread to write it (plus a sync in progress), and so what a
/// failed write loses with it: what a crash of the proxy (not of the
/// machine) can lose of completion lines. Request lines are written before
/// their request is forwarded and are never lost that way.
///
/// Under load every deferred line goes out with the next request line, so
/// the thread's wake at the end of a write window finds nothing to write,
/// and each wake costs ~20 µs of CPU on a VM. At 10 ms (until issue 16's
/// twelfth round) the thread woke ~240 times a second while records kept
/// coming, and with one request in flight it took 3.7% of the proxy's
/// CPU, half of it waking; at 100 ms it wakes ~50 times. A crash of the
/// proxy then loses no more of its completion lines than a crash of the
/// machine does with the default sync window.
pub const WRITE_WINDOW: Duration = Duration::from_millis(100);

/// How long an ordinary record may wait to be synced, unless set
/// (`[audit] sync_window_ms`): what a crash of the machine can lose of
/// them. Records of messages are on disk before the message is sent,
/// whatever this is.
///
/// Each `fdatasync` of the log costs ~185 µs of CPU here (the data page and
/// the inode, two writes to the device, each a VM exit) whatever it
/// carries; the sync thread does one per window that saw a record. At
/// 10 ms that was a tenth of the proxy's CPU at 1 200 requests a second
/// (issue 16's eighth round). 100 ms is an order below what the field
/// accepts for records nothing waits on (PostgreSQL's asynchronous commit:
/// 200 ms; journald: minutes).
pub const DEFAULT_SYNC_WINDOW: Duration = Duration::from_millis(100);

/// The sync window `[audit] sync_window_ms` sets: left out,
/// [`DEFAULT_SYNC_WINDOW`]; from 1 ms (a sync per batch of records written
/// together) to 10 s.
pub fn sync_window(ms: Option<u64>) -> Result<Duration, String> {
    match ms {
        None => Ok(DEFAULT_SYNC_WINDOW),
        Some(ms @ 1..=10_000) => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(format!(
            "{ms} is out of range: expected 1 to 10000 (milliseconds a record may wait to be synced)"
        )),
    }
}

/// What the sync thread is asked to do.
#[derive(Default)]
struct Pending {
    /// Records were written since the last sync.
    dirty: bool,
    /// Callers waiting until everything written so far is on disk.
    waiters: Vec<oneshot::Sender<bool>>,
    /// A record was written that is to be synced now, though nobody waits
    /// for it (the completion naming a created message's id).
    urgent: bool,
    /// Every handle is gone: sync once more and end.
    closed: bool,
}

/// What the writers and the sync thread share.
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// A sync failed: nothing more is accepted.
    failed: AtomicBool,
    /// Syncs done (for tests).
    syncs: AtomicU64,
}

impl Shared {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ends the sync thread when the last [`AuditWriter`] is dropped, and
/// waits for it: its last round writes the deferred lines and syncs, so a
/// process that drops its writers before it exits loses none of them.
struct Closer {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.shared.pending().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // A panic of the thread was reported by the panic hook already.
            let _ = thread.join();
        }
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
    /// Starts the sync thread over `log`, with [`DEFAULT_SYNC_WINDOW`].
    pub fn start(log: AuditLog) -> Result<Self, std::io::Error> {
        Self::start_with(log, DEFAULT_SYNC_WINDOW)
    }

    /// Starts the sync thread over `log`: ordinary records are synced
    /// within `sync_window` of being written.
    pub fn start_with(log: AuditLog, sync_window: Duration) -> Result<Self, std::io::Error> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            failed: AtomicBool::new(false),
            syncs: Default::default(),
        });
        let thread_shared = shared.clone();
        let log = Arc::new(Mutex::new(log));
        let thread_log = log.clone();
        let thread = std::thread::Builder::new()
            .name("gatehouse-audit".into())
            .spawn(move || sync_loop(&thread_shared, &thread_log, sync_window))?;
        Ok(Self {
            log,
            _closer: Arc::new(Closer {
                shared: shared.clone(),
                thread: Some(thread),
            }),
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
        let started = Instant::now();
        let written = {
            let mut log = self.log.lock().map_err(|_| AuditUnavailable)?;
            let written = log.write_all(std::slice::from_ref(&record));
            note_failed_sync(&self.shared, &log);
            written
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
    /// next record written, or within [`WRITE_WINDOW`] by the sync thread
    /// (one write for many). For records no caller acts on once recorded
    /// (completions): until written, a crash of the process loses them.
    pub fn record_later(&self, record: Record) -> Result<(), AuditUnavailable> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(AuditUnavailable);
        }
        let record = crate::audit::bound(record);
        let chained = {
            let mut log = self.log.lock().map_err(|_| AuditUnavailable)?;
            let chained = log.defer(&record);
            note_failed_sync(&self.shared, &log);
            chained
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

    /// Writes a record and has it synced at once, without waiting: for a
    /// line the reconciliation of messages needs (a created message's id),
    /// which the sync window would otherwise leave to a machine crash.
    pub fn record_synced_soon(&self, record: Record) -> Result<(), AuditUnavailable> {
        self.record(record)?;
        let mut pending = self.shared.pending();
        pending.urgent = true;
        self.shared.wake.notify_one();
        Ok(())
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

/// How long ordinary records gather before the deferred lines are
/// written: the write window, but not past the records' sync window (a
/// sync window shorter than the write window keeps its meaning).
fn gather_for(left: Option<Duration>) -> Duration {
    left.map_or(WRITE_WINDOW, |left| left.min(WRITE_WINDOW))
}

/// A sync the log made itself (a rotation's) failed: the writer fails as
/// if its own had.
fn note_failed_sync(shared: &Shared, log: &AuditLog) {
    if log.sync_failed() {
        fail(shared);
    }
}

/// A sync failed: every later record is refused.
fn fail(shared: &Shared) {
    if !shared.failed.swap(true, Ordering::AcqRel) {
        tracing::error!("syncing the audit log failed; refusing every request from now on");
    }
}

/// The sync thread: waits for written records, gathers a batch, writes the
/// deferred lines, syncs when the oldest record not on disk has waited
/// `sync_window` (or at once for a caller waiting, or at the end), answers
/// the callers waiting for it. A state machine over [`Pending`].
fn sync_loop(shared: &Shared, log: &Mutex<AuditLog>, sync_window: Duration) {
    // When this thread first saw a record not yet synced.
    let mut unsynced_since: Option<Instant> = None;
    // How long until the records not yet synced are due; `None`: nothing
    // is waiting (or the window is too long to name an instant for).
    let left = |since: Option<Instant>| {
        let due = since?.checked_add(sync_window)?;
        Some(due.saturating_duration_since(Instant::now()))
    };
    loop {
        let mut pending = shared.pending();
        while !pending.dirty && pending.waiters.is_empty() && !pending.urgent && !pending.closed {
            match left(unsynced_since) {
                None => pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner()),
                Some(left) if left.is_zero() => break,
                Some(left) => {
                    pending = shared
                        .wake
                        .wait_timeout(pending, left)
                        .map_or_else(|p| p.into_inner().0, |(p, _)| p);
                }
            }
        }
        if pending.dirty {
            unsynced_since.get_or_insert_with(Instant::now);
        }
        if pending.dirty && pending.waiters.is_empty() && !pending.urgent && !pending.closed {
            // Ordinary records only: let more of them gather first.
            let gather = gather_for(left(unsynced_since));
            pending = shared
                .wake
                .wait_timeout(pending, gather)
                .map_or_else(|p| p.into_inner().0, |(p, _)| p);
        }
        let waiters = std::mem::take(&mut pending.waiters);
        let urgent = std::mem::take(&mut pending.urgent);
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
                let started = Instant::now();
                let written = log.write_deferred();
                crate::metrics::audit("write", started.elapsed(), written.is_ok());
                if let Err(error) = written {
                    tracing::error!(%error, "writing deferred audit records or rotating the log");
                }
            }
            // Before this thread's sync, which could succeed on a file
            // whose earlier failure was already reported to the log.
            note_failed_sync(shared, &log);
            log.current_file()
        };
        let due = urgent || left(unsynced_since).is_some_and(|l| l.is_zero());
        if waiters.is_empty() && !closed && !due {
            continue;
        }
        unsynced_since = None;
        let started = Instant::now();
        let ok = !shared.failed.load(Ordering::Acquire) && file.sync_data().is_ok();
        shared.syncs.fetch_add(1, Ordering::Relaxed);
        crate::metrics::audit("sync", started.elapsed(), ok);
        if !ok {
            fail(shared);
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

    /// A writer over a new log in a temporary directory (kept while the
    /// first is), with `window` as its sync window.
    fn windowed(window: Duration) -> (tempfile::TempDir, std::path::PathBuf, AuditWriter) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let writer = AuditWriter::start_with(AuditLog::open(&path).unwrap(), window).unwrap();
        (dir, path, writer)
    }

    /// Polls `done` every 5 ms for up to 10 s.
    fn eventually(done: impl Fn() -> bool) -> bool {
        within(Duration::from_secs(10), done)
    }

    /// Polls `done` every 5 ms for up to `limit`.
    fn within(limit: Duration, done: impl Fn() -> bool) -> bool {
        let polls = limit.as_millis() / 5;
        (0..polls).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            done()
        })
    }

    #[test]
    fn ordinary_records_are_synced_once_a_window_not_once_a_batch() {
        let window = Duration::from_millis(300);
        let (_dir, path, writer) = windowed(window);
        let started = Instant::now();
        // A record every 5 ms: with a sync per 10 ms batch (until issue
        // 16's eighth round) this was ~100 syncs.
        for i in 0..200 {
            writer.record(request(&format!("r{i}"))).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let windows = started.elapsed().as_millis() / window.as_millis();
        let syncs = writer.shared.syncs.load(Ordering::Relaxed);
        assert!(syncs >= 1, "nothing was synced in {windows} windows");
        assert!(
            u128::from(syncs) <= windows + 2,
            "{syncs} syncs in {windows} windows"
        );
        drop(writer);
        assert_eq!(crate::audit::verify(&path).unwrap().lines, 200);
    }

    #[test]
    fn a_record_nobody_waits_for_is_synced_by_its_window_and_an_idle_log_not_again() {
        let (_dir, _path, writer) = windowed(Duration::from_millis(50));
        writer.record(request("a")).unwrap();
        // No caller waits: the window's end alone syncs it.
        assert!(eventually(
            || writer.shared.syncs.load(Ordering::Relaxed) == 1
        ));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(writer.shared.syncs.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_caller_waiting_for_the_disk_does_not_wait_for_the_window() {
        let (_dir, _path, writer) = windowed(sync_window(Some(10_000)).unwrap());
        writer.record(request("a")).unwrap();
        let durable =
            tokio::time::timeout(Duration::from_secs(5), writer.record_durably(request("b"))).await;
        assert!(matches!(durable, Ok(Ok(()))), "waited for the window");
        assert_eq!(writer.shared.syncs.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn deferred_lines_are_written_within_the_write_window_not_the_sync_window() {
        let (_dir, path, writer) = windowed(sync_window(Some(10_000)).unwrap());
        writer.record(request("a")).unwrap();
        writer.record_later(completion("a")).unwrap();
        // In the file (a crash of the proxy keeps it) long before the sync.
        assert!(eventually(|| {
            crate::audit::verify(&path).is_ok_and(|r| r.lines == 2 && r.completions == 1)
        }));
        assert_eq!(writer.shared.syncs.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn dropping_the_last_writer_writes_the_deferred_lines_before_it_returns() {
        // Neither window has passed: only the last round of the sync
        // thread, waited for by the drop, can have written the completion.
        let (_dir, path, writer) = windowed(sync_window(Some(10_000)).unwrap());
        writer.record(request("a")).unwrap();
        writer.record_later(completion("a")).unwrap();
        let shared = writer.shared.clone();
        drop(writer);
        // Synced too, once: the last round's.
        assert_eq!(shared.syncs.load(Ordering::Relaxed), 1);
        let report = crate::audit::verify(&path).unwrap();
        assert_eq!((report.lines, report.completions), (2, 1));
    }

    #[test]
    fn the_sync_window_is_bounded() {
        assert_eq!(sync_window(None), Ok(DEFAULT_SYNC_WINDOW));
        assert_eq!(sync_window(Some(1)), Ok(Duration::from_millis(1)));
        assert_eq!(sync_window(Some(10_000)), Ok(Duration::from_secs(10)));
        for bad in [0, 10_001, u64::MAX] {
            let error = sync_window(Some(bad)).unwrap_err();
            assert!(error.contains("expected 1 to 10000"), "{error}");
        }
    }

    #[test]
    fn the_gathering_stops_at_the_write_window_or_the_sync_window_if_sooner() {
        let ms = Duration::from_millis;
        assert_eq!(gather_for(None), WRITE_WINDOW);
        assert_eq!(gather_for(Some(WRITE_WINDOW * 5)), WRITE_WINDOW);
        assert_eq!(gather_for(Some(ms(50))), ms(50));
        assert_eq!(gather_for(Some(ms(1))), ms(1));
        assert_eq!(gather_for(Some(Duration::ZERO)), Duration::ZERO);
    }

    #[test]
    fn a_created_message_id_line_is_synced_at_once_not_at_the_window() {
        let (_dir, _path, writer) = windowed(sync_window(Some(10_000)).unwrap());
        writer.record_synced_soon(completion("a")).unwrap();
        assert!(within(Duration::from_secs(5), || writer
            .shared
            .syncs
            .load(Ordering::Relaxed)
            == 1));
    }

    #[tokio::test]
    async fn after_a_failed_sync_of_the_log_itself_nothing_is_written_or_answered_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut log = AuditLog::open(&path).unwrap();
        log.write_all(&[request("before")]).unwrap();
        // As a rotation's sync of the file it leaves can fail: the log
        // knows, the writer must too (a later sync of the same file can
        // succeed without having written what the failed one held).
        log.fail_syncs();
        let writer = AuditWriter::start(log).unwrap();
        assert!(writer.record(request("a")).is_err());
        assert!(writer.record_later(completion("a")).is_err());
        assert!(writer.flush().await.is_err());
        assert!(writer.record(request("b")).is_err());
        drop(writer);
        assert_eq!(crate::audit::verify(&path).unwrap().lines, 1);
    }
}
