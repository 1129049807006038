//! Observe-mode evidence (`gatehouse router stats`): would a rule have
//! been right to accept on its own? Pure computation over the decision
//! log's trigger decisions.
//!
//! ```text
//! decision log ─► trigger_row (pure: the decision's JSON ─► thread, admission, verdicts)
//!              ─► rule_stats(rows, since, window) per rule:
//!                   would_accept    candidates the rule would have accepted (observe)
//!                   threads         their distinct threads
//!                   then_requested  of those threads, how many got an explicit request
//!                                   from a person within the window after a would-accept
//!                   missed          explicit requests from a person on a thread where the
//!                                   rule judged a candidate within the window before and
//!                                   would not have accepted it
//! ```
//!
//! An explicit request is the gate's `explicit` admission, which only a
//! person addressing the bot gets (a bot never does). "Judged" is a
//! verdict past the rule's structured conditions: `no_match`, or
//! `not_judged` (the judge failed; in `auto` the rule would have accepted
//! nothing). A rule whose conditions failed was not meant to see the
//! candidate, so that is not a miss.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

/// What one trigger decision says, for the statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerRow {
    /// The decision log's order.
    pub seq: u64,
    /// Decision time, ms since the epoch.
    pub at: u64,
    pub thread: String,
    /// A person addressed the bot (admission `explicit`).
    pub explicit: bool,
    /// Each evaluated rule and what became of it.
    pub verdicts: Vec<(String, Seen)>,
}

/// A rule's verdict, as far as the statistics care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Observe mode: the rule matched.
    WouldAccept,
    /// The rule's conditions held and it did not match (or its judge failed).
    Rejected,
    /// Anything else (disabled, off, conditions failed, accepted in auto).
    Other,
}

/// The row of a trigger decision (pure); `None` for other decisions and
/// for JSON that is not a trigger decision.
pub fn trigger_row(seq: u64, at: u64, decision: &str) -> Option<TriggerRow> {
    let v: Value = serde_json::from_str(decision).ok()?;
    if v.get("type")?.as_str()? != "trigger" {
        return None;
    }
    let verdicts = v
        .get("eval")
        .and_then(Value::as_array)
        .map(|outcomes| {
            outcomes
                .iter()
                .filter_map(|o| {
                    let rule = o.get("rule")?.as_str()?.to_owned();
                    let seen = match o.get("verdict")?.as_str()? {
                        "would_accept" => Seen::WouldAccept,
                        "no_match" | "not_judged" => Seen::Rejected,
                        _ => Seen::Other,
                    };
                    Some((rule, seen))
                })
                .collect()
        })
        .unwrap_or_default();
    Some(TriggerRow {
        seq,
        at,
        thread: v.get("thread")?.as_str()?.to_owned(),
        explicit: v.get("admission")?.as_str()? == "explicit",
        verdicts,
    })
}

/// One rule's evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuleStats {
    pub rule: String,
    pub would_accept: usize,
    pub threads: usize,
    pub then_requested: usize,
    pub missed: usize,
}

/// Per rule (every rule that appears in a trigger decision's eval, in id
/// order): the evidence from rows at or after `since` (ms), an explicit
/// request counting when it came within `window` ms (pure).
pub fn rule_stats(rows: &[TriggerRow], since: u64, window: u64) -> Vec<RuleStats> {
    let rules: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.verdicts.iter().map(|(rule, _)| rule.as_str()))
        .collect();
    let explicit: Vec<&TriggerRow> = rows.iter().filter(|r| r.explicit).collect();
    let seen = |row: &TriggerRow, rule: &str, want: Seen| {
        row.verdicts.iter().any(|(r, s)| r == rule && *s == want)
    };
    // `later` came after `earlier`, within the window.
    let within = |earlier: &TriggerRow, later: &TriggerRow| {
        later.seq > earlier.seq
            && later.thread == earlier.thread
            && later.at <= earlier.at.saturating_add(window)
    };
    rules
        .into_iter()
        .map(|rule| {
            let accepts: Vec<&TriggerRow> = rows
                .iter()
                .filter(|r| r.at >= since && seen(r, rule, Seen::WouldAccept))
                .collect();
            let mut threads: BTreeMap<&str, bool> = BTreeMap::new();
            for a in &accepts {
                let requested = explicit.iter().any(|e| within(a, e));
                *threads.entry(a.thread.as_str()).or_default() |= requested;
            }
            let missed = explicit
                .iter()
                .filter(|e| e.at >= since)
                .filter(|e| {
                    let before: Vec<&TriggerRow> = rows.iter().filter(|c| within(c, e)).collect();
                    before.iter().any(|c| seen(c, rule, Seen::Rejected))
                        && !before.iter().any(|c| seen(c, rule, Seen::WouldAccept))
                })
                .count();
            RuleStats {
                rule: rule.to_owned(),
                would_accept: accepts.len(),
                threads: threads.len(),
                then_requested: threads.values().filter(|r| **r).count(),
                missed,
            }
        })
        .collect()
}

/// `--since` and `--window` values (pure): a duration back from `now_ms`
/// (`90m`, `24h`, `7d`), a UTC date (`2026-12-01`), or milliseconds since
/// the epoch.
pub fn parse_since(text: &str, now_ms: u64) -> Result<u64, String> {
    let t = text.trim();
    if let Ok(ms) = parse_duration(t) {
        return Ok(now_ms.saturating_sub(ms));
    }
    if let Some(ms) = parse_date(t) {
        return Ok(ms);
    }
    t.parse::<u64>().map_err(|_| {
        format!(
            "`{text}`: expected a duration back from now (90m, 24h, 7d), a UTC date \
             (YYYY-MM-DD) or milliseconds since the epoch"
        )
    })
}

/// `90m`, `24h`, `7d` in milliseconds (pure).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let unit = match t.chars().last() {
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        _ => {
            return Err(format!(
                "`{text}`: expected a duration such as 90m, 24h or 7d"
            ))
        }
    };
    let n: u64 = t[..t.len() - 1]
        .parse()
        .map_err(|_| format!("`{text}`: expected a duration such as 90m, 24h or 7d"))?;
    n.checked_mul(unit)
        .ok_or_else(|| format!("`{text}`: too long"))
}

/// `YYYY-MM-DD` as ms since the epoch at 00:00 UTC (pure; proleptic
/// Gregorian calendar, days counted from the civil date).
fn parse_date(text: &str) -> Option<u64> {
    let mut parts = text.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || d < 1 || d > days_in[usize::try_from(m - 1).ok()?] || y < 1970 {
        return None;
    }
    // Days before this month in the year, plus whole years since 1970.
    let before_month: i64 = days_in[..usize::try_from(m - 1).ok()?].iter().sum();
    let leaps = |y: i64| y / 4 - y / 100 + y / 400;
    let years = (y - 1970) * 365 + leaps(y - 1) - leaps(1969);
    let days = years + before_month + d - 1;
    u64::try_from(days).ok()?.checked_mul(86_400_000)
}

#[cfg(test)]
mod tests;
