//! The bench's scratch directory. The bench runs as root, in the shared
//! temporary directory: a name another user can guess is a name they can
//! plant a symlink at (then `chmod 0777` through it opens any directory).
//! So the directory is made by `mkdtemp(3)` (a fresh random name, created
//! 0700 by us, failing rather than reusing anything there), everything else
//! is made inside it, and modes are changed through descriptors of
//! directories checked to be ours, never through paths.

use std::fs::{DirBuilder, File, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A private scratch directory holding the work dir; removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Makes `gatehouse-bench-XXXXXX` under `parent`, with a `work` dir in
    /// it that the worker's host user may write (it is not the caller
    /// when the bench runs as root).
    pub fn create(parent: &Path) -> io::Result<Scratch> {
        let template = parent.join("gatehouse-bench-XXXXXX");
        let path = nix::unistd::mkdtemp(&template).map_err(io::Error::from)?;
        let scratch = Scratch { path };
        DirBuilder::new().mode(0o700).create(scratch.work())?;
        set_mode(&scratch.work(), 0o777)?;
        set_mode(&scratch.path, 0o755)?;
        Ok(scratch)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn work(&self) -> PathBuf {
        self.path.join("work")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Unlinks symlinks inside, never what they point at.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `fchmod` of the directory at `dir`, opened without following a
/// symlink and checked to be a directory we own.
fn set_mode(dir: &Path, mode: u32) -> io::Result<()> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)?;
    let meta = file.metadata()?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::other(format!(
            "{} is not a directory of ours",
            dir.display()
        )));
    }
    file.set_permissions(Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests;
