use super::*;
use crate::id::{IdClock, TicketId};
use crate::reply::Purpose;

fn item(state: OutboxState, platform: Source, attempts: u32) -> OutboxItem {
    let mut c = IdClock::default();
    let ticket: TicketId = c.issue(1);
    OutboxItem {
        reply: c.issue(1),
        ticket,
        thread_key: "gh:acme/widgets#7".into(),
        purpose: Purpose::Ack,
        platform,
        target_message: "ic_1".into(),
        text: "On it".into(),
        state,
        attempts,
        platform_message_id: None,
        error: None,
        next_at: 0,
    }
}

#[test]
fn an_attempt_moves_the_entry() {
    let now = 1_000_000;
    let sent = |id: &str| SendOutcome::Sent {
        message_id: id.into(),
    };
    // (attempts so far, outcome, state after, retried at, message id)
    let cases = [
        (1, sent("55"), OutboxState::Sent, None, Some("55")),
        (
            3,
            SendOutcome::Found {
                message_id: "9".into(),
            },
            OutboxState::Sent,
            None,
            Some("9"),
        ),
        (
            1,
            SendOutcome::NotSent {
                why: "proxy down".into(),
            },
            OutboxState::Pending,
            Some(1_000),
            None,
        ),
        (
            2,
            SendOutcome::NotSent {
                why: "proxy down".into(),
            },
            OutboxState::Pending,
            Some(2_000),
            None,
        ),
        (
            4,
            SendOutcome::Unknown {
                why: "timeout".into(),
            },
            OutboxState::Unknown,
            Some(8_000),
            None,
        ),
        (
            30,
            SendOutcome::NotSent {
                why: "still down".into(),
            },
            OutboxState::Pending,
            Some(60_000),
            None,
        ),
        (
            1,
            SendOutcome::Refused { why: "403".into() },
            OutboxState::Failed,
            None,
            None,
        ),
    ];
    for (attempts, outcome, state, retry, id) in cases {
        let label = format!("{attempts} {outcome:?}");
        let u = after_send(attempts, outcome, now);
        assert_eq!(u.state, state, "{label}");
        assert_eq!(u.attempts, attempts, "{label}");
        assert_eq!(u.platform_message_id.as_deref(), id, "{label}");
        match retry {
            Some(wait) => {
                assert_eq!(u.next_at, now + wait, "{label}");
                assert!(u.error.is_some(), "{label}");
            }
            None => assert_eq!(u.next_at, now, "{label}"),
        }
        assert_eq!(u.error.is_some(), state != OutboxState::Sent, "{label}");
    }
}

#[test]
fn before_sending_the_entry_is_unknown_and_counted() {
    let i = item(OutboxState::Pending, Source::Github, 0);
    let u = before_send(&i, 50);
    assert_eq!((u.state, u.attempts), (OutboxState::Unknown, 1));
    assert!(u.next_at > 50, "a crash mid-send is retried after a wait");
    // Only a GitHub reply in doubt is looked for first; Feishu dedups by uuid.
    let cases = [
        (OutboxState::Pending, Source::Github, false),
        (OutboxState::Unknown, Source::Github, true),
        (OutboxState::Pending, Source::Feishu, false),
        (OutboxState::Unknown, Source::Feishu, false),
    ];
    for (state, platform, look) in cases {
        assert_eq!(
            look_first(&item(state, platform, 1)),
            look,
            "{state:?} {platform:?}"
        );
    }
}

#[test]
fn statuses_are_classified() {
    let cases = [
        (201, "unknown"),
        (403, "refused"),
        (404, "refused"),
        (422, "refused"),
        (408, "not_sent"),
        (429, "not_sent"),
        (500, "unknown"),
        (502, "unknown"),
        (503, "unknown"),
    ];
    for (status, expected) in cases {
        let got = match classify(status, "x".into()) {
            SendOutcome::Unknown { .. } => "unknown",
            SendOutcome::Refused { .. } => "refused",
            SendOutcome::NotSent { .. } => "not_sent",
            other => panic!("{other:?}"),
        };
        assert_eq!(got, expected, "{status}");
    }
}

#[test]
fn github_targets_and_markers() {
    assert_eq!(
        github_target("gh:acme/widgets#412"),
        Some(("acme/widgets", 412))
    );
    for bad in [
        "gh:acme/widgets",
        "fs:oc_1:om_1",
        "gh:acme#1",
        "gh:acme/wid/gets#1",
        "gh:/x#1",
        "gh:acme/widgets#x",
        "gh:ac me/w#1",
    ] {
        assert_eq!(github_target(bad), None, "{bad}");
    }
    let i = item(OutboxState::Pending, Source::Github, 0);
    let body: serde_json::Value = serde_json::from_slice(&github_body(&i.reply, "On it")).unwrap();
    let text = body["body"].as_str().unwrap();
    assert!(text.starts_with("On it\n\n<!-- gatehouse:rpl_"), "{text}");
    let comments = serde_json::json!([
        {"id": 1, "body": "unrelated"},
        {"id": 2, "body": text},
    ])
    .to_string();
    assert_eq!(find_marked(comments.as_bytes(), &i.reply), Some("2".into()));
    let other = item(OutboxState::Pending, Source::Github, 0);
    let mut c = IdClock::default();
    let _: crate::id::ReplyId = c.issue(1);
    let later: crate::id::ReplyId = c.issue(2);
    assert_ne!(later, other.reply);
    assert_eq!(find_marked(comments.as_bytes(), &later), None);
    assert_eq!(find_marked(b"not json", &i.reply), None);
}

#[test]
fn feishu_bodies_carry_the_reply_id_as_uuid() {
    let i = item(OutboxState::Pending, Source::Feishu, 0);
    let body: serde_json::Value = serde_json::from_slice(&feishu_body(&i.reply, "好的")).unwrap();
    assert_eq!(body["uuid"], i.reply.as_str());
    assert_eq!(body["msg_type"], "text");
    let content: serde_json::Value =
        serde_json::from_str(body["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["text"], "好的");
    assert_eq!(
        created_id(
            Source::Feishu,
            br#"{"code":0,"data":{"message_id":"om_9"}}"#
        ),
        Some("om_9".into())
    );
    assert_eq!(
        created_id(Source::Feishu, br#"{"code":230001,"msg":"no"}"#),
        None
    );
    assert_eq!(
        created_id(Source::Github, br#"{"id":123,"body":"x"}"#),
        Some("123".into())
    );
    assert_eq!(created_id(Source::Github, b"[]"), None);
}
