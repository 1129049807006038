//! `gatehouse doctor`: what the kernel offers, judged.
//!
//! The probing (files, syscalls, a throwaway user namespace) happens in
//! `sandbox::probe`; this module turns the measured [`KernelFacts`] into one
//! [`Check`] per feature, purely.

use serde::Serialize;

/// Measured facts about the running kernel and host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KernelFacts {
    pub is_root: bool,
    /// Creating a user namespace (plus mount/pid/net) worked just now.
    pub userns_works: bool,
    /// `user.max_user_namespaces`, when readable.
    pub max_user_namespaces: Option<u64>,
    /// Debian's `kernel.unprivileged_userns_clone`, when present.
    pub unprivileged_userns_clone: Option<u64>,
    /// Ubuntu's `kernel.apparmor_restrict_unprivileged_userns`, when present.
    pub apparmor_restricts_userns: Option<u64>,
    /// 0 when Landlock is missing or disabled.
    pub landlock_abi: i32,
    /// seccomp filter mode is available.
    pub seccomp_filter: bool,
    /// Controllers available in the cgroup v2 hierarchy (empty: no v2).
    pub cgroup2_controllers: Vec<String>,
    /// Where the v2 hierarchy is mounted, if anywhere.
    pub cgroup2_path: Option<String>,
    /// We may create cgroups in v2.
    pub cgroup2_writable: bool,
    /// The v2 hierarchy is mounted with `favordynmods`.
    pub cgroup2_favordynmods: bool,
    /// v1 controllers (memory, pids, cpu) we may create cgroups in.
    pub cgroup1_writable: Vec<String>,
    pub pidfd: bool,
    /// `dev.tty.legacy_tiocsti`, when present.
    pub legacy_tiocsti: Option<u64>,
    /// What a per-ticket work dir filesystem needs.
    pub work_dir_fs: crate::workdir_fs::Facts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Degraded,
    Missing,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub feature: &'static str,
    pub status: Status,
    pub detail: String,
}

const LIMIT_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// The landlock ABI this build is designed for; newer kernels work too.
pub const LANDLOCK_TARGET_ABI: i32 = 7;

/// One check per feature, in the order `gatehouse doctor` prints them.
pub fn assess(f: &KernelFacts) -> Vec<Check> {
    vec![
        user_namespaces(f),
        landlock(f),
        seccomp(f),
        cgroups(f),
        pidfd(f),
        tiocsti(f),
        work_dir_size(f),
    ]
}

fn check(feature: &'static str, status: Status, detail: String) -> Check {
    Check {
        feature,
        status,
        detail,
    }
}

fn user_namespaces(f: &KernelFacts) -> Check {
    let userns_sysctls = format!(
        "user.max_user_namespaces={}{}{}",
        f.max_user_namespaces
            .map_or("?".to_string(), |v| v.to_string()),
        f.unprivileged_userns_clone
            .map_or(String::new(), |v| format!(
                ", kernel.unprivileged_userns_clone={v}"
            )),
        f.apparmor_restricts_userns
            .map_or(String::new(), |v| format!(
                ", kernel.apparmor_restrict_unprivileged_userns={v}"
            )),
    );
    if f.userns_works {
        check(
            "user namespaces",
            Status::Ok,
            format!("a user+mount+pid+net namespace was created ({userns_sysctls})"),
        )
    } else {
        check(
            "user namespaces",
            Status::Missing,
            format!(
                "cannot create a user namespace ({userns_sysctls}); sandboxes will refuse to start. \
                 Fix: sysctl user.max_user_namespaces=15000, kernel.unprivileged_userns_clone=1, \
                 or kernel.apparmor_restrict_unprivileged_userns=0"
            ),
        )
    }
}

fn landlock(f: &KernelFacts) -> Check {
    match f.landlock_abi {
        abi if abi >= 6 => check(
            "landlock",
            Status::Ok,
            format!("ABI {abi}: filesystem, TCP connect/bind, abstract-socket and signal scoping"),
        ),
        abi if abi >= 4 => check(
            "landlock",
            Status::Degraded,
            format!("ABI {abi}: filesystem and TCP rules, but no abstract-socket/signal scoping (needs ABI 6, Linux 6.12); the network namespace still isolates abstract sockets"),
        ),
        abi if abi >= 1 => check(
            "landlock",
            Status::Degraded,
            format!("ABI {abi}: filesystem rules only (TCP rules need ABI 4, Linux 6.7)"),
        ),
        _ => check(
            "landlock",
            Status::Missing,
            "not available; profiles requiring it (the default) refuse to start. Fix: boot with lsm=…,landlock".to_string(),
        ),
    }
}

fn seccomp(f: &KernelFacts) -> Check {
    check(
        "seccomp",
        if f.seccomp_filter {
            Status::Ok
        } else {
            Status::Missing
        },
        if f.seccomp_filter {
            "filter mode available".to_string()
        } else {
            "filter mode unavailable; profiles requiring it refuse to start (kernel needs CONFIG_SECCOMP_FILTER)".to_string()
        },
    )
}

fn cgroups(f: &KernelFacts) -> Check {
    let v2_has_all = LIMIT_CONTROLLERS
        .iter()
        .all(|c| f.cgroup2_controllers.iter().any(|h| h == c));
    let v1_has_all = LIMIT_CONTROLLERS
        .iter()
        .all(|c| f.cgroup1_writable.iter().any(|h| h == c));
    let v2_where = f
        .cgroup2_path
        .clone()
        .unwrap_or_else(|| "not mounted".to_string());
    if v2_has_all && f.cgroup2_writable {
        // A whole process joining a v2 cgroup takes the global threadgroup
        // lock, which waits for an RCU grace period per run unless the
        // hierarchy favours dynamic changes. (v1 joins per thread, without it.)
        let advice = if f.cgroup2_favordynmods {
            String::new()
        } else {
            format!(
                ". Each sandbox start waits for an RCU grace period (milliseconds) to join its cgroup; \
                 to avoid that (Linux >= 6.0; fork/exit get slightly dearer host-wide, and from Linux 6.18 \
                 the faster per-process lock stays on until reboot): mount -o remount,favordynmods {v2_where}"
            )
        };
        check(
            "cgroups",
            Status::Ok,
            format!(
                "v2 at {v2_where} with memory, pids, cpu, writable: limits enforced by cgroup v2{advice}"
            ),
        )
    } else if v1_has_all {
        check(
            "cgroups",
            Status::Ok,
            format!(
                "v2 at {v2_where} has [{}]; v1 memory, pids, cpu are writable: limits enforced by cgroup v1",
                f.cgroup2_controllers.join(" ")
            ),
        )
    } else {
        check(
            "cgroups",
            Status::Degraded,
            format!(
                "no writable cgroup with memory, pids and cpu (v2 at {v2_where} has [{}]{}): limits fall back to rlimits (pids, memory as data size, open files), cpu unlimited; profiles with require.cgroup_limits refuse to start. Fix: run as root, or delegate a v2 subtree to this user",
                f.cgroup2_controllers.join(" "),
                if f.is_root { "" } else { ", not root" },
            ),
        )
    }
}

fn pidfd(f: &KernelFacts) -> Check {
    check(
        "pidfd",
        if f.pidfd {
            Status::Ok
        } else {
            Status::Degraded
        },
        if f.pidfd {
            "pidfd_open works".to_string()
        } else {
            "pidfd_open unavailable (Linux < 5.3); not needed by the sandbox itself".to_string()
        },
    )
}

fn tiocsti(f: &KernelFacts) -> Check {
    match f.legacy_tiocsti {
        Some(1) => check(
            "TIOCSTI",
            Status::Ok,
            "dev.tty.legacy_tiocsti=1: terminal injection possible on the host; the sandbox blocks it with seccomp and a new session".to_string(),
        ),
        _ => check(
            "TIOCSTI",
            Status::Ok,
            "legacy TIOCSTI disabled or absent; seccomp blocks it anyway".to_string(),
        ),
    }
}

/// How `limits.work_dir_size` can be enforced here.
fn work_dir_size(f: &KernelFacts) -> Check {
    match f.work_dir_fs.missing() {
        None => check(
            "work dir size",
            Status::Ok,
            "ext4 in a sparse image on a loop device: the supervisor gives each ticket's work dir a filesystem of its own of limits.work_dir_size".to_string(),
        ),
        Some(missing) => check(
            "work dir size",
            Status::Degraded,
            format!("no per-ticket filesystem: {missing} is missing, so limits.work_dir_size is not enforced on work dirs the supervisor makes and profiles with require.work_dir_size refuse to start (rootless there is no mechanism: the work dir stays on the caller's filesystem). Fix: run the supervisor as root on a host with loop devices, ext4 and e2fsprogs"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> KernelFacts {
        KernelFacts {
            is_root: true,
            userns_works: true,
            max_user_namespaces: Some(1000),
            landlock_abi: 7,
            seccomp_filter: true,
            cgroup2_controllers: vec!["hugetlb".into()],
            cgroup2_path: Some("/sys/fs/cgroup/unified".into()),
            cgroup1_writable: vec!["memory".into(), "pids".into(), "cpu".into()],
            pidfd: true,
            work_dir_fs: crate::workdir_fs::Facts {
                is_root: true,
                loop_control: true,
                ext4: true,
                mkfs_ext4: true,
                mount: true,
            },
            ..KernelFacts::default()
        }
    }

    fn status(checks: &[Check], feature: &str) -> Status {
        checks
            .iter()
            .find(|c| c.feature == feature)
            .map(|c| c.status)
            .unwrap()
    }

    #[test]
    fn one_check_per_feature_in_order() {
        let features: Vec<&str> = assess(&good()).iter().map(|c| c.feature).collect();
        assert_eq!(
            features,
            [
                "user namespaces",
                "landlock",
                "seccomp",
                "cgroups",
                "pidfd",
                "TIOCSTI",
                "work dir size"
            ]
        );
    }

    #[test]
    fn judges_each_feature() {
        type Case = (fn(&mut KernelFacts), &'static str, Status);
        let cases: &[Case] = &[
            (|_| {}, "landlock", Status::Ok),
            (|f| f.landlock_abi = 5, "landlock", Status::Degraded),
            (|f| f.landlock_abi = 0, "landlock", Status::Missing),
            (
                |f| f.userns_works = false,
                "user namespaces",
                Status::Missing,
            ),
            (|f| f.seccomp_filter = false, "seccomp", Status::Missing),
            (|_| {}, "cgroups", Status::Ok),
            (|_| {}, "work dir size", Status::Ok),
            (
                |f| f.work_dir_fs.is_root = false,
                "work dir size",
                Status::Degraded,
            ),
            (
                |f| f.work_dir_fs.mkfs_ext4 = false,
                "work dir size",
                Status::Degraded,
            ),
            (|f| f.cgroup1_writable.clear(), "cgroups", Status::Degraded),
            (
                |f| {
                    f.cgroup1_writable.clear();
                    f.cgroup2_controllers = vec!["cpu".into(), "memory".into(), "pids".into()];
                    f.cgroup2_writable = true;
                },
                "cgroups",
                Status::Ok,
            ),
            (|f| f.pidfd = false, "pidfd", Status::Degraded),
        ];
        for (change, feature, want) in cases {
            let mut f = good();
            change(&mut f);
            assert_eq!(status(&assess(&f), feature), *want, "{feature} with {f:?}");
        }
    }

    #[test]
    fn a_v2_host_without_favordynmods_gets_the_remount_command() {
        let mut f = good();
        f.cgroup1_writable.clear();
        f.cgroup2_controllers = vec!["cpu".into(), "memory".into(), "pids".into()];
        f.cgroup2_path = Some("/sys/fs/cgroup".into());
        f.cgroup2_writable = true;
        let detail = |f: &KernelFacts| {
            assess(f)
                .into_iter()
                .find(|c| c.feature == "cgroups")
                .unwrap()
                .detail
        };
        assert!(
            detail(&f).ends_with("mount -o remount,favordynmods /sys/fs/cgroup"),
            "{}",
            detail(&f)
        );
        f.cgroup2_favordynmods = true;
        assert!(!detail(&f).contains("favordynmods"), "{}", detail(&f));
        // v1 hosts join per thread, which needs no such setting.
        assert!(
            !detail(&good()).contains("favordynmods"),
            "{}",
            detail(&good())
        );
    }

    #[test]
    fn missing_features_say_how_to_fix() {
        let mut f = good();
        f.userns_works = false;
        let checks = assess(&f);
        let userns = checks
            .iter()
            .find(|c| c.feature == "user namespaces")
            .unwrap();
        assert!(userns.detail.contains("Fix:"), "{}", userns.detail);
    }
}
