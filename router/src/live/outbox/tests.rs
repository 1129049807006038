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

fn label(outcome: &SendOutcome) -> &'static str {
    match outcome {
        SendOutcome::Unknown { .. } => "unknown",
        SendOutcome::Refused { .. } => "refused",
        SendOutcome::NotSent { .. } => "not_sent",
        SendOutcome::Limited { .. } => "limited",
        other => panic!("{other:?}"),
    }
}

const NOW_MS: u64 = 1_800_000_000_000;

fn headers(remaining: Option<u64>, reset: Option<u64>, retry_after: Option<u64>) -> LimitHeaders {
    LimitHeaders {
        rate: RateHeaders {
            remaining,
            reset,
            retry_after,
            poll_interval: None,
        },
        feishu_reset: None,
    }
}

#[test]
fn statuses_are_classified() {
    let none = LimitHeaders::default();
    let spent = headers(Some(0), Some(NOW_MS / 1000 + 600), None);
    let secondary = headers(Some(4000), None, Some(30));
    let left = headers(Some(4000), Some(NOW_MS / 1000 + 600), None);
    let fs = |code: i64| format!(r#"{{"code":{code},"msg":"x"}}"#).into_bytes();
    // (platform, status, headers, body, outcome)
    let cases: Vec<(Source, u16, LimitHeaders, Vec<u8>, &str)> = vec![
        (Source::Github, 201, none, vec![], "unknown"),
        (Source::Github, 403, none, vec![], "refused"),
        // A 403 with budget left and no Retry-After is a refusal (the rules, permissions).
        (Source::Github, 403, left, vec![], "refused"),
        (Source::Github, 403, spent, vec![], "limited"),
        (Source::Github, 403, secondary, vec![], "limited"),
        (Source::Github, 404, none, vec![], "refused"),
        (Source::Github, 422, none, vec![], "refused"),
        (Source::Github, 408, none, vec![], "not_sent"),
        (Source::Github, 429, none, vec![], "limited"),
        (Source::Github, 429, secondary, vec![], "limited"),
        (Source::Github, 500, none, vec![], "unknown"),
        (Source::Github, 502, none, vec![], "unknown"),
        (Source::Github, 503, none, vec![], "unknown"),
        // Feishu: 429, or its rate codes whatever the status.
        (Source::Feishu, 429, none, vec![], "limited"),
        (Source::Feishu, 400, none, fs(99_991_400), "limited"),
        (Source::Feishu, 400, none, fs(230_020), "limited"),
        (Source::Feishu, 400, none, fs(11_232), "limited"),
        (Source::Feishu, 200, none, fs(230_020), "limited"),
        (Source::Feishu, 400, none, fs(230_002), "refused"),
        (Source::Feishu, 400, none, fs(230_025), "refused"),
        (Source::Feishu, 400, none, fs(99_991_663), "refused"),
        // A code on a 2xx is a refusal too, not an answer to look into.
        (Source::Feishu, 200, none, fs(230_002), "refused"),
        (Source::Feishu, 200, none, b"{}".to_vec(), "unknown"),
        (Source::Feishu, 200, none, fs(0), "unknown"),
        (Source::Feishu, 500, none, fs(1_500), "unknown"),
        // GitHub's headers on a Feishu answer mean nothing to Feishu.
        (Source::Feishu, 403, spent, vec![], "refused"),
        (Source::Feishu, 500, none, vec![], "unknown"),
    ];
    for (platform, status, h, body, expected) in cases {
        let got = classify(platform, status, &h, &body, "x".into(), NOW_MS, 1);
        assert_eq!(label(&got), expected, "{platform:?} {status} {h:?}");
    }
}

#[test]
fn a_failed_look_for_a_marker_waits_looks_again_or_fails_for_good() {
    let none = LimitHeaders::default();
    let spent = headers(Some(0), Some(NOW_MS / 1000 + 600), None);
    let left = headers(Some(4000), Some(NOW_MS / 1000 + 600), None);
    // (status, headers, outcome): never `not_sent`, which would post
    // without looking.
    let cases = [
        (429, none, "limited"),
        (403, spent, "limited"),
        (408, none, "unknown"),
        (500, none, "unknown"),
        (502, none, "unknown"),
        (503, none, "unknown"),
        (301, none, "refused"),
        (401, none, "refused"),
        (403, left, "refused"),
        (404, none, "refused"),
        (410, none, "refused"),
        (422, none, "refused"),
    ];
    for (status, h, expected) in cases {
        let got = classify_look(status, &h, b"", "looking".into(), NOW_MS, 3);
        assert_eq!(label(&got), expected, "{status} {h:?}");
        if let SendOutcome::Limited { in_doubt, .. } = got {
            assert!(in_doubt, "a limit on a look leaves the reply in doubt");
        }
        // What the entry becomes: a refused look ends it, unposted.
        let state = after_send(3, got, NOW_MS).state;
        let want = match expected {
            "refused" => OutboxState::Failed,
            _ => OutboxState::Unknown,
        };
        assert_eq!(state, want, "{status}");
    }
}

#[test]
fn a_feishu_refusal_fails_the_reply_for_good_with_its_reason() {
    let none = LimitHeaders::default();
    let body = |code: i64| format!(r#"{{"code":{code},"msg":"m"}}"#).into_bytes();
    // (code, the reason recorded)
    let cases = [
        (
            230_002,
            "Feishu refused it: the bot is not in the chat (code 230002)",
        ),
        (
            230_025,
            "Feishu refused it: the reply is over Feishu's size limit (code 230025)",
        ),
        (
            230_011,
            "Feishu refused it: the message replied to was recalled (code 230011)",
        ),
        (12_345, "Feishu refused it (code 12345)"),
    ];
    for (code, reason) in cases {
        let why = "Feishu answered 400".to_owned();
        let got = classify(Source::Feishu, 400, &none, &body(code), why, NOW_MS, 1);
        let SendOutcome::Refused { why } = got.clone() else {
            panic!("{code}: {got:?}");
        };
        assert!(why.starts_with(reason), "{code}: {why}");
        assert!(why.ends_with("Feishu answered 400"), "{code}: {why}");
        // Failed at once: not retried, not waiting on a limit.
        let u = after_send(1, got, NOW_MS);
        assert_eq!(u.state, OutboxState::Failed, "{code}");
        assert_eq!(u.error.as_deref(), Some(why.as_str()));
    }
}

#[test]
fn a_limit_waits_for_retry_after_else_the_reset_else_a_capped_backoff() {
    let s = 1_000;
    let now_s = NOW_MS / 1000;
    let feishu = LimitHeaders {
        feishu_reset: Some(7),
        ..LimitHeaders::default()
    };
    // (headers, attempts, wait in ms)
    let cases = [
        (headers(None, None, Some(30)), 1, 30 * s),
        // Retry-After wins over the reset.
        (headers(Some(0), Some(now_s + 600), Some(30)), 1, 30 * s),
        (headers(None, None, Some(0)), 1, s),
        (headers(Some(0), Some(now_s + 600), None), 1, 600 * s),
        (headers(Some(0), Some(now_s + 600), None), 9, 600 * s),
        // A reset past or absent: backoff from a minute, doubling.
        (headers(Some(0), Some(now_s - 5), None), 1, 60 * s),
        (headers(None, None, None), 1, 60 * s),
        (headers(None, None, None), 2, 120 * s),
        (headers(None, None, None), 3, 240 * s),
        // ... capped at two hours.
        (headers(None, None, None), 8, 7_200 * s),
        (headers(None, None, None), 40, 7_200 * s),
        // A reset days away is capped too.
        (headers(Some(0), Some(now_s + 86_400), None), 1, 7_200 * s),
        (feishu, 1, 7 * s),
    ];
    for (h, attempts, wait) in cases {
        assert_eq!(
            limited_until(&h, NOW_MS, attempts),
            NOW_MS + wait,
            "{h:?} {attempts}"
        );
    }
}

#[test]
fn a_limited_reply_stays_pending_until_then_and_keeps_its_doubt() {
    let limited = |in_doubt| SendOutcome::Limited {
        why: "GitHub answered 429".into(),
        until: NOW_MS + 30_000,
        in_doubt,
    };
    let u = after_send(2, limited(false), NOW_MS);
    assert_eq!(
        (u.state, u.attempts, u.next_at),
        (OutboxState::Pending, 2, NOW_MS + 30_000)
    );
    assert!(u
        .error
        .as_deref()
        .is_some_and(|e| e.starts_with("rate-limited: ")));
    assert_eq!(
        after_send(2, limited(true), NOW_MS).state,
        OutboxState::Unknown
    );
    // An entry in doubt (a GitHub reply whose last attempt is unknown) stays in doubt.
    let cases = [
        (OutboxState::Unknown, Source::Github, true),
        (OutboxState::Pending, Source::Github, false),
        (OutboxState::Unknown, Source::Feishu, false),
    ];
    for (state, platform, doubt) in cases {
        let kept = keep_doubt(&item(state, platform, 1), limited(false));
        assert_eq!(kept, limited(doubt), "{state:?} {platform:?}");
    }
    let sent = SendOutcome::Sent {
        message_id: "1".into(),
    };
    let i = item(OutboxState::Unknown, Source::Github, 1);
    assert_eq!(keep_doubt(&i, sent.clone()), sent);
}

#[test]
fn a_hold_keeps_an_identity_until_it_lifts() {
    let mut holds = Holds::default();
    let a = Path::new("/run/a.sock");
    let b = Path::new("/run/b.sock");
    assert!(!holds.held(a, NOW_MS));
    holds.hold(a, NOW_MS + 10);
    assert!(holds.held(a, NOW_MS));
    assert!(holds.held(a, NOW_MS + 9));
    assert!(!holds.held(a, NOW_MS + 10));
    assert!(!holds.held(b, NOW_MS), "other identities go on");
    // A shorter hold does not shorten a longer one.
    holds.hold(a, NOW_MS + 5);
    assert!(holds.held(a, NOW_MS + 9));
    holds.hold(a, NOW_MS + 20);
    assert!(holds.held(a, NOW_MS + 19));
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
