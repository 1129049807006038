//! One host uid per live sandbox started by root.
//!
//! Per-user budgets of the kernel (processes, inotify, message queues,
//! keys) are counted by host uid: workers sharing one uid share them, and
//! one ticket's worker could use up another's. Each sandbox therefore
//! leases its own uid (and the gid of the same number) from a range, like
//! systemd's DynamicUser: the lease is an exclusive `flock` on a file named
//! after the uid in a directory only its owner (root) can write, held by
//! `sandbox run` (and its init, which inherits the descriptor) for as long
//! as the sandbox lives. The kernel drops the lock when both are gone,
//! however they end, so a uid is never handed out while a sandbox of it
//! runs, and never leaks.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the leases are kept.
pub const LEASE_DIR: &str = "/run/gatehouse/worker-uids";

/// The default range: 65 536 ids at 0x70000000, above the ranges
/// systemd-nspawn picks container ids from (up to 0x6FFF0000) and below
/// systemd's foreign-id range (0x7FFE0000); no account lives there on an
/// ordinary host, and each candidate is checked against the user database.
pub const DEFAULT_RANGE: &str = "1879048192-1879113727";

/// An inclusive range of host uids for workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

/// Why a uid could not be leased.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("worker uid range `{0}`: expected FIRST-LAST with 0 < FIRST <= LAST < 4294967294, not containing 65534 (nobody)")]
    BadRange(String),
    #[error("the worker uid lease directory {}: {why}", dir.display())]
    Dir { dir: PathBuf, why: String },
    #[error("all {count} worker uids of {first}-{last} are in use by live sandboxes or taken by accounts")]
    Exhausted { first: u32, last: u32, count: u64 },
    #[error("leasing worker uid {uid}: {source}")]
    Io { uid: u32, source: io::Error },
}

impl std::str::FromStr for UidRange {
    type Err = LeaseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || LeaseError::BadRange(s.to_string());
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let first: u32 = a.parse().map_err(|_| bad())?;
        let last: u32 = b.parse().map_err(|_| bad())?;
        // 65534 is nobody (the overflow id); u32::MAX and u32::MAX - 1 are
        // the kernel's invalid and "no change" ids.
        if first == 0 || first > last || last >= u32::MAX - 1 || (first..=last).contains(&65534) {
            return Err(bad());
        }
        Ok(UidRange { first, last })
    }
}

/// A leased uid: the sandbox's until this (and every copy of its
/// descriptor) is gone.
#[derive(Debug)]
pub struct Lease {
    pub uid: u32,
    _lock: nix::fcntl::Flock<File>,
}

/// The lease directory, made private if missing; refused unless it is a
/// directory of this process's user that no one else can write (whoever
/// can could hold or fake every lease).
fn lease_dir(dir: &Path) -> Result<(), LeaseError> {
    let refuse = |why: String| LeaseError::Dir {
        dir: dir.to_path_buf(),
        why,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| refuse(e.to_string()))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| refuse(e.to_string()))?;
    let owner = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != owner || meta.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "must be a directory owned by uid {owner} and writable by no one else"
        )));
    }
    Ok(())
}

/// Leases the first free uid of `range` that `taken` (the user database)
/// does not claim, with its lock file in `dir`.
pub fn lease_in(
    range: UidRange,
    dir: &Path,
    taken: impl Fn(u32) -> bool,
) -> Result<Lease, LeaseError> {
    lease_dir(dir)?;
    for uid in range.first..=range.last {
        if taken(uid) {
            continue;
        }
        let io_err = |source| LeaseError::Io { uid, source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(uid.to_string()))
            .map_err(io_err)?;
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(Lease { uid, _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => continue,
            Err((_, e)) => return Err(io_err(e.into())),
        }
    }
    Err(LeaseError::Exhausted {
        first: range.first,
        last: range.last,
        count: u64::from(range.last - range.first) + 1,
    })
}

/// Leases from `range` in [`LEASE_DIR`], skipping ids of local accounts
/// and groups (the worker's gid is its uid; see [`crate::accounts`]).
pub fn lease(range: UidRange) -> Result<Lease, LeaseError> {
    let taken = crate::accounts::all_ids().map_err(|source| LeaseError::Io {
        uid: range.first,
        source,
    })?;
    lease_in(range, Path::new(LEASE_DIR), |uid| taken.contains(&uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_table() {
        let ok = [
            ("1-1", (1, 1)),
            ("100000-100009", (100000, 100009)),
            (DEFAULT_RANGE, (1879048192, 1879113727)),
        ];
        for (text, (first, last)) in ok {
            assert_eq!(
                text.parse::<UidRange>().unwrap(),
                UidRange { first, last },
                "{text}"
            );
        }
        for text in [
            "",
            "5",
            "0-10",
            "10-5",
            "a-b",
            "-1-5",
            " 1-5",
            "65000-66000",
            "4294967290-4294967294",
            "4294967295-4294967295",
        ] {
            assert!(text.parse::<UidRange>().is_err(), "{text}");
        }
    }

    #[test]
    fn live_leases_never_share_a_uid_and_a_dropped_one_is_free_again() {
        let dir = tempfile::tempdir().unwrap();
        let leases = dir.path().join("leases");
        let range = UidRange {
            first: 500_000,
            last: 500_002,
        };
        // 500 001 belongs to an account: never leased.
        let taken = |uid| uid == 500_001;
        let a = lease_in(range, &leases, taken).unwrap();
        let b = lease_in(range, &leases, taken).unwrap();
        assert_eq!((a.uid, b.uid), (500_000, 500_002));
        let e = lease_in(range, &leases, taken).unwrap_err();
        assert!(matches!(e, LeaseError::Exhausted { count: 3, .. }), "{e}");
        drop(a);
        assert_eq!(lease_in(range, &leases, taken).unwrap().uid, 500_000);
        drop(b);
    }

    #[test]
    fn a_lease_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let range = UidRange { first: 7, last: 7 };
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = lease_in(range, dir.path(), |_| false).unwrap_err();
        assert!(matches!(e, LeaseError::Dir { .. }), "{e}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(lease_in(range, dir.path(), |_| false).unwrap().uid, 7);
    }
}
