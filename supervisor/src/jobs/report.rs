//! Worker reports and inbox messages: the supervisor's limits on the
//! shared wire types, checked by plain functions. The types (and the rule
//! that `answers` and `trigger` are trigger ids) are `gatehouse_types::wire`'s.

pub use gatehouse_types::wire::{InboxMessage, Report, ReportState};

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

/// Checks a report against the supervisor's limits.
pub fn check_report(report: &Report) -> Result<(), ReportError> {
    let summary_chars = report.summary.trim().chars().count();
    if summary_chars == 0 || report.summary.chars().count() > MAX_SUMMARY_CHARS {
        return refuse("summary", "one line of 1-300 characters");
    }
    if !one_line(&report.summary) {
        return refuse("summary", "one line, without control characters");
    }
    if let Some(q) = &report.question {
        let n = q.chars().count();
        if q.trim().is_empty() || n > MAX_QUESTION_CHARS {
            return refuse("question", "1-1000 characters");
        }
        if q.chars().any(|c| c.is_control() && c != '\n') {
            return refuse("question", "text without control characters");
        }
    }
    if report.links.len() > MAX_LINKS {
        return refuse("links", "at most 10 links");
    }
    for link in &report.links {
        let scheme_ok = link.starts_with("https://") || link.starts_with("http://");
        if !scheme_ok || link.len() > MAX_LINK_BYTES || !one_line(link) || link.contains(' ') {
            return refuse("links", "http(s) URLs of at most 2048 bytes");
        }
    }
    Ok(())
}

/// Checks an inbox message (`POST /jobs/{id}/inbox`) against the
/// supervisor's limits.
pub fn check_inbox(message: &InboxMessage) -> Result<(), ReportError> {
    if message.text.trim().is_empty() || message.text.len() > MAX_INBOX_TEXT_BYTES {
        return refuse("text", "non-empty text of at most 16 KiB");
    }
    Ok(())
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
        let cases: [(Edit, Option<&str>); 12] = [
            (|_| {}, None),
            (|r| r.summary = "".into(), Some("summary")),
            (|r| r.summary = "  ".into(), Some("summary")),
            (|r| r.summary = "a\nb".into(), Some("summary")),
            (|r| r.summary = "字".repeat(300), None),
            (|r| r.summary = "字".repeat(301), Some("summary")),
            (|r| r.question = Some("May I\nmerge?".into()), None),
            (|r| r.question = Some("x".repeat(1001)), Some("question")),
            (|r| r.answers = Some("trg_8f21".parse().unwrap()), None),
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
            match (check_report(&r), want) {
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
        // `answers` is a trigger id: anything else is refused as it is read.
        assert!(serde_json::from_str::<Report>(
            r#"{"state":"ready","summary":"x","answers":"tkt_8f21"}"#
        )
        .is_err());
        assert_eq!(ReportState::parse("blocked"), Some(ReportState::Blocked));
        assert_eq!(ReportState::parse("done"), None);
    }

    #[test]
    fn inbox_messages() {
        let m = InboxMessage {
            text: "skip the e2e tests".into(),
            trigger: Some("trg_1".parse().unwrap()),
        };
        assert!(check_inbox(&m).is_ok());
        let empty = InboxMessage {
            text: " ".into(),
            trigger: None,
        };
        assert!(check_inbox(&empty).is_err());
        let bad_trigger = r#"{"text":"x","trigger":"1"}"#;
        assert!(serde_json::from_str::<InboxMessage>(bad_trigger).is_err());
    }
}
