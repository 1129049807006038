//! The command-line front of gatehouse, shared by its two binaries:
//!
//! - `gatehouse` (`src/main.rs`) is small: it runs the sandbox commands and
//!   the worker's `report` and `inbox` itself, and hands every other command
//!   to `gatehouse-services`. `sandbox run` starts every worker, and a process
//!   that links only the sandbox starts faster: fewer pages to map, relocate
//!   and fault in before the first namespace is made (see
//!   `supervisor/README.md`, "Time budget").
//! - `gatehouse-services` (`src/services.rs`) has every command: the proxy,
//!   the router, the supervisor service and their tools.

#![forbid(unsafe_code)]

pub mod audit;
pub mod cli;
pub mod confine;
pub mod demo;
pub mod logging;
pub mod metrics;
pub mod up;

pub mod binaries {
    //! Where the two binaries find each other: side by side, in the directory
    //! of the running executable.

    use std::path::PathBuf;

    use anyhow::Context;

    /// The small binary: sandbox commands and the worker's commands.
    pub const LAUNCHER: &str = "gatehouse";
    /// Every other command.
    pub const SERVICES: &str = "gatehouse-services";

    /// The commands `gatehouse` runs itself; every other first argument
    /// (`--help` and `--version` included) goes to `gatehouse-services`.
    pub const LAUNCHER_COMMANDS: &[&str] = &[
        "sandbox",
        "doctor",
        "profile",
        "report",
        "inbox",
        "reference-worker",
    ];

    /// `name` in the directory of the running executable.
    pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
        let exe = std::env::current_exe().context("locating the running gatehouse binary")?;
        Ok(exe.with_file_name(name))
    }
}
