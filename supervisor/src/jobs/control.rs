//! A job's control socket, mounted into its sandbox at
//! `/run/gatehouse/control.sock`. The socket is the identity: everything that
//! arrives on it concerns this one job, and no request can name another.
//!
//! - `POST /report` [`Report`] `{state, summary, question?, answers?, links?}` → 201
//! - `GET /inbox[?wait=1]` → 200 [`InboxPage`] `{messages: [{seq, at, text,
//!   trigger?}]}`, every message not acknowledged yet (at-least-once delivery)
//! - `POST /inbox/ack` [`InboxAck`] `{through: seq}` → 200 `{acknowledged: n}`
//!
//! Reports and acknowledgements share a per-job rate (429 `too_many_writes`
//! with `Retry-After`), and a job stores at most its report budget (429
//! `report_budget_spent`); see [`super::control_limits`].
//!
//! The bodies are the shared wire types, used here by both ends: the
//! server below and the worker's client (`send_report`, `read_inbox`,
//! `ack_inbox`).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gatehouse_types::wire::{InboxAck, InboxDelivery, InboxPage};
use http::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::net::UnixListener;

use super::codec::{to_json_bytes, CodecError};
use super::control_limits::{ConnectionGate, JobBudget, Refusal};
use super::http::{
    body_within, error_response, json_response, parse_json, request, Body, HttpError, ServeOptions,
};
use super::report::Report;
use super::service::{ServiceError, Supervisor};

/// The largest `POST /report` body a worker may send.
pub const MAX_REPORT_BODY: usize = 32 * 1024;
/// The largest `POST /inbox/ack` body.
pub const MAX_ACK_BODY: usize = 1024;

/// Serves job `job_id`'s control socket within the job's limits
/// ([`super::control_limits::ControlLimits`]): its connections beyond its share are closed at
/// accept, and its writes beyond the rate or its report budget are
/// answered 429.
pub async fn serve(listener: UnixListener, supervisor: Supervisor, job_id: String) {
    let inner = &supervisor.inner;
    let limits = inner.config.control;
    let options = ServeOptions {
        max_body: MAX_REPORT_BODY,
        read_timeout: limits.read_timeout(),
        gates: vec![
            ConnectionGate::new(inner.control_per_job),
            inner.control_gate.clone(),
        ],
        what: "a job's control socket",
    };
    let start = Instant::now();
    let budget = Arc::new(Mutex::new(JobBudget::new(limits, start.elapsed())));
    super::http::serve_with(
        listener,
        options,
        |_, _| true,
        move |req| {
            let supervisor = supervisor.clone();
            let job_id = job_id.clone();
            let budget = budget.clone();
            async move {
                let mut account = Account {
                    budget: &budget,
                    now: start.elapsed(),
                };
                handle(&supervisor, &job_id, &mut account, req).await
            }
        },
    )
    .await
}

/// The job's budget as one request sees it.
struct Account<'a> {
    budget: &'a Mutex<JobBudget>,
    now: Duration,
}

impl Account<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, JobBudget> {
        self.budget.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&mut self) -> Result<(), Refusal> {
        let now = self.now;
        self.lock().write(now)
    }
}

/// 429 with the reason; `Retry-After` when waiting helps.
fn too_many(refusal: Refusal) -> Response<Body> {
    let (code, retry) = match &refusal {
        Refusal::TooFast { retry_after_secs } => ("too_many_writes", Some(*retry_after_secs)),
        Refusal::Spent { .. } => ("report_budget_spent", None),
    };
    let mut resp = error_response(StatusCode::TOO_MANY_REQUESTS, code, refusal.message());
    if let Some(secs) = retry {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    resp
}

async fn handle(
    supervisor: &Supervisor,
    job_id: &str,
    account: &mut Account<'_>,
    req: Request<Bytes>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    match (&parts.method, parts.uri.path()) {
        (&Method::POST, "/report") => {
            if let Err(refusal) = account.write() {
                return too_many(refusal);
            }
            let bytes = match body_within(body, MAX_REPORT_BODY) {
                Ok(b) => b,
                Err(resp) => return *resp,
            };
            let report: Report = match parse_json(&bytes) {
                Ok(r) => r,
                Err(resp) => return *resp,
            };
            // What the store keeps of it: the report as JSON.
            let size = serde_json::to_vec(&report).map_or(u64::MAX, |v| v.len() as u64);
            // Held across the store write so concurrent reports cannot
            // both pass the check.
            let mut budget = account.lock();
            if let Err(refusal) = budget.report_fits(size) {
                return too_many(refusal);
            }
            match supervisor.report(job_id, &report) {
                Ok(id) => {
                    budget.stored(size);
                    json_response(StatusCode::CREATED, &json!({"report_id": id}))
                }
                Err(ServiceError::Report(e)) => {
                    error_response(StatusCode::BAD_REQUEST, "invalid_report", e.to_string())
                }
                Err(e) => {
                    error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                }
            }
        }
        (&Method::GET, "/inbox") => {
            let wait = parts
                .uri
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "wait=1" || kv == "wait=true"));
            match supervisor.read_inbox(job_id, wait).await {
                Ok(messages) => json_response(StatusCode::OK, &InboxPage { messages }),
                Err(e) => {
                    error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                }
            }
        }
        (&Method::POST, "/inbox/ack") => {
            if let Err(refusal) = account.write() {
                return too_many(refusal);
            }
            let bytes = match body_within(body, MAX_ACK_BODY) {
                Ok(b) => b,
                Err(resp) => return *resp,
            };
            let ack: InboxAck = match parse_json(&bytes) {
                Ok(a) => a,
                Err(resp) => return *resp,
            };
            match supervisor.ack_inbox(job_id, ack.through) {
                Ok(n) => json_response(StatusCode::OK, &json!({"acknowledged": n})),
                Err(e) => {
                    error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
                }
            }
        }
        (_, "/report" | "/inbox" | "/inbox/ack") => error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "use POST /report, GET /inbox or POST /inbox/ack",
        ),
        _ => error_response(
            StatusCode::NOT_FOUND,
            "not_found",
            "the control socket serves POST /report, GET /inbox and POST /inbox/ack",
        ),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// the control socket could not be used
    #[error(transparent)]
    Http(#[from] HttpError),
    /// the supervisor refused the request
    #[error("the supervisor refused ({status}): {message}")]
    Refused { status: u16, message: String },
    /// the request could not be encoded
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// the supervisor answered something this client does not understand
    #[error("the supervisor's answer to {what} is malformed")]
    Malformed { what: &'static str },
}

fn refused(status: StatusCode, body: &Value) -> ControlError {
    ControlError::Refused {
        status: status.as_u16(),
        message: body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_owned(),
    }
}

/// `gatehouse report`: sends a report over `socket`.
pub async fn send_report(socket: &Path, report: &Report) -> Result<Value, ControlError> {
    let body = to_json_bytes("report", report)?;
    let resp = request(socket, Method::POST, "/report", &[], Some(body)).await?;
    let json = resp.json();
    if resp.status != StatusCode::CREATED {
        return Err(refused(resp.status, &json));
    }
    Ok(json)
}

/// `gatehouse inbox`, after printing: acknowledges every message up to
/// `through`, so they are not sent again.
pub async fn ack_inbox(socket: &Path, through: i64) -> Result<Value, ControlError> {
    let body = to_json_bytes("acknowledgement", &InboxAck { through })?;
    let resp = request(socket, Method::POST, "/inbox/ack", &[], Some(body)).await?;
    let json = resp.json();
    if resp.status != StatusCode::OK {
        return Err(refused(resp.status, &json));
    }
    Ok(json)
}

/// `gatehouse inbox`: fetches the messages not acknowledged yet.
pub async fn read_inbox(socket: &Path, wait: bool) -> Result<Vec<InboxDelivery>, ControlError> {
    let path = if wait { "/inbox?wait=1" } else { "/inbox" };
    let resp = request(socket, Method::GET, path, &[], None).await?;
    let json = resp.json();
    if resp.status != StatusCode::OK {
        return Err(refused(resp.status, &json));
    }
    let page: InboxPage =
        serde_json::from_value(json).map_err(|_| ControlError::Malformed { what: "the inbox" })?;
    Ok(page.messages)
}
