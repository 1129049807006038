//! Audit verification. Any bytes: it never panics, in time linear in them.
//! Structure-aware: a chain the proxy's own writer made from the fuzzer's
//! records verifies, and with one bit flipped anywhere it is refused at the
//! changed line or the next (whose `prev` no longer matches), or, when the
//! change is in the last line and still reads, its hash is not the one
//! the writer ended on.
#![no_main]

use gatehouse_proxy::audit::{verify_bytes, AuditLog, Outcome, Record, RequestRecord};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

const MOST: Duration = Duration::from_secs(1);

/// Requests named by the fuzzer's text, one per `\n`-separated piece.
fn records(text: &str) -> Vec<Record> {
    text.split('\n')
        .take(16)
        .enumerate()
        .map(|(i, piece)| {
            Record::Request(RequestRecord {
                time: "2026-01-01T00:00:00.000Z".into(),
                request_id: format!("req_{i}"),
                identity: piece.chars().take(40).collect(),
                method: "GET".into(),
                host: "api.github.com".into(),
                path: format!("/{piece}"),
                query_keys: piece.split('&').map(str::to_owned).take(4).collect(),
                outcome: Outcome::Deny {
                    reason: piece.into(),
                    rule_sets_tried: vec!["github-worker".into()],
                },
                message: None,
                truncated: Default::default(),
            })
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let started = Instant::now();
    let _ = verify_bytes(data);
    assert!(
        started.elapsed() < MOST,
        "{} bytes took {:?}",
        data.len(),
        started.elapsed()
    );

    let [hi, lo, bit, rest @ ..] = data else {
        return;
    };
    // The writer syncs: on tmpfs when there is one, so a run is not disk-bound.
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("gatehouse-audit-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&path);
    let mut log = AuditLog::open_at(&path, "2026-01-01T00:00:00.000Z").unwrap();
    let head = log
        .append_all(&records(&String::from_utf8_lossy(rest)))
        .unwrap();
    drop(log);
    let bytes = std::fs::read(&path).unwrap();
    let report = verify_bytes(&bytes).expect("a chain the writer made verifies");
    assert_eq!(report.last_hash, head.hash);

    // One bit flipped, anywhere but the final newline (a torn last line
    // is how a crash leaves a log, and is reported so).
    let at = usize::from(u16::from_be_bytes([*hi, *lo])) % (bytes.len() - 1);
    let mut changed = bytes.clone();
    changed[at] ^= 1 << (bit % 8);
    let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    match verify_bytes(&changed) {
        Err(broken) => assert!(
            broken.line == line || broken.line == line + 1,
            "flipped in line {line}, reported at {broken}"
        ),
        Ok(report) => {
            assert_eq!(line, lines, "a change before the last line went unseen");
            assert_ne!(
                report.last_hash, head.hash,
                "a changed last line kept its hash"
            );
        }
    }
});
