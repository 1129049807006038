//! The job API on the supervisor's unix socket (HTTP/1.1 + JSON), the
//! asynchronous tool contract:
//!
//! | call | answer |
//! |---|---|
//! | `POST /jobs` + `Idempotency-Key` | 202 `{job_id, state}`, `Location: /jobs/{id}`; same key+body: the same job; same key, other body: 409; no key, or one repeated, empty, too long or not visible ASCII: 400 ([`idempotency_key`]) |
//! | `GET /jobs/{id}` | 200 job view; 404 unknown |
//! | `GET /jobs/{id}/result` | 200 once ended; 409 before |
//! | `DELETE /jobs/{id}` | 202 stop requested; 409 already ended (body names the state) |
//! | `POST /jobs/{id}/inbox` | 201 `{seq}`; 409 ended (a lost job's inbox stays open until its ticket's next job, which inherits it) |
//! | `GET /events?after=N&wait_ms=M` | 200 `{events, next}`: long-poll, cursor never skips |

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::json;

use super::http::{body_within, error_response, json_response, parse_json, Body};
use super::report::InboxMessage;
use super::service::{ServiceError, Supervisor};
use super::spec::JobRequest;

/// The largest body any call takes (a job); each route bounds its own.
pub const MAX_BODY: usize = MAX_JOB_BODY;
/// The largest `POST /jobs` body.
pub const MAX_JOB_BODY: usize = 2 << 20;
/// The largest `POST /jobs/{id}/inbox` body.
pub const MAX_INBOX_BODY: usize = 64 * 1024;
const MAX_WAIT: Duration = Duration::from_secs(60);
const EVENTS_PAGE: usize = 500;

pub async fn handle(supervisor: Supervisor, req: Request<Bytes>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = parts.method.clone();
    match (method, segments.as_slice()) {
        (Method::POST, ["jobs"]) => submit(&supervisor, &parts.headers, body).await,
        (Method::GET, ["jobs", id]) => match supervisor.job(id) {
            Ok(view) => json_response(StatusCode::OK, &view),
            Err(e) => service_error(e),
        },
        (Method::GET, ["jobs", id, "result"]) => match supervisor.result(id) {
            Ok(view) => json_response(StatusCode::OK, &view),
            Err(e) => service_error(e),
        },
        (Method::DELETE, ["jobs", id]) => match supervisor.cancel(id) {
            Ok(state) => json_response(
                StatusCode::ACCEPTED,
                &json!({"job_id": id, "state": state, "cancel_requested": true}),
            ),
            Err(e) => service_error(e),
        },
        (Method::POST, ["jobs", id, "inbox"]) => push_inbox(&supervisor, id, body).await,
        (Method::GET, ["events"]) => events(&supervisor, parts.uri.query().unwrap_or("")).await,
        (_, ["jobs"] | ["jobs", _] | ["jobs", _, "result" | "inbox"] | ["events"]) => {
            error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{} is not allowed on {path}", parts.method),
            )
        }
        _ => error_response(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route {path}"),
        ),
    }
}

/// The longest `Idempotency-Key` taken, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Why a `POST /jobs` has no usable `Idempotency-Key`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// no `Idempotency-Key` header
    #[error(
        "POST /jobs needs an Idempotency-Key header (1-{} visible ASCII characters)",
        MAX_IDEMPOTENCY_KEY
    )]
    Missing,
    /// the header was sent more than once
    #[error("the Idempotency-Key header was sent {0} times; send it once")]
    Repeated(usize),
    /// the header is there but empty
    #[error(
        "the Idempotency-Key header is empty; it needs 1-{} visible ASCII characters",
        MAX_IDEMPOTENCY_KEY
    )]
    Empty,
    /// longer than [`MAX_IDEMPOTENCY_KEY`] bytes
    #[error(
        "the Idempotency-Key is {0} bytes long; at most {max} are taken",
        max = MAX_IDEMPOTENCY_KEY
    )]
    TooLong(usize),
    /// a byte that is not visible ASCII (a space, a tab, a control
    /// character or a non-ASCII byte), at this offset
    #[error("the Idempotency-Key has byte 0x{byte:02x} at offset {at}; only visible ASCII (0x21-0x7e) is taken, no spaces or tabs")]
    Invalid { at: usize, byte: u8 },
}

impl KeyError {
    /// The error code of the `400` answer.
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::Missing => "missing_idempotency_key",
            _ => "invalid_idempotency_key",
        }
    }
}

/// The `Idempotency-Key` of a `POST /jobs`: exactly one header, 1 to
/// [`MAX_IDEMPOTENCY_KEY`] bytes of visible ASCII (`0x21..=0x7e`). A repeated
/// header, a space or tab (inside the value; hyper trims them at its ends),
/// a control or non-ASCII byte, or an over-long key is refused, never
/// trimmed, joined or picked from. Looks at each byte of the one value at
/// most once.
pub fn idempotency_key(headers: &HeaderMap) -> Result<&str, KeyError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Err(KeyError::Missing);
    };
    let more = values.count();
    if more > 0 {
        return Err(KeyError::Repeated(more + 1));
    }
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(KeyError::Empty);
    }
    if bytes.len() > MAX_IDEMPOTENCY_KEY {
        return Err(KeyError::TooLong(bytes.len()));
    }
    if let Some(at) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(KeyError::Invalid {
            at,
            byte: bytes[at],
        });
    }
    // Visible ASCII is UTF-8.
    std::str::from_utf8(bytes).map_err(|e| KeyError::Invalid {
        at: e.valid_up_to(),
        byte: bytes[e.valid_up_to()],
    })
}

/// `POST /jobs`.
async fn submit(supervisor: &Supervisor, headers: &HeaderMap, body: Bytes) -> Response<Body> {
    let key = match idempotency_key(headers) {
        Ok(key) => key.to_owned(),
        Err(e) => return error_response(StatusCode::BAD_REQUEST, e.code(), e.to_string()),
    };
    let bytes = match body_within(body, MAX_JOB_BODY) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let request: JobRequest = match parse_json(&bytes) {
        Ok(r) => r,
        Err(resp) => return *resp,
    };
    match supervisor.submit(&key, request) {
        Ok((job, created)) => {
            let mut resp = json_response(
                StatusCode::ACCEPTED,
                &json!({"job_id": job.id, "state": job.state}),
            );
            if let Ok(loc) = HeaderValue::from_str(&format!("/jobs/{}", job.id)) {
                resp.headers_mut().insert(http::header::LOCATION, loc);
            }
            if !created {
                resp.headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
            }
            resp
        }
        Err(e) => service_error(e),
    }
}

/// `POST /jobs/{id}/inbox`.
async fn push_inbox(supervisor: &Supervisor, id: &str, body: Bytes) -> Response<Body> {
    let bytes = match body_within(body, MAX_INBOX_BODY) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let message: InboxMessage = match parse_json(&bytes) {
        Ok(m) => m,
        Err(resp) => return *resp,
    };
    match supervisor.push_inbox(id, &message) {
        Ok(seq) => json_response(StatusCode::CREATED, &json!({"seq": seq})),
        Err(e) => service_error(e),
    }
}

/// `GET /events?after=N&wait_ms=M`.
async fn events(supervisor: &Supervisor, query: &str) -> Response<Body> {
    let (after, wait) = match events_query(query) {
        Ok(q) => q,
        Err(msg) => return error_response(StatusCode::BAD_REQUEST, "invalid_query", msg),
    };
    match supervisor.events(after, EVENTS_PAGE, wait).await {
        Ok(events) => {
            let next = events.last().map(|e| e.seq).unwrap_or(after);
            json_response(StatusCode::OK, &json!({"events": events, "next": next}))
        }
        Err(e) => service_error(e),
    }
}

/// `after=N` (default 0) and `wait_ms=M` (default 0, at most 60 s).
pub fn events_query(query: &str) -> Result<(i64, Duration), String> {
    let mut after = 0i64;
    let mut wait = Duration::ZERO;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "after" => {
                after = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or("`after` must be a non-negative event sequence number")?
            }
            "wait_ms" => {
                let ms: u64 = v.parse().map_err(|_| "`wait_ms` must be milliseconds")?;
                wait = Duration::from_millis(ms).min(MAX_WAIT);
            }
            other => return Err(format!("unknown query parameter `{other}`")),
        }
    }
    Ok((after, wait))
}

fn service_error(e: ServiceError) -> Response<Body> {
    let msg = e.to_string();
    match e {
        ServiceError::NotFound(_) => error_response(StatusCode::NOT_FOUND, "not_found", msg),
        ServiceError::Spec(_) | ServiceError::Report(_) | ServiceError::Profile(_) => {
            error_response(StatusCode::BAD_REQUEST, "invalid_body", msg)
        }
        ServiceError::KeyConflict { job_id } => json_response(
            StatusCode::CONFLICT,
            &json!({"error": {"code": "idempotency_key_reused", "message": msg}, "job_id": job_id}),
        ),
        ServiceError::TicketBusy { job_id } => json_response(
            StatusCode::CONFLICT,
            &json!({"error": {"code": "ticket_busy", "message": msg}, "job_id": job_id}),
        ),
        ServiceError::Ended { job_id, state } => json_response(
            StatusCode::CONFLICT,
            &json!({"error": {"code": "job_ended", "message": msg}, "job_id": job_id, "state": state}),
        ),
        ServiceError::NotEnded { job_id, state } => json_response(
            StatusCode::CONFLICT,
            &json!({"error": {"code": "job_not_ended", "message": msg}, "job_id": job_id, "state": state}),
        ),
        _ => {
            tracing::error!("job API: {msg}");
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal", msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_query_table() {
        assert_eq!(events_query(""), Ok((0, Duration::ZERO)));
        assert_eq!(
            events_query("after=7&wait_ms=250"),
            Ok((7, Duration::from_millis(250)))
        );
        assert_eq!(events_query("wait_ms=999999999"), Ok((0, MAX_WAIT)));
        assert!(events_query("after=-1").is_err());
        assert!(events_query("after=x").is_err());
        assert!(events_query("cursor=1").is_err());
    }

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert("content-type", HeaderValue::from_static("application/json"));
        for v in values {
            map.append("idempotency-key", HeaderValue::from_bytes(v).unwrap());
        }
        map
    }

    #[test]
    fn idempotency_key_accepts_one_visible_ascii_value() {
        assert_eq!(idempotency_key(&headers(&[b"k1"])), Ok("k1"));
        assert_eq!(
            idempotency_key(&headers(&[b"tkt_412:trg_9f!~"])),
            Ok("tkt_412:trg_9f!~")
        );
        let longest = "k".repeat(MAX_IDEMPOTENCY_KEY);
        assert_eq!(
            idempotency_key(&headers(&[longest.as_bytes()])),
            Ok(longest.as_str())
        );
        // The header name is matched whatever its case (http lowercases it).
        let mut map = HeaderMap::new();
        map.insert(
            http::HeaderName::from_bytes(b"IDEMPOTENCY-KEY").unwrap(),
            HeaderValue::from_static("x"),
        );
        assert_eq!(idempotency_key(&map), Ok("x"));
    }

    #[test]
    fn idempotency_key_refusals_are_clear() {
        assert_eq!(idempotency_key(&headers(&[])), Err(KeyError::Missing));
        assert_eq!(
            idempotency_key(&headers(&[])).unwrap_err().code(),
            "missing_idempotency_key"
        );
        // Repeated, even with the same value twice: never one picked.
        assert_eq!(
            idempotency_key(&headers(&[b"a", b"a"])),
            Err(KeyError::Repeated(2))
        );
        assert_eq!(
            idempotency_key(&headers(&[b"a", b"b", b"c"])),
            Err(KeyError::Repeated(3))
        );
        assert_eq!(idempotency_key(&headers(&[b""])), Err(KeyError::Empty));
        let over = "k".repeat(MAX_IDEMPOTENCY_KEY + 1);
        assert_eq!(
            idempotency_key(&headers(&[over.as_bytes()])),
            Err(KeyError::TooLong(MAX_IDEMPOTENCY_KEY + 1))
        );
        assert_eq!(
            idempotency_key(&headers(&[b"a b"])),
            Err(KeyError::Invalid { at: 1, byte: b' ' })
        );
        assert_eq!(
            idempotency_key(&headers(&[b"a\tb"])),
            Err(KeyError::Invalid { at: 1, byte: b'\t' })
        );
        assert_eq!(
            idempotency_key(&headers(&["k\u{e9}".as_bytes()])),
            Err(KeyError::Invalid { at: 1, byte: 0xc3 })
        );
        for e in [
            KeyError::Repeated(2),
            KeyError::Empty,
            KeyError::TooLong(201),
            KeyError::Invalid { at: 0, byte: b' ' },
        ] {
            assert_eq!(e.code(), "invalid_idempotency_key");
            assert!(e.to_string().contains("Idempotency-Key"), "{e}");
        }
        // A too-long key with a bad byte is told by its length, checked first.
        let mut long_bad = vec![b' '; MAX_IDEMPOTENCY_KEY + 1];
        long_bad[0] = b'k';
        assert_eq!(
            idempotency_key(&headers(&[&long_bad])),
            Err(KeyError::TooLong(MAX_IDEMPOTENCY_KEY + 1))
        );
    }
}
