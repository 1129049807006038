//! The router model judge, batched vs one call per event, in the same run,
//! at 1, 10 and 40 candidate events per minute.
//!
//! Run: `cargo bench --bench judge_batching`. The model emulator answers
//! every offered pair after a fixed latency of 1 s per call plus 2 ms per
//! completion token (≈24 tokens per judged pair), behind the real proxy
//! (key injection, TLS both sides) and the router's real client and store.
//! Time is compressed by `GATEHOUSE_BENCH_SCALE` (default 20: the model's
//! 1 s takes 50 ms, 40 events per minute arrive 20 times as fast); every
//! figure is printed in uncompressed time, so the real overhead (proxy,
//! TLS, SQLite) is magnified by the scale too.
//!
//! Events arrive with exponential gaps (seeded, the same for every mode)
//! and are queued; the processor decides what is pending in turns. Modes:
//! `window`, the router's batching window (`model::window`, bound
//! `batch_window_ms` = 10 s): candidates wait for company up to the bound
//! while they arrive at one per bound or faster, else are judged at once;
//! `per turn`, everything pending in one call, never waiting (the window
//! off); `unbatched`, the oldest event alone (one call each). Printed per
//! rate and mode: decisions per model-second (decisions ÷ time spent in
//! model calls), model-seconds per decision, p50 and p90 time-to-decision
//! (arrival → decision committed), and each batched mode's ratio to
//! unbatched, then the load average.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use gatehouse_emulators::{ModelOptions, ModelReply};
use gatehouse_router::engine::Router;
use gatehouse_router::model::config::RetryPolicy;
use gatehouse_router::model::window::{Flush, Window, WindowConfig};
use gatehouse_router::model::{ConfiguredJudge, ModelClient, ModelConfig, ModelJudge};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::{Durability, Store};
use gatehouse_router::trigger::{Sender, Source, TriggerInput, TriggerKind};
use serde_json::{json, Value};

const POLICY: &str = r#"
identity = { github = { login = "gatehouse-bot", id = 900 } }

[[bots]]
name = "ci"
github = { login = "ci-bot[bot]", id = 700 }

[teams.core]
default_repo = "acme/widgets"
[teams.core.repos."acme/widgets"]
sandbox_profile = "default"

[[rules]]
id = "ci-fails-on-main"
team = "core"
text = "A CI run failed on main: diagnose and propose a fix."
mode = "observe"
when = { kinds = ["ci_result"], branches = ["main"], author = "bot" }
"#;

fn scale() -> u32 {
    std::env::var("GATEHOUSE_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|s| *s > 0)
        .unwrap_or(20)
}

fn event(n: usize) -> TriggerInput {
    TriggerInput {
        source: Source::Github,
        kind: TriggerKind::CiResult,
        thread: format!("gh:acme/widgets#{n}"),
        message_id: format!("check-{n}"),
        sender: Sender {
            id: "700".into(),
            login: Some("ci-bot[bot]".into()),
            name: "ci".into(),
            is_bot: true,
        },
        addressed: Vec::new(),
        chat: None,
        repo: Some("acme/widgets".into()),
        labels: Vec::new(),
        branch: Some("main".into()),
        text: format!("CI run {n} failed on main: test_wobble timed out"),
        head_ticket: None,
        pull_url: None,
        raw: None,
    }
}

fn answer_all(request: &Value) -> Option<ModelReply> {
    let user = request["messages"][1]["content"].as_str()?;
    let data: Value = serde_json::from_str(user).ok()?;
    let mut decisions = Vec::new();
    for c in data["candidates"].as_array()? {
        for r in c["rules"].as_array()? {
            decisions.push(json!({"candidate": c["id"], "rule": r["id"],
                "matches": true, "reason": "a failed CI run on main"}));
        }
    }
    Some(ModelReply::Content(
        json!({ "decisions": decisions }).to_string(),
    ))
}

/// Exponential gaps with mean `mean`, from a small seeded generator.
fn arrivals(n: usize, mean: Duration, seed: u64) -> Vec<Duration> {
    let mut x = seed;
    let mut at = Duration::ZERO;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = ((x >> 11) as f64 + 1.0) / ((1u64 << 53) as f64 + 1.0);
            at += mean.mul_f64(-u.ln());
            at
        })
        .collect()
}

struct Run {
    decisions: usize,
    model: Duration,
    latencies: Vec<Duration>,
}

/// The router's default `batch_window_ms`.
const WINDOW_MS: u64 = 10_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Window,
    PerTurn,
    Unbatched,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Window => "window",
            Mode::PerTurn => "per turn",
            Mode::Unbatched => "unbatched",
        }
    }
}

fn run(w: &gatehouse_testkit::model::World, per_minute: u32, n: usize, mode: Mode) -> Run {
    let s = scale();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("router.db"), Durability::Normal).unwrap();
    let config = ModelConfig {
        socket: w.socket.clone(),
        host: "api.openai.com".into(),
        completions_path: "/v1/chat/completions".into(),
        model: "gatehouse-emulated".into(),
        judge: true,
        writer: false,
        timeout: Duration::from_secs(30),
        retry: RetryPolicy {
            retries: 0,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
        },
        concurrency: 4,
        batch_max: 64,
        batch_window: Duration::from_millis(WINDOW_MS) / s,
    };
    let judge = ModelJudge::new(ModelClient::new(config, &w.proxy_ca).unwrap()).unwrap();
    let policy = Policy::from_toml("policy.toml", POLICY).unwrap();
    let mut router =
        Router::new(store, policy, ConfiguredJudge::Model(Box::new(judge)), 1).unwrap();
    // The window logic the intake processor runs, in compressed milliseconds.
    let mut window = Window::new(match mode {
        Mode::Window => router.judge_window(),
        Mode::PerTurn | Mode::Unbatched => WindowConfig::OFF,
    });
    let mean = Duration::from_secs(60) / per_minute / s;
    let times = arrivals(n, mean, 0x9e37_79b9_7f4a_7c15 ^ u64::from(per_minute));
    let (tx, rx) = mpsc::channel::<(usize, Instant)>();
    let start = Instant::now();
    let ms = |t: Instant| u64::try_from(t.duration_since(start).as_millis()).unwrap();
    let producer = std::thread::spawn(move || {
        for (i, at) in times.into_iter().enumerate() {
            if let Some(wait) = (start + at).checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            tx.send((i, Instant::now())).unwrap();
        }
    });
    let mut pending = std::collections::VecDeque::new();
    let mut out = Run {
        decisions: 0,
        model: Duration::ZERO,
        latencies: Vec::new(),
    };
    let arrive = |pending: &mut std::collections::VecDeque<(usize, Instant)>,
                  window: &mut Window,
                  e: (usize, Instant)| {
        window.arrived(i64::try_from(e.0).unwrap(), ms(e.1));
        pending.push_back(e);
    };
    while out.decisions < n {
        if pending.is_empty() {
            let e = rx.recv().unwrap();
            arrive(&mut pending, &mut window, e);
        }
        for e in rx.try_iter() {
            arrive(&mut pending, &mut window, e);
        }
        let held: Vec<u64> = pending.iter().map(|(_, at)| ms(*at)).collect();
        if let Flush::At(until) = window.flush(&held, ms(Instant::now())) {
            let wait = Duration::from_millis(until).saturating_sub(start.elapsed());
            if let Ok(e) = rx.recv_timeout(wait) {
                arrive(&mut pending, &mut window, e);
            }
            continue;
        }
        let turn: Vec<(usize, Instant)> = match mode {
            Mode::Unbatched => pending.pop_front().into_iter().collect(),
            Mode::Window | Mode::PerTurn => pending.drain(..).collect(),
        };
        let inputs: Vec<TriggerInput> = turn.iter().map(|(i, _)| event(*i)).collect();
        let called = Instant::now();
        router.prepare_turn(&inputs).unwrap();
        out.model += called.elapsed();
        for (input, (_, arrived)) in inputs.into_iter().zip(&turn) {
            let d = router.on_trigger(input, 10).unwrap();
            let v = serde_json::to_value(&d).unwrap();
            assert_eq!(v["eval"][0]["verdict"], "would_accept", "{v}");
            out.latencies.push(arrived.elapsed());
            out.decisions += 1;
        }
    }
    producer.join().unwrap();
    out.latencies.sort_unstable();
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let s = scale();
    let w = gatehouse_testkit::model::start(
        ModelOptions::default()
            .latency(Duration::from_secs(1) / s, Duration::from_millis(2) / s)
            .responder(answer_all),
    );
    println!("judge batching: model 1 s per call + 2 ms per completion token; window bound {} s; time compressed {s}x, shown uncompressed", WINDOW_MS / 1000);
    println!(
        "{:>10} {:>10} {:>6} {:>6} {:>17} {:>16} {:>9} {:>9}",
        "events/min",
        "mode",
        "events",
        "calls",
        "decisions/model-s",
        "model-s/decision",
        "p50",
        "p90"
    );
    let modes = [Mode::Window, Mode::PerTurn, Mode::Unbatched];
    for (per_minute, n) in [(1u32, 12usize), (10, 40), (40, 120)] {
        let mut rates = Vec::new();
        let mut p50s = Vec::new();
        for mode in modes {
            let calls_before = w.model.calls();
            let r = run(&w, per_minute, n, mode);
            let model_s = (r.model * s).as_secs_f64();
            let rate = r.decisions as f64 / model_s;
            rates.push(rate);
            p50s.push(pct(&r.latencies, 0.5) * s);
            println!(
                "{:>10} {:>10} {:>6} {:>6} {:>17.2} {:>16.2} {:>8.2}s {:>8.2}s",
                per_minute,
                mode.name(),
                r.decisions,
                w.model.calls() - calls_before,
                rate,
                model_s / r.decisions as f64,
                (pct(&r.latencies, 0.5) * s).as_secs_f64(),
                (pct(&r.latencies, 0.9) * s).as_secs_f64(),
            );
        }
        for (i, mode) in modes[..2].iter().enumerate() {
            println!(
                "{:>10} {} / unbatched: {:.2}x decisions per model-second; p50 {:.2}s vs {:.2}s",
                per_minute,
                mode.name(),
                rates[i] / rates[2],
                p50s[i].as_secs_f64(),
                p50s[2].as_secs_f64()
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "load average after the run: {} ({} cores)",
        load.join(" "),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
}
