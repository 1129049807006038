use super::*;
use proptest::prelude::*;

fn secrets(values: &[&str]) -> Secrets {
    Secrets::new(values.iter().map(|s| s.as_bytes().to_vec()))
}

fn run(values: &[&str], chunks: &[&str]) -> String {
    let mut r = Redactor::new(values.iter().map(|s| s.as_bytes().to_vec()).collect());
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(&r.push(c.as_bytes()));
    }
    out.extend_from_slice(&r.finish());
    String::from_utf8(out).unwrap()
}

/// `body` cut at `cuts` (positions taken modulo its length + 1).
fn split<'a>(body: &'a str, cuts: &[usize]) -> Vec<&'a str> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut last = 0;
    for p in points {
        chunks.push(&body[last..p]);
        last = p;
    }
    chunks.push(&body[last..]);
    chunks
}

#[test]
fn table() {
    let cases: &[(&[&str], &[&str], &str)] = &[
        (
            &["ghs_abc"],
            &["token ghs_abc here"],
            "token [REDACTED] here",
        ),
        (
            &["ghs_abc"],
            &["token gh", "s_a", "bc here"],
            "token [REDACTED] here",
        ),
        (&["ghs_abc"], &["ghs_ab"], "ghs_ab"),
        (&["ghs_abc"], &["ghs_abghs_abc"], "ghs_ab[REDACTED]"),
        (&["aa", "aaaa"], &["aaaaa"], "[REDACTED]a"),
        // One secret a prefix of another: the same output however split
        // (the shorter one was redacted early when the chunk ended in it).
        (&["aa", "aaaa"], &["aaa", "a"], "[REDACTED]"),
        (&["aa", "aaaa"], &["a", "a", "a", "a", "a"], "[REDACTED]a"),
        (&["aa", "aaaa"], &["aa", "ab"], "[REDACTED]ab"),
        (&["ab", "abcd"], &["abc"], "[REDACTED]c"),
        (&[], &["anything"], "anything"),
        (&[""], &["anything"], "anything"),
        (&["s3"], &["s", "3", "s", "3"], "[REDACTED][REDACTED]"),
        (&["s3"], &["s", "", "3"], "[REDACTED]"),
    ];
    for (values, chunks, want) in cases {
        assert_eq!(run(values, chunks), *want, "{values:?} {chunks:?}");
    }
}

#[test]
fn whole_bodies_are_redacted_and_clean_ones_pass_unchanged() {
    let set = Secrets::new([b"ghs_abc".to_vec(), b"sk-1".to_vec(), Vec::new()]);
    let cases: &[(&str, &str)] = &[
        ("token ghs_abc here", "token [REDACTED] here"),
        ("ghs_abghs_abc", "ghs_ab[REDACTED]"),
        ("sk-1sk-1", "[REDACTED][REDACTED]"),
        ("ends with ghs_abc", "ends with [REDACTED]"),
        ("ghs_ab sk- g s", "ghs_ab sk- g s"),
        ("", ""),
    ];
    for (body, want) in cases {
        let out = redact_body(&set, Bytes::copy_from_slice(body.as_bytes()));
        assert_eq!(&out[..], want.as_bytes(), "{body}");
        assert_eq!(set.occur_in(body.as_bytes()), body != want, "{body}");
    }
    assert!(!Secrets::default().occur_in(b"anything"));
    assert_eq!(set.len(), 2);
    assert!(set.holds(b"sk-1") && !set.holds(b"sk-"));
}

#[test]
fn header_names_are_matched_ignoring_case() {
    let set = secrets(&["ghs_AbC"]);
    assert!(set.occur_in_ignoring_case(b"x-ghs_abc"));
    assert!(set.occur_in_ignoring_case(b"GHS_ABC"));
    assert!(!set.occur_in_ignoring_case(b"x-ghs_ab"));
    assert!(!set.occur_in(b"x-ghs_abc"), "values keep their case");
}

/// The worst case for the walk: a body that is one long run of a prefix
/// shared by the secrets, fed a byte at a time. The work is the same as in
/// one pass over the whole body (the held walk resumes, it is not walked
/// again), within the documented bound, and memory held back stays within
/// the longest secret.
#[test]
fn work_is_the_same_however_the_body_is_chunked() {
    let long = format!("{}b", "a".repeat(64));
    let values = [long.as_str(), &"a".repeat(32), &"a".repeat(48)];
    let body = "a".repeat(20_000);
    let set = Arc::new(secrets(&values));
    let bound = |n: usize| n as u64 * set.longest() as u64;

    let mut whole = Redactor::shared(set.clone());
    let mut expected = whole.push(body.as_bytes()).to_vec();
    expected.extend_from_slice(&whole.finish());
    assert!(whole.work() <= bound(body.len()), "{}", whole.work());
    assert!(
        whole.work() > body.len() as u64,
        "the walk is not exercised"
    );

    let mut bytewise = Redactor::shared(set.clone());
    let mut out = Vec::new();
    for b in body.as_bytes() {
        out.extend_from_slice(&bytewise.push(std::slice::from_ref(b)));
        assert!(bytewise.held.len() <= set.longest());
    }
    out.extend_from_slice(&bytewise.finish());
    assert_eq!(out, expected);
    assert_eq!(bytewise.work(), whole.work());
}

/// A secret that ends exactly where a chunk ends, at a leaf of the trie,
/// is decided there and costs the same steps as in one piece.
#[test]
fn a_secret_ending_with_its_chunk_is_decided_there() {
    let set = Arc::new(secrets(&["ghs_abc", "ghs_abcdef"]));
    let mut split = Redactor::shared(set.clone());
    let mut out = split.push(b"x ghs_abc").to_vec();
    assert_eq!(out, b"x ", "a longer secret may still follow");
    out.extend_from_slice(&split.push(b"def"));
    assert_eq!(out, b"x [REDACTED]", "decided at the leaf, before the end");
    out.extend_from_slice(&split.push(b" ghs_abc"));
    out.extend_from_slice(&split.finish());
    assert_eq!(out, b"x [REDACTED] [REDACTED]");
    let mut one = Redactor::shared(set);
    let mut whole = one.push(b"x ghs_abcdef ghs_abc").to_vec();
    whole.extend_from_slice(&one.finish());
    assert_eq!(whole, out);
    assert_eq!(one.work(), split.work());
}

proptest! {
    /// The packed searcher's answer to "does a secret occur" is the trie's, for
    /// secrets that overlap, repeat and are prefixes of each other, in
    /// bodies short enough for its Rabin-Karp fallback and long enough for
    /// Teddy itself: it decides whether an answer is redacted at all.
    #[test]
    fn the_finder_and_the_trie_agree_on_whether_a_secret_occurs(
        values in proptest::collection::vec("[abe]{1,6}", 1..5),
        body in "[abex]{0,400}",
    ) {
        let set = Secrets::new(values.iter().map(|v| v.as_bytes().to_vec()));
        // Teddy where the CPU has its SIMD (x86-64 here), else the automaton.
        prop_assert!(set.finder.is_some());
        prop_assert_eq!(set.occur_in(body.as_bytes()), set.occur_in_by_trie(body.as_bytes()));
        // The fallback, for sets Teddy does not take, agrees as well.
        let automaton = Finder::Automaton(aho_corasick::AhoCorasick::new(&set.values).unwrap());
        prop_assert_eq!(automaton.is_match(body.as_bytes()), set.occur_in_by_trie(body.as_bytes()));
        prop_assert_eq!(
            set.occur_in(body.as_bytes()),
            values.iter().any(|v| body.contains(v.as_str()))
        );
    }

    /// The same with secrets shaped like the forms of real tokens (20–48
    /// bytes, up to 40 of them: Teddy's longer fingerprints and its "fat"
    /// variant past 32), one of them maybe in the body.
    #[test]
    fn the_finder_agrees_with_the_trie_on_token_shaped_secrets(
        values in proptest::collection::vec("[a-zA-Z0-9_]{20,48}", 1..40),
        pick in proptest::option::of(0usize..40),
        prefix in "[a-zA-Z0-9_\" :,{}]{0,300}",
        suffix in "[a-zA-Z0-9_\" :,{}]{0,300}",
    ) {
        let set = Secrets::new(values.iter().map(|v| v.as_bytes().to_vec()));
        let inner = pick.and_then(|i| values.get(i)).map_or("", String::as_str);
        let body = format!("{prefix}{inner}{suffix}");
        let trie = set.occur_in_by_trie(body.as_bytes());
        prop_assert_eq!(set.occur_in(body.as_bytes()), trie);
        prop_assert!(inner.is_empty() || trie);
    }

    /// Whole-body redaction agrees with the streaming redactor on any
    /// text over a small alphabet (secrets overlap and repeat often).
    #[test]
    fn redact_body_matches_redact_all(body in "[abs_]{0,60}") {
        let set = secrets(&["ab", "s_ab", "bbb"]);
        let out = redact_body(&set, Bytes::copy_from_slice(body.as_bytes()));
        prop_assert_eq!(&out[..], &redact_all(&set, body.as_bytes())[..]);
    }

    /// However the body is split, no secret survives and text without
    /// secrets passes unchanged.
    #[test]
    fn no_secret_survives_any_split(
        prefix in "[a-z ]{0,40}",
        suffix in "[a-z ]{0,40}",
        cuts in proptest::collection::vec(0usize..100, 0..6),
    ) {
        let secret = "ghp_S3CRET";
        let body = format!("{prefix}{secret}{suffix}{secret}");
        let out = run(&[secret], &split(&body, &cuts));
        prop_assert!(!out.contains(secret));
        prop_assert_eq!(out, format!("{prefix}[REDACTED]{suffix}[REDACTED]"));
    }

    /// Whatever the secrets and however the body is split, the work is
    /// the same as in one piece, within the documented bound, and nothing
    /// beyond the longest secret is held back between chunks.
    #[test]
    fn work_is_the_same_and_bounded_under_any_split(
        values in proptest::collection::vec("[ab]{1,12}", 1..6),
        body in "[ab]{0,200}",
        cuts in proptest::collection::vec(0usize..250, 0..40),
    ) {
        let set = Arc::new(Secrets::new(values.iter().map(|v| v.as_bytes().to_vec())));
        let mut r = Redactor::shared(set.clone());
        for chunk in split(&body, &cuts) {
            r.push(chunk.as_bytes());
            prop_assert!(r.held.len() <= set.longest());
        }
        r.finish();
        prop_assert!(r.work() <= body.len() as u64 * set.longest() as u64);
        let mut one = Redactor::shared(set.clone());
        one.push(body.as_bytes());
        one.finish();
        prop_assert_eq!(r.work(), one.work(), "the work depends on the chunking");
    }

    /// With secrets that are prefixes of each other and overlap, the
    /// output is the same however the body is split, and the same as the
    /// whole body's.
    #[test]
    fn prefix_secrets_redact_the_same_under_any_split(
        body in "[abx]{0,80}",
        cuts in proptest::collection::vec(0usize..100, 0..8),
    ) {
        let values = ["ab", "abab", "ababx", "ba", "bx"];
        let whole = String::from_utf8(redact_all(&secrets(&values), body.as_bytes())).unwrap();
        prop_assert_eq!(run(&values, &split(&body, &cuts)), whole);
    }
}
