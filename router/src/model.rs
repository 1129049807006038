//! The router's model: a judge for team rules' text and a writer for reply
//! texts, reached only through the proxy with the router's own
//! identity (rule set `model-api`; the proxy holds and injects the key).
//! Off by default: without `[model]` the rules-only judge decides.
//!
//! ```text
//! config   [model] in router.toml ─► ModelConfig (no key: an unknown field)
//! client   Structured ─► POST chat/completions (JSON schema, strict) ─► JSON;
//!          retries on 429/5xx/no answer honouring Retry-After; a concurrency limit
//! judge    pure: candidates + offered rules ─► prompt (message text as data);
//!          answer ─► judgements, or judge_invalid (a rule not offered, …)
//! window   pure: held candidates + recent arrival rate ─► judge now, or wait (≤ the bound)
//! batch    a turn's candidates ─► one call per chunk ─► per-item retry ─► ModelJudge
//! writer   pure: ack/result/answer facts ─► prompt; draft ─► checked text, else the template
//! ```

pub mod batch;
pub mod client;
pub mod config;
pub mod judge;
pub mod window;
pub mod writer;

pub use batch::{ConfiguredJudge, ModelJudge};
pub use client::{CallError, ModelClient};
pub use config::ModelConfig;
