//! The proxy's benchmark, in one run on loopback against the local GitHub
//! emulator:
//!
//! 1. latency of an allowed GET (keep-alive, sequential): through the proxy
//!    (CONNECT + interception + rule match + injection + verified TLS to the
//!    upstream + audit record) versus the same GET sent directly;
//! 2. throughput with 32 concurrent keep-alive clients: through the proxy
//!    versus nginx as a TLS-terminating reverse proxy that adds an
//!    `Authorization` header (run as a foreground child from a config written
//!    into a temp dir), and direct as the ceiling.
//!
//! 3. large transfers ([`large`]): a `git clone` of a big repository and a
//!    download through a spliced tunnel, through the proxy, directly and
//!    through nginx, in MB/s, with the proxy's CPU and peak memory.
//!
//! The emulator and the proxy each run in a process of their own, the
//! bench run again in that role ([`children`]); the load generator runs in
//! the bench's.
//!
//! Run: `cargo bench -p gatehouse-proxy --bench proxy` (nginx must be on
//! PATH or in /usr/sbin; `scripts/setup-debian` installs nginx-light).
//! `BENCH_REQUESTS` and `BENCH_SECS` change the sample sizes,
//! `BENCH_LARGE_MB` the large transfers' size (0 skips them),
//! `BENCH_NGINX_ACCESS_LOG=1` gives nginx an access log.
//! nginx is stopped with its whole process group, and the bench checks
//! that none of its processes remain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod children;
mod large;
mod nginx;
mod upstream;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gatehouse_proxy::audit::AuditLog;
use gatehouse_proxy::ca::CertificateAuthority;
use gatehouse_proxy::credentials::{CredentialSpec, Credentials};
use gatehouse_proxy::rules::{RuleBook, RuleSet};
use gatehouse_proxy::server::audit_writer::AuditWriter;
use gatehouse_proxy::server::client_socket::ClientSocket;
use gatehouse_proxy::server::{IdentitySpec, Proxy, ProxyParts};
use gatehouse_proxy::upstream::{UpstreamOverride, Upstreams};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The allocator `gatehouse-services`, which runs the proxy, has.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RULES: &str = r#"
name = "bench"
description = "benchmark"
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
name = "git-fetch-refs"
source = "git smart HTTP: GET /{owner}/{repo}.git/info/refs?service=git-upload-pack"
host = "github.com"
methods = ["GET"]
path = "/{repo}.git/info/refs"
credential = "github"
inject = "git_basic"
query = { service = ["git-upload-pack"] }

[[rule]]
name = "git-fetch"
source = "git smart HTTP: POST /{owner}/{repo}.git/git-upload-pack"
host = "github.com"
methods = ["POST"]
path = "/{repo}.git/git-upload-pack"
credential = "github"
inject = "git_basic"
"#;

const PATH: &str = "/repos/acme/widgets/issues/1";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn client_config(ca_pem: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_pem).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

#[derive(Clone)]
enum Route {
    Direct {
        addr: std::net::SocketAddr,
        auth: String,
    },
    Proxy {
        socket: PathBuf,
    },
    Nginx {
        addr: std::net::SocketAddr,
    },
}

#[derive(Clone)]
struct Target {
    route: Route,
    tls: Arc<rustls::ClientConfig>,
}

type Sender = SendRequest<Empty<Bytes>>;

async fn tls_handshake<S>(stream: S, tls: Arc<rustls::ClientConfig>) -> Sender
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let name = ServerName::try_from("api.github.com").unwrap();
    let tls = tokio_rustls::TlsConnector::from(tls)
        .connect(name, stream)
        .await
        .unwrap();
    // Like for like: every route speaks TLS 1.3 to its client (nginx is
    // told to in its config; 1.22 offers 1.2 at most by default).
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn connect(target: &Target) -> Sender {
    match &target.route {
        Route::Direct { addr, .. } | Route::Nginx { addr } => {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            tls_handshake(tcp, target.tls.clone()).await
        }
        Route::Proxy { socket } => {
            let mut unix = tokio::net::UnixStream::connect(socket).await.unwrap();
            unix.write_all(
                b"CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n",
            )
            .await
            .unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(unix.read_u8().await.unwrap());
            }
            assert!(
                head.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&head)
            );
            // Registered for reads only, as curl or git poll it: a tokio
            // stream's write registration is woken by every read the proxy
            // makes (a unix socket's writer is, a TCP one's is not), a
            // wake-up of this client, while it waits, in the proxy's time.
            let unix = ClientSocket::new(unix).unwrap();
            tls_handshake(unix, target.tls.clone()).await
        }
    }
}

async fn get(sender: &mut Sender, target: &Target) {
    let mut req = hyper::Request::get(PATH)
        .header("host", "api.github.com")
        .header("user-agent", "gatehouse-bench")
        .body(Empty::new())
        .unwrap();
    if let Route::Direct { auth, .. } = &target.route {
        req.headers_mut()
            .insert("authorization", auth.parse().unwrap());
    }
    sender.ready().await.unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.len() > 100);
}

struct Latency {
    median: Duration,
    p99: Duration,
    /// The contender's CPU time per request over the samples.
    cpu_per_request: Duration,
}

/// Latency of each target, sampled in turn (one request to each per step)
/// so that load from elsewhere on the machine hits all of them alike; and
/// each one's CPU time per request (`cpus[i]` reads target `i`'s CPU
/// nanoseconds so far). With one request in flight at a time, a
/// contender's CPU per request is on the request's path: it is the added
/// latency's share that is work rather than waiting.
async fn latencies(targets: &[&Target], cpus: &[&dyn Fn() -> u64], n: usize) -> Vec<Latency> {
    let mut senders = Vec::new();
    for target in targets {
        let mut sender = connect(target).await;
        for _ in 0..200 {
            get(&mut sender, target).await;
        }
        senders.push(sender);
    }
    let mut samples = vec![Vec::with_capacity(n); targets.len()];
    let before: Vec<u64> = cpus.iter().map(|cpu| cpu()).collect();
    for _ in 0..n {
        for (i, target) in targets.iter().enumerate() {
            let start = Instant::now();
            get(&mut senders[i], target).await;
            samples[i].push(start.elapsed());
        }
    }
    let used: Vec<u64> = cpus
        .iter()
        .zip(before)
        .map(|(cpu, before)| cpu().saturating_sub(before))
        .collect();
    samples
        .into_iter()
        .zip(used)
        .map(|(mut s, used)| {
            s.sort();
            Latency {
                median: s[n / 2],
                p99: s[(n * 99 / 100).min(n - 1)],
                cpu_per_request: Duration::from_nanos(used / n as u64),
            }
        })
        .collect()
}

/// Throughput of 32 clients, the contender's CPU time per request (every
/// thread of process `contender`, if any, and its children), and the
/// upstream's (the emulator's process, `upstream`): the CPU figures are
/// what a shared machine distorts least. Every route's requests share the
/// two cores with the emulator, so its cost per request is part of each
/// route's throughput.
struct Measured {
    rate: f64,
    cpu_us_per_request: f64,
    upstream_us_per_request: f64,
}

async fn measure(target: &Target, secs: u64, contender: Option<u32>, upstream: u32) -> Measured {
    let cpu = || {
        [
            contender.map_or(0, process_tree_cpu_ns),
            process_tree_cpu_ns(upstream),
        ]
    };
    let window = throughput(target, 32, secs, &cpu).await;
    let us_per_request = |ns: u64| ns as f64 / 1e3 / window.requests as f64;
    Measured {
        rate: window.requests as f64 / window.secs,
        cpu_us_per_request: us_per_request(window.cpu_ns[0]),
        upstream_us_per_request: us_per_request(window.cpu_ns[1]),
    }
}

/// CPU nanoseconds of a process (every thread, those that ended included)
/// and of its children, recursively (nginx's master and workers), from
/// each process's CPU-time clock: the scheduler's own account.
fn process_tree_cpu_ns(pid: u32) -> u64 {
    // The kernel lists children only with CONFIG_PROC_CHILDREN; without it
    // nginx's workers would count 0.
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .expect("/proc/PID/task/PID/children (CONFIG_PROC_CHILDREN), which the CPU figures need");
    process_cpu_ns(pid) + descendants_cpu_ns(&children)
}

/// The CPU of the processes listed (and theirs); one that ended meanwhile
/// (a git the emulator ran) counts what was read of it.
fn descendants_cpu_ns(listed: &str) -> u64 {
    listed
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .map(|pid: u32| {
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
            process_cpu_ns(pid) + descendants_cpu_ns(&children)
        })
        .sum()
}

/// One process's CPU nanoseconds, its threads that ended included; 0 if
/// it is gone.
fn process_cpu_ns(pid: u32) -> u64 {
    ClockId::pid_cpu_clock_id(Pid::from_raw(pid as i32))
        .and_then(clock_gettime)
        .map_or(0, |t| {
            t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
        })
}

/// What one throughput window measured: requests answered, seconds, and
/// the CPU nanoseconds each of `cpu`'s counters moved meanwhile.
struct Window {
    requests: u64,
    secs: f64,
    cpu_ns: [u64; 2],
}

/// `clients` keep-alive clients sending for `secs` after each has connected
/// and made one request: the window starts after the handshakes and the
/// warm-up, and `cpu` is read at its start and end.
async fn throughput(
    target: &Target,
    clients: usize,
    secs: u64,
    cpu: &dyn Fn() -> [u64; 2],
) -> Window {
    let done = Arc::new(AtomicU64::new(0));
    let mut senders = Vec::new();
    for _ in 0..clients {
        senders.push(connect(target).await);
    }
    // Warm up every connection, then measure.
    for s in &mut senders {
        get(s, target).await;
    }
    let before = cpu();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for mut sender in senders {
        let target = target.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                get(&mut sender, &target).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let after = cpu();
    Window {
        requests: done.load(Ordering::Relaxed),
        secs,
        cpu_ns: [0, 1].map(|i| after[i].saturating_sub(before[i])),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

use nginx::start_nginx;

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    match children::role().as_deref() {
        Some("emulator") => return upstream::serve(),
        Some("proxy") => return serve_proxy(),
        Some(other) => panic!("no bench role {other}"),
        None => {}
    }
    let n = env_or("BENCH_REQUESTS", 3000) as usize;
    let secs = env_or("BENCH_SECS", 5);
    let large_mib = large::size_mib();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi", "clones"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    let token = format!(
        "ghs_bench{:016x}",
        u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    );
    let (github, upstream_ca) = upstream::Upstream::start(d, &token);
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap();
    let download_bytes = large_mib << 20;
    let download_addr = client_rt.block_on(large::start_download_server(download_bytes));

    // The proxy, in a process of its own (as `gatehouse proxy` is).
    let proxy = children::ChildProcess::start(
        "proxy",
        &[
            (children::DIR, d.display().to_string()),
            (UPSTREAM_URL, github.base_url()),
            (DOWNLOAD_ADDR, download_addr.to_string()),
        ],
    );
    let (socket, git_socket) = (
        PathBuf::from(&proxy.announced[0]),
        PathBuf::from(&proxy.announced[1]),
    );
    let proxy_pid = proxy.pid();
    let (nginx, nginx_ports, nginx_ca) =
        start_nginx(d, github.addr(), &upstream_ca, &token, download_addr);
    let nginx_pid = nginx.0.id();

    let direct = Target {
        route: Route::Direct {
            addr: github.addr(),
            auth: format!("Bearer {token}"),
        },
        tls: client_config(&upstream_ca),
    };
    let via_proxy = Target {
        route: Route::Proxy { socket },
        tls: client_config(&d.join("ca.pem")),
    };
    let via_nginx = Target {
        route: Route::Nginx {
            addr: nginx_ports.api,
        },
        tls: client_config(&nginx_ca),
    };

    client_rt.block_on(async {
        let pids = Pids {
            proxy: proxy_pid,
            nginx: nginx_pid,
            upstream: github.pid(),
        };
        report_latency(&direct, &via_proxy, &via_nginx, pids, n).await;
        report_throughput(&direct, &via_proxy, &via_nginx, pids, secs).await;
    });
    if large_mib > 0 {
        let cached = large::cached_repo(large_mib);
        large::install_repo(&github.big_repo_git_dir(), &cached);
        let relay_port = client_rt.block_on(large::start_relay(git_socket.clone()));
        large::report(&large::Contenders {
            runtime: &client_rt,
            clone_direct: large::CloneVia::Direct {
                addr: github.addr(),
                token: token.clone(),
                ca: upstream_ca.clone(),
            },
            clone_nginx: large::CloneVia::Nginx {
                addr: nginx_ports.git,
                ca: nginx_ca.clone(),
            },
            clone_proxy: large::CloneVia::Proxy {
                relay_port,
                ca: d.join("ca.pem"),
            },
            download_direct: large::Via::Direct(download_addr),
            download_nginx: large::Via::Nginx(nginx_ports.download),
            download_tunnel: large::Via::Tunnel(git_socket),
            nginx_pid,
            proxy_pid,
            scratch: d.join("clones"),
            repo_bytes: large::object_bytes(&cached.join("objects")),
            download_bytes,
        });
    }
    nginx.stop_checked();
    // Closing its stdin shuts the proxy down; the drop waits for it.
    drop(proxy);
}

/// The proxy's role's upstream URL and the tunnel host's address.
const UPSTREAM_URL: &str = "GATEHOUSE_BENCH_UPSTREAM_URL";
const DOWNLOAD_ADDR: &str = "GATEHOUSE_BENCH_DOWNLOAD_ADDR";

/// The processes whose CPU the bench reads: the contenders' and the
/// emulator's.
#[derive(Clone, Copy)]
struct Pids {
    proxy: u32,
    nginx: u32,
    upstream: u32,
}

/// The proxy's role: on its own runtime, as in `gatehouse proxy`, until
/// the parent is done.
fn serve_proxy() {
    let d = PathBuf::from(std::env::var_os(children::DIR).unwrap());
    let upstream = std::env::var(UPSTREAM_URL).unwrap();
    let download = std::env::var(DOWNLOAD_ADDR).unwrap().parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("BENCH_PROXY_WORKERS", 2) as usize)
        .thread_name("bench-proxy")
        .enable_all()
        .build()
        .unwrap();
    let (proxy, socket, git_socket) = runtime.block_on(start_proxy(
        &d,
        upstream,
        &d.join("upstream-ca.pem"),
        download,
    ));
    children::announce_and_wait(&[
        socket.display().to_string(),
        git_socket.display().to_string(),
    ]);
    runtime.block_on(proxy.shutdown());
}

/// The proxy with two identities for the bench rule set: `bench`
/// (`acme/widgets`) and `bench-git` (`acme/big`, and the download host as
/// a tunnel); their sockets.
async fn start_proxy(
    d: &Path,
    github_url: String,
    upstream_ca: &Path,
    download: std::net::SocketAddr,
) -> (Arc<Proxy>, PathBuf, PathBuf) {
    let upstreams = Upstreams::new(&[
        UpstreamOverride {
            host: "api.github.com".into(),
            url: github_url.clone(),
            ca_file: Some(upstream_ca.to_path_buf()),
        },
        UpstreamOverride {
            host: "github.com".into(),
            url: github_url,
            ca_file: Some(upstream_ca.to_path_buf()),
        },
        UpstreamOverride {
            host: large::DOWNLOAD_HOST.into(),
            url: format!("https://{download}"),
            ca_file: None,
        },
    ])
    .unwrap();
    let credentials = Credentials::load(
        &BTreeMap::from([(
            "github".to_string(),
            CredentialSpec::GithubToken {
                token_file: d.join("token"),
            },
        )]),
        &upstreams,
    )
    .unwrap();
    let proxy = Proxy::new(ProxyParts {
        ca: Arc::new(
            CertificateAuthority::load_or_generate(&d.join("ca.pem"), &d.join("ca.key")).unwrap(),
        ),
        upstreams,
        policy: Arc::new(RuleBook::new([RuleSet::parse("bench.toml", RULES).unwrap()]).unwrap()),
        credentials: Arc::new(credentials),
        audit: AuditWriter::start(AuditLog::open(&d.join("audit.jsonl")).unwrap()).unwrap(),
        socket_dir: d.join("sockets"),
        limits: gatehouse_proxy::limits::Limits::default(),
    })
    .unwrap();
    let identity = |name: &str, repo: &str, tunnel_hosts: Vec<String>| IdentitySpec {
        name: name.into(),
        rule_sets: vec!["bench".into()],
        tunnel_hosts,
        variables: BTreeMap::from([("repo".to_string(), repo.to_string())]),
        socket: None,
        peer_uid: None,
    };
    let socket = proxy
        .add_identity(identity("bench", "acme/widgets", vec![]))
        .unwrap();
    let git_socket = proxy
        .add_identity(identity(
            "bench-git",
            large::BIG_REPO,
            vec![large::DOWNLOAD_HOST.into()],
        ))
        .unwrap();
    (proxy, socket, git_socket)
}

/// Latency, one keep-alive connection each, sequential requests, interleaved.
async fn report_latency(
    direct: &Target,
    via_proxy: &Target,
    via_nginx: &Target,
    pids: Pids,
    n: usize,
) {
    println!("gatehouse proxy benchmark: loopback, GitHub emulator, GET {PATH}");
    println!("latency, one keep-alive connection each, {n} sequential requests after 200 warm-up, interleaved:");
    let proxy_cpu = || process_tree_cpu_ns(pids.proxy);
    let nginx_cpu = || process_tree_cpu_ns(pids.nginx);
    let lat = latencies(
        &[direct, via_proxy, via_nginx],
        &[&|| 0, &proxy_cpu, &nginx_cpu],
        n,
    )
    .await;
    let (d_lat, p_lat, n_lat) = (&lat[0], &lat[1], &lat[2]);
    for (name, l) in [("direct", d_lat), ("proxy", p_lat), ("nginx", n_lat)] {
        println!(
            "  {name:<7} median {:>8.1} µs   p99 {:>8.1} µs",
            us(l.median),
            us(l.p99)
        );
    }
    println!(
        "  proxy added: median {:+.1} µs ({:.2}× direct), p99 {:+.1} µs; nginx added: median {:+.1} µs",
        us(p_lat.median) - us(d_lat.median),
        us(p_lat.median) / us(d_lat.median),
        us(p_lat.p99) - us(d_lat.p99),
        us(n_lat.median) - us(d_lat.median),
    );
    println!(
        "  CPU per request: proxy {:.1} µs (incl. audit writer), nginx {:.1} µs; nginx/proxy = {:.2}×",
        us(p_lat.cpu_per_request),
        us(n_lat.cpu_per_request),
        us(n_lat.cpu_per_request) / us(p_lat.cpu_per_request),
    );
}

/// Throughput with 32 concurrent keep-alive clients, and the CPU per request
/// of nginx and of the proxy, over interleaved rounds.
async fn report_throughput(
    direct: &Target,
    via_proxy: &Target,
    via_nginx: &Target,
    pids: Pids,
    secs: u64,
) {
    // The machine is shared: interleave the contenders over several
    // rounds and report the median of each, and of the per-round ratio.
    let rounds = env_or("BENCH_ROUNDS", 3) as usize;
    println!("throughput, 32 concurrent keep-alive clients, {rounds} interleaved rounds of {secs} s each:");
    let (mut d_tp, mut n_tp, mut p_tp, mut ratio) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut n_cpu, mut p_cpu) = (Vec::new(), Vec::new());
    let mut upstream_cpu: [Vec<f64>; 3] = Default::default();
    for round in 1..=rounds {
        let dm = measure(direct, secs, None, pids.upstream).await;
        let n = measure(via_nginx, secs, Some(pids.nginx), pids.upstream).await;
        let p = measure(via_proxy, secs, Some(pids.proxy), pids.upstream).await;
        let d = dm.rate;
        println!(
            "  round {round}: direct {d:>7.0}  nginx {:>7.0}  proxy {:>7.0} req/s  proxy/nginx {:.2}×   CPU per request: nginx {:.1} µs, proxy {:.1} µs; the emulator's: direct {:.1} µs, nginx {:.1} µs, proxy {:.1} µs",
            n.rate,
            p.rate,
            p.rate / n.rate,
            n.cpu_us_per_request,
            p.cpu_us_per_request,
            dm.upstream_us_per_request,
            n.upstream_us_per_request,
            p.upstream_us_per_request,
        );
        for (row, m) in upstream_cpu.iter_mut().zip([&dm, &n, &p]) {
            row.push(m.upstream_us_per_request);
        }
        d_tp.push(d);
        n_tp.push(n.rate);
        p_tp.push(p.rate);
        ratio.push(p.rate / n.rate);
        n_cpu.push(n.cpu_us_per_request);
        p_cpu.push(p.cpu_us_per_request);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (d, n, p, r) = (
        median(&mut d_tp),
        median(&mut n_tp),
        median(&mut p_tp),
        median(&mut ratio),
    );
    println!("  median: direct {d:.0} req/s, nginx {n:.0} req/s, proxy {p:.0} req/s");
    println!("  proxy/nginx = {r:.2}× (median of rounds)   proxy/direct = {:.2}×   nginx/direct = {:.2}×", p / d, n / d);
    let (nc, pc) = (median(&mut n_cpu), median(&mut p_cpu));
    println!("  CPU per request (median): nginx {nc:.1} µs, proxy {pc:.1} µs (incl. audit writer); nginx/proxy = {:.2}×", nc / pc);
    let [ud, un, up] = upstream_cpu.map(|mut v| median(&mut v));
    println!("  the emulator's CPU per request (median): direct {ud:.1} µs, nginx {un:.1} µs, proxy {up:.1} µs");
}
