//! Resource limits: cgroup v2 where its controllers are available, v1 on
//! hybrid hosts whose v2 lacks memory/pids/cpu, rlimits when neither can be
//! created (rootless). [`choose`] decides from probed facts; the rest
//! writes cgroupfs.
//!
//! The sandbox's init joins its cgroups itself, through files the host side
//! opened ([`Join`]), before it forks anything. Writing `0` to a v1 `tasks`
//! file moves only the calling thread, which the kernel does without the
//! global threadgroup lock; writing another process's pid to `cgroup.procs`
//! takes that lock for writing and waits for an RCU grace period (measured
//! 5–7 ms median, up to 30 ms, on a busy host). The init is single-threaded
//! then, so moving its one thread moves the whole process, and everything
//! it forks starts inside the cgroups.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use serde::Serialize;

use super::SandboxError;
use crate::profile::Limits;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitMechanism {
    CgroupV2,
    CgroupV1,
    Rlimit,
    /// Not applied (no limit configured, or no mechanism available).
    None,
}

/// How each limit is enforced in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LimitReport {
    pub memory: LimitMechanism,
    pub pids: LimitMechanism,
    pub cpu: LimitMechanism,
}

impl LimitReport {
    pub fn all_by_cgroup(&self) -> bool {
        [self.memory, self.pids, self.cpu].iter().all(|m| {
            matches!(
                m,
                LimitMechanism::CgroupV1 | LimitMechanism::CgroupV2 | LimitMechanism::None
            )
        })
    }
}

/// What the host offers for limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupFacts {
    pub is_root: bool,
    /// The v2 mount point if its root offers memory, pids and cpu.
    pub v2_with_controllers: Option<PathBuf>,
    /// For each of memory, pids, cpu: the v1 directory of our own cgroup.
    pub v1_dirs: Option<[PathBuf; 3]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    V2(PathBuf),
    V1([PathBuf; 3]),
    Rlimits,
}

/// Picks the mechanism; `Err` names what is missing when the profile
/// requires cgroup limits.
pub fn choose(
    limits: &Limits,
    require_cgroup: bool,
    facts: &CgroupFacts,
) -> Result<Choice, String> {
    let any = limits.memory_mib.is_some() || limits.pids.is_some() || limits.cpu_percent.is_some();
    if !any {
        return Ok(Choice::Rlimits);
    }
    if facts.is_root {
        if let Some(v2) = &facts.v2_with_controllers {
            return Ok(Choice::V2(v2.clone()));
        }
        if let Some(v1) = &facts.v1_dirs {
            return Ok(Choice::V1(v1.clone()));
        }
    }
    if require_cgroup {
        return Err(format!(
            "cgroup limits (the profile sets require.cgroup_limits){}: no writable cgroup v2 with memory, pids and cpu and no cgroup v1 hierarchies for them",
            if facts.is_root { "" } else { ", and this user is not root" }
        ));
    }
    Ok(Choice::Rlimits)
}

/// The file through which a process joins a cgroup by writing `0` (itself).
/// v1: `tasks` moves just the writing thread, without the global lock. v2
/// has no such file for domain cgroups (`cgroup.threads` only moves threads
/// within a threaded subtree), so the whole process joins via `cgroup.procs`.
pub fn join_file(choice: &Choice) -> Option<&'static str> {
    match choice {
        Choice::V1(_) => Some("tasks"),
        Choice::V2(_) => Some("cgroup.procs"),
        Choice::Rlimits => None,
    }
}

pub fn report_for(choice: &Choice, limits: &Limits) -> LimitReport {
    let cg = match choice {
        Choice::V2(_) => LimitMechanism::CgroupV2,
        Choice::V1(_) => LimitMechanism::CgroupV1,
        Choice::Rlimits => LimitMechanism::Rlimit,
    };
    let or_none = |set: bool, m: LimitMechanism| if set { m } else { LimitMechanism::None };
    LimitReport {
        memory: or_none(limits.memory_mib.is_some(), cg),
        pids: or_none(limits.pids.is_some(), cg),
        cpu: or_none(
            limits.cpu_percent.is_some(),
            if cg == LimitMechanism::Rlimit {
                LimitMechanism::None
            } else {
                cg
            },
        ),
    }
}

/// Cgroups created for one run; removed by [`Cgroups::remove`].
pub(crate) struct Cgroups {
    dirs: Vec<PathBuf>,
    report: LimitReport,
}

/// A cgroup's join file, opened for writing by the host side. The kernel
/// checks a write against the credentials of whoever opened the file, so the
/// init can use it after it has left the host's user namespace.
#[derive(Debug)]
pub(crate) struct Join {
    fd: OwnedFd,
    file: PathBuf,
}

impl Join {
    fn open(file: PathBuf) -> Result<Join, SandboxError> {
        let fd = nix::fcntl::open(&file, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| SandboxError::Cgroup(format!("open {}: {e}", file.display())))?;
        Ok(Join { fd, file })
    }

    /// The open file and its path, to hand to the init.
    pub fn into_parts(self) -> (OwnedFd, PathBuf) {
        (self.fd, self.file)
    }

    pub fn from_parts(fd: OwnedFd, file: PathBuf) -> Join {
        Join { fd, file }
    }

    /// Moves the calling thread into the cgroup and closes the file. Called
    /// by the init while it is single-threaded, so the whole process moves.
    pub fn join_self(self) -> Result<(), String> {
        match nix::unistd::write(&self.fd, b"0") {
            Ok(1) => Ok(()),
            Ok(n) => Err(format!(
                "short write ({n} bytes) to {}",
                self.file.display()
            )),
            Err(e) => Err(format!("joining {}: {e}", self.file.display())),
        }
    }
}

/// What the host side sends the init once the cgroups exist: one byte
/// saying whether every limit is a cgroup's (else the worker sets rlimits),
/// then the join files' paths, one a line, in the order of the descriptors
/// that travel with it (the paths are for error messages).
pub(crate) fn encode_handover(by_cgroup: bool, joins: Vec<Join>) -> (Vec<u8>, Vec<OwnedFd>) {
    let mut data = vec![u8::from(by_cgroup)];
    let mut fds = Vec::with_capacity(joins.len());
    for (i, j) in joins.into_iter().enumerate() {
        let (fd, file) = j.into_parts();
        if i > 0 {
            data.push(b'\n');
        }
        data.extend_from_slice(file.as_os_str().as_encoded_bytes());
        fds.push(fd);
    }
    (data, fds)
}

/// The init's side of [`encode_handover`].
pub(crate) fn decode_handover(data: &[u8], fds: Vec<OwnedFd>) -> Result<(bool, Vec<Join>), String> {
    let (&flag, paths) = data.split_first().ok_or("empty cgroup hand-over")?;
    let by_cgroup = match flag {
        0 => false,
        1 => true,
        other => return Err(format!("bad cgroup hand-over flag {other}")),
    };
    let paths: Vec<PathBuf> = if paths.is_empty() {
        Vec::new()
    } else {
        paths
            .split(|b| *b == b'\n')
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect()
    };
    if paths.len() != fds.len() {
        return Err(format!(
            "cgroup hand-over names {} files but carries {} descriptors",
            paths.len(),
            fds.len()
        ));
    }
    Ok((
        by_cgroup,
        fds.into_iter()
            .zip(paths)
            .map(|(fd, file)| Join::from_parts(fd, file))
            .collect(),
    ))
}

pub(crate) fn probe_facts() -> CgroupFacts {
    let is_root = nix::unistd::geteuid().is_root();
    let v2_with_controllers = super::probe::cgroup2_mount().filter(|p| {
        let ctrls = std::fs::read_to_string(p.join("cgroup.controllers")).unwrap_or_default();
        ["memory", "pids", "cpu"]
            .iter()
            .all(|c| ctrls.split_whitespace().any(|h| h == *c))
    });
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let v1 = |ctrl: &str| -> Option<PathBuf> {
        own.lines()
            .find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                ctrls.split(',').any(|c| c == ctrl).then(|| {
                    Path::new("/sys/fs/cgroup")
                        .join(ctrl)
                        .join(path.trim_start_matches('/'))
                })
            })
            .filter(|p| p.is_dir())
    };
    let v1_dirs = match (v1("memory"), v1("pids"), v1("cpu")) {
        (Some(m), Some(p), Some(c)) => Some([m, p, c]),
        _ => None,
    };
    CgroupFacts {
        is_root,
        v2_with_controllers,
        v1_dirs,
    }
}

fn write(path: &Path, value: &str) -> Result<(), SandboxError> {
    std::fs::write(path, value)
        .map_err(|e| SandboxError::Cgroup(format!("write {value:?} to {}: {e}", path.display())))
}

/// Removes empty cgroups left by runs that were killed outright (SIGKILL
/// gives `sandbox run` no chance to clean up). A cgroup whose creator still
/// runs is left alone; one with members cannot be removed anyway.
fn sweep_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("gatehouse-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        if creator_gone(stat.as_deref()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Whether a cgroup's creator is gone, from the text of its
/// `/proc/<pid>/stat` (`None`: no such process). A zombie (`Z`) or dead
/// (`X`) process is gone: it will never remove its cgroup, and a parent
/// that does not reap it (a killed supervisor's) would keep it forever.
/// Text that does not parse counts as running: the cgroup stays (pure).
pub(crate) fn creator_gone(stat: Option<&str>) -> bool {
    let Some(stat) = stat else {
        return true;
    };
    // The command name (field 2) may hold spaces and parentheses: the state
    // is the first field after the last `)`.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("Z" | "X"))
}

/// Which mechanism this run's limits will use; fails closed when cgroups
/// are required and none can be had. Cheap: reads what the host offers.
pub(crate) fn choose_here(limits: &Limits, require_cgroup: bool) -> Result<Choice, SandboxError> {
    choose(limits, require_cgroup, &probe_facts()).map_err(|what| SandboxError::Missing {
        what,
        fix: "Run the supervisor as root, or delegate a cgroup v2 subtree with memory, pids and cpu to this user".to_string(),
    })
}

/// Creates this run's cgroups with their limits and opens their join files.
pub(crate) fn prepare(
    choice: &Choice,
    limits: &Limits,
    require_cgroup: bool,
    id: u32,
) -> Result<(Cgroups, Vec<Join>), SandboxError> {
    let name = format!("gatehouse-{id}");
    let mut cg = Cgroups {
        dirs: Vec::new(),
        report: report_for(choice, limits),
    };
    let result = match choice {
        Choice::Rlimits => Ok(()),
        Choice::V2(root) => cg.create_v2(root, &name, limits),
        Choice::V1(dirs) => cg.create_v1(dirs, &name, limits),
    }
    .and_then(|()| match join_file(choice) {
        Some(file) => cg.dirs.iter().map(|d| Join::open(d.join(file))).collect(),
        None => Ok(Vec::new()),
    });
    match result {
        Ok(joins) => Ok((cg, joins)),
        Err(e) => {
            cg.remove();
            if require_cgroup {
                return Err(e);
            }
            // Not required: fall back to rlimits and say so in the report.
            Ok((
                Cgroups {
                    dirs: Vec::new(),
                    report: report_for(&Choice::Rlimits, limits),
                },
                Vec::new(),
            ))
        }
    }
}

impl Cgroups {
    pub fn report(&self) -> LimitReport {
        self.report
    }

    fn mkdir(&mut self, dir: PathBuf) -> Result<PathBuf, SandboxError> {
        if let Some(parent) = dir.parent() {
            sweep_stale(parent);
        }
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(SandboxError::Cgroup(format!(
                    "mkdir {}: {e}",
                    dir.display()
                )))
            }
        }
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    fn create_v2(&mut self, root: &Path, name: &str, l: &Limits) -> Result<(), SandboxError> {
        let parent = root.join("gatehouse");
        std::fs::create_dir_all(&parent)
            .map_err(|e| SandboxError::Cgroup(format!("mkdir {}: {e}", parent.display())))?;
        write(&root.join("cgroup.subtree_control"), "+memory +pids +cpu")?;
        write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu")?;
        let dir = self.mkdir(parent.join(name))?;
        if let Some(mib) = l.memory_mib {
            write(&dir.join("memory.max"), &(mib << 20).to_string())?;
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
        if let Some(p) = l.pids {
            write(&dir.join("pids.max"), &p.to_string())?;
        }
        if let Some(c) = l.cpu_percent {
            write(&dir.join("cpu.max"), &format!("{} 100000", c * 1000))?;
        }
        Ok(())
    }

    fn create_v1(
        &mut self,
        dirs: &[PathBuf; 3],
        name: &str,
        l: &Limits,
    ) -> Result<(), SandboxError> {
        let [mem, pids, cpu] = dirs;
        if let Some(mib) = l.memory_mib {
            let d = self.mkdir(mem.join(name))?;
            write(&d.join("memory.limit_in_bytes"), &(mib << 20).to_string())?;
            // Swap too, where the kernel accounts it.
            let _ = std::fs::write(
                d.join("memory.memsw.limit_in_bytes"),
                (mib << 20).to_string(),
            );
        }
        if let Some(p) = l.pids {
            let d = self.mkdir(pids.join(name))?;
            write(&d.join("pids.max"), &p.to_string())?;
        }
        if let Some(c) = l.cpu_percent {
            let d = self.mkdir(cpu.join(name))?;
            write(&d.join("cpu.cfs_period_us"), "100000")?;
            write(&d.join("cpu.cfs_quota_us"), &(c * 1000).to_string())?;
        }
        Ok(())
    }

    /// Removes the cgroups. The init's death has killed every member, but
    /// the kernel may take a moment to release them.
    pub fn remove(&self) {
        for d in self.dirs.iter().rev() {
            for _ in 0..100 {
                match std::fs::remove_dir(d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    _ => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creator_gone_table() {
        let table: &[(Option<&str>, bool)] = &[
            (None, true),
            (Some("4242 (gatehouse) Z 1 4242 4242 0 -1 4194560 0"), true),
            (Some("4242 (gatehouse) X 1 4242 4242 0 -1 4194560 0"), true),
            (Some("4242 (gatehouse) S 1 4242 4242 0 -1 4194560 0"), false),
            (Some("4242 (gatehouse) R 1 4242 4242 0 -1 4194560 0"), false),
            (Some("4242 (gatehouse) D 1 4242 4242 0 -1 4194560 0"), false),
            (Some("4242 (gatehouse) T 1 4242 4242 0 -1 4194560 0"), false),
            // A name that looks like a zombie's state is not one.
            (Some("4242 (a) Z (b) S 1 4242 4242 0"), false),
            (Some("4242 (x) S) Z 1 4242 4242 0"), true),
            // Unreadable text: kept.
            (Some(""), false),
            (Some("4242 (gatehouse"), false),
            (Some("4242 (gatehouse)"), false),
        ];
        for (stat, gone) in table {
            assert_eq!(creator_gone(*stat), *gone, "{stat:?}");
        }
    }

    fn limits() -> Limits {
        Limits {
            memory_mib: Some(64),
            pids: Some(32),
            cpu_percent: Some(50),
            wall_time_secs: None,
            open_files: 64,
            inotify_instances: 32,
            inotify_watches: 65536,
            work_dir_size: None,
        }
    }

    fn v1() -> [PathBuf; 3] {
        ["/m".into(), "/p".into(), "/c".into()]
    }

    #[test]
    fn chooses_the_best_mechanism_available() {
        let root_v2 = CgroupFacts {
            is_root: true,
            v2_with_controllers: Some("/sys/fs/cgroup".into()),
            v1_dirs: Some(v1()),
        };
        let root_hybrid = CgroupFacts {
            is_root: true,
            v2_with_controllers: None,
            v1_dirs: Some(v1()),
        };
        let rootless = CgroupFacts {
            is_root: false,
            ..root_v2.clone()
        };
        let cases = [
            (&root_v2, false, Ok(Choice::V2("/sys/fs/cgroup".into()))),
            (&root_hybrid, true, Ok(Choice::V1(v1()))),
            (&rootless, false, Ok(Choice::Rlimits)),
        ];
        for (facts, require, want) in cases {
            assert_eq!(choose(&limits(), require, facts), want, "{facts:?}");
        }
        let err = choose(&limits(), true, &rootless).unwrap_err();
        assert!(err.contains("not root"), "{err}");
    }

    #[test]
    fn report_says_cpu_is_not_limited_by_rlimits() {
        let r = report_for(&Choice::Rlimits, &limits());
        assert_eq!(r.cpu, LimitMechanism::None);
        assert_eq!(r.pids, LimitMechanism::Rlimit);
        assert!(!r.all_by_cgroup());
        let r = report_for(&Choice::V1(v1()), &limits());
        assert!(r.all_by_cgroup());
    }

    #[test]
    fn handover_round_trips_and_refuses_a_mismatch() {
        let dev_null = |_| -> OwnedFd { std::fs::File::open("/dev/null").unwrap().into() };
        let joins: Vec<Join> = [
            "/sys/fs/cgroup/memory/g-1/tasks",
            "/sys/fs/cgroup/pids/g-1/tasks",
        ]
        .iter()
        .enumerate()
        .map(|(i, p)| Join::from_parts(dev_null(i), PathBuf::from(p)))
        .collect();
        let (data, fds) = encode_handover(true, joins);
        let (by_cgroup, back) = decode_handover(&data, fds).unwrap();
        assert!(by_cgroup);
        let files: Vec<PathBuf> = back.into_iter().map(|j| j.into_parts().1).collect();
        assert_eq!(
            files,
            [
                PathBuf::from("/sys/fs/cgroup/memory/g-1/tasks"),
                PathBuf::from("/sys/fs/cgroup/pids/g-1/tasks")
            ]
        );

        let (data, fds) = encode_handover(false, Vec::new());
        let (by_cgroup, back) = decode_handover(&data, fds).unwrap();
        assert!(!by_cgroup && back.is_empty());

        assert!(decode_handover(&[], Vec::new()).is_err());
        assert!(decode_handover(&[2], Vec::new()).is_err());
        assert!(decode_handover(b"\x01/a/tasks", Vec::new()).is_err());
        assert!(decode_handover(&[1], vec![dev_null(0)]).is_err());
    }

    #[test]
    fn v1_joins_by_thread_v2_by_process() {
        // v1 `tasks` with `0` is the lock-free path; v2 domain cgroups
        // accept only whole processes.
        assert_eq!(join_file(&Choice::V1(v1())), Some("tasks"));
        assert_eq!(
            join_file(&Choice::V2("/sys/fs/cgroup".into())),
            Some("cgroup.procs")
        );
        assert_eq!(join_file(&Choice::Rlimits), None);
    }
}
