//! Any secrets and body, split anywhere: the streaming redactor gives the
//! same bytes as redacting the whole body at once, no secret survives
//! (unless it could be made of the marker's bytes), and its work is the
//! same as in one piece and within its bound (the bytes fed times the
//! longest secret), however the body was chunked.
#![no_main]

use gatehouse_proxy::redact::{redact_all, Redactor, Secrets, REDACTED};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // [secrets count][split step][secret \0]... body
    let [count, step, rest @ ..] = data else {
        return;
    };
    let mut fields = rest.splitn(usize::from(*count % 8) + 1, |&b| b == 0);
    let secrets: Vec<Vec<u8>> = fields
        .by_ref()
        .take(usize::from(*count % 8))
        .map(<[u8]>::to_vec)
        .collect();
    let body = fields.next().unwrap_or_default();
    let set = Secrets::new(secrets.clone());
    let whole = redact_all(&set, body);
    let mut redactor = Redactor::new(secrets.clone());
    let mut streamed = Vec::new();
    for chunk in body.chunks(usize::from(*step).max(1)) {
        streamed.extend_from_slice(&redactor.push(chunk));
    }
    streamed.extend_from_slice(&redactor.finish());
    assert_eq!(streamed, whole, "redaction depends on the chunking");
    // A secret sharing no byte with the marker cannot straddle one, so it
    // can only survive where the scan passed it over.
    if secrets
        .iter()
        .all(|s| !s.iter().any(|b| REDACTED.contains(b)))
    {
        assert!(!set.occur_in(&whole), "a secret survived");
    }
    // Each position is walked once, never deeper than the trie, and a
    // held walk resumes: the work is one pass's, however the body was cut.
    let mut one = Redactor::new(secrets);
    one.push(body);
    one.finish();
    assert_eq!(
        redactor.work(),
        one.work(),
        "the work depends on the chunking"
    );
    let bound = body.len() as u64 * set.longest() as u64;
    assert!(
        redactor.work() <= bound,
        "{} steps for {} bytes",
        redactor.work(),
        body.len()
    );
});
