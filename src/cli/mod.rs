//! One module per concern; each exposes a clap `Commands` enum flattened into
//! the top level and a `run(self) -> anyhow::Result<ExitCode>`.

pub mod audit;
pub mod intake;
pub mod proxy;
pub mod router;
mod router_run;
pub mod sandbox;
pub mod supervisor;
pub mod up;
pub mod worker;

use clap::{Parser, Subcommand};

// The small `gatehouse` binary's command line (`src/main.rs`): the sandbox
// commands and the worker's. Here, not in the binary, so that the
// supervisor's launcher is tested against this very parser.

/// Hand AI coding agents real work on GitHub and Feishu without handing them keys.
#[derive(Parser)]
#[command(name = "gatehouse", bin_name = "gatehouse", version, about, long_about = None)]
pub struct LauncherArgs {
    #[command(subcommand)]
    pub command: LauncherCommand,
}

#[derive(Subcommand)]
pub enum LauncherCommand {
    #[command(flatten)]
    Sandbox(sandbox::Commands),
    #[command(flatten)]
    Worker(worker::Commands),
}

/// A command's exit status; an error is printed and exits 1.
pub fn exit_code(outcome: anyhow::Result<std::process::ExitCode>) -> std::process::ExitCode {
    outcome.unwrap_or_else(|e| {
        eprintln!("gatehouse: {e:#}");
        std::process::ExitCode::from(1)
    })
}
