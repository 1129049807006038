//! Attacks on the proxy's I/O half, each attempted for real over the
//! identity socket and required to fail: target confusion (CONNECT, SNI,
//! Host, absolute-form), forbidden CONNECT targets, framing tricks, header
//! injection, credential leaks, and revoked identities.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use gatehouse_testkit::proxy::{
    read_all, read_head, read_until_closed, tls_over, Harness, IDENTITY, TUNNEL_HOST,
};
use serde_json::Value;

const ISSUE: &str = "/repos/acme/widgets/issues/1";

/// Sends raw bytes inside an intercepted tunnel to api.github.com and
/// returns what came back before the proxy closed the connection.
fn inside_tunnel(h: &Harness, raw: &[u8]) -> (bool, String) {
    let mut tls = h.tunnel("api.github.com", "api.github.com");
    tls.write_all(raw).unwrap();
    tls.flush().unwrap();
    read_until_closed(&mut tls)
}

fn assert_refused_400(h: &Harness, raw: &[u8]) {
    let (closed, answer) = inside_tunnel(h, raw);
    assert!(
        answer.starts_with("HTTP/1.1 400"),
        "expected 400 for {:?}, got {answer:?}",
        String::from_utf8_lossy(raw)
    );
    assert!(
        closed,
        "the connection must be closed after a framing attack"
    );
    assert!(
        h.github.requests().is_empty(),
        "nothing may reach the upstream: {:?}",
        h.github.requests()
    );
}

fn connect_answer(h: &Harness, authority: &str) -> (u16, String) {
    let mut s = h.raw();
    write!(
        s,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    let body = if status == 200 {
        String::new()
    } else {
        read_body(&head, &mut s)
    };
    (status, body)
}

fn read_body(head: &str, s: &mut impl std::io::Read) -> String {
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn assert_connect_denied(authority: &str) {
    let h = Harness::start();
    let (status, body) = connect_answer(&h, authority);
    assert_eq!(status, 403, "CONNECT {authority}: {body}");
    let denial: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(denial["error"], "gatehouse_denied");
    assert_eq!(denial["method"], "CONNECT");
    assert!(h.github.requests().is_empty());
}

// === CONNECT targets ===

#[test]
fn connect_to_an_ip_literal_is_refused() {
    assert_connect_denied("127.0.0.1:443");
}

#[test]
fn connect_to_an_ipv6_literal_is_refused() {
    assert_connect_denied("[::1]:443");
}

#[test]
fn connect_to_a_private_address_is_refused() {
    assert_connect_denied("10.0.0.1:443");
}

#[test]
fn connect_to_port_22_of_an_allowed_host_is_refused() {
    assert_connect_denied("api.github.com:22");
}

#[test]
fn connect_to_the_proxy_itself_is_refused() {
    assert_connect_denied("localhost:3128");
}

#[test]
fn connect_to_a_host_no_rule_names_is_refused() {
    assert_connect_denied("metadata.google.internal:443");
}

#[test]
fn connect_to_a_lookalike_host_is_refused() {
    assert_connect_denied("api.github.com.evil.example:443");
}

#[test]
fn tunnel_hosts_are_spliced_without_any_credential() {
    let h = Harness::start();
    let mut s = h.raw();
    write!(
        s,
        "CONNECT {TUNNEL_HOST}:443 HTTP/1.1\r\nHost: {TUNNEL_HOST}:443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    // End-to-end TLS with the upstream itself (its own CA, its own name):
    // the proxy only moves bytes.
    let upstream_ca = h.dir.path().join("upstream-ca.pem");
    let mut tls = tls_over(s, "api.github.com", &upstream_ca, true);
    write!(
        tls,
        "GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "no credential may be added: {answer}"
    );
    let seen = h.github.requests();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].authorization().is_none());
}

#[test]
fn a_host_both_named_by_rules_and_listed_as_tunnel_is_intercepted() {
    let h = Harness::start();
    // github.com is in the identity's tunnel_hosts too; a rule names it, so
    // the proxy intercepts (its leaf verifies against the proxy CA).
    let mut tls = h.tunnel("github.com", "github.com");
    write!(tls, "GET /acme/secret-plans.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: github.com\r\nConnection: close\r\n\r\n").unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(h.github.requests().is_empty());
}

// === target confusion inside the tunnel ===

#[test]
fn sni_differing_from_the_connect_host_is_cut() {
    let h = Harness::start();
    let mut tls = h.tunnel_with_sni("api.github.com", "evil.example");
    let _ = write!(tls, "GET {ISSUE} HTTP/1.1\r\nHost: evil.example\r\n\r\n");
    let (closed, answer) = read_until_closed(&mut tls);
    assert!(closed);
    assert!(
        answer.is_empty(),
        "no answer over a mismatched SNI: {answer}"
    );
    assert!(h.github.requests().is_empty());
}

#[test]
fn host_header_differing_from_the_connect_host_is_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET {ISSUE} HTTP/1.1\r\nHost: github.com\r\n\r\n").as_bytes(),
    );
}

#[test]
fn missing_host_header_is_refused() {
    let h = Harness::start();
    assert_refused_400(&h, format!("GET {ISSUE} HTTP/1.1\r\n\r\n").as_bytes());
}

#[test]
fn duplicate_host_headers_are_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nHost: evil.example\r\n\r\n")
            .as_bytes(),
    );
}

#[test]
fn absolute_form_inside_the_tunnel_is_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET https://evil.example{ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n")
            .as_bytes(),
    );
}

#[test]
fn absolute_form_naming_the_same_host_inside_the_tunnel_is_refused_too() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET https://api.github.com{ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n")
            .as_bytes(),
    );
}

// === framing ===

#[test]
fn differing_duplicate_content_lengths_are_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        b"POST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 2\r\nContent-Length: 12\r\n\r\n{}",
    );
}

#[test]
fn content_length_with_transfer_encoding_is_refused_and_nothing_is_smuggled() {
    let h = Harness::start();
    let smuggled =
        "GET /repos/acme/widgets/issues/1?smuggled=1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n";
    let raw = format!(
        "POST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}"
    );
    assert_refused_400(&h, raw.as_bytes());
    // The same with the headers the other way round.
    let raw = format!(
        "POST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{smuggled}"
    );
    assert_refused_400(&h, raw.as_bytes());
}

#[test]
fn equal_duplicate_content_lengths_are_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        b"POST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
    );
}

#[test]
fn bare_lf_line_endings_are_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET {ISSUE} HTTP/1.1\nHost: api.github.com\n\n").as_bytes(),
    );
}

#[test]
fn a_request_pipelined_after_a_framing_attack_is_never_served() {
    let h = Harness::start();
    let raw = format!(
        "GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\nPOST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{{}}GET {ISSUE}?third=1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n"
    );
    let (closed, answer) = inside_tunnel(&h, raw.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("HTTP/1.1 400"), "{answer}");
    assert!(closed);
    let seen = h.github.requests();
    assert_eq!(
        seen.len(),
        1,
        "only the first request may be served: {seen:?}"
    );
}

#[test]
fn invalid_content_length_is_refused() {
    let h = Harness::start();
    for cl in ["2x", "-2", "+2", "0x2", "2, 3"] {
        let raw = format!(
            "POST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: {cl}\r\n\r\n{{}}"
        );
        assert_refused_400(&h, raw.as_bytes());
    }
}

#[test]
fn transfer_encoding_other_than_chunked_is_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        b"POST /repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nTransfer-Encoding: chunked, identity\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    );
}

#[test]
fn obsolete_line_folding_is_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nX-Folded: a\r\n b\r\n\r\n")
            .as_bytes(),
    );
}

#[test]
fn bare_cr_in_a_header_value_is_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nX-Note: a\rAuthorization: Bearer forged\r\n\r\n").as_bytes(),
    );
}

#[test]
fn header_name_with_space_before_colon_is_refused() {
    let h = Harness::start();
    assert_refused_400(
        &h,
        format!("GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length : 5\r\n\r\n")
            .as_bytes(),
    );
}

/// A request head of exactly `len` bytes.
fn head_of(len: usize) -> String {
    let start = format!(
        "GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nX-Pad: "
    );
    let fill = len - start.len() - "\r\nConnection: close\r\n\r\n".len();
    format!("{start}{}\r\nConnection: close\r\n\r\n", "a".repeat(fill))
}

/// Sends `raw` inside a tunnel in pieces of `piece` bytes (each its own TLS
/// record, so the proxy reads it in pieces); what came back.
fn inside_tunnel_in_pieces(h: &Harness, raw: &[u8], piece: usize) -> (bool, String) {
    let mut tls = h.tunnel("api.github.com", "api.github.com");
    for part in raw.chunks(piece) {
        // After a refusal the proxy closes; later writes may fail.
        if tls.write_all(part).and_then(|()| tls.flush()).is_err() {
            break;
        }
    }
    read_until_closed(&mut tls)
}

#[test]
fn oversized_heads_are_refused_at_one_limit_however_they_arrive() {
    let h = Harness::start();
    let max = gatehouse_proxy::server::framing::MAX_HEAD_BYTES;
    for piece in [usize::MAX, 1000, 7] {
        // Control: a head of exactly the limit is served.
        let (_, answer) = inside_tunnel_in_pieces(&h, head_of(max).as_bytes(), piece);
        assert!(answer.starts_with("HTTP/1.1 200"), "{piece}: {answer}");
        // The first `max` bytes of longer heads: refused once they are all
        // there, by the guard (400), not hyper (431). Nothing more is sent:
        // the proxy closes at its verdict, and bytes still in flight then
        // would reset the connection before the answer is read.
        for len in [max + 1, max + 4, 2 * max] {
            let head = head_of(len);
            let (closed, answer) = inside_tunnel_in_pieces(&h, &head.as_bytes()[..max], piece);
            assert!(
                answer.starts_with("HTTP/1.1 400"),
                "{len} by {piece}: {answer}"
            );
            assert!(closed);
        }
    }
    assert_eq!(h.github.requests().len(), 3, "only the controls");
}

#[test]
fn a_long_chunk_extension_is_refused_however_it_arrives() {
    let h = Harness::start();
    let head = "POST /graphql HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    // A chunk-size line one byte over the guard's 4096 (the LF not
    // counted), and nothing after it (see the heads' test for why).
    let over = format!("{head}1;{}", "e".repeat(4095));
    let short = format!("{head}1;{}\r\n{{\r\n0\r\n\r\n", "e".repeat(10));
    for piece in [usize::MAX, 100, 7] {
        // The head has passed; the guard cuts the body, so the body check
        // cannot read it and the request is refused, the connection closed.
        let (closed, answer) = inside_tunnel_in_pieces(&h, over.as_bytes(), piece);
        assert!(answer.starts_with("HTTP/1.1 403"), "{piece}: {answer}");
        assert!(
            answer.contains("reading the request body failed"),
            "{piece}: {answer}"
        );
        assert!(closed);
        // Control: a short extension reaches the body check, which judges
        // the one-byte document itself.
        let (_, answer) = inside_tunnel_in_pieces(&h, short.as_bytes(), piece);
        assert!(answer.starts_with("HTTP/1.1 403"), "{piece}: {answer}");
        assert!(answer.contains("JSON body"), "{piece}: {answer}");
    }
    assert!(h.github.requests().is_empty());
}

// === credentials ===

#[test]
fn client_proxy_authorization_and_api_keys_never_reach_upstream() {
    let h = Harness::start();
    let (status, _, _) = h.curl(
        &[
            "-H",
            "Proxy-Authorization: Basic Zm9vOmJhcg==",
            "-H",
            "X-Api-Key: client-key",
            "-H",
            "Private-Token: client-token",
            "-H",
            "X-Forwarded-Host: evil.example",
            "-H",
            "Forwarded: for=10.0.0.1",
        ],
        &format!("https://api.github.com{ISSUE}"),
    );
    assert_eq!(status, 200);
    let seen = h.github.requests();
    let last = seen.last().unwrap();
    for name in [
        "proxy-authorization",
        "x-api-key",
        "private-token",
        "x-forwarded-host",
        "forwarded",
    ] {
        assert!(last.header(name).is_none(), "{name} reached the upstream");
    }
    assert_eq!(
        last.authorization(),
        Some(format!("Bearer {}", h.token).as_str())
    );
}

#[test]
fn secrets_echoed_by_the_upstream_are_redacted() {
    let h = Harness::start();
    let n = h
        .github
        .add_issue(
            "acme/widgets",
            "leak",
            &format!("the token is {} ok", h.token),
            "mallory",
        )
        .unwrap();
    let (status, _, body) = h.curl(
        &[],
        &format!("https://api.github.com/repos/acme/widgets/issues/{n}"),
    );
    assert_eq!(status, 200);
    assert!(!body.contains(&h.token), "secret reached the sandbox");
    assert!(body.contains("the token is [REDACTED] ok"), "{body}");
}

#[test]
fn no_audit_line_holds_a_secret_or_a_query_value() {
    let h = Harness::start();
    let pull = h.own_pull();
    h.curl(
        &[],
        &format!("https://api.github.com{ISSUE}?state=sekrit-query-value"),
    );
    h.curl(
        &["-H", "Authorization: Bearer client-side-secret"],
        "https://api.github.com/repos/acme/secret-plans",
    );
    h.curl(
        &["-X", "POST", "-d", r#"{"body":"private words"}"#],
        &format!("https://api.github.com/repos/acme/widgets/issues/{pull}/comments"),
    );
    let lines = h.audit_lines();
    assert!(lines.len() >= 5, "{lines:?}");
    let text = std::fs::read_to_string(&h.audit_path).unwrap();
    for secret in [
        h.token.as_str(),
        "sekrit-query-value",
        "client-side-secret",
        "private words",
    ] {
        assert!(!text.contains(secret), "audit log holds {secret:?}");
    }
}

// === plain HTTP ===

#[test]
fn plain_http_goes_through_the_same_rules() {
    let h = Harness::start();
    let mut s = h.raw();
    write!(
        s,
        "GET http://api.github.com/repos/acme/secret-plans/issues/1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let answer = read_all(&mut s);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("gatehouse_denied"));
    assert!(h.github.requests().is_empty());
}

#[test]
fn plain_http_with_a_mismatched_host_is_refused() {
    let h = Harness::start();
    let mut s = h.raw();
    write!(
        s,
        "GET http://api.github.com{ISSUE} HTTP/1.1\r\nHost: evil.example\r\n\r\n"
    )
    .unwrap();
    let (closed, answer) = read_until_closed(&mut s);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(closed);
    assert!(h.github.requests().is_empty());
}

#[test]
fn encoded_path_tricks_reach_the_rules_unchanged_and_are_denied() {
    let h = Harness::start();
    for path in [
        "/repos/acme/widgets/issues/1/../../../secret-plans/issues/1",
        "/repos/acme/widgets/issues/%2e%2e/1",
        "/repos/acme%2fsecret-plans/issues/1",
        "/repos/acme/widgets//issues/1",
        "/repos/acme/widgets/issues/1%00",
    ] {
        let raw =
            format!("GET {path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n");
        let (_, answer) = inside_tunnel(&h, raw.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 403"), "{path}: {answer}");
    }
    assert!(h.github.requests().is_empty());
}

// === revocation ===

#[test]
fn revoked_identity_refuses_new_connections_and_cuts_open_ones() {
    let h = Harness::start();
    let mut tls = h.tunnel("api.github.com", "api.github.com");
    write!(
        tls,
        "GET {ISSUE} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut tls);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut idle_outer = h.raw();

    h.proxy.remove_identity(IDENTITY).unwrap();

    let (closed, _) = read_until_closed(&mut tls);
    assert!(closed, "an open tunnel must be cut");
    let (closed, _) = read_until_closed(&mut idle_outer);
    assert!(closed, "an idle connection must be cut");
    let err = std::os::unix::net::UnixStream::connect(&h.socket).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(h.proxy.identities().is_empty());
}

// === cost of checking untrusted bodies ===

#[test]
fn the_graphql_fragment_expansion_attack_is_refused_quickly_and_audited() {
    let h = Harness::start();
    // About 1 MiB: one fragment of 1000 root fields, spread 256 times in
    // each of 780 operations.
    let mut query = format!("fragment F on Query {{ {} }}\n", "__typename ".repeat(1000));
    for k in 0..780 {
        query.push_str(&format!("query Q{k} {{ {} }}\n", "...F ".repeat(256)));
    }
    let body = serde_json::json!({ "query": query }).to_string();
    assert!(body.len() > 1_000_000, "{}", body.len());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("attack.json");
    std::fs::write(&file, &body).unwrap();
    let started = std::time::Instant::now();
    let (status, _, answer) = h.curl(
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &format!("@{}", file.display()),
        ],
        "https://api.github.com/graphql",
    );
    let took = started.elapsed();
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("tokens"), "{answer}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    assert!(h.github.requests().is_empty(), "{:?}", h.github.requests());
    let audit = h.audit_lines();
    let line = audit
        .iter()
        .find(|l| l["outcome"]["decision"] == "deny" && l["path"] == "/graphql")
        .unwrap_or_else(|| panic!("no denial audited: {audit:?}"));
    assert_eq!(line["identity"], IDENTITY);

    // The positive control: a gh-style query still goes through.
    let control = serde_json::json!({
        "query": "query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { ...repo } } fragment repo on Repository { id name }",
        "variables": {"owner": "acme", "name": "widgets"},
    })
    .to_string();
    let (status, _, answer) = h.curl(
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            &control,
        ],
        "https://api.github.com/graphql",
    );
    assert_eq!(status, 200, "{answer}");
}
