//! The supervisor service with real sandboxes (`gatehouse sandbox run`):
//! reports and inbox from inside, isolation of control sockets between jobs,
//! deadlines and crashes, `kill -9` of the supervisor, and fifty sandboxed
//! jobs at once without leaked processes, mounts, sockets or identities.

use gatehouse_supervisor::jobs::http::HttpMethod as Method;
use gatehouse_testkit::procs::{live_with, mount_count};
use gatehouse_testkit::service::*;
use gatehouse_testkit::{require, Need};
use serde_json::{json, Value};

fn sandboxed(proxy_admin: Option<&FakeProxyAdmin>) -> Service {
    Service::start(Options {
        unsandboxed: false,
        proxy_admin: proxy_admin.map(|a| a.socket.clone()),
        ..Options::default()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn report_and_inbox_from_inside_a_sandbox() {
    require!(Need::Sandbox);
    let svc = sandboxed(None);
    let script = "test \"$(pwd)\" = /work || exit 90; \
                  test -S /run/gatehouse/control.sock || exit 91; \
                  gatehouse report --state working --summary 'inside' || exit 92; \
                  gatehouse inbox --wait > got.jsonl || exit 93; \
                  gatehouse report --state blocked --summary 'need a decision' \
                      --question 'Merge now or after the release?' || exit 94; \
                  head -1 .gatehouse/prompt.md > prompt-head; \
                  test \"$GATEHOUSE_PROMPT\" = /work/.gatehouse/prompt.md || exit 95; \
                  (cd / && head -1 \"$GATEHOUSE_PROMPT\") > prompt-env-head || exit 96";
    let id = svc.submit("k", sh_job("tkt_sbx_talk", script)).await;
    svc.wait_for(&id, |s| s != "queued").await;
    // Wait for the first report before sending to the inbox.
    let mut cursor = 0;
    'outer: loop {
        let page = svc
            .call(
                Method::GET,
                &format!("/events?after={cursor}&wait_ms=5000"),
                None,
            )
            .await
            .json();
        cursor = page["next"].as_i64().unwrap();
        for e in page["events"].as_array().unwrap() {
            if e["kind"] == "report" {
                break 'outer;
            }
            if e["data"]["state"]
                .as_str()
                .is_some_and(|s| s != "queued" && s != "running")
            {
                panic!("job ended before reporting: {e}");
            }
        }
    }
    svc.call(
        Method::POST,
        &format!("/jobs/{id}/inbox"),
        Some(json!({"text": "after the release", "trigger": "trg_7"})),
    )
    .await;
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(end["latest_report"]["state"], "blocked");
    assert_eq!(
        end["latest_report"]["question"],
        "Merge now or after the release?"
    );
    let work = svc.work_dir("tkt_sbx_talk");
    let got: Value = serde_json::from_str(
        std::fs::read_to_string(work.join("got.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(got["text"], "after the release");
    assert_eq!(
        std::fs::read_to_string(work.join("prompt-head")).unwrap(),
        "# How you work here\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("prompt-env-head")).unwrap(),
        "# How you work here\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_job_cannot_reach_another_jobs_socket() {
    require!(Need::Sandbox);
    let svc = sandboxed(None);
    let b = svc
        .submit("b", sh_job("tkt_sbx_b", "gatehouse inbox --wait"))
        .await;
    svc.wait_for(&b, |s| s == "running").await;
    let b_socket = svc.control_socket(&b);
    assert!(b_socket.exists());
    let script = format!(
        "GATEHOUSE_CONTROL_SOCKET={sock} gatehouse report --state ready --summary hijack; \
         echo $? > rc; ls /run/gatehouse > seen; ls {state} 2> state-ls; echo $? >> rc",
        sock = b_socket.display(),
        state = svc.state_dir().display(),
    );
    let a = svc.submit("a", sh_job("tkt_sbx_a", &script)).await;
    assert_eq!(svc.wait_ended(&a).await["state"], "done");
    let work = svc.work_dir("tkt_sbx_a");
    let rc = std::fs::read_to_string(work.join("rc")).unwrap();
    let codes: Vec<&str> = rc.lines().collect();
    assert_ne!(codes[0], "0", "job a reported through job b's socket");
    assert_ne!(
        codes[1], "0",
        "the supervisor's state dir is visible in a sandbox"
    );
    let seen = std::fs::read_to_string(work.join("seen")).unwrap();
    assert!(
        seen.lines()
            .all(|l| l == "bin" || l == "control.sock" || l == "proxy.sock"),
        "{seen}"
    );
    assert!(svc.job(&b).await["latest_report"].is_null());
    // And b's work dir is not a's.
    assert!(!svc.work_dir("tkt_sbx_b").join("rc").exists());
    svc.call(Method::DELETE, &format!("/jobs/{b}"), None).await;
    assert_eq!(svc.wait_ended(&b).await["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn deadline_and_cancel_kill_the_whole_sandbox() {
    require!(Need::Sandbox);
    let svc = sandboxed(None);
    let slow = marker_sleep(1);
    let mut body = sh_job(
        "tkt_sbx_slow",
        &format!("sleep {slow} & (sleep {slow} & wait) & sleep {slow}"),
    );
    body["deadline_secs"] = json!(2);
    let id = svc.submit("k", body).await;
    svc.wait_for(&id, |s| s == "running").await;
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "timed_out", "{end}");
    let left = live_with(&format!("sleep {slow}"));
    assert!(
        left.is_empty(),
        "processes of a timed-out sandbox survived: {left:?}"
    );

    let stuck = marker_sleep(2);
    let id = svc
        .submit(
            "c",
            sh_job("tkt_sbx_cancel", &format!("trap '' TERM; sleep {stuck}")),
        )
        .await;
    svc.wait_for(&id, |s| s == "running").await;
    while live_with(&format!("sleep {stuck}")).is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    svc.call(Method::DELETE, &format!("/jobs/{id}"), None).await;
    assert_eq!(svc.wait_ended(&id).await["state"], "cancelled");
    assert!(live_with(&format!("sleep {stuck}")).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashing_worker_fails_with_its_exit() {
    require!(Need::Sandbox);
    let svc = sandboxed(None);
    let a = svc.submit("a", sh_job("tkt_sbx_exit", "exit 3")).await;
    let b = svc
        .submit("b", sh_job("tkt_sbx_segv", "kill -SEGV $$"))
        .await;
    let a = svc.wait_ended(&a).await;
    assert_eq!(
        (a["state"].as_str(), a["exit"]["code"].as_i64()),
        (Some("failed"), Some(3))
    );
    let b = svc.wait_ended(&b).await;
    // The sandbox reports a worker's death by signal N as 128+N.
    assert_eq!(
        (b["state"].as_str(), b["exit"]["code"].as_i64()),
        (Some("failed"), Some(139))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_live_sandboxes_then_restart() {
    require!(Need::Sandbox);
    let admin = FakeProxyAdmin::start();
    let mut svc = sandboxed(Some(&admin));
    let mounts_before = mount_count();
    let long = marker_sleep(3);
    let mut body = sh_job("tkt_sbx_crash", &format!("sleep {long}"));
    body["rule_sets"] = json!(["github-repo"]);
    let id = svc.submit("k", body).await;
    svc.wait_for(&id, |s| s == "running").await;
    while live_with(&format!("sleep {long}")).is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    svc.kill_9();
    svc.spawn();
    let job = svc.job(&id).await;
    assert_eq!(job["state"], "failed");
    assert_eq!(job["reason"], "supervisor_restarted");
    assert!(
        live_with(&format!("sleep {long}")).is_empty(),
        "orphaned sandbox"
    );
    assert!(admin.live_identities().is_empty(), "identity leaked");
    assert!(std::fs::read_dir(svc.state_dir().join("run"))
        .unwrap()
        .next()
        .is_none());
    assert_eq!(mount_count(), mounts_before);
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_sandboxed_jobs_at_once() {
    require!(Need::Sandbox);
    let admin = FakeProxyAdmin::start();
    let svc = sandboxed(Some(&admin));
    let mounts_before = mount_count();
    let tag = marker_sleep(4);
    let mut ids = vec![];
    for i in 0..50 {
        let mut body = sh_job(
            &format!("tkt_sbx_many{i}"),
            &format!(
                "sleep 0.{tag} & gatehouse report --state ready --summary \"$GATEHOUSE_TICKET\"; wait"
            ),
        );
        body["rule_sets"] = json!(["github-repo"]);
        ids.push((i, svc.submit(&format!("m{i}"), body).await));
    }
    for (i, id) in &ids {
        let end = svc.wait_ended(id).await;
        assert_eq!(end["state"], "done", "{end}");
        assert_eq!(end["latest_report"]["summary"], format!("tkt_sbx_many{i}"));
    }
    assert!(live_with(&format!("sleep 0.{tag}")).is_empty());
    assert!(admin.live_identities().is_empty());
    assert!(std::fs::read_dir(svc.state_dir().join("run"))
        .unwrap()
        .next()
        .is_none());
    assert_eq!(mount_count(), mounts_before);
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_die_with_a_killed_supervisor() {
    require!(Need::Sandbox);
    let mut svc = sandboxed(None);
    let long = marker_sleep(5);
    let id = svc
        .submit("k", sh_job("tkt_sbx_orphan", &format!("sleep {long}")))
        .await;
    svc.wait_for(&id, |s| s == "running").await;
    while live_with(&format!("sleep {long}")).is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    svc.kill_9();
    // Not waiting for a restart: the sandboxes go with their supervisor.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !live_with(&format!("sleep {long}")).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "a sandbox outlived its supervisor"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    svc.spawn();
    assert_eq!(svc.job(&id).await["state"], "failed");
}

/// A sandbox's mount table shows each bind's host path. The binary comes
/// from the state dir's copy, not from where gatehouse was built or
/// installed; the control socket from the run dir; nothing else of the
/// supervisor's state but the job's own work dir is named.
#[tokio::test(flavor = "multi_thread")]
async fn the_mount_table_names_no_build_dir_and_no_other_state() {
    require!(Need::Sandbox);
    let run = tempfile::Builder::new().prefix("gh-run").tempdir().unwrap();
    let admin = FakeProxyAdmin::start();
    let svc = Service::start(Options {
        unsandboxed: false,
        run_dir: Some(run.path().to_owned()),
        proxy_admin: Some(admin.socket.clone()),
        ..Options::default()
    });
    let mut body = sh_job(
        "tkt_sbx_mounts",
        "cat /proc/self/mountinfo > mounts && \
         gatehouse report --state ready --summary 'from the copy'",
    );
    body["rule_sets"] = json!(["github-repo"]);
    let id = svc.submit("m", body).await;
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "done", "{end}");
    // Positive control: the bound binary runs and the socket answers.
    assert_eq!(end["latest_report"]["summary"], "from the copy");
    let table = std::fs::read_to_string(svc.work_dir("tkt_sbx_mounts").join("mounts")).unwrap();
    // (root within its filesystem, mount point) of each mount.
    let mounts: Vec<(&str, &str)> = table
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[3], f[4])
        })
        .collect();
    let root_of = |at: &str| {
        mounts
            .iter()
            .find(|(_, point)| *point == at)
            .unwrap_or_else(|| panic!("nothing mounted at {at}:\n{table}"))
            .0
    };
    // A root field is the path within its filesystem, which may be a
    // mount below `/`: look for the build dir's last two components.
    let built = gatehouse_testkit::bin::gatehouse();
    let build_dir: std::path::PathBuf = built
        .parent()
        .unwrap()
        .components()
        .rev()
        .take(2)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let build_dir = build_dir.to_string_lossy().into_owned();
    assert!(
        !table.contains(&build_dir),
        "the mount table names the build dir {build_dir}:\n{table}"
    );
    let service_dir = svc
        .dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let run_name = run
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let bin = root_of("/run/gatehouse/bin/gatehouse");
    assert!(
        bin.ends_with(&format!("{service_dir}/state/bin/gatehouse")),
        "{bin}"
    );
    let control = root_of("/run/gatehouse/control.sock");
    assert!(
        control.ends_with(&format!("{run_name}/{id}/control.sock")),
        "{control}"
    );
    // The proxy identity's socket (or its directory) is the proxy's.
    let proxy_dir = mounts
        .iter()
        .find(|(_, point)| point.starts_with("/run/gatehouse/proxy"))
        .unwrap_or_else(|| panic!("no proxy socket:\n{table}"))
        .0;
    assert!(
        !proxy_dir.contains(&service_dir) && !proxy_dir.contains(&build_dir),
        "{proxy_dir}"
    );
    for (root, point) in &mounts {
        if root.contains(&service_dir) {
            assert!(
                ["/work", "/run/gatehouse/bin/gatehouse"].contains(point),
                "{point} shows the supervisor's state: {root}"
            );
        }
    }
}

/// Started by root, each live job's sandbox runs as a host uid of its own,
/// never 0, so per-uid budgets (processes, inotify, keys) are not shared
/// between tickets.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_jobs_started_by_root_run_as_distinct_host_uids() {
    require!(Need::Root, Need::Sandbox);
    let svc = sandboxed(None);
    let tag = marker_sleep(6);
    let mut ids = vec![];
    for i in 0..3 {
        let job = sh_job(&format!("tkt_sbx_uid{i}"), &format!("exec sleep {tag}"));
        ids.push(svc.submit(&format!("u{i}"), job).await);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pids = loop {
        let pids = live_with(&format!("sleep {tag}"));
        // `sh -c` may exec the sleep or keep running beside it.
        let sleeps: Vec<i32> = pids
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
            })
            .collect();
        if sleeps.len() == 3 {
            break sleeps;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "three sleeps never ran: {sleeps:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let uid_of = |pid: i32| -> u32 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let mut uids: Vec<u32> = pids.iter().map(|p| uid_of(*p)).collect();
    assert!(
        uids.iter().all(|u| *u != 0),
        "a sandbox runs as host root: {uids:?}"
    );
    uids.sort();
    uids.dedup();
    assert_eq!(uids.len(), 3, "live sandboxes share a host uid: {uids:?}");
    for id in &ids {
        svc.call(Method::DELETE, &format!("/jobs/{id}"), None).await;
    }
    for id in &ids {
        svc.wait_ended(id).await;
    }
    assert!(live_with(&format!("sleep {tag}")).is_empty());
}
