//! The real `gh` CLI against the GitHub emulator, as a GitHub Enterprise host
//! (`GH_HOST=localhost:PORT`: REST under `/api/v3`, GraphQL at `/api/graphql`).
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};

const TOKEN: &str = "ghs_gh_cli_test_token";

fn gh(emulator: &GithubHandle, dir: &Path, token: &str, args: &[&str]) -> Output {
    Command::new("gh")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GH_CONFIG_DIR", dir.join("gh-config"))
        .env("GH_HOST", format!("localhost:{}", emulator.addr().port()))
        .env("GH_ENTERPRISE_TOKEN", token)
        .env("GH_PROMPT_DISABLED", "1")
        .env("GH_NO_UPDATE_NOTIFIER", "1")
        .env("NO_COLOR", "1")
        // Go's SSL_CERT_FILE replaces the system roots: only the test CA is trusted.
        .env("SSL_CERT_FILE", dir.join("ca.pem"))
        .output()
        .expect("gh runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "gh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn gh_reads_issues_and_comments_via_rest_and_graphql() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .enterprise(true)
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    emulator.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
    emulator
        .add_issue("acme/widgets", "Crash on start", "It crashes.", "alice")
        .unwrap();
    let repo = format!("localhost:{}/acme/widgets", emulator.addr().port());

    let issue = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["api", "repos/acme/widgets/issues/1"],
    ));
    let issue: serde_json::Value = serde_json::from_str(&issue).unwrap();
    assert_eq!(issue["title"], "Crash on start");

    let created = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "api",
            "-X",
            "POST",
            "repos/acme/widgets/issues/1/comments",
            "-f",
            "body=Looking.",
        ],
    ));
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["body"], "Looking.");

    let view = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["issue", "view", "1", "-R", &repo],
    ));
    assert!(
        view.contains("Crash on start") && view.contains("It crashes."),
        "{view}"
    );

    let url = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "issue",
            "comment",
            "1",
            "-R",
            &repo,
            "--body",
            "Fixed in gatehouse/x.",
        ],
    ));
    let comments = emulator.comments();
    assert_eq!(comments.len(), 2);
    assert_eq!(comments[1].body, "Fixed in gatehouse/x.");
    assert_eq!(comments[1].author, "gatehouse-test[bot]");
    assert!(
        url.contains(&format!("#issuecomment-{}", comments[1].id)),
        "{url}"
    );

    let requests = emulator.requests();
    let mutation = requests
        .iter()
        .find(|r| r.path == "/api/graphql" && r.body_text().contains("addComment"))
        .expect("gh posted the comment through GraphQL");
    assert_eq!(
        mutation.authorization(),
        Some(format!("token {TOKEN}").as_str())
    );
    assert_eq!(mutation.created_id, Some(comments[1].id.to_string()));
    assert!(requests.iter().all(|r| r
        .header("user-agent")
        .unwrap_or("")
        .starts_with("GitHub CLI")));

    // A wrong token gets nothing and creates nothing.
    let refused = gh(
        &emulator,
        dir.path(),
        "ghs_wrong",
        &["issue", "comment", "1", "-R", &repo, "--body", "nope"],
    );
    assert!(!refused.status.success());
    assert_eq!(emulator.comments().len(), 2);
}

#[test]
fn gh_opens_a_pull_request_from_a_pushed_branch() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .enterprise(true)
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    emulator.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
    let port = emulator.addr().port();
    let repo = format!("localhost:{port}/acme/widgets");

    // Without the branch on the server, gh cannot open the pull request.
    let refused = gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "pr",
            "create",
            "-R",
            &repo,
            "--head",
            "gatehouse/x",
            "--base",
            "main",
            "--title",
            "t",
            "--body",
            "b",
        ],
    );
    assert!(!refused.status.success());

    // Put a branch in the bare repository directly (git plumbing, no
    // network). At main's commit it has nothing to merge: GitHub refuses.
    let bare = emulator.repo_git_dir("acme/widgets").unwrap();
    let plumbing = |args: &[&str]| {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&bare)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    plumbing(&["branch", "gatehouse/x", "main"]);
    let empty = gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "pr",
            "create",
            "-R",
            &repo,
            "--head",
            "gatehouse/x",
            "--base",
            "main",
            "--title",
            "t",
            "--body",
            "b",
        ],
    );
    assert!(!empty.status.success());
    let said = String::from_utf8_lossy(&empty.stderr);
    assert!(
        said.contains("No commits between main and gatehouse/x"),
        "{said}"
    );
    // One commit on top, and it opens.
    let commit = plumbing(&[
        "-c",
        "user.name=w",
        "-c",
        "user.email=w@example.invalid",
        "commit-tree",
        "main^{tree}",
        "-p",
        "main",
        "-m",
        "fix",
    ]);
    plumbing(&["update-ref", "refs/heads/gatehouse/x", &commit]);

    let url = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "pr",
            "create",
            "-R",
            &repo,
            "--head",
            "gatehouse/x",
            "--base",
            "main",
            "--title",
            "Fix the crash",
            "--body",
            "Fixes #1",
        ],
    ));
    // On the server's host, as a GitHub Enterprise Server names it.
    assert_eq!(
        url.trim(),
        format!("https://localhost:{port}/acme/widgets/pull/1")
    );
    let view = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["pr", "view", "1", "-R", &repo],
    ));
    assert!(
        view.contains("Fix the crash") && view.contains("Fixes #1"),
        "{view}"
    );

    let created = emulator
        .requests()
        .into_iter()
        .find(|r| r.body_text().contains("createPullRequest") && r.created_id.is_some())
        .expect("the createPullRequest mutation was recorded with its id");
    assert_eq!(
        created.authorization(),
        Some(format!("token {TOKEN}").as_str())
    );
}

#[test]
fn gh_paginates_through_link_headers() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .enterprise(true)
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    emulator.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    for i in 0..7 {
        emulator
            .add_issue_comment("acme/widgets", 1, &format!("comment {i}"), "alice")
            .unwrap();
    }
    let all = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "api",
            "--paginate",
            "repos/acme/widgets/issues/1/comments?per_page=3",
            "--jq",
            ".[].body",
        ],
    ));
    let bodies: Vec<&str> = all.lines().collect();
    assert_eq!(bodies.len(), 7, "{all}");
    assert_eq!(bodies[6], "comment 6");
    let pages = emulator
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/issues/1/comments"))
        .count();
    assert_eq!(pages, 3);
}

/// gh shows GitHub's reasons for a refused pull request: the emulator's
/// 422 bodies are read by the real client as GitHub's are.
#[test]
fn gh_api_shows_githubs_reasons_for_a_refused_pull_request() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .enterprise(true)
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    emulator.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
    let open = |head: &str| {
        gh(
            &emulator,
            dir.path(),
            TOKEN,
            &[
                "api",
                "repos/acme/widgets/pulls",
                "-f",
                "title=t",
                "-f",
                &format!("head={head}"),
                "-f",
                "base=main",
            ],
        )
    };
    // `gh api` says "Validation Failed (HTTP 422)" and prints GitHub's body.
    let said = |out: &Output| {
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(stderr.contains("Validation Failed (HTTP 422)"), "{stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let body = said(&open("main"));
    assert!(body.contains("No commits between main and main"), "{body}");
    emulator
        .add_branch("acme/widgets", "gatehouse/x", "main")
        .unwrap();
    let opened = stdout(&open("gatehouse/x"));
    assert!(opened.contains("\"number\":1"), "{opened}");
    let body = said(&open("gatehouse/x"));
    assert!(
        body.contains("A pull request already exists for acme:gatehouse/x."),
        "{body}"
    );
}

/// `gh pr diff` asks for the pull request in `application/vnd.github.v3.diff`
/// (and `--patch` in `.patch`); GitHub answers git's text, not JSON. So do
/// a commit's and a comparison's diff, patch and sha media types. `gh run
/// view` of the commit's failed run follows the run's URLs and lists its
/// artifacts.
#[test]
fn gh_reads_a_pull_requests_diff_and_its_failed_run() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .enterprise(true)
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    emulator.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
    let repo = format!("localhost:{}/acme/widgets", emulator.addr().port());
    let bare = emulator.repo_git_dir("acme/widgets").unwrap();
    let git = |args: &[&str], input: Option<&str>| -> String {
        use std::io::Write as _;
        let mut child = Command::new("git")
            .arg("--git-dir")
            .arg(&bare)
            .args(args)
            .env("GIT_INDEX_FILE", dir.path().join("index"))
            .env("GIT_AUTHOR_NAME", "Alice")
            .env("GIT_AUTHOR_EMAIL", "alice@example.com")
            .env("GIT_COMMITTER_NAME", "Alice")
            .env("GIT_COMMITTER_EMAIL", "alice@example.com")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(input) = input {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // A commit on top of main adding `path` with `text` (plumbing on the
    // bare repository); returns its id.
    let commit_on_main = |path: &str, text: &str, message: &str| -> String {
        let blob = git(&["hash-object", "-w", "--stdin"], Some(text));
        git(&["read-tree", "main^{tree}"], None);
        let entry = format!("100644,{},{path}", blob.trim());
        git(&["update-index", "--add", "--cacheinfo", &entry], None);
        let tree = git(&["write-tree"], None);
        let commit = git(
            &["commit-tree", tree.trim(), "-p", "main", "-m", message],
            None,
        );
        commit.trim().to_owned()
    };
    let commit = commit_on_main("fix.txt", "fixed\n", "Fix the crash");
    let commit = commit.as_str();
    git(&["update-ref", "refs/heads/fix", commit], None);
    let pull = emulator
        .add_pull("acme/widgets", "Fix the crash", "fix", "main", "alice")
        .unwrap()
        .to_string();

    let diff = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["pr", "diff", &pull, "-R", &repo, "--color", "never"],
    ));
    assert_eq!(diff, git(&["diff", "main", "fix"], None));
    assert!(diff.contains("diff --git a/fix.txt b/fix.txt\n") && diff.contains("\n+fixed\n"));
    let patch = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "pr", "diff", &pull, "-R", &repo, "--patch", "--color", "never",
        ],
    ));
    assert!(patch.contains("Subject: [PATCH] Fix the crash"), "{patch}");
    assert!(patch.contains("\n+fixed\n"), "{patch}");
    // A commit's sha and diff, a comparison's diff, through `gh api`.
    let api = |accept: &str, path: &str| {
        stdout(&gh(
            &emulator,
            dir.path(),
            TOKEN,
            &["api", "-H", &format!("Accept: {accept}"), path],
        ))
    };
    assert_eq!(
        api(
            "application/vnd.github.sha",
            "repos/acme/widgets/commits/fix"
        ),
        commit
    );
    assert_eq!(
        api(
            "application/vnd.github.diff",
            &format!("repos/acme/widgets/commits/{commit}")
        ),
        diff
    );
    assert_eq!(
        api(
            "application/vnd.github.v3.diff",
            "repos/acme/widgets/compare/main...fix"
        ),
        diff
    );
    // A merge commit's diff is against its first parent.
    let fix_tree = git(&["rev-parse", "fix^{tree}"], None);
    let merge = git(
        &[
            "commit-tree",
            fix_tree.trim(),
            "-p",
            &format!("{commit}^1"),
            "-p",
            commit,
            "-m",
            "Merge fix",
        ],
        None,
    );
    assert_eq!(
        api(
            "application/vnd.github.diff",
            &format!("repos/acme/widgets/commits/{}", merge.trim())
        ),
        diff
    );
    // A failed run of the commit: `gh run list` and `gh run view` (which
    // follows the run's `jobs_url`, on the server's host, and lists its
    // artifacts) show it.
    let main = commit_on_main(".github/workflows/ci.yml", "name: CI\non: push\n", "CI");
    git(&["update-ref", "refs/heads/main", main.trim()], None);
    let (run, job) = emulator
        .add_workflow_job(
            "acme/widgets",
            ".github/workflows/ci.yml",
            "test",
            commit,
            "failure",
            "error: boom\n",
        )
        .unwrap();
    let runs = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["run", "list", "-R", &repo],
    ));
    assert!(
        runs.contains(&run.to_string()) && runs.contains("failure"),
        "{runs}"
    );
    let viewed = stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["run", "view", &run.to_string(), "-R", &repo],
    ));
    assert!(
        viewed.contains("test") && viewed.contains(&format!("ID {job}")),
        "{viewed}"
    );
    // GraphQL's view of the pull request reads git and the checks too:
    // `gh pr view --json` and `gh pr checks` (which fails on a failed check).
    emulator
        .add_review(
            "acme/widgets",
            pull.parse().unwrap(),
            "APPROVED",
            "Good.",
            "bob",
        )
        .unwrap();
    let fields =
        "additions,deletions,changedFiles,commits,files,reviews,latestReviews,statusCheckRollup";
    let view: serde_json::Value = serde_json::from_str(&stdout(&gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["pr", "view", &pull, "-R", &repo, "--json", fields],
    )))
    .unwrap();
    assert_eq!(
        (
            &view["additions"],
            &view["deletions"],
            &view["changedFiles"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(0),
            &serde_json::json!(1)
        ),
        "{view}"
    );
    assert_eq!(view["commits"][0]["oid"], commit, "{view}");
    assert_eq!(view["commits"][0]["messageHeadline"], "Fix the crash");
    assert_eq!(view["files"][0]["path"], "fix.txt");
    assert_eq!(view["reviews"][0]["state"], "APPROVED");
    assert_eq!(view["latestReviews"][0]["author"]["login"], "bob");
    assert_eq!(view["statusCheckRollup"][0]["name"], "test", "{view}");
    assert_eq!(view["statusCheckRollup"][0]["conclusion"], "FAILURE");
    let checks = gh(
        &emulator,
        dir.path(),
        TOKEN,
        &["pr", "checks", &pull, "-R", &repo],
    );
    let listed = String::from_utf8_lossy(&checks.stdout);
    assert!(
        !checks.status.success(),
        "a failed check fails gh pr checks"
    );
    assert!(
        listed.contains("test")
            && listed.contains("fail")
            && listed.contains(&format!("/job/{job}")),
        "{listed}{}",
        String::from_utf8_lossy(&checks.stderr)
    );
    // JSON as before without the media type.
    let json = api(
        "application/vnd.github+json",
        &format!("repos/acme/widgets/pulls/{pull}"),
    );
    assert!(
        json.starts_with('{') && json.contains("\"additions\":1"),
        "{json}"
    );
    // An unknown commit: GitHub's 422, not a diff.
    let missing = gh(
        &emulator,
        dir.path(),
        TOKEN,
        &[
            "api",
            "-H",
            "Accept: application/vnd.github.diff",
            "repos/acme/widgets/commits/nope",
        ],
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stdout).contains("No commit found for SHA: nope"),
        "{}",
        String::from_utf8_lossy(&missing.stdout)
    );
}
