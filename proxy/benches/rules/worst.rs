//! The worst-case group: every parser of untrusted input at the largest
//! input it accepts, in the shapes that cost it most: time (median) and
//! peak memory per request. The target is 10 ms and 16 MiB per request.
//!
//! Peak memory is measured in a fresh process per case (this bench run
//! again with `WORST_CASE=<n>`): the growth of the peak resident set
//! (`VmHWM`, reset through `clear_refs`) over the resident set once the
//! input is built. The allocator may reuse memory freed while the input
//! was built, so a figure can understate by up to the input's size.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use gatehouse_proxy::graphql::{self, GraphQlAllow};
use gatehouse_proxy::path::{Vars, MAX_PATH_BYTES, MAX_PATH_SEGMENTS, MAX_QUERY_PAIRS};
use gatehouse_proxy::receive_pack::{self, CommandParser, ParseError, RefPattern, RefPolicy};
use gatehouse_proxy::redact::Redactor;
use gatehouse_proxy::rules::{Decision, RequestHead, RuleBook};
use gatehouse_proxy::{json, server::framing};

/// Largest body the proxy reads for a check (the GraphQL route's limit).
const BODY: usize = 1 << 20;

/// One worst case: its label and a run that returns whether the parser's
/// verdict was the expected one.
struct Case {
    label: String,
    run: Box<dyn Fn() -> bool>,
}

fn case(label: impl Into<String>, run: impl Fn() -> bool + 'static) -> Case {
    Case {
        label: label.into(),
        run: Box::new(run),
    }
}

fn allow() -> GraphQlAllow {
    GraphQlAllow {
        query: ["repository".to_owned(), "viewer".to_owned()].into(),
        mutation: ["addComment".to_owned()].into(),
        repository: Some("octo-org/hello-world".to_owned()),
    }
}

/// `{"query": <document>}`, the document padded with a comment (one token)
/// to just under [`BODY`].
fn graphql_body(document: &str) -> Vec<u8> {
    let pad = BODY - 64 - document.len();
    format!(r##"{{"query":"#{}\n{document}"}}"##, "c".repeat(pad)).into_bytes()
}

fn graphql_cases() -> Vec<Case> {
    let limits = graphql::MAX_DOCUMENT_TOKENS - 16;
    // Aliases: as many root fields as the token budget allows (6 tokens
    // each), each aliased with a name as long as the body allows.
    let fields = limits / 6;
    let alias = "a".repeat(BODY / fields - 24);
    let mut aliases = String::from("query {");
    for i in 0..fields {
        aliases.push_str(&format!(" {alias}{i}: viewer {{ login }}"));
    }
    aliases.push_str(" }");
    // Fragments: a fragment of 16 root fields spread 15 times in each of
    // 16 operations: 240 spreads and 3 840 fields, 4 080 root selections
    // of the budget's 4 096.
    let fragment = format!(
        "fragment F on Query {{{} }}",
        " viewer { login }".repeat(16)
    );
    let operation = format!("query {{{} }}", " ...F".repeat(15));
    let fragments = format!("{fragment} {}", operation.repeat(16));
    // Depth: root fragments nested as deep as allowed, and below the root
    // field a selection as deep as the parser takes.
    let deep_field = |depth: usize| {
        format!(
            "query {{{} viewer {{{} login{} }}{} }}",
            " ... on Query {".repeat(graphql::MAX_FRAGMENT_DEPTH),
            " f {".repeat(depth),
            " }".repeat(depth),
            " }".repeat(graphql::MAX_FRAGMENT_DEPTH),
        )
    };
    let depth = (1..200)
        .rev()
        .find(|&d| {
            graphql::check(
                &graphql_body(&deep_field(d)),
                &allow(),
                &graphql::KnownIds::default(),
            )
            .is_ok()
        })
        .unwrap_or(0);
    // Refused: a fragment spread far past the budget in the most
    // operations the token budget lets the parser read.
    let spreads = format!("query {{{} }} ", " ...F".repeat(250)).repeat(limits / 503);
    let refused = format!("fragment F on Query {{ viewer {{ login }} }} {spreads}");
    let shapes = [
        (format!("aliases ({fields} root fields)"), aliases, true),
        (
            "fragments (4 080 root selections)".to_owned(),
            fragments,
            true,
        ),
        (
            format!("depth ({depth} below the root)"),
            deep_field(depth),
            true,
        ),
        ("spreads past the budget".to_owned(), refused, false),
    ];
    shapes
        .into_iter()
        .map(|(label, document, allowed)| {
            let body = graphql_body(&document);
            let allow = allow();
            case(format!("GraphQL 1 MiB, {label}"), move || {
                graphql::check(black_box(&body), &allow, &graphql::KnownIds::default()).is_ok()
                    == allowed
            })
        })
        .collect()
}

/// A push of the most commands the parser takes, then a flush, fed one
/// byte per chunk as a hostile client may.
fn receive_pack_case() -> Case {
    let policy = RefPolicy {
        refs: vec![RefPattern::parse("refs/heads/gatehouse/*").unwrap()],
        delete: false,
    };
    let mut body = Vec::new();
    for i in 0..receive_pack::MAX_COMMANDS {
        let mut line = format!(
            "{} {} refs/heads/gatehouse/{i:04}",
            "0".repeat(40),
            "1".repeat(40)
        );
        if i == 0 {
            line.push_str("\0report-status");
        }
        line.push('\n');
        body.extend(receive_pack::pkt_line(line.as_bytes()));
    }
    body.extend_from_slice(b"0000");
    case(
        format!(
            "receive-pack, {} commands, 1 B chunks",
            receive_pack::MAX_COMMANDS
        ),
        move || {
            let mut parser = CommandParser::default();
            let mut prefix = BytesMut::new();
            for &byte in &body {
                prefix.extend_from_slice(&[byte]);
                match parser.parse(&prefix) {
                    Err(ParseError::NeedMore) => continue,
                    Ok(parsed) => return receive_pack::check(&parsed.commands, &policy).is_ok(),
                    Err(_) => return false,
                }
            }
            false
        },
    )
}

fn json_case() -> Case {
    let value = "v".repeat(BODY / json::MAX_KEYS - 16);
    let mut big = String::from("{\"deep\":");
    big.push_str(&"[".repeat(json::MAX_DEPTH - 1));
    big.push_str(&"]".repeat(json::MAX_DEPTH - 1));
    for i in 1..json::MAX_KEYS {
        big.push_str(&format!(",\"k{i}\":\"{value}\""));
    }
    big.push('}');
    case(
        format!(
            "JSON {} KiB, depth and keys at the limits",
            big.len() / 1024
        ),
        move || json::check_document(black_box(big.as_bytes())).is_ok(),
    )
}

fn framing_case() -> Case {
    let mut head = b"GET / HTTP/1.1\r\nX: ".to_vec();
    head.resize(framing::MAX_HEAD_BYTES - 4, b'a');
    head.extend_from_slice(b"\r\n\r\n");
    case("framing guard, head at the limit, 1 B chunks", move || {
        let mut tracker = framing::Tracker::default();
        let mut out = BytesMut::new();
        for part in head.chunks(1) {
            tracker.feed(part, &mut out);
        }
        tracker.violation().is_none()
    })
}

/// 63 held secrets sharing all but their last byte, and a 1 MiB answer of
/// near misses (the shared prefix over and over), redacted in 1 B and
/// 16 KiB chunks.
fn redaction_cases() -> Vec<Case> {
    let prefix = "ghs_".to_owned() + &"A".repeat(35);
    // Every last byte but `A` and `g`, which would make the answer match.
    let last = "0123456789abcdefhijklmnopqrstuvwxyzBCDEFGHIJKLMNOPQRSTUVWXYZ_-.";
    let secrets: Vec<Vec<u8>> = last
        .chars()
        .map(|c| format!("{prefix}{c}").into_bytes())
        .collect();
    let mut answer = prefix.repeat(BODY / prefix.len()).into_bytes();
    answer.truncate(BODY);
    [1, 16 * 1024]
        .into_iter()
        .map(|chunk| {
            let (secrets, answer) = (secrets.clone(), answer.clone());
            case(
                format!("redaction 1 MiB, prefix-sharing secrets, {chunk} B chunks"),
                move || {
                    let mut redactor = Redactor::new(secrets.clone());
                    let mut sent = 0;
                    for part in answer.chunks(chunk) {
                        sent += redactor.push(part).len();
                    }
                    sent += redactor.finish().len();
                    sent == answer.len()
                },
            )
        })
        .collect()
}

/// The request targets that cost the rule book most: the most segments,
/// one segment as long as allowed (where `{id:seg}` placeholders try every
/// length), the most query pairs on a route whose key is constrained.
fn path_cases(book: RuleBook, identity: Vec<String>, vars: Vars) -> Vec<Case> {
    let segments = format!(
        "/repos/octo-org/other{}",
        "/a".repeat(MAX_PATH_SEGMENTS - 3)
    );
    let long = format!(
        "/open-apis/im/v1/messages/{}",
        "m".repeat(MAX_PATH_BYTES - 26)
    );
    let pairs = vec!["receive_id_type=chat_id"; MAX_QUERY_PAIRS].join("&");
    let book = std::rc::Rc::new(book);
    let targets = [
        (
            "GET",
            "api.github.com",
            segments,
            None,
            "most segments, denied",
        ),
        (
            "POST",
            "open.feishu.cn",
            long,
            None,
            "one 8 KiB segment, denied",
        ),
        (
            "POST",
            "open.feishu.cn",
            "/open-apis/im/v1/messages".to_owned(),
            Some(pairs),
            "most query pairs, denied",
        ),
    ];
    targets
        .into_iter()
        .map(|(method, host, path, query, label)| {
            let (book, identity, vars) = (book.clone(), identity.clone(), vars.clone());
            assert!(path.len() <= MAX_PATH_BYTES);
            case(format!("rule book, {label}"), move || {
                let head = RequestHead {
                    method,
                    host,
                    path: &path,
                    query: query.as_deref(),
                };
                matches!(book.check(black_box(&head), &identity, &vars), Decision::Deny(d) if !d.reason.contains("decides on"))
            })
        })
        .collect()
}

fn cases(book: RuleBook, identity: Vec<String>, vars: Vars) -> Vec<Case> {
    let mut all = graphql_cases();
    all.push(receive_pack_case());
    all.push(json_case());
    all.push(framing_case());
    all.extend(redaction_cases());
    all.extend(path_cases(book, identity, vars));
    all
}

/// In a process run for one case: runs it once and prints the growth of
/// the peak resident set, in KiB.
pub fn measure_one(n: usize, book: RuleBook, identity: Vec<String>, vars: Vars) {
    let all = cases(book, identity, vars);
    let before = status_kib("VmRSS:");
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    assert!((all[n].run)(), "{}", all[n].label);
    println!("{}", status_kib("VmHWM:").saturating_sub(before));
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The peak of case `n`, from a fresh run of this bench.
fn peak_kib(n: usize) -> u64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("WORST_CASE", n.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Times every case and measures its peak; prints a table.
pub fn report(
    book: RuleBook,
    identity: Vec<String>,
    vars: Vars,
    median: impl Fn(usize, u32, &dyn Fn()) -> Duration,
) {
    println!("\nworst cases (target: 10 ms and 16 MiB per request)");
    for (n, c) in cases(book, identity, vars).iter().enumerate() {
        if !(c.run)() {
            println!("{:<58} UNEXPECTED VERDICT", c.label);
            continue;
        }
        let took = median(7, 3, &|| {
            black_box((c.run)());
        });
        let peak = peak_kib(n);
        let ok = took <= Duration::from_millis(10) && peak <= 16 * 1024;
        println!(
            "{:<58} {:>8.3} ms {:>8} KiB peak  {}",
            c.label,
            took.as_secs_f64() * 1e3,
            peak,
            if ok { "ok" } else { "OVER" }
        );
    }
}
