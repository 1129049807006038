use std::path::Path;

use super::*;
use crate::jobs::report::ReportState;
use crate::jobs::spec::JobSpec;
use crate::jobs::state::{ExitKind, StopReason};

fn spec(ticket: &str) -> JobSpec {
    JobSpec {
        ticket: ticket.into(),
        team: "core".into(),
        profile: "default".into(),
        rule_sets: vec![],
        tunnel_hosts: vec![],
        variables: Default::default(),
        task: "t".into(),
        deadline_secs: 10,
        command: None,
    }
}

fn insert(store: &Store, key: &str, hash: &str, id: &str, s: &JobSpec) -> Inserted {
    let p = Path::new("/x");
    store
        .insert_job(
            key,
            hash,
            NewJob {
                id,
                spec: s,
                now: 1000,
                work_dir: p,
                stdout_log: p,
                stderr_log: p,
            },
        )
        .unwrap()
        .0
}

#[test]
fn idempotent_insert_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&path).unwrap();
    let s = spec("tkt_a");
    assert!(
        matches!(insert(&store, "k1", "h", "job_1", &s), Inserted::Created(j) if j.deadline_at == 11_000)
    );
    assert!(
        matches!(insert(&store, "k1", "h", "job_2", &s), Inserted::Replayed(j) if j.id == "job_1")
    );
    assert!(
        matches!(insert(&store, "k1", "h2", "job_2", &s), Inserted::KeyConflict { job_id } if job_id == "job_1")
    );
    assert!(
        matches!(insert(&store, "k2", "h", "job_2", &s), Inserted::TicketBusy { job_id } if job_id == "job_1")
    );
    store
        .transition("job_1", JobEvent::Started, 1100, Some((42, 7)), None, None)
        .unwrap();
    let exit = ExitStatus {
        code: Some(0),
        signal: None,
    };
    let (job, _) = store
        .transition(
            "job_1",
            JobEvent::Exited(ExitKind::Success),
            1200,
            None,
            Some(exit),
            None,
        )
        .unwrap();
    assert_eq!(job.state, JobState::Done);
    // A final state takes no further event.
    assert!(store
        .transition(
            "job_1",
            JobEvent::Stopped(StopReason::Cancel),
            1300,
            None,
            None,
            None
        )
        .is_err());
    drop(store);
    let store = Store::open(&path).unwrap();
    let job = store.job("job_1").unwrap().unwrap();
    assert_eq!(job.state, JobState::Done);
    assert_eq!(job.process, Some((42, 7)));
    assert_eq!(job.exit, Some(exit));
    assert_eq!(store.job("job_9").unwrap(), None);
    // The ticket is free again.
    assert!(matches!(
        insert(&store, "k2", "h", "job_2", &s),
        Inserted::Created(_)
    ));
    let events = store.events_after(0, 100).unwrap();
    let states: Vec<_> = events.iter().map(|e| e.data["state"].clone()).collect();
    assert_eq!(states, ["queued", "running", "done", "queued"]);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(
        store.events_after(events[1].seq, 1).unwrap()[0].seq,
        events[2].seq
    );
}

#[test]
fn reports_and_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    insert(&store, "k", "h", "job_1", &spec("tkt_a"));
    assert_eq!(store.latest_report("job_1").unwrap(), None);
    let r = Report {
        state: ReportState::Working,
        summary: "s".into(),
        question: None,
        answers: None,
        links: vec![],
    };
    store.add_report("job_1", &r, 5).unwrap();
    let r2 = Report {
        state: ReportState::Ready,
        ..r
    };
    store.add_report("job_1", &r2, 6).unwrap();
    assert_eq!(store.latest_report("job_1").unwrap().unwrap().report, r2);
    assert!(store.add_report("job_nope", &r2, 6).is_err());
    let m = InboxMessage {
        text: "hi".into(),
        trigger: None,
    };
    let first = queued(store.push_inbox("job_1", &m, 7));
    let second = queued(store.push_inbox("job_1", &m, 8));
    // Read, not yet acknowledged: read again (at least once).
    assert_eq!(store.pending_inbox("job_1").unwrap().len(), 2);
    assert_eq!(store.pending_inbox("job_1").unwrap().len(), 2);
    // Acknowledging the first leaves the second.
    assert_eq!(store.ack_inbox("job_1", first).unwrap(), 1);
    let left = store.pending_inbox("job_1").unwrap();
    assert_eq!((left.len(), left[0].seq), (1, second));
    assert_eq!(store.ack_inbox("job_1", second).unwrap(), 1);
    assert!(store.pending_inbox("job_1").unwrap().is_empty());
    assert_eq!(store.ack_inbox("job_1", second).unwrap(), 0);
    // Another job's acknowledgement never touches this job's messages.
    insert(&store, "k2", "h2", "job_2", &spec("tkt_b"));
    let third = queued(store.push_inbox("job_1", &m, 9));
    assert_eq!(store.ack_inbox("job_2", third).unwrap(), 0);
    assert_eq!(store.pending_inbox("job_1").unwrap()[0].at, 9);
    // Survives reopening until acknowledged.
    drop(store);
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    assert_eq!(store.pending_inbox("job_1").unwrap()[0].seq, third);
}

fn queued(pushed: Result<Pushed, StoreError>) -> i64 {
    match pushed.unwrap() {
        Pushed::Queued(seq) => seq,
        closed => panic!("{closed:?}"),
    }
}

fn message(text: &str) -> InboxMessage {
    InboxMessage {
        text: text.into(),
        trigger: None,
    }
}

fn texts(store: &Store, job: &str) -> Vec<String> {
    store
        .pending_inbox(job)
        .unwrap()
        .into_iter()
        .map(|d| d.text)
        .collect()
}

fn end(store: &Store, job: &str, event: JobEvent, reason: Option<&str>) {
    store
        .transition(job, JobEvent::Started, 1100, Some((42, 7)), None, None)
        .unwrap();
    store
        .transition(job, event, 1200, None, None, reason)
        .unwrap();
}

#[test]
fn a_lost_jobs_unacknowledged_messages_go_to_its_tickets_next_job_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    insert(&store, "k1", "h", "job_1", &spec("tkt_a"));
    let read = queued(store.push_inbox("job_1", &message("one"), 1));
    queued(store.push_inbox("job_1", &message("two"), 2));
    store.ack_inbox("job_1", read).unwrap();
    end(
        &store,
        "job_1",
        JobEvent::SupervisorRestarted,
        Some(LOST_REASON),
    );
    // Lost, and no later job yet: its inbox still takes a follow-up.
    queued(store.push_inbox("job_1", &message("three"), 3));
    // Another ticket's new job inherits nothing.
    insert(&store, "kb", "h", "job_b", &spec("tkt_b"));
    assert!(texts(&store, "job_b").is_empty());
    // The next job of the ticket gets what was not acknowledged, in order;
    // the acknowledged one is not repeated.
    insert(&store, "k2", "h", "job_2", &spec("tkt_a"));
    assert_eq!(texts(&store, "job_2"), ["two", "three"]);
    assert!(texts(&store, "job_1").is_empty());
    // Replaying the creation carries nothing again.
    insert(&store, "k2", "h", "job_2", &spec("tkt_a"));
    assert_eq!(texts(&store, "job_2"), ["two", "three"]);
    // Once succeeded, the lost job's inbox is closed.
    assert_eq!(
        store.push_inbox("job_1", &message("late"), 4).unwrap(),
        Pushed::Closed(JobState::Failed)
    );
    // Lost again after reading "two": the third job gets "three" only.
    let two = store.pending_inbox("job_2").unwrap()[0].seq;
    store.ack_inbox("job_2", two).unwrap();
    end(
        &store,
        "job_2",
        JobEvent::SupervisorRestarted,
        Some(LOST_REASON),
    );
    insert(&store, "k3", "h", "job_3", &spec("tkt_a"));
    assert_eq!(texts(&store, "job_3"), ["three"]);
    // Survives reopening.
    drop(store);
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    assert_eq!(texts(&store, "job_3"), ["three"]);
}

#[test]
fn a_job_that_ended_otherwise_hands_nothing_on_and_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    insert(&store, "k1", "h", "job_1", &spec("tkt_a"));
    queued(store.push_inbox("job_1", &message("unread"), 1));
    end(
        &store,
        "job_1",
        JobEvent::Exited(ExitKind::WorkerFailed),
        None,
    );
    assert_eq!(
        store.push_inbox("job_1", &message("late"), 2).unwrap(),
        Pushed::Closed(JobState::Failed)
    );
    insert(&store, "k2", "h", "job_2", &spec("tkt_a"));
    assert!(texts(&store, "job_2").is_empty());
    assert_eq!(texts(&store, "job_1"), ["unread"]);
}

#[test]
fn which_inboxes_are_open() {
    use JobState as S;
    // (state, end reason, a later job of the ticket, open)
    let lost = Some(LOST_REASON);
    let cases = [
        (S::Queued, None, false, true),
        (S::Running, None, false, true),
        (S::Running, None, true, true),
        (S::Failed, lost, false, true),
        (S::Failed, lost, true, false),
        (S::Failed, None, false, false),
        (S::Failed, Some("exit"), false, false),
        (S::Cancelled, lost, false, false),
        (S::Done, None, false, false),
        (S::TimedOut, None, false, false),
    ];
    for (state, reason, later, open) in cases {
        assert_eq!(
            inbox_open(state, reason, later),
            open,
            "{state:?} {reason:?} {later}"
        );
    }
}
