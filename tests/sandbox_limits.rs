//! Limits and lifetime: pids, memory, wall time, signals, parent death;
//! nothing a worker starts outlives its sandbox. Root and rootless.

// Helpers outside #[test] fns panic on setup failure, like the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use gatehouse_testkit::machine::Feature;
use gatehouse_testkit::procs::{
    running as host_processes_with, signal, with_all as host_processes_with_all,
};
use gatehouse_testkit::random;
use gatehouse_testkit::sandbox::*;
use gatehouse_testkit::{require, Need};

/// A `sleep` argument no other process on the host has.
fn unique_sleep() -> String {
    format!(
        "{}.{}",
        9000 + std::process::id() % 1000,
        random::number() % 100_000
    )
}

fn wait_until_gone(needle: &str) -> Vec<i32> {
    wait_until_empty(|| host_processes_with(needle))
}

fn wait_until_empty(find: impl Fn() -> Vec<i32>) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = find();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const FORK_BOMB: &str = r#"
import os, time
n = 0
try:
    for i in range(5000):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("STOPPED", n, e.errno, flush=True)
else:
    print("UNBOUNDED", n, flush=True)
"#;

#[test]
fn a_fork_bomb_stops_at_the_pids_limit() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let p = s.profile("pids", "extends = \"default\"\n[limits]\npids = 32\n");
        std::fs::write(s.work.join("bomb.py"), FORK_BOMB).unwrap();
        let r = s.sh_with(p.to_str().unwrap(), &[], "python3 bomb.py");
        r.ok();
        let mut words = r.stdout.split_whitespace();
        assert_eq!(words.next(), Some("STOPPED"), "{mode:?}: {r:#?}");
        let forked: u32 = words.next().unwrap().parse().unwrap();
        assert!(forked < 32, "{mode:?}: forked {forked} with pids = 32");
        assert!(forked > 0, "{mode:?}: could not fork at all: {r:#?}");
    }
}

#[test]
fn a_memory_hog_stops_at_the_memory_limit() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let p = s.profile("mem", "extends = \"default\"\n[limits]\nmemory_mib = 96\n");
        let hog = |mib: u32| {
            s.sh_with(
                p.to_str().unwrap(),
                &[],
                &format!(
                    "python3 -c 'b = bytearray({mib} * 1024 * 1024); print(\"ALLOCATED\", len(b))'"
                ),
            )
        };
        // Control: a modest allocation works, so the failure below is the limit.
        let small = hog(16);
        small.ok();
        assert!(small.stdout.contains("ALLOCATED"), "{mode:?}: {small:#?}");
        let big = hog(1024);
        assert!(!big.stdout.contains("ALLOCATED"), "{mode:?}: {big:#?}");
        assert_ne!(big.code, Some(0), "{mode:?}: {big:#?}");
        if mode == Mode::Root {
            // The cgroup's OOM killer: SIGKILL, 128 + 9.
            assert_eq!(big.code, Some(137), "{mode:?}: {big:#?}");
        }
    }
}

#[test]
fn a_double_forked_daemon_dies_with_the_command() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let secs = unique_sleep();
        let r = s.sh(&format!(
            "(setsid sleep {secs} </dev/null >/dev/null 2>&1 &); sleep {secs} </dev/null >/dev/null 2>&1 & \
             sleep 0.2; echo started"
        ));
        r.ok();
        assert!(r.stdout.contains("started"));
        let left = host_processes_with(&secs);
        assert!(left.is_empty(), "{mode:?}: daemons survived: {left:?}");
    }
}

#[test]
fn wall_time_kills_the_whole_sandbox() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let secs = unique_sleep();
        let start = Instant::now();
        let r = s.sh_with(
            "default",
            &["--wall-time", "1"],
            &format!("(setsid sleep {secs} </dev/null >/dev/null 2>&1 &); sleep 60"),
        );
        let took = start.elapsed();
        assert_eq!(r.code, Some(EXIT_WALL_TIME), "{mode:?}: {r:#?}");
        assert!(r.stderr.contains("wall time"), "{mode:?}: {r:#?}");
        assert!(took < Duration::from_secs(20), "{mode:?}: took {took:?}");
        let left = wait_until_gone(&secs);
        assert!(
            left.is_empty(),
            "{mode:?}: survived the wall time: {left:?}"
        );
    }
}

#[test]
fn wall_time_flag_cannot_loosen_the_profile() {
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let p = s.profile(
        "short",
        "extends = \"default\"\n[limits]\nwall_time_secs = 1\n",
    );
    let r = s.sh_with(p.to_str().unwrap(), &["--wall-time", "600"], "sleep 60");
    assert_eq!(r.code, Some(EXIT_WALL_TIME), "{r:#?}");
}

fn start_sleeper(s: &Scratch, secs: &str) -> std::process::Child {
    let work = s.work.to_str().unwrap().to_string();
    let script = format!(
        "(setsid sleep {secs} </dev/null >/dev/null 2>&1 &); touch /work/started; sleep {secs}"
    );
    let child = s
        .command(&[
            "sandbox",
            "run",
            "--profile",
            "default",
            "--workdir",
            &work,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.work.join("started").exists() {
        assert!(Instant::now() < deadline, "sandbox did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // `started` is written before either sleep has been executed: wait for
    // both (the detached one and the shell's), or a busy machine races the
    // caller's checks.
    while host_processes_with(secs).len() < 2 {
        assert!(Instant::now() < deadline, "the sleepers did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn termination_signals_kill_the_sandbox_and_exit_128_plus_n() {
    for mode in modes() {
        for (sig, n) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
            let s = Scratch::new(mode);
            let secs = unique_sleep();
            let child = start_sleeper(&s, &secs);
            signal(child.id(), sig);
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(128 + n),
                "{mode:?} SIG{sig}: {out:?}"
            );
            let left = wait_until_gone(&secs);
            assert!(left.is_empty(), "{mode:?} SIG{sig}: survived: {left:?}");
        }
    }
}

#[test]
fn the_sandbox_dies_when_the_caller_of_sandbox_run_dies() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let secs = unique_sleep();
        let work = s.work.to_str().unwrap().to_string();
        let script = format!(
            "(setsid sleep {secs} </dev/null >/dev/null 2>&1 &); touch /work/started; sleep {secs}"
        );
        let inner = s.command(&[
            "sandbox",
            "run",
            "--profile",
            "default",
            "--workdir",
            &work,
            "--",
            "sh",
            "-c",
            &script,
        ]);
        // A caller that starts `sandbox run` in the background and waits.
        let mut caller = std::process::Command::new("sh");
        caller
            .args(["-c", "\"$@\" & wait", "caller"])
            .arg(inner.get_program())
            .args(inner.get_args());
        let mut caller = caller
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !s.work.join("started").exists() {
            assert!(Instant::now() < deadline, "sandbox did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        signal(caller.id(), "KILL");
        let _ = caller.wait();
        let left = wait_until_gone(&secs);
        assert!(
            left.is_empty(),
            "{mode:?}: survived the caller's death: {left:?}"
        );
        let runs = wait_until_empty(|| host_processes_with_all(&["sandbox run", &secs]));
        assert!(runs.is_empty(), "{mode:?}: sandbox run survived: {runs:?}");
    }
}

#[test]
fn the_sandbox_dies_with_its_parent() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let secs = unique_sleep();
        let mut child = start_sleeper(&s, &secs);
        assert!(
            !host_processes_with(&secs).is_empty(),
            "{mode:?}: sleeper not seen"
        );
        signal(child.id(), "KILL");
        let _ = child.wait();
        let left = wait_until_gone(&secs);
        assert!(left.is_empty(), "{mode:?}: survived its parent: {left:?}");
    }
}

#[test]
fn the_cpu_limit_throttles_a_busy_loop() {
    // cpu is limited only through cgroups.
    require!(
        Need::Root,
        Need::Sandbox,
        Need::Kernel(Feature::CgroupLimits)
    );
    let s = Scratch::new(Mode::Root);
    let p = s.profile("cpu", "extends = \"default\"\n[limits]\ncpu_percent = 20\n");
    // Spin for 1.5 s of wall time and report the CPU time obtained.
    let r = s.sh_with(
        p.to_str().unwrap(),
        &[],
        "python3 -c 'import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\nprint(time.process_time())'",
    );
    r.ok();
    let cpu: f64 = r.stdout.trim().parse().unwrap();
    // 20% of 1.5 s is 0.3 s; allow for the scheduler's period granularity.
    assert!(
        cpu < 0.75,
        "got {cpu} s of CPU in 1.5 s with cpu_percent = 20"
    );
}

/// Opens inotify instances until the kernel refuses; prints how many and
/// the errno of the refusal.
const INOTIFY_HOG: &str = r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 500:
    fd = libc.inotify_init()
    if fd < 0:
        break
    fds.append(fd)
print(len(fds), ctypes.get_errno())
"#;

#[test]
fn inotify_instances_are_the_sandboxes_own_budget_not_the_host_users() {
    for mode in modes() {
        let s = Scratch::new(mode);
        std::fs::write(s.work.join("hog.py"), INOTIFY_HOG).unwrap();
        // The default budget, then a profile's own.
        let r = s.sh("python3 hog.py");
        r.ok();
        assert_eq!(r.stdout.trim(), "32 24", "{mode:?}: {r:#?}");
        let p = s.profile(
            "inotify",
            "extends = \"default\"\n[limits]\ninotify_instances = 5\n",
        );
        let r = s.sh_with(p.to_str().unwrap(), &[], "python3 hog.py");
        r.ok();
        // EMFILE after exactly the budget, well below the host user's 128.
        assert_eq!(r.stdout.trim(), "5 24", "{mode:?}: {r:#?}");
    }
}

#[test]
fn no_namespace_can_be_made_inside_even_past_seccomp() {
    // seccomp refuses unshare and clone with namespace flags; the user
    // namespace's own budget of zero holds as well. Read it from inside.
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh(
            "for n in user mnt pid net ipc uts time; do cat /proc/sys/user/max_${n}_namespaces; done; \
             cat /proc/sys/user/max_cgroup_namespaces",
        );
        r.ok();
        let values: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(
            values,
            ["0", "0", "0", "0", "0", "0", "0", "1"],
            "{mode:?}: {r:#?}"
        );
    }
}

/// The state letter of `pid` from `/proc/<pid>/stat`.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Where `gatehouse-<pid>` is, among the hierarchies a root run may use:
/// the cgroup2 mount's `gatehouse/`, or this process's own v1 cgroups.
fn cgroup_parent_of(pid: u32) -> Option<std::path::PathBuf> {
    let name = format!("gatehouse-{pid}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let mut candidates: Vec<std::path::PathBuf> = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| std::path::Path::new(f[1]).join("gatehouse"))
        })
        .collect();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        for ctrl in ctrls.split(',').filter(|c| !c.is_empty()) {
            candidates.push(
                std::path::Path::new("/sys/fs/cgroup")
                    .join(ctrl)
                    .join(path.trim_start_matches('/')),
            );
        }
    }
    candidates.into_iter().find(|p| p.join(&name).is_dir())
}

/// After a kill -9 the creator of a cgroup may linger as a zombie its
/// parent never reaps: the next run's sweep removes that cgroup as it does
/// one whose creator is gone, and leaves one whose creator runs.
#[test]
fn the_sweep_removes_cgroups_of_zombie_creators() {
    if !mode_available(Mode::Root) {
        return;
    }
    let s = Scratch::new(Mode::Root);
    let p = s.profile("mem", "extends = \"default\"\n[limits]\nmemory_mib = 256\n");
    // A run that holds its cgroup until told, to find where cgroups go.
    let mut held = s
        .command(&[
            "sandbox",
            "run",
            "--profile",
            p.to_str().unwrap(),
            "--workdir",
            s.work.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "while [ ! -e go ]; do sleep 0.02; done",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let parent = loop {
        if let Some(parent) = cgroup_parent_of(held.id()) {
            break parent;
        }
        assert!(Instant::now() < deadline, "the run made no cgroup");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::fs::write(s.work.join("go"), "").unwrap();
    assert!(held.wait().unwrap().success());

    // A zombie: a child that exited and that this test does not reap yet.
    let mut zombie = std::process::Command::new("true").spawn().unwrap();
    while proc_state(zombie.id()) != Some('Z') {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut live = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let stale = parent.join(format!("gatehouse-{}", zombie.id()));
    let kept = parent.join(format!("gatehouse-{}", live.id()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::create_dir(&kept).unwrap();

    let r = s.sh_with(p.to_str().unwrap(), &[], "true");
    let (stale_left, kept_left) = (stale.exists(), kept.exists());
    let _ = std::fs::remove_dir(&stale);
    let _ = std::fs::remove_dir(&kept);
    let _ = live.kill();
    let _ = live.wait();
    let _ = zombie.wait();
    r.ok();
    assert!(!stale_left, "a zombie creator's cgroup was left: {stale:?}");
    assert!(
        kept_left,
        "a running creator's cgroup was removed: {kept:?}"
    );
}
