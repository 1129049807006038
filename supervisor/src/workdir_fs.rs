//! A work dir with a size the kernel enforces: a filesystem of its own.
//!
//! Started by root, the supervisor gives each ticket's work dir an ext4
//! filesystem in a sparse image file next to it (`work.img`), attached to a
//! loop device by `mount -o loop` (which sets the device's autoclear flag:
//! unmounting detaches it) and mounted `nodev,nosuid` on the work dir. It is
//! made once per ticket and reused by every job of it; the image is the
//! ticket's data and survives restarts (mounted again when found unmounted).
//! A worker that fills it gets `ENOSPC`; the host filesystem holds at most
//! the image's size.
//!
//! `sandbox run` makes nothing: it checks ([`judge`]) that the work dir it is
//! given is the root of a filesystem no larger than the profile's
//! `limits.work_dir_size`, and refuses to start when the profile requires
//! the limit and it is not so.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// The image of a work dir, next to it (`tickets/<tkt>/work.img`).
pub fn image_for(work_dir: &Path) -> PathBuf {
    work_dir.with_extension("img")
}

/// An image being made: renamed to the image once `mkfs` is done, so a
/// crash in between leaves only this, which the next attempt removes.
fn partial_for(image: &Path) -> PathBuf {
    image.with_extension("img.partial")
}

/// The filesystem holding a work dir, as measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// The work dir is the root of a mount (its device differs from its
    /// parent's).
    pub mount_root: bool,
    /// Total bytes of that filesystem's data blocks.
    pub bytes: u64,
}

/// Whether a run's work dir size limit holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SizeStatus {
    /// The profile sets no limit.
    Unlimited,
    /// The work dir is a filesystem of its own within the limit.
    Enforced { bytes: u64 },
    /// It is not; `why` says what it is instead.
    NotEnforced { why: String },
}

/// Judges a work dir's filesystem against the profile's limit: only a
/// filesystem of its own, no larger than the limit, bounds what the worker
/// can write (a small filesystem the work dir merely lies in might be the
/// host's root, shared with everything).
pub fn judge(limit: Option<u64>, measured: Measured) -> SizeStatus {
    let Some(limit) = limit else {
        return SizeStatus::Unlimited;
    };
    if !measured.mount_root {
        return SizeStatus::NotEnforced {
            why: "the work dir is not a filesystem of its own".to_string(),
        };
    }
    if measured.bytes > limit {
        return SizeStatus::NotEnforced {
            why: format!(
                "the work dir's filesystem holds {} bytes, more than limits.work_dir_size ({limit} bytes)",
                measured.bytes
            ),
        };
    }
    SizeStatus::Enforced {
        bytes: measured.bytes,
    }
}

/// Measures the filesystem holding `dir`.
pub fn measure(dir: &Path) -> std::io::Result<Measured> {
    let own = std::fs::metadata(dir)?.dev();
    let parent = std::fs::metadata(dir.join(".."))?.dev();
    let vfs = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok(Measured {
        mount_root: own != parent,
        bytes: (vfs.blocks() as u64).saturating_mul(vfs.fragment_size() as u64),
    })
}

/// Where the programs this needs are looked for (a service's `PATH` may
/// lack the sbin directories).
const TOOL_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

fn tool(name: &str) -> Option<PathBuf> {
    TOOL_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// What this host offers for per-ticket filesystems, for `gatehouse doctor`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Facts {
    pub is_root: bool,
    pub loop_control: bool,
    pub ext4: bool,
    pub mkfs_ext4: bool,
    pub mount: bool,
}

impl Facts {
    pub fn probe() -> Facts {
        Facts {
            is_root: nix::unistd::geteuid().is_root(),
            loop_control: Path::new("/dev/loop-control").exists(),
            ext4: std::fs::read_to_string("/proc/filesystems").is_ok_and(|t| {
                t.lines()
                    .any(|l| l.split_whitespace().last() == Some("ext4"))
            }),
            mkfs_ext4: tool("mkfs.ext4").is_some(),
            mount: tool("mount").is_some(),
        }
    }

    /// What is missing for [`ensure`] to work, or `None`.
    pub fn missing(&self) -> Option<&'static str> {
        [
            (self.is_root, "root (mounting a filesystem needs it)"),
            (self.loop_control, "loop devices (/dev/loop-control)"),
            (self.ext4, "ext4 in /proc/filesystems"),
            (self.mkfs_ext4, "mkfs.ext4 (e2fsprogs)"),
            (self.mount, "mount (util-linux)"),
        ]
        .into_iter()
        .find_map(|(ok, what)| (!ok).then_some(what))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} failed ({status}): {stderr}")]
    Tool {
        what: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{0}")]
    Refused(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FsError {
    let what = what.into();
    move |source| FsError::Io { what, source }
}

/// Runs `name` (found in [`TOOL_DIRS`]) with `args`, then `paths`.
fn run_tool(name: &str, args: &[&str], paths: &[&Path]) -> Result<(), FsError> {
    let path = tool(name)
        .ok_or_else(|| FsError::Refused(format!("{name} not found in {}", TOOL_DIRS.join(", "))))?;
    let out = Command::new(&path)
        .args(args)
        .args(paths)
        .env_clear()
        .env("PATH", TOOL_DIRS.join(":"))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(io(format!("running {}", path.display())))?;
    if out.status.success() {
        return Ok(());
    }
    Err(FsError::Tool {
        what: name.to_string(),
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Makes `dir` the root of an ext4 filesystem of `bytes` in `image`,
/// unless it already is one: reuses a mounted one, mounts an existing image,
/// or makes the image (sparse, then `mkfs.ext4`). Returns whether a new
/// filesystem was made. `dir` must exist; a non-empty `dir` without an image
/// is refused (mounting would hide its files).
pub fn ensure(dir: &Path, image: &Path, bytes: u64) -> Result<bool, FsError> {
    if measure(dir)
        .map_err(io(format!("measuring {}", dir.display())))?
        .mount_root
    {
        return Ok(false);
    }
    let made = !image.exists();
    if made {
        let holds_files = std::fs::read_dir(dir)
            .map_err(io(format!("reading {}", dir.display())))?
            .next()
            .is_some();
        if holds_files {
            return Err(FsError::Refused(format!(
                "{} holds files but has no filesystem of its own ({} is missing); mounting one would hide them",
                dir.display(),
                image.display()
            )));
        }
        make_image(image, bytes)?;
    }
    run_tool(
        "mount",
        &["-t", "ext4", "-o", "loop,nodev,nosuid,noatime"],
        &[image, dir],
    )?;
    if made {
        // mkfs's lost+found, root's and private, would show in the work dir
        // as an unreadable directory; e2fsck makes it again if it needs one.
        let _ = std::fs::remove_dir(dir.join("lost+found"));
    }
    Ok(made)
}

/// A sparse file of `bytes` (mode 0600) made an ext4 filesystem with no
/// blocks reserved for root, under a temporary name renamed when complete.
fn make_image(image: &Path, bytes: u64) -> Result<(), FsError> {
    let partial = partial_for(image);
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io(format!("removing {}", partial.display()))(e))
        }
        _ => {}
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(io(format!("creating {}", partial.display())))?;
    file.set_len(bytes)
        .map_err(io(format!("sizing {}", partial.display())))?;
    drop(file);
    run_tool(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-m",
            "0",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
        ],
        &[&partial],
    )
    .inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })?;
    std::fs::rename(&partial, image).map_err(io(format!("renaming {}", partial.display())))
}

/// Removes a work dir's filesystem: unmounts it (the loop device detaches
/// itself) and deletes the image. What is already gone is not an error.
pub fn remove(dir: &Path, image: &Path) -> Result<(), FsError> {
    let mounted = measure(dir).is_ok_and(|m| m.mount_root);
    if mounted {
        nix::mount::umount2(dir, nix::mount::MntFlags::empty())
            .map_err(|e| io(format!("unmounting {}", dir.display()))(e.into()))?;
    }
    for file in [image.to_path_buf(), partial_for(image)] {
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io(format!("removing {}", file.display()))(e))
            }
            _ => {}
        }
    }
    Ok(())
}

/// After a crash: removes images left half-made in the tickets' directories
/// (`<tickets>/<ticket>/work.img.partial`). Returns how many.
pub fn sweep(tickets: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(tickets) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| partial_for(&image_for(&e.path().join("work"))))
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_holds_only_for_a_filesystem_of_its_own_within_it() {
        let own = |bytes| Measured {
            mount_root: true,
            bytes,
        };
        let cases = [
            (None, own(1 << 40), SizeStatus::Unlimited),
            (
                None,
                Measured {
                    mount_root: false,
                    bytes: 1 << 40,
                },
                SizeStatus::Unlimited,
            ),
            (
                Some(32 << 20),
                own(26 << 20),
                SizeStatus::Enforced { bytes: 26 << 20 },
            ),
            (
                Some(32 << 20),
                own(32 << 20),
                SizeStatus::Enforced { bytes: 32 << 20 },
            ),
        ];
        for (limit, measured, expected) in cases {
            assert_eq!(judge(limit, measured), expected, "{limit:?} {measured:?}");
        }
        // Too big, or the host's filesystem however small.
        let too_big = judge(Some(32 << 20), own((32 << 20) + 1));
        assert!(
            matches!(&too_big, SizeStatus::NotEnforced { why } if why.contains("33554433 bytes")),
            "{too_big:?}"
        );
        let shared = judge(
            Some(32 << 20),
            Measured {
                mount_root: false,
                bytes: 1 << 20,
            },
        );
        assert!(
            matches!(&shared, SizeStatus::NotEnforced { why } if why.contains("not a filesystem of its own")),
            "{shared:?}"
        );
    }

    #[test]
    fn images_sit_next_to_the_work_dir() {
        let image = image_for(Path::new("/s/tickets/tkt_1/work"));
        assert_eq!(image, Path::new("/s/tickets/tkt_1/work.img"));
        assert_eq!(
            partial_for(&image),
            Path::new("/s/tickets/tkt_1/work.img.partial")
        );
    }

    #[test]
    fn the_first_missing_tool_is_named() {
        let all = Facts {
            is_root: true,
            loop_control: true,
            ext4: true,
            mkfs_ext4: true,
            mount: true,
        };
        assert_eq!(all.missing(), None);
        type Edit = fn(&mut Facts);
        let cases: [(Edit, &str); 5] = [
            (|f| f.is_root = false, "root"),
            (|f| f.loop_control = false, "loop devices"),
            (|f| f.ext4 = false, "ext4"),
            (|f| f.mkfs_ext4 = false, "mkfs.ext4"),
            (|f| f.mount = false, "mount"),
        ];
        for (edit, named) in cases {
            let mut f = all.clone();
            edit(&mut f);
            assert!(f.missing().is_some_and(|m| m.starts_with(named)), "{f:?}");
        }
    }

    #[test]
    fn a_plain_directory_measures_as_not_its_own_filesystem() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("w");
        std::fs::create_dir(&sub).unwrap();
        let m = measure(&sub).unwrap();
        assert!(!m.mount_root);
        assert!(m.bytes > 0);
    }
}
