//! The proxy's audit records as OCSF HTTP Activity events (class 4002,
//! schema 1.1.0), one JSON line per request, for a SIEM (pure: a request
//! record and its completion in, one event out). What the record does not
//! hold is not invented: query values, bodies and credentials are not in the
//! log, so they are not in the event either; the rule that allowed the
//! request and the message record go under `unmapped`.

use serde_json::{json, Value};

use gatehouse_proxy::audit::{CompletionRecord, Outcome, Record, RequestRecord};

use super::sources::rfc3339_ms;

/// OCSF `activity_id` of HTTP Activity for a method (99: Other).
pub fn activity(method: &str) -> (u64, &'static str) {
    match method {
        "CONNECT" => (1, "Connect"),
        "DELETE" => (2, "Delete"),
        "GET" => (3, "Get"),
        "HEAD" => (4, "Head"),
        "OPTIONS" => (5, "Options"),
        "POST" => (6, "Post"),
        "PUT" => (7, "Put"),
        "TRACE" => (8, "Trace"),
        _ => (99, "Other"),
    }
}

/// The event of one request (and its completion, if the log has one).
pub fn http_activity(r: &RequestRecord, c: Option<&CompletionRecord>) -> Value {
    let (activity_id, activity_name) = activity(&r.method);
    let allowed = matches!(r.outcome, Outcome::Allow { .. });
    // Allowed and answered below 400: success; refused by a rule or by the
    // proxy's own checks (403), or failed upstream: failure.
    let succeeded = allowed && c.is_some_and(|c| c.status < 400);
    let time = rfc3339_ms(&r.time).unwrap_or(0);
    let mut event = json!({
        "class_uid": 4002,
        "class_name": "HTTP Activity",
        "category_uid": 4,
        "category_name": "Network Activity",
        "activity_id": activity_id,
        "activity_name": activity_name,
        "type_uid": 400_200 + activity_id,
        "type_name": format!("HTTP Activity: {activity_name}"),
        "time": time,
        "severity_id": if allowed { 1 } else { 3 },
        "severity": if allowed { "Informational" } else { "Medium" },
        "status_id": if succeeded { 1 } else { 2 },
        "status": if succeeded { "Success" } else { "Failure" },
        "disposition_id": if allowed { 1 } else { 2 },
        "disposition": if allowed { "Allowed" } else { "Blocked" },
        "metadata": {
            "version": "1.1.0",
            "uid": r.request_id,
            "product": { "name": "gatehouse", "vendor_name": "gatehouse", "feature": { "name": "proxy" } },
            "original_time": r.time,
        },
        "actor": { "user": { "name": r.identity, "type_id": 99, "type": "Other" } },
        "http_request": {
            "uid": r.request_id,
            "http_method": r.method,
            "url": {
                "hostname": r.host,
                "path": r.path,
                "scheme": "https",
            },
        },
        "dst_endpoint": { "hostname": r.host },
        "unmapped": {
            "query_keys": r.query_keys,
        },
    });
    match &r.outcome {
        Outcome::Allow { rule_set, rule } => {
            event["unmapped"]["rule_set"] = json!(rule_set);
            event["unmapped"]["rule"] = json!(rule);
        }
        Outcome::Deny {
            reason,
            rule_sets_tried,
        } => {
            event["status_detail"] = json!(reason);
            event["unmapped"]["rule_sets_tried"] = json!(rule_sets_tried);
        }
    }
    if let Some(m) = &r.message {
        event["unmapped"]["message"] = json!({
            "kind": m.kind, "target": m.target, "body_sha256": m.body_sha256,
        });
    }
    if let Some(c) = c {
        event["http_response"] = json!({ "code": c.status });
        event["duration"] = json!(c.duration_ms);
        event["end_time"] = json!(rfc3339_ms(&c.time).unwrap_or(time));
        event["traffic"] = json!({ "bytes_out": c.bytes_sent, "bytes_in": c.bytes_received });
        if let Some(id) = &c.message_id {
            event["unmapped"]["message_id"] = json!(id);
        }
        if let Some(e) = &c.error {
            event["status_detail"] = json!(e);
        }
    }
    event
}

/// Joins each request with its completion, in log order of the request's
/// completion (a refused request at once: it has none). Memory: the
/// requests in flight.
#[derive(Debug, Default)]
pub struct Joiner {
    open: std::collections::HashMap<String, RequestRecord>,
}

impl Joiner {
    /// The next record; the requests it completes, with their completions.
    pub fn push(&mut self, record: Record) -> Option<(RequestRecord, Option<CompletionRecord>)> {
        match record {
            Record::Request(r) if matches!(r.outcome, Outcome::Deny { .. }) => Some((r, None)),
            Record::Request(r) => {
                self.open.insert(r.request_id.clone(), r);
                None
            }
            Record::Completion(c) => self.open.remove(&c.request_id).map(|r| (r, Some(c))),
            _ => None,
        }
    }

    /// The requests the log ends without a completion for, oldest first.
    pub fn finish(self) -> Vec<RequestRecord> {
        let mut left: Vec<RequestRecord> = self.open.into_values().collect();
        left.sort_by(|a, b| (&a.time, &a.request_id).cmp(&(&b.time, &b.request_id)));
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_proxy::audit::MessageRecord;

    fn request(id: &str, method: &str, allowed: bool) -> RequestRecord {
        RequestRecord {
            time: "2026-12-01T00:00:01.000Z".into(),
            request_id: id.into(),
            identity: "tkt_1".into(),
            method: method.into(),
            host: "api.github.com".into(),
            path: "/repos/acme/widgets/issues/1/comments".into(),
            query_keys: vec!["per_page".into()],
            outcome: if allowed {
                Outcome::Allow {
                    rule_set: "github-worker".into(),
                    rule: "issue-comment-create".into(),
                }
            } else {
                Outcome::Deny {
                    reason: "no rule matched".into(),
                    rule_sets_tried: vec!["github-worker".into()],
                }
            },
            message: allowed.then(|| MessageRecord {
                kind: "github_issue_comment".into(),
                target: "acme/widgets#1".into(),
                body_sha256: "ab".repeat(32),
            }),
            truncated: Default::default(),
        }
    }

    fn completion(id: &str, status: u16) -> CompletionRecord {
        CompletionRecord {
            time: "2026-12-01T00:00:01.250Z".into(),
            request_id: id.into(),
            status,
            bytes_sent: 10,
            bytes_received: 20,
            duration_ms: 250,
            message_id: Some("77".into()),
            error: None,
            truncated: Default::default(),
        }
    }

    #[test]
    fn an_allowed_answered_request_is_a_successful_http_activity() {
        let e = http_activity(&request("r1", "POST", true), Some(&completion("r1", 201)));
        assert_eq!(e["class_uid"], 4002);
        assert_eq!(e["activity_id"], 6);
        assert_eq!(e["type_uid"], 400_206);
        assert_eq!(e["time"], 1_796_083_201_000u64);
        assert_eq!(e["status"], "Success");
        assert_eq!(e["disposition"], "Allowed");
        assert_eq!(e["http_request"]["url"]["hostname"], "api.github.com");
        assert_eq!(e["http_response"]["code"], 201);
        assert_eq!(e["duration"], 250);
        assert_eq!(e["actor"]["user"]["name"], "tkt_1");
        assert_eq!(e["unmapped"]["rule"], "issue-comment-create");
        assert_eq!(e["unmapped"]["message_id"], "77");
    }

    #[test]
    fn refusals_and_failures_are_failures() {
        let e = http_activity(&request("r2", "PATCH", false), None);
        assert_eq!(
            (e["activity_id"].as_u64(), e["type_uid"].as_u64()),
            (Some(99), Some(400_299))
        );
        assert_eq!(e["disposition"], "Blocked");
        assert_eq!(e["status"], "Failure");
        assert_eq!(e["severity_id"], 3);
        assert_eq!(e["status_detail"], "no rule matched");
        assert!(e.get("http_response").is_none());
        // Allowed, but the proxy's body check (403) or the upstream refused.
        let e = http_activity(&request("r3", "GET", true), Some(&completion("r3", 403)));
        assert_eq!(
            (e["status"].as_str(), e["disposition"].as_str()),
            (Some("Failure"), Some("Allowed"))
        );
    }

    #[test]
    fn requests_join_their_completions_and_refusals_stand_alone() {
        let mut j = Joiner::default();
        assert!(j.push(Record::Request(request("a", "GET", true))).is_none());
        let (r, c) = j.push(Record::Request(request("d", "GET", false))).unwrap();
        assert_eq!((r.request_id.as_str(), c), ("d", None));
        assert!(j.push(Record::Request(request("b", "GET", true))).is_none());
        let (r, c) = j.push(Record::Completion(completion("a", 200))).unwrap();
        assert_eq!((r.request_id.as_str(), c.unwrap().status), ("a", 200));
        assert!(j.push(Record::Completion(completion("zz", 200))).is_none());
        let left = j.finish();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].request_id, "b");
    }
}
