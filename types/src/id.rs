//! Ids that cross crates: tickets (router → job API → proxy identity),
//! triggers (router → worker inbox → worker report → router), jobs.
//!
//! The router issues `tkt_`/`trg_` + 18 lowercase hex digits; the rules
//! here are the wider shapes every receiving end accepts, so every id the
//! router issues passes them.

use crate::name::is_word;
use crate::IdentityName;

fn prefixed(s: &str, prefix: &str, max: usize) -> bool {
    s.strip_prefix(prefix)
        .is_some_and(|rest| is_word(rest, max))
}

/// A ticket id is also the name of its proxy identity, so it must be an
/// [`IdentityName`]: the prefix plus at most 60 bytes is at most 64.
fn is_ticket_id(s: &str) -> bool {
    prefixed(s, "tkt_", 60)
}

fn is_trigger_id(s: &str) -> bool {
    prefixed(s, "trg_", 64)
}

fn is_job_id(s: &str) -> bool {
    prefixed(s, "job_", 64)
}

string_newtype!(
    /// One unit of work (`tkt_…`). It names the job's work directory and its
    /// proxy identity ([`TicketId::identity`]).
    TicketId,
    "ticket id",
    "`tkt_` then 1-60 of [A-Za-z0-9_-]",
    is_ticket_id
);

string_newtype!(
    /// One incoming event (`trg_…`): what an inbox message carries and what
    /// a worker report `answers`.
    TriggerId,
    "trigger id",
    "`trg_` then 1-64 of [A-Za-z0-9_-]",
    is_trigger_id
);

string_newtype!(
    /// One supervisor job (`job_…`).
    JobId,
    "job id",
    "`job_` then 1-64 of [A-Za-z0-9_-]",
    is_job_id
);

impl TicketId {
    /// The proxy identity of the ticket's worker: the same text, which the
    /// ticket-id rule guarantees is a valid identity name.
    pub fn identity(&self) -> IdentityName {
        IdentityName(self.0.clone())
    }
}

#[cfg(test)]
mod tests;
