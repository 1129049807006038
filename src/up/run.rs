//! Starting and watching the three processes. Each is spawned (never
//! forked from this process's threads) as `gatehouse-services <part> …`,
//! in its own process group, under its own user with supplementary groups
//! dropped (std sets the gid, clears the groups, then sets the uid) and
//! with a cleared environment. Each part's output goes to its log file,
//! opened here and inherited: the part writes to a descriptor it could not
//! open itself.
//!
//! A watcher thread restarts a part that dies, after the [`Backoff`]
//! delay; [`Running::stop`] stops them in reverse order, each with a grace
//! period before SIGKILL.
//!
//! Each part gets SIGKILL if `up` dies, even by `kill -9` (the parent-death
//! signal). That signal fires when the *thread* that forked the child ends,
//! so one spawner thread forks every part, first starts and restarts alike,
//! and lives until the last part is reaped. A lock on `<state_dir>/up.lock`
//! (holding the pid) keeps a second `up` from fighting the first over the
//! same state.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::access::{self, Who};
use super::check::Prepared;
use super::layout::{DirSpec, Owner};
use super::schedule::{start_order, stop_order, Backoff, Part};
use super::UpError;

/// The `PATH` each part gets; nothing else of `up`'s environment passes
/// but `RUST_LOG`.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How `up` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which parts to start (normally all: the long-connection client only
    /// where it is configured).
    pub parts: Vec<Part>,
    /// `gatehouse-services`; defaults to the one next to the running
    /// executable.
    pub services: Option<PathBuf>,
    pub backoff: Backoff,
    /// How long a part may take to open its sockets.
    pub ready_timeout: Duration,
    /// SIGTERM, then SIGKILL after this (the supervisor's own shutdown
    /// cancels live jobs: give it their grace and more).
    pub grace: Duration,
    /// How the parts write their logs (`--log-format`).
    pub log_format: crate::logging::LogFormat,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            parts: Part::ALL.to_vec(),
            services: None,
            backoff: Backoff::default(),
            ready_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(15),
            log_format: crate::logging::LogFormat::default(),
        }
    }
}

/// What it takes to run one part.
#[derive(Debug, Clone)]
struct ChildSpec {
    part: Part,
    program: PathBuf,
    args: Vec<OsString>,
    /// `None`: as `up` itself.
    user: Option<Who>,
    env: Vec<(OsString, OsString)>,
    ready: Vec<Ready>,
    log: PathBuf,
}

/// A sign that a part serves.
#[derive(Debug, Clone)]
enum Ready {
    Unix(PathBuf),
    Tcp(SocketAddr),
    /// A socket that serves one peer only (the Feishu hand-off): that it
    /// is bound is the sign; a probe would be refused and logged.
    Bound(PathBuf),
}

struct Slot {
    spec: ChildSpec,
    child: Option<Child>,
    started: Instant,
    failures: u32,
    restart_at: Option<Instant>,
    restarts: u32,
}

struct Shared {
    slots: Mutex<Vec<Slot>>,
    stopping: AtomicBool,
    spawner: Spawner,
}

impl Shared {
    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A part to start, and where to say how it went.
type SpawnRequest = (ChildSpec, mpsc::Sender<Result<Child, UpError>>);

/// The one thread that forks the parts (see the module doc): it serves
/// requests until [`Spawner::close`], after the parts were reaped.
struct Spawner {
    requests: Mutex<Option<mpsc::Sender<SpawnRequest>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Spawner {
    fn start() -> Result<Spawner, UpError> {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let thread = std::thread::Builder::new()
            .name("gatehouse-up-spawn".into())
            .spawn(move || {
                for (spec, answer) in rx {
                    let _ = answer.send(spawn(&spec));
                }
            })
            .map_err(|e| UpError::Start {
                part: "up",
                message: format!("starting the spawner thread: {e}"),
            })?;
        Ok(Spawner {
            requests: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    fn spawn(&self, spec: &ChildSpec) -> Result<Child, UpError> {
        let gone = || UpError::Start {
            part: spec.part.name(),
            message: "the spawner thread is gone".into(),
        };
        let (tx, rx) = mpsc::channel();
        let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests
            .as_ref()
            .ok_or_else(gone)?
            .send((spec.clone(), tx))
            .map_err(|_| gone())?;
        drop(requests);
        rx.recv().map_err(|_| gone())?
    }

    /// Ends the thread; call only once no part runs (its end kills them).
    fn close(&self) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// How a part ended at [`Running::stop`].
#[derive(Debug)]
pub struct Stopped {
    pub part: Part,
    /// `None` when it was not running (between a death and its restart).
    pub status: Option<ExitStatus>,
    /// Whether it outlived the grace period and was killed.
    pub killed: bool,
}

/// The running parts.
pub struct Running {
    shared: Arc<Shared>,
    watcher: Option<std::thread::JoinHandle<()>>,
    grace: Duration,
    stopped: bool,
    /// Held while `up` runs; closing it (at drop, after the stop) unlocks.
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Prepares the directories, writes the three configs and starts the parts
/// in order, each once the one before serves; then watches them.
pub fn start(prepared: &Prepared, options: Options) -> Result<Running, UpError> {
    let lock = lock_state(&prepared.layout.state_dir)?;
    install(prepared)?;
    let services = match &options.services {
        Some(p) => p.clone(),
        None => {
            crate::binaries::sibling(crate::binaries::SERVICES).map_err(|e| UpError::Start {
                part: "up",
                message: format!("{e:#}"),
            })?
        }
    };
    let shared = Arc::new(Shared {
        slots: Mutex::new(Vec::new()),
        stopping: AtomicBool::new(false),
        spawner: Spawner::start()?,
    });
    let mut running = Running {
        shared: shared.clone(),
        watcher: None,
        grace: options.grace,
        stopped: false,
        _lock: lock,
    };
    // The long-connection client runs only where it is configured.
    let configured: Vec<Part> = options
        .parts
        .iter()
        .copied()
        .filter(|p| *p != Part::FeishuConnect || prepared.layout.handoff_socket().is_some())
        .collect();
    for part in start_order(&configured) {
        let spec = child_spec(prepared, part, &services, options.log_format);
        // On failure `running` is dropped, which stops what started.
        let mut child = shared.spawner.spawn(&spec)?;
        if let Err(e) = wait_ready(&mut child, &spec, options.ready_timeout) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        tracing::info!(part = part.name(), pid = child.id(), "started");
        shared.slots().push(Slot {
            spec,
            child: Some(child),
            started: Instant::now(),
            failures: 0,
            restart_at: None,
            restarts: 0,
        });
    }
    let backoff = options.backoff;
    let watcher = std::thread::Builder::new()
        .name("gatehouse-up-watch".into())
        .spawn(move || watch(&shared, backoff))
        .map_err(|e| UpError::Start {
            part: "up",
            message: format!("starting the watcher thread: {e}"),
        })?;
    running.watcher = Some(watcher);
    Ok(running)
}

impl Running {
    /// The pid of `part` now, if it runs.
    pub fn pid(&self, part: Part) -> Option<u32> {
        self.shared
            .slots()
            .iter()
            .find(|s| s.spec.part == part)
            .and_then(|s| s.child.as_ref().map(Child::id))
    }

    /// How many times `part` was restarted.
    pub fn restarts(&self, part: Part) -> u32 {
        self.shared
            .slots()
            .iter()
            .find(|s| s.spec.part == part)
            .map_or(0, |s| s.restarts)
    }

    /// Stops every part in reverse start order, each with SIGTERM and, past
    /// the grace period, SIGKILL. Returns how each ended.
    pub fn stop(mut self) -> Vec<Stopped> {
        self.stop_all()
    }

    fn stop_all(&mut self) -> Vec<Stopped> {
        if self.stopped {
            return Vec::new();
        }
        self.stopped = true;
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        let mut slots = self.shared.slots();
        let parts: Vec<Part> = slots.iter().map(|s| s.spec.part).collect();
        let mut report = Vec::new();
        for part in stop_order(&parts) {
            let Some(slot) = slots.iter_mut().find(|s| s.spec.part == part) else {
                continue;
            };
            let (status, killed) = match slot.child.take() {
                Some(child) => terminate(child, self.grace),
                None => (None, false),
            };
            tracing::info!(part = part.name(), ?status, killed, "stopped");
            report.push(Stopped {
                part,
                status,
                killed,
            });
        }
        drop(slots);
        self.shared.spawner.close();
        report
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// SIGTERM, wait up to `grace`, then SIGKILL.
fn terminate(mut child: Child, grace: Duration) -> (Option<ExitStatus>, bool) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return (Some(status), false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    (child.wait().ok(), true)
}

/// The watcher: reaps a part that died and restarts it after its backoff.
fn watch(shared: &Shared, backoff: Backoff) {
    while !shared.stopping.load(Ordering::SeqCst) {
        let now = Instant::now();
        for slot in shared.slots().iter_mut() {
            if let Some(child) = &mut slot.child {
                if let Ok(Some(status)) = child.try_wait() {
                    slot.child = None;
                    if gives_up(slot.spec.part, status) {
                        tracing::error!(
                            part = slot.spec.part.name(),
                            %status,
                            log = %slot.spec.log.display(),
                            "refused its configuration; not restarted (fix it, then restart gatehouse up)"
                        );
                        slot.restart_at = None;
                        continue;
                    }
                    slot.failures = backoff.failures_after(slot.failures, now - slot.started);
                    let delay = backoff.delay(slot.failures);
                    tracing::warn!(
                        part = slot.spec.part.name(),
                        %status,
                        failures = slot.failures,
                        restart_in_ms = delay.as_millis() as u64,
                        "died; restarting"
                    );
                    slot.restart_at = Some(now + delay);
                }
            } else if slot.restart_at.is_some_and(|at| at <= now) {
                slot.started = now;
                match shared.spawner.spawn(&slot.spec) {
                    Ok(child) => {
                        tracing::info!(part = slot.spec.part.name(), pid = child.id(), "restarted");
                        slot.child = Some(child);
                        slot.restart_at = None;
                        slot.restarts += 1;
                    }
                    Err(e) => {
                        slot.failures = slot.failures.saturating_add(1);
                        let delay = backoff.delay(slot.failures);
                        tracing::warn!(part = slot.spec.part.name(), error = %e, "restart failed");
                        slot.restart_at = Some(now + delay);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether a part's end is one restarting cannot mend: the long-connection
/// client whose app id or secret Feishu refused.
fn gives_up(part: Part, status: ExitStatus) -> bool {
    part == Part::FeishuConnect
        && status.code() == Some(i32::from(crate::cli::intake::EXIT_REFUSED))
}

fn child_spec(
    prepared: &Prepared,
    part: Part,
    services: &Path,
    log_format: crate::logging::LogFormat,
) -> ChildSpec {
    let layout = &prepared.layout;
    let users = &prepared.users;
    let with_config = |command: &[&str], config: &Path| -> Vec<OsString> {
        command
            .iter()
            .map(OsString::from)
            .chain(["--config".into(), config.as_os_str().to_owned()])
            .collect()
    };
    let (mut args, user, ready): (Vec<OsString>, Option<Who>, Vec<Ready>) = match part {
        Part::Proxy => (
            with_config(&["proxy"], &layout.proxy_toml),
            users.separated().then(|| users.proxy()),
            std::iter::once(Ready::Unix(layout.admin_socket.clone()))
                .chain(
                    layout
                        .router_identities
                        .iter()
                        .map(|i| Ready::Unix(i.socket.clone())),
                )
                .collect(),
        ),
        Part::Supervisor => (
            with_config(&["supervisor"], &layout.supervisor_toml),
            None,
            vec![Ready::Unix(layout.jobs_socket.clone())],
        ),
        Part::Router => (
            with_config(&["router", "run"], &layout.router_toml),
            users.separated().then(|| users.router()),
            prepared
                .file
                .github
                .iter()
                .map(|g| Ready::Tcp(g.listen))
                .chain(
                    prepared
                        .file
                        .feishu
                        .iter()
                        .filter_map(|f| f.listen.map(Ready::Tcp)),
                )
                .chain(layout.handoff_socket().map(|s| Ready::Bound(s.to_owned())))
                .collect(),
        ),
        // It serves nothing: it is up once it runs (it logs its
        // connection; a refused app secret ends it with EXIT_REFUSED, which
        // the watcher reports and does not restart).
        Part::FeishuConnect => (
            connect_args(prepared),
            users.separated().then(|| users.proxy()),
            Vec::new(),
        ),
    };
    args.extend(["--log-format".into(), log_format.as_arg().into()]);
    let mut env: Vec<(OsString, OsString)> = vec![("PATH".into(), CHILD_PATH.into())];
    if let Some(filter) = std::env::var_os("RUST_LOG") {
        env.push(("RUST_LOG".into(), filter));
    }
    ChildSpec {
        part,
        program: services.to_owned(),
        args,
        user,
        env,
        ready,
        log: layout.logs_dir.join(format!("{}.log", part.name())),
    }
}

/// `intake feishu-connect`'s arguments: the app's `feishu_app` credential
/// (its secret as a file name, never the secret), the router's hand-off
/// socket, and an `[upstream]` override's address and CA when Feishu is
/// emulated. [`super::check::prepare`] refused a config without them, so
/// their absence here only leaves the flags out.
fn connect_args(prepared: &Prepared) -> Vec<OsString> {
    let file = &prepared.file;
    let mut args: Vec<OsString> = vec!["intake".into(), "feishu-connect".into()];
    let Some(feishu) = &file.feishu else {
        return args;
    };
    args.extend(["--app-id".into(), feishu.app_id.clone().into()]);
    if let Some(app) = file.feishu_app(&feishu.app_id) {
        args.extend([
            "--app-secret-file".into(),
            app.app_secret_file.as_os_str().to_owned(),
            "--base-url".into(),
            app.base_url.into(),
        ]);
        if let Ok(Some((addr, ca))) = file.long_connection_target(app.base_url) {
            args.extend(["--connect-to".into(), addr.to_string().into()]);
            if let Some(ca) = ca {
                args.extend(["--ca-file".into(), ca.as_os_str().to_owned()]);
            }
        }
    }
    if let Some(socket) = prepared.layout.handoff_socket() {
        args.extend([
            "--handoff".into(),
            socket.as_os_str().to_owned(),
            "--router-uid".into(),
            prepared.users.router().uid.to_string().into(),
        ]);
    }
    args
}

fn spawn(spec: &ChildSpec) -> Result<Child, UpError> {
    let err = |message: String| UpError::Start {
        part: spec.part.name(),
        message,
    };
    let log = std::fs::OpenOptions::new()
        .mode(0o600)
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| err(format!("opening its log {}: {e}", spec.log.display())))?;
    let log2 = log
        .try_clone()
        .map_err(|e| err(format!("duplicating the log descriptor: {e}")))?;
    let mut command = Command::new(&spec.program);
    command
        .arg0("gatehouse")
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own group: a Ctrl-C at the terminal reaches `up` alone, which
        // then stops the parts in order.
        .process_group(0);
    // ...and a `kill -9` of `up` takes them with it.
    gatehouse_supervisor::sandbox::die_with_parent(&mut command);
    // The supervisor stays root, bounded to what building sandboxes needs
    // (the same set as its systemd unit).
    if spec.part == Part::Supervisor && nix::unistd::geteuid().is_root() {
        gatehouse_supervisor::sandbox::bound_capabilities(
            &mut command,
            &gatehouse_supervisor::sandbox::SUPERVISOR_CAPABILITIES,
        );
    }
    if let Some(who) = spec.user {
        // std sets the gid, drops supplementary groups (setgroups(0)), then
        // sets the uid.
        command.gid(who.gid).uid(who.uid);
    }
    command
        .spawn()
        .map_err(|e| err(format!("spawning {}: {e}", spec.program.display())))
}

/// Takes `<state_dir>/up.lock` (created, with `up`'s pid in it), or says
/// which `up` holds it. The lock is the kernel's (flock): it goes with the
/// process that held it, however that process ended.
fn lock_state(state_dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, UpError> {
    use std::io::{Seek, Write};
    let path = state_dir.join("up.lock");
    let io = |what: &str, e: std::io::Error| UpError::Io {
        what: format!("{what} {}", path.display()),
        source: e,
    };
    std::fs::create_dir_all(state_dir).map_err(|e| io("creating the directory of", e))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(|e| io("opening", e))?;
    let mut file = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
    {
        Ok(locked) => locked,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(UpError::Start {
                part: "up",
                message: format!(
                    "another gatehouse up (pid {}) runs on the state directory {}: stop it first",
                    holder.trim(),
                    state_dir.display()
                ),
            });
        }
        Err((_, e)) => return Err(io("locking", std::io::Error::from(e))),
    };
    file.set_len(0).map_err(|e| io("writing", e))?;
    file.rewind().map_err(|e| io("writing", e))?;
    writeln!(file, "{}", std::process::id()).map_err(|e| io("writing", e))?;
    Ok(file)
}

/// Waits until every socket of `spec` accepts a connection; fails when the
/// child exits first or the time is up, with the tail of its log.
fn wait_ready(child: &mut Child, spec: &ChildSpec, timeout: Duration) -> Result<(), UpError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(UpError::Start {
                part: spec.part.name(),
                message: format!("exited ({status}) while starting:\n{}", log_tail(&spec.log)),
            });
        }
        if spec.ready.iter().all(serves) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(UpError::Start {
                part: spec.part.name(),
                message: format!(
                    "did not open its sockets within {} s:\n{}",
                    timeout.as_secs(),
                    log_tail(&spec.log)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn serves(ready: &Ready) -> bool {
    match ready {
        Ready::Unix(path) => std::os::unix::net::UnixStream::connect(path).is_ok(),
        Ready::Tcp(addr) => {
            std::net::TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_ok()
        }
        Ready::Bound(path) => {
            use std::os::unix::fs::FileTypeExt;
            std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
        }
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The directories (owners, modes) and the three configs: what the parts
/// need before they start, whoever starts them (`up`, or systemd units
/// after `gatehouse config write`).
pub fn install(prepared: &Prepared) -> Result<(), UpError> {
    make_dirs(prepared)?;
    write_configs(prepared)
}

/// Creates the layout's directories with their owners and modes, then
/// checks that each part can reach its own.
fn make_dirs(prepared: &Prepared) -> Result<(), UpError> {
    let users = &prepared.users;
    let who = |o: Owner| match o {
        Owner::Up => users.up(),
        Owner::Proxy => users.proxy(),
        Owner::Router => users.router(),
    };
    for DirSpec {
        path,
        owner,
        group,
        mode,
    } in prepared.layout.dirs()
    {
        let io = |what: &str, e: std::io::Error| UpError::Io {
            what: format!("{what} {}", path.display()),
            source: e,
        };
        std::fs::create_dir_all(&path).map_err(|e| io("creating", e))?;
        if users.separated() {
            std::os::unix::fs::chown(&path, Some(who(owner).uid), Some(who(group).gid))
                .map_err(|e| io("chown", e))?;
        }
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(|e| io("chmod", e))?;
        let (above, _) = access::walk(&path).map_err(|e| io("reading", e))?;
        for o in [owner, group] {
            let w = who(o);
            if !above.iter().all(|d| access::may(*d, w, 1)) {
                return Err(UpError::Invalid {
                    file: prepared.config_path.clone(),
                    key: if path.starts_with(&prepared.layout.run_dir) {
                        "run_dir"
                    } else {
                        "state_dir"
                    }
                    .into(),
                    message: format!(
                        "uid {} cannot reach {}: a directory above it is closed to that user",
                        w.uid,
                        path.display()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Writes the three configs (0644: paths only, no secret), each by rename
/// so a part never reads a half-written file.
fn write_configs(prepared: &Prepared) -> Result<(), UpError> {
    let l = &prepared.layout;
    let g = &prepared.generated;
    for (path, text) in [
        (&l.proxy_toml, &g.proxy),
        (&l.supervisor_toml, &g.supervisor),
        (&l.router_toml, &g.router),
    ] {
        let tmp = path.with_extension("toml.new");
        let io = |e| UpError::Io {
            what: format!("writing {}", path.display()),
            source: e,
        };
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
    }
    Ok(())
}
