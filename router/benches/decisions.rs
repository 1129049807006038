//! Router throughput: 100 000 generated triggers over 5 000 threads through
//! gate, eval (rules-only judge) and the SQLite store, one transaction per
//! decision.
//!
//! Run: `cargo bench -p gatehouse-router --bench decisions`
//! (optionally `-- --triggers N --threads M`; `-- --router-only` runs just
//! the router at sync=Normal, for profiling).
//!
//! Prints, for each configuration, decisions per second and the p50/p99
//! latency per decision, and ratios against two baselines measured in the
//! same run: the pure decision logic with no store, and a bare SQLite commit
//! of one small row per transaction at the same durability (the floor any
//! durable decision pays on this disk).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a panic is a failure

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::id::IdClock;
use gatehouse_router::policy::Policy;
use gatehouse_router::route::{route_trigger, TicketAction};
use gatehouse_router::store::{Durability, Store};
use gatehouse_router::ticket::{Ticket, TicketState};
use gatehouse_router::trigger::{
    Address, AddressKind, Sender, Source, Trigger, TriggerInput, TriggerKind,
};

const POLICY: &str = include_str!("../examples/policy.toml");
const START: u64 = 1_767_225_600_000;

fn sender(id: &str, login: &str, is_bot: bool) -> Sender {
    Sender {
        id: id.into(),
        login: Some(login.into()),
        name: login.into(),
        is_bot,
    }
}

/// A mix of explicit requests, CI results (on main: the auto rule; on dev:
/// conditions fail), comments by allowlisted people (eval, observe), bug
/// reports (observe: would accept) and strangers (ignored).
fn generate(count: usize, threads: usize) -> Vec<TriggerInput> {
    (0..count)
        .map(|i| {
            let thread = i % threads;
            let mut t = TriggerInput {
                source: Source::Github,
                kind: TriggerKind::IssueComment,
                thread: format!("gh:acme/widgets#{}", 10_000 + thread),
                message_id: format!("m{i}"),
                sender: sender("1002", "bob", false),
                addressed: Vec::new(),
                chat: None,
                repo: Some("acme/widgets".into()),
                labels: Vec::new(),
                branch: None,
                text: format!("comment {i} on thread {thread}: the parser fails on empty input"),
                head_ticket: None,
                pull_url: None,
                raw: None,
            };
            match (i * 7 + thread) % 10 {
                0 | 1 => {
                    t.sender = sender("1001", "alice", false);
                    t.addressed.push(Address {
                        kind: AddressKind::Mention,
                        account: "gatehouse-bot".into(),
                    });
                }
                2..=4 => {
                    t.kind = TriggerKind::CiResult;
                    t.sender = sender("41898282", "github-actions[bot]", true);
                    t.branch = Some(if i % 3 == 0 { "main" } else { "dev" }.into());
                }
                5 | 6 => {}
                7 => {
                    t.kind = TriggerKind::IssueOpened;
                    t.sender = sender("1001", "alice", false);
                    t.labels = vec!["bug".into()];
                }
                _ => t.sender = sender("7777", "stranger", false),
            }
            t
        })
        .collect()
}

struct Run {
    name: String,
    total: Duration,
    /// User + system CPU time of this process during the run.
    cpu: Duration,
    latencies: Vec<Duration>,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.total.as_secs_f64()
    }
    fn per_cpu_second(&self) -> f64 {
        self.latencies.len() as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
    fn percentile(&mut self, p: f64) -> Duration {
        self.latencies.sort_unstable();
        let i = ((self.latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
        self.latencies[i.min(self.latencies.len() - 1)]
    }
}

/// This process's user + system CPU time, from /proc/self/stat (in clock
/// ticks of 10 ms; the runs last seconds). On a shared machine wall-clock
/// rates depend on the load; CPU time shows the cost of a decision itself.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
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

fn timed(name: &str, n: usize, mut step: impl FnMut(usize)) -> Run {
    let mut latencies = Vec::with_capacity(n);
    let cpu0 = cpu_time();
    let start = Instant::now();
    for i in 0..n {
        let t0 = Instant::now();
        step(i);
        latencies.push(t0.elapsed());
    }
    Run {
        name: name.into(),
        total: start.elapsed(),
        cpu: cpu_time().saturating_sub(cpu0),
        latencies,
    }
}

/// Gate, eval and routing with tickets in a HashMap: no store at all.
fn pure(policy: &Policy, inputs: &[TriggerInput]) -> Run {
    let mut clock = IdClock::default();
    let mut tickets: HashMap<String, Ticket> = HashMap::new();
    timed("pure decisions (no store)", inputs.len(), |i| {
        let input = inputs[i].clone();
        let at = START + i as u64;
        let trigger = Trigger {
            id: clock.issue(at),
            at,
            input,
        };
        let route = route_trigger(
            &trigger,
            policy,
            &RulesOnlyJudge,
            tickets.get(&trigger.input.thread),
        );
        if let TicketAction::Open { mandate } = route.ticket {
            let thread_key = trigger.input.thread.clone();
            tickets.insert(
                thread_key.clone(),
                Ticket {
                    id: clock.issue(at),
                    thread: clock.issue(at),
                    thread_key,
                    state: TicketState::Open,
                    outcome: None,
                    mandate,
                    latest_report: None,
                    opened_at: at,
                    updated_at: at,
                },
            );
        }
        std::hint::black_box(&route.admission);
    })
}

fn router(
    policy: &Policy,
    inputs: &[TriggerInput],
    durability: Durability,
    dir: &std::path::Path,
) -> Run {
    let path = dir.join(format!("router-{durability:?}.db"));
    let store = Store::open(&path, durability).unwrap();
    let mut r = Router::new(store, policy.clone(), RulesOnlyJudge, START).unwrap();
    timed(
        &format!("router + store, sync={durability:?}"),
        inputs.len(),
        |i| {
            std::hint::black_box(r.on_trigger(inputs[i].clone(), START + i as u64).unwrap());
        },
    )
}

fn bare_sqlite(n: usize, durability: Durability, dir: &std::path::Path) -> Run {
    let conn = rusqlite::Connection::open(dir.join(format!("bare-{durability:?}.db"))).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(
        None,
        "synchronous",
        if durability == Durability::Full {
            "FULL"
        } else {
            "NORMAL"
        },
    )
    .unwrap();
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        .unwrap();
    timed(
        &format!("bare SQLite commit, sync={durability:?}"),
        n,
        |i| {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            conn.prepare_cached("INSERT INTO t (body) VALUES (?1)")
                .unwrap()
                .execute([format!("row {i}")])
                .unwrap();
            conn.execute_batch("COMMIT").unwrap();
        },
    )
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let count = arg("--triggers", 100_000);
    let threads = arg("--threads", 5_000);
    let policy = Policy::from_toml("examples/policy.toml", POLICY).unwrap();
    let inputs = generate(count, threads);
    let dir = tempfile::tempdir().unwrap();
    // The slow full-sync runs replay a tenth of the triggers.
    let full_n = (count / 10).max(1);

    if std::env::args().any(|a| a == "--router-only") {
        // For profiling: the router at sync=Normal and nothing else.
        let mut run = router(&policy, &inputs, Durability::Normal, dir.path());
        let (p50, p99, p999, max) = (
            run.percentile(0.50),
            run.percentile(0.99),
            run.percentile(0.999),
            run.percentile(1.0),
        );
        // Where the wall clock goes: the few decisions that wait for a
        // checkpoint (or lose the CPU) against all the others.
        let slow: Duration = run
            .latencies
            .iter()
            .filter(|l| **l > Duration::from_millis(1))
            .sum();
        println!(
            "{}: {:.0} decisions/s, p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs, {:.0} decisions/cpu-s, {:.1}% of the time in decisions over 1 ms",
            run.name,
            run.per_second(),
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            p999.as_secs_f64() * 1e6,
            max.as_secs_f64() * 1e6,
            run.per_cpu_second(),
            100.0 * slow.as_secs_f64() / run.total.as_secs_f64()
        );
        return;
    }
    let mut runs = vec![
        pure(&policy, &inputs),
        bare_sqlite(count, Durability::Normal, dir.path()),
        router(&policy, &inputs, Durability::Normal, dir.path()),
        bare_sqlite(full_n, Durability::Full, dir.path()),
        router(&policy, &inputs[..full_n], Durability::Full, dir.path()),
    ];
    println!("{count} triggers over {threads} threads (sync=Full runs: the first {full_n})");
    println!(
        "{:<36} {:>9} {:>12} {:>9} {:>9} {:>15}",
        "configuration", "decisions", "decisions/s", "p50 µs", "p99 µs", "decisions/cpu-s"
    );
    for run in &mut runs {
        let (p50, p99) = (run.percentile(0.50), run.percentile(0.99));
        println!(
            "{:<36} {:>9} {:>12.0} {:>9.1} {:>9.1} {:>15.0}",
            run.name,
            run.latencies.len(),
            run.per_second(),
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            run.per_cpu_second()
        );
    }
    let rate = |i: usize| runs[i].per_second();
    let cpu_rate = |i: usize| runs[i].per_cpu_second();
    println!("ratios (same run; wall clock, and per CPU second):");
    for (label, a, b) in [
        ("router sync=Normal / pure decisions    ", 2, 0),
        ("router sync=Normal / bare commit Normal", 2, 1),
        ("router sync=Full   / bare commit Full  ", 4, 3),
    ] {
        println!(
            "  {label} = {:.3} wall, {:.3} cpu",
            rate(a) / rate(b),
            cpu_rate(a) / cpu_rate(b)
        );
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        println!("load average after the run: {} (2 cores)", load.join(" "));
    }
    let target = 20_000.0;
    println!(
        "target ≥ {target:.0} decisions/s with durability (sync=Normal: survives kill -9): {} wall, {} per CPU second",
        if rate(2) >= target { "met" } else { "NOT met" },
        if cpu_rate(2) >= target { "met" } else { "NOT met" }
    );
}
