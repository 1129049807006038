//! Probes the kernel for `gatehouse doctor` and for the fail-closed checks
//! of `sandbox run`.

use std::path::{Path, PathBuf};

use crate::doctor::KernelFacts;

/// What `sandbox run` checks before building anything.
#[derive(Debug, Clone, Copy)]
pub struct QuickFacts {
    pub landlock_abi: i32,
    pub seccomp: bool,
}

pub fn quick() -> QuickFacts {
    QuickFacts {
        landlock_abi: landlock_abi(),
        seccomp: seccomp_filter_available(),
    }
}

/// The kernel's Landlock ABI version, 0 if none.
pub fn landlock_abi() -> i32 {
    super::sys::landlock_abi()
}

fn seccomp_filter_available() -> bool {
    // The file lists the actions filters may return; it exists exactly when
    // the kernel has CONFIG_SECCOMP_FILTER.
    std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .map(|s| s.contains("errno"))
        .unwrap_or(false)
}

/// Where cgroup v2 is mounted: `/sys/fs/cgroup` on pure v2 hosts,
/// `/sys/fs/cgroup/unified` on hybrid ones.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, at, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(at))
    })
}

/// Whether the cgroup2 mount at `at` has the `favordynmods` option.
fn mounted_favoring_dynmods(at: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3
            && f[2] == "cgroup2"
            && Path::new(f[1]) == at
            && f[3].split(',').any(|o| o == "favordynmods")
    })
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether a child can enter new user, mount, PID and network namespaces,
/// as `sandbox run` will.
fn userns_works() -> bool {
    use nix::sched::CloneFlags;
    super::sys::fork::unshare_works(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWNET,
    )
}

pub fn kernel_facts() -> KernelFacts {
    let cgroup2_path = cgroup2_mount();
    let cgroup2_controllers: Vec<String> = cgroup2_path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p.join("cgroup.controllers")).ok())
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let writable =
        |p: &std::path::Path| nix::unistd::access(p, nix::unistd::AccessFlags::W_OK).is_ok();
    let cg = super::cgroup::probe_facts();
    let cgroup1_writable = cg
        .v1_dirs
        .iter()
        .flat_map(|dirs| {
            ["memory", "pids", "cpu"]
                .iter()
                .zip(dirs.iter())
                .filter(|(_, d)| writable(d))
                .map(|(c, _)| c.to_string())
        })
        .collect();
    KernelFacts {
        is_root: nix::unistd::geteuid().is_root(),
        userns_works: userns_works(),
        max_user_namespaces: read_u64("/proc/sys/user/max_user_namespaces"),
        unprivileged_userns_clone: read_u64("/proc/sys/kernel/unprivileged_userns_clone"),
        apparmor_restricts_userns: read_u64(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ),
        landlock_abi: landlock_abi(),
        seccomp_filter: seccomp_filter_available(),
        cgroup2_writable: cgroup2_path.as_deref().is_some_and(writable),
        cgroup2_favordynmods: cgroup2_path
            .as_deref()
            .is_some_and(mounted_favoring_dynmods),
        cgroup2_path: cgroup2_path.map(|p| p.display().to_string()),
        cgroup2_controllers,
        cgroup1_writable,
        pidfd: super::sys::pidfd_works(),
        legacy_tiocsti: read_u64("/proc/sys/dev/tty/legacy_tiocsti"),
        work_dir_fs: crate::workdir_fs::Facts::probe(),
    }
}
