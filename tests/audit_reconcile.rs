//! `gatehouse audit reconcile` and `attention` over a real run of the live
//! loop (`gatehouse_testkit::live`: emulators, proxy, supervisor, router as
//! processes): a GitHub and a Feishu story reconcile with nothing
//! unexplained, both platforms' side fetched through the router's own
//! identities; then each kind of mismatch is seeded and reported with why:
//! a comment the bot's token posted directly on the GitHub emulator and a
//! message the Feishu app posted with its own credential, a message call
//! with no reply-log entry, a reply marked sent that was never forwarded, a
//! tampered audit line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_proxy::audit::{
    now_rfc3339, AuditLog, CompletionRecord, MessageRecord, Outcome, Record, RequestRecord,
};
use gatehouse_router::id::ReplyId;
use gatehouse_router::store::{Durability, OutboxState, OutboxUpdate, ReplyRecord, Store};
use gatehouse_testkit::live::{LiveWorld, BOT_LOGIN, FEISHU_APP, FEISHU_BOT, FEISHU_CHAT};
use serde_json::Value;

const WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at it' || exit 90
sleep 0.3
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

/// Runs `gatehouse audit <args> --json`: exit code, findings, summary.
fn audit(args: &[&str]) -> (i32, Vec<Value>, Value) {
    let out = gatehouse_testkit::bin::command()
        .arg("audit")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = lines
        .pop()
        .unwrap_or_else(|| panic!("no output: {}", String::from_utf8_lossy(&out.stderr)));
    (
        out.status.code().unwrap_or(-1),
        lines,
        summary["summary"].clone(),
    )
}

fn kinds(findings: &[Value], explained: bool) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f["explained"] == explained)
        .map(|f| f["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn wait_ended(w: &LiveWorld, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let tickets = Store::open(&w.state(), Durability::Normal)
            .unwrap()
            .read()
            .tickets()
            .unwrap();
        if tickets.iter().filter(|t| t.outcome.is_some()).count() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "never ended: {}", w.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies the router's database (with its WAL) to `dir`.
fn copy_db(w: &LiveWorld, dir: &Path) -> std::path::PathBuf {
    for suffix in ["", "-wal", "-shm"] {
        let from = format!("{}{suffix}", w.state().display());
        if Path::new(&from).exists() {
            std::fs::copy(&from, dir.join(format!("router.db{suffix}"))).unwrap();
        }
    }
    dir.join("router.db")
}

/// A reply logged and marked sent as message 999999, never forwarded.
fn seed_unforwarded_reply(db: &Path) -> String {
    let mut store = Store::open(db, Durability::Normal).unwrap();
    let existing = store.read().replies().unwrap().pop().unwrap();
    let id = ReplyId::parse("rpl_0fffffffffff000001").unwrap();
    let now = existing.at + 1;
    let record = ReplyRecord {
        reply: id.clone(),
        text_sha256: "00".repeat(32),
        words: 2,
        at: now,
        ..existing
    };
    store
        .transaction(|tx| -> Result<(), gatehouse_router::store::StoreError> {
            tx.insert_reply(&record, "Seeded reply")?;
            tx.queue_reply(&id, now)?;
            tx.update_outbox(
                &id,
                &OutboxUpdate {
                    state: OutboxState::Sent,
                    attempts: 1,
                    platform_message_id: Some("999999".into()),
                    error: None,
                    next_at: now,
                },
                now,
            )
        })
        .unwrap();
    id.to_string()
}

/// A message call by the router's identity that no reply explains,
/// appended to the chain (so the chain itself stays intact).
fn seed_unlogged_call(log: &Path, issue: u64) {
    let mut audit = AuditLog::open(log).unwrap();
    audit
        .append(&Record::Request(RequestRecord {
            time: now_rfc3339(),
            request_id: "seeded-1".into(),
            identity: "router-gh-1".into(),
            method: "POST".into(),
            host: "api.github.com".into(),
            path: format!("/repos/acme/widgets/issues/{issue}/comments"),
            query_keys: vec![],
            outcome: Outcome::Allow {
                rule_set: "router-github".into(),
                rule: "reply-comment-create".into(),
            },
            message: Some(MessageRecord {
                kind: "github_issue_comment".into(),
                target: format!("acme/widgets#{issue}"),
                body_sha256: "ab".repeat(32),
            }),
            truncated: Default::default(),
        }))
        .unwrap();
    audit
        .append(&Record::Completion(CompletionRecord {
            time: now_rfc3339(),
            request_id: "seeded-1".into(),
            status: 201,
            bytes_sent: 10,
            bytes_received: 10,
            duration_ms: 1,
            message_id: Some("424242".into()),
            error: None,
            truncated: Default::default(),
        }))
        .unwrap();
}

#[test]
fn a_live_run_reconciles_and_each_seeded_mismatch_is_reported() {
    let mut w = LiveWorld::start(WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "Login", "It rejects emails.", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix it", "alice")
        .unwrap();
    w.feishu.send_user_message(
        FEISHU_CHAT,
        "group",
        "ou_alice",
        "@_user_1 the login form rejects valid emails",
        &[(FEISHU_BOT, "gatehouse")],
    );
    w.wait("the results", |w| {
        w.bot_comments(n).iter().any(|c| c.starts_with("Done:"))
            && w.bot_messages().iter().any(|m| m.starts_with("Done:"))
    });
    wait_ended(&w, 2);
    std::thread::sleep(Duration::from_secs(1));
    let dir = w.dir.path().to_owned();
    let (log, db, config) = (
        dir.join("proxy/audit.jsonl"),
        w.state(),
        dir.join("router.toml"),
    );
    let live = [
        "reconcile",
        "--audit-log",
        p(&log),
        "--router-db",
        p(&db),
        "--router-config",
        p(&config),
        "--github-bot",
        BOT_LOGIN,
        "--feishu",
    ];

    // The clean run: four replies delivered, each posted message explained.
    let (code, findings, summary) = audit(&live);
    assert_eq!(code, 0, "{findings:#?}");
    assert_eq!(summary["unexplained"], 0, "{findings:#?}");
    let explained = kinds(&findings, true);
    let count = |k: &str| explained.iter().filter(|e| *e == k).count();
    assert_eq!(count("reply_delivered"), 4, "{findings:#?}");
    assert_eq!(count("platform_explained"), 4, "{findings:#?}");
    for message in ["github_issue_comment", "feishu_reply"] {
        let purposes: Vec<&Value> = findings
            .iter()
            .filter(|f| f["kind"] == "reply_delivered" && f["message"] == message)
            .map(|f| &f["purpose"])
            .collect();
        assert_eq!(purposes, ["ack", "result"], "{message}: {findings:#?}");
    }

    // Attention: two finished tickets, an ack and a result each.
    let (code, _, _) = {
        let out = gatehouse_testkit::bin::command()
            .args([
                "audit",
                "attention",
                "--audit-log",
                p(&log),
                "--router-db",
                p(&db),
                "--json",
            ])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["finished_tickets"], 2, "{report:#}");
        assert_eq!(report["messages"], 4, "{report:#}");
        assert_eq!(report["progress_style"], 0, "{report:#}");
        assert_eq!(report["tickets"][0]["by_purpose"]["ack"], 1, "{report:#}");
        (out.status.code().unwrap_or(-1), (), ())
    };
    assert_eq!(code, 0);

    // The log as OCSF HTTP Activity, one event per request.
    let out = gatehouse_testkit::bin::command()
        .args(["audit", "export", p(&log)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let requests = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"event\":\"request\""))
        .count();
    assert_eq!(events.len(), requests);
    assert!(events
        .iter()
        .all(|e| e["class_uid"] == 4002 && e["metadata"]["version"] == "1.1.0"));
    let replies: Vec<&Value> = events
        .iter()
        .filter(|e| e["unmapped"]["rule"] == "reply-comment-create")
        .collect();
    assert_eq!(replies.len(), 2, "{events:#?}");
    assert!(replies.iter().all(|e| e["activity_name"] == "Post"
        && e["status"] == "Success"
        && e["http_response"]["code"] == 201));

    // The bot's credentials used directly on each platform.
    w.github
        .add_issue_comment("acme/widgets", n, "Still working on it", BOT_LOGIN)
        .unwrap();
    let feishu_direct = w
        .feishu
        .add_app_message(FEISHU_CHAT, FEISHU_APP, "Still working");
    let (code, findings, _) = audit(&live);
    assert_eq!(code, 1);
    assert_eq!(
        kinds(&findings, false),
        vec!["platform_unexplained", "platform_unexplained"],
        "{findings:#?}"
    );
    let direct: Vec<&Value> = findings
        .iter()
        .filter(|f| f["kind"] == "platform_unexplained")
        .collect();
    assert!(direct
        .iter()
        .all(|d| d["why"].as_str().unwrap().contains("outside gatehouse")));
    assert!(
        direct.iter().any(|d| d["target"]
            .as_str()
            .unwrap()
            .contains(&format!("/issues/{n}"))),
        "{direct:?}"
    );
    assert!(
        direct
            .iter()
            .any(|d| d["why"].as_str().unwrap().contains(&feishu_direct)),
        "{direct:?}"
    );

    // One hidden in a thread: a chat's history shows a thread by its first
    // message only, so the audit lists the thread's messages too.
    let asked = w
        .feishu
        .messages()
        .into_iter()
        .find(|m| m.sender_type == "user")
        .unwrap()
        .message_id;
    let in_thread = w
        .feishu
        .add_app_reply(&asked, FEISHU_APP, "Quietly", true)
        .unwrap();
    let (code, findings, _) = audit(&live);
    assert_eq!(code, 1);
    let direct: Vec<&Value> = findings
        .iter()
        .filter(|f| f["kind"] == "platform_unexplained")
        .collect();
    assert_eq!(direct.len(), 3, "{findings:#?}");
    assert!(
        direct
            .iter()
            .any(|d| d["why"].as_str().unwrap().contains(&in_thread)),
        "{direct:?}"
    );

    // Seeded into copies: the logs of a stopped router.
    w.kill_router();
    let seeded = tempfile::tempdir().unwrap();
    let seeded_db = copy_db(&w, seeded.path());
    let seeded_log = seeded.path().join("audit.jsonl");
    std::fs::copy(&log, &seeded_log).unwrap();
    let reply = seed_unforwarded_reply(&seeded_db);
    seed_unlogged_call(&seeded_log, n);
    let (code, findings, summary) = audit(&[
        "reconcile",
        "--audit-log",
        p(&seeded_log),
        "--router-db",
        p(&seeded_db),
    ]);
    assert_eq!(code, 1);
    let mut unexplained = kinds(&findings, false);
    unexplained.sort();
    assert_eq!(
        unexplained,
        vec!["message_without_reply", "reply_not_forwarded"],
        "{findings:#?}"
    );
    assert_eq!(summary["unexplained"], 2);
    let not_forwarded = findings
        .iter()
        .find(|f| f["kind"] == "reply_not_forwarded")
        .unwrap();
    assert_eq!(not_forwarded["reply"], reply.as_str());
    assert!(not_forwarded["why"].as_str().unwrap().contains("999999"));
    let unlogged = findings
        .iter()
        .find(|f| f["kind"] == "message_without_reply")
        .unwrap();
    assert_eq!(unlogged["message_id"], "424242");
    assert!(unlogged["record"].as_str().unwrap().contains("seeded-1"));

    // A tampered line: a completion's status changed in the middle.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = lines
        .iter()
        .position(|l| l.contains("\"event\":\"completion\"") && l.contains("\"status\":201"))
        .unwrap();
    assert!(at + 1 < lines.len());
    lines[at] = lines[at].replace("\"status\":201", "\"status\":200");
    let tampered = seeded.path().join("tampered.jsonl");
    std::fs::write(&tampered, lines.join("\n") + "\n").unwrap();
    let (code, findings, _) = audit(&[
        "reconcile",
        "--audit-log",
        p(&tampered),
        "--router-db",
        p(&db),
    ]);
    assert_eq!(code, 1);
    assert_eq!(
        kinds(&findings, false),
        vec!["audit_log_broken"],
        "{findings:#?}"
    );
    let broken = &findings
        .iter()
        .find(|f| f["kind"] == "audit_log_broken")
        .unwrap()["why"];
    assert!(
        broken
            .as_str()
            .unwrap()
            .contains(&format!("tampered.jsonl:{}", at + 2)),
        "{broken}"
    );
}
