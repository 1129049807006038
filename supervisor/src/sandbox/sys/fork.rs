//! New processes made by copying this one: sound only while this process
//! has one thread, because the child starts with a copy (or, sharing memory,
//! the very memory) of every lock another thread might hold.
//!
//! The raw calls are `unsafe fn`s. The safe wrappers count this process's
//! threads right before the call: with one thread, no other thread can
//! appear in between, since only this one could start it and it is here.

use std::io;
use std::os::fd::OwnedFd;

/// Why a process could not be copied.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// This process has other threads, so a copy of it is not sound.
    #[error(
        "this process has {0} threads: a sandbox can only be started from a single-threaded \
         process (run `gatehouse sandbox run` as a process of its own)"
    )]
    Threads(usize),
    /// `/proc/self/stat` could not be read or parsed.
    #[error("counting this process's threads (/proc/self/stat): {0}")]
    Count(io::Error),
    /// The system call itself failed.
    #[error("{0}")]
    Sys(io::Error),
}

/// The number of threads in `/proc/<pid>/stat` text (field 20).
pub fn threads_in_stat(stat: &str) -> Option<usize> {
    super::stat_field(stat, 20)?.parse().ok()
}

/// Succeeds when this process has exactly one thread, the caller's.
pub fn single_threaded() -> Result<(), ForkError> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(ForkError::Count)?;
    match threads_in_stat(&stat) {
        Some(1) => Ok(()),
        Some(n) => Err(ForkError::Threads(n)),
        None => Err(ForkError::Count(io::Error::new(
            io::ErrorKind::InvalidData,
            "no thread count in field 20",
        ))),
    }
}

/// clone(2) into new user, mount, PID, network, IPC and UTS namespaces with
/// fork semantics (no new stack, no shared memory). Returns 0 in the child.
/// The cgroup namespace is entered later by the child, once it has joined
/// its cgroups.
///
/// # Safety
///
/// The calling process must have one thread. The child continues with a
/// copy of the whole address space but only this thread, and goes on to run
/// arbitrary Rust code (it allocates): a lock another thread held at the
/// clone would stay held forever in the child.
unsafe fn clone_namespaces() -> io::Result<i32> {
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    // SAFETY: the caller guarantees there is no other thread whose locks
    // the child could inherit.
    unsafe { clone_like_fork(flags) }
}

/// clone(2) with `flags` (namespaces) and fork semantics: no CLONE_VM and
/// a null stack, so the child gets a copy of the address space and
/// continues here; SIGCHLD to the parent when it ends. `Ok(0)` in the child.
///
/// # Safety
///
/// As for [`fork`]: one thread in the caller, or a child that makes only
/// async-signal-safe calls until it exits or execs.
unsafe fn clone_like_fork(flags: libc::c_int) -> io::Result<i32> {
    // SAFETY: no pointer is passed (null stack, no tid or tls pointers);
    // the caller keeps the threading contract above.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as i32)
    }
}

/// [`clone_namespaces`] after checking that this process has one thread.
pub fn clone_into_namespaces() -> Result<i32, ForkError> {
    single_threaded()?;
    // SAFETY: one thread, counted just now; only this thread could start
    // another, and it is making this call.
    unsafe { clone_namespaces() }.map_err(ForkError::Sys)
}

/// Clones a child into a new user namespace that only waits: it blocks
/// until `write_end` is closed in this process, then exits (see
/// `idmap::wait_for_eof_then_exit`). Its pid is returned so the caller can
/// write the namespace's maps and open it. Sound with any number of
/// threads: the child makes only system calls.
pub fn clone_into_user_namespace_until_eof(hold: &OwnedFd, write_end: &OwnedFd) -> io::Result<i32> {
    // SAFETY: the child runs only `wait_for_eof_then_exit`, which makes
    // system calls and never returns, so no lock or heap state of another
    // thread matters.
    match unsafe { clone_like_fork(libc::CLONE_NEWUSER) }? {
        0 => super::idmap::wait_for_eof_then_exit(hold, write_end),
        pid => Ok(pid),
    }
}

/// Stack for [`spawn_sharing_memory`]'s child: the worker's set-up before
/// `execve` is shallow (Landlock, seccomp, capabilities).
const SHARED_CHILD_STACK: usize = 256 * 1024;

/// Starts `child` in a new process that shares this process's memory until
/// it calls `execve` or exits, as `posix_spawn` does (`CLONE_VM |
/// CLONE_VFORK`): no page tables are copied and no page is copied on write.
/// Each such copy is a page fault, and on a virtual machine a page fault
/// costs microseconds. This process is suspended until the child has called
/// `execve` or exited. Returns the child's pid; the child gets its own
/// descriptor table, signal dispositions and credentials, so what it
/// changes there (Landlock, seccomp, capabilities) stays its own.
///
/// # Safety
///
/// - The calling process must have one thread: `CLONE_VFORK` suspends only
///   the calling thread, and any other would run on the memory the child
///   uses.
/// - `child` must end in `execve` or `_exit` and never return.
/// - `child` must not allocate or free, nor take any lock: it may be killed
///   at any instruction (the OOM killer, the wall time), and a heap or lock
///   left half-updated would be this process's.
/// - `child` must not drop or move anything this process still uses.
pub(super) unsafe fn spawn_sharing_memory(
    child: &mut dyn FnMut() -> std::convert::Infallible,
) -> io::Result<i32> {
    let mut stack = vec![0u8; SHARED_CHILD_STACK];
    let cb: nix::sched::CloneCb = Box::new(|| match child() {});
    let flags = nix::sched::CloneFlags::CLONE_VM | nix::sched::CloneFlags::CLONE_VFORK;
    // SAFETY: the caller guarantees one thread and a child that neither
    // returns nor allocates nor touches what this process uses. The child
    // runs on its own stack, allocated here before the clone, and this
    // process stays suspended until it execs or exits, so the two never run
    // on the shared memory at the same time.
    let pid = unsafe { nix::sched::clone(cb, &mut stack, flags, Some(libc::SIGCHLD)) }
        .map_err(io::Error::from)?;
    Ok(pid.as_raw())
}

/// fork(2); `Ok(0)` in the child.
///
/// # Safety
///
/// The calling process must have one thread, or the child must call only
/// async-signal-safe functions (no allocation, no lock) until it exits or
/// execs: the child has only the calling thread, and every lock another
/// thread held stays held in it.
unsafe fn fork() -> io::Result<i32> {
    // SAFETY: the caller keeps the contract above.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Child => Ok(0),
        nix::unistd::ForkResult::Parent { child } => Ok(child.as_raw()),
    }
}

/// Whether a child may `unshare(flags)`, tried in a child that exits at
/// once: the kernel's answer, without touching this process. Sound in a
/// process with any number of threads (`gatehouse doctor` runs it, and so
/// do tests probing the machine).
pub fn unshare_works(flags: nix::sched::CloneFlags) -> bool {
    // SAFETY: the child makes only two system calls (unshare, _exit), both
    // async-signal-safe; it allocates nothing and takes no lock.
    match unsafe { fork() } {
        Ok(0) => {
            // SAFETY: unshare(2) takes flags and touches no memory of ours.
            let ret = unsafe { libc::unshare(flags.bits()) };
            super::exit_now(if ret == 0 { 0 } else { 1 })
        }
        Ok(pid) => matches!(
            nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0))
        ),
        Err(_) => false,
    }
}

/// Makes the child `cmd` starts die with this process (SIGKILL when its
/// parent goes), and refuse to start when the parent is already gone.
///
/// The signal is tied to the thread that forks; the caller keeps that
/// thread alive as long as the child (see the job runner).
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    die_with_parent_std(cmd.as_std_mut());
}

/// [`die_with_parent`] for a `std` command (`gatehouse up`'s parts).
pub fn die_with_parent_std(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: runs in the child between fork and exec, after std changed
    // its credentials (which would clear the signal); it only makes two
    // async-signal-safe system calls (prctl, getppid) and allocates nothing
    // (an io::Error from an errno or an ErrorKind holds no heap memory).
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The parent may have died before the prctl: then go now.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            Ok(())
        });
    }
}

/// [`super::super::bound_capabilities`]: drops from the child's bounding
/// set, before exec, each capability this kernel supports that `keep`
/// does not name.
pub fn bound_capabilities_std(cmd: &mut std::process::Command, keep: &[caps::Capability]) {
    use std::os::unix::process::CommandExt;
    // Listed before the fork: the child only walks the list.
    let dropped: Vec<caps::Capability> = caps::runtime::thread_all_supported()
        .into_iter()
        .filter(|c| !keep.contains(c))
        .collect();
    // SAFETY: runs in the child between fork and exec; it reads a vector
    // built before the fork and makes one prctl(PR_CAPBSET_DROP) call per
    // entry (async-signal-safe), allocating only if a drop fails, in which
    // case the spawn fails rather than start with more than `keep`.
    unsafe {
        cmd.pre_exec(move || {
            for cap in &dropped {
                caps::drop(None, caps::CapSet::Bounding, *cap)
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::PermissionDenied))?;
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_count_is_field_20_even_when_the_name_has_spaces_and_parens() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 7 0 \
                    123 456 789";
        assert_eq!(threads_in_stat(stat), Some(7));
        let one = "1 (gatehouse) R 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 6 7";
        assert_eq!(threads_in_stat(one), Some(1));
        assert_eq!(threads_in_stat("1 (x) R 0 1"), None);
        assert_eq!(threads_in_stat("garbage"), None);
    }

    #[test]
    fn a_process_with_a_second_thread_is_refused() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            let _ = rx.recv();
        });
        let refused = single_threaded();
        let cloned = clone_into_namespaces();
        let _ = tx.send(());
        let _ = other.join();
        assert!(
            matches!(refused, Err(ForkError::Threads(n)) if n >= 2),
            "{refused:?}"
        );
        assert!(
            matches!(cloned, Err(ForkError::Threads(n)) if n >= 2),
            "{cloned:?}"
        );
    }
}
