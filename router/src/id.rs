//! Stable, time-ordered identifiers: `trg_…`, `thr_…`, `tkt_…`, `rpl_…`.
//!
//! An id is its kind's prefix, then 12 hex digits of milliseconds since the
//! Unix epoch, then 6 hex digits of a per-millisecond sequence. Fixed width
//! and lowercase, so the lexicographic order of ids of one kind is the order
//! in which they were issued. The clock never goes backwards: an input whose
//! time is earlier than the last id issued gets the last id's time and a
//! higher sequence. The store persists the clock in the same transaction as
//! the records that use it, so ids are never reused, also across restarts.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Declares an id newtype with its prefix.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// Wraps a string that claims to be such an id; `None` when its
            /// prefix or shape is wrong.
            pub fn parse(s: &str) -> Option<Self> {
                well_formed(s, $prefix).then(|| Self(s.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl IdKind for $name {
            const PREFIX: &'static str = $prefix;
            fn from_issued(s: String) -> Self {
                Self(s)
            }
        }
    };
}

id_type!(
    /// One incoming event.
    TriggerId,
    "trg"
);
id_type!(
    /// The related events of one PR/issue or chat topic.
    ThreadId,
    "thr"
);
id_type!(
    /// One unit of work.
    TicketId,
    "tkt"
);
id_type!(
    /// One reply the router allowed.
    ReplyId,
    "rpl"
);

/// An id type the [`IdClock`] can issue.
pub trait IdKind: Sized {
    const PREFIX: &'static str;
    #[doc(hidden)]
    fn from_issued(s: String) -> Self;
}

const TIME_DIGITS: usize = 12;

/// The last millisecond an id can hold (12 hex digits: the year 10889). A
/// later time would make an id one digit too long, which nothing reads back.
pub const MAX_TIME_MS: u64 = (1 << (4 * TIME_DIGITS)) - 1;
const SEQ_DIGITS: usize = 6;
const SEQ_MAX: u32 = 0xff_ffff;

fn well_formed(s: &str, prefix: &str) -> bool {
    let Some(rest) = s.strip_prefix(prefix).and_then(|r| r.strip_prefix('_')) else {
        return false;
    };
    rest.len() == TIME_DIGITS + SEQ_DIGITS
        && rest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The (millisecond, sequence) position of a well-formed id of any kind.
pub fn position(id: &str) -> Option<(u64, u32)> {
    let (prefix, _) = id.split_once('_')?;
    if !well_formed(id, prefix) {
        return None;
    }
    let rest = &id[prefix.len() + 1..];
    let ms = u64::from_str_radix(&rest[..TIME_DIGITS], 16).ok()?;
    let seq = u32::from_str_radix(&rest[TIME_DIGITS..], 16).ok()?;
    Some((ms, seq))
}

/// The last (millisecond, sequence) issued per prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdClock {
    last: BTreeMap<String, (u64, u32)>,
}

impl IdClock {
    /// Restores a clock from persisted `(prefix, ms, seq)` rows.
    pub fn from_rows(rows: impl IntoIterator<Item = (String, u64, u32)>) -> Self {
        Self {
            last: rows
                .into_iter()
                .map(|(p, ms, seq)| (p, (ms, seq)))
                .collect(),
        }
    }

    /// The last issued position of `prefix`, if any.
    pub fn last(&self, prefix: &str) -> Option<(u64, u32)> {
        self.last.get(prefix).copied()
    }

    /// Issues the next id of kind `K` at `now_ms`.
    pub fn issue<K: IdKind>(&mut self, now_ms: u64) -> K {
        let (ms, seq) = match self.last.get(K::PREFIX) {
            None => (now_ms, 0),
            Some(&(last_ms, _)) if now_ms > last_ms => (now_ms, 0),
            Some(&(last_ms, last_seq)) if last_seq < SEQ_MAX => (last_ms, last_seq + 1),
            // A full millisecond borrows the next one rather than wrapping.
            Some(&(last_ms, _)) => (last_ms + 1, 0),
        };
        self.last.insert(K::PREFIX.to_owned(), (ms, seq));
        K::from_issued(format_id(K::PREFIX, ms, seq))
    }

    /// The last id issued of kind `K`, if any.
    pub fn last_issued<K: IdKind>(&self) -> Option<K> {
        self.last(K::PREFIX)
            .map(|(ms, seq)| K::from_issued(format_id(K::PREFIX, ms, seq)))
    }
}

fn format_id(prefix: &str, ms: u64, seq: u32) -> String {
    // 12 hex digits hold milliseconds until the year 10889.
    format!("{prefix}_{ms:012x}{seq:06x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_have_prefix_and_fixed_width() {
        let mut clock = IdClock::default();
        let t: TriggerId = clock.issue(1_700_000_000_000);
        assert_eq!(t.as_str(), "trg_018bcfe56800000000");
        assert!(TriggerId::parse(t.as_str()).is_some());
        assert!(TicketId::parse(t.as_str()).is_none());
        assert!(TriggerId::parse("trg_018bcfe5680000000").is_none());
        assert!(TriggerId::parse("trg_018BCFE56800000000").is_none());
    }

    #[test]
    fn position_reads_back_what_was_issued() {
        let mut clock = IdClock::from_rows([("tkt".to_owned(), 77, 5)]);
        let t: TicketId = clock.issue(3);
        assert_eq!(position(t.as_str()), Some((77, 6)));
        assert_eq!(position("tkt_zz"), None);
    }

    #[test]
    fn clock_does_not_go_backwards() {
        let mut clock = IdClock::default();
        let a: TicketId = clock.issue(5_000);
        let b: TicketId = clock.issue(4_000);
        let c: TicketId = clock.issue(5_000);
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn kinds_have_independent_sequences() {
        let mut clock = IdClock::default();
        let t: TriggerId = clock.issue(7);
        let r: ReplyId = clock.issue(7);
        assert!(t.as_str().ends_with("000000"));
        assert!(r.as_str().ends_with("000000"));
    }

    #[test]
    fn full_millisecond_borrows_the_next() {
        let mut clock = IdClock::from_rows([("trg".to_owned(), 9, SEQ_MAX)]);
        let t: TriggerId = clock.issue(9);
        assert_eq!(t.as_str(), format!("trg_{:012x}{:06x}", 10, 0));
    }

    proptest! {
        /// Whatever the input times, ids of one kind strictly increase and
        /// survive a restore of the clock from its persisted rows.
        #[test]
        fn ids_strictly_increase(times in proptest::collection::vec(0u64..10_000, 1..200), split in 0usize..200) {
            let mut clock = IdClock::default();
            let mut issued: Vec<TriggerId> = Vec::new();
            for (i, t) in times.iter().enumerate() {
                if i == split {
                    let rows = clock.last.iter().map(|(p, &(ms, seq))| (p.clone(), ms, seq));
                    clock = IdClock::from_rows(rows.collect::<Vec<_>>());
                }
                issued.push(clock.issue(*t));
            }
            for pair in issued.windows(2) {
                prop_assert!(pair[0] < pair[1]);
            }
        }

        /// The router issues the strict form of the ids that cross crates;
        /// every one it issues is one the shared vocabulary (what the job
        /// API, the proxy and the worker's inbox accept) accepts, so the
        /// conversion at the boundary never fails.
        #[test]
        fn every_issued_id_is_one_the_other_parts_accept(
            ms in 0u64..(1 << 48),
            seq in 0u32..=SEQ_MAX,
        ) {
            let mut clock = IdClock::from_rows([
                ("tkt".to_owned(), ms, seq),
                ("trg".to_owned(), ms, seq),
            ]);
            let ticket: TicketId = clock.issue(ms);
            let trigger: TriggerId = clock.issue(ms);
            let shared_ticket = gatehouse_types::TicketId::parse(ticket.as_str());
            prop_assert!(shared_ticket.is_ok(), "{}", ticket);
            prop_assert!(gatehouse_types::TriggerId::parse(trigger.as_str()).is_ok(), "{}", trigger);
            // A ticket id is also its worker's proxy identity name.
            let identity = shared_ticket.map(|t| t.identity().to_string()).ok();
            prop_assert_eq!(identity.as_deref(), Some(ticket.as_str()));
        }
    }
}
