//! A 200 MB git push streams through the proxy: the proxy process never
//! holds it in memory (its peak resident set stays far below the push).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use gatehouse_emulators::{GithubEmulator, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::{admin_call, start_proxy_process, thread_relay};
use gatehouse_testkit::random::token as random_token;

const PUSH_MIB: u64 = 200;

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap())
        .unwrap()
}

fn git(dir: &std::path::Path, args: &[&str], envs: &[(&str, String)]) -> std::process::Output {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("HOME", dir)
        .output()
        .unwrap();
    if !out.status.success() {
        let audit = dir
            .ancestors()
            .map(|a| a.join("audit.jsonl"))
            .find(|p| p.exists())
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .unwrap_or_default();
        let denials: Vec<&str> = audit
            .lines()
            .filter(|l| l.contains(r#""decision":"deny""#))
            .collect();
        panic!(
            "git {args:?}: {}\ndenials: {denials:#?}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

#[test]
fn a_200_mb_push_streams_through_without_being_held_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let proxy = start_proxy_process(d, &github, &token);
    let (status, body) = admin_call(
        &proxy.admin,
        "POST",
        "/identities",
        Some(
            r#"{"name":"tkt_big","rule_sets":["test-worker"],"variables":{"repo":"acme/widgets"}}"#,
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
    git(
        &work,
        &["clone", "-q", "https://github.com/acme/widgets.git", "w"],
        &envs,
    );
    let w = work.join("w");
    // Incompressible, so the pack is as big as the file.
    let big = std::fs::File::create(w.join("big.bin")).unwrap();
    let fill = Command::new("head")
        .args(["-c", &format!("{PUSH_MIB}M"), "/dev/urandom"])
        .stdout(big)
        .status()
        .unwrap();
    assert!(fill.success());
    git(
        &w,
        &[
            "-c",
            "user.name=w",
            "-c",
            "user.email=w@example.invalid",
            "add",
            "big.bin",
        ],
        &envs,
    );
    git(
        &w,
        &[
            "-c",
            "user.name=w",
            "-c",
            "user.email=w@example.invalid",
            "commit",
            "-qm",
            "big",
        ],
        &envs,
    );
    let before = peak_rss_kib(proxy.child.id());
    git(
        &w,
        &[
            "-c",
            "http.postBuffer=1048576",
            "push",
            "-q",
            "origin",
            "HEAD:refs/heads/gatehouse/big",
        ],
        &envs,
    );

    let git_dir = github.repo_git_dir("acme/widgets").unwrap();
    let pushed = Command::new("git")
        .arg("--git-dir")
        .arg(&git_dir)
        .args(["cat-file", "-s", "gatehouse/big:big.bin"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&pushed.stdout).trim(),
        (PUSH_MIB << 20).to_string()
    );
    let peak = peak_rss_kib(proxy.child.id());
    eprintln!(
        "proxy peak RSS: {before} KiB before the push, {peak} KiB after a {PUSH_MIB} MiB push"
    );
    // What the push added, not the process's size at rest (a debug build
    // maps more of its larger binary): holding the push would add its size.
    let grew = peak.saturating_sub(before);
    assert!(
        grew < (PUSH_MIB << 10) / 8,
        "the proxy's peak RSS grew by {grew} KiB (to {peak}) during a {PUSH_MIB} MiB push"
    );
}
