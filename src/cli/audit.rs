//! `gatehouse audit`: `verify` (the chain), `reconcile` (every message a
//! person received is explained) and `attention` (messages per finished
//! ticket).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use gatehouse_proxy::audit;

use crate::audit::attention::{Collector, Finished, Report};
use crate::audit::model::{Finding, PlatformMessage};
use crate::audit::reconcile::{Summary, Window};
use crate::audit::sources::{self, ProxyLog};
use crate::audit::{platform, reconcile};

#[derive(Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain of an audit log (every file of a rotated set);
    /// exit 1 at the first broken line
    Verify {
        /// The audit log (JSONL): a file, the active file of a rotated set,
        /// or the directory holding the set
        file: PathBuf,
    },
    /// Explain every message the bot account put in front of a person: each
    /// message call in the proxy's log by a reply-log entry or its ticket,
    /// each reply marked sent by its call, each message a platform lists by
    /// a call. Exit 1 when anything is unexplained
    Reconcile(ReconcileArgs),
    /// Messages that reached people per finished ticket, by purpose and
    /// sender; tickets over two messages listed; progress-style messages
    /// counted (must be 0)
    Attention(AttentionArgs),
    /// Write the audit log as OCSF HTTP Activity events (class 4002, schema
    /// 1.1.0), one JSON line per request, for a SIEM; exit 1 if the chain
    /// is broken (every event is still written)
    Export(ExportArgs),
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The audit log: a file, the active file of a rotated set, or the
    /// directory holding the set
    log: PathBuf,
    /// The event format (`ocsf`)
    #[arg(long, default_value = "ocsf")]
    format: String,
    /// Requests from this time on (RFC 3339 or an age: 30m, 12h, 7d)
    #[arg(long)]
    since: Option<String>,
    /// Requests up to this time
    #[arg(long)]
    until: Option<String>,
}

/// Where the parts' state is.
#[derive(Args, Debug, Clone)]
pub struct StateArgs {
    /// `gatehouse up`'s state directory (the audit log, the router's
    /// database and config are found under it)
    #[arg(long)]
    state: Option<PathBuf>,
    /// The proxy's audit log: a file, the active file of a rotated set or
    /// its directory (default: <state>/proxy/audit.jsonl)
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// The router's database (default: <state>/router/router.db)
    #[arg(long)]
    router_db: Option<PathBuf>,
    /// Report from this time on: RFC 3339 (2026-12-01T05:00:00Z) or an age
    /// (90s, 30m, 12h, 7d)
    #[arg(long)]
    since: Option<String>,
    /// Report up to this time (same forms as --since)
    #[arg(long)]
    until: Option<String>,
    /// How long after it is logged a reply may still be sent, in seconds
    #[arg(long, default_value_t = 86_400)]
    horizon: u64,
    /// Print JSON lines instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct ReconcileArgs {
    #[command(flatten)]
    state: StateArgs,
    /// Also ask GitHub, through the router's identities, what the bot
    /// account (this login) posted in the window
    #[arg(long)]
    github_bot: Option<String>,
    /// Also ask Feishu, through the router's identity, what the app posted
    /// in the window in the chats the bot is in
    #[arg(long)]
    feishu: bool,
    /// The router's config, for its identities (default:
    /// <state>/config/router.toml)
    #[arg(long)]
    router_config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct AttentionArgs {
    #[command(flatten)]
    state: StateArgs,
}

impl AuditCommand {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            AuditCommand::Verify { file } => verify(file),
            AuditCommand::Reconcile(args) => run_reconcile(args),
            AuditCommand::Attention(args) => run_attention(args),
            AuditCommand::Export(args) => run_export(args),
        }
    }
}

fn verify(file: PathBuf) -> anyhow::Result<ExitCode> {
    match audit::verify(&file) {
        Ok(report) => {
            println!(
                "{}: chain intact: {} lines, {} requests, {} completions, {} without completion; last hash {}",
                file.display(),
                report.lines,
                report.requests,
                report.completions,
                report.open_requests.len(),
                report.last_hash
            );
            if report.last_file > 1 {
                println!(
                    "files {} to {} of a rotated set, one chain{}",
                    report.first_file,
                    report.last_file,
                    if report.first_file > 1 {
                        " (earlier files removed by retention)"
                    } else {
                        ""
                    }
                );
            }
            for recovery in &report.recoveries {
                println!("recovered: {recovery}");
            }
            if report.suppressed_refusals > 0 {
                println!(
                    "{} refusals were counted in `suppressed` lines rather than written one by one (an identity refused faster than its rate of refusal records)",
                    report.suppressed_refusals
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("gatehouse audit verify: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `--since`/`--until`: RFC 3339 UTC, or an age before `now` (ms).
pub fn parse_when(s: &str, now: u64) -> anyhow::Result<u64> {
    if let Some(ms) = sources::rfc3339_ms(s) {
        return Ok(ms);
    }
    let unit = |c: char| match c {
        's' => Some(1_000),
        'm' => Some(60_000),
        'h' => Some(3_600_000),
        'd' => Some(86_400_000),
        _ => None,
    };
    let age = s
        .char_indices()
        .last()
        .and_then(|(i, c)| Some((s[..i].parse::<u64>().ok()?, unit(c)?)))
        .map(|(n, u)| n.saturating_mul(u));
    match age {
        Some(age) => Ok(now.saturating_sub(age)),
        None => bail!("`{s}` is neither an RFC 3339 UTC time (2026-12-01T05:00:00Z) nor an age (90s, 30m, 12h, 7d)"),
    }
}

impl StateArgs {
    fn path(
        &self,
        given: &Option<PathBuf>,
        under_state: &str,
        flag: &str,
    ) -> anyhow::Result<PathBuf> {
        match (given, &self.state) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(state)) => Ok(state.join(under_state)),
            (None, None) => bail!("give --state (gatehouse up's state directory) or {flag}"),
        }
    }

    fn audit_log(&self) -> anyhow::Result<PathBuf> {
        self.path(&self.audit_log, "proxy/audit.jsonl", "--audit-log")
    }

    fn router_db(&self) -> anyhow::Result<PathBuf> {
        let path = self.path(&self.router_db, "router/router.db", "--router-db")?;
        if !path.exists() {
            // Opening would create an empty database and explain nothing.
            bail!("the router's database {} does not exist", path.display());
        }
        Ok(path)
    }

    fn window(&self) -> anyhow::Result<Window> {
        let now = now_ms();
        let when = |s: &Option<String>| s.as_deref().map(|s| parse_when(s, now)).transpose();
        let window = Window {
            since: when(&self.since)?,
            until: when(&self.until)?,
        };
        if let (Some(s), Some(u)) = (window.since, window.until) {
            if s > u {
                bail!("--since is after --until");
            }
        }
        Ok(window)
    }
}

/// The time of the log's first line (ms), where a platform listing starts
/// when no --since is given.
fn first_time(path: &Path) -> anyhow::Result<u64> {
    for step in ProxyLog::open(path)? {
        if let sources::Step::Line { now } = step? {
            return Ok(now);
        }
    }
    Ok(0)
}

fn platform_messages(
    args: &ReconcileArgs,
    window: Window,
    log: &Path,
) -> anyhow::Result<Vec<PlatformMessage>> {
    if args.github_bot.is_none() && !args.feishu {
        return Ok(Vec::new());
    }
    let config_path =
        args.state
            .path(&args.router_config, "config/router.toml", "--router-config")?;
    let config = gatehouse_router::live::config::RouterConfig::load(&config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    // The platform lists by the second.
    let since = match window.since {
        Some(s) => s,
        None => first_time(log)?.saturating_sub(1_000),
    };
    let mut out = Vec::new();
    if let Some(login) = &args.github_bot {
        out.extend(platform::fetch_github(&config, login, since)?);
    }
    if args.feishu {
        out.extend(platform::fetch_feishu(&config, since)?);
    }
    Ok(out)
}

fn run_reconcile(args: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let window = args.state.window()?;
    let log_path = args.state.audit_log()?;
    let platform = platform_messages(&args, window, &log_path)?;
    let store = sources::open_store(&args.state.router_db()?)?;
    let log = ProxyLog::open(&log_path)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let json = args.state.json;
    if !json {
        writeln!(
            out,
            "{:<24}  {:<11}  {:<22}  {:<6}  {:<24}  MESSAGE",
            "TIME", "STATUS", "KIND", "SENDER", "TICKET / PURPOSE"
        )?;
    }
    let summary = reconcile(
        log,
        &store,
        window,
        args.state.horizon.saturating_mul(1000),
        platform,
        |f| write_finding(&mut out, f, json),
    )?;
    write_summary(&mut out, &summary, json)?;
    out.flush()?;
    Ok(if summary.unexplained == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn write_finding(out: &mut impl Write, f: &Finding, json: bool) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, f)?;
        writeln!(out)?;
        return Ok(());
    }
    let who = match (&f.ticket, &f.purpose) {
        (Some(t), Some(p)) => format!("{t} {p}"),
        (Some(t), None) => t.clone(),
        _ => "-".into(),
    };
    let kind = serde_json::to_value(f.kind)?;
    let sender = serde_json::to_value(f.sender)?;
    writeln!(
        out,
        "{:<24}  {:<11}  {:<22}  {:<6}  {:<24}  {} {}{}",
        audit::rfc3339_utc(f.at),
        if f.explained {
            "explained"
        } else {
            "UNEXPLAINED"
        },
        kind.as_str().unwrap_or_default(),
        sender.as_str().unwrap_or_default(),
        who,
        f.message,
        f.target,
        f.message_id
            .as_deref()
            .map(|m| format!(" → {m}"))
            .unwrap_or_default()
    )?;
    writeln!(out, "{:<24}  why: {}", "", f.why)?;
    Ok(())
}

fn write_summary(out: &mut impl Write, s: &Summary, json: bool) -> anyhow::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, &serde_json::json!({ "summary": s }))?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "\n{} message calls, {} replies, {} platform messages in the window; {} unexplained",
        s.message_calls, s.replies, s.platform_messages, s.unexplained
    )?;
    for (kind, n) in &s.by_kind {
        let kind = serde_json::to_value(kind)?;
        writeln!(out, "  {:<22} {n}", kind.as_str().unwrap_or_default())?;
    }
    Ok(())
}

fn run_export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    use crate::audit::ocsf::{http_activity, Joiner};
    if args.format != "ocsf" {
        bail!("--format {}: the one format is `ocsf`", args.format);
    }
    let now = now_ms();
    let when = |s: &Option<String>| s.as_deref().map(|s| parse_when(s, now)).transpose();
    let window = Window {
        since: when(&args.since)?,
        until: when(&args.until)?,
    };
    let log = ProxyLog::open(&args.log)?.with_records();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut write =
        |r: &audit::RequestRecord, c: Option<&audit::CompletionRecord>| -> anyhow::Result<()> {
            if window.contains(sources::rfc3339_ms(&r.time).unwrap_or(0)) {
                serde_json::to_writer(&mut out, &http_activity(r, c))?;
                out.write_all(b"\n")?;
            }
            Ok(())
        };
    let mut joiner = Joiner::default();
    let mut broken = 0;
    for step in log {
        match step? {
            sources::Step::Record(record) => {
                if let Some((r, c)) = joiner.push(record) {
                    write(&r, c.as_ref())?;
                }
            }
            sources::Step::Broken { place, why, .. } => {
                eprintln!("gatehouse audit export: {place}: {why}");
                broken += 1;
            }
            _ => {}
        }
    }
    for r in joiner.finish() {
        write(&r, None)?;
    }
    out.flush()?;
    Ok(if broken == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_attention(args: AttentionArgs) -> anyhow::Result<ExitCode> {
    let window = args.state.window()?;
    let store = sources::open_store(&args.state.router_db()?)?;
    let log = ProxyLog::open(&args.state.audit_log()?)?;
    // Every message of a ticket counts, whenever it was sent; the window
    // picks the tickets (those that ended in it).
    let mut collector = Collector::default();
    reconcile(
        log,
        &store,
        Window::default(),
        args.state.horizon.saturating_mul(1000),
        Vec::new(),
        |f| {
            collector.add(f);
            Ok(())
        },
    )?;
    let finished: Vec<Finished> = store
        .read()
        .tickets()?
        .into_iter()
        .filter_map(|t| {
            let outcome = t.outcome?;
            window.contains(t.updated_at).then(|| Finished {
                ticket: t.id.to_string(),
                outcome: serde_json::to_value(outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                ended_at: t.updated_at,
            })
        })
        .collect();
    let report = collector.report(&finished);
    print_attention(&report, args.state.json)?;
    Ok(if report.progress_style == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_attention(r: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    println!(
        "{} finished tickets, {} messages reached people ({:.2} per ticket), {} progress-style (must be 0)",
        r.finished_tickets, r.messages, r.per_ticket, r.progress_style
    );
    for t in &r.tickets {
        let parts = |m: Vec<String>| m.join(", ");
        println!(
            "  {} ({}): {} messages; by purpose: {}; by sender: {}{}",
            t.ticket,
            t.outcome,
            t.messages,
            parts(
                t.by_purpose
                    .iter()
                    .map(|(p, n)| format!("{p} {n}"))
                    .collect()
            ),
            parts(
                t.by_sender
                    .iter()
                    .map(|(s, n)| format!(
                        "{} {n}",
                        serde_json::to_value(s)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ))
                    .collect()
            ),
            if t.progress_style > 0 {
                format!("; {} progress-style", t.progress_style)
            } else {
                String::new()
            }
        );
        if !t.artifacts.is_empty() {
            println!(
                "      artifacts (the work, not messages): {}",
                parts(
                    t.artifacts
                        .iter()
                        .map(|(k, n)| format!("{k} {n}"))
                        .collect()
                )
            );
        }
        for m in &t.listed {
            println!(
                "      {}  {}  {} {}",
                audit::rfc3339_utc(m.at),
                m.what,
                m.target,
                m.message_id.as_deref().unwrap_or("")
            );
        }
    }
    if !r.over_usual.is_empty() {
        println!(
            "over {} messages: {}",
            crate::audit::attention::USUAL,
            r.over_usual.join(", ")
        );
    }
    Ok(())
}
