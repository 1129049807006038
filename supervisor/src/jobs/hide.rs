//! Files the supervisor hides from itself at start: the credential and
//! verification secrets of the deployment, which only the proxy (and, for
//! verification secrets, the router) may read. The supervisor stays root to
//! build sandboxes, and `CAP_DAC_OVERRIDE` reads any file; so before its
//! first thread it moves to a mount namespace of its own (receiving the
//! host's mount events, sending none back) in which each hidden path is
//! covered: a file by `/dev/null` mounted read-only with `nodev` (opening it
//! is refused), a directory by an empty read-only tmpfs. Every sandbox it
//! starts is built from that namespace, so the paths are covered there too.
//!
//! What it does not stop: a supervisor taken over keeps `CAP_SYS_ADMIN` (it
//! builds sandboxes with it) and could unmount the covers. It stops every
//! read of a secret by the supervisor's own code and by what it runs, which
//! is what a bug or a confused path would do.

use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// Why the paths could not be hidden.
#[derive(Debug, thiserror::Error)]
pub enum HideError {
    #[error("hidden_paths: cannot make a mount namespace of its own ({0}); hiding needs root (CAP_SYS_ADMIN) and a process with no thread yet")]
    Namespace(nix::Error),
    #[error("hidden_paths: {path}: {what}: {errno}")]
    Path {
        path: PathBuf,
        what: &'static str,
        errno: nix::Error,
    },
    #[error("hidden_paths: {path}: {source}")]
    Missing {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Covers each of `paths` in a mount namespace this process moves to. Call
/// it before any thread starts; nothing to do for an empty list.
pub fn hide_from_self(paths: &[PathBuf]) -> Result<(), HideError> {
    if paths.is_empty() {
        return Ok(());
    }
    unshare(CloneFlags::CLONE_NEWNS).map_err(HideError::Namespace)?;
    // Slave: the host's later mounts still arrive; the covers never leave.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(|errno| HideError::Path {
        path: "/".into(),
        what: "making the mounts slaves",
        errno,
    })?;
    for path in paths {
        cover(path)?;
    }
    Ok(())
}

fn cover(path: &Path) -> Result<(), HideError> {
    let meta = std::fs::metadata(path).map_err(|source| HideError::Missing {
        path: path.to_owned(),
        source,
    })?;
    let failed = |what| {
        move |errno| HideError::Path {
            path: path.to_owned(),
            what,
            errno,
        }
    };
    let locked = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    if meta.is_dir() {
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            locked,
            Some("size=0,mode=000"),
        )
        .map_err(failed("covering the directory with an empty tmpfs"))
    } else {
        mount(
            Some("/dev/null"),
            path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(failed("covering the file with /dev/null"))?;
        mount(
            None::<&str>,
            path,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | locked,
            None::<&str>,
        )
        .map_err(failed("making the cover read-only and nodev"))
    }
}
