//! Sandbox profiles: TOML files that say what a worker sees and may do.
//!
//! Loading is split in two. [`resolve`] is pure: it asks a [`ProfileSource`]
//! for the text of a profile and of each profile it `extends`, parses every
//! layer strictly (`deny_unknown_fields`), merges them base-first and then
//! validates the result into a [`Profile`], the only type the rest of the
//! supervisor uses. [`DirSource`] is the I/O edge: files in profile
//! directories, then the profiles built into the binary.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How deep `extends` chains may go; deeper is almost certainly a cycle.
const MAX_EXTENDS_DEPTH: usize = 8;

/// Inside paths the sandbox builds itself; a profile may not bind over them.
pub const RESERVED_INSIDE: &[&str] = &["/", "/work", "/tmp", "/proc", "/dev", "/run/gatehouse"];

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

// === Raw (file) form ===

/// One profile file as written. Every field is optional so that a layer
/// only states what it changes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    pub extends: Option<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub filesystem: RawFilesystem,
    #[serde(default)]
    pub env: RawEnv,
    #[serde(default)]
    pub network: RawNetwork,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub require: RawRequire,
    #[serde(default)]
    pub worker: RawWorker,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilesystem {
    /// Read-only, executable host paths (bound at the same path inside).
    #[serde(default)]
    pub read_exec: Vec<String>,
    /// Read-only data: readable, never executable.
    #[serde(default)]
    pub read: Vec<String>,
    /// Whether programs may be executed from the work dir and /tmp.
    pub writable_exec: Option<bool>,
    /// Size of the sandbox's /tmp.
    pub tmp_size_mib: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnv {
    /// Names copied from the caller's environment when set there.
    #[serde(default)]
    pub pass: Vec<String>,
    /// Variables set to fixed values.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNetwork {
    /// Proxy rule-set names (validated by the proxy).
    #[serde(default)]
    pub rule_sets: Vec<String>,
    /// `host:port` the proxy may splice without interception.
    #[serde(default)]
    pub tunnels: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub memory_mib: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_percent: Option<u64>,
    pub wall_time_secs: Option<u64>,
    pub open_files: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequire {
    pub landlock: Option<bool>,
    pub seccomp: Option<bool>,
    pub cgroup_limits: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorker {
    /// Command run when `sandbox run` is given none.
    pub command: Option<Vec<String>>,
}

impl RawProfile {
    pub fn parse(origin: &str, text: &str) -> Result<Self, ProfileError> {
        toml::from_str(text).map_err(|e| ProfileError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// Lays `self` (the child) over `base`: lists append, maps and scalars
    /// the child sets win.
    fn over(self, base: RawProfile) -> RawProfile {
        fn join(mut base: Vec<String>, child: Vec<String>) -> Vec<String> {
            for item in child {
                if !base.contains(&item) {
                    base.push(item);
                }
            }
            base
        }
        let mut env_set = base.env.set;
        env_set.extend(self.env.set);
        RawProfile {
            extends: None,
            description: self.description.or(base.description),
            filesystem: RawFilesystem {
                read_exec: join(base.filesystem.read_exec, self.filesystem.read_exec),
                read: join(base.filesystem.read, self.filesystem.read),
                writable_exec: self
                    .filesystem
                    .writable_exec
                    .or(base.filesystem.writable_exec),
                tmp_size_mib: self
                    .filesystem
                    .tmp_size_mib
                    .or(base.filesystem.tmp_size_mib),
            },
            env: RawEnv {
                pass: join(base.env.pass, self.env.pass),
                set: env_set,
            },
            network: RawNetwork {
                rule_sets: join(base.network.rule_sets, self.network.rule_sets),
                tunnels: join(base.network.tunnels, self.network.tunnels),
            },
            limits: RawLimits {
                memory_mib: self.limits.memory_mib.or(base.limits.memory_mib),
                pids: self.limits.pids.or(base.limits.pids),
                cpu_percent: self.limits.cpu_percent.or(base.limits.cpu_percent),
                wall_time_secs: self.limits.wall_time_secs.or(base.limits.wall_time_secs),
                open_files: self.limits.open_files.or(base.limits.open_files),
            },
            require: RawRequire {
                landlock: self.require.landlock.or(base.require.landlock),
                seccomp: self.require.seccomp.or(base.require.seccomp),
                cgroup_limits: self.require.cgroup_limits.or(base.require.cgroup_limits),
            },
            worker: RawWorker {
                command: self.worker.command.or(base.worker.command),
            },
        }
    }
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
}

/// Resource limits; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub memory_mib: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_percent: Option<u64>,
    pub wall_time_secs: Option<u64>,
    pub open_files: u64,
}

/// Protections whose absence makes the sandbox refuse to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Require {
    pub landlock: bool,
    pub seccomp: bool,
    /// memory/pids/cpu must be enforced by cgroups, not rlimits or nothing.
    pub cgroup_limits: bool,
}

impl RawProfile {
    /// Checks every value and produces the runtime type.
    pub fn validate(self, name: &str, layers: Vec<String>) -> Result<Profile, ProfileError> {
        let invalid = |key: &str, expected: &str| ProfileError::Invalid {
            origin: name.to_string(),
            key: key.to_string(),
            expected: expected.to_string(),
        };
        let paths = |key: &str, list: Vec<String>| -> Result<Vec<PathBuf>, ProfileError> {
            list.into_iter()
                .map(|p| {
                    check_bind_path(&p).map_err(|why| invalid(key, &format!("{why}, got `{p}`")))
                })
                .collect()
        };
        let read_exec = paths("filesystem.read_exec", self.filesystem.read_exec)?;
        let read = paths("filesystem.read", self.filesystem.read)?;
        if let Some(p) = read.iter().find(|p| read_exec.contains(p)) {
            return Err(invalid(
                "filesystem.read",
                &format!(
                    "a path in only one of read/read_exec, `{}` is in both",
                    p.display()
                ),
            ));
        }
        for key in self.env.pass.iter().chain(self.env.set.keys()) {
            if !is_env_name(key) {
                return Err(invalid(
                    "env",
                    &format!("variable names of letters, digits and `_`, got `{key}`"),
                ));
            }
        }
        if let Some((k, _)) = self.env.set.iter().find(|(_, v)| v.contains('\0')) {
            return Err(invalid(
                &format!("env.set.{k}"),
                "a value without NUL bytes",
            ));
        }
        for rs in &self.network.rule_sets {
            if rs.is_empty() || rs.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(
                    "network.rule_sets",
                    &format!("non-empty names without spaces, got `{rs}`"),
                ));
            }
        }
        for t in &self.network.tunnels {
            if !is_host_port(t) {
                return Err(invalid(
                    "network.tunnels",
                    &format!("`host:port` entries, got `{t}`"),
                ));
            }
        }
        let positive = |key: &str, v: Option<u64>| -> Result<Option<u64>, ProfileError> {
            match v {
                Some(0) => Err(invalid(
                    key,
                    "a positive number (omit the key for no limit)",
                )),
                v => Ok(v),
            }
        };
        let limits = Limits {
            memory_mib: positive("limits.memory_mib", self.limits.memory_mib)?,
            pids: positive("limits.pids", self.limits.pids)?,
            cpu_percent: positive("limits.cpu_percent", self.limits.cpu_percent)?,
            wall_time_secs: positive("limits.wall_time_secs", self.limits.wall_time_secs)?,
            open_files: positive("limits.open_files", self.limits.open_files)?.unwrap_or(1024),
        };
        if limits.pids.is_some_and(|p| p < 4) {
            return Err(invalid(
                "limits.pids",
                "at least 4 (init, relay, the command)",
            ));
        }
        let tmp_size_mib =
            positive("filesystem.tmp_size_mib", self.filesystem.tmp_size_mib)?.unwrap_or(256);
        let worker_command = self.worker.command.unwrap_or_default();
        if worker_command.first().is_some_and(|c| c.is_empty()) {
            return Err(invalid("worker.command", "a non-empty program name"));
        }
        Ok(Profile {
            name: name.to_string(),
            layers,
            description: self.description.unwrap_or_default(),
            filesystem: Filesystem {
                read_exec,
                read,
                writable_exec: self.filesystem.writable_exec.unwrap_or(true),
                tmp_size_mib,
            },
            env: EnvPolicy {
                pass: self.env.pass,
                set: self.env.set,
            },
            network: Network {
                rule_sets: self.network.rule_sets,
                tunnels: self.network.tunnels,
            },
            limits,
            require: Require {
                landlock: self.require.landlock.unwrap_or(true),
                seccomp: self.require.seccomp.unwrap_or(true),
                cgroup_limits: self.require.cgroup_limits.unwrap_or(false),
            },
            worker_command,
        })
    }
}

/// A host path a profile may bind: absolute, normalised, not a place the
/// sandbox builds itself.
fn check_bind_path(p: &str) -> Result<PathBuf, &'static str> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err("absolute paths");
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        || p.contains("//")
        || (p.len() > 1 && p.ends_with('/'))
    {
        return Err("normalised paths (no `.`, `..`, `//` or trailing `/`)");
    }
    if p.contains('\0') {
        return Err("paths without NUL bytes");
    }
    if RESERVED_INSIDE
        .iter()
        .any(|r| path == Path::new(r) || (*r != "/" && path.starts_with(r)))
    {
        return Err("paths outside the sandbox's own /, /work, /tmp, /proc, /dev, /run/gatehouse");
    }
    Ok(path.to_path_buf())
}

pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && port.parse::<u16>().is_ok_and(|p| p > 0)
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
        let valid_name = !name.is_empty()
            && name
                .split('/')
                .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/'));
        if !valid_name {
            return Err(ProfileError::Invalid {
                origin: "--profile".to_string(),
                key: "extends/profile name".to_string(),
                expected: format!("a name of letters, digits, `-`, `_`, `/`, got `{name}`"),
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
