//! Every rule of the shipped `github-read` set, one real round trip each:
//! through the `gatehouse proxy` process, with an identity bound to the
//! repository, to the GitHub emulator and back with GitHub's status. A
//! rule's `[[example]]` shows the proxy allows it; this shows the call then
//! works, so a worker reading contents, commits or check runs is not
//! refused upstream by an emulator kinder or poorer than GitHub. Rules the
//! emulator does not serve yet are listed, by name, with why: a new rule
//! fails this test until it is given a round trip or a reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use gatehouse_emulators::{Annotation, GithubEmulator, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::{admin_call, start_proxy_process_with};
use gatehouse_testkit::proxy::{api_call_text, git_in, push_change, read_all, read_head, tls_over};
use gatehouse_testkit::{bin, random};
use serde_json::Value;

const REPO: &str = "acme/widgets";

/// Rules not given a round trip here, and why.
const NOT_HERE: &[(&str, &str)] = &[
    (
        "git-fetch-refs-git",
        "git's smart HTTP: real git clones through the proxy in proxy_sandbox",
    ),
    (
        "git-fetch-refs",
        "git's smart HTTP: real git clones through the proxy in proxy_sandbox",
    ),
    (
        "git-fetch-git",
        "git's smart HTTP: real git clones through the proxy in proxy_sandbox",
    ),
    (
        "git-fetch",
        "git's smart HTTP: real git clones through the proxy in proxy_sandbox",
    ),
    (
        "graphql-read",
        "GraphQL documents: worker_speech and proxy_scope",
    ),
];

#[test]
fn every_github_read_rule_has_a_round_trip_through_the_proxy_or_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let token = random::token("ghs_");
    let mut spec = RepoSpec::new("acme", "widgets");
    spec.files = vec![
        ("README.md".into(), "# widgets\n".into()),
        (
            "src/lib.rs".into(),
            "pub fn one() -> u32 {\n    1\n}\n".into(),
        ),
        (
            ".github/workflows/ci.yml".into(),
            "name: CI\non: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n".into(),
        ),
    ];
    let github = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(spec),
    )
    .unwrap();
    // The world the reads look at: a branch with a change and its pull
    // request, an issue with a comment, a review and a review comment, a CI job.
    let (work, head) = push_change(
        &github,
        REPO,
        dir.path(),
        "fix",
        &[("src/lib.rs", "pub fn one() -> u32 {\n    2\n}\n")],
        "Return two",
    );
    let tree = git_in(&work, &["rev-parse", "HEAD^{tree}"]);
    let blob = git_in(&work, &["rev-parse", "HEAD:README.md"]);
    let issue = github
        .add_issue(REPO, "Crash", "It crashes.", "alice")
        .unwrap();
    let comment = github
        .add_issue_comment(REPO, issue, "Seen it.", "bob")
        .unwrap();
    github.add_label(REPO, issue, "bug").unwrap();
    let pull = github
        .add_pull(REPO, "Return two", "fix", "main", "alice")
        .unwrap();
    let review = github
        .add_review(REPO, pull, "COMMENTED", "Looks fine", "bob")
        .unwrap();
    let review_comment = github
        .add_review_comment(REPO, pull, "src/lib.rs", 2, "Why two?", "bob")
        .unwrap();
    let (run, job) = github
        .add_workflow_job(
            REPO,
            ".github/workflows/ci.yml",
            "test",
            &head,
            "failure",
            "ok\n",
        )
        .unwrap();
    // What the events, the timeline, a review's comments and a check run's
    // annotations show.
    github.close(REPO, issue, "alice").unwrap();
    github.reopen(REPO, issue, "alice").unwrap();
    let in_review = github
        .add_review_comment_in_review(REPO, pull, review, "src/lib.rs", 2, "Two?", "bob")
        .unwrap();
    github
        .add_annotation(
            REPO,
            job,
            Annotation {
                path: "src/lib.rs".into(),
                start_line: 2,
                end_line: 2,
                level: "failure".into(),
                title: Some("test".into()),
                message: "expected 1, got 2".into(),
                raw_details: None,
            },
        )
        .unwrap();

    let rules = bin::repo_path("sandbox-profiles/rules");
    let proxy = start_proxy_process_with(dir.path(), &github, &token, bin::command(), |d| {
        let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
        let files = format!("rule_set_files = [{:?}]", rules.join("github-read.toml"));
        let config = config.replace("rule_set_files = [\"rules.toml\"]", &files);
        // Job logs redirect to GitHub's storage host: the emulator serves it too.
        let logs = format!(
            "\n[upstream.\"pipelines.actions.githubusercontent.com\"]\nurl = \"https://{}\"\n\
             ca_file = \"upstream-ca.pem\"\n",
            github.addr()
        );
        std::fs::write(d.join("proxy.toml"), config + &logs).unwrap();
    });
    let (status, body) = admin_call(
        &proxy.admin,
        "POST",
        "/identities",
        Some(
            r#"{"name":"tkt_read","rule_sets":["github-read"],"variables":{"repo":"acme/widgets"}}"#,
        ),
    );
    assert_eq!(status, 201, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let socket = PathBuf::from(answer["socket"].as_str().unwrap());

    let r = |tail: &str| format!("/repos/{REPO}{tail}");
    // (rule, request path, status)
    let trips: Vec<(&str, String, u16)> = vec![
        ("repo", r(""), 200),
        ("api-root", "/".into(), 200),
        ("readme", r("/readme"), 200),
        ("contents-root", r("/contents"), 200),
        ("contents", r("/contents/src/lib.rs?ref=fix"), 200),
        ("branches", r("/branches"), 200),
        ("branch", r("/branches/fix"), 200),
        ("commits", r("/commits?sha=fix"), 200),
        ("commit-and-its-checks", r(&format!("/commits/{head}")), 200),
        (
            "commit-and-its-checks",
            r(&format!("/commits/{head}/check-runs")),
            200,
        ),
        ("compare", r("/compare/main...fix"), 200),
        ("git-tree", r(&format!("/git/trees/{tree}")), 200),
        ("git-blob", r(&format!("/git/blobs/{blob}")), 200),
        ("git-commit", r(&format!("/git/commits/{head}")), 200),
        ("git-ref", r("/git/ref/heads/fix"), 200),
        ("git-matching-refs", r("/git/matching-refs/heads"), 200),
        ("labels", r("/labels"), 200),
        ("issue-labels", r(&format!("/issues/{issue}/labels")), 200),
        ("issues", r("/issues"), 200),
        ("issue", r(&format!("/issues/{issue}")), 200),
        (
            "issue-comments",
            r(&format!("/issues/{issue}/comments")),
            200,
        ),
        ("repo-issue-comments", r("/issues/comments"), 200),
        (
            "repo-issue-comment",
            r(&format!("/issues/comments/{comment}")),
            200,
        ),
        ("pulls", r("/pulls"), 200),
        ("pull", r(&format!("/pulls/{pull}")), 200),
        ("pull-files", r(&format!("/pulls/{pull}/files")), 200),
        ("pull-commits", r(&format!("/pulls/{pull}/commits")), 200),
        (
            "pull-review-comments",
            r(&format!("/pulls/{pull}/comments")),
            200,
        ),
        ("repo-review-comments", r("/pulls/comments"), 200),
        (
            "repo-review-comment",
            r(&format!("/pulls/comments/{review_comment}")),
            200,
        ),
        ("pull-reviews", r(&format!("/pulls/{pull}/reviews")), 200),
        (
            "pull-review",
            r(&format!("/pulls/{pull}/reviews/{review}")),
            200,
        ),
        (
            "pull-requested-reviewers",
            r(&format!("/pulls/{pull}/requested_reviewers")),
            200,
        ),
        ("check-run", r(&format!("/check-runs/{job}")), 200),
        // A run's check suite has the run's id.
        ("check-suite", r(&format!("/check-suites/{run}")), 200),
        (
            "check-suite-runs",
            r(&format!("/check-suites/{run}/check-runs")),
            200,
        ),
        (
            "commit-and-its-checks",
            r(&format!("/commits/{head}/check-suites")),
            200,
        ),
        ("actions-runs", r("/actions/runs"), 200),
        ("actions-run", r(&format!("/actions/runs/{run}")), 200),
        (
            "actions-run-jobs",
            r(&format!("/actions/runs/{run}/jobs")),
            200,
        ),
        (
            "actions-run-artifacts",
            r(&format!("/actions/runs/{run}/artifacts")),
            200,
        ),
        (
            "actions-run-attempt-jobs",
            r(&format!("/actions/runs/{run}/attempts/1/jobs")),
            200,
        ),
        ("actions-job", r(&format!("/actions/jobs/{job}")), 200),
        // GitHub redirects to the log's storage; the proxy follows (no token).
        (
            "actions-job-logs",
            r(&format!("/actions/jobs/{job}/logs")),
            200,
        ),
        ("issue-events", r(&format!("/issues/{issue}/events")), 200),
        (
            "issue-timeline",
            r(&format!("/issues/{issue}/timeline")),
            200,
        ),
        (
            "pull-review-its-comments",
            r(&format!("/pulls/{pull}/reviews/{review}/comments")),
            200,
        ),
        (
            "check-run-annotations",
            r(&format!("/check-runs/{job}/annotations")),
            200,
        ),
        ("actions-workflows", r("/actions/workflows"), 200),
        ("actions-workflow", r("/actions/workflows/ci.yml"), 200),
        // A workflow is named by file name or by id.
        (
            "actions-workflow-runs",
            r("/actions/workflows/ci.yml/runs"),
            200,
        ),
        // The archive of the run's logs, on the storage host too.
        (
            "actions-run-logs",
            r(&format!("/actions/runs/{run}/logs")),
            200,
        ),
    ];
    // What the answers of the rules given a round trip here for the first
    // time must hold, in GitHub's shapes (a 200 with the wrong body would
    // pass a client's status check and fail its parsing).
    let json = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let shape = |rule: &str, text: &str| -> Result<(), String> {
        let v = json(text);
        let ok = match rule {
            "issue-events" => {
                let names: Vec<&str> = v
                    .as_array()
                    .map(|a| a.iter().filter_map(|e| e["event"].as_str()).collect())
                    .unwrap_or_default();
                names == ["labeled", "closed", "reopened"]
                    && v[0]["label"]["name"] == "bug"
                    && v[1]["actor"]["login"] == "alice"
                    && v[1]["url"]
                        .as_str()
                        .is_some_and(|u| u.contains("/issues/events/"))
            }
            "issue-timeline" => {
                let names: Vec<&str> = v
                    .as_array()
                    .map(|a| a.iter().filter_map(|e| e["event"].as_str()).collect())
                    .unwrap_or_default();
                names.contains(&"commented")
                    && names.contains(&"closed")
                    && v.as_array().is_some_and(|a| {
                        a.iter().any(|e| {
                            e["event"] == "commented"
                                && e["id"] == comment
                                && e["body"] == "Seen it."
                        })
                    })
            }
            "pull-review-its-comments" => {
                v.as_array().is_some_and(|a| a.len() == 1)
                    && v[0]["id"] == in_review
                    && v[0]["pull_request_review_id"] == review
                    && v[0]["path"] == "src/lib.rs"
            }
            "check-run-annotations" => {
                v[0]["annotation_level"] == "failure"
                    && v[0]["start_line"] == 2
                    && v[0]["message"] == "expected 1, got 2"
                    && v[0]["blob_href"]
                        .as_str()
                        .is_some_and(|h| h.contains(&head))
            }
            "check-suite" => {
                v["id"] == run
                    && v["head_sha"] == head.as_str()
                    && v["head_commit"]["id"] == head.as_str()
                    && v["app"]["slug"] == "github-actions"
            }
            "check-suite-runs" => v["total_count"] == 1 && v["check_runs"][0]["id"] == job,
            "actions-run-artifacts" => {
                v["total_count"] == 0 && v["artifacts"] == serde_json::json!([])
            }
            "actions-workflows" => {
                v["total_count"] == 1
                    && v["workflows"][0]["path"] == ".github/workflows/ci.yml"
                    && v["workflows"][0]["name"] == "CI"
                    && v["workflows"][0]["state"] == "active"
            }
            "actions-workflow-runs" => {
                v["total_count"] == 1
                    && v["workflow_runs"][0]["id"] == run
                    && v["workflow_runs"][0]["path"] == ".github/workflows/ci.yml"
                    && v["workflow_runs"][0]["conclusion"] == "failure"
            }
            // A zip archive (stored entries: the file name and the text
            // are readable in the bytes).
            "actions-run-logs" => {
                text.starts_with("PK\u{3}\u{4}")
                    && text.contains("0_test.txt")
                    && text.contains("ok\n")
            }
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(text.chars().take(600).collect())
        }
    };

    // Every rule of the set is here or in NOT_HERE, and nothing else is.
    let text = std::fs::read_to_string(rules.join("github-read.toml")).unwrap();
    let set: toml::Table = toml::from_str(&text).unwrap();
    let in_file: BTreeSet<String> = set["rule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    let covered: BTreeSet<String> = trips
        .iter()
        .map(|(rule, _, _)| (*rule).to_owned())
        .chain(NOT_HERE.iter().map(|(rule, _)| (*rule).to_owned()))
        .collect();
    let missing: Vec<&String> = in_file.difference(&covered).collect();
    assert!(
        missing.is_empty(),
        "rules with neither a round trip nor a reason: {missing:?}"
    );
    let unknown: Vec<&String> = covered.difference(&in_file).collect();
    assert!(unknown.is_empty(), "not rules of github-read: {unknown:?}");

    let ca = dir.path().join("ca.pem");
    let mut failed = Vec::new();
    for (rule, path, want) in &trips {
        github.clear_requests();
        let (status, text) = api_call_text(&socket, &ca, "GET", path, "");
        let bare = path.split('?').next().unwrap_or(path);
        let reached = github
            .requests()
            .iter()
            .any(|q| q.path == bare && q.method == "GET");
        if status != *want || !reached {
            failed.push(format!(
                "{rule} GET {path}: {status} (want {want}), upstream reached: {reached}"
            ));
        } else if let Err(body) = shape(rule, &text) {
            failed.push(format!("{rule} GET {path}: not GitHub's shape: {body}"));
        }
    }
    assert!(
        failed.is_empty(),
        "round trips that failed:\n{}",
        failed.join("\n")
    );

    // GitHub refuses a request without a User-Agent, and the proxy adds
    // none: a client that sends none fails in production as it fails here.
    github.clear_requests();
    let (status, text) = without_user_agent(&socket, &ca, &r(""));
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains("Request forbidden by administrative rules. Please make sure your request has a User-Agent header"),
        "{text}"
    );
    assert!(github.requests().iter().any(|q| q.path == r("")));
}

/// A GET through the identity's socket with no `User-Agent`: the status
/// and what came back.
fn without_user_agent(socket: &std::path::Path, ca: &std::path::Path, path: &str) -> (u16, String) {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    let mut tls = tls_over(s, "api.github.com", ca, true);
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: api.github.com\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).unwrap();
    tls.flush().unwrap();
    let answer = read_all(&mut tls);
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    (status, answer)
}
