//! Identities created through the admin API outlive a restart of the
//! proxy. A running job's sandbox holds its identity's socket *directory*
//! (bind-mounted), not the socket: so after a crash the proxy re-creates
//! each identity, with its own-object set, and binds a new socket in the
//! same directory, where the sandbox sees it at the same path.
//!
//! ```text
//! create / revoke / an object created ─► state_writer thread: snapshot of the dynamic identities ─► tmp, fsync, rename
//! start (Proxy::restore)               ─► read ─► add_identity each (checked again) ─► own sets back
//! ```
//!
//! The file holds names, rule-set names, tunnel hosts, variables and the
//! ids of created objects: no secret. Static identities (the config's)
//! are not in it: the config re-creates them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::state_writer::{Change, Durable, StateWriter};
use super::{IdentityError, IdentitySpec, Proxy};
use crate::rules::OwnedObject;

/// The only version this proxy writes and reads.
const VERSION: u32 = 1;

/// Why the saved identities could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The file could not be read or written.
    #[error("identity state {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not one this proxy wrote.
    #[error("identity state {path}: {message} (move it away to start without the identities it holds; their jobs then fail)")]
    Format { path: PathBuf, message: String },
    /// The file or its directory could be written by someone else.
    #[error("identity state {path}: {message}: refused (make it the proxy's user's, not writable by group or others)")]
    Unsafe { path: PathBuf, message: String },
}

/// The file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub version: u32,
    pub identities: Vec<SavedIdentity>,
}

/// One identity as created through the admin API, and what it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedIdentity {
    pub name: String,
    pub rule_sets: Vec<String>,
    pub tunnel_hosts: Vec<String>,
    pub variables: BTreeMap<String, String>,
    /// The objects it created (`own` rules), sorted.
    pub own: Vec<SavedObject>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedObject {
    pub kind: String,
    pub id: String,
}

impl From<&OwnedObject> for SavedObject {
    fn from(o: &OwnedObject) -> Self {
        SavedObject {
            kind: o.kind.clone(),
            id: o.id.clone(),
        }
    }
}

impl From<SavedObject> for OwnedObject {
    fn from(o: SavedObject) -> Self {
        OwnedObject {
            kind: o.kind,
            id: o.id,
        }
    }
}

/// The file's bytes for these identities (pure; sorted by name).
pub fn encode(mut identities: Vec<SavedIdentity>) -> Vec<u8> {
    identities.sort_by(|a, b| a.name.cmp(&b.name));
    for i in &mut identities {
        i.own.sort();
    }
    let saved = Saved {
        version: VERSION,
        identities,
    };
    // Plain strings and maps: serialising cannot fail.
    serde_json::to_vec_pretty(&saved).unwrap_or_default()
}

/// The identities in a file's bytes (pure).
pub fn decode(bytes: &[u8]) -> Result<Vec<SavedIdentity>, String> {
    let saved: Saved = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if saved.version != VERSION {
        return Err(format!(
            "version {} (this proxy reads {VERSION})",
            saved.version
        ));
    }
    Ok(saved.identities)
}

/// Why a state file (or its directory) is not one to trust, if it is not
/// (pure): owned by someone else, or writable by group or others, who
/// could then put identities in it.
pub fn unsafe_owner_or_mode(owner: u32, mode: u32, euid: u32) -> Option<String> {
    if owner != euid {
        return Some(format!("owned by uid {owner}, not the proxy's ({euid})"));
    }
    if mode & 0o022 != 0 {
        return Some(format!(
            "mode {:04o} lets group or others write",
            mode & 0o7777
        ));
    }
    None
}

fn check_meta(path: &Path, meta: &std::fs::Metadata) -> Result<(), PersistError> {
    use std::os::unix::fs::MetadataExt;
    let euid = nix::unistd::geteuid().as_raw();
    match unsafe_owner_or_mode(meta.uid(), meta.mode(), euid) {
        Some(message) => Err(PersistError::Unsafe {
            path: path.to_owned(),
            message,
        }),
        None => Ok(()),
    }
}

/// Reads the saved identities; none when the file does not exist. The file
/// and its directory must be the proxy's own and not writable by others;
/// a symlink is refused.
pub fn read(path: &Path) -> Result<Vec<SavedIdentity>, PersistError> {
    use std::io::Read;
    let io = |source| PersistError::Io {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir_meta = std::fs::metadata(dir).map_err(|source| PersistError::Io {
        path: dir.to_owned(),
        source,
    })?;
    check_meta(dir, &dir_meta)?;
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io(source)),
    };
    // What was opened is what is checked (no race with a rename).
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(PersistError::Unsafe {
            path: path.to_owned(),
            message: "not a regular file".into(),
        });
    }
    check_meta(path, &meta)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;
    decode(&bytes).map_err(|message| PersistError::Format {
        path: path.to_owned(),
        message,
    })
}

/// Replaces the file with `bytes` so that a reader (or a crash) sees the
/// old content or the new, never a mix: a new 0600 temporary file beside
/// it (a stale one removed first; never through a symlink or into a file
/// someone else opened), synced, renamed over it, and the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PersistError> {
    let io = |source| PersistError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("new");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

/// What the file holds beyond the live dynamic identities; guarded by the
/// writer's lock.
#[derive(Debug, Default)]
pub struct Pending {
    /// Revoked, but the file written since may still hold them: a revoke
    /// asked again retries the write instead of answering "no such
    /// identity" (which the supervisor takes as done).
    pub(super) revoked: BTreeSet<String>,
    /// Saved identities that could not be restored for a reason that may
    /// pass (their socket): kept in the file until revoked or re-created.
    pub(super) unrestored: BTreeMap<String, SavedIdentity>,
}

impl PersistError {
    /// The same error for another waiter of the same write (an I/O error's
    /// kind and text kept).
    pub(super) fn duplicate(&self) -> PersistError {
        match self {
            PersistError::Io { path, source } => PersistError::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            PersistError::Format { path, message } => PersistError::Format {
                path: path.clone(),
                message: message.clone(),
            },
            PersistError::Unsafe { path, message } => PersistError::Unsafe {
                path: path.clone(),
                message: message.clone(),
            },
        }
    }
}

impl Proxy {
    /// Re-creates the identities saved at `path` and keeps saving there from
    /// now on (on a thread of its own, [`super::state_writer`]). An identity
    /// the rules no longer admit is dropped, logged (fail closed: its job's
    /// calls are then refused); one whose socket could not be bound stays
    /// in the file (its job's calls fail until the supervisor revokes it).
    /// Returns the names restored.
    pub fn restore_identities(self: &Arc<Self>, path: &Path) -> Result<Vec<String>, PersistError> {
        let saved = read(path)?;
        let writer = StateWriter::start(Arc::downgrade(self), path)?;
        let _ = self.identity_state.set(writer);
        let mut restored = Vec::new();
        let mut dropped = false;
        for s in saved {
            let spec = IdentitySpec {
                name: s.name.clone(),
                rule_sets: s.rule_sets.clone(),
                tunnel_hosts: s.tunnel_hosts.clone(),
                variables: s.variables.clone(),
                socket: None,
                peer_uid: None,
            };
            // Inserted only: one write after the loop, so that a crash
            // midway leaves the file whole.
            let own = s.own.iter().cloned().map(OwnedObject::from);
            match self.insert(spec, super::Placement::Restored, own) {
                Ok(socket) => {
                    tracing::info!(identity = %s.name, socket = %socket.display(), "identity restored");
                    restored.push(s.name);
                }
                Err(error @ IdentityError::Socket { .. }) => {
                    tracing::error!(identity = %s.name, error = %super::with_causes(&error), "a saved identity is not restored; kept saved");
                    self.pending().unrestored.insert(s.name.clone(), s);
                }
                Err(error) => {
                    tracing::error!(identity = %s.name, %error, "a saved identity is not restored");
                    dropped = true;
                }
            }
        }
        // What the rules refused is gone from the file too (at start, before
        // anything is served: written here).
        if dropped {
            let _ = self.write_state(path, &mut self.pending());
        }
        Ok(restored)
    }

    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.identity_state_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for the dynamic identities to be written out, when a state file
    /// is set; the answer says when it is durable. A write that fails is
    /// logged and answered: the caller decides whether what it did may be
    /// answered as done.
    pub(super) fn save_identities(&self) -> Durable {
        self.request_state(Change::Save)
    }

    /// Asks for the revocation of `name` to be made durable: answered false
    /// when there was nothing to revoke (neither live, nor pending, nor kept
    /// unrestored). A write that fails leaves it pending, so that asking
    /// again retries.
    pub(super) fn save_revoked(&self, name: &str, was_live: bool) -> Durable {
        self.request_state(Change::Revoked {
            name: name.to_owned(),
            was_live,
        })
    }

    /// Writes the state as it is now (the caller holds the pending lock:
    /// one writer at a time).
    pub(super) fn write_state(
        &self,
        path: &Path,
        pending: &mut Pending,
    ) -> Result<(), PersistError> {
        let mut identities: BTreeMap<String, SavedIdentity> = self
            .lock_identities()
            .values()
            .filter(|i| i.dynamic)
            .map(|i| {
                let saved = SavedIdentity {
                    name: i.name.clone(),
                    rule_sets: i.scope.rule_sets.clone(),
                    tunnel_hosts: i.tunnel_hosts.iter().map(|t| t.to_string()).collect(),
                    variables: i.scope.variables.clone(),
                    own: i.created.snapshot().iter().map(SavedObject::from).collect(),
                };
                (i.name.clone(), saved)
            })
            .collect();
        // A name created anew replaces what was kept unrestored.
        pending
            .unrestored
            .retain(|name, _| !identities.contains_key(name));
        for (name, kept) in &pending.unrestored {
            identities.insert(name.clone(), kept.clone());
        }
        match write_atomic(path, &encode(identities.into_values().collect())) {
            Ok(()) => {
                pending.revoked.clear();
                Ok(())
            }
            Err(error) => {
                tracing::error!(%error, "saving the identities failed");
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(name: &str, own: &[(&str, &str)]) -> SavedIdentity {
        SavedIdentity {
            name: name.into(),
            rule_sets: vec!["github-worker".into()],
            tunnel_hosts: vec!["registry.npmjs.org:443".into()],
            variables: BTreeMap::from([("repo".into(), "acme/widgets".into())]),
            own: own
                .iter()
                .map(|(k, i)| SavedObject {
                    kind: (*k).into(),
                    id: (*i).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn what_is_written_reads_back_sorted() {
        let written = encode(vec![
            identity(
                "tkt_b",
                &[("github_issue_comment", "9"), ("github_pull_request", "2")],
            ),
            identity("tkt_a", &[]),
        ]);
        let read = decode(&written).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].name, "tkt_a");
        assert_eq!(read[1], {
            let mut b = identity(
                "tkt_b",
                &[("github_issue_comment", "9"), ("github_pull_request", "2")],
            );
            b.own.sort();
            b
        });
    }

    #[test]
    fn a_file_this_proxy_did_not_write_is_refused() {
        for bad in [
            &b"not json"[..],
            br#"{"version": 2, "identities": []}"#,
            br#"{"version": 1, "identities": [], "extra": 1}"#,
            br#"{"version": 1, "identities": [{"name": "a", "rule_sets": [], "tunnel_hosts": [], "variables": {}, "own": [], "socket": "/x"}]}"#,
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            decode(br#"{"version": 1, "identities": []}"#).unwrap(),
            vec![]
        );
    }

    #[test]
    fn an_absent_file_is_no_identity_and_a_write_replaces_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identities.json");
        assert!(read(&path).unwrap().is_empty());
        write_atomic(&path, &encode(vec![identity("tkt_1", &[])])).unwrap();
        write_atomic(&path, &encode(vec![identity("tkt_2", &[])])).unwrap();
        let names: Vec<String> = read(&path).unwrap().into_iter().map(|i| i.name).collect();
        assert_eq!(names, ["tkt_2"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!path.with_extension("new").exists());
    }

    #[test]
    fn a_stale_temporary_file_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identities.json");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, path.with_extension("new")).unwrap();
        write_atomic(&path, &encode(vec![identity("tkt_1", &[])])).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_file());
        // A stale regular one (left by a crash, any mode) as well.
        std::fs::write(path.with_extension("new"), "stale").unwrap();
        write_atomic(&path, &encode(vec![identity("tkt_2", &[])])).unwrap();
        assert_eq!(read(&path).unwrap()[0].name, "tkt_2");
    }

    #[test]
    fn owner_and_mode_table() {
        for (owner, mode, euid, ok) in [
            (0, 0o600, 0, true),
            (0, 0o644, 0, true),
            (0, 0o700, 0, true),
            (0, 0o755, 0, true),
            (1000, 0o600, 1000, true),
            (1000, 0o600, 0, false),
            (0, 0o600, 1000, false),
            (0, 0o620, 0, false),
            (0, 0o602, 0, false),
            (0, 0o770, 0, false),
            (0, 0o1777, 0, false),
        ] {
            assert_eq!(
                unsafe_owner_or_mode(owner, mode, euid).is_none(),
                ok,
                "{owner} {mode:o} {euid}"
            );
        }
    }
}
