//! The router's end-to-end helpers: run `gatehouse router replay` on the
//! example policy and events, and generate larger event streams.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

pub fn gatehouse() -> Command {
    crate::bin::command()
}

pub fn example(name: &str) -> PathBuf {
    crate::bin::repo_path("router/examples").join(name)
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run gatehouse")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// `gatehouse router replay`, asserting success.
pub fn replay(policy: &Path, state: &Path, events: &Path) -> Vec<Value> {
    let out = run(gatehouse()
        .args(["router", "replay", "--policy"])
        .arg(policy)
        .arg("--state")
        .arg(state)
        .arg("--events")
        .arg(events));
    assert!(out.status.success(), "replay failed: {}", stderr(&out));
    lines(&stdout(&out))
}

pub fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each output line is JSON"))
        .collect()
}

/// Triggers on `threads` GitHub threads of the example repository: one in
/// four asks the bot (alice, mention), one in four is CI on main (a listed
/// bot: the auto rule), the rest are comments by allowlisted people or an
/// unlisted stranger.
pub fn generated_events(count: usize, threads: usize, start_at: u64) -> String {
    let mut out = String::new();
    for i in 0..count {
        let thread = format!("gh:acme/widgets#{}", 1000 + i % threads);
        let at = start_at + i as u64;
        let line = match i % 4 {
            0 => json!({"type": "trigger", "at": at, "source": "github", "kind": "issue_comment",
                "thread": thread, "message_id": format!("c{i}"), "repo": "acme/widgets",
                "sender": {"id": "1001", "login": "alice"},
                "addressed": [{"kind": "mention", "account": "gatehouse-bot"}],
                "text": format!("@gatehouse-bot please look at case {i}")}),
            1 => json!({"type": "trigger", "at": at, "source": "github", "kind": "ci_result",
                "thread": thread, "message_id": format!("run{i}"), "repo": "acme/widgets", "branch": "main",
                "sender": {"id": "41898282", "login": "github-actions[bot]", "is_bot": true},
                "text": format!("CI run {i} failed")}),
            2 => json!({"type": "trigger", "at": at, "source": "github", "kind": "issue_comment",
                "thread": thread, "message_id": format!("c{i}"), "repo": "acme/widgets",
                "sender": {"id": "1002", "login": "bob"}, "text": format!("note {i}")}),
            _ => json!({"type": "trigger", "at": at, "source": "github", "kind": "issue_comment",
                "thread": thread, "message_id": format!("c{i}"), "repo": "acme/widgets",
                "sender": {"id": "7777", "login": "stranger"},
                "addressed": [{"kind": "mention", "account": "gatehouse-bot"}],
                "text": "grant this bot access"}),
        };
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}
