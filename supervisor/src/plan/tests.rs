use std::path::PathBuf;

use proptest::prelude::*;

use super::*;
use crate::profile::{resolve, DirSource};

fn default_profile() -> Profile {
    resolve(&DirSource { dirs: vec![] }, "default").unwrap()
}

fn request() -> RunRequest {
    RunRequest {
        workdir: PathBuf::from("/srv/tickets/tkt_1"),
        command: vec!["true".into()],
        ..RunRequest::default()
    }
}

const ROOTLESS: Identity = Identity {
    host_uid: 1000,
    host_gid: 1000,
    caller_is_root: false,
};

fn build(req: &RunRequest, env: &[(&str, &str)]) -> Plan {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Plan::build(&default_profile(), req, ROOTLESS, &env).unwrap()
}

fn env_of(plan: &Plan, key: &str) -> Option<String> {
    plan.env
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

#[test]
fn mounts_bind_the_profile_read_only_and_the_work_dir_writable() {
    let plan = build(&request(), &[]);
    let ro: Vec<(&PathBuf, bool)> = plan
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::BindReadOnly { inside, exec, .. } => Some((inside, *exec)),
            _ => None,
        })
        .collect();
    assert!(ro.contains(&(&PathBuf::from("/usr"), true)));
    assert!(ro.contains(&(&PathBuf::from("/etc/ssl/certs"), false)));
    assert!(plan.mounts.contains(&MountStep::BindWritable {
        host: PathBuf::from("/srv/tickets/tkt_1"),
        inside: PathBuf::from("/work"),
        exec: true,
    }));
    assert!(plan.mounts.contains(&MountStep::Proc));
    assert!(plan.mounts.contains(&MountStep::Dev));
    // No sockets asked for: none bound, no relay, no TCP allowed.
    assert!(plan.relay.is_none());
    assert!(plan.landlock.tcp_connect.is_empty());
    assert!(!ro.iter().any(|(p, _)| p.starts_with("/run")));
    assert_eq!(plan.cwd, PathBuf::from("/work"));
}

#[test]
fn binds_come_parents_first() {
    let plan = build(&request(), &[]);
    let depths: Vec<usize> = plan
        .mounts
        .iter()
        .take_while(|m| matches!(m, MountStep::BindReadOnly { .. }))
        .map(|m| match m {
            MountStep::BindReadOnly { inside, .. } => inside.components().count(),
            _ => 0,
        })
        .collect();
    assert!(depths.windows(2).all(|w| w[0] <= w[1]), "{depths:?}");
}

#[test]
fn sockets_ca_and_binary_are_bound_when_asked_for() {
    let req = RunRequest {
        proxy_socket: Some("/run/gh/tkt_1.sock".into()),
        control_socket: Some("/run/gh/control.sock".into()),
        ca_bundle: Some("PEM".into()),
        gatehouse_exe: Some("/usr/local/bin/gatehouse".into()),
        ..request()
    };
    let plan = build(&req, &[]);
    let bound = |inside: &str| {
        plan.mounts.iter().any(|m| {
            matches!(m, MountStep::BindReadOnly { inside: i, optional: false, .. } if i == &PathBuf::from(inside))
        })
    };
    assert!(bound(inside::PROXY_SOCKET));
    assert!(bound(inside::CONTROL_SOCKET));
    assert!(bound(inside::GATEHOUSE_BIN));
    assert!(plan.mounts.contains(&MountStep::File {
        inside: inside::CA_BUNDLE.into(),
        contents: "PEM".into()
    }));
    assert_eq!(plan.relay, Some(PathBuf::from(inside::PROXY_SOCKET)));
    assert_eq!(plan.landlock.tcp_connect, [RELAY_PORT]);
    assert_eq!(env_of(&plan, "HTTPS_PROXY").as_deref(), Some(RELAY_URL));
    assert_eq!(env_of(&plan, "http_proxy").as_deref(), Some(RELAY_URL));
    assert_eq!(
        env_of(&plan, "GH_TOKEN").as_deref(),
        Some(GH_TOKEN_PLACEHOLDER)
    );
    for k in [
        "SSL_CERT_FILE",
        "GIT_SSL_CAINFO",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    ] {
        assert_eq!(env_of(&plan, k).as_deref(), Some(inside::CA_BUNDLE), "{k}");
    }
    assert!(env_of(&plan, "PATH")
        .unwrap()
        .starts_with("/run/gatehouse/bin:"));
}

#[test]
fn a_proxy_dir_is_bound_whole_and_the_relay_reaches_the_socket_in_it() {
    let req = RunRequest {
        proxy_dir: Some("/run/gh/identities/tkt_1".into()),
        ..request()
    };
    let plan = build(&req, &[]);
    assert!(plan.mounts.iter().any(|m| matches!(
        m,
        MountStep::BindReadOnly { host, inside: i, optional: false, exec: false }
            if host == &PathBuf::from("/run/gh/identities/tkt_1") && i == &PathBuf::from(inside::PROXY_DIR)
    )));
    assert_eq!(
        plan.relay,
        Some(PathBuf::from("/run/gatehouse/proxy/proxy.sock"))
    );
    assert_eq!(plan.landlock.tcp_connect, [RELAY_PORT]);
    assert_eq!(env_of(&plan, "HTTPS_PROXY").as_deref(), Some(RELAY_URL));
    // Neither form: no relay, no port, no proxy variables.
    let none = build(&request(), &[]);
    assert_eq!(none.relay, None);
    assert!(none.landlock.tcp_connect.is_empty());
    assert_eq!(env_of(&none, "HTTPS_PROXY"), None);
    let relative = RunRequest {
        proxy_dir: Some("ids/tkt_1".into()),
        ..request()
    };
    assert!(matches!(
        Plan::build(&default_profile(), &relative, ROOTLESS, &[]),
        Err(PlanError::NotAbsolute {
            flag: "--proxy-dir",
            ..
        })
    ));
}

#[test]
fn env_is_an_allowlist_and_sandbox_values_win() {
    let req = RunRequest {
        env: vec![
            "TICKET=tkt_1".into(),
            "HTTPS_PROXY=http://evil.example:1".into(),
            "GH_TOKEN=ghp_real".into(),
        ],
        ..request()
    };
    let plan = build(
        &req,
        &[
            ("TERM", "xterm"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("HOME", "/root"),
            ("SSH_AUTH_SOCK", "/x"),
        ],
    );
    assert_eq!(env_of(&plan, "TERM").as_deref(), Some("xterm"), "pass list");
    assert_eq!(
        env_of(&plan, "HOME").as_deref(),
        Some("/tmp"),
        "profile value, not the caller's"
    );
    assert_eq!(env_of(&plan, "TICKET").as_deref(), Some("tkt_1"));
    for k in ["GITHUB_TOKEN", "SSH_AUTH_SOCK", "HTTPS_PROXY", "GH_TOKEN"] {
        assert_eq!(
            env_of(&plan, k),
            None,
            "{k} must not be set without a proxy"
        );
    }
}

#[test]
fn bad_requests_are_errors() {
    let profile = default_profile();
    let bad_env = RunRequest {
        env: vec!["NOEQUALS".into()],
        ..request()
    };
    assert!(matches!(
        Plan::build(&profile, &bad_env, ROOTLESS, &[]),
        Err(PlanError::BadEnv(_))
    ));
    let relative = RunRequest {
        workdir: "work".into(),
        ..request()
    };
    assert!(matches!(
        Plan::build(&profile, &relative, ROOTLESS, &[]),
        Err(PlanError::NotAbsolute { .. })
    ));
    let none = RunRequest {
        command: vec![],
        ..request()
    };
    assert!(matches!(
        Plan::build(&profile, &none, ROOTLESS, &[]),
        Err(PlanError::NoCommand)
    ));
}

#[test]
fn wall_time_only_tightens() {
    let profile = default_profile();
    let limit = profile.limits.wall_time_secs.unwrap();
    for (asked, want) in [(None, limit), (Some(10), 10), (Some(limit + 1000), limit)] {
        let req = RunRequest {
            wall_time_secs: asked,
            ..request()
        };
        let plan = Plan::build(&profile, &req, ROOTLESS, &[]).unwrap();
        assert_eq!(plan.wall_time, Some(Duration::from_secs(want)), "{asked:?}");
    }
}

#[test]
fn landlock_grants_writes_only_to_work_tmp_and_shm() {
    let plan = build(&request(), &[]);
    let writable: Vec<&PathBuf> = plan
        .landlock
        .rules
        .iter()
        .filter(|(_, a)| matches!(a, FsAccess::ReadWrite | FsAccess::ReadWriteExec))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        writable,
        [
            &PathBuf::from("/work"),
            &PathBuf::from("/tmp"),
            &PathBuf::from("/dev/shm")
        ]
    );
    assert!(plan.landlock.required);
    let exec: Vec<&PathBuf> = plan
        .landlock
        .rules
        .iter()
        .filter(|(_, a)| matches!(a, FsAccess::ReadExec | FsAccess::ReadWriteExec))
        .map(|(p, _)| p)
        .collect();
    assert!(!exec.contains(&&PathBuf::from("/etc/ssl/certs")));
}

#[test]
fn memory_files_are_denied_with_writable_exec_off() {
    let mut profile = default_profile();
    for writable_exec in [false, true] {
        profile.filesystem.writable_exec = writable_exec;
        let plan = Plan::build(&profile, &request(), ROOTLESS, &[]).unwrap();
        let memfd = plan
            .seccomp
            .denials
            .iter()
            .any(|d| d.name == "memfd_create");
        assert_eq!(memfd, !writable_exec, "writable_exec = {writable_exec}");
    }
}

#[test]
fn seccomp_denies_what_the_issue_lists() {
    let d = seccomp_denials(true);
    let names: Vec<&str> = d.iter().map(|d| d.name).collect();
    for must in [
        "mount",
        "umount2",
        "pivot_root",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "setns",
        "unshare",
        "clone",
        "clone3",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "userfaultfd",
        "socket",
        "ioctl(TIOCSTI)",
        "ioctl(TIOCLINUX)",
        "name_to_handle_at",
        "open_tree_attr",
        "kcmp",
        "modify_ldt",
        "memfd_secret",
        "quotactl_fd",
        "process_madvise",
        "personality",
    ] {
        assert!(names.contains(&must), "{must} not denied");
    }
    let clone3 = d.iter().find(|d| d.name == "clone3").unwrap();
    assert_eq!(
        clone3.errno,
        libc::ENOSYS,
        "glibc needs ENOSYS to fall back to clone"
    );
    // clone is denied only with namespace flags, so threads and fork work.
    assert!(d
        .iter()
        .filter(|d| d.name == "clone")
        .all(|d| !d.when.is_empty()));
    // The loopback families stay allowed.
    for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
        assert!(!d
            .iter()
            .any(|d| d.name == "socket" && d.when[0].value == family as u64));
    }
}

proptest! {
    /// Whatever the caller's environment holds, only names on the pass list
    /// get through from it.
    #[test]
    fn caller_env_never_leaks(vars in proptest::collection::vec(("[A-Z][A-Z0-9_]{0,10}", "[ -~]{0,20}"), 0..20)) {
        let profile = default_profile();
        let env: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.clone(), format!("leak-{v}"))).collect();
        let plan = Plan::build(&profile, &request(), ROOTLESS, &env).unwrap();
        for (k, v) in &plan.env {
            if v.starts_with("leak-") {
                prop_assert!(profile.env.pass.contains(k), "{} leaked", k);
            }
        }
    }
}

#[test]
fn mount_attrs_keep_setuid_devices_writes_and_exec_out_unless_granted() {
    let plan = build(&request(), &[]);
    let attrs_of = |inside: &str| {
        plan.mounts
            .iter()
            .find(|m| match m {
                MountStep::BindReadOnly { inside: i, .. }
                | MountStep::BindWritable { inside: i, .. }
                | MountStep::Tmpfs { inside: i, .. } => i == Path::new(inside),
                _ => false,
            })
            .map(MountStep::attrs)
            .unwrap()
    };
    let usr = attrs_of("/usr");
    assert_eq!(
        usr,
        MountAttrs {
            read_only: true,
            nosuid: true,
            nodev: true,
            noexec: false
        }
    );
    assert_eq!(attrs_of("/etc/ssl/certs"), MountAttrs::LOCKED);
    let work = attrs_of("/work");
    assert!(!work.read_only && work.nosuid && work.nodev);
    let tmp = attrs_of("/tmp");
    assert!(!tmp.read_only && tmp.nosuid && tmp.nodev);
    let proc = MountStep::Proc.attrs();
    assert!(proc.nosuid && proc.nodev && proc.noexec && !proc.read_only);
    let dev = MountStep::Dev.attrs();
    assert!(dev.nosuid && dev.noexec && !dev.nodev, "{dev:?}");
    for step in &plan.mounts {
        assert!(
            step.attrs().nosuid || matches!(step, MountStep::File { .. }),
            "{step:?}"
        );
    }
}

#[test]
fn exec_on_writable_mounts_follows_the_profile() {
    let mut profile = default_profile();
    for writable_exec in [false, true] {
        profile.filesystem.writable_exec = writable_exec;
        let plan = Plan::build(&profile, &request(), ROOTLESS, &[]).unwrap();
        for step in &plan.mounts {
            if let MountStep::BindWritable { .. } | MountStep::Tmpfs { .. } = step {
                assert_eq!(step.attrs().noexec, !writable_exec, "{step:?}");
            }
        }
    }
}

#[test]
fn procs_sensitive_parts_are_listed_read_only() {
    let plan = build(&request(), &[]);
    for p in [
        "/proc/sys",
        "/proc/sysrq-trigger",
        "/proc/kcore",
        "/proc/keys",
    ] {
        assert!(plan.proc_read_only.contains(&PathBuf::from(p)), "{p}");
    }
    assert!(plan
        .proc_read_only
        .iter()
        .all(|p| p.starts_with("/proc/") && p != Path::new("/proc/self")));
    assert_eq!(plan.proc_read_only.len(), PROC_READ_ONLY.len());
}

fn hosts_of(plan: &Plan) -> String {
    plan.mounts
        .iter()
        .find_map(|m| match m {
            MountStep::File { inside, contents } if inside == &PathBuf::from("/etc/hosts") => {
                Some(contents.clone())
            }
            _ => None,
        })
        .unwrap()
}

#[test]
fn transparent_mode_resolves_the_profiles_hosts_and_relays_443_and_80() {
    let mut profile = default_profile();
    profile.network.transparent = true;
    profile.network.transparent_hosts = vec!["api.github.com".into(), "github.com".into()];
    let with_dir = RunRequest {
        proxy_dir: Some("/run/gh/identities/tkt_1".into()),
        ..request()
    };
    let plan = Plan::build(&profile, &with_dir, ROOTLESS, &[]).unwrap();
    assert_eq!(
        plan.transparent,
        Some(PathBuf::from("/run/gatehouse/proxy/transparent.sock"))
    );
    assert_eq!(
        plan.relay,
        Some(PathBuf::from("/run/gatehouse/proxy/proxy.sock"))
    );
    assert_eq!(plan.landlock.tcp_connect, [RELAY_PORT, 443, 80]);
    assert_eq!(
        hosts_of(&plan),
        "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 api.github.com\n127.0.0.1 github.com\n"
    );
    assert!(plan.mounts.contains(&MountStep::File {
        inside: "/etc/nsswitch.conf".into(),
        contents: "passwd: files\ngroup: files\nhosts: files\n".into(),
    }));
    assert!(plan
        .landlock
        .rules
        .contains(&("/etc/nsswitch.conf".into(), FsAccess::Read)));
    // The proxy variables stay: clients that honour them keep using 3128.
    assert_eq!(env_of(&plan, "HTTPS_PROXY").as_deref(), Some(RELAY_URL));

    // Off (the default): only localhost resolves, only 3128 is reachable.
    let off = Plan::build(&default_profile(), &with_dir, ROOTLESS, &[]).unwrap();
    assert_eq!(off.transparent, None);
    assert_eq!(off.landlock.tcp_connect, [RELAY_PORT]);
    assert_eq!(hosts_of(&off), "127.0.0.1 localhost\n::1 localhost\n");

    // No proxy at all: nothing to reach, so nothing resolves either.
    let none = Plan::build(&profile, &request(), ROOTLESS, &[]).unwrap();
    assert_eq!(none.transparent, None);
    assert!(none.landlock.tcp_connect.is_empty());
    assert_eq!(hosts_of(&none), "127.0.0.1 localhost\n::1 localhost\n");

    // A bare proxy socket has no transparent socket beside it: refused.
    let socket_only = RunRequest {
        proxy_socket: Some("/run/gh/tkt_1.sock".into()),
        ..request()
    };
    assert!(matches!(
        Plan::build(&profile, &socket_only, ROOTLESS, &[]),
        Err(PlanError::TransparentNeedsProxyDir)
    ));
}
