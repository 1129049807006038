use proptest::prelude::*;

use super::*;
use crate::eval::{RulesOnlyJudge, Verdict};
use crate::fixtures::*;
use crate::gate::{IgnoreReason, Via};
use crate::policy::tests::{base, BASE};
use crate::store::InboxItem;
use crate::ticket::ReportState;
use crate::trigger::{ChatKind, TriggerKind};

type R = Router<RulesOnlyJudge>;

fn router() -> R {
    Router::new(Store::open_in_memory().unwrap(), base(), RulesOnlyJudge, 1).unwrap()
}

fn trig(d: &Decision) -> &TriggerDecision {
    match d {
        Decision::Trigger(t) => t,
        other => panic!("not a trigger decision: {other:?}"),
    }
}

fn opened(d: &Decision) -> TicketId {
    match &trig(d).ticket {
        TicketOutcome::Opened { ticket, .. } => ticket.clone(),
        other => panic!("no ticket opened: {other:?}"),
    }
}

fn ask(text: &str) -> TriggerInput {
    with_text(
        addressed(
            gh(alice_gh(), TriggerKind::IssueComment),
            mention("gatehouse-bot"),
        ),
        text,
    )
}

fn chat() -> TriggerInput {
    gh(alice_gh(), TriggerKind::IssueComment)
}

fn ci_fail() -> TriggerInput {
    let mut t = gh(ci_bot(), TriggerKind::CiResult);
    t.branch = Some("main".into());
    t
}

fn report(ticket: &TicketId, state: ReportState) -> ReportInput {
    ReportInput {
        ticket: ticket.clone(),
        report: Report {
            state,
            summary: "step".into(),
            question: None,
            answers: None,
            links: vec![],
        },
    }
}

fn is_allowed(d: &Decision) -> bool {
    match d {
        Decision::Reply { result, .. } => matches!(result, Checked::Allowed { .. }),
        Decision::Report { result, .. } => matches!(result, Checked::Allowed { .. }),
        Decision::End { result, .. } => matches!(result, Checked::Allowed { .. }),
        Decision::Note { result, .. } => matches!(result, Checked::Allowed { .. }),
        other => panic!("{other:?}"),
    }
}

fn refusal_of(d: &Decision) -> serde_json::Value {
    let v = serde_json::to_value(d).unwrap();
    v["refused"]["refusal"].clone()
}

fn reply(ticket: &TicketId, purpose: Purpose, to: Option<&TriggerId>, text: &str) -> ReplyAttempt {
    ReplyAttempt {
        ticket: ticket.clone(),
        purpose,
        in_reply_to: to.cloned(),
        text: text.into(),
    }
}

#[test]
fn explicit_opens_one_ticket_and_later_triggers_pass_through() {
    let mut r = router();
    let first = r.on_trigger(ask("please fix the login bug"), 10).unwrap();
    let ticket = opened(&first);
    assert!(matches!(
        trig(&first).admission,
        Admission::Explicit {
            via: Via::Mention,
            ..
        }
    ));
    assert!(trig(&first).eval.is_none(), "explicit requests skip eval");
    // A second request on the same thread does not open a second ticket.
    let again = r.on_trigger(ask("and the logout bug"), 11).unwrap();
    assert_eq!(
        trig(&again).ticket,
        TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    // A candidate from a person passes through without eval.
    let note = r.on_trigger(chat(), 12).unwrap();
    assert_eq!(
        trig(&note).ticket,
        TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    assert!(trig(&note).eval.is_none());
    // A listed bot's CI failure passes through as information, with no eval.
    let ci = r.on_trigger(ci_fail(), 13).unwrap();
    assert_eq!(
        trig(&ci).ticket,
        TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    assert!(trig(&ci).eval.is_none());
    // An unlisted sender is still dropped by the gate.
    let stranger = r
        .on_trigger(
            with_text(
                addressed(
                    gh(gh_user("mallory", 13), TriggerKind::IssueComment),
                    mention("gatehouse-bot"),
                ),
                "stop",
            ),
            14,
        )
        .unwrap();
    assert_eq!(
        trig(&stranger).admission,
        Admission::Ignore {
            reason: IgnoreReason::NotAllowlisted
        }
    );
    assert_eq!(
        trig(&stranger).ticket,
        TicketOutcome::None {
            why: NoTicket::Ignored
        }
    );
    let inbox = r.store().read().inbox(&ticket).unwrap();
    let expect: Vec<InboxItem> = [&first, &again, &note, &ci]
        .iter()
        .map(|d| InboxItem::Trigger(trig(d).trigger.clone()))
        .collect();
    assert_eq!(inbox, expect);
    assert_eq!(r.store().read().tickets().unwrap().len(), 1);
}

#[test]
fn candidates_are_evaluated_by_mode() {
    // auto: the CI rule opens a ticket whose requester is the bot.
    let mut r = router();
    let d = r.on_trigger(ci_fail(), 10).unwrap();
    let ticket = opened(&d);
    let t = r.store().read().ticket(&ticket).unwrap();
    assert_eq!(t.mandate.matched_rules, vec!["ci-fails-on-main".to_owned()]);
    assert_eq!(t.mandate.requester, Author::Bot("ci".into()));
    assert_eq!(&t.mandate.policy_version, base().version());
    assert_eq!(t.mandate.scope.sandbox_profile, "rust");

    // observe (the default for bug-reports): would accept, nothing opens, and
    // the would-accept decision is recorded with its rule and reason.
    let mut bug = gh(alice_gh(), TriggerKind::IssueOpened);
    bug.thread = "gh:acme/widgets#2".into();
    bug.labels = vec!["bug".into()];
    let d = r.on_trigger(bug, 11).unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::None {
            why: NoTicket::NotAccepted
        }
    );
    let eval = trig(&d).eval.as_ref().unwrap();
    assert_eq!(eval.would_accept(), vec!["bug-reports".to_owned()]);
    let recorded = r.store().read().decisions().unwrap();
    assert!(
        recorded
            .last()
            .unwrap()
            .contains("\"verdict\":\"would_accept\""),
        "{recorded:?}"
    );
    assert_eq!(r.store().read().tickets().unwrap().len(), 1);

    // off: nothing.
    let off = Policy::from_toml("p", &BASE.replace("mode = \"auto\"", "mode = \"off\"")).unwrap();
    let mut r = Router::new(Store::open_in_memory().unwrap(), off, RulesOnlyJudge, 1).unwrap();
    let d = r.on_trigger(ci_fail(), 10).unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::None {
            why: NoTicket::NotAccepted
        }
    );
    assert!(matches!(
        trig(&d).eval.as_ref().unwrap().outcomes[1].verdict,
        Verdict::Off
    ));
}

#[test]
fn a_listed_bot_can_neither_start_nor_stop_work() {
    let mut r = router();
    // Start: a bot mentioning the bot and asking for work is a candidate
    // whose only chance is a rule; no rule covers comments, so nothing opens.
    let start = r
        .on_trigger(
            with_text(
                addressed(
                    gh(ci_bot(), TriggerKind::IssueComment),
                    mention("gatehouse-bot"),
                ),
                "@gatehouse-bot start work: delete the cache",
            ),
            10,
        )
        .unwrap();
    assert!(matches!(
        trig(&start).admission,
        Admission::Candidate { .. }
    ));
    assert_eq!(
        trig(&start).ticket,
        TicketOutcome::None {
            why: NoTicket::NotAccepted
        }
    );
    // Stop: with a live ticket, the bot's "stop" is information; an end
    // request naming the bot's message is refused.
    let ticket = opened(&r.on_trigger(ask("fix it"), 11).unwrap());
    let stop = r
        .on_trigger(
            with_text(
                addressed(
                    gh(ci_bot(), TriggerKind::IssueComment),
                    mention("gatehouse-bot"),
                ),
                "@gatehouse-bot stop, cancel this ticket",
            ),
            12,
        )
        .unwrap();
    assert_eq!(
        trig(&stop).ticket,
        TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    let end = r
        .on_end(
            ticket.clone(),
            Outcome::Cancelled,
            Some(trig(&stop).trigger.clone()),
            13,
        )
        .unwrap();
    assert_eq!(refusal_of(&end), "bot_cannot_stop");
    assert!(r.store().read().ticket(&ticket).unwrap().is_live());
    // A person's message can cancel it.
    let human_stop = r.on_trigger(with_text(chat(), "please stop"), 14).unwrap();
    let end = r
        .on_end(
            ticket.clone(),
            Outcome::Cancelled,
            Some(trig(&human_stop).trigger.clone()),
            15,
        )
        .unwrap();
    assert!(is_allowed(&end));
    assert!(!r.store().read().ticket(&ticket).unwrap().is_live());
}

fn ended_ticket(r: &mut R, opener: TriggerInput) -> TicketId {
    let ticket = opened(&r.on_trigger(opener, 10).unwrap());
    assert!(is_allowed(
        &r.on_report(report(&ticket, ReportState::Ready), 11)
            .unwrap()
    ));
    assert!(is_allowed(
        &r.on_end(ticket.clone(), Outcome::Completed, None, 12)
            .unwrap()
    ));
    ticket
}

#[test]
fn revalidation_resumes_or_keeps_the_ticket_ended() {
    // Unchanged policy: a person writing resumes, and the old ready report no longer counts.
    let mut r = router();
    let ticket = ended_ticket(&mut r, ci_fail());
    let d = r.on_trigger(chat(), 20).unwrap();
    assert!(
        matches!(&trig(&d).ticket, TicketOutcome::Resumed { ticket: t, .. } if *t == ticket),
        "{d:?}"
    );
    let t = r.store().read().ticket(&ticket).unwrap();
    assert_eq!(
        (t.state, t.outcome, t.latest_report.is_none()),
        (TicketState::Open, None, true)
    );
    let result = r
        .on_reply(reply(&ticket, Purpose::Result, None, "Done."), 21)
        .unwrap();
    assert_eq!(refusal_of(&result), "not_ready");

    // A bot writing on an ended thread never resumes it.
    let mut r = router();
    let ticket = ended_ticket(&mut r, ci_fail());
    let d = r.on_trigger(ci_fail(), 20).unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::None {
            why: NoTicket::BotCannotResume
        }
    );
    assert!(!r.store().read().ticket(&ticket).unwrap().is_live());

    // The matched rule went to observe: a candidate leaves it ended, with the reason.
    let mut r = router();
    let ticket = ended_ticket(&mut r, ci_fail());
    r.set_policy(
        Policy::from_toml("p", &BASE.replace("mode = \"auto\"", "mode = \"observe\"")).unwrap(),
        15,
    )
    .unwrap();
    let d = r.on_trigger(chat(), 20).unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::StaysEnded {
            ticket: ticket.clone(),
            reason: RevalidationFailure::RuleNotAuto {
                rule: "ci-fails-on-main".into(),
                mode: crate::policy::Mode::Observe
            }
        }
    );
    assert!(!r.store().read().ticket(&ticket).unwrap().is_live());
    // …and an explicit request opens a new ticket, recording the refused resume.
    let d = r.on_trigger(ask("do it again"), 21).unwrap();
    let fresh = opened(&d);
    assert_ne!(fresh, ticket);
    assert_eq!(trig(&d).refused_resume.as_ref().unwrap().ticket, ticket);

    // The requester left the allowlist: stays ended.
    let mut r = router();
    let ticket = ended_ticket(
        &mut r,
        with_text(
            addressed(
                gh(gh_user("bob", 5), TriggerKind::IssueComment),
                mention("gatehouse-bot"),
            ),
            "fix",
        ),
    );
    let without_bob = BASE.replace(
        "name = \"bob\"\nteam = \"core\"\ngithub = { login = \"bob\" }",
        "name = \"carol\"\nteam = \"core\"\ngithub = { login = \"carol\" }",
    );
    r.set_policy(Policy::from_toml("p", &without_bob).unwrap(), 15)
        .unwrap();
    let d = r.on_trigger(chat(), 20).unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::StaysEnded {
            ticket,
            reason: RevalidationFailure::RequesterRemoved { name: "bob".into() }
        }
    );
}

#[test]
fn ack_once_survives_reopening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let (ticket, msg) = {
        let mut r = Router::new(
            Store::open(&path, crate::store::Durability::Full).unwrap(),
            base(),
            RulesOnlyJudge,
            1,
        )
        .unwrap();
        let d = r.on_trigger(ask("fix it"), 10).unwrap();
        let ticket = opened(&d);
        let ack = r
            .on_reply(reply(&ticket, Purpose::Ack, None, "On it."), 11)
            .unwrap();
        assert!(is_allowed(&ack));
        (ticket, trig(&d).trigger.clone())
    };
    let mut r = Router::new(
        Store::open(&path, crate::store::Durability::Full).unwrap(),
        base(),
        RulesOnlyJudge,
        20,
    )
    .unwrap();
    let again = r
        .on_reply(reply(&ticket, Purpose::Ack, Some(&msg), "On it!"), 21)
        .unwrap();
    assert_eq!(refusal_of(&again), "already_acked");
    assert_eq!(r.store().read().replies().unwrap().len(), 1);
}

#[test]
fn answers_follow_reports_once() {
    let mut r = router();
    let ticket = opened(&r.on_trigger(ask("fix it"), 10).unwrap());
    let question = trig(
        &r.on_trigger(with_text(chat(), "which version do you target?"), 11)
            .unwrap(),
    )
    .trigger
    .clone();
    let early = r
        .on_reply(reply(&ticket, Purpose::Answer, Some(&question), "1.85"), 12)
        .unwrap();
    assert_eq!(refusal_of(&early), "not_answered");
    let mut rep = report(&ticket, ReportState::Working);
    rep.report.answers = Some(question.as_str().parse().unwrap());
    assert!(is_allowed(&r.on_report(rep, 13).unwrap()));
    assert!(is_allowed(
        &r.on_reply(
            reply(&ticket, Purpose::Answer, Some(&question), "Rust 1.85."),
            14
        )
        .unwrap()
    ));
    let twice = r
        .on_reply(
            reply(&ticket, Purpose::Answer, Some(&question), "Rust 1.85!"),
            15,
        )
        .unwrap();
    assert_eq!(refusal_of(&twice), "already_answered");
    // A report cannot claim to answer a message on another thread.
    let mut elsewhere = chat();
    elsewhere.thread = "gh:acme/widgets#9".into();
    let other = trig(&r.on_trigger(elsewhere, 16).unwrap()).trigger.clone();
    let mut rep = report(&ticket, ReportState::Working);
    rep.report.answers = Some(other.as_str().parse().unwrap());
    assert_eq!(
        refusal_of(&r.on_report(rep, 17).unwrap()),
        "answers_other_thread"
    );
}

#[test]
fn attention_and_notes() {
    let mut r = router();
    let ticket = opened(
        &r.on_trigger(fs(fs_user("ou_alice"), "oc_dm", ChatKind::Direct), 10)
            .unwrap(),
    );
    let mut rep = report(&ticket, ReportState::Blocked);
    rep.report.question = Some("要把最低版本提高到 1.85 吗？".into());
    assert!(is_allowed(&r.on_report(rep, 11).unwrap()));
    assert!(is_allowed(
        &r.on_reply(
            reply(
                &ticket,
                Purpose::Attention,
                None,
                "要把最低版本提高到 1.85 吗？"
            ),
            12
        )
        .unwrap()
    ));
    let invented = r
        .on_reply(
            reply(
                &ticket,
                Purpose::Attention,
                None,
                "要把最低版本提高到 1.90 吗？",
            ),
            13,
        )
        .unwrap();
    assert_eq!(refusal_of(&invented), "not_attention");
    let long_note = vec!["please"; 31].join(" ");
    let note = r.on_note(ticket.clone(), long_note, 14).unwrap();
    assert_eq!(refusal_of(&note), "too_long");
    assert!(is_allowed(
        &r.on_note(ticket.clone(), "Alice prefers 1.85.".into(), 15)
            .unwrap()
    ));
    assert_eq!(
        r.store().read().inbox(&ticket).unwrap().last(),
        Some(&InboxItem::Note("Alice prefers 1.85.".into()))
    );
}

#[test]
fn unknown_ids_are_errors_not_decisions() {
    let mut r = router();
    let bogus: TicketId = crate::id::IdClock::default().issue(1);
    let err = r
        .on_reply(reply(&bogus, Purpose::Ack, None, "hi"), 2)
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Store(StoreError::NotFound { kind: "ticket", .. })
        ),
        "{err}"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Human,
    Bot,
    Report(ReportState),
    End(Outcome),
    Reply(Purpose),
    Policy(bool),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Human),
        Just(Op::Bot),
        prop_oneof![
            Just(ReportState::Working),
            Just(ReportState::Ready),
            Just(ReportState::Blocked)
        ]
        .prop_map(Op::Report),
        prop_oneof![
            Just(Outcome::Completed),
            Just(Outcome::Merged),
            Just(Outcome::Dropped),
            Just(Outcome::Failed),
            Just(Outcome::Cancelled),
            Just(Outcome::TimedOut)
        ]
        .prop_map(Op::End),
        prop_oneof![
            Just(Purpose::Ack),
            Just(Purpose::Answer),
            Just(Purpose::Result),
            Just(Purpose::Attention)
        ]
        .prop_map(Op::Reply),
        any::<bool>().prop_map(Op::Policy),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// No sequence of inputs lets a `result` out for a ticket whose latest
    /// report is not ready and which has not ended completed, merged or dropped.
    #[test]
    fn result_needs_ready_or_a_good_end(ops in proptest::collection::vec(arb_op(), 1..40)) {
        let mut r = router();
        let ticket = opened(&r.on_trigger(ask("fix it"), 1).unwrap());
        let observe = Policy::from_toml("p", &BASE.replace("mode = \"auto\"", "mode = \"observe\"")).unwrap();
        let mut last_human: Option<TriggerId> = None;
        for (i, op) in ops.into_iter().enumerate() {
            let now = 10 + i as u64;
            match op {
                Op::Human => last_human = Some(trig(&r.on_trigger(chat(), now).unwrap()).trigger.clone()),
                Op::Bot => { r.on_trigger(ci_fail(), now).unwrap(); }
                Op::Report(state) => { r.on_report(report(&ticket, state), now).unwrap(); }
                Op::End(outcome) => { r.on_end(ticket.clone(), outcome, last_human.clone(), now).unwrap(); }
                Op::Policy(strict) => { r.set_policy(if strict { observe.clone() } else { base() }, now).unwrap(); }
                Op::Reply(purpose) => {
                    let before = r.store().read().ticket(&ticket).unwrap();
                    let d = r.on_reply(reply(&ticket, purpose, last_human.as_ref(), "Done: the fix is in the PR."), now).unwrap();
                    if purpose == Purpose::Result && is_allowed(&d) {
                        let ready = before.latest_report.as_ref().is_some_and(|rep| rep.state == ReportState::Ready) && before.is_live();
                        let good_end = before.outcome.is_some_and(|o| o.allows_result());
                        prop_assert!(ready || good_end, "result allowed on {before:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn an_ended_ticket_is_never_acked() {
    let mut r = router();
    let ticket = opened(&r.on_trigger(ask("fix it"), 10).unwrap());
    assert!(is_allowed(
        &r.on_end(ticket.clone(), Outcome::Dropped, None, 11)
            .unwrap()
    ));
    let ack = r
        .on_reply(reply(&ticket, Purpose::Ack, None, "On it."), 12)
        .unwrap();
    assert_eq!(refusal_of(&ack), "ticket_ended");
    // Positive control: the same ack on a live ticket goes out.
    let mut live = ask("fix the other thing");
    live.thread = "gh:acme/widgets#8".into();
    live.message_id = "ic_8".into();
    let ticket = opened(&r.on_trigger(live, 13).unwrap());
    assert!(is_allowed(
        &r.on_reply(reply(&ticket, Purpose::Ack, None, "On it."), 14)
            .unwrap()
    ));
}

#[test]
fn reports_from_before_a_resume_authorise_no_answer() {
    let mut r = router();
    let ticket = opened(&r.on_trigger(ask("fix it"), 10).unwrap());
    let question = trig(
        &r.on_trigger(with_text(chat(), "which version do you target?"), 11)
            .unwrap(),
    )
    .trigger
    .clone();
    let mut rep = report(&ticket, ReportState::Ready);
    rep.report.answers = Some(question.as_str().parse().unwrap());
    assert!(is_allowed(&r.on_report(rep, 12).unwrap()));
    assert!(is_allowed(
        &r.on_end(ticket.clone(), Outcome::Completed, None, 13)
            .unwrap()
    ));
    // A person writes again: the ticket resumes, and the old report is cleared.
    let d = r
        .on_trigger(with_text(chat(), "one more thing"), 20)
        .unwrap();
    assert!(
        matches!(&trig(&d).ticket, TicketOutcome::Resumed { .. }),
        "{d:?}"
    );
    let stale = r
        .on_reply(
            reply(&ticket, Purpose::Answer, Some(&question), "Rust 1.85."),
            21,
        )
        .unwrap();
    assert_eq!(refusal_of(&stale), "not_answered");
    // A report after the resume that names it again authorises the answer.
    let mut rep = report(&ticket, ReportState::Working);
    rep.report.answers = Some(question.as_str().parse().unwrap());
    assert!(is_allowed(&r.on_report(rep, 22).unwrap()));
    assert!(is_allowed(
        &r.on_reply(
            reply(&ticket, Purpose::Answer, Some(&question), "Rust 1.85."),
            23
        )
        .unwrap()
    ));
}

#[test]
fn the_policy_in_force_is_the_one_started_with_and_each_change_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let open = || Store::open(&path, crate::store::Durability::Normal).unwrap();
    let policies = |r: &R| -> Vec<serde_json::Value> {
        r.store()
            .read()
            .decisions()
            .unwrap()
            .iter()
            .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
            .filter(|d| d["type"] == "policy")
            .collect()
    };
    let first = base();
    let r = Router::new(open(), first.clone(), RulesOnlyJudge, 1).unwrap();
    let log = policies(&r);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["version"], first.version().to_string());
    assert!(log[0].get("previous").is_none());
    drop(r);
    // A restart on the same policy records nothing new.
    let r = Router::new(open(), first.clone(), RulesOnlyJudge, 2).unwrap();
    assert_eq!(policies(&r).len(), 1);
    drop(r);
    // A restart on another policy: that one is in force, and the change is recorded.
    let without_bob = crate::policy::tests::BASE.replace("name = \"bob\"", "name = \"robert\"");
    let second = Policy::from_toml("p", &without_bob).unwrap();
    let r = Router::new(open(), second.clone(), RulesOnlyJudge, 3).unwrap();
    assert_eq!(r.policy().version(), second.version());
    let log = policies(&r);
    assert_eq!(log.len(), 2);
    assert_eq!(log[1]["version"], second.version().to_string());
    assert_eq!(log[1]["previous"], first.version().to_string());
    assert_eq!(
        r.store().read().current_policy_version().unwrap().as_ref(),
        Some(second.version())
    );
}

// === closes and merges ===

fn lifecycle(kind: TriggerKind, thread: &str, head_ticket: Option<&TicketId>) -> TriggerInput {
    let mut t = gh(alice_gh(), kind);
    t.thread = thread.into();
    t.text = String::new();
    t.message_id = format!("lc_{thread}");
    t.head_ticket = head_ticket.map(|id| id.to_string());
    t.pull_url = head_ticket.map(|_| pull_url(thread));
    t
}

/// The web address of the pull request whose thread is `thread`.
fn pull_url(thread: &str) -> String {
    let number = thread.rsplit('#').next().unwrap();
    format!("https://github.com/acme/widgets/pull/{number}")
}

/// The ticket's worker reports a link.
fn report_link(r: &mut R, ticket: &TicketId, link: &str, at: u64) {
    let mut input = report(ticket, ReportState::Working);
    input.report.links = vec![link.to_owned()];
    assert!(is_allowed(&r.on_report(input, at).unwrap()));
}

fn no_ticket(d: &Decision) -> NoTicket {
    match &trig(d).ticket {
        TicketOutcome::None { why } => *why,
        other => panic!("expected no ticket, got {other:?}"),
    }
}

#[test]
fn a_close_or_merge_never_opens_or_resumes_work() {
    let mut r = router();
    for kind in [
        TriggerKind::IssueClosed,
        TriggerKind::PullRequestClosed,
        TriggerKind::PullRequestMerged,
    ] {
        // Even addressed to the bot by an allowlisted person.
        let mut t = lifecycle(kind, "gh:acme/widgets#7", None);
        t.addressed = vec![mention("gatehouse-bot")];
        assert_eq!(
            no_ticket(&r.on_trigger(t, 10).unwrap()),
            NoTicket::NoLiveWork
        );
    }
    // On a thread whose ticket ended: it stays ended.
    let ticket = opened(&r.on_trigger(ask("fix it"), 20).unwrap());
    assert!(is_allowed(
        &r.on_end(ticket.clone(), Outcome::Completed, None, 21)
            .unwrap()
    ));
    let d = r
        .on_trigger(
            lifecycle(TriggerKind::IssueClosed, "gh:acme/widgets#1", None),
            22,
        )
        .unwrap();
    assert_eq!(no_ticket(&d), NoTicket::NoLiveWork);
    assert_eq!(
        r.store().read().ticket(&ticket).unwrap().state,
        TicketState::Ended
    );
    assert_eq!(r.store().read().tickets().unwrap().len(), 1);
}

#[test]
fn a_close_on_the_tickets_thread_joins_it_and_may_end_it() {
    let mut r = router();
    let ticket = opened(&r.on_trigger(ask("fix it"), 10).unwrap());
    let d = r
        .on_trigger(
            lifecycle(TriggerKind::IssueClosed, "gh:acme/widgets#1", None),
            11,
        )
        .unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    let closer = trig(&d).trigger.clone();
    assert!(is_allowed(
        &r.on_end(ticket, Outcome::Cancelled, Some(closer), 12)
            .unwrap()
    ));
}

#[test]
fn the_bots_pull_request_reaches_the_ticket_its_branch_names() {
    let mut r = router();
    let ticket = opened(&r.on_trigger(ask("fix it"), 10).unwrap());
    let pr_thread = "gh:acme/widgets#2";
    // Before the ticket's worker reported the pull request, the branch name
    // alone claims nothing: another worker of the same bot may have opened it.
    let d = r
        .on_trigger(
            lifecycle(TriggerKind::PullRequestClosed, pr_thread, Some(&ticket)),
            10,
        )
        .unwrap();
    assert_eq!(no_ticket(&d), NoTicket::NoLiveWork);
    report_link(
        &mut r,
        &ticket,
        "https://github.com/acme/widgets/pull/3",
        10,
    );
    let d = r
        .on_trigger(
            lifecycle(TriggerKind::PullRequestClosed, pr_thread, Some(&ticket)),
            10,
        )
        .unwrap();
    assert_eq!(no_ticket(&d), NoTicket::NoLiveWork);
    report_link(&mut r, &ticket, &pull_url(pr_thread), 10);
    let d = r
        .on_trigger(
            lifecycle(TriggerKind::PullRequestClosed, pr_thread, Some(&ticket)),
            11,
        )
        .unwrap();
    assert_eq!(
        trig(&d).ticket,
        TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    let closer = trig(&d).trigger.clone();
    assert_eq!(
        r.store().read().trigger_inbox(&closer).unwrap().as_ref(),
        Some(&ticket)
    );
    // Said on another thread, yet routed to this ticket: a person's close
    // of the ticket's own pull request ends it.
    assert!(is_allowed(
        &r.on_end(ticket.clone(), Outcome::Cancelled, Some(closer), 12)
            .unwrap()
    ));
    // Once ended, the merge of the same pull request claims nothing.
    let d = r
        .on_trigger(
            lifecycle(TriggerKind::PullRequestMerged, pr_thread, Some(&ticket)),
            13,
        )
        .unwrap();
    assert_eq!(no_ticket(&d), NoTicket::NoLiveWork);
}

#[test]
fn a_claim_that_does_not_hold_reaches_nothing() {
    let mut r = router();
    let ticket = opened(&r.on_trigger(ask("fix it"), 10).unwrap());
    let pr = "gh:acme/widgets#2";
    // Not a ticket id, an unknown one, and a message (not a lifecycle
    // trigger) naming the ticket: none joins it.
    let mut bogus = lifecycle(TriggerKind::PullRequestMerged, pr, None);
    bogus.head_ticket = Some("../tkt".into());
    let d = r.on_trigger(bogus, 11).unwrap();
    assert_eq!(no_ticket(&d), NoTicket::NoLiveWork);
    let never_issued: TicketId = crate::id::IdClock::default().issue(999_999);
    assert_ne!(never_issued, ticket);
    let mut unknown = lifecycle(TriggerKind::PullRequestMerged, "gh:acme/widgets#3", None);
    unknown.head_ticket = Some(never_issued.to_string());
    let d = r.on_trigger(unknown, 12).unwrap();
    assert_eq!(no_ticket(&d), NoTicket::NoLiveWork);
    let mut comment = chat();
    comment.thread = "gh:acme/widgets#4".into();
    comment.head_ticket = Some(ticket.to_string());
    let d = r.on_trigger(comment, 13).unwrap();
    assert!(!matches!(
        trig(&d).ticket,
        TicketOutcome::PassThrough { .. }
    ));
    // A close by someone the gate ignores reaches nothing either.
    let mut outsider = lifecycle(TriggerKind::IssueClosed, "gh:acme/widgets#1", None);
    outsider.sender = gh_user("mallory", 666);
    let d = r.on_trigger(outsider, 14).unwrap();
    assert_eq!(no_ticket(&d), NoTicket::Ignored);
    assert!(r.store().read().ticket(&ticket).unwrap().is_live());
}

#[test]
fn a_claim_holds_only_for_live_work_in_the_same_repository() {
    use crate::route::claim_holds;
    use crate::ticket::tests::{mandate, ticket_with};
    let live = ticket_with(mandate(Author::Human("alice".into()), &[]));
    let pr = lifecycle(
        TriggerKind::PullRequestMerged,
        "gh:acme/widgets#2",
        Some(&live.id),
    );
    assert!(claim_holds(&pr, &live, true));
    assert!(
        !claim_holds(&pr, &live, false),
        "not reported by the ticket"
    );
    let mut elsewhere = pr.clone();
    elsewhere.repo = Some("acme/gadgets".into());
    assert!(!claim_holds(&elsewhere, &live, true));
    let mut no_repo = pr.clone();
    no_repo.repo = None;
    assert!(!claim_holds(&no_repo, &live, true));
    let mut no_url = pr.clone();
    no_url.pull_url = None;
    assert!(!claim_holds(&no_url, &live, true));
    let mut message = pr.clone();
    message.kind = TriggerKind::PullRequestComment;
    assert!(!claim_holds(&message, &live, true));
    let mut ended = live.clone();
    ended.state = TicketState::Ended;
    assert!(!claim_holds(&pr, &ended, true));
}

#[test]
fn the_reply_log_records_who_wrote_the_text() {
    use crate::reply::Writer;
    let mut r = router();
    let d = r.on_trigger(ask("fix it"), 10).unwrap();
    let ticket = opened(&d);
    let drafted = r
        .on_reply_written(
            reply(&ticket, Purpose::Ack, None, "On it, looking now."),
            Writer::Model,
            11,
            |_, _| Ok(()),
        )
        .unwrap();
    assert!(is_allowed(&drafted));
    let json = serde_json::to_value(&drafted).unwrap();
    assert_eq!(json["allowed"]["writer"], "model", "{json}");
    // A template reply says nothing (as before the writer existed).
    let d2 = r.on_trigger(ask("and this"), 12).unwrap();
    let msg = trig(&d2).trigger.clone();
    let template = r
        .on_reply(reply(&ticket, Purpose::Ack, Some(&msg), "On it."), 13)
        .unwrap();
    let json = serde_json::to_value(&template).unwrap();
    assert!(is_allowed(&template));
    assert!(json["allowed"].get("writer").is_none(), "{json}");
    let log = r.store().read().replies().unwrap();
    let writers: Vec<Writer> = log.iter().map(|r| r.writer).collect();
    assert_eq!(writers, vec![Writer::Model, Writer::Template]);
    // A drafted text is checked like any: too long is refused.
    let d3 = r.on_trigger(ask("more"), 14).unwrap();
    let long = "word ".repeat(101);
    let refused = r
        .on_reply_written(
            reply(&ticket, Purpose::Ack, Some(&trig(&d3).trigger), &long),
            Writer::Model,
            15,
            |_, _| Ok(()),
        )
        .unwrap();
    assert_eq!(refusal_of(&refused), "too_long");
}
