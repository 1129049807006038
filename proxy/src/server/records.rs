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

/// The line of a CONNECT to `host` (spliced, refused or its TLS refused).
pub(super) fn connect_record(
    time: String,
    request_id: String,
    identity: &str,
    host: &str,
    outcome: Outcome,
) -> Record {
    Record::Request(RequestRecord {
        time,
        request_id,
        identity: identity.to_owned(),
        method: "CONNECT".into(),
        host: host.into(),
        path: format!("{host}:443"),
        query_keys: Vec::new(),
        outcome,
        message: None,
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
        path: uri.path().to_string(),
        query_keys: query_keys(uri.query()),
        outcome: Outcome::Deny {
            reason: String::new(),
            rule_sets_tried: Vec::new(),
        },
        message: None,
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
            outcome.clone(),
        ) else {
            panic!("a CONNECT is a request line");
        };
        assert_eq!(record.method, "CONNECT");
        assert_eq!(record.path, "x.example:443");
        assert!(record.query_keys.is_empty());
        assert_eq!(record.outcome, outcome);
    }
}
