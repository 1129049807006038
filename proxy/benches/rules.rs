//! Cost of one rule decision on the shipped `github-worker` set, against a
//! baseline every request pays anyway: the SHA-256 of a 1 KiB audit line;
//! then the cost of the checks on bodies and bytes: the JSON check (one
//! meaning per document) on a `gh` query and on a 1 MiB document at its
//! limits, and the framing guard on a head at its limit, whole and a byte
//! at a time, and on a read full of pipelined requests.
//!
//! Then the worst-case group ([`worst`]): every parser of untrusted input
//! at its largest accepted input, time and peak memory per request.
//!
//! Run: `cargo bench -p gatehouse-proxy --bench rules`

use std::hint::black_box;
use std::time::{Duration, Instant};

use gatehouse_proxy::json;
use gatehouse_proxy::path::Vars;
use gatehouse_proxy::rules::{Decision, RequestHead, RuleBook, RuleSet};
use gatehouse_proxy::server::framing::{Tracker, MAX_HEAD_BYTES};
use sha2::{Digest, Sha256};

#[path = "rules/worst.rs"]
mod worst;

const SETS: &[(&str, &str)] = &[
    (
        "github-read.toml",
        include_str!("../../sandbox-profiles/rules/github-read.toml"),
    ),
    (
        "github-worker.toml",
        include_str!("../../sandbox-profiles/rules/github-worker.toml"),
    ),
    (
        "feishu-send.toml",
        include_str!("../../sandbox-profiles/rules/feishu-send.toml"),
    ),
    (
        "model-api.toml",
        include_str!("../../sandbox-profiles/rules/model-api.toml"),
    ),
];

/// Median time per call of `f`, over `rounds` rounds of `batch` calls.
fn median(rounds: usize, batch: u32, mut f: impl FnMut()) -> Duration {
    let mut samples: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..batch {
                f();
            }
            start.elapsed() / batch
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

/// (label, method, host, path, query, allowed).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    bool,
);

/// The requests timed: a table.
const CASES: &[Case] = &[
    (
        "allowed GET (issue comments)",
        "GET",
        "api.github.com",
        "/repos/octo-org/hello-world/issues/12/comments",
        Some("per_page=100"),
        true,
    ),
    (
        "allowed POST, message-marked",
        "POST",
        "api.github.com",
        "/repos/octo-org/hello-world/issues/12/comments",
        None,
        true,
    ),
    (
        "allowed git push",
        "POST",
        "github.com",
        "/octo-org/hello-world.git/git-receive-pack",
        None,
        true,
    ),
    (
        "denied: other repository",
        "GET",
        "api.github.com",
        "/repos/octo-org/other/issues/12/comments",
        None,
        false,
    ),
    (
        "denied: path trick",
        "GET",
        "api.github.com",
        "/repos/octo-org/hello-world/%2e%2e/x",
        None,
        false,
    ),
    (
        "denied: unknown host",
        "GET",
        "example.com",
        "/",
        None,
        false,
    ),
];

fn main() {
    let sets: Vec<RuleSet> = SETS
        .iter()
        .map(|(name, text)| RuleSet::parse(name, text).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let book = RuleBook::new(sets).unwrap_or_else(|e| panic!("{e}"));
    let identity = vec![
        "github-worker".to_owned(),
        "feishu-send".to_owned(),
        "model-api".to_owned(),
    ];
    let vars = Vars::from([("repo".to_owned(), "octo-org/hello-world".to_owned())]);
    if let Some(n) = std::env::var("WORST_CASE")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return worst::measure_one(n, book, identity, vars);
    }

    let line = vec![b'x'; 1024];
    let baseline = median(51, 2000, || {
        black_box(Sha256::digest(black_box(&line)));
    });
    println!(
        "baseline: SHA-256 of 1 KiB            {:>8.2} µs",
        baseline.as_secs_f64() * 1e6
    );

    for &(label, method, host, path, query, expect_allow) in CASES {
        let head = RequestHead {
            method,
            host,
            path,
            query,
        };
        let allowed = matches!(book.check(&head, &identity, &vars), Decision::Allow(_));
        assert_eq!(allowed, expect_allow, "{label}");
        let cost = median(51, 2000, || {
            black_box(book.check(black_box(&head), &identity, &vars));
        });
        println!(
            "{label:<36} {:>8.2} µs  = {:>5.2}x baseline",
            cost.as_secs_f64() * 1e6,
            cost.as_secs_f64() / baseline.as_secs_f64()
        );
    }
    checks(baseline);
    worst::report(book, identity, vars, |rounds, batch, f| {
        median(rounds, batch, f)
    });
}

/// The body and byte checks, timed against `baseline`.
fn checks(baseline: Duration) {
    let report = |label: &str, cost: Duration| {
        println!(
            "{label:<36} {:>8.2} µs  = {:>5.2}x baseline",
            cost.as_secs_f64() * 1e6,
            cost.as_secs_f64() / baseline.as_secs_f64()
        );
    };
    let gh = br#"{"query":"query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { id name description defaultBranchRef { name } } }","variables":{"owner":"octo-org","name":"hello-world"}}"#;
    assert!(json::check_document(gh).is_ok());
    report(
        "JSON check, gh query (250 B)",
        median(51, 2000, || {
            black_box(json::check_document(black_box(gh)).is_ok());
        }),
    );
    // 1 MiB: the most keys allowed, each with a long string, and one value
    // nested as deep as allowed.
    let value = "v".repeat(240);
    let mut big = String::from("{\"deep\":");
    big.push_str(&"[".repeat(json::MAX_DEPTH - 1));
    big.push_str(&"]".repeat(json::MAX_DEPTH - 1));
    for i in 1..json::MAX_KEYS {
        big.push_str(&format!(",\"k{i}\":\"{value}\""));
    }
    big.push('}');
    assert!(json::check_document(big.as_bytes()).is_ok());
    report(
        &format!("JSON check, {} KiB at the limits", big.len() / 1024),
        median(11, 5, || {
            black_box(json::check_document(black_box(big.as_bytes())).is_ok());
        }),
    );
    let mut head = b"GET / HTTP/1.1\r\nX: ".to_vec();
    head.resize(MAX_HEAD_BYTES - 4, b'a');
    head.extend_from_slice(b"\r\n\r\n");
    let mut out = bytes::BytesMut::new();
    for (label, piece) in [("whole", head.len()), ("a byte at a time", 1)] {
        report(
            &format!("framing guard, 32 KiB head, {label}"),
            median(11, 20, || {
                let mut tracker = Tracker::default();
                out.clear();
                for part in head.chunks(piece) {
                    tracker.feed(part, &mut out);
                }
                assert!(tracker.violation().is_none());
                black_box(&out);
            }),
        );
    }
    // Minimal requests pipelined to fill one 16 KiB read (what a guarded
    // connection reads at a time): each head is held alone and what follows
    // it read on, never copied again.
    let pipelined = b"A / HTTP/1.1\r\n\r\n".repeat(1024);
    report(
        "framing guard, 1 024 pipelined requests in one 16 KiB read",
        median(11, 20, || {
            let mut tracker = Tracker::default();
            out.clear();
            tracker.feed(&pipelined, &mut out);
            assert_eq!(tracker.requests(), 1024);
            black_box(&out);
        }),
    );
}
