//! Where the checks that read a whole body run (a GraphQL document, a
//! message's JSON): on tokio's blocking threads, at most
//! [`HeavyPool::threads`] at once, with at most [`HeavyPool::queue`] waiting
//! or running. So the runtime's worker threads, which every identity's
//! connections share, never spend a parse's time; a request that finds the
//! queue full is refused at once (503) rather than waiting without bound.
//! Small inputs are checked in place: spawning would cost more than the
//! check.

use std::sync::Arc;

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
}

impl HeavyPool {
    /// `threads` checks at once (at least one), `queue` admitted in all.
    pub(super) fn new(threads: usize, queue: usize) -> Self {
        let threads = threads.max(1);
        let queue = queue.max(threads);
        Self {
            running: Arc::new(Semaphore::new(threads)),
            queued: Arc::new(Semaphore::new(queue)),
            queue,
        }
    }

    /// As many threads as the machine has cores, and eight waiting per
    /// thread.
    pub(super) fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::new(cores, cores * 8)
    }

    /// Runs `check` off the runtime's worker threads, when a slot is free.
    pub(super) async fn run<T, F>(&self, check: F) -> Result<T, NotRun>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let Ok(slot) = self.queued.clone().try_acquire_owned() else {
            return Err(NotRun::Busy(self.queue));
        };
        // The semaphore is never closed.
        let Ok(thread) = self.running.clone().acquire_owned().await else {
            return Err(NotRun::Failed);
        };
        let done = tokio::task::spawn_blocking(move || {
            let answer = check();
            drop((thread, slot));
            answer
        });
        done.await.map_err(|_| NotRun::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_refuses_and_a_freed_slot_admits() {
        let pool = Arc::new(HeavyPool::new(1, 2));
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        // Two checks that block until released take both slots.
        let mut running = Vec::new();
        for _ in 0..2 {
            let (pool, held) = (pool.clone(), held.clone());
            running.push(tokio::spawn(async move {
                pool.run(move || held.lock().unwrap().recv().is_ok()).await
            }));
        }
        // Let both take their slot (the second waits for the thread).
        while pool.queued.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(pool.run(|| 1).await, Err(NotRun::Busy(2)));
        release.send(()).unwrap();
        release.send(()).unwrap();
        for task in running {
            assert_eq!(task.await.unwrap(), Ok(true));
        }
        assert_eq!(pool.run(|| 1).await, Ok(1));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_check_is_failed_and_frees_its_slot() {
        let pool = HeavyPool::new(1, 1);
        assert_eq!(
            pool.run(|| -> u8 { panic!("boom") }).await,
            Err(NotRun::Failed)
        );
        assert_eq!(pool.run(|| 2).await, Ok(2));
    }
}
