//! The system calls the init's steps make (mounts, credentials, Landlock),
//! behind one trait, as youki does: the real kernel is `sys::host::Host`;
//! tests run the same steps against [`Recording`](tests::Recording), which
//! writes each call down (and fails the one it is told to), without root.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::mount::MsFlags;

use crate::plan::{FsAccess, MountAttrs};

pub(crate) trait Kernel {
    /// A Landlock ruleset being filled.
    type Ruleset;

    fn mount(
        &mut self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()>;
    /// Sets `attrs` on the mount at `path` and every mount below it.
    fn set_mount_attrs(&mut self, path: &Path, attrs: MountAttrs) -> io::Result<()>;
    /// Sets one of this user namespace's own budgets (`/proc/sys/user/<name>`).
    fn set_user_namespace_limit(&mut self, name: &str, value: u64) -> io::Result<()>;
    /// Attaches a detached mount (the idmapped work dir) at `path`.
    fn attach_tree(&mut self, tree: &OwnedFd, path: &Path) -> io::Result<()>;
    fn unmount_detach(&mut self, path: &Path) -> io::Result<()>;
    fn pivot_root(&mut self, new_root: &Path, put_old: &Path) -> io::Result<()>;
    fn chdir(&mut self, path: &Path) -> io::Result<()>;
    /// `mkdir -p` with mode 0755.
    fn create_dir_all(&mut self, path: &Path) -> io::Result<()>;
    /// Creates an empty file if there is none (to bind a file over).
    fn create_file(&mut self, path: &Path) -> io::Result<()>;
    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()>;
    fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()>;
    fn exists(&mut self, path: &Path) -> bool;

    /// setgroups([]).
    fn clear_groups(&mut self) -> io::Result<()>;
    /// setresgid(0, 0, 0) then setresuid(0, 0, 0).
    fn become_root(&mut self) -> io::Result<()>;
    /// Every capability set empty: bounding, ambient, inheritable,
    /// effective, permitted.
    fn clear_capabilities(&mut self) -> io::Result<()>;
    fn set_no_new_privs(&mut self) -> io::Result<()>;

    /// A ruleset handling every filesystem and TCP right and scope this
    /// code knows.
    fn landlock_ruleset(&mut self) -> io::Result<Self::Ruleset>;
    /// Grants `access` beneath `path`; `Ok(false)` when there is no such
    /// path here (nothing to grant).
    fn landlock_allow_path(
        &mut self,
        ruleset: &mut Self::Ruleset,
        path: &Path,
        access: FsAccess,
    ) -> io::Result<bool>;
    fn landlock_allow_connect(&mut self, ruleset: &mut Self::Ruleset, port: u16) -> io::Result<()>;
}

/// `MsFlags` for a fresh filesystem mounted with `attrs`.
pub(crate) fn ms_flags(attrs: MountAttrs) -> MsFlags {
    let mut f = MsFlags::empty();
    for (on, flag) in [
        (attrs.read_only, MsFlags::MS_RDONLY),
        (attrs.nosuid, MsFlags::MS_NOSUID),
        (attrs.nodev, MsFlags::MS_NODEV),
        (attrs.noexec, MsFlags::MS_NOEXEC),
    ] {
        if on {
            f |= flag;
        }
    }
    f
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;
    use std::path::PathBuf;

    use super::*;

    /// A [`Kernel`] that records every call as one line of text and fails
    /// the first call whose line starts with `fail_on`.
    #[derive(Debug, Default)]
    pub(crate) struct Recording {
        pub calls: Vec<String>,
        pub fail_on: Option<String>,
        /// Paths [`Kernel::exists`] and the Landlock grants report absent.
        pub absent: BTreeSet<PathBuf>,
    }

    impl Recording {
        pub fn failing_on(prefix: &str) -> Recording {
            Recording {
                fail_on: Some(prefix.to_string()),
                ..Recording::default()
            }
        }

        fn call(&mut self, line: String) -> io::Result<()> {
            let fails = self.fail_on.as_deref().is_some_and(|p| line.starts_with(p));
            self.calls.push(line);
            if fails {
                Err(io::Error::from_raw_os_error(libc::EPERM))
            } else {
                Ok(())
            }
        }

        /// The recorded calls starting with `prefix`.
        pub fn calls_starting(&self, prefix: &str) -> Vec<&str> {
            self.calls
                .iter()
                .filter(|c| c.starts_with(prefix))
                .map(String::as_str)
                .collect()
        }
    }

    fn attrs_text(a: MountAttrs) -> String {
        let names = [
            (a.read_only, "ro"),
            (a.nosuid, "nosuid"),
            (a.nodev, "nodev"),
            (a.noexec, "noexec"),
        ];
        let on: Vec<&str> = names.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        on.join(",")
    }

    impl Kernel for Recording {
        type Ruleset = ();

        fn mount(
            &mut self,
            source: Option<&Path>,
            target: &Path,
            fstype: Option<&str>,
            flags: MsFlags,
            data: Option<&str>,
        ) -> io::Result<()> {
            let src = source.map_or("-".to_string(), |s| s.display().to_string());
            let flags = format!("{flags:?}");
            let flags = flags.trim_start_matches("MsFlags(").trim_end_matches(')');
            self.call(format!(
                "mount {src} {} {} {flags} {}",
                target.display(),
                fstype.unwrap_or("-"),
                data.unwrap_or("-")
            ))
        }
        fn set_mount_attrs(&mut self, path: &Path, attrs: MountAttrs) -> io::Result<()> {
            self.call(format!("setattr {} {}", path.display(), attrs_text(attrs)))
        }
        fn set_user_namespace_limit(&mut self, name: &str, value: u64) -> io::Result<()> {
            if self.absent.contains(Path::new(name)) {
                return Err(io::ErrorKind::NotFound.into());
            }
            self.call(format!("userns {name}={value}"))
        }
        fn attach_tree(&mut self, _: &OwnedFd, path: &Path) -> io::Result<()> {
            self.call(format!("attach {}", path.display()))
        }
        fn unmount_detach(&mut self, path: &Path) -> io::Result<()> {
            self.call(format!("umount {}", path.display()))
        }
        fn pivot_root(&mut self, new_root: &Path, put_old: &Path) -> io::Result<()> {
            self.call(format!(
                "pivot_root {} {}",
                new_root.display(),
                put_old.display()
            ))
        }
        fn chdir(&mut self, path: &Path) -> io::Result<()> {
            self.call(format!("chdir {}", path.display()))
        }
        fn create_dir_all(&mut self, path: &Path) -> io::Result<()> {
            self.call(format!("mkdir {}", path.display()))
        }
        fn create_file(&mut self, path: &Path) -> io::Result<()> {
            self.call(format!("touch {}", path.display()))
        }
        fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()> {
            self.call(format!("symlink {} {}", target.display(), link.display()))
        }
        fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
            self.call(format!(
                "write {} {mode:o} {}",
                path.display(),
                String::from_utf8_lossy(contents).trim_end()
            ))
        }
        fn exists(&mut self, path: &Path) -> bool {
            !self.absent.contains(path)
        }
        fn clear_groups(&mut self) -> io::Result<()> {
            self.call("setgroups []".to_string())
        }
        fn become_root(&mut self) -> io::Result<()> {
            self.call("setresgid 0; setresuid 0".to_string())
        }
        fn clear_capabilities(&mut self) -> io::Result<()> {
            self.call("clear capabilities".to_string())
        }
        fn set_no_new_privs(&mut self) -> io::Result<()> {
            self.call("no_new_privs".to_string())
        }
        fn landlock_ruleset(&mut self) -> io::Result<()> {
            self.call("landlock ruleset".to_string())
        }
        fn landlock_allow_path(
            &mut self,
            _: &mut (),
            path: &Path,
            access: FsAccess,
        ) -> io::Result<bool> {
            if self.absent.contains(path) {
                return Ok(false);
            }
            self.call(format!("landlock allow {} {access:?}", path.display()))
                .map(|()| true)
        }
        fn landlock_allow_connect(&mut self, _: &mut (), port: u16) -> io::Result<()> {
            self.call(format!("landlock connect {port}"))
        }
    }

    #[test]
    fn ms_flags_follow_the_attrs() {
        assert_eq!(
            ms_flags(MountAttrs::LOCKED),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC
        );
        assert_eq!(ms_flags(MountAttrs::default()), MsFlags::empty());
        let dev = crate::plan::dev::PTS;
        assert_eq!(ms_flags(dev), MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC);
    }

    #[test]
    fn the_fake_fails_the_call_it_is_told_to_and_records_it() {
        let mut k = Recording::failing_on("chdir /b");
        assert!(k.chdir(Path::new("/a")).is_ok());
        assert!(k.chdir(Path::new("/b")).is_err());
        assert_eq!(k.calls, ["chdir /a", "chdir /b"]);
    }
}
