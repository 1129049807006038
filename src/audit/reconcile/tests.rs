use super::*;

const HOUR: u64 = 3_600_000;

fn reply(n: u32, state: ReplyState, message_id: Option<&str>) -> Reply {
    Reply {
        reply: format!("rpl_{n}"),
        ticket: "tkt_1".into(),
        purpose: "ack".into(),
        at: 1_000 * u64::from(n),
        state,
        message_id: message_id.map(str::to_owned),
        kind: "github_issue_comment".into(),
        target: "acme/widgets#1".into(),
        body_sha256: format!("hash{n}"),
    }
}

fn call(n: u32, identity: &str, status: Option<u16>, message_id: Option<&str>) -> ProxyMessage {
    ProxyMessage {
        place: format!("audit.jsonl:{n}"),
        at: 1_000 * u64::from(n) + 500,
        request_id: format!("req{n}"),
        identity: identity.into(),
        rule: "router-github/reply-comment-create".into(),
        kind: "github_issue_comment".into(),
        target: "acme/widgets#1".into(),
        body_sha256: format!("hash{n}"),
        status,
        message_id: message_id.map(str::to_owned),
        ticket_known: false,
    }
}

fn run(
    replies: Vec<Reply>,
    calls: Vec<ProxyMessage>,
    platform: Vec<PlatformMessage>,
) -> (Vec<Finding>, Summary) {
    let mut rec = Reconciler::new(Window::default(), HOUR);
    rec.platform(platform);
    let mut replies = replies.into_iter().peekable();
    let mut out = Vec::new();
    for c in calls {
        while let Some(r) = replies.next_if(|r| r.at <= c.at) {
            rec.reply(r);
        }
        rec.advance(c.at);
        rec.message(c);
        out.extend(rec.drain());
    }
    for r in replies {
        rec.reply(r);
    }
    let (rest, summary) = rec.finish();
    out.extend(rest);
    (out, summary)
}

fn kinds(findings: &[Finding]) -> Vec<Kind> {
    findings.iter().map(|f| f.kind).collect()
}

fn platform(key: &str) -> PlatformMessage {
    PlatformMessage {
        key: key.into(),
        at: 1_700,
        place: "https://github.com/acme/widgets/issues/1#issuecomment".into(),
    }
}

#[test]
fn a_sent_reply_its_call_and_its_platform_message_are_explained() {
    let (f, s) = run(
        vec![reply(1, ReplyState::Sent, Some("77"))],
        vec![call(1, "router-gh-1", Some(201), Some("77"))],
        vec![platform("github:comment:77")],
    );
    assert_eq!(
        kinds(&f),
        vec![Kind::PlatformExplained, Kind::ReplyDelivered]
    );
    assert_eq!(s.unexplained, 0);
    assert_eq!((s.message_calls, s.replies, s.platform_messages), (1, 1, 1));
    let delivered = &f[1];
    assert_eq!(delivered.ticket.as_deref(), Some("tkt_1"));
    assert_eq!(delivered.purpose.as_deref(), Some("ack"));
    assert!(delivered.posted && delivered.explained);
}

/// Each way a message can go unexplained, with its control beside it.
#[test]
fn each_seeded_mismatch_is_reported_with_why() {
    type Case = (&'static str, Vec<Reply>, Vec<ProxyMessage>, Vec<Kind>);
    let mut wrong_target = call(1, "router-gh-1", Some(201), Some("77"));
    wrong_target.target = "acme/widgets#2".into();
    let mut known_worker = call(5, "tkt_1", Some(201), Some("80"));
    known_worker.ticket_known = true;
    let cases: Vec<Case> = vec![
        (
            "a reply logged as sent but never forwarded",
            vec![reply(1, ReplyState::Sent, Some("77"))],
            vec![],
            vec![Kind::ReplyNotForwarded],
        ),
        (
            "sent, but its only call posted nothing",
            vec![reply(1, ReplyState::Sent, Some("77"))],
            vec![call(1, "router-gh-1", Some(502), None)],
            vec![Kind::ReplyAttempt, Kind::ReplyNotForwarded],
        ),
        (
            "a forwarded message with no reply-log entry",
            vec![],
            vec![call(1, "router-gh-1", Some(201), Some("77"))],
            vec![Kind::MessageWithoutReply],
        ),
        (
            "the reply's body sent somewhere else",
            vec![reply(1, ReplyState::Sent, Some("77"))],
            vec![wrong_target],
            vec![Kind::ReplyMismatch, Kind::ReplyNotForwarded],
        ),
        (
            "a second copy: posted as another message than the outbox's",
            vec![reply(1, ReplyState::Sent, Some("77"))],
            vec![
                call(1, "router-gh-1", Some(201), Some("77")),
                call(1, "router-gh-1", Some(201), Some("78")),
            ],
            vec![Kind::ReplyDelivered, Kind::ReplyMismatch],
        ),
        (
            "a worker identity no ticket explains",
            vec![],
            vec![call(5, "tkt_9", Some(201), Some("80"))],
            vec![Kind::WorkerWithoutTicket],
        ),
        (
            "control: a worker's message on a known ticket",
            vec![],
            vec![known_worker],
            vec![Kind::WorkerDirect],
        ),
        (
            "control: an unsent reply reached nobody",
            vec![reply(1, ReplyState::Failed, None)],
            vec![],
            vec![Kind::ReplyUndelivered],
        ),
        (
            "control: a retry after an unknown outcome posts the same message",
            vec![reply(1, ReplyState::Sent, Some("77"))],
            vec![
                call(1, "router-gh-1", None, None),
                call(1, "router-gh-1", Some(200), Some("77")),
            ],
            vec![Kind::ReplyAttempt, Kind::ReplyDelivered],
        ),
    ];
    for (name, replies, calls, want) in cases {
        let (f, s) = run(replies, calls, vec![]);
        assert_eq!(kinds(&f), want, "{name}: {f:#?}");
        let unexplained = want.iter().filter(|k| !k.explained()).count() as u64;
        assert_eq!(s.unexplained, unexplained, "{name}");
        assert!(f.iter().all(|f| !f.why.is_empty()), "{name}");
    }
}

#[test]
fn a_message_the_platform_lists_that_no_call_created_is_unexplained() {
    let (f, s) = run(
        vec![reply(1, ReplyState::Sent, Some("77"))],
        vec![call(1, "router-gh-1", Some(201), Some("77"))],
        vec![platform("github:comment:77"), platform("github:comment:99")],
    );
    assert_eq!(
        kinds(&f),
        vec![
            Kind::PlatformExplained,
            Kind::ReplyDelivered,
            Kind::PlatformUnexplained
        ]
    );
    assert_eq!(s.unexplained, 1);
    assert!(f[2].why.contains("outside gatehouse"), "{:?}", f[2]);
    // A call that posted nothing explains nothing on the platform.
    let (f, _) = run(
        vec![],
        vec![call(1, "tkt_1", Some(422), Some("99"))],
        vec![platform("github:comment:99")],
    );
    assert!(kinds(&f).contains(&Kind::PlatformUnexplained), "{f:#?}");
}

#[test]
fn a_broken_chain_is_always_reported() {
    let mut rec = Reconciler::new(
        Window {
            since: Some(10_000),
            until: None,
        },
        HOUR,
    );
    rec.broken(5, "audit.jsonl:3", "prev does not match");
    let (f, s) = rec.finish();
    assert_eq!(kinds(&f), vec![Kind::AuditLogBroken]);
    assert_eq!(s.unexplained, 1);
    assert!(f[0].why.contains("audit.jsonl:3"));
}

#[test]
fn the_window_reports_only_what_lies_in_it_but_matches_across_its_edges() {
    // Logged before the window, sent inside it: the call is explained.
    let mut rec = Reconciler::new(
        Window {
            since: Some(1_200),
            until: Some(5_000),
        },
        HOUR,
    );
    rec.reply(reply(1, ReplyState::Sent, Some("77")));
    rec.message(call(1, "router-gh-1", Some(201), Some("77")));
    // Outside the window on both sides: not reported.
    rec.reply(reply(9, ReplyState::Sent, Some("90")));
    rec.message(call(0, "router-gh-1", Some(201), Some("1")));
    let (f, s) = rec.finish();
    assert_eq!(kinds(&f), vec![Kind::ReplyDelivered], "{f:#?}");
    assert_eq!((s.replies, s.message_calls, s.unexplained), (0, 1, 0));
}

#[test]
fn a_reply_waits_one_horizon_then_memory_lets_it_go() {
    let mut rec = Reconciler::new(Window::default(), HOUR);
    for n in 0..1000 {
        let mut r = reply(n, ReplyState::Sent, Some("1"));
        r.at = u64::from(n) * HOUR / 10;
        rec.reply(r);
        rec.advance(u64::from(n) * HOUR / 10);
        assert!(rec.entries.len() <= 11, "{}", rec.entries.len());
    }
    // Its call after the horizon: both sides unexplained.
    let mut rec = Reconciler::new(Window::default(), HOUR);
    rec.reply(reply(1, ReplyState::Sent, Some("77")));
    rec.advance(2 * HOUR);
    let mut late = call(1, "router-gh-1", Some(201), Some("77"));
    late.at = 2 * HOUR;
    rec.message(late);
    let (f, _) = rec.finish();
    assert_eq!(
        kinds(&f),
        vec![Kind::ReplyNotForwarded, Kind::MessageWithoutReply]
    );
}

#[test]
fn platform_keys_of_calls() {
    let mut c = call(1, "tkt_1", Some(201), Some("5"));
    c.target = "acme/widgets".into();
    for (kind, key) in [
        ("github_issue_comment", Some("github:comment:5")),
        (
            "github_review_comment_reply",
            Some("github:review_comment:5"),
        ),
        ("github_pull_request", Some("github:pull:acme/widgets#5")),
        ("feishu_reply", Some("feishu:message:5")),
        ("feishu_message", Some("feishu:message:5")),
        ("github_issue_comment_edit", None),
    ] {
        c.kind = kind.into();
        assert_eq!(c.platform_key().as_deref(), key, "{kind}");
    }
    // A GraphQL mutation's answer names what it created by its url (gh
    // selects only the url): the same key as the REST call's id.
    for (kind, id, key) in [
        (
            "github_issue_comment",
            "https://github.com/acme/widgets/pull/2#issuecomment-5",
            "github:comment:5",
        ),
        (
            "github_pull_request",
            "https://github.com/acme/widgets/pull/5",
            "github:pull:acme/widgets#5",
        ),
        // a url that names no comment is kept whole: it matches nothing
        (
            "github_issue_comment",
            "https://github.com/acme/widgets/pull/2",
            "github:comment:https://github.com/acme/widgets/pull/2",
        ),
        (
            "github_issue_comment",
            "https://github.com/acme/widgets/pull/2#discussion_r5",
            "github:comment:https://github.com/acme/widgets/pull/2#discussion_r5",
        ),
    ] {
        c.kind = kind.into();
        c.message_id = Some(id.into());
        assert_eq!(c.platform_key().as_deref(), Some(key), "{kind} {id}");
    }
    c.message_id = None;
    c.kind = "github_issue_comment".into();
    assert_eq!(c.platform_key(), None);
}
