//! Live intake end to end: the GitHub emulator's state changes arrive as
//! signed webhooks at the router's listener and become decisions once, also
//! when a delivery is duplicated, redelivered or badly signed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_emulators::{
    user_id, GithubEmulator, GithubHandle, GithubOptions, RepoSpec, WebhookFaults,
};
use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::intake::{Intake, ListenerConfig, WebhookSecrets};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{DeliveryLog, Durability, Store};
use serde_json::Value;

const SECRET: &str = "emulator-webhook-secret";

fn policy() -> Policy {
    let text = format!(
        r#"
identity = {{ github = {{ login = "gatehouse-bot", id = {bot} }} }}

[[people]]
name = "alice"
team = "core"
github = {{ login = "alice", id = {alice} }}

[teams.core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["github-repo"]
"#,
        bot = user_id("gatehouse-bot"),
        alice = user_id("alice"),
    );
    Policy::from_toml("policy.toml", &text).unwrap()
}

struct World {
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
    _intake: Intake,
    github: GithubHandle,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("router.db");
    let store = Store::open(&state, Durability::Normal).unwrap();
    let router = Router::new(store, policy(), RulesOnlyJudge, 1).unwrap();
    let intake = Intake::start(
        router,
        &state,
        Durability::Normal,
        WebhookSecrets::from_secrets(&[SECRET]).unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        ListenerConfig::default(),
    )
    .unwrap();
    let url = format!("http://{}/webhook", intake.addr());
    let github = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .repo(RepoSpec::new("acme", "widgets"))
            .webhook(&url, SECRET),
    )
    .unwrap();
    World {
        _dir: dir,
        state,
        _intake: intake,
        github,
    }
}

/// Waits until the router has processed every stored delivery (its
/// processor is a thread of its own); a deadline, not a timing assertion.
fn settle(state: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = DeliveryLog::open(state, Durability::Normal).unwrap();
    while !log.read().pending_deliveries(1).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "deliveries still pending");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn trigger_decisions(state: &Path) -> Vec<Value> {
    settle(state);
    let store = Store::open(state, Durability::Normal).unwrap();
    store
        .read()
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "trigger")
        .collect()
}

fn last_attempts(github: &GithubHandle) -> Vec<Result<u16, String>> {
    github.webhook_deliveries().last().unwrap().attempts.clone()
}

#[test]
fn a_comment_mentioning_the_bot_is_one_trigger_and_one_decision() {
    let w = world();
    let number = w
        .github
        .add_issue(
            "acme/widgets",
            "Login fails",
            "valid emails are rejected",
            "alice",
        )
        .unwrap();
    assert_eq!(last_attempts(&w.github), vec![Ok(200)]);
    w.github
        .add_issue_comment(
            "acme/widgets",
            number,
            "@gatehouse-bot please fix this",
            "alice",
        )
        .unwrap();
    let delivery = w.github.webhook_deliveries().last().unwrap().clone();
    assert_eq!(delivery.event, "issue_comment");
    assert_eq!(delivery.attempts, vec![Ok(200)]);
    let decisions = trigger_decisions(&w.state);
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    // The issue itself: alice wrote without addressing the bot.
    assert_eq!(decisions[0]["admission"], "candidate");
    assert_eq!(decisions[1]["admission"], "explicit");
    assert_eq!(decisions[1]["via"], "mention");
    assert_eq!(decisions[1]["ticket"]["action"], "opened");

    // The same delivery again (GitHub's redelivery): acknowledged, no new trigger.
    assert_eq!(w.github.redeliver(&delivery.guid).unwrap(), Ok(200));
    assert_eq!(trigger_decisions(&w.state).len(), 2);

    // Every delivery sent twice: one trigger each.
    w.github.set_webhook_faults(WebhookFaults {
        duplicate: true,
        ..WebhookFaults::default()
    });
    w.github
        .add_issue_comment("acme/widgets", number, "also the signup form", "alice")
        .unwrap();
    assert_eq!(last_attempts(&w.github), vec![Ok(200), Ok(200)]);
    let decisions = trigger_decisions(&w.state);
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert_eq!(decisions[2]["ticket"]["action"], "pass_through");

    // A delivery signed with another secret is refused and changes nothing.
    w.github.set_webhook_faults(WebhookFaults {
        bad_signature: true,
        ..WebhookFaults::default()
    });
    w.github
        .add_issue_comment("acme/widgets", number, "@gatehouse-bot and this", "alice")
        .unwrap();
    assert_eq!(last_attempts(&w.github), vec![Ok(401)]);
    assert_eq!(trigger_decisions(&w.state).len(), 3);

    // Redelivered correctly signed (the recovery path), it is decided once.
    w.github.set_webhook_faults(WebhookFaults::default());
    let refused = w.github.webhook_deliveries().last().unwrap().guid.clone();
    assert_eq!(w.github.redeliver(&refused).unwrap(), Ok(200));
    assert_eq!(trigger_decisions(&w.state).len(), 4);
    let stored = DeliveryLog::open(&w.state, Durability::Normal)
        .unwrap()
        .read()
        .deliveries()
        .unwrap();
    assert_eq!(stored.len(), 4, "one stored delivery per event");
}

#[test]
fn assignment_and_review_requests_address_the_bot_by_id() {
    let w = world();
    let issue = w
        .github
        .add_issue("acme/widgets", "Flaky test", "", "alice")
        .unwrap();
    w.github
        .assign("acme/widgets", issue, "gatehouse-bot", "alice")
        .unwrap();
    // Assigned to someone else: stored, skipped, no trigger.
    w.github
        .assign("acme/widgets", issue, "bob", "alice")
        .unwrap();
    let decisions = trigger_decisions(&w.state);
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[1]["admission"], "explicit");
    assert_eq!(decisions[1]["via"], "assignment");
    // A branch with a commit: GitHub opens no pull request from main into main.
    w.github
        .add_branch("acme/widgets", "alice/flake", "main")
        .unwrap();
    let pull = w
        .github
        .add_pull(
            "acme/widgets",
            "Fix the flake",
            "alice/flake",
            "main",
            "alice",
        )
        .unwrap();
    w.github
        .request_review("acme/widgets", pull, "gatehouse-bot", "alice")
        .unwrap();
    w.github
        .request_review("acme/widgets", pull, "bob", "alice")
        .unwrap();
    let decisions = trigger_decisions(&w.state);
    assert_eq!(decisions.len(), 4, "{decisions:?}");
    assert_eq!(
        decisions[2]["admission"], "candidate",
        "the pull request opened"
    );
    assert_eq!(decisions[3]["admission"], "explicit");
    assert_eq!(decisions[3]["via"], "review_request");
    let attempts: Vec<_> = w
        .github
        .webhook_deliveries()
        .iter()
        .map(|d| (d.event.clone(), d.action.clone(), d.attempts.clone()))
        .collect();
    assert!(
        attempts.iter().all(|(_, _, a)| a == &vec![Ok(200)]),
        "{attempts:?}"
    );
}
