//! kill -9 in the middle of a replay: every decision that was printed is in
//! the store whole, and a restarted router issues no id twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use gatehouse_router::id::{TicketId, TriggerId};
use gatehouse_router::store::{Durability, Store};
use gatehouse_testkit::router::*;
use serde_json::Value;

#[test]
fn a_killed_router_loses_no_printed_decision_and_reuses_no_id() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, generated_events(40_000, 500, 1_767_225_600_000)).unwrap();
    let mut child = gatehouse()
        .args(["router", "replay", "--policy"])
        .arg(example("policy.toml"))
        .arg("--state")
        .arg(&state)
        .arg("--events")
        .arg(&events)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut printed = Vec::new();
    let reader = BufReader::new(child.stdout.take().unwrap());
    for line in reader.lines() {
        printed.push(line.unwrap());
        if printed.len() == 3_000 {
            child.kill().unwrap(); // SIGKILL
            break;
        }
    }
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the replay finished before it was killed; make it longer"
    );

    let store = Store::open(&state, Durability::Normal).unwrap();
    let read = store.read();
    let recorded = read.decisions().unwrap();
    assert!(
        recorded.len() >= printed.len(),
        "{} recorded < {} printed",
        recorded.len(),
        printed.len()
    );
    // Every recorded decision is whole: its trigger and ticket exist.
    let mut max_trigger: Option<TriggerId> = None;
    for body in &recorded {
        let d: Value = serde_json::from_str(body).unwrap();
        if d["type"] != "trigger" {
            continue;
        }
        let id = TriggerId::parse(d["trigger"].as_str().unwrap()).unwrap();
        read.trigger(&id).unwrap();
        if let Some(t) = d["ticket"]["ticket"].as_str() {
            read.ticket(&TicketId::parse(t).unwrap()).unwrap();
        }
        max_trigger = max_trigger.max(Some(id));
    }
    // Every printed decision was committed.
    for line in &printed {
        let d: Value = serde_json::from_str(line).unwrap();
        read.trigger(&TriggerId::parse(d["trigger"].as_str().unwrap()).unwrap())
            .unwrap();
    }
    drop(store);

    // Restart with inputs from the past: the ids still move forward.
    let more = dir.path().join("more.jsonl");
    std::fs::write(&more, generated_events(10, 3, 1)).unwrap();
    let after = replay(&example("policy.toml"), &state, &more);
    let max_trigger = max_trigger.unwrap();
    for d in &after {
        let id = d["trigger"].as_str().unwrap();
        assert!(
            id > max_trigger.as_str(),
            "{id} reused or before {max_trigger}"
        );
    }
}
