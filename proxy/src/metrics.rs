//! The proxy's metrics (Prometheus text, served by `gatehouse proxy` when
//! its config has `[metrics] listen`): requests by identity kind, rule set,
//! rule and decision; request latency; denials by reason; audit log write
//! and sync latency and failures.
//!
//! Labels come from closed sets only. An identity is its kind
//! ([`identity_kind`]: `ticket`, `router` or `static`), never its name (a
//! ticket's name is its id); a rule set and rule are the config's; a
//! denial's reason is a category ([`denial_kind`]), never its text (which
//! may quote a path or a host).

use std::sync::LazyLock;
use std::time::Duration;

use gatehouse_types::metrics::{Counter, Histogram, LATENCY_BUCKETS};

use crate::audit::{Outcome, RequestRecord};

/// The proxy's families.
pub struct ProxyMetrics {
    pub requests: Counter,
    pub request_seconds: Histogram,
    pub denials: Counter,
    pub audit_seconds: Histogram,
    pub audit_failures: Counter,
}

/// The process's metrics.
pub static METRICS: LazyLock<ProxyMetrics> = LazyLock::new(|| {
    ProxyMetrics {
    requests: Counter::new(
        "gatehouse_proxy_requests_total",
        "Requests decided, by identity kind, rule set, rule and decision (denials before any rate limit of their records).",
        &["identity", "rule_set", "rule", "decision"],
    ),
    request_seconds: Histogram::new(
        "gatehouse_proxy_request_duration_seconds",
        "Allowed requests, from the decision to the end of the answer, by identity kind and status class.",
        &["identity", "status"],
        LATENCY_BUCKETS,
    ),
    denials: Counter::new(
        "gatehouse_proxy_denials_total",
        "Refused requests by identity kind and reason category.",
        &["identity", "reason"],
    ),
    audit_seconds: Histogram::new(
        "gatehouse_proxy_audit_write_seconds",
        "Audit log operations: a record's write (lock wait included) and a batch's sync.",
        &["op"],
        LATENCY_BUCKETS,
    ),
    audit_failures: Counter::new(
        "gatehouse_proxy_audit_failures_total",
        "Audit log writes or syncs that failed (each refuses what it carried).",
        &["op"],
    ),
}
});

/// The exposition of every family.
pub fn render() -> String {
    let m = &*METRICS;
    let mut out = String::new();
    m.requests.render(&mut out);
    m.request_seconds.render(&mut out);
    m.denials.render(&mut out);
    m.audit_seconds.render(&mut out);
    m.audit_failures.render(&mut out);
    out
}

/// An identity's kind from its name: a ticket's identity is named by its
/// ticket id; `up` names the router's `router-…`; any other is a static
/// identity of the config.
pub fn identity_kind(name: &str) -> &'static str {
    // `is_valid`, not `parse`: a name that is no ticket id would build the
    // parse error's message, twice a request.
    if gatehouse_types::TicketId::is_valid(name) {
        "ticket"
    } else if name.starts_with("router") {
        "router"
    } else {
        "static"
    }
}

/// The category of a refusal, from its record: a closed set, `other` when
/// none fits.
pub fn denial_kind(record: &RequestRecord) -> &'static str {
    let Outcome::Deny {
        reason,
        rule_sets_tried,
    } = &record.outcome
    else {
        return "none";
    };
    const BY_TEXT: &[(&str, &str)] = &[
        ("limits.", "limit"),
        // The request target's budget and the full pool of body checks.
        ("the proxy decides on", "limit"),
        ("request bodies as it queues", "limit"),
        ("not the one this identity is for", "peer"),
        ("was not created by this identity", "ownership"),
        ("TLS server name", "tls"),
        ("tunnel refused", "tunnel"),
        ("CONNECT", "connect"),
        ("Host", "host"),
        ("misconfigured", "misconfigured"),
    ];
    if let Some((_, kind)) = BY_TEXT.iter().find(|(needle, _)| reason.contains(needle)) {
        return kind;
    }
    if record.method == "-" {
        "framing"
    } else if !rule_sets_tried.is_empty() {
        "rule"
    } else {
        "other"
    }
}

/// A decided request: counted when its record is made (allowed) or
/// refused (denied, whether or not its line is written).
pub fn request(record: &RequestRecord) {
    let identity = identity_kind(&record.identity);
    let m = &*METRICS;
    match &record.outcome {
        Outcome::Allow { rule_set, rule } => {
            m.requests.inc(&[identity, rule_set, rule, "allow"]);
        }
        Outcome::Deny { .. } => {
            m.requests.inc(&[identity, "-", "-", "deny"]);
            m.denials.inc(&[identity, denial_kind(record)]);
        }
    }
}

/// An allowed request's end.
pub fn completed(identity_kind: &'static str, status: u16, took: Duration) {
    let class = match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    METRICS
        .request_seconds
        .observe(&[identity_kind, class], took.as_secs_f64());
}

/// An audit operation (`write`, `sync`) and whether it worked.
pub fn audit(op: &'static str, took: Duration, ok: bool) {
    METRICS.audit_seconds.observe(&[op], took.as_secs_f64());
    if !ok {
        METRICS.audit_failures.inc(&[op]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(identity: &str, method: &str, reason: &str, tried: &[&str]) -> RequestRecord {
        RequestRecord {
            time: "t".into(),
            request_id: "r".into(),
            identity: identity.into(),
            method: method.into(),
            host: "api.github.com".into(),
            path: "/".into(),
            query_keys: vec![],
            outcome: Outcome::Deny {
                reason: reason.into(),
                rule_sets_tried: tried.iter().map(|s| (*s).to_owned()).collect(),
            },
            message: None,
            truncated: Default::default(),
        }
    }

    #[test]
    fn identity_kinds() {
        for (name, kind) in [
            ("tkt_01J9ZQ3T5X8Y6V4W2R0N1M7K3H", "ticket"),
            ("router-gh-1", "router"),
            ("router-feishu", "router"),
            ("ci-bot", "static"),
            ("tkt_", "static"),
        ] {
            assert_eq!(identity_kind(name), kind, "{name}");
        }
    }

    #[test]
    fn denial_kinds_from_the_proxy_s_reasons() {
        let cases = [
            ("GET", "GET api.github.com/repos/acme/other/issues/1 matches no rule of test-worker", &["test-worker"][..], "rule"),
            ("GET", "this identity has as many requests in flight as it may (limits.requests_per_identity); retry when one has finished", &[], "limit"),
            ("GET", "the request target has 200 path segments, more than the 128 the proxy decides on", &["test-worker"], "limit"),
            ("POST", "the proxy is checking as many request bodies as it queues (16); retry shortly", &["test-worker"], "limit"),
            ("-", "the peer (uid 1000) is not the one this identity is for", &[], "peer"),
            ("PATCH", "issue_comment 7 was not created by this identity: a worker may edit", &["test-worker"], "ownership"),
            ("CONNECT", "TLS server name Some(\"x\") does not match the CONNECT host", &["test-worker"], "tls"),
            ("CONNECT", "tunnel refused: connection refused", &[], "tunnel"),
            ("CONNECT", "CONNECT needs an authority-form target host:port", &[], "connect"),
            ("GET", "the Host header names another host than the target", &[], "host"),
            ("-", "Content-Length with Transfer-Encoding", &[], "framing"),
            ("GET", "the identity is misconfigured: no variable repo", &["x"], "misconfigured"),
            ("GET", "something new", &[], "other"),
        ];
        for (method, reason, tried, kind) in cases {
            let r = denied("tkt_01J9ZQ3T5X8Y6V4W2R0N1M7K3H", method, reason, tried);
            assert_eq!(denial_kind(&r), kind, "{reason}");
        }
    }

    #[test]
    fn a_ticket_s_request_is_counted_by_its_kind_not_its_name() {
        let ticket = "tkt_01J9ZQ3T5X8Y6V4W2R0N1M7K3J";
        let before = METRICS.requests.get(&["ticket", "-", "-", "deny"]);
        request(&denied(ticket, "GET", "no rule", &["test-worker"]));
        assert_eq!(
            METRICS.requests.get(&["ticket", "-", "-", "deny"]),
            before + 1
        );
        assert!(!render().contains(ticket));
    }
}
