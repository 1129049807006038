//! A large push streams through the emulator without being held in memory.
//! Its own test binary, so the peak-RSS measurement sees only this push.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use gatehouse_emulators::{GithubEmulator, GithubOptions, RepoSpec};

const TOKEN: &str = "ghs_large_push_token";
const PUSH_BYTES: usize = 64 * 1024 * 1024;

/// Peak resident set size of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn git(ca: &Path, cwd: &Path, args: &[&str]) {
    let output = Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_SSL_CAINFO", ca)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn sixty_four_megabyte_push_streams() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let url = format!(
        "https://x-access-token:{TOKEN}@127.0.0.1:{}/acme/widgets.git",
        emulator.addr().port()
    );
    git(&ca, dir.path(), &["clone", "--quiet", &url, "work"]);
    let work = dir.path().join("work");

    // Incompressible content (xorshift), written in chunks.
    let mut file = std::io::BufWriter::new(std::fs::File::create(work.join("big.bin")).unwrap());
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..PUSH_BYTES / chunk.len() {
        for word in chunk.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        file.write_all(&chunk).unwrap();
    }
    drop(file);
    git(&ca, &work, &["checkout", "--quiet", "-b", "gatehouse/big"]);
    git(&ca, &work, &["add", "big.bin"]);
    git(&ca, &work, &["commit", "--quiet", "-m", "big"]);

    let before = peak_rss();
    git(&ca, &work, &["push", "--quiet", "origin", "gatehouse/big"]);
    let grown = peak_rss().saturating_sub(before);

    let bare = emulator.repo_git_dir("acme/widgets").unwrap();
    let output = Command::new("git")
        .arg("--git-dir")
        .arg(&bare)
        .args(["cat-file", "-s", "gatehouse/big:big.bin"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        PUSH_BYTES.to_string()
    );
    assert!(
        grown < 24 * 1024 * 1024,
        "peak RSS grew by {grown} bytes while pushing {PUSH_BYTES}: the body was buffered"
    );
    eprintln!(
        "peak RSS grew by {} KiB during a {} MiB push",
        grown / 1024,
        PUSH_BYTES >> 20
    );
}
