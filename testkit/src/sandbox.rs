//! Sandboxes for the end-to-end tests: a shell snippet in a real `gatehouse
//! sandbox run`, as root and rootless (dropping to the test user), with its
//! status, stdout and stderr; a fake proxy socket.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::machine::{is_root, user_gid, user_uid, TEST_USER, WORKER_USER};
use crate::skip::{self, Need};

/// `sandbox run`'s status when the sandbox could not be built.
pub const EXIT_SANDBOX_FAILED: i32 = 125;
/// `sandbox run`'s status when the wall-time limit ended the sandbox.
pub const EXIT_WALL_TIME: i32 = 124;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Started by root: the worker is `gatehouse-worker` on the host.
    Root,
    /// Started by an unprivileged user through a user namespace (as root:
    /// by the test user, through setpriv).
    Rootless,
}

impl Mode {
    /// What this machine needs to test the mode.
    pub fn needs(self) -> &'static [Need] {
        match (self, is_root()) {
            (Mode::Root, _) => &[Need::Root, Need::Sandbox],
            (Mode::Rootless, true) => &[Need::SandboxAsTestUser],
            (Mode::Rootless, false) => &[Need::Sandbox],
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Root => "root mode",
            Mode::Rootless => "rootless mode",
        }
    }
}

/// Whether the running test can test `mode` here; reports the skip (or,
/// strict, fails) when not.
pub fn mode_available(mode: Mode) -> bool {
    let test = format!("{} ({})", skip::current_test(), mode.label());
    skip::available(&test, mode.needs())
}

/// The modes the running test exercises: both, less those this machine
/// lacks (each reported as a skip).
pub fn modes() -> Vec<Mode> {
    [Mode::Root, Mode::Rootless]
        .into_iter()
        .filter(|m| mode_available(*m))
        .collect()
}

/// One mode, for a test that needs a sandbox but not a particular mode:
/// root when the machine can, else rootless; `None` (a reported skip) when
/// it can neither.
pub fn any_mode() -> Option<Mode> {
    let quiet = |m: Mode| m.needs().iter().all(|n| n.missing().is_none());
    match [Mode::Root, Mode::Rootless].into_iter().find(|m| quiet(*m)) {
        Some(m) => Some(m),
        None => modes().first().copied(),
    }
}

/// A test's scratch space: a world-traversable base dir with the work dir
/// (owned by whoever the worker is) and anything the test plants outside.
pub struct Scratch {
    pub mode: Mode,
    pub base: tempfile::TempDir,
    pub work: PathBuf,
    bin: PathBuf,
}

impl Scratch {
    pub fn new(mode: Mode) -> Scratch {
        let base = reachable_dir("gatehouse-sbx-");
        let work = base.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let bin = gatehouse_for(mode, base.path());
        let s = Scratch {
            mode,
            base,
            work,
            bin,
        };
        s.give_to_worker(&s.work);
        s
    }

    /// The host uid the worker runs as in this mode.
    pub fn worker_uid(&self) -> Option<u32> {
        match self.mode {
            Mode::Root => user_uid(WORKER_USER),
            Mode::Rootless if is_root() => user_uid(TEST_USER),
            Mode::Rootless => None,
        }
    }

    /// chown a path to the worker's host user (when we are root).
    pub fn give_to_worker(&self, path: &Path) {
        if !is_root() {
            return;
        }
        let user = match self.mode {
            Mode::Root => WORKER_USER,
            Mode::Rootless => TEST_USER,
        };
        let uid = user_uid(user).unwrap();
        let gid = user_gid(user).unwrap();
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.base.path().join(rel)
    }

    /// Writes a profile file in the base dir and returns its path.
    pub fn profile(&self, name: &str, toml: &str) -> PathBuf {
        let p = self.path(&format!("{name}.toml"));
        std::fs::write(&p, toml).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }

    /// The `gatehouse` binary this scratch runs.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `program` (found on PATH or a path), run as this mode's caller, in
    /// the scratch's base dir.
    pub fn command_as_caller(&self, program: &str) -> Command {
        let mut c = match (self.mode, is_root()) {
            (Mode::Rootless, true) => as_test_user(Path::new(program)),
            _ => Command::new(program),
        };
        c.current_dir(self.base.path());
        c
    }

    /// `gatehouse` with `args`, as this mode's caller.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = match (self.mode, is_root()) {
            (Mode::Rootless, true) => as_test_user(&self.bin),
            _ => Command::new(&self.bin),
        };
        c.args(args);
        c.current_dir(self.base.path());
        c
    }

    /// Runs `sh -c script` in a sandbox with the given profile and extra
    /// `sandbox run` flags.
    pub fn sh_with(&self, profile: &str, flags: &[&str], script: &str) -> Run {
        let work = self.work.to_str().unwrap().to_string();
        let mut args = vec!["sandbox", "run", "--profile", profile, "--workdir", &work];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        let out = self.command(&args).stdin(Stdio::null()).output().unwrap();
        Run::from(out)
    }

    pub fn sh(&self, script: &str) -> Run {
        self.sh_with("default", &[], script)
    }
}

/// The binary as the given mode's caller can execute it: rootless callers
/// may not traverse the build directory, so then it is copied.
fn gatehouse_for(mode: Mode, base: &Path) -> PathBuf {
    let bin = crate::bin::gatehouse();
    if mode == Mode::Root || !is_root() {
        return bin;
    }
    static REACHABLE: OnceLock<bool> = OnceLock::new();
    let reachable = *REACHABLE.get_or_init(|| {
        as_test_user(Path::new("test"))
            .arg("-x")
            .arg(&bin)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    });
    if reachable {
        return bin;
    }
    crate::bin::copy_to(base)
}

/// `program` run as the test user (this process must be root).
pub fn as_test_user(program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        TEST_USER,
        "--regid",
        TEST_USER,
        "--clear-groups",
        "--",
    ]);
    c.arg(program);
    c
}

/// A temporary directory every user may traverse (0755), for files another
/// user must reach.
pub fn reachable_dir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    #[track_caller]
    pub fn ok(&self) -> &Run {
        assert_eq!(self.code, Some(0), "sandbox run failed: {self:#?}");
        self
    }
}

/// A unix-socket HTTP server standing in for the proxy: answers every
/// request with 200 and the request line it saw. Stops when dropped.
pub struct FakeProxy {
    pub path: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeProxy {
    pub fn start(path: PathBuf) -> FakeProxy {
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // The relay connects as the worker's host user.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 1024];
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match crate::proxy::raw::read_some(&mut conn, &mut chunk) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let head = String::from_utf8_lossy(&buf);
                        let line = head.lines().next().unwrap_or("").to_string();
                        let body = format!("fake proxy saw: {line}\n");
                        let _ = write!(
                            conn,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        });
        FakeProxy {
            path,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A world-traversable temp dir outside /tmp, for paths a profile binds.
pub fn outside_tmp() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("gatehouse-sbx-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}
