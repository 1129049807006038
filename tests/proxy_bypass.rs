//! Attempts to sidestep a rule that allowed a request, each made over the
//! identity socket and required to fail, each beside a positive control
//! that the same route, sent plainly, is served: a query string next to a
//! checked body, a JSON key given twice, a method-override header, a second
//! `Content-Encoding`, and a request sent after a refused CONNECT on the
//! same connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use gatehouse_testkit::proxy::{read_all, read_head, read_until_closed, Harness, IDENTITY};

const GRAPHQL_OK: &str = r#"{"query":"{ repository(owner: \"acme\", name: \"widgets\") { id } }"}"#;
const MUTATION: &str = "mutation%7BaddComment(input:%7B%7D)%7BclientMutationId%7D%7D";

/// One request inside an intercepted tunnel to `host`, with `Connection:
/// close`; returns the status and the whole answer.
fn exchange(h: &Harness, host: &str, head: &str, body: &str) -> (u16, String) {
    let mut tls = h.tunnel(host, host);
    let request = format!(
        "{head}\r\nHost: {host}\r\nUser-Agent: gatehouse-test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // In one write: the proxy may refuse on the head alone and close, and a
    // later write would then fail before the answer is read.
    let _ = tls.write_all(request.as_bytes()).and_then(|()| tls.flush());
    let answer = read_all(&mut tls);
    let status = answer.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, answer)
}

/// The denials of `identity` in the audit log.
fn audited_denials(h: &Harness) -> Vec<serde_json::Value> {
    h.audit_lines()
        .into_iter()
        .filter(|l| l["outcome"]["decision"] == "deny" && l["identity"] == IDENTITY)
        .collect()
}

#[test]
fn a_query_string_next_to_a_checked_body_is_refused_in_every_spelling() {
    let h = Harness::start();
    let (status, answer) = exchange(&h, "api.github.com", "POST /graphql HTTP/1.1", GRAPHQL_OK);
    assert_eq!(status, 200, "control: {answer}");
    h.github.clear_requests();
    let targets = [
        format!("/graphql?query={MUTATION}"),
        format!("/graphql?%71uery={MUTATION}"),
        format!("/graphql?%71%75%65%72%79={MUTATION}"),
        format!("/graphql?a=1;query={MUTATION}"),
        format!("/graphql?=x&query={MUTATION}"),
        format!("/graphql?&query={MUTATION}"),
        format!("/graphql?query+={MUTATION}"),
        "/graphql?".to_string(),
        "/graphql?variables=%7B%7D".to_string(),
        "/graphql?operationName=Q".to_string(),
    ];
    for target in &targets {
        let head = format!("POST {target} HTTP/1.1");
        let (status, answer) = exchange(&h, "api.github.com", &head, GRAPHQL_OK);
        assert_eq!(status, 403, "{target}: {answer}");
        assert!(answer.contains("query may hold only"), "{target}: {answer}");
    }
    // A push takes no query either.
    let push = "POST /acme/widgets.git/git-receive-pack?x=1 HTTP/1.1";
    let (status, answer) = exchange(&h, "github.com", push, "0000");
    assert_eq!(status, 403, "{answer}");
    assert!(h.github.requests().is_empty(), "{:?}", h.github.requests());
    assert!(audited_denials(&h).len() > targets.len());
}

#[test]
fn a_json_key_given_twice_is_refused_in_every_spelling() {
    let h = Harness::start();
    let pull = h.own_pull();
    let comment = format!("POST /repos/acme/widgets/issues/{pull}/comments HTTP/1.1");
    let (status, answer) = exchange(&h, "api.github.com", &comment, r#"{"body":"hello"}"#);
    assert_eq!(status, 201, "control: {answer}");
    let (status, answer) = exchange(&h, "api.github.com", "POST /graphql HTTP/1.1", GRAPHQL_OK);
    assert_eq!(status, 200, "control: {answer}");
    h.github.clear_requests();
    let smuggled = r#"mutation { addComment(input: {}) { clientMutationId } }"#;
    let allowed = r#"{ repository(owner: \"acme\", name: \"widgets\") { id } }"#;
    for body in [
        format!(r#"{{"query":"{allowed}","query":"{smuggled}"}}"#),
        format!(r#"{{"query":"{smuggled}","\u0071uery":"{allowed}"}}"#),
        format!(r#"{{"\u0071\u0075\u0065\u0072\u0079":"{allowed}","query":"{smuggled}"}}"#),
        format!(r#"{{"query":"{allowed}","variables":{{"o":{{"a":1,"\u0061":2}}}}}}"#),
    ] {
        let (status, answer) = exchange(&h, "api.github.com", "POST /graphql HTTP/1.1", &body);
        assert_eq!(status, 403, "{body}: {answer}");
        assert!(answer.contains("twice"), "{body}: {answer}");
    }
    for body in [
        r#"{"body":"hello","body":"rewritten"}"#,
        r#"{"body":"hello","\u0062ody":"rewritten"}"#,
    ] {
        let (status, answer) = exchange(&h, "api.github.com", &comment, body);
        assert_eq!(status, 403, "{body}: {answer}");
    }
    // Depth is bounded too.
    let deep = format!(r#"{{"body":{}1{}}}"#, "[".repeat(40), "]".repeat(40));
    let (status, answer) = exchange(&h, "api.github.com", &comment, &deep);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("deeper"), "{answer}");
    assert!(h.github.requests().is_empty(), "{:?}", h.github.requests());
    assert!(h.github.comments().len() == 1, "only the control's comment");
}

#[test]
fn method_override_headers_are_refused() {
    let h = Harness::start();
    let get = "GET /repos/acme/widgets/issues/1 HTTP/1.1";
    let (status, answer) = exchange(&h, "api.github.com", get, "");
    assert_eq!(status, 200, "control: {answer}");
    h.github.clear_requests();
    for header in [
        "X-HTTP-Method-Override: DELETE",
        "X-HTTP-Method: DELETE",
        "X-Method-Override: PATCH",
        "x-http-method-override: PUT",
        "X_HTTP_METHOD_OVERRIDE: DELETE",
        "X-Original-Method: DELETE",
    ] {
        let head = format!("{get}\r\n{header}");
        let (status, answer) = exchange(&h, "api.github.com", &head, "");
        assert_eq!(status, 403, "{header}: {answer}");
        assert!(answer.contains("another method"), "{header}: {answer}");
    }
    assert!(h.github.requests().is_empty(), "{:?}", h.github.requests());
}

#[test]
fn every_content_encoding_is_checked_not_only_the_first() {
    let h = Harness::start();
    let graphql = "POST /graphql HTTP/1.1";
    let plain = format!("{graphql}\r\nContent-Encoding: identity");
    let (status, answer) = exchange(&h, "api.github.com", &plain, GRAPHQL_OK);
    assert_eq!(status, 200, "control: {answer}");
    h.github.clear_requests();
    for headers in [
        "Content-Encoding: identity\r\nContent-Encoding: gzip",
        "Content-Encoding: identity, gzip",
        "Content-Encoding: identity,br",
        "Content-Encoding: gzip",
    ] {
        let head = format!("{graphql}\r\n{headers}");
        let (status, answer) = exchange(&h, "api.github.com", &head, GRAPHQL_OK);
        assert_eq!(status, 403, "{headers}: {answer}");
        let push = format!("POST /acme/widgets.git/git-receive-pack HTTP/1.1\r\n{headers}");
        let (status, answer) = exchange(&h, "github.com", &push, "0000");
        assert_eq!(status, 403, "{headers}: {answer}");
    }
    assert!(h.github.requests().is_empty(), "{:?}", h.github.requests());
}

/// A plain-HTTP request with both `Content-Length` and `Transfer-Encoding`,
/// hiding a second request in its body as the upstream would frame it.
const SMUGGLING: &str = "POST http://api.github.com/repos/acme/widgets/issues/1/comments HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nContent-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /repos/acme/widgets/issues/1?smuggled=1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n";

#[test]
fn the_framing_guard_holds_after_a_refused_connect() {
    let h = Harness::start();
    // Control: on a fresh connection the guard refuses the request itself.
    let mut s = h.raw();
    s.write_all(SMUGGLING.as_bytes()).unwrap();
    let (closed, answer) = read_until_closed(&mut s);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(closed);
    // A plain GET after an allowed one is served on a kept-alive connection,
    // so a request after the refused CONNECT would be read if the
    // connection stayed open.
    let mut s = h.raw();
    let get = "GET http://api.github.com/repos/acme/widgets/issues/1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\n\r\n";
    s.write_all(get.as_bytes()).unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    h.github.clear_requests();

    for refused in ["127.0.0.1:443", "api.github.com:22", "unnamed.example:443"] {
        let connect = format!("CONNECT {refused} HTTP/1.1\r\nHost: {refused}\r\n\r\n");
        // Pipelined in one write, and sent after the refusal arrived.
        let mut s = h.raw();
        s.write_all(format!("{connect}{SMUGGLING}").as_bytes())
            .unwrap();
        let (closed, answer) = read_until_closed(&mut s);
        assert!(answer.starts_with("HTTP/1.1 403"), "{refused}: {answer}");
        assert!(!answer.contains("HTTP/1.1 2"), "{refused}: {answer}");
        assert!(closed, "{refused}");

        let mut s = h.raw();
        s.write_all(connect.as_bytes()).unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 403"), "{refused}: {head}");
        assert!(head.to_ascii_lowercase().contains("connection: close"));
        // The proxy may already have closed: the write may fail.
        let _ = s.write_all(SMUGGLING.as_bytes());
        let (closed, rest) = read_until_closed(&mut s);
        assert!(closed, "{refused}");
        assert!(!rest.contains("HTTP/1.1 2"), "{refused}: {rest}");
    }
    assert!(h.github.requests().is_empty(), "{:?}", h.github.requests());
}
