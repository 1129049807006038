//! `gatehouse sandbox bench`: start-up time of `sandbox run` for
//! `/bin/true` under the default profile, against bubblewrap with a
//! comparable setup and against a plain fork/exec, measured in one run with
//! the three interleaved; plus the memory an idle sandbox costs.
//!
//! [`run`] does the whole benchmark (a scratch work dir and proxy socket,
//! the contenders, the measurement, the idle memory) and returns a
//! [`Report`]; the CLI only parses its flags and prints the report.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::profile::{DirSource, Profile, ProfileError};

mod report;
mod scratch;
mod workdir;

pub use report::{IdleMemory, Report, Row};
use scratch::Scratch;
pub use workdir::FsCost;

/// Errors running the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A contender could not be started or failed.
    #[error("{what}: {detail}")]
    Run { what: String, detail: String },
    /// The scratch directory or the proxy socket could not be set up.
    #[error("{what}: {source}")]
    Setup {
        what: String,
        source: std::io::Error,
    },
    /// The default profile does not resolve.
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Setup { what, source }
}

/// What `gatehouse sandbox bench` is asked to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Measured runs per contender.
    pub iterations: usize,
    /// Unmeasured runs per contender first.
    pub warmup: usize,
    /// The gatehouse launcher binary whose `sandbox run` is timed.
    pub launcher: PathBuf,
    /// Another gatehouse binary (e.g. an older build) timed as well, as
    /// "gatehouse-against".
    pub against: Option<PathBuf>,
}

/// Runs the whole benchmark in a private scratch directory that is
/// removed after.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let parent = std::env::temp_dir();
    let scratch = Scratch::create(&parent).map_err(setup(format!(
        "creating a scratch directory in {}",
        parent.display()
    )))?;
    run_in(&scratch, options)
}

fn run_in(scratch: &Scratch, options: &BenchOptions) -> Result<Report, BenchError> {
    let work = scratch.work();
    let scratch = scratch.path();
    // The relay connects only when the worker does; /bin/true never does.
    let sock = scratch.join("proxy.sock");
    let _proxy = std::os::unix::net::UnixListener::bind(&sock)
        .map_err(setup(format!("binding {}", sock.display())))?;
    // An identity's directory as the proxy makes it, for transparent mode.
    let dir = scratch.join("identity");
    let _sockets = bind_identity_dir(&dir)?;
    let transparent = scratch.join("default-transparent.toml");
    std::fs::write(&transparent, TRANSPARENT_PROFILE)
        .map_err(setup(format!("writing {}", transparent.display())))?;
    let source = DirSource {
        dirs: DirSource::default_dirs(),
    };
    let profile = crate::profile::resolve(&source, "default")?;
    let unlimited = scratch.join("default-without-cgroup-limits.toml");
    std::fs::write(&unlimited, without_cgroup_limits(&profile))
        .map_err(setup(format!("writing {}", unlimited.display())))?;
    let mut contenders = contenders(
        options,
        &bwrap_args(&profile, &work),
        &GatehouseRun {
            work: &work,
            proxy_socket: &sock,
            proxy_dir: &dir,
            unlimited_profile: &unlimited,
            transparent_profile: &transparent,
        },
    );
    // As root: a work dir that is a filesystem of its own, under a profile
    // requiring its size (removed when `fs` is dropped, after measuring).
    let fs = workdir::prepare(scratch)?;
    if let Some((own_fs, _)) = &fs {
        let run = GatehouseRun {
            work: &own_fs.work,
            proxy_socket: &sock,
            proxy_dir: &dir,
            unlimited_profile: &unlimited,
            transparent_profile: &transparent,
        };
        contenders.push(Contender {
            name: "gatehouse-work-dir-fs",
            program: options.launcher.clone(),
            args: run.args(Proxy::Socket, &own_fs.profile.display().to_string()),
        });
    }
    let samples = measure(&contenders, options.iterations, options.warmup)?;
    let rows = contenders
        .iter()
        .zip(&samples)
        .filter_map(|(c, s)| {
            Some(Row {
                name: c.name,
                summary: summarize(s)?,
            })
        })
        .collect();
    // Idle cost: the host-side waiter and everything below it.
    let mut idle = Vec::new();
    for c in contenders
        .iter()
        .filter(|c| IDLE_MEASURED.contains(&c.name))
    {
        idle.push(idle_memory(c)?);
    }
    Ok(Report {
        iterations: options.iterations,
        warmup: options.warmup,
        rows,
        idle,
        work_dir_fs: fs.map(|(_, cost)| cost),
    })
}

/// The default profile with transparent mode on.
const TRANSPARENT_PROFILE: &str = "extends = \"default\"\n[network]\ntransparent = true\n\
     transparent_hosts = [\"api.github.com\", \"github.com\"]\n";

/// `dir` holding both sockets an identity has, listening (never accepted:
/// /bin/true never connects).
fn bind_identity_dir(dir: &Path) -> Result<Vec<std::os::unix::net::UnixListener>, BenchError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)))
        .map_err(setup(format!("creating {}", dir.display())))?;
    [
        gatehouse_types::sandbox::PROXY_SOCKET_NAME,
        gatehouse_types::sandbox::TRANSPARENT_SOCKET_NAME,
    ]
    .into_iter()
    .map(|name| {
        let path = dir.join(name);
        std::os::unix::net::UnixListener::bind(&path)
            .map_err(setup(format!("binding {}", path.display())))
    })
    .collect()
}

/// How a contender reaches the proxy.
#[derive(Clone, Copy)]
enum Proxy {
    None,
    Socket,
    Dir,
}

/// The contenders whose idle memory is measured.
const IDLE_MEASURED: [&str; 2] = ["bwrap", "gatehouse"];

/// Where the `sandbox run` contenders run.
pub struct GatehouseRun<'a> {
    pub work: &'a Path,
    pub proxy_socket: &'a Path,
    /// An identity's directory (both sockets), as the supervisor's jobs use.
    pub proxy_dir: &'a Path,
    /// The default profile without cgroup limits, as a file.
    pub unlimited_profile: &'a Path,
    /// The default profile with `network.transparent`, as a file.
    pub transparent_profile: &'a Path,
}

impl GatehouseRun<'_> {
    /// `sandbox run` of `/bin/true` under `profile`, with the relay or not.
    fn args(&self, relay: Proxy, profile: &str) -> Vec<String> {
        let mut a: Vec<String> = [
            "sandbox",
            "run",
            "--profile",
            profile,
            "--quiet",
            "--workdir",
            &self.work.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        let (flag, path) = match relay {
            Proxy::None => ("", Path::new("")),
            Proxy::Socket => ("--proxy-socket", self.proxy_socket),
            Proxy::Dir => ("--proxy-dir", self.proxy_dir),
        };
        if !flag.is_empty() {
            a.extend([flag.to_string(), path.display().to_string()]);
        }
        a.extend(["--".to_string(), "/bin/true".to_string()]);
        a
    }
}

/// Every contender, `/bin/true` each: fork/exec, bwrap (given its
/// arguments), gatehouse with and without the relay and cgroup limits, and
/// the other binary when one is given.
pub fn contenders(
    options: &BenchOptions,
    bwrap_args: &[String],
    run: &GatehouseRun<'_>,
) -> Vec<Contender> {
    let mut bwrap = bwrap_args.to_vec();
    bwrap.push("/bin/true".into());
    let unlimited = run.unlimited_profile.display().to_string();
    let transparent = run.transparent_profile.display().to_string();
    let exe = &options.launcher;
    let mut list = vec![
        Contender {
            name: "fork/exec",
            program: "/bin/true".into(),
            args: vec![],
        },
        Contender {
            name: "bwrap",
            program: "bwrap".into(),
            args: bwrap,
        },
        Contender {
            name: "gatehouse",
            program: exe.clone(),
            args: run.args(Proxy::Socket, "default"),
        },
        Contender {
            name: "gatehouse-no-relay",
            program: exe.clone(),
            args: run.args(Proxy::None, "default"),
        },
        Contender {
            name: "gatehouse-no-cgroups",
            program: exe.clone(),
            args: run.args(Proxy::Socket, &unlimited),
        },
        Contender {
            name: "gatehouse-proxy-dir",
            program: exe.clone(),
            args: run.args(Proxy::Dir, "default"),
        },
        Contender {
            name: "gatehouse-transparent",
            program: exe.clone(),
            args: run.args(Proxy::Dir, &transparent),
        },
    ];
    if let Some(other) = &options.against {
        list.push(Contender {
            name: "gatehouse-against",
            program: other.clone(),
            args: run.args(Proxy::Socket, "default"),
        });
    }
    list
}

/// The memory of an idle contender (`sleep 5` instead of `true`) after
/// half a second: its host-side process, and everything below it.
fn idle_memory(c: &Contender) -> Result<IdleMemory, BenchError> {
    let mut child = c.spawn_idle()?;
    std::thread::sleep(Duration::from_millis(500));
    let host = memory_of(child.id());
    let inside: Memory = children_of(child.id())
        .into_iter()
        .map(memory_of)
        .fold(Memory::default(), |a, m| a + m);
    let _ = child.kill();
    let _ = child.wait();
    Ok(IdleMemory {
        name: c.name,
        host,
        inside,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub median_ms: f64,
    pub p95_ms: f64,
    pub min_ms: f64,
}

/// Median, 95th percentile and minimum of samples (nearest-rank).
pub fn summarize(samples: &[Duration]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let rank = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
    Some(Summary {
        median_ms: rank(0.5),
        p95_ms: rank(0.95),
        min_ms: ms[0],
    })
}

/// bwrap arguments equivalent to the profile's mounts: every namespace,
/// the same read-only binds (symlinks recreated), the work dir, tmpfs /tmp,
/// /proc, /dev, a cleared environment, a new session, death with parent.
pub fn bwrap_args(profile: &Profile, work: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
    ]
    .map(String::from)
    .to_vec();
    for p in profile
        .filesystem
        .read_exec
        .iter()
        .chain(&profile.filesystem.read)
    {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(p) {
                    a.extend([
                        "--symlink".into(),
                        target.display().to_string(),
                        p.display().to_string(),
                    ]);
                }
            }
            Ok(_) => a.extend([
                "--ro-bind".into(),
                p.display().to_string(),
                p.display().to_string(),
            ]),
            Err(_) => {}
        }
    }
    a.extend(
        [
            "--bind",
            &work.display().to_string(),
            "/work",
            "--chdir",
            "/work",
            "--tmpfs",
            "/tmp",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--setenv",
            "PATH",
            "/usr/bin:/bin",
            "--setenv",
            "HOME",
            "/tmp",
        ]
        .map(String::from),
    );
    a
}

/// The profile as a standalone TOML layer without memory/pids/cpu limits:
/// the same sandbox minus cgroups, to show what attaching to them costs.
pub fn without_cgroup_limits(profile: &Profile) -> String {
    let strings =
        |v: &[String]| toml::Value::Array(v.iter().cloned().map(toml::Value::String).collect());
    let paths = |v: &[PathBuf]| {
        strings(
            &v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
        )
    };
    let mut fs = toml::Table::new();
    fs.insert("read_exec".into(), paths(&profile.filesystem.read_exec));
    fs.insert("read".into(), paths(&profile.filesystem.read));
    fs.insert(
        "writable_exec".into(),
        toml::Value::Boolean(profile.filesystem.writable_exec),
    );
    fs.insert(
        "tmp_size_mib".into(),
        toml::Value::Integer(profile.filesystem.tmp_size_mib as i64),
    );
    let mut env = toml::Table::new();
    env.insert("pass".into(), strings(&profile.env.pass));
    env.insert(
        "set".into(),
        toml::Value::Table(
            profile
                .env
                .set
                .iter()
                .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
                .collect(),
        ),
    );
    let mut limits = toml::Table::new();
    limits.insert(
        "open_files".into(),
        toml::Value::Integer(profile.limits.open_files as i64),
    );
    let mut top = toml::Table::new();
    top.insert("filesystem".into(), toml::Value::Table(fs));
    top.insert("env".into(), toml::Value::Table(env));
    top.insert("limits".into(), toml::Value::Table(limits));
    top.to_string()
}

pub struct Contender {
    pub name: &'static str,
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Contender {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    fn once(&self) -> Result<Duration, BenchError> {
        let start = Instant::now();
        let out = self.command().output().map_err(|e| BenchError::Run {
            what: self.name.to_string(),
            detail: e.to_string(),
        })?;
        let took = start.elapsed();
        if !out.status.success() {
            return Err(BenchError::Run {
                what: self.name.to_string(),
                detail: format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(took)
    }

    /// Starts the contender with `sleep` instead of `true`, for memory.
    pub fn spawn_idle(&self) -> Result<Child, BenchError> {
        let mut c = Command::new(&self.program);
        let mut args = self.args.clone();
        if let Some(last) = args.last_mut() {
            *last = "/bin/sleep".into();
        }
        args.push("5".into());
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn().map_err(|e| BenchError::Run {
            what: self.name.to_string(),
            detail: e.to_string(),
        })
    }
}

/// Runs every contender `iterations` times, interleaved in a shuffled
/// order each round: load changes on a shared machine then hit all of them
/// alike, and none always runs right after the same other one (a
/// sandbox's teardown leaves kernel work that slows whatever comes next).
pub fn measure(
    contenders: &[Contender],
    iterations: usize,
    warmup: usize,
) -> Result<Vec<Vec<Duration>>, BenchError> {
    let mut samples = vec![Vec::with_capacity(iterations); contenders.len()];
    let mut order: Vec<usize> = (0..contenders.len()).collect();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for i in 0..warmup + iterations {
        rng.shuffle(&mut order);
        for &c in &order {
            let took = contenders[c].once()?;
            if i >= warmup {
                samples[c].push(took);
            }
        }
    }
    Ok(samples)
}

/// A tiny deterministic PRNG: the order only needs to vary, not be secret.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn shuffle(&mut self, v: &mut [usize]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// Resident and proportional set size of one process, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub rss_kib: u64,
    pub pss_kib: u64,
}

impl std::ops::Add for Memory {
    type Output = Memory;
    fn add(self, o: Memory) -> Memory {
        Memory {
            rss_kib: self.rss_kib + o.rss_kib,
            pss_kib: self.pss_kib + o.pss_kib,
        }
    }
}

/// Parses `Rss:` and `Pss:` from `/proc/PID/smaps_rollup`.
pub fn parse_rollup(text: &str) -> Memory {
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Memory {
        rss_kib: field("Rss:"),
        pss_kib: field("Pss:"),
    }
}

pub fn memory_of(pid: u32) -> Memory {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .map(|t| parse_rollup(&t))
        .unwrap_or_default()
}

pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests;
