//! The secrets the proxy holds, for redaction: every form in which it sends
//! each one, and when a fetched token stops mattering.
//!
//! A token goes out as itself (`Bearer <token>`) or, for git, as
//! `Basic base64("x-access-token:" + token)`; an answer echoing either must
//! not reach a sandbox, so both forms are held. Tokens the proxy fetched
//! (installation tokens, tenant tokens) expire; once one has expired (plus a
//! margin) it opens nothing, so it is retired from the set, which otherwise
//! would only grow for as long as the proxy runs. The decisions are pure
//! functions over `now`; [`HeldSecrets`] applies them under a lock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;

use crate::redact::Secrets;

/// How long after its expiry a fetched token is still redacted: clocks,
/// answers in flight and the platform's own grace.
pub(super) const RETIRE_MARGIN: Duration = Duration::from_secs(600);

/// The user name git's Basic credential carries for a token.
const GIT_USER: &str = "x-access-token:";

/// Every form of `raw` the proxy sends: the value itself (also inside
/// `Bearer …`), and git's Basic credential, whole and as the token's own
/// base64. `x-access-token:` is 15 bytes, a whole number of base64 groups,
/// so the token's base64 is a substring of the credential's wherever the
/// upstream puts it; unpadded, so a padded copy is found too.
pub(super) fn forms(raw: &[u8]) -> Vec<Vec<u8>> {
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    let mut basic = GIT_USER.as_bytes().to_vec();
    basic.extend_from_slice(raw);
    vec![
        raw.to_vec(),
        b64.encode(&basic).into_bytes(),
        b64.encode(raw).into_bytes(),
    ]
}

/// One secret, and when it may be dropped (`None`: never, e.g. a static
/// token or an app secret).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    raw: Vec<u8>,
    retire_at: Option<Instant>,
}

/// Adds `raw`, or extends its life if it is held already (Feishu hands out
/// the same tenant token again while it is valid): the later retirement
/// wins, and never-retired wins over any.
fn add(held: &mut Vec<Held>, raw: &[u8], retire_at: Option<Instant>) {
    match held.iter_mut().find(|h| h.raw == raw) {
        Some(h) => {
            h.retire_at = match (h.retire_at, retire_at) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            }
        }
        None => held.push(Held {
            raw: raw.to_vec(),
            retire_at,
        }),
    }
}

/// Drops what is past its retirement at `now`; whether anything was.
fn retire(held: &mut Vec<Held>, now: Instant) -> bool {
    let before = held.len();
    held.retain(|h| h.retire_at.is_none_or(|at| now < at));
    held.len() != before
}

fn compile(held: &[Held]) -> Arc<Secrets> {
    Arc::new(Secrets::new(held.iter().flat_map(|h| forms(&h.raw))))
}

/// The held secrets and their compiled matcher, rebuilt only when a secret
/// joins or retires (each response shares the current one).
#[derive(Default)]
pub(super) struct HeldSecrets {
    inner: Mutex<(Vec<Held>, Arc<Secrets>)>,
}

impl HeldSecrets {
    /// A set of secrets that never retire.
    pub(super) fn permanent(values: Vec<Vec<u8>>) -> Self {
        let mut held = Vec::new();
        for v in values {
            add(&mut held, &v, None);
        }
        let compiled = compile(&held);
        Self {
            inner: Mutex::new((held, compiled)),
        }
    }

    /// The secrets to redact now.
    pub(super) fn current(&self, now: Instant) -> Arc<Secrets> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (held, compiled) = &mut *inner;
        if retire(held, now) {
            *compiled = compile(held);
        }
        compiled.clone()
    }

    /// Holds a fetched token until `expires_at` plus the margin (`None`:
    /// the platform did not say; it is held for good).
    pub(super) fn remember(&self, raw: &[u8], expires_at: Option<Instant>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (held, compiled) = &mut *inner;
        add(held, raw, expires_at.map(|at| at + RETIRE_MARGIN));
        *compiled = compile(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sent_form_is_held() {
        let token = b"ghs_16C7e42F292c6912E7710c838347Ae178B4a";
        let set = Secrets::new(forms(token));
        let b64 = base64::engine::general_purpose::STANDARD;
        let basic = b64.encode([GIT_USER.as_bytes(), token].concat());
        for sent in [
            String::from_utf8(token.to_vec()).unwrap(),
            format!("Bearer {}", String::from_utf8_lossy(token)),
            format!("Basic {basic}"),
            basic.clone(),
            b64.encode(token),
        ] {
            assert!(set.occur_in(sent.as_bytes()), "{sent}");
        }
        // The credential's base64 is redacted whole (its padding is no secret).
        assert!(basic.ends_with("=="));
        let out = crate::redact::redact_all(&set, format!("auth: Basic {basic}").as_bytes());
        assert_eq!(out, b"auth: Basic [REDACTED]==");
    }

    #[test]
    fn fetched_tokens_retire_after_expiry_and_margin_and_others_never() {
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut held = Vec::new();
        add(&mut held, b"static", None);
        add(&mut held, b"old", Some(t0 + hour));
        add(&mut held, b"new", Some(t0 + 2 * hour));
        assert!(!retire(&mut held, t0 + hour - Duration::from_secs(1)));
        assert!(retire(&mut held, t0 + hour));
        let raws: Vec<&[u8]> = held.iter().map(|h| h.raw.as_slice()).collect();
        assert_eq!(raws, [b"static".as_slice(), b"new"]);
        assert!(retire(&mut held, t0 + 3 * hour));
        assert_eq!(held.len(), 1);
        assert!(!retire(&mut held, t0 + 1000 * hour), "static secrets stay");
    }

    #[test]
    fn a_token_handed_out_again_lives_to_its_latest_expiry() {
        let t0 = Instant::now();
        let mut held = Vec::new();
        add(&mut held, b"t", Some(t0 + Duration::from_secs(10)));
        add(&mut held, b"t", Some(t0 + Duration::from_secs(20)));
        add(&mut held, b"t", Some(t0 + Duration::from_secs(5)));
        assert_eq!(held.len(), 1);
        assert!(!retire(&mut held, t0 + Duration::from_secs(15)));
        assert!(retire(&mut held, t0 + Duration::from_secs(20)));
        add(&mut held, b"u", Some(t0));
        add(&mut held, b"u", None);
        assert!(!retire(&mut held, t0 + Duration::from_secs(1000)));
    }

    #[test]
    fn the_compiled_set_follows_retirement() {
        let t0 = Instant::now();
        let set = HeldSecrets::permanent(vec![b"app-secret".to_vec()]);
        set.remember(b"tenant-1", Some(t0));
        assert!(set.current(t0).occur_in(b"x tenant-1 x"));
        let later = t0 + RETIRE_MARGIN + Duration::from_secs(1);
        assert!(!set.current(later).occur_in(b"x tenant-1 x"));
        assert!(set.current(later).occur_in(b"x app-secret x"));
    }
}
