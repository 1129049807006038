//! Worker reports and inbox messages: the bodies that cross the control
//! socket, validated as plain functions.

use gatehouse_types::TriggerId;
use serde::{Deserialize, Serialize};

/// What a worker says about its own job (`gatehouse report`). There is no
/// job or ticket field: the control socket the report arrived on is the
/// identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub state: ReportState,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportState {
    Working,
    Ready,
    Blocked,
}

impl ReportState {
    pub fn parse(s: &str) -> Option<ReportState> {
        match s {
            "working" => Some(ReportState::Working),
            "ready" => Some(ReportState::Ready),
            "blocked" => Some(ReportState::Blocked),
            _ => None,
        }
    }
}

pub const MAX_SUMMARY_CHARS: usize = 300;
pub const MAX_QUESTION_CHARS: usize = 1000;
pub const MAX_LINKS: usize = 10;
pub const MAX_LINK_BYTES: usize = 2048;
pub const MAX_INBOX_TEXT_BYTES: usize = 16 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReportError {
    /// a report field is malformed
    #[error("report field `{field}`: {expected}")]
    Field {
        field: &'static str,
        expected: &'static str,
    },
}

fn refuse(field: &'static str, expected: &'static str) -> Result<(), ReportError> {
    Err(ReportError::Field { field, expected })
}

fn one_line(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

impl Report {
    pub fn validate(&self) -> Result<(), ReportError> {
        let summary_chars = self.summary.trim().chars().count();
        if summary_chars == 0 || self.summary.chars().count() > MAX_SUMMARY_CHARS {
            return refuse("summary", "one line of 1-300 characters");
        }
        if !one_line(&self.summary) {
            return refuse("summary", "one line, without control characters");
        }
        if let Some(q) = &self.question {
            let n = q.chars().count();
            if q.trim().is_empty() || n > MAX_QUESTION_CHARS {
                return refuse("question", "1-1000 characters");
            }
            if q.chars().any(|c| c.is_control() && c != '\n') {
                return refuse("question", "text without control characters");
            }
        }
        if let Some(a) = &self.answers {
            if !TriggerId::is_valid(a) {
                return refuse("answers", "a trigger id `trg_…`");
            }
        }
        if self.links.len() > MAX_LINKS {
            return refuse("links", "at most 10 links");
        }
        for link in &self.links {
            let scheme_ok = link.starts_with("https://") || link.starts_with("http://");
            if !scheme_ok || link.len() > MAX_LINK_BYTES || !one_line(link) || link.contains(' ') {
                return refuse("links", "http(s) URLs of at most 2048 bytes");
            }
        }
        Ok(())
    }
}

/// A message for a worker (`POST /jobs/{id}/inbox`), e.g. a pass-through
/// trigger from the router.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxMessage {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
}

impl InboxMessage {
    pub fn validate(&self) -> Result<(), ReportError> {
        if self.text.trim().is_empty() || self.text.len() > MAX_INBOX_TEXT_BYTES {
            return refuse("text", "non-empty text of at most 16 KiB");
        }
        if let Some(t) = &self.trigger {
            if !TriggerId::is_valid(t) {
                return refuse("trigger", "a trigger id `trg_…`");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> Report {
        Report {
            state: ReportState::Ready,
            summary: "PR opened".into(),
            question: None,
            answers: None,
            links: vec!["https://github.com/o/r/pull/1".into()],
        }
    }

    #[test]
    fn reports_table() {
        type Edit = fn(&mut Report);
        let cases: [(Edit, Option<&str>); 13] = [
            (|_| {}, None),
            (|r| r.summary = "".into(), Some("summary")),
            (|r| r.summary = "  ".into(), Some("summary")),
            (|r| r.summary = "a\nb".into(), Some("summary")),
            (|r| r.summary = "字".repeat(300), None),
            (|r| r.summary = "字".repeat(301), Some("summary")),
            (|r| r.question = Some("May I\nmerge?".into()), None),
            (|r| r.question = Some("x".repeat(1001)), Some("question")),
            (|r| r.answers = Some("trg_8f21".into()), None),
            (|r| r.answers = Some("tkt_8f21".into()), Some("answers")),
            (
                |r| r.links = vec!["javascript:alert(1)".into()],
                Some("links"),
            ),
            (|r| r.links = vec!["https://a".into(); 11], Some("links")),
            (|r| r.links = vec!["https://a b".into()], Some("links")),
        ];
        for (i, (edit, want)) in cases.into_iter().enumerate() {
            let mut r = ok();
            edit(&mut r);
            match (r.validate(), want) {
                (Ok(()), None) => {}
                (Err(ReportError::Field { field, .. }), Some(w)) => {
                    assert_eq!(field, w, "case {i}")
                }
                (got, want) => panic!("case {i}: got {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn state_is_an_enum_and_job_fields_are_refused() {
        assert!(serde_json::from_str::<Report>(r#"{"state":"done","summary":"x"}"#).is_err());
        assert!(serde_json::from_str::<Report>(
            r#"{"state":"ready","summary":"x","job_id":"job_other"}"#
        )
        .is_err());
        assert_eq!(ReportState::parse("blocked"), Some(ReportState::Blocked));
        assert_eq!(ReportState::parse("done"), None);
    }

    #[test]
    fn inbox_messages() {
        let m = InboxMessage {
            text: "skip the e2e tests".into(),
            trigger: Some("trg_1".into()),
        };
        assert!(m.validate().is_ok());
        let empty = InboxMessage {
            text: " ".into(),
            trigger: None,
        };
        assert!(empty.validate().is_err());
        let bad_trigger = InboxMessage {
            text: "x".into(),
            trigger: Some("1".into()),
        };
        assert!(bad_trigger.validate().is_err());
    }
}
