//! Shared set-up for the proxy's end-to-end tests: a GitHub emulator over
//! TLS on loopback, a proxy built in-process against it (production code
//! paths; only the upstream override differs), a TCP relay standing in for
//! the sandbox's 127.0.0.1:3128, and raw clients for framing attacks.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
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
use rustls::pki_types::ServerName;

/// The rule set the tests run under.
pub const TEST_RULES: &str = r#"
name = "test-worker"
description = "what the proxy tests allow"
variables = ["repo"]

[[rule]]
name = "issue-read"
source = "GitHub REST: issues/get"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/issues/{n}"
credential = "github"
inject = "bearer"

[[rule]]
name = "issue-comment"
source = "GitHub REST: issues/create-comment"
host = "api.github.com"
methods = ["POST"]
path = "/repos/{repo}/issues/{n}/comments"
credential = "github"
inject = "bearer"
message = { kind = "github_issue_comment", target = "{repo}#{n}", created_id_pointer = "/id" }

[[rule]]
name = "job-logs"
source = "GitHub REST: actions/download-job-logs-for-workflow-run"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/actions/jobs/{n}/logs"
credential = "github"
inject = "bearer"

[[rule]]
name = "feishu-send"
source = "Feishu open platform: im/v1/messages create"
host = "open.feishu.cn"
methods = ["POST"]
path = "/open-apis/im/v1/messages"
query = { receive_id_type = ["chat_id", "open_id"] }
credential = "feishu"
inject = "feishu_tenant"
message = { kind = "feishu_message", target = "{receive_id_type}", target_body_pointer = "/receive_id", created_id_pointer = "/data/message_id" }

[[rule]]
name = "graphql"
source = "GitHub GraphQL"
host = "api.github.com"
methods = ["POST"]
path = "/graphql"
credential = "github"
inject = "bearer"
graphql = { query = ["repository", "viewer"], repository = "{repo}" }

[[rule]]
name = "git-refs"
source = "git smart HTTP"
host = "github.com"
methods = ["GET"]
path = "/{repo}.git/info/refs"
query = { service = ["git-upload-pack", "git-receive-pack"] }
credential = "github"
inject = "git_basic"

[[rule]]
name = "git-fetch"
source = "git smart HTTP"
host = "github.com"
methods = ["POST"]
path = "/{repo}.git/git-upload-pack"
credential = "github"
inject = "git_basic"

[[rule]]
name = "git-push"
source = "git smart HTTP"
host = "github.com"
methods = ["POST"]
path = "/{repo}.git/git-receive-pack"
credential = "github"
inject = "git_basic"
receive_pack = { refs = ["refs/heads/gatehouse/*"] }
"#;

/// A random token generated at test time (never a real-looking constant).
pub fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 20];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

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
}

pub const IDENTITY: &str = "tkt_test";
pub const FEISHU_APP: &str = "cli_gatehouse_test";
/// A tunnel-only host (routed to the GitHub emulator by an override).
pub const TUNNEL_HOST: &str = "registry.example.test";
pub const REPO: &str = "acme/widgets";

impl Harness {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let token = random_token("ghs_");
        let github = GithubEmulator::start(
            GithubOptions::new(dir.path().join("git"))
                .token(&token, "gatehouse-test[bot]")
                .repo(RepoSpec::new("acme", "widgets"))
                .repo(RepoSpec::new("acme", "secret-plans")),
        )
        .unwrap();
        github
            .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
            .unwrap();
        let upstream_ca = dir.path().join("upstream-ca.pem");
        github.write_ca_pem(&upstream_ca).unwrap();
        let feishu_secret = random_token("");
        let feishu =
            FeishuEmulator::start(FeishuOptions::default().app(FEISHU_APP, &feishu_secret))
                .unwrap();
        let feishu_ca = dir.path().join("feishu-ca.pem");
        feishu.write_ca_pem(&feishu_ca).unwrap();
        let feishu_secret_file = dir.path().join("feishu.secret");
        std::fs::write(&feishu_secret_file, &feishu_secret).unwrap();
        let token_file = dir.path().join("github.token");
        std::fs::write(&token_file, &token).unwrap();
        let audit_path = dir.path().join("audit.jsonl");

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut overrides: Vec<UpstreamOverride> = [
            "api.github.com",
            "github.com",
            "pipelines.actions.githubusercontent.com",
            TUNNEL_HOST,
        ]
        .into_iter()
        .map(|host| UpstreamOverride {
            host: host.into(),
            url: github.base_url(),
            ca_file: Some(upstream_ca.clone()),
        })
        .collect();
        overrides.push(UpstreamOverride {
            host: "open.feishu.cn".into(),
            url: feishu.base_url(),
            ca_file: Some(feishu_ca.clone()),
        });
        let proxy_ca = dir.path().join("proxy-ca.pem");
        let (proxy, socket, relay_port) = rt.block_on(async {
            let upstreams = Upstreams::new(&overrides).unwrap();
            let credentials = Credentials::load(
                &BTreeMap::from([
                    (
                        "github".to_string(),
                        CredentialSpec::GithubToken {
                            token_file: token_file.clone(),
                        },
                    ),
                    (
                        "feishu".to_string(),
                        CredentialSpec::FeishuApp {
                            app_id: FEISHU_APP.into(),
                            app_secret_file: feishu_secret_file.clone(),
                            base_url: "https://open.feishu.cn".into(),
                        },
                    ),
                ]),
                &upstreams,
            )
            .unwrap();
            let ca =
                CertificateAuthority::load_or_generate(&proxy_ca, &dir.path().join("proxy-ca.key"))
                    .unwrap();
            let book =
                RuleBook::new([RuleSet::parse("test-worker.toml", TEST_RULES).unwrap()]).unwrap();
            let proxy = Proxy::new(ProxyParts {
                ca: Arc::new(ca),
                upstreams,
                policy: Arc::new(book),
                credentials: Arc::new(credentials),
                audit: AuditWriter::start(AuditLog::open(&audit_path).unwrap()).unwrap(),
                socket_dir: dir.path().join("sockets"),
            })
            .unwrap();
            let socket = proxy.add_identity(identity(IDENTITY)).unwrap();
            let relay_port = relay(socket.clone()).await;
            (proxy, socket, relay_port)
        });
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
        }
    }

    pub fn proxy_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.relay_port)
    }

    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        // The writer thread appends asynchronously; give it a moment.
        std::thread::sleep(Duration::from_millis(100));
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
        rule_sets: vec!["test-worker".into()],
        tunnel_hosts: vec![TUNNEL_HOST.into(), "github.com".into()],
        variables: BTreeMap::from([("repo".to_string(), REPO.to_string())]),
        socket: None,
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

/// Reads up to the end of a response head, byte by byte (so nothing of
/// what follows is consumed).
pub fn read_head(s: &mut impl Read) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads until the peer closes (or the read timeout), returning what came.
pub fn read_all(s: &mut impl Read) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug)]
struct AcceptAnything;

impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// TLS over `s` with SNI `sni`, verifying the proxy CA when `verify`
/// (an attacker lying about SNI would not verify, so those tests don't).
pub fn tls_over(
    s: UnixStream,
    sni: &str,
    proxy_ca: &Path,
    verify: bool,
) -> rustls::StreamOwned<rustls::ClientConnection, UnixStream> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap();
    let config = if verify {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(proxy_ca).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything))
            .with_no_client_auth()
    };
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    rustls::StreamOwned::new(conn, s)
}

/// Whether the peer closed the connection (EOF or reset) before the read
/// timeout, and what it sent until then.
pub fn read_until_closed(s: &mut impl Read) -> (bool, String) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false
            }
            Err(_) => break true,
        }
    };
    (closed, String::from_utf8_lossy(&out).into_owned())
}

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
    let command = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    start_proxy_process_with(dir, github, token, command, |_| {})
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
        .args(["proxy", "--config"])
        .arg(dir.join("proxy.toml"))
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let admin = dir.join("admin.sock");
    for _ in 0..400 {
        if admin.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        admin.exists(),
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
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: gatehouse\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
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
