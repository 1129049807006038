//! The live router: decisions become jobs on the supervisor, and reports
//! become replies sent through the proxy.
//!
//! ```text
//! config     router.toml ─► RouterConfig (validated, paths resolved)
//! runner     the loop's thread and runtime (LiveLoop)
//! ```

pub mod config;
pub mod runner;

pub use config::{ConfigError, RouterConfig};
pub use runner::{LiveError, LiveLoop};
