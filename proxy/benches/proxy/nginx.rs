//! nginx as the benchmark's reference: a TLS-terminating reverse proxy that
//! adds an `Authorization` header, run as a foreground child from a config
//! written into a temp dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gatehouse_proxy::ca::CertificateAuthority;

pub struct Nginx(pub Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes an nginx config terminating TLS for api.github.com and proxying
/// to the emulator over verified TLS with the token added, and starts it.
pub fn start_nginx(
    dir: &Path,
    upstream: std::net::SocketAddr,
    upstream_ca: &Path,
    token: &str,
) -> (Nginx, std::net::SocketAddr, PathBuf) {
    let ca = CertificateAuthority::load_or_generate(
        &dir.join("nginx-ca.pem"),
        &dir.join("nginx-ca.key"),
    )
    .unwrap();
    let (cert_pem, key_pem) = ca.leaf_pem("api.github.com").unwrap();
    std::fs::write(dir.join("leaf.pem"), cert_pem).unwrap();
    std::fs::write(dir.join("leaf.key"), key_pem).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = nginx_conf(dir, port, upstream, upstream_ca, token);
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let nginx = spawn_nginx(dir);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return (nginx, addr, dir.join("nginx-ca.pem"));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    drop(nginx);
    panic!(
        "nginx did not start: {}",
        std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default()
    );
}

/// The nginx config: TLS for api.github.com on `port`, proxied to the
/// emulator over verified TLS with the token added.
fn nginx_conf(
    dir: &Path,
    port: u16,
    upstream: std::net::SocketAddr,
    upstream_ca: &Path,
    token: &str,
) -> String {
    let user = if is_root() { "user root root;" } else { "" };
    format!(
        r#"
{user}
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream emulator {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name api.github.com;
        ssl_certificate {dir}/leaf.pem;
        ssl_certificate_key {dir}/leaf.key;
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
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_session_reuse on;
        }}
    }}
}}
"#,
        dir = dir.display(),
        ca = upstream_ca.display(),
    )
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
    Nginx(
        Command::new(nginx)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}
