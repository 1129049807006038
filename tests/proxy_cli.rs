//! `gatehouse proxy --config` as a process: the admin API, a request through
//! an identity created with it, revocation, shutdown, `gatehouse audit
//! verify` on the log it wrote (intact, then tampered), and a scan of every
//! log line for the secret; `--log-format json`: every line of its log is a
//! JSON object, none holds the secret.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use gatehouse_emulators::{GithubEmulator, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::{
    admin_call as admin, start_proxy_process, start_proxy_process_args,
};
use gatehouse_testkit::proxy::{read_head, read_until_closed, tls_over};
use gatehouse_testkit::random::token as random_token;
use serde_json::Value;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn proxy_process_admin_api_audit_verify_and_no_secret_in_any_log() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    let mut proxy = start_proxy_process(d, &github, &token);
    let log_path = proxy.log.clone();
    let admin_sock = proxy.admin.clone();

    // Files the proxy made are private to it.
    assert_eq!(mode(&admin_sock), 0o600);
    assert_eq!(mode(&d.join("ca.key")), 0o600);
    assert_eq!(mode(&d.join("sockets")), 0o700);

    // The admin API.
    let new = r#"{"name":"tkt_cli","rule_sets":["test-worker"],"tunnel_hosts":[],"variables":{"repo":"acme/widgets"}}"#;
    let (status, body) = admin(&admin_sock, "POST", "/identities", Some(new));
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let socket = PathBuf::from(created["socket"].as_str().unwrap());
    assert!(socket.is_absolute());
    assert_eq!(mode(&socket), 0o666);
    let (status, _) = admin(&admin_sock, "POST", "/identities", Some(new));
    assert_eq!(status, 409);
    for bad in [
        r#"{"name":"tkt_x","rule_sets":["github-admin"],"variables":{"repo":"acme/widgets"}}"#,
        r#"{"name":"tkt_x","rule_sets":["test-worker"],"variables":{}}"#,
        r#"{"name":"tkt_x","rule_sets":["test-worker"],"variables":{"repo":"../etc"}}"#,
        r#"{"name":"../x","rule_sets":["test-worker"],"variables":{"repo":"acme/widgets"}}"#,
        r#"{"name":"tkt_x","rule_sets":["test-worker"],"variables":{"repo":"acme/widgets"},"admin":true}"#,
    ] {
        let (status, body) = admin(&admin_sock, "POST", "/identities", Some(bad));
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    }
    let (status, body) = admin(&admin_sock, "GET", "/identities", None);
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["name"], "tkt_cli");

    // A request through the new identity, with a client Authorization that
    // must be replaced.
    let mut s = UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    let mut tls = tls_over(s, "api.github.com", &d.join("ca.pem"), true);
    write!(
        tls,
        "GET /repos/acme/widgets/issues/1 HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nAuthorization: Bearer not-the-token\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = github.requests();
    assert_eq!(
        seen.last().unwrap().authorization(),
        Some(format!("Bearer {token}").as_str())
    );

    // Revocation through the admin API.
    let (status, _) = admin(&admin_sock, "DELETE", "/identities/tkt_cli", None);
    assert_eq!(status, 204);
    assert!(!socket.exists());
    let (status, _) = admin(&admin_sock, "DELETE", "/identities/tkt_cli", None);
    assert_eq!(status, 404);

    // Clean shutdown on SIGTERM.
    let pid = proxy.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = proxy.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!admin_sock.exists());

    // The audit log verifies...
    let audit = d.join("audit.jsonl");
    let out = gatehouse_testkit::bin::command()
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("chain intact"));

    // ...and no line of it or of the proxy's debug log holds the secret.
    let basic = {
        use std::process::Command;
        let out = Command::new("base64")
            .arg("-w0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = out;
        out.stdin
            .take()
            .unwrap()
            .write_all(format!("x-access-token:{token}").as_bytes())
            .unwrap();
        String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap()
    };
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("gatehouse proxy ready"), "{log}");
    for (name, text) in [
        ("proxy log", &log),
        ("audit log", &std::fs::read_to_string(&audit).unwrap()),
    ] {
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains(&token),
                "{name} line {} holds the token",
                n + 1
            );
            assert!(
                !line.contains(&basic),
                "{name} line {} holds the git credential",
                n + 1
            );
        }
    }

    // A tampered line is found.
    let text = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 2, "{text}");
    let tampered = text.replacen(
        "/repos/acme/widgets/issues/1",
        "/repos/acme/widgets/issues/2",
        1,
    );
    assert_ne!(tampered, text);
    std::fs::write(&audit, tampered).unwrap();
    let out = gatehouse_testkit::bin::command()
        .args(["audit", "verify"])
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line "), "{err}");
}

/// A GitHub-only deployment over the shipped rule-set directory: the proxy
/// starts without Feishu or model credentials, says at start which sets are
/// out of use and why, serves GitHub identities, and refuses an identity
/// that names a set it cannot serve, with the reason.
#[test]
fn a_github_only_proxy_loads_the_shipped_rules_and_refuses_the_sets_it_cannot_serve() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("sandbox-profiles/rules");
    let mut proxy = gatehouse_testkit::proxy::process::start_proxy_process_with(
        d,
        &github,
        &token,
        gatehouse_testkit::bin::command(),
        |d| {
            let path = d.join("proxy.toml");
            let text = std::fs::read_to_string(&path).unwrap();
            let (head, tail) = text.split_once("[credentials.feishu]").unwrap();
            let tail = &tail[tail.find("\n[upstream").unwrap()..];
            let text = format!("{head}{tail}").replacen(
                "rule_set_files = [\"rules.toml\"]",
                &format!("rule_set_dirs = [{:?}]", shipped.display().to_string()),
                1,
            );
            assert!(!text.contains("feishu_app") && text.contains("rule_set_dirs"));
            std::fs::write(&path, text).unwrap();
        },
    );
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    for set in ["feishu-read", "feishu-send", "router-feishu", "model-api"] {
        assert!(
            log.contains(&format!("rule set `{set}` is not in use")),
            "{set}: {log}"
        );
    }
    assert!(!log.contains("`github-worker` is not in use"), "{log}");

    // The admin API lists every set, withdrawn ones with why: what the
    // supervisor checks its profiles against at start.
    let (status, body) = admin(&proxy.admin, "GET", "/rule-sets", None);
    assert_eq!(status, 200, "{body}");
    let known: Vec<gatehouse_types::wire::KnownRuleSet> = serde_json::from_str(&body).unwrap();
    let find = |name: &str| known.iter().find(|k| k.name.as_str() == name).unwrap();
    assert_eq!(find("github-worker").withdrawn, None);
    assert!(find("github-worker")
        .variables
        .contains(&"repo".to_string()));
    let why = find("feishu-send").withdrawn.clone().unwrap();
    assert!(why.contains("credential `feishu`"), "{why}");
    assert!(!known.iter().any(|k| k.name.as_str() == "no-such-set"));
    let (status, _) = admin(&proxy.admin, "POST", "/rule-sets", Some("{}"));
    assert_eq!(status, 405);

    let new = |sets: &str| {
        format!(
            r#"{{"name":"tkt_gh","rule_sets":{sets},"tunnel_hosts":[],"variables":{{"repo":"acme/widgets"}}}}"#
        )
    };
    let (status, body) = admin(
        &proxy.admin,
        "POST",
        "/identities",
        Some(&new(r#"["github-worker","feishu-send"]"#)),
    );
    assert_eq!(status, 400, "{body}");
    let error = serde_json::from_str::<Value>(&body).unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.contains("rule set `feishu-send` is not in use")
            && error.contains("credential `feishu`, which is not defined"),
        "{error}"
    );
    // Control: the GitHub sets alone are served.
    let (status, body) = admin(
        &proxy.admin,
        "POST",
        "/identities",
        Some(&new(r#"["github-worker"]"#)),
    );
    assert_eq!(status, 201, "{body}");
    gatehouse_testkit::procs::signal(proxy.child.id(), "TERM");
    assert!(proxy.child.wait().unwrap().success());
}

/// The git credential the proxy sends for `token`, as `base64 -w0` says.
fn git_basic(token: &str) -> String {
    let mut child = Command::new("base64")
        .arg("-w0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("x-access-token:{token}").as_bytes())
        .unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
}

#[test]
fn with_log_format_json_every_log_line_is_a_json_object_without_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = random_token("ghs_");
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    // At debug, so that the request's own events are in the log too.
    let mut proxy = start_proxy_process_args(d, &github, &token, &["--log-format", "json"]);
    let new = r#"{"name":"tkt_json","rule_sets":["test-worker"],"tunnel_hosts":[],"variables":{"repo":"acme/widgets"}}"#;
    let (status, body) = admin(&proxy.admin, "POST", "/identities", Some(new));
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let socket = PathBuf::from(created["socket"].as_str().unwrap());
    // One allowed request (the token injected) and one denied.
    for (path, expected) in [
        ("/repos/acme/widgets/issues/1", "HTTP/1.1 200"),
        ("/repos/acme/other/issues/1", "HTTP/1.1 403"),
    ] {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
        )
        .unwrap();
        assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
        let mut tls = tls_over(s, "api.github.com", &d.join("ca.pem"), true);
        write!(
            tls,
            "GET {path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let (_, answer) = read_until_closed(&mut tls);
        assert!(answer.starts_with(expected), "{path}: {answer}");
    }
    assert_eq!(
        github.requests().last().unwrap().authorization(),
        Some(format!("Bearer {token}").as_str()),
        "the token was injected: the log had the chance to hold it"
    );
    let pid = proxy.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(proxy.child.wait().unwrap().success());

    let log = std::fs::read_to_string(&proxy.log).unwrap();
    let basic = git_basic(&token);
    let mut messages = Vec::new();
    for (n, line) in log.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {} is not JSON ({e}): {line}", n + 1));
        for key in ["timestamp", "level", "target"] {
            assert!(v[key].is_string(), "line {}: no {key}: {line}", n + 1);
        }
        assert!(!line.contains(&token), "line {} holds the token", n + 1);
        assert!(
            !line.contains(&basic),
            "line {} holds the git credential",
            n + 1
        );
        if let Some(m) = v["message"].as_str() {
            messages.push(m.to_owned());
        }
    }
    for expected in ["gatehouse proxy ready", "shutting down"] {
        assert!(
            messages.iter().any(|m| m == expected),
            "no {expected:?} among {messages:?}"
        );
    }
    // More than start and stop: the request's events are there.
    assert!(messages.len() > 3, "{messages:?}");
    let ready = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["message"] == "gatehouse proxy ready")
        .unwrap();
    assert_eq!(ready["level"], "INFO");
    assert_eq!(ready["identities"], 0, "fields are top-level: {ready}");
}
