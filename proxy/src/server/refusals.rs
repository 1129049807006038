//! How refusals reach the audit log without letting a flood of them fill
//! the disk (pure over the clock it is given): each identity has a bucket
//! of [`BURST`] refusal records, refilled at [`PER_SECOND`]. A refusal
//! beyond it is still refused, but counted rather than written, and the
//! count goes on record in one `suppressed` line per [`WINDOW`]: with the
//! identity's first refusal once the window has passed, or when the
//! identity is revoked or the proxy stops. Allowed requests are
//! never counted away: a forwarded request always has its own line.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::audit::SuppressedRecord;

/// Refusal records an identity may write at once.
pub const BURST: f64 = 50.0;

/// Refusal records an identity may write per second, on average.
pub const PER_SECOND: f64 = 5.0;

/// Longest a count waits before its `suppressed` line is written.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Refusals counted and not yet on record.
#[derive(Debug)]
struct Counted {
    refusals: u64,
    since: Instant,
    first: String,
    last: String,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
    counted: Option<Counted>,
}

/// What to write for one refusal.
#[derive(Debug, PartialEq, Eq)]
pub struct Admission {
    /// A `suppressed` line to write first, if a count is due.
    pub summary: Option<SuppressedRecord>,
    /// Whether the refusal's own line is written (else it was counted).
    pub write: bool,
}

/// The refusal buckets of every identity.
#[derive(Debug, Default)]
pub struct RefusalLimiter {
    identities: HashMap<String, Bucket>,
}

impl Counted {
    fn summary(self, identity: &str, time: &str) -> SuppressedRecord {
        SuppressedRecord {
            time: time.to_string(),
            identity: identity.to_string(),
            refusals: self.refusals,
            first: self.first,
            last: self.last,
        }
    }
}

impl RefusalLimiter {
    /// One refusal by `identity` at `now` (`time` is `now` as records write it).
    pub fn admit(&mut self, identity: &str, now: Instant, time: &str) -> Admission {
        let bucket = self
            .identities
            .entry(identity.to_string())
            .or_insert_with(|| Bucket {
                tokens: BURST,
                refilled: now,
                counted: None,
            });
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * PER_SECOND).min(BURST);
        bucket.refilled = now;
        let write = bucket.tokens >= 1.0;
        if write {
            bucket.tokens -= 1.0;
        } else {
            let counted = bucket.counted.get_or_insert_with(|| Counted {
                refusals: 0,
                since: now,
                first: time.to_string(),
                last: String::new(),
            });
            counted.refusals += 1;
            counted.last = time.to_string();
        }
        let due = bucket
            .counted
            .as_ref()
            .is_some_and(|c| now.saturating_duration_since(c.since) >= WINDOW);
        let summary = if due {
            bucket.counted.take().map(|c| c.summary(identity, time))
        } else {
            None
        };
        Admission { summary, write }
    }

    /// Forgets `identity` (revoked), returning its count still to write.
    pub fn remove(&mut self, identity: &str, time: &str) -> Option<SuppressedRecord> {
        let bucket = self.identities.remove(identity)?;
        bucket.counted.map(|c| c.summary(identity, time))
    }

    /// Every count still to write (shutdown), by identity.
    pub fn drain(&mut self, time: &str) -> Vec<SuppressedRecord> {
        let mut out: Vec<SuppressedRecord> = self
            .identities
            .iter_mut()
            .filter_map(|(name, b)| b.counted.take().map(|c| c.summary(name, time)))
            .collect();
        out.sort_by(|a, b| a.identity.cmp(&b.identity));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_written_then_counted_then_summed_up() {
        let mut limiter = RefusalLimiter::default();
        let t0 = Instant::now();
        for _ in 0..BURST as usize {
            let a = limiter.admit("a", t0, "t0");
            assert_eq!((a.write, a.summary), (true, None));
        }
        for i in 0..50 {
            let a = limiter.admit("a", t0, &format!("t{i}"));
            assert_eq!((a.write, a.summary), (false, None));
        }
        // Another identity has its own bucket.
        assert!(limiter.admit("b", t0, "t0").write);
        // A token later, the next refusal is written; the count waits for
        // its window.
        let a = limiter.admit("a", t0 + Duration::from_secs_f64(1.1 / PER_SECOND), "t1");
        assert_eq!((a.write, a.summary), (true, None));
        let later = t0 + WINDOW;
        let a = limiter.admit("a", later, "t2");
        assert!(a.write);
        let summary = a.summary.unwrap();
        assert_eq!(summary.refusals, 50);
        assert_eq!(
            (summary.first.as_str(), summary.last.as_str()),
            ("t0", "t49")
        );
        assert_eq!(summary.identity, "a");
        assert_eq!(limiter.admit("a", later, "t3").summary, None);
    }

    #[test]
    fn a_steady_flood_is_summed_up_every_window() {
        let mut limiter = RefusalLimiter::default();
        let t0 = Instant::now();
        let (mut written, mut summaries, mut counted) = (0u64, 0u64, 0u64);
        // 1000 refusals a second for a minute.
        for ms in 0..60_000u64 {
            let a = limiter.admit("a", t0 + Duration::from_millis(ms), "t");
            written += u64::from(a.write);
            if let Some(s) = a.summary {
                summaries += 1;
                counted += s.refusals;
            }
        }
        let last = limiter.drain("t");
        counted += last.iter().map(|s| s.refusals).sum::<u64>();
        assert_eq!(written + counted, 60_000, "every refusal is on record");
        assert!(
            written <= BURST as u64 + 60 * PER_SECOND as u64 + 1,
            "{written}"
        );
        assert!(summaries <= 7, "one per window: {summaries}");
    }

    #[test]
    fn removing_an_identity_hands_back_its_count() {
        let mut limiter = RefusalLimiter::default();
        let t0 = Instant::now();
        for _ in 0..(BURST as usize + 3) {
            limiter.admit("a", t0, "t");
        }
        assert_eq!(limiter.remove("a", "t").unwrap().refusals, 3);
        assert!(limiter.remove("a", "t").is_none());
        assert!(limiter.drain("t").is_empty());
    }
}
