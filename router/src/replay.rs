//! Replay: JSON lines in, one JSON decision per line out, through the same
//! engine the live router uses.
//!
//! Every input line carries its own time `at` (milliseconds since the Unix
//! epoch) and the engine takes it as `now`, so ids and times derive from the
//! input alone: the same input on an empty state gives byte-identical output.
//! A line may carry a `label`; later lines can then write `@label` where an
//! id is expected: the trigger of that line (`in_reply_to`, `answers`,
//! `requested_by`) or the ticket it opened or reached (`ticket`). The input
//! schema is documented in the crate's README.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::engine::{Decision, EngineError, ReportInput, Router, TicketOutcome};
use crate::eval::Judge;
use crate::id::{TicketId, TriggerId, MAX_TIME_MS};
use crate::json::{self, EncodeError};
use crate::policy::{Policy, PolicyError};
use crate::reply::{Purpose, ReplyAttempt};
use crate::store::StoreError;
use crate::ticket::{Outcome, Report};
use crate::trigger::TriggerInput;

/// Errors that stop a replay (a bad line is reported and skipped instead).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read the events: {0}")]
    Read(std::io::Error),
    #[error("cannot write the decisions: {0}")]
    Write(std::io::Error),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// What a replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    pub decisions: usize,
    /// Lines that were not valid inputs or named unknown ids.
    pub rejected: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyLine {
    purpose: Purpose,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndLine {
    outcome: Outcome,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoteLine {
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyLine {
    path: Option<String>,
    toml: Option<String>,
}

/// Labels seen so far: the trigger of each labelled line and its ticket.
#[derive(Default)]
struct Labels {
    triggers: BTreeMap<String, TriggerId>,
    tickets: BTreeMap<String, TicketId>,
}

impl Labels {
    /// Remembers a labelled trigger line's trigger and the ticket it reached.
    fn remember(&mut self, label: String, decision: &Decision) {
        if let Decision::Trigger(t) = decision {
            self.triggers.insert(label.clone(), t.trigger.clone());
            let ticket = match &t.ticket {
                TicketOutcome::PassThrough { ticket }
                | TicketOutcome::Opened { ticket, .. }
                | TicketOutcome::Resumed { ticket, .. }
                | TicketOutcome::StaysEnded { ticket, .. } => Some(ticket.clone()),
                TicketOutcome::None { .. } => None,
            };
            if let Some(ticket) = ticket {
                self.tickets.insert(label, ticket);
            }
        }
    }

    fn trigger(&self, s: &str) -> Result<TriggerId, String> {
        match s.strip_prefix('@') {
            Some(label) => self
                .triggers
                .get(label)
                .cloned()
                .ok_or_else(|| format!("no earlier line is labelled `{label}`")),
            None => TriggerId::parse(s).ok_or_else(|| format!("`{s}` is not a trigger id")),
        }
    }

    fn ticket(&self, s: &str) -> Result<TicketId, String> {
        match s.strip_prefix('@') {
            Some(label) => self
                .tickets
                .get(label)
                .cloned()
                .ok_or_else(|| format!("the line labelled `{label}` reached no ticket")),
            None => TicketId::parse(s).ok_or_else(|| format!("`{s}` is not a ticket id")),
        }
    }
}

/// Replays `events` through a router over `store`, writing one decision per line.
pub fn replay<J: Judge>(
    router: &mut Router<J>,
    events: impl BufRead,
    base_dir: &Path,
    out: &mut dyn Write,
) -> Result<ReplaySummary, ReplayError> {
    let mut labels = Labels::default();
    let mut summary = ReplaySummary::default();
    for (i, line) in events.lines().enumerate() {
        let line = line.map_err(ReplayError::Read)?;
        let number = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let rejected = |error: String| {
            json::encode(
                "rejected line",
                &RejectedLine {
                    line: number,
                    kind: "rejected",
                    error,
                },
            )
        };
        let text = match run_line(router, &line, base_dir, &mut labels) {
            Ok(decision) => {
                summary.decisions += 1;
                // `line` first, then the decision's own fields in their order.
                let body = json::encode("decision", &decision)?;
                format!("{{\"line\":{number},{}", body.get(1..).unwrap_or("}"))
            }
            Err(Rejected::Input(error)) => {
                summary.rejected += 1;
                rejected(error)?
            }
            Err(Rejected::Engine(EngineError::Store(e @ StoreError::NotFound { .. }))) => {
                summary.rejected += 1;
                rejected(e.to_string())?
            }
            Err(Rejected::Engine(e)) => return Err(e.into()),
        };
        let mut bytes = text.into_bytes();
        bytes.push(b'\n');
        out.write_all(&bytes).map_err(ReplayError::Write)?;
    }
    out.flush().map_err(ReplayError::Write)?;
    Ok(summary)
}

enum Rejected {
    Input(String),
    Engine(EngineError),
}

impl From<EngineError> for Rejected {
    fn from(e: EngineError) -> Self {
        Rejected::Engine(e)
    }
}

#[derive(Serialize)]
struct RejectedLine {
    line: usize,
    #[serde(rename = "type")]
    kind: &'static str,
    error: String,
}

/// Takes a string field out of a line.
fn take_str(obj: &mut Map<String, Value>, key: &str) -> Result<Option<String>, Rejected> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Rejected::Input(format!("`{key}` must be a string"))),
    }
}

fn required(obj: &mut Map<String, Value>, key: &str) -> Result<String, Rejected> {
    take_str(obj, key)?.ok_or_else(|| Rejected::Input(format!("`{key}` is missing")))
}

fn parse<T: for<'de> Deserialize<'de>>(kind: &str, obj: Map<String, Value>) -> Result<T, Rejected> {
    serde_json::from_value(Value::Object(obj))
        .map_err(|e| Rejected::Input(format!("not a valid {kind}: {e}")))
}

/// Runs one input line: its `type` names the engine call (the table of
/// line kinds is the `match` below).
fn run_line<J: Judge>(
    router: &mut Router<J>,
    line: &str,
    base_dir: &Path,
    labels: &mut Labels,
) -> Result<Decision, Rejected> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| Rejected::Input(format!("not JSON: {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(Rejected::Input("not a JSON object".into()));
    };
    let kind = required(&mut obj, "type")?;
    let at = take_at(&mut obj)?;
    let label = take_str(&mut obj, "label")?;
    let decision = match kind.as_str() {
        "trigger" => {
            let input: TriggerInput = parse("trigger", obj)?;
            router.on_trigger(input, at)?
        }
        "report" => report_line(router, obj, labels, at)?,
        "reply" => reply_line(router, obj, labels, at)?,
        "end" => end_line(router, obj, labels, at)?,
        "note" => {
            let ticket = ticket_field(&mut obj, labels)?;
            let NoteLine { text } = parse("note", obj)?;
            router.on_note(ticket, text, at)?
        }
        "policy" => {
            let policy = policy_line(obj, base_dir)?;
            router.set_policy(policy, at)?
        }
        other => {
            return Err(Rejected::Input(format!(
                "unknown type `{other}`; expected trigger, report, reply, end, note or policy"
            )))
        }
    };
    if let Some(label) = label {
        labels.remember(label, &decision);
    }
    Ok(decision)
}

fn take_at(obj: &mut Map<String, Value>) -> Result<u64, Rejected> {
    match obj.remove("at") {
        Some(Value::Number(n)) => n.as_u64().filter(|&ms| ms <= MAX_TIME_MS).ok_or_else(|| {
            Rejected::Input(format!(
                "`at` must be milliseconds since the epoch, at most {MAX_TIME_MS}"
            ))
        }),
        _ => Err(Rejected::Input(
            "`at` (milliseconds since the epoch) is missing".into(),
        )),
    }
}

/// The line's `ticket`: an id or `@label`.
fn ticket_field(obj: &mut Map<String, Value>, labels: &Labels) -> Result<TicketId, Rejected> {
    labels
        .ticket(&required(obj, "ticket")?)
        .map_err(Rejected::Input)
}

/// An optional trigger field (`answers`, `in_reply_to`, `requested_by`): an
/// id or `@label`.
fn trigger_field(
    obj: &mut Map<String, Value>,
    key: &str,
    labels: &Labels,
) -> Result<Option<TriggerId>, Rejected> {
    take_str(obj, key)?
        .map(|t| labels.trigger(&t))
        .transpose()
        .map_err(Rejected::Input)
}

fn report_line<J: Judge>(
    router: &mut Router<J>,
    mut obj: Map<String, Value>,
    labels: &Labels,
    at: u64,
) -> Result<Decision, Rejected> {
    let ticket = ticket_field(&mut obj, labels)?;
    let answers = trigger_field(&mut obj, "answers", labels)?;
    let mut report: Report = parse("report", obj)?;
    report.answers = answers
        .map(|t| gatehouse_types::TriggerId::parse(t.as_str()))
        .transpose()
        .map_err(|e| Rejected::Input(e.to_string()))?;
    Ok(router.on_report(ReportInput { ticket, report }, at)?)
}

fn reply_line<J: Judge>(
    router: &mut Router<J>,
    mut obj: Map<String, Value>,
    labels: &Labels,
    at: u64,
) -> Result<Decision, Rejected> {
    let ticket = ticket_field(&mut obj, labels)?;
    let in_reply_to = trigger_field(&mut obj, "in_reply_to", labels)?;
    let ReplyLine { purpose, text } = parse("reply", obj)?;
    let attempt = ReplyAttempt {
        ticket,
        purpose,
        in_reply_to,
        text,
    };
    Ok(router.on_reply(attempt, at)?)
}

fn end_line<J: Judge>(
    router: &mut Router<J>,
    mut obj: Map<String, Value>,
    labels: &Labels,
    at: u64,
) -> Result<Decision, Rejected> {
    let ticket = ticket_field(&mut obj, labels)?;
    let requested_by = trigger_field(&mut obj, "requested_by", labels)?;
    let EndLine { outcome } = parse("end", obj)?;
    Ok(router.on_end(ticket, outcome, requested_by, at)?)
}

/// A policy line's policy: from a file beside the events, or inline.
fn policy_line(obj: Map<String, Value>, base_dir: &Path) -> Result<Policy, Rejected> {
    match parse::<PolicyLine>("policy", obj)? {
        PolicyLine {
            path: Some(path),
            toml: None,
        } => Policy::load(&base_dir.join(path)),
        PolicyLine {
            path: None,
            toml: Some(text),
        } => Policy::from_toml("(inline policy)", &text),
        _ => {
            return Err(Rejected::Input(
                "a policy line has exactly one of `path` or `toml`".into(),
            ))
        }
    }
    .map_err(|e: PolicyError| Rejected::Input(e.to_string()))
}

/// The `at` of the first line that has one an id can hold, for recording
/// the initial policy.
pub fn first_at(events: &str) -> u64 {
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| {
            v.get("at")
                .and_then(Value::as_u64)
                .filter(|&ms| ms <= MAX_TIME_MS)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::RulesOnlyJudge;
    use crate::store::Store;

    const POLICY: &str = include_str!("../examples/policy.toml");

    fn run(events: &str) -> (String, ReplaySummary) {
        let policy = Policy::from_toml("policy.toml", POLICY).unwrap();
        let store = Store::open_in_memory().unwrap();
        let mut router = Router::new(store, policy, RulesOnlyJudge, first_at(events)).unwrap();
        let mut out = Vec::new();
        let summary = replay(&mut router, events.as_bytes(), Path::new("."), &mut out).unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    /// A time past what an id can hold is a rejected line, not a store
    /// error that stops the replay (found by the `replay_lines` fuzz target:
    /// the id came out a digit too long and could not be read back). The
    /// last time an id holds is accepted, and the lines after go on.
    #[test]
    fn a_time_past_what_ids_hold_is_rejected_and_the_replay_goes_on() {
        let trigger = |at: u64, id: &str| {
            format!(
                r#"{{"type":"trigger","at":{at},"source":"github","kind":"ci_result","thread":"gh:acme/widgets#{id}","message_id":"run_{id}","repo":"acme/widgets","branch":"main","sender":{{"id":"41898282","login":"github-actions[bot]","is_bot":true}},"text":"CI failed on main"}}"#
            )
        };
        let events = [
            trigger(MAX_TIME_MS + 1, "1"),
            trigger(u64::MAX, "2"),
            trigger(MAX_TIME_MS, "3"),
            trigger(MAX_TIME_MS, "4"),
        ]
        .join("\n");
        let (out, summary) = run(&events);
        assert_eq!(
            summary,
            ReplaySummary {
                decisions: 2,
                rejected: 2
            },
            "{out}"
        );
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (line, number) in lines.iter().zip(1..) {
            assert_eq!(line["line"], number, "{line}");
        }
        assert_eq!(lines[0]["type"], "rejected");
        assert!(
            lines[0]["error"].as_str().unwrap().contains("at most"),
            "{out}"
        );
        assert_eq!(lines[1]["type"], "rejected");
        assert_ne!(lines[2]["type"], "rejected", "{out}");
        assert_ne!(lines[3]["type"], "rejected", "{out}");
    }

    /// The first `at` ignores a time no id holds (the router records its
    /// first policy at it).
    #[test]
    fn first_at_skips_times_past_what_ids_hold() {
        let events = format!("{{\"at\":{}}}\n{{\"at\":5}}", MAX_TIME_MS + 1);
        assert_eq!(first_at(&events), 5);
        assert_eq!(first_at("{\"at\":7}\n{\"at\":5}"), 7);
    }
}
