//! People's words are theirs: through the identity socket, a worker edits
//! or closes only what its own identity created through the proxy. Each
//! attempt on a person's comment or pull request, on one the bot account
//! made outside this identity, or on another identity's, is refused (403,
//! audited, nothing reaches GitHub), beside the control that the worker's
//! own comment and pull request can be edited and closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use gatehouse_testkit::proxy::{api_call, branches, identity, Harness, REPO};
use serde_json::Value;

const BOT: &str = "gatehouse-test[bot]";

/// One request through `socket` (an identity's) to api.github.com.
fn call(h: &Harness, socket: &Path, method: &str, path: &str, body: &str) -> (u16, Value) {
    api_call(socket, &h.proxy_ca, method, path, body)
}

fn edit_comment(h: &Harness, socket: &Path, id: &str) -> (u16, Value) {
    let path = format!("/repos/{REPO}/issues/comments/{id}");
    call(h, socket, "PATCH", &path, r#"{"body":"rewritten"}"#)
}

fn assert_refused(h: &Harness, (status, answer): (u16, Value), what: &str) {
    assert_eq!(status, 403, "{what}: {answer}");
    assert_eq!(answer["error"], "gatehouse_denied", "{what}");
    let reason = answer["reason"].as_str().unwrap();
    assert!(
        reason.contains("not created by this identity"),
        "{what}: {reason}"
    );
    assert!(
        h.github.requests().iter().all(|r| r.method != "PATCH"),
        "{what}: a PATCH reached GitHub"
    );
}

fn comment_body(h: &Harness, id: &str) -> String {
    h.github
        .comments()
        .into_iter()
        .find(|c| c.id.to_string() == id)
        .unwrap()
        .body
}

#[test]
fn a_worker_edits_only_the_comments_its_identity_created() {
    let h = Harness::start();
    let person = h
        .github
        .add_issue_comment(REPO, 1, "do not merge", "alice")
        .unwrap();
    let bot_elsewhere = h
        .github
        .add_issue_comment(REPO, 1, "by the bot", BOT)
        .unwrap();
    let other_socket = {
        let _runtime = h.rt.enter();
        h.proxy.add_identity(identity("tkt_other")).unwrap()
    };
    // Each identity comments on a pull request it opened (the only place
    // a worker may speak).
    branches(&h.github, REPO, &["gatehouse/other", "gatehouse/mine"]);
    let open = |socket: &Path, head: &str| {
        let body = format!(r#"{{"title":"t","head":"{head}","base":"main"}}"#);
        let (status, answer) = call(&h, socket, "POST", &format!("/repos/{REPO}/pulls"), &body);
        assert_eq!(status, 201, "{answer}");
        format!("/repos/{REPO}/issues/{}/comments", answer["number"])
    };
    let path = open(&other_socket, "gatehouse/other");
    let (status, created) = call(&h, &other_socket, "POST", &path, r#"{"body":"other's"}"#);
    assert_eq!(status, 201);
    let others = created["id"].to_string();
    h.github.clear_requests();

    for (id, what) in [
        (person.to_string(), "a person's comment"),
        (
            bot_elsewhere.to_string(),
            "the bot's comment made outside this identity",
        ),
        (others.clone(), "another identity's comment"),
        ("999999".to_string(), "a comment that does not exist"),
    ] {
        assert_refused(&h, edit_comment(&h, &h.socket, &id), what);
    }
    assert_eq!(comment_body(&h, &person.to_string()), "do not merge");

    // Control: its own comment, created through the proxy, can be edited.
    let path = open(&h.socket, "gatehouse/mine");
    let (status, mine) = call(&h, &h.socket, "POST", &path, r#"{"body":"mine"}"#);
    assert_eq!(status, 201);
    let mine = mine["id"].to_string();
    let (status, answer) = edit_comment(&h, &h.socket, &mine);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(comment_body(&h, &mine), "rewritten");
    // And the other identity its own.
    assert_eq!(edit_comment(&h, &other_socket, &others).0, 200);

    let denials: Vec<Value> = h
        .audit_lines()
        .into_iter()
        .filter(|l| l["outcome"]["decision"] == "deny")
        .collect();
    assert_eq!(denials.len(), 4, "{denials:?}");
    assert!(denials.iter().all(|d| d["outcome"]["reason"]
        .as_str()
        .unwrap()
        .contains("not created by this identity")));
}

#[test]
fn a_worker_edits_or_closes_only_the_pull_requests_its_identity_opened() {
    let h = Harness::start();
    branches(&h.github, REPO, &["feature", "gatehouse/fix"]);
    let person = h
        .github
        .add_pull(REPO, "Person's work", "feature", "main", "alice")
        .unwrap();
    h.github.clear_requests();
    let close = r#"{"state":"closed"}"#;
    let pull = |n: &str| format!("/repos/{REPO}/pulls/{n}");
    assert_refused(
        &h,
        call(&h, &h.socket, "PATCH", &pull(&person.to_string()), close),
        "closing a person's pull request",
    );

    // Control: a pull request it opened through the proxy can be closed.
    let body = r#"{"title":"Fix","head":"gatehouse/fix","base":"main","body":"b"}"#;
    let (status, opened) = call(&h, &h.socket, "POST", &format!("/repos/{REPO}/pulls"), body);
    assert_eq!(status, 201, "{opened}");
    let number = opened["number"].to_string();
    let (status, answer) = call(&h, &h.socket, "PATCH", &pull(&number), close);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "closed");
}
