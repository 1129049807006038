//! Tickets, their Mandates, worker Reports, and revalidation.
//!
//! A Ticket is one unit of work owning one thread:
//! `open → working → ready | blocked → ended(outcome)`. Its Mandate is fixed
//! when the work is accepted and says why the work may be done. When a person
//! writes on a thread whose ticket ended, [`revalidate`] decides from the
//! Mandate and the *current* policy whether the ticket may resume.

use serde::{Deserialize, Serialize};

use crate::gate::Author;
use crate::id::{ThreadId, TicketId, TriggerId};
use crate::policy::{Mode, Policy, PolicyVersion, Scope};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TicketState {
    Open,
    Working,
    Ready,
    Blocked,
    Ended,
}

impl TicketState {
    pub fn as_str(self) -> &'static str {
        match self {
            TicketState::Open => "open",
            TicketState::Working => "working",
            TicketState::Ready => "ready",
            TicketState::Blocked => "blocked",
            TicketState::Ended => "ended",
        }
    }
}

/// How a ticket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Merged,
    Dropped,
    Failed,
    Cancelled,
    TimedOut,
}

impl Outcome {
    /// Outcomes after which a `result` reply may go out.
    pub fn allows_result(self) -> bool {
        matches!(
            self,
            Outcome::Completed | Outcome::Merged | Outcome::Dropped
        )
    }
}

/// Why the work may be done, fixed at acceptance (refreshed on a resume).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mandate {
    pub policy_version: PolicyVersion,
    pub scope: Scope,
    /// The auto rules that accepted a candidate; empty for an explicit request.
    pub matched_rules: Vec<String>,
    pub requester: Author,
    /// The trigger that opened the ticket.
    pub trigger: TriggerId,
}

/// What a worker says about its ticket: the wire type the supervisor's
/// control socket receives, kept as the ticket's latest report.
pub use gatehouse_types::wire::{Report, ReportState};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    pub id: TicketId,
    pub thread: ThreadId,
    pub thread_key: String,
    pub state: TicketState,
    /// Set exactly when `state` is `ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    pub mandate: Mandate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_report: Option<Report>,
    pub opened_at: u64,
    pub updated_at: u64,
}

impl Ticket {
    pub fn is_live(&self) -> bool {
        self.state != TicketState::Ended
    }
}

/// Why a report was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum ReportRefusal {
    /// The ticket has ended; a worker cannot report on it.
    #[error("the ticket has ended")]
    TicketEnded,
    /// The summary must be one non-empty line.
    #[error("the summary must be one non-empty line")]
    BadSummary,
    /// A question must be non-empty.
    #[error("the question is empty")]
    EmptyQuestion,
    /// `answers` must name a message on the ticket's own thread.
    #[error("the answered message is not on the ticket's thread")]
    AnswersOtherThread,
}

/// Checks a report and applies it: the ticket takes the report's state.
pub fn apply_report(ticket: &mut Ticket, report: Report, now: u64) -> Result<(), ReportRefusal> {
    if !ticket.is_live() {
        return Err(ReportRefusal::TicketEnded);
    }
    if report.summary.trim().is_empty() || report.summary.contains(['\n', '\r']) {
        return Err(ReportRefusal::BadSummary);
    }
    if report
        .question
        .as_ref()
        .is_some_and(|q| q.trim().is_empty())
    {
        return Err(ReportRefusal::EmptyQuestion);
    }
    ticket.state = match report.state {
        ReportState::Working => TicketState::Working,
        ReportState::Ready => TicketState::Ready,
        ReportState::Blocked => TicketState::Blocked,
    };
    ticket.latest_report = Some(report);
    ticket.updated_at = now;
    Ok(())
}

/// Who asked for a ticket to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndRequester {
    /// The supervisor or the worker's own lifecycle (finished, timed out…).
    System,
    /// A message on the thread, by its admission's author.
    Message {
        thread: ThreadId,
        author: Option<Author>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum EndRefusal {
    #[error("the ticket has already ended")]
    AlreadyEnded,
    /// Bot messages are information; they can never stop a ticket.
    #[error("a bot cannot stop a ticket")]
    BotCannotStop,
    /// Only an admitted person's message on the ticket's thread can stop it.
    #[error("only an allowlisted person on the ticket's thread can stop it")]
    NotAPerson,
    /// Cancellation must come from a person's message.
    #[error("a cancellation must name the person's message that asked for it")]
    CancelNeedsPerson,
}

/// Checks and applies the end of a ticket.
pub fn end_ticket(
    ticket: &mut Ticket,
    outcome: Outcome,
    by: &EndRequester,
    now: u64,
) -> Result<(), EndRefusal> {
    if !ticket.is_live() {
        return Err(EndRefusal::AlreadyEnded);
    }
    match by {
        EndRequester::System if outcome == Outcome::Cancelled => {
            return Err(EndRefusal::CancelNeedsPerson)
        }
        EndRequester::System => {}
        EndRequester::Message {
            author: Some(a), ..
        } if a.is_bot() => return Err(EndRefusal::BotCannotStop),
        EndRequester::Message { thread, author } => {
            if author.is_none() || *thread != ticket.thread {
                return Err(EndRefusal::NotAPerson);
            }
        }
    }
    ticket.state = TicketState::Ended;
    ticket.outcome = Some(outcome);
    ticket.updated_at = now;
    Ok(())
}

/// Why a mandate no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RevalidationFailure {
    #[error("the requester `{name}` is no longer allowlisted")]
    RequesterRemoved { name: String },
    #[error("rule `{rule}` no longer exists")]
    RuleRemoved { rule: String },
    #[error("rule `{rule}` is disabled")]
    RuleDisabled { rule: String },
    #[error("rule `{rule}` is in mode {mode:?}, not auto")]
    RuleNotAuto { rule: String, mode: Mode },
    #[error("repository `{repo}` is no longer in team `{team}`")]
    RepoNotInTeam { repo: String, team: String },
}

/// Does the mandate still hold under `policy`? On success, the mandate to
/// resume with: same requester, rules and trigger, the current policy
/// version and the repository's current sandbox profile and rule sets.
pub fn revalidate(mandate: &Mandate, policy: &Policy) -> Result<Mandate, RevalidationFailure> {
    match &mandate.requester {
        Author::Human(name) if policy.person_named(name).is_none() => {
            return Err(RevalidationFailure::RequesterRemoved { name: name.clone() })
        }
        Author::Bot(name) if !policy.bots.iter().any(|b| &b.name == name) => {
            return Err(RevalidationFailure::RequesterRemoved { name: name.clone() })
        }
        _ => {}
    }
    for id in &mandate.matched_rules {
        let Some(rule) = policy.rule(id) else {
            return Err(RevalidationFailure::RuleRemoved { rule: id.clone() });
        };
        if !rule.enabled {
            return Err(RevalidationFailure::RuleDisabled { rule: id.clone() });
        }
        if rule.mode != Mode::Auto {
            return Err(RevalidationFailure::RuleNotAuto {
                rule: id.clone(),
                mode: rule.mode,
            });
        }
    }
    let scope = policy
        .scope_of_repo(&mandate.scope.repo)
        .filter(|s| s.team == mandate.scope.team)
        .ok_or_else(|| RevalidationFailure::RepoNotInTeam {
            repo: mandate.scope.repo.clone(),
            team: mandate.scope.team.clone(),
        })?;
    Ok(Mandate {
        policy_version: policy.version().clone(),
        scope,
        ..mandate.clone()
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::id::IdClock;
    use crate::policy::tests::{base, BASE};

    pub(crate) fn ticket_with(mandate: Mandate) -> Ticket {
        let mut clock = IdClock::default();
        Ticket {
            id: clock.issue(1),
            thread: clock.issue(1),
            thread_key: "gh:acme/widgets#1".into(),
            state: TicketState::Open,
            outcome: None,
            mandate,
            latest_report: None,
            opened_at: 1,
            updated_at: 1,
        }
    }

    pub(crate) fn mandate(requester: Author, rules: &[&str]) -> Mandate {
        let p = base();
        Mandate {
            policy_version: p.version().clone(),
            scope: p.scope_of_repo("acme/widgets").unwrap(),
            matched_rules: rules.iter().map(|r| (*r).to_owned()).collect(),
            requester,
            trigger: IdClock::default().issue(1),
        }
    }

    fn policy(text: &str) -> Policy {
        Policy::from_toml("p", text).unwrap()
    }

    #[test]
    fn revalidation_cases() {
        let alice = Author::Human("alice".into());
        let ci = Author::Bot("ci".into());
        let by_rule = mandate(ci.clone(), &["ci-fails-on-main"]);
        let explicit = mandate(alice.clone(), &[]);
        let no_alice = BASE.replacen("name = \"alice\"\nteam = \"core\"\ngithub = { login = \"alice\", id = 101 }\nfeishu = \"ou_alice\"", "name = \"carol\"\nteam = \"core\"\nfeishu = \"ou_carol\"", 1);
        let moved_repo = BASE.replace("[teams.core.repos.\"acme/widgets\"]", "[teams.core.repos.\"acme/other\"]\nsandbox_profile = \"rust\"\n[teams.web.repos.\"acme/widgets\"]")
            .replace("default_repo = \"acme/widgets\"", "default_repo = \"acme/other\"")
            .replace("repo = \"acme/widgets\"", "repo = \"acme/other\"");
        let cases: Vec<(&str, &Mandate, String, Result<(), RevalidationFailure>)> = vec![
            (
                "unchanged policy, explicit",
                &explicit,
                BASE.to_owned(),
                Ok(()),
            ),
            ("unchanged policy, rule", &by_rule, BASE.to_owned(), Ok(())),
            (
                "requester removed",
                &explicit,
                no_alice,
                Err(RevalidationFailure::RequesterRemoved {
                    name: "alice".into(),
                }),
            ),
            (
                "bot removed from the bot list",
                &by_rule,
                BASE.replace("name = \"ci\"", "name = \"ci2\""),
                Err(RevalidationFailure::RequesterRemoved { name: "ci".into() }),
            ),
            (
                "rule disabled",
                &by_rule,
                BASE.replace("mode = \"auto\"", "mode = \"auto\"\nenabled = false"),
                Err(RevalidationFailure::RuleDisabled {
                    rule: "ci-fails-on-main".into(),
                }),
            ),
            (
                "rule now observe",
                &by_rule,
                BASE.replace("mode = \"auto\"", "mode = \"observe\""),
                Err(RevalidationFailure::RuleNotAuto {
                    rule: "ci-fails-on-main".into(),
                    mode: Mode::Observe,
                }),
            ),
            (
                "rule now off",
                &by_rule,
                BASE.replace("mode = \"auto\"", "mode = \"off\""),
                Err(RevalidationFailure::RuleNotAuto {
                    rule: "ci-fails-on-main".into(),
                    mode: Mode::Off,
                }),
            ),
            (
                "rule removed",
                &by_rule,
                BASE.replace("id = \"ci-fails-on-main\"", "id = \"ci-renamed\""),
                Err(RevalidationFailure::RuleRemoved {
                    rule: "ci-fails-on-main".into(),
                }),
            ),
            (
                "repo moved to another team",
                &explicit,
                moved_repo,
                Err(RevalidationFailure::RepoNotInTeam {
                    repo: "acme/widgets".into(),
                    team: "core".into(),
                }),
            ),
        ];
        for (name, m, text, want) in cases {
            let got = revalidate(m, &policy(&text)).map(|_| ());
            assert_eq!(got, want, "case: {name}");
        }
    }

    #[test]
    fn resume_takes_the_current_scope_and_version() {
        let m = mandate(Author::Human("alice".into()), &[]);
        let tighter = policy(&BASE.replace(
            "rule_sets = [\"github-repo\", \"model\"]",
            "rule_sets = [\"github-read\"]",
        ));
        let resumed = revalidate(&m, &tighter).unwrap();
        assert_eq!(resumed.scope.rule_sets, vec!["github-read".to_owned()]);
        assert_eq!(&resumed.policy_version, tighter.version());
        assert_eq!(resumed.requester, m.requester);
        assert_eq!(resumed.trigger, m.trigger);
    }

    #[test]
    fn reports_move_state_and_are_refused_after_the_end() {
        let mut t = ticket_with(mandate(Author::Human("alice".into()), &[]));
        let report = |state| Report {
            state,
            summary: "did a thing".into(),
            question: None,
            answers: None,
            links: vec![],
        };
        apply_report(&mut t, report(ReportState::Working), 2).unwrap();
        assert_eq!(t.state, TicketState::Working);
        apply_report(&mut t, report(ReportState::Ready), 3).unwrap();
        assert_eq!(t.state, TicketState::Ready);
        let two_lines = Report {
            summary: "a\nb".into(),
            ..report(ReportState::Ready)
        };
        assert_eq!(
            apply_report(&mut t, two_lines, 4),
            Err(ReportRefusal::BadSummary)
        );
        end_ticket(&mut t, Outcome::Completed, &EndRequester::System, 5).unwrap();
        assert_eq!(
            apply_report(&mut t, report(ReportState::Working), 6),
            Err(ReportRefusal::TicketEnded)
        );
    }

    #[test]
    fn who_may_end_a_ticket() {
        let fresh = || ticket_with(mandate(Author::Human("alice".into()), &[]));
        let thread = fresh().thread;
        let other_thread: ThreadId = {
            let mut c = IdClock::default();
            c.issue::<ThreadId>(1);
            c.issue(1)
        };
        let cases: Vec<(&str, Outcome, EndRequester, Result<(), EndRefusal>)> = vec![
            (
                "system completes",
                Outcome::Completed,
                EndRequester::System,
                Ok(()),
            ),
            (
                "system cancels",
                Outcome::Cancelled,
                EndRequester::System,
                Err(EndRefusal::CancelNeedsPerson),
            ),
            (
                "person cancels",
                Outcome::Cancelled,
                EndRequester::Message {
                    thread: thread.clone(),
                    author: Some(Author::Human("bob".into())),
                },
                Ok(()),
            ),
            (
                "bot cancels",
                Outcome::Cancelled,
                EndRequester::Message {
                    thread: thread.clone(),
                    author: Some(Author::Bot("ci".into())),
                },
                Err(EndRefusal::BotCannotStop),
            ),
            (
                "bot drops",
                Outcome::Dropped,
                EndRequester::Message {
                    thread: thread.clone(),
                    author: Some(Author::Bot("ci".into())),
                },
                Err(EndRefusal::BotCannotStop),
            ),
            (
                "ignored sender cancels",
                Outcome::Cancelled,
                EndRequester::Message {
                    thread: thread.clone(),
                    author: None,
                },
                Err(EndRefusal::NotAPerson),
            ),
            (
                "person on another thread",
                Outcome::Cancelled,
                EndRequester::Message {
                    thread: other_thread,
                    author: Some(Author::Human("bob".into())),
                },
                Err(EndRefusal::NotAPerson),
            ),
        ];
        for (name, outcome, by, want) in cases {
            let mut t = fresh();
            assert_eq!(end_ticket(&mut t, outcome, &by, 9), want, "{name}");
            assert_eq!(t.is_live(), want.is_err(), "{name}");
        }
        let mut t = fresh();
        end_ticket(&mut t, Outcome::Merged, &EndRequester::System, 9).unwrap();
        assert_eq!(
            end_ticket(&mut t, Outcome::Failed, &EndRequester::System, 9),
            Err(EndRefusal::AlreadyEnded)
        );
        assert_eq!(t.outcome, Some(Outcome::Merged));
    }
}
