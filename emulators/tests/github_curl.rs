//! The GitHub emulator driven by real curl over TLS, trusting only the test CA.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use gatehouse_emulators::{CommentKind, GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use serde_json::Value;

struct Curl {
    status: u16,
    headers: String,
    body: String,
}

impl Curl {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `curl` against `host` resolved to the emulator, verifying TLS with the test CA.
fn curl(emulator: &GithubHandle, ca: &Path, host: &str, args: &[&str], url_path: &str) -> Curl {
    let port = emulator.addr().port();
    let output = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(["-D", "-", "-o", "-"])
        .args(args)
        .arg(format!("https://{host}:{port}{url_path}"))
        .output()
        .expect("curl runs");
    assert!(
        output.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let (headers, body) = text.split_once("\r\n\r\n").unwrap();
    let status = headers.split(' ').nth(1).unwrap().parse().unwrap();
    Curl {
        status,
        headers: headers.to_owned(),
        body: body.to_owned(),
    }
}

fn start(dir: &Path) -> GithubHandle {
    GithubEmulator::start(
        GithubOptions::new(dir.join("git"))
            .token("ghs_test_valid_token", "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .expect("emulator starts")
}

#[test]
fn issue_read_and_comment_round_trip_with_recording() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "Crash on start", "It crashes.", "alice")
        .unwrap();
    let auth = ["-H", "Authorization: token ghs_test_valid_token"];

    let issue = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        "/repos/acme/widgets/issues/1",
    );
    assert_eq!(issue.status, 200, "{}", issue.body);
    let issue = issue.json();
    assert_eq!(issue["number"], 1);
    assert_eq!(issue["title"], "Crash on start");
    assert_eq!(issue["user"]["login"], "alice");
    assert_eq!(
        issue["html_url"],
        "https://github.com/acme/widgets/issues/1"
    );

    let mut args = auth.to_vec();
    args.extend([
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data",
        r#"{"body":"On it."}"#,
    ]);
    let created = curl(
        &emulator,
        &ca,
        "api.github.com",
        &args,
        "/repos/acme/widgets/issues/1/comments",
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    let id = created["id"].as_u64().unwrap();
    assert_eq!(created["body"], "On it.");
    assert_eq!(created["user"]["login"], "gatehouse-test[bot]");
    assert_eq!(
        created["html_url"],
        format!("https://github.com/acme/widgets/issues/1#issuecomment-{id}")
    );
    assert_eq!(
        created["url"],
        format!("https://api.github.com/repos/acme/widgets/issues/comments/{id}")
    );

    let comments = emulator.comments();
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].kind, CommentKind::Issue);
    assert_eq!(comments[0].id, id);
    assert_eq!(comments[0].body, "On it.");

    let requests = emulator.requests();
    assert_eq!(requests.len(), 2);
    let post = &requests[1];
    assert_eq!(post.method, "POST");
    assert_eq!(post.host.as_deref(), Some("api.github.com"));
    assert_eq!(post.path, "/repos/acme/widgets/issues/1/comments");
    assert_eq!(post.authorization(), Some("token ghs_test_valid_token"));
    assert_eq!(post.body_text(), r#"{"body":"On it."}"#);
    assert_eq!(post.status, 201);
    assert_eq!(post.created_id, Some(id.to_string()));

    // Listing sees it, through the re-cased name too.
    let list = curl(
        &emulator,
        &ca,
        "api.github.com",
        &auth,
        "/repos/ACME/Widgets/issues/1/comments",
    );
    assert_eq!(list.json().as_array().unwrap().len(), 1);
    emulator.shutdown();
}

#[test]
fn unauthenticated_and_wrong_token_get_github_401() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    emulator
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();

    let none = curl(
        &emulator,
        &ca,
        "api.github.com",
        &[],
        "/repos/acme/widgets/issues/1",
    );
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["message"], "Requires authentication");
    assert!(none.json()["documentation_url"].is_string());

    for header in [
        "Authorization: token ghs_wrong",
        "Authorization: Bearer ghs_test_valid_tokenX",
        "Authorization: Basic eC1hY2Nlc3MtdG9rZW46d3Jvbmc=",
    ] {
        let mut args = vec!["-H", header, "-X", "POST", "--data", r#"{"body":"sneaky"}"#];
        args.push("-H");
        args.push("Content-Type: application/json");
        let bad = curl(
            &emulator,
            &ca,
            "api.github.com",
            &args,
            "/repos/acme/widgets/issues/1/comments",
        );
        assert_eq!(bad.status, 401, "{header}");
        assert_eq!(bad.json()["message"], "Bad credentials");
    }
    assert!(
        emulator.comments().is_empty(),
        "no comment may be created without a valid token"
    );
    assert!(emulator
        .requests()
        .iter()
        .all(|r| r.status == 401 && r.created_id.is_none()));
}

#[test]
fn tls_is_refused_without_the_test_ca_and_valid_for_all_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let port = emulator.addr().port();

    // The system roots do not trust the emulator.
    let untrusted = Command::new("curl")
        .args([
            "-sS",
            "--resolve",
            &format!("api.github.com:{port}:127.0.0.1"),
        ])
        .arg(format!("https://api.github.com:{port}/user"))
        .output()
        .unwrap();
    assert!(!untrusted.status.success());

    // A name outside the certificate fails verification even with the CA.
    let wrong_name = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&ca)
        .args(["--resolve", &format!("evil.example:{port}:127.0.0.1")])
        .arg(format!("https://evil.example:{port}/user"))
        .output()
        .unwrap();
    assert!(!wrong_name.status.success());

    let auth = ["-H", "Authorization: Bearer ghs_test_valid_token"];
    for host in [
        "api.github.com",
        "github.com",
        "localhost",
        "open.feishu.cn",
    ] {
        let user = curl(&emulator, &ca, host, &auth, "/user");
        assert_eq!(user.status, 200, "{host}");
        assert_eq!(user.json()["login"], "gatehouse-test[bot]");
        assert!(user
            .headers
            .to_ascii_lowercase()
            .contains("x-ratelimit-remaining"));
    }
}
