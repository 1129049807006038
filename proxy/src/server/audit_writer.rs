//! Hands audit records to a dedicated writer thread, in order.
//!
//! Every request's record is queued *before* it is forwarded and its
//! completion after. Records of message-bearing calls are waited for until
//! they are on disk (fdatasync), so an acknowledged message is never missing
//! after a crash; other records are written in order and synced in batches
//! (group commit), which keeps an fsync off the path of every ordinary
//! request.
//!
//! After each batch the writer pauses for up to [`GATHER`] before taking
//! the next one, so under load ordinary records are gathered without the
//! request path waking the thread for each of them (a wake-up is a syscall
//! and a context switch, per record). A caller that waits for the disk
//! (message records, flush) cuts the pause short.

use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::audit::{AuditLog, Record};

/// The audit log could not be written: the request is refused.
#[derive(Debug, thiserror::Error)]
#[error("the audit log could not be written; refusing to forward")]
pub struct AuditUnavailable;

/// The longest an ordinary record waits before the writer takes it.
const GATHER: Duration = Duration::from_millis(1);

struct Job {
    /// None: a flush marker, acknowledged once everything before it is on disk.
    record: Option<Record>,
    durable: Option<oneshot::Sender<bool>>,
}

/// A cloneable handle to the writer thread.
#[derive(Clone)]
pub struct AuditWriter {
    jobs: mpsc::Sender<Job>,
    writer: std::thread::Thread,
}

impl std::fmt::Debug for AuditWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditWriter")
    }
}

impl AuditWriter {
    /// Starts the writer thread over `log`.
    pub fn start(mut log: AuditLog) -> Result<Self, std::io::Error> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let writer = std::thread::Builder::new()
            .name("gatehouse-audit".into())
            .spawn(move || {
                while let Ok(first) = queue.recv() {
                    let mut batch = vec![first];
                    batch.extend(queue.try_iter());
                    let records: Vec<Record> =
                        batch.iter_mut().filter_map(|j| j.record.take()).collect();
                    let ok = match log.append_all(&records) {
                        Ok(_) => true,
                        Err(error) => {
                            tracing::error!(%error, "writing the audit log");
                            false
                        }
                    };
                    for job in batch {
                        if let Some(done) = job.durable {
                            let _ = done.send(ok);
                        }
                    }
                    // Ended early by `unpark` from a waiting caller.
                    std::thread::park_timeout(GATHER);
                }
            })?;
        Ok(Self {
            jobs,
            writer: writer.thread().clone(),
        })
    }

    /// Queues a record; it is written after every record queued before it.
    pub fn record(&self, record: Record) -> Result<(), AuditUnavailable> {
        self.jobs
            .send(Job {
                record: Some(record),
                durable: None,
            })
            .map_err(|_| AuditUnavailable)
    }

    /// Waits until every record queued so far is on disk.
    pub async fn flush(&self) -> Result<(), AuditUnavailable> {
        let (done, wait) = oneshot::channel();
        self.jobs
            .send(Job {
                record: None,
                durable: Some(done),
            })
            .map_err(|_| AuditUnavailable)?;
        self.writer.unpark();
        match wait.await {
            Ok(true) => Ok(()),
            _ => Err(AuditUnavailable),
        }
    }

    /// Queues a record and waits until it is on disk.
    pub async fn record_durably(&self, record: Record) -> Result<(), AuditUnavailable> {
        let (done, wait) = oneshot::channel();
        self.jobs
            .send(Job {
                record: Some(record),
                durable: Some(done),
            })
            .map_err(|_| AuditUnavailable)?;
        self.writer.unpark();
        match wait.await {
            Ok(true) => Ok(()),
            _ => Err(AuditUnavailable),
        }
    }
}
