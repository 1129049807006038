//! `gatehouse proxy` and `gatehouse audit` subcommands.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use gatehouse_proxy::{config::Config, service};

use crate::logging::{self, LogFormat};

#[derive(Subcommand)]
pub enum Commands {
    /// Run the credential-injecting proxy until SIGINT or SIGTERM
    Proxy {
        /// The proxy's TOML config (see proxy/examples/proxy.toml)
        #[arg(long)]
        config: PathBuf,
        /// How the log is written to stderr
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Work with the proxy's audit log
    Audit {
        #[command(subcommand)]
        command: super::audit::AuditCommand,
    },
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Proxy { config, log_format } => run_proxy(config, log_format),
            Commands::Audit { command } => command.run(),
        }
    }
}

fn run_proxy(path: PathBuf, log_format: LogFormat) -> anyhow::Result<ExitCode> {
    logging::init(log_format);
    let config = Config::load(&path)?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    if let Some(addr) = config.metrics {
        crate::metrics::serve(addr, gatehouse_proxy::metrics::render)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        // Handled before the sockets exist: whoever sees them (`up`, a test)
        // may send SIGTERM at once, and it must stop the proxy cleanly.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let running = service::start(&config)?;
        tracing::info!(
            identities = config.identities.len(),
            admin = ?config.admin_socket,
            "gatehouse proxy ready"
        );
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
        running.stop(&config).await;
        Ok(ExitCode::SUCCESS)
    })
}
