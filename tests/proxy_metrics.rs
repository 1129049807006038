//! `gatehouse proxy` with `[metrics] listen`: scraped before and after real
//! traffic through a ticket's identity (allowed requests, a denied one),
//! the exposition parses, the counts moved by exactly that traffic, and no
//! label holds the ticket's id or a secret; off when not configured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_testkit::metrics::{free_port, parse, scrape, sum, Sample};
use gatehouse_testkit::proxy::process::{admin_call as admin, start_proxy_process_with};
use gatehouse_testkit::proxy::{read_head, read_until_closed, tls_over};
use gatehouse_testkit::random::token as random_token;
use serde_json::Value;

fn get(socket: &Path, ca: &Path, path: &str) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    let mut tls = tls_over(s, "api.github.com", ca, true);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    answer.lines().next().unwrap_or_default().to_owned()
}

fn emulator(d: &Path, token: &str) -> GithubHandle {
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .token(token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    github
}

fn samples(addr: std::net::SocketAddr) -> (String, Vec<Sample>) {
    let (code, content_type, body) = scrape(addr);
    assert_eq!(code, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let parsed = parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    (body, parsed)
}

#[test]
fn scraped_after_real_traffic_the_counts_move_and_no_label_holds_an_id_or_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = emulator(d, &token);
    let addr = free_port();
    let proxy = start_proxy_process_with(
        d,
        &github,
        &token,
        gatehouse_testkit::bin::command(),
        |dir| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("proxy.toml"))
                .unwrap();
            writeln!(f, "\n[metrics]\nlisten = \"{addr}\"").unwrap();
        },
    );
    let (_, before) = samples(addr);
    let ticket = "tkt_metrics01";
    let new = format!(
        r#"{{"name":"{ticket}","rule_sets":["test-worker"],"tunnel_hosts":[],"variables":{{"repo":"acme/widgets"}}}}"#
    );
    let (status, body) = admin(&proxy.admin, "POST", "/identities", Some(&new));
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let socket = PathBuf::from(created["socket"].as_str().unwrap());
    let ca = d.join("ca.pem");
    for _ in 0..3 {
        assert_eq!(
            get(&socket, &ca, "/repos/acme/widgets/issues/1"),
            "HTTP/1.1 200 OK"
        );
    }
    assert!(get(&socket, &ca, "/repos/acme/other/issues/1").starts_with("HTTP/1.1 403"));
    assert!(get(&socket, &ca, "/user").starts_with("HTTP/1.1 403"));
    let (text, after) = samples(addr);

    let moved =
        |name: &str, with: &[(&str, &str)]| sum(&after, name, with) - sum(&before, name, with);
    let allowed = [
        ("identity", "ticket"),
        ("rule_set", "test-worker"),
        ("rule", "issue-read"),
        ("decision", "allow"),
    ];
    assert_eq!(
        moved("gatehouse_proxy_requests_total", &allowed),
        3.0,
        "{text}"
    );
    assert_eq!(
        moved(
            "gatehouse_proxy_requests_total",
            &[("identity", "ticket"), ("decision", "deny")]
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        moved(
            "gatehouse_proxy_denials_total",
            &[("identity", "ticket"), ("reason", "rule")]
        ),
        2.0,
        "{text}"
    );
    let latency = [("identity", "ticket"), ("status", "2xx")];
    assert_eq!(
        moved("gatehouse_proxy_request_duration_seconds_count", &latency),
        3.0,
        "{text}"
    );
    assert!(moved("gatehouse_proxy_request_duration_seconds_sum", &latency) > 0.0);
    // Each bucket counts at most what the next one does; +Inf all of them.
    let buckets: Vec<&Sample> = after
        .iter()
        .filter(|s| s.name == "gatehouse_proxy_request_duration_seconds_bucket")
        .filter(|s| latency.iter().all(|(k, v)| s.labels[*k] == *v))
        .collect();
    assert!(buckets.windows(2).all(|w| w[0].value <= w[1].value));
    assert_eq!(buckets.last().unwrap().labels["le"], "+Inf");
    assert_eq!(buckets.last().unwrap().value, 3.0);
    // Every record was written (request lines at least), none failed.
    assert!(
        moved(
            "gatehouse_proxy_audit_write_seconds_count",
            &[("op", "write")]
        ) >= 5.0,
        "{text}"
    );
    assert_eq!(
        sum(&after, "gatehouse_proxy_audit_failures_total", &[]),
        0.0
    );

    for s in &after {
        for (k, v) in &s.labels {
            assert!(
                !v.contains("tkt_"),
                "{}: label {k}={v} holds a ticket id",
                s.name
            );
        }
    }
    assert!(!text.contains(ticket), "the ticket id is in the exposition");
    assert!(!text.contains(&token), "the token is in the exposition");
    // Only /metrics is served.
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 404"));
}

#[test]
fn not_configured_no_metrics_are_served_and_an_open_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = emulator(d, &token);
    let proxy = gatehouse_testkit::proxy::process::start_proxy_process(d, &github, &token);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = std::fs::read_to_string(&proxy.log).unwrap();
        if log.contains("gatehouse proxy ready") || std::time::Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(log.contains("gatehouse proxy ready"), "{log}");
    assert!(!log.contains("metrics on"), "{log}");
    drop(proxy);
    // A non-loopback address: the proxy does not start, and says why.
    let text = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
    std::fs::write(
        d.join("proxy.toml"),
        format!("{text}\n[metrics]\nlisten = \"0.0.0.0:9464\"\n"),
    )
    .unwrap();
    let out = gatehouse_testkit::bin::command()
        .args(["proxy", "--config"])
        .arg(d.join("proxy.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("metrics.listen") && err.contains("loopback"),
        "{err}"
    );
}
