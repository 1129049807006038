//! The supervisor service: an asynchronous job API over a unix socket.
//!
//! ```text
//! router ──HTTP/unix──► api ──► service ──► store (SQLite WAL: jobs, keys, reports, inbox, events)
//!                                  │ per job task:
//!                                  ├─ work dir + prompt (prompts)      tickets/<tkt>/work
//!                                  ├─ control socket (control)         run/<job>/control.sock ◄── `gatehouse report|inbox`
//!                                  ├─ proxy identity (proxy_admin)     POST/DELETE /identities
//!                                  └─ launcher ─► `gatehouse sandbox run …` child, logs capped to tickets/<tkt>/logs
//! ```
//!
//! Decisions are pure: [`state::next_state`], [`state::admission`],
//! [`state::cancel_decision`], [`report::Report::validate`],
//! [`spec::JobRequest::validate`], [`prompts::render`]. Everything else is I/O
//! at the edges. See `SERVICE.md` for the contract.

pub mod api;
pub mod config;
pub mod control;
pub mod http;
pub mod launcher;
pub mod process;
pub mod prompts;
pub mod proxy_admin;
pub mod report;
pub mod service;
pub mod spec;
pub mod state;
pub mod store;

pub use config::Config;
pub use service::Supervisor;

/// Binds the job API socket (mode 0600, its directory created if missing).
pub fn bind_api(config: &Config) -> std::io::Result<tokio::net::UnixListener> {
    if let Some(dir) = config.api_socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    http::bind(&config.api_socket, 0o600)
}

/// Serves the job API on `listener` until the future is dropped.
pub async fn serve_api(supervisor: Supervisor, listener: tokio::net::UnixListener) {
    http::serve(listener, move |req| {
        let supervisor = supervisor.clone();
        async move { api::handle(supervisor, req).await }
    })
    .await
}
