//! `gatehouse supervisor` subcommands.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Commands {
    /// Run the supervisor's job API
    Supervisor,
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Supervisor => anyhow::bail!("`gatehouse supervisor` is not built yet"),
        }
    }
}
