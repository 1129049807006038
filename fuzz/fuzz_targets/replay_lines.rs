//! The router's replay lines (`gatehouse router replay`): people's text and
//! platform ids in JSON lines, up to 64 KiB, through the same engine the
//! live router uses, over an in-memory store and the example policy. A bad
//! line is answered with a `rejected` decision and the replay goes on (the
//! replay returns an error only for a broken store or output, neither of
//! which an input can cause here); every non-blank line gets exactly one
//! output line, numbered in order; the counts add up; the same input on an
//! empty state gives byte-identical output; and one input replays within a
//! bound (a sanitizer build).
#![no_main]

use std::path::Path;
use std::time::{Duration, Instant};

use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::policy::Policy;
use gatehouse_router::replay::{first_at, replay};
use gatehouse_router::store::Store;
use libfuzzer_sys::fuzz_target;

const MAX_INPUT: usize = 64 * 1024;
const POLICY: &str = include_str!("../../router/examples/policy.toml");

fn run(text: &str) -> (Vec<u8>, gatehouse_router::replay::ReplaySummary) {
    let policy = Policy::from_toml("policy.toml", POLICY).expect("the example policy loads");
    let store = Store::open_in_memory().expect("an in-memory store");
    let mut router = Router::new(store, policy, RulesOnlyJudge, first_at(text)).expect("a router");
    let mut out = Vec::new();
    // A `policy` line's `path` is read as the CLI reads it (relative to a
    // directory that does not exist here); its inline `toml` is how the
    // fuzzer changes the policy.
    let summary = replay(
        &mut router,
        text.as_bytes(),
        Path::new("/nonexistent-gatehouse-fuzz"),
        &mut out,
    )
    .unwrap_or_else(|e| panic!("replay stopped instead of rejecting a line: {e}"));
    (out, summary)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.len() > MAX_INPUT {
        return;
    }
    let started = Instant::now();
    let (out, summary) = run(text);
    let took = started.elapsed();
    // Generous for a sanitizer build (an SQLite transaction per line); a
    // quadratic walk over lines or labels breaks it at 64 KiB.
    let bound = Duration::from_secs(2) + Duration::from_micros(200) * text.len() as u32;
    assert!(took < bound, "{} bytes took {took:?}", text.len());

    let numbers: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, _)| i + 1)
        .collect();
    let out = std::str::from_utf8(&out).expect("decisions are UTF-8");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        numbers.len(),
        "one decision per non-blank line"
    );
    assert_eq!(summary.decisions + summary.rejected, lines.len());
    for (line, number) in lines.iter().zip(&numbers) {
        let value: serde_json::Value = serde_json::from_str(line).expect("a decision is JSON");
        assert_eq!(
            value.get("line").and_then(|n| n.as_u64()),
            Some(*number as u64),
            "{line}"
        );
    }
    let (again, _) = run(text);
    assert_eq!(out.as_bytes(), &again[..], "the same input replays alike");
});
