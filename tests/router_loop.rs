//! The live loop end to end, every part a real process: the GitHub
//! emulator's webhooks reach `gatehouse router run`, which runs a job on
//! `gatehouse supervisor` (a real sandbox where the machine can build one)
//! and replies through `gatehouse proxy` with its own identity.
//!
//! The story: alice mentions the bot ─► exactly one ack comment ─► the job
//! runs ─► alice asks a follow-up, which reaches the worker's inbox ─► the
//! worker answers it (and names it a second time: the core refuses that
//! answer and nothing is sent) ─► reports ready with a link ─► exactly one
//! result comment. Again with `kill -9` of the router throughout: no reply
//! twice, none lost. And the router's identity cannot push or merge.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use gatehouse_emulators::{user_id, GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_router::store::{Durability, OutboxState, Store};
use gatehouse_testkit::proxy::process::{admin_call, start_proxy_process_with, ProxyProcess};
use gatehouse_testkit::service::{Options, Service};
use serde_json::{json, Value};

const SECRET: &str = "loop-webhook-secret";
const PROFILE: &str = "live-test";

/// The worker: says it is working, waits for a message, answers it (twice:
/// the second is refused by the router), then reports ready with a link;
/// with pauses, so that the router can be killed between any two steps.
const WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at the wobble' || exit 90
T=$(gatehouse inbox --wait | sed -n 's/.*"trigger":"\(trg_[0-9a-f]*\)".*/\1/p' | head -1)
test -n "$T" || exit 91
sleep 0.5
gatehouse report --state working --summary 'Yes, the docs get the fix too' --answers "$T" || exit 92
sleep 0.5
gatehouse report --state working --summary 'Yes, really' --answers "$T" || exit 93
sleep 0.5
gatehouse report --state ready --summary 'Fixed the wobble; the docs say so' --link https://github.com/acme/widgets/pull/1 || exit 94
"#;

struct World {
    dir: tempfile::TempDir,
    github: GithubHandle,
    proxy: ProxyProcess,
    _supervisor: Service,
    router: Option<Child>,
    router_log: PathBuf,
    identity: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn world() -> World {
    let dir = tempfile::Builder::new()
        .prefix("gh-loop")
        .tempdir()
        .unwrap();
    let port = free_port();
    let token = gatehouse_testkit::random::token("ghs_");
    let github = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-bot")
            .repo(RepoSpec::new("acme", "widgets"))
            .webhook(&format!("http://127.0.0.1:{port}/webhook"), SECRET),
    )
    .unwrap();
    // The proxy with the shipped router rule sets beside the test's own.
    let proxy_dir = dir.path().join("proxy");
    std::fs::create_dir(&proxy_dir).unwrap();
    let shipped = gatehouse_testkit::bin::repo_path("sandbox-profiles/rules");
    let proxy = start_proxy_process_with(
        &proxy_dir,
        &github,
        &token,
        gatehouse_testkit::bin::command(),
        |d| {
            std::fs::copy(
                shipped.join("router-github.toml"),
                d.join("router-github.toml"),
            )
            .unwrap();
            let config = std::fs::read_to_string(d.join("proxy.toml"))
                .unwrap()
                .replace(
                    "rule_set_files = [\"rules.toml\"]",
                    "rule_set_files = [\"rules.toml\", \"router-github.toml\"]",
                );
            std::fs::write(d.join("proxy.toml"), config).unwrap();
        },
    );
    let (status, created) = admin_call(
        &proxy.admin,
        "POST",
        "/identities",
        Some(
            &json!({"name": "router-gh-1", "rule_sets": ["router-github"],
                     "variables": {"repo": "acme/widgets"}})
            .to_string(),
        ),
    );
    assert_eq!(status, 201, "{created}");
    let identity = PathBuf::from(
        serde_json::from_str::<Value>(&created).unwrap()["socket"]
            .as_str()
            .unwrap(),
    );
    // The supervisor: the worker's profile and the proxy for its identity.
    let sandboxed = gatehouse_testkit::sandbox::any_mode().is_some();
    if !sandboxed {
        eprintln!("router_loop: no sandbox on this machine; the worker runs unsandboxed");
    }
    let profiles = dir.path().join("profiles");
    std::fs::create_dir(&profiles).unwrap();
    std::fs::write(
        profiles.join(format!("{PROFILE}.toml")),
        format!(
            "extends = \"default\"\ndescription = \"live loop test\"\n\
             [network]\nrule_sets = [\"{}\"]\n[worker]\ncommand = [\"sh\", \"-c\", {WORKER:?}]\n",
            gatehouse_testkit::rules::TEST_RULE_SET
        ),
    )
    .unwrap();
    let supervisor = Service::start(Options {
        unsandboxed: !sandboxed,
        proxy_admin: Some(proxy.admin.clone()),
        ca_cert: Some(proxy_dir.join("ca.pem")),
        profiles_dir: Some(profiles),
        ..Options::default()
    });
    // The router's policy and config.
    std::fs::write(
        dir.path().join("policy.toml"),
        format!(
            r#"
identity = {{ github = {{ login = "gatehouse-bot", id = {bot} }} }}

[[people]]
name = "alice"
team = "core"
github = {{ login = "alice", id = {alice} }}

[teams.core.repos."acme/widgets"]
sandbox_profile = "{PROFILE}"
rule_sets = ["{rules}"]
"#,
            bot = user_id("gatehouse-bot"),
            alice = user_id("alice"),
            rules = gatehouse_testkit::rules::TEST_RULE_SET,
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("webhook-secret"), SECRET).unwrap();
    std::fs::write(
        dir.path().join("router.toml"),
        format!(
            "policy = \"policy.toml\"\nstate = \"router.db\"\n\
             [jobs]\nsocket = {jobs:?}\ndeadline_secs = 120\n\
             [proxy]\nca_cert = {ca:?}\n[proxy.github_sockets]\n\"acme/widgets\" = {identity:?}\n\
             [github]\nlisten = \"127.0.0.1:{port}\"\nwebhook_secret_files = [\"webhook-secret\"]\n",
            jobs = supervisor.socket,
            ca = proxy_dir.join("ca.pem"),
        ),
    )
    .unwrap();
    let mut w = World {
        router_log: dir.path().join("router.log"),
        dir,
        github,
        proxy,
        _supervisor: supervisor,
        router: None,
        identity,
    };
    w.start_router();
    w
}

impl World {
    fn start_router(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.router_log)
            .unwrap();
        let mut child = gatehouse_testkit::bin::command()
            .args(["router", "run", "--config"])
            .arg(self.dir.path().join("router.toml"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains("listening"),
            "router run: {line:?}: {}",
            self.log()
        );
        self.router = Some(child);
    }

    fn kill_router(&mut self) {
        let mut child = self.router.take().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.router_log).unwrap_or_default()
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("router.db")
    }

    /// The bot's comments on the issue, in order.
    fn bot_comments(&self, number: u64) -> Vec<String> {
        self.github
            .comments()
            .into_iter()
            .filter(|c| c.number == number && c.author == "gatehouse-bot")
            .map(|c| c.body)
            .collect()
    }

    /// Waits until `pred` holds of the bot's comments (a deadline, not a timing assertion).
    fn wait_comments(&self, number: u64, what: &str, pred: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !pred(&self.bot_comments(number)) {
            assert!(
                Instant::now() < deadline,
                "waiting for {what}; the bot said {:?}\nrouter log:\n{}",
                self.bot_comments(number),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut child) = self.router.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn count(comments: &[String], prefix: &str) -> usize {
    comments.iter().filter(|c| c.starts_with(prefix)).count()
}

/// The story; `chaos` kills the router with SIGKILL at every step and
/// whenever `chaos` says so in between, restarting it each time.
fn story(chaos: bool) {
    let mut w = world();
    let n = w
        .github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    w.github
        .add_issue_comment(
            "acme/widgets",
            n,
            "@gatehouse-bot please fix the wobble",
            "alice",
        )
        .unwrap();
    let mut kills = 0;
    let mut chaos_until = |w: &mut World, done: &dyn Fn(&World) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut i = 0u64;
        while !done(w) {
            assert!(Instant::now() < deadline, "stuck; router log:\n{}", w.log());
            if chaos {
                // Different points of the loop each time: 0 to 250 ms in.
                std::thread::sleep(Duration::from_millis((i * 37) % 250));
                w.kill_router();
                kills += 1;
                w.start_router();
            }
            std::thread::sleep(Duration::from_millis(50));
            i += 1;
        }
    };
    chaos_until(&mut w, &|w| !w.bot_comments(n).is_empty());
    w.wait_comments(n, "the ack", |c| count(c, "On it") == 1);
    // A follow-up reaches the worker through its inbox; the router runs
    // when it is delivered (GitHub does not retry).
    w.github
        .add_issue_comment(
            "acme/widgets",
            n,
            "@gatehouse-bot can the docs say so too?",
            "alice",
        )
        .unwrap();
    chaos_until(&mut w, &|w| count(&w.bot_comments(n), "Done:") > 0);
    w.wait_comments(n, "the result", |c| count(c, "Done:") == 1);
    // Let anything that would go out twice go out.
    std::thread::sleep(Duration::from_secs(2));
    let said = w.bot_comments(n);
    assert_eq!(count(&said, "On it"), 1, "{said:?}");
    assert_eq!(count(&said, "Yes, the docs get the fix too"), 1, "{said:?}");
    assert_eq!(count(&said, "Done: Fixed the wobble"), 1, "{said:?}");
    assert_eq!(
        said.len(),
        3,
        "ack, answer, result and nothing else: {said:?}"
    );
    assert!(
        said[2].contains("https://github.com/acme/widgets/pull/1"),
        "{said:?}"
    );
    assert!(
        said.iter().all(|c| c.contains("<!-- gatehouse:rpl_")),
        "{said:?}"
    );
    if chaos {
        assert!(kills > 0);
        eprintln!("router_loop: the router was killed {kills} times");
    }

    // The reply log and the outbox agree: every reply sent once; the second
    // answer was refused by the core and never queued.
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let read = store.read();
    let outbox = read.outbox().unwrap();
    assert_eq!(outbox.len(), 3, "{outbox:?}");
    assert!(
        outbox.iter().all(|o| o.state == OutboxState::Sent),
        "{outbox:?}"
    );
    let refused: Vec<Value> = read
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "reply" && d["refused"].is_object())
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["refused"]["refusal"], "already_answered");
    // The ticket ended completed once the job was done.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tickets = Store::open(&w.state(), Durability::Normal)
            .unwrap()
            .read()
            .tickets()
            .unwrap();
        assert_eq!(tickets.len(), 1);
        if tickets[0].outcome.is_some() {
            assert_eq!(
                serde_json::to_value(tickets[0].outcome).unwrap(),
                "completed"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ticket never ended: {}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The proxy logged each reply as a message.
    let audit = std::fs::read_to_string(w.proxy.log.with_file_name("audit.jsonl")).unwrap();
    let messages = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| {
            l["event"] == "request"
                && l["identity"] == "router-gh-1"
                && l["message"]["kind"] == "github_issue_comment"
        })
        .count();
    assert!(messages >= 3, "{messages}");
}

#[test]
fn a_mention_is_acked_once_worked_and_answered_once() {
    story(false);
}

#[test]
fn kill_9_of_the_router_anywhere_repeats_and_loses_nothing() {
    story(true);
}

/// Runs curl through the identity socket (a relay on loopback):
/// (the CONNECT's status, the request's status).
fn curl(w: &World, method: &str, url: &str) -> (u16, u16) {
    let port = gatehouse_testkit::proxy::process::thread_relay(w.identity.clone());
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_connect} %{http_code}",
            "-X",
            method,
        ])
        .arg("--proxy")
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--cacert")
        .arg(w.dir.path().join("proxy/ca.pem"))
        .arg(url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut codes = text.split_whitespace().map(|c| c.parse().unwrap_or(0));
    (codes.next().unwrap_or(0), codes.next().unwrap_or(0))
}

#[test]
fn the_routers_identity_cannot_push_or_merge() {
    let w = world();
    let n = w
        .github
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    // The control: what it may do.
    let comments = format!("https://api.github.com/repos/acme/widgets/issues/{n}/comments");
    assert_eq!(curl(&w, "GET", &comments), (200, 200));
    for (method, url) in [
        (
            "PUT",
            "https://api.github.com/repos/acme/widgets/pulls/1/merge",
        ),
        ("POST", "https://api.github.com/repos/acme/widgets/pulls"),
        ("POST", "https://api.github.com/repos/acme/widgets/git/refs"),
        (
            "PATCH",
            "https://api.github.com/repos/acme/widgets/issues/comments/1",
        ),
        (
            "GET",
            "https://api.github.com/repos/acme/widgets/contents/README.md",
        ),
        (
            "POST",
            "https://api.github.com/repos/acme/other/issues/1/comments",
        ),
    ] {
        assert_eq!(curl(&w, method, url), (200, 403), "{method} {url}");
    }
    // git push: github.com is not a host the identity may reach at all;
    // the CONNECT itself is refused.
    for url in [
        "https://github.com/acme/widgets.git/git-receive-pack",
        "https://github.com/acme/widgets.git/info/refs?service=git-receive-pack",
    ] {
        assert_eq!(curl(&w, "POST", url).0, 403, "{url}");
    }
}
