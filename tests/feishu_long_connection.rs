//! Feishu's long connection end to end, with real processes: the
//! emulator's WebSocket, `gatehouse intake feishu-connect` (the only holder
//! of the app secret) and `gatehouse router listen --feishu-handoff`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use gatehouse_emulators::feishu::ws::LongConnection;
use gatehouse_emulators::{FeishuEmulator, FeishuHandle, FeishuOptions};
use gatehouse_router::store::{DeliveryLog, Durability, Store};
use serde_json::Value;

const APP: &str = "cli_long_gatehouse";
const SECRET: &str = "app-secret-only-the-connect-process-reads";
const TOKEN: &str = "long-verification-token";
const BOT: &str = "ou_gatehouse_bot";

const POLICY: &str = r#"
identity = { feishu = "ou_gatehouse_bot" }

[[people]]
name = "alice"
team = "core"
feishu = "ou_alice"

[teams.core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["github-repo"]

[[chats]]
id = "oc_core"
team = "core"
repo = "acme/widgets"
"#;

struct World {
    dir: tempfile::TempDir,
    feishu: FeishuHandle,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        std::fs::write(dir.path().join("token"), TOKEN).unwrap();
        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/app-secret"), format!("{SECRET}\n")).unwrap();
        std::fs::create_dir(dir.path().join("router")).unwrap();
        let feishu = FeishuEmulator::start(
            FeishuOptions {
                bot_open_id: BOT.to_owned(),
                long_connection: Some(LongConnection {
                    app_id: APP.into(),
                    verification_token: TOKEN.into(),
                    ack_timeout: Duration::from_millis(300),
                }),
                ..FeishuOptions::default()
            }
            .app(APP, SECRET),
        )
        .unwrap();
        feishu.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
        World { dir, feishu }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("router/router.db")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("handoff.sock")
    }

    /// The router, serving the hand-off socket to `peer_uid` only.
    fn router(&self, peer_uid: u32) -> Child {
        let p = self.dir.path();
        let mut child = gatehouse_testkit::bin::command()
            .args(["router", "listen", "--listen", "127.0.0.1:0"])
            .args(["--feishu-app-id", APP])
            .arg("--feishu-verification-token-file")
            .arg(p.join("token"))
            .arg("--feishu-handoff")
            .arg(self.socket())
            .args(["--feishu-handoff-uid", &peer_uid.to_string()])
            .arg("--policy")
            .arg(p.join("policy.toml"))
            .arg("--state")
            .arg(self.state())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(ready["handoff"], self.socket().display().to_string());
        child
    }

    fn connect(&self) -> Child {
        let p = self.dir.path();
        let port = self.feishu.addr().port();
        gatehouse_testkit::bin::command()
            .args(["intake", "feishu-connect", "--app-id", APP])
            .arg("--app-secret-file")
            .arg(p.join("secrets/app-secret"))
            .arg("--handoff")
            .arg(self.socket())
            .args(["--base-url", &format!("https://open.feishu.cn:{port}")])
            .args(["--connect-to", &self.feishu.addr().to_string()])
            .arg("--ca-file")
            .arg(p.join("ca.pem"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn say(&self, text: &str) -> String {
        self.feishu
            .send_user_message("oc_core", "group", "ou_alice", text, &[(BOT, "gatehouse")])
    }
}

/// Waits for `what`; a deadline, not a timing assertion.
fn until(why: &str, mut what: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !what() {
        assert!(Instant::now() < deadline, "waited in vain: {why}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn trigger_decisions(state: &Path) -> Vec<Value> {
    if !state.exists() {
        return Vec::new();
    }
    let store = Store::open(state, Durability::Normal).unwrap();
    let decisions = store.read().decisions().unwrap();
    decisions
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "trigger")
        .collect()
}

fn stored(state: &Path) -> usize {
    let log = DeliveryLog::open(state, Durability::Normal).unwrap();
    let n = log.read().deliveries().unwrap().len();
    n
}

fn settled(state: &Path) -> bool {
    let log = DeliveryLog::open(state, Durability::Normal).unwrap();
    let pending = log.read().pending_deliveries(1).unwrap();
    pending.is_empty()
}

/// Every file under `dir` and the router's environment and command line:
/// none holds the app secret.
fn assert_no_secret(dir: &Path, router_pid: u32) {
    let mut files = vec![
        PathBuf::from(format!("/proc/{router_pid}/environ")),
        PathBuf::from(format!("/proc/{router_pid}/cmdline")),
    ];
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.is_file() {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 3, "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(SECRET),
            "{} holds the app secret",
            file.display()
        );
    }
}

#[test]
fn a_message_over_the_long_connection_is_one_trigger_and_one_ack() {
    let w = World::new();
    let router = w.router(own_uid());
    let connect = w.connect();
    until("connected", || w.feishu.long_connected() == 1);
    let id = w.say("@_user_1 the login form rejects valid emails");
    until("acknowledged", || w.feishu.long_deliveries()[0].acked);
    until("decided", || !trigger_decisions(&w.state()).is_empty());
    until("settled", || settled(&w.state()));
    let decisions = trigger_decisions(&w.state());
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["admission"], "explicit", "{:?}", decisions[0]);
    let deliveries = w.feishu.long_deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].sent_to.len(), 1, "{deliveries:?}");
    let log = DeliveryLog::open(&w.state(), Durability::Normal).unwrap();
    let bodies = log.read().deliveries().unwrap();
    assert_eq!(bodies.len(), 1);
    assert!(String::from_utf8_lossy(&bodies[0].body).contains(&id));
    // The router's state and process never held the secret; the positive
    // control: the connect process's own secret file does.
    assert_no_secret(&w.dir.path().join("router"), router.id());
    let secret_file = std::fs::read_to_string(w.dir.path().join("secrets/app-secret")).unwrap();
    assert!(secret_file.contains(SECRET));
    stop(connect);
    stop(router);
}

/// A peer of another uid is refused at the socket: nothing stored, Feishu
/// not acknowledged. The same client is served once its uid is the one
/// configured (positive control), and the event is then stored once.
#[test]
fn a_peer_with_the_wrong_uid_is_refused_at_the_handoff_socket() {
    let w = World::new();
    let other = if own_uid() == 65534 { 65533 } else { 65534 };
    let router = w.router(other);
    let connect = w.connect();
    until("connected", || w.feishu.long_connected() == 1);
    w.say("@_user_1 please look at the failing build");
    // Sent to the client at least twice (the first send and a redelivery
    // after the ack timeout), never acknowledged.
    until("redelivered", || {
        w.feishu.long_deliveries()[0].sent_to.len() >= 2
    });
    assert!(!w.feishu.long_deliveries()[0].acked);
    assert_eq!(stored(&w.state()), 0);
    stop(router);
    let router = w.router(own_uid());
    until("acknowledged", || w.feishu.long_deliveries()[0].acked);
    until("decided", || !trigger_decisions(&w.state()).is_empty());
    until("settled", || settled(&w.state()));
    assert_eq!(stored(&w.state()), 1);
    assert_eq!(trigger_decisions(&w.state()).len(), 1);
    stop(connect);
    stop(router);
}

/// kill -9 of the connect process after it received an event and before
/// the router confirmed it (the router is not there yet): nothing was
/// acknowledged, so Feishu delivers it again to the next client, and it
/// becomes one trigger; a second message afterwards is one more.
#[test]
fn kill_9_between_receipt_and_confirm_loses_nothing_and_decides_nothing_twice() {
    let w = World::new();
    let mut first = w.connect();
    until("connected", || w.feishu.long_connected() == 1);
    w.say("@_user_1 the export crashes");
    until("received", || {
        !w.feishu.long_deliveries()[0].sent_to.is_empty()
    });
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(!w.feishu.long_deliveries()[0].acked);
    let router = w.router(own_uid());
    let second = w.connect();
    until("acknowledged", || w.feishu.long_deliveries()[0].acked);
    w.say("@_user_1 and the import too");
    until("both acknowledged", || {
        w.feishu.long_deliveries().iter().all(|d| d.acked)
    });
    until("decided", || trigger_decisions(&w.state()).len() >= 2);
    until("settled", || settled(&w.state()));
    assert_eq!(stored(&w.state()), 2);
    assert_eq!(trigger_decisions(&w.state()).len(), 2);
    assert!(w.feishu.long_deliveries()[0].sent_to.len() >= 2);
    stop(second);
    stop(router);
}

fn own_uid() -> u32 {
    // The uid this test (and so every process it starts) runs as.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A wrong app secret is refused by the endpoint: the client stops with
/// exit 78 (a configuration error) instead of retrying for ever; the right
/// one connects (above).
#[test]
fn a_refused_app_secret_stops_the_client() {
    let w = World::new();
    std::fs::write(w.dir.path().join("secrets/app-secret"), "not-the-secret\n").unwrap();
    let mut connect = w.connect();
    let status = connect.wait().unwrap();
    assert_eq!(status.code(), Some(78), "{status:?}");
    assert_eq!(w.feishu.long_connected(), 0);
}
