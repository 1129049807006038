//! The supervisor's events as the loop reads them (pure): a page of
//! `GET /events` into what each event asks of the router.

use serde::Deserialize;

use crate::ticket::Report;

/// One event, bridged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEvent {
    /// A worker's report on its job.
    Report { job_id: String, report: Report },
    /// The job reached a final state (`done`, `failed`, `cancelled`, `timed_out`).
    Ended { job_id: String, state: String },
    /// Anything else (a non-final state, a kind this router does not know).
    Other,
}

/// A page of events: each with its sequence number, and where to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    pub events: Vec<(u64, JobEvent)>,
    pub next: u64,
}

#[derive(Deserialize)]
struct RawPage {
    events: Vec<RawEvent>,
    next: u64,
}

#[derive(Deserialize)]
struct RawEvent {
    seq: u64,
    kind: String,
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    data: serde_json::Value,
}

/// The final job states; the rest (`queued`, `running`) need nothing.
pub const FINAL_STATES: &[&str] = &["done", "failed", "cancelled", "timed_out"];

/// Parses a page. An event the router cannot read is `Other` (the cursor
/// passes it) rather than an error that would stop the loop on it forever;
/// a page that is not a page at all is an error.
pub fn parse_page(body: &[u8]) -> Result<EventPage, serde_json::Error> {
    let raw: RawPage = serde_json::from_slice(body)?;
    let events = raw.events.into_iter().map(|e| (e.seq, bridge(e))).collect();
    Ok(EventPage {
        events,
        next: raw.next,
    })
}

fn bridge(e: RawEvent) -> JobEvent {
    let job_id = e
        .job_id
        .or_else(|| e.data["job_id"].as_str().map(str::to_owned));
    let Some(job_id) = job_id else {
        return JobEvent::Other;
    };
    match e.kind.as_str() {
        "report" => match serde_json::from_value::<Report>(e.data["report"].clone()) {
            Ok(report) => JobEvent::Report { job_id, report },
            Err(error) => {
                tracing::warn!(%job_id, %error, "a report event the router cannot read; skipped");
                JobEvent::Other
            }
        },
        "job_state" => match e.data["state"].as_str() {
            Some(state) if FINAL_STATES.contains(&state) => JobEvent::Ended {
                job_id,
                state: state.to_owned(),
            },
            _ => JobEvent::Other,
        },
        _ => JobEvent::Other,
    }
}
