//! A personal token is not a scope: `gatehouse proxy` refuses to start on a
//! config whose GraphQL rules would use a `github_token` (a query can walk
//! from the pinned repository to any repository the token reads), names
//! the key and the opt-in; with the opt-in it starts and warns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use gatehouse_emulators::{GithubEmulator, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::start_proxy_process;
use gatehouse_testkit::random::token as random_token;

const OPT_IN: &str = "dangerously_allow_unscoped_graphql = true\n";

#[test]
fn graphql_on_a_personal_token_needs_the_opt_in_and_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();

    // Opted in (the fixture's config): it starts, and says what it allowed.
    let proxy = start_proxy_process(d, &github, &token);
    let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
    assert!(config.contains(OPT_IN), "{config}");
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    let warning = log
        .lines()
        .find(|l| l.contains("dangerously_allow_unscoped_graphql"))
        .unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("credential `github`"), "{warning}");
    assert!(!log.contains(&token));
    drop(proxy);

    // Without the opt-in, the same config does not start.
    std::fs::write(d.join("proxy.toml"), config.replace(OPT_IN, "")).unwrap();
    let _ = std::fs::remove_file(d.join("admin.sock"));
    let mut child = gatehouse_testkit::bin::command()
        .args(["proxy", "--config"])
        .arg(d.join("proxy.toml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("gatehouse proxy kept running without the opt-in");
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("`credentials.github`"), "{stderr}");
    assert!(stderr.contains("rule `graphql`"), "{stderr}");
    assert!(
        stderr.contains("dangerously_allow_unscoped_graphql"),
        "{stderr}"
    );
    assert!(!d.join("admin.sock").exists(), "nothing was served");
}
