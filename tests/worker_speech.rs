//! The router alone speaks in people's threads. Through a worker's identity
//! on the `gatehouse proxy` process with the shipped `github-worker` rule
//! set, against the GitHub emulator: the router's own reply call (a comment
//! on the issue the ticket is about) is refused, and so are a comment, a
//! review-comment reply and a reviewer request on a person's pull request
//! (403, audited, nothing reaches GitHub). Beside them, the control: on the
//! pull request the identity opened, all three are forwarded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::{admin_call, start_proxy_process_with, ProxyProcess};
use gatehouse_testkit::proxy::{api_call, branches};
use gatehouse_testkit::{bin, random};
use serde_json::Value;

const REPO: &str = "acme/widgets";

/// The emulator, the proxy process on the shipped rule sets, and one
/// worker identity (`github-worker` on [`REPO`]).
struct World {
    dir: tempfile::TempDir,
    github: GithubHandle,
    /// Kept for its lifetime: the proxy is stopped when the world is dropped.
    _proxy: ProxyProcess,
    socket: PathBuf,
}

impl World {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let token = random::token("ghs_");
        let github = GithubEmulator::start(
            GithubOptions::new(dir.path().join("git"))
                .token(&token, "gatehouse-test[bot]")
                .repo(RepoSpec::new("acme", "widgets"))
                .repo(RepoSpec::new("acme", "other")),
        )
        .unwrap();
        let rules = bin::repo_path("sandbox-profiles/rules");
        let proxy = start_proxy_process_with(dir.path(), &github, &token, bin::command(), |d| {
            let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
            let files = format!(
                "rule_set_files = [{:?}, {:?}]",
                rules.join("github-read.toml"),
                rules.join("github-worker.toml"),
            );
            let config = config.replace("rule_set_files = [\"rules.toml\"]", &files);
            std::fs::write(d.join("proxy.toml"), config).unwrap();
        });
        let (status, body) = admin_call(
            &proxy.admin,
            "POST",
            "/identities",
            Some(
                r#"{"name":"tkt_speech","rule_sets":["github-worker"],"variables":{"repo":"acme/widgets"}}"#,
            ),
        );
        assert_eq!(status, 201, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        let socket = PathBuf::from(answer["socket"].as_str().unwrap());
        Self {
            dir,
            github,
            _proxy: proxy,
            socket,
        }
    }

    fn call(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        api_call(
            &self.socket,
            &self.dir.path().join("ca.pem"),
            method,
            path,
            body,
        )
    }

    fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.jsonl")).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn assert_not_own(w: &World, (status, answer): (u16, Value), what: &str) {
    assert_eq!(status, 403, "{what}: {answer}");
    assert_eq!(answer["error"], "gatehouse_denied", "{what}");
    let reason = answer["reason"].as_str().unwrap();
    assert!(
        reason.contains("github_pull_request") && reason.contains("not created by this identity"),
        "{what}: {reason}"
    );
    assert!(
        w.github.requests().iter().all(|r| r.method != "POST"),
        "{what}: a POST reached GitHub"
    );
}

#[test]
fn a_worker_speaks_only_on_a_pull_request_it_opened() {
    let w = World::start();
    let issue = w
        .github
        .add_issue(REPO, "Login fails", "It rejects emails.", "alice")
        .unwrap();
    branches(&w.github, REPO, &["feature", "gatehouse/fix"]);
    let person = w
        .github
        .add_pull(REPO, "Alice's work", "feature", "main", "alice")
        .unwrap();
    let review = w
        .github
        .add_review_comment(REPO, person, "README", 1, "Why?", "bob")
        .unwrap();
    w.github.clear_requests();

    let comment = |n: u64| format!("/repos/{REPO}/issues/{n}/comments");
    let reply = |n: u64, c: u64| format!("/repos/{REPO}/pulls/{n}/comments/{c}/replies");
    let reviewers = |n: u64| format!("/repos/{REPO}/pulls/{n}/requested_reviewers");
    let said = r#"{"body":"On it"}"#;
    let asked = r#"{"reviewers":["bob"]}"#;
    // The router's reply call, on the very issue: the worker may not make it.
    assert_not_own(
        &w,
        w.call("POST", &comment(issue), said),
        "the router's reply call on the issue",
    );
    assert_not_own(
        &w,
        w.call("POST", &comment(person), said),
        "a comment on a person's PR",
    );
    assert_not_own(
        &w,
        w.call("POST", &reply(person, review), said),
        "a review-comment reply on a person's PR",
    );
    assert_not_own(
        &w,
        w.call("POST", &reviewers(person), asked),
        "a reviewer request on a person's PR",
    );
    assert!(w.github.comments().iter().all(|c| c.body != "On it"));

    // Control: the pull request it opened through the proxy.
    let body = r#"{"title":"Fix login","head":"gatehouse/fix","base":"main","body":"b"}"#;
    let (status, opened) = w.call("POST", &format!("/repos/{REPO}/pulls"), body);
    assert_eq!(status, 201, "{opened}");
    let own = opened["number"].as_u64().unwrap();
    let (status, answer) = w.call("POST", &comment(own), said);
    assert_eq!(status, 201, "{answer}");
    let asked_there = w
        .github
        .add_review_comment(REPO, own, "README", 1, "Why?", "bob")
        .unwrap();
    let (status, answer) = w.call("POST", &reply(own, asked_there), said);
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = w.call("POST", &reviewers(own), asked);
    assert!(status == 201 || status == 200, "{status} {answer}");

    // Each refusal is on the record as this identity's; each allowed
    // comment as a worker message.
    let audit = w.audit();
    let denied = audit
        .iter()
        .filter(|l| l["identity"] == "tkt_speech" && l["outcome"]["decision"] == "deny")
        .count();
    assert_eq!(denied, 4, "{audit:?}");
    let messages: Vec<&str> = audit
        .iter()
        .filter(|l| l["outcome"]["decision"] == "allow")
        .filter_map(|l| l["message"]["kind"].as_str())
        .collect();
    assert_eq!(
        messages,
        [
            "github_pull_request",
            "github_issue_comment",
            "github_review_comment_reply"
        ],
        "{audit:?}"
    );
}

// === GraphQL: mutations pinned by node id ===

fn graphql(w: &World, query: &str, variables: Value) -> (u16, Value) {
    let body = serde_json::json!({ "query": query, "variables": variables }).to_string();
    w.call("POST", "/graphql", &body)
}

fn assert_denied(w: &World, (status, answer): (u16, Value), needle: &str, what: &str) {
    assert_eq!(status, 403, "{what}: {answer}");
    let reason = answer["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(needle), "{what}: {reason}");
    let mutated = w.github.requests().into_iter().any(|r| {
        r.path == "/graphql"
            && ["createPullRequest", "addComment", "requestReviews"]
                .iter()
                .any(|m| r.body_text().contains(m))
    });
    assert!(!mutated, "{what}: a mutation reached GitHub");
}

const CREATE: &str = "mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id url } } }";
const COMMENT: &str = "mutation CommentCreate($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }";
const REVIEWS: &str = "mutation PullRequestCreateRequestReviews($input: RequestReviewsInput!) { requestReviews(input: $input) { clientMutationId } }";
const REPO_ID: &str = "query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { id name } }";

#[test]
fn graphql_mutations_reach_only_the_identitys_repository_and_pull_requests() {
    let w = World::start();
    branches(&w.github, REPO, &["feature", "gatehouse/gql"]);
    let person = w
        .github
        .add_pull(REPO, "Alice's work", "feature", "main", "alice")
        .unwrap();
    let (status, alices) = w.call("GET", &format!("/repos/{REPO}/pulls/{person}"), "");
    assert_eq!(status, 200, "{alices}");
    let alices = alices["node_id"].as_str().unwrap().to_owned();
    w.github.clear_requests();
    let input = |repository_id: &str| {
        serde_json::json!({"input": {"repositoryId": repository_id, "title": "t", "body": "b",
            "baseRefName": "main", "headRefName": "gatehouse/gql"}})
    };

    // Before the proxy has seen the repository's id, nothing can be pinned.
    assert_denied(
        &w,
        graphql(&w, CREATE, input("R_anything")),
        "has not seen yet",
        "createPullRequest before the repository's id is known",
    );
    // gh's repository lookup: the answer's id is learnt.
    let vars = serde_json::json!({"owner": "acme", "name": "widgets"});
    let (status, answer) = graphql(&w, REPO_ID, vars);
    assert_eq!(status, 200, "{answer}");
    let repo_id = answer["data"]["repository"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Another repository's id (an id that is not this identity's), refused.
    assert_denied(
        &w,
        graphql(&w, CREATE, input("R_kwDOAAAAAAAAAAE")),
        "another",
        "createPullRequest in another repository",
    );
    // A person's pull request: no comment, no reviewer request.
    let on = |id: &str| serde_json::json!({"input": {"subjectId": id, "body": "b"}});
    assert_denied(
        &w,
        graphql(&w, COMMENT, on(&alices)),
        "not one",
        "addComment on a person's PR",
    );
    let reviewers = |id: &str| serde_json::json!({"input": {"pullRequestId": id, "userIds": []}});
    assert_denied(
        &w,
        graphql(&w, REVIEWS, reviewers(&alices)),
        "not one",
        "requestReviews on a person's PR",
    );

    // Control: the identity's repository, then the pull request it made.
    let (status, created) = graphql(&w, CREATE, input(&repo_id));
    assert_eq!(status, 200, "{created}");
    let own = created["data"]["createPullRequest"]["pullRequest"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let (status, answer) = graphql(&w, COMMENT, on(&own));
    assert_eq!(status, 200, "{answer}");
    assert!(answer["errors"].is_null(), "{answer}");
    assert!(w.github.comments().iter().any(|c| c.body == "b"));
    let (status, answer) = graphql(&w, REVIEWS, reviewers(&own));
    assert_eq!(status, 200, "{answer}");
    assert!(answer["errors"].is_null(), "{answer}");
    // Still refused on the person's, after the identity has a PR of its own.
    w.github.clear_requests();
    assert_denied(
        &w,
        graphql(&w, COMMENT, on(&alices)),
        "not one",
        "addComment on a person's PR, later",
    );
}

// === the real `gh` in a real sandbox ===

/// Runs `script` in a sandbox on the world's identity socket.
fn in_sandbox(w: &World, script: &str) -> String {
    use gatehouse_testkit::machine::{user_gid, user_uid, WORKER_USER};
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::Builder::new()
        .prefix("gatehouse-speech-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = base.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let (uid, gid) = (
        user_uid(WORKER_USER).unwrap(),
        user_gid(WORKER_USER).unwrap(),
    );
    std::os::unix::fs::chown(&work, Some(uid), Some(gid)).unwrap();
    let out = bin::command()
        .args(["sandbox", "run", "--profile", "default", "--workdir"])
        .arg(&work)
        .arg("--proxy-socket")
        .arg(&w.socket)
        .arg("--ca-cert")
        .arg(w.dir.path().join("ca.pem"))
        .args(["--env", "GH_PROMPT_DISABLED=1", "--env", "NO_COLOR=1"])
        .args(["--", "sh", "-c", script])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const GH_SCRIPT: &str = r#"
set -u
git config --global user.email worker@example.invalid
git config --global user.name worker
git clone -q https://github.com/acme/widgets.git w && cd w
echo c > c.txt && git add c.txt && git commit -qm c
git push -q origin HEAD:refs/heads/gatehouse/gh 2>&1 && echo PUSH_OK
echo "== pr create"
URL=$(gh pr create -R acme/widgets --head gatehouse/gh --base main --title 'From gh' --body 'Made by gh' 2>../create.err)
echo "CREATE_EXIT=$? URL=$URL"; cat ../create.err
echo "== pr comment (its own)"
gh pr comment "$URL" -R acme/widgets --body 'Ready for review' 2>&1; echo "OWN_EXIT=$?"
echo "== pr comment (alice's)"
gh pr comment "$ALICE" -R acme/widgets --body 'Not mine' 2>&1; echo "ALICE_EXIT=$?"
echo "== issue comment"
gh issue comment 1 -R acme/widgets --body 'On it' 2>&1; echo "ISSUE_EXIT=$?"
echo "== auth status"
gh auth status 2>&1; echo "AUTH_EXIT=$?"
"#;

#[test]
fn gh_pr_create_and_comment_work_in_a_sandbox_only_on_its_own_pull_request() {
    gatehouse_testkit::require!(
        gatehouse_testkit::Need::Root,
        gatehouse_testkit::Need::Sandbox
    );
    let w = World::start();
    let issue = w
        .github
        .add_issue(REPO, "Login", "It fails.", "alice")
        .unwrap();
    assert_eq!(issue, 1);
    branches(&w.github, REPO, &["feature"]);
    let alice = w
        .github
        .add_pull(REPO, "Alice's work", "feature", "main", "alice")
        .unwrap();
    let script = GH_SCRIPT.replace("$ALICE", &alice.to_string());
    let out = in_sandbox(&w, &script);
    let denied: Vec<String> = w
        .audit()
        .iter()
        .filter(|l| l["outcome"]["decision"] == "deny")
        .map(|l| {
            l["outcome"]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let all = format!("{out}\n--- refused\n{}", denied.join("\n"));
    assert!(all.contains("PUSH_OK"), "{all}");
    assert!(
        all.contains("CREATE_EXIT=0 URL=https://github.com/acme/widgets/pull/"),
        "{all}"
    );
    assert!(all.contains("OWN_EXIT=0"), "{all}");
    // `gh auth status` finds the token good (its check, `GET /`, and the
    // `viewer` login go through the proxy with the credential injected),
    // so a worker is not sent to log in again.
    assert!(all.contains("AUTH_EXIT=0"), "{all}");
    assert!(all.contains("Logged in to github.com as "), "{all}");
    assert!(!all.contains("no longer valid"), "{all}");
    assert!(!all.contains("ALICE_EXIT=0"), "{all}");
    assert!(!all.contains("ISSUE_EXIT=0"), "{all}");
    let comments = w.github.comments();
    assert!(
        comments.iter().any(|c| c.body == "Ready for review"),
        "{all}"
    );
    for refused in ["Not mine", "On it"] {
        assert!(
            comments.iter().all(|c| c.body != refused),
            "{refused}: {all}"
        );
    }
    // The refusals are the proxy's, on the record: the pin, by node id.
    assert_eq!(
        denied.iter().filter(|r| r.contains("not one")).count(),
        2,
        "{denied:?}\n{all}"
    );
    println!("{all}");
}
