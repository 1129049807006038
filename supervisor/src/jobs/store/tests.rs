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
    let first = store.push_inbox("job_1", &m, 7).unwrap();
    let second = store.push_inbox("job_1", &m, 8).unwrap();
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
    let third = store.push_inbox("job_1", &m, 9).unwrap();
    assert_eq!(store.ack_inbox("job_2", third).unwrap(), 0);
    assert_eq!(store.pending_inbox("job_1").unwrap()[0].at, 9);
    // Survives reopening until acknowledged.
    drop(store);
    let store = Store::open(&dir.path().join("s.db")).unwrap();
    assert_eq!(store.pending_inbox("job_1").unwrap()[0].seq, third);
}
