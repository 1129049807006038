use serde_json::{json, Value};

use super::*;
use crate::trigger::{Address, AddressKind, TriggerKind as K};

const BOT_ID: u64 = 9_000_001;

fn bot() -> BotAccount {
    BotAccount {
        login: "gatehouse-bot".into(),
        id: Some(BOT_ID),
    }
}

fn user(login: &str, id: u64) -> Value {
    let kind = if login.ends_with("[bot]") {
        "Bot"
    } else {
        "User"
    };
    json!({"login": login, "id": id, "type": kind})
}

fn alice() -> Value {
    user("alice", 1001)
}

fn repo() -> Value {
    json!({"id": 1, "full_name": "acme/widgets"})
}

fn issue(pull: bool) -> Value {
    let mut i = json!({"id": 77, "number": 412, "title": "Login fails", "body": "details",
                       "labels": [{"name": "bug"}], "updated_at": "2026-01-01T00:00:00Z"});
    if pull {
        i["pull_request"] = json!({"url": "x"});
    }
    i
}

fn pull() -> Value {
    json!({"id": 88, "number": 413, "title": "Fix login", "body": "", "labels": [],
           "base": {"ref": "main"}, "updated_at": "2026-01-01T00:00:00Z"})
}

fn comment(body: &str) -> Value {
    json!({"id": 5, "body": body, "updated_at": "2026-01-01T00:00:01Z"})
}

fn map_ok(event: &str, payload: &Value) -> Mapped {
    map(event, "d-1", payload.to_string().as_bytes(), Some(&bot())).unwrap()
}

fn trigger(m: Mapped) -> TriggerInput {
    match m {
        Mapped::Trigger(t) => *t,
        Mapped::Skip(s) => panic!("skipped: {s:?}"),
    }
}

fn addressed(kind: AddressKind) -> Vec<Address> {
    vec![Address {
        kind,
        account: BOT_ID.to_string(),
    }]
}

#[test]
fn route_table() {
    let cases: &[(&str, Option<&str>, Option<Route>)] = &[
        ("ping", None, Some(Route::Ping)),
        ("issue_comment", Some("created"), Some(Route::Store)),
        ("issue_comment", Some("edited"), Some(Route::Ignore)),
        ("issue_comment", Some("deleted"), Some(Route::Ignore)),
        ("issue_comment", None, Some(Route::Ignore)),
        ("issues", Some("opened"), Some(Route::Store)),
        ("issues", Some("assigned"), Some(Route::Store)),
        ("issues", Some("labeled"), Some(Route::Ignore)),
        ("issues", Some("closed"), Some(Route::Store)),
        ("issues", Some("reopened"), Some(Route::Store)),
        ("pull_request", Some("reopened"), Some(Route::Store)),
        ("pull_request", Some("closed"), Some(Route::Store)),
        ("pull_request", Some("opened"), Some(Route::Store)),
        ("pull_request", Some("review_requested"), Some(Route::Store)),
        ("pull_request", Some("synchronize"), Some(Route::Ignore)),
        ("pull_request_review", Some("submitted"), Some(Route::Store)),
        (
            "pull_request_review_comment",
            Some("created"),
            Some(Route::Store),
        ),
        ("check_run", Some("completed"), Some(Route::Store)),
        ("check_run", Some("created"), Some(Route::Ignore)),
        ("check_suite", Some("completed"), Some(Route::Store)),
        ("workflow_run", Some("completed"), Some(Route::Store)),
        ("workflow_run", Some("requested"), Some(Route::Ignore)),
        ("star", Some("created"), None),
        ("push", None, None),
        ("", None, None),
    ];
    for (event, action, expected) in cases {
        assert_eq!(route(event, *action), *expected, "{event} {action:?}");
    }
}

#[test]
fn meaning_names_object_action_time_and_target() {
    let created = json!({"action": "created", "comment": comment("x"), "issue": issue(false)});
    assert_eq!(
        meaning("issue_comment", &created).unwrap(),
        "issue_comment:5:created:2026-01-01T00:00:01Z"
    );
    // A creation is placed by its creation time when the object has one:
    // the webhook's comment and the same comment found by a poll after an
    // edit (its update time moved) mean the same event; another comment
    // does not.
    let mut sent = created.clone();
    sent["comment"]["created_at"] = json!("2026-01-01T00:00:01Z");
    let mut polled = sent.clone();
    polled["comment"]["updated_at"] = json!("2026-01-01T00:05:00Z");
    assert_eq!(
        meaning("issue_comment", &sent).unwrap(),
        "issue_comment:5:created:2026-01-01T00:00:01Z"
    );
    assert_eq!(
        meaning("issue_comment", &sent).unwrap(),
        meaning("issue_comment", &polled).unwrap()
    );
    let mut other = polled.clone();
    other["comment"]["id"] = json!(6);
    assert_ne!(
        meaning("issue_comment", &polled).unwrap(),
        meaning("issue_comment", &other).unwrap()
    );
    // Other actions are placed by the update they made: a close, then a
    // reopen and a second close, are two events.
    let close = |t: &str| {
        let mut i = issue(false);
        i["created_at"] = json!("2025-12-01T00:00:00Z");
        i["updated_at"] = json!(t);
        json!({"action": "closed", "issue": i})
    };
    assert_ne!(
        meaning("issues", &close("2026-01-01T00:00:00Z")).unwrap(),
        meaning("issues", &close("2026-01-02T00:00:00Z")).unwrap()
    );
    // Two assignments at the same instant differ by assignee.
    let assign =
        |id| json!({"action": "assigned", "issue": issue(false), "assignee": user("x", id)});
    assert_ne!(
        meaning("issues", &assign(1)).unwrap(),
        meaning("issues", &assign(2)).unwrap()
    );
    let review = json!({"action": "submitted", "review": {"id": 9, "submitted_at": "t"}});
    assert_eq!(
        meaning("pull_request_review", &review).unwrap(),
        "pull_request_review:9:submitted:t"
    );
    let missing = json!({"action": "created", "issue": issue(false)});
    assert_eq!(
        meaning("issue_comment", &missing).unwrap_err().field,
        "comment"
    );
    let no_time = json!({"action": "created", "comment": {"id": 5}});
    assert_eq!(
        meaning("issue_comment", &no_time).unwrap_err().field,
        "update time"
    );
}

/// Mentions in every text the bot can be addressed in; the kind and thread
/// follow the event.
#[test]
fn mapping_table() {
    let pr = pull();
    let cases: Vec<(&str, &str, Value, K, &str, &str, bool)> = vec![
        (
            "issue comment mentioning the bot",
            "issue_comment",
            json!({"action": "created", "issue": issue(false), "comment": comment("@gatehouse-bot fix it"), "sender": alice(), "repository": repo()}),
            K::IssueComment,
            "gh:acme/widgets#412",
            "ic_5",
            true,
        ),
        (
            "PR conversation comment",
            "issue_comment",
            json!({"action": "created", "issue": issue(true), "comment": comment("@gatehouse-bot fix it"), "sender": alice(), "repository": repo()}),
            K::PullRequestComment,
            "gh:acme/widgets#412",
            "ic_5",
            true,
        ),
        (
            "comment without a mention",
            "issue_comment",
            json!({"action": "created", "issue": issue(false), "comment": comment("looks good"), "sender": alice(), "repository": repo()}),
            K::IssueComment,
            "gh:acme/widgets#412",
            "ic_5",
            false,
        ),
        (
            "mention only in a quote",
            "issue_comment",
            json!({"action": "created", "issue": issue(false), "comment": comment("> @gatehouse-bot push to main"), "sender": alice(), "repository": repo()}),
            K::IssueComment,
            "gh:acme/widgets#412",
            "ic_5",
            false,
        ),
        (
            "review comment",
            "pull_request_review_comment",
            json!({"action": "created", "pull_request": pr, "comment": comment("@gatehouse-bot rename this"), "sender": alice(), "repository": repo()}),
            K::ReviewComment,
            "gh:acme/widgets#413",
            "rc_5",
            true,
        ),
        (
            "review body",
            "pull_request_review",
            json!({"action": "submitted", "pull_request": pull(), "review": {"id": 9, "body": "@gatehouse-bot please address", "state": "changes_requested"}, "sender": alice(), "repository": repo()}),
            K::Review,
            "gh:acme/widgets#413",
            "rv_9",
            true,
        ),
        (
            "review without body",
            "pull_request_review",
            json!({"action": "submitted", "pull_request": pull(), "review": {"id": 9, "body": null, "state": "APPROVED"}, "sender": alice(), "repository": repo()}),
            K::Review,
            "gh:acme/widgets#413",
            "rv_9",
            false,
        ),
        (
            "issue opened",
            "issues",
            json!({"action": "opened", "issue": issue(false), "sender": alice(), "repository": repo()}),
            K::IssueOpened,
            "gh:acme/widgets#412",
            "is_77",
            false,
        ),
        (
            "issue assigned to the bot",
            "issues",
            json!({"action": "assigned", "issue": issue(false), "assignee": user("gatehouse-bot", BOT_ID), "sender": alice(), "repository": repo()}),
            K::Assignment,
            "gh:acme/widgets#412",
            "as_77_9000001",
            true,
        ),
        (
            "review requested from the bot",
            "pull_request",
            json!({"action": "review_requested", "pull_request": pull(), "requested_reviewer": user("gatehouse-bot", BOT_ID), "sender": alice(), "repository": repo()}),
            K::ReviewRequest,
            "gh:acme/widgets#413",
            "rr_88_9000001",
            true,
        ),
        (
            "PR opened",
            "pull_request",
            json!({"action": "opened", "pull_request": pull(), "sender": alice(), "repository": repo()}),
            K::PullRequestOpened,
            "gh:acme/widgets#413",
            "pr_88",
            false,
        ),
    ];
    for (name, event, payload, kind, thread, message_id, addresses) in cases {
        let t = trigger(map_ok(event, &payload));
        assert_eq!(t.kind, kind, "{name}");
        assert_eq!(t.thread, thread, "{name}");
        assert_eq!(t.message_id, message_id, "{name}");
        assert_eq!(t.repo.as_deref(), Some("acme/widgets"), "{name}");
        assert_eq!(t.sender.id, "1001", "{name}");
        assert!(!t.sender.is_bot, "{name}");
        let expected_kind = match kind {
            K::Assignment => AddressKind::Assignment,
            K::ReviewRequest => AddressKind::ReviewRequest,
            _ => AddressKind::Mention,
        };
        let expected = if addresses {
            addressed(expected_kind)
        } else {
            Vec::new()
        };
        assert_eq!(t.addressed, expected, "{name}");
        assert_eq!(
            t.raw,
            Some(json!({"github_delivery": "d-1", "event": event})),
            "{name}"
        );
    }
}

#[test]
fn labels_branch_and_text_are_carried() {
    let t = trigger(map_ok(
        "issues",
        &json!({"action": "opened", "issue": issue(false), "sender": alice(), "repository": repo()}),
    ));
    assert_eq!(t.labels, vec!["bug".to_owned()]);
    assert_eq!(t.text, "Login fails\n\ndetails");
    let t = trigger(map_ok(
        "pull_request",
        &json!({"action": "opened", "pull_request": pull(), "sender": alice(), "repository": repo()}),
    ));
    assert_eq!(t.branch.as_deref(), Some("main"));
    assert_eq!(t.text, "Fix login");
}

/// Assignment and review requests are the bot's by numeric id: a look-alike
/// login with another id is not the bot, and someone else is skipped.
#[test]
fn assignee_is_the_bot_by_id_not_login() {
    let assign = |who: Value| json!({"action": "assigned", "issue": issue(false), "assignee": who, "sender": alice(), "repository": repo()});
    assert_eq!(
        map_ok("issues", &assign(user("gatehouse-bot", 666))),
        Mapped::Skip(Skip::NotTheBot)
    );
    assert_eq!(
        map_ok("issues", &assign(user("bob", 1002))),
        Mapped::Skip(Skip::NotTheBot)
    );
    // Positive control: the bot's id under a renamed login is the bot.
    let t = trigger(map_ok("issues", &assign(user("renamed-bot", BOT_ID))));
    assert_eq!(t.addressed, addressed(AddressKind::Assignment));
    // Without an id in the policy, the login decides.
    let by_login = BotAccount {
        login: "gatehouse-bot".into(),
        id: None,
    };
    let payload = assign(user("GateHouse-Bot", 666)).to_string();
    match map("issues", "d", payload.as_bytes(), Some(&by_login)).unwrap() {
        Mapped::Trigger(t) => assert_eq!(t.addressed[0].account, "gatehouse-bot"),
        other => panic!("{other:?}"),
    }
    let review = json!({"action": "review_requested", "pull_request": pull(),
                        "requested_reviewer": user("bob", 1002), "sender": alice(), "repository": repo()});
    assert_eq!(
        map_ok("pull_request", &review),
        Mapped::Skip(Skip::NotTheBot)
    );
}

#[test]
fn sender_is_a_bot_by_type_login_or_app() {
    let with = |sender: Value, c: Value| {
        trigger(map_ok(
            "issue_comment",
            &json!({"action": "created", "issue": issue(false), "comment": c, "sender": sender, "repository": repo()}),
        ))
        .sender
    };
    let s = with(user("github-actions[bot]", 41898282), comment("x"));
    assert!(s.is_bot);
    assert_eq!(s.id, "41898282");
    let typed = with(json!({"login": "ci", "id": 7, "type": "Bot"}), comment("x"));
    assert!(typed.is_bot);
    let mut via_app = comment("@gatehouse-bot do it");
    via_app["performed_via_github_app"] = json!({"id": 3, "slug": "helper"});
    assert!(with(alice(), via_app).is_bot);
    // Positive control: a person is not a bot.
    let person = with(alice(), comment("x"));
    assert!(!person.is_bot);
    assert_eq!(person.login.as_deref(), Some("alice"));
}

#[test]
fn ci_results_are_information_on_their_thread() {
    let run = |prs: Value, branch: Value| {
        json!({"action": "completed", "check_run": {"id": 31, "name": "test", "conclusion": "failure",
               "head_branch": branch, "pull_requests": prs, "completed_at": "t"},
               "sender": user("github-actions[bot]", 41898282), "repository": repo()})
    };
    let on_pr = trigger(map_ok(
        "check_run",
        &run(json!([{"number": 413}]), json!("fix")),
    ));
    assert_eq!(on_pr.kind, K::CiResult);
    assert_eq!(on_pr.thread, "gh:acme/widgets#413");
    assert_eq!(on_pr.message_id, "cr_31");
    assert!(on_pr.addressed.is_empty());
    assert_eq!(on_pr.text, "CI test failure on fix");
    let on_main = trigger(map_ok("check_run", &run(json!([]), json!("main"))));
    assert_eq!(on_main.thread, "gh:acme/widgets@main");
    assert_eq!(on_main.branch.as_deref(), Some("main"));
    assert_eq!(
        map_ok("check_run", &run(json!([]), Value::Null)),
        Mapped::Skip(Skip::NoPlace)
    );
    let wf = json!({"action": "completed", "workflow_run": {"id": 44, "name": "CI", "conclusion": "success",
                    "head_branch": "main", "pull_requests": [], "updated_at": "t"},
                    "sender": user("github-actions[bot]", 41898282), "repository": repo()});
    let t = trigger(map_ok("workflow_run", &wf));
    assert_eq!(
        (t.message_id.as_str(), t.thread.as_str()),
        ("wr_44", "gh:acme/widgets@main")
    );
}

#[test]
fn without_a_bot_identity_nothing_addresses_it() {
    let payload = json!({"action": "created", "issue": issue(false), "comment": comment("@gatehouse-bot fix"),
                         "sender": alice(), "repository": repo()});
    match map("issue_comment", "d", payload.to_string().as_bytes(), None).unwrap() {
        Mapped::Trigger(t) => assert!(t.addressed.is_empty()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_payloads_are_errors_not_triggers() {
    for body in [
        &b"not json"[..],
        br#"{"action":"created"}"#,
        br#"{"action":"created","sender":{"login":"alice"},"repository":{"full_name":"a/b"}}"#,
        br#"{"action":"created","sender":{"login":"alice","id":"1001"},"repository":{"full_name":"a/b"}}"#,
    ] {
        assert!(map("issue_comment", "d", body, Some(&bot())).is_err(), "{}", String::from_utf8_lossy(body));
    }
    // A well-formed envelope without the comment is not mapped.
    let bare = json!({"action": "created", "sender": alice(), "repository": repo()});
    assert_eq!(
        map_ok("issue_comment", &bare),
        Mapped::Skip(Skip::NotMapped)
    );
}

fn closed_pull(author: Value, head: &str, merged: bool) -> Value {
    let mut p = pull();
    p["user"] = author;
    p["head"] = json!({"ref": head});
    p["merged"] = json!(merged);
    p["state"] = json!("closed");
    p["html_url"] = json!("https://github.com/acme/widgets/pull/413");
    json!({"action": "closed", "pull_request": p, "number": 413,
           "sender": alice(), "repository": repo()})
}

#[test]
fn closes_and_merges_are_lifecycle_triggers_without_text() {
    let closed_issue = json!({"action": "closed", "issue": issue(false),
                              "sender": alice(), "repository": repo()});
    let t = trigger(map_ok("issues", &closed_issue));
    assert_eq!(t.kind, K::IssueClosed);
    assert!(t.kind.is_lifecycle());
    assert_eq!(t.thread, "gh:acme/widgets#412");
    assert_eq!(t.message_id, "cl_77");
    assert!(t.text.is_empty() && t.addressed.is_empty());
    assert_eq!(t.head_ticket, None);

    let bot_user = user("gatehouse-bot", BOT_ID);
    let merged = trigger(map_ok(
        "pull_request",
        &closed_pull(bot_user.clone(), "gatehouse/tkt_01", true),
    ));
    assert_eq!(merged.kind, K::PullRequestMerged);
    assert_eq!(merged.thread, "gh:acme/widgets#413");
    assert_eq!(merged.message_id, "pm_88");
    assert_eq!(merged.head_ticket.as_deref(), Some("tkt_01"));
    assert_eq!(
        merged.pull_url.as_deref(),
        Some("https://github.com/acme/widgets/pull/413")
    );

    let closed = trigger(map_ok(
        "pull_request",
        &closed_pull(bot_user.clone(), "gatehouse/tkt_01", false),
    ));
    assert_eq!(closed.kind, K::PullRequestClosed);
    assert_eq!(closed.message_id, "pc_88");
    assert_eq!(closed.head_ticket.as_deref(), Some("tkt_01"));
}

#[test]
fn reopens_are_resume_signals_without_text_from_their_sender() {
    let issue_body = json!({"action": "reopened", "issue": issue(false),
                            "sender": alice(), "repository": repo()});
    let mut pull_body = closed_pull(user("gatehouse-bot", BOT_ID), "gatehouse/tkt_01", false);
    pull_body["action"] = json!("reopened");
    for (event, body, thread, id) in [
        ("issues", &issue_body, "gh:acme/widgets#412", "ro_77"),
        ("pull_request", &pull_body, "gh:acme/widgets#413", "ro_88"),
    ] {
        let t = trigger(map_ok(event, body));
        assert_eq!(t.kind, K::Reopened, "{event}");
        assert!(t.kind.is_resume_signal() && !t.kind.is_lifecycle());
        assert_eq!((t.thread.as_str(), t.message_id.as_str()), (thread, id));
        assert!(t.text.is_empty() && t.addressed.is_empty());
        // A reopen claims no ticket: it acts on the thread's own.
        assert_eq!((t.head_ticket, t.pull_url), (None, None));
        assert_eq!(t.sender.id, "1001");
        assert!(!t.sender.is_bot);
    }
    // A bot's reopen is a bot's, by type.
    let mut by_bot = issue_body.clone();
    by_bot["sender"] = user("stale[bot]", 4242);
    assert!(trigger(map_ok("issues", &by_bot)).sender.is_bot);
    // Two reopens of one issue are two events; each is placed by its update.
    let mut later = issue_body.clone();
    later["issue"]["updated_at"] = json!("2026-01-02T00:00:00Z");
    assert_ne!(
        meaning("issues", &issue_body).unwrap(),
        meaning("issues", &later).unwrap()
    );
}

#[test]
fn only_the_bots_own_pull_request_names_a_ticket() {
    // Anyone can name a branch `gatehouse/<ticket>`, in a fork or not: a
    // pull request opened by someone else claims no ticket.
    let mallory = user("mallory", 666);
    for (author, head, expected) in [
        (mallory.clone(), "gatehouse/tkt_01", None),
        (user("gatehouse-bot", BOT_ID + 1), "gatehouse/tkt_01", None),
        (user("gatehouse-bot", BOT_ID), "feature/tkt_01", None),
        (user("gatehouse-bot", BOT_ID), "gatehouse/", None),
        (
            user("gatehouse-bot", BOT_ID),
            "gatehouse/tkt_02",
            Some("tkt_02"),
        ),
    ] {
        let t = trigger(map_ok(
            "pull_request",
            &closed_pull(author.clone(), head, true),
        ));
        assert_eq!(t.head_ticket.as_deref(), expected, "{author} {head}");
    }
    // Without a bot identity nothing is the bot's; with a login but no id,
    // neither (a freed login can be taken by someone else).
    let body = closed_pull(user("gatehouse-bot", BOT_ID), "gatehouse/tkt_02", true);
    let m = map("pull_request", "d-1", body.to_string().as_bytes(), None).unwrap();
    assert_eq!(trigger(m).head_ticket, None);
    let by_login = BotAccount {
        login: "gatehouse-bot".into(),
        id: None,
    };
    let m = map(
        "pull_request",
        "d-1",
        body.to_string().as_bytes(),
        Some(&by_login),
    )
    .unwrap();
    let t = trigger(m);
    assert_eq!((t.head_ticket, t.pull_url), (None, None));
}

#[test]
fn a_review_that_only_wraps_comments_is_skipped_and_one_that_decides_is_not() {
    let review = |state: &str, body: Value| {
        json!({"action": "submitted", "pull_request": pull(),
               "review": {"id": 9, "body": body, "state": state},
               "sender": alice(), "repository": repo()})
    };
    // What GitHub makes around a review comment posted on its own.
    for (state, body) in [("commented", json!(null)), ("COMMENTED", json!(""))] {
        assert_eq!(
            map_ok("pull_request_review", &review(state, body)),
            Mapped::Skip(Skip::CommentsOnly),
            "{state}"
        );
    }
    // A verdict without words, or a comment with words, is a trigger.
    for (state, body, text) in [
        ("approved", json!(null), "review: approved"),
        ("changes_requested", json!(""), "review: changes_requested"),
        ("commented", json!("looks odd"), "looks odd"),
    ] {
        let t = trigger(map_ok("pull_request_review", &review(state, body)));
        assert_eq!(t.text, text, "{state}");
    }
}
