//! The demo's story as a timeline, its summary and its checks: plain
//! functions over what the run left behind (the router's decision log and
//! outbox, the proxy's audit log, what the emulators saw).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// One line of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Milliseconds since the Unix epoch.
    pub at: u64,
    /// `story` (what the demo did as a person or bot), `router`, `proxy`.
    pub actor: String,
    pub text: String,
}

/// A reply in the router's outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sent {
    pub reply: String,
    pub ticket: String,
    pub purpose: String,
    pub platform: String,
    pub state: String,
    pub text: String,
}

/// Everything the run left behind.
#[derive(Debug, Default)]
pub struct Facts {
    pub story: Vec<Entry>,
    pub decisions: Vec<(u64, Value)>,
    pub outbox: Vec<Sent>,
    pub audit: Vec<Value>,
    /// The bot's comments on the assigned issue, in order.
    pub issue_comments: Vec<String>,
    /// Every comment the bot's account made on the GitHub emulator.
    pub bot_comments_total: usize,
    /// The bot's Feishu messages, in order.
    pub feishu_messages: Vec<String>,
    /// Files of the router's state that hold the bot's token (must be none).
    pub token_in_router_files: Vec<String>,
    /// Triggers the router forwarded to a job's inbox (the supervisor took
    /// them: `live_forwards` state `forwarded`).
    pub forwarded: Vec<String>,
}

/// One property of the story, and whether it held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub held: bool,
    pub detail: String,
}

/// A proxy request joined with its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub at: u64,
    pub identity: String,
    pub method: String,
    pub target: String,
    pub allowed: bool,
    pub reason: String,
    pub status: Option<u64>,
    pub message: bool,
}

impl Call {
    /// Refused by a rule, or by a check of the body (a 403 of the proxy's own).
    pub fn refused(&self) -> bool {
        !self.allowed || self.status == Some(403)
    }
}

pub use crate::audit::sources::rfc3339_ms;

/// The audit log's requests, each with its completion's status.
pub fn calls(audit: &[Value]) -> Vec<Call> {
    let mut status: BTreeMap<&str, u64> = BTreeMap::new();
    for line in audit.iter().filter(|l| l["event"] == "completion") {
        if let (Some(id), Some(s)) = (line["request_id"].as_str(), line["status"].as_u64()) {
            status.insert(id, s);
        }
    }
    audit
        .iter()
        .filter(|l| l["event"] == "request")
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
            let outcome = &l["outcome"];
            let o = |k: &str| outcome[k].as_str().unwrap_or_default().to_owned();
            let allowed = outcome["decision"] == "allow";
            Call {
                at: rfc3339_ms(l["time"].as_str().unwrap_or_default()).unwrap_or(0),
                identity: s("identity"),
                method: s("method"),
                target: format!("{}{}", s("host"), s("path")),
                allowed,
                reason: if allowed {
                    format!("{}/{}", o("rule_set"), o("rule"))
                } else {
                    o("reason")
                },
                status: l["request_id"]
                    .as_str()
                    .and_then(|id| status.get(id).copied()),
                message: !l["message"].is_null(),
            }
        })
        .collect()
}

fn describe_decision(d: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    match d["type"].as_str().unwrap_or_default() {
        "trigger" => {
            let who = match d["admission"].as_str().unwrap_or_default() {
                "explicit" => format!(
                    "explicit request by {} ({})",
                    s(&d["requester"]),
                    s(&d["via"])
                ),
                "candidate" => format!(
                    "candidate from {} {}",
                    s(&d["author"]["kind"]),
                    s(&d["author"]["name"])
                ),
                _ => format!("ignored: {}", s(&d["reason"])),
            };
            let ticket = &d["ticket"];
            let what = match ticket["action"].as_str().unwrap_or_default() {
                "opened" => format!(
                    "ticket {} opened (team {}, {}, profile {})",
                    s(&ticket["ticket"]),
                    s(&ticket["mandate"]["scope"]["team"]),
                    s(&ticket["mandate"]["scope"]["repo"]),
                    s(&ticket["mandate"]["scope"]["sandbox_profile"])
                ),
                "pass_through" => format!("passed to ticket {}'s worker", s(&ticket["ticket"])),
                "resumed" => format!("ticket {} resumed", s(&ticket["ticket"])),
                "stays_ended" => format!("ticket {} stays ended", s(&ticket["ticket"])),
                _ => format!("no ticket ({})", s(&ticket["why"])),
            };
            format!(
                "{} on {}: {who} → {what}",
                s(&d["trigger"]),
                s(&d["thread"])
            )
        }
        "report" => match d.get("allowed") {
            Some(a) => format!(
                "{}: worker report accepted, ticket {}",
                s(&d["ticket"]),
                s(&a["state"])
            ),
            None => format!(
                "{}: worker report refused: {}",
                s(&d["ticket"]),
                s(&d["refused"]["message"])
            ),
        },
        "reply" => match d.get("allowed") {
            Some(a) => format!(
                "{}: {} reply allowed and logged ({} words) as {}",
                s(&d["ticket"]),
                s(&d["purpose"]),
                a["words"],
                s(&a["reply"])
            ),
            None => format!(
                "{}: {} reply refused: {}",
                s(&d["ticket"]),
                s(&d["purpose"]),
                s(&d["refused"]["message"])
            ),
        },
        "end" => match d.get("allowed") {
            Some(_) => format!("{}: ticket ended {}", s(&d["ticket"]), s(&d["outcome"])),
            None => format!(
                "{}: end {} refused: {}",
                s(&d["ticket"]),
                s(&d["outcome"]),
                s(&d["refused"]["message"])
            ),
        },
        "policy" => format!("policy {} in force", s(&d["version"])),
        other => format!("{other} decision"),
    }
}

/// The story, the router's decisions and the proxy's calls, in time order.
pub fn timeline(f: &Facts) -> Vec<Entry> {
    let mut out = f.story.clone();
    for (at, d) in &f.decisions {
        out.push(Entry {
            at: *at,
            actor: "router".into(),
            text: describe_decision(d),
        });
    }
    for c in calls(&f.audit) {
        let verdict = match (c.refused(), c.status) {
            (true, _) if !c.allowed => format!("REFUSED: {}", c.reason),
            (true, _) => "REFUSED by the body check (403)".to_owned(),
            (false, Some(s)) => format!("allowed ({}) → {s}", c.reason),
            (false, None) => format!("allowed ({})", c.reason),
        };
        let message = if c.message {
            " [message to people]"
        } else {
            ""
        };
        out.push(Entry {
            at: c.at,
            actor: "proxy".into(),
            text: format!(
                "{} {} {}{message}: {verdict}",
                c.identity, c.method, c.target
            ),
        });
    }
    // Stable: the story's own lines first among equal times.
    out.sort_by_key(|e| e.at);
    out
}

/// Messages to people per ticket, by purpose; refusals per identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub messages: BTreeMap<String, BTreeMap<String, usize>>,
    pub refusals: BTreeMap<String, usize>,
}

pub fn summary(f: &Facts) -> Summary {
    let mut messages: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for s in f.outbox.iter().filter(|s| s.state == "sent") {
        *messages
            .entry(s.ticket.clone())
            .or_default()
            .entry(s.purpose.clone())
            .or_default() += 1;
    }
    let mut refusals = BTreeMap::new();
    for c in calls(&f.audit).into_iter().filter(Call::refused) {
        *refusals.entry(c.identity).or_default() += 1;
    }
    Summary { messages, refusals }
}

fn triggers<'a>(f: &'a Facts, admission: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    f.decisions
        .iter()
        .map(|(_, d)| d)
        .filter(move |d| d["type"] == "trigger" && d["admission"] == admission)
}

/// Whether the story held, property by property.
pub fn checks(f: &Facts) -> Vec<Check> {
    let check = |name, held, detail: String| Check { name, held, detail };
    let mut out = Vec::new();
    let comments = &f.issue_comments;
    out.push(check(
        "github: alice's assignment got an ack, then a result with the pull request's link",
        comments.len() == 2 && comments[1].contains("/pull/"),
        format!("{} bot comments on the issue: {comments:?}", comments.len()),
    ));
    let messages = &f.feishu_messages;
    out.push(check(
        "feishu: alice's direct message got an ack, then a result with the link",
        messages.len() == 2 && messages[1].contains("/pull/"),
        format!("{} bot messages: {messages:?}", messages.len()),
    ));
    out.push(check(
        "no other message reached a person",
        f.bot_comments_total == 2
            && f.outbox.len() == 4
            && f.outbox.iter().all(|s| s.state == "sent"),
        format!(
            "{} bot comments on GitHub, {} replies in the outbox ({:?})",
            f.bot_comments_total,
            f.outbox.len(),
            f.outbox
                .iter()
                .map(|s| (&s.purpose, &s.state))
                .collect::<Vec<_>>()
        ),
    ));
    let mallory: Vec<&Value> = triggers(f, "ignore")
        .filter(|d| d["reason"] == "not_allowlisted")
        .collect();
    out.push(check(
        "mallory (not allowlisted) mentioning the bot led to nothing",
        mallory.len() == 1 && mallory[0]["ticket"]["action"] == "none",
        format!("{} not_allowlisted triggers", mallory.len()),
    ));
    let ci: Vec<&Value> = triggers(f, "candidate")
        .filter(|d| d["author"]["kind"] == "bot")
        .collect();
    let completed = f.decisions.iter().any(|(_, d)| {
        d["type"] == "end" && d["outcome"] == "completed" && d.get("allowed").is_some()
    });
    let cancelled = f.decisions.iter().any(|(_, d)| {
        d["type"] == "end" && d["outcome"] == "cancelled" && d.get("allowed").is_some()
    });
    let reached = ci.first().is_some_and(|d| {
        d["trigger"]
            .as_str()
            .is_some_and(|t| f.forwarded.iter().any(|x| x == t))
    });
    out.push(check(
        "the CI bot's \"stop\" reached the worker and stopped nothing",
        ci.len() == 1
            && ci[0]["ticket"]["action"] == "pass_through"
            && reached
            && completed
            && !cancelled,
        format!(
            "CI trigger: {}; in the worker's inbox: {reached}; a ticket ended completed: \
             {completed}; one cancelled: {cancelled}",
            ci.first()
                .map_or("none".into(), |d| d["ticket"]["action"].to_string())
        ),
    ));
    let calls = calls(&f.audit);
    let worker = |c: &&Call| c.identity.starts_with("tkt_");
    let push_refused = calls
        .iter()
        .filter(worker)
        .any(|c| c.target.ends_with("git-receive-pack") && c.refused());
    let comment_refused = calls
        .iter()
        .filter(worker)
        .any(|c| c.target.contains(super::world::OTHER_REPO) && c.refused());
    out.push(check(
        "the worker's push to main and its comment in another team's repository were refused",
        push_refused && comment_refused,
        format!("push refused: {push_refused}; comment refused: {comment_refused}"),
    ));
    out.push(check(
        "the bot's token is in none of the router's files",
        f.token_in_router_files.is_empty(),
        format!("{:?}", f.token_in_router_files),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc3339_to_ms() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            rfc3339_ms("2000-03-01T00:00:00.000Z"),
            Some(951_868_800_000)
        );
        assert_eq!(
            rfc3339_ms("2026-12-01T05:06:07.089Z"),
            Some(1_796_101_567_089)
        );
        assert_eq!(rfc3339_ms("2026-12-01 05:06:07Z"), None);
        assert_eq!(rfc3339_ms("2026-12-01T05:06:07"), None);
    }

    fn facts() -> Facts {
        let audit = vec![
            json!({"event": "request", "time": "2026-12-01T00:00:01Z", "request_id": "r1",
                   "identity": "tkt_1", "method": "POST", "host": "github.com",
                   "path": "/acme/widgets.git/git-receive-pack",
                   "outcome": {"decision": "allow", "rule_set": "github-worker", "rule": "git-push"}}),
            json!({"event": "completion", "request_id": "r1", "status": 403}),
            json!({"event": "request", "time": "2026-12-01T00:00:02Z", "request_id": "r2",
                   "identity": "tkt_1", "method": "POST", "host": "api.github.com",
                   "path": "/repos/acme/gadgets/issues/1/comments",
                   "outcome": {"decision": "deny", "reason": "no rule matched"}}),
        ];
        let decisions = vec![
            (
                1,
                json!({"type": "trigger", "trigger": "trg_1", "thread": "gh:acme/widgets#1",
                       "admission": "ignore", "reason": "not_allowlisted",
                       "ticket": {"action": "none", "why": "ignored"}}),
            ),
            (
                2,
                json!({"type": "trigger", "trigger": "trg_2", "thread": "gh:acme/widgets#1",
                       "admission": "candidate", "author": {"kind": "bot", "name": "ci"},
                       "ticket": {"action": "pass_through", "ticket": "tkt_1"}}),
            ),
            (
                3,
                json!({"type": "end", "ticket": "tkt_1", "outcome": "completed",
                       "allowed": {"state": "ended"}}),
            ),
        ];
        let sent = |purpose: &str, platform: &str| Sent {
            reply: "rpl".into(),
            ticket: "tkt_1".into(),
            purpose: purpose.into(),
            platform: platform.into(),
            state: "sent".into(),
            text: "t".into(),
        };
        Facts {
            decisions,
            audit,
            outbox: vec![
                sent("ack", "github"),
                sent("result", "github"),
                sent("ack", "feishu"),
                sent("result", "feishu"),
            ],
            issue_comments: vec![
                "On it.".into(),
                "Done: https://github.com/acme/widgets/pull/2".into(),
            ],
            bot_comments_total: 2,
            feishu_messages: vec![
                "On it.".into(),
                "Done: https://github.com/acme/widgets/pull/3".into(),
            ],
            forwarded: vec!["trg_2".into()],
            ..Facts::default()
        }
    }

    #[test]
    fn a_story_that_held_passes_every_check() {
        let f = facts();
        let failed: Vec<_> = checks(&f).into_iter().filter(|c| !c.held).collect();
        assert!(failed.is_empty(), "{failed:?}");
        let s = summary(&f);
        assert_eq!(s.messages["tkt_1"]["ack"], 2);
        assert_eq!(s.refusals["tkt_1"], 2);
        let t = timeline(&f);
        assert_eq!(t.len(), 5);
        assert!(t.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(t
            .iter()
            .any(|e| e.text.contains("REFUSED by the body check")));
    }

    #[test]
    fn each_broken_property_fails_its_check() {
        type Break = fn(&mut Facts);
        let breaks: Vec<(&str, Break)> = vec![
            ("github", |f| f.issue_comments.push("again".into())),
            ("feishu", |f| f.feishu_messages.truncate(1)),
            ("no other message", |f| f.bot_comments_total = 3),
            ("no other message", |f| f.outbox[0].state = "failed".into()),
            ("mallory", |f| {
                f.decisions.remove(0);
            }),
            ("the CI bot", |f| {
                f.decisions.push((
                    4,
                    json!({"type": "end", "ticket": "tkt_1",
                    "outcome": "cancelled", "allowed": {"state": "ended"}}),
                ));
            }),
            ("the CI bot", |f| f.forwarded.clear()),
            ("push to main", |f| f.audit[1]["status"] = json!(200)),
            ("push to main", |f| {
                f.audit[2]["outcome"]["decision"] = json!("allow")
            }),
            ("token", |f| {
                f.token_in_router_files.push("router.db".into())
            }),
        ];
        for (name, break_it) in breaks {
            let mut f = facts();
            break_it(&mut f);
            let failed: Vec<_> = checks(&f).into_iter().filter(|c| !c.held).collect();
            assert_eq!(failed.len(), 1, "{name}: {failed:?}");
            assert!(failed[0].name.contains(name), "{name}: {failed:?}");
        }
    }
}
