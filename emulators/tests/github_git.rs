//! git smart HTTP through the emulator with the real git client.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};

const TOKEN: &str = "ghs_git_test_token";

fn start(dir: &Path) -> GithubHandle {
    // Nothing listens on the webhook target: deliveries are kept with their
    // failed attempts, which is what the tests read.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed_port.local_addr().unwrap());
    drop(closed_port);
    GithubEmulator::start(
        GithubOptions::new(dir.join("git"))
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(RepoSpec::new("acme", "widgets"))
            .webhook(&url, "s3cret"),
    )
    .expect("emulator starts")
}

/// Run git with a clean environment, trusting only the test CA.
fn git(ca: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_SSL_CAINFO", ca)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap()
}

fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "git failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn clone_and_push_with_token_and_refuse_without() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let port = emulator.addr().port();
    // Clone as from github.com (git's curl `--resolve`), so Host dispatch is exercised.
    let resolve = format!("http.curloptResolve=github.com:{port}:127.0.0.1");
    let authed = format!("https://x-access-token:{TOKEN}@github.com:{port}/acme/widgets.git");
    let anonymous = format!("https://127.0.0.1:{port}/acme/widgets.git");

    // Without credentials git gets GitHub's 401 and, with no prompt, fails.
    let refused = git(&ca, dir.path(), &["clone", "--quiet", &anonymous, "anon"]);
    assert!(!refused.status.success());
    let wrong = format!("https://x-access-token:ghs_wrong@127.0.0.1:{port}/acme/widgets.git");
    let refused = git(&ca, dir.path(), &["clone", "--quiet", &wrong, "wrong"]);
    assert!(!refused.status.success());
    let unauthorized: Vec<_> = emulator
        .requests()
        .into_iter()
        .filter(|r| r.status == 401)
        .collect();
    assert!(!unauthorized.is_empty());
    assert!(!dir.path().join("anon/README.md").exists());

    ok(git(
        &ca,
        dir.path(),
        &["-c", &resolve, "clone", "--quiet", &authed, "work"],
    ));
    let work = dir.path().join("work");
    assert_eq!(
        std::fs::read_to_string(work.join("README.md")).unwrap(),
        "# widgets\n"
    );
    let saw_token = emulator.requests().into_iter().any(|r| {
        r.path == "/acme/widgets.git/git-upload-pack"
            && r.host.as_deref() == Some("github.com")
            && r.status == 200
            && r.authorization() == Some("Basic eC1hY2Nlc3MtdG9rZW46Z2hzX2dpdF90ZXN0X3Rva2Vu")
    });
    assert!(saw_token, "{:#?}", emulator.requests());

    // Push a new branch with a ~3 MB incompressible-ish file.
    ok(git(
        &ca,
        &work,
        &["checkout", "--quiet", "-b", "gatehouse/x"],
    ));
    // Incompressible content (xorshift), so the pack really is ~3 MB.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let blob: Vec<u8> = (0..3_000_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(work.join("data.bin"), blob).unwrap();
    ok(git(&ca, &work, &["add", "data.bin"]));
    ok(git(&ca, &work, &["commit", "--quiet", "-m", "data"]));
    ok(git(
        &ca,
        &work,
        &["-c", &resolve, "push", "--quiet", "origin", "gatehouse/x"],
    ));
    let local = ok(git(&ca, &work, &["rev-parse", "HEAD"]));
    let bare = emulator.repo_git_dir("acme/widgets").unwrap();
    let remote = ok(git(
        &ca,
        dir.path(),
        &[
            "--git-dir",
            bare.to_str().unwrap(),
            "rev-parse",
            "refs/heads/gatehouse/x",
        ],
    ));
    assert_eq!(local.trim(), remote.trim());
    // The record holds the head of the streamed body: the ref-update command.
    let receive_packs: Vec<_> = emulator
        .requests()
        .into_iter()
        .filter(|r| r.path == "/acme/widgets.git/git-receive-pack")
        .collect();
    assert!(receive_packs.iter().all(|r| r.status == 200));
    let update = receive_packs
        .iter()
        .find(|r| {
            r.body
                .windows(21)
                .any(|w| w == b"refs/heads/gatehouse/x"[..21].as_ref())
        })
        .expect("the ref update was recorded");
    assert!(
        update.body_truncated,
        "a 3 MB pack is more than the record keeps"
    );
    assert_eq!(
        update.body.len(),
        gatehouse_emulators::record::BODY_RECORD_LIMIT
    );

    // The pushed branch can back a pull request.
    let number = emulator
        .add_pull(
            "acme/widgets",
            "Add data",
            "gatehouse/x",
            "main",
            "gatehouse-test[bot]",
        )
        .unwrap();
    assert_eq!(number, 1);

    // A push to the pull request's branch moves the pull request (GitHub:
    // its head, diff and checks follow), delivered as `synchronize`.
    std::fs::write(work.join("more.txt"), "more\n").unwrap();
    ok(git(&ca, &work, &["add", "more.txt"]));
    ok(git(&ca, &work, &["commit", "--quiet", "-m", "more"]));
    ok(git(
        &ca,
        &work,
        &["-c", &resolve, "push", "--quiet", "origin", "gatehouse/x"],
    ));
    let after = ok(git(&ca, &work, &["rev-parse", "HEAD"]));
    let synchronized = (0..100).find_map(|_| {
        let found = emulator
            .webhook_deliveries()
            .into_iter()
            .find(|d| d.event == "pull_request" && d.action.as_deref() == Some("synchronize"));
        if found.is_none() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        found
    });
    let delivery = synchronized.expect("synchronize delivered after the push");
    let payload: serde_json::Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(payload["before"], local.trim());
    assert_eq!(payload["after"], after.trim());
    assert_eq!(payload["pull_request"]["head"]["sha"], after.trim());
    assert_eq!(payload["pull_request"]["commits"], 2, "{payload}");
    assert_eq!(payload["sender"]["login"], "gatehouse-test[bot]");
    emulator.shutdown();
}

#[test]
fn gzip_encoded_upload_pack_request_is_inflated_by_http_backend() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let bare = emulator.repo_git_dir("acme/widgets").unwrap();
    let head = ok(git(
        &ca,
        dir.path(),
        &[
            "--git-dir",
            bare.to_str().unwrap(),
            "rev-parse",
            "refs/heads/main",
        ],
    ));
    // A protocol-v0 fetch request: one want, flush, done.
    let want = format!("want {}\n", head.trim());
    let request = format!("{:04x}{want}00000009done\n", want.len() + 4);
    let body = dir.path().join("request.gz");
    let mut gzip = Command::new("gzip")
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    gzip.stdin
        .take()
        .unwrap()
        .write_all(request.as_bytes())
        .unwrap();
    std::fs::write(&body, gzip.wait_with_output().unwrap().stdout).unwrap();

    let port = emulator.addr().port();
    let output = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(&ca)
        .args(["--resolve", &format!("github.com:{port}:127.0.0.1")])
        .args(["-u", &format!("x-access-token:{TOKEN}")])
        .args(["-H", "Content-Type: application/x-git-upload-pack-request"])
        .args(["-H", "Content-Encoding: gzip"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(format!(
            "https://github.com:{port}/acme/widgets.git/git-upload-pack"
        ))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer = output.stdout;
    assert!(
        answer.starts_with(b"0008NAK\n"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(answer.windows(4).any(|w| w == b"PACK"));
}

#[test]
fn git_without_credentials_gets_basic_challenge() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let port = emulator.addr().port();
    let url =
        format!("https://github.com:{port}/acme/widgets.git/info/refs?service=git-upload-pack");
    let wrong_user = format!("someone:{TOKEN}");
    for auth in [
        None,
        Some("x-access-token:ghs_wrong"),
        Some(":"),
        Some(wrong_user.as_str()),
    ] {
        let mut command = Command::new("curl");
        command
            .args(["-sS", "-D", "-", "-o", "/dev/null", "--cacert"])
            .arg(&ca)
            .args(["--resolve", &format!("github.com:{port}:127.0.0.1")]);
        if let Some(auth) = auth {
            command.args(["-u", auth]);
        }
        let head = String::from_utf8(command.arg(&url).output().unwrap().stdout).unwrap();
        assert!(head.starts_with("HTTP/1.1 401"), "{auth:?}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: basic realm=\"github\""),
            "{head}"
        );
    }
    // A bearer token is not accepted for git, as on GitHub.
    let head = Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "/dev/null", "--cacert"])
        .arg(&ca)
        .args(["--resolve", &format!("github.com:{port}:127.0.0.1")])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .arg(&url)
        .output()
        .unwrap();
    assert!(String::from_utf8(head.stdout)
        .unwrap()
        .starts_with("HTTP/1.1 401"));
}
