//! The two binaries: `gatehouse` runs the sandbox and worker commands itself
//! and hands every other command to `gatehouse-services` next to it, by exec
//! (same process, same arguments, same exit status).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use gatehouse_testkit::bin;

fn gatehouse() -> Command {
    gatehouse_testkit::bin::command()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A directory holding a copy of the `gatehouse` binary and nothing else.
fn lone_launcher() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("gatehouse");
    bin::copy_executable(&bin::gatehouse(), &bin);
    (dir, bin)
}

#[test]
fn help_lists_every_command_under_the_name_gatehouse() {
    let out = gatehouse().arg("--help").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let help = text(&out);
    assert!(help.contains("Usage: gatehouse <COMMAND>"), "{help}");
    for command in [
        "sandbox",
        "doctor",
        "profile",
        "proxy",
        "audit",
        "router",
        "tickets",
        "threads",
        "replies",
        "supervisor",
        "report",
        "inbox",
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "`{command}` missing from:\n{help}"
        );
    }
}

#[test]
fn handed_over_commands_keep_their_exit_status_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let out = gatehouse()
        .args(["tickets", "list", "--state"])
        .arg(dir.path().join("absent.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no router state"), "{}", text(&out));

    let out = gatehouse()
        .args(["proxy", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("Usage: gatehouse proxy"),
        "{}",
        text(&out)
    );
}

#[test]
fn hand_over_is_an_exec_not_a_child() {
    // `gatehouse proxy` with a config that makes it wait: the process the
    // caller started must itself become gatehouse-services, so signals and
    // pid files reach the service.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut child = gatehouse()
        .args(["proxy", "--config"])
        .arg(&fifo)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let exe_link = PathBuf::from(format!("/proc/{}/exe", child.id()));
    let mut exe = PathBuf::new();
    for _ in 0..200 {
        exe = std::fs::read_link(&exe_link).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == "gatehouse-services") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        exe.file_name().and_then(|n| n.to_str()),
        Some("gatehouse-services"),
        "pid {} runs {}",
        child.id(),
        exe.display()
    );
}

#[test]
fn without_services_other_commands_fail_clearly_and_the_sandbox_still_runs() {
    let (_dir, bin) = lone_launcher();
    let out = Command::new(&bin)
        .args(["proxy", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("gatehouse-services"), "{msg}");
    assert!(
        msg.contains(
            &bin.with_file_name("gatehouse-services")
                .display()
                .to_string()
        ),
        "{msg}"
    );

    // Asked for help, it shows what it has and says where the rest is.
    let out = Command::new(&bin).arg("--help").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let help = text(&out);
    assert!(
        help.contains("sandbox") && help.contains("report"),
        "{help}"
    );
    assert!(!help.contains("tickets"), "{help}");
    assert!(
        help.contains("The other commands are in gatehouse-services"),
        "{help}"
    );

    let out = Command::new(&bin).arg("--version").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).starts_with("gatehouse "), "{}", text(&out));

    let out = Command::new(&bin)
        .args(["profile", "check", "default"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("[filesystem]"), "{}", text(&out));
}

#[test]
fn the_launcher_does_not_link_the_proxy_the_router_or_sqlite() {
    // The reason for two binaries: the one that starts every sandbox carries
    // neither the proxy, nor the router, nor SQLite. `nm` lists the functions
    // actually linked (binutils comes with the C compiler the tests need).
    let defined = |bin: &std::path::Path| {
        let out = Command::new("nm")
            .args(["--defined-only", "--demangle"])
            .arg(bin)
            .output()
            .expect("nm (binutils) is needed for this test");
        assert!(out.status.success(), "nm {}: {}", bin.display(), text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let launcher = defined(&bin::gatehouse());
    let services = defined(&bin::path(bin::SERVICES));
    for heavy in [
        " sqlite3_prepare_v2",
        "gatehouse_proxy::",
        "gatehouse_router::",
    ] {
        assert!(!launcher.contains(heavy), "the launcher links {heavy}");
        assert!(services.contains(heavy), "gatehouse-services lacks {heavy}");
    }
    // What it must carry: the sandbox and the worker's control client.
    for needed in [
        "gatehouse_supervisor::sandbox::",
        "gatehouse_supervisor::jobs::control::",
    ] {
        assert!(launcher.contains(needed), "the launcher lacks {needed}");
    }
}
