//! `gatehouse-emulator github|feishu …`: run one emulator until killed, for
//! benchmark scripts and the demo. Prints one JSON line with the address and
//! the CA file on stdout once it is listening. Credentials come from files,
//! never from the command line.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use gatehouse_emulators::{FeishuEmulator, FeishuOptions, GithubEmulator, GithubOptions, RepoSpec};

#[derive(Debug, Parser)]
#[command(
    name = "gatehouse-emulator",
    about = "Local GitHub / Feishu emulators over TLS"
)]
struct Cli {
    #[command(subcommand)]
    emulator: Emulator,
}

#[derive(Debug, Subcommand)]
enum Emulator {
    /// GitHub REST, GraphQL and git smart HTTP.
    Github {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Where to write the test CA certificate (PEM).
        #[arg(long)]
        ca_out: PathBuf,
        /// Directory for the bare repositories.
        #[arg(long)]
        state: PathBuf,
        /// A file holding one accepted token (repeatable).
        #[arg(long = "token-file")]
        token_files: Vec<PathBuf>,
        /// The login calls with these tokens act as.
        #[arg(long, default_value = "gatehouse-test[bot]")]
        login: String,
        /// A repository to create, `owner/name` (repeatable).
        #[arg(long = "repo")]
        repos: Vec<String>,
        /// An issue to open, `owner/name=Title` (repeatable).
        #[arg(long = "issue")]
        issues: Vec<String>,
        /// Server threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Feishu tenant tokens and IM messages.
    Feishu {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Where to write the test CA certificate (PEM).
        #[arg(long)]
        ca_out: PathBuf,
        /// The app id the token endpoint accepts.
        #[arg(long, default_value = "cli_gatehouse_test")]
        app_id: String,
        /// A file holding that app's secret.
        #[arg(long)]
        app_secret_file: Option<PathBuf>,
        /// Tenant token lifetime in seconds.
        #[arg(long, default_value_t = 7200)]
        token_ttl: u64,
        /// A group chat with the bot in it, `oc_…` (repeatable); sending into
        /// a chat not made is refused, as on Feishu.
        #[arg(long = "chat")]
        chats: Vec<String>,
        /// Server threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

fn read_secret(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the secret file {}", path.display()))?;
    let secret = text.trim().to_owned();
    if secret.is_empty() {
        bail!("the secret file {} is empty", path.display());
    }
    Ok(secret)
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // One line per request on stderr (never headers or bodies); RUST_LOG overrides.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Keep the handle alive until a signal arrives; dropping it stops the server.
    let (ready, _guard): (serde_json::Value, Box<dyn std::any::Any>) = match cli.emulator {
        Emulator::Github {
            listen,
            ca_out,
            state,
            token_files,
            login,
            repos,
            issues,
            threads,
        } => {
            let mut options = GithubOptions::new(&state);
            options.listen = listen;
            options.worker_threads = threads;
            for file in &token_files {
                options = options.token(&read_secret(file)?, &login);
            }
            for repo in &repos {
                let Some((owner, name)) = repo.split_once('/') else {
                    bail!("--repo {repo}: expected owner/name");
                };
                options = options.repo(RepoSpec::new(owner, name));
            }
            let handle = GithubEmulator::start(options)?;
            for issue in &issues {
                let Some((repo, title)) = issue.split_once('=') else {
                    bail!("--issue {issue}: expected owner/name=Title");
                };
                handle.add_issue(repo, title, "", "octocat")?;
            }
            handle.write_ca_pem(&ca_out)?;
            let ready = serde_json::json!({
                "emulator": "github",
                "addr": handle.addr().to_string(),
                "base_url": handle.base_url(),
                "ca": ca_out,
                "state": state,
            });
            (ready, Box::new(handle))
        }
        Emulator::Feishu {
            listen,
            ca_out,
            app_id,
            app_secret_file,
            token_ttl,
            chats,
            threads,
        } => {
            let mut options = FeishuOptions {
                listen,
                worker_threads: threads,
                token_ttl: Duration::from_secs(token_ttl),
                ..FeishuOptions::default()
            };
            if let Some(file) = &app_secret_file {
                options = options.app(&app_id, &read_secret(file)?);
            }
            let handle = FeishuEmulator::start(options)?;
            for chat in &chats {
                handle.add_bot_to_chat(chat);
            }
            handle.write_ca_pem(&ca_out)?;
            let ready = serde_json::json!({
                "emulator": "feishu",
                "addr": handle.addr().to_string(),
                "base_url": handle.base_url(),
                "ca": ca_out,
            });
            (ready, Box::new(handle))
        }
    };
    println!("{ready}");
    wait_for_signal()?;
    Ok(ExitCode::SUCCESS)
}

/// Block until SIGINT or SIGTERM.
fn wait_for_signal() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result,
            _ = terminate.recv() => Ok(()),
        }
    })?;
    Ok(())
}
