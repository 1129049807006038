//! The one module of the workspace allowed `unsafe` (the crate root allows
//! it here and nowhere else; every other crate forbids it): thin wrappers
//! over the system calls nix does not cover safely, each `unsafe` block with
//! a `// SAFETY:` comment, and safe functions on top.
//!
//! - here: the host side's descriptors, signals and reaping, and probes;
//! - [`fork`]: copying this process (clone into namespaces, the worker's
//!   start sharing memory, fork), sound only with one thread, and the job
//!   runner's `pre_exec`;
//! - [`inside`]: what the init does inside the namespaces (mount flags,
//!   loopback, scrubbing its memory, capabilities);
//! - [`exec`]: the worker between its start and `execve`, which allocates
//!   nothing;
//! - [`host`]: the real [`Kernel`](super::kernel::Kernel) the init's steps
//!   call;
//! - [`idle`]: giving back the pages start-up touched before a process
//!   only waits.

pub mod exec;
pub mod fork;
pub mod host;
pub mod idle;
pub mod idmap;
pub mod inside;

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::stat::Mode;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::plan::Identity;

fn io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

pub fn open_path(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).map_err(io)
}

pub fn is_dir(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd.as_fd())
        .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        .unwrap_or(false)
}

/// Marks every fd from 3 up close-on-exec, so nothing the caller leaked to
/// `sandbox run` reaches the worker.
pub fn mark_all_cloexec() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on fds
    // of this process; it touches no memory.
    let _ = unsafe { libc::close_range(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as i32) };
}

pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io)
}

pub fn write_byte(fd: &OwnedFd) -> io::Result<()> {
    nix::unistd::write(fd, &[1]).map(|_| ()).map_err(io)
}

/// Reads one byte; `false` at end of file (the writer is gone).
pub fn read_byte(fd: &OwnedFd) -> bool {
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(fd, &mut b) {
            Ok(1) => return true,
            Err(Errno::EINTR) => continue,
            _ => return false,
        }
    }
}

/// Sends `data` and `fds` in one message on a unix stream socket.
pub fn send_with_fds(sock: &OwnedFd, data: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(data)];
    let raw: Vec<_> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None) {
            Ok(n) if n == data.len() => return Ok(()),
            Ok(_) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short send")),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io(e)),
        }
    }
}

/// Receives one message sent by [`send_with_fds`] (at most 4 KiB and 8
/// descriptors); `None` at end of file (the sender is gone).
pub fn recv_with_fds(sock: &OwnedFd) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::FromRawFd;
    let mut buf = vec![0u8; 4096];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 8]);
    loop {
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io(e)),
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(io)? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS installed these descriptors in this
                // process just now; nothing else owns them.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        let n = msg.bytes;
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        buf.truncate(n);
        return Ok(Some((buf, fds)));
    }
}

/// Whether the write end of a pipe has been closed (its holder is dead).
pub fn peer_gone(fd: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP)),
        Err(_) => true,
    }
}

fn termination_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGCHLD,
    ] {
        set.add(s);
    }
    set
}

/// Blocks the signals the host side waits for synchronously.
pub fn block_signals() -> io::Result<SigSet> {
    let mut old = SigSet::empty();
    nix::sys::signal::sigprocmask(
        SigmaskHow::SIG_BLOCK,
        Some(&termination_set()),
        Some(&mut old),
    )
    .map_err(io)?;
    Ok(old)
}

/// Sets SIGCHLD to its default disposition: a caller that ignores it (an
/// ignore survives execve, `SA_NOCLDWAIT` with it) would have the kernel
/// reap the sandbox's processes unreported, and its pid 1, a copy of this
/// process, would wait for an exit that never comes. Not restored: the
/// default is what a process is born with.
pub fn default_sigchld() -> io::Result<()> {
    let default = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::SigDfl,
        nix::sys::signal::SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: installing the default disposition runs no handler code, so
    // nothing can run in signal context from it.
    unsafe { nix::sys::signal::sigaction(Signal::SIGCHLD, &default) }
        .map(drop)
        .map_err(io)
}

pub fn restore_signals(old: &SigSet) -> io::Result<()> {
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(old), None).map_err(io)
}

/// Leaves a child with the default signal state a fresh program expects:
/// nothing blocked, nothing ignored (Rust ignores SIGPIPE by default, and an
/// ignored disposition survives execve).
pub fn reset_signals() {
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    for sig in Signal::iterator() {
        if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: setting the default disposition installs no handler, so
        // no Rust code can run in signal context.
        let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
    }
}

/// Maps inside uid/gid 0 to the worker's host ids. An unprivileged caller
/// may only map itself and must deny setgroups first; a root caller keeps
/// setgroups so the init can drop root's supplementary groups.
pub fn write_id_maps(pid: i32, id: &Identity) -> io::Result<()> {
    let proc = format!("/proc/{pid}");
    if !id.caller_is_root {
        std::fs::write(format!("{proc}/setgroups"), "deny")?;
    }
    std::fs::write(format!("{proc}/gid_map"), format!("0 {} 1\n", id.host_gid))?;
    std::fs::write(format!("{proc}/uid_map"), format!("0 {} 1\n", id.host_uid))?;
    Ok(())
}

pub enum Woken {
    Child,
    Terminate(i32),
    Timeout,
}

/// Waits for SIGCHLD or a termination signal (all blocked), up to `timeout`.
pub fn wait_signal(timeout: Option<Duration>) -> Woken {
    let set = termination_set();
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `set` is a valid sigset_t for the call's duration; the info
    // pointer may be null; `ts_ptr` is null or points at `ts`, alive here.
    let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), ts_ptr) };
    match sig {
        s if s == libc::SIGCHLD => Woken::Child,
        s if s > 0 => Woken::Terminate(s),
        _ if Errno::last() == Errno::EAGAIN => Woken::Timeout,
        // EINTR: look again.
        _ => Woken::Child,
    }
}

/// The exit code of `pid` if it has ended: its status, or 128+N.
pub fn try_reap(pid: i32) -> Option<u8> {
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, code)) => Some(code as u8),
        Ok(WaitStatus::Signaled(_, sig, _)) => Some(128u8.saturating_add(sig as u8)),
        Err(Errno::ECHILD) => Some(crate::sandbox::EXIT_SANDBOX_FAILED),
        _ => None,
    }
}

pub fn kill_and_reap(pid: i32) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    let _ = waitpid(Pid::from_raw(pid), None);
}

/// Raw fd number, for `/proc/self/fd/N` bind sources.
pub fn raw(fd: &OwnedFd) -> i32 {
    fd.as_raw_fd()
}

/// Exits at once: no atexit handlers, no flushing of buffers shared with
/// the parent's copy of this address space.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and has no preconditions.
    unsafe { libc::_exit(code) }
}

/// Field `n` (numbered from 1, as in proc(5)) of `/proc/<pid>/stat` text.
/// The command name (field 2) may hold spaces and parentheses, so fields
/// are counted from its closing parenthesis.
pub fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n.checked_sub(3)?)
}

// === Probes ===

/// The kernel's Landlock ABI version, 0 if none.
pub fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag,
    // landlock_create_ruleset only returns the ABI version; no memory is
    // read or written and no fd is created.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 {
        0
    } else {
        v as i32
    }
}

/// Whether the kernel has pidfd_open(2): opens one on this process and
/// closes it.
pub fn pidfd_works() -> bool {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags, touches no memory of ours and
    // returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, std::process::id(), 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned by the kernel and nothing else owns it;
    // the OwnedFd closes it when dropped here.
    drop(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_end_of_the_name() {
        let stat = "9 (a) b) c) S 1 2 3";
        assert_eq!(stat_field(stat, 3), Some("S"));
        assert_eq!(stat_field(stat, 6), Some("3"));
        assert_eq!(stat_field(stat, 7), None);
        assert_eq!(stat_field(stat, 2), None);
        assert_eq!(stat_field("no name", 3), None);
    }

    #[test]
    fn probes_answer_from_the_kernel() {
        // This kernel has Landlock and pidfds (see `gatehouse doctor`); a
        // wrapper that failed to make the call would report neither.
        assert!(landlock_abi() >= 1, "landlock ABI {}", landlock_abi());
        assert!(pidfd_works());
    }
}
