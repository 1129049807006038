//! Sandbox profiles: TOML files that say what a worker sees and may do.
//!
//! Loading is split in two. [`resolve`] is pure: it asks a [`ProfileSource`]
//! for the text of a profile and of each profile it `extends`, parses every
//! layer strictly (`deny_unknown_fields`), merges them base-first and then
//! validates the result into a [`Profile`], the only type the rest of the
//! supervisor uses. [`DirSource`] is the I/O edge: files in profile
//! directories, then the profiles built into the binary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gatehouse_types::{sandbox, ProfileName};
use serde::Serialize;

mod raw;
mod validate;

pub use raw::{RawEnv, RawFilesystem, RawLimits, RawNetwork, RawProfile, RawRequire, RawWorker};
pub use validate::is_env_name;

/// How deep `extends` chains may go; deeper is almost certainly a cycle.
const MAX_EXTENDS_DEPTH: usize = 8;

/// Inside paths the sandbox builds itself; a profile may not bind over them.
pub const RESERVED_INSIDE: &[&str] = &[
    "/",
    sandbox::WORK,
    sandbox::TMP,
    "/proc",
    "/dev",
    sandbox::RUN,
];

/// Profiles shipped with gatehouse, built into the binary so `default`
/// always resolves.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("base", include_str!("../../sandbox-profiles/base.toml")),
    (
        "default",
        include_str!("../../sandbox-profiles/default.toml"),
    ),
    (
        "teams/platform",
        include_str!("../../sandbox-profiles/teams/platform.toml"),
    ),
    (
        "teams/web",
        include_str!("../../sandbox-profiles/teams/web.toml"),
    ),
];

/// Errors from finding, parsing or validating a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// No profile of that name in any profile directory nor built in.
    #[error("profile `{name}` not found (looked in {searched}); pass a path or add {name}.toml to a profiles directory")]
    NotFound { name: String, searched: String },
    /// The profile file could not be read.
    #[error("cannot read profile {origin}: {source}")]
    Read {
        origin: String,
        source: std::io::Error,
    },
    /// The TOML did not parse or has an unknown key.
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    /// A value is out of range or malformed.
    #[error("{origin}: `{key}`: expected {expected}")]
    Invalid {
        origin: String,
        key: String,
        expected: String,
    },
    /// `extends` loops back on itself or is too deep.
    #[error("{origin}: `extends` chain {chain} is cyclic or deeper than {MAX_EXTENDS_DEPTH}")]
    ExtendsCycle { origin: String, chain: String },
}

// === Resolved (runtime) form ===

/// A validated, fully merged profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub name: String,
    /// The layers merged, base first (e.g. `["base", "default", "teams/web"]`).
    pub layers: Vec<String>,
    pub description: String,
    pub filesystem: Filesystem,
    pub env: EnvPolicy,
    pub network: Network,
    pub limits: Limits,
    pub require: Require,
    pub worker_command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Filesystem {
    pub read_exec: Vec<PathBuf>,
    pub read: Vec<PathBuf>,
    pub writable_exec: bool,
    pub tmp_size_mib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvPolicy {
    pub pass: Vec<String>,
    pub set: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Network {
    pub rule_sets: Vec<String>,
    pub tunnels: Vec<String>,
    /// Ports 443 and 80 inside the sandbox reach the proxy's transparent
    /// socket, and `transparent_hosts` resolve to 127.0.0.1.
    pub transparent: bool,
    pub transparent_hosts: Vec<String>,
}

/// Resource limits; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub memory_mib: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_percent: Option<u64>,
    pub wall_time_secs: Option<u64>,
    pub open_files: u64,
    /// inotify instances and watches the whole sandbox may hold: its user
    /// namespace's own budget, so it cannot use up its host user's.
    pub inotify_instances: u64,
    pub inotify_watches: u64,
    /// Bytes the work dir may hold, enforced by the kernel: the work dir is
    /// a filesystem of its own of at most this size (see `workdir_fs`).
    pub work_dir_size: Option<u64>,
}

/// Protections whose absence makes the sandbox refuse to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Require {
    pub landlock: bool,
    pub seccomp: bool,
    /// memory/pids/cpu must be enforced by cgroups, not rlimits or nothing.
    pub cgroup_limits: bool,
    /// The work dir's size limit must be enforced (a sandbox whose work dir
    /// is not a filesystem within `limits.work_dir_size` does not start).
    pub work_dir_size: bool,
}

// === Resolution ===

/// Where profile texts come from, by name. Returns `(origin, text)` where
/// origin names the file (or `builtin:name`) for error messages.
pub trait ProfileSource {
    fn load(&self, name: &str) -> Result<(String, String), ProfileError>;
}

/// Resolves `name` (looked up in `source`) or the given top layer text,
/// following `extends` to the root, and validates the merge.
pub fn resolve(source: &dyn ProfileSource, name: &str) -> Result<Profile, ProfileError> {
    let (origin, text) = source.load(name)?;
    resolve_text(source, name, &origin, &text)
}

/// Like [`resolve`] for a top layer already read (e.g. a file given by path).
pub fn resolve_text(
    source: &dyn ProfileSource,
    name: &str,
    origin: &str,
    text: &str,
) -> Result<Profile, ProfileError> {
    let mut layers = vec![(name.to_string(), RawProfile::parse(origin, text)?)];
    let mut seen = vec![name.to_string()];
    while let Some(parent) = layers.last().and_then(|(_, raw)| raw.extends.clone()) {
        if seen.contains(&parent) || seen.len() > MAX_EXTENDS_DEPTH {
            seen.push(parent);
            return Err(ProfileError::ExtendsCycle {
                origin: origin.to_string(),
                chain: seen.join(" -> "),
            });
        }
        let (parent_origin, parent_text) = source.load(&parent)?;
        seen.push(parent.clone());
        layers.push((parent, RawProfile::parse(&parent_origin, &parent_text)?));
    }
    let names: Vec<String> = layers.iter().rev().map(|(n, _)| n.clone()).collect();
    let merged = layers
        .into_iter()
        .rev()
        .map(|(_, raw)| raw)
        .reduce(|base, child| child.over(base))
        .unwrap_or_default();
    merged.validate(name, names)
}

impl Profile {
    /// The resolved profile as TOML, for `gatehouse profile check`.
    pub fn to_toml(&self) -> Result<String, ProfileError> {
        toml::to_string(self).map_err(|e| ProfileError::Parse {
            origin: self.name.clone(),
            message: e.to_string(),
        })
    }
}

/// Profiles from directories (first match wins), then the built-in ones.
pub struct DirSource {
    pub dirs: Vec<PathBuf>,
}

impl DirSource {
    /// The default search path: `./sandbox-profiles`, `/etc/gatehouse/profiles`.
    pub fn default_dirs() -> Vec<PathBuf> {
        vec![
            PathBuf::from("sandbox-profiles"),
            PathBuf::from("/etc/gatehouse/profiles"),
        ]
    }
}

impl ProfileSource for DirSource {
    fn load(&self, name: &str) -> Result<(String, String), ProfileError> {
        if !ProfileName::is_valid(name) {
            return Err(ProfileError::Invalid {
                origin: "--profile".to_string(),
                key: "extends/profile name".to_string(),
                expected: format!("{}, got `{name}`", ProfileName::EXPECTED),
            });
        }
        for dir in &self.dirs {
            let file = dir.join(format!("{name}.toml"));
            match std::fs::read_to_string(&file) {
                Ok(text) => return Ok((file.display().to_string(), text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(ProfileError::Read {
                        origin: file.display().to_string(),
                        source,
                    })
                }
            }
        }
        if let Some((_, text)) = EMBEDDED.iter().find(|(n, _)| *n == name) {
            return Ok((format!("builtin:{name}"), (*text).to_string()));
        }
        let mut searched: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        searched.push("built-in profiles".to_string());
        Err(ProfileError::NotFound {
            name: name.to_string(),
            searched: searched.join(", "),
        })
    }
}

/// Whether `--profile` names a file rather than a profile name.
pub fn is_path_like(arg: &str) -> bool {
    arg.ends_with(".toml") || arg.starts_with('.') || arg.starts_with('/')
}

#[cfg(test)]
mod tests;
