//! The file form of a profile: every field optional, so a layer states
//! only what it changes; parsed strictly (unknown keys are errors) and laid
//! over its base by [`RawProfile::over`].

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ProfileError;

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
    /// Whether programs may be executed from the work dir, /tmp and memory
    /// files (memfds). Anonymous executable memory (JITs) is not affected.
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
    /// Whether the relay also takes ports 443 and 80, for clients that
    /// ignore proxy settings (default false).
    pub transparent: Option<bool>,
    /// The names that resolve to loopback inside the sandbox when
    /// `transparent` is on.
    #[serde(default)]
    pub transparent_hosts: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub memory_mib: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_percent: Option<u64>,
    pub wall_time_secs: Option<u64>,
    pub open_files: Option<u64>,
    pub inotify_instances: Option<u64>,
    pub inotify_watches: Option<u64>,
    /// The work dir's size, with a binary suffix (`"2G"`, `"512M"`).
    pub work_dir_size: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequire {
    pub landlock: Option<bool>,
    pub seccomp: Option<bool>,
    pub cgroup_limits: Option<bool>,
    pub work_dir_size: Option<bool>,
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
    pub(super) fn over(self, base: RawProfile) -> RawProfile {
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
                transparent: self.network.transparent.or(base.network.transparent),
                transparent_hosts: join(
                    base.network.transparent_hosts,
                    self.network.transparent_hosts,
                ),
            },
            limits: RawLimits {
                memory_mib: self.limits.memory_mib.or(base.limits.memory_mib),
                pids: self.limits.pids.or(base.limits.pids),
                cpu_percent: self.limits.cpu_percent.or(base.limits.cpu_percent),
                wall_time_secs: self.limits.wall_time_secs.or(base.limits.wall_time_secs),
                open_files: self.limits.open_files.or(base.limits.open_files),
                inotify_instances: self
                    .limits
                    .inotify_instances
                    .or(base.limits.inotify_instances),
                inotify_watches: self.limits.inotify_watches.or(base.limits.inotify_watches),
                work_dir_size: self.limits.work_dir_size.or(base.limits.work_dir_size),
            },
            require: RawRequire {
                landlock: self.require.landlock.or(base.require.landlock),
                seccomp: self.require.seccomp.or(base.require.seccomp),
                cgroup_limits: self.require.cgroup_limits.or(base.require.cgroup_limits),
                work_dir_size: self.require.work_dir_size.or(base.require.work_dir_size),
            },
            worker: RawWorker {
                command: self.worker.command.or(base.worker.command),
            },
        }
    }
}
