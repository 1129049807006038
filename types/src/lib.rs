//! The vocabulary the router, the supervisor and the proxy share.
//!
//! Every id and name that crosses a crate boundary is a newtype here with
//! exactly one rule, checked in one `FromStr` that `Deserialize` goes
//! through. A value accepted at the door (the job API, a config file, a
//! profile) is therefore accepted by every later step that receives it:
//!
//! ```text
//! router ──JobRequest{ticket: TicketId, profile: ProfileName, rule_sets: [RuleSetName],
//!          │          tunnel_hosts: [TunnelTarget], repo: RepoSlug}──► supervisor
//! supervisor ──NewIdentity{name: IdentityName (= the TicketId), …}──► proxy admin
//! worker ──Report{answers: TriggerId}──► supervisor ──► router
//! ```
//!
//! - [`name`]: identity, team, rule-set and profile names, repository slugs;
//! - [`id`]: ticket, trigger and job ids;
//! - [`host`]: DNS host names and tunnel targets (`host:port`);
//! - [`variables`]: the variables an identity binds into rule paths;
//! - [`wire`]: the bodies two processes exchange (proxy admin, worker
//!   reports, inbox messages);
//! - [`sandbox`]: paths inside a sandbox; [`env`]: `GATEHOUSE_*` variables;
//! - [`peer`]: who may use a local socket, by its peer's credentials;
//! - [`metrics`]: metric families and their Prometheus text, bounded labels;
//!
//! The crate depends on serde only; its error is [`ParseError`].

#[macro_use]
mod newtype;

pub mod env;
mod error;
pub mod host;
pub mod id;
pub mod metrics;
pub mod name;
pub mod peer;
pub mod sandbox;
pub mod variables;
pub mod wire;

pub use error::ParseError;
pub use host::{DnsName, TunnelTarget};
pub use id::{JobId, TicketId, TriggerId};
pub use name::{IdentityName, ProfileName, RepoSlug, RuleSetName, TeamName};
