//! Any bytes from a client, split anywhere: the request-framing guard in
//! front of hyper never panics, passes on only a prefix of what it was given
//! (followed by the poison head when it refuses), and decides the same
//! whether the bytes arrive at once or in up to five reads split anywhere.
#![no_main]

use bytes::BytesMut;
use gatehouse_proxy::server::framing::{Tracker, POISON};
use libfuzzer_sys::fuzz_target;

fn run(reads: &[&[u8]]) -> (BytesMut, Option<String>) {
    let mut tracker = Tracker::default();
    let mut out = BytesMut::new();
    for read in reads {
        tracker.feed(read, &mut out);
    }
    let violation = tracker.violation().map(|v| format!("{v:?}"));
    (out, violation)
}

fuzz_target!(|data: &[u8]| {
    // The first four bytes choose four split points in the rest.
    if data.len() < 4 {
        return;
    }
    let (splits, input) = data.split_at(4);
    let mut points: Vec<usize> = splits
        .iter()
        .map(|&s| usize::from(s) * input.len() / 255)
        .collect();
    points.sort_unstable();
    let mut reads = Vec::new();
    let mut from = 0;
    for &to in &points {
        reads.push(&input[from..to]);
        from = to;
    }
    reads.push(&input[from..]);
    let (whole, whole_violation) = run(&[input]);
    let (parts, parts_violation) = run(&reads);
    let passed = match &whole_violation {
        Some(_) => whole
            .strip_suffix(POISON)
            .expect("a refusal ends with the poison head"),
        None => &whole[..],
    };
    assert!(
        input.starts_with(passed),
        "the guard passed on bytes it was not given"
    );
    assert_eq!(whole, parts, "delivery depends on how the bytes were split");
    assert_eq!(whole_violation, parts_violation);
});
