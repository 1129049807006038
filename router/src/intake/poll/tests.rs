use serde_json::json;

use super::*;
use crate::intake::github::{self, meaning, BotAccount, Mapped};

const REPO: &str = "acme/widgets";

fn user(login: &str, id: u64) -> Value {
    json!({"login": login, "id": id, "type": "User"})
}

fn issue(number: u64, created: &str, updated: &str) -> Value {
    json!({"id": 7000 + number, "number": number, "title": "Login fails", "body": "details",
           "labels": [{"name": "bug"}], "user": user("alice", 101),
           "created_at": created, "updated_at": updated})
}

fn pull(number: u64, created: &str, updated: &str) -> Value {
    json!({"id": 8000 + number, "number": number, "title": "Fix login", "body": "",
           "labels": [], "base": {"ref": "main"}, "head": {"ref": "fix"},
           "user": user("alice", 101), "merged": false,
           "created_at": created, "updated_at": updated})
}

fn comment(id: u64, body: &str, created: &str, updated: &str) -> Value {
    json!({"id": id, "body": body, "user": user("alice", 101),
           "issue_url": "https://api.github.com/repos/acme/widgets/issues/3",
           "created_at": created, "updated_at": updated})
}

const T0: &str = "2026-12-01T10:00:00Z";
const T1: &str = "2026-12-01T10:00:05Z";
const T2: &str = "2026-12-01T10:01:00Z";

#[test]
fn listing_paths_are_githubs() {
    let cases = [
        (Listing::Issues, "/repos/acme/widgets/issues?state=all&sort=updated&direction=asc&since=2026-12-01T10%3A00%3A00Z&per_page=100&page=1"),
        (Listing::Pulls, "/repos/acme/widgets/pulls?state=all&sort=updated&direction=desc&per_page=100&page=1"),
        (Listing::IssueComments, "/repos/acme/widgets/issues/comments?sort=updated&direction=asc&since=2026-12-01T10%3A00%3A00Z&per_page=100&page=1"),
        (Listing::ReviewComments, "/repos/acme/widgets/pulls/comments?sort=updated&direction=asc&since=2026-12-01T10%3A00%3A00Z&per_page=100&page=1"),
    ];
    for (listing, expected) in cases {
        assert_eq!(listing.path(REPO, T0, 1), expected, "{listing:?}");
    }
    assert_eq!(
        reviews_path(REPO, 4, 2),
        "/repos/acme/widgets/pulls/4/reviews?per_page=100&page=2"
    );
}

#[test]
fn the_cursor_advances_to_the_latest_update_and_never_back() {
    let items = [
        comment(1, "a", T0, T1),
        comment(2, "b", T0, T0),
        comment(3, "c", T1, T2),
    ];
    let cases: [(&str, &[Value], &str); 4] = [
        (T0, &items, T2),
        (T0, &[], T0),
        // An older page never moves the cursor back.
        (T2, &items[..2], T2),
        ("", &items[1..2], T0),
    ];
    for (since, page, expected) in cases {
        assert_eq!(advance(since, page), expected, "{since} {page:?}");
    }
}

#[test]
fn a_newest_first_page_says_when_it_passed_the_cursor() {
    let newer = pull(2, T1, T2);
    let older = pull(1, T0, T0);
    assert!(!passed_cursor(T1, std::slice::from_ref(&newer)));
    assert!(passed_cursor(T1, &[newer.clone(), older.clone()]));
    assert!(!passed_cursor(T1, &[]));
    assert!(passed_cursor(T1, &[older]));
}

#[test]
fn the_etag_is_sent_only_for_the_url_it_answered() {
    let mut state = PollState::starting_at(T0);
    let url = Listing::Issues.path(REPO, T0, 1);
    state.cursors.get_mut(&Listing::Issues).unwrap().etag = Some((url.clone(), "W/\"e1\"".into()));
    assert_eq!(state.etag_for(Listing::Issues, &url), Some("W/\"e1\""));
    assert_eq!(
        state.etag_for(Listing::Issues, &Listing::Issues.path(REPO, T1, 1)),
        None
    );
    assert_eq!(state.etag_for(Listing::Pulls, &url), None);
    // Stored as JSON and read back the same.
    let text = serde_json::to_string(&state).unwrap();
    assert_eq!(serde_json::from_str::<PollState>(&text).unwrap(), state);
}

/// Which items are deliveries: creations at or after the cursor; edits of
/// older items, pull requests in the issue listing and pending reviews
/// are not.
#[test]
fn only_creations_since_the_cursor_are_synthesized() {
    let parent = issue(3, T0, T2);
    let pr = pull(4, T1, T2);
    let review = |state: &str, at: Option<&str>| {
        json!({"id": 55, "body": "looks good", "state": state, "user": user("alice", 101),
               "submitted_at": at})
    };
    let mut pr_as_issue = issue(4, T1, T2);
    pr_as_issue["pull_request"] = json!({"url": "x"});
    let cases: Vec<(Item<'_>, Value, Option<&str>)> = vec![
        (
            Item::IssueComment { issue: &parent },
            comment(1, "hi", T1, T1),
            Some("issue_comment"),
        ),
        (
            Item::IssueComment { issue: &parent },
            comment(1, "edited", T0, T2),
            None,
        ),
        (
            Item::ReviewComment { pull: &pr },
            comment(2, "nit", T1, T1),
            Some("pull_request_review_comment"),
        ),
        (
            Item::ReviewComment { pull: &pr },
            comment(2, "nit", "2026-11-30T00:00:00Z", T2),
            None,
        ),
        (Item::Issue, issue(5, T1, T2), Some("issues")),
        (Item::Issue, issue(5, "2026-11-30T00:00:00Z", T2), None),
        (Item::Issue, pr_as_issue, None),
        (Item::Pull, pull(6, T1, T1), Some("pull_request")),
        (Item::Pull, pull(6, "2026-11-30T00:00:00Z", T2), None),
        (
            Item::Review { pull: &pr },
            review("APPROVED", Some(T2)),
            Some("pull_request_review"),
        ),
        (
            Item::Review { pull: &pr },
            review("PENDING", Some(T2)),
            None,
        ),
        (Item::Review { pull: &pr }, review("PENDING", None), None),
        (
            Item::Review { pull: &pr },
            review("COMMENTED", Some("2026-11-30T00:00:00Z")),
            None,
        ),
    ];
    for (kind, item, expected) in cases {
        let got = synthesize(REPO, kind, &item, T1).map(|p| p.event);
        assert_eq!(got, expected, "{kind:?} {item}");
    }
}

fn webhook_comment(body: &str) -> Value {
    // As GitHub delivers it: the comment just created (its update time is
    // its creation time), the issue, the sender.
    json!({"action": "created", "repository": {"full_name": REPO, "id": 1},
           "sender": user("alice", 101), "issue": issue(3, T0, T1),
           "comment": comment(9, body, T1, T1)})
}

/// The seam with webhooks: a polled item means what its webhook means
/// (found later, after an edit, too) and maps to the same trigger.
#[test]
fn a_polled_item_means_and_maps_as_its_webhook() {
    let bot = BotAccount {
        login: "gatehouse-bot".into(),
        id: Some(900),
    };
    let hook = webhook_comment("@gatehouse-bot fix it");
    let later_issue = issue(3, T0, T2);
    let mut edited = comment(9, "@gatehouse-bot fix it", T1, T2);
    let polled = synthesize(
        REPO,
        Item::IssueComment {
            issue: &later_issue,
        },
        &edited,
        T0,
    )
    .unwrap();
    assert_eq!(polled.event, "issue_comment");
    assert_eq!(
        meaning("issue_comment", &polled.payload).unwrap(),
        meaning("issue_comment", &hook).unwrap()
    );
    let map = |payload: &Value| match github::map(
        "issue_comment",
        "d",
        payload.to_string().as_bytes(),
        Some(&bot),
    )
    .unwrap()
    {
        Mapped::Trigger(t) => *t,
        Mapped::Skip(s) => panic!("{s:?}"),
    };
    assert_eq!(map(&polled.payload), map(&hook));
    // Negative control: another comment means something else.
    edited["id"] = json!(10);
    let other = synthesize(
        REPO,
        Item::IssueComment {
            issue: &later_issue,
        },
        &edited,
        T0,
    )
    .unwrap();
    assert_ne!(
        meaning("issue_comment", &other.payload).unwrap(),
        meaning("issue_comment", &hook).unwrap()
    );
    assert_eq!(Polled::delivery_id("m"), "poll:m");
}

#[test]
fn pace_follows_the_rate_limit_headers() {
    let now = 1_000;
    let h = |remaining, reset, retry_after, poll_interval| RateHeaders {
        remaining,
        reset,
        retry_after,
        poll_interval,
    };
    let cases = [
        // status, headers, interval ─► hold until, interval
        (200, h(Some(4999), Some(4600), None, None), 60, None, 60),
        (304, h(Some(4999), Some(4600), None, None), 60, None, 60),
        // The window spent to the reserve: wait for its reset.
        (
            200,
            h(Some(RESERVE), Some(1300), None, None),
            60,
            Some(1300),
            60,
        ),
        (200, h(Some(0), Some(1300), None, None), 60, Some(1300), 60),
        // A reset already past: go on.
        (200, h(Some(0), Some(900), None, None), 60, None, 60),
        // Primary limit answered 403 or 429.
        (403, h(Some(0), Some(1500), None, None), 60, Some(1500), 60),
        (
            429,
            h(None, None, None, None),
            60,
            Some(1000 + DEFAULT_HOLD_SECS),
            60,
        ),
        // Secondary limit: Retry-After wins.
        (
            403,
            h(Some(10), Some(1500), Some(30), None),
            60,
            Some(1030),
            60,
        ),
        (200, h(None, None, Some(5), None), 60, Some(1005), 60),
        // A 403 that is no limit (a refusal) holds nothing here.
        (403, h(Some(4000), Some(1500), None, None), 60, None, 60),
        // X-Poll-Interval lengthens, never shortens.
        (200, h(None, None, None, Some(120)), 60, None, 120),
        (200, h(None, None, None, Some(10)), 60, None, 60),
    ];
    for (status, headers, interval, hold, new_interval) in cases {
        assert_eq!(
            pace(status, &headers, now, interval),
            Pace {
                hold_until: hold,
                interval: new_interval
            },
            "{status} {headers:?}"
        );
    }
}

#[test]
fn rate_headers_are_read_from_an_answer() {
    let mut map = http::HeaderMap::new();
    map.insert("x-ratelimit-remaining", "12".parse().unwrap());
    map.insert("x-ratelimit-reset", "1700000000".parse().unwrap());
    map.insert("retry-after", " 7 ".parse().unwrap());
    map.insert("x-poll-interval", "junk".parse().unwrap());
    assert_eq!(
        RateHeaders::from_headers(&map),
        RateHeaders {
            remaining: Some(12),
            reset: Some(1_700_000_000),
            retry_after: Some(7),
            poll_interval: None
        }
    );
}

#[test]
fn times_are_written_as_github_writes_them() {
    let cases = [
        (0, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (1_796_161_666, "2026-12-01T21:47:46Z"),
    ];
    for (secs, expected) in cases {
        assert_eq!(iso8601(secs), expected);
    }
    assert_eq!(
        number_from_url(&comment(1, "", T0, T0), "issue_url"),
        Some(3)
    );
    assert_eq!(number_from_url(&json!({}), "issue_url"), None);
}
