//! The GitHub emulator driven by real curl over TLS, trusting only the test CA.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use gatehouse_emulators::{CommentKind, GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use serde_json::Value;

struct Curl {
    status: u16,
    headers: String,
    body: String,
}

impl Curl {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `curl` against `host` resolved to the emulator, verifying TLS with the test CA.
fn curl(emulator: &GithubHandle, ca: &Path, host: &str, args: &[&str], url_path: &str) -> Curl {
    let port = emulator.addr().port();
    let output = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(["-D", "-", "-o", "-"])
        .args(args)
        .arg(format!("https://{host}:{port}{url_path}"))
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

fn start(dir: &Path) -> GithubHandle {
    GithubEmulator::start(
        GithubOptions::new(dir.join("git"))
            .token("ghs_test_valid_token", "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .expect("emulator starts")
}

#[test]
fn issue_read_and_comment_round_trip_with_recording() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "Crash on start", "It crashes.", "alice")
        .unwrap();
    let auth = ["-H", "Authorization: token ghs_test_valid_token"];

    let issue = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        "/repos/acme/widgets/issues/1",
    );
    assert_eq!(issue.status, 200, "{}", issue.body);
    let issue = issue.json();
    assert_eq!(issue["number"], 1);
    assert_eq!(issue["title"], "Crash on start");
    assert_eq!(issue["user"]["login"], "alice");
    assert_eq!(
        issue["html_url"],
        "https://github.com/acme/widgets/issues/1"
    );

    let mut args = auth.to_vec();
    args.extend([
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data",
        r#"{"body":"On it."}"#,
    ]);
    let created = curl(
        &emulator,
        &ca,
        "api.github.com",
        &args,
        "/repos/acme/widgets/issues/1/comments",
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    let id = created["id"].as_u64().unwrap();
    assert_eq!(created["body"], "On it.");
    assert_eq!(created["user"]["login"], "gatehouse-test[bot]");
    assert_eq!(
        created["html_url"],
        format!("https://github.com/acme/widgets/issues/1#issuecomment-{id}")
    );
    assert_eq!(
        created["url"],
        format!("https://api.github.com/repos/acme/widgets/issues/comments/{id}")
    );

    let comments = emulator.comments();
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].kind, CommentKind::Issue);
    assert_eq!(comments[0].id, id);
    assert_eq!(comments[0].body, "On it.");

    let requests = emulator.requests();
    assert_eq!(requests.len(), 2);
    let post = &requests[1];
    assert_eq!(post.method, "POST");
    assert_eq!(post.host.as_deref(), Some("api.github.com"));
    assert_eq!(post.path, "/repos/acme/widgets/issues/1/comments");
    assert_eq!(post.authorization(), Some("token ghs_test_valid_token"));
    assert_eq!(post.body_text(), r#"{"body":"On it."}"#);
    assert_eq!(post.status, 201);
    assert_eq!(post.created_id, Some(id.to_string()));

    // Listing sees it, through the re-cased name too.
    let list = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        "/repos/ACME/Widgets/issues/1/comments",
    );
    assert_eq!(list.json().as_array().unwrap().len(), 1);
    emulator.shutdown();
}

#[test]
fn unauthenticated_and_wrong_token_get_github_401() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();

    let none = curl(
        &emulator,
        &ca,
        "api.github.com",
        &[],
        "/repos/acme/widgets/issues/1",
    );
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["message"], "Requires authentication");
    assert!(none.json()["documentation_url"].is_string());

    for header in [
        "Authorization: token ghs_wrong",
        "Authorization: Bearer ghs_test_valid_tokenX",
        "Authorization: Basic eC1hY2Nlc3MtdG9rZW46d3Jvbmc=",
    ] {
        let mut args = vec!["-H", header, "-X", "POST", "--data", r#"{"body":"sneaky"}"#];
        args.push("-H");
        args.push("Content-Type: application/json");
        let bad = curl(
            &emulator,
            &ca,
            "api.github.com",
            &args,
            "/repos/acme/widgets/issues/1/comments",
        );
        assert_eq!(bad.status, 401, "{header}");
        assert_eq!(bad.json()["message"], "Bad credentials");
    }
    assert!(
        emulator.comments().is_empty(),
        "no comment may be created without a valid token"
    );
    assert!(emulator
        .requests()
        .iter()
        .all(|r| r.status == 401 && r.created_id.is_none()));
}

#[test]
fn tls_is_refused_without_the_test_ca_and_valid_for_all_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let port = emulator.addr().port();

    // The system roots do not trust the emulator.
    let untrusted = Command::new("curl")
        .args([
            "-sS",
            "--resolve",
            &format!("api.github.com:{port}:127.0.0.1"),
        ])
        .arg(format!("https://api.github.com:{port}/user"))
        .output()
        .unwrap();
    assert!(!untrusted.status.success());

    // A name outside the certificate fails verification even with the CA.
    let wrong_name = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&ca)
        .args(["--resolve", &format!("evil.example:{port}:127.0.0.1")])
        .arg(format!("https://evil.example:{port}/user"))
        .output()
        .unwrap();
    assert!(!wrong_name.status.success());

    let auth = ["-H", "Authorization: Bearer ghs_test_valid_token"];
    for host in ["api.github.com", "localhost", "127.0.0.1"] {
        let user = curl(&emulator, &ca, host, &auth, "/user");
        assert_eq!(user.status, 200, "{host}");
        assert_eq!(user.json()["login"], "gatehouse-test[bot]");
        assert!(user
            .headers
            .to_ascii_lowercase()
            .contains("x-ratelimit-remaining"));
    }
    // Every name in the certificate verifies; hosts answer only their own paths.
    for host in ["github.com", "open.feishu.cn", "open.larksuite.com"] {
        let other = curl(&emulator, &ca, host, &auth, "/user");
        assert_eq!(other.status, 404, "{host}");
    }
}

#[test]
fn pulls_reviews_replies_and_job_log_redirect() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let auth = ["-H", "Authorization: token ghs_test_valid_token"];
    let post = |path: &str, body: &str| {
        let mut args = auth.to_vec();
        args.extend([
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data",
            body,
        ]);
        curl(&emulator, &ca, "api.github.com", &args, path)
    };

    // GitHub's refusals, each a 422 "Validation Failed" with its reason:
    // a missing head or base, a head with no commit the base lacks.
    let refused = |body: &str| {
        let answer = post("/repos/acme/widgets/pulls", body);
        assert_eq!(answer.status, 422, "{body}: {}", answer.body);
        let v = answer.json();
        assert_eq!(v["message"], "Validation Failed");
        v["errors"][0].clone()
    };
    assert_eq!(
        refused(r#"{"title":"x","head":"gatehouse/nope","base":"main"}"#),
        serde_json::json!({"resource": "PullRequest", "field": "head", "code": "invalid"})
    );
    assert_eq!(
        refused(r#"{"title":"x","head":"main","base":"nope"}"#),
        serde_json::json!({"resource": "PullRequest", "field": "base", "code": "invalid"})
    );
    assert_eq!(
        refused(r#"{"title":"x","head":"main","base":"main"}"#)["message"],
        "No commits between main and main"
    );
    let sha = emulator
        .add_branch("acme/widgets", "gatehouse/fix", "main")
        .unwrap();
    let opened = post(
        "/repos/acme/widgets/pulls",
        r#"{"title":"Fix","head":"gatehouse/fix","base":"main","body":"Fixes #1"}"#,
    );
    assert_eq!(opened.status, 201, "{}", opened.body);
    assert!(
        opened.headers.lines().any(|l| l
            .eq_ignore_ascii_case("location: https://api.github.com/repos/acme/widgets/pulls/1")),
        "{}",
        opened.headers
    );
    let pull = opened.json();
    assert_eq!(pull["number"], 1);
    assert_eq!(pull["html_url"], "https://github.com/acme/widgets/pull/1");
    assert_eq!(pull["head"]["sha"], sha.as_str());
    assert_eq!(pull["base"]["sha"].as_str().unwrap().len(), 40);
    assert_ne!(pull["base"]["sha"], pull["head"]["sha"]);
    assert!(
        pull["mergeable"].is_null() && pull["closed_at"].is_null() && pull["merged_at"].is_null()
    );
    // The same head and base again: GitHub names the existing one's label.
    assert_eq!(
        refused(r#"{"title":"Again","head":"acme:gatehouse/fix","base":"main"}"#)["message"],
        "A pull request already exists for acme:gatehouse/fix."
    );
    // `mergeable` is null until GitHub has computed it; a later read has it.
    let get = |path: &str| curl(&emulator, &ca, "api.github.com", &auth, path);
    let first = get("/repos/acme/widgets/pulls/1").json();
    assert!(first["mergeable"].is_null(), "{first}");
    assert_eq!(first["mergeable_state"], "unknown");
    let second = get("/repos/acme/widgets/pulls/1").json();
    assert_eq!(second["mergeable"], true);
    assert_eq!(second["mergeable_state"], "clean");
    // `head=` filters in `owner:branch` form only; `base` is honoured.
    let numbers = |path: &str| -> Vec<u64> {
        get(path)
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["number"].as_u64().unwrap())
            .collect()
    };
    for (query, expected) in [
        ("", vec![1]),
        ("?head=acme:gatehouse/fix", vec![1]),
        ("?head=acme:gatehouse/other", vec![]),
        ("?head=gatehouse/other", vec![1]),
        ("?base=main", vec![1]),
        ("?base=release", vec![]),
        ("?state=closed", vec![]),
        ("?state=all", vec![1]),
    ] {
        assert_eq!(
            numbers(&format!("/repos/acme/widgets/pulls{query}")),
            expected,
            "{query}"
        );
    }

    let top = emulator
        .add_review_comment("acme/widgets", 1, "README.md", 1, "Typo here", "alice")
        .unwrap();
    let reply = post(
        &format!("/repos/acme/widgets/pulls/1/comments/{top}/replies"),
        r#"{"body":"Fixed."}"#,
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
    let reply = reply.json();
    assert_eq!(reply["in_reply_to_id"], top);
    assert!(reply["html_url"]
        .as_str()
        .unwrap()
        .starts_with("https://github.com/acme/widgets/pull/1#discussion_r"));

    let review = post(
        "/repos/acme/widgets/pulls/1/reviews",
        r#"{"event":"COMMENT","body":"Looks fine."}"#,
    );
    assert_eq!(review.status, 200, "{}", review.body);
    assert_eq!(review.json()["state"], "COMMENTED");

    // The id alias reaches the same repository (a proxy must deny it unless named).
    let repo_id = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        "/repos/acme/widgets",
    )
    .json()["id"]
        .as_u64()
        .unwrap();
    let aliased = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        &format!("/repositories/{repo_id}/pulls/1"),
    );
    assert_eq!(aliased.json()["title"], "Fix");

    // Job logs: 302 to a storage-like host whose signed URL needs no token.
    let sha = pull["head"]["sha"].as_str().unwrap();
    let (run_id, job_id) = emulator
        .add_job(
            "acme/widgets",
            "test",
            sha,
            "failure",
            "thread 'x' panicked\n",
        )
        .unwrap();
    let jobs = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        &format!("/repos/acme/widgets/actions/runs/{run_id}/jobs"),
    );
    assert_eq!(jobs.json()["jobs"][0]["id"], job_id);
    let checks = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        &format!("/repos/acme/widgets/commits/{sha}/check-runs"),
    );
    assert_eq!(checks.json()["check_runs"][0]["conclusion"], "failure");
    // By a branch or tag name too (resolved to its commit), and GitHub's
    // 422 for a ref that names no commit.
    let head_branch = pull["head"]["ref"].as_str().unwrap().replace('/', "%2F");
    for git_ref in [head_branch.as_str(), &sha[..12]] {
        let by_ref = curl(
            &emulator,
            &ca,
            "api.github.com",
            &auth,
            &format!("/repos/acme/widgets/commits/{git_ref}/check-suites"),
        );
        assert_eq!(
            by_ref.json()["total_count"],
            1,
            "{git_ref}: {}",
            by_ref.body
        );
    }
    let main_checks = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        "/repos/acme/widgets/commits/main/check-runs",
    );
    assert_eq!(main_checks.json()["total_count"], 0, "{}", main_checks.body);
    let unknown = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        &format!("/repos/acme/widgets/commits/{}/check-runs", "0".repeat(40)),
    );
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert!(unknown.json()["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("No commit found for SHA: 0000")));
    let logs = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        &format!("/repos/acme/widgets/actions/jobs/{job_id}/logs"),
    );
    assert_eq!(logs.status, 302);
    let location = logs
        .headers
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap()
        .to_owned();
    let prefix = "https://pipelines.actions.githubusercontent.com/";
    assert!(location.starts_with(prefix), "{location}");
    let path = &location[prefix.len() - 1..];
    let fetched = curl(
        &emulator,
        &ca,
        "pipelines.actions.githubusercontent.com",
        &[],
        path,
    );
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.body, "thread 'x' panicked\n");
    let forged = curl(
        &emulator,
        &ca,
        "pipelines.actions.githubusercontent.com",
        &[],
        &format!("/_logs/jobs/{job_id}?sig=00"),
    );
    assert_eq!(forged.status, 403);

    let kinds: Vec<_> = emulator.comments().iter().map(|c| c.kind).collect();
    assert_eq!(kinds, vec![CommentKind::Review, CommentKind::Review]);
    let created: Vec<_> = emulator
        .requests()
        .into_iter()
        .filter_map(|r| r.created_id)
        .collect();
    assert_eq!(created.len(), 3, "pull, reply and review report their ids");
}

#[test]
fn polling_with_etag_gets_304_until_something_changes() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    let auth = "Authorization: token ghs_test_valid_token";
    let path = "/repos/acme/widgets/issues/comments?since=2000-01-01T00:00:00Z";

    let first = curl(&emulator, &ca, "api.github.com", &["-H", auth], path);
    assert_eq!(first.status, 200);
    let etag = first
        .headers
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .unwrap()
        .to_owned();
    let conditional = format!("If-None-Match: {etag}");
    let again = curl(
        &emulator,
        &ca,
        "api.github.com",
        &["-H", auth, "-H", &conditional],
        path,
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());

    emulator
        .add_issue_comment("acme/widgets", 1, "New info", "alice")
        .unwrap();
    let changed = curl(
        &emulator,
        &ca,
        "api.github.com",
        &["-H", auth, "-H", &conditional],
        path,
    );
    assert_eq!(changed.status, 200);
    assert_eq!(changed.json()[0]["body"], "New info");
}

#[test]
fn serves_on_ipv6_loopback() {
    gatehouse_testkit::require!(gatehouse_testkit::Need::Ipv6Loopback);
    let dir = tempfile::tempdir().unwrap();
    let mut options = GithubOptions::new(dir.path().join("git")).token("ghs_v6", "v6[bot]");
    options.listen = "[::1]:0".parse().unwrap();
    let emulator = GithubEmulator::start(options).unwrap();
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let output = Command::new("curl")
        .args(["-sS", "-g", "--cacert"])
        .arg(&ca)
        .args(["-H", "Authorization: token ghs_v6"])
        .arg(format!("{}/user", emulator.base_url()))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let user: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(user["login"], "v6[bot]");
    assert_eq!(emulator.requests()[0].host.as_deref(), Some("::1"));
}

#[test]
fn concurrent_comments_get_distinct_ids_and_are_all_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    let ids: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|worker| {
                let (emulator, ca) = (&emulator, &ca);
                scope.spawn(move || {
                    (0..4)
                        .map(|i| {
                            let body = format!(r#"{{"body":"w{worker} c{i}"}}"#);
                            let args = [
                                "-H",
                                "Authorization: token ghs_test_valid_token",
                                "-X",
                                "POST",
                                "--data",
                                body.as_str(),
                            ];
                            let created = curl(
                                emulator,
                                ca,
                                "api.github.com",
                                &args,
                                "/repos/acme/widgets/issues/1/comments",
                            );
                            assert_eq!(created.status, 201);
                            created.json()["id"].as_u64().unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let unique: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 32);
    assert_eq!(emulator.comments().len(), 32);
    let recorded: std::collections::BTreeSet<_> = emulator
        .requests()
        .into_iter()
        .filter_map(|r| r.created_id)
        .collect();
    assert_eq!(recorded.len(), 32);
}

/// The event, action, sender and payload keys of each delivery after `from`.
fn delivered(emulator: &GithubHandle, from: usize) -> Vec<(String, String, String, Vec<String>)> {
    emulator.webhook_deliveries()[from..]
        .iter()
        .map(|d| {
            let v: Value = serde_json::from_slice(&d.body).unwrap();
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            (
                d.event.clone(),
                d.action.clone().unwrap_or_default(),
                v["sender"]["login"].as_str().unwrap().to_owned(),
                keys,
            )
        })
        .collect()
}

#[test]
fn changes_made_through_the_api_are_delivered_as_webhooks_shaped_like_seeded_ones() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on the target: each delivery is kept with its failed
    // attempt, which is all this test reads.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed_port.local_addr().unwrap());
    drop(closed_port);
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token("ghs_test_valid_token", "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets"))
            .webhook(&url, "s3cret"),
    )
    .unwrap();
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    // The seeded shapes: issue 1 opened, closed and reopened by alice.
    let n = emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    emulator.close("acme/widgets", n, "alice").unwrap();
    emulator.reopen("acme/widgets", n, "alice").unwrap();
    emulator
        .add_issue_comment("acme/widgets", n, "hi", "alice")
        .unwrap();
    let seeded = delivered(&emulator, 0);
    assert_eq!(seeded.len(), 4, "{seeded:?}");

    let api = |method: &str, path: &str, data: &str| {
        let mut args = vec![
            "-H",
            "Authorization: token ghs_test_valid_token",
            "-X",
            method,
        ];
        if !data.is_empty() {
            args.extend(["--data", data]);
        }
        let reply = curl(&emulator, &ca, "api.github.com", &args, path);
        assert!(reply.status < 300, "{}", reply.body);
    };
    let start = emulator.webhook_deliveries().len();
    api(
        "POST",
        "/repos/acme/widgets/issues",
        r#"{"title":"u","body":"v"}"#,
    );
    api(
        "POST",
        "/repos/acme/widgets/issues/1/comments",
        r#"{"body":"On it."}"#,
    );
    api(
        "PATCH",
        "/repos/acme/widgets/issues/1",
        r#"{"state":"closed"}"#,
    );
    api(
        "PATCH",
        "/repos/acme/widgets/issues/1",
        r#"{"state":"open"}"#,
    );
    // Reads and edits the source does not deliver send nothing.
    api("GET", "/repos/acme/widgets/issues/1", "");
    api(
        "PATCH",
        "/repos/acme/widgets/issues/1",
        r#"{"title":"renamed"}"#,
    );
    let bot = "gatehouse-test[bot]".to_owned();
    let got = delivered(&emulator, start);
    // The seeded deliveries in the API calls' order (opened, commented,
    // closed, reopened), sent by the token's account.
    let want: Vec<_> = [0, 3, 1, 2]
        .iter()
        .map(|&k| {
            let (event, action, _, keys) = seeded[k].clone();
            (event, action, bot.clone(), keys)
        })
        .collect();
    assert_eq!(got, want);
    let d = emulator.webhook_deliveries().pop().unwrap();
    assert_eq!(d.url, url);
    assert!(d.attempts.iter().all(Result::is_err), "{:?}", d.attempts);
}

/// GitHub's framing of every API answer: `Location` on a 201, `User-Agent`
/// required (by default), `/api/v3` only in Enterprise mode.
#[test]
fn location_user_agent_and_enterprise_paths_as_github() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token("ghs_test_valid_token", "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    let auth = ["-H", "Authorization: token ghs_test_valid_token"];
    let with = |extra: &[&str], path: &str| {
        let mut args = auth.to_vec();
        args.extend_from_slice(extra);
        curl(&emulator, &ca, "api.github.com", &args, path)
    };
    let created = with(
        &["-X", "POST", "--data", r#"{"body":"hi"}"#],
        "/repos/acme/widgets/issues/1/comments",
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let url = created.json()["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("https://api.github.com/repos/acme/widgets/issues/comments/"));
    assert!(
        created
            .headers
            .lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("location: {url}"))),
        "{}",
        created.headers
    );
    // Pagination links as GitHub sends them: the repository by id, with
    // prev/next/last/first.
    for text in ["two", "three"] {
        emulator
            .add_issue_comment("acme/widgets", 1, text, "alice")
            .unwrap();
    }
    let id = with(&[], "/repos/acme/widgets").json()["id"]
        .as_u64()
        .unwrap();
    let page = with(
        &[],
        "/repos/acme/widgets/issues/1/comments?per_page=1&page=2",
    );
    assert_eq!(page.json().as_array().unwrap().len(), 1);
    let link = page
        .headers
        .lines()
        .find_map(|l| l.strip_prefix("link: "))
        .unwrap_or_else(|| panic!("{}", page.headers));
    // On the host curl asked (its `Host` carries the port).
    let port = emulator.addr().port();
    let u = |n: u32| {
        format!("<https://api.github.com:{port}/repositories/{id}/issues/1/comments?per_page=1&page={n}>")
    };
    assert_eq!(
        link,
        format!(
            "{}; rel=\"prev\", {}; rel=\"next\", {}; rel=\"last\", {}; rel=\"first\"",
            u(1),
            u(3),
            u(3),
            u(1)
        )
    );
    // No User-Agent (curl sends none with an empty header): GitHub's 403.
    let bare = with(&["-H", "User-Agent:"], "/repos/acme/widgets/issues/1");
    assert_eq!(bare.status, 403);
    assert!(bare.body.starts_with("Request forbidden by administrative rules. Please make sure your request has a User-Agent header"), "{}", bare.body);
    // GraphQL alike, before the document is read.
    let bare = with(
        &[
            "-H",
            "User-Agent:",
            "-X",
            "POST",
            "--data",
            r#"{"query":"{ viewer { login } }"}"#,
        ],
        "/graphql",
    );
    assert_eq!(bare.status, 403, "{}", bare.body);
    assert!(bare
        .body
        .starts_with("Request forbidden by administrative rules."));
    assert_eq!(with(&[], "/repos/acme/widgets/issues/1").status, 200);
    // api.github.com has no `/api/v3`; an Enterprise server has.
    assert_eq!(with(&[], "/api/v3/repos/acme/widgets/issues/1").status, 404);
    let enterprise = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git-ghes"))
            .enterprise(true)
            .require_user_agent(false)
            .token("ghs_test_valid_token", "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    enterprise
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    let ghes = curl(
        &enterprise,
        &ca_of(&enterprise, dir.path()),
        "localhost",
        &auth,
        "/api/v3/repos/acme/widgets/issues/1",
    );
    assert_eq!(ghes.status, 200, "{}", ghes.body);
    // Links and a renamed repository's redirect keep the `/api/v3` prefix
    // (a GHES answers `https://HOST/api/v3/repositories/{id}/…`).
    let ghes_ca = ca_of(&enterprise, dir.path());
    let ghes_port = enterprise.addr().port();
    let on_ghes = |extra: &[&str], path: &str| {
        let mut args = auth.to_vec();
        args.extend_from_slice(extra);
        curl(&enterprise, &ghes_ca, "localhost", &args, path)
    };
    for text in ["one", "two"] {
        enterprise
            .add_issue_comment("acme/widgets", 1, text, "alice")
            .unwrap();
    }
    let ghes_id = on_ghes(&[], "/api/v3/repos/acme/widgets").json()["id"]
        .as_u64()
        .unwrap();
    let page = on_ghes(
        &[],
        "/api/v3/repos/acme/widgets/issues/1/comments?per_page=1",
    );
    let next = format!(
        "<https://localhost:{ghes_port}/api/v3/repositories/{ghes_id}/issues/1/comments?per_page=1&page=2>; rel=\"next\""
    );
    assert!(
        page.headers
            .lines()
            .any(|l| l.starts_with("link: ") && l.contains(&next)),
        "{}",
        page.headers
    );
    // A created comment's `Location` and `url` name the server too.
    let created = on_ghes(
        &["-X", "POST", "--data", r#"{"body":"three"}"#],
        "/api/v3/repos/acme/widgets/issues/1/comments",
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let url = created.json()["url"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with(&format!(
            "https://localhost:{ghes_port}/api/v3/repos/acme/widgets/issues/comments/"
        )),
        "{url}"
    );
    assert!(
        created
            .headers
            .lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("location: {url}"))),
        "{}",
        created.headers
    );
    let followed_page = on_ghes(
        &[],
        &format!("/api/v3/repositories/{ghes_id}/issues/1/comments?per_page=1&page=2"),
    );
    assert_eq!(followed_page.status, 200, "{}", followed_page.body);
    assert_eq!(followed_page.json()[0]["body"], "two");
    enterprise.rename_repo("acme/widgets", "gadgets").unwrap();
    let moved = on_ghes(&[], "/api/v3/repos/acme/widgets/issues/1");
    assert_eq!(moved.status, 301, "{}", moved.body);
    let location =
        format!("location: https://localhost:{ghes_port}/api/v3/repositories/{ghes_id}/issues/1");
    assert!(
        moved
            .headers
            .lines()
            .any(|l| l.eq_ignore_ascii_case(&location)),
        "{}",
        moved.headers
    );
    let followed = on_ghes(&["-L"], "/api/v3/repos/acme/widgets/issues/1");
    let after = followed.body.rsplit("\r\n\r\n").next().unwrap_or_default();
    assert!(after.contains("\"number\":1"), "{}", followed.body);
    // With the knob off a request without a User-Agent is answered.
    let kind = curl(
        &enterprise,
        &ca_of(&enterprise, dir.path()),
        "localhost",
        &[auth[0], auth[1], "-H", "User-Agent:"],
        "/api/v3/repos/acme/gadgets/issues/1",
    );
    assert_eq!(kind.status, 200);
    // The API is under `/api/v3` only (elsewhere is a GHES's web interface).
    for outside in ["/repos/acme/gadgets/issues/1", "/graphql", "/user"] {
        assert_eq!(on_ghes(&[], outside).status, 404, "{outside}");
    }
}

fn ca_of(emulator: &GithubHandle, dir: &Path) -> std::path::PathBuf {
    let path = dir.join(format!("ca-{}.pem", emulator.addr().port()));
    emulator.write_ca_pem(&path).unwrap();
    path
}

/// A renamed repository: requests naming the former name are redirected
/// to the same resource by id (301 for GET, 307 for other methods, query
/// kept, GitHub's body), the id form and the new name answer, the bare
/// repository moved, and a new repository of the old name ends it.
#[test]
fn a_renamed_repository_redirects_its_former_name_to_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = ca_of(&emulator, dir.path());
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    let auth = ["-H", "Authorization: token ghs_test_valid_token"];
    let with = |extra: &[&str], path: &str| {
        let mut args = auth.to_vec();
        args.extend_from_slice(extra);
        curl(&emulator, &ca, "api.github.com", &args, path)
    };
    let id = with(&[], "/repos/acme/widgets").json()["id"]
        .as_u64()
        .unwrap();
    emulator.rename_repo("acme/widgets", "gadgets").unwrap();
    assert!(dir.path().join("git/acme/gadgets.git").is_dir());
    assert!(!dir.path().join("git/acme/widgets.git").exists());
    let port = emulator.addr().port();
    let moved = with(&[], "/repos/acme/widgets/issues/1/comments?per_page=1");
    assert_eq!(moved.status, 301, "{}", moved.body);
    let url =
        format!("https://api.github.com:{port}/repositories/{id}/issues/1/comments?per_page=1");
    assert!(
        moved
            .headers
            .lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("location: {url}"))),
        "{}",
        moved.headers
    );
    assert_eq!(moved.json()["message"], "Moved Permanently");
    assert_eq!(moved.json()["url"], url);
    // Other methods are told to repeat themselves there.
    let post = with(
        &["-X", "POST", "--data", r#"{"body":"hi"}"#],
        "/repos/Acme/Widgets/issues/1/comments",
    );
    assert_eq!(post.status, 307, "{}", post.body);
    assert_eq!(post.json()["message"], "Temporary Redirect");
    // curl following the redirect gets the issue; the new name answers too.
    let followed = with(&["-L"], "/repos/acme/widgets/issues/1");
    assert_eq!(followed.status, 301);
    let after = followed.body.rsplit("\r\n\r\n").next().unwrap_or_default();
    assert!(after.contains("\"number\":1"), "{}", followed.body);
    assert_eq!(with(&[], "/repos/acme/gadgets/issues/1").status, 200);
    assert_eq!(
        with(&[], &format!("/repositories/{id}/issues/1")).status,
        200
    );
    // Renaming onto an existing name is refused; a new repository of the
    // old name would end the redirect (GitHub's rule): renaming back does.
    assert!(emulator.rename_repo("acme/gadgets", "gadgets").is_err());
    emulator.rename_repo("acme/gadgets", "widgets").unwrap();
    assert_eq!(with(&[], "/repos/acme/widgets/issues/1").status, 200);
    assert_eq!(with(&[], "/repos/acme/gadgets/issues/1").status, 301);
}
