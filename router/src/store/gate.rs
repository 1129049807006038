//! One first-come-first-served write gate per database file, shared by
//! every connection this process opens on it.
//!
//! SQLite's write lock is not fair: a connection that meets it busy polls
//! (see `schema::wait_for_lock`), and a writer committing back to back (the
//! processor deciding a backlog, one transaction per decision) takes it
//! again microseconds after releasing it, so a waiting insert rarely finds
//! it free: with 1 000 deliveries queued, the webhook's p99 time-to-2xx was
//! 172 ms (router README, Benchmark). Every writer in the process queues
//! here first, in arrival order, so an insert waits for at most the
//! transactions that asked before it. Other processes still meet SQLite's
//! lock and its busy handler.

use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// How long a writer waits for its turn before its transaction fails: as
/// long as the busy handler waits for another process's lock.
const TURN_WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub(crate) struct WriteGate {
    queue: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    held: bool,
    next_ticket: u64,
    waiting: VecDeque<u64>,
}

/// The right to write; the next writer in line goes when it is dropped.
pub(crate) struct Turn<'g>(&'g WriteGate);

/// A database file: its device and inode.
type FileKey = (u64, u64);

/// The gates of the files open in this process.
static GATES: Mutex<Vec<(FileKey, Weak<WriteGate>)>> = Mutex::new(Vec::new());

impl WriteGate {
    /// The gate of the database file at `path` (which exists: it was just
    /// opened), shared with every other connection of this process on it.
    pub(crate) fn for_file(path: &Path) -> std::io::Result<Arc<Self>> {
        let meta = std::fs::metadata(path)?;
        let key = (meta.dev(), meta.ino());
        let mut gates = lock(&GATES);
        gates.retain(|(_, gate)| gate.strong_count() > 0);
        if let Some(gate) = gates
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, g)| g.upgrade())
        {
            return Ok(gate);
        }
        let gate = Arc::new(Self::default());
        gates.push((key, Arc::downgrade(&gate)));
        Ok(gate)
    }

    /// Waits for this writer's turn, behind every writer that asked before.
    /// `None` after [`TURN_WAIT`]: the caller reports the database busy.
    pub(crate) fn enter(&self) -> Option<Turn<'_>> {
        self.enter_within(TURN_WAIT)
    }

    fn enter_within(&self, wait: Duration) -> Option<Turn<'_>> {
        let deadline = Instant::now() + wait;
        let mut queue = lock(&self.queue);
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push_back(ticket);
        loop {
            if !queue.held && queue.waiting.front() == Some(&ticket) {
                queue.waiting.pop_front();
                queue.held = true;
                return Some(Turn(self));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                queue.waiting.retain(|t| *t != ticket);
                // The writer behind may be first now.
                self.changed.notify_all();
                return None;
            }
            queue = self
                .changed
                .wait_timeout(queue, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.0.queue).held = false;
        self.0.changed.notify_all();
    }
}

/// The gate's state is a few counters, consistent between any two
/// statements, so a panic elsewhere while the lock was held leaves it usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The error a transaction fails with when its turn did not come.
pub(crate) fn busy() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
        Some("another writer of this process held the database for 5 s".to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn connections_on_one_file_share_a_gate_and_other_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, b"").unwrap();
        let first = WriteGate::for_file(&a).unwrap();
        let again = WriteGate::for_file(&a).unwrap();
        let other = WriteGate::for_file(&b).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert!(!Arc::ptr_eq(&first, &other));
        // The same file under another name (a hard link) is the same gate.
        let link = dir.path().join("link.db");
        std::fs::hard_link(&a, &link).unwrap();
        assert!(Arc::ptr_eq(&first, &WriteGate::for_file(&link).unwrap()));
    }

    #[test]
    fn writers_get_their_turns_in_the_order_they_asked() {
        let gate = Arc::new(WriteGate::default());
        let held = gate.enter().unwrap();
        let (order_tx, order_rx) = mpsc::channel();
        let mut threads = Vec::new();
        for n in 0..4 {
            let writer = gate.clone();
            let order = order_tx.clone();
            threads.push(std::thread::spawn(move || {
                let _turn = writer.enter().unwrap();
                order.send(n).unwrap();
            }));
            // Wait until writer n is in line before the next one asks.
            while lock(&gate.queue).waiting.len() < n + 1 {
                std::thread::yield_now();
            }
        }
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        drop(order_tx);
        assert_eq!(order_rx.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_writer_that_gave_up_does_not_block_the_ones_behind_it() {
        let gate = Arc::new(WriteGate::default());
        let held = gate.enter().unwrap();
        // First in line, with a short patience: it gives up while held.
        let impatient = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.enter_within(Duration::from_millis(50)).is_some())
        };
        while lock(&gate.queue).waiting.is_empty() {
            std::thread::yield_now();
        }
        // Second in line, patient.
        let (got_tx, got_rx) = mpsc::channel();
        let patient = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let turn = gate.enter();
                got_tx.send(turn.is_some()).unwrap();
            })
        };
        assert!(!impatient.join().unwrap(), "a turn while the gate was held");
        while lock(&gate.queue).waiting.len() != 1 {
            std::thread::yield_now();
        }
        drop(held);
        assert!(
            got_rx.recv().unwrap(),
            "the writer behind one that gave up never got its turn"
        );
        patient.join().unwrap();
        assert!(!lock(&gate.queue).held);
    }
}
