//! The sandbox's pid 1: builds the new root, starts the relay, forks the
//! worker, reaps, and exits with the worker's status (which kills every
//! other process of the PID namespace).

use std::io::Write;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{Gid, Pid, Uid};
use seccompiler::BpfProgram;

use super::{sys, worker, Source, EXIT_SANDBOX_FAILED};
use crate::plan::{MountStep, Plan};

pub(crate) struct Setup<'a> {
    pub plan: &'a Plan,
    pub filter: BpfProgram,
    pub sync: OwnedFd,
    pub errors: OwnedFd,
    /// Where the host side hands over this run's cgroups (see `run`).
    pub cgroups: OwnedFd,
}

/// Where the new root is assembled, on a tmpfs that becomes `/` first.
const STAGE: &str = "/tmp";
const NEWROOT: &str = "/newroot";
const OLDROOT: &str = "/oldroot";

/// Writes `msg` for the host side to report, then exits.
pub(crate) fn fail(errors: &OwnedFd, msg: &str) -> ! {
    let mut f = std::fs::File::from(errors.try_clone().unwrap_or_else(|_| sys::exit_now(125)));
    let _ = f.write_all(msg.as_bytes());
    sys::exit_now(i32::from(EXIT_SANDBOX_FAILED))
}

pub(crate) fn main(setup: Setup<'_>) -> ! {
    // Die with `sandbox run`. If it already died before this line, the sync
    // pipe reads EOF below and we exit.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if !sys::read_byte(&setup.sync) {
        sys::exit_now(i32::from(EXIT_SANDBOX_FAILED));
    }
    let errors = setup.errors;
    let plan = setup.plan;
    let first: Vec<_> = plan.mounts.iter().map(super::open_source).collect();
    if let Err(msg) = become_root(plan) {
        fail(&errors, &msg);
    }
    let sources: Vec<Source> = match plan
        .mounts
        .iter()
        .zip(first)
        .map(|(step, opened)| opened.or_else(|_| super::open_source(step)))
        .collect()
    {
        Ok(s) => s,
        Err(e) => fail(&errors, &e.to_string()),
    };
    // Changing credentials clears the parent-death signal: set it again,
    // then make sure the parent did not die in between (it holds the sync
    // pipe open for as long as it waits for us).
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if sys::peer_gone(&setup.sync) {
        sys::exit_now(i32::from(EXIT_SANDBOX_FAILED));
    }
    if let Err(msg) = build_root(plan, &sources) {
        fail(&errors, &format!("building the sandbox root: {msg}"));
    }
    drop(sources);
    if let Err(e) = nix::unistd::sethostname(plan.hostname) {
        fail(&errors, &format!("sethostname: {e}"));
    }
    if let Err(e) = sys::loopback_up() {
        fail(
            &errors,
            &format!("bringing up lo in the new network namespace: {e}"),
        );
    }
    let listener = match &plan.relay {
        Some(_) => match super::relay::listen() {
            Ok(l) => Some(l),
            Err(e) => fail(&errors, &format!("relay listen on 127.0.0.1:3128: {e}")),
        },
        None => None,
    };
    sys::scrub_environment();
    sys::scrub_cmdline(b"gatehouse-init");
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        fail(&errors, &format!("PR_SET_DUMPABLE: {e}"));
    }

    // The host side has created this run's cgroups meanwhile. Still
    // single-threaded: joining moves the whole init, cheaply (see `cgroup`),
    // and the limits count everything from here on, the worker included.
    let limits_by_cgroup = match sys::recv_with_fds(&setup.cgroups) {
        Ok(Some((data, fds))) => match super::cgroup::decode_handover(&data, fds) {
            Ok((by_cgroup, joins)) => {
                for join in joins {
                    if let Err(msg) = join.join_self() {
                        fail(&errors, &format!("limits: {msg}"));
                    }
                }
                by_cgroup
            }
            Err(msg) => fail(&errors, &format!("limits: {msg}")),
        },
        // The host side failed to create them and says why itself.
        Ok(None) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
        Err(e) => fail(&errors, &format!("limits: receiving the cgroups: {e}")),
    };
    drop(setup.cgroups);
    // Our cgroup namespace is rooted in the cgroups we joined.
    drop(setup.sync);
    if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP) {
        fail(&errors, &format!("unshare(CLONE_NEWCGROUP): {e}"));
    }
    // The listener is close-on-exec, so the worker does not keep it.
    let worker_pid = match sys::spawn_sharing_memory(&mut || {
        worker::main(plan, &setup.filter, &errors, limits_by_cgroup)
    }) {
        Ok(pid) => pid,
        Err(e) => fail(&errors, &format!("starting the worker: {e}")),
    };
    drop(errors);
    // The init needs no privilege from here on.
    let _ = drop_privileges();
    let relay = match (listener, &plan.relay) {
        (Some(listener), Some(target)) => Some((listener, target.as_path())),
        _ => None,
    };
    reap_until(worker_pid, relay)
}

/// Takes the worker's identity inside the namespace (uid/gid 0, mapped to
/// the worker's host ids) while keeping the namespace's capabilities.
fn become_root(plan: &Plan) -> Result<(), String> {
    if plan.identity.caller_is_root {
        nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups([]): {e}"))?;
    }
    nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
        .map_err(|e| format!("setresgid(0): {e}"))?;
    nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
        .map_err(|e| format!("setresuid(0): {e}"))
}

fn drop_privileges() -> Result<(), caps::errors::CapsError> {
    caps::clear(None, caps::CapSet::Bounding)?;
    caps::clear(None, caps::CapSet::Ambient)?;
    caps::clear(None, caps::CapSet::Inheritable)?;
    caps::clear(None, caps::CapSet::Effective)?;
    caps::clear(None, caps::CapSet::Permitted)?;
    let _ = nix::sys::prctl::set_no_new_privs();
    Ok(())
}

/// Reaps every child (pid 1 inherits the namespace's orphans) until the
/// worker exits, then exits with its status, which kills whatever else still
/// runs in the PID namespace. With a relay, the same thread also accepts the
/// relay's connections.
fn reap_until(worker: i32, relay: Option<(TcpListener, &Path)>) -> ! {
    let Some((listener, target)) = relay else {
        loop {
            reap(worker, None);
        }
    };
    // SIGCHLD has been blocked since before the clone (the host side blocks
    // it and the mask is inherited), so no exit is missed between the fork
    // and here: it stays pending until this descriptor reads it.
    let chld = match SignalFd::with_flags(&SigSet::from(Signal::SIGCHLD), SfdFlags::SFD_NONBLOCK) {
        Ok(fd) => fd,
        Err(_) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
    };
    loop {
        while let Ok(Some(_)) = chld.read_signal() {}
        while reap(worker, Some(WaitPidFlag::WNOHANG)) {}
        let mut fds = [
            PollFd::new(chld.as_fd(), PollFlags::POLLIN),
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => sys::exit_now(i32::from(EXIT_SANDBOX_FAILED)),
        }
        if fds[1]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            super::relay::accept_waiting(&listener, target);
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

// === The new root ===

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

fn bind(src: &Path, dst: &Path) -> Result<(), String> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(err(format!("bind {} at {}", src.display(), dst.display())))
}

fn tmpfs(dst: &Path, flags: MsFlags, data: &str) -> Result<(), String> {
    mount(Some("tmpfs"), dst, Some("tmpfs"), flags, Some(data))
        .map_err(err(format!("tmpfs at {}", dst.display())))
}

fn mkdir_p(path: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(err(format!("mkdir {}", path.display())))
}

/// Creates an empty file to bind a non-directory over.
fn touch(path: &Path) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map(|_| ())
        .map_err(err(format!("create {}", path.display())))
}

fn under(root: &str, inside: &Path) -> PathBuf {
    Path::new(root).join(inside.strip_prefix("/").unwrap_or(inside))
}

/// Stage a tmpfs as `/` with the old root at /oldroot, assemble /newroot
/// from binds of the old root, then make /newroot the root and drop the old.
fn build_root(plan: &Plan, sources: &[Source]) -> Result<(), String> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(err("make / rprivate"))?;
    tmpfs(Path::new(STAGE), nosuid_nodev, "mode=0755,size=1m")?;
    std::env::set_current_dir(STAGE).map_err(err("chdir stage"))?;
    mkdir_p(Path::new("newroot"))?;
    mkdir_p(Path::new("oldroot"))?;
    nix::unistd::pivot_root(".", "oldroot").map_err(err("pivot_root to stage"))?;
    std::env::set_current_dir("/").map_err(err("chdir /"))?;
    tmpfs(Path::new(NEWROOT), nosuid_nodev, "mode=0755,size=4m")?;

    for (step, source) in plan.mounts.iter().zip(sources) {
        apply_step(step, source)?;
    }

    // /proc's sensitive files stay read-only even for the in-namespace root.
    let proc_ro = [
        "sys",
        "sysrq-trigger",
        "irq",
        "bus",
        "fs",
        "acpi",
        "scsi",
        "keys",
        "kcore",
    ];
    for entry in proc_ro {
        let p = under(NEWROOT, &Path::new("/proc").join(entry));
        if p.exists() {
            bind(&p, &p)?;
            sys::mount_setattr_recursive(
                &p,
                sys::MOUNT_ATTR_RDONLY
                    | sys::MOUNT_ATTR_NOSUID
                    | sys::MOUNT_ATTR_NODEV
                    | sys::MOUNT_ATTR_NOEXEC,
            )
            .map_err(err(format!("read-only {}", p.display())))?;
        }
    }

    umount2(OLDROOT, MntFlags::MNT_DETACH).map_err(err("detach old root"))?;
    std::env::set_current_dir(NEWROOT).map_err(err("chdir newroot"))?;
    nix::unistd::pivot_root(".", ".").map_err(err("pivot_root into new root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(err("detach stage"))?;
    std::env::set_current_dir("/").map_err(err("chdir /"))?;
    // Seal the root: only the work dir, /tmp and /dev/shm stay writable.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | nosuid_nodev,
        None::<&str>,
    )
    .map_err(err("remount / read-only"))?;
    Ok(())
}

fn apply_step(step: &MountStep, source: &Source) -> Result<(), String> {
    match step {
        MountStep::BindReadOnly { inside, exec, .. }
        | MountStep::BindWritable { inside, exec, .. } => {
            let dst = under(NEWROOT, inside);
            let fd = match source {
                Source::Absent => return Ok(()),
                Source::Symlink(target) => {
                    if let Some(parent) = dst.parent() {
                        mkdir_p(parent)?;
                    }
                    return std::os::unix::fs::symlink(target, &dst)
                        .map_err(err(format!("symlink {}", dst.display())));
                }
                Source::Fd { fd, is_dir } => {
                    if *is_dir {
                        mkdir_p(&dst)?;
                    } else {
                        touch(&dst)?;
                    }
                    fd
                }
            };
            bind(
                &under(
                    OLDROOT,
                    Path::new(&format!("/proc/self/fd/{}", sys::raw(fd))),
                ),
                &dst,
            )?;
            let mut attrs = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
            if matches!(step, MountStep::BindReadOnly { .. }) {
                attrs |= sys::MOUNT_ATTR_RDONLY;
            }
            if !exec {
                attrs |= sys::MOUNT_ATTR_NOEXEC;
            }
            sys::mount_setattr_recursive(&dst, attrs)
                .map_err(err(format!("restrict {}", inside.display())))
        }
        MountStep::Tmpfs {
            inside,
            size_mib,
            exec,
        } => {
            let dst = under(NEWROOT, inside);
            mkdir_p(&dst)?;
            let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
            if !exec {
                flags |= MsFlags::MS_NOEXEC;
            }
            tmpfs(&dst, flags, &format!("mode=1777,size={size_mib}m"))
        }
        MountStep::Proc => {
            let dst = under(NEWROOT, Path::new("/proc"));
            mkdir_p(&dst)?;
            mount(
                Some("proc"),
                &dst,
                Some("proc"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .map_err(err("mount /proc"))
        }
        MountStep::Dev => build_dev(),
        MountStep::File { inside, contents } => {
            let dst = under(NEWROOT, inside);
            if let Some(parent) = dst.parent() {
                mkdir_p(parent)?;
            }
            std::fs::write(&dst, contents).map_err(err(format!("write {}", dst.display())))?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o444))
                .map_err(err(format!("chmod {}", dst.display())))
        }
    }
}

/// A minimal /dev. mknod is not allowed in a user namespace, so the host's
/// harmless nodes are bound in.
fn build_dev() -> Result<(), String> {
    let dev = under(NEWROOT, Path::new("/dev"));
    mkdir_p(&dev)?;
    tmpfs(
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=64k",
    )?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let dst = dev.join(node);
        touch(&dst)?;
        bind(&under(OLDROOT, &Path::new("/dev").join(node)), &dst)?;
    }
    let pts = dev.join("pts");
    mkdir_p(&pts)?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(err("mount devpts"))?;
    std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx")).map_err(err("symlink ptmx"))?;
    let shm = dev.join("shm");
    mkdir_p(&shm)?;
    tmpfs(
        &shm,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "mode=1777,size=64m",
    )?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(name))
            .map_err(err(format!("symlink /dev/{name}")))?;
    }
    Ok(())
}
