use proptest::prelude::*;

use super::*;

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn fs(read_exec: &[&str], read: &[&str]) -> RawFilesystem {
    RawFilesystem {
        read_exec: strings(read_exec),
        read: strings(read),
        ..Default::default()
    }
}

#[test]
fn filesystem_table() {
    // (read_exec, read, refused key or None)
    let cases: &[(&[&str], &[&str], Option<&str>)] = &[
        (&["/usr", "/bin"], &["/etc/ssl"], None),
        (&[], &[], None),
        (&["usr"], &[], Some("filesystem.read_exec")),
        (&[], &["/etc/../root"], Some("filesystem.read")),
        (&[], &["/etc//ssl"], Some("filesystem.read")),
        (&[], &["/etc/"], Some("filesystem.read")),
        (&[], &["/work/x"], Some("filesystem.read")),
        (&["/"], &[], Some("filesystem.read_exec")),
        (&["/proc"], &[], Some("filesystem.read_exec")),
        (&["/run/gatehouse/x"], &[], Some("filesystem.read_exec")),
        (&["/a"], &["/a"], Some("filesystem.read")),
    ];
    for (read_exec, read, refused) in cases {
        let got = filesystem(fs(read_exec, read));
        assert_eq!(
            got.as_ref().err().map(|r| r.key.as_str()),
            *refused,
            "{read_exec:?} {read:?}: {got:?}"
        );
    }
}

#[test]
fn filesystem_defaults_and_tmp_size() {
    let f = filesystem(fs(&["/usr"], &[])).unwrap();
    assert_eq!(f.read_exec, [PathBuf::from("/usr")]);
    assert_eq!((f.writable_exec, f.tmp_size_mib), (true, 256));
    let f = filesystem(RawFilesystem {
        writable_exec: Some(false),
        tmp_size_mib: Some(64),
        ..Default::default()
    })
    .unwrap();
    assert_eq!((f.writable_exec, f.tmp_size_mib), (false, 64));
    let zero = filesystem(RawFilesystem {
        tmp_size_mib: Some(0),
        ..Default::default()
    });
    assert_eq!(zero.unwrap_err().key, "filesystem.tmp_size_mib");
}

#[test]
fn env_table() {
    /// `pass`, `set`, and the key refused (`None`: accepted).
    type EnvCase = (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
        Option<&'static str>,
    );
    let cases: &[EnvCase] = &[
        (&["LANG", "TERM"], &[("CI", "1"), ("A_B2", "")], None),
        (&["BAD NAME"], &[], Some("env")),
        (&["1X"], &[], Some("env")),
        (&[""], &[], Some("env")),
        (&["A-B"], &[], Some("env")),
        (&[], &[("1X", "v")], Some("env")),
        (&[], &[("NUL", "a\0b")], Some("env.set.NUL")),
        (&["A"], &[("B", "a\0")], Some("env.set.B")),
    ];
    for (pass, set, refused) in cases {
        let raw = RawEnv {
            pass: strings(pass),
            set: set
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let got = env(raw);
        assert_eq!(
            got.as_ref().err().map(|r| r.key.as_str()),
            *refused,
            "{pass:?} {set:?}: {got:?}"
        );
    }
}

#[test]
fn network_table() {
    // (rule_sets, tunnels, refused key or None)
    let cases: &[(&[&str], &[&str], Option<&str>)] = &[
        (&["github-worker"], &["registry.npmjs.org:443"], None),
        (&[], &[], None),
        (&[""], &[], Some("network.rule_sets")),
        (&["two words"], &[], Some("network.rule_sets")),
        (&[], &["no-port"], Some("network.tunnels")),
        (&[], &["host:0"], Some("network.tunnels")),
        (&[], &["host:65536"], Some("network.tunnels")),
        (&[], &[":443"], Some("network.tunnels")),
        (&[], &["ho st:443"], Some("network.tunnels")),
        // The proxy's rules: one host-name rule, one rule-set alphabet.
        (&[], &["localhost:443"], Some("network.tunnels")),
        (&[], &["Registry.npmjs.org:443"], Some("network.tunnels")),
        (&[], &["10.0.0.1:443"], Some("network.tunnels")),
        (&["GitHub"], &[], Some("network.rule_sets")),
    ];
    for (rule_sets, tunnels, refused) in cases {
        let raw = RawNetwork {
            rule_sets: strings(rule_sets),
            tunnels: strings(tunnels),
            ..RawNetwork::default()
        };
        let got = network(raw);
        assert_eq!(
            got.as_ref().err().map(|r| r.key.as_str()),
            *refused,
            "{rule_sets:?} {tunnels:?}: {got:?}"
        );
    }
}

#[test]
fn transparent_table() {
    // (transparent, hosts, refused at)
    let cases: &[(Option<bool>, &[&str], Option<&str>)] = &[
        (None, &[], None),
        (Some(false), &[], None),
        (Some(true), &["api.github.com"], None),
        (Some(true), &["api.github.com", "github.com"], None),
        // Listed while off (a layer turning off its parent's mode): unused.
        (Some(false), &["github.com"], None),
        (Some(true), &[], Some("network.transparent_hosts")),
        (
            Some(true),
            &["localhost"],
            Some("network.transparent_hosts"),
        ),
        (
            Some(true),
            &["a.localhost"],
            Some("network.transparent_hosts"),
        ),
        (
            Some(true),
            &["127.0.0.1"],
            Some("network.transparent_hosts"),
        ),
        (Some(true), &["github"], Some("network.transparent_hosts")),
        (
            Some(true),
            &["GitHub.com"],
            Some("network.transparent_hosts"),
        ),
        (
            Some(true),
            &["github.com:443"],
            Some("network.transparent_hosts"),
        ),
        (None, &["*.github.com"], Some("network.transparent_hosts")),
    ];
    for (transparent, hosts, refused) in cases {
        let raw = RawNetwork {
            transparent: *transparent,
            transparent_hosts: strings(hosts),
            ..RawNetwork::default()
        };
        let got = network(raw);
        assert_eq!(
            got.as_ref().err().map(|r| r.key.as_str()),
            *refused,
            "{transparent:?} {hosts:?}: {got:?}"
        );
        if let Ok(n) = got {
            assert_eq!(n.transparent, transparent.unwrap_or(false));
            assert_eq!(n.transparent_hosts, strings(hosts));
        }
    }
}

#[test]
fn limits_table() {
    type Edit = fn(&mut RawLimits);
    let refused: [(Edit, &str); 9] = [
        (|l| l.memory_mib = Some(0), "limits.memory_mib"),
        (|l| l.pids = Some(0), "limits.pids"),
        (|l| l.pids = Some(3), "limits.pids"),
        (|l| l.cpu_percent = Some(0), "limits.cpu_percent"),
        (|l| l.wall_time_secs = Some(0), "limits.wall_time_secs"),
        (|l| l.open_files = Some(0), "limits.open_files"),
        (
            |l| l.inotify_instances = Some(0),
            "limits.inotify_instances",
        ),
        (|l| l.inotify_watches = Some(0), "limits.inotify_watches"),
        (|l| l.pids = Some(2), "limits.pids"),
    ];
    for (edit, key) in refused {
        let mut raw = RawLimits::default();
        edit(&mut raw);
        assert_eq!(limits(&raw).unwrap_err().key, key);
    }
    let unset = limits(&RawLimits::default()).unwrap();
    assert_eq!(
        unset,
        Limits {
            memory_mib: None,
            pids: None,
            cpu_percent: None,
            wall_time_secs: None,
            open_files: 1024,
            inotify_instances: 32,
            inotify_watches: 65536,
            work_dir_size: None,
        }
    );
    let set = limits(&RawLimits {
        memory_mib: Some(512),
        pids: Some(4),
        cpu_percent: Some(150),
        wall_time_secs: Some(60),
        open_files: Some(64),
        inotify_instances: Some(8),
        inotify_watches: Some(100),
        work_dir_size: Some("2G".into()),
    })
    .unwrap();
    assert_eq!(
        (
            set.memory_mib,
            set.pids,
            set.cpu_percent,
            set.wall_time_secs,
            set.open_files,
            set.inotify_instances,
            set.inotify_watches
        ),
        (Some(512), Some(4), Some(150), Some(60), 64, 8, 100)
    );
    assert_eq!(set.work_dir_size, Some(2 << 30));
    let bad = limits(&RawLimits {
        work_dir_size: Some("2 G".into()),
        ..RawLimits::default()
    })
    .unwrap_err();
    assert_eq!(bad.key, "limits.work_dir_size");
    assert!(bad.expected.contains("`2 G`"), "{bad:?}");
}

#[test]
fn work_dir_sizes_table() {
    let cases: [(&str, Option<u64>); 16] = [
        ("2G", Some(2 << 30)),
        ("2GiB", Some(2 << 30)),
        ("2GB", Some(2 << 30)),
        ("512M", Some(512 << 20)),
        ("16M", Some(16 << 20)),
        ("16384K", Some(16 << 20)),
        ("16T", Some(16 << 40)),
        ("1T", Some(1 << 40)),
        // Below the minimum, above the maximum, overflowing.
        ("15M", None),
        ("17T", None),
        ("99999999999999999999G", None),
        ("18446744073709551615T", None),
        // No number, no unit, a unit we do not know, spaces, signs.
        ("G", None),
        ("2", None),
        ("2 G", None),
        ("-2G", None),
    ];
    for (text, bytes) in cases {
        assert_eq!(parse_size(text), bytes, "{text}");
    }
    for text in ["2g", "2P", "2.5G", "", "+2G", "0x10G"] {
        assert_eq!(parse_size(text), None, "{text}");
    }
}

#[test]
fn require_defaults_are_strict() {
    let r = require(&RawRequire::default());
    assert_eq!(
        (r.landlock, r.seccomp, r.cgroup_limits, r.work_dir_size),
        (true, true, false, false)
    );
    let r = require(&RawRequire {
        landlock: Some(false),
        seccomp: Some(false),
        cgroup_limits: Some(true),
        work_dir_size: Some(true),
    });
    assert_eq!(
        (r.landlock, r.seccomp, r.cgroup_limits, r.work_dir_size),
        (false, false, true, true)
    );
}

#[test]
fn worker_table() {
    /// The command, and the argv kept or the key refused.
    type WorkerCase = (
        Option<&'static [&'static str]>,
        Result<&'static [&'static str], &'static str>,
    );
    let cases: &[WorkerCase] = &[
        (None, Ok(&[])),
        (Some(&[]), Ok(&[])),
        (Some(&["agent", "--go"]), Ok(&["agent", "--go"])),
        (Some(&["", "x"]), Err("worker.command")),
    ];
    for (command, expected) in cases {
        let got = worker(RawWorker {
            command: command.map(strings),
        });
        match expected {
            Ok(argv) => assert_eq!(got.unwrap(), strings(argv)),
            Err(key) => assert_eq!(got.unwrap_err().key, *key),
        }
    }
}

#[test]
fn env_names_table() {
    for (name, ok) in [
        ("PATH", true),
        ("_X", true),
        ("a1", true),
        ("", false),
        ("1A", false),
        ("A B", false),
        ("A=B", false),
        ("Ä", false),
    ] {
        assert_eq!(is_env_name(name), ok, "{name:?}");
    }
}

proptest! {
    /// Any absolute path made of plain components validates and maps to
    /// itself, unless it lands on a place the sandbox builds itself.
    #[test]
    fn plain_paths_validate(parts in proptest::collection::vec("[a-z0-9_.-]{1,8}", 1..5)) {
        prop_assume!(parts.iter().all(|p| p != "." && p != ".."));
        let path = format!("/{}", parts.join("/"));
        let result = check_bind_path(&path);
        let reserved = RESERVED_INSIDE.iter().any(|r| *r != "/" && Path::new(&path).starts_with(r));
        prop_assert_eq!(result.is_ok(), !reserved, "{}", path);
    }

    /// A path containing a `..` component is never accepted.
    #[test]
    fn parent_components_never_validate(a in "[a-z]{1,6}", b in "[a-z]{1,6}") {
        let joined = format!("/{a}/../{b}");
        prop_assert!(check_bind_path(&joined).is_err());
    }
}
