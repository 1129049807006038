//! The hand-off socket: where the Feishu long-connection client (another
//! process, the proxy's user, the only holder of the app secret) gives the
//! router each event it received, and learns whether to acknowledge it.
//!
//! ```text
//! connect process ──unix socket──► peer uid (SO_PEERCRED) = the configured one, else closed
//!   frame: u32 big-endian length (≤ MAX_FRAME) + the event as Feishu sent it
//!   ─► feishu::open_delivered (envelope, app id, token, type, dedup keys)
//!   ─► DeliveryLog::insert (same path and dedup as the HTTP intake) ─► commit
//!   ◄── frame: {"status": "stored" | "duplicate" | "ignored" | "refused" | "failed", "reason"}
//! ```
//!
//! The client acknowledges Feishu (code 200) only on `stored`, `duplicate`
//! or `ignored`: the event is then durable or known to lead nowhere. On
//! anything else, or no answer, it does not, and Feishu delivers it again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};

use super::feishu::{self, FeishuKeys, Opened};
use super::{wall_clock_ms, IntakeError};
use crate::store::{DeliveryLog, Inserted, NewDelivery};

/// The largest frame either way. A Feishu event is a few KiB; a split one
/// is put together by the client before it is handed over.
pub const MAX_FRAME: usize = 1 << 20;

/// The socket's mode: its owner (the router) and its group.
pub const SOCKET_MODE: u32 = 0o660;

/// Connections served at once (one client is normal; a restart overlaps).
const MAX_CONNECTIONS: usize = 4;

/// What the router says about one handed-over event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Committed; it will be decided once.
    Stored,
    /// Already stored (by event id or message id): decided once already.
    Duplicate,
    /// A known event type that leads to no trigger; nothing stored.
    Ignored,
    /// Not an event of ours (wrong app, token, malformed): nothing stored.
    Refused,
    /// Storing failed; nothing is promised.
    Failed,
}

impl Status {
    /// Whether the client may tell Feishu the event was received.
    pub fn acknowledge(self) -> bool {
        matches!(self, Status::Stored | Status::Duplicate | Status::Ignored)
    }
}

/// The router's answer to one frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Confirm {
    pub status: Status,
    #[serde(default)]
    pub reason: String,
}

/// Where the router takes events over, and from whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffConfig {
    /// The unix socket the router listens on.
    pub socket: PathBuf,
    /// The only uid whose connections are served (the connect process's).
    pub peer_uid: u32,
}

/// Whether a peer may hand events over: its kernel-reported uid is the
/// configured one. Nothing the peer says is taken into account.
pub fn admits(peer_uid: Option<u32>, configured: u32) -> bool {
    peer_uid == Some(configured)
}

/// A frame's length prefix.
pub fn prefix(len: usize) -> Option<[u8; 4]> {
    (len <= MAX_FRAME)
        .then(|| u32::try_from(len).ok())
        .flatten()
        .map(u32::to_be_bytes)
}

/// Reads one frame; `Ok(None)` at a clean end of stream; an error for an
/// oversized or cut frame.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = [0u8; 4];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> std::io::Result<()> {
    let head = prefix(body.len()).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a frame of {} bytes (at most {MAX_FRAME})", body.len()),
        )
    })?;
    let mut whole = Vec::with_capacity(4 + body.len());
    whole.extend_from_slice(&head);
    whole.extend_from_slice(body);
    w.write_all(&whole).await?;
    w.flush().await
}

/// What the router does with one handed-over event, before storing:
/// `Ok(Some(..))` a delivery to store, `Ok(None)` ignored, `Err` refused.
type Checked = Result<Option<(String, String, String, Vec<u8>)>, String>;

fn check(keys: &FeishuKeys, payload: &[u8]) -> Checked {
    match feishu::open_delivered(keys, payload) {
        Ok(Opened::Store {
            event_id,
            event_type,
            meaning,
            plain,
        }) => Ok(Some((event_id, event_type, meaning, plain))),
        Ok(Opened::Ignore { .. }) => Ok(None),
        Ok(Opened::Challenge(_)) => Err("a challenge over the long connection".into()),
        Err(refused) => Err(refused.to_string()),
    }
}

struct Shared {
    keys: FeishuKeys,
    log: Arc<Mutex<DeliveryLog>>,
    wake: std::sync::mpsc::SyncSender<()>,
    peer_uid: u32,
}

/// Binds the socket (replacing a stale one) and serves it on a thread of
/// its own until `stopped` changes.
pub(super) fn spawn(
    log: DeliveryLog,
    keys: FeishuKeys,
    config: &HandoffConfig,
    wake: std::sync::mpsc::SyncSender<()>,
    stopped: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>, IntakeError> {
    let listener = bind(&config.socket)?;
    let shared = Arc::new(Shared {
        keys,
        log: Arc::new(Mutex::new(log)),
        wake,
        peer_uid: config.peer_uid,
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(IntakeError::Start)?;
    std::thread::Builder::new()
        .name("intake-handoff".into())
        .spawn(move || {
            runtime.block_on(async move {
                match UnixListener::from_std(listener) {
                    Ok(l) => serve(l, shared, stopped).await,
                    Err(error) => tracing::error!(%error, "the hand-off socket could not start"),
                }
            });
            runtime.shutdown_background();
        })
        .map_err(IntakeError::Start)
}

fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener, IntakeError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let fail = |source| IntakeError::Handoff {
        path: path.to_owned(),
        source,
    };
    // A socket left by an earlier run is replaced; anything else is not ours.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        std::fs::remove_file(path).map_err(fail)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(fail)?;
    // Two locks: only the socket's owner and group may connect (the
    // group is the directory's when it is setgid, as `gatehouse up` makes
    // it: the connect process's), and of those only the configured uid is
    // served (SO_PEERCRED). Until this chmod the uid check holds alone.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    Ok(listener)
}

async fn serve(listener: UnixListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = stop.changed() => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let stream = tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "hand-off accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        if !admits(uid, shared.peer_uid) {
            tracing::warn!(
                peer_uid = ?uid,
                expected = shared.peer_uid,
                "hand-off connection refused: not the connect process's uid"
            );
            drop(stream);
            continue;
        }
        let shared = shared.clone();
        connections.spawn(async move {
            if let Err(error) = connection(stream, &shared).await {
                tracing::info!(%error, "hand-off connection ended");
            }
            drop(permit);
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

async fn connection(mut stream: UnixStream, shared: &Arc<Shared>) -> std::io::Result<()> {
    while let Some(payload) = read_frame(&mut stream).await? {
        let confirm = take(shared, payload).await;
        if confirm.status != Status::Stored {
            tracing::info!(status = ?confirm.status, reason = %confirm.reason, "handed-over event");
        }
        let body = serde_json::to_vec(&confirm).map_err(std::io::Error::other)?;
        write_frame(&mut stream, &body).await?;
    }
    Ok(())
}

/// Checks and stores one event; the answer is sent only after the commit.
async fn take(shared: &Arc<Shared>, payload: Vec<u8>) -> Confirm {
    let confirm = |status, reason: String| Confirm { status, reason };
    let (event_id, event_type, meaning, plain) = match check(&shared.keys, &payload) {
        Ok(Some(delivery)) => delivery,
        Ok(None) => return confirm(Status::Ignored, "leads to no trigger".into()),
        Err(reason) => return confirm(Status::Refused, reason),
    };
    let log = shared.log.clone();
    let id = event_id.clone();
    let inserted = tokio::task::spawn_blocking(move || {
        let mut log = log
            .lock()
            .map_err(|_| "the delivery log is poisoned".to_owned())?;
        log.insert(&NewDelivery {
            platform: "feishu",
            delivery_id: &id,
            event: &event_type,
            meaning: &meaning,
            body: &plain,
            received_at: wall_clock_ms(),
        })
        .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    match inserted {
        Ok(Inserted::New) => {
            // A full channel means a wake-up is already pending.
            let _ = shared.wake.try_send(());
            confirm(Status::Stored, event_id)
        }
        Ok(Inserted::DuplicateDelivery) => {
            crate::metrics::duplicate("feishu", "delivery");
            confirm(Status::Duplicate, event_id)
        }
        Ok(Inserted::DuplicateMeaning) => {
            crate::metrics::duplicate("feishu", "meaning");
            confirm(Status::Duplicate, event_id)
        }
        Err(problem) => {
            tracing::error!(%event_id, %problem, "storing a handed-over event failed");
            confirm(Status::Failed, "the event could not be stored".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_uid_is_admitted() {
        for (peer, configured, expected) in [
            (Some(998), 998, true),
            (Some(0), 998, false),
            (Some(999), 998, false),
            (None, 998, false),
            (Some(0), 0, true),
        ] {
            assert_eq!(admits(peer, configured), expected, "{peer:?} {configured}");
        }
    }

    #[test]
    fn the_socket_admits_its_owner_and_group_only_and_takes_a_setgid_dirs_group() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let setgid = dir.path().join("handoff");
        std::fs::create_dir(&setgid).unwrap();
        // A group other than this process's own: any, as root; else one it
        // is in, where there is one (without, the inheritance is not seen).
        let own = nix::unistd::getegid().as_raw();
        let other = if nix::unistd::geteuid().is_root() {
            Some(own.wrapping_add(4242))
        } else {
            let groups = nix::unistd::getgroups().unwrap_or_default();
            groups.iter().map(|g| g.as_raw()).find(|g| *g != own)
        };
        if let Some(g) = other {
            std::os::unix::fs::chown(&setgid, None, Some(g)).unwrap();
        }
        std::fs::set_permissions(&setgid, std::fs::Permissions::from_mode(0o2750)).unwrap();
        let path = setgid.join("s.sock");
        let _listener = bind(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, SOCKET_MODE, "no one else may connect");
        assert_eq!(meta.gid(), other.unwrap_or(own), "the directory's group");
        // A stale socket is replaced and gets the same mode; a file is not ours.
        drop(_listener);
        let _again = bind(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().mode() & 0o777,
            SOCKET_MODE
        );
        let file = setgid.join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(bind(&file).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
    }

    #[test]
    fn only_stored_duplicate_and_ignored_are_acknowledged() {
        use Status::*;
        for (status, ack) in [
            (Stored, true),
            (Duplicate, true),
            (Ignored, true),
            (Refused, false),
            (Failed, false),
        ] {
            assert_eq!(status.acknowledge(), ack, "{status:?}");
        }
    }

    #[test]
    fn frames_are_bounded_both_ways() {
        assert_eq!(prefix(0), Some([0, 0, 0, 0]));
        assert_eq!(
            prefix(MAX_FRAME),
            u32::try_from(MAX_FRAME).ok().map(u32::to_be_bytes)
        );
        assert_eq!(prefix(MAX_FRAME + 1), None);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut wire = Vec::new();
            write_frame(&mut wire, b"{}").await.unwrap();
            write_frame(&mut wire, b"").await.unwrap();
            let mut r = wire.as_slice();
            assert_eq!(read_frame(&mut r).await.unwrap(), Some(b"{}".to_vec()));
            assert_eq!(read_frame(&mut r).await.unwrap(), Some(Vec::new()));
            assert_eq!(read_frame(&mut r).await.unwrap(), None);
            let big = (MAX_FRAME as u32 + 1).to_be_bytes();
            assert!(read_frame(&mut big.as_slice()).await.is_err());
            let cut = [0, 0, 0, 9, b'{'];
            assert!(read_frame(&mut cut.as_slice()).await.is_err());
            assert!(write_frame(&mut Vec::new(), &vec![0; MAX_FRAME + 1])
                .await
                .is_err());
        });
    }

    #[test]
    fn confirmations_read_back() {
        let c = Confirm {
            status: Status::Duplicate,
            reason: "ev_1".into(),
        };
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(text, r#"{"status":"duplicate","reason":"ev_1"}"#);
        assert_eq!(serde_json::from_str::<Confirm>(&text).unwrap(), c);
        assert!(serde_json::from_str::<Confirm>(r#"{"status":"ok"}"#).is_err());
    }
}
