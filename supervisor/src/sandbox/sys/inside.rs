//! What the init (and the worker, before it starts) does inside the
//! namespaces: mount flags, the loopback interface, scrubbing the init's
//! memory of the caller's environment and command line, capabilities.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

fn io(e: nix::errno::Errno) -> io::Error {
    io::Error::from(e)
}

/// Bits for mount_setattr(2).
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
pub(super) struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
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
    let field = |n: usize| super::stat_field(&stat, n).and_then(|v| v.parse::<usize>().ok());
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

/// Clears every capability set of this thread: the bounding set (one
/// PR_CAPBSET_DROP per capability the kernel knows), the ambient set, then
/// inheritable, effective and permitted at once (capset). Allocates nothing:
/// the worker calls it while sharing the init's memory.
pub fn clear_capabilities() -> Result<(), (&'static str, nix::errno::Errno)> {
    use nix::errno::Errno;
    // Capabilities are numbered densely from 0; EINVAL marks the first one
    // past the kernel's last.
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes an integer and touches no memory.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if ret < 0 {
            match Errno::last() {
                Errno::EINVAL => break,
                e => return Err(("dropping the bounding set", e)),
            }
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes integers and touches no memory.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if ret < 0 {
        return Err(("clearing the ambient set", Errno::last()));
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: `header` and `data` are a valid cap_user_header_t and the two
    // cap_user_data_t a version 3 header asks for, alive for the call.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if ret < 0 {
        return Err((
            "clearing the permitted, effective and inheritable sets",
            Errno::last(),
        ));
    }
    Ok(())
}
