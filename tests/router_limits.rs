//! The router's replies under GitHub's secondary rate limit, every part a
//! real process (`gatehouse_testkit::live`): the emulator holds creations
//! (403 with `Retry-After`, as GitHub's secondary limit answers), a
//! mention's ack is refused once, waits with the identity's other replies
//! held untried, and is then posted exactly once; the reply log said it
//! was limited, and nothing was logged as the proxy being down. Likewise
//! on Feishu under its gateway's 429 (code 99991400, `x-ogw-ratelimit-reset`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::time::Duration;

use gatehouse_router::store::{Durability, OutboxState, Store};
use gatehouse_testkit::live::{LiveWorld, FEISHU_BOT, FEISHU_CHAT};

/// A worker that needs no follow-up.
const SHORT_WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at it' || exit 90
sleep 0.3
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

/// How long the emulator refuses creations: long enough that the ack is
/// tried inside it, short enough for a test.
const HOLD_SECS: u64 = 8;

#[test]
fn a_rate_limited_ack_waits_and_is_posted_exactly_once() {
    let w = LiveWorld::start(SHORT_WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "Limits", "b", "alice")
        .unwrap();
    w.github.hold_creations(HOLD_SECS, 403).unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix", "alice")
        .unwrap();
    // The ack was tried, refused by the limit, and waits: pending, its
    // error saying so (a rate-limit 403 is not a refusal for good).
    w.wait("the ack limited", |w| {
        Store::open(&w.state(), Durability::Normal)
            .unwrap()
            .read()
            .outbox()
            .unwrap()
            .first()
            .is_some_and(|o| {
                o.state == OutboxState::Pending
                    && o.error
                        .as_deref()
                        .is_some_and(|e| e.starts_with("rate-limited: "))
            })
    });
    assert!(w.bot_comments(n).is_empty());
    // Posted once the hold lifts; the result follows.
    w.wait("the ack", |w| !w.bot_comments(n).is_empty());
    w.wait("the result", |w| {
        w.bot_comments(n).iter().any(|c| c.starts_with("Done:"))
    });
    std::thread::sleep(Duration::from_secs(2));
    let said = w.bot_comments(n);
    assert_eq!(
        said.iter().filter(|c| c.starts_with("On it")).count(),
        1,
        "{said:?}"
    );
    assert_eq!(said.len(), 2, "ack and result, once each: {said:?}");
    // One refused post (the ack's): while it waited, the identity's other
    // replies were held untried; each reply was created once.
    let comments = format!("/repos/acme/widgets/issues/{n}/comments");
    let posts: Vec<u16> = w
        .github
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == comments)
        .map(|r| r.status)
        .collect();
    assert_eq!(posts.iter().filter(|s| **s == 403).count(), 1, "{posts:?}");
    assert_eq!(posts.iter().filter(|s| **s == 201).count(), 2, "{posts:?}");
    assert_eq!(posts[0], 403, "{posts:?}");
    let outbox = Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .outbox()
        .unwrap();
    assert!(
        outbox.iter().all(|o| o.state == OutboxState::Sent),
        "{outbox:?}"
    );
    let log = w.log();
    assert_eq!(log.matches("a reply was rate-limited").count(), 1, "{log}");
    assert!(!log.contains("the proxy is unreachable"), "{log}");
    assert!(!log.contains("a reply was refused"), "{log}");
}

/// Feishu's gateway answers 429 for a while: the ack waits for the reset
/// it names and is then sent exactly once, the result after it.
#[test]
fn a_feishu_ack_under_the_gateways_429_waits_and_is_sent_once() {
    let w = LiveWorld::start(SHORT_WORKER);
    w.feishu.rate_limit_for(HOLD_SECS);
    w.feishu.send_user_message(
        FEISHU_CHAT,
        "group",
        "ou_alice",
        "@_user_1 the login form rejects valid emails",
        &[(FEISHU_BOT, "gatehouse")],
    );
    w.wait("the ack limited", |w| {
        Store::open(&w.state(), Durability::Normal)
            .unwrap()
            .read()
            .outbox()
            .unwrap()
            .first()
            .is_some_and(|o| {
                o.state == OutboxState::Pending
                    && o.error
                        .as_deref()
                        .is_some_and(|e| e.starts_with("rate-limited: "))
            })
    });
    assert!(w.bot_messages().is_empty());
    w.wait("the result", |w| {
        w.bot_messages().iter().any(|m| m.starts_with("Done:"))
    });
    std::thread::sleep(Duration::from_secs(2));
    let said = w.bot_messages();
    assert_eq!(said.len(), 2, "ack and result, once each: {said:?}");
    assert!(said[0].starts_with("On it"), "{said:?}");
    let limited = w
        .feishu
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/reply") && r.status == 429)
        .count();
    assert_eq!(limited, 1, "one attempt refused, the others held untried");
    let log = w.log();
    assert_eq!(log.matches("a reply was rate-limited").count(), 1, "{log}");
    assert!(!log.contains("the proxy is unreachable"), "{log}");
}
