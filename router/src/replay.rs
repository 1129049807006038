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
use crate::id::{TicketId, TriggerId};
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
    let at = match obj.remove("at") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| Rejected::Input("`at` must be milliseconds since the epoch".into()))?,
        _ => {
            return Err(Rejected::Input(
                "`at` (milliseconds since the epoch) is missing".into(),
            ))
        }
    };
    let label = take_str(&mut obj, "label")?;
    let bad = |e: String| Rejected::Input(e);
    let decision = match kind.as_str() {
        "trigger" => {
            let input: TriggerInput = parse("trigger", obj)?;
            router.on_trigger(input, at)?
        }
        "report" => {
            let ticket = labels.ticket(&required(&mut obj, "ticket")?).map_err(bad)?;
            let answers = take_str(&mut obj, "answers")?
                .map(|a| labels.trigger(&a))
                .transpose()
                .map_err(bad)?;
            let mut report: Report = parse("report", obj)?;
            report.answers = answers;
            router.on_report(ReportInput { ticket, report }, at)?
        }
        "reply" => {
            let ticket = labels.ticket(&required(&mut obj, "ticket")?).map_err(bad)?;
            let in_reply_to = take_str(&mut obj, "in_reply_to")?
                .map(|t| labels.trigger(&t))
                .transpose()
                .map_err(bad)?;
            let ReplyLine { purpose, text } = parse("reply", obj)?;
            router.on_reply(
                ReplyAttempt {
                    ticket,
                    purpose,
                    in_reply_to,
                    text,
                },
                at,
            )?
        }
        "end" => {
            let ticket = labels.ticket(&required(&mut obj, "ticket")?).map_err(bad)?;
            let requested_by = take_str(&mut obj, "requested_by")?
                .map(|t| labels.trigger(&t))
                .transpose()
                .map_err(bad)?;
            let EndLine { outcome } = parse("end", obj)?;
            router.on_end(ticket, outcome, requested_by, at)?
        }
        "note" => {
            let ticket = labels.ticket(&required(&mut obj, "ticket")?).map_err(bad)?;
            let NoteLine { text } = parse("note", obj)?;
            router.on_note(ticket, text, at)?
        }
        "policy" => {
            let policy = match parse::<PolicyLine>("policy", obj)? {
                PolicyLine {
                    path: Some(path),
                    toml: None,
                } => Policy::load(&base_dir.join(path)),
                PolicyLine {
                    path: None,
                    toml: Some(text),
                } => Policy::from_toml("(inline policy)", &text),
                _ => {
                    return Err(bad(
                        "a policy line has exactly one of `path` or `toml`".into()
                    ))
                }
            }
            .map_err(|e: PolicyError| bad(e.to_string()))?;
            router.set_policy(policy, at)?
        }
        other => {
            return Err(bad(format!(
                "unknown type `{other}`; expected trigger, report, reply, end, note or policy"
            )))
        }
    };
    if let Some(label) = label {
        if let Decision::Trigger(t) = &decision {
            labels.triggers.insert(label.clone(), t.trigger.clone());
            let ticket = match &t.ticket {
                TicketOutcome::PassThrough { ticket }
                | TicketOutcome::Opened { ticket, .. }
                | TicketOutcome::Resumed { ticket, .. }
                | TicketOutcome::StaysEnded { ticket, .. } => Some(ticket.clone()),
                TicketOutcome::None { .. } => None,
            };
            if let Some(ticket) = ticket {
                labels.tickets.insert(label, ticket);
            }
        }
    }
    Ok(decision)
}

/// The `at` of the first line that has one, for recording the initial policy.
pub fn first_at(events: &str) -> u64 {
    events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("at").and_then(Value::as_u64))
        .unwrap_or(0)
}
