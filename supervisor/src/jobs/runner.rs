//! The job runner: one task per job, from a queue slot to its final state.
//!
//! ```text
//! wait for a slot (or cancel / deadline while queued)
//!   → workspace::prepare → control socket → proxy identity → launch
//!   → wait for exit, cancel or deadline (SIGTERM, grace, SIGKILL to the group)
//!   → release: leftover processes killed, identity revoked, socket removed, logs flushed
//!   → final state
//! ```
//!
//! Also recovery at start: what a previous run left behind is killed,
//! revoked and recorded as ended.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::config::{Config, LauncherKind};
use super::http::HttpError;
use super::launcher::{exit_parts, LaunchCommand, LaunchRequest};
use super::logs;
use super::process;
use super::proxy_admin::{identity_for, ProxyAdminError};
use super::service::{io, now_ms, Inner, Recovery, ServiceError, Supervisor};
use super::spec::JobSpec;
use super::state::{JobEvent, StopReason};
use super::store::{ExitStatus, JobRecord};
use super::worker_env::worker_env;
use super::workspace;

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

/// The command to run inside: the job's own, else the configured worker
/// command, else none (the sandbox profile's). Without a sandbox there is
/// no profile, so a command is required.
pub fn worker_command(spec: &JobSpec, config: &Config) -> Result<Vec<String>, ServiceError> {
    let command = spec
        .command
        .clone()
        .or_else(|| config.worker_command.clone())
        .unwrap_or_default();
    if command.is_empty() && config.launcher == LauncherKind::DangerouslyUnsandboxed {
        return Err(ServiceError::Io {
            what: "choosing the worker command".into(),
            source: std::io::Error::other(
                "without a sandbox there is no profile command: set worker.command",
            ),
        });
    }
    Ok(command)
}

/// Why a stopped job ended, as its `reason`.
fn stop_reason_text(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Cancel => "cancelled",
        StopReason::Deadline => "deadline reached",
    }
}

/// The first wait before asking an unreachable proxy again, and the longest.
const PROXY_RETRY_FIRST: Duration = Duration::from_millis(250);
const PROXY_RETRY_MAX: Duration = Duration::from_secs(5);

/// How often the store is looked at for revocations to retry, and the
/// longest wait while they keep failing.
const REVOKE_RETRY_FIRST: Duration = Duration::from_secs(5);
const REVOKE_RETRY_MAX: Duration = Duration::from_secs(60);

fn deadline_instant(deadline_at_ms: i64) -> Instant {
    let left = deadline_at_ms.saturating_sub(now_ms()).max(0) as u64;
    Instant::now() + Duration::from_millis(left)
}

impl Inner {
    /// Kills what a previous run left behind: live jobs end `failed` (or
    /// `cancelled` if a cancel was requested), their processes are killed,
    /// their identities revoked, their control sockets removed.
    pub(super) async fn recover(self: &Arc<Self>) -> Result<Recovery, ServiceError> {
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
            self.transition(&job.id, event, None, None, Some(super::store::LOST_REASON))?;
            recovery.jobs_failed.push(job.id);
        }
        // Identities of ended jobs whose revocation did not complete.
        for job in self.store.unrevoked_identities()? {
            if let Some(name) = &job.identity {
                self.revoke(&job.id, name).await?;
                recovery.identities_revoked.push(name.clone());
            }
        }
        // Control socket dirs of jobs that ended with the last run; nothing
        // else in the run dir is the supervisor's to remove.
        if let Ok(entries) = std::fs::read_dir(&self.config.run_dir) {
            for e in entries.flatten() {
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if is_dir && e.file_name().to_str().is_some_and(is_job_id) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        // Work dir images a crash left half-made (the finished ones are the
        // tickets' data, mounted again by their next job).
        let partial = crate::workdir_fs::sweep(&self.config.state_dir.join("tickets"));
        if partial > 0 {
            tracing::info!(partial, "removed half-made work dir images");
        }
        Ok(recovery)
    }

    /// Retries, with backoff, the revocations that did not complete (the
    /// proxy down longer than a job's release waited, or unable to make
    /// the revocation durable): each ended job's identity stays in the
    /// store until the proxy confirms it gone. Ends with the supervisor.
    pub(super) async fn retry_revocations(inner: std::sync::Weak<Self>) {
        let mut wait = REVOKE_RETRY_FIRST;
        loop {
            tokio::time::sleep(wait).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            wait = match inner.revoke_unrevoked().await {
                Ok(()) => REVOKE_RETRY_FIRST,
                Err(e) => {
                    tracing::warn!("revoking the identities of ended jobs: {e}");
                    (wait * 2).min(REVOKE_RETRY_MAX)
                }
            };
        }
    }

    /// Revokes the identities of ended jobs still held in the store.
    async fn revoke_unrevoked(&self) -> Result<(), ServiceError> {
        let mut result = Ok(());
        for job in self.store.unrevoked_identities()? {
            if let Some(name) = &job.identity {
                match self.revoke(&job.id, name).await {
                    Ok(()) => {
                        tracing::info!(job = %job.id, identity = %name, "identity revoked on retry")
                    }
                    Err(e) => result = Err(e),
                }
            }
        }
        result
    }

    async fn revoke(&self, job_id: &str, name: &str) -> Result<(), ServiceError> {
        if let Some(proxy) = &self.proxy {
            proxy.revoke(name).await?;
        }
        self.store.clear_identity(job_id)?;
        Ok(())
    }

    pub(super) async fn run_job(
        self: Arc<Self>,
        job: JobRecord,
        mut cancel: watch::Receiver<bool>,
    ) {
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
            Some(_) => self.run_with_slot(&job, deadline, &mut cancel).await,
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
        self.remove_live(&id);
    }

    /// Runs the job in the slot it holds, then releases its resources.
    async fn run_with_slot(
        self: &Arc<Self>,
        job: &JobRecord,
        deadline: Instant,
        cancel: &mut watch::Receiver<bool>,
    ) -> Ending {
        let mut res = Resources::default();
        let ending = match self.execute(job, deadline, cancel, &mut res).await {
            Ok(ending) => ending,
            Err(e) => Ending {
                event: JobEvent::LaunchFailed,
                exit: None,
                reason: Some(format!("launch failed: {e}")),
            },
        };
        match self.release(&job.id, res).await {
            Ok(()) => ending,
            Err(e) => {
                tracing::error!(job = %job.id, "releasing the job's resources: {e}");
                Ending {
                    reason: Some(format!("cleanup failed: {e}")),
                    ..ending
                }
            }
        }
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
        let prompt_path = workspace::prepare(&self.config, job)?;
        let control_socket = self.open_control(job, res)?;
        let t_prepared = Instant::now();
        // The proxy may be down (restarting): the job waits for it, until a
        // cancel or its deadline.
        let proxy_socket = tokio::select! {
            created = self.create_identity(job, res) => created?,
            _ = cancel.wait_for(|c| *c) => return Ok(Ending {
                event: JobEvent::Stopped(StopReason::Cancel),
                exit: None,
                reason: Some("cancelled while waiting for the proxy".into()),
            }),
            _ = tokio::time::sleep_until(deadline) => return Ok(Ending {
                event: JobEvent::Stopped(StopReason::Deadline),
                exit: None,
                reason: Some("deadline reached while waiting for the proxy".into()),
            }),
        };
        // Absolute, as the worker sees it: valid whatever its directory.
        let prompt_path = self
            .launcher
            .work_dir_inside(&job.work_dir)
            .join(prompt_path);
        let env = worker_env(
            &self.config.sandbox_env,
            &job.id,
            spec,
            &prompt_path.display().to_string(),
        );
        let command = worker_command(spec, &self.config)?;
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
        let mut child = spawn(&launch)?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let start = process::start_time(pid).unwrap_or(0);
        res.process = Some((pid, start));
        res.logs = logs::capture(
            &mut child,
            job.stdout_log.clone(),
            job.stderr_log.clone(),
            self.config.log_cap_bytes,
        );
        self.transition(&job.id, JobEvent::Started, Some((pid, start)), None, None)?;
        let _live = super::metrics::LiveSandbox::started(t_begin.elapsed());
        tracing::debug!(
            job = %job.id,
            prepare_us = (t_prepared - t_begin).as_micros() as u64,
            identity_us = (t_identity - t_prepared).as_micros() as u64,
            spawn_us = t_identity.elapsed().as_micros() as u64,
            "job started"
        );
        self.wait_for_end(child, pid, deadline, cancel).await
    }

    /// Binds the job's control socket in its run dir and serves it.
    fn open_control(
        self: &Arc<Self>,
        job: &JobRecord,
        res: &mut Resources,
    ) -> Result<PathBuf, ServiceError> {
        let run_dir = self.config.run_dir.join(&job.id);
        workspace::mkdir_private(&run_dir)?;
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
        Ok(control_socket)
    }

    /// Creates the job's proxy identity, when a proxy is configured, and
    /// returns its socket.
    async fn create_identity(
        &self,
        job: &JobRecord,
        res: &mut Resources,
    ) -> Result<Option<PathBuf>, ServiceError> {
        let Some(proxy) = &self.proxy else {
            return Ok(None);
        };
        let spec = &job.spec;
        let identity = identity_for(spec).map_err(ProxyAdminError::from)?;
        // Recorded before it exists, so a crash in between cannot leak it.
        self.store.set_identity(&job.id, &spec.ticket)?;
        res.identity = Some(spec.ticket.clone());
        let mut wait = PROXY_RETRY_FIRST;
        let mut logged = false;
        loop {
            match proxy.create(&identity).await {
                // Unreachable, or cut mid-call (a retry that finds the
                // identity made revokes and makes it again).
                Err(ProxyAdminError::Http(
                    e @ (HttpError::Connect { .. } | HttpError::Exchange { .. }),
                )) => {
                    if !logged {
                        tracing::warn!(job = %job.id, error = %e,
                            "the proxy's admin socket does not answer; the job waits for it");
                        logged = true;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(PROXY_RETRY_MAX);
                }
                created => return Ok(Some(created?)),
            }
        }
    }

    /// Waits until the process exits, or stops it on cancel or deadline:
    /// SIGTERM to the whole group (the `sandbox run` process takes the
    /// sandbox down with it), SIGKILL after the grace period.
    async fn wait_for_end(
        &self,
        mut child: Child,
        pid: i32,
        deadline: Instant,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Ending, ServiceError> {
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
        // The leader is not reaped yet, so its pid, the group id, cannot be
        // anyone else's.
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
            reason: Some(stop_reason_text(stop).into()),
        })
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

/// Spawns the launch command: a clean environment, stdin closed, stdout
/// and stderr piped for the logs, in its own process group, killed if the
/// supervisor dies.
fn spawn(launch: &LaunchCommand) -> Result<Child, ServiceError> {
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
    crate::sandbox::sys::fork::die_with_parent(&mut cmd);
    cmd.spawn()
        .map_err(io(format!("starting {}", launch.program.display())))
}

#[cfg(test)]
mod tests;

/// A job's id, as `new_id("job_")` makes them: `job_` and 16 hex digits.
fn is_job_id(name: &str) -> bool {
    name.strip_prefix("job_")
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod run_dir_tests {
    use super::is_job_id;

    #[test]
    fn only_job_dirs_are_swept() {
        assert!(is_job_id("job_0123456789abcdef"));
        for other in [
            "job_0123456789abcde",
            "job_0123456789abcdefa",
            "job_0123456789abcdeg",
            "jobs",
            "bin",
            "supervisor.sock",
            "proxy",
            "",
        ] {
            assert!(!is_job_id(other), "{other}");
        }
    }
}
