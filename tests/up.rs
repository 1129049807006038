//! `gatehouse up` as root, with the GitHub emulator as upstream: each part
//! runs as its own user, each socket admits only its intended peer, the
//! credential files are the proxy's alone, a killed part comes back, a stop
//! goes in reverse order and leaves nothing, `up` killed with SIGKILL takes
//! its parts with it and a second `up` on the same state is refused;
//! `gatehouse config check` refuses what `up` could not run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gatehouse::up::{self, Part};
use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_testkit::machine::{http_status_as, user_gid, user_uid, TEST_USER};
use gatehouse_testkit::rules::TEST_RULES;
use gatehouse_testkit::{require, Need};

const PROXY_USER: &str = "gatehouse-proxy";
const ROUTER_USER: &str = "gatehouse-router";
const NEEDS: [Need; 4] = [
    Need::Root,
    Need::User(PROXY_USER),
    Need::User(ROUTER_USER),
    Need::User(TEST_USER),
];

const POLICY: &str = r#"
[identity]
github = { login = "gatehouse-bot", id = 9000001 }

[[people]]
name = "alice"
team = "core"
github = { login = "alice", id = 1001 }

[teams.core]
default_repo = "acme/widgets"

[teams.core.repos."acme/widgets"]
sandbox_profile = "default"
rule_sets = ["test-worker"]
"#;

struct Setup {
    dir: tempfile::TempDir,
    /// Short: socket paths are limited to 107 bytes.
    _run: tempfile::TempDir,
    config: PathBuf,
    token: String,
    feishu_secret: String,
    services: PathBuf,
    _github: GithubHandle,
}

impl Setup {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn credential_files(&self) -> Vec<PathBuf> {
        vec![
            self.path("secrets/github-token"),
            self.path("secrets/feishu-secret"),
        ]
    }
}

fn ids(name: &str) -> (u32, u32) {
    (user_uid(name).unwrap(), user_gid(name).unwrap())
}

fn write(path: &Path, text: &str, mode: u32, owner: Option<(u32, u32)>) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    }
}

/// A world-traversable directory with the binaries, the emulator's CA, the
/// rules, the policy, secrets owned as `up` wants them, and gatehouse.toml.
fn setup() -> Setup {
    let dir = gatehouse_testkit::sandbox::reachable_dir("gh-up-");
    let run = gatehouse_testkit::sandbox::reachable_dir("ur");
    let p = |rel: &str| dir.path().join(rel);
    let token = gatehouse_testkit::random::token("ghs_");
    let feishu_secret = gatehouse_testkit::random::token("fs_");
    let github = GithubEmulator::start(
        GithubOptions::new(p("git"))
            .token(&token, "gatehouse-bot")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github.write_ca_pem(&p("emulator-ca.pem")).unwrap();
    std::fs::set_permissions(p("emulator-ca.pem"), std::fs::Permissions::from_mode(0o644)).unwrap();
    for d in ["bin", "rules", "secrets", "profiles"] {
        std::fs::create_dir(p(d)).unwrap();
        std::fs::set_permissions(p(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    gatehouse_testkit::bin::copy_to(&p("bin"));
    write(&p("rules/test-worker.toml"), TEST_RULES, 0o644, None);
    // The router's own identities run under the shipped rule set.
    let shipped = gatehouse_testkit::bin::repo_path("sandbox-profiles/rules/router-github.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    write(&p("rules/router-github.toml"), &text, 0o644, None);
    write(&p("policy.toml"), POLICY, 0o644, None);
    // The shipped profiles, with `default` also allowing the test's rule set
    // (config check refuses a policy whose rule sets its profile refuses).
    for name in ["base", "default"] {
        let shipped = gatehouse_testkit::bin::repo_path(&format!("sandbox-profiles/{name}.toml"));
        let text = std::fs::read_to_string(shipped).unwrap();
        let text = text.replace(
            "rule_sets = [\"github-worker\", \"model-api\"]",
            "rule_sets = [\"github-worker\", \"model-api\", \"test-worker\"]",
        );
        assert_eq!(name == "default", text.contains("test-worker"), "{name}");
        write(&p(&format!("profiles/{name}.toml")), &text, 0o644, None);
    }
    let proxy = ids(PROXY_USER);
    let router = ids(ROUTER_USER);
    write(&p("secrets/github-token"), &token, 0o600, Some(proxy));
    write(
        &p("secrets/feishu-secret"),
        &feishu_secret,
        0o400,
        Some(proxy),
    );
    write(
        &p("secrets/webhook"),
        "webhook-secret",
        0o640,
        Some((0, router.1)),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        r#"
policy = "policy.toml"
profiles_dir = "{profiles}"
rule_sets_dir = "rules"
prompts_dir = "{prompts}"
state_dir = "state"
run_dir = "{run}"
proxy_user = "{PROXY_USER}"
router_user = "{ROUTER_USER}"

[credentials.github]
kind = "github_token"
token_file = "secrets/github-token"
# The test rules allow GraphQL; the emulator's token is the test's own.
dangerously_allow_unscoped_graphql = true

[credentials.feishu]
kind = "feishu_app"
app_id = "cli_up_test"
app_secret_file = "secrets/feishu-secret"
base_url = "https://open.feishu.cn"

[github]
listen = "127.0.0.1:{port}"
webhook_secret_files = ["secrets/webhook"]

[upstream."api.github.com"]
url = "https://{emulator}"
ca_file = "emulator-ca.pem"
"#,
        profiles = p("profiles").display(),
        prompts = gatehouse_testkit::bin::repo_path("prompts").display(),
        emulator = github.addr(),
        run = run.path().display(),
    );
    write(&p("gatehouse.toml"), &config, 0o644, None);
    Setup {
        config: p("gatehouse.toml"),
        services: p("bin/gatehouse-services"),
        dir,
        _run: run,
        token,
        feishu_secret,
        _github: github,
    }
}

fn options(s: &Setup) -> up::Options {
    up::Options {
        services: Some(s.services.clone()),
        ..up::Options::default()
    }
}

/// `Uid:`, `Gid:` and `Groups:` of /proc/<pid>/status.
fn status_ids(pid: u32) -> (String, String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    (field("Uid:"), field("Gid:"), field("Groups:"))
}

/// Whether a process running as `who` can connect to `socket`.
fn connects_as(who: (u32, u32), socket: &Path) -> bool {
    gatehouse_testkit::machine::connect_errno_as(who, socket).is_none()
}

/// Whether a process running as `who` can read `file` (and what it read).
fn read_as(who: (u32, u32), file: &Path) -> Option<Vec<u8>> {
    let out = Command::new("cat")
        .arg(file)
        .uid(who.0)
        .gid(who.1)
        .output()
        .unwrap();
    out.status.success().then_some(out.stdout)
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(pid: u32) -> bool {
    gatehouse_testkit::procs::alive(pid as i32)
}

#[test]
fn each_part_runs_as_its_user_and_a_stop_goes_in_reverse_order() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    assert!(prepared.users.separated());
    let running = up::start(&prepared, options(&s)).unwrap();
    let proxy = running.pid(Part::Proxy).unwrap();
    let supervisor = running.pid(Part::Supervisor).unwrap();
    let router = running.pid(Part::Router).unwrap();
    for (pid, user) in [(proxy, PROXY_USER), (router, ROUTER_USER)] {
        let (uid, gid) = ids(user);
        assert_eq!(
            status_ids(pid),
            (
                format!("{uid} {uid} {uid} {uid}"),
                format!("{gid} {gid} {gid} {gid}"),
                String::new()
            ),
            "{user}'s ids (no supplementary group)"
        );
    }
    assert_eq!(
        status_ids(supervisor).0,
        "0 0 0 0",
        "the supervisor stays root"
    );
    // ...with only the capabilities building sandboxes needs (those of
    // them this process has: a container may lack some).
    let cap = |pid: &str, field: &str| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
    };
    let kept = gatehouse_supervisor::sandbox::SUPERVISOR_CAPABILITIES;
    let keep = kept.iter().fold(0u64, |m, c| m | c.bitmask()) & cap("self", "CapBnd:");
    assert_ne!(keep & kept[0].bitmask(), 0, "no {} to keep", kept[0]);
    for field in ["CapBnd:", "CapPrm:", "CapEff:"] {
        let mask = cap(&supervisor.to_string(), field);
        assert_eq!(
            mask, keep,
            "the supervisor's {field} {mask:x}, not {keep:x}"
        );
    }
    // Environments hold only what each needs.
    for pid in [proxy, supervisor, router] {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let names: Vec<String> = environ
            .split(|b| *b == 0)
            .filter(|v| !v.is_empty())
            .map(|v| {
                String::from_utf8_lossy(v)
                    .split('=')
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert!(
            names.iter().all(|n| n == "PATH" || n == "RUST_LOG"),
            "pid {pid} environment: {names:?}"
        );
    }
    let stopped = running.stop();
    let order: Vec<Part> = stopped.iter().map(|s| s.part).collect();
    assert_eq!(order, [Part::Router, Part::Supervisor, Part::Proxy]);
    for st in &stopped {
        assert!(!st.killed, "{:?} outlived its grace", st.part);
        assert!(
            st.status.unwrap().success(),
            "{:?}: {:?}",
            st.part,
            st.status
        );
    }
    for pid in [proxy, supervisor, router] {
        assert!(!alive(pid), "pid {pid} outlived the stop");
    }
    // The generated configs were the parts': the proxy logged its start.
    let log = std::fs::read_to_string(s.path("state/logs/proxy.log")).unwrap();
    assert!(log.contains("gatehouse proxy ready"), "{log}");
    assert!(!log.contains(&s.token), "the token is in the proxy's log");
}

#[test]
fn each_socket_admits_only_its_intended_peer() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    let running = up::start(&prepared, options(&s)).unwrap();
    let l = &prepared.layout;
    let other = ids(TEST_USER);
    let router = ids(ROUTER_USER);
    let proxy = ids(PROXY_USER);
    let router_identity = &l.router_identities[0].socket;
    // Positive controls: each intended peer reaches its socket.
    assert!(
        connects_as((0, 0), &l.admin_socket),
        "the supervisor (root) reaches the admin socket"
    );
    assert!(
        connects_as(router, &l.jobs_socket),
        "the router reaches the job API"
    );
    assert!(
        connects_as(router, router_identity),
        "the router reaches its identity"
    );
    // Anyone else is refused, the router included where it is not the peer.
    for socket in [&l.admin_socket, &l.jobs_socket, router_identity] {
        assert!(
            !connects_as(other, socket),
            "{TEST_USER} reached {}",
            socket.display()
        );
    }
    assert!(
        !connects_as(router, &l.admin_socket),
        "the router reached the admin socket"
    );
    assert!(
        !connects_as(proxy, &l.jobs_socket),
        "the proxy reached the job API"
    );
    // The modes that say so.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&l.admin_socket), 0o600);
    assert_eq!(mode(&l.jobs_socket), 0o660);
    assert_eq!(mode(&l.router_proxy_run), 0o750);
    assert_eq!(mode(&l.jobs_run), 0o750);
    running.stop();
}

/// The router's identity socket admits the router's user by the peer's
/// credentials, not only by its modes: opened to everyone on purpose, a
/// connection from another user is closed unanswered (and put on the
/// proxy's record), while the router's is answered.
#[test]
fn the_router_identity_refuses_another_user_even_through_an_open_mode() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    let running = up::start(&prepared, options(&s)).unwrap();
    let l = &prepared.layout;
    let socket = &l.router_identities[0].socket;
    let open = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    open(&l.router_proxy_run, 0o755);
    open(socket, 0o666);
    let other = ids(TEST_USER);
    let router = ids(ROUTER_USER);
    assert!(
        connects_as(other, socket),
        "the modes still keep {TEST_USER} out: the test would prove nothing"
    );
    assert_eq!(http_status_as(Some(other), socket, "/"), "closed");
    assert!(
        http_status_as(Some(router), socket, "/").starts_with("HTTP/1.1 "),
        "the router is answered"
    );
    // Root (the operator) is admitted too.
    assert!(http_status_as(None, socket, "/").starts_with("HTTP/1.1 "));
    wait_for("the refusal on the proxy's record", || {
        std::fs::read_to_string(&l.audit_log)
            .unwrap_or_default()
            .contains("not the one this identity is for")
    });
    running.stop();
}

#[test]
fn only_the_proxy_reads_the_credentials() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    let running = up::start(&prepared, options(&s)).unwrap();
    let router = ids(ROUTER_USER);
    let other = ids(TEST_USER);
    for file in s.credential_files() {
        // Positive control: the proxy's user reads it.
        let read = read_as(ids(PROXY_USER), &file).expect("the proxy cannot read its credential");
        assert!(read == s.token.as_bytes() || read == s.feishu_secret.as_bytes());
        assert_eq!(
            read_as(router, &file),
            None,
            "the router read {}",
            file.display()
        );
        assert_eq!(
            read_as(other, &file),
            None,
            "{TEST_USER} read {}",
            file.display()
        );
    }
    // The supervisor stays root, but covers every secret in its own mount
    // namespace: read through its root (/proc/<pid>/root, its view), the
    // files give nothing, while the proxy's view holds them (the control).
    let supervisor = running.pid(Part::Supervisor).unwrap();
    let proxy = running.pid(Part::Proxy).unwrap();
    let mut secrets = s.credential_files();
    secrets.push(s.path("secrets/webhook"));
    for file in &secrets {
        let through = |pid: u32| {
            let rel = file.strip_prefix("/").unwrap();
            std::fs::read(Path::new(&format!("/proc/{pid}/root")).join(rel))
        };
        let seen = through(proxy).expect("the proxy's view of a secret");
        assert!(!seen.is_empty(), "{}", file.display());
        match through(supervisor) {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
            Ok(bytes) => panic!(
                "the supervisor's view of {} holds {} bytes",
                file.display(),
                bytes.len()
            ),
        }
    }
    // Nor the proxy's state (audit log, CA key), nor the supervisor's (work dirs).
    let l = &prepared.layout;
    for file in [&l.audit_log, &l.ca_key] {
        assert!(file.exists(), "{}", file.display());
        assert_eq!(
            read_as(router, file),
            None,
            "the router read {}",
            file.display()
        );
    }
    let work = l.supervisor_state.join("probe");
    std::fs::write(&work, "work").unwrap();
    assert_eq!(
        read_as(router, &work),
        None,
        "the router read the supervisor's state"
    );
    // The CA certificate is public: the router trusts it.
    assert!(read_as(router, &l.ca_cert).is_some());
    running.stop();
}

#[test]
fn a_part_killed_with_sigkill_is_restarted_and_serves_again() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    let running = up::start(&prepared, options(&s)).unwrap();
    let l = &prepared.layout;
    let listen = prepared.file.github.as_ref().unwrap().listen;
    let serves = |part: Part| match part {
        Part::Proxy => std::os::unix::net::UnixStream::connect(&l.admin_socket).is_ok(),
        Part::Supervisor => std::os::unix::net::UnixStream::connect(&l.jobs_socket).is_ok(),
        Part::Router => std::net::TcpStream::connect(listen).is_ok(),
        Part::FeishuConnect => unreachable!("not configured here"),
    };
    for part in [Part::Proxy, Part::Supervisor, Part::Router] {
        let before = running.pid(part).unwrap();
        gatehouse_testkit::procs::signal(before, "KILL");
        wait_for("the restart", || {
            running.pid(part).is_some_and(|p| p != before)
        });
        let after = running.pid(part).unwrap();
        wait_for("the restarted part to serve", || {
            serves(part) && alive(after)
        });
        assert!(!alive(before));
        assert_eq!(running.restarts(part), 1, "{part:?}");
    }
    // The restarted proxy still serves the router's identity (a fresh socket).
    assert!(connects_as(
        ids(ROUTER_USER),
        &l.router_identities[0].socket
    ));
    let stopped = running.stop();
    assert!(
        stopped
            .iter()
            .all(|s| s.status.is_some_and(|st| st.success())),
        "{stopped:?}"
    );
}

/// `up` with `--log-format json` passes it to each part: every line of
/// each part's log is a JSON object (the router's ready line on stdout is
/// one too), each part logged its start, and no line holds a secret.
#[test]
fn with_log_format_json_each_part_logs_json_lines_without_a_secret() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    let options = up::Options {
        log_format: gatehouse::logging::LogFormat::Json,
        ..options(&s)
    };
    let running = up::start(&prepared, options).unwrap();
    // The router's identity, used: the proxy logs the request.
    let status = http_status_as(None, &prepared.layout.router_identities[0].socket, "/x");
    assert!(status.starts_with("HTTP/1.1 4"), "{status}");
    let stopped = running.stop();
    assert!(stopped.iter().all(|p| !p.killed), "{stopped:?}");
    let secrets = [s.token.as_str(), s.feishu_secret.as_str(), "webhook-secret"];
    for (part, started) in [
        ("proxy", "gatehouse proxy ready"),
        ("supervisor", "job API on"),
        ("router", "gatehouse router running"),
    ] {
        let log = std::fs::read_to_string(s.path(&format!("state/logs/{part}.log"))).unwrap();
        let mut messages = Vec::new();
        for (n, line) in log.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{part}.log line {} is not JSON ({e}): {line}", n + 1));
            assert!(v.is_object(), "{part}.log line {}: {line}", n + 1);
            for secret in secrets {
                assert!(
                    !line.contains(secret),
                    "{part}.log line {} holds a secret",
                    n + 1
                );
            }
            if let Some(m) = v["message"].as_str() {
                assert!(
                    v["level"].is_string() && v["timestamp"].is_string(),
                    "{line}"
                );
                messages.push(m.to_owned());
            }
        }
        assert!(
            messages.iter().any(|m| m.starts_with(started)),
            "{part}: no {started:?} in {messages:?}"
        );
    }
}

/// `[metrics]` in gatehouse.toml: each part `up` starts serves its metrics
/// on the address given, the expositions parse, the proxy's count the
/// requests made through the router's identity, and no label holds an id.
#[test]
fn each_part_serves_the_metrics_gatehouse_toml_asks_for() {
    use gatehouse_testkit::metrics::{free_port, parse, scrape, sum};
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let (proxy, supervisor, router) = (free_port(), free_port(), free_port());
    let text = std::fs::read_to_string(&s.config).unwrap();
    let text = format!(
        "{text}\n[metrics]\nproxy = \"{proxy}\"\nsupervisor = \"{supervisor}\"\nrouter = \"{router}\"\n"
    );
    write(&s.config, &text, 0o644, None);
    let (ok, out, err) = check(&s.config);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("metrics.router: http://{router}/metrics")),
        "{out}"
    );
    let prepared = up::prepare(&s.config).unwrap();
    let running = up::start(&prepared, options(&s)).unwrap();
    let socket = &prepared.layout.router_identities[0].socket;
    for _ in 0..4 {
        let status = http_status_as(None, socket, "/x");
        assert!(status.starts_with("HTTP/1.1 4"), "{status}");
    }
    for (part, addr, family) in [
        ("proxy", proxy, "gatehouse_proxy_requests_total"),
        (
            "supervisor",
            supervisor,
            "gatehouse_supervisor_live_sandboxes",
        ),
        ("router", router, "gatehouse_router_decisions_total"),
    ] {
        let (code, _, body) = scrape(addr);
        assert_eq!(code, 200, "{part}");
        let samples = parse(&body).unwrap_or_else(|e| panic!("{part}: {e}\n{body}"));
        assert!(
            body.contains(&format!("# TYPE {family} ")),
            "{part}: {body}"
        );
        for sample in &samples {
            for (k, v) in &sample.labels {
                assert!(!v.contains("tkt_"), "{part}: {}{{{k}={v}}}", sample.name);
            }
        }
        for secret in [s.token.as_str(), s.feishu_secret.as_str(), "webhook-secret"] {
            assert!(!body.contains(secret), "{part}: a secret in the exposition");
        }
        if part == "proxy" {
            let denied = [("identity", "router"), ("decision", "deny")];
            assert_eq!(
                sum(&samples, "gatehouse_proxy_requests_total", &denied),
                4.0,
                "{body}"
            );
        }
    }
    running.stop();
}

/// `[audit]` in gatehouse.toml reaches the proxy `up` starts: its log
/// rotates at the size given, keeps the files given, is synced within the
/// window given, and the set verifies as one chain.
#[test]
fn the_audit_log_rotates_and_keeps_what_gatehouse_toml_says() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let text = std::fs::read_to_string(&s.config).unwrap();
    let text =
        format!("{text}\n[audit]\nrotate_bytes = 4096\nkeep_files = 2\nsync_window_ms = 20\n");
    write(&s.config, &text, 0o644, None);
    let (ok, out, err) = check(&s.config);
    assert!(ok, "{err}");
    assert!(
        out.contains("rotated at 4096 bytes; the last 2 rotated files kept; synced within 20 ms"),
        "{out}"
    );
    let prepared = up::prepare(&s.config).unwrap();
    let options = up::Options {
        parts: vec![Part::Proxy],
        ..options(&s)
    };
    let running = up::start(&prepared, options).unwrap();
    let l = &prepared.layout;
    let proxy_toml: toml::Table = std::fs::read_to_string(&l.proxy_toml)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(proxy_toml["audit"]["sync_window_ms"].as_integer(), Some(20));
    let socket = &l.router_identities[0].socket;
    // Each refused origin-form request is one record of about 1.2 KiB (its
    // path is kept up to 1 KiB): 30 of them make about eight files.
    let long = format!("/{}", "a".repeat(1000));
    for _ in 0..30 {
        let status = http_status_as(None, socket, &long);
        assert!(status.starts_with("HTTP/1.1 4"), "{status}");
    }
    running.stop();
    let dir = l.audit_log.parent().unwrap();
    let mut rotated: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            gatehouse_proxy::audit::rotated_number("audit.jsonl", &name)
        })
        .collect();
    rotated.sort();
    assert_eq!(rotated.len(), 2, "kept: {rotated:?}");
    assert!(rotated[0] > 1, "the oldest files stay: {rotated:?}");
    let verify = gatehouse_testkit::bin::command()
        .args(["audit", "verify"])
        .arg(dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

/// `gatehouse config check`: its exit status and output.
fn check(config: &Path) -> (bool, String, String) {
    let out = gatehouse_testkit::bin::command()
        .args(["config", "check", "--config"])
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_check_refuses_what_up_could_not_run() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    // Positive control: the good config passes and prints the layout.
    let (ok, out, err) = check(&s.config);
    assert!(ok, "{err}");
    assert!(
        out.contains("router-proxy/gh-1.sock") && out.contains("acme/widgets"),
        "{out}"
    );
    assert!(!s.path("state").exists(), "config check started something");
    let good = std::fs::read_to_string(&s.config).unwrap();
    let token = s.path("secrets/github-token");
    let (proxy, router) = (ids(PROXY_USER), ids(ROUTER_USER));
    type Mutation = Box<dyn Fn(&Setup)>;
    let restore = |s: &Setup| {
        write(&s.config, &good, 0o644, None);
        write(
            &s.path("secrets/github-token"),
            &s.token,
            0o600,
            Some(ids(PROXY_USER)),
        );
    };
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "unknown key",
            Box::new(|s: &Setup| {
                let text = std::fs::read_to_string(&s.config).unwrap();
                write(&s.config, &format!("surprise = true\n{text}"), 0o644, None);
            }),
            "surprise",
        ),
        (
            "unknown key in a credential",
            Box::new(|s: &Setup| {
                let text = std::fs::read_to_string(&s.config).unwrap();
                let text = text.replace(
                    "kind = \"github_token\"",
                    "kind = \"github_token\"\nscope = \"all\"",
                );
                write(&s.config, &text, 0o644, None);
            }),
            "scope",
        ),
        (
            "missing credential file",
            Box::new(|s: &Setup| std::fs::remove_file(s.path("secrets/github-token")).unwrap()),
            "credentials.github",
        ),
        (
            "credential readable by others",
            Box::new(|s: &Setup| {
                std::fs::set_permissions(
                    s.path("secrets/github-token"),
                    std::fs::Permissions::from_mode(0o604),
                )
                .unwrap()
            }),
            "every user",
        ),
        (
            "credential readable by the router",
            Box::new(move |_: &Setup| {
                std::os::unix::fs::chown(&token, Some(router.0), Some(router.1)).unwrap()
            }),
            "router",
        ),
        (
            "credential the proxy cannot read",
            Box::new(|s: &Setup| {
                std::os::unix::fs::chown(s.path("secrets/github-token"), Some(0), Some(0)).unwrap()
            }),
            "cannot read",
        ),
        (
            "a team rule set the rules dir lacks",
            Box::new(|s: &Setup| {
                let text = POLICY.replace(
                    "rule_sets = [\"test-worker\"]",
                    "rule_sets = [\"no-such-set\"]",
                );
                write(&s.path("policy.toml"), &text, 0o644, None);
            }),
            "no-such-set",
        ),
        (
            // The set loads (a deployment without a model credential may
            // keep the shipped file) but is out of use, and says why. It
            // stays in the rules dir for the later cases: loading it alone
            // fails nothing.
            "a team rule set whose credential is not defined",
            Box::new(|s: &Setup| {
                let shipped = gatehouse_testkit::bin::repo_path("sandbox-profiles/rules/model-api.toml");
                let text = std::fs::read_to_string(shipped).unwrap();
                write(&s.path("rules/model-api.toml"), &text, 0o644, None);
                let text = POLICY.replace(
                    "rule_sets = [\"test-worker\"]",
                    "rule_sets = [\"test-worker\", \"model-api\"]",
                );
                assert_ne!(text, POLICY);
                write(&s.path("policy.toml"), &text, 0o644, None);
            }),
            "rule set `model-api`, which is not in use: rule `chat-completions` uses credential `model`",
        ),
        (
            "a team's sandbox profile that does not resolve",
            Box::new(|s: &Setup| {
                let text = POLICY.replace("sandbox_profile = \"default\"", "sandbox_profile = \"nosuch\"");
                assert_ne!(text, POLICY);
                write(&s.path("policy.toml"), &text, 0o644, None);
            }),
            "sandbox profile `nosuch`, which profiles_dir does not resolve",
        ),
        (
            "a team rule set its sandbox profile does not allow",
            Box::new(|s: &Setup| {
                let text = POLICY.replace(
                    "rule_sets = [\"test-worker\"]",
                    "rule_sets = [\"test-worker\", \"router-github\"]",
                );
                assert_ne!(text, POLICY);
                write(&s.path("policy.toml"), &text, 0o644, None);
            }),
            "rule set `router-github`, which its sandbox profile `default` does not allow",
        ),
        (
            "audit retention without rotation",
            Box::new(|s: &Setup| {
                let text = std::fs::read_to_string(&s.config).unwrap();
                write(
                    &s.config,
                    &format!("{text}\n[audit]\nkeep_files = 5\n"),
                    0o644,
                    None,
                );
            }),
            "`audit.keep_files`: needs rotate_bytes or rotate_secs",
        ),
        (
            "audit rotation at zero bytes",
            Box::new(|s: &Setup| {
                let text = std::fs::read_to_string(&s.config).unwrap();
                write(
                    &s.config,
                    &format!("{text}\n[audit]\nrotate_bytes = 0\n"),
                    0o644,
                    None,
                );
            }),
            "`audit.rotate_bytes`: expected at least 1",
        ),
    ];
    let _ = proxy;
    for (what, mutate, needle) in cases {
        mutate(&s);
        let (ok, _, err) = check(&s.config);
        assert!(!ok, "{what}: accepted");
        assert!(
            err.contains(s.config.to_str().unwrap()) || err.contains("generated for"),
            "{what}: the error names no file: {err}"
        );
        assert!(err.contains(needle), "{what}: {err}");
        assert!(!err.contains(&s.token), "{what}: the token is in the error");
        restore(&s);
        write(&s.path("policy.toml"), POLICY, 0o644, None);
        assert!(check(&s.config).0, "{what}: the restored config fails");
    }
}

/// Whether `haystack` holds `needle`.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every readable mapping of `pid`'s memory, read through /proc/<pid>/mem.
fn memory(pid: u32) -> Vec<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut regions = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut buf = vec![0u8; (b - a) as usize];
        if mem.seek(SeekFrom::Start(a)).is_ok() && mem.read_exact(&mut buf).is_ok() {
            regions.push(buf);
        }
    }
    regions
}

#[test]
fn the_router_process_holds_no_credential() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let prepared = up::prepare(&s.config).unwrap();
    let running = up::start(&prepared, options(&s)).unwrap();
    let secrets = [s.token.as_bytes(), s.feishu_secret.as_bytes()];
    let router = running.pid(Part::Router).unwrap();
    let proxy = running.pid(Part::Proxy).unwrap();
    // Its environment.
    let environ = std::fs::read(format!("/proc/{router}/environ")).unwrap();
    for secret in secrets {
        assert!(
            !holds(&environ, secret),
            "a secret in the router's environment"
        );
    }
    // Its open files: none is a credential file, none holds a secret.
    let credential_files = s.credential_files();
    for fd in std::fs::read_dir(format!("/proc/{router}/fd")).unwrap() {
        let fd = fd.unwrap().path();
        let Ok(target) = std::fs::read_link(&fd) else {
            continue;
        };
        assert!(
            !credential_files.contains(&target),
            "the router holds {}",
            target.display()
        );
        if target.is_file() {
            let data = std::fs::read(&target).unwrap_or_default();
            for secret in secrets {
                assert!(!holds(&data, secret), "{} holds a secret", target.display());
            }
        }
    }
    // Its memory maps (no credential file mapped) and the memory itself.
    let maps = std::fs::read_to_string(format!("/proc/{router}/maps")).unwrap();
    for file in &credential_files {
        assert!(
            !maps.contains(file.to_str().unwrap()),
            "{} is mapped",
            file.display()
        );
    }
    let regions = memory(router);
    assert!(!regions.is_empty(), "no memory of the router was read");
    for region in &regions {
        for secret in secrets {
            assert!(!holds(region, secret), "a secret in the router's memory");
        }
    }
    // Positive control for the scan: the proxy, which reads the token at
    // start, holds it.
    let proxy_memory = memory(proxy);
    assert!(
        proxy_memory.iter().any(|r| holds(r, s.token.as_bytes())),
        "the memory scan did not find the token in the proxy either: the scan is blind"
    );
    // Every file the router's user can read: grep, as that user, through the
    // whole set-up (secrets, state, sockets' dirs, the emulator's repos) and
    // the state and run dirs; the proxy's user finds both secrets (control).
    let dirs = [s.dir.path().to_owned(), prepared.layout.run_dir.clone()];
    let grep = |who: (u32, u32)| {
        let out = Command::new("grep")
            .args(["-rlsF", "-e", &s.token, "-e", &s.feishu_secret])
            .args(&dirs)
            .uid(who.0)
            .gid(who.1)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let found = grep(ids(ROUTER_USER));
    assert!(
        found.is_empty(),
        "the router's user can read the token in: {found}"
    );
    let control = grep(ids(PROXY_USER));
    assert!(control.contains("secrets/github-token"), "{control}");
    assert!(control.contains("secrets/feishu-secret"), "{control}");
    running.stop();
}

/// The pids of `parent`'s children.
fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == parent && alive(pid) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn gatehouse_up_stops_in_reverse_order_on_sigterm_and_leaves_no_process() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let log = s.path("up.log");
    let mut up = Command::new(s.path("bin/gatehouse"))
        .args(["up", "--config"])
        .arg(&s.config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for("gatehouse up to start three parts", || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("gatehouse up: running")
    });
    let parts = children(up.id());
    assert_eq!(
        parts.len(),
        3,
        "{parts:?}: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    gatehouse_testkit::procs::signal(up.id(), "TERM");
    let status = up.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {text}");
    for pid in &parts {
        assert!(!alive(*pid), "pid {pid} outlived gatehouse up");
    }
    let stops: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("stopped"))
        .map(|l| {
            ["router", "supervisor", "proxy"]
                .into_iter()
                .find(|p| l.contains(&format!("part=\"{p}\"")))
                .unwrap_or("?")
        })
        .collect();
    assert_eq!(stops, ["router", "supervisor", "proxy"], "{text}");
    assert!(!text.contains(&s.token), "the token is in up's log");
}

#[test]
fn rootless_the_three_run_as_the_invoking_user() {
    require!(NEEDS[0], NEEDS[3]);
    let s = setup();
    let me = ids(TEST_USER);
    let owner = format!("{}:{}", me.0, me.1);
    for dir in [s.dir.path(), s._run.path()] {
        let status = Command::new("chown")
            .args(["-R", &owner])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let log = s.path("up.log");
    let mut up = gatehouse_testkit::sandbox::as_test_user(&s.path("bin/gatehouse"))
        .args(["up", "--config"])
        .arg(&s.config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for("gatehouse up to start three parts", || {
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            !text.contains("Error") && !text.contains("gatehouse: "),
            "{text}"
        );
        text.contains("gatehouse up: running")
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("not root"),
        "no warning that rootless is weaker: {text}"
    );
    // setpriv execs `gatehouse`, which execs gatehouse-services: one pid.
    let parts = children(up.id());
    assert_eq!(parts.len(), 3, "{parts:?}");
    for pid in &parts {
        let (uid, gid, _) = status_ids(*pid);
        assert_eq!(uid, format!("{0} {0} {0} {0}", me.0), "pid {pid}");
        assert_eq!(gid, format!("{0} {0} {0} {0}", me.1), "pid {pid}");
    }
    // The job API is the user's alone (no group to share it with).
    let jobs = s._run.path().join("jobs/jobs.sock");
    assert_eq!(
        std::fs::metadata(&jobs).unwrap().permissions().mode() & 0o777,
        0o600
    );
    gatehouse_testkit::procs::signal(up.id(), "TERM");
    assert!(
        up.wait().unwrap().success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    for pid in &parts {
        assert!(!alive(*pid), "pid {pid} outlived gatehouse up");
    }
}

/// Starts `gatehouse up` on the setup's config, its stderr to `log`, and
/// waits until it says it runs.
fn spawn_up(s: &Setup, log: &Path) -> std::process::Child {
    let up = Command::new(s.path("bin/gatehouse"))
        .args(["up", "--config"])
        .arg(&s.config)
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    wait_for("gatehouse up to start three parts", || {
        std::fs::read_to_string(log)
            .unwrap()
            .contains("gatehouse up: running")
    });
    up
}

#[test]
fn gatehouse_up_killed_with_sigkill_takes_its_parts_and_a_second_up_is_refused() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let mut first = spawn_up(&s, &s.path("up1.log"));
    let parts = children(first.id());
    assert_eq!(parts.len(), 3, "{parts:?}");
    // A second `up` on the same state is refused while the first runs, and
    // starts nothing.
    let second = Command::new(s.path("bin/gatehouse"))
        .args(["up", "--config"])
        .arg(&s.config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(
        said.contains(&format!("another gatehouse up (pid {}) runs", first.id())),
        "{said}"
    );
    assert_eq!(
        children(first.id()),
        parts,
        "the refused up disturbed the parts"
    );
    for pid in &parts {
        assert!(alive(*pid), "pid {pid} died when a second up was refused");
    }
    // kill -9 of `up`: no part outlives it.
    gatehouse_testkit::procs::signal(first.id(), "KILL");
    first.wait().unwrap();
    wait_for("the parts to die with gatehouse up", || {
        parts.iter().all(|pid| !alive(*pid))
    });
    // The lock went with the killed `up`: a new one starts and stops cleanly.
    let mut third = spawn_up(&s, &s.path("up3.log"));
    assert_eq!(children(third.id()).len(), 3);
    gatehouse_testkit::procs::signal(third.id(), "TERM");
    assert!(third.wait().unwrap().success());
}

#[test]
fn a_part_restarted_by_the_watcher_also_dies_with_gatehouse_up() {
    require!(NEEDS[0], NEEDS[1], NEEDS[2], NEEDS[3]);
    let s = setup();
    let mut up = spawn_up(&s, &s.path("up.log"));
    let parts = children(up.id());
    assert_eq!(parts.len(), 3, "{parts:?}");
    // Kill one part: the watcher restarts it (a child of another thread
    // of `up` than the first three).
    let victim = parts[0];
    gatehouse_testkit::procs::signal(victim, "KILL");
    wait_for("the restart", || {
        let now = children(up.id());
        now.len() == 3 && !now.contains(&victim)
    });
    let now = children(up.id());
    gatehouse_testkit::procs::signal(up.id(), "KILL");
    up.wait().unwrap();
    wait_for("the parts to die with gatehouse up", || {
        now.iter().all(|pid| !alive(*pid))
    });
}
