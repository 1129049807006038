//! The Feishu event listener through a real socket: the challenge, what it
//! stores, what it refuses (and that it keeps serving after each refusal),
//! and that a stored message event becomes one decision however often it
//! arrives.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::intake::feishu::{encrypt, signature};
use gatehouse_router::intake::{wall_clock_ms, FeishuKeys, Intake, ListenerConfig};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{DeliveryLog, Durability, Store};
use serde_json::{json, Value};

const KEY: &[u8] = b"feishu-encrypt-key-for-tests";
const TOKEN: &[u8] = b"feishu-verification-token";
const APP: &str = "cli_gatehouse";
const MAX_BODY: usize = 64 * 1024;

const POLICY: &str = r#"
identity = { feishu = "ou_bot" }

[[people]]
name = "alice"
team = "core"
feishu = "ou_alice"

[teams.core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["github-repo"]

[[chats]]
id = "oc_core"
team = "core"
repo = "acme/widgets"
"#;

struct Running {
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
    intake: Intake,
}

fn start() -> Running {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("router.db");
    let store = Store::open(&state, Durability::Normal).unwrap();
    let policy = Policy::from_toml("policy.toml", POLICY).unwrap();
    let router = Router::new(store, policy, RulesOnlyJudge, 1).unwrap();
    let keys = FeishuKeys::new(APP, Some(KEY), Some(TOKEN)).unwrap();
    let config = ListenerConfig {
        max_body: MAX_BODY,
        ..ListenerConfig::default()
    };
    let intake = Intake::start(
        router,
        &state,
        Durability::Normal,
        keys,
        "127.0.0.1:0".parse().unwrap(),
        config,
    )
    .unwrap();
    Running {
        _dir: dir,
        state,
        intake,
    }
}

fn event(event_id: &str, event_type: &str, app: &str, message_id: &str, text: &str) -> Value {
    json!({"schema": "2.0",
           "header": {"event_id": event_id, "event_type": event_type,
                      "create_time": "1700000000000", "token": "feishu-verification-token",
                      "app_id": app, "tenant_key": "tk"},
           "event": {"sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
                     "message": {"message_id": message_id, "chat_id": "oc_core", "chat_type": "group",
                                 "message_type": "text",
                                 "content": json!({"text": text}).to_string(),
                                 "mentions": [{"key": "@_user_1", "id": {"open_id": "ou_bot"},
                                               "name": "Gatehouse"}]}}})
}

fn sealed(plain: &Value) -> Vec<u8> {
    json!({ "encrypt": encrypt(KEY, [9; 16], plain.to_string().as_bytes()) })
        .to_string()
        .into_bytes()
}

fn now_secs() -> u64 {
    wall_clock_ms() / 1000
}

/// Sends one request and returns the status and body of the answer.
fn send(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    // The server may answer (and close) before the whole body is sent.
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or("")
        .trim()
        .to_owned();
    (status, body)
}

/// Posts `body` with `signature` (hex) and timestamp `ts`, or unsigned.
fn post(addr: SocketAddr, signed: Option<(u64, String)>, body: &[u8]) -> (u16, String) {
    let mut head = format!(
        "POST /feishu HTTP/1.1\r\nHost: router\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    if let Some((ts, sig)) = signed {
        head.push_str(&format!(
            "X-Lark-Request-Timestamp: {ts}\r\nX-Lark-Request-Nonce: n-1\r\nX-Lark-Signature: {sig}\r\n"
        ));
    }
    head.push_str("\r\n");
    send(addr, &head, body)
}

fn sign_at(ts: u64, key: &[u8], body: &[u8]) -> Option<(u64, String)> {
    Some((
        ts,
        hex::encode(signature(&ts.to_string(), "n-1", key, body)),
    ))
}

fn signed_post(addr: SocketAddr, body: &[u8]) -> (u16, String) {
    post(addr, sign_at(now_secs(), KEY, body), body)
}

fn deliveries(state: &Path) -> usize {
    DeliveryLog::open(state, Durability::Normal)
        .unwrap()
        .read()
        .deliveries()
        .unwrap()
        .len()
}

fn trigger_decisions(state: &Path) -> Vec<Value> {
    let store = Store::open(state, Durability::Normal).unwrap();
    store
        .read()
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "trigger")
        .collect()
}

/// Waits until every stored delivery is processed (the processor runs on
/// its own thread); a generous deadline, not a timing assertion.
fn wait_processed(state: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = DeliveryLog::open(state, Durability::Normal).unwrap();
        if log.read().pending_deliveries(1).unwrap().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "deliveries still pending");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_encrypted_challenge_is_answered_in_plain_json() {
    let r = start();
    let challenge = json!({"challenge": "c-42", "token": "feishu-verification-token",
                           "type": "url_verification"});
    let (status, body) = post(r.intake.addr(), None, &sealed(&challenge));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"challenge": "c-42"})
    );
    // Another token: refused.
    let forged = json!({"challenge": "c-42", "token": "guess", "type": "url_verification"});
    assert_eq!(post(r.intake.addr(), None, &sealed(&forged)).0, 401);
    assert_eq!(deliveries(&r.state), 0);
}

#[test]
fn a_mention_becomes_one_decision_even_when_delivered_again() {
    let r = start();
    let addr = r.intake.addr();
    let first = sealed(&event(
        "ev-1",
        "im.message.receive_v1",
        APP,
        "om_1",
        "@_user_1 fix the login",
    ));
    let (status, text) = signed_post(addr, &first);
    assert_eq!((status, text.as_str()), (200, "stored ev-1"));
    // Feishu's retry (same event id) and the same message under another id.
    let (status, text) = signed_post(addr, &first);
    assert_eq!(status, 200);
    assert!(text.starts_with("duplicate"), "{text}");
    let again = sealed(&event(
        "ev-2",
        "im.message.receive_v1",
        APP,
        "om_1",
        "@_user_1 fix the login",
    ));
    let (status, text) = signed_post(addr, &again);
    assert_eq!(status, 200);
    assert!(text.starts_with("duplicate"), "{text}");
    wait_processed(&r.state);
    let decisions = trigger_decisions(&r.state);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["admission"], "explicit", "{:?}", decisions[0]);
    assert_eq!(decisions[0]["via"], "mention");
    // Positive control: another message is another decision.
    let other = sealed(&event(
        "ev-3",
        "im.message.receive_v1",
        APP,
        "om_2",
        "@_user_1 and this",
    ));
    assert_eq!(signed_post(addr, &other).0, 200);
    wait_processed(&r.state);
    assert_eq!(trigger_decisions(&r.state).len(), 2);
}

#[test]
fn bad_input_is_refused_nothing_is_stored_and_the_listener_keeps_serving() {
    let r = start();
    let addr = r.intake.addr();
    let now = now_secs();
    let good = sealed(&event(
        "ev-1",
        "im.message.receive_v1",
        APP,
        "om_1",
        "@_user_1 hi",
    ));
    let other_app = sealed(&event(
        "ev-2",
        "im.message.receive_v1",
        "cli_other",
        "om_2",
        "hi",
    ));
    let unknown = sealed(&event("ev-3", "contact.user.created_v3", APP, "om_3", "hi"));
    let not_json = b"{\"encrypt\": ".to_vec();
    let inner_not_json = json!({"encrypt": encrypt(KEY, [1; 16], b"{not json")})
        .to_string()
        .into_bytes();
    let big = vec![b' '; MAX_BODY + 1];
    type Case<'a> = (&'a str, Option<(u64, String)>, Vec<u8>, u16);
    let cases: Vec<Case<'_>> = vec![
        ("unsigned event", None, good.clone(), 401),
        (
            "signed with another key",
            sign_at(now, b"not-the-key", &good),
            good.clone(),
            401,
        ),
        (
            "signature of another body",
            sign_at(now, KEY, b"{}"),
            good.clone(),
            401,
        ),
        (
            "stale timestamp",
            sign_at(now - 3600, KEY, &good),
            good.clone(),
            401,
        ),
        (
            "wrong app id",
            sign_at(now, KEY, &other_app),
            other_app.clone(),
            403,
        ),
        (
            "unknown event type",
            sign_at(now, KEY, &unknown),
            unknown.clone(),
            400,
        ),
        (
            "malformed JSON",
            sign_at(now, KEY, &not_json),
            not_json.clone(),
            400,
        ),
        (
            "malformed JSON inside",
            sign_at(now, KEY, &inner_not_json),
            inner_not_json.clone(),
            400,
        ),
        ("oversized body", sign_at(now, KEY, &big), big.clone(), 413),
    ];
    for (name, signed, body, expected) in &cases {
        let (status, text) = post(addr, signed.clone(), body);
        assert_eq!(status, *expected, "{name}: {text}");
        assert!(!text.is_empty(), "{name}: the answer says why");
    }
    let (status, _) = send(
        addr,
        "GET /feishu HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(status, 405);
    assert_eq!(deliveries(&r.state), 0, "nothing refused is stored");
    // A known event not acted on is answered, not stored.
    let read = sealed(&event(
        "ev-4",
        "im.message.message_read_v1",
        APP,
        "om_4",
        "",
    ));
    let (status, text) = signed_post(addr, &read);
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("ignored"), "{text}");
    assert_eq!(deliveries(&r.state), 0);
    // Positive control, after all that: the listener still stores.
    let (status, text) = signed_post(addr, &good);
    assert_eq!((status, text.as_str()), (200, "stored ev-1"));
    wait_processed(&r.state);
    assert_eq!(deliveries(&r.state), 1);
    assert_eq!(trigger_decisions(&r.state).len(), 1);
}
