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
            unlimited_profile: &unlimited,
        },
    );
    // As root: a work dir that is a filesystem of its own, under a profile
    // requiring its size (removed when `fs` is dropped, after measuring).
    let fs = workdir::prepare(scratch)?;
    if let Some((dir, _)) = &fs {
        let run = GatehouseRun {
            work: &dir.work,
            proxy_socket: &sock,
            unlimited_profile: &unlimited,
        };
        contenders.push(Contender {
            name: "gatehouse-work-dir-fs",
            program: options.launcher.clone(),
            args: run.args(true, &dir.profile.display().to_string()),
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

/// The contenders whose idle memory is measured.
const IDLE_MEASURED: [&str; 2] = ["bwrap", "gatehouse"];

/// Where the `sandbox run` contenders run.
pub struct GatehouseRun<'a> {
    pub work: &'a Path,
    pub proxy_socket: &'a Path,
    /// The default profile without cgroup limits, as a file.
    pub unlimited_profile: &'a Path,
}

impl GatehouseRun<'_> {
    /// `sandbox run` of `/bin/true` under `profile`, with the relay or not.
    fn args(&self, relay: bool, profile: &str) -> Vec<String> {
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
        if relay {
            a.extend([
                "--proxy-socket".to_string(),
                self.proxy_socket.display().to_string(),
            ]);
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
            args: run.args(true, "default"),
        },
        Contender {
            name: "gatehouse-no-relay",
            program: exe.clone(),
            args: run.args(false, "default"),
        },
        Contender {
            name: "gatehouse-no-cgroups",
            program: exe.clone(),
            args: run.args(true, &unlimited),
        },
    ];
    if let Some(other) = &options.against {
        list.push(Contender {
            name: "gatehouse-against",
            program: other.clone(),
            args: run.args(true, "default"),
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
mod tests {
    use super::*;

    #[test]
    fn summary_uses_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = summarize(&samples).unwrap();
        assert_eq!(s.median_ms, 50.0);
        assert_eq!(s.p95_ms, 95.0);
        assert_eq!(s.min_ms, 1.0);
        assert!(summarize(&[]).is_none());
        let one = summarize(&[Duration::from_millis(3)]).unwrap();
        assert_eq!((one.median_ms, one.p95_ms), (3.0, 3.0));
    }

    #[test]
    fn the_unlimited_variant_keeps_the_mounts_and_drops_the_limits() {
        let src = crate::profile::DirSource { dirs: vec![] };
        let default = crate::profile::resolve(&src, "default").unwrap();
        let text = without_cgroup_limits(&default);
        let p = crate::profile::resolve_text(&src, "unlimited", "test", &text).unwrap();
        assert_eq!(p.filesystem, default.filesystem);
        assert_eq!(p.env, default.env);
        assert_eq!(
            (p.limits.memory_mib, p.limits.pids, p.limits.cpu_percent),
            (None, None, None)
        );
    }

    #[test]
    fn shuffles_are_permutations_and_vary() {
        let mut rng = XorShift(1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let mut v: Vec<usize> = (0..5).collect();
            rng.shuffle(&mut v);
            let mut sorted = v.clone();
            sorted.sort();
            assert_eq!(sorted, [0, 1, 2, 3, 4]);
            seen.insert(v);
        }
        assert!(seen.len() > 10, "only {} orders", seen.len());
    }

    #[test]
    fn the_contenders_time_the_same_command_each() {
        let run = GatehouseRun {
            work: Path::new("/s/work"),
            proxy_socket: Path::new("/s/proxy.sock"),
            unlimited_profile: Path::new("/s/unlimited.toml"),
        };
        let mut options = BenchOptions {
            iterations: 1,
            warmup: 0,
            launcher: "/bin/gatehouse".into(),
            against: None,
        };
        let list = contenders(&options, &["--unshare-all".into()], &run);
        let names: Vec<&str> = list.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "fork/exec",
                "bwrap",
                "gatehouse",
                "gatehouse-no-relay",
                "gatehouse-no-cgroups"
            ]
        );
        assert_eq!(list[0].program, Path::new("/bin/true"));
        assert!(list[0].args.is_empty());
        for c in &list[1..] {
            assert_eq!(
                c.args.last().map(String::as_str),
                Some("/bin/true"),
                "{}",
                c.name
            );
        }
        assert_eq!(list[1].args, ["--unshare-all", "/bin/true"]);
        let gatehouse = list[2].args.join(" ");
        assert_eq!(
            gatehouse,
            "sandbox run --profile default --quiet --workdir /s/work \
             --proxy-socket /s/proxy.sock -- /bin/true"
        );
        assert!(!list[3].args.contains(&"--proxy-socket".to_string()));
        assert!(list[4]
            .args
            .join(" ")
            .contains("--profile /s/unlimited.toml"));
        assert!(list[2..5]
            .iter()
            .all(|c| c.program == Path::new("/bin/gatehouse")));
        options.against = Some("/old/gatehouse".into());
        let list = contenders(&options, &[], &run);
        let against = list.last().unwrap();
        assert_eq!(against.name, "gatehouse-against");
        assert_eq!(against.program, Path::new("/old/gatehouse"));
        assert_eq!(against.args, list[2].args);
    }

    #[test]
    fn rollup_fields_are_read() {
        let m = parse_rollup(
            "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  1234 kB\nPss:   567 kB\n",
        );
        assert_eq!(
            m,
            Memory {
                rss_kib: 1234,
                pss_kib: 567
            }
        );
    }
}
