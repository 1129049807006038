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
    /// The job ended because the supervisor restarted (it kills, never
    /// re-attaches): the work was lost, not done or failed by the worker.
    Lost { job_id: String },
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

/// The worker's report in a `report` event: the supervisor stores it with
/// its own `id` and `at` beside the report's fields, which are then read
/// as strictly as the control socket reads them.
fn report_of(data: &serde_json::Value) -> Result<Report, serde_json::Error> {
    let mut stored = data["report"].clone();
    if let Some(fields) = stored.as_object_mut() {
        fields.remove("id");
        fields.remove("at");
    }
    serde_json::from_value(stored)
}

/// The final job states; the rest (`queued`, `running`) need nothing.
pub const FINAL_STATES: &[&str] = &["done", "failed", "cancelled", "timed_out"];

/// The `reason` of a job the supervisor ended at its start (supervisor/SERVICE.md, restarts).
pub const LOST_REASON: &str = "supervisor_restarted";

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
        "report" => match report_of(&e.data) {
            Ok(report) => JobEvent::Report { job_id, report },
            Err(error) => {
                tracing::warn!(%job_id, %error, "a report event the router cannot read; skipped");
                JobEvent::Other
            }
        },
        "job_state" => match e.data["state"].as_str() {
            Some("failed") if e.data["reason"].as_str() == Some(LOST_REASON) => {
                JobEvent::Lost { job_id }
            }
            Some(state) if FINAL_STATES.contains(&state) => JobEvent::Ended {
                job_id,
                state: state.to_owned(),
            },
            _ => JobEvent::Other,
        },
        _ => JobEvent::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ticket::ReportState;

    #[test]
    fn pages_bridge_reports_and_final_states() {
        let page = serde_json::json!({"events": [
            {"seq": 1, "at": 5, "job_id": "job_a", "kind": "job_state", "data": {"job_id": "job_a", "ticket": "tkt_1", "state": "queued"}},
            {"seq": 2, "at": 5, "job_id": "job_a", "kind": "job_state", "data": {"job_id": "job_a", "ticket": "tkt_1", "state": "running"}},
            {"seq": 3, "at": 6, "job_id": "job_a", "kind": "report", "data": {"job_id": "job_a", "ticket": "tkt_1",
                "report": {"id": 9, "at": 6, "state": "ready", "summary": "done", "links": ["https://x.test/pr/1"]}}},
            {"seq": 4, "at": 7, "job_id": "job_a", "kind": "job_state", "data": {"job_id": "job_a", "ticket": "tkt_1", "state": "done", "exit": {"code": 0}}},
            {"seq": 5, "at": 7, "job_id": "job_b", "kind": "job_state", "data": {"job_id": "job_b", "state": "timed_out"}},
            // A report with a field the wire does not know: passed, not fatal.
            {"seq": 6, "at": 8, "job_id": "job_a", "kind": "report", "data": {"report": {"state": "ready", "summary": "s", "mood": "great"}}},
            {"seq": 7, "at": 8, "job_id": "job_a", "kind": "something_new", "data": {}},
            {"seq": 8, "at": 8, "kind": "job_state", "data": {"state": "done"}}
        ], "next": 8})
        .to_string();
        let page = parse_page(page.as_bytes()).unwrap();
        assert_eq!(page.next, 8);
        let got: Vec<(u64, JobEvent)> = page.events;
        assert_eq!(got[0], (1, JobEvent::Other));
        assert_eq!(got[1], (2, JobEvent::Other));
        let JobEvent::Report { job_id, report } = &got[2].1 else {
            panic!("{:?}", got[2])
        };
        assert_eq!(job_id, "job_a");
        assert_eq!(report.state, ReportState::Ready);
        assert_eq!(report.links, vec!["https://x.test/pr/1".to_owned()]);
        assert_eq!(
            got[3],
            (
                4,
                JobEvent::Ended {
                    job_id: "job_a".into(),
                    state: "done".into()
                }
            )
        );
        assert_eq!(
            got[4],
            (
                5,
                JobEvent::Ended {
                    job_id: "job_b".into(),
                    state: "timed_out".into()
                }
            )
        );
        assert_eq!(got[5], (6, JobEvent::Other));
        assert_eq!(got[6], (7, JobEvent::Other));
        assert_eq!(got[7], (8, JobEvent::Other), "no job id");
        assert!(parse_page(b"{\"events\": 3}").is_err());
    }

    #[test]
    fn a_job_the_supervisor_ended_at_its_restart_is_lost() {
        let page = serde_json::json!({"events": [
            {"seq": 1, "job_id": "job_a", "kind": "job_state", "data": {"state": "failed", "reason": "supervisor_restarted"}},
            {"seq": 2, "job_id": "job_b", "kind": "job_state", "data": {"state": "failed", "reason": "launch failed: x"}},
            {"seq": 3, "job_id": "job_c", "kind": "job_state", "data": {"state": "failed"}},
            {"seq": 4, "job_id": "job_d", "kind": "job_state", "data": {"state": "cancelled", "reason": "supervisor_restarted"}}
        ], "next": 4})
        .to_string();
        let got = parse_page(page.as_bytes()).unwrap().events;
        assert_eq!(
            got[0].1,
            JobEvent::Lost {
                job_id: "job_a".into()
            }
        );
        let ended = |id: &str, state: &str| JobEvent::Ended {
            job_id: id.into(),
            state: state.into(),
        };
        assert_eq!(got[1].1, ended("job_b", "failed"));
        assert_eq!(got[2].1, ended("job_c", "failed"));
        // A cancel asked for before the restart stays a cancel.
        assert_eq!(got[3].1, ended("job_d", "cancelled"));
    }
}
