//! The `gatehouse` binary every sandbox binds at
//! `/run/gatehouse/bin/gatehouse`, reached through the supervisor's own
//! `<state_dir>/bin/gatehouse`.
//!
//! A sandbox's mount table shows the path a bind was made through, and the
//! installed binary may sit in a user's home or a build directory. So at
//! every start the supervisor puts the installed binary's real file at a
//! path of its own: a hard link where that is safe and the kernel allows it
//! (nothing copied), else a copy. That path also launches the sandboxes.
//! Upgrade the installed binary by replacing it (a rename, as package
//! managers and `install` do): a job then keeps the file it started with,
//! and the next start takes the new one. A binary rewritten in place can be
//! seen half-written by a copy made meanwhile.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::service::{io, ServiceError};

/// Puts the real file of `installed` at `<dir>/gatehouse` and returns that
/// path. `dir` is made the supervisor's own (0700) first.
pub(super) fn install(installed: &Path, dir: &Path) -> Result<PathBuf, ServiceError> {
    own_dir(dir)?;
    refuse_noexec(dir)?;
    // A link to a symlink would be a symlink, which a bind follows.
    let real = std::fs::canonicalize(installed).map_err(io(format!(
        "finding the gatehouse binary {}",
        installed.display()
    )))?;
    let source = std::fs::metadata(&real).map_err(io(format!(
        "reading the gatehouse binary {}",
        real.display()
    )))?;
    if !source.is_file() {
        return Err(invalid(format!("{} is not a file", real.display())));
    }
    let at = dir.join("gatehouse");
    let linkable = may_link(&source, nix::unistd::geteuid().as_raw());
    // Already the same file (linked at an earlier start): nothing to do.
    if let Ok(existing) = std::fs::symlink_metadata(&at) {
        if linkable
            && existing.file_type().is_file()
            && (existing.dev(), existing.ino()) == (source.dev(), source.ino())
        {
            return Ok(at);
        }
    }
    let partial = dir.join(".gatehouse.partial");
    let _ = std::fs::remove_file(&partial);
    let linked = linkable && std::fs::hard_link(&real, &partial).is_ok();
    if !linked {
        copy(&real, &partial)?;
    }
    std::fs::rename(&partial, &at).map_err(io(format!("renaming {}", partial.display())))?;
    Ok(at)
}

/// Whether a file may be linked rather than copied: owned by root or by the
/// supervisor, and writable by neither group nor others. Another owner could
/// rewrite the linked inode in place between jobs, or keep it unreadable
/// to the worker's uid; a copy is the supervisor's own, mode 0755.
fn may_link(meta: &std::fs::Metadata, euid: u32) -> bool {
    (meta.uid() == 0 || meta.uid() == euid)
        && meta.mode() & 0o022 == 0
        && meta.mode() & 0o005 == 0o005
}

/// Makes `dir` (just created, or left by an earlier start) a directory of
/// the supervisor's, 0700, refusing a symlink or another owner's.
fn own_dir(dir: &Path) -> Result<(), ServiceError> {
    let meta = std::fs::symlink_metadata(dir).map_err(io(format!("reading {}", dir.display())))?;
    if !meta.file_type().is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(invalid(format!(
            "{} is not a directory of the supervisor's user",
            dir.display()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("making {} private", dir.display())))
}

/// Copies `from` to the new file `to` (never through a planted name).
fn copy(from: &Path, to: &Path) -> Result<(), ServiceError> {
    let what = || {
        format!(
            "copying the gatehouse binary {} to {}",
            from.display(),
            to.display()
        )
    };
    let mut source = File::open(from).map_err(io(what()))?;
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)
        .map_err(io(what()))?;
    std::io::copy(&mut source, &mut target).map_err(io(what()))?;
    // The mode asked for at creation is masked by the umask.
    target
        .set_permissions(std::fs::Permissions::from_mode(0o755))
        .map_err(io(what()))
}

/// Jobs are launched from `dir`: a filesystem mounted `noexec` there would
/// fail every one of them, so the start fails instead, naming it.
fn refuse_noexec(dir: &Path) -> Result<(), ServiceError> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let fs = statvfs(dir).map_err(|e| ServiceError::Io {
        what: format!("reading the filesystem of {}", dir.display()),
        source: e.into(),
    })?;
    if fs.flags().contains(FsFlags::ST_NOEXEC) {
        return Err(invalid(format!(
            "{} is on a filesystem mounted noexec; jobs are launched from it (state_dir)",
            dir.display()
        )));
    }
    Ok(())
}

fn invalid(what: String) -> ServiceError {
    ServiceError::Io {
        what,
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(p: &Path) -> (u64, u64) {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let installed = dir.path().join("build").join("gatehouse");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(&installed, b"version 1").unwrap();
        std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, installed, bin)
    }

    fn replace(installed: &Path, bytes: &[u8], mode: u32) {
        let next = installed.with_extension("new");
        std::fs::write(&next, bytes).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(mode)).unwrap();
        std::fs::rename(&next, installed).unwrap();
    }

    #[test]
    fn the_binary_follows_the_installed_one_and_leaves_nothing_half_made() {
        let (dir, installed, bin) = setup();
        let at = install(&installed, &bin).unwrap();
        assert_eq!(at, bin.join("gatehouse"));
        assert_eq!(std::fs::read(&at).unwrap(), b"version 1");
        // The supervisor's own file, 0755: a link.
        assert_eq!(inode(&at), inode(&installed));
        // Again, unchanged: nothing to do.
        assert_eq!(install(&installed, &bin).unwrap(), at);
        // An upgrade replaces the installed file: the next start takes it.
        replace(&installed, b"version 2", 0o755);
        install(&installed, &bin).unwrap();
        assert_eq!(std::fs::read(&at).unwrap(), b"version 2");
        // Named through a symlink: the file itself, never the symlink.
        let alias = dir.path().join("alias");
        std::os::unix::fs::symlink(&installed, &alias).unwrap();
        replace(&installed, b"version 3", 0o755);
        install(&alias, &bin).unwrap();
        assert!(!std::fs::symlink_metadata(&at).unwrap().is_symlink());
        assert_eq!(std::fs::read(&at).unwrap(), b"version 3");
        let left: Vec<_> = std::fs::read_dir(&bin)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("gatehouse")]);
        let mode = std::fs::metadata(&bin).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // A missing binary is an error naming it.
        let e = install(&dir.path().join("nowhere"), &bin).unwrap_err();
        assert!(e.to_string().contains("nowhere"), "{e}");
    }

    #[test]
    fn a_file_others_may_write_or_not_run_is_copied_not_linked() {
        for mode in [0o775, 0o757, 0o700] {
            let (_dir, installed, bin) = setup();
            std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(mode)).unwrap();
            let at = install(&installed, &bin).unwrap();
            assert_ne!(inode(&at), inode(&installed), "{mode:o}");
            assert_eq!(std::fs::read(&at).unwrap(), b"version 1");
            assert_eq!(std::fs::metadata(&at).unwrap().mode() & 0o777, 0o755);
            // Writing the installed file in place does not reach the copy.
            std::fs::write(&installed, b"rewritten").unwrap();
            assert_eq!(std::fs::read(&at).unwrap(), b"version 1", "{mode:o}");
        }
    }

    #[test]
    fn a_planted_name_in_the_directory_is_replaced_not_followed() {
        let (dir, installed, bin) = setup();
        std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o775)).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, bin.join(".gatehouse.partial")).unwrap();
        std::os::unix::fs::symlink(&victim, bin.join("gatehouse")).unwrap();
        let at = install(&installed, &bin).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&at).unwrap().is_symlink());
        assert_eq!(std::fs::read(&at).unwrap(), b"version 1");
        // The directory itself must be a real one.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = dir.path().join("bin-link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert!(install(&installed, &link).is_err());
    }
}
