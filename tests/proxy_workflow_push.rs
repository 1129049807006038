//! A push through the proxy with a minted installation token that lacks the
//! `workflows` permission: GitHub (the emulator) refuses new commits
//! touching `.github/workflows/` with its message, which reaches the real
//! git client; a push that does not touch workflows goes through (the
//! positive control). The rule set asks for `contents: write` only, as
//! `github-worker` does, so a worker editing CI fails the same way in
//! production.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use gatehouse_emulators::{
    rsa_public_key_der, GithubAppSpec, GithubEmulator, GithubOptions, RepoSpec,
};
use gatehouse_testkit::proxy::process::{admin_call, start_proxy_process_with, thread_relay};
use gatehouse_testkit::random::token as random_token;
use gatehouse_testkit::rules::TEST_RULES;

const APP_ID: u64 = 4243;
const INSTALLATION: u64 = 8;

fn git(dir: &Path, args: &[&str], envs: &[(&str, String)]) -> Output {
    Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=w", "-c", "user.email=w@example.invalid"])
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("HOME", dir)
        .output()
        .unwrap()
}

fn ok(output: Output) {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_push_touching_a_workflow_is_refused_without_the_workflows_permission() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("app.pem");
    let status = Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&key)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "openssl genrsa failed");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let public_key_der = rsa_public_key_der(&std::fs::read_to_string(&key).unwrap()).unwrap();
    // The App itself may write workflows; the token minted for the rule set
    // does not ask for it.
    let app = GithubAppSpec {
        app_id: APP_ID,
        slug: "gatehouse-test".into(),
        public_key_der,
        installation_id: INSTALLATION,
        permissions: BTreeMap::from([
            ("contents".into(), "write".into()),
            ("issues".into(), "write".into()),
            ("metadata".into(), "read".into()),
            ("workflows".into(), "write".into()),
        ]),
        repositories: Some(vec!["acme/widgets".into()]),
    };
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .app(app)
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let unused = random_token("ghp_");
    let proxy = start_proxy_process_with(
        d,
        &github,
        &unused,
        gatehouse_testkit::bin::command(),
        |d| {
            let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
            let static_token = "kind = \"github_token\"\ntoken_file = \"github.token\"\n";
            assert!(config.contains(static_token), "{config}");
            let config = config
                .replace(
                    static_token,
                    &format!(
                        "kind = \"github_app\"\napp_id = {APP_ID}\nprivate_key_file = \"app.pem\"\ninstallation_id = {INSTALLATION}\n"
                    ),
                )
                .replace("dangerously_allow_unscoped_graphql = true\n", "");
            std::fs::write(d.join("proxy.toml"), config).unwrap();
            let rules = TEST_RULES.replacen(
                "variables = [\"repo\"]\n",
                "variables = [\"repo\"]\ngithub_permissions = { contents = \"write\", issues = \"write\" }\n",
                1,
            );
            std::fs::write(d.join("rules.toml"), rules).unwrap();
        },
    );
    let (status, body) = admin_call(
        &proxy.admin,
        "POST",
        "/identities",
        Some(
            r#"{"name":"tkt_ci","rule_sets":["test-worker"],"variables":{"repo":"acme/widgets"}}"#,
        ),
    );
    assert_eq!(status, 201, "{body}");
    let socket: serde_json::Value = serde_json::from_str(&body).unwrap();
    let port = thread_relay(socket["socket"].as_str().unwrap().into());
    let envs = [
        ("https_proxy", format!("http://127.0.0.1:{port}")),
        ("GIT_SSL_CAINFO", d.join("ca.pem").display().to_string()),
    ];

    let work = d.join("work");
    std::fs::create_dir(&work).unwrap();
    ok(git(
        &work,
        &["clone", "-q", "https://github.com/acme/widgets.git", "w"],
        &envs,
    ));
    let w = work.join("w");

    // Positive control: a change outside workflows is pushed.
    std::fs::write(w.join("README.md"), "changed\n").unwrap();
    ok(git(&w, &["commit", "-qam", "readme"], &envs));
    ok(git(
        &w,
        &["push", "-q", "origin", "HEAD:refs/heads/gatehouse/readme"],
        &envs,
    ));

    // A new workflow file on top: refused with GitHub's message.
    std::fs::create_dir_all(w.join(".github/workflows")).unwrap();
    std::fs::write(w.join(".github/workflows/x.yml"), "on: push\n").unwrap();
    ok(git(&w, &["add", ".github"], &envs));
    ok(git(&w, &["commit", "-qm", "ci"], &envs));
    let refused = git(
        &w,
        &["push", "origin", "HEAD:refs/heads/gatehouse/ci"],
        &envs,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("refusing to allow a GitHub App to create or update workflow `.github/workflows/x.yml` without `workflows` permission"),
        "{stderr}"
    );
    // Where GitHub puts it: the rejected ref's reason, once.
    assert_eq!(stderr.matches("refusing to allow").count(), 1, "{stderr}");
    assert!(
        stderr.contains("[remote rejected] HEAD -> gatehouse/ci (refusing to allow a GitHub App to create or update workflow `.github/workflows/x.yml` without `workflows` permission)"),
        "{stderr}"
    );

    // Nothing moved on the server for the refused push; the control did.
    let git_dir = github.repo_git_dir("acme/widgets").unwrap();
    let branch = |name: &str| {
        Command::new("git")
            .arg("--git-dir")
            .arg(&git_dir)
            .args(["rev-parse", "--verify", "-q", name])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(branch("refs/heads/gatehouse/readme"));
    assert!(!branch("refs/heads/gatehouse/ci"));
    // The token the proxy pushed with was minted without `workflows`.
    let minted = github.minted_tokens();
    assert!(!minted.is_empty());
    assert!(minted
        .iter()
        .all(|m| !m.permissions.contains_key("workflows")));
}
