//! The Feishu emulator's rate limits, driven by real curl over TLS: the
//! gateway's 429 (code 99991400, `x-ogw-ratelimit-reset`) while a knob says
//! so, and a chat's message limit (400, code 230020) with nothing sent.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use gatehouse_emulators::{ChatLimit, FeishuEmulator, FeishuHandle, FeishuOptions};
use serde_json::{json, Value};

const APP_ID: &str = "cli_limits_app";
const APP_SECRET: &str = "limits-app-secret-generated-for-this-test";

/// (HTTP status, headers, JSON body) of a call on open.feishu.cn.
fn call(
    emulator: &FeishuHandle,
    ca: &Path,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> (u16, String, Value) {
    let port = emulator.addr().port();
    let mut command = Command::new("curl");
    command
        .args(["-sS", "-D", "-", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("open.feishu.cn:{port}:127.0.0.1")])
        .args(["-H", "Content-Type: application/json; charset=utf-8"])
        .args(["--data", &body.to_string()]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
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
    let (headers, body) = text.split_once("\r\n\r\n").unwrap();
    let status = headers.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        headers.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap(),
    )
}

fn start() -> (tempfile::TempDir, FeishuHandle, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let emulator = FeishuEmulator::start(FeishuOptions::default().app(APP_ID, APP_SECRET)).unwrap();
    for chat in ["oc_team", "oc_other"] {
        emulator.add_bot_to_chat(chat);
    }
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let (status, _, body) = call(
        &emulator,
        &ca,
        "/open-apis/auth/v3/tenant_access_token/internal",
        None,
        json!({"app_id": APP_ID, "app_secret": APP_SECRET}),
    );
    assert_eq!(status, 200, "{body}");
    let token = body["tenant_access_token"].as_str().unwrap().to_owned();
    (dir, emulator, ca, token)
}

fn send(
    emulator: &FeishuHandle,
    ca: &Path,
    token: &str,
    chat: &str,
    text: &str,
) -> (u16, String, Value) {
    call(
        emulator,
        ca,
        "/open-apis/im/v1/messages?receive_id_type=chat_id",
        Some(token),
        json!({"receive_id": chat, "msg_type": "text", "content": json!({"text": text}).to_string()}),
    )
}

#[test]
fn the_gateway_answers_429_with_its_code_and_reset_while_limited() {
    let (_dir, emulator, ca, token) = start();
    emulator.rate_limit_for(120);
    let (status, headers, body) = send(&emulator, &ca, &token, "oc_team", "hello");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["code"], 99_991_400);
    let reset: u64 = headers
        .lines()
        .find_map(|l| l.strip_prefix("x-ogw-ratelimit-reset:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((1..=120).contains(&reset), "{reset}");
    assert!(headers.contains("x-ogw-ratelimit-limit:"));
    assert!(emulator.messages().is_empty(), "nothing was sent");
    // Lifted: the same send goes (the positive control).
    emulator.rate_limit_for(0);
    let (status, headers, body) = send(&emulator, &ca, &token, "oc_team", "hello");
    assert_eq!((status, body["code"].as_i64()), (200, Some(0)), "{body}");
    assert!(!headers.contains("x-ogw-ratelimit-reset"));
    assert_eq!(emulator.messages().len(), 1);
}

#[test]
fn a_chat_past_its_message_limit_gets_230020_and_nothing_is_sent() {
    let (_dir, emulator, ca, token) = start();
    emulator.set_chat_limit(Some(ChatLimit {
        messages: 2,
        window_secs: 3600,
    }));
    for text in ["one", "two"] {
        let (status, _, body) = send(&emulator, &ca, &token, "oc_team", text);
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, body) = send(&emulator, &ca, &token, "oc_team", "three");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], 230_020);
    // A reply into the same chat is limited too; another chat is not.
    let parent = emulator.messages()[0].message_id.clone();
    let (status, _, body) = call(
        &emulator,
        &ca,
        &format!("/open-apis/im/v1/messages/{parent}/reply"),
        Some(&token),
        json!({"msg_type": "text", "content": json!({"text": "re"}).to_string()}),
    );
    assert_eq!(
        (status, body["code"].as_i64()),
        (400, Some(230_020)),
        "{body}"
    );
    let (status, _, body) = send(&emulator, &ca, &token, "oc_other", "elsewhere");
    assert_eq!(status, 200, "{body}");
    assert_eq!(emulator.messages().len(), 3);
    emulator.set_chat_limit(None);
    let (status, _, body) = send(&emulator, &ca, &token, "oc_team", "three");
    assert_eq!(status, 200, "{body}");
}
