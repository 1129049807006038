//! The two commands a worker runs inside its sandbox: `gatehouse report` and
//! `gatehouse inbox`. They are part of the small `gatehouse` binary, which is
//! the one bound into a sandbox.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use gatehouse_supervisor::jobs::{control, report};
use gatehouse_types::{env, sandbox, TriggerId};

#[derive(Subcommand)]
pub enum Commands {
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
    /// Inside a sandbox: print messages sent to your job, one JSON object a
    /// line; each is acknowledged once printed, and comes again (same `seq`)
    /// if printing or acknowledging failed
    Inbox {
        /// Block until at least one message arrives
        #[arg(long)]
        wait: bool,
    },
    /// Inside a sandbox: run the reference worker (`workers/reference-worker.sh`,
    /// embedded): clone the job's repository, commit on `gatehouse/<ticket>`,
    /// push, open a pull request and report ready with its link; a task that
    /// asks a question is reported blocked, with a question, until the inbox
    /// answers it
    ReferenceWorker,
}

/// The reference worker's source: a plain shell script, so what a worker
/// does with `git`, `gh` and `gatehouse report` can be read in one place.
const REFERENCE_WORKER: &str = include_str!("../../workers/reference-worker.sh");

fn control_socket() -> PathBuf {
    std::env::var_os(env::CONTROL_SOCKET)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(sandbox::CONTROL_SOCKET))
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
            Commands::Report {
                state,
                summary,
                question,
                answers,
                links,
            } => {
                let answers = answers
                    .map(|a| TriggerId::parse(&a))
                    .transpose()
                    .context("--answers")?;
                let report = report::Report {
                    state: report::ReportState::parse(&state)
                        .context("--state must be working, ready or blocked")?,
                    summary,
                    question,
                    answers,
                    links,
                };
                report::check_report(&report)?;
                let socket = control_socket();
                let answer = current_thread()?
                    .block_on(control::send_report(&socket, &report))
                    .context("sending the report")?;
                println!("report recorded: {answer}");
                Ok(ExitCode::SUCCESS)
            }
            Commands::Inbox { wait } => {
                // At least once: acknowledged only once printed, so a
                // message is never lost, and may come twice (same `seq`).
                let socket = control_socket();
                let runtime = current_thread()?;
                let messages = runtime
                    .block_on(control::read_inbox(&socket, wait))
                    .context("reading the inbox")?;
                let mut out = std::io::stdout().lock();
                for m in &messages {
                    let line = serde_json::to_string(m).context("printing the inbox")?;
                    writeln!(out, "{line}").context("printing the inbox")?;
                }
                out.flush().context("printing the inbox")?;
                if let Some(last) = messages.iter().map(|m| m.seq).max() {
                    runtime
                        .block_on(control::ack_inbox(&socket, last))
                        .context("acknowledging the inbox")?;
                }
                Ok(ExitCode::SUCCESS)
            }
            Commands::ReferenceWorker => {
                use std::os::unix::process::CommandExt;
                // Replaces this process: the script's exit status is the job's.
                let e = std::process::Command::new("/bin/sh")
                    .args(["-c", REFERENCE_WORKER, "reference-worker"])
                    .exec();
                Err(anyhow::Error::new(e).context("running /bin/sh for the reference worker"))
            }
        }
    }
}
