//! The WAL checkpointer: a thread of its own, off the decision path.

use std::path::Path;

use rusqlite::Connection;

use super::{Result, StoreError};

/// Checkpoints the WAL from its own connection and thread every
/// [`CHECKPOINT_EVERY`], so that most checkpoint work happens off the
/// decision path (see the `wal_autocheckpoint` note in `Store::init`).
/// Checkpoints do not change what a commit guarantees; they only move
/// committed pages from the WAL into the database file.
pub(super) struct Checkpointer {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Checkpointer {
    pub(super) fn start(path: &Path) -> Result<Self> {
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
