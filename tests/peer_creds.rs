//! The job API and the proxy's admin socket check who is calling by the
//! peer's credentials (SO_PEERCRED), not only by the socket file's mode:
//! with the mode opened to everyone on purpose, a call from the
//! `gatehouse-test` user is refused (the connection closed unanswered, and
//! logged), while root's is answered.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::os::unix::fs::PermissionsExt;

use gatehouse_testkit::machine::{http_status_as as call_as, user_gid, user_uid, TEST_USER};
use gatehouse_testkit::service::{Options, Service};
use gatehouse_testkit::{require, Need};

fn test_user() -> (u32, u32) {
    (user_uid(TEST_USER).unwrap(), user_gid(TEST_USER).unwrap())
}

#[test]
fn the_job_api_refuses_another_user_even_through_an_open_mode() {
    require!(Need::Root, Need::User(TEST_USER));
    let svc = Service::start(Options::default());
    std::fs::set_permissions(&svc.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    // The directory too, so that only the credentials check stands.
    let dir = svc.socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = "/events?after=0&wait_ms=0";
    assert!(call_as(None, &svc.socket, path).starts_with("HTTP/1.1 200"));
    assert_eq!(call_as(Some(test_user()), &svc.socket, path), "closed");
    // The service still serves root afterwards.
    assert!(call_as(None, &svc.socket, path).starts_with("HTTP/1.1 200"));
}

#[test]
fn the_job_api_admits_its_group_by_the_peers_credentials() {
    require!(Need::Root, Need::User(TEST_USER));
    let svc = Service::start(Options {
        api_socket_group: Some(TEST_USER.into()),
        ..Options::default()
    });
    let dir = svc.socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = "/events?after=0&wait_ms=0";
    assert!(call_as(Some(test_user()), &svc.socket, path).starts_with("HTTP/1.1 200"));
    // Another user with the mode opened: refused by its credentials.
    std::fs::set_permissions(&svc.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(call_as(Some((65534, 65534)), &svc.socket, path), "closed");
}

#[test]
fn the_proxy_admin_socket_refuses_another_user_even_through_an_open_mode() {
    require!(Need::Root, Need::User(TEST_USER));
    let dir = gatehouse_testkit::sandbox::reachable_dir("gh-peer-");
    let token = gatehouse_testkit::random::token("ghs_");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let proxy = gatehouse_testkit::proxy::process::start_proxy_process(dir.path(), &github, &token);
    std::fs::set_permissions(&proxy.admin, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(call_as(None, &proxy.admin, "/identities").starts_with("HTTP/1.1 200"));
    assert_eq!(
        call_as(Some(test_user()), &proxy.admin, "/identities"),
        "closed"
    );
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused a peer of the admin socket"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    // The line names the peer (its fields may carry colour codes).
    assert!(
        refused[0].contains(&test_user().0.to_string()),
        "{}",
        refused[0]
    );
}
