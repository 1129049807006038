//! No single request can take the proxy from the others: a request target
//! over the budget the rules decide on is refused (414) and on record, one
//! at the budget is decided; and while one identity floods the GraphQL
//! route with worst-case bodies of almost 1 MiB, whose checks run on the
//! bounded pool of body checks, another identity's GETs and large GraphQL
//! queries are answered (each identity holds only its share of the pool). Each
//! refusal is a JSON answer an agent can read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_proxy::graphql::MAX_DOCUMENT_TOKENS;
use gatehouse_proxy::path::{MAX_PATH_SEGMENTS, MAX_QUERY_PAIRS};
use gatehouse_testkit::proxy::process::{admin_call as admin, start_proxy_process};
use gatehouse_testkit::proxy::{read_head, read_until_closed, tls_over};
use gatehouse_testkit::random::token as random_token;
use serde_json::Value;

fn github(dir: &Path, token: &str) -> GithubHandle {
    let github = GithubEmulator::start(
        GithubOptions::new(dir.join("git"))
            .token(token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    github
}

fn create_identity(admin_sock: &Path, name: &str) -> PathBuf {
    let spec = format!(
        r#"{{"name":"{name}","rule_sets":["test-worker"],"tunnel_hosts":[],"variables":{{"repo":"acme/widgets"}}}}"#
    );
    let (status, body) = admin(admin_sock, "POST", "/identities", Some(&spec));
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    PathBuf::from(created["socket"].as_str().unwrap())
}

/// One request to api.github.com through `socket` (CONNECT, TLS, then
/// `head` and `body` with `Connection: close`); the status and the body.
fn exchange(socket: &Path, ca: &Path, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    let connected = read_head(&mut s);
    assert!(connected.starts_with("HTTP/1.1 200"), "{connected}");
    let mut tls = tls_over(s, "api.github.com", ca, true);
    write!(
        tls,
        "{head}\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    tls.write_all(body).unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_request_target_over_the_budget_is_refused_and_one_at_it_is_decided() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = github(d, &token);
    let proxy = start_proxy_process(d, &github, &token);
    let ca = d.join("ca.pem");
    let worker = create_identity(&proxy.admin, "tkt_budget");
    let get = |target: &str| exchange(&worker, &ca, &format!("GET {target} HTTP/1.1"), b"");

    // The most query pairs: decided by the rules and allowed.
    let pairs = |n: usize| vec!["x=1"; n].join("&");
    let (status, body) = get(&format!(
        "/repos/acme/widgets/issues/1?{}",
        pairs(MAX_QUERY_PAIRS)
    ));
    assert_eq!(status, 200, "{body}");
    // One more: refused before any rule is tried.
    let (status, body) = get(&format!(
        "/repos/acme/widgets/issues/1?{}",
        pairs(MAX_QUERY_PAIRS + 1)
    ));
    assert_eq!(status, 414, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"], "gatehouse_limit");
    assert!(answer["reason"].as_str().unwrap().contains("query pairs"));

    // The most segments: the rules decide (no rule has this path: 403);
    // one more is over the budget (414).
    let deep = |n: usize| format!("/repos/acme/widgets/issues/1{}", "/a".repeat(n - 5));
    let (status, body) = get(&deep(MAX_PATH_SEGMENTS));
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("path segments"), "{body}");
    let (status, body) = get(&deep(MAX_PATH_SEGMENTS + 1));
    assert_eq!(status, 414, "{body}");
    assert!(body.contains("path segments"), "{body}");

    let refused: Vec<Value> = audit(d)
        .into_iter()
        .filter(|l| l["identity"] == "tkt_budget" && l["outcome"]["decision"] == "deny")
        .collect();
    let over = |what: &str| {
        refused.iter().any(|l| {
            l["outcome"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(what))
        })
    };
    assert!(over("query pairs") && over("path segments"), "{refused:?}");
    drop(proxy);
}

/// A GraphQL body of almost 1 MiB that costs the check all it may and is
/// refused only at its end: a comment as long as the body allows (one
/// token, read through), then as many allowed root fields as the token
/// budget leaves, all parsed and walked before the last operation, a
/// mutation the rule does not list, refuses the document.
fn worst_graphql() -> Vec<u8> {
    // `viewer`, `{`, `login`, `}` per field.
    let fields = (MAX_DOCUMENT_TOKENS - 16) / 4;
    let document = format!(
        "query {{{} }} mutation {{ addComment }}",
        " viewer { login }".repeat(fields)
    );
    let padding = (1 << 20) - 64 - document.len();
    let query = format!("#{}\\n{document}", "c".repeat(padding));
    format!(r#"{{"query":"{query}"}}"#).into_bytes()
}

/// An allowed query of about 8 KiB (a comment pads it): over the size
/// checked in place, so its check runs on the pool.
fn allowed_large_graphql() -> Vec<u8> {
    let query = r#"query { repository(owner: \"acme\", name: \"widgets\") { issue(number: 1) { title } } }"#;
    let body = format!(r##"{{"query":"#{}\n{query}"}}"##, "c".repeat(8 * 1024));
    body.into_bytes()
}

#[test]
fn a_flood_of_worst_case_graphql_bodies_leaves_another_identity_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = github(d, &token);
    let proxy = start_proxy_process(d, &github, &token);
    let ca = d.join("ca.pem");
    let hog = create_identity(&proxy.admin, "tkt_hog");
    let other = create_identity(&proxy.admin, "tkt_other");
    let issue = "GET /repos/acme/widgets/issues/1 HTTP/1.1";
    assert_eq!(exchange(&other, &ca, issue, b"").0, 200, "control");
    let large = allowed_large_graphql();
    let (status, body) = exchange(&other, &ca, "POST /graphql HTTP/1.1", &large);
    assert_eq!(status, 200, "control: {body}");

    let body = Arc::new(worst_graphql());
    assert!(body.len() < 1 << 20 && body.len() > (1 << 20) - 100);
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..24)
        .map(|_| {
            let (hog, ca, body) = (hog.clone(), ca.clone(), body.clone());
            let (stop, answered) = (stop.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    answers.push(exchange(&hog, &ca, "POST /graphql HTTP/1.1", &body));
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                answers
            })
        })
        .collect();
    // The flood is on: its first answers are back.
    while answered.load(Ordering::Relaxed) < 24 {
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..5 {
        let (status, body) = exchange(&other, &ca, issue, b"");
        assert_eq!(status, 200, "{body}");
        // A body large enough for the pool: the hog holds only its share
        // of the queue, so the other identity's check is admitted.
        let (status, body) = exchange(&other, &ca, "POST /graphql HTTP/1.1", &large);
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("Widgets wobble"), "{body}");
    }
    // Still flooding while the other identity was served.
    let during = answered.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let answers: Vec<(u16, String)> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert!(answers.len() > during.min(24), "{} answers", answers.len());
    for (status, answer) in &answers {
        // Refused by the check (403) or not checked: the hog's share of
        // the pool's queue taken (429), or the queue full (503); said in
        // JSON.
        assert!(matches!(status, 403 | 429 | 503), "{status} {answer}");
        let answer: Value = serde_json::from_str(answer).unwrap();
        assert!(answer["reason"].is_string(), "{answer}");
    }
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    let refused_by_check = answers
        .iter()
        .filter(|(s, a)| *s == 403 && a.contains("addComment"))
        .count();
    assert!(refused_by_check >= 1, "no body was checked to its end");

    // Stopped cleanly, the proxy writes the counts still pending.
    let pid = proxy.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut proxy = proxy;
    assert!(proxy.child.wait().unwrap().success());

    // Every refusal of the hog is on record: its own line with why, or,
    // past the refusal rate, counted in a `suppressed` line.
    let lines = audit(d);
    let recorded = lines
        .iter()
        .filter(|l| l["identity"] == "tkt_hog" && l["path"] == "/graphql")
        .filter(|l| l["outcome"]["decision"] == "deny" && l["outcome"]["reason"].is_string())
        .count();
    let suppressed: u64 = lines
        .iter()
        .filter(|l| l["event"] == "suppressed" && l["identity"] == "tkt_hog")
        .filter_map(|l| l["refusals"].as_u64())
        .sum();
    assert!(recorded >= 1, "no refusal of the hog on record");
    assert_eq!(
        recorded as u64 + suppressed,
        statuses.len() as u64,
        "{recorded} lines and {suppressed} counted"
    );
}
