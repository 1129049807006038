//! The bench's work dir of its own (`limits.work_dir_size`), as root: what
//! making, reusing and removing the per-ticket filesystem costs, once each,
//! and a work dir that is one for the `gatehouse-work-dir-fs` contender.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::{setup, BenchError};
use crate::workdir_fs;

/// The size of the bench's filesystem, and the profile limiting to it.
const SIZE: u64 = 64 << 20;
const PROFILE: &str =
    "extends = \"default\"\n[limits]\nwork_dir_size = \"64M\"\n[require]\nwork_dir_size = true\n";

/// Milliseconds of each step, measured once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FsCost {
    /// Sparse image, `mkfs.ext4`, rename, `mount -o loop` (a ticket's
    /// first job).
    pub make_ms: f64,
    /// Finding it mounted (every later job).
    pub reuse_ms: f64,
    /// Unmount (the loop device detaches itself) and delete the image.
    pub remove_ms: f64,
}

/// A work dir that is a filesystem of its own, and the profile that
/// requires it; removed when dropped.
pub struct FsWorkDir {
    pub work: PathBuf,
    pub profile: PathBuf,
    image: PathBuf,
}

impl Drop for FsWorkDir {
    fn drop(&mut self) {
        let _ = workdir_fs::remove(&self.work, &self.image);
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn fs_error(e: workdir_fs::FsError) -> BenchError {
    BenchError::Run {
        what: "the work dir's own filesystem".to_string(),
        detail: e.to_string(),
    }
}

/// Makes, reuses and removes one filesystem under `scratch` (timed), then
/// makes the one the contender runs in. `None` when this host cannot
/// (not root, or a tool missing: `gatehouse doctor` says which).
pub fn prepare(scratch: &Path) -> Result<Option<(FsWorkDir, FsCost)>, BenchError> {
    if workdir_fs::Facts::probe().missing().is_some() {
        return Ok(None);
    }
    let timed = scratch.join("timed");
    std::fs::create_dir(&timed).map_err(setup(format!("creating {}", timed.display())))?;
    let image = workdir_fs::image_for(&timed);
    let t = Instant::now();
    workdir_fs::ensure(&timed, &image, SIZE).map_err(fs_error)?;
    let make_ms = ms(t);
    let t = Instant::now();
    workdir_fs::ensure(&timed, &image, SIZE).map_err(fs_error)?;
    let reuse_ms = ms(t);
    let t = Instant::now();
    workdir_fs::remove(&timed, &image).map_err(fs_error)?;
    let remove_ms = ms(t);

    let work = scratch.join("work-fs");
    std::fs::create_dir(&work).map_err(setup(format!("creating {}", work.display())))?;
    let profile = scratch.join("default-work-dir-size.toml");
    std::fs::write(&profile, PROFILE).map_err(setup(format!("writing {}", profile.display())))?;
    let dir = FsWorkDir {
        image: workdir_fs::image_for(&work),
        work,
        profile,
    };
    workdir_fs::ensure(&dir.work, &dir.image, SIZE).map_err(fs_error)?;
    Ok(Some((
        dir,
        FsCost {
            make_ms,
            reuse_ms,
            remove_ms,
        },
    )))
}
