//! `gatehouse tickets`, `threads` and `replies export` over a replayed state.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::collections::BTreeSet;
use std::process::Command;

use gatehouse_testkit::router::*;
use serde_json::Value;

fn replayed() -> (tempfile::TempDir, std::path::PathBuf, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let out = replay(&example("policy.toml"), &state, &example("events.jsonl"));
    (dir, state, out)
}

#[test]
fn tickets_list_and_show_by_id() {
    let (_dir, state, out) = replayed();
    let opened: Vec<&str> = out
        .iter()
        .filter(|v| v["ticket"]["action"] == "opened")
        .map(|v| v["ticket"]["ticket"].as_str().unwrap())
        .collect();
    assert_eq!(opened.len(), 2);
    let list = run(gatehouse()
        .args(["tickets", "list", "--json", "--state"])
        .arg(&state));
    assert!(list.status.success(), "{}", stderr(&list));
    let tickets: Vec<Value> = serde_json::from_str(&stdout(&list)).unwrap();
    let ids: Vec<&str> = tickets.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, opened);
    for t in &tickets {
        let id = t["id"].as_str().unwrap();
        let show = run(gatehouse()
            .args(["tickets", "show", id, "--json", "--state"])
            .arg(&state));
        let shown: Value = serde_json::from_str(&stdout(&show)).unwrap();
        assert_eq!(&shown, t, "show returns exactly the listed ticket");
    }
    let table = stdout(&run(gatehouse()
        .args(["tickets", "list", "--state"])
        .arg(&state)));
    assert!(table.starts_with("TICKET"), "{table}");
    assert!(
        table.contains(opened[0]) && table.contains("merged"),
        "{table}"
    );
    let readable = stdout(&run(gatehouse()
        .args(["tickets", "show", opened[1], "--state"])
        .arg(&state)));
    assert!(readable.contains("ci-fails-on-main"), "{readable}");
}

#[test]
fn unknown_and_malformed_ids_fail() {
    let (_dir, state, _) = replayed();
    let missing = run(gatehouse()
        .args(["tickets", "show", "tkt_000000000000000000", "--state"])
        .arg(&state));
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("no ticket with id `tkt_000000000000000000`"),
        "{}",
        stderr(&missing)
    );
    assert!(stdout(&missing).is_empty());
    let malformed = run(gatehouse()
        .args(["threads", "show", "tkt_000000000000000000", "--state"])
        .arg(&state));
    assert!(!malformed.status.success());
    assert!(stderr(&malformed).contains("not a thread id"));
    let no_state = run(gatehouse().args(["tickets", "list", "--state", "/nonexistent/state.db"]));
    assert!(!no_state.status.success());
    assert!(stderr(&no_state).contains("no router state"));
}

#[test]
fn threads_page_with_a_cursor() {
    let (_dir, state, out) = replayed();
    let thread = out[0]["thread"].as_str().unwrap();
    let expected: Vec<&str> = out
        .iter()
        .filter(|v| v["type"] == "trigger" && v["thread"] == thread)
        .map(|v| v["trigger"].as_str().unwrap())
        .collect();
    assert!(expected.len() > 4);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut cmd: Command = gatehouse();
        cmd.args([
            "threads", "show", thread, "--limit", "2", "--json", "--state",
        ])
        .arg(&state);
        if let Some(c) = &cursor {
            cmd.args(["--cursor", c]);
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "{}", stderr(&o));
        let page: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let items = page["triggers"].as_array().unwrap();
        if items.is_empty() {
            break;
        }
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|t| t["id"].as_str().unwrap().to_owned()));
        cursor = Some(page["next_cursor"].as_str().unwrap().to_owned());
    }
    assert_eq!(seen, expected);
    let table = stdout(&run(gatehouse()
        .args(["threads", "show", thread, "--state"])
        .arg(&state)));
    assert!(
        table.contains("ignore: not_allowlisted") && table.contains("next: --cursor"),
        "{table}"
    );
}

fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn replies_export_is_the_reply_log_as_jsonl() {
    let (_dir, state, out) = replayed();
    let export = run(gatehouse()
        .args(["replies", "export", "--state"])
        .arg(&state));
    assert!(export.status.success(), "{}", stderr(&export));
    let records = lines(&stdout(&export));
    let allowed: Vec<&Value> = out
        .iter()
        .filter(|v| v["type"] == "reply" && v["allowed"].is_object())
        .map(|v| &v["allowed"])
        .collect();
    assert_eq!(records.len(), allowed.len());
    for (r, a) in records.iter().zip(&allowed) {
        assert_eq!(&r, a);
        let keys: BTreeSet<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from([
                "reply",
                "ticket",
                "thread_key",
                "purpose",
                "target",
                "text_sha256",
                "words",
                "at"
            ])
        );
        assert!(r["target"]["platform"].is_string() && r["target"]["message_id"].is_string());
    }
    // The hash is SHA-256 of the exact text.
    assert_eq!(records[0]["purpose"], "ack");
    assert_eq!(records[0]["text_sha256"], sha256_hex("On it."));
    assert_eq!(records[0]["words"], 2);
}

// === router stats ===

use gatehouse_router::engine::Router;
use gatehouse_router::eval::{Judge, JudgeError, Judgement};
use gatehouse_router::policy::{Policy, Rule};
use gatehouse_router::store::{Durability, Store};
use gatehouse_router::trigger::{Address, AddressKind, Sender, Source, TriggerInput, TriggerKind};

const STATS_POLICY: &str = r#"
identity = { github = { login = "gatehouse-bot", id = 900 } }

[[people]]
name = "alice"
team = "core"
github = { login = "alice", id = 101 }

[teams.core]
default_repo = "acme/widgets"
[teams.core.repos."acme/widgets"]
sandbox_profile = "default"

[[rules]]
id = "bug-reports"
team = "core"
text = "Someone describes a reproducible bug."
mode = "observe"
when = { kinds = ["issue_comment"], author = "human" }

[[rules]]
id = "docs"
team = "core"
text = "Someone asks for a documentation fix."
mode = "observe"
when = { kinds = ["issue_comment"], author = "human" }
"#;

/// Matches `bug-reports` on "crash", `docs` on "docs".
struct WordJudge;

impl Judge for WordJudge {
    fn judge(&self, rule: &Rule, t: &TriggerInput) -> Result<Judgement, JudgeError> {
        let word = if rule.id == "docs" { "docs" } else { "crash" };
        Ok(Judgement {
            matched: t.text.contains(word),
            reason: format!("looked for {word}"),
        })
    }
}

fn alice_says(issue: u32, text: &str, mention: bool) -> TriggerInput {
    TriggerInput {
        source: Source::Github,
        kind: TriggerKind::IssueComment,
        thread: format!("gh:acme/widgets#{issue}"),
        message_id: format!("ic_{issue}_{}", text.len()),
        sender: Sender {
            id: "101".into(),
            login: Some("alice".into()),
            name: "alice".into(),
            is_bot: false,
        },
        addressed: if mention {
            vec![Address {
                kind: AddressKind::Mention,
                account: "gatehouse-bot".into(),
            }]
        } else {
            Vec::new()
        },
        chat: None,
        repo: Some("acme/widgets".into()),
        labels: Vec::new(),
        branch: None,
        text: text.into(),
        head_ticket: None,
        pull_url: None,
        raw: None,
    }
}

const T0: u64 = 1_764_547_200_000;
const HOUR: u64 = 3_600_000;

/// A state with observe-mode evidence, decided by the real engine.
fn observed(dir: &std::path::Path) -> std::path::PathBuf {
    let db = dir.join("router.db");
    let store = Store::open(&db, Durability::Normal).unwrap();
    let policy = Policy::from_toml("policy.toml", STATS_POLICY).unwrap();
    let mut r = Router::new(store, policy, WordJudge, T0).unwrap();
    for (hours, issue, text, mention) in [
        // bug-reports would accept; a person then asks (docs missed it).
        (1, 1, "it crashes on save", false),
        (2, 1, "@gatehouse-bot please fix this", true),
        // bug-reports would accept; nobody asks.
        (3, 2, "the crash again", false),
        // docs would accept, a person then asks (bug-reports missed it).
        (240, 3, "the docs have a typo", false),
        (241, 3, "@gatehouse-bot fix the typo", true),
    ] {
        r.on_trigger(alice_says(issue, text, mention), T0 + hours * HOUR)
            .unwrap();
    }
    db
}

fn stats_json(args: &[&str], state: &std::path::Path) -> Value {
    let out = run(gatehouse()
        .args(["router", "stats", "--json", "--state"])
        .arg(state)
        .args(args));
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn counts(v: &Value) -> Vec<(String, u64, u64, u64, u64)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (
                r["rule"].as_str().unwrap().to_owned(),
                n("would_accept"),
                n("threads"),
                n("then_requested"),
                n("missed"),
            )
        })
        .collect()
}

#[test]
fn router_stats_counts_would_accepts_requests_and_misses() {
    let dir = tempfile::tempdir().unwrap();
    let db = observed(dir.path());
    let c = |rule: &str, w, t, r, m| (rule.to_owned(), w, t, r, m);
    assert_eq!(
        counts(&stats_json(&[], &db)),
        [c("bug-reports", 2, 2, 1, 1), c("docs", 1, 1, 1, 1)]
    );
    // --since (ms since the epoch): only the last days count.
    let since = (T0 + 200 * HOUR).to_string();
    assert_eq!(
        counts(&stats_json(&["--since", &since], &db)),
        [c("bug-reports", 0, 0, 0, 1), c("docs", 1, 1, 1, 0)]
    );
    // A window shorter than the hour between would-accept and request.
    assert_eq!(
        counts(&stats_json(&["--window", "30m"], &db)),
        [c("bug-reports", 2, 2, 0, 0), c("docs", 1, 1, 0, 0)]
    );
    // The state's directory works as well; the table names every column.
    let table = run(gatehouse()
        .args(["router", "stats", "--state"])
        .arg(dir.path()));
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    let header = text.lines().next().unwrap();
    for col in [
        "rule",
        "would_accept",
        "threads",
        "then_requested",
        "missed",
    ] {
        assert!(header.contains(col), "{text}");
    }
    assert!(
        text.lines().any(
            |l| l.split_whitespace().collect::<Vec<_>>() == ["bug-reports", "2", "2", "1", "1"]
        ),
        "{text}"
    );
}

#[test]
fn router_stats_refuses_a_missing_state_and_bad_values() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere");
    let out = run(gatehouse()
        .args(["router", "stats", "--state"])
        .arg(&missing));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    // Read-only: nothing was created.
    assert!(!missing.exists());
    let out = run(gatehouse()
        .args(["router", "stats", "--state"])
        .arg(dir.path()));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("holds no router.db"),
        "{}",
        stderr(&out)
    );
    let db = observed(dir.path());
    for (flag, value) in [("--since", "yesterday"), ("--window", "7w")] {
        let out = run(gatehouse()
            .args(["router", "stats", "--state"])
            .arg(&db)
            .args([flag, value]));
        assert!(!out.status.success(), "{flag} {value}");
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
    }
    // --help explains each column.
    let help = stdout(&run(gatehouse().args(["router", "stats", "--help"])));
    for col in [
        "would_accept",
        "threads",
        "then_requested",
        "missed",
        "--since",
        "--window",
    ] {
        assert!(help.contains(col), "{help}");
    }
}
