//! A real coding agent as the worker: aider (the unmodified `aider-chat`
//! package from PyPI, installed by `scripts/install-aider`) runs inside a
//! ticket's sandbox through `workers/aider-worker.sh`. Its model calls go to
//! `api.openai.com` through the `gatehouse proxy` process (rule set
//! `model-api`, the shipped file), which injects the model key and routes
//! the host to the model emulator; its clone, push and pull request go to
//! the GitHub emulator through the same proxy (`github-worker`). The agent
//! holds neither key: the test looks for both in the worker's environment,
//! its work dir and its log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use gatehouse_emulators::{
    ModelEmulator, ModelOptions, ModelReply as Reply, ModelScript as Script,
};
use gatehouse_testkit::service::{Options, Service};
use gatehouse_testkit::skip::AIDER_PREFIX;
use gatehouse_testkit::{bin, require, Need};
use serde_json::{json, Value};

const REPO: &str = "acme/widgets";
const TASK: &str = "Explain in WOBBLE.md why widgets wobble";
/// What the scripted model answers the task with: aider's "whole" edit
/// format, a file's path and then its entire new content.
const EDIT: &str = "WOBBLE.md\n```\n# Why widgets wobble\n\nTheir base is round.\n```\n";
const COMMIT_MESSAGE: &str = "docs: explain why widgets wobble";

/// The worker's command: the repository's `workers/aider-worker.sh`, after
/// a probe that keeps the environment the sandbox gave it.
fn command() -> Value {
    let script = std::fs::read_to_string(bin::repo_path("workers/aider-worker.sh")).unwrap();
    json!([
        "sh",
        "-c",
        "env > /work/worker-env.txt && exec sh -c \"$1\" gatehouse-aider-worker",
        "probe",
        script
    ])
}

/// The shipped base and default profiles, and `aider`: the default profile
/// with aider's environment bound and its model settings.
fn profiles(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("profiles");
    std::fs::create_dir(&out).unwrap();
    for name in ["base.toml", "default.toml"] {
        std::fs::copy(
            bin::repo_path("sandbox-profiles").join(name),
            out.join(name),
        )
        .unwrap();
    }
    std::fs::write(
        out.join("aider.toml"),
        format!(
            r#"extends = "default"
description = "aider as the worker; the model key stays with the proxy"

[filesystem]
read_exec = ["{AIDER_PREFIX}"]

[env.set]
PATH = "{AIDER_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin"
AIDER_MODEL = "openai/gatehouse-emulated"
AIDER_EDIT_FORMAT = "whole"
OPENAI_API_BASE = "https://api.openai.com/v1"
OPENAI_API_KEY = "placeholder-the-proxy-injects-the-key"
LITELLM_LOCAL_MODEL_COST_MAP = "True"

[network]
rule_sets = ["github-worker", "model-api"]
"#
        ),
    )
    .unwrap();
    out
}

#[test]
fn aider_edits_through_the_proxy_and_its_change_arrives_as_a_pull_request() {
    require!(Need::Sandbox, Need::Aider);
    let dir = tempfile::tempdir().unwrap();
    let token = gatehouse_testkit::random::token("ghs_");
    let key = gatehouse_testkit::random::token("sk-test-");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let model = ModelEmulator::start(
        ModelOptions::default()
            .api_key(&key)
            .script(Script::new(
                &[TASK, "entire content of the updated file"],
                Reply::Content(EDIT.into()),
            ))
            .script(Script::new(
                &["one-line Git commit messages"],
                Reply::Content(COMMIT_MESSAGE.into()),
            )),
    )
    .unwrap();
    model
        .write_ca_pem(&dir.path().join("model-ca.pem"))
        .unwrap();
    let rules = bin::repo_path("sandbox-profiles/rules");
    let proxy = gatehouse_testkit::proxy::process::start_proxy_process_with(
        dir.path(),
        &github,
        &token,
        bin::command(),
        |d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(d.join("model.key"), &key).unwrap();
            std::fs::set_permissions(d.join("model.key"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
            // The shipped rule sets, and the model API's host routed to
            // the emulator with its key.
            let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
            let files = format!(
                "rule_set_files = [{:?}, {:?}, {:?}]",
                rules.join("github-read.toml"),
                rules.join("github-worker.toml"),
                rules.join("model-api.toml"),
            );
            let mut config = config.replace("rule_set_files = [\"rules.toml\"]", &files);
            config.push_str(&format!(
                "\n[credentials.model]\nkind = \"bearer\"\nkey_file = \"model.key\"\n\n\
                 [upstream.\"api.openai.com\"]\nurl = \"{}\"\nca_file = \"model-ca.pem\"\n",
                model.base_url()
            ));
            std::fs::write(d.join("proxy.toml"), config).unwrap();
        },
    );
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(proxy.admin.clone()),
        ca_cert: Some(dir.path().join("ca.pem")),
        profiles_dir: Some(profiles(dir.path())),
        ..Options::default()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let ticket = "tkt_aider_edit";
    let id = rt.block_on(svc.submit(
        "k1",
        json!({
            "ticket": ticket,
            "team": "core",
            "profile": "aider",
            "rule_sets": ["github-worker", "model-api"],
            "variables": {"repo": REPO},
            "task": TASK,
            "deadline_secs": 600,
            "command": command(),
        }),
    ));
    let end = rt.block_on(svc.wait_ended(&id));
    let ticket_dir = svc.state_dir().join("tickets").join(ticket);
    let stderr = std::fs::read_to_string(ticket_dir.join("logs").join(format!("{id}.stderr.log")))
        .unwrap_or_default();
    assert_eq!(end["state"], "done", "{end}\n{stderr}");

    // Ready, with the pull request's link.
    let report = &end["latest_report"];
    assert_eq!(report["state"], "ready", "{report}\n{stderr}");
    let link = report["links"][0].as_str().unwrap();
    assert!(
        link.starts_with(&format!("https://github.com/{REPO}/pull/")),
        "{link}"
    );
    let opened: Vec<_> = github
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/repos/{REPO}/pulls"))
        .collect();
    assert_eq!(opened.len(), 1, "one pull request opened");

    // The agent's edit and its commit message are on the pushed branch.
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(github.repo_git_dir(REPO).unwrap())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let branch = format!("gatehouse/{ticket}");
    assert_eq!(
        git(&["show", &format!("{branch}:WOBBLE.md")]),
        "# Why widgets wobble\n\nTheir base is round.\n"
    );
    assert_eq!(
        git(&["log", "-1", "--format=%s", &branch]).trim(),
        COMMIT_MESSAGE
    );

    // The model was asked through the proxy: the emulator accepts only
    // the real key, and the task reached it as aider sent it.
    let asked = model.requests();
    assert!(
        asked
            .iter()
            .any(|r| r.status == 200 && String::from_utf8_lossy(&r.body).contains(TASK)),
        "the model never answered the task: {asked:?}"
    );
    assert!(asked.iter().all(|r| r.status == 200), "{asked:?}");
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(
        audit.lines().any(|l| l.contains("api.openai.com")
            && l.contains("/v1/chat/completions")
            && l.contains(ticket)),
        "the model calls are not on the proxy's record under the ticket"
    );

    // Neither key anywhere the worker could see: its environment, every
    // file it left in its work dir (aider's history included), its log.
    let env = std::fs::read_to_string(ticket_dir.join("work/worker-env.txt")).unwrap();
    assert!(env.contains("OPENAI_API_KEY=placeholder"), "{env}");
    assert!(env.contains("HTTPS_PROXY="), "{env}");
    let mut seen = vec![("worker env".to_string(), env.into_bytes())];
    seen.push(("worker stderr".into(), stderr.clone().into_bytes()));
    let mut stack = vec![ticket_dir.join("work")];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                seen.push((
                    entry.path().display().to_string(),
                    std::fs::read(entry.path()).unwrap(),
                ));
            }
        }
    }
    assert!(
        seen.iter()
            .any(|(p, _)| p.ends_with(".aider.chat.history.md")),
        "aider's history is not in the work dir: the scan would miss what aider wrote"
    );
    for (what, bytes) in &seen {
        for secret in [&token, &key] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "a key is in {what}"
            );
        }
    }
    drop(proxy);
}
