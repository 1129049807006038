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
