//! Reopening an issue is a resume signal, end to end over real processes
//! (`gatehouse_testkit::live`): alice's close cancels the ticket and its
//! job; a reopen by someone not on the allowlist, or by a bot, resumes
//! nothing; alice's reopen resumes the ticket under its mandate, submits a
//! job for the new generation and acks once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::time::Duration;

use gatehouse_router::store::{Durability, Store};
use gatehouse_router::ticket::Ticket;
use gatehouse_testkit::live::LiveWorld;

const WORKER: &str = "gatehouse report --state working --summary 'On a long task' && sleep 120";

fn tickets(w: &LiveWorld) -> Vec<Ticket> {
    Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .tickets()
        .unwrap()
}

fn jobs(w: &LiveWorld) -> usize {
    Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .live_jobs()
        .unwrap()
        .len()
}

/// How many recorded decisions name `needle`.
fn decided(w: &LiveWorld, needle: &str) -> usize {
    Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .decisions()
        .unwrap()
        .iter()
        .filter(|d| d.contains(needle))
        .count()
}

#[test]
fn a_persons_reopen_resumes_the_cancelled_ticket_and_nobody_elses_does() {
    let w = LiveWorld::start(WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "Slow", "b", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot take a look", "alice")
        .unwrap();
    w.wait("the ack and the job's first report", |w| {
        !w.bot_comments(n).is_empty()
            && tickets(w)
                .first()
                .is_some_and(|t| t.latest_report.is_some())
    });
    w.github.close("acme/widgets", n, "alice").unwrap();
    w.wait("the close to cancel the ticket", |w| {
        tickets(w)[0].outcome.is_some()
    });

    // Not allowlisted, then an (unlisted) bot: each decided, nothing resumed.
    w.github.reopen("acme/widgets", n, "mallory").unwrap();
    w.wait("mallory's reopen decided", |w| {
        decided(w, "not_allowlisted") == 1
    });
    w.github.close("acme/widgets", n, "alice").unwrap();
    w.github.reopen("acme/widgets", n, "stale[bot]").unwrap();
    w.wait("the bot's reopen decided", |w| {
        decided(w, "unlisted_bot") == 1
    });
    let t = &tickets(&w)[0];
    assert!(!t.is_live(), "{t:?}");
    assert_eq!(jobs(&w), 1);
    assert_eq!(w.bot_comments(n).len(), 1, "{:?}", w.bot_comments(n));

    // The positive control: alice reopens; the same ticket resumes.
    w.github.close("acme/widgets", n, "alice").unwrap();
    w.github.reopen("acme/widgets", n, "alice").unwrap();
    w.wait("the resumed ticket's job and ack", |w| {
        jobs(w) == 2 && w.bot_comments(n).len() == 2
    });
    let all = tickets(&w);
    assert_eq!(all.len(), 1, "a reopen opens no ticket: {all:?}");
    assert!(all[0].is_live() && all[0].outcome.is_none(), "{:?}", all[0]);
    // Once: nothing more comes.
    std::thread::sleep(Duration::from_secs(1));
    let said = w.bot_comments(n);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[1].starts_with("On it"), "{said:?}");
    assert_eq!(jobs(&w), 2);
}
