//! The GitHub emulator's rate limits, driven by real curl over TLS: the
//! `x-ratelimit-*` headers count down per token, a spent budget and held
//! creations are refused as GitHub refuses them, and nothing is created.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RateBudgets, RepoSpec};
use serde_json::Value;

struct Curl {
    status: u16,
    headers: String,
    body: String,
}

impl Curl {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn number(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} in {}", self.headers))
            .parse()
            .unwrap()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn curl(emulator: &GithubHandle, ca: &Path, token: &str, args: &[&str], path: &str) -> Curl {
    let port = emulator.addr().port();
    let output = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("api.github.com:{port}:127.0.0.1")])
        .args(["-H", &format!("Authorization: token {token}")])
        .args(["-D", "-", "-o", "-"])
        .args(args)
        .arg(format!("https://api.github.com:{port}{path}"))
        .output()
        .expect("curl runs");
    assert!(
        output.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let (headers, body) = text.split_once("\r\n\r\n").unwrap();
    let status = headers.split(' ').nth(1).unwrap().parse().unwrap();
    Curl {
        status,
        headers: headers.to_owned(),
        body: body.to_owned(),
    }
}

fn start(dir: &Path) -> (GithubHandle, std::path::PathBuf) {
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.join("git"))
            .token("ghs_limits_token_a", "alice")
            .token("ghs_limits_token_b", "bob")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .expect("emulator starts");
    let ca = dir.join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "Crash", "It crashes.", "alice")
        .unwrap();
    (emulator, ca)
}

const A: &str = "ghs_limits_token_a";
const B: &str = "ghs_limits_token_b";
const ISSUE: &str = "/repos/acme/widgets/issues/1";
const COMMENTS: &str = "/repos/acme/widgets/issues/1/comments";

#[test]
fn remaining_counts_down_per_token_and_a_spent_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (emulator, ca) = start(dir.path());
    emulator.set_rate_budgets(RateBudgets {
        core: 3,
        graphql: 2,
        window_secs: 3600,
        ..RateBudgets::default()
    });
    let first = curl(&emulator, &ca, A, &[], ISSUE);
    assert_eq!(first.status, 200);
    assert_eq!(first.number("x-ratelimit-limit"), 3);
    assert_eq!(first.number("x-ratelimit-remaining"), 2);
    assert_eq!(first.number("x-ratelimit-used"), 1);
    assert_eq!(first.header("x-ratelimit-resource"), Some("core"));
    assert!(first.number("x-ratelimit-reset") > 1_700_000_000);
    // A 304 does not count.
    let etag = first.header("etag").unwrap().to_owned();
    let same = curl(
        &emulator,
        &ca,
        A,
        &["-H", &format!("If-None-Match: {etag}")],
        ISSUE,
    );
    assert_eq!(same.status, 304);
    assert_eq!(same.number("x-ratelimit-remaining"), 2);
    // Nor does GET /rate_limit, which reports the counts.
    let overview = curl(&emulator, &ca, A, &[], "/rate_limit");
    assert_eq!(overview.status, 200);
    assert_eq!(overview.json()["resources"]["core"]["remaining"], 2);
    assert_eq!(
        curl(&emulator, &ca, A, &[], ISSUE).number("x-ratelimit-remaining"),
        1
    );
    assert_eq!(
        curl(&emulator, &ca, A, &[], ISSUE).number("x-ratelimit-remaining"),
        0
    );
    let refused = curl(&emulator, &ca, A, &["-d", r#"{"body":"x"}"#], COMMENTS);
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.number("x-ratelimit-remaining"), 0);
    let body = refused.json();
    assert_eq!(
        body["message"],
        format!(
            "API rate limit exceeded for user ID {}.",
            gatehouse_emulators::user_id("alice")
        )
    );
    assert!(body["documentation_url"]
        .as_str()
        .unwrap()
        .contains("rate-limits"));
    assert!(emulator.comments().is_empty(), "nothing was created");
    // Another token has its own budget, and GraphQL its own resource.
    let other = curl(&emulator, &ca, B, &[], ISSUE);
    assert_eq!(
        (other.status, other.number("x-ratelimit-remaining")),
        (200, 2)
    );
    let query = r#"{"query":"{ viewer { login } }"}"#;
    let q = curl(&emulator, &ca, A, &["-d", query], "/graphql");
    assert_eq!(q.status, 200, "{}", q.body);
    assert_eq!(q.header("x-ratelimit-resource"), Some("graphql"));
    assert_eq!(q.number("x-ratelimit-remaining"), 1);
    assert_eq!(q.json()["data"]["viewer"]["login"], "alice");
    curl(&emulator, &ca, A, &["-d", query], "/graphql");
    let spent = curl(&emulator, &ca, A, &["-d", query], "/graphql");
    assert_eq!(spent.status, 200);
    assert_eq!(spent.json()["errors"][0]["type"], "RATE_LIMITED");
    assert_eq!(spent.number("x-ratelimit-remaining"), 0);
}

#[test]
fn held_creations_get_retry_after_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let (emulator, ca) = start(dir.path());
    for status in [403u16, 429] {
        emulator.hold_creations(120, status).unwrap();
        let held = curl(&emulator, &ca, A, &["-d", r#"{"body":"held"}"#], COMMENTS);
        assert_eq!(held.status, status, "{}", held.body);
        let after = held.number("retry-after");
        assert!((1..=120).contains(&after), "{after}");
        assert!(held.json()["message"]
            .as_str()
            .unwrap()
            .contains("secondary rate limit"));
        let mutation = serde_json::json!({
            "query": "mutation($id: ID!) { addComment(input: {subjectId: $id, body: \"held\"}) { clientMutationId } }",
            "variables": {"id": "I_none"},
        })
        .to_string();
        let m = curl(&emulator, &ca, A, &["-d", &mutation], "/graphql");
        assert_eq!(m.status, status, "{}", m.body);
        assert!(m.header("retry-after").is_some());
        // Reads go on while creations are held.
        let read = curl(&emulator, &ca, A, &[], COMMENTS);
        assert_eq!(read.status, 200);
        assert_eq!(read.header("retry-after"), None);
        assert!(emulator.comments().is_empty(), "nothing was created");
    }
    assert!(emulator.hold_creations(60, 500).is_err());
    // Lifted: the same post is made (the positive control).
    emulator.hold_creations(0, 403).unwrap();
    let made = curl(&emulator, &ca, A, &["-d", r#"{"body":"made"}"#], COMMENTS);
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(emulator.comments().len(), 1);
}

/// GitHub's counted secondary limit (80 creations a minute per token by
/// default; 2 here): the next creation is refused with `retry-after`, REST
/// and GraphQL alike, nothing is created, reads go on, and another token
/// is not held.
#[test]
fn creations_past_the_minutes_limit_are_refused_and_not_made() {
    let dir = tempfile::tempdir().unwrap();
    let (emulator, ca) = start(dir.path());
    emulator.set_rate_budgets(RateBudgets {
        creations_per_minute: 2,
        ..RateBudgets::default()
    });
    for n in 0..2 {
        let made = curl(&emulator, &ca, A, &["-d", r#"{"body":"made"}"#], COMMENTS);
        assert_eq!(made.status, 201, "#{n}: {}", made.body);
        assert_eq!(made.header("retry-after"), None);
    }
    let refused = curl(&emulator, &ca, A, &["-d", r#"{"body":"over"}"#], COMMENTS);
    assert_eq!(refused.status, 403, "{}", refused.body);
    let after = refused.number("retry-after");
    assert!((1..=60).contains(&after), "{after}");
    assert!(refused.json()["message"]
        .as_str()
        .unwrap()
        .contains("secondary rate limit"));
    let mutation = serde_json::json!({
        "query": "mutation($id: ID!) { addComment(input: {subjectId: $id, body: \"over\"}) { clientMutationId } }",
        "variables": {"id": "I_none"},
    })
    .to_string();
    let m = curl(&emulator, &ca, A, &["-d", &mutation], "/graphql");
    assert_eq!(m.status, 403, "{}", m.body);
    assert!(m.header("retry-after").is_some());
    let read = curl(&emulator, &ca, A, &[], COMMENTS);
    assert_eq!(read.status, 200);
    assert_eq!(
        emulator.comments().len(),
        2,
        "the refused ones were not made"
    );
    let other = curl(&emulator, &ca, B, &["-d", r#"{"body":"other"}"#], COMMENTS);
    assert_eq!(other.status, 201, "{}", other.body);
}
