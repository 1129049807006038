//! The loop benchmark: the whole of gatehouse on the emulators, every part
//! a real process (`gatehouse_testkit::live`: GitHub emulator ─► webhook ─►
//! `gatehouse router run` ─► `gatehouse supervisor` ─► sandboxed worker;
//! replies through `gatehouse proxy`).
//!
//! Run: `cargo bench --bench loop` (as root, or as a user who can build
//! sandboxes). Prints:
//! - **mention → ack posted** and **mention → worker running** (p50, p99
//!   over sequential samples), each beside the sum of its parts measured in
//!   the same run, so the loop's own overhead shows:
//!   - intake: the webhook's round trip (the delivery verified, stored
//!     durably and answered) — the first stretch of every sample;
//!   - decision: the router core deciding the same mention (gate, ticket,
//!     one transaction) on a store of the same durability;
//!   - ack send: a comment posted through the router's proxy identity with
//!     the router's own HTTP client;
//!   - job start: `POST /jobs` with the router's job client → the worker's
//!     first command (the worker stamps the time it started, `date +%s%N`).
//! - **50 mentions at once**: time to the last ack, the last worker running
//!   and the last result.
//! - **200 idle sandboxes**: jobs whose worker waits; memory per sandbox
//!   (the proportional set size of every process of the sandboxes plus the
//!   supervisor's growth, over 200) and the start time (`POST /jobs` →
//!   `running`) of the 200th against the first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::live::http::ProxyClient;
use gatehouse_router::live::jobs::{JobsClient, Submitted};
use gatehouse_router::live::plan::JobBody;
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{Durability, Store};
use gatehouse_router::trigger::{Address, AddressKind, Sender, Source, TriggerInput, TriggerKind};
use gatehouse_testkit::live::{LiveWorld, BOT_LOGIN, PROFILE};
use gatehouse_testkit::proxy::Harness;
use gatehouse_testkit::service::{sh_job, Options, Service};
use gatehouse_testkit::skip::{self, Need};
use serde_json::json;

const REPO: &str = "acme/widgets";
/// Samples of the sequential latency runs.
const SAMPLES: usize = 40;
const AT_ONCE: usize = 50;
const IDLE: usize = 200;

/// Numbers threads and tickets of the parts' runs apart from each other.
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn next(n: usize) -> usize {
    NEXT.fetch_add(n, Ordering::Relaxed)
}

/// The worker: stamps when it started, and is done.
const WORKER: &str = "S=$(date +%s%N); gatehouse report --state ready --summary \"started $S\"";

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

/// The start stamp a worker put in its result (`Done: started <ns>`).
fn started_ns(result: &str) -> Option<u128> {
    result
        .split_whitespace()
        .skip_while(|w| *w != "started")
        .nth(1)
        .and_then(|n| n.parse().ok())
}

/// Waits (polling the emulator every 0.5 ms) until issue `n` has `count`
/// bot comments; the instant the count was first seen.
fn wait_comments(w: &LiveWorld, n: u64, count: usize) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if w.bot_comments(n).len() >= count {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "issue {n}: no {count} bot comments"
        );
        std::thread::sleep(Duration::from_micros(500));
    }
}

struct Sample {
    intake: f64,
    ack: f64,
    running: f64,
}

/// One mention on a fresh issue, end to end.
fn sample(w: &LiveWorld, i: usize) -> Sample {
    let n = w
        .github
        .add_issue(REPO, &format!("Bench {i}"), "b", "alice")
        .unwrap();
    let (t0, t0_ns) = (Instant::now(), now_ns());
    w.github
        .add_issue_comment(REPO, n, "@gatehouse-bot please look", "alice")
        .unwrap();
    let intake = ms(t0.elapsed());
    let acked = wait_comments(w, n, 1);
    wait_comments(w, n, 2);
    let result = w.bot_comments(n)[1].clone();
    let started = started_ns(&result).unwrap_or_else(|| panic!("no stamp in {result:?}"));
    Sample {
        intake,
        ack: ms(acked - t0),
        running: (started.saturating_sub(t0_ns)) as f64 / 1e6,
    }
}

/// The router core deciding `n` mentions (each opening a ticket) on a
/// fresh store of the live router's durability: milliseconds each.
fn decisions(policy: &Policy, dir: &Path, n: usize) -> Vec<f64> {
    let store = Store::open(&dir.join("bench-decisions.db"), Durability::Normal).unwrap();
    let mut router = Router::new(store, policy.clone(), RulesOnlyJudge, 1).unwrap();
    let first = next(n);
    let bot = gatehouse_emulators::user_id(BOT_LOGIN).to_string();
    let alice = gatehouse_emulators::user_id("alice");
    (0..n)
        .map(|i| {
            let input = TriggerInput {
                source: Source::Github,
                kind: TriggerKind::IssueComment,
                thread: format!("gh:{REPO}#{}", 100_000 + first + i),
                message_id: format!("ic_{}", first + i),
                sender: Sender {
                    id: alice.to_string(),
                    login: Some("alice".into()),
                    name: "alice".into(),
                    is_bot: false,
                },
                addressed: vec![Address {
                    kind: AddressKind::Mention,
                    account: bot.clone(),
                }],
                chat: None,
                repo: Some(REPO.into()),
                labels: vec![],
                branch: None,
                text: "@gatehouse-bot please look".into(),
                head_ticket: None,
                pull_url: None,
                raw: None,
            };
            let t = Instant::now();
            router.on_trigger(input, 2 + i as u64).unwrap();
            ms(t.elapsed())
        })
        .collect()
}

/// Comments posted through the router's identity with the router's client.
fn sends(w: &LiveWorld, rt: &tokio::runtime::Runtime, n: usize) -> Vec<f64> {
    let issue = w
        .github
        .add_issue(REPO, "Send bench", "b", "alice")
        .unwrap();
    let client = ProxyClient::new(&w.proxy_ca()).unwrap();
    let path = format!("/repos/{REPO}/issues/{issue}/comments");
    (0..n)
        .map(|i| {
            let body = json!({"body": format!("send bench {i}")}).to_string();
            let t = Instant::now();
            let a = rt
                .block_on(client.request(
                    &w.github_identity,
                    "api.github.com",
                    http::Method::POST,
                    &path,
                    Some(body.into_bytes()),
                    Duration::from_secs(10),
                ))
                .unwrap();
            assert_eq!(a.status.as_u16(), 201);
            ms(t.elapsed())
        })
        .collect()
}

/// Jobs submitted with the router's job client, to the worker's stamp.
fn job_starts(w: &LiveWorld, rt: &tokio::runtime::Runtime, n: usize) -> Vec<f64> {
    let jobs = JobsClient {
        socket: w.supervisor.socket.clone(),
    };
    rt.block_on(async {
        let mut after = jobs.events(0, 0).await.unwrap().next;
        let mut out = vec![];
        let first = next(n);
        for i in first..first + n {
            let body = JobBody {
                ticket: format!("tkt_bench_{i}"),
                team: "core".into(),
                profile: PROFILE.into(),
                rule_sets: vec![gatehouse_testkit::rules::TEST_RULE_SET.into()],
                variables: [("repo".to_owned(), REPO.to_owned())].into(),
                task: "bench".into(),
                deadline_secs: 60,
            };
            let t0 = now_ns();
            let Submitted::Job(id) = jobs.submit(&format!("bench-{i}"), &body).await.unwrap()
            else {
                panic!("job {i} not accepted");
            };
            let started = loop {
                let page = jobs.events(after, 5000).await.unwrap();
                after = page.next;
                let stamp = page.events.iter().find_map(|(_, e)| match e {
                    gatehouse_router::live::events::JobEvent::Report { job_id, report }
                        if *job_id == id =>
                    {
                        started_ns(&report.summary)
                    }
                    _ => None,
                });
                if let Some(s) = stamp {
                    break s;
                }
            };
            out.push(started.saturating_sub(t0) as f64 / 1e6);
        }
        out
    })
}

fn latency(w: &LiveWorld, rt: &tokio::runtime::Runtime) {
    let policy_text = std::fs::read_to_string(w.dir.path().join("policy.toml")).unwrap();
    let policy = Policy::from_toml("policy.toml", &policy_text).unwrap();
    // Warm up: first-use costs (page cache, leaf certificates, SQLite).
    for i in 0..3 {
        sample(w, i);
    }
    let (mut intake, mut ack, mut running) = (vec![], vec![], vec![]);
    let (mut decide, mut send, mut start) = (vec![], vec![], vec![]);
    // Interleaved: each round a loop sample, then a few of each part.
    for i in 0..SAMPLES {
        let s = sample(w, 100 + i);
        intake.push(s.intake);
        ack.push(s.ack);
        running.push(s.running);
        decide.extend(decisions(&policy, w.dir.path(), 5));
        send.extend(sends(w, rt, 2));
        if i % 4 == 0 {
            start.extend(job_starts(w, rt, 1));
        }
        eprintln!(
            "sample {}/{SAMPLES}: intake {:.1} ms, ack {:.1} ms, running {:.1} ms",
            i + 1,
            s.intake,
            s.ack,
            s.running
        );
    }
    let p50 = |v: &[f64]| pct(v, 0.5);
    let parts_ack = p50(&intake) + p50(&decide) + p50(&send);
    let parts_run = p50(&intake) + p50(&decide) + p50(&start);
    println!(
        "parts (p50 ms): intake {:.2}, decision {:.3}, ack send {:.2}, job start {:.2}",
        p50(&intake),
        p50(&decide),
        p50(&send),
        p50(&start)
    );
    println!(
        "{:<26} {:>9} {:>9} {:>14} {:>16} {:>14}",
        "", "p50 ms", "p99 ms", "parts p50 ms", "overhead p50 ms", "loop / parts"
    );
    for (name, v, parts) in [
        ("mention -> ack posted", &ack, parts_ack),
        ("mention -> worker running", &running, parts_run),
    ] {
        println!(
            "{name:<26} {:>9.1} {:>9.1} {parts:>14.1} {:>16.1} {:>13.2}x",
            p50(v),
            pct(v, 0.99),
            p50(v) - parts,
            p50(v) / parts
        );
    }
}

fn at_once(w: &LiveWorld) {
    let issues: Vec<u64> = (0..AT_ONCE)
        .map(|i| {
            w.github
                .add_issue(REPO, &format!("At once {i}"), "b", "alice")
                .unwrap()
        })
        .collect();
    let (t0, t0_ns) = (Instant::now(), now_ns());
    std::thread::scope(|s| {
        for &n in &issues {
            s.spawn(move || {
                w.github
                    .add_issue_comment(REPO, n, "@gatehouse-bot please look", "alice")
                    .unwrap();
            });
        }
    });
    let mentioned = ms(t0.elapsed());
    let last_ack = issues
        .iter()
        .map(|&n| wait_comments(w, n, 1))
        .max()
        .unwrap();
    let last_result = issues
        .iter()
        .map(|&n| wait_comments(w, n, 2))
        .max()
        .unwrap();
    let last_running = issues
        .iter()
        .filter_map(|&n| started_ns(&w.bot_comments(n)[1]))
        .max()
        .unwrap();
    for &n in &issues {
        assert_eq!(
            w.bot_comments(n).len(),
            2,
            "issue {n}: {:?}",
            w.bot_comments(n)
        );
    }
    println!(
        "{AT_ONCE} mentions at once (sent in {mentioned:.0} ms): last ack {:.0} ms, last worker running {:.0} ms, last result {:.0} ms; each acked once and answered once",
        ms(last_ack - t0),
        (last_running.saturating_sub(t0_ns)) as f64 / 1e6,
        ms(last_result - t0)
    );
}

/// Proportional set size of `pid`, KiB (0 when it is gone).
fn pss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Every process descending from `root` (not `root` itself).
fn descendants(root: i32) -> Vec<i32> {
    let mut parent_of = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The field after the command's closing parenthesis: state, ppid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn idle_sandboxes() {
    let h = Harness::start();
    let admin = h.dir.path().join("admin.sock");
    let admin_task = {
        let _runtime = h.rt.enter();
        gatehouse_proxy::admin::serve(h.proxy.clone(), &admin).unwrap()
    };
    let svc = Service::start(Options {
        unsandboxed: false,
        max_running_jobs: IDLE + 8,
        proxy_admin: Some(admin.clone()),
        ca_cert: Some(h.proxy_ca.clone()),
        ..Options::default()
    });
    let job = |i: usize| {
        let mut body = sh_job(&format!("tkt_idle_{i}"), "gatehouse inbox --wait");
        body["rule_sets"] = json!([gatehouse_testkit::rules::TEST_RULE_SET]);
        body["variables"] = json!({"repo": REPO});
        body
    };
    h.rt.block_on(async {
        // Warm up, then measure from the supervisor's idle size.
        let id = svc.submit("idle-warm", job(9999)).await;
        svc.wait_for(&id, |s| s == "running").await;
        svc.call(
            gatehouse_supervisor::jobs::http::HttpMethod::DELETE,
            &format!("/jobs/{id}"),
            None,
        )
        .await;
        svc.wait_ended(&id).await;
    });
    let idle_kib = rss_kib(svc.pid());
    let mut starts = vec![];
    let mut ids = vec![];
    for i in 0..IDLE {
        let t = Instant::now();
        let id = h.rt.block_on(async {
            let id = svc.submit(&format!("idle-{i}"), job(i)).await;
            svc.wait_for(&id, |s| s == "running").await;
            id
        });
        starts.push(ms(t.elapsed()));
        ids.push(id);
        if (i + 1) % 20 == 0 {
            eprint!("\r{} idle sandboxes", i + 1);
        }
    }
    eprintln!();
    // Every sandbox is up once its processes exist; give the last ones a moment.
    std::thread::sleep(Duration::from_secs(2));
    let procs = descendants(svc.pid());
    let sandbox_kib: u64 = procs.iter().map(|&p| pss_kib(p)).sum();
    let growth_kib = rss_kib(svc.pid()).saturating_sub(idle_kib);
    let per = (sandbox_kib + growth_kib) as f64 / IDLE as f64 / 1024.0;
    let first10 = pct(&starts[..10], 0.5);
    let last10 = pct(&starts[IDLE - 10..], 0.5);
    println!(
        "{IDLE} idle sandboxes: {} processes, {:.2} MiB per sandbox ({:.1} MiB PSS of the sandboxes + {:.1} MiB supervisor growth); start (POST -> running) first {:.1} ms, 200th {:.1} ms; median of the first 10 {first10:.1} ms, of the last 10 {last10:.1} ms ({:.2}x)",
        procs.len(),
        per,
        sandbox_kib as f64 / 1024.0,
        growth_kib as f64 / 1024.0,
        starts[0],
        starts[IDLE - 1],
        last10 / first10,
    );
    h.rt.block_on(async {
        for id in &ids {
            svc.call(
                gatehouse_supervisor::jobs::http::HttpMethod::DELETE,
                &format!("/jobs/{id}"),
                None,
            )
            .await;
        }
        for id in &ids {
            svc.wait_ended(id).await;
        }
    });
    drop(svc);
    admin_task.abort();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !skip::available("the loop benchmark", &[Need::Sandbox]) {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let w = LiveWorld::start(WORKER);
    latency(&w, &rt);
    at_once(&w);
    drop(w);
    idle_sandboxes();
}
