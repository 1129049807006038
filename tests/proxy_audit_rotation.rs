//! The audit log rotating under load: `gatehouse proxy` with a small
//! `rotate_bytes`, four clients sending requests at once through an
//! identity, many rotations while they run. Every request answered is on
//! record with its completion, the set is one chain across its files
//! (`gatehouse audit verify` on the directory), and a file taken out of the
//! middle is found missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_emulators::{GithubEmulator, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::process::{admin_call as admin, start_proxy_process_with};
use gatehouse_testkit::proxy::{read_head, read_until_closed, tls_over};
use gatehouse_testkit::random::token as random_token;
use serde_json::Value;

const CLIENTS: usize = 4;
const PER_CLIENT: usize = 40;

/// One request through the identity; its answer's status line.
fn get(socket: &Path, ca: &Path, path: &str) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
    let mut tls = tls_over(s, "api.github.com", ca, true);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (_, answer) = read_until_closed(&mut tls);
    answer.lines().next().unwrap_or_default().to_owned()
}

fn verify(path: &Path) -> (bool, String) {
    let out = gatehouse_testkit::bin::command()
        .args(["audit", "verify"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_log_rotates_while_requests_run_and_loses_nothing() {
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
    let proxy =
        start_proxy_process_with(d, &github, &token, gatehouse_testkit::bin::command(), |d| {
            let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
            let rotating = config.replace(
                "[audit]\npath = \"audit.jsonl\"\n",
                "[audit]\npath = \"audit.jsonl\"\nrotate_bytes = 8192\n",
            );
            assert_ne!(config, rotating);
            std::fs::write(d.join("proxy.toml"), rotating).unwrap();
        });
    let new = r#"{"name":"tkt_rot","rule_sets":["test-worker"],"tunnel_hosts":[],"variables":{"repo":"acme/widgets"}}"#;
    let (status, body) = admin(&proxy.admin, "POST", "/identities", Some(new));
    assert_eq!(status, 201, "{body}");
    let socket = PathBuf::from(
        serde_json::from_str::<Value>(&body).unwrap()["socket"]
            .as_str()
            .unwrap(),
    );
    let ca = d.join("ca.pem");

    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (socket, ca) = (socket.clone(), ca.clone());
            std::thread::spawn(move || {
                (0..PER_CLIENT)
                    .map(|i| {
                        get(
                            &socket,
                            &ca,
                            &format!("/repos/acme/widgets/issues/1?client={c}&i={i}"),
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<String> = clients
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(
        answers.iter().all(|a| a.starts_with("HTTP/1.1 200")),
        "{answers:?}"
    );
    // Completions are written after the answer starts: let the last land.
    std::thread::sleep(Duration::from_millis(300));

    let audit_dir = d.join("audit");
    std::fs::create_dir(&audit_dir).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit.jsonl"))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "only {} files: {files:?}", files.len());
    for f in &files {
        std::fs::copy(f, audit_dir.join(f.file_name().unwrap())).unwrap();
    }
    let (ok, said) = verify(&audit_dir);
    assert!(ok, "{said}");
    assert!(said.contains("chain intact"), "{said}");

    // Every request answered is on record once, each with its completion.
    let mut requests = std::collections::BTreeMap::new();
    let mut completions = std::collections::BTreeSet::new();
    for f in &files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            match v["event"].as_str().unwrap() {
                "request" if v["path"] == "/repos/acme/widgets/issues/1" => {
                    *requests
                        .entry(v["request_id"].as_str().unwrap().to_owned())
                        .or_insert(0) += 1;
                }
                "completion" => {
                    completions.insert(v["request_id"].as_str().unwrap().to_owned());
                }
                _ => {}
            }
        }
    }
    assert_eq!(requests.len(), CLIENTS * PER_CLIENT);
    assert!(requests.values().all(|&n| n == 1));
    assert!(requests.keys().all(|id| completions.contains(id)));

    // A file taken out of the middle is found.
    std::fs::remove_file(audit_dir.join("audit.jsonl.000002")).unwrap();
    let (ok, said) = verify(&audit_dir);
    assert!(!ok, "{said}");
    assert!(said.contains("missing or out of order"), "{said}");
}
