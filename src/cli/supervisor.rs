//! `gatehouse supervisor`: the job API service.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use gatehouse_supervisor::jobs;

use crate::logging::{self, LogFormat};

#[derive(Subcommand)]
pub enum Commands {
    /// Run the supervisor's job API
    Supervisor {
        /// The supervisor's config file (TOML)
        #[arg(long)]
        config: PathBuf,
        /// How the log is written to stderr
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Supervisor { config, log_format } => run_supervisor(config, log_format),
        }
    }
}

fn run_supervisor(config_path: PathBuf, log_format: LogFormat) -> anyhow::Result<ExitCode> {
    logging::init(log_format);
    let mut config = jobs::Config::load(&config_path)?;
    if let Some(addr) = config.metrics {
        crate::metrics::serve(addr, jobs::metrics::render)?;
    }
    if config.gatehouse_bin.is_none() {
        // Jobs start through `gatehouse sandbox run`, which lives in the small
        // `gatehouse` binary installed next to this one.
        config.gatehouse_bin = Some(crate::binaries::sibling(crate::binaries::LAUNCHER)?);
    }
    // Before the runtime's threads: a mount namespace is per process.
    jobs::hide::hide_from_self(&config.hidden_paths)?;
    if !config.hidden_paths.is_empty() {
        tracing::info!(
            paths = config.hidden_paths.len(),
            "the deployment's secrets are covered in the supervisor's own mount namespace"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (supervisor, recovery) = jobs::Supervisor::start(config).await?;
        tracing::info!(
            jobs_failed = recovery.jobs_failed.len(),
            processes_killed = recovery.processes_killed,
            identities_revoked = recovery.identities_revoked.len(),
            "recovered state"
        );
        // Handled before "job API on" is logged: a SIGTERM sent as soon as
        // the API is announced must stop the supervisor cleanly, not kill it.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let socket = supervisor.config().api_socket.clone();
        let listener = jobs::bind_api(supervisor.config())
            .with_context(|| format!("binding the job API on {}", socket.display()))?;
        let mut api = tokio::spawn(jobs::serve_api(supervisor.clone(), listener));
        tracing::info!("job API on {}", socket.display());
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            served = &mut api => {
                served?;
                anyhow::bail!("the job API stopped");
            }
        }
        // Live jobs are cancelled (sandboxes stopped, identities revoked)
        // rather than left for the next start to clean up.
        let grace = supervisor.config().cancel_grace + Duration::from_secs(5);
        supervisor.shutdown(grace).await;
        let _ = std::fs::remove_file(&socket);
        Ok(ExitCode::SUCCESS)
    })
}
