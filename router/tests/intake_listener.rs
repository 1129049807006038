//! The GitHub webhook listener through a real socket: what it stores, what
//! it refuses (and that it keeps serving after each refusal), and that a
//! stored delivery becomes one decision.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::intake::signature::sign;
use gatehouse_router::intake::{Intake, ListenerConfig, WebhookSecrets};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{DeliveryLog, Durability, Store};
use serde_json::json;

const SECRET: &[u8] = b"webhook-secret-for-tests";
const MAX_BODY: usize = 64 * 1024;

const POLICY: &str = r#"
identity = { github = { login = "gatehouse-bot", id = 900 } }

[[people]]
name = "alice"
team = "core"
github = { login = "alice", id = 101 }

[teams.core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["github-repo"]
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
    let secrets = WebhookSecrets::from_secrets(&[b"an-older-secret".as_slice(), SECRET]).unwrap();
    let config = ListenerConfig {
        max_body: MAX_BODY,
        ..ListenerConfig::default()
    };
    let intake = Intake::start(
        router,
        &state,
        Durability::Normal,
        secrets,
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

fn comment(id: u64, text: &str) -> Vec<u8> {
    json!({"action": "created",
           "issue": {"id": 7, "number": 412, "title": "Login fails", "labels": []},
           "comment": {"id": id, "body": text, "updated_at": "2026-01-01T00:00:00Z"},
           "sender": {"login": "alice", "id": 101, "type": "User"},
           "repository": {"full_name": "acme/widgets"}})
    .to_string()
    .into_bytes()
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

fn post(
    addr: SocketAddr,
    event: &str,
    delivery: &str,
    signature: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let mut head = format!(
        "POST /webhook HTTP/1.1\r\nHost: router\r\nConnection: close\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(sig) = signature {
        head.push_str(&format!("X-Hub-Signature-256: {sig}\r\n"));
    }
    head.push_str("\r\n");
    send(addr, &head, body)
}

fn signed(addr: SocketAddr, event: &str, delivery: &str, body: &[u8]) -> (u16, String) {
    post(addr, event, delivery, Some(&sign(SECRET, body)), body)
}

fn deliveries(state: &Path) -> usize {
    DeliveryLog::open(state, Durability::Normal)
        .unwrap()
        .read()
        .deliveries()
        .unwrap()
        .len()
}

fn trigger_decisions(state: &Path) -> Vec<serde_json::Value> {
    let store = Store::open(state, Durability::Normal).unwrap();
    store
        .read()
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
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
fn a_signed_mention_becomes_one_decision_even_when_delivered_again() {
    let r = start();
    let addr = r.intake.addr();
    let body = comment(5, "@gatehouse-bot the login form rejects valid emails");
    let (status, text) = signed(addr, "issue_comment", "d-0001", &body);
    assert_eq!((status, text.as_str()), (200, "stored d-0001"));
    // A redelivery (same id) and the same event under another id.
    let (status, text) = signed(addr, "issue_comment", "d-0001", &body);
    assert_eq!(status, 200);
    assert!(text.starts_with("duplicate"), "{text}");
    let (status, text) = signed(addr, "issue_comment", "d-0002", &body);
    assert_eq!(status, 200);
    assert!(text.starts_with("duplicate"), "{text}");
    wait_processed(&r.state);
    let decisions = trigger_decisions(&r.state);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["admission"], "explicit");
    assert_eq!(decisions[0]["via"], "mention");
    assert_eq!(decisions[0]["ticket"]["action"], "opened");
    // Positive control: another comment is another decision.
    let (status, _) = signed(addr, "issue_comment", "d-0003", &comment(6, "thanks"));
    assert_eq!(status, 200);
    wait_processed(&r.state);
    assert_eq!(trigger_decisions(&r.state).len(), 2);
}

#[test]
fn bad_input_is_refused_nothing_is_stored_and_the_listener_keeps_serving() {
    let r = start();
    let addr = r.intake.addr();
    let body = comment(5, "@gatehouse-bot fix it");
    let other = sign(b"not-the-secret", &body);
    let not_json = b"{\"action\": \"created\", ".to_vec();
    let unknown = br#"{"action":"created","starred_at":"t"}"#.to_vec();
    let big = vec![b' '; MAX_BODY + 1];
    type Case<'a> = (&'a str, &'a str, Option<String>, Vec<u8>, u16);
    let cases: Vec<Case<'_>> = vec![
        ("no signature", "issue_comment", None, body.clone(), 401),
        (
            "another secret",
            "issue_comment",
            Some(other),
            body.clone(),
            401,
        ),
        (
            "malformed signature",
            "issue_comment",
            Some("sha256=xyz".into()),
            body.clone(),
            401,
        ),
        (
            "signature of another body",
            "issue_comment",
            Some(sign(SECRET, b"{}")),
            body.clone(),
            401,
        ),
        (
            "unknown event",
            "star",
            Some(sign(SECRET, &unknown)),
            unknown.clone(),
            400,
        ),
        (
            "malformed JSON",
            "issue_comment",
            Some(sign(SECRET, &not_json)),
            not_json.clone(),
            400,
        ),
        (
            "oversized body",
            "issue_comment",
            Some(sign(SECRET, &big)),
            big.clone(),
            413,
        ),
        (
            "no comment in the payload",
            "issue_comment",
            Some(sign(SECRET, &unknown)),
            unknown.clone(),
            400,
        ),
    ];
    for (name, event, sig, body, expected) in &cases {
        let (status, text) = post(addr, event, "d-bad", sig.as_deref(), body);
        assert_eq!(status, *expected, "{name}: {text}");
        assert!(!text.is_empty(), "{name}: the answer says why");
    }
    // Head-level refusals.
    let (status, _) = send(
        addr,
        "GET /webhook HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(status, 405);
    let huge = format!(
        "POST /webhook HTTP/1.1\r\nHost: r\r\nConnection: close\r\nX-GitHub-Event: issue_comment\r\n\
         X-GitHub-Delivery: d-huge\r\nContent-Length: {}\r\n\r\n",
        26 * 1024 * 1024
    );
    let (status, _) = send(addr, &huge, b"");
    assert_eq!(status, 413);
    let chunked = "POST /webhook HTTP/1.1\r\nHost: r\r\nConnection: close\r\nX-GitHub-Event: issue_comment\r\n\
                   X-GitHub-Delivery: d-chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
    let mut chunks = Vec::new();
    for _ in 0..5 {
        chunks.extend_from_slice(format!("{:x}\r\n", 16 * 1024).as_bytes());
        chunks.extend(std::iter::repeat_n(b' ', 16 * 1024));
        chunks.extend_from_slice(b"\r\n");
    }
    chunks.extend_from_slice(b"0\r\n\r\n");
    let (status, _) = send(addr, chunked, &chunks);
    assert_eq!(status, 413);
    assert_eq!(deliveries(&r.state), 0, "nothing refused is stored");
    // A known event whose action leads nowhere is answered, not stored.
    let edited = String::from_utf8(body.clone())
        .unwrap()
        .replace("created", "edited")
        .into_bytes();
    let (status, text) = signed(addr, "issue_comment", "d-edit", &edited);
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("ignored"), "{text}");
    let ping = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#;
    assert_eq!(signed(addr, "ping", "d-ping", ping).0, 200);
    assert_eq!(deliveries(&r.state), 0);
    // Positive control, after all that: the listener still stores and the
    // old secret still verifies (rotation).
    let by_old = sign(b"an-older-secret", &body);
    let (status, text) = post(addr, "issue_comment", "d-good", Some(&by_old), &body);
    assert_eq!((status, text.as_str()), (200, "stored d-good"));
    wait_processed(&r.state);
    assert_eq!(deliveries(&r.state), 1);
    assert_eq!(trigger_decisions(&r.state).len(), 1);
}
