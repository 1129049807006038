//! Validation of a merged profile into the runtime [`Profile`]: one
//! validator per section, each a pure function from the section's file form
//! to its runtime form or a [`Refusal`] naming the key and what it expects.

use std::path::{Component, Path, PathBuf};

use gatehouse_types::{DnsName, RuleSetName, TunnelTarget};

use super::raw::{RawEnv, RawFilesystem, RawLimits, RawNetwork, RawRequire, RawWorker};
use super::{
    EnvPolicy, Filesystem, Limits, Network, Profile, ProfileError, RawProfile, Require,
    RESERVED_INSIDE,
};

/// A value a validator refuses: the key, dotted (`filesystem.read`), and
/// what it expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub key: String,
    pub expected: String,
}

fn refuse(key: &str, expected: impl Into<String>) -> Refusal {
    Refusal {
        key: key.to_string(),
        expected: expected.into(),
    }
}

impl RawProfile {
    /// Checks every value and produces the runtime type.
    pub fn validate(self, name: &str, layers: Vec<String>) -> Result<Profile, ProfileError> {
        let at = |r: Refusal| ProfileError::Invalid {
            origin: name.to_string(),
            key: r.key,
            expected: r.expected,
        };
        let limits = limits(&self.limits).map_err(at)?;
        let require = require(&self.require);
        if require.work_dir_size && limits.work_dir_size.is_none() {
            return Err(at(refuse(
                "require.work_dir_size",
                "limits.work_dir_size set as well (there is no limit to require)",
            )));
        }
        Ok(Profile {
            name: name.to_string(),
            layers,
            description: self.description.unwrap_or_default(),
            filesystem: filesystem(self.filesystem).map_err(at)?,
            env: env(self.env).map_err(at)?,
            network: network(self.network).map_err(at)?,
            limits,
            require,
            worker_command: worker(self.worker).map_err(at)?,
        })
    }
}

/// `[filesystem]`: bind paths absolute, normalised, outside what the
/// sandbox builds, each in only one of `read`/`read_exec`; a positive /tmp
/// size (default 256 MiB); executable writable dirs unless said otherwise.
pub fn filesystem(raw: RawFilesystem) -> Result<Filesystem, Refusal> {
    let paths = |key: &str, list: Vec<String>| -> Result<Vec<PathBuf>, Refusal> {
        list.into_iter()
            .map(|p| check_bind_path(&p).map_err(|why| refuse(key, format!("{why}, got `{p}`"))))
            .collect()
    };
    let read_exec = paths("filesystem.read_exec", raw.read_exec)?;
    let read = paths("filesystem.read", raw.read)?;
    if let Some(p) = read.iter().find(|p| read_exec.contains(p)) {
        return Err(refuse(
            "filesystem.read",
            format!(
                "a path in only one of read/read_exec, `{}` is in both",
                p.display()
            ),
        ));
    }
    let tmp_size_mib = positive("filesystem.tmp_size_mib", raw.tmp_size_mib)?.unwrap_or(256);
    Ok(Filesystem {
        read_exec,
        read,
        writable_exec: raw.writable_exec.unwrap_or(true),
        tmp_size_mib,
    })
}

/// `[env]`: variable names of letters, digits and `_`; values without NUL.
pub fn env(raw: RawEnv) -> Result<EnvPolicy, Refusal> {
    for key in raw.pass.iter().chain(raw.set.keys()) {
        if !is_env_name(key) {
            return Err(refuse(
                "env",
                format!("variable names of letters, digits and `_`, got `{key}`"),
            ));
        }
    }
    if let Some((k, _)) = raw.set.iter().find(|(_, v)| v.contains('\0')) {
        return Err(refuse(&format!("env.set.{k}"), "a value without NUL bytes"));
    }
    Ok(EnvPolicy {
        pass: raw.pass,
        set: raw.set,
    })
}

/// `[network]`: rule-set names, tunnels as `host:port`, transparent hosts
/// as DNS names (never local ones), and at least one of them when
/// `transparent` is on (off by default: see the profiles' README).
pub fn network(raw: RawNetwork) -> Result<Network, Refusal> {
    for h in &raw.transparent_hosts {
        if !DnsName::is_valid(h) || h == "localhost" || h.ends_with(".localhost") {
            return Err(refuse(
                "network.transparent_hosts",
                format!("lowercase DNS names with a dot (not local names), got `{h}`"),
            ));
        }
    }
    let transparent = raw.transparent.unwrap_or(false);
    if transparent && raw.transparent_hosts.is_empty() {
        return Err(refuse(
            "network.transparent_hosts",
            "at least one host when network.transparent is on (the names that resolve to the proxy)",
        ));
    }
    for rs in &raw.rule_sets {
        if !RuleSetName::is_valid(rs) {
            return Err(refuse(
                "network.rule_sets",
                format!("rule-set names of {}, got `{rs}`", RuleSetName::EXPECTED),
            ));
        }
    }
    for t in &raw.tunnels {
        if !TunnelTarget::is_valid(t) {
            return Err(refuse(
                "network.tunnels",
                format!(
                    "`host:port` entries ({}), got `{t}`",
                    TunnelTarget::EXPECTED
                ),
            ));
        }
    }
    Ok(Network {
        rule_sets: raw.rule_sets,
        tunnels: raw.tunnels,
        transparent,
        transparent_hosts: raw.transparent_hosts,
    })
}

/// `[limits]`: each positive when set (unset: no limit), at least 4 pids,
/// 1024 open files, 32 inotify instances and 65536 watches unless said
/// otherwise (the last three are always bounded).
pub fn limits(raw: &RawLimits) -> Result<Limits, Refusal> {
    let limits = Limits {
        memory_mib: positive("limits.memory_mib", raw.memory_mib)?,
        pids: positive("limits.pids", raw.pids)?,
        cpu_percent: positive("limits.cpu_percent", raw.cpu_percent)?,
        wall_time_secs: positive("limits.wall_time_secs", raw.wall_time_secs)?,
        open_files: positive("limits.open_files", raw.open_files)?.unwrap_or(1024),
        inotify_instances: positive("limits.inotify_instances", raw.inotify_instances)?
            .unwrap_or(32),
        inotify_watches: positive("limits.inotify_watches", raw.inotify_watches)?.unwrap_or(65536),
        work_dir_size: raw
            .work_dir_size
            .as_deref()
            .map(|s| {
                parse_size(s).ok_or_else(|| {
                    refuse(
                        "limits.work_dir_size",
                        format!("a size from 16M to 16T with a binary suffix K, M, G or T (e.g. \"2G\"), got `{s}`"),
                    )
                })
            })
            .transpose()?,
    };
    if limits.pids.is_some_and(|p| p < 4) {
        return Err(refuse(
            "limits.pids",
            "at least 4 (init, relay, the command)",
        ));
    }
    Ok(limits)
}

/// `[require]`: Landlock and seccomp required unless said otherwise,
/// cgroup-enforced limits only when asked for.
pub fn require(raw: &RawRequire) -> Require {
    Require {
        landlock: raw.landlock.unwrap_or(true),
        seccomp: raw.seccomp.unwrap_or(true),
        cgroup_limits: raw.cgroup_limits.unwrap_or(false),
        work_dir_size: raw.work_dir_size.unwrap_or(false),
    }
}

/// Smallest and largest work dir a profile may ask for: below 16 MiB an
/// ext4 filesystem is mostly its own metadata.
pub const WORK_DIR_SIZE_MIN: u64 = 16 << 20;
pub const WORK_DIR_SIZE_MAX: u64 = 16 << 40;

/// `"2G"` and the like: decimal digits and a binary suffix (K, M, G, T;
/// `KiB`… and a trailing `B` accepted too), within
/// [`WORK_DIR_SIZE_MIN`]..=[`WORK_DIR_SIZE_MAX`].
pub fn parse_size(s: &str) -> Option<u64> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = s.split_at(digits);
    let shift = match unit {
        "K" | "KiB" | "KB" => 10,
        "M" | "MiB" | "MB" => 20,
        "G" | "GiB" | "GB" => 30,
        "T" | "TiB" | "TB" => 40,
        _ => return None,
    };
    let n: u64 = number.parse().ok()?;
    let bytes = n.checked_mul(1u64 << shift)?;
    (WORK_DIR_SIZE_MIN..=WORK_DIR_SIZE_MAX)
        .contains(&bytes)
        .then_some(bytes)
}

/// `[worker]`: the command, if any, names a program.
pub fn worker(raw: RawWorker) -> Result<Vec<String>, Refusal> {
    let command = raw.command.unwrap_or_default();
    if command.first().is_some_and(|c| c.is_empty()) {
        return Err(refuse("worker.command", "a non-empty program name"));
    }
    Ok(command)
}

fn positive(key: &str, v: Option<u64>) -> Result<Option<u64>, Refusal> {
    match v {
        Some(0) => Err(refuse(key, "a positive number (omit the key for no limit)")),
        v => Ok(v),
    }
}

/// A host path a profile may bind: absolute, normalised, not a place the
/// sandbox builds itself.
pub fn check_bind_path(p: &str) -> Result<PathBuf, &'static str> {
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

#[cfg(test)]
mod tests;
