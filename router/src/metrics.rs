//! The router's metrics (Prometheus text, served by `gatehouse router run`
//! when its config has `[metrics] listen`): trigger decisions by admission
//! and ticket outcome, replies by purpose and result (a refusal by its
//! kind), intake lag from a delivery's arrival to its decision, and
//! deliveries deduplicated. Every label is an enum's name or a platform:
//! no ticket, trigger or thread id.

use std::sync::LazyLock;

use gatehouse_types::metrics::{Counter, Histogram};

use crate::engine::{Checked, Decision, TicketOutcome};
use crate::gate::Admission;
use crate::reply::Refusal;

/// Intake lag buckets in seconds: 1 ms to 5 minutes.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The router's families.
pub struct RouterMetrics {
    pub decisions: Counter,
    pub replies: Counter,
    pub intake_lag_seconds: Histogram,
    pub duplicates: Counter,
}

/// The process's metrics.
pub static METRICS: LazyLock<RouterMetrics> = LazyLock::new(|| RouterMetrics {
    decisions: Counter::new(
        "gatehouse_router_decisions_total",
        "Trigger decisions by the gate's admission and what happened to the ticket.",
        &["admission", "outcome"],
    ),
    replies: Counter::new(
        "gatehouse_router_replies_total",
        "Replies checked, by purpose and result (allowed, or the refusal's kind).",
        &["purpose", "result"],
    ),
    intake_lag_seconds: Histogram::new(
        "gatehouse_router_intake_lag_seconds",
        "From a delivery's arrival (stored) to its decision, by platform.",
        &["platform"],
        LAG_BUCKETS,
    ),
    duplicates: Counter::new(
        "gatehouse_router_intake_duplicates_total",
        "Deliveries not stored again: the same delivery id, or the same event under another id.",
        &["platform", "by"],
    ),
});

/// The exposition of every family.
pub fn render() -> String {
    let m = &*METRICS;
    let mut out = String::new();
    m.decisions.render(&mut out);
    m.replies.render(&mut out);
    m.intake_lag_seconds.render(&mut out);
    m.duplicates.render(&mut out);
    out
}

/// The labels of a committed decision, if it is one that is counted.
pub fn labels(decision: &Decision) -> Option<(&'static str, [&'static str; 2])> {
    match decision {
        Decision::Trigger(d) => {
            let admission = match d.admission {
                Admission::Explicit { .. } => "explicit",
                Admission::Candidate { .. } => "candidate",
                Admission::Ignore { .. } => "ignore",
            };
            let outcome = match d.ticket {
                TicketOutcome::None { .. } => "none",
                TicketOutcome::PassThrough { .. } => "pass_through",
                TicketOutcome::Opened { .. } => "opened",
                TicketOutcome::Resumed { .. } => "resumed",
                TicketOutcome::StaysEnded { .. } => "stays_ended",
            };
            Some(("decision", [admission, outcome]))
        }
        Decision::Reply {
            purpose, result, ..
        } => {
            let result = match result {
                Checked::Allowed { .. } => "allowed",
                Checked::Refused { refused } => refusal_kind(&refused.refusal),
            };
            Some(("reply", [purpose.as_str(), result]))
        }
        _ => None,
    }
}

fn refusal_kind(r: &Refusal) -> &'static str {
    match r {
        Refusal::Empty => "empty",
        Refusal::TooLong { .. } => "too_long",
        Refusal::TargetNotOnThread => "target_not_on_thread",
        Refusal::NotHumanMessage => "not_human_message",
        Refusal::AlreadyAcked => "already_acked",
        Refusal::AlreadyAnswered => "already_answered",
        Refusal::NotAnswered => "not_answered",
        Refusal::NotReady => "not_ready",
        Refusal::NotAttention => "not_attention",
        Refusal::TicketEnded => "ticket_ended",
    }
}

/// A decision was committed.
pub fn decided(decision: &Decision) {
    match labels(decision) {
        Some(("decision", l)) => METRICS.decisions.inc(&l),
        Some((_, l)) => METRICS.replies.inc(&l),
        None => {}
    }
}

/// A delivery of `platform` that arrived at `received_ms` was decided at
/// `now_ms`.
pub fn intake_lag(platform: &str, received_ms: u64, now_ms: u64) {
    let platform = match platform {
        "github" => "github",
        "feishu" => "feishu",
        _ => "other",
    };
    let secs = now_ms.saturating_sub(received_ms) as f64 / 1000.0;
    METRICS.intake_lag_seconds.observe(&[platform], secs);
}

/// A delivery was a duplicate (`by`: `delivery` or `meaning`).
pub fn duplicate(platform: &'static str, by: &'static str) {
    METRICS.duplicates.inc(&[platform, by]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_a_kind_of_its_own() {
        let all = [
            Refusal::Empty,
            Refusal::TooLong { words: 1, limit: 1 },
            Refusal::TargetNotOnThread,
            Refusal::NotHumanMessage,
            Refusal::AlreadyAcked,
            Refusal::AlreadyAnswered,
            Refusal::NotAnswered,
            Refusal::NotReady,
            Refusal::NotAttention,
            Refusal::TicketEnded,
        ];
        let kinds: std::collections::BTreeSet<&str> = all.iter().map(refusal_kind).collect();
        assert_eq!(kinds.len(), all.len());
        // The kind is the refusal's own tag on the wire.
        for r in &all {
            let v = serde_json::to_value(r).unwrap();
            assert_eq!(v["refusal"], refusal_kind(r), "{r:?}");
        }
    }

    #[test]
    fn a_refused_reply_is_counted_by_purpose_and_refusal_never_by_ticket() {
        use crate::engine::Refused;
        use crate::reply::Purpose;
        let decision = Decision::Reply {
            ticket: crate::id::TicketId::parse("tkt_0123456789abcdef01").unwrap(),
            purpose: Purpose::Attention,
            result: Checked::Refused {
                refused: Refused {
                    refusal: Refusal::NotAttention,
                    message: "not the question".into(),
                },
            },
        };
        assert_eq!(
            labels(&decision),
            Some(("reply", ["attention", "not_attention"]))
        );
        let before = METRICS.replies.get(&["attention", "not_attention"]);
        decided(&decision);
        assert_eq!(
            METRICS.replies.get(&["attention", "not_attention"]),
            before + 1
        );
        assert!(!render().contains("tkt_0123456789abcdef01"));
    }

    #[test]
    fn lag_is_counted_per_known_platform() {
        let count = |p: &str| {
            render()
                .lines()
                .find_map(|l| {
                    l.strip_prefix(&format!(
                        "gatehouse_router_intake_lag_seconds_count{{platform=\"{p}\"}} "
                    ))
                    .map(|v| v.parse::<u64>().unwrap())
                })
                .unwrap_or(0)
        };
        let before = count("other");
        intake_lag("tkt_not_a_platform", 1_000, 1_250);
        assert_eq!(count("other"), before + 1);
        assert!(!render().contains("tkt_not_a_platform"));
    }
}
