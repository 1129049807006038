//! The router alone speaks in people's threads. Through a worker's identity
//! on the `gatehouse proxy` process with the shipped `github-worker` rule
//! set, against the GitHub emulator: the router's own reply call (a comment
//! on the issue the ticket is about) is refused, and so are a comment, a
//! review-comment reply and a reviewer request on a person's pull request
//! (403, audited, nothing reaches GitHub). Beside them, the control: on the
//! pull request the identity opened, all three are forwarded. GraphQL's
//! `createPullRequest` and `addComment` (what `gh pr create` and `gh pr
//! comment` send) are message records with the created object's id, the
//! log verifies and the reconciler ties them to what GitHub lists; a
//! refused mutation is a refusal record, with no message.
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

/// The request lines of the audit log with the completion of each.
fn requests_with_completions(audit: &[Value]) -> Vec<(Value, Option<Value>)> {
    audit
        .iter()
        .filter(|l| l["event"] == "request")
        .map(|r| {
            let done = audit
                .iter()
                .find(|c| c["event"] == "completion" && c["request_id"] == r["request_id"]);
            (r.clone(), done.cloned())
        })
        .collect()
}

#[test]
fn graphql_comments_and_pull_requests_are_message_records_that_reconcile() {
    use gatehouse::audit::model::Kind;
    use gatehouse::audit::platform::{github_page, GithubList};
    use gatehouse::audit::reconcile::{Reconciler, Window};
    use gatehouse::audit::sources::{ProxyLog, Step};
    use sha2::{Digest, Sha256};

    let w = World::start();
    branches(&w.github, REPO, &["feature", "gatehouse/gql"]);
    let person = w
        .github
        .add_pull(REPO, "Alice's work", "feature", "main", "alice")
        .unwrap();
    let (status, alices) = w.call("GET", &format!("/repos/{REPO}/pulls/{person}"), "");
    assert_eq!(status, 200, "{alices}");
    let alices = alices["node_id"].as_str().unwrap().to_owned();
    let vars = serde_json::json!({"owner": "acme", "name": "widgets"});
    let (status, answer) = graphql(&w, REPO_ID, vars);
    assert_eq!(status, 200, "{answer}");
    let repo_id = answer["data"]["repository"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // gh's pull request, then two comments on it: gh's own document, and
    // one under an alias through a fragment, under another operation name.
    let create = serde_json::json!({"input": {"repositoryId": repo_id, "title": "From GraphQL",
        "body": "b", "baseRefName": "main", "headRefName": "gatehouse/gql"}});
    let (status, created) = graphql(&w, CREATE, create.clone());
    assert_eq!(status, 200, "{created}");
    let pull_url = created["data"]["createPullRequest"]["pullRequest"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let own = created["data"]["createPullRequest"]["pullRequest"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let on = |id: &str, body: &str| serde_json::json!({"input": {"subjectId": id, "body": body}});
    let (status, answer) = graphql(&w, COMMENT, on(&own, "Ready for review"));
    assert_eq!(status, 200, "{answer}");
    let comment_url = answer["data"]["addComment"]["commentEdge"]["node"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned();
    const ALIASED: &str = "mutation Anything($input: AddCommentInput!) { ...Say } fragment Say on Mutation { said: addComment(input: $input) { commentEdge { node { databaseId url } } } }";
    let (status, answer) = graphql(&w, ALIASED, on(&own, "Second thought"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer["errors"].is_null(), "{answer}");
    // Refused, and so no message record: on a person's pull request, and
    // on its own without the created comment selected.
    w.github.clear_requests();
    assert_denied(
        &w,
        graphql(&w, COMMENT, on(&alices, "Not mine")),
        "not one",
        "addComment on a person's PR",
    );
    const BLIND: &str = "mutation CommentCreate($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }";
    assert_denied(
        &w,
        graphql(&w, BLIND, on(&own, "Unseen")),
        "select `commentEdge { node { url } }`",
        "addComment without its created comment",
    );
    let comments = w.github.comments();
    let made = |body: &str| {
        comments
            .iter()
            .find(|c| c.body == body)
            .unwrap_or_else(|| panic!("{body}: {comments:?}"))
            .id
    };
    let (first, second) = (made("Ready for review"), made("Second thought"));
    assert!(comments
        .iter()
        .all(|c| c.body != "Not mine" && c.body != "Unseen"));
    assert!(
        comment_url.ends_with(&format!("#issuecomment-{first}")),
        "{comment_url}"
    );

    // The message records: kind, target, the hash of the body as sent, and
    // the created object's id from the answer.
    let sha = |query: &str, variables: Value| {
        let body = serde_json::json!({ "query": query, "variables": variables }).to_string();
        hex::encode(Sha256::digest(body.as_bytes()))
    };
    let audit = w.audit();
    let lines = requests_with_completions(&audit);
    let messages: Vec<(Value, String)> = lines
        .iter()
        .filter(|(r, _)| r["path"] == "/graphql" && !r["message"].is_null())
        .map(|(r, c)| {
            let c = c.as_ref().unwrap_or_else(|| panic!("no completion: {r}"));
            (
                r["message"].clone(),
                c["message_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let record = |kind: &str, target: &str, body_sha256: String| serde_json::json!({"kind": kind, "target": target, "body_sha256": body_sha256});
    assert_eq!(
        messages,
        [
            (
                record("github_pull_request", REPO, sha(CREATE, create)),
                pull_url.clone()
            ),
            (
                record(
                    "github_issue_comment",
                    &own,
                    sha(COMMENT, on(&own, "Ready for review"))
                ),
                comment_url.clone()
            ),
            (
                record(
                    "github_issue_comment",
                    &own,
                    sha(ALIASED, on(&own, "Second thought"))
                ),
                second.to_string()
            ),
        ],
        "{audit:#?}"
    );
    // Each refusal is a refusal record, with no message.
    let refused: Vec<&Value> = lines
        .iter()
        .map(|(r, _)| r)
        .filter(|r| r["path"] == "/graphql" && r["outcome"]["decision"] == "deny")
        .collect();
    assert_eq!(refused.len(), 2, "{audit:#?}");
    assert!(
        refused.iter().all(|r| r["message"].is_null()),
        "{refused:#?}"
    );
    // What the worker made through GraphQL is its own for REST as well:
    // its own comment may be edited, its pull request commented on.
    let (status, answer) = w.call(
        "PATCH",
        &format!("/repos/{REPO}/issues/comments/{first}"),
        r#"{"body":"Ready for review (edited)"}"#,
    );
    assert_eq!(status, 200, "{answer}");

    // The chain verifies.
    let log = w.dir.path().join("audit.jsonl");
    let out = bin::command()
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The reconciler ties each record to what GitHub lists as the bot's:
    // the two comments and the pull request, nothing unexplained. A comment
    // the bot's token posts on GitHub directly is the control: unexplained.
    w.github
        .add_issue_comment(
            REPO,
            person,
            "Posted around the proxy",
            "gatehouse-test[bot]",
        )
        .unwrap();
    let listed = |path: &str, list: GithubList| {
        let (status, page) = w.call("GET", path, "");
        assert_eq!(status, 200, "{page}");
        let page = serde_json::to_vec(&page).unwrap();
        github_page(list, REPO, &page, "gatehouse-test[bot]", 0).unwrap()
    };
    let mut platform = listed(
        &format!("/repos/{REPO}/issues/comments"),
        GithubList::IssueComments,
    );
    platform.extend(listed(
        &format!("/repos/{REPO}/pulls?state=all"),
        GithubList::Pulls,
    ));
    assert_eq!(platform.len(), 4, "{platform:#?}");
    let mut reconciler = Reconciler::new(Window::default(), 86_400_000);
    reconciler.platform(platform);
    let mut calls = 0;
    for step in ProxyLog::open(&log).unwrap() {
        if let Step::Message(mut m) = step.unwrap() {
            // The router's state would know the ticket; here it is the world's.
            m.ticket_known = true;
            calls += 1;
            reconciler.message(m);
        }
    }
    // The three GraphQL calls, and the REST edit (which creates nothing).
    assert_eq!(calls, 4);
    let (findings, _) = reconciler.finish();
    let count = |kind: Kind| findings.iter().filter(|f| f.kind == kind).count();
    assert_eq!(count(Kind::WorkerDirect), 4, "{findings:#?}");
    assert_eq!(count(Kind::PlatformExplained), 3, "{findings:#?}");
    let unexplained: Vec<_> = findings.iter().filter(|f| !f.explained).collect();
    assert_eq!(unexplained.len(), 1, "{findings:#?}");
    assert_eq!(
        unexplained[0].kind,
        Kind::PlatformUnexplained,
        "{findings:#?}"
    );
    assert!(
        unexplained[0].target.contains(&format!("/pull/{person}")),
        "{findings:#?}"
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
    // gh's pull request and its comment are message records, each with
    // what it created, as the answer named it.
    let ready = comments
        .iter()
        .find(|c| c.body == "Ready for review")
        .unwrap()
        .id;
    let made: Vec<(String, String)> = requests_with_completions(&w.audit())
        .into_iter()
        .filter(|(r, _)| r["path"] == "/graphql" && !r["message"].is_null())
        .map(|(r, c)| {
            let id = c.map(|c| c["message_id"].clone()).unwrap_or_default();
            (
                r["message"]["kind"].as_str().unwrap().to_owned(),
                id.as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(made.len(), 2, "{made:?}\n{all}");
    assert_eq!(made[0].0, "github_pull_request", "{made:?}");
    assert!(
        all.contains(&format!("URL={}", made[0].1)),
        "{made:?}\n{all}"
    );
    assert_eq!(made[1].0, "github_issue_comment", "{made:?}");
    assert!(
        made[1].1.ends_with(&format!("#issuecomment-{ready}")),
        "{made:?}"
    );
    println!("{all}");
}
