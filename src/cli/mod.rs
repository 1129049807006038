//! One module per concern; each exposes a clap `Commands` enum flattened into
//! the top level and a `run(self) -> anyhow::Result<ExitCode>`.

pub mod proxy;
pub mod router;
pub mod sandbox;
pub mod supervisor;
pub mod worker;

/// A command's exit status; an error is printed and exits 1.
pub fn exit_code(outcome: anyhow::Result<std::process::ExitCode>) -> std::process::ExitCode {
    outcome.unwrap_or_else(|e| {
        eprintln!("gatehouse: {e:#}");
        std::process::ExitCode::from(1)
    })
}
