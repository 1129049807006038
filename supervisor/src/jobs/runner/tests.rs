use std::path::Path;

use tokio::io::AsyncReadExt;

use super::*;

fn config(extra: &str) -> Config {
    let text =
        format!("state_dir = \"/s\"\napi_socket = \"/a.sock\"\nprompts_dir = \"/p\"\n{extra}");
    Config::parse(&text, Path::new("t.toml"), Path::new("/")).unwrap()
}

fn spec(command: Option<&[&str]>) -> JobSpec {
    JobSpec {
        ticket: "tkt_1".into(),
        team: "web".into(),
        profile: "default".into(),
        rule_sets: vec![],
        tunnel_hosts: vec![],
        variables: Default::default(),
        task: "t".into(),
        deadline_secs: 60,
        command: command.map(|c| c.iter().map(|s| s.to_string()).collect()),
    }
}

const SANDBOX_WITH_COMMAND: &str = "[worker]\ncommand = [\"agent\", \"--go\"]\n";
const SANDBOX_WITHOUT_COMMAND: &str = "";
const UNSANDBOXED_WITH_COMMAND: &str =
    "[sandbox]\ndangerously_unsandboxed = true\n[worker]\ncommand = [\"agent\"]\n";
const UNSANDBOXED_WITHOUT_COMMAND: &str = "[sandbox]\ndangerously_unsandboxed = true\n";

/// Config extra, the job's command, the command chosen (`None`: refused).
type CommandCase = (
    &'static str,
    Option<&'static [&'static str]>,
    Option<&'static [&'static str]>,
);

#[test]
fn worker_command_table() {
    let cases: [CommandCase; 7] = [
        // The job's own command wins over the configured one.
        (
            SANDBOX_WITH_COMMAND,
            Some(&["make", "test"]),
            Some(&["make", "test"]),
        ),
        (SANDBOX_WITH_COMMAND, None, Some(&["agent", "--go"])),
        // Sandboxed with neither: empty, the profile's worker.command.
        (SANDBOX_WITHOUT_COMMAND, None, Some(&[])),
        (SANDBOX_WITHOUT_COMMAND, Some(&["sh"]), Some(&["sh"])),
        (UNSANDBOXED_WITH_COMMAND, None, Some(&["agent"])),
        (UNSANDBOXED_WITHOUT_COMMAND, Some(&["sh"]), Some(&["sh"])),
        // Without a sandbox there is no profile to fall back on.
        (UNSANDBOXED_WITHOUT_COMMAND, None, None),
    ];
    for (extra, job_command, expected) in cases {
        let got = worker_command(&spec(job_command), &config(extra));
        match expected {
            Some(argv) => assert_eq!(got.unwrap(), argv, "{extra:?} {job_command:?}"),
            None => {
                let err = got.unwrap_err();
                assert!(err.to_string().contains("set worker.command"), "{err}");
            }
        }
    }
}

#[test]
fn stop_reasons_are_worded_for_the_api() {
    assert_eq!(stop_reason_text(StopReason::Cancel), "cancelled");
    assert_eq!(stop_reason_text(StopReason::Deadline), "deadline reached");
}

#[tokio::test]
async fn deadlines_in_the_past_are_now_and_future_ones_are_kept() {
    let now = Instant::now();
    assert!(deadline_instant(now_ms() - 60_000) <= Instant::now());
    let later = deadline_instant(now_ms() + 60_000);
    let left = later - now;
    assert!(
        left > Duration::from_secs(55) && left <= Duration::from_secs(61),
        "{left:?}"
    );
}

#[tokio::test]
async fn the_child_gets_only_the_launch_environment_in_its_own_group() {
    let dir = tempfile::tempdir().unwrap();
    let launch = LaunchCommand {
        program: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "echo \"$ONLY:${HOME:-unset}:$(pwd)\"; ps -o pgid= -p $$".into(),
        ],
        env: vec![
            ("ONLY".into(), "this".into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ],
        cwd: Some(dir.path().to_owned()),
    };
    let mut child = spawn(&launch).unwrap();
    let pid = child.id().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert!(child.wait().await.unwrap().success());
    let mut lines = out.lines();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        lines.next().unwrap(),
        format!("this:unset:{}", cwd.display())
    );
    assert_eq!(lines.next().unwrap().trim(), pid.to_string(), "own group");
}

#[test]
fn a_missing_program_is_an_error_naming_it() {
    let launch = LaunchCommand {
        program: "/nonexistent/worker".into(),
        args: vec![],
        env: vec![],
        cwd: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt.block_on(async { spawn(&launch).unwrap_err() });
    assert!(err.to_string().contains("/nonexistent/worker"), "{err}");
}
