//! The answers the proxy gives itself, rather than the upstream's (pure):
//! JSON errors an agent can read and adapt to, and git's own report format
//! for a refused push.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{self, ProxyBody};
use crate::receive_pack::StatusReport;
use crate::redact::{redact_all, Secrets};

/// The longest reason phrase the proxy writes, in bytes.
const MAX_REASON_PHRASE: usize = 200;

/// The status line's reason phrase for a refusal: the status's own words
/// and the reason, e.g. `Forbidden (gatehouse: no rule … names this host)`.
/// Clients that never show a body still show the status line: Python's
/// `http.client` (pip) reports a refused tunnel as `Tunnel connection
/// failed: 403 <phrase>`, curl and git print it too. Only visible ASCII and
/// spaces (RFC 9112 allows tab, space, VCHAR and obs-text), cut to a bound.
pub(super) fn reason_phrase(status: StatusCode, reason: &str) -> String {
    let words = status.canonical_reason().unwrap_or("Refused");
    let mut said: String = reason
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
    let room = MAX_REASON_PHRASE - words.len() - " (gatehouse: )".len();
    if said.len() > room {
        // ASCII by now, so any byte index is a char boundary.
        said.truncate(room - 3);
        said.push_str("...");
    }
    format!("{words} (gatehouse: {said})")
}

fn json_response(status: StatusCode, value: &Value, close: bool) -> Response<ProxyBody> {
    let mut resp = Response::new(body::full(value.to_string()));
    *resp.status_mut() = status;
    if let Some(reason) = value.get("reason").and_then(Value::as_str) {
        let phrase = reason_phrase(status, reason);
        // The phrase is ASCII without CR or LF (above), which is all the
        // status line needs.
        if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(phrase.into_bytes()) {
            resp.extensions_mut().insert(phrase);
        }
    }
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if close {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// 400 with the connection closed: the request's framing or target cannot
/// be trusted, so neither can anything after it on the same connection.
pub(super) fn bad_request(reason: &str) -> Response<ProxyBody> {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"error": "gatehouse_bad_request", "reason": reason}),
        true,
    )
}

pub(super) fn refused_identity() -> Response<ProxyBody> {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({"error": "gatehouse_denied", "reason": "this identity has been revoked"}),
        true,
    )
}

/// 403 saying which rule sets were tried and why none allowed the request.
pub(super) fn denied(
    method: &str,
    host: &str,
    path: &str,
    reason: &str,
    tried: &[String],
) -> Response<ProxyBody> {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({
            "error": "gatehouse_denied",
            "reason": reason,
            "method": method,
            "host": host,
            "path": path,
            "rule_sets_tried": tried,
        }),
        false,
    )
}

/// 429: a cap of the identity is full; the request was not looked at.
pub(super) fn too_many(reason: &str) -> Response<ProxyBody> {
    json_response(
        StatusCode::TOO_MANY_REQUESTS,
        &json!({"error": "gatehouse_limit", "reason": reason}),
        false,
    )
}

/// 414: the request target is over the budget the rules decide on.
pub(super) fn too_long(reason: &str) -> Response<ProxyBody> {
    json_response(
        StatusCode::URI_TOO_LONG,
        &json!({"error": "gatehouse_limit", "reason": reason}),
        false,
    )
}

/// 503 with `Retry-After`: the pool of body checks is full; the body was
/// not looked at.
pub(super) fn busy(reason: &str) -> Response<ProxyBody> {
    let mut resp = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": "gatehouse_busy", "reason": reason}),
        false,
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

pub(super) fn audit_unavailable() -> Response<ProxyBody> {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": "gatehouse_audit_unavailable", "reason": "the audit log cannot be written; nothing was forwarded"}),
        true,
    )
}

/// 502, with any secret the proxy holds redacted from the reason.
pub(super) fn upstream_failed(secrets: &Secrets, reason: &str) -> Response<ProxyBody> {
    json_response(
        StatusCode::BAD_GATEWAY,
        &json!({"error": "gatehouse_upstream", "reason": redact_text(secrets, reason)}),
        false,
    )
}

/// `text` with every secret the proxy holds redacted.
pub(super) fn redact_text(secrets: &Secrets, text: &str) -> String {
    String::from_utf8_lossy(&redact_all(secrets, text.as_bytes())).into_owned()
}

/// A refused push answered the way git reads it: git prints a report's
/// reasons next to each ref, where a 403 would only say "RPC failed".
pub(super) fn push_refused(report: &StatusReport, reason: &str) -> Response<ProxyBody> {
    let mut resp = Response::new(body::full(report.refusal(reason)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-git-receive-pack-result"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // The pack was not read: the connection cannot be reused.
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn read(resp: Response<ProxyBody>) -> (StatusCode, Option<String>, Vec<u8>) {
        let status = resp.status();
        let connection = resp
            .headers()
            .get(header::CONNECTION)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, connection, body.to_vec())
    }

    #[tokio::test]
    async fn own_answers_table() {
        let secrets = Secrets::new([b"ghs_secret".to_vec()]);
        let tried = ["github-worker".to_string()];
        // (answer, status, connection closed, JSON error code)
        let cases = [
            (bad_request("bad"), 400, true, "gatehouse_bad_request"),
            (refused_identity(), 403, true, "gatehouse_denied"),
            (
                denied("GET", "h.example", "/p", "no", &tried),
                403,
                false,
                "gatehouse_denied",
            ),
            (too_many("busy"), 429, false, "gatehouse_limit"),
            (
                audit_unavailable(),
                503,
                true,
                "gatehouse_audit_unavailable",
            ),
            (
                upstream_failed(&secrets, "token ghs_secret refused"),
                502,
                false,
                "gatehouse_upstream",
            ),
        ];
        for (resp, status, close, error) in cases {
            assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
            let phrase = resp
                .extensions()
                .get::<hyper::ext::ReasonPhrase>()
                .expect("every own answer says why in its status line");
            let phrase = String::from_utf8(phrase.as_bytes().to_vec()).unwrap();
            assert!(phrase.contains("(gatehouse: "), "{phrase}");
            assert!(!phrase.contains("ghs_secret"), "{phrase}");
            let (got_status, connection, body) = read(resp).await;
            assert_eq!(got_status.as_u16(), status, "{error}");
            assert_eq!(connection.as_deref() == Some("close"), close, "{error}");
            let json: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["error"], error);
            assert!(!String::from_utf8_lossy(&body).contains("ghs_secret"));
        }
    }

    #[test]
    fn reason_phrases_are_bounded_ascii_without_line_breaks() {
        let forbidden = StatusCode::FORBIDDEN;
        let cases = [
            (
                "no rule names this host",
                "Forbidden (gatehouse: no rule names this host)",
            ),
            (
                "a\r\nX-Injected: 1",
                "Forbidden (gatehouse: a??X-Injected: 1)",
            ),
            ("tab\there", "Forbidden (gatehouse: tab?here)"),
            ("non-ASCII é 中", "Forbidden (gatehouse: non-ASCII ? ?)"),
            ("", "Forbidden (gatehouse: )"),
        ];
        for (reason, phrase) in cases {
            assert_eq!(reason_phrase(forbidden, reason), phrase);
        }
        let long = reason_phrase(forbidden, &"x".repeat(10_000));
        assert_eq!(long.len(), MAX_REASON_PHRASE);
        assert!(long.ends_with("...)"), "{long}");
        let fits = "y".repeat(MAX_REASON_PHRASE - "Forbidden (gatehouse: )".len());
        assert_eq!(reason_phrase(forbidden, &fits).len(), MAX_REASON_PHRASE);
        assert!(!reason_phrase(forbidden, &fits).contains("..."));
        assert!(hyper::ext::ReasonPhrase::try_from(long.into_bytes()).is_ok());
    }

    #[tokio::test]
    async fn a_denial_names_the_request_and_the_rule_sets_tried() {
        let tried = ["a".to_string(), "b".to_string()];
        let (_, _, body) = read(denied("PUT", "h.example", "/p", "why", &tried)).await;
        let json: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            json!({"error": "gatehouse_denied", "reason": "why", "method": "PUT",
                   "host": "h.example", "path": "/p", "rule_sets_tried": ["a", "b"]})
        );
    }

    #[tokio::test]
    async fn a_refused_push_is_a_report_git_reads_on_a_closed_connection() {
        let mut prefix = Vec::new();
        let command = format!(
            "{} {} refs/heads/main\0report-status\n",
            "1".repeat(40),
            "2".repeat(40)
        );
        prefix.extend(crate::receive_pack::pkt_line(command.as_bytes()));
        prefix.extend_from_slice(b"0000");
        let report = StatusReport::requested(&prefix).unwrap();
        let resp = push_refused(&report, "not yours");
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "application/x-git-receive-pack-result"
        );
        let (status, connection, body) = read(resp).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(connection.as_deref(), Some("close"));
        assert_eq!(body, report.refusal("not yours"));
    }
}
