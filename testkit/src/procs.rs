//! Scans of `/proc`: which host processes carry a marker, whether a pid is
//! alive.

use std::path::Path;

/// A host process: its pid and its command line (arguments joined by spaces).
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: i32,
    pub cmdline: String,
}

/// Every process visible in `/proc` now, other than this one.
pub fn scan() -> Vec<Process> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push(Process { pid, cmdline });
    }
    found
}

/// The pids whose parent is `parent`, from each process's `stat`.
pub fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: the name may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Processes whose command line contains every one of `needles`.
pub fn with_all(needles: &[&str]) -> Vec<i32> {
    scan()
        .into_iter()
        .filter(|p| needles.iter().all(|n| p.cmdline.contains(n)))
        .map(|p| p.pid)
        .collect()
}

/// Processes whose command line contains `needle`, other than shells (and
/// `sandbox run`) that merely carry it in a script.
pub fn running(needle: &str) -> Vec<i32> {
    scan()
        .into_iter()
        .filter(|p| p.cmdline.contains(needle) && !p.cmdline.contains("sh -c"))
        .map(|p| p.pid)
        .collect()
}

/// Live (non-zombie) processes whose command line contains `marker`.
pub fn live_with(marker: &str) -> Vec<i32> {
    scan()
        .into_iter()
        .filter(|p| p.cmdline.contains(marker) && alive(p.pid))
        .map(|p| p.pid)
        .collect()
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            !matches!(after.trim_start().chars().next(), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Pids written one per line into `file`.
pub fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The pids `file` lists, once it lists one: a job reports "running" when
/// its process has started, a moment before its shell writes `$$`.
/// Panics after 30 s.
pub async fn wait_for_pids(file: &Path) -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let pids = pids_in(file);
        if !pids.is_empty() {
            return pids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pid in {}",
            file.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How many mounts this process sees.
pub fn mount_count() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count()
}

/// How many file descriptors `pid` has open (0 when it is gone).
pub fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Sends signal `name` (e.g. `KILL`) to `pid` with the shell's builtin
/// kill (no dependency on procps).
pub fn signal(pid: impl Into<i64>, name: &str) {
    let pid = pid.into();
    let ok = std::process::Command::new("sh")
        .args(["-c", &format!("kill -{name} {pid}")])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name} {pid}");
}
