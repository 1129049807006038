//! Supervisor service benchmark: N = 1, 10, 50 concurrent jobs, each a real
//! sandbox whose command makes one allowed request through the real proxy
//! (in front of the GitHub emulator).
//!
//! Run: `cargo bench --bench service` (as root, or as a user who can build
//! sandboxes). Prints, per N:
//! - time-to-running: `POST /jobs` sent → `running` event received (the
//!   `sandbox run` process spawned), median; and the supervisor's own
//!   `started_at − created_at` (ms resolution), which excludes the client
//!   side (the benchmark process also hosts the proxy, so it competes for
//!   the same CPUs as the jobs);
//! - time-to-done: `POST /jobs` sent → `done` event received, median, and the
//!   same command run directly with `gatehouse sandbox run` (the baseline,
//!   N at once, measured in the same run) with the ratio;
//! - supervisor memory per live job: (RSS with N jobs live − idle RSS) / N.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_supervisor::jobs::http::{self, HttpMethod as Method};
use gatehouse_testkit::machine::{is_root, user_gid, user_uid, WORKER_USER};
use gatehouse_testkit::proxy::Harness;
use gatehouse_testkit::service::*;
use gatehouse_testkit::skip::{self, Need};
use serde_json::json;

const REQUEST: &str = "test \"$(curl -sS -o /dev/null -w '%{http_code}' \
                       https://api.github.com/repos/acme/widgets/issues/1)\" = 200";

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn job_body(ticket: &str, script: &str) -> serde_json::Value {
    let mut body = sh_job(ticket, script);
    body["rule_sets"] = json!(["test-worker"]);
    body["variables"] = json!({"repo": "acme/widgets"});
    body
}

/// Submits `n` jobs at once and follows the event stream; returns, per job,
/// the seconds from its POST to `running` and to its final state, and the
/// supervisor's own record of created → started (ms).
async fn batch(svc: &Service, tag: &str, n: usize, script: &str) -> Vec<(f64, f64, f64)> {
    let cursor = svc.call(Method::GET, "/events", None).await.json()["next"]
        .as_i64()
        .unwrap();
    let mut sent: HashMap<String, Instant> = HashMap::new();
    let mut submits = vec![];
    for i in 0..n {
        let socket = svc.socket.clone();
        let body = job_body(&format!("tkt_{tag}_{i}"), script);
        let key = format!("{tag}-{i}");
        submits.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let resp = http::request(
                &socket,
                Method::POST,
                "/jobs",
                &[("idempotency-key", &key)],
                Some(body.to_string().into_bytes()),
            )
            .await
            .unwrap();
            (resp.json()["job_id"].as_str().unwrap().to_owned(), t0)
        }));
    }
    for s in submits {
        let (id, t0) = s.await.unwrap();
        sent.insert(id, t0);
    }
    let mut running: HashMap<String, Instant> = HashMap::new();
    let mut ended: HashMap<String, (Instant, String)> = HashMap::new();
    let mut cursor = cursor;
    while ended.len() < n {
        let page = svc
            .call(
                Method::GET,
                &format!("/events?after={cursor}&wait_ms=10000"),
                None,
            )
            .await
            .json();
        let now = Instant::now();
        cursor = page["next"].as_i64().unwrap();
        for e in page["events"].as_array().unwrap() {
            let id = e["job_id"].as_str().unwrap().to_owned();
            match e["data"]["state"].as_str() {
                Some("running") => {
                    running.insert(id, now);
                }
                Some("queued") | None => {}
                Some(state) => {
                    ended.insert(id, (now, state.to_owned()));
                }
            }
        }
    }
    let mut out = vec![];
    for (id, t0) in &sent {
        let (t_end, state) = &ended[id];
        assert_eq!(state, "done", "job {id} ended {state}");
        let t_run = running[id];
        let job = svc.job(id).await;
        let server = job["started_at"].as_i64().unwrap() - job["created_at"].as_i64().unwrap();
        out.push((
            (t_run - *t0).as_secs_f64(),
            (*t_end - *t0).as_secs_f64(),
            server as f64,
        ));
    }
    out
}

/// `n` direct `gatehouse sandbox run`s of the same command at once, through
/// the harness's own proxy identity; seconds from spawn to exit for each.
fn direct(h: &Harness, n: usize) -> Vec<f64> {
    let dirs: Vec<tempfile::TempDir> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
    for d in &dirs {
        give_to_worker(d.path());
    }
    let started: Vec<(Instant, std::process::Child)> = dirs
        .iter()
        .map(|d| {
            let t0 = Instant::now();
            let child = gatehouse_testkit::bin::command()
                .args(["sandbox", "run", "--profile", "default", "--quiet"])
                .arg("--workdir")
                .arg(d.path())
                .arg("--proxy-socket")
                .arg(&h.socket)
                .arg("--ca-cert")
                .arg(&h.proxy_ca)
                .args(["--", "sh", "-c", REQUEST])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (t0, child)
        })
        .collect();
    started
        .into_iter()
        .map(|(t0, mut child)| {
            let status = child.wait().unwrap();
            assert!(status.success(), "direct sandbox run failed: {status}");
            t0.elapsed().as_secs_f64()
        })
        .collect()
}

fn give_to_worker(path: &Path) {
    if !is_root() {
        return;
    }
    let (uid, gid) = (user_uid(WORKER_USER), user_gid(WORKER_USER));
    std::os::unix::fs::chown(path, uid, gid).unwrap();
}

/// Supervisor RSS growth per job while `n` jobs are live (each has made its
/// request and waits on its inbox).
async fn memory_per_job(svc: &Service, tag: &str, n: usize, idle_kib: u64) -> f64 {
    let script = format!(
        "{REQUEST} && gatehouse report --state working --summary up && gatehouse inbox --wait"
    );
    let mut ids = vec![];
    for i in 0..n {
        ids.push(
            svc.submit(
                &format!("{tag}-{i}"),
                job_body(&format!("tkt_{tag}_{i}"), &script),
            )
            .await,
        );
    }
    for id in &ids {
        svc.wait_for(id, |s| s != "queued").await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while svc.job(id).await["latest_report"].is_null() {
            assert!(Instant::now() < deadline, "job {id} never reported");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let live_kib = rss_kib(svc.pid());
    for id in &ids {
        svc.call(
            Method::POST,
            &format!("/jobs/{id}/inbox"),
            Some(json!({"text": "go"})),
        )
        .await;
    }
    for id in &ids {
        assert_eq!(svc.wait_ended(id).await["state"], "done");
    }
    (live_kib.saturating_sub(idle_kib)) as f64 / n as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !skip::available("the service benchmark", &[Need::Sandbox]) {
        return;
    }
    let h = Harness::start();
    let admin = h.dir.path().join("admin.sock");
    let admin_task = {
        let _runtime = h.rt.enter();
        gatehouse_proxy::admin::serve(h.proxy.clone(), &admin).unwrap()
    };
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(admin.clone()),
        ca_cert: Some(h.proxy_ca.clone()),
        ..Options::default()
    });
    h.rt.block_on(async {
        // Warm up: first-use costs (page cache, SQLite, leaf certificate).
        batch(&svc, "warm", 2, REQUEST).await;
    });
    let idle_kib = rss_kib(svc.pid());
    println!("supervisor idle RSS: {:.1} MiB", idle_kib as f64 / 1024.0);
    println!(
        "{:>3} {:>8} {:>14} {:>20} {:>11} {:>14} {:>6} {:>17}",
        "N",
        "samples",
        "to-running ms",
        "(server-side, ms)",
        "to-done ms",
        "direct run ms",
        "ratio",
        "MiB per live job"
    );
    for (n, rounds) in [(1usize, 15usize), (10, 3), (50, 1)] {
        let mut ttr = vec![];
        let mut server = vec![];
        let mut ttd = vec![];
        let mut base = vec![];
        for r in 0..rounds {
            let samples = h.rt.block_on(batch(&svc, &format!("n{n}r{r}"), n, REQUEST));
            for (a, b, c) in samples {
                ttr.push(a * 1000.0);
                ttd.push(b * 1000.0);
                server.push(c);
            }
            base.extend(direct(&h, n).into_iter().map(|s| s * 1000.0));
        }
        let mem =
            h.rt.block_on(memory_per_job(&svc, &format!("mem{n}"), n, idle_kib));
        let (ttr, ttd, base) = (median(&mut ttr), median(&mut ttd), median(&mut base));
        let server = median(&mut server);
        println!(
            "{n:>3} {:>8} {ttr:>14.1} {server:>20.0} {ttd:>11.1} {base:>14.1} {:>6.2} {:>17.2}",
            n * rounds,
            ttd / base,
            mem / 1024.0
        );
    }
    drop(svc);
    admin_task.abort();
}
