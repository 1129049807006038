//! `gatehouse router`, `tickets`, `threads` and `replies` subcommands.

use std::io::{BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::id::{ThreadId, TicketId};
use gatehouse_router::intake::{
    wall_clock_ms, FeishuKeys, HandoffConfig, Intake, ListenerConfig, Verifier, WebhookSecrets,
};
use gatehouse_router::policy::Policy;
use gatehouse_router::replay::{first_at, replay};
use gatehouse_router::stats;
use gatehouse_router::store::{Durability, Store};
use gatehouse_types::env;

use crate::logging::{self, LogFormat};

#[derive(Subcommand)]
pub enum Commands {
    /// The router: replay recorded inputs, or receive live events, through its decisions
    Router {
        #[command(subcommand)]
        command: RouterCommand,
    },
    /// Recall tickets from the router's state
    Tickets {
        #[command(subcommand)]
        command: TicketsCommand,
    },
    /// Recall a thread and its triggers
    Threads {
        #[command(subcommand)]
        command: ThreadsCommand,
    },
    /// The reply log
    Replies {
        #[command(subcommand)]
        command: RepliesCommand,
    },
}

#[derive(Subcommand)]
pub enum RouterCommand {
    /// Run JSON-lines inputs through the router; print one JSON decision per line
    Replay {
        /// The policy file (TOML)
        #[arg(long)]
        policy: PathBuf,
        /// The router's state database (created if missing)
        #[arg(long)]
        state: PathBuf,
        /// The inputs, one JSON object per line
        #[arg(long)]
        events: PathBuf,
        /// How hard each decision's commit waits for the disk
        #[arg(long, value_enum, default_value_t = Sync::Normal)]
        sync: Sync,
    },
    /// Receive GitHub webhooks or Feishu events: verify, store, acknowledge, then decide each delivery once
    ///
    /// One source per listener: GitHub (--webhook-secret-file) or Feishu
    /// (--feishu-app-id with its encrypt key and/or verification token).
    /// Plain HTTP; TLS, if any, is a reverse proxy's. Prints
    /// {"listening":"ADDR"} on stdout once ready; stops on SIGTERM or Ctrl-C.
    /// Deliveries stored but not yet decided (a crash, kill -9) are decided
    /// when it starts again.
    Listen {
        /// The policy file (TOML)
        #[arg(long)]
        policy: PathBuf,
        /// The router's state database (created if missing)
        #[arg(long)]
        state: PathBuf,
        /// Address and port to listen on
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// A file holding the GitHub webhook secret; repeat to accept several (rotation)
        #[arg(
            long = "webhook-secret-file",
            required_unless_present = "feishu_app_id"
        )]
        webhook_secret_files: Vec<PathBuf>,
        /// Receive Feishu events for this app (cli_…) instead of GitHub webhooks
        #[arg(long, conflicts_with = "webhook_secret_files")]
        feishu_app_id: Option<String>,
        /// A file holding the Feishu app's encrypt key (events are then encrypted and signed)
        #[arg(long, requires = "feishu_app_id")]
        feishu_encrypt_key_file: Option<PathBuf>,
        /// A file holding the Feishu app's verification token
        #[arg(long, requires = "feishu_app_id")]
        feishu_verification_token_file: Option<PathBuf>,
        /// Also take Feishu events over from the long-connection client
        /// (`gatehouse intake feishu-connect`) on this unix socket
        #[arg(long, requires = "feishu_app_id", requires = "feishu_handoff_uid")]
        feishu_handoff: Option<PathBuf>,
        /// The only uid served on --feishu-handoff (the connect process's
        /// user; checked with SO_PEERCRED)
        #[arg(long, requires = "feishu_handoff")]
        feishu_handoff_uid: Option<u32>,
        /// Connections served at once; more wait in the listen backlog
        #[arg(long, default_value_t = 64)]
        max_connections: usize,
        /// How hard each commit (delivery and decision) waits for the disk
        #[arg(long, value_enum, default_value_t = Sync::Normal)]
        sync: Sync,
        /// Store and acknowledge deliveries, decide none (a router listening
        /// on the same state, now or later, decides them)
        #[arg(long)]
        store_only: bool,
        /// How the log is written to stderr
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// The live router: receive events, run jobs for tickets on the supervisor, send replies through the proxy
    ///
    /// Reads router.toml (see router/examples/router.toml). Prints
    /// {"listening":{"github":ADDR,"feishu":ADDR}} on stdout once ready (a
    /// source not configured is absent); stops on SIGTERM or Ctrl-C. Every
    /// step is durable: a restart (after kill -9 too) continues where it
    /// stopped, sending no reply twice.
    Run {
        /// The router's config (TOML)
        #[arg(long)]
        config: PathBuf,
        /// How hard each commit waits for the disk
        #[arg(long, value_enum, default_value_t = Sync::Normal)]
        sync: Sync,
        /// How the log is written to stderr
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Observe-mode evidence: per rule, what it would have accepted and what people then asked for
    ///
    /// Read-only over the router's state (a router may be running on it).
    /// One row per rule that appears in the decision log, in id order:
    ///
    ///   would_accept    candidates the rule would have accepted (observe
    ///                   mode: recorded, nothing accepted), at or after --since
    ///
    ///   threads         the distinct threads of those candidates
    ///
    ///   then_requested  of those threads, how many got an explicit request
    ///                   from a person (someone allowlisted addressing the bot)
    ///                   within --window after a would-accept; with threads,
    ///                   how often accepting on its own would have been right
    ///
    ///   missed          explicit requests from a person, at or after --since,
    ///                   on a thread where the rule judged a candidate within
    ///                   --window before (its conditions held) and would not
    ///                   have accepted it (no match, or its judge failed)
    Stats {
        /// The router's state: its database, or a directory holding router.db
        #[arg(long, env = env::STATE)]
        state: PathBuf,
        /// Count from this time: a duration back from now (90m, 24h, 7d), a
        /// UTC date (YYYY-MM-DD) or milliseconds since the epoch [default: everything]
        #[arg(long)]
        since: Option<String>,
        /// How long after a would-accept (or before a request) counts (90m, 24h, 7d)
        #[arg(long, default_value = "7d")]
        window: String,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
}

impl Sync {
    pub(super) fn durability(self) -> Durability {
        match self {
            Sync::Normal => Durability::Normal,
            Sync::Full => Durability::Full,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Sync {
    /// Survives a crash of the process (WAL, synchronous=NORMAL)
    Normal,
    /// Survives power loss too (synchronous=FULL)
    Full,
}

#[derive(Args)]
pub struct StateArg {
    /// The router's state database
    #[arg(long, env = env::STATE)]
    state: PathBuf,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum TicketsCommand {
    /// All tickets, oldest first
    List {
        #[command(flatten)]
        state: StateArg,
    },
    /// One ticket, with its mandate and latest report
    Show {
        id: String,
        #[command(flatten)]
        state: StateArg,
    },
}

#[derive(Subcommand)]
pub enum ThreadsCommand {
    /// A thread, its tickets and a page of its triggers
    Show {
        id: String,
        /// Continue after this cursor (printed by the previous page)
        #[arg(long)]
        cursor: Option<String>,
        /// Triggers per page
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[command(flatten)]
        state: StateArg,
    },
}

#[derive(Subcommand)]
pub enum RepliesCommand {
    /// The reply log as JSON lines, oldest first
    Export {
        #[arg(long, env = env::STATE)]
        state: PathBuf,
    },
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Router {
                command:
                    RouterCommand::Replay {
                        policy,
                        state,
                        events,
                        sync,
                    },
            } => run_replay(&policy, &state, &events, sync),
            Commands::Router {
                command:
                    RouterCommand::Listen {
                        policy,
                        state,
                        listen,
                        webhook_secret_files,
                        feishu_app_id,
                        feishu_encrypt_key_file,
                        feishu_verification_token_file,
                        feishu_handoff,
                        feishu_handoff_uid,
                        max_connections,
                        sync,
                        store_only,
                        log_format,
                    },
            } => run_listen(Listen {
                policy,
                state,
                listen,
                source: match feishu_app_id {
                    Some(app_id) => Source::Feishu {
                        app_id,
                        encrypt_key_file: feishu_encrypt_key_file,
                        token_file: feishu_verification_token_file,
                    },
                    None => Source::Github(webhook_secret_files),
                },
                handoff: feishu_handoff
                    .zip(feishu_handoff_uid)
                    .map(|(socket, peer_uid)| HandoffConfig { socket, peer_uid }),
                max_connections,
                sync,
                store_only,
                log_format,
            }),
            Commands::Router {
                command:
                    RouterCommand::Run {
                        config,
                        sync,
                        log_format,
                    },
            } => super::router_run::run(&config, sync, log_format),
            Commands::Router {
                command:
                    RouterCommand::Stats {
                        state,
                        since,
                        window,
                        json,
                    },
            } => router_stats(&state, since.as_deref(), &window, json),
            Commands::Tickets { command } => match command {
                TicketsCommand::List { state } => tickets_list(&state),
                TicketsCommand::Show { id, state } => tickets_show(&id, &state),
            },
            Commands::Threads {
                command:
                    ThreadsCommand::Show {
                        id,
                        cursor,
                        limit,
                        state,
                    },
            } => threads_show(&id, cursor.as_deref(), limit, &state),
            Commands::Replies {
                command: RepliesCommand::Export { state },
            } => {
                let store = open_existing(&state)?;
                let stdout = std::io::stdout();
                let mut out = stdout.lock();
                store.read().export_replies(&mut out)?;
                out.flush()?;
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn run_replay(policy: &Path, state: &Path, events: &Path, sync: Sync) -> anyhow::Result<ExitCode> {
    let policy = Policy::load(policy)?;
    let text = std::fs::read_to_string(events)
        .with_context(|| format!("cannot read the events file {}", events.display()))?;
    let store = Store::open(state, sync.durability())
        .with_context(|| format!("cannot open the state {}", state.display()))?;
    let mut router = Router::new(store, policy, RulesOnlyJudge, first_at(&text))?;
    let base_dir = events.parent().unwrap_or(Path::new("."));
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let summary = replay(
        &mut router,
        BufReader::new(text.as_bytes()),
        base_dir,
        &mut out,
    )?;
    drop(out);
    if summary.rejected > 0 {
        eprintln!(
            "gatehouse: {} line(s) rejected; see the `rejected` decisions",
            summary.rejected
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a listener's deliveries come from, and the files of the secrets
/// that verify them.
pub(super) enum Source {
    Github(Vec<PathBuf>),
    Feishu {
        app_id: String,
        encrypt_key_file: Option<PathBuf>,
        token_file: Option<PathBuf>,
    },
}

impl Source {
    pub(super) fn verifier(&self) -> anyhow::Result<Verifier> {
        Ok(match self {
            Source::Github(files) => WebhookSecrets::from_files(files)?.into(),
            Source::Feishu {
                app_id,
                encrypt_key_file,
                token_file,
            } => FeishuKeys::from_files(app_id, encrypt_key_file.as_deref(), token_file.as_deref())
                .context("--feishu-encrypt-key-file / --feishu-verification-token-file")?
                .into(),
        })
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Source::Github(_) => "GitHub webhooks",
            Source::Feishu { .. } => "Feishu events",
        }
    }
}

struct Listen {
    policy: PathBuf,
    state: PathBuf,
    listen: SocketAddr,
    source: Source,
    handoff: Option<HandoffConfig>,
    max_connections: usize,
    sync: Sync,
    store_only: bool,
    log_format: LogFormat,
}

fn run_listen(args: Listen) -> anyhow::Result<ExitCode> {
    let Listen {
        policy,
        state,
        listen,
        source,
        handoff,
        max_connections,
        sync,
        store_only,
        log_format,
    } = args;
    logging::init(log_format);
    // The policy is checked in both modes: a bad one fails at start.
    let policy = Policy::load(&policy)?;
    let secrets = source.verifier()?;
    let config = ListenerConfig {
        max_connections,
        ..ListenerConfig::default()
    };
    let durability = sync.durability();
    let stop = StopSignals::install()?;
    let mut intake = if store_only {
        Intake::store_only(&state, durability, secrets, listen, config)?
    } else {
        let store = Store::open(&state, durability)
            .with_context(|| format!("cannot open the state {}", state.display()))?;
        let router = Router::new(store, policy, RulesOnlyJudge, wall_clock_ms())?;
        Intake::start(router, &state, durability, secrets, listen, config)?
    };
    if let Some(h) = &handoff {
        let Verifier::Feishu(keys) = source.verifier()? else {
            bail!("--feishu-handoff takes Feishu events only");
        };
        intake.handoff(&state, durability, keys, h)?;
        tracing::info!(socket = %h.socket.display(), peer_uid = h.peer_uid, "taking Feishu events over from the long connection");
    }
    let mut ready = serde_json::json!({ "listening": intake.addr().to_string() });
    if let Some(h) = &handoff {
        ready["handoff"] = h.socket.display().to_string().into();
    }
    println!("{ready}");
    std::io::stdout().flush()?;
    tracing::info!(addr = %intake.addr(), source = source.name(), "gatehouse router listening");
    stop.wait();
    tracing::info!("shutting down");
    intake.stop();
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM and SIGINT, caught from the moment this is made: a command makes
/// it before it says it is ready, so a signal sent right after the ready
/// line is never met by the default action (death by the signal, a failed
/// exit status) in the gap before a handler would have been installed.
pub(super) struct StopSignals {
    runtime: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub(super) fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the signal runtime")?;
        let _entered = runtime.enter();
        let term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        drop(_entered);
        Ok(StopSignals { runtime, term, int })
    }

    /// Returns on SIGTERM or Ctrl-C.
    pub(super) fn wait(self) {
        let StopSignals {
            runtime,
            mut term,
            mut int,
        } = self;
        runtime.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        });
    }
}

/// Opens a state that must already exist: recall never creates an empty one.
fn open_existing(state: &Path) -> anyhow::Result<Store> {
    if !state.exists() {
        bail!("no router state at {}; pass --state <db>", state.display());
    }
    Store::open(state, Durability::Normal)
        .with_context(|| format!("cannot open the state {}", state.display()))
}

fn router_stats(
    state: &Path,
    since: Option<&str>,
    window: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let since = match since {
        Some(s) => {
            stats::parse_since(s, wall_clock_ms()).map_err(|e| anyhow::anyhow!("--since {e}"))?
        }
        None => 0,
    };
    let window = stats::parse_duration(window).map_err(|e| anyhow::anyhow!("--window {e}"))?;
    let db = state_database(state)?;
    let log = Store::read_decision_log(&db)
        .with_context(|| format!("cannot read the router state {}", db.display()))?;
    let rows: Vec<_> = log
        .iter()
        .filter_map(|(seq, at, body)| stats::trigger_row(*seq, *at, body))
        .collect();
    let per_rule = stats::rule_stats(&rows, since, window);
    if json {
        print_json(&per_rule)?;
        return Ok(ExitCode::SUCCESS);
    }
    if per_rule.is_empty() {
        println!("no rule was evaluated (no candidate reached a rule's judge)");
        return Ok(ExitCode::SUCCESS);
    }
    let width = per_rule
        .iter()
        .map(|r| r.rule.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<width$}  {:>12}  {:>7}  {:>14}  {:>6}",
        "rule", "would_accept", "threads", "then_requested", "missed"
    );
    for r in &per_rule {
        println!(
            "{:<width$}  {:>12}  {:>7}  {:>14}  {:>6}",
            r.rule, r.would_accept, r.threads, r.then_requested, r.missed
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The state database: `state` itself, or `router.db` in a directory.
fn state_database(state: &Path) -> anyhow::Result<PathBuf> {
    if !state.exists() {
        bail!(
            "no router state at {}: it does not exist; pass --state <db or directory>",
            state.display()
        );
    }
    if state.is_dir() {
        let db = state.join("router.db");
        if !db.is_file() {
            bail!(
                "no router state in the directory {}: it holds no router.db",
                state.display()
            );
        }
        return Ok(db);
    }
    Ok(state.to_owned())
}

fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn tickets_list(state: &StateArg) -> anyhow::Result<ExitCode> {
    let store = open_existing(&state.state)?;
    let tickets = store.read().tickets()?;
    if state.json {
        print_json(&tickets)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<23} {:<8} {:<10} {:<16} {:<18} THREAD",
        "TICKET", "STATE", "OUTCOME", "REQUESTER", "REPO"
    );
    for t in tickets {
        println!(
            "{:<23} {:<8} {:<10} {:<16} {:<18} {}",
            t.id,
            t.state.as_str(),
            t.outcome.map(name_of).unwrap_or_else(|| "-".into()),
            requester(&t.mandate.requester),
            t.mandate.scope.repo,
            t.thread_key
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The serde name of an enum value (`timed_out`), as in the JSON output.
fn name_of<T: serde::Serialize>(v: T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".to_owned(),
    }
}

fn requester(a: &gatehouse_router::gate::Author) -> String {
    match a {
        gatehouse_router::gate::Author::Human(n) => n.clone(),
        gatehouse_router::gate::Author::Bot(n) => format!("{n} (bot)"),
    }
}

fn tickets_show(id: &str, state: &StateArg) -> anyhow::Result<ExitCode> {
    let Some(id) = TicketId::parse(id) else {
        bail!("`{id}` is not a ticket id (tkt_ followed by 18 hex digits)");
    };
    let store = open_existing(&state.state)?;
    let read = store.read();
    let t = read.ticket(&id)?;
    if state.json {
        print_json(&t)?;
        return Ok(ExitCode::SUCCESS);
    }
    let m = &t.mandate;
    println!("ticket          {}", t.id);
    println!("thread          {} ({})", t.thread, t.thread_key);
    println!(
        "state           {}{}",
        t.state.as_str(),
        t.outcome
            .map(|o| format!(" ({})", name_of(o)))
            .unwrap_or_default()
    );
    println!("opened, updated {} ms, {} ms", t.opened_at, t.updated_at);
    println!("requester       {}", requester(&m.requester));
    println!("trigger         {}", m.trigger);
    println!("policy version  {}", m.policy_version);
    println!(
        "scope           team {}, repo {}, sandbox profile {}",
        m.scope.team, m.scope.repo, m.scope.sandbox_profile
    );
    println!("rule sets       {}", m.scope.rule_sets.join(", "));
    println!(
        "matched rules   {}",
        if m.matched_rules.is_empty() {
            "- (explicit request)".to_owned()
        } else {
            m.matched_rules.join(", ")
        }
    );
    match &t.latest_report {
        Some(r) => {
            println!("latest report   {}: {}", name_of(r.state), r.summary);
            if let Some(q) = &r.question {
                println!("question        {q}");
            }
            for l in &r.links {
                println!("link            {l}");
            }
        }
        None => println!("latest report   -"),
    }
    Ok(ExitCode::SUCCESS)
}

fn threads_show(
    id: &str,
    cursor: Option<&str>,
    limit: usize,
    state: &StateArg,
) -> anyhow::Result<ExitCode> {
    let Some(id) = ThreadId::parse(id) else {
        bail!("`{id}` is not a thread id (thr_ followed by 18 hex digits)");
    };
    if limit == 0 {
        bail!("--limit must be at least 1");
    }
    let store = open_existing(&state.state)?;
    let read = store.read();
    let thread = read.thread(&id)?;
    let tickets = read.thread_tickets(&id)?;
    let page = read.thread_triggers(&id, cursor, limit)?;
    if state.json {
        print_json(&serde_json::json!({
            "thread": thread,
            "tickets": tickets,
            "triggers": page.triggers,
            "next_cursor": page.next_cursor,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("thread  {} ({})", thread.id, thread.key);
    println!(
        "tickets {}",
        if tickets.is_empty() {
            "-".to_owned()
        } else {
            tickets
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    println!(
        "{:<23} {:<15} {:<20} {:<28} SUMMARY",
        "TRIGGER", "AT", "KIND", "ADMISSION"
    );
    for t in &page.triggers {
        let admission = serde_json::to_value(&t.admission)?;
        let adm = match (
            admission["admission"].as_str(),
            admission["reason"].as_str(),
        ) {
            (Some(a), Some(r)) => format!("{a}: {r}"),
            (Some(a), None) => a.to_owned(),
            _ => "?".to_owned(),
        };
        let kind = serde_json::to_value(t.kind)?;
        println!(
            "{:<23} {:<15} {:<20} {:<28} {}",
            t.id,
            t.at,
            kind.as_str().unwrap_or("?"),
            adm,
            t.summary
        );
    }
    println!("next: --cursor {}", page.next_cursor);
    Ok(ExitCode::SUCCESS)
}
