//! Large transfers: a `git clone` of a big repository and a download
//! through a spliced tunnel, each through the proxy, directly and through
//! nginx, interleaved over rounds. Reports MB/s, the ratios, the CPU each
//! contender spent, and how far the proxy process's peak resident set
//! grew during its transfer (it must stream, not hold a transfer).
//!
//! The repository is generated once (incompressible blobs, written with
//! `git fast-import`) into `bench-cache/` under cargo's target directory
//! and reused by later runs.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

/// The repository the clone fetches (its own identity binds `{repo}` to it).
pub const BIG_REPO: &str = "acme/big";

/// The tunnel host the download goes to (an upstream override points it
/// at the local download server).
pub const DOWNLOAD_HOST: &str = "downloads.example.org";

/// Size of the repository and of the download, in MiB.
pub fn size_mib() -> u64 {
    super::env_or("BENCH_LARGE_MB", 200)
}

const MIB: usize = 1 << 20;

/// Cargo's target directory: the first ancestor of this executable that
/// holds cargo's `CACHEDIR.TAG`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .find(|a| a.join("CACHEDIR.TAG").exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// A cheap deterministic generator of incompressible bytes (xorshift64*).
struct Noise(u64);

impl Noise {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let word = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

fn git(args: &[&str], dir: &Path) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// The bare repository of `mib` MiB of incompressible files (one commit of
/// 1 MiB blobs), generated on first use.
pub fn cached_repo(mib: u64) -> PathBuf {
    let cache = target_dir().join("bench-cache");
    let repo = cache.join(format!("big-{mib}mib.git"));
    if repo.join("bench-complete").exists() {
        return repo;
    }
    println!(
        "generating a {mib} MiB repository once into {}",
        repo.display()
    );
    std::fs::create_dir_all(&cache).unwrap();
    let building = cache.join(format!("big-{mib}mib.building"));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building).unwrap();
    git(&["init", "--quiet", "--bare"], &building);
    git(&["symbolic-ref", "HEAD", "refs/heads/main"], &building);
    // Random bytes do not compress: store them (level 0) and save the time.
    let mut import = Command::new("git")
        .args(["-c", "pack.compression=0", "-c", "core.compression=0"])
        // Always one pack, however few the objects.
        .args(["-c", "fastimport.unpackLimit=0"])
        .args(["fast-import", "--quiet"])
        .current_dir(&building)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = std::io::BufWriter::with_capacity(MIB, import.stdin.take().unwrap());
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
        let mut blob = vec![0u8; MIB];
        for i in 0..mib {
            noise.fill(&mut blob);
            write!(stdin, "blob\nmark :{}\ndata {}\n", i + 1, blob.len()).unwrap();
            stdin.write_all(&blob).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
        write!(
            stdin,
            "commit refs/heads/main\ncommitter bench <bench@example.org> 1700000000 +0000\ndata 4\nbig\n"
        )
        .unwrap();
        for i in 0..mib {
            writeln!(stdin, "M 100644 :{} data/{i:04}.bin", i + 1).unwrap();
        }
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }
    assert!(import.wait().unwrap().success(), "git fast-import");
    std::fs::write(building.join("bench-complete"), b"").unwrap();
    let _ = std::fs::remove_dir_all(&repo);
    std::fs::rename(&building, &repo).unwrap();
    repo
}

/// Points the emulator's `acme/big` at the cached repository.
pub fn install_repo(emulator_git_dir: &Path, cached: &Path) {
    std::fs::remove_dir_all(emulator_git_dir).unwrap();
    std::os::unix::fs::symlink(cached, emulator_git_dir).unwrap();
}

/// Bytes of the repository's objects: what a clone transfers, about.
pub fn object_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                object_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

// === the download server ===

/// Serves `GET` of `bytes` bytes (plain HTTP, one request a connection,
/// `Connection: close`) on an ephemeral loopback port.
pub async fn start_download_server(bytes: u64) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut block = vec![0u8; MIB];
    Noise(7).fill(&mut block);
    let block: &'static [u8] = Box::leak(block.into_boxed_slice());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_download(stream, bytes, block));
        }
    });
    addr
}

async fn serve_download(mut stream: TcpStream, bytes: u64, block: &'static [u8]) {
    let _ = stream.set_nodelay(true);
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read_u8().await {
            Ok(b) => head.push(b),
            Err(_) => return,
        }
    }
    let answer =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n");
    if stream.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let mut left = bytes as usize;
    while left > 0 {
        let n = left.min(block.len());
        if stream.write_all(&block[..n]).await.is_err() {
            return;
        }
        left -= n;
    }
    let _ = stream.shutdown().await;
}

/// How a download client reaches the server.
pub enum Via {
    Direct(std::net::SocketAddr),
    /// nginx's plain-HTTP listener, proxying to the server.
    Nginx(std::net::SocketAddr),
    /// `CONNECT downloads.example.org:443` on the identity socket: spliced.
    Tunnel(PathBuf),
}

/// Downloads once; returns the body's length.
pub async fn download(via: &Via) -> u64 {
    let request =
        format!("GET /download HTTP/1.1\r\nHost: {DOWNLOAD_HOST}\r\nConnection: close\r\n\r\n");
    match via {
        Via::Direct(addr) | Via::Nginx(addr) => {
            let stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            read_answer(stream, &request).await
        }
        Via::Tunnel(socket) => {
            let mut unix = UnixStream::connect(socket).await.unwrap();
            let connect = format!(
                "CONNECT {DOWNLOAD_HOST}:443 HTTP/1.1\r\nHost: {DOWNLOAD_HOST}:443\r\n\r\n"
            );
            unix.write_all(connect.as_bytes()).await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(unix.read_u8().await.unwrap());
            }
            assert!(
                head.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&head)
            );
            read_answer(unix, &request).await
        }
    }
}

async fn read_answer<S>(mut stream: S, request: &str) -> u64
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    let mut head_end = None;
    let mut head = Vec::new();
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        if head_end.is_none() {
            head.extend_from_slice(&buf[..n.min(4096)]);
            if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                assert!(
                    head.starts_with(b"HTTP/1.1 200"),
                    "{}",
                    String::from_utf8_lossy(&head)
                );
                head_end = Some(at + 4);
            }
        }
        total += n as u64;
    }
    total - head_end.expect("an answer head") as u64
}

// === the relay git needs (it speaks to an HTTP proxy over TCP) ===

/// A loopback TCP port relayed to the identity socket, as the sandbox's
/// relay does for a worker.
pub async fn start_relay(socket: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let socket = socket.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(mut unix) = UnixStream::connect(&socket).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut tcp,
                    &mut unix,
                    64 * 1024,
                    64 * 1024,
                )
                .await;
            });
        }
    });
    port
}

// === git clone ===

/// How a clone reaches the repository.
pub enum CloneVia {
    /// The emulator by address, the token in the URL.
    Direct {
        addr: std::net::SocketAddr,
        token: String,
        ca: PathBuf,
    },
    /// nginx's git listener (it adds the credential), `github.com` resolved
    /// to it.
    Nginx {
        addr: std::net::SocketAddr,
        ca: PathBuf,
    },
    /// The proxy through the relay, as a worker clones.
    Proxy { relay_port: u16, ca: PathBuf },
}

/// Clones `acme/big` (bare: no checkout, the transfer and git's indexing
/// only) into `into`, which is removed after; returns the time taken.
pub fn clone(via: &CloneVia, into: &Path) -> Duration {
    let _ = std::fs::remove_dir_all(into);
    let mut cmd = Command::new("git");
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("HOME", into.parent().unwrap())
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("all_proxy");
    let url = match via {
        CloneVia::Direct { addr, token, ca } => {
            cmd.env("GIT_SSL_CAINFO", ca);
            format!("https://x-access-token:{token}@{addr}/{BIG_REPO}.git")
        }
        CloneVia::Nginx { addr, ca } => {
            cmd.env("GIT_SSL_CAINFO", ca).args([
                "-c",
                &format!(
                    "http.curloptResolve=github.com:{}:{}",
                    addr.port(),
                    addr.ip()
                ),
            ]);
            format!("https://github.com:{}/{BIG_REPO}.git", addr.port())
        }
        CloneVia::Proxy { relay_port, ca } => {
            cmd.env("GIT_SSL_CAINFO", ca)
                .env("https_proxy", format!("http://127.0.0.1:{relay_port}"));
            format!("https://github.com/{BIG_REPO}.git")
        }
    };
    let started = Instant::now();
    let out = cmd
        .args(["clone", "--quiet", "--bare", &url])
        .arg(into)
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "git clone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(into);
    took
}

// === peak resident set ===

/// Process `pid`'s resident set now, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Process `pid`'s peak resident set since the last [`reset_peak`], in KiB.
fn peak_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// Resets process `pid`'s peak resident set to its current one
/// (`clear_refs` 5).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

// === the report ===

/// What the large-transfer rounds need.
pub struct Contenders<'a> {
    pub runtime: &'a tokio::runtime::Runtime,
    pub clone_direct: CloneVia,
    pub clone_nginx: CloneVia,
    pub clone_proxy: CloneVia,
    pub download_direct: Via,
    pub download_nginx: Via,
    pub download_tunnel: Via,
    pub nginx_pid: u32,
    pub proxy_pid: u32,
    /// Where clones go (removed after each).
    pub scratch: PathBuf,
    pub repo_bytes: u64,
    pub download_bytes: u64,
}

/// One contender's transfer: seconds, CPU seconds, peak RSS growth (KiB).
#[derive(Default, Clone, Copy)]
struct Run {
    secs: f64,
    cpu_secs: f64,
    rss_growth_kib: u64,
}

/// Runs `transfer`, with the CPU nanoseconds of its contender (`cpu_ns`)
/// and the growth of the proxy process's peak resident set over its
/// resident set before (reported for the proxy's transfers).
fn run(proxy_pid: u32, cpu_ns: impl Fn() -> u64, transfer: impl FnOnce() -> Duration) -> Run {
    reset_peak(proxy_pid);
    let rss = rss_kib(proxy_pid);
    let before = cpu_ns();
    let took = transfer();
    let cpu = cpu_ns().saturating_sub(before) as f64 / 1e9;
    Run {
        secs: took.as_secs_f64(),
        cpu_secs: cpu,
        rss_growth_kib: peak_kib(proxy_pid).saturating_sub(rss),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Interleaved rounds of clones and downloads; prints MB/s, the ratios,
/// CPU and the proxy's peak resident set growth.
pub fn report(c: &Contenders<'_>) {
    let rounds = super::env_or("BENCH_LARGE_ROUNDS", 3) as usize;
    let proxy_cpu = || super::process_tree_cpu_ns(c.proxy_pid);
    let nginx_cpu = || super::process_tree_cpu_ns(c.nginx_pid);
    let none = || 0;
    let pid = c.proxy_pid;
    let into = c.scratch.join("clone.git");
    let download = |via: &Via| {
        let started = Instant::now();
        let got = c.runtime.block_on(download(via));
        assert_eq!(got, c.download_bytes, "download length");
        started.elapsed()
    };
    let mb = |bytes: u64| bytes as f64 / 1e6;
    for (what, bytes) in [
        ("git clone --bare", c.repo_bytes),
        ("tunnel download", c.download_bytes),
    ] {
        println!(
            "{what} of {:.0} MB, {rounds} interleaved rounds (direct, nginx, proxy):",
            mb(bytes)
        );
        let mut rows: [Vec<Run>; 3] = Default::default();
        for round in 1..=rounds {
            let runs = if what.starts_with("git") {
                [
                    run(pid, none, || clone(&c.clone_direct, &into)),
                    run(pid, nginx_cpu, || clone(&c.clone_nginx, &into)),
                    run(pid, proxy_cpu, || clone(&c.clone_proxy, &into)),
                ]
            } else {
                [
                    run(pid, none, || download(&c.download_direct)),
                    run(pid, nginx_cpu, || download(&c.download_nginx)),
                    run(pid, proxy_cpu, || download(&c.download_tunnel)),
                ]
            };
            let rate = |r: &Run| mb(bytes) / r.secs;
            println!(
                "  round {round}: direct {:>6.1}  nginx {:>6.1}  proxy {:>6.1} MB/s  proxy/nginx {:.2}×  CPU: nginx {:.2} s, proxy {:.2} s  proxy peak RSS +{} KiB",
                rate(&runs[0]),
                rate(&runs[1]),
                rate(&runs[2]),
                rate(&runs[2]) / rate(&runs[1]),
                runs[1].cpu_secs,
                runs[2].cpu_secs,
                runs[2].rss_growth_kib,
            );
            for (row, r) in rows.iter_mut().zip(runs) {
                row.push(r);
            }
        }
        let rates: Vec<f64> = rows
            .iter()
            .map(|row| median(row.iter().map(|r| mb(bytes) / r.secs).collect()))
            .collect();
        let ratio = median(
            rows[2]
                .iter()
                .zip(&rows[1])
                .map(|(p, n)| n.secs / p.secs)
                .collect(),
        );
        let peak = rows[2].iter().map(|r| r.rss_growth_kib).max().unwrap_or(0);
        println!(
            "  median: direct {:.1} MB/s, nginx {:.1} MB/s, proxy {:.1} MB/s; proxy/nginx = {ratio:.2}× (median of rounds), proxy/direct = {:.2}×; CPU per MB: nginx {:.2} ms, proxy {:.2} ms; peak RSS growth during the proxy's transfers at most {} KiB",
            rates[0],
            rates[1],
            rates[2],
            rates[2] / rates[0],
            median(rows[1].iter().map(|r| r.cpu_secs).collect()) * 1e3 / mb(bytes),
            median(rows[2].iter().map(|r| r.cpu_secs).collect()) * 1e3 / mb(bytes),
            peak,
        );
    }
}
