//! One module per concern; each exposes a clap `Commands` enum flattened into
//! the top level and a `run(self) -> anyhow::Result<ExitCode>`.

pub mod proxy;
pub mod router;
pub mod sandbox;
pub mod supervisor;
pub mod worker;
