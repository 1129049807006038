//! Finding and killing a job's processes by what `/proc` says, so a recycled
//! pid is never mistaken for a job's process: a process belongs to a job if
//! it is in the job's process group and started no earlier than its leader.

use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `(state, pgrp, starttime)` from the text of `/proc/<pid>/stat`. The command name
/// (field 2) may contain spaces and parentheses, so fields are counted from
/// the last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, i32, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state(3) ppid(4) pgrp(5) … starttime(22).
    let state = fields.first()?.chars().next()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, pgrp, start))
}

fn read_stat(proc_root: &Path, pid: i32) -> Option<(char, i32, u64)> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&text)
}

/// The start time of `pid`, to record beside it.
pub fn start_time(pid: i32) -> Option<u64> {
    read_stat(Path::new("/proc"), pid).map(|(_, _, start)| start)
}

/// Live (not zombie) pids in process group `pgid` that started at or after
/// `leader_start`. A zombie is dead already: only its parent's wait is left.
pub fn group_members(proc_root: &Path, pgid: i32, leader_start: u64) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            read_stat(proc_root, pid).is_some_and(|(state, pgrp, start)| {
                pgrp == pgid && start >= leader_start && !matches!(state, 'Z' | 'X')
            })
        })
        .collect()
}

/// Sends `signal` to every member of the job's process group; returns how
/// many were signalled.
pub fn signal_group(pgid: i32, leader_start: u64, signal: Signal) -> usize {
    let members = group_members(Path::new("/proc"), pgid, leader_start);
    for &pid in &members {
        let _ = kill(Pid::from_raw(pid), signal);
    }
    members.len()
}

/// Whether any process is in group `pgid` at all. When none is, there is
/// nothing to kill and no need to scan `/proc`; when some is (possibly an
/// unrelated group that reuses the id), the precise scan decides.
fn group_exists(pgid: i32) -> bool {
    pgid > 0 && nix::sys::signal::killpg(Pid::from_raw(pgid), None).is_ok()
}

/// SIGKILLs the group until no live member is left (bounded wait). The
/// `/proc` scans run on the blocking pool, off the async workers.
pub async fn kill_group(pgid: i32, leader_start: u64) -> bool {
    for _ in 0..200 {
        if !group_exists(pgid) {
            return true;
        }
        let signalled =
            tokio::task::spawn_blocking(move || signal_group(pgid, leader_start, Signal::SIGKILL))
                .await
                .unwrap_or(0);
        if signalled == 0 {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let tail = "S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        for name in ["sleep", "a b", "x) (y", ")"] {
            let stat = format!("4243 ({name}) {tail}");
            assert_eq!(parse_stat(&stat), Some(('S', 4242, 987654)), "{name}");
        }
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
    }

    #[test]
    fn own_process_is_found() {
        let me = std::process::id() as i32;
        let (_, pgrp, start) = read_stat(Path::new("/proc"), me).unwrap();
        assert!(group_members(Path::new("/proc"), pgrp, start).contains(&me));
        assert!(!group_members(Path::new("/proc"), pgrp, start + 1_000_000_000).contains(&me));
    }
}
