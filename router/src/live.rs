//! The live router: decisions become jobs on the supervisor, and reports
//! become replies sent through the proxy.
//!
//! ```text
//! intake processor ─► decision log ─┐
//!                                   ▼
//! runner: follow decisions ─► intents (store::live) ─► POST /jobs, inbox, DELETE
//!         GET /events ─► Router::on_report / on_end ─► steps (replies, ends)
//!         steps ─► Router::on_reply (checked, logged) ─► outbox ─► proxy ─► GitHub / Feishu
//! ```
//!
//! ```text
//! config     router.toml ─► RouterConfig (validated, paths resolved)
//! plan       pure: trigger decision ─► intents; report ─► reply attempts; job end ─► outcome;
//!            the job's body and idempotency key; texts within the word limit
//! events     pure: a page of the supervisor's events, bridged
//! outbox     pure: the outbox's states and transitions; GitHub/Feishu bodies, markers
//! http       the job API client's and the proxy client's HTTP (unix socket; CONNECT + TLS)
//! jobs       the job API's calls
//! send       the outbox sent through the proxy
//! lost       a job lost with the supervisor's restart: started again (bounded), else failed
//! runner     the loop's thread, runtime and passes (LiveLoop)
//! ```

pub mod config;
pub mod events;
pub mod http;
pub mod jobs;
mod lost;
pub mod outbox;
pub mod plan;
pub mod runner;
pub(crate) mod send;

pub use config::{ConfigError, GithubPollConfig, RouterConfig};
pub use runner::{LiveError, LiveLoop};
