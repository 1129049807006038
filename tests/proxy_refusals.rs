//! Every refusal is on the record, with the identity: each attempt goes
//! over the identity socket for real, is refused, and the audit log is read
//! for its denial line (what was asked, by whom, why). An allowed request
//! beside them is recorded as allowed (the control).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use gatehouse_proxy::server::refusals::{BURST, PER_SECOND, WINDOW};
use gatehouse_testkit::proxy::{read_head, read_until_closed, Harness, IDENTITY};
use serde_json::Value;

const ISSUE: &str = "/repos/acme/widgets/issues/1";

/// Where an attempt is sent.
enum Via {
    /// The identity socket itself, before any CONNECT.
    Outer,
    /// An intercepted tunnel to api.github.com.
    Tunnel,
}

fn send(h: &Harness, via: &Via, raw: &[u8]) -> String {
    match via {
        Via::Outer => {
            let mut s = h.raw();
            s.write_all(raw).unwrap();
            read_until_closed(&mut s).1
        }
        Via::Tunnel => {
            let mut tls = h.tunnel("api.github.com", "api.github.com");
            tls.write_all(raw).unwrap();
            tls.flush().unwrap();
            read_until_closed(&mut tls).1
        }
    }
}

/// The one request line whose path is `path`.
fn line_for(h: &Harness, path: &str) -> Value {
    let lines: Vec<Value> = h
        .audit_lines()
        .into_iter()
        .filter(|l| l["event"] == "request" && l["path"] == path)
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one record of {path}: {:?}",
        h.audit_lines()
    );
    lines.into_iter().next().unwrap()
}

/// (what, via, raw request, recorded method, host, path, reason contains,
/// status answered)
type Case<'a> = (
    &'a str,
    Via,
    String,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
);

#[test]
fn every_refusal_is_recorded_with_the_identity_and_what_was_asked() {
    let h = Harness::start();
    let big = "x".repeat(40 * 1024);
    let cases: Vec<Case> = vec![
        (
            "Host mismatch in a tunnel",
            Via::Tunnel,
            "GET /r1 HTTP/1.1\r\nHost: github.com\r\n\r\n".into(),
            "GET", "api.github.com", "/r1", "Host header does not match", "400",
        ),
        (
            "absolute-form in a tunnel",
            Via::Tunnel,
            "GET https://evil.example/r2 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n".into(),
            "GET", "api.github.com", "/r2", "absolute-form", "400",
        ),
        (
            "CONNECT in a tunnel",
            Via::Tunnel,
            "CONNECT r3.example:443 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n".into(),
            "CONNECT", "api.github.com", "r3.example:443", "CONNECT inside a tunnel", "400",
        ),
        (
            "CL + TE in a tunnel",
            Via::Tunnel,
            "POST /r4 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
            "POST", "api.github.com", "/r4", "both Content-Length and Transfer-Encoding", "400",
        ),
        (
            "bare LF in a tunnel",
            Via::Tunnel,
            "GET /r5 HTTP/1.1\nHost: api.github.com\n\n".into(),
            "GET", "api.github.com", "/r5", "bare LF", "400",
        ),
        (
            "oversized head in a tunnel",
            Via::Tunnel,
            format!("GET /r6 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nX-Big: {big}\r\n\r\n"),
            "GET", "api.github.com", "/r6", "too large", "400",
        ),
        (
            "origin-form on the outer socket",
            Via::Outer,
            "GET /r7 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n".into(),
            "GET", "-", "/r7", "absolute-form http://host/path", "400",
        ),
        (
            "plain-HTTP Host mismatch",
            Via::Outer,
            "GET http://api.github.com/r8 HTTP/1.1\r\nHost: evil.example\r\n\r\n".into(),
            "GET", "api.github.com", "/r8", "Host header does not match", "400",
        ),
        (
            "CL + TE on the outer socket",
            Via::Outer,
            "POST http://api.github.com/r9 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(),
            "POST", "-", "http://api.github.com/r9", "both Content-Length and Transfer-Encoding", "400",
        ),
        (
            "CONNECT to port 22",
            Via::Outer,
            "CONNECT api.github.com:22 HTTP/1.1\r\nHost: api.github.com:22\r\n\r\n".into(),
            "CONNECT", "api.github.com", "api.github.com:22", "only port 443", "403",
        ),
    ];
    for (what, via, raw, method, host, path, reason, status) in cases {
        let answer = send(&h, &via, raw.as_bytes());
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{what}: {answer:?}"
        );
        let line = line_for(&h, path);
        assert_eq!(line["identity"], IDENTITY, "{what}: {line}");
        assert_eq!(line["method"], method, "{what}: {line}");
        assert_eq!(line["host"], host, "{what}: {line}");
        assert_eq!(line["outcome"]["decision"], "deny", "{what}: {line}");
        let why = line["outcome"]["reason"].as_str().unwrap();
        assert!(why.contains(reason), "{what}: {why:?}");
    }
    assert!(h.github.requests().is_empty(), "nothing was forwarded");

    // The control: an allowed request is on record as allowed.
    let mut tls = h.tunnel("api.github.com", "api.github.com");
    write!(
        tls,
        "GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let line = line_for(&h, ISSUE);
    assert_eq!(line["identity"], IDENTITY);
    assert_eq!(line["outcome"]["decision"], "allow", "{line}");
    gatehouse_proxy::audit::verify(&h.audit_path).unwrap();
}

#[test]
fn a_refused_connect_and_a_spliced_tunnel_record_the_port_asked_for() {
    let h = Harness::start();
    // A tunnel host listed with its default port: 8443 is not it.
    let mut s = h.raw();
    let host = gatehouse_testkit::proxy::TUNNEL_HOST;
    write!(
        s,
        "CONNECT {host}:8443 HTTP/1.1\r\nHost: {host}:8443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 403"));
    let line = line_for(&h, &format!("{host}:8443"));
    assert_eq!(line["outcome"]["decision"], "deny", "{line}");
    // The control: the listed port is spliced and recorded as such.
    let mut s = h.raw();
    write!(s, "CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    let line = line_for(&h, &format!("{host}:443"));
    assert_eq!(line["outcome"]["decision"], "allow", "{line}");
}

/// Sends `n` copies of `request` on one connection (written by a thread,
/// pipelined) and returns how many answers began with `status`.
fn flood(h: &Harness, request: &[u8], n: usize, status: &str) -> usize {
    let mut s = h.raw();
    let mut writer = s.try_clone().unwrap();
    let request = request.to_vec();
    let sender = std::thread::spawn(move || {
        for _ in 0..n {
            writer.write_all(&request).unwrap();
        }
    });
    let needle = format!("HTTP/1.1 {status} ");
    let (mut seen, mut tail, mut buf) = (0, Vec::new(), vec![0u8; 64 * 1024]);
    while seen < n {
        let got = gatehouse_testkit::proxy::raw::read_some(&mut s, &mut buf).unwrap();
        assert!(got > 0, "closed after {seen} answers");
        tail.extend_from_slice(&buf[..got]);
        let text = String::from_utf8_lossy(&tail).into_owned();
        seen += text.matches(&needle).count();
        // Keep what could be the start of a split status line.
        let keep = tail.len().min(needle.len());
        tail.drain(..tail.len() - keep);
    }
    sender.join().unwrap();
    seen
}

#[test]
fn a_flood_of_long_denied_requests_writes_a_bounded_log_and_every_one_is_counted() {
    use sha2::{Digest, Sha256};
    let h = Harness::start();
    let path = format!("/{}", "a".repeat(4 * 1024));
    let request =
        format!("GET http://api.github.com{path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n");
    let before = std::fs::metadata(&h.audit_path).unwrap().len();
    let n = 10_000;
    let started = std::time::Instant::now();
    assert_eq!(flood(&h, request.as_bytes(), n, "403"), n);
    let took = started.elapsed().as_secs_f64();
    let grown = std::fs::metadata(&h.audit_path).unwrap().len() - before;
    // Unbounded, that is 10 000 lines of over 8 KB each (80 MB). Bounded,
    // the identity writes its burst and then its rate for as long as the
    // flood lasted (a loaded machine's flood lasts longer and may write
    // more), plus a `suppressed` line per window; each line under 4 KiB.
    let refusal_lines = BURST + PER_SECOND * (took + 1.0);
    let summary_lines = took / WINDOW.as_secs_f64() + 2.0;
    let bound = (refusal_lines + summary_lines) * 4096.0;
    assert!(
        (grown as f64) < bound && (grown as usize) < n * 1024,
        "the flood wrote {grown} bytes of audit in {took:.1} s (bound {bound:.0})"
    );
    assert!(h.github.requests().is_empty());

    // The lines written are cut, with the hash of the whole path.
    let lines = h.audit_lines();
    let first = lines.iter().find(|l| l["event"] == "request").unwrap();
    assert_eq!(first["identity"], IDENTITY);
    assert!(path.starts_with(first["path"].as_str().unwrap()));
    assert!(first["path"].as_str().unwrap().len() <= 1024);
    let cut = &first["truncated"]["path"];
    assert_eq!(cut["bytes"], path.len());
    assert_eq!(cut["sha256"], hex::encode(Sha256::digest(path.as_bytes())));
    assert!(
        first.to_string().len() < 4096,
        "{}",
        first.to_string().len()
    );

    // Every refusal is on record: a line of its own or a count, the counts
    // written when the identity is revoked at the latest.
    h.proxy.remove_identity(IDENTITY).unwrap();
    let report = gatehouse_proxy::audit::verify(&h.audit_path).unwrap();
    let written = h
        .audit_lines()
        .iter()
        .filter(|l| l["event"] == "request" && l["outcome"]["decision"] == "deny")
        .count() as u64;
    assert!(report.suppressed_refusals > 0, "{report:?}");
    assert!(
        written as f64 <= refusal_lines,
        "{written} refusal lines in {took:.1} s"
    );
    assert_eq!(written + report.suppressed_refusals, n as u64);
    let summary = h
        .audit_lines()
        .into_iter()
        .find(|l| l["event"] == "suppressed")
        .unwrap();
    assert_eq!(summary["identity"], IDENTITY);
}
