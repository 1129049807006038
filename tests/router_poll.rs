//! Polling GitHub end to end, every part a real process
//! (`gatehouse_testkit::live`): `gatehouse router run` with `[github_poll]`
//! reads the GitHub emulator's listings through `gatehouse proxy` with its
//! own `router-github` identity (the proxy injects the token).
//!
//! - A story delivered only by polling (no webhook listener) yields the same
//!   decisions as the same story delivered by webhooks.
//! - Webhooks with a dropped delivery: polling brings it, once; every other
//!   webhook fault (duplicate, reorder, delay, bad signature) changes nothing.
//! - An unchanged listing is asked with `If-None-Match` and answered 304.
//! - A spent rate-limit window holds the poller until its reset (read from
//!   the times the emulator recorded, not from the test's clock).
//! - kill -9 of the router while it polls: nothing lost, nothing twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gatehouse_emulators::{RateLimit, WebhookFaults};
use gatehouse_router::store::{Durability, Store};
use gatehouse_testkit::live::{Intake, LiveWorld, BOT_LOGIN};
use serde_json::Value;

/// A worker that needs no follow-up.
const WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at it' || exit 90
sleep 0.3
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

const POLLING: Intake = Intake {
    webhooks: false,
    poll_secs: Some(1),
};

fn decisions(w: &LiveWorld) -> Vec<Value> {
    Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn trigger_decisions(w: &LiveWorld) -> Vec<Value> {
    decisions(w)
        .into_iter()
        .filter(|d| d["type"] == "trigger")
        .collect()
}

/// Whether a decision is about a trigger the bot itself wrote (its replies,
/// which GitHub shows in every listing; the emulator sends no webhook for
/// a comment made through its API): the gate drops them as its own.
fn by_the_bot(d: &Value) -> bool {
    d["reason"] == "own_message"
}

/// The trigger decisions on issue `n`'s thread.
fn on_issue(w: &LiveWorld, n: u64) -> Vec<Value> {
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let Some(thread) = store
        .read()
        .thread_by_key(&format!("gh:acme/widgets#{n}"))
        .unwrap()
    else {
        return Vec::new();
    };
    trigger_decisions(w)
        .into_iter()
        .filter(|d| d["thread"] == thread.id.as_str())
        .collect()
}

/// A decision with what differs between two runs of one story taken out:
/// ids become their order of appearance, times and delivery ids go.
fn normalized(decisions: &[Value]) -> Vec<Value> {
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    fn walk(v: &mut Value, ids: &mut BTreeMap<String, String>) {
        match v {
            Value::String(s) => {
                for prefix in ["trg_", "thr_", "tkt_", "rpl_"] {
                    if s.starts_with(prefix) {
                        let n = ids.len();
                        let name = ids
                            .entry(s.clone())
                            .or_insert_with(|| format!("{prefix}{n}"));
                        *s = name.clone();
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, ids)),
            Value::Object(o) => {
                // The ack's text names its ticket, whose id differs.
                for key in ["at", "now", "github_delivery", "raw", "text_sha256"] {
                    o.remove(key);
                }
                for (key, x) in o.iter_mut() {
                    if key.ends_with("_at") || key == "time" {
                        *x = Value::Null;
                    }
                    walk(x, ids);
                }
            }
            _ => {}
        }
    }
    decisions
        .iter()
        .cloned()
        .map(|mut d| {
            walk(&mut d, &mut ids);
            d
        })
        .collect()
}

fn count(said: &[String], prefix: &str) -> usize {
    said.iter().filter(|c| c.starts_with(prefix)).count()
}

/// alice opens an issue and asks the bot; the worker fixes it: one ack and
/// one result. Returns the issue's number.
fn story(w: &LiveWorld) -> u64 {
    let n = w
        .github
        .add_issue("acme/widgets", "Login fails", "The form.", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix it", "alice")
        .unwrap();
    w.wait("the result", |w| count(&w.bot_comments(n), "Done:") == 1);
    // Anything that would go out twice has had time to.
    std::thread::sleep(Duration::from_secs(3));
    n
}

fn people_decisions(w: &LiveWorld) -> Vec<Value> {
    normalized(
        &decisions(w)
            .into_iter()
            .filter(|d| !by_the_bot(d))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn a_story_polled_decides_as_the_story_delivered() {
    let hooks = LiveWorld::start(WORKER);
    let n = story(&hooks);
    let by_webhook = people_decisions(&hooks);
    // Negative control: without [github_poll] nothing lists the repository.
    assert!(
        !hooks
            .github
            .requests()
            .iter()
            .any(|r| r.path == "/repos/acme/widgets/issues"),
        "the webhook router polled"
    );
    let said_by_webhook = hooks.bot_comments(n);
    drop(hooks);

    let polled = LiveWorld::start_with(WORKER, POLLING);
    let m = story(&polled);
    assert_eq!(m, n);
    assert!(
        polled
            .github
            .webhook_deliveries()
            .iter()
            .all(|d| d.attempts.iter().all(Result::is_err)),
        "no webhook reached the polling router"
    );
    let by_poll = people_decisions(&polled);
    assert!(by_webhook.len() >= 4, "{by_webhook:#?}");
    assert_eq!(by_poll, by_webhook);
    let said = polled.bot_comments(n);
    assert_eq!(said.len(), said_by_webhook.len(), "{said:?}");
    assert_eq!(count(&said, "On it"), 1, "{said:?}");
    // The bot's own replies were polled too, and ignored as its own.
    let own: Vec<Value> = trigger_decisions(&polled)
        .into_iter()
        .filter(by_the_bot)
        .collect();
    assert_eq!(own.len(), said.len(), "{own:#?}");
    assert!(
        own.iter().all(|d| d["ticket"]["action"] == "none"),
        "{own:#?}"
    );
    // Every request the poller made went through the proxy with the token
    // the proxy injected (the emulator answered none 401).
    let gets: Vec<_> = polled
        .github
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET")
        .collect();
    assert!(gets.len() >= 4);
    assert!(gets.iter().all(|r| r.status != 401), "{gets:?}");
    // ...and the proxy's audit record has them, allowed by the polling
    // rules of the router's own identity.
    let audit = std::fs::read_to_string(polled.dir.path().join("proxy/audit.jsonl")).unwrap();
    let polled_by_rule: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l.to_string().contains("poll-issues-list"))
        .collect();
    assert!(!polled_by_rule.is_empty(), "{audit}");
    assert!(
        polled_by_rule
            .iter()
            .all(|l| l.to_string().contains("router-gh-1")),
        "{polled_by_rule:#?}"
    );
}

/// Webhooks and polling together: each webhook fault, on its own issue;
/// every issue ends with exactly one ack and one result, and its comment is
/// one trigger. A dropped delivery is brought by polling.
#[test]
fn webhook_faults_change_no_decision_when_polling_backs_them() {
    let w = LiveWorld::start_with(
        WORKER,
        Intake {
            webhooks: true,
            poll_secs: Some(1),
        },
    );
    let faults = [
        ("none", WebhookFaults::default()),
        (
            "drop",
            WebhookFaults {
                drop: true,
                ..WebhookFaults::default()
            },
        ),
        (
            "duplicate",
            WebhookFaults {
                duplicate: true,
                ..WebhookFaults::default()
            },
        ),
        (
            "reorder",
            WebhookFaults {
                reorder: true,
                ..WebhookFaults::default()
            },
        ),
        (
            "delay",
            WebhookFaults {
                delay_ms: 1500,
                ..WebhookFaults::default()
            },
        ),
        (
            "bad signature",
            WebhookFaults {
                bad_signature: true,
                ..WebhookFaults::default()
            },
        ),
    ];
    let mut numbers = Vec::new();
    for (name, fault) in faults {
        // The issue is delivered as it should be; its comments under the
        // fault: alice's mention and bob's remark (the gate ignores bob),
        // whose decisions do not depend on their order.
        let n = w
            .github
            .add_issue(
                "acme/widgets",
                &format!("Login fails ({name})"),
                "The form.",
                "alice",
            )
            .unwrap();
        w.github.set_webhook_faults(fault);
        w.github
            .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix it", "alice")
            .unwrap();
        w.github
            .add_issue_comment("acme/widgets", n, "me too", "bob")
            .unwrap();
        w.github.set_webhook_faults(WebhookFaults::default());
        w.wait(&format!("the result under {name}"), |w| {
            count(&w.bot_comments(n), "Done:") == 1
        });
        numbers.push((name, n));
    }
    std::thread::sleep(Duration::from_secs(3));
    // What each person's message decided, whatever order it came in.
    let people = |n| {
        let mut decided: Vec<String> = on_issue(&w, n)
            .into_iter()
            .filter(|d| !by_the_bot(d))
            .map(|d| {
                format!(
                    "{} {} {} {}",
                    d["admission"], d["author"]["name"], d["requester"], d["ticket"]["action"]
                )
            })
            .collect();
        decided.sort();
        decided
    };
    let baseline = people(numbers[0].1);
    assert_eq!(baseline.len(), 3, "{baseline:?}");
    for (name, n) in &numbers {
        assert_eq!(people(*n), baseline, "{name}");
    }
    for (name, n) in numbers.iter().copied() {
        let said = w.bot_comments(n);
        assert_eq!(count(&said, "On it"), 1, "{name}: {said:?}");
        assert_eq!(count(&said, "Done:"), 1, "{name}: {said:?}");
        let people: Vec<Value> = on_issue(&w, n)
            .into_iter()
            .filter(|d| !by_the_bot(d))
            .collect();
        // The issue opened, the mention and bob's remark, once each.
        assert_eq!(people.len(), 3, "{name}: {people:#?}");
    }
    // Under `reorder` bob's remark went out before alice's mention.
    let reordered = numbers
        .iter()
        .find(|(name, _)| *name == "reorder")
        .unwrap()
        .1;
    let comments: Vec<String> = w
        .github
        .webhook_deliveries()
        .iter()
        .filter(|d| d.event == "issue_comment")
        .map(|d| serde_json::from_slice::<Value>(&d.body).unwrap())
        .filter(|v| v["issue"]["number"] == reordered)
        // The bot's own replies are delivered too (the router drops them).
        .filter(|v| v["sender"]["login"] != BOT_LOGIN)
        .map(|v| v["comment"]["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(comments, ["me too", "@gatehouse-bot please fix it"]);
    // The dropped delivery never reached the router; the bad signature was refused.
    let deliveries = w.github.webhook_deliveries();
    assert!(deliveries.iter().any(|d| d.attempts.is_empty()));
    assert!(deliveries.iter().any(|d| d.attempts.contains(&Ok(401))));
}

/// Idle rounds ask with the ETag of the last answer and get 304; a new
/// comment changes the answer (200) and is found.
#[test]
fn an_unchanged_listing_is_a_304() {
    let w = LiveWorld::start_with(WORKER, POLLING);
    let listing = |r: &gatehouse_emulators::RecordedRequest| {
        r.method == "GET" && r.path == "/repos/acme/widgets/issues/comments"
    };
    w.wait("a 304 on the comment listing", |w| {
        w.github
            .requests()
            .iter()
            .any(|r| listing(r) && r.status == 304)
    });
    let requests: Vec<_> = w.github.requests().into_iter().filter(listing).collect();
    let first = &requests[0];
    assert_eq!(first.status, 200);
    assert!(first.header("if-none-match").is_none(), "{first:?}");
    let not_modified = requests.iter().find(|r| r.status == 304).unwrap();
    assert!(not_modified.header("if-none-match").is_some());
    // The proxy injected the credential on each; the router sent none.
    assert!(not_modified.authorization().is_some());
    let before = requests.len();
    let n = w
        .github
        .add_issue("acme/widgets", "Login fails", "The form.", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix it", "alice")
        .unwrap();
    w.wait("the ack", |w| count(&w.bot_comments(n), "On it") == 1);
    let after: Vec<_> = w.github.requests().into_iter().filter(listing).collect();
    assert!(
        after[before..].iter().any(|r| r.status == 200),
        "the changed listing was answered in full"
    );
    // The cursor moved to the comment: later rounds ask from there.
    let since = |r: &gatehouse_emulators::RecordedRequest| {
        let q = r.query.clone().unwrap_or_default();
        q.split('&')
            .find_map(|p| p.strip_prefix("since="))
            .unwrap()
            .replace("%3A", ":")
    };
    let start = since(first);
    w.wait("a round from the new cursor", |w| {
        w.github
            .requests()
            .iter()
            .filter(|r| listing(r))
            .any(|r| since(r) > start)
    });
}

/// A window spent (X-RateLimit-Remaining 0 until X-RateLimit-Reset): the
/// poller sends nothing more until the reset, by the emulator's record.
#[test]
fn a_spent_rate_limit_holds_the_poller_until_its_reset() {
    let w = LiveWorld::start_with(WORKER, POLLING);
    let polls = |w: &LiveWorld| -> Vec<gatehouse_emulators::RecordedRequest> {
        w.github
            .requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path.starts_with("/repos/acme/widgets/"))
            .collect()
    };
    w.wait("a first round", |w| polls(w).len() >= 4);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reset = now + 4;
    w.github.set_rate_limit(Some(RateLimit {
        remaining: 0,
        reset,
        ..RateLimit::default()
    }));
    let seen = polls(&w).len();
    w.wait("the answer that spends the window", |w| {
        polls(w).len() > seen
    });
    let spent_at = polls(&w)[seen].at_ms;
    w.wait("polling after the reset", |w| {
        polls(w).iter().any(|r| r.at_ms >= reset * 1000)
    });
    let record = polls(&w);
    let next = record
        .get(seen + 1)
        .expect("a request after the spent answer");
    assert!(
        next.at_ms >= reset * 1000,
        "a request at {} ms, before the reset at {} s (spent at {spent_at} ms)",
        next.at_ms,
        reset
    );
    w.github.set_rate_limit(None);
}

/// Retry-After (a secondary limit, answered 403) holds the poller for its
/// seconds; X-Poll-Interval lengthens the rounds.
#[test]
fn retry_after_holds_the_poller() {
    let w = LiveWorld::start_with(WORKER, POLLING);
    let polls = |w: &LiveWorld| -> Vec<gatehouse_emulators::RecordedRequest> {
        w.github
            .requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path.starts_with("/repos/acme/widgets/"))
            .collect()
    };
    w.wait("a first round", |w| polls(w).len() >= 4);
    w.github.set_rate_limit(Some(RateLimit {
        remaining: 4000,
        reset: 0,
        retry_after: Some(3),
        refuse_with: Some(403),
        ..RateLimit::default()
    }));
    let seen = polls(&w).len();
    w.wait("the refused answer", |w| polls(w).len() > seen);
    let refused = polls(&w)[seen].clone();
    assert_eq!(refused.status, 403);
    w.github.set_rate_limit(None);
    w.wait("polling again", |w| polls(w).len() > seen + 1);
    let next = polls(&w)[seen + 1].clone();
    assert!(
        next.at_ms >= refused.at_ms + 3000,
        "asked again {} ms after a Retry-After of 3 s",
        next.at_ms - refused.at_ms
    );
}

/// kill -9 of the router over and over while it polls and the story
/// happens: every comment is one trigger, the ack and the result go once.
#[test]
fn kill_9_while_polling_loses_nothing_and_doubles_nothing() {
    let mut w = LiveWorld::start_with(WORKER, POLLING);
    let n = w
        .github
        .add_issue("acme/widgets", "Login fails", "The form.", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix it", "alice")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut i = 0u64;
    let mut extra = 0;
    while count(&w.bot_comments(n), "Done:") == 0 {
        assert!(Instant::now() < deadline, "stuck; router log:\n{}", w.log());
        std::thread::sleep(Duration::from_millis(200 + (i * 173) % 900));
        w.kill_router();
        if extra < 3 {
            // Comments made while the router is down come with the backfill
            // (bob's: the gate ignores them, so they cannot resume the
            // ticket once it ended, yet each is a trigger decided once).
            w.github
                .add_issue_comment("acme/widgets", n, &format!("note {extra}"), "bob")
                .unwrap();
            extra += 1;
        }
        w.start_router();
        i += 1;
    }
    std::thread::sleep(Duration::from_secs(3));
    let said = w.bot_comments(n);
    assert_eq!(count(&said, "On it"), 1, "{said:?}");
    assert_eq!(count(&said, "Done:"), 1, "{said:?}");
    let people: Vec<Value> = trigger_decisions(&w)
        .into_iter()
        .filter(|d| !by_the_bot(d))
        .collect();
    // The issue, the mention and each note: once each, and bob's ignored.
    assert_eq!(people.len(), 2 + extra, "{people:#?}");
    let ignored = people.iter().filter(|d| d["admission"] == "ignore").count();
    assert_eq!(ignored, extra, "{people:#?}");
    assert!(i >= 2, "the router was killed {i} times only");
    // Every stored delivery was decided; all came by polling.
    let deliveries = Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .deliveries()
        .unwrap();
    assert!(deliveries.iter().all(|d| d.processed.is_some()));
    assert!(deliveries
        .iter()
        .all(|d| d.delivery_id.starts_with("poll:")));
}
