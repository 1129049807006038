//! `gatehouse demo`: the whole loop in one command. It starts the GitHub and
//! Feishu emulators, runs `up`'s three processes (the same code as `gatehouse
//! up`, in this process) with a generated config in a temporary directory,
//! plays a story, and prints it as a timeline with a summary. It exits 0
//! only if every property of the story held.
//!
//! The story: alice (allowlisted) assigns an issue to the bot → an ack → the
//! worker (the reference worker, which first tries a push to `main` and a
//! comment in another team's repository: both refused) opens a pull request
//! → a result with its link; the CI bot writes "stop" on the thread (it
//! reaches the worker, and stops nothing); mallory (not allowlisted)
//! mentions the bot → nothing; alice sends the bot a Feishu direct message
//! → an ack → a result.

mod timeline;
pub mod world;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use gatehouse_router::store::{Durability, Store};

use crate::up;
use timeline::{Entry, Facts, Sent};
use world::{Owners, World, ALICE_CHAT, ALICE_FEISHU, BOT_LOGIN, CI_BOT, REPO};

/// How long each step of the story may take before the demo gives up.
const STEP_DEADLINE: Duration = Duration::from_secs(120);
/// After the last expected message, how long nothing more may arrive.
const QUIET: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Print the timeline, summary and checks as one JSON document
    #[arg(long)]
    json: bool,
    /// Keep the temporary directory (state, logs, configs) and print where it
    /// is, e.g. for `gatehouse tickets list --state <dir>/state/router/router.db`
    #[arg(long)]
    keep: bool,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Progress on stderr, so `--json` keeps stdout clean.
fn progress(text: &str) {
    eprintln!("demo: {text}");
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP_DEADLINE;
    while !done() {
        if Instant::now() > deadline {
            bail!(
                "gave up after {}s waiting for {what}",
                STEP_DEADLINE.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The owners of the parts' files as root; `None` rootless.
fn owners() -> anyhow::Result<Option<Owners>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let who = |name: &str| -> anyhow::Result<(u32, u32)> {
        let a = gatehouse_supervisor::accounts::user(name)
            .context("reading /etc/passwd")?
            .with_context(|| format!("no account `{name}`: run scripts/setup-debian first"))?;
        Ok((a.uid, a.gid))
    };
    Ok(Some(Owners {
        proxy: who(up::config::DEFAULT_PROXY_USER)?,
        router: who(up::config::DEFAULT_ROUTER_USER)?,
    }))
}

/// The binaries, copied where the parts' users can run them (a build
/// directory under a private home would not be).
fn copy_binaries(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir(&bin)?;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))?;
    for name in [crate::binaries::LAUNCHER, crate::binaries::SERVICES] {
        let from = crate::binaries::sibling(name)?;
        std::fs::copy(&from, bin.join(name))
            .with_context(|| format!("copying {}", from.display()))?;
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(bin.join(crate::binaries::SERVICES))
}

/// A directory the parts' users can traverse (0755), removed on drop
/// unless kept.
fn demo_dir(prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .context("creating the demo's directory in /tmp")?;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(d)
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = demo_dir("gatehouse-demo-")?;
    // Sockets live under a short directory (a socket path has 107 bytes).
    let run_dir = demo_dir("ghd")?;
    let owners = owners()?;
    progress(&format!(
        "starting the emulators and the three parts in {} ({})",
        dir.path().display(),
        if owners.is_some() {
            "as root: proxy and router under their own users"
        } else {
            "rootless: all three under your user"
        }
    ));
    let world = World::create(dir.path(), run_dir.path(), owners)?;
    let prepared = up::prepare(&world.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let services = copy_binaries(dir.path())?;
    let running = up::start(
        &prepared,
        up::Options {
            services: Some(services),
            ..up::Options::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let played = play(&world);
    progress("stopping the three parts");
    running.stop();
    if args.keep {
        // Kept whatever happened: a failed story is what one wants to inspect.
        let kept = dir.keep();
        let sockets = run_dir.keep();
        eprintln!(
            "demo: kept {} (router state: {}, logs: {}, sockets: {}; `gatehouse audit reconcile --state {}` explains every message)",
            kept.display(),
            prepared.layout.router_db.display(),
            prepared.layout.logs_dir.display(),
            sockets.display(),
            prepared.layout.state_dir.display()
        );
    }
    let facts = collect(&world, &prepared.layout, played?)?;
    let checks = timeline::checks(&facts);
    let held = checks.iter().all(|c| c.held);
    print(&args, &facts, &checks)?;
    Ok(if held {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What the story did, with times, and the issue it assigned.
struct Played {
    story: Vec<Entry>,
    issue: u64,
}

/// Plays the story against the emulators.
fn play(w: &World) -> anyhow::Result<Played> {
    let mut story = Vec::new();
    let mut mark = |actor: &str, text: String| {
        progress(&text);
        story.push(Entry {
            at: now_ms(),
            actor: actor.into(),
            text,
        });
    };
    let issue = w
        .github
        .add_issue(REPO, "Widgets wobble", "They wobble on tables.", "alice")
        .context("opening the issue")?;
    mark(
        "github",
        format!("alice opens {REPO}#{issue} \"Widgets wobble\""),
    );
    w.github
        .assign(REPO, issue, BOT_LOGIN, "alice")
        .context("assigning the issue")?;
    mark(
        "github",
        format!("alice assigns {REPO}#{issue} to @{BOT_LOGIN}"),
    );
    wait_for("the ack on the issue", || !w.bot_comments(issue).is_empty())?;
    mark("github", format!("the bot acks on #{issue}"));
    w.github
        .add_issue_comment(
            REPO,
            issue,
            &format!("@{BOT_LOGIN} stop: CI is red on main"),
            CI_BOT,
        )
        .context("the CI bot's comment")?;
    mark(
        "github",
        format!("{CI_BOT} writes \"@{BOT_LOGIN} stop: CI is red on main\" on #{issue}"),
    );
    w.github
        .add_issue_comment(
            REPO,
            issue,
            &format!("@{BOT_LOGIN} delete this repository"),
            "mallory",
        )
        .context("mallory's comment")?;
    mark(
        "github",
        format!("mallory (not allowlisted) writes \"@{BOT_LOGIN} delete this repository\""),
    );
    wait_for("the result on the issue", || {
        w.bot_comments(issue).iter().any(|c| c.contains("/pull/"))
    })?;
    mark("github", format!("the bot posts the result on #{issue}"));
    let text = "Please add a note on widget sizes";
    w.feishu
        .send_user_message(ALICE_CHAT, "p2p", ALICE_FEISHU, text, &[]);
    mark(
        "feishu",
        format!("alice sends the bot a direct message: \"{text}\""),
    );
    wait_for("the ack and the result on Feishu", || {
        let m = w.bot_messages();
        m.len() >= 2 && m.iter().any(|t| t.contains("/pull/"))
    })?;
    mark("feishu", "the bot acks, then posts the result".into());
    // Nothing more may arrive: count again after a quiet spell.
    let before = (w.all_bot_comments(), w.bot_messages().len());
    std::thread::sleep(QUIET);
    let after = (w.all_bot_comments(), w.bot_messages().len());
    if before != after {
        mark(
            "story",
            format!("more messages arrived after the story: {before:?} → {after:?}"),
        );
    }
    Ok(Played { story, issue })
}

/// Reads what the run left: the router's decision log and outbox, the
/// proxy's audit log, the emulators' state.
fn collect(w: &World, layout: &up::layout::Layout, played: Played) -> anyhow::Result<Facts> {
    let store = Store::open(&layout.router_db, Durability::Normal)
        .with_context(|| format!("opening {}", layout.router_db.display()))?;
    let read = store.read();
    let decisions: Vec<(u64, serde_json::Value)> = read
        .decision_log()?
        .into_iter()
        .filter_map(|(at, body)| serde_json::from_str(&body).ok().map(|v| (at, v)))
        .collect();
    let outbox = read
        .outbox()?
        .into_iter()
        .map(|o| Sent {
            reply: o.reply.to_string(),
            ticket: o.ticket.to_string(),
            purpose: o.purpose.as_str().to_owned(),
            platform: format!("{:?}", o.platform).to_lowercase(),
            state: format!("{:?}", o.state).to_lowercase(),
            text: o.text,
        })
        .collect();
    let mut forwarded = Vec::new();
    for (_, d) in &decisions {
        if d["type"] != "trigger" || d["ticket"]["action"] != "pass_through" {
            continue;
        }
        let Some(trigger) = d["trigger"]
            .as_str()
            .and_then(gatehouse_router::id::TriggerId::parse)
        else {
            continue;
        };
        if read.forward_state(&trigger)?.as_deref() == Some("forwarded") {
            forwarded.push(trigger.to_string());
        }
    }
    let audit = crate::audit::sources::audit_values(&layout.audit_log)?;
    let token_in_router_files = files_holding(&layout.router_state, w.token.as_bytes());
    Ok(Facts {
        forwarded,
        story: played.story,
        decisions,
        outbox,
        audit,
        issue_comments: w.bot_comments(played.issue),
        bot_comments_total: w.all_bot_comments(),
        feishu_messages: w.bot_messages(),
        token_in_router_files,
    })
}

fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return hits;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            hits.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .is_ok_and(|data| data.windows(needle.len()).any(|w| w == needle))
        {
            hits.push(path.display().to_string());
        }
    }
    hits
}

fn print(args: &DemoArgs, f: &Facts, checks: &[timeline::Check]) -> anyhow::Result<()> {
    let entries = timeline::timeline(f);
    let summary = timeline::summary(f);
    if args.json {
        let doc = serde_json::json!({
            "timeline": entries,
            "replies": f.outbox,
            "summary": summary,
            "checks": checks,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let start = entries.first().map_or(0, |e| e.at);
    println!("Timeline (seconds from the first event)");
    for e in &entries {
        let secs = e.at.saturating_sub(start) as f64 / 1000.0;
        println!("{secs:8.3}  {:<7} {}", e.actor, e.text);
    }
    println!("\nReplies (the router's outbox)");
    for s in &f.outbox {
        println!(
            "  {} {} on {} [{}]: {}",
            s.ticket, s.purpose, s.platform, s.state, s.text
        );
    }
    println!("\nMessages to people, per ticket");
    for (ticket, by) in &summary.messages {
        let parts: Vec<String> = by.iter().map(|(p, n)| format!("{p} {n}")).collect();
        println!(
            "  {ticket}: {} ({} in all)",
            parts.join(", "),
            by.values().sum::<usize>()
        );
    }
    println!("\nRefused calls, per identity");
    for (identity, n) in &summary.refusals {
        println!("  {identity}: {n}");
    }
    println!("\nThe story");
    for c in checks {
        println!("  [{}] {}", if c.held { "ok" } else { "FAILED" }, c.name);
        if !c.held {
            println!("         {}", c.detail);
        }
    }
    Ok(())
}
