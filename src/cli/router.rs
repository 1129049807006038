//! `gatehouse router` subcommands.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Commands {
    /// Run or replay the router
    Router,
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Router => anyhow::bail!("`gatehouse router` is not built yet"),
        }
    }
}
