//! Identities created through the admin API outlive a restart of the
//! proxy. A running job's sandbox holds its identity's socket *directory*
//! (bind-mounted), not the socket: so after a crash the proxy re-creates
//! each identity, with its own-object set, and binds a new socket in the
//! same directory, where the sandbox sees it at the same path.
//!
//! ```text
//! create / revoke / an object created ─► snapshot of the dynamic identities ─► tmp, fsync, rename
//! start (Proxy::restore)               ─► read ─► add_identity each (checked again) ─► own sets back
//! ```
//!
//! The file holds names, rule-set names, tunnel hosts, variables and the
//! ids of created objects: no secret. Static identities (the config's)
//! are not in it: the config re-creates them.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{IdentitySpec, Proxy};
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

/// Reads the saved identities; none when the file does not exist.
pub fn read(path: &Path) -> Result<Vec<SavedIdentity>, PersistError> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes).map_err(|message| PersistError::Format {
            path: path.to_owned(),
            message,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(PersistError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Replaces the file with `bytes` so that a reader (or a crash) sees the
/// old content or the new, never a mix: a 0600 temporary file beside it,
/// synced, renamed over it, and the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PersistError> {
    let io = |source| PersistError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
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

impl Proxy {
    /// Re-creates the identities saved at `path` and keeps saving there from
    /// now on. An identity the rules no longer admit is dropped, logged
    /// (fail closed: its job's calls are then refused). Returns the names
    /// restored.
    pub fn restore_identities(self: &Arc<Self>, path: &Path) -> Result<Vec<String>, PersistError> {
        let saved = read(path)?;
        let _ = self.identity_state.set(path.to_owned());
        let mut restored = Vec::new();
        for s in saved {
            let spec = IdentitySpec {
                name: s.name.clone(),
                rule_sets: s.rule_sets,
                tunnel_hosts: s.tunnel_hosts,
                variables: s.variables,
                socket: None,
            };
            match self.add_dynamic(spec, s.own.into_iter().map(OwnedObject::from)) {
                Ok(socket) => {
                    tracing::info!(identity = %s.name, socket = %socket.display(), "identity restored");
                    restored.push(s.name);
                }
                Err(error) => {
                    tracing::error!(identity = %s.name, %error, "a saved identity is not restored")
                }
            }
        }
        // What was dropped is gone from the file too.
        self.save_identities();
        Ok(restored)
    }

    /// Writes the dynamic identities out, when a state file is set. A write
    /// that fails is logged: the identities still work, but would not
    /// survive a restart.
    pub(super) fn save_identities(&self) {
        let Some(path) = self.identity_state.get() else {
            return;
        };
        // One writer at a time, each writing the state at its own moment.
        let _writing = self
            .identity_state_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let identities: Vec<SavedIdentity> = self
            .lock_identities()
            .values()
            .filter(|i| i.dynamic)
            .map(|i| SavedIdentity {
                name: i.name.clone(),
                rule_sets: i.scope.rule_sets.clone(),
                tunnel_hosts: i.tunnel_hosts.iter().map(|t| t.to_string()).collect(),
                variables: i.scope.variables.clone(),
                own: i.created.snapshot().iter().map(SavedObject::from).collect(),
            })
            .collect();
        if let Err(error) = write_atomic(path, &encode(identities)) {
            tracing::error!(%error, "saving the identities failed: a restart would lose them");
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
}
