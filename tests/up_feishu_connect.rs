//! `gatehouse up` with `[feishu] long_connection = true`, as root, against
//! the Feishu emulator's long connection: `up` runs `gatehouse intake
//! feishu-connect` as a fourth part under the proxy's user, the only
//! holder of the app secret besides the proxy; it hands each event to the
//! router's socket, which only the proxy's group can reach; one person's
//! message becomes one trigger and one ack in the chat, and her recall of
//! it ends the ticket; the part stops first.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use gatehouse::up::{self, Part};
use gatehouse_emulators::feishu::ws::LongConnection;
use gatehouse_emulators::{FeishuEmulator, FeishuOptions};
use gatehouse_router::store::{DeliveryLog, Durability, Store};
use gatehouse_router::ticket::Outcome;
use gatehouse_testkit::machine::{connect_errno_as, user_gid, user_uid, TEST_USER};
use gatehouse_testkit::rules::TEST_RULES;
use gatehouse_testkit::{require, Need};

const PROXY_USER: &str = "gatehouse-proxy";
const ROUTER_USER: &str = "gatehouse-router";
const APP: &str = "cli_up_long";
const BOT: &str = "ou_up_bot";
const TOKEN: &str = "up-long-verification-token";

const POLICY: &str = r#"
identity = { feishu = "ou_up_bot" }

[[people]]
name = "alice"
team = "core"
feishu = "ou_alice"

[teams.core]
default_repo = "acme/widgets"

[teams.core.repos."acme/widgets"]
sandbox_profile = "held"
rule_sets = ["test-worker"]

[[chats]]
id = "oc_core"
team = "core"
repo = "acme/widgets"
"#;

fn ids(name: &str) -> (u32, u32) {
    (user_uid(name).unwrap(), user_gid(name).unwrap())
}

fn write(path: &Path, text: &str, mode: u32, owner: Option<(u32, u32)>) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn proc_text(pid: u32, what: &str) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/{what}")).unwrap()
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// A deployment with the long connection on, the emulator's app secret
/// `secret` and, in the proxy's file, `secret_in_file`.
struct World {
    dir: tempfile::TempDir,
    _run: tempfile::TempDir,
    feishu: gatehouse_emulators::FeishuHandle,
    secret: String,
}

impl World {
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
}

fn world(wrong_secret: bool) -> World {
    let dir = gatehouse_testkit::sandbox::reachable_dir("gh-upf-");
    let run = gatehouse_testkit::sandbox::reachable_dir("uf");
    let p = |rel: &str| dir.path().join(rel);
    let secret = gatehouse_testkit::random::token("fsapp_");
    let feishu = FeishuEmulator::start(
        FeishuOptions {
            bot_open_id: BOT.to_owned(),
            long_connection: Some(LongConnection {
                app_id: APP.into(),
                verification_token: TOKEN.into(),
                ack_timeout: Duration::from_secs(3),
            }),
            ..FeishuOptions::default()
        }
        .app(APP, &secret),
    )
    .unwrap();
    feishu.write_ca_pem(&p("feishu-ca.pem")).unwrap();
    std::fs::set_permissions(p("feishu-ca.pem"), std::fs::Permissions::from_mode(0o644)).unwrap();
    for d in ["bin", "rules", "secrets", "profiles"] {
        std::fs::create_dir(p(d)).unwrap();
        std::fs::set_permissions(p(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    gatehouse_testkit::bin::copy_to(&p("bin"));
    write(&p("rules/test-worker.toml"), TEST_RULES, 0o644, None);
    for name in ["router-github", "router-feishu"] {
        let shipped =
            gatehouse_testkit::bin::repo_path(&format!("sandbox-profiles/rules/{name}.toml"));
        let text = std::fs::read_to_string(shipped).unwrap();
        write(&p(&format!("rules/{name}.toml")), &text, 0o644, None);
    }
    for name in ["base", "default"] {
        let shipped = gatehouse_testkit::bin::repo_path(&format!("sandbox-profiles/{name}.toml"));
        let text = std::fs::read_to_string(shipped).unwrap().replace(
            "rule_sets = [\"github-worker\", \"model-api\"]",
            "rule_sets = [\"github-worker\", \"model-api\", \"test-worker\"]",
        );
        write(&p(&format!("profiles/{name}.toml")), &text, 0o644, None);
    }
    // A worker that waits: the ticket is live when the recall comes.
    write(
        &p("profiles/held.toml"),
        "extends = \"default\"\n[network]\nrule_sets = [\"test-worker\"]\n\
         [worker]\ncommand = [\"sleep\", \"300\"]\n",
        0o644,
        None,
    );
    write(&p("policy.toml"), POLICY, 0o644, None);
    let proxy = ids(PROXY_USER);
    let router = ids(ROUTER_USER);
    let in_file = if wrong_secret {
        "not-the-app-secret".to_owned()
    } else {
        secret.clone()
    };
    write(&p("secrets/feishu-app"), &in_file, 0o400, Some(proxy));
    write(&p("secrets/github-token"), "ghs_unused", 0o400, Some(proxy));
    write(
        &p("secrets/feishu-token"),
        TOKEN,
        0o640,
        Some((0, router.1)),
    );
    let config = format!(
        r#"
policy = "policy.toml"
profiles_dir = "profiles"
rule_sets_dir = "rules"
prompts_dir = "{prompts}"
state_dir = "state"
run_dir = "{run}"
proxy_user = "{PROXY_USER}"
router_user = "{ROUTER_USER}"

[credentials.github]
kind = "github_token"
token_file = "secrets/github-token"
dangerously_allow_unscoped_graphql = true

[credentials.feishu]
kind = "feishu_app"
app_id = "{APP}"
app_secret_file = "secrets/feishu-app"
base_url = "https://open.feishu.cn"

[upstream."open.feishu.cn"]
url = "https://{emulator}"
ca_file = "feishu-ca.pem"

[feishu]
long_connection = true
app_id = "{APP}"
verification_token_file = "secrets/feishu-token"
"#,
        prompts = gatehouse_testkit::bin::repo_path("prompts").display(),
        run = run.path().display(),
        emulator = feishu.addr(),
    );
    write(&p("gatehouse.toml"), &config, 0o644, None);
    World {
        dir,
        _run: run,
        feishu,
        secret,
    }
}

#[test]
fn up_runs_the_long_connection_as_the_proxys_user_and_its_events_become_triggers() {
    require!(
        Need::Root,
        Need::User(PROXY_USER),
        Need::User(ROUTER_USER),
        Need::User(TEST_USER)
    );
    let w = world(false);
    let (feishu, secret) = (&w.feishu, &w.secret);
    let p = |rel: &str| w.path(rel);
    let proxy = ids(PROXY_USER);
    let router = ids(ROUTER_USER);

    // The systemd units cannot run it: `config write` says so, writes nothing.
    let write = Command::new(p("bin/gatehouse"))
        .args(["config", "write", "--config"])
        .arg(p("gatehouse.toml"))
        .output()
        .unwrap();
    assert!(!write.status.success());
    assert!(
        String::from_utf8_lossy(&write.stderr).contains("systemd units do not have yet"),
        "{}",
        String::from_utf8_lossy(&write.stderr)
    );
    assert!(!p("state").exists(), "config write made its directories");

    let prepared = up::prepare(&p("gatehouse.toml")).unwrap();
    let socket = prepared.layout.handoff_socket().unwrap().to_owned();
    let running = up::start(
        &prepared,
        up::Options {
            services: Some(p("bin/gatehouse-services")),
            ..up::Options::default()
        },
    )
    .unwrap();
    let connect = running
        .pid(Part::FeishuConnect)
        .expect("the connect part runs");
    let router_pid = running.pid(Part::Router).unwrap();

    // It runs as the proxy's user, with the secret as a file name only.
    let status = String::from_utf8(proc_text(connect, "status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == proxy.0.to_string()),
        "{uid_line}"
    );
    let cmdline = proc_text(connect, "cmdline");
    assert!(holds(&cmdline, "feishu-connect") && holds(&cmdline, "secrets/feishu-app"));
    for pid in [connect, router_pid] {
        for what in ["cmdline", "environ"] {
            assert!(
                !holds(&proc_text(pid, what), secret),
                "the secret in {pid}'s {what}"
            );
        }
    }
    let router_toml = std::fs::read_to_string(&prepared.layout.router_toml).unwrap();
    assert!(!router_toml.contains("feishu-app"), "{router_toml}");

    // The socket: the router's, the proxy's group, no one else's.
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (router.0, proxy.1, 0o660)
    );
    let dir_meta = std::fs::metadata(socket.parent().unwrap()).unwrap();
    assert_eq!(
        (dir_meta.uid(), dir_meta.gid(), dir_meta.mode() & 0o7777),
        (router.0, proxy.1, 0o2750)
    );
    assert_eq!(
        connect_errno_as(ids(TEST_USER), &socket),
        Some(13),
        "another user reaches the hand-off socket"
    );
    assert_eq!(
        connect_errno_as(proxy, &socket),
        None,
        "the proxy's user connects"
    );

    // One message over the long connection: stored once, acknowledged to
    // Feishu, and answered in the chat by the router (an ack, through the
    // proxy's Feishu identity).
    wait_for("the long connection", || feishu.long_connected() > 0);
    let asked = feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 please fix the flaky test",
        &[(BOT, "gatehouse")],
    );
    let db = prepared.layout.router_db.clone();
    wait_for("the event stored and decided", || {
        let Ok(log) = DeliveryLog::open(&db, Durability::Normal) else {
            return false;
        };
        let deliveries = log.read().deliveries().unwrap_or_default();
        deliveries.iter().any(|d| {
            d.meaning == format!("feishu:message:{asked}")
                && d.processed.as_ref().is_some_and(|p| p.outcome == "trigger")
        })
    });
    wait_for("Feishu told the event was received", || {
        feishu.long_deliveries().iter().any(|d| d.acked)
    });
    wait_for("the router's ack in the chat", || {
        feishu
            .messages()
            .iter()
            .any(|m| m.sender_type == "app" && m.parent_id == asked)
    });
    let log = DeliveryLog::open(&db, Durability::Normal).unwrap();
    assert_eq!(log.read().deliveries().unwrap().len(), 1, "stored once");

    // Alice recalls her request: the ticket it opened ends, cancelled.
    feishu.recall_message(&asked, "message_owner").unwrap();
    wait_for("the ticket cancelled", || {
        let Ok(store) = Store::open(&db, Durability::Normal) else {
            return false;
        };
        let tickets = store.read().tickets().unwrap_or_default();
        tickets.len() == 1 && tickets[0].outcome == Some(Outcome::Cancelled)
    });

    // The connect part stops first, then the three in reverse order.
    let stopped = running.stop();
    let order: Vec<Part> = stopped.iter().map(|s| s.part).collect();
    assert_eq!(
        order,
        [
            Part::FeishuConnect,
            Part::Router,
            Part::Supervisor,
            Part::Proxy
        ]
    );
    assert!(stopped.iter().all(|s| !s.killed), "{stopped:?}");
    let logs = std::fs::read_to_string(p("state/logs/feishu-connect.log")).unwrap();
    assert!(
        !logs.contains(secret.as_str()),
        "the secret in the connect part's log"
    );
}

/// Feishu refuses the app secret: the connect part ends with exit 78 and
/// is not restarted (restarting cannot mend it, and each try sends the
/// secret again); the other parts run on.
#[test]
fn a_refused_app_secret_stops_the_connect_part_for_good() {
    require!(Need::Root, Need::User(PROXY_USER), Need::User(ROUTER_USER));
    let w = world(true);
    let prepared = up::prepare(&w.path("gatehouse.toml")).unwrap();
    let running = up::start(
        &prepared,
        up::Options {
            services: Some(w.path("bin/gatehouse-services")),
            ..up::Options::default()
        },
    )
    .unwrap();
    let log = w.path("state/logs/feishu-connect.log");
    wait_for("the connect part to end", || {
        running.pid(Part::FeishuConnect).is_none()
    });
    let endpoint_asks = || {
        w.feishu
            .requests()
            .iter()
            .filter(|r| r.path == "/callback/ws/endpoint")
            .count()
    };
    let asked = endpoint_asks();
    assert!(asked >= 1, "the endpoint was never asked");
    // Longer than the first restart delays (0.5 s, 1 s) would take.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(running.pid(Part::FeishuConnect), None, "restarted");
    assert_eq!(running.restarts(Part::FeishuConnect), 0);
    assert_eq!(endpoint_asks(), asked, "the secret was sent again");
    assert!(running.pid(Part::Router).is_some() && running.pid(Part::Proxy).is_some());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("check the app id and the app secret file"),
        "{text}"
    );
    assert!(!text.contains(w.secret.as_str()));
    running.stop();
}
