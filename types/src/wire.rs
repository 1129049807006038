//! The bodies that cross a socket between two gatehouse processes, defined
//! once so the two ends cannot drift. Each field that names something is a
//! validated type, so a body that deserializes is one every later step
//! accepts.
//!
//! ```text
//! supervisor ──NewIdentity──► proxy admin (POST /identities) ──CreatedIdentity──► supervisor
//! supervisor ──► proxy admin (GET /rule-sets) ──[KnownRuleSet]──► supervisor (start-up check)
//! worker ──Report──► control socket (POST /report) ──► supervisor ──► router (Ticket.latest_report)
//! job API (POST /jobs/{id}/inbox) ──InboxMessage──► supervisor
//!     ──InboxPage{messages: [InboxDelivery]}──► worker (GET /inbox) ──InboxAck──► supervisor
//! ```
//!
//! Requests refuse unknown fields (a misspelt field is an error, not a
//! silent default); answers accept them, so a newer server can add one.

pub mod admin;
pub mod inbox;
pub mod report;

pub use admin::{CreatedIdentity, KnownRuleSet, NewIdentity};
pub use inbox::{InboxAck, InboxDelivery, InboxMessage, InboxPage};
pub use report::{Report, ReportState};

#[cfg(test)]
mod tests;
