//! The live loop's thread, runtime and passes. Level-triggered: each pass
//! reads what the store says is still to do and does it, so a restart
//! (after kill -9 too) simply continues.
//!
//! ```text
//! pass: decisions ─► intents (jobs, forwards, steps)      one transaction per batch, with the cursor
//!       steps     ─► Router::on_reply / on_end            the step marked done in the decision's transaction
//!       jobs      ─► POST /jobs (Idempotency-Key)         job id recorded
//!       forwards  ─► POST /jobs/{id}/inbox                marked forwarded
//!       cancels   ─► DELETE /jobs/{id}                    marked sent
//!       outbox    ─► proxy ─► GitHub / Feishu             unknown before the request, sent/failed after
//! events (long poll, beside the passes) ─► Router::on_report / on_end, with the event cursor
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use std::sync::Arc;

use tokio::sync::{watch, Notify};

use super::config::RouterConfig;
use super::events::{EventPage, JobEvent};
use super::http::{ClientSetupError, ProxyClient};
use super::jobs::{JobsClient, JobsError};
use super::outbox;
use super::plan::{self, Intent, Step};
use super::send;
use crate::engine::{Accepted, Checked, Decision, ReportInput, Router};
use crate::eval::Judge;
use crate::id::TicketId;
use crate::intake::wall_clock_ms;
use crate::model::{writer, ModelClient};
use crate::reply::{Purpose, ReplyAttempt, Writer};
use crate::store::{StoreError, Tx};
use crate::ticket::Outcome;

/// Failure to start the live loop.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The thread or its runtime could not be started.
    #[error("cannot start the live loop: {0}")]
    Start(std::io::Error),
    /// The router's HTTPS client could not be set up.
    #[error(transparent)]
    Client(#[from] ClientSetupError),
}

/// The cursor over the router's decision log.
const DECISIONS: &str = "decisions";
/// The cursor over the supervisor's events.
pub(super) const EVENTS: &str = "events";
/// How long a pass waits for more to do when nothing wakes it.
const TICK: Duration = Duration::from_millis(200);
/// How long the event poll waits after a failed one.
const EVENTS_RETRY_MS: u64 = 2_000;
/// How long `GET /events` waits for an event.
const EVENTS_WAIT_MS: u64 = 30_000;
/// The longest wait between job steps while the supervisor is unreachable.
const SUPERVISOR_BACKOFF_MAX_MS: u64 = 30_000;
/// Items per pass of each kind.
const BATCH: usize = 50;

/// The running live loop; [`LiveLoop::stop`] or dropping it stops it.
pub struct LiveLoop {
    stop: watch::Sender<bool>,
    wake: Arc<Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for LiveLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLoop").finish_non_exhaustive()
    }
}

impl LiveLoop {
    /// Starts the loop over `router` (its own connection to the state).
    pub fn start<J: Judge + Send + 'static>(
        router: Router<J>,
        config: &RouterConfig,
    ) -> Result<Self, LiveError> {
        let state = Live {
            router,
            jobs: JobsClient {
                socket: config.jobs.socket.clone(),
            },
            proxy: ProxyClient::new(&config.proxy.ca_cert)?,
            config: config.clone(),
            down: BTreeSet::new(),
            supervisor_retry_at: 0,
            supervisor_failures: 0,
            events_retry_at: 0,
            holds: outbox::Holds::default(),
            writer: match &config.model {
                Some(m) if m.writer => Some(ModelClient::new(m.clone(), &config.proxy.ca_cert)?),
                _ => None,
            },
            wake: Arc::new(Notify::new()),
        };
        let wake = state.wake.clone();
        let (stop, stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gatehouse-live")
            .enable_all()
            .build()
            .map_err(LiveError::Start)?;
        let thread = std::thread::Builder::new()
            .name("live-loop".into())
            .spawn(move || {
                runtime.block_on(state.run(stopped));
                runtime.shutdown_background();
            })
            .map_err(LiveError::Start)?;
        Ok(Self {
            stop,
            wake,
            thread: Some(thread),
        })
    }

    /// What wakes the loop for a pass now: notify it after recording
    /// decisions on the same state (a wake while a pass runs is kept, so
    /// none is lost; without any, the loop still passes every tick).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Stops the loop (between steps: what is in hand is durable) and waits.
    pub fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the live loop panicked");
            }
        }
    }
}

impl Drop for LiveLoop {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An error of one pass; the pass stops, the next one retries.
#[derive(Debug, thiserror::Error)]
pub(super) enum PassError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Jobs(#[from] JobsError),
}

pub(super) struct Live<J: Judge> {
    pub(super) router: Router<J>,
    pub(super) jobs: JobsClient,
    pub(super) proxy: ProxyClient,
    pub(super) config: RouterConfig,
    /// Peers found unreachable: logged once when they go, once when back.
    pub(super) down: BTreeSet<&'static str>,
    /// Job steps wait until then after the supervisor could not be reached.
    pub(super) supervisor_retry_at: u64,
    pub(super) supervisor_failures: u32,
    /// The event poll waits until then after a failed poll.
    pub(super) events_retry_at: u64,
    /// Identities whose replies wait for a rate limit to lift.
    pub(super) holds: outbox::Holds,
    /// The router model drafting reply texts, when `[model] writer = true`.
    pub(super) writer: Option<ModelClient>,
    /// Woken when new decisions are recorded (by the intake's processor):
    /// the next pass starts at once instead of at the next tick.
    pub(super) wake: Arc<Notify>,
}

type EventsTask = tokio::task::JoinHandle<Result<EventPage, JobsError>>;

impl<J: Judge> Live<J> {
    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        let mut events: Option<EventsTask> = None;
        tracing::info!("live loop running");
        loop {
            if *stopped.borrow() {
                break;
            }
            tokio::select! {
                // Every step is durable before and after its effect, so a
                // pass cut here is continued by the next run.
                _ = self.pass() => {}
                _ = stopped.changed() => break,
            }
            if events.is_none() && wall_clock_ms() >= self.events_retry_at {
                events = self.poll_events();
            }
            let wake = self.wake.clone();
            let Some(task) = events.as_mut() else {
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    _ = wake.notified() => {}
                    _ = stopped.changed() => break,
                }
                continue;
            };
            tokio::select! {
                page = task => {
                    events = None;
                    self.on_events(page);
                }
                _ = tokio::time::sleep(TICK) => {}
                _ = wake.notified() => {}
                _ = stopped.changed() => break,
            }
        }
        if let Some(task) = events {
            task.abort();
        }
        tracing::info!("live loop stopped");
    }

    /// One pass over everything level-triggered.
    async fn pass(&mut self) {
        if let Err(e) = self.follow_decisions(wall_clock_ms()) {
            tracing::error!(error = %e, "following the decision log failed");
        }
        if let Err(e) = self.run_steps().await {
            tracing::error!(error = %e, "deciding planned steps failed");
        }
        if wall_clock_ms() >= self.supervisor_retry_at {
            let supervisor = async {
                Ok::<_, PassError>(
                    self.submit_jobs().await?
                        + self.forward_inbox().await?
                        + self.cancel_jobs().await?,
                )
            };
            match supervisor.await {
                // Only an answered call says the supervisor is back.
                Ok(0) => {}
                Ok(_) => {
                    self.supervisor_failures = 0;
                    self.up("supervisor");
                }
                Err(PassError::Jobs(e)) => {
                    // Backoff: the next job step waits, doubling to 30 s.
                    self.supervisor_failures = self.supervisor_failures.saturating_add(1);
                    self.supervisor_retry_at = wall_clock_ms()
                        + outbox::backoff_ms(self.supervisor_failures)
                            .min(SUPERVISOR_BACKOFF_MAX_MS);
                    self.down("supervisor", &e);
                }
                Err(e) => tracing::error!(error = %e, "a job step failed"),
            }
        }
        if let Err(e) = send::send_due(self).await {
            tracing::error!(error = %e, "sending replies failed");
        }
    }

    pub(super) fn down(&mut self, peer: &'static str, error: &dyn std::fmt::Display) {
        if self.down.insert(peer) {
            tracing::warn!(%error, "the {peer} is unreachable; retrying with backoff, nothing is dropped");
        }
    }

    pub(super) fn up(&mut self, peer: &'static str) {
        if self.down.remove(peer) {
            tracing::info!("the {peer} is reachable again");
        }
    }

    /// The reply's text: the model's draft when the writer is on and the
    /// draft passes its checks, else the planned template (`attention`
    /// is never drafted).
    async fn written(&self, mut attempt: ReplyAttempt) -> (ReplyAttempt, Writer) {
        let Some(client) = &self.writer else {
            return (attempt, Writer::Template);
        };
        if !writer::draftable(attempt.purpose) {
            return (attempt, Writer::Template);
        }
        let facts = match self.draft_facts(&attempt) {
            Ok(f) => f,
            Err(error) => {
                tracing::warn!(%error, "no facts to draft from; the template is sent");
                return (attempt, Writer::Template);
            }
        };
        let (text, by) = writer::draft_or_template(client, &facts).await;
        attempt.text = text;
        (attempt, by)
    }

    fn draft_facts(&self, attempt: &ReplyAttempt) -> Result<writer::DraftFacts, StoreError> {
        let read = self.router.store.read();
        let ticket = read.ticket(&attempt.ticket)?;
        let target = attempt
            .in_reply_to
            .clone()
            .unwrap_or_else(|| ticket.mandate.trigger.clone());
        let message = read.trigger(&target)?.trigger.input.text;
        // An ack has nothing to report yet.
        let (summary, links) = match (&ticket.latest_report, attempt.purpose) {
            (Some(r), Purpose::Result | Purpose::Answer) => (r.summary.clone(), r.links.clone()),
            _ => (String::new(), Vec::new()),
        };
        Ok(writer::DraftFacts {
            purpose: attempt.purpose,
            message,
            summary,
            links,
            template: attempt.text.clone(),
            reply_words: self.reply_words(),
        })
    }

    fn reply_words(&self) -> usize {
        self.router.policy().limits.reply_words
    }

    // === decisions ─► intents ===

    fn follow_decisions(&mut self, now: u64) -> Result<(), PassError> {
        loop {
            let read = self.router.store.read();
            let after = read.live_cursor(DECISIONS)?;
            let batch = read.decisions_after(after, BATCH)?;
            let Some(&(last, _)) = batch.last() else {
                return Ok(());
            };
            let mut intents = Vec::new();
            for (seq, body) in &batch {
                let Some(d) = trigger_decision(*seq, body) else {
                    continue;
                };
                if d.ticket.inbox().is_none() {
                    continue;
                }
                let input = read.trigger(&d.trigger)?.trigger.input;
                intents.extend(plan::plan_trigger(&d, &input, self.reply_words()));
            }
            self.router.store.transaction(|tx| {
                for intent in &intents {
                    record_intent(tx, intent, now)?;
                }
                tx.set_live_cursor(DECISIONS, last)
            })?;
            if batch.len() < BATCH {
                return Ok(());
            }
        }
    }

    // === steps ─► the core ===

    async fn run_steps(&mut self) -> Result<(), PassError> {
        let steps = self.router.store.read().pending_steps(BATCH)?;
        for (seq, json) in steps {
            let now = wall_clock_ms();
            let step = match serde_json::from_str::<Step>(&json) {
                Ok(step) => step,
                Err(error) => {
                    tracing::error!(seq, %error, "a planned step does not decode; dropped");
                    self.router
                        .store
                        .transaction(|tx| tx.set_live_step_done(seq, now))?;
                    continue;
                }
            };
            let words = self.reply_words();
            let result = match step {
                Step::Reply { attempt } => {
                    let (attempt, writer) = self.written(attempt).await;
                    let now = wall_clock_ms();
                    self.router.on_reply_written(attempt, writer, now, |tx, d| {
                        tx.set_live_step_done(seq, now)?;
                        if let Decision::Reply {
                            result:
                                Checked::Allowed {
                                    allowed: Accepted(r),
                                },
                            ..
                        } = d
                        {
                            tx.queue_reply(&r.reply, now)?;
                        }
                        Ok(())
                    })
                }
                Step::Close { ticket, trigger } => {
                    let read = self.router.store.read();
                    // Unknown records end here like any step's: dropped below.
                    let outcome = read.trigger(&trigger).and_then(|trg| {
                        let state = read.ticket(&ticket)?.state;
                        Ok(plan::close_outcome(trg.trigger.input.kind, state))
                    });
                    match outcome {
                        Err(e) => Err(e.into()),
                        Ok(outcome) => {
                            let t = ticket.clone();
                            self.router
                                .on_end_with(ticket, outcome, Some(trigger), now, |tx, d| {
                                    tx.set_live_step_done(seq, now)?;
                                    after_end(tx, d, &t, outcome, words, now)
                                })
                        }
                    }
                }
                Step::End {
                    ticket,
                    outcome,
                    requested_by,
                } => {
                    let t = ticket.clone();
                    self.router
                        .on_end_with(ticket, outcome, requested_by, now, |tx, d| {
                            tx.set_live_step_done(seq, now)?;
                            after_end(tx, d, &t, outcome, words, now)
                        })
                }
            };
            match result {
                Ok(d) => log_refusal(&d),
                // A step about a record that is not there can never be
                // decided: it is dropped, loudly, instead of blocking the rest.
                Err(crate::engine::EngineError::Store(StoreError::NotFound { kind, id })) => {
                    tracing::error!(seq, kind, %id, "a planned step names an unknown record; dropped");
                    self.router
                        .store
                        .transaction(|tx| tx.set_live_step_done(seq, now))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    // === jobs ===

    /// Each returns how many job API calls it made (all answered).
    async fn submit_jobs(&mut self) -> Result<usize, PassError> {
        let wanted = self.router.store.read().wanted_jobs(BATCH)?;
        let mut calls = 0;
        for job in wanted {
            let now = wall_clock_ms();
            let (ticket, current, input) = {
                let read = self.router.store.read();
                (
                    read.ticket(&job.ticket)?,
                    read.current_live_job(&job.ticket)?,
                    read.trigger(&job.generation)?.trigger.input,
                )
            };
            let superseded = current.is_some_and(|c| c.generation != job.generation);
            if !ticket.is_live() || superseded {
                self.router.store.transaction(|tx| {
                    tx.set_job_submitted(&job.ticket, &job.generation, None, now)
                })?;
                continue;
            }
            let body = plan::job_body(
                &ticket,
                &job.generation,
                &input,
                self.config.jobs.deadline_secs,
            );
            let key = plan::idempotency_key(&job.ticket, &job.generation, job.attempt);
            let submitted = self.jobs.submit(&key, &body).await?;
            calls += 1;
            match submitted {
                super::jobs::Submitted::Job(id) => {
                    tracing::info!(ticket = %job.ticket, job = %id, "job submitted");
                    self.router.store.transaction(|tx| {
                        tx.set_job_submitted(&job.ticket, &job.generation, Some(&id), now)
                    })?;
                }
                // The previous job of the ticket is ending; next pass.
                super::jobs::Submitted::Busy => {}
                super::jobs::Submitted::Refused(why) => {
                    tracing::error!(ticket = %job.ticket, %why, "the supervisor refused the job; the ticket fails");
                    let step = encode_step(&Step::End {
                        ticket: job.ticket.clone(),
                        outcome: Outcome::Failed,
                        requested_by: None,
                    })?;
                    self.router.store.transaction(|tx| {
                        tx.set_job_submitted(&job.ticket, &job.generation, None, now)?;
                        tx.push_live_step(&job.ticket, &step, now)
                    })?;
                }
            }
        }
        Ok(calls)
    }

    async fn forward_inbox(&mut self) -> Result<usize, PassError> {
        let pending = self.router.store.read().pending_forwards(BATCH)?;
        let mut calls = 0;
        for (trigger, ticket) in pending {
            let now = wall_clock_ms();
            let (job, live, text) = {
                let read = self.router.store.read();
                (
                    read.current_live_job(&ticket)?,
                    read.ticket(&ticket)?.is_live(),
                    read.trigger(&trigger)?.trigger.input.text,
                )
            };
            let job_id = match job {
                Some(j) if j.job_state.is_none() => j.job_id,
                _ => None,
            };
            let outcome = match (job_id, live) {
                (Some(id), _) => match self.jobs.inbox(&id, &text, &trigger).await? {
                    super::jobs::Posted::Posted => {
                        calls += 1;
                        "forwarded"
                    }
                    super::jobs::Posted::JobEnded => "dropped",
                    super::jobs::Posted::Refused(why) => {
                        tracing::warn!(%trigger, %why, "the job's inbox refused a pass-through");
                        "dropped"
                    }
                },
                // The job is not submitted yet: it gets it later.
                (None, true) => continue,
                (None, false) => "dropped",
            };
            self.router
                .store
                .transaction(|tx| tx.set_forward(&trigger, outcome, now))?;
        }
        Ok(calls)
    }

    async fn cancel_jobs(&mut self) -> Result<usize, PassError> {
        let wanted = self.router.store.read().cancels_wanted(BATCH)?;
        let mut calls = 0;
        for job in wanted {
            let Some(id) = job.job_id else { continue };
            self.jobs.cancel(&id).await?;
            calls += 1;
            tracing::info!(ticket = %job.ticket, job = %id, "job cancelled");
            let now = wall_clock_ms();
            self.router
                .store
                .transaction(|tx| tx.set_cancel_sent(&id, now))?;
        }
        Ok(calls)
    }

    // === events ===

    fn poll_events(&mut self) -> Option<EventsTask> {
        let after = match self.router.store.read().live_cursor(EVENTS) {
            Ok(after) => after,
            Err(error) => {
                tracing::error!(%error, "reading the event cursor failed");
                return None;
            }
        };
        let jobs = self.jobs.clone();
        Some(tokio::spawn(async move {
            jobs.events(after, EVENTS_WAIT_MS).await
        }))
    }

    fn on_events(&mut self, page: Result<Result<EventPage, JobsError>, tokio::task::JoinError>) {
        let page = match page {
            Ok(Ok(page)) => {
                self.up("supervisor");
                page
            }
            Ok(Err(e)) => {
                // The supervisor is down: wait before asking again.
                self.events_retry_at = wall_clock_ms() + EVENTS_RETRY_MS;
                return self.down("supervisor", &e);
            }
            Err(e) => return tracing::error!(error = %e, "the event poll failed"),
        };
        for (seq, event) in page.events {
            if let Err(error) = self.on_event(seq, event) {
                // The cursor stays before it: the next poll brings it again.
                tracing::error!(seq, %error, "handling a job event failed");
                return;
            }
        }
    }

    fn on_event(&mut self, seq: u64, event: JobEvent) -> Result<(), PassError> {
        let now = wall_clock_ms();
        let words = self.reply_words();
        let job_id = match &event {
            JobEvent::Report { job_id, .. }
            | JobEvent::Ended { job_id, .. }
            | JobEvent::Lost { job_id } => Some(job_id.clone()),
            JobEvent::Other => None,
        };
        // Only the current generation's job speaks for its ticket.
        let current = match &job_id {
            None => None,
            Some(id) => {
                let read = self.router.store.read();
                match read.live_job_by_id(id)? {
                    Some(job) => {
                        let ticket = read.ticket(&job.ticket)?;
                        let is_current = read
                            .current_live_job(&job.ticket)?
                            .is_some_and(|c| c.generation == job.generation);
                        (is_current && ticket.is_live()).then_some((job, ticket))
                    }
                    None => None,
                }
            }
        };
        let Some(event) = self.on_lost(seq, event, current.as_ref(), now)? else {
            return Ok(());
        };
        match (event, current) {
            (JobEvent::Report { report, .. }, Some((job, _))) => {
                let planned = plan::plan_report(&job.ticket, &report, words);
                let d = self.router.on_report_with(
                    ReportInput {
                        ticket: job.ticket.clone(),
                        report,
                    },
                    now,
                    |tx, d| {
                        if matches!(
                            d,
                            Decision::Report {
                                result: Checked::Allowed { .. },
                                ..
                            }
                        ) {
                            for attempt in planned {
                                tx.push_live_step(
                                    &job.ticket,
                                    &encode_step(&Step::Reply { attempt })?,
                                    now,
                                )?;
                            }
                        }
                        tx.set_live_cursor(EVENTS, seq)
                    },
                )?;
                log_refusal(&d);
            }
            (JobEvent::Ended { job_id, state }, Some((job, ticket))) => {
                tracing::info!(ticket = %job.ticket, job = %job_id, %state, "job ended");
                let Some(outcome) = plan::end_outcome(&state, ticket.latest_report.as_ref()) else {
                    return Ok(self
                        .router
                        .store
                        .transaction(|tx| tx.set_live_cursor(EVENTS, seq))?);
                };
                let t = job.ticket.clone();
                let d = self
                    .router
                    .on_end_with(job.ticket, outcome, None, now, |tx, d| {
                        tx.set_job_ended(&job_id, &state, now)?;
                        tx.set_live_cursor(EVENTS, seq)?;
                        after_end(tx, d, &t, outcome, words, now)
                    })?;
                log_refusal(&d);
            }
            (JobEvent::Ended { job_id, state }, None) => {
                self.router.store.transaction(|tx| {
                    tx.set_job_ended(&job_id, &state, now)?;
                    tx.set_live_cursor(EVENTS, seq)
                })?;
            }
            (_, _) => {
                self.router
                    .store
                    .transaction(|tx| tx.set_live_cursor(EVENTS, seq))?;
            }
        }
        Ok(())
    }
}

/// The trigger decision in a decision log entry; `None` for the other
/// kinds. One that does not decode is logged: its effects are lost.
fn trigger_decision(seq: u64, body: &str) -> Option<crate::engine::TriggerDecision> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    if value["type"] != "trigger" {
        return None;
    }
    match serde_json::from_value(value) {
        Ok(d) => Some(d),
        Err(error) => {
            tracing::error!(seq, %error, "a trigger decision does not decode; the live loop skips it");
            None
        }
    }
}

/// Writes an intent in the transaction that advances the decision cursor.
fn record_intent(tx: &mut Tx<'_>, intent: &Intent, now: u64) -> Result<(), StoreError> {
    match intent {
        Intent::Job { ticket, generation } => tx.want_job(ticket, generation, now),
        Intent::Forward { trigger, ticket } => tx.want_forward(trigger, ticket, now),
        Intent::Step(step) => tx.push_live_step(step.ticket(), &encode_step(step)?, now),
    }
}

fn encode_step(step: &Step) -> Result<String, StoreError> {
    Ok(crate::json::encode("live step", step)?)
}

/// What an allowed end causes, in its transaction: the ticket's jobs are
/// cancelled, and a ticket ended with an outcome that allows a result gets
/// its `result` unless its latest report was `ready` (which planned one)
/// or one was logged since its generation began.
fn after_end(
    tx: &mut Tx<'_>,
    d: &Decision,
    ticket: &TicketId,
    outcome: Outcome,
    reply_words: usize,
    now: u64,
) -> Result<(), StoreError> {
    if !matches!(
        d,
        Decision::End {
            result: Checked::Allowed { .. },
            ..
        }
    ) {
        return Ok(());
    }
    tx.want_cancel(ticket, now)?;
    // A merge says the pull request was taken, not what the work was: only
    // a ready report (which planned its own result) speaks for the work.
    if !outcome.allows_result() || outcome == Outcome::Merged {
        return Ok(());
    }
    let read = tx.read();
    let t = read.ticket(ticket)?;
    // A ready report planned its own result when it was accepted.
    if t.latest_report
        .as_ref()
        .is_some_and(|r| r.state == crate::ticket::ReportState::Ready)
    {
        return Ok(());
    }
    let since = match read.current_live_job(ticket)? {
        Some(job) => read.trigger(&job.generation)?.trigger.at,
        None => 0,
    };
    if read.result_logged_since(ticket, since)? {
        return Ok(());
    }
    if let Some(attempt) = plan::result_on_end(&t, reply_words) {
        let step = encode_step(&Step::Reply { attempt })?;
        tx.push_live_step(ticket, &step, now)?;
    }
    Ok(())
}

fn log_refusal(d: &Decision) {
    let refused = match d {
        Decision::Report {
            result: Checked::Refused { refused },
            ticket,
        } => Some((ticket, "report", refused.message.clone())),
        Decision::Reply {
            result: Checked::Refused { refused },
            ticket,
            ..
        } => Some((ticket, "reply", refused.message.clone())),
        Decision::End {
            result: Checked::Refused { refused },
            ticket,
            ..
        } => Some((ticket, "end", refused.message.clone())),
        _ => None,
    };
    if let Some((ticket, what, why)) = refused {
        tracing::info!(%ticket, what, %why, "the router core refused; nothing is sent");
    }
}
