//! `gatehouse`: the binary users and the supervisor run. It runs the sandbox
//! commands (`sandbox`, `doctor`, `profile`) and the worker's commands
//! (`report`, `inbox`) itself, and hands every other command, `--help`
//! included, to `gatehouse-services` next to it by exec: same process, same
//! arguments, same exit status. Why two binaries: see `src/lib.rs`.
//!
//! No async runtime is started here: `sandbox run` forks into namespaces and
//! must do so while the process is still single-threaded.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use clap::Parser;
use gatehouse::binaries::{self, LAUNCHER_COMMANDS, SERVICES};
use gatehouse::cli::{self, LauncherArgs as Args, LauncherCommand as Command};

/// Exit status when `gatehouse-services` cannot be run, as a shell's for a
/// command it cannot find.
const EXIT_NO_SERVICES: u8 = 127;

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    let first = argv.nth(1);
    if !runs_here(first.as_ref()) {
        let help = is_help(first.as_ref());
        return hand_over(first.into_iter().chain(argv), help);
    }
    let outcome = match Args::parse().command {
        Command::Sandbox(c) => c.run(),
        Command::Worker(c) => c.run(),
    };
    cli::exit_code(outcome)
}

/// The launcher's own commands, and `--version` (both binaries are built
/// together, so it is the same), which a worker may ask inside a sandbox.
fn runs_here(first: Option<&OsString>) -> bool {
    first
        .and_then(|a| a.to_str())
        .is_some_and(|a| LAUNCHER_COMMANDS.contains(&a) || a == "--version" || a == "-V")
}

fn is_help(first: Option<&OsString>) -> bool {
    first
        .and_then(|a| a.to_str())
        .is_none_or(|a| matches!(a, "--help" | "-h" | "help"))
}

/// Replaces this process with `gatehouse-services`; returns only on failure.
/// Where `gatehouse-services` is missing (inside a sandbox, say), a request
/// for help still shows the commands this binary has.
fn hand_over(args: impl Iterator<Item = OsString>, help: bool) -> ExitCode {
    let services = match binaries::sibling(SERVICES) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gatehouse: {e:#}");
            return ExitCode::from(EXIT_NO_SERVICES);
        }
    };
    let e = std::process::Command::new(&services)
        .arg0("gatehouse")
        .args(args)
        .exec();
    if help {
        use clap::CommandFactory;
        println!("{}", Args::command().render_help());
        println!(
            "The other commands are in {SERVICES}, not found at {}.",
            services.display()
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "gatehouse: this command is in {SERVICES}, which could not be run from {}: {e}. \
         Install it next to gatehouse (`cargo build --release` builds both); \
         inside a sandbox only `gatehouse report` and `gatehouse inbox` exist.",
        services.display()
    );
    ExitCode::from(EXIT_NO_SERVICES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn launcher_commands_are_exactly_the_ones_it_parses() {
        let mut parsed: Vec<String> = Args::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        parsed.sort();
        let mut listed: Vec<String> = LAUNCHER_COMMANDS.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(parsed, listed);
    }

    #[test]
    fn only_launcher_commands_run_here() {
        for c in LAUNCHER_COMMANDS.iter().chain(&["--version", "-V"]) {
            assert!(runs_here(Some(&OsString::from(c))), "{c}");
        }
        for other in [
            "proxy",
            "router",
            "supervisor",
            "--help",
            "-h",
            "help",
            "Sandbox",
            "",
        ] {
            assert!(!runs_here(Some(&OsString::from(other))), "{other}");
        }
        assert!(!runs_here(None));
    }
}
