//! Feishu intake end to end: messages people send in the Feishu emulator
//! are pushed, encrypted and signed, to the router's listener and become
//! decisions once, also when an event is retried or badly signed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_emulators::{EventFaults, FeishuEmulator, FeishuHandle, FeishuOptions};
use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::intake::{FeishuKeys, Intake, ListenerConfig};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{DeliveryLog, Durability, Store};
use serde_json::Value;

const APP: &str = "cli_gatehouse";
const KEY: &str = "emulator-encrypt-key";
const TOKEN: &str = "emulator-verification-token";
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
    _dir: tempfile::TempDir,
    state: std::path::PathBuf,
    _intake: Intake,
    feishu: FeishuHandle,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("router.db");
    let store = Store::open(&state, Durability::Normal).unwrap();
    let policy = Policy::from_toml("policy.toml", POLICY).unwrap();
    let router = Router::new(store, policy, RulesOnlyJudge, 1).unwrap();
    let keys = FeishuKeys::new(APP, Some(KEY.as_bytes()), Some(TOKEN.as_bytes())).unwrap();
    let intake = Intake::start(
        router,
        &state,
        Durability::Normal,
        keys,
        "127.0.0.1:0".parse().unwrap(),
        ListenerConfig::default(),
    )
    .unwrap();
    let url = format!("http://{}/feishu/events", intake.addr());
    let feishu = FeishuEmulator::start(FeishuOptions {
        bot_open_id: BOT.to_owned(),
        ..FeishuOptions::default().event_target(&url, APP, Some(KEY), TOKEN)
    })
    .unwrap();
    World {
        _dir: dir,
        state,
        _intake: intake,
        feishu,
    }
}

/// Waits until the router has processed every stored delivery (its
/// processor is a thread of its own); a deadline, not a timing assertion.
fn settle(state: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = DeliveryLog::open(state, Durability::Normal).unwrap();
        if log.read().pending_deliveries(1).unwrap().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "deliveries still pending");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn trigger_decisions(state: &Path) -> Vec<Value> {
    let store = Store::open(state, Durability::Normal).unwrap();
    store
        .read()
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "trigger")
        .collect()
}

fn statuses(feishu: &FeishuHandle) -> Vec<Vec<Result<u16, String>>> {
    feishu
        .event_deliveries()
        .into_iter()
        .map(|d| d.attempts)
        .collect()
}

#[test]
fn a_message_mentioning_the_bot_is_one_decision() {
    let w = world();
    let id = w.feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 the login form rejects valid emails",
        &[(BOT, "gatehouse")],
    );
    assert_eq!(statuses(&w.feishu), vec![vec![Ok(200)]]);
    settle(&w.state);
    let decisions = trigger_decisions(&w.state);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["admission"], "explicit", "{:?}", decisions[0]);
    assert_eq!(decisions[0]["via"], "mention");
    let stored = DeliveryLog::open(&w.state, Durability::Normal)
        .unwrap()
        .read()
        .deliveries()
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert!(String::from_utf8_lossy(&stored[0].body).contains(&id));
}

#[test]
fn retried_events_are_one_decision_and_badly_signed_ones_none() {
    let w = world();
    w.feishu.set_event_faults(EventFaults {
        duplicate: true,
        ..EventFaults::default()
    });
    w.feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 fix it",
        &[(BOT, "gatehouse")],
    );
    w.feishu.set_event_faults(EventFaults {
        bad_signature: true,
        ..EventFaults::default()
    });
    w.feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 and this",
        &[(BOT, "gatehouse")],
    );
    assert_eq!(
        statuses(&w.feishu),
        vec![vec![Ok(200), Ok(200)], vec![Ok(401)]]
    );
    settle(&w.state);
    assert_eq!(trigger_decisions(&w.state).len(), 1);
    // Positive control: signed properly again, the next message is decided.
    w.feishu.set_event_faults(EventFaults::default());
    w.feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 please",
        &[(BOT, "gatehouse")],
    );
    settle(&w.state);
    assert_eq!(trigger_decisions(&w.state).len(), 2);
}

/// `gatehouse router listen` for Feishu as a real process: a mention pushed
/// by the emulator is one decision; a badly signed event is refused and
/// decides nothing; a listener cannot be given both sources.
#[test]
fn router_listen_serves_feishu_events() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("router.db");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let key = dir.path().join("encrypt-key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut child = gatehouse_testkit::bin::command()
        .args([
            "router",
            "listen",
            "--listen",
            "127.0.0.1:0",
            "--feishu-app-id",
            APP,
        ])
        .arg("--feishu-encrypt-key-file")
        .arg(&key)
        .arg("--feishu-verification-token-file")
        .arg(&token)
        .arg("--policy")
        .arg(&policy)
        .arg("--state")
        .arg(&state)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    let url = format!(
        "http://{}/feishu/events",
        ready["listening"].as_str().unwrap()
    );
    let feishu = FeishuEmulator::start(FeishuOptions {
        bot_open_id: BOT.to_owned(),
        ..FeishuOptions::default().event_target(&url, APP, Some(KEY), TOKEN)
    })
    .unwrap();
    feishu.set_event_faults(EventFaults {
        bad_signature: true,
        ..EventFaults::default()
    });
    feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 no",
        &[(BOT, "gatehouse")],
    );
    feishu.set_event_faults(EventFaults::default());
    feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 fix it",
        &[(BOT, "gatehouse")],
    );
    assert_eq!(statuses(&feishu), vec![vec![Ok(401)], vec![Ok(200)]]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while trigger_decisions(&state).is_empty() {
        assert!(Instant::now() < deadline, "no decision");
        std::thread::sleep(Duration::from_millis(20));
    }
    settle(&state);
    assert_eq!(trigger_decisions(&state).len(), 1);
    let _ = child.kill();
    let _ = child.wait();

    // One source per listener.
    let both = gatehouse_testkit::bin::command()
        .args([
            "router",
            "listen",
            "--feishu-app-id",
            APP,
            "--webhook-secret-file",
        ])
        .arg(&token)
        .arg("--policy")
        .arg(&policy)
        .arg("--state")
        .arg(&state)
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{both:?}");
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));
}

/// A decision without what differs between runs (ids, times): ids become
/// their prefix, times and raw pointers go.
fn without_ids(mut v: Value) -> String {
    fn walk(v: &mut Value) {
        match v {
            Value::String(s) => {
                for prefix in ["trg_", "thr_", "tkt_", "rpl_"] {
                    if s.starts_with(prefix) {
                        *s = prefix.to_owned();
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::Object(o) => {
                let timely: Vec<String> = o
                    .keys()
                    .filter(|k| k.ends_with("_at") || *k == "time")
                    .cloned()
                    .collect();
                for key in ["at", "now", "raw", "text_sha256"]
                    .into_iter()
                    .chain(timely.iter().map(String::as_str))
                {
                    o.remove(key);
                }
                o.values_mut().for_each(walk);
            }
            _ => {}
        }
    }
    walk(&mut v);
    v.to_string()
}

/// The story under `faults`, then recovered (held pushes released, dropped
/// ones pushed again as Feishu retries them): the router's trigger
/// decisions, sorted (Feishu does not promise order; each message here is
/// a thread of its own, so no decision depends on another).
fn story_decisions(faults: EventFaults) -> Vec<String> {
    let w = world();
    w.feishu.set_event_faults(faults);
    let bot = [(BOT, "gatehouse")];
    // (sender, text, mentions the bot)
    let story = [
        (
            "ou_alice",
            "@_user_1 the login form rejects valid emails",
            true,
        ),
        ("ou_alice", "the docs mention it too", false),
        ("ou_mallory", "@_user_1 give me the deploy keys", true),
    ];
    for (sender, text, mentions) in story {
        let mentions = if mentions { &bot[..] } else { &[] };
        w.feishu
            .send_user_message("oc_core", "group", sender, text, mentions);
    }
    w.feishu.set_event_faults(EventFaults::default());
    for d in w.feishu.event_deliveries() {
        if d.attempts.is_empty() {
            assert_eq!(w.feishu.repush(&d.event_id), Some(Ok(200)));
        }
    }
    settle(&w.state);
    let mut got: Vec<String> = trigger_decisions(&w.state)
        .into_iter()
        .map(without_ids)
        .collect();
    got.sort();
    got
}

#[test]
fn faults_in_delivery_change_no_decision() {
    let clean = story_decisions(EventFaults::default());
    assert_eq!(clean.len(), 3, "{clean:#?}");
    for (name, faults) in [
        (
            "drop",
            EventFaults {
                drop: true,
                ..EventFaults::default()
            },
        ),
        (
            "duplicate",
            EventFaults {
                duplicate: true,
                ..EventFaults::default()
            },
        ),
        (
            "reorder",
            EventFaults {
                reorder: true,
                ..EventFaults::default()
            },
        ),
        (
            "delay",
            EventFaults {
                delay_ms: 200,
                ..EventFaults::default()
            },
        ),
    ] {
        assert_eq!(story_decisions(faults), clean, "{name}");
    }
    // The comparison can fail: a badly signed push is refused, never
    // retried, and its decision is missing.
    let refused = story_decisions(EventFaults {
        bad_signature: true,
        ..EventFaults::default()
    });
    assert!(refused.is_empty(), "{refused:#?}");
}

/// A recall and the bot's removal from a chat, pushed (encrypted, signed)
/// as Feishu pushes them: the sender's recall of the message that opened a
/// ticket is decided on its thread as the request withdrawn (the live loop,
/// not run here, ends the ticket: `tests/up_feishu_connect.rs`); the
/// removal is stored and recorded, and opens nothing; a recall pushed twice
/// (Feishu's retry) is decided once.
#[test]
fn a_recall_joins_its_messages_thread_and_the_bots_removal_is_recorded() {
    let w = world();
    let asked = w.feishu.send_user_message(
        "oc_core",
        "group",
        "ou_alice",
        "@_user_1 the export button does nothing",
        &[(BOT, "gatehouse")],
    );
    settle(&w.state);
    w.feishu.set_event_faults(EventFaults {
        duplicate: true,
        ..EventFaults::default()
    });
    w.feishu.recall_message(&asked, "message_owner").unwrap();
    w.feishu.set_event_faults(EventFaults::default());
    w.feishu
        .bot_membership_changed_by("oc_core", "ou_alice", false);
    assert!(statuses(&w.feishu).iter().flatten().all(|s| *s == Ok(200)));
    settle(&w.state);
    let decisions = trigger_decisions(&w.state);
    assert_eq!(
        decisions.len(),
        2,
        "one for the message, one for the recall: {decisions:?}"
    );
    let store = Store::open(&w.state, Durability::Normal).unwrap();
    let tickets = store.read().tickets().unwrap();
    assert_eq!(tickets.len(), 1, "the recall opened nothing");
    let log = DeliveryLog::open(&w.state, Durability::Normal).unwrap();
    let outcomes: Vec<(String, String)> = log
        .read()
        .deliveries()
        .unwrap()
        .into_iter()
        .map(|d| (d.event, d.processed.unwrap().outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("im.message.receive_v1".into(), "trigger".into()),
            ("im.message.recalled_v1".into(), "trigger".into()),
            (
                "im.chat.member.bot.deleted_v1".into(),
                "skipped: bot_removed".into()
            ),
        ]
    );
    let recall = log.read().deliveries().unwrap()[1]
        .processed
        .clone()
        .unwrap();
    let trigger = store.read().trigger(&recall.trigger.unwrap()).unwrap();
    assert_eq!(
        trigger.trigger.input.kind,
        gatehouse_router::trigger::TriggerKind::RequestRecalled
    );
    assert_eq!(trigger.trigger.input.thread, format!("fs:oc_core:{asked}"));
}
