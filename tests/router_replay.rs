//! `gatehouse router replay`: determinism, the decisions on the example
//! scenario, restarts, and a fail-closed policy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use gatehouse_testkit::router::*;
use serde_json::Value;

fn by_line(out: &[Value], n: u64) -> &Value {
    out.iter()
        .find(|v| v["line"] == n)
        .unwrap_or_else(|| panic!("no output for line {n}"))
}

#[test]
fn same_input_and_empty_state_give_byte_identical_output() {
    let mut outputs = Vec::new();
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let out = run(gatehouse()
            .args(["router", "replay", "--policy"])
            .arg(example("policy.toml"))
            .arg("--state")
            .arg(dir.path().join("state.db"))
            .arg("--events")
            .arg(example("events.jsonl")));
        assert!(out.status.success(), "{}", stderr(&out));
        outputs.push(out.stdout);
    }
    assert!(!outputs[0].is_empty());
    assert_eq!(outputs[0], outputs[1], "replay output differs between runs");
    let input_lines = std::fs::read_to_string(example("events.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        String::from_utf8_lossy(&outputs[0]).lines().count(),
        input_lines
    );
}

#[test]
fn the_example_scenario_decides_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let out = replay(
        &example("policy.toml"),
        &dir.path().join("state.db"),
        &example("events.jsonl"),
    );
    let l = |n| by_line(&out, n);
    // An allowlisted person mentioning the bot opens a ticket.
    assert_eq!(l(1)["admission"], "explicit");
    assert_eq!(l(1)["ticket"]["action"], "opened");
    let ticket = l(1)["ticket"]["ticket"].as_str().unwrap().to_owned();
    assert!(ticket.starts_with("tkt_"));
    assert_eq!(
        l(1)["ticket"]["mandate"]["scope"]["sandbox_profile"],
        "rust"
    );
    // ack once.
    assert!(l(2)["allowed"]["reply"]
        .as_str()
        .unwrap()
        .starts_with("rpl_"));
    assert_eq!(l(3)["refused"]["refusal"], "already_acked");
    // An unlisted person quoting a grant is ignored.
    assert_eq!(
        (l(4)["admission"].as_str(), l(4)["reason"].as_str()),
        (Some("ignore"), Some("not_allowlisted"))
    );
    // A listed bot's CI result passes through; it cannot stop the ticket.
    assert_eq!(l(5)["ticket"]["action"], "pass_through");
    assert_eq!(l(6)["refused"]["refusal"], "bot_cannot_stop");
    // result before ready; attention that is not the question.
    assert_eq!(l(7)["refused"]["refusal"], "not_ready");
    assert_eq!(l(10)["refused"]["refusal"], "not_attention");
    assert!(l(11)["allowed"].is_object());
    assert_eq!(l(12)["allowed"]["target"]["message_id"], "ic_3");
    assert_eq!(l(14)["allowed"]["purpose"], "result");
    assert_eq!(l(15)["allowed"]["state"], "ended");
    // After a policy without alice, bob writing does not resume alice's ticket.
    assert_eq!(l(17)["ticket"]["action"], "stays_ended");
    assert_eq!(l(17)["ticket"]["reason"]["reason"], "requester_removed");
    // That policy lists no bots: CI is an unlisted bot.
    assert_eq!(l(18)["reason"], "unlisted_bot");
    // Back to the example policy: the auto rule opens a ticket for CI on main.
    assert_eq!(
        l(19)["version"],
        l(1)["ticket"]["mandate"]["policy_version"]
    );
    assert_eq!(l(20)["ticket"]["action"], "opened");
    assert_eq!(
        l(20)["ticket"]["mandate"]["matched_rules"][0],
        "ci-fails-on-main"
    );
    // Observe (the default) records would-accept and opens nothing.
    assert_eq!(l(22)["ticket"]["why"], "not_accepted");
    let would: Vec<&Value> = l(22)["eval"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["verdict"] == "would_accept")
        .collect();
    assert_eq!(would.len(), 1);
    assert_eq!(would[0]["rule"], "bug-reports");
    assert_eq!(would[0]["mode"], "observe");
    // ack to a bot's message is refused; unknown ids and unknown fields are rejected.
    assert_eq!(l(24)["refused"]["refusal"], "not_human_message");
    assert_eq!(l(25)["type"], "rejected");
    assert!(l(26)["error"]
        .as_str()
        .unwrap()
        .contains("unknown field `extra`"));
}

#[test]
fn ack_once_and_fresh_ids_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let first = replay(&example("policy.toml"), &state, &example("events.jsonl"));
    let ticket = first[0]["ticket"]["ticket"].as_str().unwrap();
    let trigger = first[0]["trigger"].as_str().unwrap();
    let max_trigger = first
        .iter()
        .filter_map(|v| v["trigger"].as_str())
        .max()
        .unwrap()
        .to_owned();
    // Second process, same state, earlier clock: no second ack, no reused id.
    let events = dir.path().join("more.jsonl");
    std::fs::write(
        &events,
        format!(
            "{{\"type\":\"trigger\",\"at\":5,\"source\":\"github\",\"kind\":\"issue_comment\",\"thread\":\"gh:acme/widgets#412\",\"message_id\":\"ic_again\",\"repo\":\"acme/widgets\",\"sender\":{{\"id\":\"1001\",\"login\":\"alice\"}},\"text\":\"one more thing\"}}\n\
             {{\"type\":\"reply\",\"at\":5,\"ticket\":\"{ticket}\",\"purpose\":\"ack\",\"in_reply_to\":\"{trigger}\",\"text\":\"On it, again.\"}}\n\
             {{\"type\":\"trigger\",\"at\":5,\"source\":\"github\",\"kind\":\"issue_comment\",\"thread\":\"gh:acme/widgets#9\",\"message_id\":\"z\",\"repo\":\"acme/widgets\",\"sender\":{{\"id\":\"1001\",\"login\":\"alice\"}},\"text\":\"hi\"}}\n"
        ),
    )
    .unwrap();
    let second = replay(&example("policy.toml"), &state, &events);
    // Alice writing on the ended ticket's thread resumes it, so the ack is
    // refused for having been sent before, not for the ticket having ended.
    assert_eq!(second[0]["ticket"]["action"], "resumed", "{}", second[0]);
    assert_eq!(second[1]["refused"]["refusal"], "already_acked");
    let new_trigger = second[2]["trigger"].as_str().unwrap();
    assert!(
        new_trigger > max_trigger.as_str(),
        "{new_trigger} <= {max_trigger}"
    );
    let export = run(gatehouse()
        .args(["replies", "export", "--state"])
        .arg(&state));
    assert_eq!(
        stdout(&export).matches("\"purpose\":\"ack\"").count(),
        1,
        "still the first run's one ack"
    );
}

#[test]
fn an_invalid_policy_is_refused_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let text = std::fs::read_to_string(example("policy.toml")).unwrap();
    std::fs::write(
        &policy,
        text.replace("mode = \"auto\"", "mode = \"auto\"\nallow_everyone = true"),
    )
    .unwrap();
    let out = run(gatehouse()
        .args(["router", "replay", "--policy"])
        .arg(&policy)
        .arg("--state")
        .arg(dir.path().join("state.db"))
        .arg("--events")
        .arg(example("events.jsonl")));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("policy.toml") && err.contains("allow_everyone"),
        "{err}"
    );
    assert!(
        stdout(&out).is_empty(),
        "no decisions under an invalid policy"
    );
}
