//! The job API on the supervisor's unix socket (HTTP/1.1 + JSON), the
//! asynchronous tool contract:
//!
//! | call | answer |
//! |---|---|
//! | `POST /jobs` + `Idempotency-Key` | 202 `{job_id, state}`, `Location: /jobs/{id}`; same key+body: the same job; same key, other body: 409 |
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
const MAX_JOB_BODY: usize = 2 << 20;
const MAX_INBOX_BODY: usize = 64 * 1024;
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

/// `POST /jobs`.
async fn submit(supervisor: &Supervisor, headers: &HeaderMap, body: Bytes) -> Response<Body> {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 200)
    else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "missing_idempotency_key",
            "POST /jobs needs an Idempotency-Key header (1-200 visible characters)",
        );
    };
    let key = key.to_owned();
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
}
