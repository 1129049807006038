//! The sandbox plan: everything `sandbox run` will do, as plain data.
//!
//! [`Plan::build`] is a pure function of a resolved [`Profile`], the
//! [`RunRequest`] (work dir, sockets, extra env, command) and the caller's
//! identity and environment. The executor in `sandbox/` only carries the
//! plan out, so what gets mounted, which Landlock rules and seccomp denials
//! apply and what the worker's environment holds are unit-tested here
//! without root or a kernel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_types::env as vars;

use crate::profile::{is_env_name, Limits, Profile, Require};

mod seccomp;
mod transparent;

pub use seccomp::{seccomp_denials, ArgMatch, ArgOp, Denial, SeccompPlan};
use transparent::{hosts_file, transparent_target, NSSWITCH};

/// Where things live inside the sandbox (shared with the launcher and the
/// worker's commands).
pub use gatehouse_types::sandbox as inside;

/// The relay listens here inside the sandbox's network namespace.
pub const RELAY_PORT: u16 = 3128;
pub const RELAY_URL: &str = "http://127.0.0.1:3128";
/// With `network.transparent`, the relay takes these too and sends them to
/// the identity's transparent socket.
pub const TRANSPARENT_PORTS: [u16; 2] = [443, 80];
/// `gh` refuses to run without a token; the proxy injects the real one.
pub const GH_TOKEN_PLACEHOLDER: &str = "gatehouse-placeholder-not-a-token";
pub const HOSTNAME: &str = "gatehouse";

/// Errors in the request that make a plan impossible.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `--env` is not `KEY=VALUE` with a valid name.
    #[error("--env `{0}`: expected KEY=VALUE with a name of letters, digits and `_`")]
    BadEnv(String),
    /// A path argument is not absolute.
    #[error("{flag} `{path}`: expected an absolute path")]
    NotAbsolute { flag: &'static str, path: String },
    /// Neither the command line nor the profile names a command.
    #[error("no command: give one after `--` or set `worker.command` in the profile")]
    NoCommand,
    /// Transparent mode reaches the transparent socket in the identity's
    /// directory, which a bare `--proxy-socket` does not bring.
    #[error("network.transparent needs the proxy identity's directory (--proxy-dir), where its transparent socket is; --proxy-socket binds only the proxy socket")]
    TransparentNeedsProxyDir,
}

/// What the caller asked for on the command line, paths already absolute.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub workdir: PathBuf,
    pub proxy_socket: Option<PathBuf>,
    /// The proxy identity's directory, holding its socket as
    /// [`inside::PROXY_SOCKET_NAME`] (instead of `proxy_socket`): bound
    /// whole, so a socket the proxy re-creates there after a restart is the
    /// one the relay reaches.
    pub proxy_dir: Option<PathBuf>,
    pub control_socket: Option<PathBuf>,
    /// System roots plus the gatehouse CA, already read and checked.
    pub ca_bundle: Option<String>,
    /// The running gatehouse binary, bound in when there is a control socket.
    pub gatehouse_exe: Option<PathBuf>,
    pub env: Vec<String>,
    pub wall_time_secs: Option<u64>,
    pub command: Vec<String>,
}

/// Who the worker runs as on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// Host uid/gid the worker's inside uid/gid 0 maps to.
    pub host_uid: u32,
    pub host_gid: u32,
    /// The caller is root: it writes the maps, may drop supplementary groups.
    pub caller_is_root: bool,
}

/// One step building the new root, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountStep {
    /// Bind a host path read-only (nosuid, nodev; noexec unless `exec`).
    /// A missing host path is skipped when `optional`.
    BindReadOnly {
        host: PathBuf,
        inside: PathBuf,
        exec: bool,
        optional: bool,
    },
    /// Bind a host directory read-write (nosuid, nodev).
    BindWritable {
        host: PathBuf,
        inside: PathBuf,
        exec: bool,
    },
    /// A fresh tmpfs.
    Tmpfs {
        inside: PathBuf,
        size_mib: u64,
        exec: bool,
    },
    /// A fresh /proc for the new PID namespace, its sensitive parts read-only.
    Proc,
    /// A minimal /dev: null zero full random urandom tty, pts, shm.
    Dev,
    /// A file the sandbox writes itself (read-only once the root is sealed).
    File { inside: PathBuf, contents: String },
}

/// Flags a mount gets. The plan decides them; the executor applies them
/// (`mount_setattr` on binds, mount flags on fresh filesystems).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountAttrs {
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl MountAttrs {
    /// Read-only, nosuid, nodev, noexec.
    pub const LOCKED: MountAttrs = MountAttrs {
        read_only: true,
        nosuid: true,
        nodev: true,
        noexec: true,
    };
}

impl MountStep {
    /// The flags of this step's mount: nothing set-uid and no device node
    /// outside /dev, nothing executable unless the profile says so, nothing
    /// writable but the work dir and the tmpfs. `File`s live on the new
    /// root's tmpfs, sealed read-only with it: no mount of their own.
    pub fn attrs(&self) -> MountAttrs {
        let base = MountAttrs {
            read_only: false,
            nosuid: true,
            nodev: true,
            noexec: false,
        };
        match self {
            MountStep::BindReadOnly { exec, .. } => MountAttrs {
                read_only: true,
                noexec: !exec,
                ..base
            },
            MountStep::BindWritable { exec, .. } | MountStep::Tmpfs { exec, .. } => MountAttrs {
                noexec: !exec,
                ..base
            },
            MountStep::Proc => MountAttrs {
                noexec: true,
                ..base
            },
            // Its device nodes are binds of the host's harmless ones.
            MountStep::Dev => MountAttrs {
                nodev: false,
                noexec: true,
                ..base
            },
            MountStep::File { .. } => MountAttrs::default(),
        }
    }
}

/// Parts of `/proc` that stay read-only even for the namespace's root: each
/// is bound over itself with [`MountAttrs::LOCKED`], recursively.
pub const PROC_READ_ONLY: [&str; 9] = [
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
    "/proc/acpi",
    "/proc/scsi",
    "/proc/keys",
    "/proc/kcore",
];

/// The minimal `/dev`: the host's harmless nodes (mknod is not allowed in a
/// user namespace), a private devpts and a tmpfs for shared memory.
pub mod dev {
    use super::MountAttrs;

    pub const NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
    pub const PTS: MountAttrs = MountAttrs {
        read_only: false,
        nosuid: true,
        nodev: false,
        noexec: true,
    };
    pub const PTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620";
    pub const SHM: MountAttrs = MountAttrs {
        read_only: false,
        nosuid: true,
        nodev: true,
        noexec: true,
    };
    pub const SHM_OPTIONS: &str = "mode=1777,size=64m";
}

/// Landlock access classes; the executor maps them to the best ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FsAccess {
    /// List directories (used for `/`, so `ls /` works).
    ReadDir,
    Read,
    ReadExec,
    /// Device nodes: read, write, ioctl.
    Device,
    ReadWrite,
    ReadWriteExec,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockPlan {
    pub rules: Vec<(PathBuf, FsAccess)>,
    /// TCP ports the worker may connect to (the relay, when there is one).
    pub tcp_connect: Vec<u16>,
    pub required: bool,
}

/// One of the sandbox's user namespace's own budgets
/// (`/proc/sys/user/<name>`): counted for everything the sandbox holds,
/// and checked before the host user's, so one sandbox cannot use up what
/// its host user (root, when root starts it) and the other sandboxes share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserNamespaceLimit {
    pub name: &'static str,
    pub value: u64,
    /// A kernel without the feature has no such file: nothing to bound.
    pub optional: bool,
}

/// The budgets: inotify from the profile; no namespace of any kind beyond
/// the init's own cgroup namespace (seccomp refuses creating them too:
/// this holds even if a filter rule were wrong); no fanotify.
pub fn user_namespace_limits(limits: &Limits) -> Vec<UserNamespaceLimit> {
    let required = |name, value| UserNamespaceLimit {
        name,
        value,
        optional: false,
    };
    let mut out = vec![
        required("max_inotify_instances", limits.inotify_instances),
        required("max_inotify_watches", limits.inotify_watches),
        // The init makes one cgroup namespace after this is set.
        required("max_cgroup_namespaces", 1),
    ];
    out.extend(
        [
            "max_user_namespaces",
            "max_mnt_namespaces",
            "max_pid_namespaces",
            "max_net_namespaces",
            "max_ipc_namespaces",
            "max_uts_namespaces",
            "max_time_namespaces",
        ]
        .map(|name| required(name, 0)),
    );
    out.extend(
        ["max_fanotify_groups", "max_fanotify_marks"].map(|name| UserNamespaceLimit {
            name,
            value: 0,
            optional: true,
        }),
    );
    out
}

/// The whole sandbox, as data.
#[derive(Debug, Clone)]
pub struct Plan {
    pub identity: Identity,
    pub mounts: Vec<MountStep>,
    /// Paths under the new `/proc` made read-only once it is mounted.
    pub proc_read_only: Vec<PathBuf>,
    pub landlock: LandlockPlan,
    pub seccomp: SeccompPlan,
    pub limits: Limits,
    /// Written by the init into its user namespace before anything else.
    pub user_namespace_limits: Vec<UserNamespaceLimit>,
    pub require: Require,
    /// The effective wall time: the tighter of profile and request.
    pub wall_time: Option<Duration>,
    /// Relay target inside the sandbox, when there is a proxy socket.
    pub relay: Option<PathBuf>,
    /// Where the relay sends [`TRANSPARENT_PORTS`], in transparent mode.
    pub transparent: Option<PathBuf>,
    pub hostname: &'static str,
    pub env: Vec<(String, String)>,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
}

impl Plan {
    pub fn build(
        profile: &Profile,
        request: &RunRequest,
        identity: Identity,
        caller_env: &[(String, String)],
    ) -> Result<Plan, PlanError> {
        for (flag, path) in [
            ("--workdir", Some(&request.workdir)),
            ("--proxy-socket", request.proxy_socket.as_ref()),
            ("--proxy-dir", request.proxy_dir.as_ref()),
            ("--control-socket", request.control_socket.as_ref()),
        ] {
            if let Some(p) = path.filter(|p| !p.is_absolute()) {
                return Err(PlanError::NotAbsolute {
                    flag,
                    path: p.display().to_string(),
                });
            }
        }
        let argv = if request.command.is_empty() {
            profile.worker_command.clone()
        } else {
            request.command.clone()
        };
        if argv.is_empty() {
            return Err(PlanError::NoCommand);
        }
        let transparent = transparent_target(profile, request)?;
        let env = build_env(profile, request, caller_env)?;
        let wall_time = match (profile.limits.wall_time_secs, request.wall_time_secs) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(Duration::from_secs);
        let mounts = build_mounts(profile, request, transparent.is_some());
        let proc_read_only = if mounts.contains(&MountStep::Proc) {
            PROC_READ_ONLY.iter().map(PathBuf::from).collect()
        } else {
            Vec::new()
        };
        Ok(Plan {
            identity,
            mounts,
            proc_read_only,
            landlock: build_landlock(profile, request, transparent.is_some()),
            seccomp: SeccompPlan {
                denials: seccomp_denials(profile.filesystem.writable_exec),
                required: profile.require.seccomp,
            },
            limits: profile.limits,
            user_namespace_limits: user_namespace_limits(&profile.limits),
            require: profile.require,
            wall_time,
            relay: relay_target(request),
            transparent,
            hostname: HOSTNAME,
            env,
            argv,
            cwd: PathBuf::from(inside::WORK),
        })
    }
}

impl RunRequest {
    /// Whether the worker gets a way to the proxy (either form).
    pub fn has_proxy(&self) -> bool {
        self.proxy_socket.is_some() || self.proxy_dir.is_some()
    }
}

/// Where the relay connects inside the sandbox.
fn relay_target(request: &RunRequest) -> Option<PathBuf> {
    if request.proxy_dir.is_some() {
        Some(Path::new(inside::PROXY_DIR).join(inside::PROXY_SOCKET_NAME))
    } else {
        request
            .proxy_socket
            .as_ref()
            .map(|_| PathBuf::from(inside::PROXY_SOCKET))
    }
}

/// Host binds (by depth, so parents come first), then the sandbox's own
/// places, then generated files where no bind covers them.
fn build_mounts(profile: &Profile, request: &RunRequest, transparent: bool) -> Vec<MountStep> {
    let fs = &profile.filesystem;
    let mut binds: Vec<MountStep> = fs
        .read_exec
        .iter()
        .map(|p| (p, true))
        .chain(fs.read.iter().map(|p| (p, false)))
        .map(|(p, exec)| MountStep::BindReadOnly {
            host: p.clone(),
            inside: p.clone(),
            exec,
            optional: true,
        })
        .collect();
    binds.sort_by_key(|m| match m {
        MountStep::BindReadOnly { inside, .. } => inside.components().count(),
        _ => 0,
    });
    let mut steps = binds;
    steps.push(MountStep::BindWritable {
        host: request.workdir.clone(),
        inside: PathBuf::from(inside::WORK),
        exec: fs.writable_exec,
    });
    steps.push(MountStep::Tmpfs {
        inside: PathBuf::from(inside::TMP),
        size_mib: fs.tmp_size_mib,
        exec: fs.writable_exec,
    });
    steps.push(MountStep::Proc);
    steps.push(MountStep::Dev);
    for (host, at) in [
        (&request.proxy_socket, inside::PROXY_SOCKET),
        (&request.proxy_dir, inside::PROXY_DIR),
        (&request.control_socket, inside::CONTROL_SOCKET),
    ] {
        if let Some(host) = host {
            steps.push(MountStep::BindReadOnly {
                host: host.clone(),
                inside: PathBuf::from(at),
                exec: false,
                optional: false,
            });
        }
    }
    if let (Some(exe), Some(_)) = (&request.gatehouse_exe, &request.control_socket) {
        steps.push(MountStep::BindReadOnly {
            host: exe.clone(),
            inside: PathBuf::from(inside::GATEHOUSE_BIN),
            exec: true,
            optional: false,
        });
    }
    steps.extend(generated_files(profile, request, transparent));
    steps
}

/// The files the sandbox writes itself (users, hosts, the CA bundle), where
/// no bind of the profile covers them.
fn generated_files(profile: &Profile, request: &RunRequest, transparent: bool) -> Vec<MountStep> {
    let fs = &profile.filesystem;
    let mut steps = Vec::new();
    let mut files = vec![
        (
            "/etc/passwd",
            "worker:x:0:0:gatehouse worker:/tmp:/bin/sh\n".to_string(),
        ),
        ("/etc/group", "worker:x:0:\n".to_string()),
        ("/etc/hosts", hosts_file(profile, transparent)),
        ("/etc/hostname", format!("{HOSTNAME}\n")),
    ];
    if transparent {
        files.push(("/etc/nsswitch.conf", NSSWITCH.to_string()));
    }
    if let Some(bundle) = &request.ca_bundle {
        files.push((inside::CA_BUNDLE, bundle.clone()));
    }
    let bound: Vec<&Path> = fs
        .read_exec
        .iter()
        .chain(&fs.read)
        .map(|p| p.as_path())
        .collect();
    for (at, contents) in files {
        if !bound.iter().any(|b| Path::new(at).starts_with(b)) {
            steps.push(MountStep::File {
                inside: PathBuf::from(at),
                contents,
            });
        }
    }
    steps
}

fn build_landlock(profile: &Profile, request: &RunRequest, transparent: bool) -> LandlockPlan {
    let fs = &profile.filesystem;
    let writable = if fs.writable_exec {
        FsAccess::ReadWriteExec
    } else {
        FsAccess::ReadWrite
    };
    let mut rules = vec![(PathBuf::from("/"), FsAccess::ReadDir)];
    rules.extend(fs.read_exec.iter().map(|p| (p.clone(), FsAccess::ReadExec)));
    rules.extend(fs.read.iter().map(|p| (p.clone(), FsAccess::Read)));
    rules.extend([
        (PathBuf::from(inside::WORK), writable),
        (PathBuf::from(inside::TMP), writable),
        (PathBuf::from("/dev"), FsAccess::Device),
        (PathBuf::from("/dev/shm"), FsAccess::ReadWrite),
        (PathBuf::from("/proc"), FsAccess::Read),
        (PathBuf::from("/etc/passwd"), FsAccess::Read),
        (PathBuf::from("/etc/group"), FsAccess::Read),
        (PathBuf::from("/etc/hosts"), FsAccess::Read),
        (PathBuf::from("/etc/hostname"), FsAccess::Read),
        (PathBuf::from(inside::RUN), FsAccess::Read),
    ]);
    if request.control_socket.is_some() {
        rules.push((PathBuf::from(inside::BIN_DIR), FsAccess::ReadExec));
    }
    if transparent {
        rules.push((PathBuf::from("/etc/nsswitch.conf"), FsAccess::Read));
    }
    let mut tcp_connect: Vec<u16> = request
        .has_proxy()
        .then_some(RELAY_PORT)
        .into_iter()
        .collect();
    if transparent {
        tcp_connect.extend(TRANSPARENT_PORTS);
    }
    LandlockPlan {
        rules,
        tcp_connect,
        required: profile.require.landlock,
    }
}

/// Environment: nothing of the caller's but the profile's `pass` list, then
/// the profile's fixed values, then `--env`, then what the sandbox itself
/// must control (proxy, CA, control socket), which nobody can override.
pub fn build_env(
    profile: &Profile,
    request: &RunRequest,
    caller_env: &[(String, String)],
) -> Result<Vec<(String, String)>, PlanError> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for name in &profile.env.pass {
        if let Some((_, v)) = caller_env.iter().find(|(k, _)| k == name) {
            env.insert(name.clone(), v.clone());
        }
    }
    env.extend(profile.env.set.clone());
    for kv in &request.env {
        match kv.split_once('=') {
            Some((k, v)) if is_env_name(k) && !v.contains('\0') => {
                env.insert(k.to_string(), v.to_string());
            }
            _ => return Err(PlanError::BadEnv(kv.clone())),
        }
    }
    env.entry("HOME".to_string())
        .or_insert_with(|| inside::TMP.to_string());
    env.entry("PATH".to_string())
        .or_insert_with(|| "/usr/bin:/bin".to_string());
    for k in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "GIT_SSL_CAINFO",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        vars::CONTROL_SOCKET,
    ] {
        env.remove(k);
    }
    if request.has_proxy() {
        for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.insert(k.to_string(), RELAY_URL.to_string());
        }
        env.insert("GH_TOKEN".to_string(), GH_TOKEN_PLACEHOLDER.to_string());
    }
    if request.ca_bundle.is_some() {
        for k in [
            "SSL_CERT_FILE",
            "GIT_SSL_CAINFO",
            "CURL_CA_BUNDLE",
            "REQUESTS_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
        ] {
            env.insert(k.to_string(), inside::CA_BUNDLE.to_string());
        }
    }
    if request.control_socket.is_some() {
        env.insert(
            vars::CONTROL_SOCKET.to_string(),
            inside::CONTROL_SOCKET.to_string(),
        );
        let path = env.get("PATH").cloned().unwrap_or_default();
        env.insert("PATH".to_string(), format!("{}:{path}", inside::BIN_DIR));
    }
    Ok(env.into_iter().collect())
}

#[cfg(test)]
mod tests;
