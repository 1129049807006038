//! gatehouse supervisor.
//!
//! - `jobs`: the supervisor service — a job API on a unix socket that runs one
//!   worker per ticket in a sandbox (spawned as `gatehouse sandbox run`), with
//!   a proxy identity and a control socket per job, durable state in SQLite.

pub mod jobs;
