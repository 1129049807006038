//! gatehouse proxy: the only way out of a sandbox.
//!
//! The pure half, used by the server for every request:
//! `RequestHead` → [`rules::RuleBook::check`] (canonical path via [`path`],
//! rule sets and identity variables) → [`rules::Decision`]; for allowed
//! requests with a body check, [`graphql::check`] or
//! [`receive_pack::parse_commands`] + [`receive_pack::check`] before the
//! body is forwarded. [`config`] turns the TOML config into runtime types and
//! [`audit`] appends hash-chained JSONL records.
#![forbid(unsafe_code)]

pub mod audit;
pub mod config;
pub mod graphql;
pub mod path;
pub mod receive_pack;
pub mod rules;
