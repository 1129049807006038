//! The real [`Kernel`]: what the init's steps call on this machine.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use nix::mount::{MntFlags, MsFlags};
use nix::unistd::{Gid, Uid};

use super::inside::{
    mount_setattr_recursive, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
};
use crate::plan::{FsAccess, MountAttrs};
use crate::sandbox::kernel::Kernel;

/// The Landlock ABI this code is written against. Rights of newer ABIs
/// (e.g. ABI 9's pathname-socket control) are not handled, so they stay
/// allowed rather than silently breaking the control socket.
const LANDLOCK_ABI: ABI = ABI::V7;

/// This machine's kernel.
pub struct Host;

fn landlock_err(e: landlock::RulesetError) -> io::Error {
    io::Error::other(e.to_string())
}

/// `mount_setattr` bits for `attrs`.
fn attr_bits(attrs: MountAttrs) -> u64 {
    [
        (attrs.read_only, MOUNT_ATTR_RDONLY),
        (attrs.nosuid, MOUNT_ATTR_NOSUID),
        (attrs.nodev, MOUNT_ATTR_NODEV),
        (attrs.noexec, MOUNT_ATTR_NOEXEC),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |bits, (_, b)| bits | b)
}

impl Kernel for Host {
    type Ruleset = RulesetCreated;

    fn mount(
        &mut self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()> {
        nix::mount::mount(source, target, fstype, flags, data).map_err(io::Error::from)
    }
    fn set_mount_attrs(&mut self, path: &Path, attrs: MountAttrs) -> io::Result<()> {
        mount_setattr_recursive(path, attr_bits(attrs))
    }
    fn set_user_namespace_limit(&mut self, name: &str, value: u64) -> io::Result<()> {
        std::fs::write(Path::new("/proc/sys/user").join(name), value.to_string())
    }
    fn attach_tree(&mut self, tree: &std::os::fd::OwnedFd, path: &Path) -> io::Result<()> {
        super::idmap::attach(tree, path)
    }
    fn unmount_detach(&mut self, path: &Path) -> io::Result<()> {
        nix::mount::umount2(path, MntFlags::MNT_DETACH).map_err(io::Error::from)
    }
    fn pivot_root(&mut self, new_root: &Path, put_old: &Path) -> io::Result<()> {
        nix::unistd::pivot_root(new_root, put_old).map_err(io::Error::from)
    }
    fn chdir(&mut self, path: &Path) -> io::Result<()> {
        std::env::set_current_dir(path)
    }
    fn create_dir_all(&mut self, path: &Path) -> io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
    }
    fn create_file(&mut self, path: &Path) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map(drop)
    }
    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }
    fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
        std::fs::write(path, contents)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    fn exists(&mut self, path: &Path) -> bool {
        path.exists()
    }

    fn clear_groups(&mut self) -> io::Result<()> {
        nix::unistd::setgroups(&[]).map_err(io::Error::from)
    }
    fn become_root(&mut self) -> io::Result<()> {
        let (g, u) = (Gid::from_raw(0), Uid::from_raw(0));
        nix::unistd::setresgid(g, g, g).map_err(io::Error::from)?;
        nix::unistd::setresuid(u, u, u).map_err(io::Error::from)
    }
    fn clear_capabilities(&mut self) -> io::Result<()> {
        super::inside::clear_capabilities()
            .map_err(|(what, e)| io::Error::new(io::Error::from(e).kind(), format!("{what}: {e}")))
    }
    fn set_no_new_privs(&mut self) -> io::Result<()> {
        nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)
    }

    fn landlock_ruleset(&mut self) -> io::Result<RulesetCreated> {
        Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(LANDLOCK_ABI))
            .and_then(|r| r.handle_access(AccessNet::from_all(LANDLOCK_ABI)))
            .and_then(|r| r.scope(Scope::from_all(LANDLOCK_ABI)))
            .and_then(|r| r.create())
            .map_err(landlock_err)
    }
    fn landlock_allow_path(
        &mut self,
        ruleset: &mut RulesetCreated,
        path: &Path,
        access: FsAccess,
    ) -> io::Result<bool> {
        let Ok(fd) = PathFd::new(path) else {
            return Ok(false); // absent on this host, so nothing to grant
        };
        let mut bits = fs_access(access);
        // fstat on the fd just opened, not a second walk of the path.
        if !is_dir(&fd) {
            bits &= AccessFs::from_file(LANDLOCK_ABI);
        }
        ruleset
            .add_rule(PathBeneath::new(fd, bits))
            .map(drop)
            .map_err(landlock_err)?;
        Ok(true)
    }
    fn landlock_allow_connect(
        &mut self,
        ruleset: &mut RulesetCreated,
        port: u16,
    ) -> io::Result<()> {
        ruleset
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map(drop)
            .map_err(landlock_err)
    }
}

/// The Landlock rights of an access class, at [`LANDLOCK_ABI`].
pub fn fs_access(a: FsAccess) -> BitFlags<AccessFs> {
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match a {
        FsAccess::ReadDir => AccessFs::ReadDir.into(),
        FsAccess::Read => read,
        FsAccess::ReadExec => read | AccessFs::Execute,
        FsAccess::Device => read | AccessFs::WriteFile | AccessFs::IoctlDev,
        FsAccess::ReadWrite => all & !AccessFs::Execute,
        FsAccess::ReadWriteExec => all,
    }
}

/// Whether `fd` is a directory; an fd that cannot be stat'ed counts as a
/// file, which grants fewer rights.
fn is_dir(fd: &PathFd) -> bool {
    use nix::sys::stat::{fstat, SFlag};
    fstat(fd).is_ok_and(|st| {
        SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_attr_bits_follow_the_attrs() {
        assert_eq!(
            attr_bits(MountAttrs::LOCKED),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
        );
        assert_eq!(attr_bits(MountAttrs::default()), 0);
        let rw = MountAttrs {
            nosuid: true,
            nodev: true,
            ..MountAttrs::default()
        };
        assert_eq!(attr_bits(rw), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    }

    #[test]
    fn only_the_writable_classes_may_write_and_only_exec_classes_execute() {
        for a in [FsAccess::ReadDir, FsAccess::Read, FsAccess::ReadExec] {
            assert!(!fs_access(a).contains(AccessFs::WriteFile), "{a:?}");
        }
        for a in [
            FsAccess::ReadDir,
            FsAccess::Read,
            FsAccess::ReadWrite,
            FsAccess::Device,
        ] {
            assert!(!fs_access(a).contains(AccessFs::Execute), "{a:?}");
        }
        assert!(fs_access(FsAccess::ReadWriteExec).contains(AccessFs::Execute));
    }
}
