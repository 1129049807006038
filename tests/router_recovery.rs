//! The webhook recovery loop, with real processes: GitHub (the emulator)
//! fails to deliver a webhook; `gatehouse router run` with
//! `[github_recovery]` lists the App's deliveries through `gatehouse proxy`
//! (which signs the App JWT; the router holds no key), asks for the failed
//! one again, and the redelivered event is decided exactly once, however
//! many rounds run after.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_emulators::{
    rsa_public_key_der, GithubAppSpec, GithubEmulator, GithubOptions, RepoSpec, WebhookFaults,
};
use gatehouse_router::store::{Durability, Store};
use gatehouse_testkit::proxy::process::{admin_call, start_proxy_process_with};
use gatehouse_testkit::random::token as random_token;
use gatehouse_testkit::router::*;
use serde_json::Value;

const SECRET: &str = "recovery-test-secret";

/// A TCP relay on loopback to an address set later (the router's listener
/// is known only once it runs; the emulator's webhook target is fixed at
/// its start).
fn late_relay() -> (u16, Arc<Mutex<Option<SocketAddr>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let target: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
    let to = target.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Some(addr) = *to.lock().unwrap() else {
                continue;
            };
            let Ok(server) = TcpStream::connect(addr) else {
                continue;
            };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut c1, mut s1) = (client, server);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c1, &mut s1);
                let _ = s1.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, target)
}

fn wait(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The stored deliveries with this id and the trigger decisions.
fn stored(state: &Path, guid: &str) -> (usize, usize) {
    let store = Store::open(state, Durability::Normal).unwrap();
    let read = store.read();
    let deliveries = read
        .deliveries()
        .unwrap()
        .into_iter()
        .filter(|d| d.delivery_id == guid && d.processed.is_some())
        .count();
    let triggers = read
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "trigger")
        .count();
    (deliveries, triggers)
}

#[test]
fn a_failed_webhook_is_redelivered_and_decided_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (proxy_dir, router_dir) = (d.join("proxy"), d.join("router"));
    std::fs::create_dir_all(&proxy_dir).unwrap();
    std::fs::create_dir_all(&router_dir).unwrap();
    let key = proxy_dir.join("app.pem");
    let status = Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&key)
        .arg("2048")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "openssl genrsa failed");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    let (relay_port, relay_to) = late_relay();
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .app(GithubAppSpec {
                app_id: 4242,
                slug: "gatehouse-bot".into(),
                public_key_der: rsa_public_key_der(&std::fs::read_to_string(&key).unwrap())
                    .unwrap(),
                installation_id: 7,
                permissions: BTreeMap::from([("issues".into(), "write".into())]),
                repositories: None,
            })
            .repo(RepoSpec::new("acme", "widgets"))
            .webhook(&format!("http://127.0.0.1:{relay_port}/webhook"), SECRET),
    )
    .unwrap();

    let shipped =
        gatehouse_testkit::bin::repo_path("sandbox-profiles/rules/router-github-app.toml");
    let proxy = start_proxy_process_with(
        &proxy_dir,
        &github,
        &random_token("ghp_"),
        gatehouse_testkit::bin::command(),
        |p| {
            std::fs::copy(&shipped, p.join("router-github-app.toml")).unwrap();
            let config = std::fs::read_to_string(p.join("proxy.toml"))
                .unwrap()
                .replace(
                    "kind = \"github_token\"\ntoken_file = \"github.token\"\n",
                    "kind = \"github_app\"\napp_id = 4242\nprivate_key_file = \"app.pem\"\ninstallation_id = 7\n",
                )
                .replace("dangerously_allow_unscoped_graphql = true\n", "")
                .replace(
                    "rule_set_files = [\"rules.toml\"]",
                    "rule_set_files = [\"rules.toml\", \"router-github-app.toml\"]",
                );
            std::fs::write(p.join("proxy.toml"), config).unwrap();
        },
    );
    let new = r#"{"name":"router-app","rule_sets":["router-github-app"],"tunnel_hosts":[],"variables":{}}"#;
    let (status, body) = admin_call(&proxy.admin, "POST", "/identities", Some(new));
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let socket = PathBuf::from(created["socket"].as_str().unwrap());

    // The router: the example policy with the emulator's ids for its people.
    let policy = std::fs::read_to_string(example("policy.toml"))
        .unwrap()
        .replace(
            "id = 1001",
            &format!("id = {}", gatehouse_emulators::github::user_id("alice")),
        )
        .replace(
            "id = 9000001",
            &format!(
                "id = {}",
                gatehouse_emulators::github::user_id("gatehouse-bot[bot]")
            ),
        );
    std::fs::write(router_dir.join("policy.toml"), policy).unwrap();
    std::fs::write(router_dir.join("webhook-secret"), SECRET).unwrap();
    std::fs::write(
        router_dir.join("router.toml"),
        format!(
            "policy = \"policy.toml\"\nstate = \"router.db\"\n\
             [jobs]\nsocket = \"jobs.sock\"\ndeadline_secs = 60\n\
             [proxy]\nca_cert = \"{}\"\ngithub_app_socket = \"{}\"\n\
             [github]\nlisten = \"127.0.0.1:0\"\nwebhook_secret_files = [\"webhook-secret\"]\n\
             [github_recovery]\ninterval_secs = 1\n",
            proxy_dir.join("ca.pem").display(),
            socket.display()
        ),
    )
    .unwrap();
    let mut router: Child = gatehouse()
        .args(["router", "run", "--config"])
        .arg(router_dir.join("router.toml"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(router_dir.join("router.log")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(router.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!(
            "{line:?}: {e}; {}",
            std::fs::read_to_string(router_dir.join("router.log")).unwrap_or_default()
        )
    });
    let listening: SocketAddr = ready["listening"]["github"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    *relay_to.lock().unwrap() = Some(listening);
    let state = router_dir.join("router.db");

    // Positive control: delivered, stored, decided; never asked for again.
    let n = github
        .add_issue("acme/widgets", "Wobbles", "It wobbles.", "alice")
        .unwrap();
    let first = github.webhook_deliveries().last().unwrap().guid.clone();
    wait("the delivered issue", || stored(&state, &first).0 == 1);

    // GitHub fails to deliver the mention; the recovery loop asks for it.
    github.set_webhook_faults(WebhookFaults {
        drop: true,
        ..WebhookFaults::default()
    });
    github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix", "alice")
        .unwrap();
    github.set_webhook_faults(WebhookFaults::default());
    let lost = github.webhook_deliveries().last().unwrap().clone();
    assert!(lost.attempts.is_empty(), "dropped: {lost:?}");
    wait("the redelivered mention", || {
        stored(&state, &lost.guid).0 == 1
    });
    let (_, triggers) = stored(&state, &lost.guid);
    assert!(triggers >= 1, "the mention became a trigger");

    // More rounds run: nothing is asked for again, nothing decided twice.
    let lists = |g: &gatehouse_emulators::GithubHandle| {
        g.requests()
            .iter()
            .filter(|r| r.path == "/app/hook/deliveries" && r.status == 200)
            .count()
    };
    let seen = lists(&github);
    wait("two more recovery rounds", || lists(&github) >= seen + 2);
    let redeliveries: Vec<_> = github
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/app/hook/deliveries/"))
        .collect();
    assert_eq!(redeliveries.len(), 1, "asked once: {redeliveries:?}");
    assert_eq!(redeliveries[0].status, 202);
    assert!(
        redeliveries[0]
            .authorization()
            .unwrap()
            .starts_with("Bearer ey"),
        "the proxy signed an App JWT"
    );
    let again = github.webhook_deliveries();
    let lost_now = again.iter().find(|w| w.guid == lost.guid).unwrap();
    assert_eq!(lost_now.attempts.len(), 1, "{lost_now:?}");
    assert_eq!(stored(&state, &lost.guid), (1, triggers));
    assert_eq!(
        stored(&state, &first).0,
        1,
        "the delivered one was not asked for"
    );

    gatehouse_testkit::procs::signal(router.id(), "TERM");
    let _ = router.wait();
    // The router never held the key.
    let log = std::fs::read_to_string(router_dir.join("router.log")).unwrap();
    let pem = std::fs::read_to_string(&key).unwrap();
    assert!(!log.contains(pem.lines().nth(1).unwrap()));
    drop(proxy);
}
