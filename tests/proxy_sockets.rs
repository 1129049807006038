//! `gatehouse proxy` and its sockets: a static identity's socket in a
//! directory others may enter is refused at start (anyone there could speak
//! as that identity); in a directory closed to others it starts. The admin
//! socket is 0600 from its first moment.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use gatehouse_testkit::rules::TEST_RULES;

fn config(dir: &Path) -> String {
    let token = dir.join("token");
    std::fs::write(&token, "ghs_unused").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(dir.join("feishu"), "unused").unwrap();
    std::fs::write(dir.join("rules.toml"), TEST_RULES).unwrap();
    r#"
identity_socket_dir = "sockets"
rule_set_files = ["rules.toml"]
[ca]
cert = "ca.pem"
key = "ca.key"
[audit]
path = "audit.jsonl"
[admin]
socket = "admin.sock"
[credentials.github]
kind = "github_token"
token_file = "token"
# The test rules allow GraphQL; the emulator's token is the test's own.
dangerously_allow_unscoped_graphql = true
[credentials.feishu]
kind = "feishu_app"
app_id = "cli_unused"
app_secret_file = "feishu"
base_url = "https://open.feishu.cn"
[[identity]]
name = "router"
socket = "shared/router.sock"
rule_sets = ["test-worker"]
variables = { repo = "acme/widgets" }
"#
    .into()
}

fn start(dir: &Path) -> Child {
    std::fs::write(dir.join("proxy.toml"), config(dir)).unwrap();
    gatehouse_testkit::bin::command()
        .args(["proxy", "--config"])
        .arg(dir.join("proxy.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the child to exit (its stderr) or for `ready` to exist (None).
fn outcome(mut child: Child, ready: &Path) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(_status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return Some(err);
        }
        if ready.exists() {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy neither started nor exited"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_static_identity_socket_in_a_directory_others_may_enter_is_refused() {
    for (mode, refused) in [
        (0o755, true),
        (0o701, true),
        (0o704, true),
        (0o750, false),
        (0o700, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).unwrap();
        let got = outcome(start(dir.path()), &dir.path().join("admin.sock"));
        match (refused, got) {
            (true, Some(err)) => {
                assert!(
                    err.contains("others may") && err.contains("router"),
                    "{mode:o}: {err}"
                );
                assert!(
                    !shared.join("router.sock").exists(),
                    "{mode:o}: the socket was bound"
                );
            }
            (false, None) => {
                let socket = std::fs::metadata(dir.path().join("admin.sock")).unwrap();
                assert_eq!(socket.permissions().mode() & 0o777, 0o600);
            }
            (true, None) => panic!("{mode:o}: started"),
            (false, Some(err)) => panic!("{mode:o}: refused: {err}"),
        }
    }
}
