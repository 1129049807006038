//! The supervisor service: an asynchronous job API over a unix socket.
//!
//! ```text
//! router ──HTTP/unix──► api ──► service ──► store (SQLite WAL: jobs, keys, reports, inbox, events)
//!                                  │ runner, one task per job:
//!                                  ├─ workspace: work dir + prompt (prompts)  tickets/<tkt>/work
//!                                  ├─ control socket (control)             <run_dir>/<job>/control.sock ◄── `gatehouse report|inbox`
//!                                  ├─ proxy identity (proxy_admin)         POST/DELETE /identities
//!                                  ├─ worker_env + launcher ─► `gatehouse sandbox run …` child
//!                                  └─ logs: stdout/stderr capped to        tickets/<tkt>/logs
//! ```
//!
//! Decisions are pure: [`state::next_state`], [`state::admission`],
//! [`state::cancel_decision`], [`report::check_report`],
//! [`spec::JobRequest::validate`], [`prompts::render`],
//! [`worker_env::worker_env`], [`runner::worker_command`]. Everything else
//! is I/O at the edges; what is hashed or stored as JSON goes through
//! [`codec`]. See `SERVICE.md` for the contract.

pub mod api;
pub mod codec;
pub mod config;
pub mod control;
pub mod control_limits;
pub mod hide;
pub mod http;
pub mod launcher;
pub mod logs;
pub mod metrics;
pub mod preflight;
pub mod process;
pub mod prompts;
pub mod proxy_admin;
pub mod report;
pub mod runner;
mod sandbox_bin;
pub mod service;
pub mod spec;
pub mod state;
pub mod store;
pub mod worker_env;
pub mod workspace;

pub use config::Config;
pub use service::Supervisor;

/// Binds the job API socket, its directory created if missing: mode 0600,
/// or 0660 owned by `api_socket_group` when one is configured.
pub fn bind_api(config: &Config) -> std::io::Result<tokio::net::UnixListener> {
    if let Some(dir) = config.api_socket.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let Some(group) = &config.api_socket_group else {
        return http::bind(&config.api_socket, 0o600);
    };
    let gid = crate::accounts::group(group)?.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("api_socket_group: no group `{group}` in /etc/group"),
        )
    })?;
    // Bound 0600 first, opened to the group only once it owns the socket.
    let listener = http::bind(&config.api_socket, 0o600)?;
    std::os::unix::fs::chown(&config.api_socket, None, Some(gid))?;
    std::fs::set_permissions(
        &config.api_socket,
        std::os::unix::fs::PermissionsExt::from_mode(0o660),
    )?;
    Ok(listener)
}

/// Serves the job API on `listener` until the future is dropped: to root,
/// the supervisor's own user and the members of `api_socket_group` by
/// their primary group (the router), by the peer's credentials.
pub async fn serve_api(supervisor: Supervisor, listener: tokio::net::UnixListener) {
    let own = nix::unistd::geteuid().as_raw();
    // `bind_api` refused a group that does not exist.
    let group = match &supervisor.config().api_socket_group {
        None => None,
        Some(name) => crate::accounts::group(name).ok().flatten(),
    };
    let admit = move |uid, gid| gatehouse_types::peer::admitted(uid, gid, own, group);
    http::serve_admitting(listener, api::MAX_BODY, admit, move |req| {
        let supervisor = supervisor.clone();
        async move { api::handle(supervisor, req).await }
    })
    .await
}
