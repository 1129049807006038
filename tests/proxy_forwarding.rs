//! The proxy forwarding allowed calls with the credential injected, and
//! answering denied ones with the 403 JSON, driven by real curl.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gatehouse_testkit::proxy::{Harness, IDENTITY};
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
    let pull = h.own_pull();
    let (status, _, body) = h.curl(
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"body":"hello from the sandbox"}"#,
        ],
        &format!("https://api.github.com/repos/acme/widgets/issues/{pull}/comments?per_page=1"),
    );
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let audit = h.audit_lines();
    let request = audit
        .iter()
        .find(|l| l["event"] == "request" && l["outcome"]["rule"] == "issue-comment")
        .unwrap();
    assert_eq!(request["message"]["kind"], "github_issue_comment");
    assert_eq!(request["message"]["target"], format!("acme/widgets#{pull}"));
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

#[test]
fn feishu_send_gets_a_tenant_token_fetched_once_and_is_logged_as_a_message() {
    let h = Harness::start();
    let send = |text: &str| {
        h.curl(
            &[
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "-H",
                "Authorization: Bearer t-client-placeholder",
                "-d",
                &serde_json::json!({
                    "receive_id": "oc_team",
                    "msg_type": "text",
                    "content": serde_json::json!({"text": text}).to_string(),
                })
                .to_string(),
            ],
            "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id",
        )
    };
    let (status, _, body) = send("first");
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = send("second");
    assert_eq!(status, 200, "{body}");
    assert_eq!(h.feishu.tokens_issued(), 1, "the tenant token is cached");
    let messages = h.feishu.messages();
    assert_eq!(messages.len(), 2);
    let sends: Vec<_> = h
        .feishu
        .requests()
        .into_iter()
        .filter(|r| r.path == "/open-apis/im/v1/messages")
        .collect();
    assert_eq!(sends.len(), 2);
    for r in &sends {
        let auth = r.authorization().unwrap();
        assert!(auth.starts_with("Bearer t-"), "{auth}");
        assert_ne!(auth, "Bearer t-client-placeholder");
    }
    assert!(!body.contains(&h.feishu_secret));
    let audit = h.audit_lines();
    let sent: Vec<_> = audit
        .iter()
        .filter(|l| l["message"]["kind"] == "feishu_message")
        .collect();
    assert_eq!(sent.len(), 2, "{audit:?}");
    assert_eq!(sent[0]["message"]["target"], "chat_id:oc_team");
    let ids: Vec<_> = audit
        .iter()
        .filter(|l| l["event"] == "completion" && l["message_id"].is_string())
        .map(|l| l["message_id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.contains(&messages[0].message_id), "{ids:?}");
}

#[test]
fn ci_log_redirect_to_another_host_is_followed_inside_the_proxy() {
    let h = Harness::start();
    let (_, job) = h
        .github
        .add_job(
            "acme/widgets",
            "build",
            "abc123",
            "failure",
            "step 3 failed: oops\n",
        )
        .unwrap();
    let (status, head, body) = h.curl(
        &[],
        &format!("https://api.github.com/repos/acme/widgets/actions/jobs/{job}/logs"),
    );
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(body.contains("step 3 failed: oops"), "{body}");
    let seen = h.github.requests();
    let follow = seen.iter().find(|r| r.path.starts_with("/_logs/")).unwrap();
    assert_eq!(
        follow.header("host"),
        Some("pipelines.actions.githubusercontent.com")
    );
    assert!(
        follow.authorization().is_none(),
        "no credential on the storage host"
    );
    // The followed request is on record as one of its own, its line
    // before it was sent; the first one's completion names it.
    let lines = h.audit_lines();
    let first = lines
        .iter()
        .find(|l| l["event"] == "request" && l["path"].as_str().unwrap().ends_with("/logs"))
        .unwrap();
    let followed = lines
        .iter()
        .find(|l| l["event"] == "request" && l["host"] == "pipelines.actions.githubusercontent.com")
        .unwrap_or_else(|| panic!("no line for the followed request: {lines:?}"));
    assert!(
        followed["path"].as_str().unwrap().starts_with("/_logs/"),
        "{followed}"
    );
    assert_eq!(followed["identity"], first["identity"]);
    assert_eq!(followed["outcome"], first["outcome"]);
    assert!(followed["seq"].as_u64() > first["seq"].as_u64());
    let completion_of = |id: &serde_json::Value| {
        lines
            .iter()
            .find(|l| l["event"] == "completion" && l["request_id"] == *id)
            .unwrap_or_else(|| panic!("no completion for {id}: {lines:?}"))
    };
    let redirected = completion_of(&first["request_id"]);
    assert_eq!(redirected["status"], 302, "{redirected}");
    let named = format!("followed as {}", followed["request_id"].as_str().unwrap());
    assert!(
        redirected["error"].as_str().unwrap().contains(&named),
        "{redirected}"
    );
    let answered = completion_of(&followed["request_id"]);
    assert_eq!(answered["status"], 200, "{answered}");
    assert!(
        answered["bytes_received"].as_u64().unwrap() > 0,
        "{answered}"
    );
    let report = gatehouse_proxy::audit::verify(&h.audit_path).unwrap();
    assert!(
        report.open_requests.is_empty(),
        "{:?}",
        report.open_requests
    );
}
