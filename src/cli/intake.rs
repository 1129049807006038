//! `gatehouse intake feishu-connect`: the Feishu long-connection client,
//! a process of its own so that the router never holds the app secret.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Subcommand;
use gatehouse_router::intake::feishu::connect::{self, ConnectConfig};
use secrecy::SecretString;

use crate::logging::{self, LogFormat};

#[derive(Subcommand)]
pub enum Commands {
    /// Intake processes that run beside the router
    Intake {
        #[command(subcommand)]
        command: IntakeCommand,
    },
}

#[derive(Subcommand)]
pub enum IntakeCommand {
    /// Open Feishu's long connection and hand each event to the router
    ///
    /// The official SDKs' WebSocket mode, for an app without a public URL.
    /// Runs as the proxy's user: it reads the app secret (the router never
    /// does), asks Feishu's endpoint for a URL, keeps the connection up
    /// (pings, reconnects with backoff and jitter), and hands every event
    /// to the router's hand-off socket (`router listen --feishu-handoff`,
    /// or [feishu.long_connection] in router.toml). An event is
    /// acknowledged to Feishu only once the router confirms it stored it;
    /// otherwise Feishu delivers it again. Stops on SIGTERM or Ctrl-C, and
    /// with exit 78 when Feishu refuses the app id or secret.
    FeishuConnect {
        /// The Feishu app (cli_…)
        #[arg(long)]
        app_id: String,
        /// A file holding the app secret (readable by this user only)
        #[arg(long)]
        app_secret_file: PathBuf,
        /// The router's hand-off socket
        #[arg(long)]
        handoff: PathBuf,
        /// The router's uid: the hand-off socket must be served by it (else
        /// nothing is handed over)
        #[arg(long)]
        router_uid: Option<u32>,
        /// Feishu's open platform (Lark: https://open.larksuite.com)
        #[arg(long, default_value = "https://open.feishu.cn")]
        base_url: String,
        /// Connect to this address instead of resolving the host (an
        /// emulator); certificates are still verified for the host name
        #[arg(long)]
        connect_to: Option<SocketAddr>,
        /// A CA certificate (PEM) trusted beside the system roots
        #[arg(long)]
        ca_file: Option<PathBuf>,
        /// How the log is written to stderr
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let Commands::Intake {
            command:
                IntakeCommand::FeishuConnect {
                    app_id,
                    app_secret_file,
                    handoff,
                    router_uid,
                    base_url,
                    connect_to,
                    ca_file,
                    log_format,
                },
        } = self;
        logging::init(log_format);
        if !app_id.starts_with("cli_") {
            bail!("--app-id `{app_id}`: expected a Feishu app id (cli_…)");
        }
        let config = ConnectConfig {
            app_id,
            app_secret: read_secret(&app_secret_file)?,
            base_url,
            connect_to,
            ca_file,
            handoff,
            router_uid,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term =
                signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let client = tokio::spawn(connect::run(config, stopped));
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                ended = client => {
                    return match ended.context("the long-connection client")? {
                        Ok(()) => Ok(ExitCode::SUCCESS),
                        // Trying again cannot help: say so to whoever restarts it.
                        Err(e @ connect::ConnectError::Refused(_)) => {
                            tracing::error!(error = %e, "Feishu refused the app");
                            eprintln!("gatehouse intake feishu-connect: {e}");
                            Ok(ExitCode::from(EXIT_REFUSED))
                        }
                        Err(e) => Err(e.into()),
                    };
                }
            }
            tracing::info!("shutting down");
            let _ = stop.send(true);
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// The exit status when Feishu refuses the app id or secret: a
/// configuration error (sysexits' `EX_CONFIG`), which `gatehouse up` does
/// not restart.
pub const EXIT_REFUSED: u8 = 78;

/// The secret without a final line break; empty is an error. The path is
/// named in errors, the content never.
fn read_secret(path: &Path) -> anyhow::Result<SecretString> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the app secret file {}", path.display()))?;
    let secret = text.trim_end_matches(['\r', '\n']);
    if secret.is_empty() {
        bail!("the app secret file {} is empty", path.display());
    }
    Ok(SecretString::from(secret.to_owned()))
}
