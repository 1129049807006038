//! nginx as the benchmark's reference: a TLS-terminating reverse proxy that
//! adds an `Authorization` header, run as a foreground child from a config
//! written into a temp dir.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gatehouse_proxy::ca::CertificateAuthority;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// nginx's master, leader of its own process group (its workers are in it).
pub struct Nginx(pub Child);

impl Nginx {
    /// Stops nginx's whole process group: the master is asked to stop its
    /// workers (SIGTERM), and whatever is left after a grace period is
    /// killed. Killing the master alone would orphan its workers, which keep
    /// running (reparented) after the bench.
    pub fn stop(&mut self) {
        let group = Pid::from_raw(self.0.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        while Instant::now() < deadline && !group_members(self.0.id()).is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.0.wait();
    }

    /// Stops nginx and checks that no process of its group remains.
    pub fn stop_checked(mut self) {
        self.stop();
        let pid = self.0.id();
        // SIGKILL is delivered at once, but a process leaves /proc only
        // once it has exited; give the kernel a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut left = group_members(pid);
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            left = group_members(pid);
        }
        assert!(
            left.is_empty(),
            "nginx processes still running after the bench: {left:?}"
        );
        println!("nginx stopped: no process of its group remains");
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Live processes (not zombies) whose process group is `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or("", |(_, rest)| rest)
                .split_whitespace()
                .collect();
            // Fields after the name: state, ppid, pgrp.
            fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
        })
        .collect()
}

/// Where nginx listens.
pub struct NginxPorts {
    /// TLS for api.github.com, proxied to the emulator with the token added.
    pub api: std::net::SocketAddr,
    /// TLS for github.com (git), proxied to the emulator with git's Basic
    /// credential added, streaming both ways.
    pub git: std::net::SocketAddr,
    /// Plain HTTP, proxied to the download server, streaming.
    pub download: std::net::SocketAddr,
}

/// Writes an nginx config terminating TLS for api.github.com and github.com
/// and proxying to the emulator over verified TLS with the token added
/// (and plain HTTP to the download server), and starts it.
pub fn start_nginx(
    dir: &Path,
    upstream: std::net::SocketAddr,
    upstream_ca: &Path,
    token: &str,
    download: std::net::SocketAddr,
) -> (Nginx, NginxPorts, PathBuf) {
    let ca = CertificateAuthority::load_or_generate(
        &dir.join("nginx-ca.pem"),
        &dir.join("nginx-ca.key"),
    )
    .unwrap();
    for (host, file) in [("api.github.com", "leaf"), ("github.com", "git-leaf")] {
        let (cert_pem, key_pem) = ca.leaf_pem(host).unwrap();
        std::fs::write(dir.join(format!("{file}.pem")), cert_pem).unwrap();
        std::fs::write(dir.join(format!("{file}.key")), key_pem).unwrap();
    }
    let port = || {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    };
    let ports = NginxPorts {
        api: port(),
        git: port(),
        download: port(),
    };
    let conf = nginx_conf(dir, &ports, upstream, upstream_ca, token, download);
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let nginx = spawn_nginx(dir);
    for _ in 0..200 {
        let up = [ports.api, ports.git, ports.download]
            .iter()
            .all(|a| std::net::TcpStream::connect(a).is_ok());
        if up {
            return (nginx, ports, dir.join("nginx-ca.pem"));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    drop(nginx);
    panic!(
        "nginx did not start: {}",
        std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default()
    );
}

/// The nginx config: TLS for api.github.com and github.com, proxied to the
/// emulator over verified TLS with the token added; plain HTTP proxied to
/// the download server. Large answers stream (`proxy_buffering off`), as
/// the proxy's do.
fn nginx_conf(
    dir: &Path,
    ports: &NginxPorts,
    upstream: std::net::SocketAddr,
    upstream_ca: &Path,
    token: &str,
    download: std::net::SocketAddr,
) -> String {
    use base64::Engine;
    let user = if is_root() { "user root root;" } else { "" };
    // Off by default: the targets are against nginx doing no more than
    // proxying. `BENCH_NGINX_ACCESS_LOG=1` gives it an access log written
    // line by line, as the proxy's audit line is before each request.
    let access_log = if std::env::var_os("BENCH_NGINX_ACCESS_LOG").is_some_and(|v| v == "1") {
        format!("\"{}/nginx-access.log\"", in_config(dir))
    } else {
        "off".to_owned()
    };
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
    format!(
        r#"
{user}
worker_processes 2;
pid "{dir}/nginx.pid";
error_log "{dir}/nginx-error.log" warn;
events {{ worker_connections 1024; }}
http {{
    access_log {access_log};
    client_body_temp_path "{dir}/body";
    proxy_temp_path "{dir}/proxy";
    fastcgi_temp_path "{dir}/fastcgi";
    uwsgi_temp_path "{dir}/uwsgi";
    scgi_temp_path "{dir}/scgi";
    # Only TLS 1.3, on every TLS leg, as the proxy and the emulator speak
    # it (nginx 1.22's defaults stop at 1.2; 1.23.4 and later offer 1.3):
    # a leg that could not negotiate it fails instead of running cheaper.
    upstream emulator {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen {api} ssl;
        server_name api.github.com;
        ssl_certificate "{dir}/leaf.pem";
        ssl_certificate_key "{dir}/leaf.key";
        ssl_protocols TLSv1.3;
        keepalive_requests 1000000;
        location / {{
            proxy_pass https://emulator;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host api.github.com;
            proxy_set_header Authorization "Bearer {token}";
            proxy_ssl_server_name on;
            proxy_ssl_name api.github.com;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate "{ca}";
            proxy_ssl_session_reuse on;
            proxy_ssl_protocols TLSv1.3;
        }}
    }}
    server {{
        listen {git} ssl;
        server_name github.com;
        ssl_certificate "{dir}/git-leaf.pem";
        ssl_certificate_key "{dir}/git-leaf.key";
        ssl_protocols TLSv1.3;
        client_max_body_size 0;
        location / {{
            proxy_pass https://emulator;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_set_header Connection "";
            proxy_set_header Host github.com;
            proxy_set_header Authorization "Basic {basic}";
            proxy_ssl_server_name on;
            proxy_ssl_name github.com;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate "{ca}";
            proxy_ssl_session_reuse on;
            proxy_ssl_protocols TLSv1.3;
        }}
    }}
    server {{
        listen {dl};
        location / {{
            proxy_pass http://{download};
            proxy_buffering off;
        }}
    }}
}}
"#,
        dir = in_config(dir),
        ca = in_config(upstream_ca),
        api = ports.api,
        git = ports.git,
        dl = ports.download,
    )
}

/// A path as it is written between double quotes in nginx's config: a
/// space is then part of it. nginx reads `$` as a variable in several of
/// these directives and has no escape for it there, so a path with one (or
/// a quote, a backslash, a line break) is refused here, not misread there.
fn in_config(path: &Path) -> String {
    let text = path.to_str().expect("nginx's paths are UTF-8");
    assert!(
        !text.contains(['"', '\\', '$', '\n', '\r']),
        "nginx's config cannot name {text:?}: set TMPDIR to a path without `\"`, `\\`, `$` or line breaks"
    );
    text.to_owned()
}

/// Starts nginx on the config in `dir`; dropping the guard kills and reaps it.
fn spawn_nginx(dir: &Path) -> Nginx {
    let nginx = ["nginx", "/usr/sbin/nginx"]
        .into_iter()
        .find(|n| {
            Command::new(n)
                .arg("-v")
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
        .expect("nginx is not installed (scripts/setup-debian installs nginx-light)");
    // Dropping the guard kills and reaps nginx, also if it never comes up.
    // If the bench is killed outright (SIGKILL, nothing dropped), the
    // kernel sends the master SIGTERM as its parent dies (`setpriv
    // --pdeathsig`, which execs nginx in its place), and the master stops
    // its workers. The bench spawns it from its main thread, whose end the
    // signal follows.
    Nginx(
        Command::new("setpriv")
            .args(["--pdeathsig", "TERM", "--", nginx])
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            // Its own group, so the master and its workers stop together.
            .process_group(0)
            .spawn()
            .expect("setpriv, to start nginx (util-linux; scripts/setup-debian installs it)"),
    )
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}
