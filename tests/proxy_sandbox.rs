//! End to end: the real `git`, `gh` and `curl` inside `gatehouse sandbox
//! run --proxy-socket … --ca-cert …`, through the proxy, against the GitHub
//! emulator. Nothing in the sandbox may hold the token's bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use gatehouse_testkit::machine::{user_gid, user_uid, TEST_USER, WORKER_USER};
use gatehouse_testkit::proxy::{process, Harness};
use gatehouse_testkit::sandbox::{as_test_user, reachable_dir};
use gatehouse_testkit::{require, Need};

/// Runs `script` in a sandbox wired to the harness's identity socket.
fn sandbox(h: &Harness, work: &Path, script: &str) -> (Option<i32>, String, String) {
    let out = gatehouse_testkit::bin::command()
        .args(["sandbox", "run", "--profile", "default", "--workdir"])
        .arg(work)
        .arg("--proxy-socket")
        .arg(&h.socket)
        .arg("--ca-cert")
        .arg(&h.proxy_ca)
        .args(["--env", "GH_PROMPT_DISABLED=1", "--env", "NO_COLOR=1"])
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SCRIPT: &str = r#"
set -u
git config --global user.email worker@example.invalid
git config --global user.name worker
git config --global init.defaultBranch main
echo "== clone"
git clone -q https://github.com/acme/widgets.git w && echo CLONE_OK
cd w
echo change > change.txt && git add change.txt && git commit -qm change
echo "== push gatehouse/x"
git push origin HEAD:refs/heads/gatehouse/x 2>&1 && echo PUSH_BRANCH_OK
echo "== push main"
if git push origin HEAD:main 2>&1; then echo PUSH_MAIN_OK; else echo PUSH_MAIN_REFUSED; fi
echo "== delete branch"
if git push origin --delete gatehouse/x 2>&1; then echo DELETE_OK; else echo DELETE_REFUSED; fi
echo "== gh read"
gh api repos/acme/widgets/issues/1 && echo
echo "== gh pull request"
PR=$(gh api repos/acme/widgets/pulls -f title='From the sandbox' -f head=gatehouse/x -f base=main --jq .number)
echo "PR=$PR"
echo "== gh comment (on its own pull request)"
gh api "repos/acme/widgets/issues/$PR/comments" -f body='posted from the sandbox' && echo
gh api "repos/acme/widgets/issues/$PR/comments" -f body='and a second' >/dev/null && echo
gh api "repos/acme/widgets/issues/$PR/comments" -f body='and a third' >/dev/null && echo
echo "== gh paginate"
gh api --paginate "repos/acme/widgets/issues/$PR/comments?per_page=1" --jq '.[].body' | sed 's/^/PAGE: /'
echo "== curl denied"
curl -sS https://api.github.com/repos/acme/secret-plans/issues/1; echo
echo "== tunnel refused"
python3 -c 'import http.client; c = http.client.HTTPSConnection("127.0.0.1", 3128); c.set_tunnel("pypi.org", 443); c.connect()' 2>&1 | tail -n 1
echo "== env"
env
cat /proc/self/environ | tr '\0' '\n'
"#;

#[test]
fn git_gh_and_curl_work_through_the_proxy_inside_a_sandbox() {
    require!(Need::Root, Need::Sandbox);
    let uid = user_uid(WORKER_USER).unwrap();
    let gid = user_gid(WORKER_USER).unwrap();
    let h = Harness::start();
    let base = tempfile::Builder::new()
        .prefix("gatehouse-proxy-e2e-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = base.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(uid), Some(gid)).unwrap();

    let (code, out, err) = sandbox(&h, &work, SCRIPT);
    let all = format!("exit {code:?}\n--- stdout\n{out}\n--- stderr\n{err}");
    assert!(out.contains("CLONE_OK"), "{all}");
    assert!(out.contains("PUSH_BRANCH_OK"), "{all}");
    assert!(out.contains("PUSH_MAIN_REFUSED"), "{all}");
    assert!(!out.contains("PUSH_MAIN_OK"), "{all}");
    // git shows why, next to the ref.
    assert!(
        out.contains("[remote rejected] HEAD -> main (gatehouse: "),
        "{all}"
    );
    assert!(out.contains("remote: gatehouse: push refused"), "{all}");
    assert!(
        out.contains("DELETE_REFUSED") && !out.contains("DELETE_OK"),
        "{all}"
    );
    assert!(out.contains("Widgets wobble"), "{all}");
    assert!(out.contains("posted from the sandbox"), "{all}");
    // Pages 2 and 3 are reached through the proxy: GitHub's links (prev,
    // next, last, first) name the repository by id (`/repositories/{id}/…`),
    // which the proxy rewrites to the repository's name so the rules can
    // check it.
    let pages: Vec<&str> = out.lines().filter(|l| l.starts_with("PAGE: ")).collect();
    assert_eq!(
        pages,
        [
            "PAGE: posted from the sandbox",
            "PAGE: and a second",
            "PAGE: and a third"
        ],
        "{all}"
    );
    let pr = out
        .lines()
        .find_map(|l| l.strip_prefix("PR="))
        .unwrap_or_else(|| panic!("no pull request: {all}"));
    let seen = h.github.requests();
    let comments = format!("/repos/acme/widgets/issues/{pr}/comments");
    assert!(
        seen.iter().any(|r| r.path == comments
            && r.query.as_deref().is_some_and(|q| q.contains("page=3"))),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|r| r.path.starts_with("/repositories/")),
        "{seen:?}"
    );
    assert!(out.contains(r#""error":"gatehouse_denied""#), "{all}");
    // A refused tunnel says why in its status line, which is all Python's
    // http.client (and so pip) shows of it.
    assert!(
        out.contains(
            "Tunnel connection failed: 403 Forbidden (gatehouse: no rule of this identity's \
             rule sets names this host, and it is not a tunnel host)"
        ),
        "{all}"
    );

    // The emulator saw the injected credential on git and REST calls, and
    // the branch landed but main did not move.
    let seen = h.github.requests();
    assert!(
        seen.iter().any(|r| r.path.ends_with("/git-receive-pack")
            && r.authorization().is_some_and(|a| a.starts_with("Basic "))),
        "{seen:?}"
    );
    let git_dir = h.github.repo_git_dir("acme/widgets").unwrap();
    let branch = Command::new("git")
        .arg("--git-dir")
        .arg(&git_dir)
        .args(["rev-parse", "--verify", "refs/heads/gatehouse/x"])
        .output()
        .unwrap();
    assert!(branch.status.success(), "gatehouse/x was not pushed");
    let main_log = Command::new("git")
        .arg("--git-dir")
        .arg(&git_dir)
        .args(["log", "--format=%s", "main"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&main_log.stdout).contains("change"),
        "main moved"
    );

    // The comment is in the audit log as a message, and its completion
    // carries the created comment's id: real gh (Go's transport asks for
    // gzip) gets it read, whatever the answer's encoding.
    let audit = h.audit_lines();
    let sent = audit
        .iter()
        .find(|l| {
            l["message"]["kind"] == "github_issue_comment"
                && l["message"]["target"] == format!("acme/widgets#{pr}")
        })
        .unwrap_or_else(|| panic!("{audit:?}"));
    let completed = audit
        .iter()
        .find(|l| l["event"] == "completion" && l["request_id"] == sent["request_id"])
        .unwrap_or_else(|| panic!("no completion for {sent}"));
    let created: Vec<String> = h
        .github
        .comments()
        .iter()
        .filter(|c| c.body == "posted from the sandbox")
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(
        completed["message_id"].as_str().map(str::to_owned),
        created.first().cloned(),
        "{completed}"
    );

    // Nothing the sandbox saw or wrote holds the token.
    assert!(!all.contains(&h.token), "the sandbox saw the token");
    let grep = Command::new("grep")
        .args(["-r", "-l", "-F", &h.token])
        .arg(&work)
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "files in the work dir hold the token: {}",
        String::from_utf8_lossy(&grep.stdout)
    );
}

fn chown_r(path: &Path, user: &str) {
    let ok = Command::new("chown")
        .args(["-R", &format!("{user}:{user}")])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown {}", path.display());
}

/// Rootless: the proxy and the sandbox both run as the unprivileged test
/// user (as they do under one user without root); the identity socket lives
/// in that user's private directory and reaches the worker by bind mount.
#[test]
fn rootless_git_and_curl_through_a_proxy_run_by_the_same_user() {
    require!(Need::SandboxAsTestUser);
    let base = reachable_dir("gatehouse-proxy-rootless-");
    // The build directory may not be reachable by the test user.
    // Both binaries: `gatehouse proxy` runs in `gatehouse-services` next to it.
    let bin = gatehouse_testkit::bin::copy_to(base.path());
    let as_user = || as_test_user(&bin);
    let token = gatehouse_testkit::random::token("ghs_");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(base.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let pdir = base.path().join("proxy");
    std::fs::create_dir(&pdir).unwrap();
    let proxy = process::start_proxy_process_with(&pdir, &github, &token, as_user(), |d| {
        chown_r(d, TEST_USER);
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    });
    let (status, body) = process::admin_call(
        &proxy.admin,
        "POST",
        "/identities",
        Some(
            r#"{"name":"tkt_rootless","rule_sets":["test-worker"],"variables":{"repo":"acme/widgets"}}"#,
        ),
    );
    assert_eq!(status, 201, "{body}");
    let socket: serde_json::Value = serde_json::from_str(&body).unwrap();
    let work = base.path().join("work");
    std::fs::create_dir(&work).unwrap();
    chown_r(&work, TEST_USER);
    let script = r#"
git config --global user.email worker@example.invalid
git config --global user.name worker
git clone -q https://github.com/acme/widgets.git w && echo CLONE_OK
cd w && echo c > c.txt && git add c.txt && git commit -qm c
git push -q origin HEAD:refs/heads/gatehouse/rootless 2>&1 && echo PUSH_BRANCH_OK
curl -sS https://api.github.com/repos/acme/secret-plans/issues/1; echo
"#;
    let out = as_user()
        .args(["sandbox", "run", "--profile", "default", "--workdir"])
        .arg(&work)
        .arg("--proxy-socket")
        .arg(socket["socket"].as_str().unwrap())
        .arg("--ca-cert")
        .arg(pdir.join("ca.pem"))
        .args(["--", "sh", "-c", script])
        .current_dir(base.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let all = format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("CLONE_OK"), "{all}");
    assert!(all.contains("PUSH_BRANCH_OK"), "{all}");
    assert!(all.contains(r#""error":"gatehouse_denied""#), "{all}");
    assert!(!all.contains(&token), "the sandbox saw the token");
    drop(proxy);
}
