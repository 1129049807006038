//! Hands audit records to a dedicated writer thread, in order.
//!
//! Every request's record is queued *before* it is forwarded and its
//! completion after. Records of message-bearing calls are waited for until
//! they are on disk (fsync), so an acknowledged message is never missing
//! after a crash; other records are written in order and synced in batches,
//! which keeps an fsync off the path of every ordinary request.

use std::sync::mpsc;

use serde_json::Value;
use tokio::sync::oneshot;

/// Where records end up: an append-only, hash-chained log.
pub trait AuditAppend: Send + 'static {
    /// Appends one record (not necessarily durable yet).
    fn append(&mut self, record: &Value) -> std::io::Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> std::io::Result<()>;
}

/// The audit log could not be written: the request is refused.
#[derive(Debug, thiserror::Error)]
#[error("the audit log could not be written; refusing to forward")]
pub struct AuditUnavailable;

struct Job {
    record: Value,
    durable: Option<oneshot::Sender<bool>>,
}

/// A cloneable handle to the writer thread.
#[derive(Clone)]
pub struct AuditWriter {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditWriter")
    }
}

impl AuditWriter {
    /// Starts the writer thread over `log`.
    pub fn start(mut log: impl AuditAppend) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("gatehouse-audit".into())
            .spawn(move || {
                while let Ok(first) = queue.recv() {
                    let mut batch = vec![first];
                    batch.extend(queue.try_iter());
                    let mut ok = true;
                    for job in &batch {
                        if let Err(error) = log.append(&job.record) {
                            tracing::error!(%error, "appending to the audit log");
                            ok = false;
                        }
                    }
                    if let Err(error) = log.sync() {
                        tracing::error!(%error, "syncing the audit log");
                        ok = false;
                    }
                    for job in batch {
                        if let Some(done) = job.durable {
                            let _ = done.send(ok);
                        }
                    }
                }
            })
            .map(|_| ())
            .unwrap_or_else(|error| tracing::error!(%error, "starting the audit writer"));
        Self { jobs }
    }

    /// Queues a record; it is written after every record queued before it.
    pub fn record(&self, record: Value) -> Result<(), AuditUnavailable> {
        self.jobs
            .send(Job {
                record,
                durable: None,
            })
            .map_err(|_| AuditUnavailable)
    }

    /// Queues a record and waits until it is on disk.
    pub async fn record_durably(&self, record: Value) -> Result<(), AuditUnavailable> {
        let (done, wait) = oneshot::channel();
        self.jobs
            .send(Job {
                record,
                durable: Some(done),
            })
            .map_err(|_| AuditUnavailable)?;
        match wait.await {
            Ok(true) => Ok(()),
            _ => Err(AuditUnavailable),
        }
    }
}
