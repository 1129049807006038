//! Helpers for the sandbox end-to-end tests: run a shell snippet in a real
//! sandbox, as root and rootless (dropping to the `gatehouse-test` user),
//! and collect status, stdout and stderr.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub const TEST_USER: &str = "gatehouse-test";
pub const WORKER_USER: &str = "gatehouse-worker";
pub const EXIT_SANDBOX_FAILED: i32 = 125;
pub const EXIT_WALL_TIME: i32 = 124;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Started by root: the worker is `gatehouse-worker` on the host.
    Root,
    /// Started by an unprivileged user through a user namespace.
    Rootless,
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .map(|l| l.split_whitespace().nth(2) == Some("0"))
        .unwrap()
}

fn user_id(name: &str, flag: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, name]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The modes this machine can test. Rootless as root needs the test user;
/// its absence is loud, never silent.
pub fn modes() -> Vec<Mode> {
    if !is_root() {
        eprintln!("NOTE: not root: only the rootless sandbox is tested here (CI runs both)");
        return vec![Mode::Rootless];
    }
    let mut m = vec![Mode::Root];
    if user_id(TEST_USER, "-u").is_some() {
        m.push(Mode::Rootless);
    } else {
        eprintln!(
            "SKIPPING rootless variant: user {TEST_USER} does not exist (scripts/setup-debian creates it)"
        );
    }
    m
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
        let base = tempfile::Builder::new()
            .prefix("gatehouse-sbx-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
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
            Mode::Root => user_id(WORKER_USER, "-u"),
            Mode::Rootless if is_root() => user_id(TEST_USER, "-u"),
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
        let uid = user_id(user, "-u").unwrap();
        let gid = user_id(user, "-g").unwrap();
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

    /// `gatehouse` with `args`, as this mode's caller.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = match (self.mode, is_root()) {
            (Mode::Rootless, true) => {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid",
                    TEST_USER,
                    "--regid",
                    TEST_USER,
                    "--clear-groups",
                    "--",
                ]);
                c.arg(&self.bin);
                c
            }
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
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_gatehouse"));
    if mode == Mode::Root || !is_root() {
        return bin;
    }
    static REACHABLE: OnceLock<bool> = OnceLock::new();
    let reachable = *REACHABLE.get_or_init(|| {
        Command::new("setpriv")
            .args([
                "--reuid",
                TEST_USER,
                "--regid",
                TEST_USER,
                "--clear-groups",
                "--",
            ])
            .arg("test")
            .arg("-x")
            .arg(&bin)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    });
    if reachable {
        return bin;
    }
    let copy = base.join("gatehouse");
    std::fs::copy(&bin, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
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

/// Host processes whose command line contains every one of `needles`.
pub fn host_processes_with_all(needles: &[&str]) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if needles.iter().all(|n| cmd.contains(n)) {
                found.push(pid);
            }
        }
    }
    found
}

/// Host processes whose command line contains `needle`, other than shells
/// (and `sandbox run`) that merely carry it in a script.
pub fn host_processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && !cmd.contains("sh -c") {
                found.push(pid);
            }
        }
    }
    found
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
                            match conn.read(&mut chunk) {
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

pub fn token(tag: &str) -> String {
    format!("{tag}-{}-{}", std::process::id(), rand_suffix())
}

pub fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
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
