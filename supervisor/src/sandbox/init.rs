//! The sandbox's pid 1: builds the new root, starts the relay, forks the
//! worker, reaps, and exits with the worker's status (which kills every
//! other process of the PID namespace).

use std::io::Write;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use seccompiler::BpfProgram;

use super::kernel::Kernel;
use super::sys::host::Host;
use super::{root, sys, worker, Source, EXIT_SANDBOX_FAILED};
use crate::plan::{MountStep, Plan, RELAY_PORT, TRANSPARENT_PORTS};

/// A relay's listener and the socket inside the sandbox it forwards to.
type Relay = (TcpListener, PathBuf);

pub(crate) struct Setup<'a> {
    pub plan: &'a Plan,
    pub filter: BpfProgram,
    pub sync: OwnedFd,
    pub errors: OwnedFd,
    /// Where the host side hands over this run's cgroups (see `run`).
    pub cgroups: OwnedFd,
    /// The detached mounts the host side made, one slot per mount step
    /// (the idmapped work dir, bound sockets).
    pub trees: Vec<Option<OwnedFd>>,
}

/// Writes `msg` for the host side to report, then exits.
fn fail(errors: &OwnedFd, msg: &str) -> ! {
    let mut f = std::fs::File::from(errors.try_clone().unwrap_or_else(|_| sys::exit_now(125)));
    let _ = f.write_all(msg.as_bytes());
    sys::exit_now(i32::from(EXIT_SANDBOX_FAILED))
}

/// Why the init stops before the worker runs.
enum Stop {
    /// Say this to the host side, then exit.
    Fail(String),
    /// Exit: the host side is gone, or failed and says why itself.
    Quietly,
}

impl From<String> for Stop {
    fn from(msg: String) -> Stop {
        Stop::Fail(msg)
    }
}

pub(crate) fn main(setup: Setup<'_>) -> ! {
    let Setup {
        plan,
        filter,
        sync,
        errors,
        cgroups,
        trees,
    } = setup;
    // Die with `sandbox run`. If it already died before this line, the sync
    // pipe reads EOF below and we exit.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if !sys::read_byte(&sync) {
        sys::exit_now(i32::from(EXIT_SANDBOX_FAILED));
    }
    let mut kernel = Host;
    let started = build(&mut kernel, plan, &sync, trees).and_then(|relays| {
        let limits_by_cgroup = join_cgroups(&cgroups)?;
        drop(cgroups);
        drop(sync);
        let worker = start_worker(&mut kernel, plan, &filter, &errors, limits_by_cgroup)?;
        Ok((relays, worker))
    });
    let (relays, worker_pid) = match started {
        Ok(started) => started,
        Err(Stop::Fail(msg)) => fail(&errors, &msg),
        Err(Stop::Quietly) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
    };
    // The init needs no privilege from here on. Failing to drop it ends the
    // sandbox (exiting kills the worker with the whole PID namespace).
    if let Err(msg) = drop_privileges(&mut kernel) {
        fail(&errors, &format!("pid 1 dropping its privileges: {msg}"));
    }
    drop(errors);
    reap_until(worker_pid, relays)
}

/// How long pid 1 waits before it counts as idle and gives back what
/// building touched (a sandbox that ends sooner never pays for it).
const IDLE_AFTER_MS: u16 = 200;

/// Takes the worker's ids, builds the new root, brings up the network and
/// the relay's listener, and scrubs what the caller left in this process.
fn build(
    kernel: &mut Host,
    plan: &Plan,
    sync: &OwnedFd,
    trees: Vec<Option<OwnedFd>>,
) -> Result<Vec<Relay>, Stop> {
    let sources = open_sources(kernel, plan, trees)?;
    set_user_namespace_limits(kernel, plan)?;
    // Changing credentials clears the parent-death signal: set it again,
    // then make sure the parent did not die in between (it holds the sync
    // pipe open for as long as it waits for us).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if sys::peer_gone(sync) {
        return Err(Stop::Quietly);
    }
    root::build_root(kernel, plan, &sources)
        .map_err(|msg| format!("building the sandbox root: {msg}"))?;
    drop(sources);
    nix::unistd::sethostname(plan.hostname).map_err(|e| format!("sethostname: {e}"))?;
    sys::inside::loopback_up()
        .map_err(|e| format!("bringing up lo in the new network namespace: {e}"))?;
    let relays = listen_relays(plan)?;
    sys::inside::scrub_environment();
    sys::inside::scrub_cmdline(b"gatehouse-init");
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    Ok(relays)
}

/// The relay's listeners: 3128 to the proxy socket, and in transparent mode
/// 443 and 80 to the transparent socket.
fn listen_relays(plan: &Plan) -> Result<Vec<Relay>, String> {
    let ports = plan.relay.iter().map(|to| (RELAY_PORT, to)).chain(
        plan.transparent
            .iter()
            .flat_map(|to| TRANSPARENT_PORTS.map(|port| (port, to))),
    );
    ports
        .map(|(port, to)| {
            super::relay::listen(port)
                .map(|listener| (listener, to.clone()))
                .map_err(|e| format!("relay listen on 127.0.0.1:{port}: {e}"))
        })
        .collect()
}

/// Opens every bind source (see [`super::open_source`]): as the caller,
/// then again as the worker for what failed. A detached mount the host side
/// made for a step (the idmapped work dir, a bound socket) stands in for it.
fn open_sources(
    kernel: &mut Host,
    plan: &Plan,
    trees: Vec<Option<OwnedFd>>,
) -> Result<Vec<Source>, Stop> {
    let first: Vec<_> = plan
        .mounts
        .iter()
        .zip(trees)
        .map(|(step, tree)| match tree {
            Some(tree) => Ok(Source::Tree {
                tree,
                is_dir: match step {
                    MountStep::BindWritable { .. } => true,
                    MountStep::BindReadOnly { inside, .. } => super::is_proxy_dir(inside),
                    _ => false,
                },
            }),
            None => super::open_source(step),
        })
        .collect();
    become_root(kernel, plan)?;
    Ok(plan
        .mounts
        .iter()
        .zip(first)
        .map(|(step, opened)| opened.or_else(|_| super::open_source(step)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?)
}

/// The plan's budgets for this user namespace, set while the host's
/// `/proc` is still mounted and this process holds its capabilities there.
/// A budget that cannot be set ends the sandbox, unless the kernel lacks
/// the feature it bounds.
pub(crate) fn set_user_namespace_limits<K: Kernel>(k: &mut K, plan: &Plan) -> Result<(), String> {
    for limit in &plan.user_namespace_limits {
        match k.set_user_namespace_limit(limit.name, limit.value) {
            Ok(()) => {}
            Err(e) if limit.optional && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "setting the sandbox's own budget /proc/sys/user/{} = {}: {e}",
                    limit.name, limit.value
                ))
            }
        }
    }
    Ok(())
}

/// Joins the cgroups the host side created meanwhile. Still
/// single-threaded: joining moves the whole init, cheaply (see `cgroup`),
/// and the limits count everything from here on, the worker included.
/// Returns whether cgroups (rather than rlimits) limit the worker.
fn join_cgroups(cgroups: &OwnedFd) -> Result<bool, Stop> {
    match sys::recv_with_fds(cgroups) {
        Ok(Some((data, fds))) => {
            let (by_cgroup, joins) = super::cgroup::decode_handover(&data, fds)
                .map_err(|msg| format!("limits: {msg}"))?;
            for join in joins {
                join.join_self().map_err(|msg| format!("limits: {msg}"))?;
            }
            Ok(by_cgroup)
        }
        // The host side failed to create them and says why itself.
        Ok(None) => Err(Stop::Quietly),
        Err(e) => Err(format!("limits: receiving the cgroups: {e}").into()),
    }
}

/// Enters a cgroup namespace rooted in the joined cgroups, prepares
/// everything the worker needs (it starts sharing this process's memory and
/// must not allocate, see `sys::exec`), and starts it.
fn start_worker(
    kernel: &mut Host,
    plan: &Plan,
    filter: &BpfProgram,
    errors: &OwnedFd,
    limits_by_cgroup: bool,
) -> Result<i32, Stop> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
        .map_err(|e| format!("unshare(CLONE_NEWCGROUP): {e}"))?;
    let start = worker::prepare(kernel, plan, filter, errors, limits_by_cgroup)?;
    // The listener is close-on-exec, so the worker does not keep it.
    let pid = sys::exec::start_worker(&start).map_err(|e| format!("starting the worker: {e}"))?;
    Ok(pid)
}

/// Takes the worker's identity inside the namespace (uid/gid 0, mapped to
/// the worker's host ids) while keeping the namespace's capabilities.
pub(crate) fn become_root<K: Kernel>(k: &mut K, plan: &Plan) -> Result<(), String> {
    if plan.identity.caller_is_root {
        k.clear_groups()
            .map_err(|e| format!("setgroups([]): {e}"))?;
    }
    k.become_root()
        .map_err(|e| format!("setresgid/setresuid(0): {e}"))
}

/// Every capability gone, and no way to gain one back through exec.
pub(crate) fn drop_privileges<K: Kernel>(k: &mut K) -> Result<(), String> {
    k.clear_capabilities()
        .map_err(|e| format!("dropping capabilities: {e}"))?;
    k.set_no_new_privs()
        .map_err(|e| format!("no_new_privs: {e}"))
}

/// Reaps every child (pid 1 inherits the namespace's orphans) until the
/// worker exits, then exits with its status, which kills whatever else still
/// runs in the PID namespace. With a relay, the same thread also accepts the
/// relay's connections.
fn reap_until(worker: i32, relays: Vec<Relay>) -> ! {
    // SIGCHLD has been blocked since before the clone (the host side blocks
    // it and the mask is inherited), so no exit is missed between the fork
    // and here: it stays pending until this descriptor reads it.
    let chld = match SignalFd::with_flags(&SigSet::from(Signal::SIGCHLD), SfdFlags::SFD_NONBLOCK) {
        Ok(fd) => fd,
        Err(_) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
    };
    let mut busy = true;
    loop {
        while let Ok(Some(_)) = chld.read_signal() {}
        while reap(worker, Some(WaitPidFlag::WNOHANG)) {}
        let mut fds = vec![PollFd::new(chld.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            relays
                .iter()
                .map(|(listener, _)| PollFd::new(listener.as_fd(), PollFlags::POLLIN)),
        );
        let timeout = if busy {
            PollTimeout::from(IDLE_AFTER_MS)
        } else {
            PollTimeout::NONE
        };
        match poll(&mut fds, timeout) {
            // Nothing for a while: from here pid 1 only waits.
            Ok(0) if busy => {
                busy = false;
                sys::idle::shed();
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
        }
        let ready: Vec<bool> = fds[1..]
            .iter()
            .map(|fd| fd.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)))
            .collect();
        drop(fds);
        for ((listener, target), ready) in relays.iter().zip(ready) {
            if ready {
                super::relay::accept_waiting(listener, target);
            }
        }
    }
}

/// Waits for one child; exits with the worker's status when it is the one.
/// Returns whether a child was reaped.
fn reap(worker: i32, flags: Option<WaitPidFlag>) -> bool {
    match waitpid(Pid::from_raw(-1), flags) {
        Ok(WaitStatus::Exited(pid, code)) if pid.as_raw() == worker => sys::exit_now(code),
        Ok(WaitStatus::Signaled(pid, sig, _)) if pid.as_raw() == worker => {
            sys::exit_now(128 + sig as i32)
        }
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) | Err(nix::errno::Errno::EINTR) => true,
        // ECHILD: the worker is gone and was not seen; cannot happen while
        // it runs, so this is a failure, not a hang.
        Err(_) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Identity;
    use crate::sandbox::kernel::tests::Recording;

    fn plan(caller_is_root: bool) -> Plan {
        let profile =
            crate::profile::resolve(&crate::profile::DirSource { dirs: vec![] }, "default")
                .unwrap();
        let request = crate::plan::RunRequest {
            workdir: "/srv/w".into(),
            command: vec!["true".into()],
            ..Default::default()
        };
        let identity = Identity {
            host_uid: 1000,
            host_gid: 1000,
            caller_is_root,
        };
        Plan::build(&profile, &request, identity, &[]).unwrap()
    }

    #[test]
    fn the_namespaces_budgets_are_set_and_a_refused_one_stops_the_sandbox() {
        let p = plan(false);
        let mut k = Recording::default();
        set_user_namespace_limits(&mut k, &p).unwrap();
        assert_eq!(
            k.calls,
            [
                "userns max_inotify_instances=32",
                "userns max_inotify_watches=65536",
                "userns max_cgroup_namespaces=1",
                "userns max_user_namespaces=0",
                "userns max_mnt_namespaces=0",
                "userns max_pid_namespaces=0",
                "userns max_net_namespaces=0",
                "userns max_ipc_namespaces=0",
                "userns max_uts_namespaces=0",
                "userns max_time_namespaces=0",
                "userns max_fanotify_groups=0",
                "userns max_fanotify_marks=0",
            ]
        );
        // A kernel without fanotify has nothing to bound there.
        let mut k = Recording::default();
        k.absent.insert("max_fanotify_groups".into());
        set_user_namespace_limits(&mut k, &p).unwrap();
        assert!(!k.calls.iter().any(|c| c.contains("fanotify_groups")));
        // A required budget missing or refused ends the sandbox.
        let mut k = Recording::default();
        k.absent.insert("max_inotify_watches".into());
        let e = set_user_namespace_limits(&mut k, &p).unwrap_err();
        assert!(
            e.contains("/proc/sys/user/max_inotify_watches = 65536"),
            "{e}"
        );
        let mut k = Recording::failing_on("userns max_user_namespaces");
        let e = set_user_namespace_limits(&mut k, &p).unwrap_err();
        assert!(e.contains("max_user_namespaces"), "{e}");
        assert!(!k.calls.iter().any(|c| c.contains("max_mnt_namespaces")));
    }

    #[test]
    fn a_root_caller_drops_its_groups_before_taking_the_workers_ids() {
        let mut k = Recording::default();
        become_root(&mut k, &plan(true)).unwrap();
        assert_eq!(k.calls, ["setgroups []", "setresgid 0; setresuid 0"]);
        let mut k = Recording::default();
        become_root(&mut k, &plan(false)).unwrap();
        assert_eq!(k.calls, ["setresgid 0; setresuid 0"]);
    }

    #[test]
    fn groups_that_cannot_be_dropped_stop_before_the_ids_change() {
        let mut k = Recording::failing_on("setgroups");
        let e = become_root(&mut k, &plan(true)).unwrap_err();
        assert!(e.starts_with("setgroups([]): "), "{e}");
        assert_eq!(k.calls, ["setgroups []"]);
    }

    #[test]
    fn dropping_privileges_clears_capabilities_then_sets_no_new_privs() {
        let mut k = Recording::default();
        drop_privileges(&mut k).unwrap();
        assert_eq!(k.calls, ["clear capabilities", "no_new_privs"]);
    }

    #[test]
    fn a_failure_to_drop_privileges_is_an_error_not_ignored() {
        let mut k = Recording::failing_on("clear capabilities");
        let e = drop_privileges(&mut k).unwrap_err();
        assert!(e.starts_with("dropping capabilities: "), "{e}");
        assert_eq!(k.calls, ["clear capabilities"]);
        let mut k = Recording::failing_on("no_new_privs");
        let e = drop_privileges(&mut k).unwrap_err();
        assert!(e.starts_with("no_new_privs: "), "{e}");
    }
}
