//! The supervisor's facade: admits jobs and answers the job API and the
//! control sockets (state, results, cancel, inbox, reports, events). Each
//! admitted job's life runs in its own task ([`super::runner`]), which
//! also recovers after a restart. State changes go to the store first, then
//! wake waiters through `watch` channels: nobody polls.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gatehouse_types::wire::InboxDelivery;
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::codec::CodecError;
use super::config::{Config, LauncherKind};
use super::control_limits::{self, ConnectionGate};
use super::launcher::{Launcher, SandboxLauncher, UnsandboxedLauncher};
use super::prompts::PromptError;
use super::proxy_admin::{ProxyAdmin, ProxyAdminError};
use super::report::{self, InboxMessage, Report, ReportError};
use super::spec::{check_scope, JobRequest, SpecError};
use super::state::{cancel_decision, CancelDecision, JobEvent, JobState};
use super::store::{
    EventRecord, ExitStatus, Inserted, JobRecord, NewJob, Pushed, Store, StoreError,
};

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// no job has this id
    #[error("no job {0}")]
    NotFound(String),
    /// the request body is not a valid job
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// the job's sandbox profile cannot be loaded
    #[error("field `profile`: {0}")]
    Profile(#[from] crate::profile::ProfileError),
    /// a report or inbox message is invalid
    #[error(transparent)]
    Report(#[from] ReportError),
    /// the idempotency key was used with a different body
    #[error("idempotency key already used for job {job_id} with a different body")]
    KeyConflict { job_id: String },
    /// the ticket has a live job
    #[error("ticket already has a live job {job_id}")]
    TicketBusy { job_id: String },
    /// the job has ended
    #[error("job {job_id} has ended ({state})")]
    Ended { job_id: String, state: JobState },
    /// the job has not ended yet
    #[error("job {job_id} has not ended ({state})")]
    NotEnded { job_id: String, state: JobState },
    /// the state database failed
    #[error(transparent)]
    Store(#[from] StoreError),
    /// a file or socket operation failed
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// the proxy could not create or revoke an identity
    #[error(transparent)]
    Proxy(#[from] ProxyAdminError),
    /// a prompt template is broken
    #[error(transparent)]
    Prompt(#[from] PromptError),
    /// the request could not be encoded for its idempotency hash
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// the config names something a job would need that cannot work
    #[error(transparent)]
    Preflight(#[from] super::preflight::PreflightError),
    /// the ticket's work dir could not be given its own filesystem
    #[error("the work dir's filesystem (limits.work_dir_size): {0}")]
    WorkDirFs(#[from] crate::workdir_fs::FsError),
}

/// Resolves a job's profile as `sandbox run` will: from the configured
/// profiles directory, else the default ones, then the built-in profiles.
pub fn resolve_profile(
    config: &Config,
    name: &str,
) -> Result<crate::profile::Profile, ServiceError> {
    let source = crate::profile::DirSource {
        dirs: match &config.profiles_dir {
            Some(dir) => vec![dir.clone()],
            None => crate::profile::DirSource::default_dirs(),
        },
    };
    Ok(crate::profile::resolve(&source, name)?)
}

pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
    let what = what.into();
    move |source| ServiceError::Io { what, source }
}

/// The host user `gatehouse sandbox run` runs workers as when started by root.
pub const WORKER_USER: &str = "gatehouse-worker";

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A random id: `prefix` + 16 hex digits from the kernel's CSPRNG.
fn new_id(prefix: &str) -> Result<String, ServiceError> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io("reading /dev/urandom"))?;
    Ok(format!("{prefix}{}", hex::encode(bytes)))
}

/// Channels to a job's task while it is live.
pub(super) struct LiveJob {
    cancel: watch::Sender<bool>,
    inbox: watch::Sender<u64>,
}

/// What the supervisor's handles and its job tasks share.
pub(super) struct Inner {
    pub(super) config: Config,
    pub(super) store: Store,
    pub(super) launcher: Box<dyn Launcher>,
    pub(super) proxy: Option<ProxyAdmin>,
    /// The last event sequence number written.
    events: watch::Sender<i64>,
    live: Mutex<HashMap<String, LiveJob>>,
    /// The size of `live`, sent on every change under its lock: shutdown
    /// waits on this, not on events (a job's final event is written
    /// before it leaves `live`, so waking on it lost the last wake-up).
    live_count: watch::Sender<usize>,
    pub(super) slots: Arc<Semaphore>,
    /// Control connections of all jobs together, by the descriptor budget.
    pub(super) control_gate: Arc<ConnectionGate>,
    /// One job's control connections: its configured cap, lowered to a
    /// quarter of the descriptor budget.
    pub(super) control_per_job: usize,
}

/// The running supervisor. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    pub(super) inner: Arc<Inner>,
}

/// What recovery did at start.
#[derive(Debug, Default)]
pub struct Recovery {
    pub jobs_failed: Vec<String>,
    pub processes_killed: usize,
    pub identities_revoked: Vec<String>,
}

/// A job as the API shows it.
pub fn job_view(job: &JobRecord, latest_report: Option<Value>) -> Value {
    json!({
        "job_id": job.id,
        "ticket": job.spec.ticket,
        "state": job.state,
        "created_at": job.created_at,
        "deadline_at": job.deadline_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "exit": job.exit,
        "reason": job.end_reason,
        "cancel_requested": job.cancel_requested,
        "latest_report": latest_report,
    })
}

/// How long start-up waits for the proxy's list of rule sets.
const RULE_SET_CHECK_WAIT: Duration = Duration::from_secs(2);

/// Says at start which rule sets the profiles allow that the proxy cannot
/// serve. A proxy that does not answer yet (started later, or restarting)
/// is only noted: its identities refuse unknown sets as jobs start.
async fn check_rule_sets_with(proxy: &ProxyAdmin, profiles: &super::preflight::ProfileRuleSets) {
    match tokio::time::timeout(RULE_SET_CHECK_WAIT, proxy.known_rule_sets()).await {
        Ok(Ok(known)) => {
            for warning in super::preflight::check_rule_sets(profiles, &known) {
                tracing::warn!("{warning}");
            }
        }
        Ok(Err(e)) => tracing::warn!(
            error = %e,
            "rule sets not checked at start: the proxy's admin API did not list them"
        ),
        Err(_) => tracing::warn!(
            "rule sets not checked at start: the proxy's admin socket did not answer in time"
        ),
    }
}

impl Supervisor {
    /// Opens the state, recovers from a previous run, and returns a
    /// supervisor ready to serve.
    pub async fn start(config: Config) -> Result<(Supervisor, Recovery), ServiceError> {
        let profile_rule_sets = super::preflight::check(&config)?;
        for dir in [
            config.state_dir.clone(),
            config.state_dir.join("tickets"),
            config.state_dir.join("bin"),
        ] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(io(format!("creating {}", dir.display())))?;
        }
        // The run dir's parents may hold other parts' sockets (the job API's):
        // they are made with the usual modes, only the run dir is private.
        if let Some(parent) = config.run_dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        match std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&config.run_dir)
        {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(io(format!("creating {}", config.run_dir.display()))(e))
            }
            _ => {}
        }
        let store = Store::open(&config.state_dir.join("state.db"))?;
        let installed = match &config.gatehouse_bin {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(io("finding the gatehouse binary"))?,
        };
        let gatehouse_bin = super::sandbox_bin::install(&installed, &config.state_dir.join("bin"))?;
        let launcher: Box<dyn Launcher> = match config.launcher {
            LauncherKind::Sandbox => Box::new(SandboxLauncher {
                gatehouse_bin,
                profiles_dir: config.profiles_dir.clone(),
                worker_uids: config.worker_uids,
            }),
            LauncherKind::DangerouslyUnsandboxed => {
                tracing::warn!("dangerously_unsandboxed: jobs run without any isolation");
                Box::new(UnsandboxedLauncher { gatehouse_bin })
            }
        };
        let proxy = config.proxy.as_ref().map(|p| ProxyAdmin {
            admin_socket: p.admin_socket.clone(),
        });
        if let Some(proxy) = &proxy {
            check_rule_sets_with(proxy, &profile_rule_sets).await;
        }
        let (events, _) = watch::channel(store.last_event_seq()?);
        let slots = Arc::new(Semaphore::new(config.max_running_jobs));
        let descriptors = control_limits::raise_descriptor_limit();
        let (all, per_job) =
            control_limits::connection_budget(descriptors, config.control.connections_per_job);
        tracing::info!(
            descriptors,
            control_connections = all,
            per_job,
            "control socket connection budget"
        );
        let inner = Arc::new(Inner {
            config,
            store,
            launcher,
            proxy,
            events,
            live: Mutex::new(HashMap::new()),
            live_count: watch::channel(0).0,
            slots,
            control_gate: ConnectionGate::new(all),
            control_per_job: per_job,
        });
        let recovery = inner.recover().await?;
        if inner.proxy.is_some() {
            tokio::spawn(Inner::retry_revocations(Arc::downgrade(&inner)));
        }
        Ok((Supervisor { inner }, recovery))
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// `POST /jobs`. Returns the job and whether this call created it.
    pub fn submit(
        &self,
        key: &str,
        request: JobRequest,
    ) -> Result<(JobRecord, bool), ServiceError> {
        let inner = &self.inner;
        let hash = request.canonical_hash()?;
        let spec = request.validate(&inner.config.spec_limits())?;
        let profile = resolve_profile(&inner.config, &spec.profile)?;
        check_scope(&spec, &profile.network.rule_sets, &profile.network.tunnels)?;
        let id = new_id("job_")?;
        let ticket_dir = inner.config.state_dir.join("tickets").join(&spec.ticket);
        let work_dir = ticket_dir.join("work");
        let stdout_log = ticket_dir.join("logs").join(format!("{id}.stdout.log"));
        let stderr_log = ticket_dir.join("logs").join(format!("{id}.stderr.log"));
        let (inserted, seq) = inner.store.insert_job(
            key,
            &hash,
            NewJob {
                id: &id,
                spec: &spec,
                now: now_ms(),
                work_dir: &work_dir,
                stdout_log: &stdout_log,
                stderr_log: &stderr_log,
            },
        )?;
        inner.notify(seq);
        match inserted {
            Inserted::Created(job) => {
                let job = *job;
                super::metrics::entered(job.state);
                let (cancel, cancel_rx) = watch::channel(false);
                let (inbox, _) = watch::channel(0);
                inner.add_live(job.id.clone(), LiveJob { cancel, inbox });
                let task_inner = inner.clone();
                let task_job = job.clone();
                tokio::spawn(async move { task_inner.run_job(task_job, cancel_rx).await });
                Ok((job, true))
            }
            Inserted::Replayed(job) => Ok((*job, false)),
            Inserted::KeyConflict { job_id } => Err(ServiceError::KeyConflict { job_id }),
            Inserted::TicketBusy { job_id } => Err(ServiceError::TicketBusy { job_id }),
        }
    }

    pub fn job(&self, id: &str) -> Result<Value, ServiceError> {
        let job = self.get(id)?;
        let report = self.inner.store.latest_report(id)?;
        Ok(job_view(&job, report.map(|r| json!(r))))
    }

    fn get(&self, id: &str) -> Result<JobRecord, ServiceError> {
        self.inner
            .store
            .job(id)?
            .ok_or_else(|| ServiceError::NotFound(id.into()))
    }

    /// `GET /jobs/{id}/result`: only once the job has ended.
    pub fn result(&self, id: &str) -> Result<Value, ServiceError> {
        let job = self.get(id)?;
        if !job.state.is_final() {
            return Err(ServiceError::NotEnded {
                job_id: job.id,
                state: job.state,
            });
        }
        let report = self.inner.store.latest_report(id)?;
        Ok(json!({
            "job_id": job.id,
            "ticket": job.spec.ticket,
            "state": job.state,
            "exit": job.exit,
            "reason": job.end_reason,
            "started_at": job.started_at,
            "ended_at": job.ended_at,
            "final_report": report,
            "work_dir": job.work_dir,
            "logs": {"stdout": job.stdout_log, "stderr": job.stderr_log},
        }))
    }

    /// `DELETE /jobs/{id}`: asks a live job to stop. The state it reaches is
    /// reported by its events and `GET /jobs/{id}`.
    pub fn cancel(&self, id: &str) -> Result<JobState, ServiceError> {
        let job = self.get(id)?;
        match cancel_decision(job.state) {
            CancelDecision::AlreadyEnded(state) => Err(ServiceError::Ended {
                job_id: job.id,
                state,
            }),
            CancelDecision::Stop => {
                let state = self
                    .inner
                    .store
                    .request_cancel(id)?
                    .ok_or_else(|| ServiceError::NotFound(id.into()))?;
                if let Some(live) = self.inner.lock_live().get(id) {
                    live.cancel.send_replace(true);
                }
                Ok(state)
            }
        }
    }

    /// `POST /jobs/{id}/inbox`: a message for a live job's worker (or a
    /// lost job's, which its ticket's next job gets: [`Store::push_inbox`]).
    pub fn push_inbox(&self, id: &str, message: &InboxMessage) -> Result<i64, ServiceError> {
        report::check_inbox(message)?;
        let job = self.get(id)?;
        let seq = match self.inner.store.push_inbox(id, message, now_ms())? {
            Pushed::Queued(seq) => seq,
            Pushed::Closed(state) => {
                return Err(ServiceError::Ended {
                    job_id: job.id,
                    state,
                })
            }
        };
        if let Some(live) = self.inner.lock_live().get(id) {
            live.inbox.send_replace(seq as u64);
        }
        Ok(seq)
    }

    /// Events after `cursor`; waits up to `wait` for one if there are none.
    pub async fn events(
        &self,
        cursor: i64,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<EventRecord>, ServiceError> {
        // Subscribe before reading, so an event written in between wakes us.
        let mut rx = self.inner.events.subscribe();
        let events = self.inner.store.events_after(cursor, limit)?;
        if !events.is_empty() || wait.is_zero() {
            return Ok(events);
        }
        let deadline = Instant::now() + wait;
        loop {
            if *rx.borrow_and_update() > cursor {
                return Ok(self.inner.store.events_after(cursor, limit)?);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Ok(vec![]),
            }
        }
    }

    /// A report arriving on job `id`'s control socket.
    pub fn report(&self, id: &str, report: &Report) -> Result<i64, ServiceError> {
        report::check_report(report)?;
        let (stored, seq) = self.inner.store.add_report(id, report, now_ms())?;
        self.inner.notify(Some(seq));
        Ok(stored.id)
    }

    /// Inbox messages of job `id` not acknowledged yet; with `wait`, blocks
    /// until there is at least one.
    pub async fn read_inbox(
        &self,
        id: &str,
        wait: bool,
    ) -> Result<Vec<InboxDelivery>, ServiceError> {
        let mut rx = match self.inner.lock_live().get(id) {
            Some(live) => live.inbox.subscribe(),
            None => return Ok(self.inner.store.pending_inbox(id)?),
        };
        loop {
            rx.borrow_and_update();
            let messages = self.inner.store.pending_inbox(id)?;
            if !messages.is_empty() || !wait {
                return Ok(messages);
            }
            if rx.changed().await.is_err() {
                return Ok(vec![]);
            }
        }
    }

    /// The worker has the messages of job `id` up to `through`.
    pub fn ack_inbox(&self, id: &str, through: i64) -> Result<usize, ServiceError> {
        Ok(self.inner.store.ack_inbox(id, through)?)
    }

    /// Cancels every live job and waits (at most `timeout`) until all ended.
    pub async fn shutdown(&self, timeout: Duration) {
        let ids: Vec<String> = self.inner.lock_live().keys().cloned().collect();
        for id in ids {
            let _ = self.cancel(&id);
        }
        let mut live = self.inner.live_count.subscribe();
        // `wait_for` checks the current count first, then each change.
        let _ = tokio::time::timeout(timeout, live.wait_for(|n| *n == 0)).await;
    }

    /// Jobs currently queued or running in this process.
    pub fn live_count(&self) -> usize {
        self.inner.lock_live().len()
    }
}

impl Inner {
    pub(super) fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveJob>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add_live(&self, id: String, job: LiveJob) {
        let mut live = self.lock_live();
        live.insert(id, job);
        self.live_count.send_replace(live.len());
    }

    pub(super) fn remove_live(&self, id: &str) {
        let mut live = self.lock_live();
        live.remove(id);
        self.live_count.send_replace(live.len());
    }

    fn notify(&self, seq: Option<i64>) {
        if let Some(seq) = seq {
            self.events.send_if_modified(|last| {
                let newer = seq > *last;
                if newer {
                    *last = seq;
                }
                newer
            });
        }
    }

    pub(super) fn transition(
        &self,
        id: &str,
        event: JobEvent,
        process: Option<(i32, u64)>,
        exit: Option<ExitStatus>,
        reason: Option<&str>,
    ) -> Result<JobRecord, StoreError> {
        let (job, seq) = self
            .store
            .transition(id, event, now_ms(), process, exit, reason)?;
        super::metrics::entered(job.state);
        self.notify(Some(seq));
        Ok(job)
    }
}
