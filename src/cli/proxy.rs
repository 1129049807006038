//! `gatehouse proxy` subcommands.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Commands {
    /// Run the credential-injecting proxy
    Proxy,
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Proxy => anyhow::bail!("`gatehouse proxy` is not built yet"),
        }
    }
}
