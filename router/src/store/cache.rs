//! The decision path's read cache.

use super::ThreadRecord;
use crate::id::ThreadId;
use crate::ticket::Ticket;

/// What the decision path would otherwise read back at every decision.
///
/// Threads never change once stored, so an entry stays true for good. A
/// thread's latest ticket changes only through writes: this store's own
/// (which update the cache in the same transaction) or another
/// connection's, which change `PRAGMA data_version` and empty the cache
/// before the next decision reads it. A rolled-back transaction empties it
/// too, so nothing it wrote survives here.
#[derive(Default)]
pub(super) struct Cache {
    pub(super) threads: std::collections::HashMap<String, ThreadRecord>,
    pub(super) latest: std::collections::HashMap<ThreadId, Option<Ticket>>,
    /// Set while a transaction runs; still set at the next one when the
    /// last one unwound (a panic), whose writes were rolled back.
    pub(super) in_transaction: bool,
}

/// Past this many entries a map is emptied rather than grown: the cache
/// only saves reads, so forgetting is always correct.
const CACHE_ENTRIES: usize = 1 << 16;

impl Cache {
    pub(super) fn clear(&mut self) {
        self.threads.clear();
        self.latest.clear();
    }

    pub(super) fn remember_thread(&mut self, t: &ThreadRecord) {
        if self.threads.len() >= CACHE_ENTRIES {
            self.threads.clear();
        }
        self.threads.insert(t.key.clone(), t.clone());
    }

    pub(super) fn remember_latest(&mut self, thread: &ThreadId, ticket: Option<&Ticket>) {
        if self.latest.len() >= CACHE_ENTRIES {
            self.latest.clear();
        }
        self.latest.insert(thread.clone(), ticket.cloned());
    }
}
