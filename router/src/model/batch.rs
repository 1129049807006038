//! Batching per turn: every candidate pending in one turn is judged in one
//! call (chunks of `batch_max`, called concurrently up to the client's
//! limit); the decisions that follow stay one transaction each.
//!
//! ```text
//! turn: pending triggers ─► asks (pure: candidates on threads without a ticket, rules to judge)
//!       ─► judge_turn: one call per chunk ─► read_answer per candidate
//!            chunk failed, or a candidate's answer invalid ─► that candidate alone, once
//!            still failing ─► judge_unavailable / judge_invalid
//!       ─► ModelJudge answers each decision from the turn's results
//! ```
//!
//! A turn takes what is pending when it starts; events arriving during a
//! call are the next turn's batch. How long a candidate may be held back
//! for company before its turn is the window's decision ([`super::window`]).

use std::future::Future;

use super::client::{CallError, ModelClient, Structured};
use super::judge::{judge_request, read_answer, Candidate, CandidateResult};
use super::window::WindowConfig;
use crate::eval::{Ask, Judge, JudgeError, Judgement};
use crate::policy::Rule;
use crate::trigger::TriggerInput;

/// The chunks a turn's asks are judged in (pure): consecutive, at most
/// `batch_max` each.
pub fn chunks(n: usize, batch_max: usize) -> Vec<std::ops::Range<usize>> {
    let size = batch_max.max(1);
    (0..n)
        .step_by(size)
        .map(|start| start..(start + size).min(n))
        .collect()
}

fn from_call(e: CallError) -> JudgeError {
    match e {
        CallError::Unavailable(why) => JudgeError::unavailable(why),
        CallError::Invalid(why) => JudgeError::invalid(why),
    }
}

/// Judges a turn's asks: one call per chunk, then each candidate whose
/// result failed alone, once. Results are in the asks' order.
pub async fn judge_turn<F, Fut>(asks: &[Ask], batch_max: usize, call: F) -> Vec<CandidateResult>
where
    F: Fn(Structured) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<serde_json::Value, CallError>> + Send + 'static,
{
    let mut results: Vec<CandidateResult> =
        vec![Err(JudgeError::unavailable("not judged")); asks.len()];
    let ranges = chunks(asks.len(), batch_max);
    let mut set = tokio::task::JoinSet::new();
    for (n, range) in ranges.iter().enumerate() {
        let request = judge_request(&candidates(&asks[range.clone()]));
        let call = call.clone();
        set.spawn(async move { (n, call(request).await) });
    }
    let mut answered = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(pair) => answered.push(pair),
            Err(e) => tracing::error!(error = %e, "a judge call's task failed"),
        }
    }
    for (n, answer) in answered {
        let range = ranges[n].clone();
        let batch = candidates(&asks[range.clone()]);
        let per = match answer {
            Ok(v) => read_answer(&v, &batch),
            Err(e) => vec![Err(from_call(e)); batch.len()],
        };
        for (i, r) in range.zip(per) {
            results[i] = r;
        }
    }
    // A failed chunk of several is retried per item; a lone one has had its try.
    let alone: Vec<usize> = ranges
        .iter()
        .filter(|r| r.len() > 1)
        .flat_map(|r| r.clone())
        .filter(|i| results[*i].is_err())
        .collect();
    for i in alone {
        let request = judge_request(&candidates(std::slice::from_ref(&asks[i])));
        let call = call.clone();
        set.spawn(async move { (i, call(request).await) });
    }
    while let Some(joined) = set.join_next().await {
        let Ok((i, answer)) = joined else { continue };
        results[i] = match answer {
            Ok(v) => read_answer(&v, &candidates(std::slice::from_ref(&asks[i])))
                .pop()
                .unwrap_or_else(|| Err(JudgeError::invalid("no result"))),
            Err(e) => Err(from_call(e)),
        };
    }
    results
}

fn candidates(asks: &[Ask]) -> Vec<Candidate<'_>> {
    asks.iter()
        .map(|a| Candidate {
            trigger: &a.trigger,
            rules: &a.rules,
            context: &a.context,
        })
        .collect()
}

/// The router model as a [`Judge`]: [`ModelJudge::prepare`] judges a turn
/// in a batch; each decision then reads its answers. A question the turn
/// did not prepare is answered `judge_unavailable` (never a guess).
pub struct ModelJudge {
    client: ModelClient,
    /// The processor is a plain thread; calls run on this runtime.
    runtime: tokio::runtime::Runtime,
    turn: Vec<(TriggerInput, CandidateResult)>,
}

impl std::fmt::Debug for ModelJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelJudge")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl ModelJudge {
    pub fn new(client: ModelClient) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self {
            client,
            runtime,
            turn: Vec::new(),
        })
    }

    /// Judges a turn's asks (blocking), replacing the previous turn's answers.
    pub fn prepare_turn(&mut self, asks: Vec<Ask>) {
        self.turn.clear();
        if asks.is_empty() {
            return;
        }
        let client = self.client.clone();
        let batch_max = client.config().batch_max;
        let call = move |s: Structured| {
            let client = client.clone();
            async move { client.call(&s).await }
        };
        let results = self.runtime.block_on(judge_turn(&asks, batch_max, call));
        self.turn = asks.into_iter().map(|a| a.trigger).zip(results).collect();
    }
}

impl Judge for ModelJudge {
    fn judge(&self, rule: &Rule, trigger: &TriggerInput) -> Result<Judgement, JudgeError> {
        let Some((_, result)) = self.turn.iter().find(|(t, _)| t == trigger) else {
            return Err(JudgeError::unavailable("not judged in this turn"));
        };
        match result {
            Err(e) => Err(e.clone()),
            Ok(by_rule) => by_rule
                .get(&rule.id)
                .cloned()
                .ok_or_else(|| JudgeError::unavailable("the rule was not asked about this turn")),
        }
    }

    fn prepare(&mut self, asks: Vec<Ask>) {
        self.prepare_turn(asks);
    }

    fn batches(&self) -> bool {
        true
    }

    fn window(&self) -> WindowConfig {
        let c = self.client.config();
        WindowConfig {
            bound_ms: u64::try_from(c.batch_window.as_millis()).unwrap_or(u64::MAX),
            batch_max: c.batch_max,
        }
    }
}

/// The judge a deployment runs: rules-only unless the model judges.
#[derive(Debug)]
pub enum ConfiguredJudge {
    RulesOnly(crate::eval::RulesOnlyJudge),
    Model(Box<ModelJudge>),
}

impl Judge for ConfiguredJudge {
    fn judge(&self, rule: &Rule, trigger: &TriggerInput) -> Result<Judgement, JudgeError> {
        match self {
            Self::RulesOnly(j) => j.judge(rule, trigger),
            Self::Model(j) => j.judge(rule, trigger),
        }
    }

    fn prepare(&mut self, asks: Vec<Ask>) {
        if let Self::Model(j) = self {
            j.prepare_turn(asks);
        }
    }

    fn batches(&self) -> bool {
        matches!(self, Self::Model(_))
    }

    fn window(&self) -> WindowConfig {
        match self {
            Self::RulesOnly(_) => WindowConfig::OFF,
            Self::Model(j) => j.window(),
        }
    }
}
