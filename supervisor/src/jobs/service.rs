//! The supervisor's core: admits jobs, runs each one's life in its own task
//! (queue slot → work dir, prompt, control socket, proxy identity → launch →
//! wait for exit, cancel or deadline → cleanup → final state), and recovers
//! after a restart. State changes go to the store first, then wake waiters
//! through `watch` channels: nobody polls.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::codec::CodecError;
use super::config::{Config, LauncherKind};
use super::launcher::{exit_parts, LaunchRequest, Launcher, SandboxLauncher, UnsandboxedLauncher};
use super::process;
use super::prompts::{assemble, render, PromptError};
use super::proxy_admin::{NewIdentity, ProxyAdmin, ProxyAdminError};
use super::report::{InboxMessage, Report, ReportError};
use super::spec::{check_scope, JobRequest, SpecError};
use super::state::{cancel_decision, CancelDecision, JobEvent, JobState, StopReason};
use super::store::{
    EventRecord, ExitStatus, Inserted, JobRecord, NewJob, Store, StoreError, StoredMessage,
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
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
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
struct LiveJob {
    cancel: watch::Sender<bool>,
    inbox: watch::Sender<u64>,
}

struct Inner {
    config: Config,
    store: Store,
    launcher: Box<dyn Launcher>,
    proxy: Option<ProxyAdmin>,
    /// The last event sequence number written.
    events: watch::Sender<i64>,
    live: Mutex<HashMap<String, LiveJob>>,
    slots: Arc<Semaphore>,
}

/// The running supervisor. Cheap to clone.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
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

impl Supervisor {
    /// Opens the state, recovers from a previous run, and returns a
    /// supervisor ready to serve.
    pub async fn start(config: Config) -> Result<(Supervisor, Recovery), ServiceError> {
        for dir in [
            config.state_dir.clone(),
            config.state_dir.join("tickets"),
            config.state_dir.join("run"),
        ] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(io(format!("creating {}", dir.display())))?;
        }
        let store = Store::open(&config.state_dir.join("state.db"))?;
        let gatehouse_bin = match &config.gatehouse_bin {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(io("finding the gatehouse binary"))?,
        };
        let launcher: Box<dyn Launcher> = match config.launcher {
            LauncherKind::Sandbox => Box::new(SandboxLauncher {
                gatehouse_bin,
                profiles_dir: config.profiles_dir.clone(),
            }),
            LauncherKind::DangerouslyUnsandboxed => {
                tracing::warn!("dangerously_unsandboxed: jobs run without any isolation");
                Box::new(UnsandboxedLauncher { gatehouse_bin })
            }
        };
        let proxy = config.proxy.as_ref().map(|p| ProxyAdmin {
            admin_socket: p.admin_socket.clone(),
        });
        let (events, _) = watch::channel(store.last_event_seq()?);
        let slots = Arc::new(Semaphore::new(config.max_running_jobs));
        let inner = Arc::new(Inner {
            config,
            store,
            launcher,
            proxy,
            events,
            live: Mutex::new(HashMap::new()),
            slots,
        });
        let recovery = inner.recover().await?;
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
        let source = crate::profile::DirSource {
            dirs: match &inner.config.profiles_dir {
                Some(dir) => vec![dir.clone()],
                None => crate::profile::DirSource::default_dirs(),
            },
        };
        let profile = crate::profile::resolve(&source, &spec.profile)?;
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
                let (cancel, cancel_rx) = watch::channel(false);
                let (inbox, _) = watch::channel(0);
                inner
                    .lock_live()
                    .insert(job.id.clone(), LiveJob { cancel, inbox });
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

    /// `POST /jobs/{id}/inbox`: a message for a live job's worker.
    pub fn push_inbox(&self, id: &str, message: &InboxMessage) -> Result<i64, ServiceError> {
        message.validate()?;
        let job = self.get(id)?;
        if job.state.is_final() {
            return Err(ServiceError::Ended {
                job_id: job.id,
                state: job.state,
            });
        }
        let seq = self.inner.store.push_inbox(id, message, now_ms())?;
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
        report.validate()?;
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
    ) -> Result<Vec<StoredMessage>, ServiceError> {
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
        let mut rx = self.inner.events.subscribe();
        let deadline = Instant::now() + timeout;
        while self.live_count() > 0 {
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                break;
            }
        }
    }

    /// Jobs currently queued or running in this process.
    pub fn live_count(&self) -> usize {
        self.inner.lock_live().len()
    }
}

/// What a job's task holds that must be released when it ends.
#[derive(Default)]
struct Resources {
    control: Option<JoinHandle<()>>,
    run_dir: Option<PathBuf>,
    identity: Option<String>,
    process: Option<(i32, u64)>,
    logs: Vec<JoinHandle<()>>,
}

/// The outcome of a job's run: the event that ends it, and details.
struct Ending {
    event: JobEvent,
    exit: Option<ExitStatus>,
    reason: Option<String>,
}

impl Inner {
    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveJob>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
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

    fn transition(
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
        self.notify(Some(seq));
        Ok(job)
    }

    /// Kills what a previous run left behind: live jobs end `failed` (or
    /// `cancelled` if a cancel was requested), their processes are killed,
    /// their identities revoked, their control sockets removed.
    async fn recover(self: &Arc<Self>) -> Result<Recovery, ServiceError> {
        let mut recovery = Recovery::default();
        for job in self.store.live_jobs()? {
            if let Some((pid, start)) = job.process {
                let n = process::signal_group(pid, start, Signal::SIGKILL);
                process::kill_group(pid, start).await;
                recovery.processes_killed += n;
            }
            if let Some(name) = &job.identity {
                self.revoke(&job.id, name).await?;
                recovery.identities_revoked.push(name.clone());
            }
            let event = if job.cancel_requested {
                JobEvent::Stopped(StopReason::Cancel)
            } else {
                JobEvent::SupervisorRestarted
            };
            self.transition(&job.id, event, None, None, Some("supervisor_restarted"))?;
            recovery.jobs_failed.push(job.id);
        }
        // Identities of ended jobs whose revocation did not complete.
        for job in self.store.unrevoked_identities()? {
            if let Some(name) = &job.identity {
                self.revoke(&job.id, name).await?;
                recovery.identities_revoked.push(name.clone());
            }
        }
        let run = self.config.state_dir.join("run");
        if let Ok(entries) = std::fs::read_dir(&run) {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        Ok(recovery)
    }

    async fn revoke(&self, job_id: &str, name: &str) -> Result<(), ServiceError> {
        if let Some(proxy) = &self.proxy {
            proxy.revoke(name).await?;
        }
        self.store.clear_identity(job_id)?;
        Ok(())
    }

    async fn run_job(self: Arc<Self>, job: JobRecord, mut cancel: watch::Receiver<bool>) {
        let id = job.id.clone();
        let deadline = deadline_instant(job.deadline_at);
        let permit = tokio::select! {
            biased;
            _ = cancel.wait_for(|c| *c) => None,
            _ = tokio::time::sleep_until(deadline) => None,
            permit = self.slots.clone().acquire_owned() => permit.ok(),
        };
        let ending = match permit {
            None if *cancel.borrow() => Ending {
                event: JobEvent::Stopped(StopReason::Cancel),
                exit: None,
                reason: Some("cancelled while queued".into()),
            },
            None => Ending {
                event: JobEvent::Stopped(StopReason::Deadline),
                exit: None,
                reason: Some("deadline reached while queued".into()),
            },
            Some(_) => {
                let mut res = Resources::default();
                let ending = match self.execute(&job, deadline, &mut cancel, &mut res).await {
                    Ok(ending) => ending,
                    Err(e) => Ending {
                        event: JobEvent::LaunchFailed,
                        exit: None,
                        reason: Some(format!("launch failed: {e}")),
                    },
                };
                let ending = match self.release(&id, res).await {
                    Ok(()) => ending,
                    Err(e) => {
                        tracing::error!(job = %id, "releasing the job's resources: {e}");
                        Ending {
                            reason: Some(format!("cleanup failed: {e}")),
                            ..ending
                        }
                    }
                };
                ending
            }
        };
        if let Err(e) = self.transition(
            &id,
            ending.event,
            None,
            ending.exit,
            ending.reason.as_deref(),
        ) {
            tracing::error!(job = %id, "recording the end of the job: {e}");
        }
        self.lock_live().remove(&id);
    }

    /// Prepares and runs the job's process until it ends, is cancelled, or
    /// its deadline passes.
    async fn execute(
        self: &Arc<Self>,
        job: &JobRecord,
        deadline: Instant,
        cancel: &mut watch::Receiver<bool>,
        res: &mut Resources,
    ) -> Result<Ending, ServiceError> {
        let spec = &job.spec;
        let t_begin = Instant::now();
        let mkdir = |dir: &Path| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(format!("creating {}", dir.display())))
        };
        mkdir(&job.work_dir)?;
        if let Some(logs) = job.stdout_log.parent() {
            mkdir(logs)?;
        }
        let prompt_path = self.write_prompt(job)?;
        self.give_to_worker(&job.work_dir)?;

        let run_dir = self.config.state_dir.join("run").join(&job.id);
        mkdir(&run_dir)?;
        res.run_dir = Some(run_dir.clone());
        let control_socket = run_dir.join("control.sock");
        // The socket file is the job's identity; anyone who can reach it (the
        // sandbox it is mounted into) may use it, hence 0666 inside a 0700 dir.
        let listener = super::http::bind(&control_socket, 0o666)
            .map_err(io(format!("binding {}", control_socket.display())))?;
        res.control = Some(tokio::spawn(super::control::serve(
            listener,
            Supervisor {
                inner: self.clone(),
            },
            job.id.clone(),
        )));

        let t_prepared = Instant::now();
        let mut proxy_socket = None;
        if let Some(proxy) = &self.proxy {
            // Recorded before it exists, so a crash in between cannot leak it.
            self.store.set_identity(&job.id, &spec.ticket)?;
            res.identity = Some(spec.ticket.clone());
            let socket = proxy
                .create(&NewIdentity {
                    name: &spec.ticket,
                    rule_sets: &spec.rule_sets,
                    tunnel_hosts: &spec.tunnel_hosts,
                    variables: &spec.variables,
                })
                .await?;
            proxy_socket = Some(socket);
        }

        let mut env: Vec<(String, String)> = self
            .config
            .sandbox_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.push(("GATEHOUSE_JOB".into(), job.id.clone()));
        env.push(("GATEHOUSE_TICKET".into(), spec.ticket.clone()));
        env.push(("GATEHOUSE_PROMPT".into(), prompt_path));
        if let Some(repo) = spec.variables.get("repo") {
            env.push(("GH_REPO".into(), repo.clone()));
        }
        let command = spec
            .command
            .clone()
            .or_else(|| self.config.worker_command.clone())
            .unwrap_or_default();
        if command.is_empty() && self.config.launcher == LauncherKind::DangerouslyUnsandboxed {
            return Err(ServiceError::Io {
                what: "choosing the worker command".into(),
                source: std::io::Error::other(
                    "without a sandbox there is no profile command: set worker.command",
                ),
            });
        }
        let wall_time = deadline.saturating_duration_since(Instant::now());
        let launch = self.launcher.command(&LaunchRequest {
            profile: &spec.profile,
            work_dir: &job.work_dir,
            proxy_socket: proxy_socket.as_deref(),
            control_socket: &control_socket,
            ca_cert: self
                .config
                .proxy
                .as_ref()
                .and_then(|p| p.ca_cert.as_deref()),
            env: &env,
            wall_time,
            command: &command,
        });
        let t_identity = Instant::now();
        let mut cmd = tokio::process::Command::new(&launch.program);
        cmd.args(&launch.args)
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: terminal signals to the supervisor do not
            // reach it, and the group is how stragglers are found and killed.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &launch.cwd {
            cmd.current_dir(cwd);
        }
        // The job dies with the supervisor: SIGKILL when its parent goes
        // (`sandbox run` then takes its whole PID namespace down). The signal
        // is tied to the forking thread; this runs on a tokio worker, which
        // lives as long as the runtime (no `block_in_place` anywhere here).
        let parent = std::process::id();
        // SAFETY: runs in the child between fork and exec; it only makes
        // two async-signal-safe system calls (prctl, getppid) and allocates
        // nothing.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
                // The parent may have died before the prctl: then go now.
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(io(format!("starting {}", launch.program.display())))?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let start = process::start_time(pid).unwrap_or(0);
        res.process = Some((pid, start));
        let cap = self.config.log_cap_bytes;
        if let Some(out) = child.stdout.take() {
            res.logs
                .push(tokio::spawn(copy_capped(out, job.stdout_log.clone(), cap)));
        }
        if let Some(err) = child.stderr.take() {
            res.logs
                .push(tokio::spawn(copy_capped(err, job.stderr_log.clone(), cap)));
        }
        self.transition(&job.id, JobEvent::Started, Some((pid, start)), None, None)?;
        tracing::debug!(
            job = %job.id,
            prepare_us = (t_prepared - t_begin).as_micros() as u64,
            identity_us = (t_identity - t_prepared).as_micros() as u64,
            spawn_us = t_identity.elapsed().as_micros() as u64,
            "job started"
        );

        let stop = tokio::select! {
            biased;
            status = child.wait() => {
                let status = status.map_err(io("waiting for the job's process"))?;
                let (code, signal) = exit_parts(status);
                return Ok(Ending {
                    event: JobEvent::Exited(self.launcher.classify(status)),
                    exit: Some(ExitStatus { code, signal }),
                    reason: None,
                });
            }
            _ = cancel.wait_for(|c| *c) => StopReason::Cancel,
            _ = tokio::time::sleep_until(deadline) => StopReason::Deadline,
        };
        // SIGTERM to the whole group (the `sandbox run` process takes the
        // sandbox down with it), SIGKILL after the grace period. The leader
        // is not reaped yet, so its pid, the group id, cannot be anyone else's.
        let group = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::killpg(group, Signal::SIGTERM);
        let status = match tokio::time::timeout(self.config.cancel_grace, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                let _ = nix::sys::signal::killpg(group, Signal::SIGKILL);
                child.wait().await
            }
        }
        .map_err(io("waiting for the job's process"))?;
        let (code, signal) = exit_parts(status);
        Ok(Ending {
            event: JobEvent::Stopped(stop),
            exit: Some(ExitStatus { code, signal }),
            reason: Some(match stop {
                StopReason::Cancel => "cancelled".into(),
                StopReason::Deadline => "deadline reached".into(),
            }),
        })
    }

    /// Started by root, the sandbox runs the worker as an unprivileged host
    /// user: the work dir (not its contents, which the worker created) and
    /// the prompt files become that user's.
    fn give_to_worker(&self, work_dir: &Path) -> Result<(), ServiceError> {
        if self.config.launcher != LauncherKind::Sandbox || !nix::unistd::geteuid().is_root() {
            return Ok(());
        }
        let user = nix::unistd::User::from_name(WORKER_USER)
            .ok()
            .flatten()
            .ok_or_else(|| ServiceError::Io {
                what: format!("looking up the worker user {WORKER_USER}"),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })?;
        let gatehouse_dir = work_dir.join(".gatehouse");
        for path in [
            work_dir.to_owned(),
            gatehouse_dir.clone(),
            gatehouse_dir.join("prompt.md"),
            gatehouse_dir.join(".gitignore"),
        ] {
            std::os::unix::fs::lchown(&path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
                .map_err(io(format!("giving {} to {WORKER_USER}", path.display())))?;
        }
        Ok(())
    }

    /// Renders the prompt into `.gatehouse/prompt.md` in the work dir and
    /// returns its path relative to the work dir.
    fn write_prompt(&self, job: &JobRecord) -> Result<String, ServiceError> {
        let spec = &job.spec;
        let mut vars: BTreeMap<&str, String> = BTreeMap::new();
        vars.insert("ticket", spec.ticket.clone());
        vars.insert("job", job.id.clone());
        vars.insert("team", spec.team.clone());
        vars.insert(
            "repo",
            spec.variables.get("repo").cloned().unwrap_or_default(),
        );
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(io(format!("reading {}", p.display())));
        let work_path = self.config.prompts_dir.join("work.md");
        let work = render("work.md", &read(&work_path)?, &vars)?;
        let team_path = self
            .config
            .prompts_dir
            .join("team")
            .join(format!("{}.md", spec.team));
        let team = match team_path.exists() {
            true => Some(render(
                &format!("team/{}.md", spec.team),
                &read(&team_path)?,
                &vars,
            )?),
            false => None,
        };
        // The work dir belongs to the worker, which may have planted symlinks
        // here in an earlier job: never follow one (no job of this ticket is
        // running now, so nothing can change between check and create).
        let dir = job.work_dir.join(".gatehouse");
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(&dir).map_err(io(format!("removing {}", dir.display())))?
            }
            Err(_) => {
                std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?
            }
        }
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(io(format!("creating {}", dir.display())))?;
        }
        let prompt = assemble(&work, team.as_deref(), &spec.task);
        // `.gitignore` of `*` keeps the prompt out of the worker's commits.
        for (name, text) in [(".gitignore", "*\n"), ("prompt.md", prompt.as_str())] {
            let path = dir.join(name);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io(format!("removing {}", path.display()))(e))
                }
                _ => {}
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)
                .map_err(io(format!("creating {}", path.display())))?;
            std::io::Write::write_all(&mut file, text.as_bytes())
                .map_err(io(format!("writing {}", path.display())))?;
        }
        Ok(".gatehouse/prompt.md".into())
    }

    /// Releases a job's resources: leftover processes killed, proxy identity
    /// revoked, control socket closed and removed, logs flushed.
    async fn release(&self, job_id: &str, res: Resources) -> Result<(), ServiceError> {
        if let Some((pid, start)) = res.process {
            process::kill_group(pid, start).await;
        }
        let mut result = Ok(());
        if let Some(name) = &res.identity {
            for attempt in 0..3 {
                result = self.revoke(job_id, name).await;
                if result.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
        if let Some(control) = res.control {
            control.abort();
            let _ = control.await;
        }
        if let Some(dir) = &res.run_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        for log in res.logs {
            // The pipes close when the last process holding them dies.
            let _ = tokio::time::timeout(Duration::from_secs(2), log).await;
        }
        result
    }
}

fn deadline_instant(deadline_at_ms: i64) -> Instant {
    let left = deadline_at_ms.saturating_sub(now_ms()).max(0) as u64;
    Instant::now() + Duration::from_millis(left)
}

/// Copies a stream into `path`, keeping at most `cap` bytes and draining the
/// rest so the writer never blocks on a full pipe.
async fn copy_capped(mut from: impl AsyncRead + Unpin, path: PathBuf, cap: u64) {
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .await;
    let mut file = match file {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!("opening log {}: {e}", path.display());
            None
        }
    };
    let mut written: u64 = 0;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Some(f) = file.as_mut() else { continue };
        let room = cap.saturating_sub(written) as usize;
        let take = n.min(room);
        if take > 0 && f.write_all(&buf[..take]).await.is_err() {
            file = None;
            continue;
        }
        written += take as u64;
        if take < n {
            let note = format!("\n[gatehouse: log truncated at {cap} bytes]\n");
            let _ = f.write_all(note.as_bytes()).await;
            let _ = f.flush().await;
            file = None;
        }
    }
    if let Some(mut f) = file {
        let _ = f.flush().await;
    }
}
