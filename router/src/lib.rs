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
//! take what they need, including `now`, and return what they decided (an
//! [`gate::Admission`], an [`eval::Evaluation`] of rule verdicts, a
//! [`route::TriggerRoute`], a refusal). The [`store::Store`] (SQLite, WAL)
//! sits at the edge; [`engine::Router`] runs each input through the pure
//! functions and records the result in one transaction. Replay ([`replay`])
//! feeds JSON lines through the same engine.
//!
//! ```text
//! vocabulary   id          time-ordered ids (trg_, thr_, tkt_, rpl_) and their clock
//!              trigger     one normalised incoming event
//!              policy      the policy: file (as written) ─► validate (one validator
//!                          per section) ─► Policy (runtime, versioned by its hash)
//!              words       word counting for replies and notes (English and Chinese)
//!              json        JSON for what is hashed or stored; failure is an error
//! decisions    gate        Trigger + Policy ─► Admission
//!              eval        Candidate + rules + Judge ─► Evaluation (a Verdict per rule)
//!              ticket      Ticket, Mandate, Report; apply_report, end_ticket, revalidate
//!              route       gate ─► latest ticket ─► open or evaluate ─► TriggerRoute
//!              reply       Reply purposes checked against state ─► Ok | Refusal
//! effects      engine      Router: one transaction per decision; Decision (Checked results)
//!              store       Store: schema, writes (Tx), reads (Reader), cache, codec,
//!                          records, WAL checkpoint
//!              replay      JSON lines ─► engine ─► one JSON decision per line
//! sources      intake      GitHub webhooks: verified, stored, then answered; each
//!                          stored delivery ─► engine once (signature, mention,
//!                          github mapping, listener, process)
//! live         the live router: router.toml; decisions ─► jobs, inbox, replies
//! model        the router model through the proxy: client, judge, batching per turn
//! ```

#![forbid(unsafe_code)]

pub mod engine;
pub mod eval;
pub mod gate;
pub mod id;
pub mod intake;
pub mod json;
pub mod live;
pub mod metrics;
pub mod model;
pub mod policy;
pub mod replay;
pub mod reply;
pub mod route;
pub mod stats;
pub mod store;
pub mod ticket;
pub mod trigger;
pub mod words;

#[cfg(test)]
pub(crate) mod fixtures;
