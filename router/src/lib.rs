//! The router's deterministic core and its store.
//!
//! ```text
//! TriggerInput ─► gate ─► Admission ─┬─ Ignore(reason) ─────────────► recorded, nothing else
//!                                    ├─ thread has a live ticket ───► pass-through to its inbox
//!                                    ├─ thread's ticket ended ──────► revalidate Mandate ─► resume | stays ended
//!                                    ├─ Explicit ───────────────────► open Ticket + Mandate
//!                                    └─ Candidate ─► eval(rules, Judge) ─► auto: open | observe: would-accept | no match
//! Report (worker) ─► ticket state;  ReplyAttempt ─► check_reply ─► reply log ─► (sent by the live router)
//! ```
//!
//! Decisions are plain functions over data: [`gate::gate`], [`eval::evaluate`],
//! [`ticket::revalidate`], [`reply::check_reply`] and [`route::route_trigger`]
//! take what they need, including `now`, and return a verdict. The
//! [`store::Store`] (SQLite, WAL) sits at the edge; [`engine::Router`] runs
//! each input through the pure functions and records the result in one
//! transaction. Replay ([`replay`]) feeds JSON lines through the same engine.

#![forbid(unsafe_code)]

pub mod engine;
pub mod eval;
pub mod gate;
pub mod id;
pub mod json;
pub mod policy;
pub mod replay;
pub mod reply;
pub mod route;
pub mod store;
pub mod ticket;
pub mod trigger;
pub mod words;

#[cfg(test)]
pub(crate) mod fixtures;
