//! A Feishu reply refused for good, every part a real process
//! (`gatehouse_testkit::live`): the bot is no longer in the chat, so the
//! emulator answers the reply HTTP 400 with code 230002 as Feishu does. The
//! reply fails at once with the reason on record, is tried once and not
//! again, and nothing is logged as the proxy being down; a reply into a
//! chat the bot is in still goes (the control).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use gatehouse_router::store::{Durability, OutboxItem, OutboxState, Store};
use gatehouse_testkit::live::{LiveWorld, FEISHU_BOT, FEISHU_CHAT};

/// A worker that needs no follow-up.
const SHORT_WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at it' || exit 90
sleep 0.3
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

fn outbox(w: &LiveWorld) -> Vec<OutboxItem> {
    Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .outbox()
        .unwrap()
}

#[test]
fn a_reply_into_a_chat_the_bot_left_fails_once_with_the_reason() {
    let w = LiveWorld::start(SHORT_WORKER);
    // The bot left the chat after the person wrote (the emulator pushes the
    // event regardless).
    w.feishu.remove_bot_from_chat(FEISHU_CHAT);
    let asked = w.feishu.send_user_message(
        FEISHU_CHAT,
        "group",
        "ou_alice",
        "@_user_1 the login form rejects valid emails",
        &[(FEISHU_BOT, "gatehouse")],
    );
    w.wait("the ack failed", |w| {
        outbox(w)
            .iter()
            .any(|o| o.target_message == asked && o.state == OutboxState::Failed)
    });
    let failed: Vec<OutboxItem> = outbox(&w)
        .into_iter()
        .filter(|o| o.target_message == asked && o.state == OutboxState::Failed)
        .collect();
    for entry in &failed {
        assert_eq!(entry.attempts, 1, "tried once: {entry:?}");
        let error = entry.error.as_deref().unwrap_or_default();
        assert!(
            error.starts_with("Feishu refused it: the bot is not in the chat (code 230002)"),
            "{error}"
        );
    }
    assert!(w.bot_messages().is_empty(), "{:?}", w.bot_messages());

    // The control: back in the chat, the next person's message is answered.
    w.feishu.add_bot_to_chat(FEISHU_CHAT);
    w.feishu.send_user_message(
        FEISHU_CHAT,
        "group",
        "ou_alice",
        "@_user_1 and the signup form too",
        &[(FEISHU_BOT, "gatehouse")],
    );
    w.wait("an ack in the chat", |w| {
        w.bot_messages().iter().any(|m| m.starts_with("On it"))
    });

    // Every refused attempt is one an entry counts: none was retried.
    let refused = w
        .feishu
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/reply") && r.status == 400)
        .count();
    let failed_attempts: u32 = outbox(&w)
        .iter()
        .filter(|o| o.state == OutboxState::Failed)
        .map(|o| o.attempts)
        .sum();
    assert!(refused >= 1);
    assert_eq!(refused, failed_attempts as usize, "{:?}", outbox(&w));
    let log = w.log();
    assert!(log.contains("a reply was refused; it is not sent"), "{log}");
    assert!(log.contains("the bot is not in the chat"), "{log}");
    assert!(!log.contains("the proxy is unreachable"), "{log}");
}
