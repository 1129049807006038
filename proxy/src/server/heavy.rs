//! Where the checks that read a whole body run (a GraphQL document, a
//! message's JSON): on tokio's blocking threads, at most
//! [`HeavyPool::threads`] at once, with at most [`HeavyPool::queue`] waiting
//! or running. So the runtime's worker threads, which every identity's
//! connections share, never spend a parse's time; a request that finds the
//! queue full is refused at once (503) rather than waiting without bound.
//! Each identity holds at most [`HeavyPool::share`] of the queue, so one
//! identity flooding the pool with large bodies leaves room for the
//! others' (the queue is global, the flood is one worker's).
//! Small inputs are checked in place: spawning would cost more than the
//! check.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

/// Inputs up to this size are checked on the calling thread: a check of
/// 4 KiB at its worst is a few microseconds (`cargo bench --bench rules`).
pub(super) const INLINE_BYTES: usize = 4 * 1024;

/// Why a check did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NotRun {
    /// Every slot of the queue is taken.
    #[error("the proxy is checking as many request bodies as it queues ({0}); retry shortly")]
    Busy(usize),
    /// The identity holds its whole share of the queue.
    #[error("this identity has as many request bodies being checked as its share of the proxy's queue ({0}); retry when one is answered")]
    OwnShare(usize),
    /// The check panicked; nothing it decided is used.
    #[error("the body check failed")]
    Failed,
}

/// The bounded pool for body checks.
#[derive(Debug)]
pub(super) struct HeavyPool {
    running: Arc<Semaphore>,
    queued: Arc<Semaphore>,
    queue: usize,
    share: usize,
    /// Slots held per identity; an identity holding none has no entry.
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// One identity's slot of its share, given back on drop.
struct ShareSlot {
    held: Arc<Mutex<HashMap<String, usize>>>,
    identity: String,
}

impl Drop for ShareSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.identity) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.identity);
            }
        }
    }
}

impl HeavyPool {
    /// `threads` checks at once (at least one), `queue` admitted in all,
    /// each identity holding at most [`share_of`] of them.
    pub(super) fn new(threads: usize, queue: usize) -> Self {
        let threads = threads.max(1);
        let queue = queue.max(threads);
        Self {
            running: Arc::new(Semaphore::new(threads)),
            queued: Arc::new(Semaphore::new(queue)),
            queue,
            share: share_of(threads, queue),
            held: Arc::default(),
        }
    }

    /// How many slots of the queue one identity may hold.
    #[cfg(test)]
    fn share(&self) -> usize {
        self.share
    }

    /// As many threads as the machine has cores, and eight waiting per
    /// thread.
    pub(super) fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::new(cores, cores * 8)
    }

    /// Takes a slot of `identity`'s share, if it has one left.
    fn take_share(&self, identity: &str) -> Option<ShareSlot> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(identity.to_owned()).or_insert(0);
        if *n >= self.share {
            return None;
        }
        *n += 1;
        Some(ShareSlot {
            held: self.held.clone(),
            identity: identity.to_owned(),
        })
    }

    /// Runs `check` for `identity` off the runtime's worker threads, when
    /// the identity's share and the queue have a slot free.
    pub(super) async fn run<T, F>(&self, identity: &str, check: F) -> Result<T, NotRun>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let Some(share) = self.take_share(identity) else {
            return Err(NotRun::OwnShare(self.share));
        };
        let Ok(slot) = self.queued.clone().try_acquire_owned() else {
            return Err(NotRun::Busy(self.queue));
        };
        // The semaphore is never closed.
        let Ok(thread) = self.running.clone().acquire_owned().await else {
            return Err(NotRun::Failed);
        };
        let done = tokio::task::spawn_blocking(move || {
            let answer = check();
            drop((thread, slot, share));
            answer
        });
        done.await.map_err(|_| NotRun::Failed)
    }
}

/// One identity's share of a queue of `queue` slots: a quarter, so four
/// identities flooding at once still leave a slot, and never fewer than
/// the threads, so a lone identity can keep every thread busy.
fn share_of(threads: usize, queue: usize) -> usize {
    (queue / 4).max(threads).min(queue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Starts `n` checks for `identity` that block until `release` sends;
    /// returns once each holds its slot of the queue.
    async fn hold(
        pool: &Arc<HeavyPool>,
        identity: &'static str,
        n: usize,
        held: &Arc<std::sync::Mutex<mpsc::Receiver<()>>>,
    ) -> Vec<tokio::task::JoinHandle<Result<bool, NotRun>>> {
        let before = pool.queued.available_permits();
        let tasks = (0..n)
            .map(|_| {
                let (pool, held) = (pool.clone(), held.clone());
                tokio::spawn(async move {
                    pool.run(identity, move || held.lock().unwrap().recv().is_ok())
                        .await
                })
            })
            .collect();
        while pool.queued.available_permits() > before - n {
            tokio::task::yield_now().await;
        }
        tasks
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_refuses_and_a_freed_slot_admits() {
        let pool = Arc::new(HeavyPool::new(1, 2));
        assert_eq!(pool.share(), 1);
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        // Two identities' checks, blocked until released, take both slots
        // (the second waits for the thread).
        let mut running = hold(&pool, "a", 1, &held).await;
        running.extend(hold(&pool, "b", 1, &held).await);
        assert_eq!(pool.run("c", || 1).await, Err(NotRun::Busy(2)));
        release.send(()).unwrap();
        release.send(()).unwrap();
        for task in running {
            assert_eq!(task.await.unwrap(), Ok(true));
        }
        assert_eq!(pool.run("c", || 1).await, Ok(1));
        assert!(
            pool.held.lock().unwrap().is_empty(),
            "a share not given back"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_identity_over_its_share_is_refused_and_another_still_admitted() {
        let pool = Arc::new(HeavyPool::new(2, 16));
        assert_eq!(pool.share(), 4);
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let hog = hold(&pool, "hog", 4, &held).await;
        // The hog's fifth is refused for its share, with room in the queue.
        assert_eq!(pool.run("hog", || 1).await, Err(NotRun::OwnShare(4)));
        assert!(pool.queued.available_permits() >= 12);
        // Another identity's check is admitted and runs when a thread frees.
        let other = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run("other", || 7).await })
        };
        for _ in 0..4 {
            release.send(()).unwrap();
        }
        assert_eq!(other.await.unwrap(), Ok(7));
        for task in hog {
            assert_eq!(task.await.unwrap(), Ok(true));
        }
        // Its share given back, the hog is admitted again.
        assert_eq!(pool.run("hog", || 2).await, Ok(2));
    }

    #[test]
    fn a_share_is_a_quarter_of_the_queue_and_never_fewer_than_the_threads() {
        // (threads, queue, share)
        for (threads, queue, share) in [
            (1, 8, 2),
            (2, 16, 4),
            (4, 32, 8),
            (8, 8, 8),
            (2, 4, 2),
            (1, 1, 1),
            (16, 128, 32),
        ] {
            assert_eq!(share_of(threads, queue), share, "{threads} {queue}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_check_is_failed_and_frees_its_slot() {
        let pool = HeavyPool::new(1, 1);
        assert_eq!(
            pool.run("a", || -> u8 { panic!("boom") }).await,
            Err(NotRun::Failed)
        );
        assert_eq!(pool.run("a", || 2).await, Ok(2));
        assert!(
            pool.held.lock().unwrap().is_empty(),
            "a share not given back"
        );
    }
}
