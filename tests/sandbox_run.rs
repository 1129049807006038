//! `gatehouse sandbox run`: what a worker must be able to do, exit
//! statuses, and refusing to start (fail closed). Root and rootless.

// Helpers outside #[test] fns panic on setup failure, like the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::Stdio;

use gatehouse_testkit::sandbox::*;

#[test]
fn git_init_and_commit_in_the_work_dir() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh(
            "git init -q . && git config user.email w@example.test && git config user.name worker \
             && echo hello > README && git add README && git commit -qm first && git log --oneline | wc -l",
        );
        r.ok();
        assert_eq!(r.stdout.trim(), "1", "{mode:?}: {r:#?}");
        assert!(
            s.work.join(".git/HEAD").exists(),
            "{mode:?}: repo not on the host"
        );
    }
}

#[test]
fn cc_compiles_and_runs_a_program() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh("cat > m.c <<'END'
#include <stdio.h>
int main(void) { printf(\"%d\\n\", 6 * 7); return 0; }
END
cc -o m m.c && ./m");
        r.ok();
        assert_eq!(r.stdout.trim(), "42", "{mode:?}: {r:#?}");
    }
}

#[test]
fn python3_runs() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r =
            s.sh("python3 -c 'import sys, json; print(json.dumps({\"v\": sys.version_info[0]}))'");
        r.ok();
        assert_eq!(r.stdout.trim(), r#"{"v": 3}"#, "{mode:?}: {r:#?}");
    }
}

#[test]
fn curl_reaches_the_proxy_socket_through_the_relay() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let proxy = FakeProxy::start(s.path("proxy.sock"));
        let sock = proxy.path.to_str().unwrap().to_string();
        let r = s.sh_with(
            "default",
            &["--proxy-socket", &sock],
            "echo \"$HTTP_PROXY $HTTPS_PROXY\"; curl -sS -m 10 http://example.test/some/path",
        );
        r.ok();
        assert!(
            r.stdout
                .contains("http://127.0.0.1:3128 http://127.0.0.1:3128"),
            "{mode:?}: {r:#?}"
        );
        assert!(
            r.stdout
                .contains("fake proxy saw: GET http://example.test/some/path HTTP/1.1"),
            "{mode:?}: {r:#?}"
        );
    }
}

/// A sandbox that idles past its start has both its sides give back the
/// pages building touched (`sys::idle`); afterwards the relay still takes
/// connections, the control socket still answers, and the exit status still
/// comes through. The host side's and pid 1's resident binary pages are
/// then a fraction of what they were at the start.
#[test]
fn an_idle_sandbox_sheds_its_start_up_pages_and_keeps_working() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let proxy = FakeProxy::start(s.path("proxy.sock"));
        let sock = proxy.path.to_str().unwrap().to_string();
        let r = s.sh_with(
            "default",
            &["--proxy-socket", &sock],
            "sleep 1; curl -sS -m 10 http://example.test/after/idle; exit 7",
        );
        assert_eq!(r.code, Some(7), "{mode:?}: {r:#?}");
        assert!(
            r.stdout
                .contains("fake proxy saw: GET http://example.test/after/idle HTTP/1.1"),
            "{mode:?}: {r:#?}"
        );
        // While one idles: each side's resident memory falls to well under
        // its peak (building the sandbox), the pages given back.
        let work = s.work.to_str().unwrap().to_string();
        let mut child = s
            .command(&[
                "sandbox",
                "run",
                "--profile",
                "default",
                "--workdir",
                &work,
                "--",
                "sleep",
                "15",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let host = child.id();
        let kib = |pid: u32, field: &str| -> Option<u64> {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix(field))?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        };
        let shed = |pid: u32| kib(pid, "VmRSS:").zip(kib(pid, "VmHWM:"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (done, seen) = loop {
            let init = gatehouse_testkit::procs::children(host).first().copied();
            let seen: Vec<(u32, (u64, u64))> = [Some(host), init]
                .into_iter()
                .flatten()
                .filter_map(|p| shed(p).map(|m| (p, m)))
                .collect();
            // Under 3/5 of the peak: pid 1 keeps its shared libraries' and
            // writable pages, about 2.5 of its 5 MiB, so half was the edge
            // (0.48-0.51 measured), and a loaded machine crossed it.
            let both = seen.len() == 2 && seen.iter().all(|(_, (rss, hwm))| rss * 5 < hwm * 3);
            if both || std::time::Instant::now() > deadline {
                break (both, seen);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            done,
            "{mode:?}: (pid, (VmRSS, VmHWM)) of the host side and pid 1: {seen:?}"
        );
    }
}

/// A caller that ignores SIGCHLD (an ignore survives execve) would have
/// the kernel reap the sandbox's processes unreported; `sandbox run` sets
/// the default back, so the worker's exit status still comes through and
/// an idle sandbox still ends.
#[test]
fn a_caller_ignoring_sigchld_still_gets_the_workers_exit() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let work = s.work.to_str().unwrap().to_string();
        let bin = s.bin().to_str().unwrap().to_string();
        let wrapper = "import signal, os, sys\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nos.execv(sys.argv[1], sys.argv[1:])";
        for script in ["exit 7", "sleep 0.6; exit 7"] {
            let out = s
                .command_as_caller("/usr/bin/python3")
                .args([
                    "-c",
                    wrapper,
                    &bin,
                    "sandbox",
                    "run",
                    "--profile",
                    "default",
                ])
                .args([
                    "--workdir",
                    &work,
                    "--wall-time",
                    "30",
                    "--",
                    "sh",
                    "-c",
                    script,
                ])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(7),
                "{mode:?} {script}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn exit_status_is_the_commands_and_signals_are_128_plus_n() {
    for mode in modes() {
        let s = Scratch::new(mode);
        assert_eq!(s.sh("exit 7").code, Some(7), "{mode:?}");
        assert_eq!(s.sh("exit 0").code, Some(0), "{mode:?}");
        assert_eq!(s.sh("kill -KILL $$").code, Some(128 + 9), "{mode:?}");
        assert_eq!(s.sh("kill -TERM $$").code, Some(128 + 15), "{mode:?}");
        let r = s.sh_with("default", &[], "exec /no/such/program");
        assert_eq!(r.code, Some(127), "{mode:?}: {r:#?}");
        // Not found by the sandbox's own exec, not a setup failure.
        let args = [
            "sandbox",
            "run",
            "--profile",
            "default",
            "--workdir",
            s.work.to_str().unwrap(),
            "--",
            "no-such-program-anywhere",
        ];
        let r = Run::from(s.command(&args).output().unwrap());
        assert_eq!(r.code, Some(127), "{mode:?}: {r:#?}");
    }
}

#[test]
fn stdin_and_stdout_pass_through() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let work = s.work.to_str().unwrap().to_string();
        let mut child = s
            .command(&[
                "sandbox",
                "run",
                "--profile",
                "default",
                "--workdir",
                &work,
                "--",
                "tr",
                "a-z",
                "A-Z",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"through the sandbox\n")
            .unwrap();
        let out = Run::from(child.wait_with_output().unwrap());
        out.ok();
        assert_eq!(out.stdout, "THROUGH THE SANDBOX\n", "{mode:?}");
    }
}

#[test]
fn env_flag_and_profile_values_reach_the_command() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh_with(
            "default",
            &["--env", "TICKET=tkt_42", "--env", "HOME=/work"],
            "echo $TICKET $HOME $GIT_TERMINAL_PROMPT $PWD",
        );
        r.ok();
        assert_eq!(r.stdout.trim(), "tkt_42 /work 0 /work", "{mode:?}: {r:#?}");
        let r = s.sh_with("default", &["--env", "NOT VALID"], "true");
        assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{mode:?}: {r:#?}");
    }
}

#[test]
fn the_worker_never_runs_as_host_root() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh("touch /work/owned; id -u");
        r.ok();
        let owner =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(s.work.join("owned")).unwrap());
        assert_ne!(owner, 0, "{mode:?}: file created as host root");
        if let Some(uid) = s.worker_uid() {
            assert_eq!(owner, uid, "{mode:?}");
        }
    }
}

#[test]
fn the_workers_hardening_is_its_own_not_pid_1s() {
    // The worker starts sharing pid 1's memory (CLONE_VM | CLONE_VFORK) and
    // then confines itself: the seccomp filter must be the worker's alone,
    // and both must have dropped every capability. Pid 1 drops its own once
    // the worker has started (its last step sets no_new_privs), so the
    // script waits for that, at most a second, rather than race it.
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh(
            "for i in $(seq 100); do grep -q '^NoNewPrivs:.*1' /proc/1/status && break; sleep 0.01; done; \
             grep -E '^(Seccomp|CapEff|NoNewPrivs):' /proc/1/status /proc/self/status",
        );
        r.ok();
        let field = |who: &str, name: &str| -> String {
            r.stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("/proc/{who}/status:{name}:")))
                .unwrap_or_else(|| panic!("{mode:?}: no {name} of {who} in {r:#?}"))
                .trim()
                .to_string()
        };
        assert_eq!(
            field("self", "Seccomp"),
            "2",
            "{mode:?}: the worker is filtered"
        );
        assert_eq!(
            field("1", "Seccomp"),
            "0",
            "{mode:?}: pid 1 got the worker's filter"
        );
        for who in ["self", "1"] {
            assert_eq!(field(who, "CapEff"), "0000000000000000", "{mode:?} {who}");
            assert_eq!(field(who, "NoNewPrivs"), "1", "{mode:?} {who}");
        }
    }
}

#[test]
fn ca_bundle_and_control_socket_are_provided() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let ca = s.path("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nTUlJQnRlc3RjYQ==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let control = std::os::unix::net::UnixListener::bind(s.path("control.sock")).unwrap();
        std::fs::set_permissions(
            s.path("control.sock"),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let r = s.sh_with(
            "default",
            &[
                "--ca-cert",
                ca.to_str().unwrap(),
                "--control-socket",
                s.path("control.sock").to_str().unwrap(),
            ],
            "echo $SSL_CERT_FILE $GIT_SSL_CAINFO $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS; \
             grep -c TUlJQnRlc3RjYQ== $SSL_CERT_FILE; \
             echo $GATEHOUSE_CONTROL_SOCKET; command -v gatehouse; gatehouse --version; \
             python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"/run/gatehouse/control.sock\"); print(\"connected\")'",
        );
        r.ok();
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(
            lines[0],
            ["/run/gatehouse/ca-bundle.pem"; 5].join(" "),
            "{mode:?}: {r:#?}"
        );
        assert_eq!(lines[1], "1", "{mode:?}");
        assert_eq!(lines[2], "/run/gatehouse/control.sock");
        assert_eq!(lines[3], "/run/gatehouse/bin/gatehouse");
        assert!(lines[4].starts_with("gatehouse "), "{mode:?}: {r:#?}");
        assert_eq!(lines[5], "connected", "{mode:?}: {r:#?}");
        drop(control);
    }
}

#[test]
fn a_ca_file_holding_a_private_key_is_refused() {
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let ca = s.path("ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let r = s.sh_with("default", &["--ca-cert", ca.to_str().unwrap()], "true");
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(r.stderr.contains("private key"), "{r:#?}");
}

#[test]
fn unknown_profile_keys_refuse_to_start() {
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let p = s.profile("typo", "extends = \"default\"\n[limits]\nmemroy_mib = 10\n");
    let r = s.sh_with(p.to_str().unwrap(), &[], "echo should-not-run");
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(r.stderr.contains("memroy_mib"), "{r:#?}");
    assert!(!r.stdout.contains("should-not-run"));
}

#[test]
fn required_cgroup_limits_fail_closed_when_rootless() {
    if !mode_available(Mode::Rootless) {
        return;
    }
    let s = Scratch::new(Mode::Rootless);
    let p = s.profile(
        "strict",
        "extends = \"default\"\n[require]\ncgroup_limits = true\n",
    );
    let r = s.sh_with(p.to_str().unwrap(), &[], "echo should-not-run");
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(r.stderr.contains("cgroup"), "{r:#?}");
    assert!(!r.stdout.contains("should-not-run"));
}

#[test]
fn profile_check_prints_the_resolved_profile() {
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let r = Run::from(
        s.command(&["profile", "check", "teams/web", "--json"])
            .output()
            .unwrap(),
    );
    r.ok();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["layers"],
        serde_json::json!(["base", "default", "teams/web"])
    );
    assert_eq!(v["filesystem"]["writable_exec"], false);
    assert_eq!(
        v["network"]["tunnels"],
        serde_json::json!(["registry.npmjs.org:443"])
    );
    let r = Run::from(
        s.command(&["profile", "check", "no-such-profile"])
            .output()
            .unwrap(),
    );
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("not found"), "{r:#?}");
}

#[test]
fn doctor_reports_one_line_per_feature() {
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let r = Run::from(s.command(&["doctor"]).output().unwrap());
    for feature in ["user namespaces", "landlock", "seccomp", "cgroups", "pidfd"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains(feature))
            .unwrap_or_else(|| panic!("no {feature} line: {r:#?}"));
        assert!(
            line.starts_with("ok") || line.starts_with("degraded") || line.starts_with("missing"),
            "{line}"
        );
    }
}

#[test]
fn a_work_dir_inside_the_workers_private_directory_binds() {
    use std::os::unix::fs::PermissionsExt;
    for mode in modes() {
        let s = Scratch::new(mode);
        let private = s.path("private");
        let work = private.join("work");
        std::fs::create_dir_all(&work).unwrap();
        s.give_to_worker(&work);
        s.give_to_worker(&private);
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let w = work.to_str().unwrap();
        let args = [
            "sandbox",
            "run",
            "--profile",
            "default",
            "--workdir",
            w,
            "--",
            "sh",
            "-c",
            "echo inside > f; cat f",
        ];
        let r = Run::from(s.command(&args).output().unwrap());
        r.ok();
        assert_eq!(r.stdout, "inside\n", "{mode:?}");
        assert_eq!(std::fs::read_to_string(work.join("f")).unwrap(), "inside\n");
    }
}

#[test]
fn named_profiles_come_from_the_profiles_dir_and_can_name_the_command() {
    use std::os::unix::fs::PermissionsExt;
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let dir = s.path("profiles");
    std::fs::create_dir_all(dir.join("teams")).unwrap();
    std::fs::write(
        dir.join("teams/qa.toml"),
        "extends = \"default\"\n[env.set]\nTEAM = \"qa\"\n[worker]\ncommand = [\"sh\", \"-c\", \"echo team=$TEAM\"]\n",
    )
    .unwrap();
    for p in [dir.clone(), dir.join("teams")] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let work = s.work.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let args = [
        "sandbox",
        "run",
        "--profiles-dir",
        d,
        "--profile",
        "teams/qa",
        "--workdir",
        work,
    ];
    let r = Run::from(s.command(&args).output().unwrap());
    r.ok();
    assert_eq!(r.stdout, "team=qa\n", "{r:#?}");
    // Without a command anywhere, it refuses to start.
    let args = [
        "sandbox",
        "run",
        "--profiles-dir",
        d,
        "--profile",
        "default",
        "--workdir",
        work,
    ];
    let r = Run::from(s.command(&args).output().unwrap());
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(r.stderr.contains("no command"), "{r:#?}");
}

#[test]
fn a_root_callers_private_work_dir_is_the_workers_through_an_idmapped_mount() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !mode_available(Mode::Root) {
        return;
    }
    let s = Scratch::new(Mode::Root);
    let worker_uid = s.worker_uid().unwrap();
    // Root's own private directory, as `mktemp -d` makes it: root-owned 0700.
    let private = s.path("root-only");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("roots"), "root's file\n").unwrap();
    std::fs::set_permissions(
        private.join("roots"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // A file of a third user in it stays that user's: only the directory's
    // owner is shown as the worker.
    let other = private.join("others");
    std::fs::write(&other, "not for the worker\n").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&other, Some(worker_uid + 1), Some(worker_uid + 1)).unwrap();
    let out = s
        .command(&[
            "sandbox",
            "run",
            "--profile",
            "default",
            "--workdir",
            private.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "cat /proc/self/uid_map; cat roots; echo made > new; cat others 2>/dev/null || echo others-refused",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let r = Run::from(out);
    r.ok();
    let lines: Vec<&str> = r.stdout.lines().collect();
    // The worker runs as a host uid of its own, never root (nor the
    // directory's owner).
    let map: Vec<&str> = lines[0].split_whitespace().collect();
    let host_uid: u32 = map[1].parse().unwrap();
    assert_eq!((map[0], map[2]), ("0", "1"), "{r:#?}");
    assert!(host_uid >= 1_879_048_192, "{r:#?}");
    assert_eq!(&lines[1..], ["root's file", "others-refused"], "{r:#?}");
    // What the worker wrote belongs to the directory's owner on the host;
    // nothing was chowned.
    let new = std::fs::metadata(private.join("new")).unwrap();
    assert_eq!((new.uid(), new.gid()), (0, 0));
    assert_eq!(
        std::fs::read_to_string(private.join("new")).unwrap(),
        "made\n"
    );
    let dir = std::fs::metadata(&private).unwrap();
    assert_eq!((dir.uid(), dir.mode() & 0o777), (0, 0o700));
    assert_eq!(std::fs::metadata(&other).unwrap().uid(), worker_uid + 1);
}

/// The host uid the sandbox's worker runs as, from its uid map.
fn host_uid_of(r: &Run) -> u32 {
    let map: Vec<&str> = r.stdout.split_whitespace().collect();
    assert_eq!((map.len(), map[0], map[2]), (3, "0", "1"), "{r:#?}");
    map[1].parse().unwrap()
}

/// Starts a sandbox that holds its worker uid (from `range`) for 30 s, and
/// returns it with that uid once it runs. A uid freed a moment ago may
/// still read as held: retried until `deadline`.
fn hold_a_uid(s: &Scratch, range: &str, deadline: std::time::Instant) -> (KillOnDrop, u32) {
    loop {
        let child = s
            .command(&[
                "sandbox",
                "run",
                "--profile",
                "default",
                "--worker-uids",
                range,
                "--workdir",
                s.work.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "cat /proc/self/uid_map; exec sleep 30",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(child);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.0.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        if let Some(uid) = line.split_whitespace().nth(1) {
            return (child, uid.parse().unwrap());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no uid of {range} could be held"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn each_live_sandbox_started_by_root_has_a_host_uid_of_its_own() {
    if !mode_available(Mode::Root) {
        return;
    }
    let s = Scratch::new(Mode::Root);
    let range = "1879113000-1879113001";
    let both = [1_879_113_000, 1_879_113_001];
    let uid_map = "cat /proc/self/uid_map";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Two live sandboxes hold the two uids of the range, one each...
    let (first_holder, first) = hold_a_uid(&s, range, deadline);
    let (_second_holder, second) = hold_a_uid(&s, range, deadline);
    assert_ne!(first, second);
    assert!(
        both.contains(&first) && both.contains(&second),
        "{first} {second}"
    );
    // ...so a third finds none free and does not start.
    let r = s.sh_with("default", &["--worker-uids", range], uid_map);
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(r.stderr.contains("in use by live sandboxes"), "{r:#?}");
    assert!(r.stdout.is_empty(), "{r:#?}");
    // When the first ends, its uid is free again.
    drop(first_holder);
    loop {
        let r = s.sh_with("default", &["--worker-uids", range], uid_map);
        if r.code == Some(0) {
            assert_eq!(host_uid_of(&r), first);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{r:#?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Kills (and reaps) the child when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_unknown_worker_user_is_refused_not_a_crash() {
    // --worker-user is read only when root starts the sandbox.
    if !mode_available(Mode::Root) {
        return;
    }
    let s = Scratch::new(Mode::Root);
    let r = s.sh_with(
        "default",
        &["--worker-user", "gatehouse-no-such-user"],
        "true",
    );
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(r.stderr.contains("no such user"), "{r:#?}");
}

/// A work dir the worker owns but may not enter (mode 000; it has no
/// capability to override that) is refused, and the message says how the
/// dir shows inside and who the worker is; a wrong id mapping would show
/// there. Control: the same dir at 0700 is entered.
#[test]
fn a_work_dir_the_worker_cannot_enter_is_refused_with_what_it_saw() {
    use std::os::unix::fs::PermissionsExt;
    if !mode_available(Mode::Root) {
        return;
    }
    let s = Scratch::new(Mode::Root);
    let worker = ["--worker-user", "gatehouse-worker"];
    std::fs::set_permissions(&s.work, std::fs::Permissions::from_mode(0o000)).unwrap();
    let r = s.sh_with("default", &worker, "true");
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(
        r.stderr.contains("chdir /work: Permission denied")
            && r.stderr.contains("it shows as uid 0 gid 0 mode 0;")
            && r.stderr.contains("the worker is uid 0 gid 0"),
        "{r:#?}"
    );
    std::fs::set_permissions(&s.work, std::fs::Permissions::from_mode(0o700)).unwrap();
    s.sh_with("default", &worker, "pwd").ok();
}

/// Started by root, the proxy socket may sit in a directory that only its
/// owner can traverse: under `gatehouse up` the proxy user's identity
/// sockets are in its own 0700 directory. The sandbox's init, once in its
/// user namespace, could not open that path; the host side clones the
/// socket's mount before then, so the worker still reaches the proxy.
#[test]
fn a_proxy_socket_in_another_users_private_directory_is_reached() {
    use gatehouse_testkit::{machine, require, Need};
    use std::os::unix::fs::PermissionsExt;
    require!(Need::Root);
    require!(Need::Sandbox);
    require!(Need::User("gatehouse-test"));
    let s = Scratch::new(Mode::Root);
    let private = s.path("private");
    std::fs::create_dir(&private).unwrap();
    let proxy = FakeProxy::start(private.join("proxy.sock"));
    let (uid, gid) = (
        machine::user_uid("gatehouse-test").unwrap(),
        machine::user_gid("gatehouse-test").unwrap(),
    );
    std::os::unix::fs::chown(&proxy.path, Some(uid), Some(gid)).unwrap();
    std::os::unix::fs::chown(&private, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = proxy.path.to_str().unwrap().to_string();
    let r = s.sh_with(
        "default",
        &["--proxy-socket", &sock],
        "curl -sS -m 10 http://example.test/private/path",
    );
    r.ok();
    assert!(
        r.stdout
            .contains("fake proxy saw: GET http://example.test/private/path HTTP/1.1"),
        "{r:#?}"
    );
    // The worker sees the socket alone, not the private directory around it.
    let r = s.sh_with(
        "default",
        &["--proxy-socket", &sock],
        &format!(
            "ls {} 2>&1; test -e {}; echo absent=$?",
            private.display(),
            private.display()
        ),
    );
    assert!(r.stdout.contains("absent=1"), "{r:#?}");
}
