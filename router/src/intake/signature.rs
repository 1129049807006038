//! `X-Hub-Signature-256`: `sha256=` and the hex HMAC-SHA256 of the exact raw
//! body under the webhook secret. Checked before anything parses the body.
//!
//! Several secrets are held at once so a secret can be rotated without
//! losing deliveries: add the new one, change it on GitHub, remove the old.
//! The comparison is ring's `hmac::verify` (constant time). The secrets are
//! kept only as HMAC keys; nothing here prints them.

use std::path::{Path, PathBuf};

use ring::hmac;

/// Why a delivery's signature is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `X-Hub-Signature-256` header.
    #[error("the X-Hub-Signature-256 header is missing")]
    Missing,
    /// The header is not `sha256=` and 64 hex digits.
    #[error("the X-Hub-Signature-256 header is not `sha256=` and 64 hex digits")]
    Malformed,
    /// No configured secret signs this body this way.
    #[error("the X-Hub-Signature-256 header matches none of the webhook secrets")]
    Mismatch,
}

/// Failure to load the webhook secrets.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// A secret file could not be read.
    #[error("cannot read the webhook secret file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A secret file holds nothing (after its final line break).
    #[error(
        "the webhook secret file {path} is empty; write the secret configured on GitHub into it"
    )]
    Empty { path: PathBuf },
    /// No secret was given; every delivery would be refused.
    #[error("no webhook secret given; pass at least one secret file")]
    NoSecret,
}

/// The webhook secrets, as HMAC keys.
pub struct WebhookSecrets {
    keys: Vec<hmac::Key>,
}

impl std::fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSecrets")
            .field("count", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl WebhookSecrets {
    /// Keys for `secrets` (at least one, none empty).
    pub fn from_secrets<S: AsRef<[u8]>>(secrets: &[S]) -> Result<Self, SecretError> {
        if secrets.is_empty() {
            return Err(SecretError::NoSecret);
        }
        Ok(Self {
            keys: secrets
                .iter()
                .map(|s| hmac::Key::new(hmac::HMAC_SHA256, s.as_ref()))
                .collect(),
        })
    }

    /// Reads one secret per file; a final line break is not part of it.
    pub fn from_files(paths: &[PathBuf]) -> Result<Self, SecretError> {
        if paths.is_empty() {
            return Err(SecretError::NoSecret);
        }
        let mut keys = Vec::with_capacity(paths.len());
        for path in paths {
            keys.push(read_key(path)?);
        }
        Ok(Self { keys })
    }

    /// Checks `header` (the `X-Hub-Signature-256` value) against `body`.
    pub fn verify(&self, header: Option<&[u8]>, body: &[u8]) -> Result<(), SignatureError> {
        let header = header.ok_or(SignatureError::Missing)?;
        let hex_digits = header
            .strip_prefix(b"sha256=")
            .filter(|h| h.len() == 64)
            .ok_or(SignatureError::Malformed)?;
        let mut tag = [0u8; 32];
        hex::decode_to_slice(hex_digits, &mut tag).map_err(|_| SignatureError::Malformed)?;
        // Every key is tried, so the time taken does not tell which matched.
        let matched = self
            .keys
            .iter()
            .fold(false, |ok, key| hmac::verify(key, body, &tag).is_ok() | ok);
        if matched {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

fn read_key(path: &Path) -> Result<hmac::Key, SecretError> {
    let mut bytes = std::fs::read(path).map_err(|source| SecretError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut len = bytes.len();
    if bytes[..len].ends_with(b"\n") {
        len -= 1;
        if bytes[..len].ends_with(b"\r") {
            len -= 1;
        }
    }
    let result = if len == 0 {
        Err(SecretError::Empty {
            path: path.to_owned(),
        })
    } else {
        Ok(hmac::Key::new(hmac::HMAC_SHA256, &bytes[..len]))
    };
    // The key holds what it needs; the file's bytes are not kept around.
    bytes.iter_mut().for_each(|b| *b = 0);
    result
}

/// `sha256=` + hex HMAC-SHA256 of `body` under `secret`: what GitHub sends.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), body);
    format!("sha256={}", hex::encode(tag.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // GitHub's documented example: secret "It's a Secret to Everybody",
    // payload "Hello, World!".
    const DOC_SECRET: &str = "It's a Secret to Everybody";
    const DOC_SIGNATURE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn githubs_documented_example_verifies() {
        assert_eq!(sign(DOC_SECRET.as_bytes(), b"Hello, World!"), DOC_SIGNATURE);
        let secrets = WebhookSecrets::from_secrets(&[DOC_SECRET]).unwrap();
        assert_eq!(
            secrets.verify(Some(DOC_SIGNATURE.as_bytes()), b"Hello, World!"),
            Ok(())
        );
    }

    #[test]
    fn verification_table() {
        let secrets = WebhookSecrets::from_secrets(&["old", "new"]).unwrap();
        let body = br#"{"action":"created"}"#;
        let by_old = sign(b"old", body);
        let by_new = sign(b"new", body);
        let by_other = sign(b"other", body);
        let upper = by_new.to_uppercase().replace("SHA256=", "sha256=");
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a [u8],
            Result<(), SignatureError>,
        );
        let cases: &[Case<'_>] = &[
            ("old secret (rotation)", Some(&by_old), body, Ok(())),
            ("new secret", Some(&by_new), body, Ok(())),
            ("upper-case hex", Some(&upper), body, Ok(())),
            (
                "other secret",
                Some(&by_other),
                body,
                Err(SignatureError::Mismatch),
            ),
            (
                "body changed by one byte",
                Some(&by_new),
                br#"{"action":"createD"}"#,
                Err(SignatureError::Mismatch),
            ),
            (
                "body with a trailing newline",
                Some(&by_new),
                b"{\"action\":\"created\"}\n",
                Err(SignatureError::Mismatch),
            ),
            ("missing", None, body, Err(SignatureError::Missing)),
            (
                "no prefix",
                Some(&by_new[7..]),
                body,
                Err(SignatureError::Malformed),
            ),
            (
                "sha1 prefix",
                Some(&by_new.replace("sha256=", "sha1=")),
                body,
                Err(SignatureError::Malformed),
            ),
            (
                "truncated",
                Some(&by_new[..70]),
                body,
                Err(SignatureError::Malformed),
            ),
            (
                "not hex",
                Some(&format!("sha256={}", "zz".repeat(32))),
                body,
                Err(SignatureError::Malformed),
            ),
            ("empty", Some(""), body, Err(SignatureError::Malformed)),
        ];
        for (name, header, body, expected) in cases {
            assert_eq!(
                secrets.verify(header.map(str::as_bytes), body),
                *expected,
                "{name}"
            );
        }
    }

    #[test]
    fn secrets_come_from_files_without_the_final_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let crlf = dir.path().join("crlf");
        let plain = dir.path().join("plain");
        let empty = dir.path().join("empty");
        std::fs::write(&crlf, "s1\r\n").unwrap();
        std::fs::write(&plain, "s2").unwrap();
        std::fs::write(&empty, "\n").unwrap();
        let secrets = WebhookSecrets::from_files(&[crlf, plain]).unwrap();
        assert_eq!(
            secrets.verify(Some(sign(b"s1", b"x").as_bytes()), b"x"),
            Ok(())
        );
        assert_eq!(
            secrets.verify(Some(sign(b"s2", b"x").as_bytes()), b"x"),
            Ok(())
        );
        assert_eq!(
            secrets.verify(Some(sign(b"s1\r\n", b"x").as_bytes()), b"x"),
            Err(SignatureError::Mismatch)
        );
        assert!(matches!(
            WebhookSecrets::from_files(&[empty]),
            Err(SecretError::Empty { .. })
        ));
        assert!(matches!(
            WebhookSecrets::from_files(&[dir.path().join("missing")]),
            Err(SecretError::Read { .. })
        ));
        assert!(matches!(
            WebhookSecrets::from_files(&[]),
            Err(SecretError::NoSecret)
        ));
    }

    #[test]
    fn debug_shows_no_secret() {
        let secrets = WebhookSecrets::from_secrets(&["hunter2-secret"]).unwrap();
        let shown = format!("{secrets:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("count: 1"), "{shown}");
    }
}
