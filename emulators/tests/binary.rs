//! The `gatehouse-emulator` binary: prints its address, serves, stops on SIGTERM.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// Start the binary and read its ready line.
fn spawn(args: &[&str]) -> (Child, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse-emulator"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (child, ready)
}

/// SIGTERM by pid, require a clean exit, return what it logged.
fn stop(child: Child) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{:?}", output.status);
    String::from_utf8(output.stderr).unwrap()
}

fn curl(ca: &str, host: &str, port: &str, header: &str, path: &str, data: Option<&str>) -> String {
    let mut command = Command::new("curl");
    command
        .args([
            "-sS",
            "--cacert",
            ca,
            "--resolve",
            &format!("{host}:{port}:127.0.0.1"),
        ])
        .args(["-H", header, "-H", "Content-Type: application/json"]);
    if let Some(data) = data {
        command.args(["--data", data]);
    }
    let output = command
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn github_binary_serves_seeded_issue_with_token_from_file() {
    let dir = tempfile::tempdir().unwrap();
    let token = format!("ghs_{}", std::process::id());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let ca = dir.path().join("ca.pem");
    let (child, ready) = spawn(&[
        "github",
        "--listen",
        "127.0.0.1:0",
        "--ca-out",
        ca.to_str().unwrap(),
        "--state",
        dir.path().join("git").to_str().unwrap(),
        "--token-file",
        token_file.to_str().unwrap(),
        "--repo",
        "acme/widgets",
        "--issue",
        "acme/widgets=Flaky test",
    ]);
    assert_eq!(ready["emulator"], "github");
    let addr = ready["addr"].as_str().unwrap();
    let port = addr.rsplit(':').next().unwrap();
    assert!(ca.exists());

    let issue = curl(
        ca.to_str().unwrap(),
        "api.github.com",
        port,
        &format!("Authorization: Bearer {token}"),
        "/repos/acme/widgets/issues/1",
        None,
    );
    let issue: Value = serde_json::from_str(&issue).unwrap();
    assert_eq!(issue["title"], "Flaky test");

    let refused = curl(
        ca.to_str().unwrap(),
        "api.github.com",
        port,
        "Authorization: Bearer ghs_other",
        "/repos/acme/widgets/issues/1",
        None,
    );
    assert!(refused.contains("Bad credentials"));
    assert!(dir.path().join("git/acme/widgets.git/HEAD").exists());
    let log = stop(child);
    assert!(
        log.contains("/repos/acme/widgets/issues/1") && log.contains("status=401"),
        "{log}"
    );
    assert!(
        !log.contains(&token),
        "the log must not carry credentials: {log}"
    );
}

#[test]
fn feishu_binary_issues_tokens_for_secret_from_file() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, "generated-secret-for-test\n").unwrap();
    let ca = dir.path().join("ca.pem");
    let (child, ready) = spawn(&[
        "feishu",
        "--ca-out",
        ca.to_str().unwrap(),
        "--app-id",
        "cli_bin",
        "--app-secret-file",
        secret_file.to_str().unwrap(),
        "--chat",
        "oc_bin",
    ]);
    assert_eq!(ready["emulator"], "feishu");
    let port = ready["addr"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let answer = curl(
        ca.to_str().unwrap(),
        "open.feishu.cn",
        &port,
        "X-Test: 1",
        "/open-apis/auth/v3/tenant_access_token/internal",
        Some(r#"{"app_id":"cli_bin","app_secret":"generated-secret-for-test"}"#),
    );
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["code"], 0, "{answer}");
    let tenant_token = answer["tenant_access_token"].as_str().unwrap();
    assert!(tenant_token.starts_with("t-"));
    // The chat given is one the bot is in; another is refused.
    let send = |chat: &str| -> Value {
        let body = serde_json::json!({
            "receive_id": chat,
            "msg_type": "text",
            "content": "{\"text\":\"hi\"}",
        });
        let answer = curl(
            ca.to_str().unwrap(),
            "open.feishu.cn",
            &port,
            &format!("Authorization: Bearer {tenant_token}"),
            "/open-apis/im/v1/messages?receive_id_type=chat_id",
            Some(&body.to_string()),
        );
        serde_json::from_str(&answer).unwrap()
    };
    assert_eq!(send("oc_bin")["code"], 0);
    assert_eq!(send("oc_elsewhere")["code"], 230_001);
    let log = stop(child);
    assert!(log.contains("tenant_access_token/internal"), "{log}");
    for secret in ["generated-secret-for-test", tenant_token] {
        assert!(
            !log.contains(secret),
            "the log must not carry credentials: {log}"
        );
    }
}

#[test]
fn missing_secret_file_fails_without_echoing_anything_secret() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gatehouse-emulator"))
        .args(["github", "--ca-out"])
        .arg(dir.path().join("ca.pem"))
        .arg("--state")
        .arg(dir.path())
        .arg("--token-file")
        .arg(dir.path().join("absent"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("absent"), "{stderr}");
    assert!(output.stdout.is_empty());
}
