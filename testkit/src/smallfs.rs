//! A small, real filesystem to fill: a tmpfs of a few pages mounted on a
//! temporary directory (root only; tests say so with `require!(Need::Root)`),
//! unmounted when dropped. For the audit log's behaviour on a full disk.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs.
pub struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a tmpfs of `kib` KiB (mode 0700).
    pub fn mount(kib: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs failed: {status}");
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem with a file until a write fails; returns it
    /// (remove it to free the space).
    pub fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let page = [0u8; 4096];
        while file.write_all(&page).is_ok() {}
        // The last page may have taken part of a write; the disk is full.
        let _ = file.write_all(&[0u8]);
        filler
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // Lazily: a proxy's threads may still be closing files on it.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
