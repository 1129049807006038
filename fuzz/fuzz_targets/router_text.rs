//! People's text as the router counts it (a reply's 100-word limit, the
//! word-for-word comparison of an `attention` reply with the worker's
//! question): any UTF-8 text up to 64 KiB, GitHub's largest comment. The
//! words are non-empty pieces of the text, in order and without overlap,
//! none of them only whitespace; the count is their number; and counting
//! stays within a bound linear in the text's size (a sanitizer build; the
//! fastest of three repetitions).
#![no_main]

use std::time::{Duration, Instant};

use gatehouse_router::words::{count_words, words};
use libfuzzer_sys::fuzz_target;

const MAX_TEXT: usize = 64 * 1024;

/// How many times a text is counted for its time: the fastest counts.
const REPETITIONS: usize = 3;

/// The segmenter builds its dictionary on first use (about half a second
/// in a sanitizer build), once per process: not a cost of any one text.
static WARM: std::sync::Once = std::sync::Once::new();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.len() > MAX_TEXT {
        return;
    }
    WARM.call_once(|| {
        words("中文");
    });
    // The fastest of a few repetitions: a machine loaded by other work
    // slows one run down (an 85-byte text once took 26 ms at nice 19 beside
    // a build, and replays in well under 1 ms), never all of them.
    let mut took = Duration::MAX;
    let mut found = Vec::new();
    for _ in 0..REPETITIONS {
        let started = Instant::now();
        found = words(text);
        took = took.min(started.elapsed());
    }
    // 20 ms, plus 20 µs a byte: far above the release build's cost, which
    // the rules bench measures; a quadratic walk breaks it at 64 KiB.
    let bound = Duration::from_millis(20) + Duration::from_micros(20) * text.len() as u32;
    assert!(
        took < bound,
        "{} bytes took {took:?} (the fastest of {REPETITIONS})",
        text.len()
    );
    let base = text.as_ptr() as usize;
    let mut end = 0;
    for word in &found {
        assert!(!word.is_empty() && !word.trim().is_empty(), "{word:?}");
        let start = word.as_ptr() as usize - base;
        assert!(
            start >= end && start + word.len() <= text.len(),
            "{word:?} out of order"
        );
        end = start + word.len();
    }
    assert_eq!(count_words(text), found.len());
});
