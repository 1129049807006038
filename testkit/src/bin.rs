//! The `gatehouse` binaries and the repository's files.
//!
//! `CARGO_BIN_EXE_*` is set only for the integration tests of the package
//! that owns a binary, so the kit looks where cargo puts binaries: next to
//! the directory of the test executable (`target/…/debug/deps/test-…` →
//! `target/…/debug/gatehouse`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The launcher: `sandbox run`, the worker's commands; hands the rest over
/// to [`SERVICES`] next to it.
pub const GATEHOUSE: &str = "gatehouse";
/// Every other command (`proxy`, `supervisor`, `router`, `doctor`, …).
pub const SERVICES: &str = "gatehouse-services";

/// The binary `name` of this build (the test executable's profile).
pub fn path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let candidates = [Some(dir.join(name)), dir.parent().map(|d| d.join(name))];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "binary {name} not found next to {} (cargo builds it for the root package's \
                 tests and benchmarks; otherwise run `cargo build --bins` first)",
                exe.display()
            )
        })
}

/// `gatehouse`'s path.
pub fn gatehouse() -> PathBuf {
    path(GATEHOUSE)
}

/// A command running `gatehouse`.
pub fn command() -> Command {
    Command::new(gatehouse())
}

/// Copies both binaries into `dir` (mode 0755), for a user who may not
/// traverse the build directory; returns the launcher's path there.
pub fn copy_to(dir: &Path) -> PathBuf {
    for name in [GATEHOUSE, SERVICES] {
        copy_executable(&path(name), &dir.join(name));
    }
    dir.join(GATEHOUSE)
}

/// Copies an executable (mode 0755) through `install`, a process of its
/// own: were the copy written here, a child another test thread forks at
/// that moment would inherit the open write descriptor until it execs,
/// and executing the copy meanwhile fails with ETXTBSY ("text file busy").
pub fn copy_executable(from: &Path, to: &Path) {
    let status = Command::new("install")
        .args(["-m", "0755"])
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "install {} {}",
        from.display(),
        to.display()
    );
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A file or directory of the repository, by its path from the root.
pub fn repo_path(rel: &str) -> PathBuf {
    repo_root().join(rel)
}
