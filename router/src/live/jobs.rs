//! Client of the supervisor's job API (`supervisor/SERVICE.md`).

use std::path::PathBuf;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;

use super::events::{parse_page, EventPage};
use super::http::{unix_request, Answer, HttpError};
use super::plan::JobBody;
use crate::id::TriggerId;

/// Calls that do not wait for events answer within this.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What `POST /jobs` came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Accepted (or the same key's job: a retry after a crash).
    Job(String),
    /// The ticket's previous job is still running; try again later.
    Busy,
    /// Refused for good (the job's body is not one the supervisor takes).
    Refused(String),
}

/// What posting to a job's inbox came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    Posted,
    /// The job has ended; nobody will read it.
    JobEnded,
    Refused(String),
}

/// A failed call: the supervisor could not be reached, or answered
/// something this client does not expect (both retried).
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error("job API: {0}")]
    Http(#[from] HttpError),
    #[error("job API answered {status}: {body}")]
    Unexpected { status: StatusCode, body: String },
}

#[derive(Debug, Clone)]
pub struct JobsClient {
    pub socket: PathBuf,
}

fn unexpected(a: &Answer) -> JobsError {
    JobsError::Unexpected {
        status: a.status,
        body: String::from_utf8_lossy(&a.body).chars().take(500).collect(),
    }
}

fn error_message(a: &Answer) -> String {
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap_or_default();
    let code = v
        .pointer("/error/code")
        .and_then(|c| c.as_str())
        .unwrap_or("");
    let message = v
        .pointer("/error/message")
        .and_then(|c| c.as_str())
        .unwrap_or("");
    format!("{} {code}: {message}", a.status.as_u16())
}

fn error_code(a: &Answer) -> String {
    serde_json::from_slice::<serde_json::Value>(&a.body)
        .ok()
        .and_then(|v| v.pointer("/error/code")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl JobsClient {
    /// `POST /jobs` with the generation's idempotency key.
    pub async fn submit(&self, key: &str, body: &JobBody) -> Result<Submitted, JobsError> {
        let bytes = serde_json::to_vec(body).map_err(|e| JobsError::Unexpected {
            status: StatusCode::BAD_REQUEST,
            body: format!("encoding the job: {e}"),
        })?;
        let a = unix_request(
            &self.socket,
            Method::POST,
            "/jobs",
            &[("idempotency-key", key)],
            Some(bytes),
            CALL_TIMEOUT,
        )
        .await?;
        match a.status.as_u16() {
            200..=202 => {
                let v: serde_json::Value =
                    serde_json::from_slice(&a.body).map_err(|_| unexpected(&a))?;
                v["job_id"]
                    .as_str()
                    .map(|id| Submitted::Job(id.to_owned()))
                    .ok_or_else(|| unexpected(&a))
            }
            409 if error_code(&a) == "ticket_busy" => Ok(Submitted::Busy),
            400 | 409 | 422 => Ok(Submitted::Refused(error_message(&a))),
            _ => Err(unexpected(&a)),
        }
    }

    /// `POST /jobs/{id}/inbox`.
    pub async fn inbox(
        &self,
        job_id: &str,
        text: &str,
        trigger: &TriggerId,
    ) -> Result<Posted, JobsError> {
        let body = json!({ "text": text, "trigger": trigger.as_str() }).to_string();
        let a = unix_request(
            &self.socket,
            Method::POST,
            &format!("/jobs/{job_id}/inbox"),
            &[],
            Some(body.into_bytes()),
            CALL_TIMEOUT,
        )
        .await?;
        match a.status.as_u16() {
            200 | 201 => Ok(Posted::Posted),
            409 | 404 => Ok(Posted::JobEnded),
            400 | 413 => Ok(Posted::Refused(error_message(&a))),
            _ => Err(unexpected(&a)),
        }
    }

    /// `DELETE /jobs/{id}`: done when the cancel is accepted or moot (the
    /// job had ended, or is unknown).
    pub async fn cancel(&self, job_id: &str) -> Result<(), JobsError> {
        let a = unix_request(
            &self.socket,
            Method::DELETE,
            &format!("/jobs/{job_id}"),
            &[],
            None,
            CALL_TIMEOUT,
        )
        .await?;
        match a.status.as_u16() {
            200 | 202 | 404 | 409 => Ok(()),
            _ => Err(unexpected(&a)),
        }
    }

    /// `GET /events?after=N&wait_ms=M`.
    pub async fn events(&self, after: u64, wait_ms: u64) -> Result<EventPage, JobsError> {
        let a = unix_request(
            &self.socket,
            Method::GET,
            &format!("/events?after={after}&wait_ms={wait_ms}"),
            &[],
            None,
            CALL_TIMEOUT + Duration::from_millis(wait_ms),
        )
        .await?;
        if a.status != StatusCode::OK {
            return Err(unexpected(&a));
        }
        parse_page(&a.body).map_err(|_| unexpected(&a))
    }
}
