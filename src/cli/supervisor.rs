//! `gatehouse supervisor` (the job API service), and the two commands a
//! worker runs inside its sandbox: `gatehouse report` and `gatehouse inbox`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use gatehouse_supervisor::jobs::{self, control, launcher, report};

#[derive(Subcommand)]
pub enum Commands {
    /// Run the supervisor's job API
    Supervisor {
        /// The supervisor's config file (TOML)
        #[arg(long)]
        config: PathBuf,
    },
    /// Inside a sandbox: report on your job (the control socket is your identity)
    Report {
        /// Where the work is
        #[arg(long, value_parser = ["working", "ready", "blocked"])]
        state: String,
        /// One line saying what was done or what is in the way
        #[arg(long)]
        summary: String,
        /// A question for a human, word for word as they should read it
        #[arg(long)]
        question: Option<String>,
        /// The trigger id (`trg_…`) of the human message this report answers
        #[arg(long)]
        answers: Option<String>,
        /// A link to show (e.g. the pull request); repeatable
        #[arg(long = "link")]
        links: Vec<String>,
    },
    /// Inside a sandbox: print messages sent to your job, one JSON object a line
    Inbox {
        /// Block until at least one message arrives
        #[arg(long)]
        wait: bool,
    },
}

fn control_socket() -> PathBuf {
    std::env::var_os(launcher::CONTROL_SOCKET_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(launcher::SANDBOX_CONTROL_SOCKET))
}

fn current_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Supervisor { config } => run_supervisor(config),
            Commands::Report {
                state,
                summary,
                question,
                answers,
                links,
            } => {
                let report = report::Report {
                    state: report::ReportState::parse(&state)
                        .context("--state must be working, ready or blocked")?,
                    summary,
                    question,
                    answers,
                    links,
                };
                report.validate()?;
                let socket = control_socket();
                let answer = current_thread()?
                    .block_on(control::send_report(&socket, &report))
                    .context("sending the report")?;
                println!("report recorded: {answer}");
                Ok(ExitCode::SUCCESS)
            }
            Commands::Inbox { wait } => {
                let socket = control_socket();
                let messages = current_thread()?
                    .block_on(control::read_inbox(&socket, wait))
                    .context("reading the inbox")?;
                for m in &messages {
                    println!("{m}");
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn run_supervisor(config_path: PathBuf) -> anyhow::Result<ExitCode> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let config = jobs::Config::load(&config_path)?;
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
        let socket = supervisor.config().api_socket.clone();
        let listener = jobs::bind_api(supervisor.config())
            .with_context(|| format!("binding the job API on {}", socket.display()))?;
        let mut api = tokio::spawn(jobs::serve_api(supervisor.clone(), listener));
        tracing::info!("job API on {}", socket.display());
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
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
