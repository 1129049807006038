use crate::engine::Router;
use crate::eval::RulesOnlyJudge;
use crate::fixtures::{addressed, alice_gh, gh, mention};
use crate::id::TriggerId;
use crate::policy::tests::base;
use crate::reply::{Purpose, ReplyAttempt};
use crate::store::{JobStage, OutboxState, OutboxUpdate, Store};
use crate::trigger::TriggerKind;

/// A router with one ticket opened by alice's mention: (router, ticket, trigger).
fn opened() -> (Router<RulesOnlyJudge>, crate::id::TicketId, TriggerId) {
    let mut r = Router::new(Store::open_in_memory().unwrap(), base(), RulesOnlyJudge, 1).unwrap();
    let input = addressed(
        gh(alice_gh(), TriggerKind::IssueComment),
        mention("gatehouse-bot"),
    );
    let d = r.on_trigger(input, 10).unwrap();
    let crate::engine::Decision::Trigger(d) = d else {
        panic!()
    };
    let ticket = d.ticket.inbox().unwrap().clone();
    (r, ticket, d.trigger)
}

#[test]
fn the_schema_has_the_live_tables_at_version_5() {
    let (r, _, _) = opened();
    let version: i64 = r
        .store
        .conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert!(version >= 5);
    for table in [
        "live_cursors",
        "live_jobs",
        "live_forwards",
        "live_steps",
        "live_outbox",
    ] {
        let n: i64 = r
            .store
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "{table}");
    }
}

#[test]
fn cursors_jobs_and_forwards() {
    let (mut r, ticket, trigger) = opened();
    assert_eq!(r.store.read().live_cursor("decisions").unwrap(), 0);
    r.store
        .transaction(|tx| {
            tx.set_live_cursor("decisions", 7)?;
            // Wanted twice (a replayed batch): one job.
            tx.want_job(&ticket, &trigger, 20)?;
            tx.want_job(&ticket, &trigger, 21)?;
            tx.want_forward(&trigger, &ticket, 20)
        })
        .unwrap();
    let read = r.store.read();
    assert_eq!(read.live_cursor("decisions").unwrap(), 7);
    let wanted = read.wanted_jobs(10).unwrap();
    assert_eq!(wanted.len(), 1);
    assert_eq!(wanted[0].stage, JobStage::Wanted);
    assert_eq!(
        read.pending_forwards(10).unwrap(),
        vec![(trigger.clone(), ticket.clone())]
    );
    r.store
        .transaction(|tx| {
            tx.set_job_submitted(&ticket, &trigger, Some("job_1"), 30)?;
            tx.set_forward(&trigger, "forwarded", 30)?;
            tx.want_cancel(&ticket, 31)
        })
        .unwrap();
    let read = r.store.read();
    assert!(read.wanted_jobs(10).unwrap().is_empty());
    assert!(read.pending_forwards(10).unwrap().is_empty());
    let job = read.live_job_by_id("job_1").unwrap().unwrap();
    assert_eq!((job.stage, job.cancel), (JobStage::Submitted, Some(false)));
    assert_eq!(read.current_live_job(&ticket).unwrap(), Some(job));
    assert_eq!(read.cancels_wanted(10).unwrap().len(), 1);
    r.store
        .transaction(|tx| {
            tx.set_cancel_sent("job_1", 40)?;
            tx.set_job_ended("job_1", "cancelled", 41)
        })
        .unwrap();
    let read = r.store.read();
    assert!(read.cancels_wanted(10).unwrap().is_empty());
    assert_eq!(
        read.live_job_by_id("job_1")
            .unwrap()
            .unwrap()
            .job_state
            .as_deref(),
        Some("cancelled")
    );
    assert_eq!(read.live_job_by_id("job_2").unwrap(), None);
}

#[test]
fn a_lost_job_is_wanted_again_with_its_attempt_and_its_id_forgotten() {
    let (mut r, ticket, trigger) = opened();
    r.store
        .transaction(|tx| {
            tx.want_job(&ticket, &trigger, 20)?;
            tx.set_job_submitted(&ticket, &trigger, Some("job_1"), 21)
        })
        .unwrap();
    assert_eq!(
        r.store
            .read()
            .current_live_job(&ticket)
            .unwrap()
            .unwrap()
            .attempt,
        0
    );
    r.store
        .transaction(|tx| tx.retry_lost_job("job_1", 1, 30))
        .unwrap();
    let read = r.store.read();
    assert_eq!(read.live_job_by_id("job_1").unwrap(), None);
    let wanted = read.wanted_jobs(10).unwrap();
    assert_eq!(wanted.len(), 1);
    assert_eq!((wanted[0].attempt, wanted[0].job_id.as_deref()), (1, None));
    assert_eq!(wanted[0].job_state, None);
    r.store
        .transaction(|tx| tx.set_job_submitted(&ticket, &trigger, Some("job_2"), 31))
        .unwrap();
    let job = r.store.read().live_job_by_id("job_2").unwrap().unwrap();
    assert_eq!((job.attempt, job.stage), (1, JobStage::Submitted));
}

/// Allows an ack of `trigger` at 50 and queues it at each of `at`.
fn queue_ack(
    r: &mut Router<RulesOnlyJudge>,
    ticket: &crate::id::TicketId,
    trigger: &TriggerId,
    at: &[u64],
) -> crate::engine::Decision {
    let attempt = ReplyAttempt {
        ticket: ticket.clone(),
        purpose: Purpose::Ack,
        in_reply_to: Some(trigger.clone()),
        text: "On it".into(),
    };
    r.on_reply_with(attempt, 50, |tx, d| {
        let crate::engine::Decision::Reply {
            result: crate::engine::Checked::Allowed { allowed },
            ..
        } = d
        else {
            panic!("{d:?}")
        };
        at.iter()
            .try_for_each(|at| tx.queue_reply(&allowed.0.reply, *at))
    })
    .unwrap()
}

#[test]
fn steps_and_the_outbox() {
    let (mut r, ticket, trigger) = opened();
    r.store
        .transaction(|tx| {
            tx.push_live_step(&ticket, "{\"step\":\"x\"}", 5)?;
            tx.push_live_step(&ticket, "{\"step\":\"y\"}", 5)
        })
        .unwrap();
    let steps = r.store.read().pending_steps(10).unwrap();
    assert_eq!(steps.len(), 2);
    r.store
        .transaction(|tx| tx.set_live_step_done(steps[0].0, 6))
        .unwrap();
    assert_eq!(
        r.store.read().pending_steps(10).unwrap(),
        steps[1..].to_vec()
    );

    let d = queue_ack(&mut r, &ticket, &trigger, &[50, 51]);
    let crate::engine::Decision::Reply { .. } = d else {
        panic!()
    };
    let read = r.store.read();
    let due = read.due_outbox(50, 10).unwrap();
    assert_eq!(due.len(), 1, "queued once");
    assert_eq!(due[0].text, "On it");
    assert_eq!(due[0].state, OutboxState::Pending);
    assert_eq!(due[0].thread_key, "gh:acme/widgets#1");
    assert!(
        read.due_outbox(49, 10).unwrap().is_empty(),
        "not due before its time"
    );
    assert_eq!(read.next_outbox_due().unwrap(), Some(50));
    let reply = due[0].reply.clone();
    r.store
        .transaction(|tx| {
            tx.update_outbox(
                &reply,
                &OutboxUpdate {
                    state: OutboxState::Sent,
                    attempts: 1,
                    platform_message_id: Some("77".into()),
                    error: None,
                    next_at: 60,
                },
                60,
            )
        })
        .unwrap();
    let read = r.store.read();
    assert!(
        read.due_outbox(1_000, 10).unwrap().is_empty(),
        "sent is never due"
    );
    let all = read.outbox().unwrap();
    assert_eq!(all[0].platform_message_id.as_deref(), Some("77"));
    assert!(!read.result_logged_since(&ticket, 0).unwrap());
}

/// Logs and queues a copy of `like` as another reply (`seq` in its id) of
/// `purpose` in `thread_key`.
fn queue_copy(
    r: &mut Router<RulesOnlyJudge>,
    like: &crate::store::ReplyRecord,
    seq: u32,
    purpose: Purpose,
    thread_key: &str,
    at: u64,
) -> crate::id::ReplyId {
    let reply = crate::id::ReplyId::parse(&format!("rpl_{:012x}{seq:06x}", at)).unwrap();
    let record = crate::store::ReplyRecord {
        reply: reply.clone(),
        purpose,
        thread_key: thread_key.into(),
        at,
        ..like.clone()
    };
    r.store
        .transaction(|tx| {
            tx.insert_reply(&record, "Done: a later reply")?;
            tx.queue_reply(&reply, at)
        })
        .unwrap();
    reply
}

fn set_outbox(
    r: &mut Router<RulesOnlyJudge>,
    reply: &crate::id::ReplyId,
    state: OutboxState,
    next_at: u64,
) {
    let update = OutboxUpdate {
        state,
        attempts: 1,
        platform_message_id: None,
        error: None,
        next_at,
    };
    r.store
        .transaction(|tx| tx.update_outbox(reply, &update, 70))
        .unwrap();
}

#[test]
fn a_threads_replies_are_due_in_the_order_they_were_logged() {
    let (mut r, ticket, trigger) = opened();
    queue_ack(&mut r, &ticket, &trigger, &[50]);
    let ack = r.store.read().replies().unwrap().remove(0);
    let thread = ack.thread_key.clone();
    let result = queue_copy(&mut r, &ack, 1, Purpose::Result, &thread, 60);
    // Another thread's reply, due later than the result.
    let elsewhere = queue_copy(&mut r, &ack, 2, Purpose::Result, "gh:acme/widgets#2", 700);
    let due = |r: &Router<RulesOnlyJudge>, now| {
        let read = r.store.read();
        let due: Vec<_> = read
            .due_outbox(now, 10)
            .unwrap()
            .into_iter()
            .map(|i| i.reply)
            .collect();
        (due, read.next_outbox_due().unwrap())
    };

    // The ack and the result are both due: only the ack is offered.
    assert_eq!(due(&r, 100), (vec![ack.reply.clone()], Some(50)));

    // The ack waits (a rate limit, a backoff, a look for its marker): the
    // result waits behind it however long it has been due, and is not what
    // the next pass is due for; the other thread's reply does not wait.
    for waiting in [OutboxState::Pending, OutboxState::Unknown] {
        set_outbox(&mut r, &ack.reply, waiting, 500);
        assert_eq!(due(&r, 100), (vec![], Some(500)), "{waiting:?}");
        assert_eq!(
            due(&r, 700),
            (vec![ack.reply.clone(), elsewhere.clone()], Some(500)),
            "{waiting:?}"
        );
    }

    // Once the ack is sent, or has failed for good, the result is next.
    for done in [OutboxState::Sent, OutboxState::Failed] {
        set_outbox(&mut r, &ack.reply, done, 500);
        assert_eq!(due(&r, 100), (vec![result.clone()], Some(60)), "{done:?}");
        assert_eq!(
            due(&r, 700),
            (vec![result.clone(), elsewhere.clone()], Some(60)),
            "{done:?}"
        );
    }
}
