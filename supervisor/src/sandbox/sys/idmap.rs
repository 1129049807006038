//! Idmapped mounts: a detached copy of a host directory whose owner
//! appears, through the mount, as another host user. The work dir a root
//! caller hands over (say a 0700 `mktemp -d` of root's) is shown to the
//! worker as its own, and what the worker writes there lands on disk as the
//! directory's owner: nothing is chowned and nothing else is exposed.
//!
//! The kernel reads an id on disk as an id inside the mount's user
//! namespace and maps it out: for files of host uid `O` to appear as host
//! uid `W`, that namespace maps `O` (inside) to `W` (outside), one id only.
//! Everything else on the mount appears as the overflow id (nobody).
//! Creating the mapping needs privilege over the host's mount namespace, so
//! only a root caller uses it.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use super::inside::{cstring, MountAttr};

/// `open_tree(2)` flags and the `mount_setattr(2)` idmap bit (uapi
/// `linux/mount.h`).
const OPEN_TREE_CLONE: libc::c_uint = 0x1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// One id moved to another: `inside` as the mount's user namespace sees it
/// (the id on disk), `outside` as the host sees it through the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdShift {
    pub uid: (u32, u32),
    pub gid: (u32, u32),
}

impl IdShift {
    /// The `uid_map` and `gid_map` lines of the mapping namespace.
    pub fn map_lines(&self) -> (String, String) {
        (
            format!("{} {} 1\n", self.uid.0, self.uid.1),
            format!("{} {} 1\n", self.gid.0, self.gid.1),
        )
    }
}

fn last_error<T>() -> io::Result<T> {
    Err(io::Error::last_os_error())
}

/// A user namespace with `shift`'s mapping, held by its descriptor: a child
/// is cloned into a new user namespace, its maps written, the namespace
/// opened, and the child let go.
fn mapping_namespace(shift: IdShift) -> io::Result<OwnedFd> {
    let (hold_r, hold_w) = super::pipe()?;
    let child = super::fork::clone_into_user_namespace_until_eof(&hold_r, &hold_w)?;
    drop(hold_r);
    let opened = (|| {
        let (uid_line, gid_line) = shift.map_lines();
        std::fs::write(format!("/proc/{child}/uid_map"), uid_line)?;
        std::fs::write(format!("/proc/{child}/gid_map"), gid_line)?;
        File::open(format!("/proc/{child}/ns/user")).map(OwnedFd::from)
    })();
    // The child reads EOF and exits; reap it whatever happened above.
    drop(hold_w);
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
    opened
}

/// A detached clone of the mount at `path` (a file or a directory), made
/// here and attached elsewhere later with `move_mount` (another mount
/// namespace included), where a path-based bind could no longer reach it.
pub fn clone_tree(path: &Path) -> io::Result<OwnedFd> {
    let path = cstring(path)?;
    // SAFETY: `path` is NUL-terminated and alive for the call; open_tree
    // returns a new descriptor we take ownership of below, or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
        )
    };
    if fd < 0 {
        return last_error();
    }
    // SAFETY: `fd` was just returned by open_tree and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A detached, idmapped copy of the mount at `dir` (the directory alone,
/// not the mounts below it), for [`attach`] elsewhere.
pub fn idmapped_tree(dir: &Path, shift: IdShift) -> io::Result<OwnedFd> {
    let userns = mapping_namespace(shift)?;
    let path = cstring(dir)?;
    // SAFETY: `path` is NUL-terminated and alive for the call; open_tree
    // returns a new descriptor we take ownership of below, or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC,
        )
    };
    if fd < 0 {
        return last_error();
    }
    // SAFETY: `fd` was just returned by open_tree and is owned by no one else.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH names `tree`
    // itself; `attr` is a correctly laid out struct mount_attr alive for the
    // call, and the size passed matches it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return last_error();
    }
    Ok(tree)
}

/// Attaches a detached mount (from [`idmapped_tree`]) at `target`.
pub fn attach(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let target = cstring(target)?;
    // SAFETY: both paths are NUL-terminated and alive for the call; the
    // empty source path with MOVE_MOUNT_F_EMPTY_PATH names `tree` itself.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if ret < 0 {
        last_error()
    } else {
        Ok(())
    }
}

/// What the child cloned by `clone_into_user_namespace_until_eof` does:
/// close its copy of the write end, block until the parent closes its own,
/// then exit. Nothing but system calls (no allocation, no lock): it may run
/// in a copy of a process with other threads.
pub(super) fn wait_for_eof_then_exit(hold: &OwnedFd, write_end: &OwnedFd) -> ! {
    // SAFETY: closes this process's copy of the descriptor; the OwnedFd in
    // this copy of memory is never dropped (the child ends in _exit).
    unsafe { libc::close(write_end.as_raw_fd()) };
    let mut byte = [0u8; 1];
    // A File would close the descriptor on drop; read through a borrowed one.
    let mut pipe = std::mem::ManuallyDrop::new(
        // SAFETY: the descriptor stays owned by `hold`; ManuallyDrop keeps
        // this File from closing it.
        unsafe { File::from_raw_fd(hold.as_raw_fd()) },
    );
    let _ = pipe.read(&mut byte);
    super::exit_now(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_moves_the_owner_to_the_worker_and_nothing_else() {
        let shift = IdShift {
            uid: (0, 999),
            gid: (0, 998),
        };
        assert_eq!(
            shift.map_lines(),
            ("0 999 1\n".to_string(), "0 998 1\n".to_string())
        );
    }
}
