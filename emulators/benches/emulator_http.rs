//! How fast the GitHub emulator answers, against a baseline measured in the
//! same run: a bare hyper + rustls server with the same TLS configuration
//! that returns the same bytes without any emulator logic (no routing, model,
//! JSON rendering or recording).
//!
//! Run: `cargo bench -p gatehouse-emulators --bench emulator_http`
//! (optional env: `BENCH_SECONDS` for the throughput phase, default 5).
//!
//! Latency: one keep-alive connection, sequential `GET /repos/acme/widgets/issues/1`.
//! Throughput: 32 keep-alive connections for `BENCH_SECONDS`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use gatehouse_emulators::{GithubEmulator, GithubOptions, RepoSpec};
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};

const TOKEN: &str = "ghs_bench_token";
const PATH: &str = "/repos/acme/widgets/issues/1";
const LATENCY_SAMPLES: usize = 5_000;
const CONNECTIONS: usize = 32;

fn main() -> anyhow::Result<()> {
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir()?;
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token(TOKEN, "bench[bot]")
            .repo(RepoSpec::new("acme", "widgets")),
    )?;
    emulator.add_issue("acme/widgets", "Benchmark issue", "Body text.", "alice")?;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(
        emulator.ca_pem().as_bytes(),
    )?)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client_tls = Arc::new(client_tls);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // The baseline serves exactly the bytes the emulator answers.
        let mut probe = connect(emulator.addr(), client_tls.clone()).await?;
        let body = get(&mut probe).await?;
        let baseline = start_baseline(emulator.ca().server_config()?, body).await?;

        let mut rows = Vec::new();
        for (name, addr) in [("baseline", baseline), ("emulator", emulator.addr())] {
            let (median, p99) = latency(addr, client_tls.clone()).await?;
            let rps = throughput(addr, client_tls.clone(), Duration::from_secs(seconds)).await?;
            println!(
                "{name:9} median {:>7.1} µs  p99 {:>7.1} µs  throughput {rps:>8.0} req/s ({CONNECTIONS} conns)",
                median.as_secs_f64() * 1e6,
                p99.as_secs_f64() * 1e6
            );
            rows.push((median, p99, rps));
        }
        let (base, emu) = (rows[0], rows[1]);
        println!(
            "ratio emulator/baseline: median {:.2}x  p99 {:.2}x  throughput {:.2}x",
            emu.0.as_secs_f64() / base.0.as_secs_f64(),
            emu.1.as_secs_f64() / base.1.as_secs_f64(),
            emu.2 / base.2
        );
        anyhow::Ok(())
    })?;
    emulator.shutdown();
    Ok(())
}

async fn connect(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
) -> anyhow::Result<SendRequest<Empty<Bytes>>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("api.github.com")?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn get(sender: &mut SendRequest<Empty<Bytes>>) -> anyhow::Result<Bytes> {
    sender.ready().await?;
    let request = hyper::Request::get(PATH)
        .header("host", "api.github.com")
        .header("authorization", format!("token {TOKEN}"))
        .header("user-agent", "gatehouse-bench")
        .body(Empty::new())?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status() == 200, "status {}", response.status());
    Ok(response.into_body().collect().await?.to_bytes())
}

async fn latency(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
) -> anyhow::Result<(Duration, Duration)> {
    let mut sender = connect(addr, tls).await?;
    for _ in 0..500 {
        get(&mut sender).await?;
    }
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for _ in 0..LATENCY_SAMPLES {
        let start = Instant::now();
        get(&mut sender).await?;
        samples.push(start.elapsed());
    }
    samples.sort();
    Ok((
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    ))
}

async fn throughput(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    duration: Duration,
) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut sender = connect(addr, tls.clone()).await?;
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                get(&mut sender).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let start = Instant::now();
    for task in tasks {
        task.await.context("client task")??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// A minimal TLS HTTP/1.1 server answering every request with `body`.
async fn start_baseline(tls: Arc<rustls::ServerConfig>, body: Bytes) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |_request| {
                    let body = body.clone();
                    async move {
                        let mut response = hyper::Response::new(Full::new(body));
                        response.headers_mut().insert(
                            "content-type",
                            hyper::header::HeaderValue::from_static(
                                "application/json; charset=utf-8",
                            ),
                        );
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}
