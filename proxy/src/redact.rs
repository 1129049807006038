//! Redaction of the exact secret values the proxy holds, from response
//! bodies streamed back to a sandbox. Pure: the caller feeds chunks and
//! forwards what comes out.
//!
//! A secret may straddle two chunks, so the redactor holds back the last
//! `longest secret - 1` bytes of each chunk until the next one (or the end)
//! shows whether they start a secret.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

/// What replaces a secret value.
pub const REDACTED: &[u8] = b"[REDACTED]";

/// A streaming redactor over a fixed set of secret values.
pub struct Redactor {
    secrets: Arc<Vec<Vec<u8>>>,
    /// Whether a byte starts some secret: most bytes are skipped on this.
    starts: [bool; 256],
    longest: usize,
    held: BytesMut,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for `secrets`; empty values are ignored.
    pub fn new(secrets: Vec<Vec<u8>>) -> Self {
        Self::shared(Arc::new(secrets))
    }

    /// A redactor over a shared set of secrets (no copy per response).
    pub fn shared(secrets: Arc<Vec<Vec<u8>>>) -> Self {
        let secrets = if secrets.iter().any(Vec::is_empty) {
            Arc::new(secrets.iter().filter(|s| !s.is_empty()).cloned().collect())
        } else {
            secrets
        };
        let mut starts = [false; 256];
        for s in secrets.iter() {
            starts[usize::from(s[0])] = true;
        }
        let longest = secrets.iter().map(Vec::len).max().unwrap_or(0);
        Self {
            secrets,
            starts,
            longest,
            held: BytesMut::new(),
        }
    }

    /// Feeds one chunk; returns the bytes that are safe to send now.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        if self.secrets.is_empty() {
            return Bytes::copy_from_slice(chunk);
        }
        self.held.extend_from_slice(chunk);
        let (out, keep_from) = self.scan(false);
        let rest = self.held.split_off(keep_from);
        self.held = rest;
        out
    }

    /// Ends the stream; returns the held-back tail, redacted.
    pub fn finish(&mut self) -> Bytes {
        let (out, _) = self.scan(true);
        self.held.clear();
        out
    }

    /// Redacts `held`, returning the output and the index from which bytes
    /// must be held back (they might begin a secret continued later).
    fn scan(&self, at_end: bool) -> (Bytes, usize) {
        let data = &self.held[..];
        let mut out = BytesMut::with_capacity(data.len());
        let mut i = 0;
        while i < data.len() {
            // Copy the run of bytes that cannot start a secret in one go.
            let run = data[i..]
                .iter()
                .position(|b| self.starts[usize::from(*b)])
                .unwrap_or(data.len() - i);
            out.extend_from_slice(&data[i..i + run]);
            i += run;
            if i == data.len() {
                break;
            }
            if let Some(len) = self.secret_at(&data[i..]) {
                out.extend_from_slice(REDACTED);
                i += len;
                continue;
            }
            if !at_end && data.len() - i < self.longest && self.may_start_secret(&data[i..]) {
                return (out.freeze(), i);
            }
            out.extend_from_slice(&data[i..i + 1]);
            i += 1;
        }
        (out.freeze(), data.len())
    }

    fn secret_at(&self, data: &[u8]) -> Option<usize> {
        self.secrets
            .iter()
            .filter(|s| data.starts_with(s))
            .map(Vec::len)
            .max()
    }

    fn may_start_secret(&self, tail: &[u8]) -> bool {
        self.secrets
            .iter()
            .any(|s| s.len() > tail.len() && s.starts_with(tail))
    }
}

/// Whether any secret occurs in `data`. One pass over the bytes: only a
/// byte that starts some secret is compared further.
pub fn contains_secret(secrets: &[Vec<u8>], data: &[u8]) -> bool {
    let mut starts = [false; 256];
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        starts[usize::from(s[0])] = true;
    }
    data.iter().enumerate().any(|(i, b)| {
        starts[usize::from(*b)]
            && secrets
                .iter()
                .any(|s| !s.is_empty() && data[i..].starts_with(s))
    })
}

/// Redacts a whole body. A body in which no secret occurs is returned as
/// it is (shared, not copied): redaction would not change a byte of it.
pub fn redact_body(secrets: &[Vec<u8>], data: Bytes) -> Bytes {
    if contains_secret(secrets, &data) {
        Bytes::from(redact_all(secrets, &data))
    } else {
        data
    }
}

/// Redacts a whole buffer at once (for log lines and error texts).
pub fn redact_all(secrets: &[Vec<u8>], data: &[u8]) -> Vec<u8> {
    let mut redactor = Redactor::new(secrets.to_vec());
    let mut out = redactor.push(data).to_vec();
    out.extend_from_slice(&redactor.finish());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(secrets: &[&str], chunks: &[&str]) -> String {
        let mut r = Redactor::new(secrets.iter().map(|s| s.as_bytes().to_vec()).collect());
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(&r.push(c.as_bytes()));
        }
        out.extend_from_slice(&r.finish());
        String::from_utf8(out).unwrap()
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
            (&[], &["anything"], "anything"),
            (&[""], &["anything"], "anything"),
            (&["s3"], &["s", "3", "s", "3"], "[REDACTED][REDACTED]"),
        ];
        for (secrets, chunks, want) in cases {
            assert_eq!(run(secrets, chunks), *want, "{secrets:?} {chunks:?}");
        }
    }

    #[test]
    fn whole_bodies_are_redacted_and_clean_ones_pass_unchanged() {
        let secrets = [b"ghs_abc".to_vec(), b"sk-1".to_vec(), Vec::new()];
        let cases: &[(&str, &str)] = &[
            ("token ghs_abc here", "token [REDACTED] here"),
            ("ghs_abghs_abc", "ghs_ab[REDACTED]"),
            ("sk-1sk-1", "[REDACTED][REDACTED]"),
            ("ends with ghs_abc", "ends with [REDACTED]"),
            ("ghs_ab sk- g s", "ghs_ab sk- g s"),
            ("", ""),
        ];
        for (body, want) in cases {
            let out = redact_body(&secrets, Bytes::copy_from_slice(body.as_bytes()));
            assert_eq!(&out[..], want.as_bytes(), "{body}");
            assert_eq!(
                contains_secret(&secrets, body.as_bytes()),
                body != want,
                "{body}"
            );
        }
        assert!(!contains_secret(&[], b"anything"));
    }

    proptest! {
        /// Whole-body redaction agrees with the streaming redactor on any
        /// text over a small alphabet (secrets overlap and repeat often).
        #[test]
        fn redact_body_matches_redact_all(body in "[abs_]{0,60}") {
            let secrets = [b"ab".to_vec(), b"s_ab".to_vec(), b"bbb".to_vec()];
            let out = redact_body(&secrets, Bytes::copy_from_slice(body.as_bytes()));
            prop_assert_eq!(&out[..], &redact_all(&secrets, body.as_bytes())[..]);
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
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (body.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points { chunks.push(&body[last..p]); last = p; }
            chunks.push(&body[last..]);
            let out = run(&[secret], &chunks);
            prop_assert!(!out.contains(secret));
            prop_assert_eq!(out, format!("{prefix}[REDACTED]{suffix}[REDACTED]"));
        }
    }
}
