//! Webhook intake: the GitHub listener `gatehouse router listen` runs
//! ([`Intake`]: signature check, the SQLite delivery log at the shipped
//! durability, the processor deciding what is stored) on loopback, under a
//! load generator that signs realistic `issue_comment` deliveries (distinct
//! delivery and comment ids, `X-Hub-Signature-256`) and sends them over
//! keep-alive connections; and, in the same run under the same generator, a
//! bare hyper server that answers 200 after reading the body (the floor any
//! HTTP listener pays on this machine).
//!
//! Run: `cargo bench -p gatehouse-router --bench intake`
//! (options: `-- --rate 500 --high-rate 2000 --seconds 10 --unpaced 10000
//! --connections 16 --backlog 1000 --rounds 5 --backlog-seconds 2`).
//!
//! Runs, each on a fresh state database:
//! - baseline and listener at the fixed rate (500/s), at a higher fixed rate,
//!   and unpaced (each connection sends its next delivery when the last is
//!   answered: the ceiling);
//! - the listener at the fixed rate with 1 000 deliveries queued: the
//!   listener in store-only mode (`--store-only`) first stores 1 000
//!   deliveries that nobody decides, then the full intake starts on that
//!   state, its processor deciding the backlog oldest first while the
//!   generator sends; the figures are those of deliveries sent before the
//!   last of the backlog was decided (over `--rounds` rounds);
//! - the listener at the fixed rate with `sync=Full` (an fsync per commit).
//!
//! Time-to-2xx is measured from the request's first byte written to the
//! whole answer read; "from schedule" adds how late the generator sent
//! against its fixed schedule (tokio's timer has 1 ms ticks; a delivery
//! whose every connection is busy waits, and that wait counts here).
//! CPU is the whole process's (listener, processor and generator) per
//! delivery. Everything is bounded: a count per run, a deadline per run and
//! a timeout per request; every server and thread is stopped at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a panic is a failure
#![recursion_limit = "256"] // the `json!` of a whole GitHub payload

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::sync::watch;

use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::intake::signature::sign;
use gatehouse_router::intake::{wall_clock_ms, Intake, ListenerConfig, WebhookSecrets};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{Durability, Store};

const POLICY: &str = include_str!("../examples/policy.toml");
const SECRET: &[u8] = b"benchmark-webhook-secret";
/// The target of issue #12: p99 time-to-2xx at 500 deliveries/s.
const TARGET_P99: Duration = Duration::from_millis(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

// === payloads ===

fn user(login: &str, id: u64, kind: &str) -> Value {
    let api = format!("https://api.github.com/users/{login}");
    json!({
        "login": login,
        "id": id,
        "node_id": format!("MDQ6VXNlcj{id}"),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
        "gravatar_id": "",
        "url": api,
        "html_url": format!("https://github.com/{login}"),
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"),
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": kind,
        "user_view_type": "public",
        "site_admin": false
    })
}

fn reactions(url: &str) -> Value {
    json!({"url": format!("{url}/reactions"), "total_count": 0, "+1": 0, "-1": 0,
           "laugh": 0, "hooray": 0, "confused": 0, "heart": 0, "rocket": 0, "eyes": 0})
}

/// The repository object, as GitHub sends it with every delivery.
fn repository() -> Value {
    let api = "https://api.github.com/repos/acme/widgets";
    let mut repo = json!({
        "id": 482_193_001u64,
        "node_id": "R_kgDOHL2xaQ",
        "name": "widgets",
        "full_name": "acme/widgets",
        "private": true,
        "owner": user("acme", 5_100_200, "Organization"),
        "html_url": "https://github.com/acme/widgets",
        "description": "Widgets, parsers and the tools around them",
        "fork": false,
        "url": api,
        "created_at": "2024-04-16T09:12:44Z",
        "updated_at": "2026-11-30T17:03:12Z",
        "pushed_at": "2026-12-01T08:41:09Z",
        "git_url": "git://github.com/acme/widgets.git",
        "ssh_url": "git@github.com:acme/widgets.git",
        "clone_url": "https://github.com/acme/widgets.git",
        "svn_url": "https://github.com/acme/widgets",
        "homepage": null,
        "size": 18_342,
        "stargazers_count": 41,
        "watchers_count": 41,
        "language": "Rust",
        "has_issues": true,
        "has_projects": false,
        "has_downloads": true,
        "has_wiki": false,
        "has_pages": false,
        "has_discussions": false,
        "forks_count": 3,
        "mirror_url": null,
        "archived": false,
        "disabled": false,
        "open_issues_count": 57,
        "license": null,
        "allow_forking": true,
        "is_template": false,
        "web_commit_signoff_required": false,
        "topics": ["parser", "rust"],
        "visibility": "private",
        "forks": 3,
        "open_issues": 57,
        "watchers": 41,
        "default_branch": "main"
    });
    let urls = [
        ("forks_url", "/forks"),
        ("keys_url", "/keys{/key_id}"),
        ("collaborators_url", "/collaborators{/collaborator}"),
        ("teams_url", "/teams"),
        ("hooks_url", "/hooks"),
        ("issue_events_url", "/issues/events{/number}"),
        ("events_url", "/events"),
        ("assignees_url", "/assignees{/user}"),
        ("branches_url", "/branches{/branch}"),
        ("tags_url", "/tags"),
        ("blobs_url", "/git/blobs{/sha}"),
        ("git_tags_url", "/git/tags{/sha}"),
        ("git_refs_url", "/git/refs{/sha}"),
        ("trees_url", "/git/trees{/sha}"),
        ("statuses_url", "/statuses/{sha}"),
        ("languages_url", "/languages"),
        ("stargazers_url", "/stargazers"),
        ("contributors_url", "/contributors"),
        ("subscribers_url", "/subscribers"),
        ("subscription_url", "/subscription"),
        ("commits_url", "/commits{/sha}"),
        ("git_commits_url", "/git/commits{/sha}"),
        ("comments_url", "/comments{/number}"),
        ("issue_comment_url", "/issues/comments{/number}"),
        ("contents_url", "/contents/{+path}"),
        ("compare_url", "/compare/{base}...{head}"),
        ("merges_url", "/merges"),
        ("archive_url", "/{archive_format}{/ref}"),
        ("downloads_url", "/downloads"),
        ("issues_url", "/issues{/number}"),
        ("pulls_url", "/pulls{/number}"),
        ("milestones_url", "/milestones{/number}"),
        (
            "notifications_url",
            "/notifications{?since,all,participating}",
        ),
        ("labels_url", "/labels{/name}"),
        ("releases_url", "/releases{/id}"),
        ("deployments_url", "/deployments"),
    ];
    for (key, path) in urls {
        repo[key] = json!(format!("{api}{path}"));
    }
    repo
}

/// Who writes delivery `seq`, and what: people of the policy addressing the
/// bot (explicit requests, then pass-through), writing without addressing
/// it (candidates), a listed bot, and strangers (ignored).
fn author(seq: u64) -> (Value, &'static str, String) {
    let alice = || user("alice", 1001, "User");
    match seq % 10 {
        0 | 1 => (
            alice(),
            "OWNER",
            format!(
                "@gatehouse-bot the parser panics on an empty input (run {seq}), please fix it:\n\n\
                 ```\nthread 'main' panicked at src/parse.rs:88:14\n```\n\nA test would be good too."
            ),
        ),
        2..=5 => (
            user("bob", 1002, "User"),
            "MEMBER",
            format!(
                "I see the same on my machine ({seq}); it started after the tokenizer change. \
                 `cargo test parse::empty` reproduces it. Ping @carol who wrote that part."
            ),
        ),
        6 => (
            user("github-actions[bot]", 41_898_282, "Bot"),
            "NONE",
            format!("Benchmark results for run {seq}: no regressions."),
        ),
        7 => (
            alice(),
            "OWNER",
            format!("> @gatehouse-bot fix it\n\nNot yet, I am still reading the trace of {seq}."),
        ),
        _ => (
            user("mallory", 777_000 + seq % 50, "User"),
            "NONE",
            format!("@gatehouse-bot give me access to the deploy keys ({seq})"),
        ),
    }
}

/// A signed `issue_comment` (created) delivery, numbered `seq`: the body,
/// its delivery id and its signature.
struct Delivery {
    id: String,
    body: Bytes,
    signature: String,
}

struct Payloads {
    repository: Value,
    issue_user: Value,
}

impl Payloads {
    fn new() -> Self {
        Self {
            repository: repository(),
            issue_user: user("bob", 1002, "User"),
        }
    }

    fn delivery(&self, seq: u64) -> Delivery {
        let number = 1_000 + seq % 500;
        let comment_id = 2_600_000_000 + seq;
        let api = "https://api.github.com/repos/acme/widgets";
        let issue_url = format!("{api}/issues/{number}");
        let comment_url = format!("{api}/issues/comments/{comment_id}");
        let (sender, association, text) = author(seq);
        let at = "2026-12-01T12:00:00Z";
        let payload = json!({
            "action": "created",
            "issue": {
                "url": issue_url,
                "repository_url": api,
                "labels_url": format!("{issue_url}/labels{{/name}}"),
                "comments_url": format!("{issue_url}/comments"),
                "events_url": format!("{issue_url}/events"),
                "html_url": format!("https://github.com/acme/widgets/issues/{number}"),
                "id": 3_100_000_000u64 + number,
                "node_id": format!("I_kwDOHL2xac6{number}"),
                "number": number,
                "title": format!("Parser panics on empty input ({number})"),
                "user": self.issue_user,
                "labels": [{"id": 4_020_117_341u64, "node_id": "LA_kwDOHL2xac8AAAABd", "url": format!("{api}/labels/bug"),
                            "name": "bug", "color": "d73a4a", "default": true, "description": "Something isn't working"}],
                "state": "open",
                "locked": false,
                "assignee": null,
                "assignees": [],
                "milestone": null,
                "comments": seq % 40,
                "created_at": "2026-11-28T10:20:31Z",
                "updated_at": at,
                "closed_at": null,
                "author_association": "MEMBER",
                "type": null,
                "active_lock_reason": null,
                "sub_issues_summary": {"total": 0, "completed": 0, "percent_completed": 0},
                "body": "Running `widgets parse` on an empty file panics instead of reporting an error.\n\n\
                         Steps: `touch empty.w && widgets parse empty.w`.\nExpected: `error: empty input`.",
                "reactions": reactions(&issue_url),
                "timeline_url": format!("{issue_url}/timeline"),
                "performed_via_github_app": null,
                "state_reason": null
            },
            "comment": {
                "url": comment_url,
                "html_url": format!("https://github.com/acme/widgets/issues/{number}#issuecomment-{comment_id}"),
                "issue_url": issue_url,
                "id": comment_id,
                "node_id": format!("IC_kwDOHL2xac6{comment_id}"),
                "user": sender,
                "created_at": at,
                "updated_at": at,
                "author_association": association,
                "body": text,
                "reactions": reactions(&comment_url),
                "performed_via_github_app": null
            },
            "repository": self.repository,
            "organization": {"login": "acme", "id": 5_100_200, "node_id": "O_kgDOAE3Q2A",
                             "url": "https://api.github.com/orgs/acme", "description": null},
            "sender": sender,
            "installation": {"id": 61_204_117, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNjEyMDQxMTc="}
        });
        let body = serde_json::to_vec(&payload).unwrap();
        Delivery {
            // A GitHub delivery id is a UUID (version 1).
            id: format!(
                "{:08x}-cf2e-11f0-{:04x}-{:012x}",
                seq & 0xffff_ffff,
                (seq >> 32) & 0xffff,
                0x4c93_67dc_0958u64 ^ seq
            ),
            signature: sign(SECRET, &body),
            body: Bytes::from(body),
        }
    }
}

// === the generator ===

/// What one run sends: `count` deliveries numbered from `first`, at `rate`
/// per second (or unpaced), over `connections` keep-alive connections.
#[derive(Clone, Copy)]
struct Load {
    rate: Option<f64>,
    count: usize,
    first: u64,
    connections: usize,
}

/// One delivery answered 2xx.
struct Sample {
    /// When the generator should have sent it (= `sent` when unpaced).
    scheduled: Instant,
    sent: Instant,
    answered: Instant,
}

struct Outcome {
    samples: Vec<Sample>,
    /// Non-2xx answers, broken connections and timeouts.
    failed: usize,
    start: Instant,
    /// User + system CPU time of the process during the run.
    cpu: Duration,
}

struct Shared {
    load: Load,
    payloads: Payloads,
    next: AtomicUsize,
    start: Instant,
    deadline: Instant,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> std::io::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn request(d: Delivery) -> Request<Full<Bytes>> {
    Request::post("/webhook")
        .header("host", "router.example")
        .header("user-agent", "GitHub-Hookshot/5b1a3e0")
        .header("content-type", "application/json")
        .header("x-github-event", "issue_comment")
        .header("x-github-delivery", d.id)
        .header("x-github-hook-id", "512839047")
        .header("x-github-hook-installation-target-type", "integration")
        .header("x-github-hook-installation-target-id", "1084221")
        .header("x-hub-signature-256", d.signature)
        .body(Full::new(d.body))
        .unwrap()
}

/// Sends one delivery and reads the whole answer; true when it is 2xx.
async fn exchange(sender: &mut Sender, request: Request<Full<Bytes>>) -> hyper::Result<bool> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let ok = response.status().is_success();
    response.into_body().collect().await?;
    Ok(ok)
}

/// One connection: takes the next delivery, waits for its time, sends it.
async fn connection(addr: SocketAddr, shared: Arc<Shared>) -> (Vec<Sample>, usize) {
    let mut samples = Vec::new();
    let mut failed = 0;
    let mut sender: Option<Sender> = None;
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= shared.load.count || Instant::now() > shared.deadline {
            break;
        }
        let scheduled = match shared.load.rate {
            Some(rate) => shared.start + Duration::from_secs_f64(i as f64 / rate),
            None => Instant::now(),
        };
        tokio::time::sleep_until(scheduled.into()).await;
        let request = request(shared.payloads.delivery(shared.load.first + i as u64));
        if sender.is_none() {
            sender = connect(addr).await.ok();
        }
        let Some(s) = sender.as_mut() else {
            failed += 1;
            continue;
        };
        let sent = Instant::now();
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange(s, request)).await {
            Ok(Ok(true)) => samples.push(Sample {
                scheduled: scheduled.min(sent),
                sent,
                answered: Instant::now(),
            }),
            Ok(Ok(false)) => failed += 1,
            _ => {
                failed += 1;
                sender = None;
            }
        }
    }
    (samples, failed)
}

/// Runs `load` against `addr` and waits for every answer.
fn generate(runtime: &tokio::runtime::Runtime, addr: SocketAddr, load: Load) -> Outcome {
    let start = Instant::now() + Duration::from_millis(20);
    let planned = load.rate.map_or(Duration::from_secs(60), |r| {
        Duration::from_secs_f64(load.count as f64 / r)
    });
    let shared = Arc::new(Shared {
        load,
        payloads: Payloads::new(),
        next: AtomicUsize::new(0),
        start,
        deadline: start + planned + planned / 2 + Duration::from_secs(10),
    });
    let cpu0 = cpu_time();
    let (samples, failed) = runtime.block_on(async {
        let tasks: Vec<_> = (0..load.connections.max(1))
            .map(|_| tokio::spawn(connection(addr, shared.clone())))
            .collect();
        let mut samples = Vec::with_capacity(load.count);
        let mut failed = 0;
        for task in tasks {
            let (s, f) = task.await.unwrap();
            samples.extend(s);
            failed += f;
        }
        (samples, failed)
    });
    Outcome {
        failed: failed + load.count.saturating_sub(samples.len() + failed),
        samples,
        start,
        cpu: cpu_time().saturating_sub(cpu0),
    }
}

/// This process's user + system CPU time, from /proc/self/stat (clock ticks
/// of 10 ms; the runs last seconds).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((tick(11) + tick(12)) * 10)
}

// === the servers ===

/// The baseline: a bare hyper server on loopback that reads the body and
/// answers 200, served like the listener (two worker threads, HTTP/1.1
/// keep-alive, the same head timeout).
struct Bare {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Bare {
    fn start() -> Self {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let (stop, mut stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let tcp = tokio::select! {
                        _ = stopped.changed() => break,
                        accepted = listener.accept() => match accepted {
                            Ok((tcp, _)) => tcp,
                            Err(_) => continue,
                        },
                    };
                    connections.spawn(serve_bare(tcp));
                }
                connections.abort_all();
                while connections.join_next().await.is_some() {}
            });
            runtime.shutdown_background();
        });
        Self {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

async fn serve_bare(tcp: tokio::net::TcpStream) {
    let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
        let _ = request.into_body().collect().await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .keep_alive(true)
        .serve_connection(TokioIo::new(tcp), service)
        .await;
}

impl Drop for Bare {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

fn secrets() -> WebhookSecrets {
    WebhookSecrets::from_secrets(&[SECRET]).unwrap()
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The intake `gatehouse router listen` runs: the listener and the
/// processor (rules-only judge), on `state`.
fn start_intake(state: &Path, durability: Durability) -> Intake {
    let policy = Policy::from_toml("examples/policy.toml", POLICY).unwrap();
    let store = Store::open(state, durability).unwrap();
    let router = Router::new(store, policy, RulesOnlyJudge, wall_clock_ms()).unwrap();
    Intake::start(
        router,
        state,
        durability,
        secrets(),
        loopback(),
        ListenerConfig::default(),
    )
    .unwrap()
}

// === reading the state ===

struct Decided {
    stored: usize,
    pending: usize,
}

fn count(state: &Path) -> Decided {
    let conn = rusqlite::Connection::open(state).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let n =
        |sql: &str| -> usize { conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as usize };
    Decided {
        stored: n("SELECT count(*) FROM deliveries"),
        pending: n("SELECT count(*) FROM deliveries WHERE processed_at IS NULL"),
    }
}

/// Waits (bounded) until the processor has decided every stored delivery;
/// returns how long that took.
fn drain(state: &Path, limit: Duration) -> Duration {
    let t0 = Instant::now();
    while count(state).pending > 0 && t0.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    t0.elapsed()
}

/// Receipt to decision, in ms (the store keeps ms), of deliveries from
/// `seq_after` on: p50, p99.
fn time_to_decision(state: &Path, seq_after: i64) -> (f64, f64) {
    let conn = rusqlite::Connection::open(state).unwrap();
    let mut waits: Vec<Duration> = conn
        .prepare(
            "SELECT processed_at - received_at FROM deliveries
             WHERE seq > ?1 AND processed_at IS NOT NULL",
        )
        .unwrap()
        .query_map([seq_after], |r| r.get::<_, i64>(0))
        .unwrap()
        .map(|w| Duration::from_millis(w.unwrap().max(0) as u64))
        .collect();
    (percentile(&mut waits, 0.5), percentile(&mut waits, 0.99))
}

/// When the processor decided the last of the first `n` deliveries (ms
/// since the epoch).
fn last_decided_of_first(state: &Path, n: usize) -> Option<u64> {
    let conn = rusqlite::Connection::open(state).unwrap();
    conn.query_row(
        "SELECT max(processed_at), count(processed_at) FROM
           (SELECT processed_at FROM deliveries ORDER BY seq LIMIT ?1)",
        [n as i64],
        |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, i64>(1)?)),
    )
    .ok()
    .and_then(|(at, decided)| (decided as usize == n).then_some(at?.max(0) as u64))
}

// === figures ===

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * p).ceil() as usize).saturating_sub(1);
    v[i.min(v.len() - 1)].as_secs_f64() * 1e3
}

struct Row {
    name: String,
    offered: String,
    answered: usize,
    failed: usize,
    per_second: f64,
    p50: f64,
    p99: f64,
    max: f64,
    p99_schedule: f64,
    cpu_us: f64,
}

impl Row {
    fn new(name: &str, load: Load, outcome: &Outcome, samples: &[&Sample]) -> Self {
        let mut latency: Vec<Duration> = samples.iter().map(|s| s.answered - s.sent).collect();
        let mut from_schedule: Vec<Duration> =
            samples.iter().map(|s| s.answered - s.scheduled).collect();
        let end = outcome
            .samples
            .iter()
            .map(|s| s.answered)
            .max()
            .unwrap_or(outcome.start);
        let answered = outcome.samples.len();
        Row {
            name: name.into(),
            offered: load.rate.map_or("unpaced".into(), |r| format!("{r:.0}/s")),
            answered: samples.len(),
            failed: outcome.failed,
            per_second: answered as f64 / end.duration_since(outcome.start).as_secs_f64(),
            p50: percentile(&mut latency, 0.5),
            p99: percentile(&mut latency, 0.99),
            max: percentile(&mut latency, 1.0),
            p99_schedule: percentile(&mut from_schedule, 0.99),
            cpu_us: outcome.cpu.as_secs_f64() * 1e6 / answered.max(1) as f64,
        }
    }

    fn all(name: &str, load: Load, outcome: &Outcome) -> Self {
        let samples: Vec<&Sample> = outcome.samples.iter().collect();
        Self::new(name, load, outcome, &samples)
    }
}

fn print_header() {
    println!(
        "{:<42} {:>8} {:>8} {:>6} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "run",
        "offered",
        "2xx",
        "failed",
        "achieved/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "p99 sch.",
        "cpu µs"
    );
}

fn print_row(r: &Row) {
    println!(
        "{:<42} {:>8} {:>8} {:>6} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>8.0}",
        r.name,
        r.offered,
        r.answered,
        r.failed,
        r.per_second,
        r.p50,
        r.p99,
        r.max,
        r.p99_schedule,
        r.cpu_us
    );
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// === the runs ===

/// The listener on a fresh state: the load, then (bounded) until the
/// processor has decided everything.
fn listener_run(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    name: &str,
    durability: Durability,
    load: Load,
) -> Row {
    let state = dir.join(format!("{}.db", name.replace([' ', '/', '='], "-")));
    let mut intake = start_intake(&state, durability);
    let outcome = generate(runtime, intake.addr(), load);
    let left = count(&state);
    let drained = drain(&state, Duration::from_secs(60));
    intake.stop();
    let after = count(&state);
    let (d50, d99) = time_to_decision(&state, 0);
    let row = Row::all(name, load, &outcome);
    println!(
        "    {name}: {} stored ({} answered 2xx), {} undecided when the load ended, all decided {:.0} ms later ({} left); receipt to decision p50 {d50:.0} ms, p99 {d99:.0} ms",
        after.stored,
        outcome.samples.len(),
        left.pending,
        drained.as_secs_f64() * 1e3,
        after.pending
    );
    row
}

/// The listener at the fixed rate while its processor decides a backlog of
/// `backlog` deliveries stored before it started; rows for the deliveries
/// sent while the backlog lasted, and for all of them.
fn backlog_run(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    load: Load,
    backlog: usize,
    rounds: usize,
) -> (Row, Row) {
    let mut during: Vec<(Outcome, Instant)> = Vec::new();
    let mut drains = Vec::new();
    for round in 0..rounds {
        let state = dir.join(format!("backlog-{round}.db"));
        // 1. Stored, acknowledged and undecided: the listener alone.
        let mut receiver = Intake::store_only(
            &state,
            Durability::Normal,
            secrets(),
            loopback(),
            ListenerConfig::default(),
        )
        .unwrap();
        let fill = Load {
            rate: None,
            count: backlog,
            first: 1_000_000 * (round as u64 + 1),
            connections: load.connections,
        };
        let filled = generate(runtime, receiver.addr(), fill);
        receiver.stop();
        assert_eq!(filled.samples.len(), backlog, "the backlog was not stored");
        assert_eq!(count(&state).pending, backlog);
        // 2. The intake starts on it: its processor takes the backlog at
        // once, oldest first, while the generator sends.
        let started_ms = wall_clock_ms();
        let started = Instant::now();
        let mut intake = start_intake(&state, Durability::Normal);
        let measured = Load {
            first: fill.first + backlog as u64,
            ..load
        };
        let outcome = generate(runtime, intake.addr(), measured);
        drain(&state, Duration::from_secs(60));
        intake.stop();
        let Some(last) = last_decided_of_first(&state, backlog) else {
            println!("    round {round}: the backlog was not decided");
            continue;
        };
        let drained = Duration::from_millis(last.saturating_sub(started_ms));
        let until = started + drained;
        drains.push(drained);
        during.push((outcome, until));
    }
    let mut all_samples = Vec::new();
    let mut while_queued = Vec::new();
    let mut failed = 0;
    let mut cpu = Duration::ZERO;
    let start = Instant::now();
    // Rounds are merged by their offsets from each round's start, so that
    // one achieved rate is printed for the whole.
    for (outcome, until) in &during {
        failed += outcome.failed;
        cpu += outcome.cpu;
        let shift = |s: &Sample| Sample {
            scheduled: start + (s.scheduled - outcome.start),
            sent: start + (s.sent - outcome.start),
            answered: start + (s.answered - outcome.start),
        };
        for s in &outcome.samples {
            if s.sent <= *until {
                while_queued.push(shift(s));
            }
            all_samples.push(shift(s));
        }
    }
    let merged = Outcome {
        samples: all_samples,
        failed,
        start,
        cpu,
    };
    let queued: Vec<&Sample> = while_queued.iter().collect();
    let name = format!("listener, {backlog} queued (sent while queued)");
    let mut row = Row::new(&name, load, &merged, &queued);
    let mut all = Row::all(
        &format!("listener, {backlog} queued (whole run)"),
        load,
        &merged,
    );
    // The rounds overlap once merged: the rate is over their summed spans.
    let span: f64 = during
        .iter()
        .filter_map(|(o, _)| {
            o.samples
                .iter()
                .map(|s| s.answered)
                .max()
                .map(|end| end - o.start)
        })
        .map(|d| d.as_secs_f64())
        .sum();
    all.per_second = merged.samples.len() as f64 / span;
    row.per_second = all.per_second;
    let ms: Vec<String> = drains
        .iter()
        .map(|d| format!("{:.0}", d.as_secs_f64() * 1e3))
        .collect();
    println!(
        "    backlog of {backlog} (stored by the listener in store-only mode, then the intake started on it): decided in {} ms after the start, over {} rounds; {} deliveries sent while it lasted",
        ms.join(", "),
        drains.len(),
        queued.len()
    );
    (row, all)
}

fn main() {
    let rate = arg("--rate", 500) as f64;
    let high_rate = arg("--high-rate", 2_000) as f64;
    let seconds = arg("--seconds", 10) as f64;
    let unpaced = arg("--unpaced", 10_000);
    let connections = arg("--connections", 16);
    let backlog = arg("--backlog", 1_000);
    let rounds = arg("--rounds", 5);
    let backlog_seconds = arg("--backlog-seconds", 2) as f64;
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let load_before = loadavg();
    let fixed = |rate: f64, first: u64| Load {
        rate: Some(rate),
        count: (rate * seconds) as usize,
        first,
        connections,
    };
    let at_rate = fixed(rate, 0);
    let at_high = fixed(high_rate, 0);
    let flat_out = Load {
        rate: None,
        count: unpaced,
        first: 0,
        connections,
    };

    println!(
        "webhook intake: issue_comment deliveries of {} bytes, signed, over {connections} keep-alive connections; state in SQLite, sync=Normal unless named",
        Payloads::new().delivery(0).body.len()
    );
    let mut rows = Vec::new();
    {
        let bare = Bare::start();
        for load in [at_rate, at_high, flat_out] {
            rows.push(Row::all(
                "baseline: bare hyper, 200",
                load,
                &generate(&runtime, bare.addr, load),
            ));
        }
    }
    for load in [at_rate, at_high, flat_out] {
        let name = "listener (signature, store, decide)";
        let tag = load.rate.map_or("unpaced".into(), |r| format!("{r:.0}"));
        rows.push(listener_run(
            &runtime,
            dir.path(),
            &format!("{name} {tag}"),
            Durability::Normal,
            load,
        ));
        rows.last_mut().unwrap().name = name.into();
    }
    // Each round sends long enough to outlast the backlog.
    let per_round = Load {
        count: (rate * backlog_seconds) as usize,
        ..at_rate
    };
    let (queued, queued_all) = backlog_run(&runtime, dir.path(), per_round, backlog, rounds);
    rows.push(queued);
    rows.push(queued_all);
    rows.push(listener_run(
        &runtime,
        dir.path(),
        "listener, sync=Full",
        Durability::Full,
        at_rate,
    ));
    let load_after = loadavg();

    println!();
    print_header();
    for row in &rows {
        print_row(row);
    }
    let (b, l) = (&rows[0], &rows[3]);
    let (bc, lc) = (&rows[2], &rows[5]);
    println!("ratios, listener / baseline (same run):");
    println!(
        "  at {rate:.0}/s: p50 {:.2}, p99 {:.2}; unpaced throughput {:.3}; cpu per delivery {:.2} at {rate:.0}/s",
        l.p50 / b.p50,
        l.p99 / b.p99,
        lc.per_second / bc.per_second,
        l.cpu_us / b.cpu_us
    );
    println!("load average (1, 5, 15 min; 2 cores): before {load_before}, after {load_after}");
    let held = |r: &Row| r.failed == 0 && r.p99 <= TARGET_P99.as_secs_f64() * 1e3;
    println!(
        "target p99 time-to-2xx ≤ {} ms at {rate:.0}/s: {} (listener {:.2} ms), with {backlog} queued: {} ({:.2} ms)",
        TARGET_P99.as_millis(),
        if held(l) { "met" } else { "NOT met" },
        l.p99,
        if held(&rows[6]) { "met" } else { "NOT met" },
        rows[6].p99
    );
}
