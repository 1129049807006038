//! `gatehouse up` and `gatehouse config check`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use crate::logging::{self, LogFormat};
use crate::up::{self, layout::Owner, Prepared};

#[derive(Subcommand)]
pub enum Commands {
    /// Start the proxy, the supervisor and the router from one config, each
    /// under its own user when run as root; restart a part that dies; stop
    /// all three (router, supervisor, proxy) on SIGTERM or Ctrl-C
    Up {
        /// The gatehouse config (commented example: deploy/gatehouse.toml)
        #[arg(long)]
        config: PathBuf,
        /// How `up` and each part write their logs (each part's to
        /// <state_dir>/logs/<part>.log)
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Work with the gatehouse config
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Check everything `gatehouse up` would need, start nothing, and print
    /// the resolved layout; exit 1 with an error naming the file and key
    Check {
        #[arg(long)]
        config: PathBuf,
    },
    /// Check as `check` does, then create the directories (owners, modes)
    /// and write the three parts' configs, starting nothing: for running
    /// the parts as systemd units (deploy/systemd/)
    Write {
        #[arg(long)]
        config: PathBuf,
    },
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Up { config, log_format } => run_up(config, log_format),
            Commands::Config {
                command: ConfigCommand::Check { config },
            } => {
                let prepared = up::prepare(&config)?;
                print!("{}", describe(&prepared));
                Ok(ExitCode::SUCCESS)
            }
            Commands::Config {
                command: ConfigCommand::Write { config },
            } => {
                let prepared = up::prepare(&config)?;
                if prepared.layout.handoff_socket().is_some() {
                    // The units run three parts and keep /run read-only to
                    // the router: the hand-off could not be bound.
                    anyhow::bail!(
                        "{}: `[feishu] long_connection = true` runs a fourth part the systemd \
                         units do not have yet: run `gatehouse up`, or take Feishu's events \
                         over HTTP (`[feishu] listen`)",
                        config.display()
                    );
                }
                up::install(&prepared)?;
                print!("{}", describe(&prepared));
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn run_up(config: PathBuf, log_format: LogFormat) -> anyhow::Result<ExitCode> {
    logging::init(log_format);
    let prepared = up::prepare(&config)?;
    if !prepared.users.separated() {
        tracing::warn!(
            "not root: every part runs as this user, so the router could read the \
             credential files (see README, rootless)"
        );
    }
    // Signals are handled before anything starts: a SIGTERM during start-up
    // waits, then stops what did start.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal runtime")?;
    let mut term = {
        let _guard = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?
    };
    let mut int = {
        let _guard = runtime.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("installing the SIGINT handler")?
    };
    let options = up::Options {
        log_format,
        ..up::Options::default()
    };
    let running = up::start(&prepared, options)?;
    tracing::info!(
        state = %prepared.layout.state_dir.display(),
        logs = %prepared.layout.logs_dir.display(),
        "gatehouse up: running"
    );
    runtime.block_on(async {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    });
    tracing::info!("stopping");
    for stopped in running.stop() {
        if stopped.killed {
            tracing::warn!(part = stopped.part.name(), "killed after the grace period");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `[audit]` in words, as `config check` prints it.
fn audit_summary(a: &up::config::AuditSection) -> String {
    // Checked with the rest of the file before this is printed.
    let synced = a.sync_window().map_or_else(
        |(_, e)| e,
        |w| format!("synced within {} ms", w.as_millis()),
    );
    format!("{}; {synced}", rotation_summary(a))
}

/// When the log rotates and what it keeps, in words.
fn rotation_summary(a: &up::config::AuditSection) -> String {
    let mut when = Vec::new();
    if let Some(b) = a.rotate_bytes {
        when.push(format!("at {b} bytes"));
    }
    if let Some(s) = a.rotate_secs {
        when.push(format!("every {s} s"));
    }
    if when.is_empty() {
        return "one file, not rotated".into();
    }
    let keep = match a.keep_files {
        Some(n) => format!("the last {n} rotated files kept"),
        None => "every rotated file kept".into(),
    };
    format!("rotated {}; {keep}", when.join(" or "))
}

/// The resolved layout, as `config check` prints it.
pub fn describe(p: &Prepared) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let l = &p.layout;
    let users = &p.users;
    let who = |o: Owner| match o {
        Owner::Up => users.up(),
        Owner::Proxy => users.proxy(),
        Owner::Router => users.router(),
    };
    let _ = writeln!(out, "config: {} (ok)", p.config_path.display());
    match users {
        up::Users::Separated {
            proxy,
            router,
            router_group,
        } => {
            let _ = writeln!(
                out,
                "users: proxy {} (uid {}), router {} (uid {}, group {router_group}), supervisor root",
                p.file.proxy_user, proxy.uid, p.file.router_user, router.uid
            );
        }
        up::Users::Rootless(me) => {
            let _ = writeln!(
                out,
                "users: rootless, all three as uid {} (weaker: the router could read the credentials)",
                me.uid
            );
        }
    }
    let _ = writeln!(out, "repositories: {}", p.repos.join(", "));
    let _ = writeln!(out, "directories:");
    for d in l.dirs() {
        let _ = writeln!(
            out,
            "  {:04o} {:>5}:{:<5} {}",
            d.mode,
            who(d.owner).uid,
            who(d.group).gid,
            d.path.display()
        );
    }
    let _ = writeln!(
        out,
        "generated: {}, {}, {}",
        l.proxy_toml.display(),
        l.supervisor_toml.display(),
        l.router_toml.display()
    );
    let _ = writeln!(out, "sockets:");
    for (what, path) in l.sockets() {
        let _ = writeln!(out, "  {what}: {}", path.display());
    }
    let _ = writeln!(
        out,
        "audit log: {} ({})",
        l.audit_log.display(),
        audit_summary(&p.file.audit)
    );
    for (key, addr) in p.file.metrics.parts() {
        if let Some(addr) = addr {
            let _ = writeln!(out, "{key}: http://{addr}/metrics");
        }
    }
    if let (Some(socket), Some(f)) = (l.handoff_socket(), &p.file.feishu) {
        let _ = writeln!(
            out,
            "feishu long connection: `gatehouse intake feishu-connect` for {} as uid {}, \
             handing events to {}",
            f.app_id,
            users.proxy().uid,
            socket.display()
        );
    }
    let _ = writeln!(out, "CA certificate: {}", l.ca_cert.display());
    let _ = writeln!(out, "logs: {}", l.logs_dir.display());
    out
}
