//! Thin wrappers over the system calls nix does not cover safely. Every
//! `unsafe` block of the crate is in this file.

use std::ffi::CString;
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

/// clone(2) into new user, mount, PID, network, IPC and UTS namespaces with
/// fork semantics (no new stack, no shared memory). Returns 0 in the child.
/// The cgroup namespace is entered later by the child, once it has joined
/// its cgroups.
pub fn clone_namespaces() -> io::Result<i32> {
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::SIGCHLD;
    // SAFETY: raw clone without CLONE_VM and with a null stack behaves like
    // fork(2): the child gets a copy of the address space and continues
    // here. The caller is single-threaded (the binary starts no threads
    // before this), so no lock can be held by a thread that does not exist
    // in the child.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as libc::c_ulong,
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

// === Inside the sandbox ===

/// Bits for mount_setattr(2).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Sets flags on the mount at `path` and every mount below it. A plain
/// `MS_REMOUNT|MS_RDONLY|MS_REC` only changes the top mount.
pub fn mount_setattr_recursive(path: &Path, set: u64) -> io::Result<()> {
    let c = cstring(path)?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `c` is a NUL-terminated path and `attr` a correctly laid out
    // struct mount_attr, both alive for the call; the size passed matches.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            (libc::AT_RECURSIVE | libc::AT_NO_AUTOMOUNT) as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn cstring(path: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Brings `lo` up: a new network namespace starts with it down.
pub fn loopback_up() -> io::Result<()> {
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io)?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads a struct ifreq, which `req` is, from a
    // valid socket fd.
    let ret = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS,
            &req as *const libc::ifreq,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Overwrites this process's environment strings in place. The init keeps
/// the caller's environment in its memory otherwise, visible as
/// `/proc/1/environ`; std's `remove_var` only unlinks the pointers.
pub fn scrub_environment() {
    extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    // SAFETY: single-threaded at this point (the init has started no
    // threads). `environ` is a NULL-terminated array of NUL-terminated
    // strings owned by the process; we zero each string's bytes (not past
    // its terminator) and then empty the array, which leaves every pointer
    // valid.
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let s = *p;
            let len = libc::strlen(s);
            std::ptr::write_bytes(s, 0, len);
            p = p.add(1);
        }
        if !environ.is_null() {
            *environ = std::ptr::null_mut();
        }
    }
}

/// Overwrites this process's command line in place with `name`, so
/// `/proc/1/cmdline` inside the sandbox shows neither host paths nor
/// `--env` values. The region is found in `/proc/self/stat`
/// (`arg_start`, `arg_end`); nothing of it is used after this.
pub fn scrub_cmdline(name: &[u8]) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the parenthesised command name start at field 3.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<usize>().ok());
    let (Some(start), Some(end)) = (field(48), field(49)) else {
        return;
    };
    if end <= start || end - start > 1 << 20 {
        return;
    }
    let keep = name.len().min(end - start - 1);
    // SAFETY: [arg_start, arg_end) is this process's own argument area on
    // its stack, mapped and writable for the life of the process; the kernel
    // reports it for exactly this process. We write within it, and end it
    // with NUL bytes so every C string that pointed into it stays
    // terminated.
    unsafe {
        let base = start as *mut u8;
        std::ptr::write_bytes(base, 0, end - start);
        std::ptr::copy_nonoverlapping(name.as_ptr(), base, keep);
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
/// `child` must end in `execve` or `_exit` and never return, and must not
/// drop or move anything this process still uses: it runs on this process's
/// heap while this process is stopped.
pub fn spawn_sharing_memory(
    child: &mut dyn FnMut() -> std::convert::Infallible,
) -> io::Result<i32> {
    let mut stack = vec![0u8; SHARED_CHILD_STACK];
    let cb: nix::sched::CloneCb = Box::new(|| match child() {});
    let flags = nix::sched::CloneFlags::CLONE_VM | nix::sched::CloneFlags::CLONE_VFORK;
    // SAFETY: the init is single-threaded here (relay threads start only
    // when a connection arrives, after this), so no lock in the shared heap
    // can be held by another thread. The child runs on its own stack, never
    // returns (it execs or _exits), and this process stays suspended until
    // then, so the two never run on the shared memory at the same time.
    let pid =
        unsafe { nix::sched::clone(cb, &mut stack, flags, Some(libc::SIGCHLD)) }.map_err(io)?;
    Ok(pid.as_raw())
}

/// fork(2); `Ok(0)` in the child.
pub fn fork() -> io::Result<i32> {
    // SAFETY: the only caller (`probe`) is single-threaded when it forks, and
    // the child only makes system calls and exits.
    match unsafe { nix::unistd::fork() }.map_err(io)? {
        nix::unistd::ForkResult::Child => Ok(0),
        nix::unistd::ForkResult::Parent { child } => Ok(child.as_raw()),
    }
}

/// Locks the process out of ever regaining capabilities as uid 0 (the
/// worker is uid 0 inside its user namespace) through exec or setuid.
pub fn lock_securebits() -> io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: PR_SET_SECUREBITS takes an integer argument and touches no
    // memory of ours.
    let ret = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
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
