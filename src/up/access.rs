//! Who may read a file: pure functions over its owner, group and mode and
//! the user asking (its primary group only: the parts run with their
//! supplementary groups dropped), and the walk down its path.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A process's credentials, as `up` starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who {
    pub uid: u32,
    pub gid: u32,
}

/// What of a file or directory decides access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub is_file: bool,
}

impl Meta {
    pub fn of(m: &std::fs::Metadata) -> Meta {
        Meta {
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o7777,
            is_file: m.is_file(),
        }
    }
}

/// Whether `who` has permission `bit` (4 read, 2 write, 1 search) on it.
pub fn may(meta: Meta, who: Who, bit: u32) -> bool {
    if who.uid == 0 {
        // Root reads and searches anything (CAP_DAC_OVERRIDE).
        return true;
    }
    let shift = if meta.uid == who.uid {
        6
    } else if meta.gid == who.gid {
        3
    } else {
        0
    };
    meta.mode & (bit << shift) != 0
}

/// Whether `who` can open the file for reading: search on every directory
/// above it (`dirs`, from the root down) and read on the file.
pub fn may_read_path(dirs: &[Meta], file: Meta, who: Who) -> bool {
    dirs.iter().all(|d| may(*d, who, 1)) && may(file, who, 4)
}

/// Why a credential file at rest is wrong, if it is: it must be a regular
/// file, readable by no one else (not every user, no group but the
/// proxy's), not by the router, and by the proxy.
pub fn credential_problem(
    dirs: &[Meta],
    file: Meta,
    proxy: Who,
    router: Option<Who>,
) -> Option<String> {
    if !file.is_file {
        return Some("is not a regular file".into());
    }
    if file.mode & 0o004 != 0 {
        return Some(format!(
            "is readable by every user (mode {:04o}): chmod o-rwx it",
            file.mode
        ));
    }
    if file.mode & 0o040 != 0 && file.gid != proxy.gid {
        return Some(format!(
            "is readable by group {} (mode {:04o}), which is not the proxy's: chmod g-rwx it",
            file.gid, file.mode
        ));
    }
    if let Some(router) = router {
        if may_read_path(dirs, file, router) {
            return Some("is readable by the router's user: only the proxy's may read it".into());
        }
    }
    if !may_read_path(dirs, file, proxy) {
        return Some(format!(
            "the proxy's user (uid {}) cannot read it: chown it to that user (mode 0400 or 0600) \
             and let it search the directories above",
            proxy.uid
        ));
    }
    None
}

/// Why a verification secret (webhook secret, Feishu keys: read by the
/// router, which verifies deliveries) is wrong, if it is.
pub fn verification_secret_problem(dirs: &[Meta], file: Meta, router: Who) -> Option<String> {
    if !file.is_file {
        return Some("is not a regular file".into());
    }
    if file.mode & 0o004 != 0 {
        return Some(format!(
            "is readable by every user (mode {:04o}): chmod o-rwx it",
            file.mode
        ));
    }
    if !may_read_path(dirs, file, router) {
        return Some(format!(
            "the router's user (uid {}) cannot read it: it verifies deliveries with it",
            router.uid
        ));
    }
    None
}

/// The metadata of every directory above `path` (root first) and of the
/// path itself.
pub fn walk(path: &Path) -> std::io::Result<(Vec<Meta>, Meta)> {
    let file = Meta::of(&std::fs::metadata(path)?);
    let mut dirs = Vec::new();
    let mut at = path.parent().map(PathBuf::from);
    while let Some(dir) = at {
        if dir.as_os_str().is_empty() {
            break;
        }
        dirs.push(Meta::of(&std::fs::metadata(&dir)?));
        at = dir.parent().map(PathBuf::from);
    }
    dirs.reverse();
    Ok((dirs, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROXY: Who = Who { uid: 900, gid: 900 };
    const ROUTER: Who = Who { uid: 901, gid: 901 };
    const ROOT: Who = Who { uid: 0, gid: 0 };

    fn file(uid: u32, gid: u32, mode: u32) -> Meta {
        Meta {
            uid,
            gid,
            mode,
            is_file: true,
        }
    }
    fn dir(uid: u32, gid: u32, mode: u32) -> Meta {
        Meta {
            uid,
            gid,
            mode,
            is_file: false,
        }
    }

    #[test]
    fn permission_bits() {
        for (meta, who, bit, want) in [
            (file(900, 900, 0o400), PROXY, 4, true),
            (file(900, 900, 0o040), PROXY, 4, false), // owner bits win over group bits
            (file(0, 900, 0o640), PROXY, 4, true),
            (file(0, 0, 0o640), PROXY, 4, false),
            (file(0, 0, 0o644), ROUTER, 4, true),
            (file(0, 0, 0o000), ROOT, 4, true),
            (dir(0, 901, 0o750), ROUTER, 1, true),
            (dir(0, 901, 0o750), PROXY, 1, false),
            (dir(0, 0, 0o711), PROXY, 1, true),
        ] {
            assert_eq!(may(meta, who, bit), want, "{meta:?} {who:?} {bit}");
        }
    }

    #[test]
    fn credential_files() {
        let open_dirs = [dir(0, 0, 0o755)];
        let closed_to_router = [dir(0, 900, 0o750)];
        let cases: [(&[Meta], Meta, Option<&str>); 9] = [
            (&open_dirs, file(900, 900, 0o400), None),
            (&open_dirs, file(900, 900, 0o600), None),
            (&open_dirs, file(0, 900, 0o640), None),
            (&open_dirs, file(900, 900, 0o604), Some("every user")),
            (&open_dirs, file(900, 0, 0o640), Some("group 0")),
            (&open_dirs, file(901, 901, 0o600), Some("router")),
            (&open_dirs, file(0, 0, 0o600), Some("cannot read")),
            (&closed_to_router, file(0, 900, 0o640), None),
            (&open_dirs, dir(900, 900, 0o700), Some("regular file")),
        ];
        for (dirs, f, want) in cases {
            let got = credential_problem(dirs, f, PROXY, Some(ROUTER));
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(g)) if g.contains(w) => {}
                _ => panic!("{f:?} in {dirs:?}: want {want:?}, got {got:?}"),
            }
        }
        // A file others cannot read only because of the directory above is
        // still refused for its own mode: it may be moved or linked.
        assert!(credential_problem(
            &[dir(900, 900, 0o700)],
            file(900, 900, 0o644),
            PROXY,
            Some(ROUTER)
        )
        .is_some());
        // Rootless (no router user): the invoking user owns and reads it.
        assert_eq!(
            credential_problem(
                &open_dirs,
                file(1000, 1000, 0o600),
                Who {
                    uid: 1000,
                    gid: 1000
                },
                None
            ),
            None
        );
    }

    #[test]
    fn verification_secrets() {
        let dirs = [dir(0, 0, 0o755)];
        assert_eq!(
            verification_secret_problem(&dirs, file(0, 901, 0o640), ROUTER),
            None
        );
        assert!(
            verification_secret_problem(&dirs, file(0, 0, 0o600), ROUTER)
                .unwrap()
                .contains("cannot read")
        );
        assert!(
            verification_secret_problem(&dirs, file(0, 901, 0o644), ROUTER)
                .unwrap()
                .contains("every user")
        );
        assert!(
            verification_secret_problem(&[dir(0, 0, 0o700)], file(0, 901, 0o640), ROUTER).is_some()
        );
    }
}
