//! `gatehouse doctor` subcommands.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Commands {
    /// Report which kernel features gatehouse needs are available
    Doctor,
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Doctor => anyhow::bail!("`gatehouse doctor` is not built yet"),
        }
    }
}
