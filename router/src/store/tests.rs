use proptest::prelude::*;

use super::schema::MIGRATIONS;
use super::*;
use crate::engine::{Decision, Router};
use crate::eval::RulesOnlyJudge;
use crate::fixtures::*;
use crate::gate::Admission;
use crate::gate::Via;
use crate::id::{ThreadId, TicketId, TriggerId};
use crate::policy::tests::base;
use crate::reply::Purpose;
use crate::ticket::tests::{mandate, ticket_with};
use crate::trigger::{Source, TriggerInput, TriggerKind};

impl Store {
    fn count(&self, table: &str) -> i64 {
        self.conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }
}

fn comment(thread: &str, text: &str) -> TriggerInput {
    let mut t = gh(alice_gh(), TriggerKind::IssueComment);
    t.thread = thread.to_owned();
    t.text = text.to_owned();
    t
}

fn trigger_id(d: &Decision) -> TriggerId {
    match d {
        Decision::Trigger(t) => t.trigger.clone(),
        other => panic!("not a trigger decision: {other:?}"),
    }
}

fn thread_id(d: &Decision) -> ThreadId {
    match d {
        Decision::Trigger(t) => t.thread.clone(),
        other => panic!("not a trigger decision: {other:?}"),
    }
}

#[test]
fn ids_are_never_reused_across_restarts_even_when_time_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut seen = Vec::new();
    for (round, at) in [(0, 5_000u64), (1, 1_000), (2, 5_000)] {
        let store = Store::open(&path, Durability::Full).unwrap();
        let mut r = Router::new(store, base(), RulesOnlyJudge, at).unwrap();
        for i in 0..5 {
            let d = r
                .on_trigger(comment("gh:acme/widgets#1", &format!("r{round} {i}")), at)
                .unwrap();
            seen.push(trigger_id(&d));
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "ids must strictly increase across restarts");
}

#[test]
fn get_by_id_returns_exactly_that_record() {
    let mut r = Router::new(Store::open_in_memory().unwrap(), base(), RulesOnlyJudge, 1).unwrap();
    let mut made = Vec::new();
    for i in 0..20 {
        let mut input = comment(
            &format!("gh:acme/widgets#{}", i % 3),
            &format!("comment number {i}"),
        );
        input.raw =
            Some(serde_json::json!({"comment": {"id": i, "body": format!("comment number {i}")}}));
        let d = r.on_trigger(input.clone(), 100 + i).unwrap();
        made.push((trigger_id(&d), thread_id(&d), input, 100 + i));
    }
    for (id, thread, input, at) in made {
        let got = r.store().read().trigger(&id).unwrap();
        assert_eq!(got.trigger.id, id);
        assert_eq!(got.trigger.input, input);
        assert_eq!(got.trigger.at, at);
        assert_eq!(got.thread, thread);
        assert_eq!(r.store().read().thread(&thread).unwrap().key, input.thread);
    }
}

#[test]
fn unknown_ids_are_not_found() {
    let store = Store::open_in_memory().unwrap();
    let mut clock = IdClock::default();
    let read = store.read();
    assert!(matches!(
        read.ticket(&clock.issue(1)),
        Err(StoreError::NotFound { kind: "ticket", .. })
    ));
    assert!(matches!(
        read.trigger(&clock.issue(1)),
        Err(StoreError::NotFound {
            kind: "trigger",
            ..
        })
    ));
    assert!(matches!(
        read.thread(&clock.issue(1)),
        Err(StoreError::NotFound { kind: "thread", .. })
    ));
    assert!(matches!(
        read.thread_triggers(&clock.issue(1), Some("nonsense"), 5),
        Err(StoreError::BadCursor(_))
    ));
    let msg = read.ticket(&clock.issue(2)).unwrap_err().to_string();
    assert!(msg.starts_with("no ticket with id `tkt_"), "{msg}");
}

#[test]
fn payloads_are_stored_once_by_id_and_rows_keep_a_summary() {
    let mut r = Router::new(Store::open_in_memory().unwrap(), base(), RulesOnlyJudge, 1).unwrap();
    let long = format!("{}\n\nstack trace follows", "word ".repeat(400));
    let mut input = comment("gh:acme/widgets#1", &long);
    input.raw = Some(serde_json::json!({"big": "x".repeat(10_000)}));
    let a = trigger_id(&r.on_trigger(input.clone(), 1).unwrap());
    let b = trigger_id(
        &r.on_trigger(comment("gh:acme/widgets#1", "short"), 2)
            .unwrap(),
    );
    assert_eq!(r.store().count("payloads"), 2);
    let (summary, payload, payload_len, sha): (String, i64, i64, String) = r
        .store()
        .conn
        .query_row(
            "SELECT t.summary, t.payload, length(p.body), p.sha256 FROM triggers t
             JOIN payloads p ON p.id = t.payload WHERE t.id = ?1",
            [a.as_str()],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .unwrap();
    // The hot row keeps a summary; the raw payload lives once, by id.
    assert!(summary.chars().count() <= crate::trigger::SUMMARY_CHARS + 1);
    assert!(payload_len > 10_000);
    assert_eq!(sha.len(), 64);
    let referencing: i64 = r
        .store()
        .conn
        .query_row(
            "SELECT count(*) FROM triggers WHERE payload = ?1",
            [payload],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(referencing, 1);
    assert_eq!(r.store().read().trigger(&a).unwrap().trigger.input, input);
    assert_eq!(
        r.store().read().trigger(&b).unwrap().trigger.input.text,
        "short"
    );
}

/// Pages a thread from the start while new triggers arrive between pages.
fn page_through(interleave: &[(bool, usize)], limit: usize) -> (Vec<TriggerId>, Vec<TriggerId>) {
    let mut r = Router::new(Store::open_in_memory().unwrap(), base(), RulesOnlyJudge, 1).unwrap();
    let mut expected = Vec::new();
    let first = r
        .on_trigger(comment("gh:acme/widgets#1", "first"), 1)
        .unwrap();
    let thread = thread_id(&first);
    expected.push(trigger_id(&first));
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut at = 2;
    let mut steps = interleave.iter();
    loop {
        let page = r
            .store()
            .read()
            .thread_triggers(&thread, cursor.as_deref(), limit)
            .unwrap();
        listed.extend(page.triggers.iter().map(|t| t.id.clone()));
        cursor = Some(page.next_cursor);
        match steps.next() {
            Some(&(same_thread, n)) => {
                for _ in 0..n {
                    let key = if same_thread {
                        "gh:acme/widgets#1"
                    } else {
                        "gh:acme/widgets#2"
                    };
                    let d = r.on_trigger(comment(key, "more"), at).unwrap();
                    at += 1;
                    if same_thread {
                        expected.push(trigger_id(&d));
                    }
                }
            }
            None if page.triggers.is_empty() => break,
            None => {}
        }
    }
    (listed, expected)
}

#[test]
fn cursor_neither_skips_nor_repeats_while_triggers_arrive() {
    let (listed, expected) = page_through(
        &[(true, 4), (false, 3), (true, 1), (true, 7), (false, 1)],
        3,
    );
    assert_eq!(listed, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn cursor_contract_holds_for_any_interleaving(
        steps in proptest::collection::vec((any::<bool>(), 0usize..5), 0..12),
        limit in 1usize..6,
    ) {
        let (listed, expected) = page_through(&steps, limit);
        prop_assert_eq!(listed, expected);
    }
}

#[test]
fn one_live_ticket_per_thread_is_enforced_by_the_schema() {
    let mut store = Store::open_in_memory().unwrap();
    let t = ticket_with(mandate(crate::gate::Author::Human("alice".into()), &[]));
    let mut second = t.clone();
    second.id = IdClock::from_rows([("tkt".to_owned(), 1, 5)]).issue(1);
    let result: Result<()> = store.transaction(|tx| {
        tx.ensure_thread_with_id(&t.thread, &t.thread_key, 1)?;
        tx.insert_ticket(&t)?;
        tx.insert_ticket(&second)
    });
    assert!(matches!(result, Err(StoreError::Sqlite(_))), "{result:?}");
    // The failed transaction left nothing behind.
    assert_eq!(store.count("tickets"), 0);
    assert_eq!(store.count("threads"), 0);
}

#[test]
fn ack_once_is_enforced_by_the_schema() {
    let mut r = Router::new(Store::open_in_memory().unwrap(), base(), RulesOnlyJudge, 1).unwrap();
    let d = r
        .on_trigger(
            addressed(
                comment("gh:acme/widgets#1", "please"),
                mention("gatehouse-bot"),
            ),
            1,
        )
        .unwrap();
    let Decision::Trigger(td) = &d else { panic!() };
    assert!(matches!(
        td.admission,
        Admission::Explicit {
            via: Via::Mention,
            ..
        }
    ));
    let crate::engine::TicketOutcome::Opened { ticket, .. } = &td.ticket else {
        panic!("{d:?}")
    };
    let record = |n: u64| ReplyRecord {
        reply: IdClock::from_rows([("rpl".to_owned(), n, 0)]).issue(n),
        ticket: ticket.clone(),
        thread_key: "gh:acme/widgets#1".into(),
        purpose: Purpose::Ack,
        target: ReplyTarget {
            platform: Source::Github,
            message_id: "c1".into(),
            trigger: td.trigger.clone(),
        },
        text_sha256: text_sha256("ok"),
        words: 1,
        at: n,
        writer: crate::reply::Writer::Template,
    };
    let store = &mut r.store;
    store
        .transaction(|tx| tx.insert_reply(&record(1), "ok"))
        .unwrap();
    let second: Result<()> = store.transaction(|tx| tx.insert_reply(&record(2), "ok"));
    assert!(matches!(second, Err(StoreError::Sqlite(_))));
    assert_eq!(store.count("replies"), 1);
}

#[test]
fn migrations_are_versioned_and_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(Store::open(&path, Durability::Normal).unwrap());
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, i64::try_from(MIGRATIONS.len()).unwrap());
    let mode: String = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // Reopening applies nothing twice.
    drop(Store::open(&path, Durability::Normal).unwrap());
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = Store::open(&path, Durability::Normal).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
        "{err}"
    );
}

#[test]
fn a_failed_transaction_rolls_back_the_clock_with_the_rows() {
    let mut store = Store::open_in_memory().unwrap();
    let failed: Result<ThreadId> = store.transaction(|tx| {
        let t = tx.ensure_thread("gh:acme/widgets#1", 10)?;
        Err(StoreError::BadCursor(t.id.to_string()))
    });
    let Err(StoreError::BadCursor(would_be)) = failed else {
        panic!()
    };
    assert_eq!(store.count("threads"), 0);
    let t: ThreadRecord = store
        .transaction(|tx| tx.ensure_thread("gh:acme/widgets#1", 10))
        .unwrap();
    // Nothing with that id was ever stored, so issuing it now reuses nothing.
    assert_eq!(t.id.as_str(), would_be);
}

#[test]
fn two_writers_on_one_database_never_issue_the_same_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut a = Router::new(
        Store::open(&path, Durability::Normal).unwrap(),
        base(),
        RulesOnlyJudge,
        1,
    )
    .unwrap();
    let mut b = Router::new(
        Store::open(&path, Durability::Normal).unwrap(),
        base(),
        RulesOnlyJudge,
        1,
    )
    .unwrap();
    let mut issued = Vec::new();
    for i in 0..10 {
        let r = if i % 2 == 0 { &mut a } else { &mut b };
        // Same time on both: only the reloaded clock keeps the ids apart.
        issued.push(trigger_id(
            &r.on_trigger(comment("gh:acme/widgets#1", "x"), 50).unwrap(),
        ));
    }
    for pair in issued.windows(2) {
        assert!(pair[0] < pair[1], "{issued:?}");
    }
}

#[test]
fn a_version_1_inbox_moves_to_trigger_rows_and_notes_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(MIGRATIONS[0]).unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    conn.execute_batch(
        r#"
        INSERT INTO threads VALUES ('thr_000000000001000000', 'gh:acme/widgets#1', 1);
        INSERT INTO tickets VALUES ('tkt_000000000001000000', 'thr_000000000001000000',
            'gh:acme/widgets#1', 'open', NULL, '{}', NULL, 1, 1);
        INSERT INTO payloads VALUES (1, 'h', '{}'), (2, 'h', '{}'), (3, 'h', '{}');
        INSERT INTO triggers VALUES
            ('trg_000000000001000000', 'thr_000000000001000000', 1, 'github', 'issue_comment',
             '1', 'm1', '"x"', 's', 1),
            ('trg_000000000002000000', 'thr_000000000001000000', 2, 'github', 'issue_comment',
             '1', 'm2', '"x"', 's', 2),
            ('trg_000000000003000000', 'thr_000000000001000000', 3, 'github', 'issue_comment',
             '1', 'm3', '"x"', 's', 3);
        INSERT INTO inbox (seq, ticket_id, trigger_id, note, at) VALUES
            (1, 'tkt_000000000001000000', NULL, 'before any trigger', 1),
            (2, 'tkt_000000000001000000', 'trg_000000000001000000', NULL, 1),
            (3, 'tkt_000000000001000000', NULL, 'after the first', 1),
            (4, 'tkt_000000000001000000', NULL, 'also after the first', 1),
            (5, 'tkt_000000000001000000', 'trg_000000000003000000', NULL, 3);
        "#,
    )
    .unwrap();
    drop(conn);
    let mut store = Store::open(&path, Durability::Normal).unwrap();
    let ticket = TicketId::parse("tkt_000000000001000000").unwrap();
    let trigger = |s: &str| InboxItem::Trigger(TriggerId::parse(s).unwrap());
    let note = |s: &str| InboxItem::Note(s.to_owned());
    let mut expected = vec![
        note("before any trigger"),
        trigger("trg_000000000001000000"),
        note("after the first"),
        note("also after the first"),
        trigger("trg_000000000003000000"),
    ];
    assert_eq!(store.read().inbox(&ticket).unwrap(), expected);
    // A note written now comes after every trigger so far.
    store
        .transaction(|tx| tx.push_note(&ticket, "new", 4))
        .unwrap();
    expected.push(note("new"));
    assert_eq!(store.read().inbox(&ticket).unwrap(), expected);
}

#[test]
fn a_ticket_opened_by_another_connection_is_seen_by_the_next_decision() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let open = || {
        Router::new(
            Store::open(&path, Durability::Normal).unwrap(),
            base(),
            RulesOnlyJudge,
            1,
        )
        .unwrap()
    };
    let (mut a, mut b) = (open(), open());
    let thread = "gh:acme/widgets#1";
    // `a` reads the thread (no ticket yet) and remembers it.
    let d = a.on_trigger(comment(thread, "just a comment"), 2).unwrap();
    let Decision::Trigger(td) = &d else { panic!() };
    assert!(matches!(
        td.ticket,
        crate::engine::TicketOutcome::None { .. }
    ));
    // `b` opens a ticket on it.
    let ask = addressed(comment(thread, "please"), mention("gatehouse-bot"));
    let d = b.on_trigger(ask.clone(), 3).unwrap();
    let Decision::Trigger(td) = &d else { panic!() };
    let crate::engine::TicketOutcome::Opened { ticket, .. } = &td.ticket else {
        panic!("{d:?}")
    };
    // `a` must pass the next request through to that ticket, not open a
    // second one (the unique index would refuse it).
    let d = a.on_trigger(ask, 4).unwrap();
    let Decision::Trigger(td) = &d else { panic!() };
    assert_eq!(
        td.ticket,
        crate::engine::TicketOutcome::PassThrough {
            ticket: ticket.clone()
        }
    );
    assert_eq!(a.store().read().inbox(ticket).unwrap().len(), 2);
}

#[test]
fn a_panic_in_a_decision_rolls_back_and_leaves_nothing_cached() {
    let mut store = Store::open_in_memory().unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: Result<()> = store.transaction(|tx| {
            tx.ensure_thread("gh:acme/widgets#1", 10)?;
            panic!("in the middle of a decision");
        });
    }));
    assert!(panicked.is_err());
    assert_eq!(store.count("threads"), 0);
    // The thread is written again, not taken from a cache of a rolled-back write.
    store
        .transaction(|tx| tx.ensure_thread("gh:acme/widgets#1", 11).map(drop))
        .unwrap();
    assert_eq!(store.count("threads"), 1);
}
