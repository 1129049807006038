//! The audit records the server writes, built from what it knows of a
//! request (pure but for [`now`]): a CONNECT's line, and an inner request's
//! line before its decision is known.

use crate::audit::{Outcome, Record, RequestRecord};

/// The current time as an audit record writes it.
pub(super) fn now() -> String {
    crate::audit::now_rfc3339()
}

/// The keys of a query, never its values.
fn query_keys(query: Option<&str>) -> Vec<String> {
    query
        .map(|q| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split('=').next().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The line of a CONNECT to `host` (spliced, refused or its TLS refused);
/// `authority` is the target as asked for (`host:port`), so a refused
/// `host:22` is on record as that.
pub(super) fn connect_record(
    time: String,
    request_id: String,
    identity: &str,
    host: &str,
    authority: &str,
    outcome: Outcome,
) -> Record {
    Record::Request(RequestRecord {
        time,
        request_id,
        identity: identity.to_owned(),
        method: "CONNECT".into(),
        host: host.into(),
        path: authority.into(),
        query_keys: Vec::new(),
        outcome,
        message: None,
        truncated: Default::default(),
    })
}

/// The line of a request refused by the framing guard, from the start of
/// its request line (`None` when the violation was in a body): method and
/// target as sent, `-` where unknown. `host` is the connection's target.
pub(super) fn framing_record(
    time: String,
    request_id: String,
    identity: &str,
    host: &str,
    line: Option<&[u8]>,
    reason: &str,
) -> Record {
    let line = line.map(String::from_utf8_lossy).unwrap_or_default();
    let mut words = line.split(' ');
    let word = |w: Option<&str>| w.filter(|w| !w.is_empty()).unwrap_or("-").to_string();
    let (method, path) = (word(words.next()), word(words.next()));
    Record::Request(RequestRecord {
        time,
        request_id,
        identity: identity.to_owned(),
        method,
        host: host.into(),
        path,
        query_keys: Vec::new(),
        outcome: Outcome::Deny {
            reason: reason.into(),
            rule_sets_tried: Vec::new(),
        },
        message: None,
        truncated: Default::default(),
    })
}

/// The line of an inner request, denied until the decision says otherwise.
pub(super) fn request_record(
    time: String,
    request_id: String,
    identity: &str,
    host: &str,
    method: &http::Method,
    uri: &http::Uri,
) -> RequestRecord {
    RequestRecord {
        time,
        request_id,
        identity: identity.to_owned(),
        method: method.as_str().to_string(),
        host: host.to_string(),
        // An authority-form target (a CONNECT) has no path: its authority.
        path: match (uri.path_and_query(), uri.authority()) {
            (None, Some(authority)) => authority.to_string(),
            _ => uri.path().to_string(),
        },
        query_keys: query_keys(uri.query()),
        outcome: Outcome::Deny {
            reason: String::new(),
            rule_sets_tried: Vec::new(),
        },
        message: None,
        truncated: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_keys_drop_values() {
        assert_eq!(query_keys(Some("a=1&b&c=x=y&")), vec!["a", "b", "c"]);
        assert!(query_keys(None).is_empty());
    }

    #[test]
    fn request_records_keep_no_query_value_and_start_denied() {
        let uri: http::Uri = "/repos/o/r/issues?state=open&access_token=ghp_x"
            .parse()
            .unwrap();
        let record = request_record(
            "t".into(),
            "req_1".into(),
            "tkt_1",
            "api.github.com",
            &http::Method::GET,
            &uri,
        );
        assert_eq!(record.path, "/repos/o/r/issues");
        assert_eq!(record.query_keys, vec!["state", "access_token"]);
        assert!(!format!("{record:?}").contains("ghp_x"));
        assert!(matches!(record.outcome, Outcome::Deny { .. }));
        assert_eq!(record.message, None);
        assert_eq!(
            (
                record.method.as_str(),
                record.host.as_str(),
                record.identity.as_str()
            ),
            ("GET", "api.github.com", "tkt_1")
        );
    }

    #[test]
    fn framing_records_take_method_and_target_from_the_refused_line() {
        let cases: [(Option<&[u8]>, &str, &str); 4] = [
            (Some(b"POST /x?a=1 HTTP/1.1"), "POST", "/x?a=1"),
            (Some(b"GET"), "GET", "-"),
            (Some(b"\xff /p"), "\u{fffd}", "/p"),
            (None, "-", "-"),
        ];
        for (line, method, path) in cases {
            let Record::Request(r) = framing_record(
                "t".into(),
                "req_3".into(),
                "tkt_1",
                "h.example",
                line,
                "why",
            ) else {
                panic!("a framing refusal is a request line");
            };
            assert_eq!((r.method.as_str(), r.path.as_str()), (method, path));
            assert_eq!(
                r.outcome,
                Outcome::Deny {
                    reason: "why".into(),
                    rule_sets_tried: vec![]
                }
            );
        }
    }

    #[test]
    fn connect_records_name_the_authority() {
        let outcome = Outcome::Deny {
            reason: "r".into(),
            rule_sets_tried: vec!["s".into()],
        };
        let Record::Request(record) = connect_record(
            "t".into(),
            "req_2".into(),
            "tkt_1",
            "x.example",
            "x.example:22",
            outcome.clone(),
        ) else {
            panic!("a CONNECT is a request line");
        };
        assert_eq!(record.method, "CONNECT");
        assert_eq!(record.path, "x.example:22");
        assert!(record.query_keys.is_empty());
        assert_eq!(record.outcome, outcome);
    }
}
