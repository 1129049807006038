//! `gatehouse-services`: every gatehouse command. It only parses arguments and
//! hands each subcommand to the library crate that owns the concern. Users run
//! it through `gatehouse`, which hands over every command it does not run
//! itself (see `src/lib.rs`).
//!
//! No async runtime is started here: `sandbox run` forks into namespaces and
//! must do so while the process is still single-threaded. Subcommands that
//! need tokio build their own runtime.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gatehouse::cli;

/// mimalloc rather than glibc's malloc: the proxy allocates per request on
/// several threads, and glibc's `malloc`/`free` (with `malloc_consolidate`
/// on hyper's buffers) was ~12% of its CPU (`proxy/README.md`, issue 16).
/// Only this binary: `gatehouse`, which runs inside sandboxes, keeps glibc's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hand AI coding agents real work on GitHub and Feishu without handing them keys.
#[derive(Parser)]
#[command(name = "gatehouse", bin_name = "gatehouse", version, about, long_about = None)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Sandbox(cli::sandbox::Commands),
    #[command(flatten)]
    Proxy(cli::proxy::Commands),
    #[command(flatten)]
    Router(cli::router::Commands),
    #[command(flatten)]
    Supervisor(cli::supervisor::Commands),
    #[command(flatten)]
    Intake(cli::intake::Commands),
    #[command(flatten)]
    Worker(cli::worker::Commands),
    #[command(flatten)]
    Up(cli::up::Commands),
    /// The whole loop end to end, on local GitHub and Feishu emulators: a
    /// story played through `up`'s three processes, printed as a timeline;
    /// exits 0 only if the story held
    Demo(gatehouse::demo::DemoArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.command {
        Command::Sandbox(c) => c.run(),
        Command::Proxy(c) => c.run(),
        Command::Router(c) => c.run(),
        Command::Supervisor(c) => c.run(),
        Command::Intake(c) => c.run(),
        Command::Worker(c) => c.run(),
        Command::Up(c) => c.run(),
        Command::Demo(a) => gatehouse::demo::run(a),
    };
    cli::exit_code(outcome)
}
