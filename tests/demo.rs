//! `gatehouse demo`, end to end: the emulators, `up`'s three processes
//! (as root, the proxy and the router under their own users, and each job
//! in a real sandbox reaching the proxy through its identity socket), the
//! story, and its checks. The demo exits 0 only if every check held; this
//! test also reads the checks and the summary it printed, so a demo that
//! checked nothing could not pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gatehouse_testkit::{bin, require, Need};
use serde_json::Value;

#[test]
fn the_demo_story_holds_and_says_so() {
    require!(Need::Sandbox);
    if gatehouse_testkit::machine::is_root() {
        require!(Need::User("gatehouse-proxy"));
        require!(Need::User("gatehouse-router"));
    }
    let out = bin::command()
        .args(["demo", "--json", "--keep"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let kept = Kept::from_stderr(&stderr);
    assert!(
        out.status.success(),
        "the demo failed:\n{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = doc["checks"].as_array().unwrap();
    assert!(checks.len() >= 7, "{checks:?}");
    assert!(checks.iter().all(|c| c["held"] == true), "{checks:?}");
    // Two finished tasks, two messages each: an ack and a result.
    let messages = doc["summary"]["messages"].as_object().unwrap();
    assert_eq!(messages.len(), 2, "{messages:?}");
    for by_purpose in messages.values() {
        assert_eq!(by_purpose["ack"], 1);
        assert_eq!(by_purpose["result"], 1);
        assert_eq!(by_purpose.as_object().unwrap().len(), 2);
    }
    // The refusals are on the timeline, by the proxy.
    let timeline = doc["timeline"].as_array().unwrap();
    assert!(timeline.iter().any(|e| e["actor"] == "proxy"
        && e["text"].as_str().unwrap().contains("REFUSED")
        && e["text"].as_str().unwrap().contains("git-receive-pack")));
    // No secret of the demo reached its output.
    assert!(!stderr.contains("ghs_"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ghs_"));
    // Every message of the run is explained by the logs it left.
    let kept = kept.unwrap_or_else(|| panic!("no kept directories in:\n{stderr}"));
    let state = kept.dir.join("state");
    let audit = |args: &[&str]| {
        bin::command()
            .arg("audit")
            .args(args)
            .arg("--state")
            .arg(&state)
            .arg("--json")
            .output()
            .unwrap()
    };
    let out = audit(&["reconcile"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["unexplained"], 0, "{text}");
    assert_eq!(summary["by_kind"]["reply_delivered"], 4, "{text}");
    // Two finished tasks, two messages each, none progress-style.
    let out = audit(&["attention"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["finished_tickets"], 2, "{report:#}");
    assert_eq!(report["per_ticket"], 2.0, "{report:#}");
    assert_eq!(report["progress_style"], 0, "{report:#}");

    // The kept state answers the recall commands: the two tickets, each
    // thread with its tickets and triggers, the four replies sent.
    let db = state.join("router/router.db");
    let recall = |args: &[&str]| {
        let out = bin::command()
            .args(args)
            .arg("--state")
            .arg(&db)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tickets: Value = serde_json::from_str(&recall(&["tickets", "list", "--json"])).unwrap();
    let tickets = tickets.as_array().unwrap();
    assert_eq!(tickets.len(), 2, "{tickets:?}");
    for ticket in tickets {
        let id = ticket["id"].as_str().unwrap();
        let shown: Value =
            serde_json::from_str(&recall(&["tickets", "show", "--json", id])).unwrap();
        assert_eq!(shown["id"], id, "{shown:#}");
        let thread = ticket["thread"].as_str().unwrap();
        let page: Value =
            serde_json::from_str(&recall(&["threads", "show", "--json", thread])).unwrap();
        let text = page.to_string();
        assert!(
            text.contains(id),
            "the thread does not name its ticket: {text}"
        );
        assert!(text.contains("trg_"), "the thread has no trigger: {text}");
    }
    let replies: Vec<Value> = recall(&["replies", "export"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 4, "{replies:?}");
}

/// The directories `demo --keep` left, removed when the test ends.
struct Kept {
    dir: std::path::PathBuf,
    sockets: std::path::PathBuf,
}

impl Kept {
    fn from_stderr(stderr: &str) -> Option<Kept> {
        let line = stderr.lines().find_map(|l| l.strip_prefix("demo: kept "))?;
        let dir = line.split_once(" (")?.0.into();
        let sockets = line.split_once("sockets: ")?.1.split_once(';')?.0.into();
        Some(Kept { dir, sockets })
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.sockets);
    }
}

/// The README's main-job command as an ordinary user: the same story, the
/// three parts and every sandbox under that user (rootless, weaker; the
/// demo says so).
#[test]
fn the_demo_story_holds_as_an_ordinary_user() {
    // Root only to become the test user.
    require!(Need::Root, Need::SandboxAsTestUser);
    let bin_dir = gatehouse_testkit::sandbox::reachable_dir("gh-demo-bin-");
    let gatehouse = bin::copy_to(bin_dir.path());
    let out = gatehouse_testkit::sandbox::as_test_user(&gatehouse)
        .args(["demo", "--json"])
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the demo failed as {}:\n{stderr}\n{}",
        gatehouse_testkit::machine::TEST_USER,
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = doc["checks"].as_array().unwrap();
    assert!(checks.len() >= 7, "{checks:?}");
    assert!(checks.iter().all(|c| c["held"] == true), "{checks:?}");
    assert_eq!(doc["summary"]["messages"].as_object().unwrap().len(), 2);
}
