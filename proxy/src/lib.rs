//! gatehouse proxy: the only way out of a worker sandbox.
//!
//! ```text
//! sandbox ─► identity socket ─► CONNECT host:443 ─► TLS (leaf minted by `ca`)
//!   ─► request head ─► rule book (pure) ─► deny: 403 JSON + audit record
//!                                     └─► allow: body check ─► strip client auth
//!        ─► inject credential (`credentials`) ─► audit record ─► `upstream` (verified TLS)
//!        ◄─ response: auth headers stripped, secrets redacted (`redact`) ─► audit completion
//! ```
//!
//! The pure half, used by the server for every request:
//! `RequestHead` → [`rules::RuleBook::check`] (canonical path via [`path`],
//! rule sets and identity variables) → [`rules::Decision`]; for allowed
//! requests with a body check, [`graphql::check`] or
//! [`receive_pack::parse_commands`] + [`receive_pack::check`] before the
//! body is forwarded. [`config`] turns the TOML config into runtime types and
//! [`audit`] appends hash-chained JSONL records.
//!
//! The I/O half: the identity of a request is the unix socket it arrived on
//! (`server`), created from the config or through the `admin` socket;
//! `upstream`, `credentials`, `ca` and `redact` serve it.
#![forbid(unsafe_code)]

pub mod admin;
pub mod audit;
pub mod body;
pub mod ca;
pub mod config;
pub mod credentials;
pub mod graphql;
pub mod path;
pub mod receive_pack;
pub mod redact;
pub mod rules;
pub mod server;
pub mod service;
pub mod upstream;
