//! `gatehouse audit reconcile` throughput and memory.
//!
//! Run: `cargo bench --bench audit` (sizes in records: `-- 250000 1000000`,
//! the default both). For each size it writes a proxy audit log of that
//! many records (a hash chain, as the proxy writes it: request and
//! completion lines of a busy proxy, ten requests a second, one in ten a
//! router reply with its message record) and the matching reply log in a
//! router database (every reply sent, with its message id), then runs
//! `gatehouse-services audit reconcile --json` over them (output to
//! /dev/null) and prints records per second and the process's peak RSS. The
//! reconciliation must find nothing unexplained (the exit status says so).
//! Memory holds one horizon of replies (`--horizon 3600`: an hour, a
//! thirtieth of the log's time span at a million records), not the logs, so
//! the peak is the same at both sizes.
//!
//! The baseline, measured in the same run on the same file just before:
//! reading it line by line and taking each line's SHA-256, the least any
//! check of the chain does. Its ratio to the reconciliation moves far less
//! with the machine's load than records/s do.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use gatehouse_proxy::audit::{
    rfc3339_utc, AuditLog, CompletionRecord, MessageRecord, Outcome, Record, RequestRecord,
};
use gatehouse_router::id::ReplyId;
use gatehouse_router::live::outbox::github_body;
use gatehouse_router::store::{Durability, Store};
use sha2::{Digest, Sha256};

/// The log starts here (ms) and a request comes every `STEP` ms.
const START: u64 = 1_796_000_000_000;
const STEP: u64 = 100;
/// One request in this many is a router reply.
const REPLY_EVERY: usize = 10;

fn reply_id(n: usize) -> String {
    // `rpl_` + 12 hex digits of ms + 6 of sequence, as the router issues.
    format!("rpl_{:012x}{:06x}", START / 1000 + n as u64, 0)
}

fn ticket_id(n: usize) -> String {
    format!("tkt_{:012x}{:06x}", START / 1000 + n as u64 / 2, 0)
}

/// The reply log: `replies` replies, every one sent as message `n`.
fn write_replies(db: &Path, replies: usize) {
    drop(Store::open(db, Durability::Normal).unwrap());
    let mut conn = rusqlite::Connection::open(db).unwrap();
    // The bench's replies point at tickets and triggers it does not make.
    conn.pragma_update(None, "foreign_keys", "OFF").unwrap();
    conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut reply = tx
            .prepare(
                "INSERT INTO replies (id, ticket_id, thread_key, purpose, target_trigger, platform,
                                      target_message, text, text_sha256, words, at)
                 VALUES (?1, ?2, ?3, ?4, ?8, 'github', '1', ?5, ?6, 4, ?7)",
            )
            .unwrap();
        let mut outbox = tx
            .prepare(
                "INSERT INTO live_outbox (reply_id, state, attempts, platform_message_id, next_at, updated_at)
                 VALUES (?1, 'sent', 1, ?2, ?3, ?3)",
            )
            .unwrap();
        for n in 0..replies {
            let (id, text) = (reply_id(n), format!("Reply number {n} here"));
            let at = request_at(n * REPLY_EVERY) - 50;
            let purpose = if n % 2 == 0 { "ack" } else { "result" };
            let thread = format!("gh:acme/widgets#{}", n / 2 + 1);
            let hash = hex::encode(Sha256::digest(text.as_bytes()));
            reply
                .execute(rusqlite::params![
                    id,
                    ticket_id(n),
                    thread,
                    purpose,
                    text,
                    hash,
                    at as i64,
                    // One trigger per reply: an ack is once per message.
                    format!("trg_{:012x}{:06x}", START / 1000 + n as u64, 1)
                ])
                .unwrap();
            outbox
                .execute(rusqlite::params![
                    id,
                    (1_000_000 + n).to_string(),
                    at as i64
                ])
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

fn request_at(i: usize) -> u64 {
    START + i as u64 * STEP
}

/// The proxy's log: `records` lines, requests each followed by its completion.
fn write_log(path: &Path, records: usize) -> usize {
    let mut log = AuditLog::open(path).unwrap();
    let mut batch = Vec::with_capacity(2048);
    let mut replies = 0;
    for i in 0..records / 2 {
        let at = request_at(i);
        let id = format!("req-{i:08}");
        let reply = (i % REPLY_EVERY == 0).then(|| {
            let n = i / REPLY_EVERY;
            replies += 1;
            let rid = ReplyId::parse(&reply_id(n)).unwrap();
            let body = github_body(&rid, &format!("Reply number {n} here"));
            (n, hex::encode(Sha256::digest(&body)))
        });
        let issue = reply.as_ref().map_or(1, |(n, _)| n / 2 + 1);
        batch.push(Record::Request(RequestRecord {
            time: rfc3339_utc(at),
            request_id: id.clone(),
            identity: if reply.is_some() {
                "router-gh-1".into()
            } else {
                ticket_id(i / REPLY_EVERY)
            },
            method: if reply.is_some() { "POST" } else { "GET" }.into(),
            host: "api.github.com".into(),
            path: format!("/repos/acme/widgets/issues/{issue}/comments"),
            query_keys: vec!["per_page".into()],
            outcome: Outcome::Allow {
                rule_set: "github-read".into(),
                rule: "issue-comments-list".into(),
            },
            message: reply.as_ref().map(|(_, hash)| MessageRecord {
                kind: "github_issue_comment".into(),
                target: format!("acme/widgets#{issue}"),
                body_sha256: hash.clone(),
            }),
            truncated: Default::default(),
        }));
        batch.push(Record::Completion(CompletionRecord {
            time: rfc3339_utc(at + 40),
            request_id: id,
            status: if reply.is_some() { 201 } else { 200 },
            bytes_sent: 120,
            bytes_received: 2400,
            duration_ms: 40,
            message_id: reply.map(|(n, _)| (1_000_000 + n).to_string()),
            error: None,
            truncated: Default::default(),
        }));
        if batch.len() >= 2048 {
            log.write_all(&batch).unwrap();
            batch.clear();
        }
    }
    log.append_all(&batch).unwrap();
    replies
}

/// The baseline: every line read and hashed; returns the lines.
fn read_and_hash(path: &Path) -> usize {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(path).unwrap());
    let mut line = Vec::with_capacity(1024);
    let mut lines = 0;
    let mut acc = 0u8;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        acc ^= Sha256::digest(&line)[0];
        lines += 1;
    }
    std::hint::black_box(acc);
    lines
}

/// VmHWM (peak RSS, KiB) of a running process.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) of this process's waited-for children.
fn children_cpu() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(u.user_time()) + secs(u.system_time())
}

/// Runs `command` to its end; its exit status, peak RSS (KiB), read from
/// /proc while it runs (VmHWM only grows), and the CPU seconds it used.
fn run_measured(command: &mut Command) -> (std::process::ExitStatus, u64, f64) {
    let cpu_before = children_cpu();
    let mut child = command.spawn().unwrap();
    let mut peak = 0;
    loop {
        if let Some(kib) = peak_rss_kib(child.id()) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (status, peak, children_cpu() - cpu_before);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![250_000, 1_000_000]
    } else {
        sizes
    };
    let services = env!("CARGO_BIN_EXE_gatehouse-services");
    println!(
        "audit reconcile: records/s and peak RSS (KiB), {} build, one process per size",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for records in sizes {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "  load average (1, 5, 15 min): {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        let dir = tempfile::tempdir().unwrap();
        let (log, db) = (dir.path().join("audit.jsonl"), dir.path().join("router.db"));
        let started = Instant::now();
        let replies = write_log(&log, records);
        write_replies(&db, replies);
        let generated = started.elapsed();
        let bytes = std::fs::metadata(&log).unwrap().len();
        let started = Instant::now();
        assert_eq!(read_and_hash(&log), records);
        let floor = started.elapsed();
        let started = Instant::now();
        let (status, rss, cpu) = run_measured(
            Command::new(services)
                .args([
                    "audit",
                    "reconcile",
                    "--json",
                    "--horizon",
                    "3600",
                    "--audit-log",
                ])
                .arg(&log)
                .arg("--router-db")
                .arg(&db)
                .stdout(Stdio::null()),
        );
        let took = started.elapsed();
        assert!(
            status.success(),
            "the reconciliation found something unexplained: {status}"
        );
        println!(
            "  {records:>9} records ({} MiB), {replies:>6} replies: {:.2} s, {:>8.0} records/s ({:.2} CPU s, {:.0} records per CPU second), peak RSS {} KiB; \
             baseline (read + SHA-256 per line) {:.2} s, {:.0} lines/s: reconcile takes {:.2}x the baseline (generated in {:.1} s)",
            bytes / (1 << 20),
            took.as_secs_f64(),
            records as f64 / took.as_secs_f64(),
            cpu,
            records as f64 / cpu,
            rss,
            floor.as_secs_f64(),
            records as f64 / floor.as_secs_f64(),
            took.as_secs_f64() / floor.as_secs_f64(),
            generated.as_secs_f64()
        );
    }
}
