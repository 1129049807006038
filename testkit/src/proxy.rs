//! The proxy's end-to-end harness: a GitHub and a Feishu emulator over TLS
//! on loopback, a proxy built in-process against them (production code
//! paths; only the upstream override differs), a TCP relay standing in for
//! the sandbox's 127.0.0.1:3128; raw clients for framing attacks
//! ([`raw`]); `gatehouse proxy` as a child process ([`process`]).

pub mod process;
pub mod raw;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gatehouse_emulators::{
    FeishuEmulator, FeishuHandle, FeishuOptions, GithubEmulator, GithubHandle, GithubOptions,
    RepoSpec,
};
use gatehouse_proxy::audit::AuditLog;
use gatehouse_proxy::ca::CertificateAuthority;
use gatehouse_proxy::credentials::{CredentialSpec, Credentials};
use gatehouse_proxy::rules::{RuleBook, RuleSet};
use gatehouse_proxy::server::audit_writer::AuditWriter;
use gatehouse_proxy::server::{IdentitySpec, Proxy, ProxyParts};
use gatehouse_proxy::upstream::{UpstreamOverride, Upstreams};

use crate::random::token as random_token;
use crate::rules::{TEST_RULES, TEST_RULE_SET};

pub use raw::{api_call, api_call_text, read_all, read_head, read_until_closed, tls_over};

pub struct Harness {
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
    pub github: GithubHandle,
    pub feishu: FeishuHandle,
    pub proxy: Arc<Proxy>,
    pub token: String,
    pub feishu_secret: String,
    /// The proxy's CA certificate, for clients.
    pub proxy_ca: PathBuf,
    pub audit_path: PathBuf,
    pub socket: PathBuf,
    pub relay_port: u16,
    /// The proxy's audit writer, to write out deferred lines on demand.
    audit: AuditWriter,
}

pub const IDENTITY: &str = "tkt_test";
pub const FEISHU_APP: &str = "cli_gatehouse_test";
/// A tunnel-only host (routed to the GitHub emulator by an override).
pub const TUNNEL_HOST: &str = "registry.example.test";
/// The registry the supervisor's test profile lists as a tunnel, routed to
/// the GitHub emulator too (whose certificate names it).
pub const REGISTRY_HOST: &str = "registry.npmjs.org";
pub const REPO: &str = "acme/widgets";

/// The upstream emulators and the files the proxy reads about them.
struct Emulators {
    github: GithubHandle,
    feishu: FeishuHandle,
    token: String,
    feishu_secret: String,
    github_ca: PathBuf,
    feishu_ca: PathBuf,
    token_file: PathBuf,
    feishu_secret_file: PathBuf,
}

impl Emulators {
    /// GitHub (with the test repositories and an issue) and Feishu, each
    /// with a fresh secret written to a file, and their CAs.
    fn start(dir: &Path) -> Self {
        let token = random_token("ghs_");
        let github = GithubEmulator::start(
            GithubOptions::new(dir.join("git"))
                .token(&token, "gatehouse-test[bot]")
                .repo(RepoSpec::new("acme", "widgets"))
                .repo(RepoSpec::new("acme", "secret-plans")),
        )
        .unwrap();
        github
            .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
            .unwrap();
        let github_ca = dir.join("upstream-ca.pem");
        github.write_ca_pem(&github_ca).unwrap();
        let feishu_secret = random_token("");
        let feishu =
            FeishuEmulator::start(FeishuOptions::default().app(FEISHU_APP, &feishu_secret))
                .unwrap();
        // The team chat the tests send into, with the bot in it.
        feishu.add_bot_to_chat("oc_team");
        let feishu_ca = dir.join("feishu-ca.pem");
        feishu.write_ca_pem(&feishu_ca).unwrap();
        let feishu_secret_file = dir.join("feishu.secret");
        std::fs::write(&feishu_secret_file, &feishu_secret).unwrap();
        let token_file = dir.join("github.token");
        std::fs::write(&token_file, &token).unwrap();
        Self {
            github,
            feishu,
            token,
            feishu_secret,
            github_ca,
            feishu_ca,
            token_file,
            feishu_secret_file,
        }
    }

    /// Every host the tests reach, routed to its emulator.
    fn overrides(&self) -> Vec<UpstreamOverride> {
        let mut overrides: Vec<UpstreamOverride> = [
            "api.github.com",
            "github.com",
            "pipelines.actions.githubusercontent.com",
            TUNNEL_HOST,
            REGISTRY_HOST,
        ]
        .into_iter()
        .map(|host| UpstreamOverride {
            host: host.into(),
            url: self.github.base_url(),
            ca_file: Some(self.github_ca.clone()),
        })
        .collect();
        overrides.push(UpstreamOverride {
            host: "open.feishu.cn".into(),
            url: self.feishu.base_url(),
            ca_file: Some(self.feishu_ca.clone()),
        });
        overrides
    }

    /// The GitHub token and the Feishu app, read from their files.
    fn credentials(&self, upstreams: &Upstreams) -> Credentials {
        let specs = BTreeMap::from([
            (
                "github".to_string(),
                CredentialSpec::GithubToken {
                    token_file: self.token_file.clone(),
                },
            ),
            (
                "feishu".to_string(),
                CredentialSpec::FeishuApp {
                    app_id: FEISHU_APP.into(),
                    app_secret_file: self.feishu_secret_file.clone(),
                    base_url: "https://open.feishu.cn".into(),
                },
            ),
        ]);
        Credentials::load(&specs, upstreams).unwrap()
    }
}

/// The proxy, in-process, with the test rule set, the [`IDENTITY`] and its
/// relay; returns the identity's socket, the relay's port and the audit
/// writer.
async fn start_proxy(
    dir: &Path,
    emulators: &Emulators,
    proxy_ca: &Path,
    audit_path: &Path,
) -> (Arc<Proxy>, PathBuf, u16, AuditWriter) {
    let upstreams = Upstreams::new(&emulators.overrides()).unwrap();
    let credentials = emulators.credentials(&upstreams);
    let ca = CertificateAuthority::load_or_generate(proxy_ca, &dir.join("proxy-ca.key")).unwrap();
    let book =
        RuleBook::new([RuleSet::parse(&format!("{TEST_RULE_SET}.toml"), TEST_RULES).unwrap()])
            .unwrap();
    let audit = AuditWriter::start(AuditLog::open(audit_path).unwrap()).unwrap();
    let proxy = Proxy::new(ProxyParts {
        ca: Arc::new(ca),
        upstreams,
        policy: Arc::new(book),
        credentials: Arc::new(credentials),
        audit: audit.clone(),
        socket_dir: dir.join("sockets"),
        limits: gatehouse_proxy::limits::Limits::default(),
    })
    .unwrap();
    let socket = proxy.add_identity(identity(IDENTITY)).unwrap();
    let relay_port = relay(socket.clone()).await;
    (proxy, socket, relay_port, audit)
}

impl Harness {
    pub fn start() -> Self {
        Self::start_logging_to(None)
    }

    /// [`Harness::start`] with the audit log at `audit_path` (by default in
    /// the harness's directory), e.g. on a small filesystem to fill.
    pub fn start_logging_to(audit_path: Option<PathBuf>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let emulators = Emulators::start(dir.path());
        let audit_path = audit_path.unwrap_or_else(|| dir.path().join("audit.jsonl"));
        let proxy_ca = dir.path().join("proxy-ca.pem");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (proxy, socket, relay_port, audit) =
            rt.block_on(start_proxy(dir.path(), &emulators, &proxy_ca, &audit_path));
        let Emulators {
            github,
            feishu,
            token,
            feishu_secret,
            ..
        } = emulators;
        Self {
            rt,
            dir,
            github,
            feishu,
            proxy,
            token,
            feishu_secret,
            proxy_ca,
            audit_path,
            socket,
            relay_port,
            audit,
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.relay_port)
    }

    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        // A request line is in the file before its request is answered. A
        // completion is recorded once the answer has been relayed, just
        // after the client has it, and then may wait in memory for the
        // writer's next write: give the task a moment, then have the
        // deferred lines written (a log that failed keeps what it has).
        std::thread::sleep(Duration::from_millis(100));
        let _ = self.rt.block_on(self.audit.flush());
        std::fs::read_to_string(&self.audit_path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Runs curl through the proxy; returns (status, headers, body).
    pub fn curl(&self, args: &[&str], url: &str) -> (u16, String, String) {
        let out = std::process::Command::new("curl")
            .args(["-sS", "-D", "-", "-o", "-", "--max-time", "20"])
            .args(["--proxy", &self.proxy_url()])
            .arg("--cacert")
            .arg(&self.proxy_ca)
            .args(args)
            .arg(url)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "curl failed: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        // With a proxy, curl prints the CONNECT answer's head first.
        let mut rest = text.as_str();
        let (mut head, mut body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
        while body.starts_with("HTTP/") {
            rest = body;
            (head, body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
        }
        let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap();
        (status, head.to_string(), body.to_string())
    }

    /// Opens a pull request through the harness's identity, from a fresh
    /// branch: the worker may comment only on a pull request it opened.
    /// Returns its number.
    pub fn own_pull(&self) -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let branch = format!("gatehouse/own-{n}");
        branches(&self.github, REPO, &[&branch]);
        let body = format!(r#"{{"title":"Own","head":"{branch}","base":"main"}}"#);
        let path = format!("/repos/{REPO}/pulls");
        let (status, answer) = api_call(&self.socket, &self.proxy_ca, "POST", &path, &body);
        assert_eq!(status, 201, "{answer}");
        answer["number"].as_u64().unwrap()
    }

    /// Opens a raw connection to the identity socket.
    pub fn raw(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// CONNECT + TLS to `host` with SNI `sni`; returns the TLS stream.
    pub fn tunnel(
        &self,
        host: &str,
        sni: &str,
    ) -> rustls::StreamOwned<rustls::ClientConnection, UnixStream> {
        assert_eq!(host, sni, "use tunnel_with_sni for mismatches");
        self.tunnel_with_sni(host, sni)
    }

    /// CONNECT `host`, then TLS with SNI `sni` (unverified when they differ,
    /// as an attacker would).
    pub fn tunnel_with_sni(
        &self,
        host: &str,
        sni: &str,
    ) -> rustls::StreamOwned<rustls::ClientConnection, UnixStream> {
        let mut s = self.raw();
        write!(s, "CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "CONNECT answered {head}");
        tls_over(s, sni, &self.proxy_ca, sni == host)
    }
}

pub fn identity(name: &str) -> IdentitySpec {
    IdentitySpec {
        name: name.into(),
        rule_sets: vec![TEST_RULE_SET.into()],
        tunnel_hosts: vec![TUNNEL_HOST.into(), "github.com".into()],
        variables: BTreeMap::from([("repo".to_string(), REPO.to_string())]),
        socket: None,
        peer_uid: None,
    }
}

/// A TCP listener on loopback relaying each connection to `socket`.
pub async fn relay(socket: PathBuf) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    port
}

/// `git` with `args` in `dir` (as Alice, no system config); its trimmed
/// output, or a panic with git's error.
pub fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Alice",
            "-c",
            "user.email=alice@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Branch `branch` off `main` with `files` (path, content) written and
/// committed as `message`, pushed straight into the emulator's bare
/// repository of `repo` from a clone at `scratch/work`. Returns the clone
/// and the new head commit.
pub fn push_change(
    github: &GithubHandle,
    repo: &str,
    scratch: &Path,
    branch: &str,
    files: &[(&str, &str)],
    message: &str,
) -> (PathBuf, String) {
    let bare = github.repo_git_dir(repo).unwrap();
    git_in(scratch, &["clone", "-q", bare.to_str().unwrap(), "work"]);
    let work = scratch.join("work");
    git_in(&work, &["checkout", "-q", "-b", branch]);
    for (path, content) in files {
        let file = work.join(path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(file, content).unwrap();
    }
    git_in(&work, &["add", "-A"]);
    git_in(&work, &["commit", "-q", "-m", message]);
    git_in(&work, &["push", "-q", "origin", branch]);
    let head = git_in(&work, &["rev-parse", "HEAD"]);
    (work, head)
}

/// A branch per name on `main` (made first, an empty tree, if the
/// repository has none), written straight into the emulator's bare
/// repository of `repo`: the heads a pull request needs.
pub fn branches(github: &GithubHandle, repo: &str, names: &[&str]) {
    let dir = github.repo_git_dir(repo).unwrap();
    let git = |args: &[&str], input: &str| -> String {
        let mut cmd = std::process::Command::new("git");
        cmd.arg("--git-dir").arg(&dir).args(args);
        for (key, value) in [
            ("GIT_AUTHOR_NAME", "t"),
            ("GIT_AUTHOR_EMAIL", "t@example.test"),
            ("GIT_COMMITTER_NAME", "t"),
            ("GIT_COMMITTER_EMAIL", "t@example.test"),
        ] {
            cmd.env(key, value);
        }
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let tree = git(&["mktree"], "");
    let has_main = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&dir)
        .args(["rev-parse", "-q", "--verify", "refs/heads/main"])
        .output()
        .unwrap()
        .status
        .success();
    if !has_main {
        let base = git(&["commit-tree", &tree, "-m", "base"], "");
        git(&["update-ref", "refs/heads/main", &base], "");
    }
    let base = git(&["rev-parse", "refs/heads/main"], "");
    for name in names {
        let work = git(&["commit-tree", &tree, "-p", &base, "-m", name], "");
        git(&["update-ref", &format!("refs/heads/{name}"), &work], "");
    }
}
