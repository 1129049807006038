//! `gatehouse up`: the proxy, the supervisor and the router as three
//! processes, from one config (`gatehouse.toml`).
//!
//! ```text
//! gatehouse.toml ─► check::prepare ─► Layout + proxy.toml, supervisor.toml, router.toml
//!                     (accounts, policy, secrets at rest, each part's own loader)
//!                ─► run::start ─► dirs (owners, modes) ─► proxy ─► supervisor ─► router
//!                                  each waits for the one before to serve; a watcher restarts
//!                                  a part that dies (backoff); stop: router, supervisor, proxy
//! ```
//!
//! As root the proxy runs as `proxy_user` and alone reads the credentials,
//! the router as `router_user` with no credential, and the supervisor stays
//! root (it builds sandboxes). Rootless, all three run as the invoking user.
//! The pure parts (the file, the layout, generated configs, access rules,
//! start/stop order and backoff) are plain functions with table tests;
//! [`start`] and [`Running`] are the library API (`gatehouse demo` runs the
//! same code in-process).

pub mod access;
pub mod check;
pub mod config;
pub mod generate;
pub mod layout;
pub mod run;
pub mod schedule;

use std::path::PathBuf;

pub use check::{prepare, Prepared, Users};
pub use run::{install, start, Options, Running, Stopped};
pub use schedule::{Backoff, Part};

/// Why `up` or `config check` refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The TOML does not parse, or has an unknown key.
    #[error("{file}: {message}")]
    Syntax { file: PathBuf, message: String },
    /// A value cannot work.
    #[error("{file}: `{key}`: {message}")]
    Invalid {
        file: PathBuf,
        key: String,
        message: String,
    },
    /// A generated config that its part refuses.
    #[error("{file} (generated for the {part}): {message}")]
    Part {
        part: &'static str,
        file: PathBuf,
        message: String,
    },
    /// A config could not be written as TOML.
    #[error("generating {what}: {message}")]
    Generate { what: String, message: String },
    /// Preparing the directories or files failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A part did not start.
    #[error("{part}: {message}")]
    Start { part: &'static str, message: String },
}
