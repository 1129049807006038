//! `gatehouse sandbox bench`: start-up time of `sandbox run` for
//! `/bin/true` under the default profile, against bubblewrap with a
//! comparable setup and against a plain fork/exec, measured in one run with
//! the three interleaved; plus the memory an idle sandbox costs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::profile::Profile;

/// Errors running the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A contender could not be started or failed.
    #[error("{what}: {detail}")]
    Run { what: String, detail: String },
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
