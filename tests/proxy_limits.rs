//! One identity cannot starve the others: `gatehouse proxy` runs under a
//! low open-file limit (`prlimit`), one identity opens far more idle
//! connections than the process has descriptors, and another identity's
//! requests and the admin API still work. The hog's connections beyond its
//! share are closed and on record, a stalled TLS handshake after CONNECT is
//! cut, and idle connections are closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::{admin_call as admin, start_proxy_process_with};
use gatehouse_testkit::proxy::{read_head, read_until_closed, tls_over};
use gatehouse_testkit::random::token as random_token;
use serde_json::Value;

const LIMITS: &str = "\n[limits]\ntls_handshake_secs = 1\nidle_secs = 6\n";

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

/// `gatehouse` under `prlimit --nofile=<nofile>`.
fn limited(nofile: &str) -> Command {
    let mut command = Command::new("prlimit");
    command
        .arg(format!("--nofile={nofile}"))
        .arg(gatehouse_testkit::bin::gatehouse());
    command
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

/// A GET of the issue through `socket`; the status line.
fn get_issue(socket: &Path, ca: &Path) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    if !head.starts_with("HTTP/1.1 200") {
        return head;
    }
    let mut tls = tls_over(s, "api.github.com", ca, true);
    write!(
        tls,
        "GET /repos/acme/widgets/issues/1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    answer.lines().next().unwrap_or_default().to_string()
}

/// Whether the proxy has closed `s` (a read sees end of file or a reset).
fn closed(mut s: &UnixStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut byte = [0u8; 1];
    match gatehouse_testkit::proxy::raw::read_some(&mut s, &mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn one_identity_holding_idle_connections_does_not_starve_another_or_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = github(d, &token);
    // 160 descriptors: 28 client connections in all, 7 for one identity.
    let proxy = start_proxy_process_with(d, &github, &token, limited("160:160"), |d| {
        let mut config = std::fs::OpenOptions::new()
            .append(true)
            .open(d.join("proxy.toml"))
            .unwrap();
        config.write_all(LIMITS.as_bytes()).unwrap();
    });
    let ca = d.join("ca.pem");
    let hog = create_identity(&proxy.admin, "tkt_hog");
    let other = create_identity(&proxy.admin, "tkt_other");
    assert!(
        get_issue(&other, &ca).starts_with("HTTP/1.1 200"),
        "control"
    );

    // The hog opens 400 connections and sends nothing.
    let held: Vec<UnixStream> = (0..400)
        .map(|_| UnixStream::connect(&hog).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let open = held.iter().filter(|s| !closed(s)).count();
    assert!(open <= 7, "the hog holds {open} connections");
    assert!(open >= 1, "the hog's first connections are served");

    // Another identity and the admin API are served meanwhile.
    for _ in 0..5 {
        let status = get_issue(&other, &ca);
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
    let (status, body) = admin(&proxy.admin, "GET", "/identities", None);
    assert_eq!(status, 200, "{body}");

    // A CONNECT whose TLS handshake never comes is cut after 1 s.
    let mut stalled = UnixStream::connect(&other).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stalled,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut stalled).starts_with("HTTP/1.1 200"));
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(4), "handshake held {waited:?}");

    // Idle connections are closed (6 s); then the hog may connect again.
    std::thread::sleep(Duration::from_secs(7));
    let still = held.iter().filter(|s| !closed(s)).count();
    assert_eq!(still, 0, "idle connections left open");
    drop(held);
    assert!(get_issue(&hog, &ca).starts_with("HTTP/1.1 200"));

    // The hog's refused connections are on record (rate-limited: lines and
    // counts), with its identity.
    let audit = std::fs::read_to_string(d.join("audit.jsonl")).unwrap();
    let refused = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| {
            l["identity"] == "tkt_hog"
                && l["outcome"]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("connections open"))
        })
        .count();
    assert!(refused >= 10, "{refused} refusal lines");
    let log = plain(&std::fs::read_to_string(&proxy.log).unwrap());
    assert!(log.contains("connection budget"), "{log}");
    assert!(log.contains("per_identity=7"), "{log}");
    drop(proxy);
}

/// `text` without terminal colour sequences (`ESC [ … m`).
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|c| *c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = github(d, &token);
    let proxy = start_proxy_process_with(d, &github, &token, limited("256:4096"), |_| {});
    let log = plain(&std::fs::read_to_string(&proxy.log).unwrap());
    assert!(log.contains("raised the open-file limit"), "{log}");
    assert!(log.contains("to=4096"), "{log}");
    // 4096 descriptors: a quarter of (4096 - 64) / 2 is over the default cap.
    assert!(log.contains("per_identity=256"), "{log}");
}
