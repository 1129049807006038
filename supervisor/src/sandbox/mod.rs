//! Executes a [`Plan`]. Its `unsafe` is confined to [`sys`], the one module
//! of the workspace allowed it.
//!
//! ```text
//! gatehouse sandbox run (host)             init (pid 1; new user/mnt/pid/net/ipc/uts ns)
//!  check required protections, create
//!  cgroups, open their join files
//!  clone(namespaces) ─────────────────────► join cgroups (write 0 to each), wait
//!  write uid/gid maps ── byte ────────────► open bind sources, take worker uid,
//!  wait: exit | TERM/INT/HUP | wall time    build root, pivot_root, lo up, relay
//!        | caller gone                      listener, scrub env+argv, non-dumpable,
//!  read setup errors (CLOEXEC pipe)         cgroup ns, fork ──► worker: setsid,
//!  remove cgroups                           rlimits, drop caps, no_new_privs,
//!                                           Landlock, seccomp, execve
//!                                           relay threads; reap; exit with its status
//! ```
//!
//! The host side never runs the command itself and never falls back: any
//! step that fails before `execve` is written to a close-on-exec pipe, and
//! the run ends with [`EXIT_SANDBOX_FAILED`].

mod cgroup;
mod init;
mod kernel;
pub mod probe;
mod relay;
mod root;
pub mod seccomp;
#[allow(unsafe_code)]
pub(crate) mod sys;
mod worker;
pub mod worker_uids;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::plan::{Identity, MountStep, Plan};

pub use crate::workdir_fs::SizeStatus;
pub use cgroup::{LimitMechanism, LimitReport};

/// Makes the process `cmd` spawns get SIGKILL when the calling *thread*
/// ends (the parent-death signal, set after the child's credentials
/// change); a child whose parent is already gone does not start. Keep the
/// spawning thread alive as long as the child.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    sys::fork::die_with_parent_std(cmd);
}

/// What a supervisor started by root keeps: namespaces, mounts, pivot_root
/// and idmapped mounts (`CAP_SYS_ADMIN`); the worker's uid and maps
/// (`CAP_SETUID`, `CAP_SETGID`); dropping the bounding set inside
/// (`CAP_SETPCAP`); work dirs handed to the worker account and cleaned up
/// (`CAP_CHOWN`, `CAP_FOWNER`, `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`);
/// stopping jobs that run as other uids (`CAP_KILL`); loopback in the
/// sandbox's network namespace (`CAP_NET_ADMIN`); rlimits
/// (`CAP_SYS_RESOURCE`). `deploy/systemd/gatehouse-supervisor.service`
/// lists the same, and `gatehouse up` bounds its supervisor to them.
pub const SUPERVISOR_CAPABILITIES: [caps::Capability; 11] = [
    caps::Capability::CAP_SYS_ADMIN,
    caps::Capability::CAP_SETUID,
    caps::Capability::CAP_SETGID,
    caps::Capability::CAP_SETPCAP,
    caps::Capability::CAP_CHOWN,
    caps::Capability::CAP_FOWNER,
    caps::Capability::CAP_DAC_OVERRIDE,
    caps::Capability::CAP_DAC_READ_SEARCH,
    caps::Capability::CAP_KILL,
    caps::Capability::CAP_NET_ADMIN,
    caps::Capability::CAP_SYS_RESOURCE,
];

/// Limits the capability bounding set of the process `cmd` spawns to
/// `keep` (every other capability the kernel knows is dropped before
/// exec): a program run as root then holds only those.
pub fn bound_capabilities(cmd: &mut std::process::Command, keep: &[caps::Capability]) {
    sys::fork::bound_capabilities_std(cmd, keep);
}

/// The sandbox could not be built, or a protection the profile requires is
/// missing. Nothing was run.
pub const EXIT_SANDBOX_FAILED: u8 = 125;
/// The wall time ran out; the whole sandbox was killed.
pub const EXIT_WALL_TIME: u8 = 124;
/// The command could not be executed (not found / not permitted), as in sh.
pub const EXIT_NOT_FOUND: u8 = 127;
pub const EXIT_NOT_EXECUTABLE: u8 = 126;

/// How often the host side checks that its parent is still alive.
const PARENT_CHECK: Duration = Duration::from_millis(250);

/// Why a sandbox could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A protection the profile requires is not available here.
    #[error("required protection missing: {what}. {fix}")]
    Missing { what: String, fix: String },
    /// A host path the plan binds cannot be opened.
    #[error("cannot open {path} for binding: {source}")]
    Source {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A system call on the host side failed.
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        source: std::io::Error,
    },
    /// Setting up resource limits failed.
    #[error("limits: {0}")]
    Cgroup(String),
    /// The seccomp filter did not compile.
    #[error("seccomp: {0}")]
    Seccomp(String),
    /// The caller has more than one thread (or its threads cannot be
    /// counted): starting the sandbox copies the process, which is sound
    /// only with one.
    #[error("{0}")]
    Threaded(sys::fork::ForkError),
}

impl SandboxError {
    fn sys(what: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
        move |source| SandboxError::Sys { what, source }
    }
}

impl From<sys::fork::ForkError> for SandboxError {
    fn from(e: sys::fork::ForkError) -> SandboxError {
        match e {
            sys::fork::ForkError::Sys(source) => SandboxError::Sys {
                what: "clone into new user, mount, pid, net, ipc and uts namespaces (see `gatehouse doctor`)",
                source,
            },
            threads => SandboxError::Threaded(threads),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited (or died: 128+N).
    Exited(u8),
    /// A signal to `sandbox run` itself (TERM/INT/HUP) killed the sandbox.
    Signalled(i32),
    /// The wall time ran out.
    WallTime(Duration),
    /// Something between clone and execve failed; the message says what.
    SetupFailed(String),
    /// The process that started `sandbox run` died; the sandbox was killed.
    ParentGone,
}

impl Outcome {
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Exited(c) => *c,
            Outcome::Signalled(n) => 128u8.saturating_add(*n as u8),
            Outcome::WallTime(_) => EXIT_WALL_TIME,
            Outcome::SetupFailed(_) => EXIT_SANDBOX_FAILED,
            Outcome::ParentGone => 128 + libc::SIGHUP as u8,
        }
    }
}

/// A bind source opened on the host before any namespace exists, so that
/// paths only the caller can traverse still bind after the init drops to
/// the worker's uid.
#[derive(Debug)]
pub(crate) enum Source {
    Fd {
        fd: OwnedFd,
        is_dir: bool,
    },
    /// The host path is a symlink (e.g. `/bin -> usr/bin`): recreate it.
    Symlink(PathBuf),
    /// Optional and absent on this host.
    Absent,
    /// A detached mount made on the host side (the idmapped work dir, a
    /// socket in a directory only the caller can traverse), to attach as it is.
    Tree {
        tree: OwnedFd,
        is_dir: bool,
    },
}

/// How the work dir's owner must be shown to the worker: when a root
/// caller hands over a directory owned by someone other than the worker's
/// host user, that owner (uid and gid) appears as the worker through an
/// idmapped mount. `None` when the worker already owns it, or when the
/// caller is not root (the worker then is the caller).
pub(crate) fn workdir_shift(identity: &Identity, owner: (u32, u32)) -> Option<sys::idmap::IdShift> {
    (identity.caller_is_root && owner.0 != identity.host_uid).then_some(sys::idmap::IdShift {
        uid: (owner.0, identity.host_uid),
        gid: (owner.1, identity.host_gid),
    })
}

/// The idmapped work dir [`workdir_shift`] asks for, made on the host side
/// (it needs privilege over the host's mount namespace) and attached by the
/// init in place of a bind.
fn idmapped_workdir(plan: &Plan) -> Result<Option<OwnedFd>, SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = workdir_host(plan) else {
        return Ok(None);
    };
    let meta = std::fs::metadata(dir).map_err(|source| SandboxError::Source {
        path: dir.clone(),
        source,
    })?;
    match workdir_shift(&plan.identity, (meta.uid(), meta.gid())) {
        None => Ok(None),
        Some(shift) => sys::idmap::idmapped_tree(dir, shift)
            .map(Some)
            .map_err(SandboxError::sys(
                "an idmapped mount of the work dir, to show its owner as the worker's host user (its filesystem may not support idmapped mounts: make the worker's user own it instead)",
            )),
    }
}

/// The detached mounts the host side makes before any namespace exists, one
/// slot per mount step: the idmapped work dir, and, started by root, a clone
/// of each bound socket and of the proxy identity's directory. A socket sits
/// in a directory its owner keeps private (the proxy's identity sockets are
/// the proxy user's, 0700): the
/// caller, root, can reach it, but the init, once in its own user namespace,
/// no longer can, even before it takes the worker's uid.
fn host_trees(plan: &Plan) -> Result<Vec<Option<OwnedFd>>, SandboxError> {
    use std::os::unix::fs::FileTypeExt;
    let mut workdir = idmapped_workdir(plan)?;
    plan.mounts
        .iter()
        .map(|step| match step {
            MountStep::BindWritable { .. } => Ok(workdir.take()),
            MountStep::BindReadOnly { host, inside, .. }
                if plan.identity.caller_is_root
                    && (std::fs::symlink_metadata(host)
                        .is_ok_and(|m| m.file_type().is_socket())
                        || is_proxy_dir(inside)) =>
            {
                sys::idmap::clone_tree(host)
                    .map(Some)
                    .map_err(|source| SandboxError::Source {
                        path: host.clone(),
                        source,
                    })
            }
            _ => Ok(None),
        })
        .collect()
}

/// Whether a bind's place inside is the proxy identity's directory (a
/// private directory of the proxy's user, cloned like a socket).
pub(crate) fn is_proxy_dir(inside: &std::path::Path) -> bool {
    inside == std::path::Path::new(crate::plan::inside::PROXY_DIR)
}

/// Opens one bind source. The init calls this right after clone (an fd
/// opened in the host's mount namespace could not be bound in ours): first
/// as the caller (a root caller can then traverse root-only directories),
/// and again for what failed once it has the worker's uid (which can
/// traverse the worker's own private directories).
pub(crate) fn open_source(step: &MountStep) -> Result<Source, SandboxError> {
    let (host, optional, follow) = match step {
        MountStep::BindReadOnly {
            host,
            optional,
            inside,
            ..
        } => (host, *optional, host != inside),
        MountStep::BindWritable { host, .. } => (host, false, true),
        _ => return Ok(Source::Absent),
    };
    let source_err = |source| SandboxError::Source {
        path: host.clone(),
        source,
    };
    match std::fs::symlink_metadata(host) {
        Ok(m) if m.file_type().is_symlink() && !follow => {
            return Ok(Source::Symlink(
                std::fs::read_link(host).map_err(source_err)?,
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && optional => {
            return Ok(Source::Absent)
        }
        _ => {}
    }
    let fd = sys::open_path(host).map_err(source_err)?;
    let is_dir = sys::is_dir(&fd);
    Ok(Source::Fd { fd, is_dir })
}

/// The host directory bound at `/work`.
fn workdir_host(plan: &Plan) -> Option<&PathBuf> {
    plan.mounts.iter().find_map(|m| match m {
        MountStep::BindWritable { host, .. } => Some(host),
        _ => None,
    })
}

/// Whether the profile's `limits.work_dir_size` holds for this plan's work
/// dir (measured here, on the host side): see [`crate::workdir_fs`].
pub fn work_dir_size(plan: &Plan) -> Result<SizeStatus, SandboxError> {
    let (Some(limit), Some(dir)) = (plan.limits.work_dir_size, workdir_host(plan)) else {
        return Ok(SizeStatus::Unlimited);
    };
    let measured = crate::workdir_fs::measure(dir).map_err(|source| SandboxError::Source {
        path: dir.clone(),
        source,
    })?;
    Ok(crate::workdir_fs::judge(Some(limit), measured))
}

/// Refuses to start when the profile requires the work dir's size limit
/// and the work dir does not enforce it.
fn check_work_dir_size(plan: &Plan) -> Result<(), SandboxError> {
    match work_dir_size(plan)? {
        SizeStatus::NotEnforced { why } if plan.require.work_dir_size => {
            Err(SandboxError::Missing {
                what: format!(
                    "the work dir's size limit (limits.work_dir_size, which require.work_dir_size requires): {why}"
                ),
                fix: "Run the job under the supervisor started by root (it gives each ticket's work dir a filesystem of its own), or pass a work dir that is one, e.g. `truncate -s 2G work.img && mkfs.ext4 -q -m 0 work.img && mount -o loop,nodev,nosuid work.img DIR` as root; rootless there is no way to enforce it: use a profile without require.work_dir_size".to_string(),
            })
        }
        _ => Ok(()),
    }
}

/// Refuses to start when the profile requires something the kernel lacks.
fn check_required(plan: &Plan, facts: &probe::QuickFacts) -> Result<(), SandboxError> {
    if plan.landlock.required && facts.landlock_abi < 1 {
        return Err(SandboxError::Missing {
            what: "Landlock (the kernel reports no Landlock ABI)".to_string(),
            fix: "Boot a kernel with CONFIG_SECURITY_LANDLOCK and `landlock` in the lsm= list, or use a profile with require.landlock = false".to_string(),
        });
    }
    if plan.seccomp.required && !facts.seccomp {
        return Err(SandboxError::Missing {
            what: "seccomp filters".to_string(),
            fix:
                "Use a kernel with CONFIG_SECCOMP_FILTER, or a profile with require.seccomp = false"
                    .to_string(),
        });
    }
    Ok(())
}

/// Runs the plan to completion. `Err` means nothing was started.
///
/// The calling process must have one thread (checked first: otherwise
/// [`SandboxError::Threaded`] and nothing happens): the sandbox's init is a
/// copy of it.
pub fn run(plan: &Plan) -> Result<(Outcome, LimitReport), SandboxError> {
    sys::fork::single_threaded().map_err(SandboxError::Threaded)?;
    let parent = nix::unistd::getppid().as_raw();
    let facts = probe::quick();
    check_required(plan, &facts)?;
    check_work_dir_size(plan)?;
    let filter = seccomp::compile(&plan.seccomp)?;
    let trees = host_trees(plan)?;
    let limits = cgroup::choose_here(&plan.limits, plan.require.cgroup_limits)?;
    // Fds the caller leaked to us must not reach the worker.
    sys::mark_all_cloexec();

    let (sync_r, sync_w) = sys::pipe().map_err(SandboxError::sys("pipe"))?;
    let (err_r, err_w) = sys::pipe().map_err(SandboxError::sys("pipe"))?;
    let (cg_host, cg_init) =
        std::os::unix::net::UnixStream::pair().map_err(SandboxError::sys("socketpair"))?;
    let (cg_host, cg_init) = (OwnedFd::from(cg_host), OwnedFd::from(cg_init));
    sys::default_sigchld().map_err(SandboxError::sys("sigaction SIGCHLD"))?;
    let old_mask = sys::block_signals().map_err(SandboxError::sys("sigprocmask"))?;

    let child = match sys::fork::clone_into_namespaces() {
        Ok(pid) => pid,
        Err(e) => {
            let _ = sys::restore_signals(&old_mask);
            return Err(SandboxError::from(e));
        }
    };
    if child == 0 {
        drop(sync_w);
        drop(err_r);
        drop(cg_host);
        init::main(init::Setup {
            plan,
            filter,
            sync: sync_r,
            errors: err_w,
            cgroups: cg_init,
            trees,
        });
    }
    drop(sync_r);
    drop(err_w);
    drop(cg_init);
    drop(trees);

    let started = Instant::now();
    let (handed_over, created) = release_init(child, plan, &limits, &sync_w, cg_host);
    let cgroups = match (handed_over, created) {
        (Ok(()), Some(cgroups)) => cgroups,
        (result, created) => {
            sys::kill_and_reap(child);
            if let Some(c) = &created {
                c.remove();
            }
            // The init may have failed first and said why; that beats EPIPE.
            let init_error = read_setup_error(err_r);
            let _ = sys::restore_signals(&old_mask);
            if let Some(msg) = init_error {
                return Ok((
                    Outcome::SetupFailed(msg),
                    cgroup::report_for(&limits, &plan.limits),
                ));
            }
            return Err(result
                .err()
                .unwrap_or_else(|| SandboxError::Cgroup("cgroups were not created".to_string())));
        }
    };
    let report = cgroups.report();
    let outcome = wait(child, plan.wall_time, started, parent);
    drop(sync_w);
    let setup_error = read_setup_error(err_r);
    cgroups.remove();
    let _ = sys::restore_signals(&old_mask);
    let outcome = match setup_error {
        Some(msg) => Outcome::SetupFailed(msg),
        None => outcome,
    };
    Ok((outcome, report))
}

/// Writes the init's id maps and releases it, then creates this run's
/// cgroups while the init builds the sandbox's root and hands them over
/// before the init starts the worker: nothing of the worker runs outside
/// its limits. (The init joins the cgroups itself, see `cgroup`.) Returns
/// the cgroups created, if any, for the caller to remove.
fn release_init(
    child: i32,
    plan: &Plan,
    limits: &cgroup::Choice,
    sync_w: &OwnedFd,
    cg_host: OwnedFd,
) -> (Result<(), SandboxError>, Option<cgroup::Cgroups>) {
    let released = sys::write_id_maps(child, &plan.identity)
        .map_err(SandboxError::sys("write uid/gid maps"))
        .and_then(|()| sys::write_byte(sync_w).map_err(SandboxError::sys("release init")));
    let mut created = None;
    let handed_over = released.and_then(|()| {
        let (cgroups, joins) = cgroup::prepare(
            limits,
            &plan.limits,
            plan.require.cgroup_limits,
            std::process::id(),
        )?;
        let (data, fds) = cgroup::encode_handover(cgroups.report().all_by_cgroup(), joins);
        created = Some(cgroups);
        sys::send_with_fds(&cg_host, &data, &fds)
            .map_err(SandboxError::sys("handing the cgroups to the init"))
    });
    (handed_over, created)
}

/// What the init wrote to the error pipe before it ended, if anything.
fn read_setup_error(err_r: OwnedFd) -> Option<String> {
    let mut msg = String::new();
    let _ = std::fs::File::from(err_r).read_to_string(&mut msg);
    let msg = msg.trim_end();
    (!msg.is_empty()).then(|| msg.to_string())
}

/// Waits for the init (and so the whole sandbox) to end, killing it on a
/// termination signal or when the wall time runs out.
///
/// The caller's death is noticed by polling: a parent-death signal would
/// fire when the *thread* that spawned us exits, which in a threaded caller
/// (a tokio blocking pool) happens while the caller lives on.
fn wait(child: i32, wall_time: Option<Duration>, started: Instant, parent: i32) -> Outcome {
    // A sandbox still running after the first nap is past its start: from
    // then on this process only waits, and what building touched goes back
    // (a short-lived one never pays for it).
    let mut shed = false;
    loop {
        let remaining = wall_time.map(|w| w.saturating_sub(started.elapsed()));
        if remaining == Some(Duration::ZERO) {
            sys::kill_and_reap(child);
            return Outcome::WallTime(wall_time.unwrap_or_default());
        }
        let nap = remaining.map_or(PARENT_CHECK, |r| r.min(PARENT_CHECK));
        match sys::wait_signal(Some(nap)) {
            woken @ (sys::Woken::Child | sys::Woken::Timeout) => {
                if let Some(status) = sys::try_reap(child) {
                    return Outcome::Exited(status);
                }
                if !shed && matches!(woken, sys::Woken::Timeout) {
                    sys::idle::shed();
                    shed = true;
                }
                if nix::unistd::getppid().as_raw() != parent {
                    sys::kill_and_reap(child);
                    return Outcome::ParentGone;
                }
            }
            sys::Woken::Terminate(sig) => {
                sys::kill_and_reap(child);
                return Outcome::Signalled(sig);
            }
        }
    }
}

/// Whose host ids the worker of a sandbox started by root takes.
#[derive(Debug, Clone, Copy)]
pub enum WorkerAccount<'a> {
    /// Its own uid (and gid of the same number), leased from the range for
    /// as long as the sandbox lives (see [`worker_uids`]).
    Leased(worker_uids::UidRange),
    /// A named unprivileged account, shared by every sandbox given it.
    User(&'a str),
}

/// Who the worker runs as: started by root, per `account`; otherwise the
/// caller itself. A lease, when there is one, must be kept until the
/// sandbox has ended.
pub fn worker_identity(
    account: WorkerAccount<'_>,
) -> Result<(Identity, Option<worker_uids::Lease>), SandboxError> {
    let uid = nix::unistd::geteuid();
    if !uid.is_root() {
        let identity = Identity {
            host_uid: uid.as_raw(),
            host_gid: nix::unistd::getegid().as_raw(),
            caller_is_root: false,
        };
        return Ok((identity, None));
    }
    match account {
        WorkerAccount::User(name) => Ok((named_worker(name)?, None)),
        WorkerAccount::Leased(range) => {
            let lease = worker_uids::lease(range).map_err(|e| SandboxError::Missing {
                what: format!("a host uid of its own for the worker ({e})"),
                fix: "Wait for a sandbox to end, widen --worker-uids, or pass --worker-user"
                    .to_string(),
            })?;
            let identity = Identity {
                host_uid: lease.uid,
                host_gid: lease.uid,
                caller_is_root: true,
            };
            Ok((identity, Some(lease)))
        }
    }
}

/// The ids of the named account, which must not be root's.
fn named_worker(worker_user: &str) -> Result<Identity, SandboxError> {
    let missing = |why: String| {
        SandboxError::Missing {
        what: format!("worker user `{worker_user}` ({why})"),
        fix: format!("Create it (useradd --system --no-create-home {worker_user}) or pass --worker-user with another unprivileged user"),
    }
    };
    let user = crate::accounts::user(worker_user)
        .map_err(|e| missing(format!("reading /etc/passwd: {e}")))?
        .ok_or_else(|| missing("no such user in /etc/passwd".to_string()))?;
    if user.uid == 0 || user.gid == 0 {
        return Err(missing(
            "it is uid or gid 0; workers never run as host root".to_string(),
        ));
    }
    Ok(Identity {
        host_uid: user.uid,
        host_gid: user.gid,
        caller_is_root: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_callers_work_dir_of_another_owner_is_shown_as_the_workers() {
        let root_caller = Identity {
            host_uid: 990,
            host_gid: 985,
            caller_is_root: true,
        };
        let rootless = Identity {
            caller_is_root: false,
            ..root_caller
        };
        // (identity, owner uid/gid, expected shift)
        let cases = [
            (
                root_caller,
                (0, 0),
                Some(sys::idmap::IdShift {
                    uid: (0, 990),
                    gid: (0, 985),
                }),
            ),
            (
                root_caller,
                (1000, 1001),
                Some(sys::idmap::IdShift {
                    uid: (1000, 990),
                    gid: (1001, 985),
                }),
            ),
            // The worker owns it already: a plain bind.
            (root_caller, (990, 985), None),
            (root_caller, (990, 0), None),
            // Rootless: the worker is the caller; no mapping is possible.
            (rootless, (0, 0), None),
            (rootless, (990, 985), None),
        ];
        for (i, (identity, owner, expected)) in cases.into_iter().enumerate() {
            assert_eq!(workdir_shift(&identity, owner), expected, "case {i}");
        }
    }

    #[test]
    fn run_refuses_a_multi_threaded_caller_before_doing_anything() {
        let profile =
            crate::profile::resolve(&crate::profile::DirSource { dirs: vec![] }, "default")
                .unwrap();
        let request = crate::plan::RunRequest {
            workdir: PathBuf::from("/nonexistent-work-dir"),
            command: vec!["true".into()],
            ..Default::default()
        };
        let identity = Identity {
            host_uid: 1000,
            host_gid: 1000,
            caller_is_root: false,
        };
        let plan = Plan::build(&profile, &request, identity, &[]).unwrap();
        // A second thread, alive for the call, whatever the test harness
        // does with threads.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let result = run(&plan);
        let _ = tx.send(());
        other.join().unwrap();
        match result {
            Err(e @ SandboxError::Threaded(sys::fork::ForkError::Threads(n))) => {
                assert!(n >= 2, "{n}");
                assert!(e.to_string().contains("single-threaded process"), "{e}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
