//! The proxy forwarding allowed calls with the credential injected, and
//! answering denied ones with the 403 JSON, driven by real curl.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod proxy_support;

use proxy_support::{Harness, IDENTITY};
use serde_json::Value;

#[test]
fn allowed_get_gets_the_token_and_never_the_clients_authorization() {
    let h = Harness::start();
    let (status, _, body) = h.curl(
        &[
            "-H",
            "Authorization: token client-supplied-value",
            "-H",
            "Cookie: session=client",
            "-H",
            "X-Forwarded-For: 10.0.0.1",
        ],
        "https://api.github.com/repos/acme/widgets/issues/1",
    );
    assert_eq!(status, 200, "{body}");
    let issue: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(issue["title"], "Widgets wobble");
    let seen = h.github.requests();
    let last = seen.last().unwrap();
    assert_eq!(
        last.authorization(),
        Some(format!("Bearer {}", h.token).as_str())
    );
    assert_eq!(last.header_all("authorization").len(), 1);
    assert!(last.header("cookie").is_none());
    assert!(last.header("x-forwarded-for").is_none());
    assert_eq!(last.header("host"), Some("api.github.com"));
    // The upstream answer contains no secret, and the sandbox saw none.
    assert!(!body.contains(&h.token));
}

#[test]
fn denied_path_gets_the_403_json_and_an_audit_line() {
    let h = Harness::start();
    let (status, _, body) = h.curl(
        &[],
        "https://api.github.com/repos/acme/secret-plans/issues/1",
    );
    assert_eq!(status, 403, "{body}");
    let denial: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(denial["error"], "gatehouse_denied");
    assert_eq!(denial["method"], "GET");
    assert_eq!(denial["host"], "api.github.com");
    assert_eq!(denial["path"], "/repos/acme/secret-plans/issues/1");
    assert_eq!(
        denial["rule_sets_tried"],
        serde_json::json!(["test-worker"])
    );
    assert!(denial["reason"].as_str().unwrap().len() > 10);
    assert!(
        h.github.requests().is_empty(),
        "nothing reached the upstream"
    );
    let audit = h.audit_lines();
    let line = audit
        .iter()
        .find(|l| l["outcome"]["decision"] == "deny")
        .unwrap();
    assert_eq!(line["identity"], IDENTITY);
    assert_eq!(line["path"], "/repos/acme/secret-plans/issues/1");
}

#[test]
fn comment_is_recorded_as_a_message_with_the_created_id() {
    let h = Harness::start();
    let (status, _, body) = h.curl(
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"body":"hello from the sandbox"}"#,
        ],
        "https://api.github.com/repos/acme/widgets/issues/1/comments?per_page=1",
    );
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let audit = h.audit_lines();
    let request = audit
        .iter()
        .find(|l| l["event"] == "request" && l["outcome"]["rule"] == "issue-comment")
        .unwrap();
    assert_eq!(request["message"]["kind"], "github_issue_comment");
    assert_eq!(request["message"]["target"], "acme/widgets#1");
    assert_eq!(request["query_keys"], serde_json::json!(["per_page"]));
    assert_eq!(
        request["message"]["body_sha256"].as_str().unwrap().len(),
        64
    );
    let done = audit
        .iter()
        .find(|l| l["event"] == "completion" && l["request_id"] == request["request_id"])
        .unwrap();
    assert_eq!(done["status"], 201);
    assert_eq!(done["message_id"], created["id"].to_string());
    // No body text and no query value in the log.
    let text = std::fs::read_to_string(&h.audit_path).unwrap();
    assert!(!text.contains("hello from the sandbox"));
}

#[test]
fn leaf_certificates_are_minted_once_per_host() {
    let h = Harness::start();
    for _ in 0..2 {
        let (status, _, _) = h.curl(&[], "https://api.github.com/repos/acme/widgets/issues/1");
        assert_eq!(status, 200);
    }
    assert_eq!(h.proxy.ca().cached_leaves(), 1);
}
