//! `gatehouse proxy` as a child process, its admin API, and a blocking
//! relay for clients outside a sandbox.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_emulators::GithubHandle;

use crate::random::token as random_token;
use crate::rules::TEST_RULES;

/// `gatehouse proxy` as a child process; killed when dropped.
pub struct ProxyProcess {
    pub child: std::process::Child,
    pub admin: PathBuf,
    pub log: PathBuf,
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a config into `dir` (rules, token file, overrides for the
/// emulator's hosts) and starts `gatehouse proxy` on it, logging at debug.
pub fn start_proxy_process(dir: &Path, github: &GithubHandle, token: &str) -> ProxyProcess {
    let command = crate::bin::command();
    start_proxy_process_with(dir, github, token, command, |_| {})
}

/// As [`start_proxy_process`], with more arguments after `--config …`
/// (`--log-format json`).
pub fn start_proxy_process_args(
    dir: &Path,
    github: &GithubHandle,
    token: &str,
    args: &[&str],
) -> ProxyProcess {
    let mut command = crate::bin::command();
    command
        .args(["proxy", "--config"])
        .arg(dir.join("proxy.toml"));
    command.args(args);
    spawn_proxy(dir, github, token, command, |_| {})
}

/// As [`start_proxy_process`], with the command to run (`gatehouse` or a
/// wrapper that changes user) and a hook run on `dir` once its files exist.
pub fn start_proxy_process_with(
    dir: &Path,
    github: &GithubHandle,
    token: &str,
    mut command: std::process::Command,
    prepare: impl FnOnce(&Path),
) -> ProxyProcess {
    command
        .args(["proxy", "--config"])
        .arg(dir.join("proxy.toml"));
    spawn_proxy(dir, github, token, command, prepare)
}

/// Writes the files and runs `command` (its arguments complete).
fn spawn_proxy(
    dir: &Path,
    github: &GithubHandle,
    token: &str,
    mut command: std::process::Command,
    prepare: impl FnOnce(&Path),
) -> ProxyProcess {
    use std::os::unix::fs::PermissionsExt;
    github.write_ca_pem(&dir.join("upstream-ca.pem")).unwrap();
    std::fs::write(dir.join("rules.toml"), TEST_RULES).unwrap();
    for (file, secret) in [
        ("github.token", token.to_string()),
        ("feishu.secret", random_token("")),
    ] {
        std::fs::write(dir.join(file), secret).unwrap();
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let authority = github.addr().to_string();
    let config = format!(
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
token_file = "github.token"
# The fixture's GraphQL rule runs against the emulator with this token.
dangerously_allow_unscoped_graphql = true

[credentials.feishu]
kind = "feishu_app"
app_id = "cli_unused"
app_secret_file = "feishu.secret"
base_url = "https://open.feishu.cn"

[upstream."api.github.com"]
url = "https://{authority}"
ca_file = "upstream-ca.pem"

[upstream."github.com"]
url = "https://{authority}"
ca_file = "upstream-ca.pem"
"#
    );
    std::fs::write(dir.join("proxy.toml"), config).unwrap();
    let log = dir.join("proxy.log");
    prepare(dir);
    let child = command
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let admin = dir.join("admin.sock");
    // Served, not only bound: the file exists from bind(2), a moment before
    // listen(2), when a connect is still refused.
    let serves = |admin: &Path| UnixStream::connect(admin).is_ok();
    for _ in 0..400 {
        if serves(&admin) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        serves(&admin),
        "the proxy did not start: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    ProxyProcess { child, admin, log }
}

/// One HTTP/1.1 exchange over a unix socket; returns (status, body).
pub fn admin_call(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.unwrap_or("");
    // One write: an early answer cannot meet a body still being written.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: gatehouse\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

/// A blocking TCP relay on loopback to a unix socket (for clients outside
/// a sandbox, which only speak TCP to a proxy). Runs until the process ends.
pub fn thread_relay(socket: PathBuf) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let Ok(unix) = UnixStream::connect(&socket) else {
                continue;
            };
            let (mut t2, mut u2) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
            let (mut t1, mut u1) = (tcp, unix);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut t1, &mut u1);
                let _ = u1.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut u2, &mut t2);
                let _ = t2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}
