//! The identity state is written by one thread of its own, never on the
//! async runtime's workers: a write is a `fsync` of the file and of its
//! directory, which can take milliseconds, and an identity's created
//! objects each ask for one while requests are being served.
//!
//! ```text
//! admin create / revoke ─┐                        ┌─► answered (201/204, or 503 when the write failed)
//! an object created ─────┴─► request ─► writer ───┴─► every request of the batch: the one write's outcome
//!                              (channel)   thread: drain all queued, apply, snapshot, tmp + fsync + rename
//! ```
//!
//! Requests that queue while a write is under way are served by the next
//! single write (group commit): each waiter is answered only once a write
//! that began after its change was made has completed, so "answered done"
//! still means "durable". Without a state file nothing is written and the
//! answer is immediate.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;

use super::persist::{Pending, PersistError};
use super::Proxy;

/// What a request asks of the saved state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// The live dynamic identities (or their created objects) changed.
    Save,
    /// `name` was revoked; `was_live` when it was being served.
    Revoked { name: String, was_live: bool },
}

struct Request {
    change: Change,
    done: oneshot::Sender<Result<bool, PersistError>>,
}

/// The writer thread's door, set once the state file is known.
pub(super) struct StateWriter {
    path: PathBuf,
    requests: mpsc::Sender<Request>,
}

impl StateWriter {
    /// Starts the writer thread for `path`. It ends when the proxy is
    /// dropped (the channel closes).
    pub(super) fn start(proxy: Weak<Proxy>, path: &Path) -> Result<Self, PersistError> {
        let (requests, queue) = mpsc::channel();
        let thread_path = path.to_owned();
        std::thread::Builder::new()
            .name("identity-state".into())
            .spawn(move || write_batches(&proxy, &thread_path, &queue))
            .map_err(|source| PersistError::Io {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            requests,
        })
    }
}

/// The answer to a request: whether it was known (a revoke of a name
/// neither live nor pending is not), once durable.
pub(super) struct Durable(Answer);

enum Answer {
    Now(Result<bool, PersistError>),
    Later {
        path: PathBuf,
        answer: oneshot::Receiver<Result<bool, PersistError>>,
    },
}

fn writer_gone(path: PathBuf) -> PersistError {
    PersistError::Io {
        path,
        source: std::io::Error::other("the identity state writer stopped"),
    }
}

impl Durable {
    /// Waits on the async runtime without holding a worker thread.
    pub(super) async fn done(self) -> Result<bool, PersistError> {
        match self.0 {
            Answer::Now(result) => result,
            Answer::Later { path, answer } => {
                answer.await.unwrap_or_else(|_| Err(writer_gone(path)))
            }
        }
    }

    /// Blocks the calling thread (not for async code: use [`Durable::done`]).
    pub(super) fn wait(self) -> Result<bool, PersistError> {
        match self.0 {
            Answer::Now(result) => result,
            Answer::Later { path, answer } => answer
                .blocking_recv()
                .unwrap_or_else(|_| Err(writer_gone(path))),
        }
    }
}

impl Proxy {
    /// Asks for `change` to be made durable.
    pub(super) fn request_state(&self, change: Change) -> Durable {
        let Some(writer) = self.identity_state.get() else {
            // Nothing is saved: a revoke is known when it was live.
            let known = match &change {
                Change::Save => true,
                Change::Revoked { was_live, .. } => *was_live,
            };
            return Durable(Answer::Now(Ok(known)));
        };
        let (done, answer) = oneshot::channel();
        if writer.requests.send(Request { change, done }).is_err() {
            return Durable(Answer::Now(Err(writer_gone(writer.path.clone()))));
        }
        Durable(Answer::Later {
            path: writer.path.clone(),
            answer,
        })
    }
}

/// The writer thread: waits for a request, takes every one queued behind
/// it, applies their changes to what is pending, writes once if any asks
/// for it, and answers them all.
fn write_batches(proxy: &Weak<Proxy>, path: &Path, queue: &mpsc::Receiver<Request>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        batch.extend(queue.try_iter());
        let Some(proxy) = proxy.upgrade() else {
            return;
        };
        let answers = write_batch(&proxy, path, batch.iter().map(|r| &r.change));
        for (request, answer) in batch.into_iter().zip(answers) {
            // A waiter that went away (its connection cut) needs no answer.
            let _ = request.done.send(answer);
        }
    }
}

/// Applies a batch of changes and writes once: each change's answer.
fn write_batch<'a>(
    proxy: &Arc<Proxy>,
    path: &Path,
    changes: impl Iterator<Item = &'a Change>,
) -> Vec<Result<bool, PersistError>> {
    let mut pending = proxy.pending();
    let known: Vec<bool> = changes.map(|change| apply(&mut pending, change)).collect();
    if !known.iter().any(|k| *k) {
        return known.into_iter().map(Ok).collect();
    }
    match proxy.write_state(path, &mut pending) {
        Ok(()) => known.into_iter().map(Ok).collect(),
        Err(error) => known
            .into_iter()
            .map(|k| if k { Err(error.duplicate()) } else { Ok(false) })
            .collect(),
    }
}

/// Records a change in what is pending (pure): whether it is known, and so
/// asks for a write. A revoke is known when live, already pending (a retry
/// after a failed write) or kept unrestored.
pub(super) fn apply(pending: &mut Pending, change: &Change) -> bool {
    match change {
        Change::Save => true,
        Change::Revoked { name, was_live } => {
            let known = *was_live
                | pending.revoked.contains(name)
                | pending.unrestored.remove(name).is_some();
            if known {
                pending.revoked.insert(name.clone());
            }
            known
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revoked(name: &str, was_live: bool) -> Change {
        Change::Revoked {
            name: name.into(),
            was_live,
        }
    }

    #[test]
    fn which_changes_ask_for_a_write() {
        let mut pending = Pending::default();
        assert!(apply(&mut pending, &Change::Save));
        // Neither live nor pending: nothing to revoke, nothing written.
        assert!(!apply(&mut pending, &revoked("tkt_a", false)));
        assert!(pending.revoked.is_empty());
        // Live: pending until a write succeeds; asked again, still known.
        assert!(apply(&mut pending, &revoked("tkt_a", true)));
        assert!(apply(&mut pending, &revoked("tkt_a", false)));
        // Kept unrestored: known once, then pending like any.
        pending.unrestored.insert(
            "tkt_b".into(),
            super::super::persist::SavedIdentity {
                name: "tkt_b".into(),
                rule_sets: vec![],
                tunnel_hosts: vec![],
                variables: Default::default(),
                own: vec![],
            },
        );
        assert!(apply(&mut pending, &revoked("tkt_b", false)));
        assert!(pending.unrestored.is_empty());
        assert!(pending.revoked.contains("tkt_b"));
    }
}
