//! The Feishu emulator driven by real curl over TLS, trusting only the test CA.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gatehouse_emulators::{FeishuEmulator, FeishuHandle, FeishuOptions};
use serde_json::{json, Value};

const APP_ID: &str = "cli_test_app";
const APP_SECRET: &str = "test-app-secret-generated-for-this-test";

/// POST or GET `path` on open.feishu.cn; returns (HTTP status, JSON body).
fn call(
    emulator: &FeishuHandle,
    ca: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let port = emulator.addr().port();
    let mut command = Command::new("curl");
    command
        .args(["-sS", "-w", "\n%{http_code}", "-X", method, "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("open.feishu.cn:{port}:127.0.0.1")]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    if let Some(body) = body {
        command.args([
            "-H",
            "Content-Type: application/json; charset=utf-8",
            "--data",
            &body.to_string(),
        ]);
    }
    let output = command
        .arg(format!("https://open.feishu.cn:{port}{path}"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), serde_json::from_str(body).unwrap())
}

fn start(ttl: Duration) -> (tempfile::TempDir, FeishuHandle, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let options = FeishuOptions {
        token_ttl: ttl,
        ..FeishuOptions::default()
    }
    .app(APP_ID, APP_SECRET);
    let emulator = FeishuEmulator::start(options).unwrap();
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    (dir, emulator, ca)
}

fn tenant_token(emulator: &FeishuHandle, ca: &Path) -> (String, u64) {
    let (status, body) = call(
        emulator,
        ca,
        "POST",
        "/open-apis/auth/v3/tenant_access_token/internal",
        None,
        Some(json!({"app_id": APP_ID, "app_secret": APP_SECRET})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["code"], 0);
    assert_eq!(body["msg"], "ok");
    (
        body["tenant_access_token"].as_str().unwrap().to_owned(),
        body["expire"].as_u64().unwrap(),
    )
}

#[test]
fn token_send_reply_read_round_trip() {
    let (_dir, emulator, ca) = start(Duration::from_secs(7200));
    let (token, expire) = tenant_token(&emulator, &ca);
    assert!(token.starts_with("t-"));
    assert!((7190..=7200).contains(&expire), "{expire}");
    // Asked again with most of its life left, Feishu hands out the same token.
    assert_eq!(tenant_token(&emulator, &ca).0, token);
    assert_eq!(emulator.tokens_issued(), 1);

    let (status, info) = call(
        &emulator,
        &ca,
        "GET",
        "/open-apis/bot/v3/info",
        Some(&token),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(info["bot"]["open_id"], "ou_gatehouse_bot");

    let asked = emulator.add_user_message("oc_team", "ou_alice", "Can you look at #12?");
    let content = json!({"text": "Looking now."}).to_string();
    let (status, sent) = call(
        &emulator,
        &ca,
        "POST",
        &format!("/open-apis/im/v1/messages/{asked}/reply"),
        Some(&token),
        Some(json!({"msg_type": "text", "content": content, "uuid": "u-1"})),
    );
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["code"], 0);
    let reply_id = sent["data"]["message_id"].as_str().unwrap().to_owned();
    assert!(reply_id.starts_with("om_"));
    assert_eq!(sent["data"]["parent_id"], asked.as_str());
    assert_eq!(sent["data"]["root_id"], asked.as_str());
    assert_eq!(sent["data"]["chat_id"], "oc_team");
    assert_eq!(sent["data"]["sender"]["id"], APP_ID);
    assert_eq!(sent["data"]["body"]["content"], content.as_str());

    // Same uuid: the same message again, nothing new is sent.
    let (_, again) = call(
        &emulator,
        &ca,
        "POST",
        &format!("/open-apis/im/v1/messages/{asked}/reply"),
        Some(&token),
        Some(json!({"msg_type": "text", "content": content, "uuid": "u-1"})),
    );
    assert_eq!(again["data"]["message_id"], reply_id.as_str());

    let (status, direct) = call(
        &emulator,
        &ca,
        "POST",
        "/open-apis/im/v1/messages?receive_id_type=open_id",
        Some(&token),
        Some(json!({"receive_id": "ou_alice", "msg_type": "text", "content": content})),
    );
    assert_eq!(status, 200, "{direct}");
    let direct_id = direct["data"]["message_id"].as_str().unwrap().to_owned();

    let (status, read) = call(
        &emulator,
        &ca,
        "GET",
        &format!("/open-apis/im/v1/messages/{reply_id}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(read["data"]["items"][0]["message_id"], reply_id.as_str());

    let (_, listed) = call(
        &emulator,
        &ca,
        "GET",
        "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_team",
        Some(&token),
        None,
    );
    assert_eq!(listed["data"]["items"].as_array().unwrap().len(), 2);

    let messages = emulator.messages();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1].message_id, reply_id);
    assert_eq!(messages[2].message_id, direct_id);
    assert_eq!(
        messages[2].receive_id,
        Some(("open_id".into(), "ou_alice".into()))
    );

    let requests = emulator.requests();
    let reply_request = requests
        .iter()
        .find(|r| r.path.ends_with("/reply"))
        .unwrap();
    assert_eq!(
        reply_request.authorization(),
        Some(format!("Bearer {token}").as_str())
    );
    assert_eq!(reply_request.created_id.as_deref(), Some(reply_id.as_str()));
    assert_eq!(reply_request.host.as_deref(), Some("open.feishu.cn"));
    let token_request = &requests[0];
    assert!(
        token_request.body_text().contains(APP_SECRET),
        "the emulator records what it received"
    );
}

#[test]
fn bad_credentials_and_bad_tokens_are_refused() {
    let (_dir, emulator, ca) = start(Duration::from_secs(7200));
    let (status, body) = call(
        &emulator,
        &ca,
        "POST",
        "/open-apis/auth/v3/tenant_access_token/internal",
        None,
        Some(json!({"app_id": APP_ID, "app_secret": "wrong"})),
    );
    assert_eq!(status, 400);
    assert_eq!(body["code"], 10014);
    assert!(body.get("tenant_access_token").is_none());
    assert_eq!(emulator.tokens_issued(), 0);

    let send = json!({"receive_id": "oc_team", "msg_type": "text", "content": "{\"text\":\"x\"}"});
    // Feishu's distinct codes: no token 99991661, one it never issued 99991663.
    for (token, code) in [
        (None, 99991661),
        (Some("t-made-up"), 99991663),
        (Some(APP_SECRET), 99991663),
    ] {
        let (status, body) = call(
            &emulator,
            &ca,
            "POST",
            "/open-apis/im/v1/messages?receive_id_type=chat_id",
            token,
            Some(send.clone()),
        );
        assert_eq!(status, 400, "{token:?}");
        assert_eq!(body["code"], code, "{token:?}");
    }

    let (token, _) = tenant_token(&emulator, &ca);
    for (path, body, code) in [
        (
            "/open-apis/im/v1/messages?receive_id_type=phone",
            send.clone(),
            99992402,
        ),
        ("/open-apis/im/v1/messages", send.clone(), 99992402),
        (
            "/open-apis/im/v1/messages/om_nope/reply",
            json!({"msg_type": "text", "content": "{\"text\":\"x\"}"}),
            230001,
        ),
        (
            "/open-apis/im/v1/messages?receive_id_type=chat_id",
            json!({"receive_id": "oc_team", "msg_type": "text", "content": {"text": "x"}}),
            99992402,
        ),
    ] {
        let (status, answer) = call(&emulator, &ca, "POST", path, Some(&token), Some(body));
        assert_eq!(status, 400, "{path}");
        assert_eq!(answer["code"], code, "{path}: {answer}");
    }
    assert!(emulator.messages().is_empty());
    assert!(emulator.requests().iter().all(|r| r.created_id.is_none()));
}

#[test]
fn expired_tokens_are_refused_and_a_new_one_is_issued() {
    // A TTL under Feishu's 30-minute reuse window: every request mints a token.
    let (_dir, emulator, ca) = start(Duration::from_secs(600));
    let (first, expire) = tenant_token(&emulator, &ca);
    assert!(expire <= 600);
    let (second, _) = tenant_token(&emulator, &ca);
    assert_ne!(first, second);
    assert_eq!(emulator.tokens_issued(), 2);

    emulator.expire_tokens();
    let (status, body) = call(
        &emulator,
        &ca,
        "GET",
        "/open-apis/bot/v3/info",
        Some(&second),
        None,
    );
    assert_eq!(status, 400);
    assert_eq!(body["code"], 99991668, "an expired token has its own code");

    let (third, _) = tenant_token(&emulator, &ca);
    assert_eq!(emulator.tokens_issued(), 3);
    let (status, _) = call(
        &emulator,
        &ca,
        "GET",
        "/open-apis/bot/v3/info",
        Some(&third),
        None,
    );
    assert_eq!(status, 200);
}

#[test]
fn a_live_token_invalidated_before_its_expiry_is_refused_and_replaced() {
    let (_dir, emulator, ca) = start(Duration::from_secs(7200));
    let info = |token: &str| {
        call(
            &emulator,
            &ca,
            "GET",
            "/open-apis/bot/v3/info",
            Some(token),
            None,
        )
    };
    let (first, _) = tenant_token(&emulator, &ca);
    assert_eq!(info(&first).0, 200, "positive control");
    emulator.invalidate_tokens();
    let (status, body) = info(&first);
    assert_eq!(
        (status, body["code"].as_i64()),
        (400, Some(99991663)),
        "{body}"
    );
    // Hours are left on it, but the endpoint no longer hands it out.
    let (second, _) = tenant_token(&emulator, &ca);
    assert_ne!(second, first);
    assert_eq!(info(&second).0, 200);

    // On use: the next request's live token is refused and stays refused.
    emulator.invalidate_tokens_on_use(1);
    let (status, body) = info(&second);
    assert_eq!(
        (status, body["code"].as_i64()),
        (400, Some(99991663)),
        "{body}"
    );
    assert_eq!(info(&second).1["code"], 99991663);
    let (third, _) = tenant_token(&emulator, &ca);
    assert_ne!(third, second);
    assert_eq!(info(&third).0, 200, "one request was refused, not all");
    assert_eq!(emulator.tokens_issued(), 3);
}
