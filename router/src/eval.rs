//! Eval: may a candidate become work under one of its team's rules?
//!
//! Code checks each rule's structured conditions first (the fast path); only
//! rules whose conditions hold go to a [`Judge`] for the semantic match (the
//! slow path: the router model, [`crate::model::judge`]). The rule's mode then
//! decides: `off` rules are not evaluated, `observe` records "would accept"
//! and accepts nothing, `auto` accepts. A judge that cannot answer (the model
//! unreachable, an answer that is not valid) accepts nothing: the verdict is
//! `not_judged` with the reason (`judge_unavailable`, `judge_invalid`).

use serde::{Deserialize, Serialize};

use crate::gate::Author;
use crate::policy::{AuthorKind, Conditions, Mode, Policy, Rule, Scope};
use crate::trigger::TriggerInput;

/// A judge's answer for one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    pub matched: bool,
    pub reason: String,
}

/// Why a judge gave no judgement; the rule accepts nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeFailure {
    /// No answer: unreachable, timed out, refused, rate limited past retries.
    JudgeUnavailable,
    /// An answer that is not a valid judgement (not JSON, wrong schema, a
    /// rule or candidate that was not offered, a missing or doubled answer).
    JudgeInvalid,
}

/// A judge's failure, with what went wrong in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeError {
    pub reason: JudgeFailure,
    pub detail: String,
}

impl JudgeError {
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self {
            reason: JudgeFailure::JudgeUnavailable,
            detail: detail.into(),
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        Self {
            reason: JudgeFailure::JudgeInvalid,
            detail: detail.into(),
        }
    }
}

/// Decides whether a candidate means what a rule describes. Called only for
/// enabled, not-off rules whose structured conditions already hold, and
/// never about the gate.
pub trait Judge {
    fn judge(&self, rule: &Rule, trigger: &TriggerInput) -> Result<Judgement, JudgeError>;

    /// Called once per turn, before its decisions, with every candidate
    /// they will ask about: a batching judge answers them in one call.
    fn prepare(&mut self, _asks: Vec<Ask>) {}

    /// Whether [`Judge::prepare`] is worth computing asks for.
    fn batches(&self) -> bool {
        false
    }

    /// How long candidates may wait for company before a turn judges them.
    fn window(&self) -> crate::model::window::WindowConfig {
        crate::model::window::WindowConfig::OFF
    }
}

/// A candidate a turn will ask a judge about, with the rules it is judged
/// against and its thread's earlier triggers (data, never instructions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub trigger: TriggerInput,
    pub rules: Vec<Rule>,
    /// The thread's most recent earlier triggers, oldest first (bounded).
    pub context: Vec<ContextItem>,
}

/// An earlier trigger on a candidate's thread, as the judge sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextItem {
    pub trigger: crate::id::TriggerId,
    pub author: String,
    pub author_is_bot: bool,
    /// Whether the gate admitted its author (a stranger's words are shown
    /// as such: they are context, and grant nothing).
    pub author_admitted: bool,
    /// The text, cut to a bound.
    pub text: String,
}

/// Accepts on the structured conditions alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesOnlyJudge;

impl Judge for RulesOnlyJudge {
    fn judge(&self, _rule: &Rule, _trigger: &TriggerInput) -> Result<Judgement, JudgeError> {
        Ok(Judgement {
            matched: true,
            reason: "structured conditions hold (rules-only judge)".to_owned(),
        })
    }
}

/// A structured condition a trigger can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    Source,
    Kind,
    Repo,
    Labels,
    Branch,
    Author,
}

/// What became of one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Disabled,
    Off,
    ConditionFailed {
        condition: Condition,
    },
    NoMatch {
        reason: String,
    },
    /// Observe mode: the rule matched; nothing is accepted.
    WouldAccept {
        reason: String,
    },
    Accept {
        reason: String,
    },
    /// The judge gave no judgement; nothing is accepted.
    NotJudged {
        reason: JudgeFailure,
        detail: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleOutcome {
    pub rule: String,
    pub mode: Mode,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Every rule of the candidate's team, in rule id order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Evaluation {
    pub outcomes: Vec<RuleOutcome>,
}

impl Evaluation {
    /// The rules that accepted.
    pub fn accepted(&self) -> Vec<String> {
        self.rules_where(|v| matches!(v, Verdict::Accept { .. }))
    }

    /// The observe-mode rules that would have accepted.
    pub fn would_accept(&self) -> Vec<String> {
        self.rules_where(|v| matches!(v, Verdict::WouldAccept { .. }))
    }

    fn rules_where(&self, pred: impl Fn(&Verdict) -> bool) -> Vec<String> {
        self.outcomes
            .iter()
            .filter(|o| pred(&o.verdict))
            .map(|o| o.rule.clone())
            .collect()
    }
}

/// Evaluates a candidate against the rules of its scope's team.
pub fn evaluate(
    trigger: &TriggerInput,
    author: &Author,
    scope: &Scope,
    policy: &Policy,
    judge: &dyn Judge,
) -> Evaluation {
    let outcomes = policy
        .rules
        .iter()
        .filter(|r| r.team == scope.team)
        .map(|rule| RuleOutcome {
            rule: rule.id.clone(),
            mode: rule.mode,
            verdict: verdict(rule, trigger, author, scope, judge),
        })
        .collect();
    Evaluation { outcomes }
}

fn verdict(
    rule: &Rule,
    trigger: &TriggerInput,
    author: &Author,
    scope: &Scope,
    judge: &dyn Judge,
) -> Verdict {
    if !rule.enabled {
        return Verdict::Disabled;
    }
    if rule.mode == Mode::Off {
        return Verdict::Off;
    }
    if let Err(condition) = conditions_hold(&rule.when, trigger, author, scope) {
        return Verdict::ConditionFailed { condition };
    }
    let Judgement { matched, reason } = match judge.judge(rule, trigger) {
        Ok(j) => j,
        Err(JudgeError { reason, detail }) => return Verdict::NotJudged { reason, detail },
    };
    match (matched, rule.mode) {
        (false, _) => Verdict::NoMatch { reason },
        (true, Mode::Auto) => Verdict::Accept { reason },
        (true, _) => Verdict::WouldAccept { reason },
    }
}

/// The rules of the scope's team a judge would be asked about: enabled, not
/// off, their structured conditions holding (what a batch asks the model).
pub fn rules_to_judge<'p>(
    trigger: &TriggerInput,
    author: &Author,
    scope: &Scope,
    policy: &'p Policy,
) -> Vec<&'p Rule> {
    policy
        .rules
        .iter()
        .filter(|r| r.team == scope.team && r.enabled && r.mode != Mode::Off)
        .filter(|r| conditions_hold(&r.when, trigger, author, scope).is_ok())
        .collect()
}

/// The first structured condition the trigger fails, if any.
pub fn conditions_hold(
    when: &Conditions,
    trigger: &TriggerInput,
    author: &Author,
    scope: &Scope,
) -> Result<(), Condition> {
    fn allows<T: PartialEq>(list: &[T], value: Option<&T>) -> bool {
        list.is_empty() || value.is_some_and(|v| list.contains(v))
    }
    if !allows(&when.sources, Some(&trigger.source)) {
        return Err(Condition::Source);
    }
    if !allows(&when.kinds, Some(&trigger.kind)) {
        return Err(Condition::Kind);
    }
    if !allows(&when.repos, Some(&scope.repo)) {
        return Err(Condition::Repo);
    }
    if !when.labels.is_empty() && !trigger.labels.iter().any(|l| when.labels.contains(l)) {
        return Err(Condition::Labels);
    }
    if !allows(&when.branches, trigger.branch.as_ref()) {
        return Err(Condition::Branch);
    }
    let author_ok = match when.author {
        AuthorKind::Any => true,
        AuthorKind::Bot => author.is_bot(),
        AuthorKind::Human => !author.is_bot(),
    };
    if !author_ok {
        return Err(Condition::Author);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;
    use crate::gate::{gate, scope_for, Admission};
    use crate::policy::tests::BASE;
    use crate::trigger::TriggerKind;

    fn ci_failure(branch: &str) -> TriggerInput {
        let mut t = gh(ci_bot(), TriggerKind::CiResult);
        t.branch = Some(branch.to_owned());
        t
    }

    fn bug_issue(labels: &[&str]) -> TriggerInput {
        let mut t = gh(alice_gh(), TriggerKind::IssueOpened);
        t.labels = labels.iter().map(|l| (*l).to_owned()).collect();
        t
    }

    fn eval_with(policy_text: &str, t: &TriggerInput, judge: &dyn Judge) -> Evaluation {
        let p = Policy::from_toml("p", policy_text).unwrap();
        let adm = gate(t, &p);
        let Admission::Candidate { author } = &adm else {
            panic!("not a candidate: {adm:?}")
        };
        let scope = scope_for(t, &adm, &p).unwrap();
        evaluate(t, author, &scope, &p, judge)
    }

    fn verdict_of(e: &Evaluation, rule: &str) -> Verdict {
        e.outcomes
            .iter()
            .find(|o| o.rule == rule)
            .unwrap()
            .verdict
            .clone()
    }

    struct Never;
    impl Judge for Never {
        fn judge(&self, rule: &Rule, _: &TriggerInput) -> Result<Judgement, JudgeError> {
            Ok(Judgement {
                matched: false,
                reason: format!("not what {} means", rule.id),
            })
        }
    }

    #[test]
    fn modes_decide_after_a_match() {
        let auto = eval_with(BASE, &ci_failure("main"), &RulesOnlyJudge);
        assert!(matches!(
            verdict_of(&auto, "ci-fails-on-main"),
            Verdict::Accept { .. }
        ));
        assert_eq!(auto.accepted(), vec!["ci-fails-on-main".to_owned()]);

        let observe = BASE.replace("mode = \"auto\"", "mode = \"observe\"");
        let e = eval_with(&observe, &ci_failure("main"), &RulesOnlyJudge);
        assert!(matches!(
            verdict_of(&e, "ci-fails-on-main"),
            Verdict::WouldAccept { .. }
        ));
        assert!(e.accepted().is_empty());
        assert_eq!(e.would_accept(), vec!["ci-fails-on-main".to_owned()]);

        let off = BASE.replace("mode = \"auto\"", "mode = \"off\"");
        let e = eval_with(&off, &ci_failure("main"), &RulesOnlyJudge);
        assert_eq!(verdict_of(&e, "ci-fails-on-main"), Verdict::Off);
        assert!(e.accepted().is_empty() && e.would_accept().is_empty());

        let disabled = BASE.replace("mode = \"auto\"", "mode = \"auto\"\nenabled = false");
        let e = eval_with(&disabled, &ci_failure("main"), &RulesOnlyJudge);
        assert_eq!(verdict_of(&e, "ci-fails-on-main"), Verdict::Disabled);
    }

    #[test]
    fn observe_is_the_default_mode() {
        // bug-reports omits its mode.
        let e = eval_with(BASE, &bug_issue(&["bug"]), &RulesOnlyJudge);
        assert!(matches!(
            verdict_of(&e, "bug-reports"),
            Verdict::WouldAccept { .. }
        ));
        assert!(e.accepted().is_empty());
    }

    #[test]
    fn judge_runs_only_after_conditions_and_can_refuse() {
        let e = eval_with(BASE, &ci_failure("main"), &Never);
        assert!(matches!(
            verdict_of(&e, "ci-fails-on-main"),
            Verdict::NoMatch { .. }
        ));
        assert!(e.accepted().is_empty());
    }

    struct Broken(JudgeFailure);
    impl Judge for Broken {
        fn judge(&self, _: &Rule, _: &TriggerInput) -> Result<Judgement, JudgeError> {
            Err(JudgeError {
                reason: self.0,
                detail: "model down".into(),
            })
        }
    }

    #[test]
    fn a_failed_judge_accepts_nothing_and_says_why() {
        for failure in [JudgeFailure::JudgeUnavailable, JudgeFailure::JudgeInvalid] {
            let e = eval_with(BASE, &ci_failure("main"), &Broken(failure));
            assert_eq!(
                verdict_of(&e, "ci-fails-on-main"),
                Verdict::NotJudged {
                    reason: failure,
                    detail: "model down".into()
                }
            );
            assert!(e.accepted().is_empty() && e.would_accept().is_empty());
        }
        let json = serde_json::to_string(&Verdict::NotJudged {
            reason: JudgeFailure::JudgeUnavailable,
            detail: "x".into(),
        })
        .unwrap();
        assert_eq!(
            json,
            r#"{"verdict":"not_judged","reason":"judge_unavailable","detail":"x"}"#
        );
    }

    #[test]
    fn rules_to_judge_are_those_the_judge_is_asked_about() {
        let t = ci_failure("main");
        let p = Policy::from_toml("p", BASE).unwrap();
        let adm = gate(&t, &p);
        let Admission::Candidate { author } = &adm else {
            panic!()
        };
        let scope = scope_for(&t, &adm, &p).unwrap();
        let ids: Vec<&str> = rules_to_judge(&t, author, &scope, &p)
            .iter()
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(ids, vec!["ci-fails-on-main"]);
        let off =
            Policy::from_toml("p", &BASE.replace("mode = \"auto\"", "mode = \"off\"")).unwrap();
        assert!(rules_to_judge(&t, author, &scope, &off).is_empty());
    }

    #[test]
    fn each_condition_can_fail() {
        use Condition::*;
        let mut feishu_ci = fs(
            fs_user("ou_alice"),
            "oc_core",
            crate::trigger::ChatKind::Group,
        );
        feishu_ci.kind = TriggerKind::CiResult;
        let mut human_ci = gh(alice_gh(), TriggerKind::CiResult);
        human_ci.branch = Some("main".into());
        let cases: Vec<(&str, TriggerInput, &str, Condition)> = vec![
            (
                "wrong branch",
                ci_failure("dev"),
                "ci-fails-on-main",
                Branch,
            ),
            (
                "no branch",
                gh(ci_bot(), TriggerKind::CiResult),
                "ci-fails-on-main",
                Branch,
            ),
            (
                "wrong kind",
                gh(ci_bot(), TriggerKind::IssueComment),
                "ci-fails-on-main",
                Kind,
            ),
            ("wrong source", feishu_ci, "ci-fails-on-main", Source),
            (
                "human where a bot is required",
                human_ci,
                "ci-fails-on-main",
                Author,
            ),
            (
                "missing label",
                bug_issue(&["question"]),
                "bug-reports",
                Labels,
            ),
            (
                "bot where a human is required",
                {
                    let mut t = gh(ci_bot(), TriggerKind::IssueOpened);
                    t.labels = vec!["bug".into()];
                    t
                },
                "bug-reports",
                Author,
            ),
        ];
        for (name, t, rule, cond) in cases {
            let e = eval_with(BASE, &t, &RulesOnlyJudge);
            assert_eq!(
                verdict_of(&e, rule),
                Verdict::ConditionFailed { condition: cond },
                "{name}"
            );
        }
        let with_repo = BASE.replace("branches = [\"main\"]", "branches = [\"main\"], repos = [\"acme/gizmos\"]")
            .replace("rule_sets = [\"github-repo\", \"model\"]", "rule_sets = [\"github-repo\", \"model\"]\n[teams.core.repos.\"acme/gizmos\"]\nsandbox_profile = \"rust\"");
        let e = eval_with(&with_repo, &ci_failure("main"), &RulesOnlyJudge);
        assert_eq!(
            verdict_of(&e, "ci-fails-on-main"),
            Verdict::ConditionFailed { condition: Repo }
        );
    }

    #[test]
    fn only_the_scope_teams_rules_are_evaluated() {
        let two_teams = format!(
            "{BASE}\n[teams.web.repos.\"acme/site\"]\nsandbox_profile = \"node\"\n\n[[rules]]\nid = \"web-ci\"\nteam = \"web\"\ntext = \"CI on the site\"\nmode = \"auto\"\n"
        );
        let e = eval_with(&two_teams, &ci_failure("main"), &RulesOnlyJudge);
        assert!(e.outcomes.iter().all(|o| o.rule != "web-ci"));
    }
}
