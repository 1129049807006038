use super::*;
use crate::engine::TriggerDecision;
use crate::fixtures::{addressed, alice_gh, gh, mention, with_text};
use crate::gate::{Author, Via};
use crate::id::IdClock;
use crate::route::NoTicket;
use crate::ticket::tests::{mandate, ticket_with};
use crate::trigger::TriggerKind;
use crate::words::count_words;

fn ids() -> (TicketId, TriggerId, crate::id::ThreadId) {
    let mut c = IdClock::default();
    (c.issue(5), c.issue(5), c.issue(5))
}

fn decision(admission: Admission, ticket: TicketOutcome) -> TriggerDecision {
    let (_, trigger, thread) = ids();
    TriggerDecision {
        trigger,
        thread,
        admission,
        eval: None,
        ticket,
        refused_resume: None,
    }
}

fn explicit() -> Admission {
    Admission::Explicit {
        requester: "alice".into(),
        via: Via::Mention,
    }
}

fn candidate(author: Author) -> Admission {
    Admission::Candidate { author }
}

#[test]
fn trigger_decisions_plan_jobs_acks_forwards_and_stops() {
    let (tkt, trg, _) = ids();
    let m = mandate(Author::Human("alice".into()), &[]);
    let opened = TicketOutcome::Opened {
        ticket: tkt.clone(),
        mandate: m.clone(),
    };
    let resumed = TicketOutcome::Resumed {
        ticket: tkt.clone(),
        mandate: m,
    };
    let pass = TicketOutcome::PassThrough {
        ticket: tkt.clone(),
    };
    let job = Intent::Job {
        ticket: tkt.clone(),
        generation: trg.clone(),
    };
    let forward = Intent::Forward {
        trigger: trg.clone(),
        ticket: tkt.clone(),
    };
    let stop = Intent::Step(Step::End {
        ticket: tkt.clone(),
        outcome: Outcome::Cancelled,
        requested_by: Some(trg.clone()),
    });
    let text = |t: &str| {
        with_text(
            addressed(gh(alice_gh(), TriggerKind::IssueComment), mention("bot")),
            t,
        )
    };
    // (admission, outcome, text, expected intents without the ack's text, acked)
    let cases: Vec<(Admission, TicketOutcome, &str, Vec<Intent>, bool)> = vec![
        (
            explicit(),
            opened.clone(),
            "@bot fix it",
            vec![job.clone()],
            true,
        ),
        (
            explicit(),
            resumed.clone(),
            "@bot again",
            vec![job.clone()],
            true,
        ),
        // A rule opened it for a bot's or a person's message that did not
        // ask: a job, no "on it".
        (
            candidate(Author::Bot("ci".into())),
            opened.clone(),
            "CI failed",
            vec![job.clone()],
            false,
        ),
        (
            candidate(Author::Human("bob".into())),
            resumed,
            "more",
            vec![job],
            false,
        ),
        (
            explicit(),
            pass.clone(),
            "@bot also the docs",
            vec![forward.clone()],
            false,
        ),
        (
            explicit(),
            pass.clone(),
            "@bot stop",
            vec![stop.clone()],
            false,
        ),
        (
            explicit(),
            pass.clone(),
            "@bot /stop.",
            vec![stop.clone()],
            false,
        ),
        (explicit(), pass.clone(), "@_user_1 停止", vec![stop], false),
        // "stop" from someone who did not address the bot, or a bot, is
        // information for the worker, not a stop.
        (
            candidate(Author::Human("bob".into())),
            pass.clone(),
            "stop",
            vec![forward.clone()],
            false,
        ),
        (
            candidate(Author::Bot("ci".into())),
            pass.clone(),
            "stop",
            vec![forward.clone()],
            false,
        ),
        (explicit(), pass, "@bot don't stop", vec![forward], false),
        (
            explicit(),
            TicketOutcome::None {
                why: NoTicket::Ignored,
            },
            "@bot hi",
            vec![],
            false,
        ),
        (
            explicit(),
            TicketOutcome::StaysEnded {
                ticket: tkt.clone(),
                reason: crate::ticket::RevalidationFailure::RequesterRemoved { name: "a".into() },
            },
            "@bot hi",
            vec![],
            false,
        ),
    ];
    for (admission, outcome, t, expected, acked) in cases {
        let d = decision(admission, outcome);
        let mut got = plan_trigger(&d, &text(t), 100);
        let ack = match got.last() {
            Some(Intent::Step(Step::Reply { attempt })) => {
                assert_eq!(attempt.purpose, Purpose::Ack, "{t}");
                assert_eq!(attempt.in_reply_to.as_ref(), Some(&d.trigger), "{t}");
                assert!(count_words(&attempt.text) <= 100);
                got.pop();
                true
            }
            _ => false,
        };
        assert_eq!(ack, acked, "{t}");
        assert_eq!(got, expected, "{t}");
    }
}

#[test]
fn stop_is_the_whole_message() {
    for yes in [
        "stop",
        "STOP",
        "@bot stop",
        "@bot stop!",
        "/stop",
        "@bot cancel",
        "停止",
        "@_user_1 取消。",
    ] {
        assert!(is_stop(yes), "{yes}");
    }
    for no in [
        "",
        "@bot",
        "don't stop",
        "stop the build please",
        "stopping",
        "@bot please stop now",
        "s t o p",
    ] {
        assert!(!is_stop(no), "{no}");
    }
}

fn report(state: ReportState, summary: &str) -> Report {
    Report {
        state,
        summary: summary.into(),
        question: None,
        answers: None,
        links: Vec::new(),
    }
}

#[test]
fn reports_plan_result_attention_and_answer() {
    let (tkt, trg, _) = ids();
    let answered: gatehouse_types::TriggerId = trg.as_str().parse().unwrap();
    let ready = Report {
        links: vec!["https://github.com/acme/widgets/pull/7".into()],
        ..report(ReportState::Ready, "Fixed the flaky test")
    };
    let blocked = Report {
        question: Some("Which branch should I target?".into()),
        ..report(ReportState::Blocked, "Need a decision")
    };
    let blocked_no_q = report(ReportState::Blocked, "stuck");
    let working = report(ReportState::Working, "cloning");
    let working_answer = Report {
        answers: Some(answered),
        ..report(ReportState::Working, "Yes, the docs too")
    };
    type Expected<'a> = Vec<(Purpose, Option<TriggerId>, &'a str)>;
    let cases: Vec<(&Report, Expected)> = vec![
        (
            &ready,
            vec![(
                Purpose::Result,
                None,
                "Done: Fixed the flaky test\nhttps://github.com/acme/widgets/pull/7",
            )],
        ),
        (
            &blocked,
            vec![(Purpose::Attention, None, "Which branch should I target?")],
        ),
        (&blocked_no_q, vec![]),
        (&working, vec![]),
        (
            &working_answer,
            vec![(Purpose::Answer, Some(trg.clone()), "Yes, the docs too")],
        ),
    ];
    for (r, expected) in cases {
        let got: Vec<(Purpose, Option<TriggerId>, String)> = plan_report(&tkt, r, 100)
            .into_iter()
            .map(|a| (a.purpose, a.in_reply_to, a.text))
            .collect();
        let expected: Vec<(Purpose, Option<TriggerId>, String)> = expected
            .into_iter()
            .map(|(p, t, s)| (p, t, s.to_owned()))
            .collect();
        assert_eq!(got, expected, "{r:?}");
    }
}

#[test]
fn texts_fit_the_word_limit() {
    let long = "word ".repeat(300);
    let (tkt, _, _) = ids();
    for limit in [100, 30, 5] {
        let r = Report {
            links: vec!["https://x.test/1".into(), "https://x.test/2".into()],
            ..report(ReportState::Ready, long.trim())
        };
        let attempts = plan_report(&tkt, &r, limit);
        assert!(
            count_words(&attempts[0].text) <= limit,
            "{limit}: {}",
            attempts[0].text
        );
        assert!(
            attempts[0].text.ends_with("https://x.test/2"),
            "links are kept"
        );
    }
    assert_eq!(fit_words("one two three", 2), "one two…");
    assert_eq!(fit_words("one two", 2), "one two");
    let han = fit_words("修复了这个测试的问题", 2);
    assert!(han.ends_with('…') && count_words(&han) == 2, "{han}");
    // A question is never shortened: the core refuses one that is too long.
    let q = Report {
        question: Some(long.clone()),
        ..report(ReportState::Blocked, "s")
    };
    assert_eq!(plan_report(&tkt, &q, 100)[0].text, long);
}

#[test]
fn job_ends_map_to_outcomes() {
    let ready = report(ReportState::Ready, "ok");
    let working = report(ReportState::Working, "on it");
    let cases = [
        ("done", Some(&ready), Some(Outcome::Completed)),
        ("done", Some(&working), Some(Outcome::Failed)),
        ("done", None, Some(Outcome::Failed)),
        ("failed", Some(&ready), Some(Outcome::Failed)),
        ("failed", None, Some(Outcome::Failed)),
        ("timed_out", Some(&working), Some(Outcome::TimedOut)),
        ("cancelled", None, Some(Outcome::Cancelled)),
        ("running", None, None),
        ("queued", None, None),
    ];
    for (state, latest, expected) in cases {
        assert_eq!(end_outcome(state, latest), expected, "{state}");
    }
}

#[test]
fn job_body_comes_from_the_mandate_and_the_generation() {
    let t = ticket_with(mandate(Author::Human("alice".into()), &[]));
    let (_, trg, _) = ids();
    let input = with_text(
        gh(alice_gh(), TriggerKind::IssueComment),
        "  @bot fix the flaky test ",
    );
    let body = job_body(&t, &trg, &input, 600);
    let scope = &t.mandate.scope;
    assert_eq!(body.ticket, t.id.to_string());
    assert_eq!(body.team, scope.team);
    assert_eq!(body.profile, scope.sandbox_profile);
    assert_eq!(body.rule_sets, scope.rule_sets);
    assert_eq!(body.variables["repo"], "acme/widgets");
    // No fork in the mandate: none for the job.
    assert_eq!(body.variables.len(), 1, "{:?}", body.variables);
    let mut forked = t.clone();
    forked.mandate.scope.fork = Some("gatehouse-bot/widgets".into());
    let fork_body = job_body(&forked, &trg, &input, 600);
    assert_eq!(fork_body.variables["fork"], "gatehouse-bot/widgets");
    assert_eq!(fork_body.variables["repo"], "acme/widgets");
    assert_eq!(body.deadline_secs, 600);
    assert!(
        body.task.starts_with("@bot fix the flaky test\n"),
        "{}",
        body.task
    );
    assert!(body.task.contains("gh:acme/widgets#1") && body.task.contains(trg.as_str()));
    let v = serde_json::to_value(&body).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "deadline_secs",
            "profile",
            "rule_sets",
            "task",
            "team",
            "ticket",
            "variables"
        ]
    );
    // A resume is a new generation: a new key; a retry the same key.
    let mut c = IdClock::default();
    let (g1, g2): (TriggerId, TriggerId) = (c.issue(9), c.issue(9));
    assert_eq!(
        idempotency_key(&t.id, &g1, 0),
        idempotency_key(&t.id, &g1, 0)
    );
    assert_ne!(
        idempotency_key(&t.id, &g1, 0),
        idempotency_key(&t.id, &g2, 0)
    );
    assert_eq!(idempotency_key(&t.id, &g1, 0), format!("{}:{}", t.id, g1));
    // A job started again after it was lost is a new job.
    assert_ne!(
        idempotency_key(&t.id, &g1, 1),
        idempotency_key(&t.id, &g1, 0)
    );
    assert_ne!(
        idempotency_key(&t.id, &g1, 1),
        idempotency_key(&t.id, &g1, 2)
    );
}

#[test]
fn a_lost_job_is_started_again_a_bounded_number_of_times() {
    assert_eq!(after_lost(0), Some(1));
    assert_eq!(after_lost(LOST_JOB_RETRIES), None);
    assert_eq!(after_lost(u32::MAX), None);
    let mut attempt = 0;
    let mut starts = 1;
    while let Some(next) = after_lost(attempt) {
        attempt = next;
        starts += 1;
    }
    assert_eq!(starts, 1 + LOST_JOB_RETRIES);
}

#[test]
fn steps_round_trip_as_json() {
    let (tkt, trg, _) = ids();
    for step in [
        Step::End {
            ticket: tkt.clone(),
            outcome: Outcome::Cancelled,
            requested_by: Some(trg.clone()),
        },
        Step::Reply {
            attempt: ReplyAttempt {
                ticket: tkt.clone(),
                purpose: Purpose::Ack,
                in_reply_to: Some(trg.clone()),
                text: "On it".into(),
            },
        },
    ] {
        let json = serde_json::to_string(&step).unwrap();
        assert_eq!(serde_json::from_str::<Step>(&json).unwrap(), step);
    }
}

#[test]
fn closes_and_merges_of_live_work_plan_ends_only_as_the_rules_say() {
    let (tkt, trg, _) = ids();
    let pass = TicketOutcome::PassThrough {
        ticket: tkt.clone(),
    };
    let close = Intent::Step(Step::Close {
        ticket: tkt.clone(),
        trigger: trg.clone(),
    });
    let forward = Intent::Forward {
        trigger: trg.clone(),
        ticket: tkt.clone(),
    };
    let person = candidate(Author::Human("alice".into()));
    let bot = candidate(Author::Bot("ci".into()));
    let cases = [
        (TriggerKind::IssueClosed, person.clone(), close.clone()),
        (TriggerKind::IssueClosed, explicit(), close.clone()),
        (
            TriggerKind::PullRequestClosed,
            person.clone(),
            close.clone(),
        ),
        (TriggerKind::IssueClosed, bot.clone(), forward.clone()),
        (TriggerKind::PullRequestClosed, bot.clone(), forward.clone()),
        (
            TriggerKind::PullRequestMerged,
            person.clone(),
            close.clone(),
        ),
        (TriggerKind::PullRequestMerged, explicit(), close.clone()),
        // A bot never stops a ticket, by merging no more than by closing.
        (TriggerKind::PullRequestMerged, bot.clone(), forward.clone()),
        // A recall informs the worker, whoever recalled: it stops nothing.
        (
            TriggerKind::MessageRecalled,
            person.clone(),
            forward.clone(),
        ),
        (TriggerKind::MessageRecalled, explicit(), forward.clone()),
        (TriggerKind::MessageRecalled, bot.clone(), forward.clone()),
        // The request itself recalled by its sender ends the work.
        (TriggerKind::RequestRecalled, person.clone(), close.clone()),
        (TriggerKind::RequestRecalled, explicit(), close.clone()),
    ];
    for (kind, admission, expected) in cases {
        // Whatever the text says: a close has none of its own, and a "stop"
        // in it changes nothing.
        let input = with_text(gh(alice_gh(), kind), "stop");
        let d = decision(admission.clone(), pass.clone());
        assert_eq!(
            plan_trigger(&d, &input, 100),
            vec![expected],
            "{kind:?} {admission:?}"
        );
    }
    // A close with no live work to join plans nothing.
    let none = decision(
        person,
        TicketOutcome::None {
            why: NoTicket::NoLiveWork,
        },
    );
    let input = gh(alice_gh(), TriggerKind::IssueClosed);
    assert!(plan_trigger(&none, &input, 100).is_empty());
}

#[test]
fn a_persons_reopen_that_resumes_is_acked_and_on_live_work_only_informs() {
    let (tkt, trg, _) = ids();
    let m = mandate(Author::Human("alice".into()), &[]);
    let resumed = TicketOutcome::Resumed {
        ticket: tkt.clone(),
        mandate: m,
    };
    let pass = TicketOutcome::PassThrough {
        ticket: tkt.clone(),
    };
    let job = Intent::Job {
        ticket: tkt.clone(),
        generation: trg.clone(),
    };
    let forward = Intent::Forward {
        trigger: trg.clone(),
        ticket: tkt.clone(),
    };
    let person = candidate(Author::Human("alice".into()));
    let bot = candidate(Author::Bot("ci".into()));
    let bot_cannot = TicketOutcome::None {
        why: NoTicket::BotCannotResume,
    };
    // (admission, outcome, intents without the ack, acked)
    let cases = [
        (person.clone(), resumed.clone(), vec![job.clone()], true),
        // A reopen of live work never closes or stops it, whoever reopens.
        (person.clone(), pass.clone(), vec![forward.clone()], false),
        (bot.clone(), pass, vec![forward], false),
        (bot, bot_cannot, vec![], false),
    ];
    for (admission, outcome, expected, acked) in cases {
        let input = with_text(gh(alice_gh(), TriggerKind::Reopened), "stop");
        let d = decision(admission.clone(), outcome);
        let mut got = plan_trigger(&d, &input, 100);
        let ack = matches!(got.last(), Some(Intent::Step(Step::Reply { attempt }))
            if attempt.purpose == Purpose::Ack && attempt.in_reply_to.as_ref() == Some(&d.trigger));
        if ack {
            got.pop();
        }
        assert_eq!((got, ack), (expected, acked), "{admission:?}");
    }
    // The same resume from a comment that did not address the bot is not
    // announced (the case above in the table of trigger decisions).
    let d = decision(person, resumed);
    let comment = gh(alice_gh(), TriggerKind::IssueComment);
    assert_eq!(plan_trigger(&d, &comment, 100), vec![job]);
}

#[test]
fn a_close_ends_ready_issue_work_completed_and_anything_else_cancelled() {
    use crate::ticket::TicketState as S;
    use TriggerKind as K;
    for state in [S::Open, S::Working, S::Ready, S::Blocked] {
        assert_eq!(close_outcome(K::PullRequestMerged, state), Outcome::Merged);
        // A withdrawn request is cancelled, however far the work got.
        assert_eq!(close_outcome(K::RequestRecalled, state), Outcome::Cancelled);
        assert_eq!(
            close_outcome(K::IssueClosed, state),
            if state == S::Ready {
                Outcome::Completed
            } else {
                Outcome::Cancelled
            },
            "{state:?}"
        );
        // The bot's pull request closed unmerged: the work was turned down.
        assert_eq!(
            close_outcome(K::PullRequestClosed, state),
            Outcome::Cancelled
        );
    }
}

#[test]
fn a_close_step_round_trips_as_stored() {
    let (tkt, trg, _) = ids();
    let step = Step::Close {
        ticket: tkt,
        trigger: trg,
    };
    let json = serde_json::to_string(&step).unwrap();
    assert!(json.contains("\"step\":\"close\""), "{json}");
    assert_eq!(serde_json::from_str::<Step>(&json).unwrap(), step);
}
