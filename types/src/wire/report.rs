//! What a worker says about its own job (`gatehouse report`), sent over its
//! control socket to the supervisor and kept by the router as the ticket's
//! latest report.
//!
//! There is no job or ticket field: the control socket the report arrived
//! on is the identity. The shape is checked here; the supervisor adds its
//! limits (lengths, link schemes) and the router its reply checks.

use serde::{Deserialize, Serialize};

use crate::TriggerId;

/// Where the work is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportState {
    Working,
    Ready,
    Blocked,
}

impl ReportState {
    /// `working`, `ready` or `blocked`.
    pub fn parse(s: &str) -> Option<ReportState> {
        match s {
            "working" => Some(ReportState::Working),
            "ready" => Some(ReportState::Ready),
            "blocked" => Some(ReportState::Blocked),
            _ => None,
        }
    }
}

/// A worker's report. Data for the reply checks, never text that is
/// forwarded to people as is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub state: ReportState,
    /// One line.
    pub summary: String,
    /// A question for a person; the only text an `attention` reply may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The human message (its trigger) this report answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<TriggerId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
}
