//! `gatehouse router run` as a process: its config (the shipped example's
//! shape, relative paths, mistakes refused naming the key), both intake
//! listeners deciding deliveries, and a clean stop on SIGTERM; its metrics
//! after real deliveries.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use gatehouse_router::intake::signature::sign;
use gatehouse_router::store::{Durability, Store};
use gatehouse_testkit::router::*;
use serde_json::{json, Value};

const SECRET: &[u8] = b"run-test-secret";

/// A router.toml with relative paths, in a fresh directory.
fn setup(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(example("policy.toml"), dir.path().join("policy.toml")).unwrap();
    std::fs::write(dir.path().join("webhook-secret"), SECRET).unwrap();
    std::fs::write(dir.path().join("feishu-token"), "tok-123\n").unwrap();
    gatehouse_emulators::TestCa::generate()
        .unwrap()
        .write_cert_pem(&dir.path().join("ca.pem"))
        .unwrap();
    std::fs::write(
        dir.path().join("router.toml"),
        format!(
            "policy = \"policy.toml\"\nstate = \"router.db\"\n\
             [jobs]\nsocket = \"jobs.sock\"\ndeadline_secs = 60\n\
             [proxy]\nca_cert = \"ca.pem\"\n{extra}"
        ),
    )
    .unwrap();
    dir
}

const LISTENERS: &str = "[github]\nlisten = \"127.0.0.1:0\"\nwebhook_secret_files = [\"webhook-secret\"]\n\
     [feishu]\nlisten = \"127.0.0.1:0\"\napp_id = \"cli_test\"\nverification_token_file = \"feishu-token\"\n";

/// Starts `router run` from another directory (so relative paths must be
/// the config file's) and reads its ready line.
fn start(dir: &Path) -> (Child, Value) {
    let mut child = gatehouse()
        .args(["router", "run", "--config"])
        .arg(dir.join("router.toml"))
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        panic!("{line:?}: {e}; stderr: {err}")
    });
    (child, ready)
}

fn post(addr: SocketAddr, path: &str, headers: &str, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: r\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ').nth(1).unwrap().parse().unwrap()
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

fn sigterm(child: &mut Child) -> std::process::ExitStatus {
    gatehouse_testkit::procs::signal(child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "router run ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn both_listeners_decide_and_sigterm_stops_cleanly() {
    let dir = setup(LISTENERS);
    let (mut child, ready) = start(dir.path());
    let github: SocketAddr = ready["listening"]["github"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let feishu: SocketAddr = ready["listening"]["feishu"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(github, feishu);

    let comment = json!({"action": "created",
        "issue": {"id": 7, "number": 412, "title": "t", "labels": []},
        "comment": {"id": 5001, "body": "@gatehouse-bot please fix", "updated_at": "2026-01-01T00:00:00Z"},
        "sender": {"login": "alice", "id": 1001, "type": "User"},
        "repository": {"full_name": "acme/widgets"}})
    .to_string();
    let headers = format!(
        "X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: d-1\r\nX-Hub-Signature-256: {}\r\n",
        sign(SECRET, comment.as_bytes())
    );
    assert_eq!(post(github, "/webhook", &headers, comment.as_bytes()), 200);
    // A badly signed delivery is refused: the control for the one above.
    let forged = headers
        .replace("d-1", "d-2")
        .replace("sha256=", "sha256=00");
    assert_eq!(post(github, "/webhook", &forged, comment.as_bytes()), 401);
    // The GitHub listener does not take Feishu's events, nor the other way.
    let challenge =
        json!({"type": "url_verification", "challenge": "c-1", "token": "tok-123"}).to_string();
    assert_eq!(post(feishu, "/events", "", challenge.as_bytes()), 200);
    let status = post(github, "/events", "", challenge.as_bytes());
    assert!((400..500).contains(&status), "{status}");

    let state = dir.path().join("router.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    let decided = loop {
        let d = trigger_decisions(&state);
        if !d.is_empty() || Instant::now() > deadline {
            break d;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["admission"], "explicit");
    assert_eq!(decided[0]["ticket"]["action"], "opened");

    let status = sigterm(&mut child);
    assert!(status.success(), "router run exited {status:?}");
    // It served both listeners with its network confined (tests/router_confine.rs
    // shows what that refuses).
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("the router's network is confined: no TCP connect"),
        "{err}"
    );
}

#[test]
fn config_mistakes_refuse_the_start_naming_the_key() {
    let cases = [
        ("colour = 1\n", "unknown field `colour`"),
        (
            "[github]\nlisten = \"127.0.0.1:0\"\nwebhook_secret_files = []\n",
            "`github.webhook_secret_files`",
        ),
        (
            "[github]\nlisten = \"127.0.0.1:0\"\nwebhook_secret_files = [\"missing-secret\"]\n",
            "missing-secret",
        ),
        // The CA the router's HTTPS client trusts must be there: fail closed.
        ("", "proxy.ca_cert"),
    ];
    for (extra, expected) in cases {
        let dir = setup("");
        let toml = std::fs::read_to_string(dir.path().join("router.toml")).unwrap();
        let text = if extra.starts_with('[') {
            format!("{toml}{extra}")
        } else {
            format!("{extra}{toml}")
        };
        std::fs::write(dir.path().join("router.toml"), text).unwrap();
        if extra.is_empty() {
            std::fs::write(dir.path().join("ca.pem"), "not a certificate\n").unwrap();
        }
        let out = run(gatehouse()
            .args(["router", "run", "--config"])
            .arg(dir.path().join("router.toml")));
        assert!(!out.status.success(), "{extra:?} started");
        let err = stderr(&out);
        assert!(err.contains(expected), "{extra:?}: {err}");
        assert!(stdout(&out).is_empty(), "{extra:?}: announced ready");
    }
    // The control: the same directory with a good config starts.
    let dir = setup(LISTENERS);
    let (mut child, _) = start(dir.path());
    assert!(sigterm(&mut child).success());
}

/// `[metrics] listen`: after a delivery, its redelivery and the same event
/// under another id, the scrape parses and says one explicit decision that
/// opened a ticket, one duplicate of each kind and one intake lag; no label
/// holds an id and nothing holds the webhook secret.
#[test]
fn metrics_count_decisions_duplicates_and_lag_without_ids() {
    use gatehouse_testkit::metrics::{free_port, parse, scrape, sum};
    let addr = free_port();
    let dir = setup(&format!("{LISTENERS}[metrics]\nlisten = \"{addr}\"\n"));
    let (mut child, ready) = start(dir.path());
    let github: SocketAddr = ready["listening"]["github"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let comment = json!({"action": "created",
        "issue": {"id": 7, "number": 412, "title": "t", "labels": []},
        "comment": {"id": 5001, "body": "@gatehouse-bot please fix", "updated_at": "2026-01-01T00:00:00Z"},
        "sender": {"login": "alice", "id": 1001, "type": "User"},
        "repository": {"full_name": "acme/widgets"}})
    .to_string();
    let headers = |delivery: &str| {
        format!(
            "X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: {}\r\n",
            sign(SECRET, comment.as_bytes())
        )
    };
    let (code, _, body) = scrape(addr);
    assert_eq!(code, 200);
    let before = parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    for delivery in ["d-1", "d-1", "d-3"] {
        assert_eq!(
            post(github, "/webhook", &headers(delivery), comment.as_bytes()),
            200
        );
    }
    let state = dir.path().join("router.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    while trigger_decisions(&state).is_empty() {
        assert!(Instant::now() < deadline, "no decision");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, _, text) = scrape(addr);
    assert_eq!(code, 200);
    let after = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let moved =
        |name: &str, with: &[(&str, &str)]| sum(&after, name, with) - sum(&before, name, with);
    assert_eq!(
        moved(
            "gatehouse_router_decisions_total",
            &[("admission", "explicit"), ("outcome", "opened")]
        ),
        1.0,
        "{text}"
    );
    for by in ["delivery", "meaning"] {
        assert_eq!(
            moved(
                "gatehouse_router_intake_duplicates_total",
                &[("platform", "github"), ("by", by)]
            ),
            1.0,
            "{by}: {text}"
        );
    }
    assert_eq!(
        moved(
            "gatehouse_router_intake_lag_seconds_count",
            &[("platform", "github")]
        ),
        1.0,
        "{text}"
    );
    for s in &after {
        for (k, v) in &s.labels {
            for prefix in ["tkt_", "trg_", "thr_", "d-1", "d-3"] {
                assert!(!v.contains(prefix), "{}: label {k}={v} holds an id", s.name);
            }
        }
    }
    assert!(!text.contains(std::str::from_utf8(SECRET).unwrap()));
    assert!(sigterm(&mut child).success());
}

/// `[feishu.long_connection]`: the live router serves the hand-off socket
/// to the configured uid; an event handed over is confirmed only once
/// stored, a second hand-off of it is a duplicate, and it is one trigger.
#[test]
fn the_long_connection_hand_off_stores_and_confirms() {
    use std::os::unix::net::UnixStream;
    let uid: u32 = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    let dir = setup(&format!(
        "{LISTENERS}[feishu.long_connection]\nsocket = \"handoff.sock\"\npeer_uid = {uid}\n"
    ));
    let (mut child, _) = start(dir.path());
    let event = json!({"schema": "2.0",
        "header": {"event_id": "ev_long_1", "event_type": "im.message.receive_v1",
                   "create_time": "1700000000000", "token": "tok-123",
                   "app_id": "cli_test", "tenant_key": "tk"},
        "event": {"sender": {"sender_id": {"open_id": "ou_someone"}, "sender_type": "user"},
                  "message": {"message_id": "om_long_1", "chat_id": "oc_x", "chat_type": "p2p",
                              "message_type": "text", "content": "{\"text\":\"hi\"}"}}})
    .to_string();
    let mut s = UnixStream::connect(dir.path().join("handoff.sock")).unwrap();
    let mut hand_over = |body: &[u8]| -> Value {
        let len = u32::try_from(body.len()).unwrap().to_be_bytes();
        s.write_all(&[&len[..], body].concat()).unwrap();
        let mut head = [0u8; 4];
        s.read_exact(&mut head).unwrap();
        let mut answer = vec![0u8; u32::from_be_bytes(head) as usize];
        s.read_exact(&mut answer).unwrap();
        serde_json::from_slice(&answer).unwrap()
    };
    assert_eq!(hand_over(event.as_bytes())["status"], "stored");
    assert_eq!(hand_over(event.as_bytes())["status"], "duplicate");
    let wrong_app = event.replace("cli_test", "cli_other");
    assert_eq!(hand_over(wrong_app.as_bytes())["status"], "refused");
    let state = dir.path().join("router.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    while trigger_decisions(&state).is_empty() {
        assert!(Instant::now() < deadline, "no decision");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sigterm(&mut child).success());
    assert_eq!(trigger_decisions(&state).len(), 1);
}
