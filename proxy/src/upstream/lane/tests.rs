use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::service::service_fn;
use tokio::sync::watch;

use crate::ca::CertificateAuthority;
use crate::upstream::UpstreamOverride;

/// A TLS upstream for one host name that counts the connections it
/// accepted; `/close` answers with `Connection: close`, `/big` with a
/// MiB, `/vanish` (counted) reads the request whole and closes the
/// connection without an answer, anything else answers with its method and
/// the body's length. Its connections all close when `hang_up` is sent.
struct Origin {
    accepted: Arc<AtomicUsize>,
    vanished: Arc<AtomicUsize>,
    hang_up: watch::Sender<u32>,
}

async fn origin(ca: &CertificateAuthority, host: &str) -> (Origin, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(host).unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let vanished = Arc::new(AtomicUsize::new(0));
    let (hang_up, hung_up) = watch::channel(0u32);
    let count = accepted.clone();
    let vanishing = vanished.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let vanishing = vanishing.clone();
            let mut hung_up = hung_up.clone();
            hung_up.mark_unchanged();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req: Request<Incoming>| {
                    let vanishing = vanishing.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let method = req.method().to_string();
                        let length = req.into_body().collect().await.unwrap().to_bytes().len();
                        if path == "/vanish" {
                            vanishing.fetch_add(1, Ordering::SeqCst);
                            // hyper closes a connection whose service fails,
                            // with no answer written.
                            return Err(std::io::Error::other("vanished"));
                        }
                        let mut answer = match path.as_str() {
                            "/big" => Response::new(Bytes::from(vec![b'x'; 1 << 20])),
                            _ => Response::new(Bytes::from(format!("{method} {path} {length}"))),
                        };
                        if path == "/close" {
                            answer
                                .headers_mut()
                                .insert(http::header::CONNECTION, "close".parse().unwrap());
                        }
                        Ok(answer.map(http_body_util::Full::new))
                    }
                });
                let serving = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service);
                tokio::select! {
                    _ = serving => {}
                    _ = hung_up.changed() => {}
                }
            });
        }
    });
    (
        Origin {
            accepted,
            vanished,
            hang_up,
        },
        addr,
    )
}

impl Origin {
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn vanished(&self) -> usize {
        self.vanished.load(Ordering::SeqCst)
    }

    /// Closes every connection it has, as an upstream's idle timeout does.
    async fn hang_up(&self) {
        self.hang_up.send_modify(|n| *n += 1);
        // The closes reach the proxy's sockets over loopback.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    upstreams: Upstreams,
    origins: Vec<Origin>,
}

/// Origins for `hosts`, each behind an override trusting the test CA.
async fn setup(hosts: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::load_or_generate(
        &dir.path().join("ca.pem"),
        &dir.path().join("ca.key"),
    )
    .unwrap();
    let mut overrides = Vec::new();
    let mut origins = Vec::new();
    for host in hosts {
        let (origin, addr) = origin(&ca, host).await;
        overrides.push(UpstreamOverride {
            host: host.to_string(),
            url: format!("https://{addr}"),
            ca_file: Some(dir.path().join("ca.pem")),
        });
        origins.push(origin);
    }
    Setup {
        upstreams: Upstreams::new(&overrides).unwrap(),
        origins,
        _dir: dir,
    }
}

/// An identity's parked connections, with permits enough for any test.
fn idle_connections() -> Arc<IdleConnections> {
    IdleConnections::new(Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)))
}

fn request(method: &str, host: &str, path: &str, body: &'static str) -> Request<ProxyBody> {
    Request::builder()
        .method(method)
        .uri(format!("https://{host}{path}"))
        .header(http::header::HOST, host)
        .body(crate::body::full(body))
        .unwrap()
}

/// Sends on `lane` and reads the answer whole.
async fn fetch(lane: &Lane, method: &str, host: &str, path: &str, body: &'static str) -> Bytes {
    let answer = lane
        .send(host, request(method, host, path, body))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn a_lanes_requests_share_one_connection_which_is_parked_after() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(
            fetch(&lane, "GET", "a.example", "/x?q=1", "").await,
            "GET /x 0"
        );
        assert_eq!(
            fetch(&lane, "GET", "a.example", "/big", "").await.len(),
            1 << 20
        );
        assert_eq!(
            fetch(&lane, "POST", "a.example", "/y", "body").await,
            "POST /y 4"
        );
    })
    .await;
    assert_eq!(setup.origins[0].accepted(), 1);
    assert!(!lane.connected());
    assert_eq!(idle.parked(), 1);

    // The next client connection takes it: no new handshake.
    let next = Lane::new(setup.upstreams.clone(), idle.clone());
    next.drive(async {
        assert_eq!(fetch(&next, "GET", "a.example", "/z", "").await, "GET /z 0");
    })
    .await;
    assert_eq!(setup.origins[0].accepted(), 1);
    assert_eq!(idle.parked(), 1);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_is_replaced_and_the_request_sent_whole() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/1", "").await, "GET /1 0");
        // Closed under the lane between two requests.
        setup.origins[0].hang_up().await;
        assert_eq!(
            fetch(&lane, "PUT", "a.example", "/2", "again").await,
            "PUT /2 5"
        );
    })
    .await;
    assert_eq!(setup.origins[0].accepted(), 2);
    assert_eq!(idle.parked(), 1);

    // Closed while parked.
    setup.origins[0].hang_up().await;
    let next = Lane::new(setup.upstreams.clone(), idle.clone());
    next.drive(async {
        assert_eq!(
            fetch(&next, "POST", "a.example", "/3", "body").await,
            "POST /3 4"
        );
    })
    .await;
    assert_eq!(setup.origins[0].accepted(), 3);
}

#[tokio::test]
async fn a_request_the_upstream_read_and_left_unanswered_fails_and_is_not_sent_again() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/1", "").await, "GET /1 0");
        // On the reused connection: the upstream may have acted on it, so
        // it is not retried as a request given back unsent would be.
        let sent = lane
            .send("a.example", request("POST", "a.example", "/vanish", "body"))
            .await;
        assert!(matches!(sent, Err(SendError::Http(_))), "{sent:?}");
    })
    .await;
    assert_eq!(setup.origins[0].vanished(), 1, "sent once, never again");
    assert_eq!(setup.origins[0].accepted(), 1);
    assert_eq!(idle.parked(), 0);
}

/// A TLS upstream that answers the first request of every connection with
/// `first` as raw bytes, and any later one with `second` (its answer as
/// raw bytes too); counts the connections.
async fn raw_origin(
    ca: &CertificateAuthority,
    host: &str,
    first: &'static [u8],
    second: &'static [u8],
) -> (Arc<AtomicUsize>, std::net::SocketAddr) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config(host).unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut answer = first;
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    // A head without a body: every request here is a GET.
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    seen.clear();
                    if tls.write_all(answer).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                    answer = second;
                }
            });
        }
    });
    (accepted, addr)
}

#[tokio::test]
async fn bytes_after_an_answer_end_the_connection_and_are_never_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::load_or_generate(
        &dir.path().join("ca.pem"),
        &dir.path().join("ca.key"),
    )
    .unwrap();
    // An answer with a second one smuggled behind it, in the same write.
    let (accepted, addr) = raw_origin(
        &ca,
        "a.example",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok\
          HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nlater",
    )
    .await;
    let upstreams = Upstreams::new(&[UpstreamOverride {
        host: "a.example".into(),
        url: format!("https://{addr}"),
        ca_file: Some(dir.path().join("ca.pem")),
    }])
    .unwrap();
    let idle = idle_connections();
    let lane = Lane::new(upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/1", "").await, "ok");
        // The forged answer is not this request's: a new connection is.
        let second = lane
            .send("a.example", request("GET", "a.example", "/2", ""))
            .await;
        match second {
            Ok(answer) => {
                let body = answer.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(body, "ok", "answered from a fresh connection");
            }
            Err(error) => panic!("the second request failed: {error:?}"),
        }
    })
    .await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connection_close_is_not_reused_or_parked() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(
            fetch(&lane, "GET", "a.example", "/close", "").await,
            "GET /close 0"
        );
        assert_eq!(
            fetch(&lane, "GET", "a.example", "/close", "").await,
            "GET /close 0"
        );
    })
    .await;
    assert_eq!(setup.origins[0].accepted(), 2);
    assert_eq!(idle.parked(), 0);
}

#[tokio::test]
async fn another_host_parks_the_lanes_connection_until_it_comes_back() {
    let setup = setup(&["a.example", "b.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/1", "").await, "GET /1 0");
        assert_eq!(fetch(&lane, "GET", "b.example", "/2", "").await, "GET /2 0");
        assert_eq!(idle.parked(), 1);
        assert_eq!(fetch(&lane, "GET", "a.example", "/3", "").await, "GET /3 0");
    })
    .await;
    assert_eq!(setup.origins[0].accepted(), 1);
    assert_eq!(setup.origins[1].accepted(), 1);
    assert_eq!(idle.parked(), 2);
}

#[tokio::test]
async fn an_unanswered_request_leaves_nothing_parked() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        // The answer's head arrives; its body is never read.
        let answer = lane
            .send("a.example", request("GET", "a.example", "/big", ""))
            .await
            .unwrap();
        drop(answer);
    })
    .await;
    assert_eq!(idle.parked(), 0);
}

/// `n` lanes fetch from `host` at once, so that each has a connection of
/// its own, and end (parking them).
async fn park_at_once(setup: &Setup, idle: &Arc<IdleConnections>, host: &'static str, n: usize) {
    let mut all = tokio::task::JoinSet::new();
    let started = Arc::new(tokio::sync::Barrier::new(n));
    for _ in 0..n {
        let lane = Arc::new(Lane::new(setup.upstreams.clone(), idle.clone()));
        let started = started.clone();
        all.spawn(async move {
            lane.drive(async {
                assert_eq!(fetch(&lane, "GET", host, "/", "").await, "GET / 0");
                started.wait().await;
            })
            .await
        });
    }
    all.join_all().await;
}

#[tokio::test]
async fn parked_connections_are_bounded_per_identity_the_oldest_closed_first() {
    let hosts = ["a.example", "b.example", "c.example"];
    let setup = setup(&hosts).await;
    let idle = idle_connections();
    for host in hosts {
        park_at_once(&setup, &idle, host, MAX_IDLE_PER_HOST).await;
    }
    const { assert!(3 * MAX_IDLE_PER_HOST > MAX_IDLE_PER_IDENTITY) };
    assert_eq!(idle.parked(), MAX_IDLE_PER_IDENTITY);
    let kept = |host: &str| {
        let by_host = idle.by_host.lock().unwrap();
        by_host.get(host).map_or(0, Vec::len)
    };
    // The newest are kept: the last host's all, the first host's fewest.
    assert_eq!(kept("c.example"), MAX_IDLE_PER_HOST);
    assert_eq!(
        kept("a.example") + kept("b.example"),
        MAX_IDLE_PER_IDENTITY - MAX_IDLE_PER_HOST
    );
    assert!(kept("a.example") <= kept("b.example"));
    assert_eq!(kept("a.example"), 0, "a.example's were parked first");
}

#[tokio::test]
async fn parked_connections_take_the_proxys_permits_and_give_them_back() {
    let setup = setup(&["a.example", "b.example"]).await;
    let permits = Arc::new(Semaphore::new(3));
    let one = IdleConnections::new(permits.clone());
    let other = IdleConnections::new(permits.clone());
    park_at_once(&setup, &one, "a.example", 2).await;
    park_at_once(&setup, &other, "b.example", 2).await;
    // Three permits for four: the last was closed, not parked.
    assert_eq!(one.parked() + other.parked(), 3);
    assert_eq!(permits.available_permits(), 0);
    // Taken (and then used up by its client connection), its permit is back.
    let taken = one
        .take("a.example", Instant::now())
        .expect("a parked connection");
    assert_eq!(permits.available_permits(), 1);
    drop(taken);
    // Closing an identity gives back all of its permits.
    other.close();
    assert_eq!(permits.available_permits(), 3 - one.parked());
}

#[tokio::test]
async fn parked_connections_expire_and_are_bounded_per_host() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    park_at_once(&setup, &idle, "a.example", MAX_IDLE_PER_HOST + 2).await;
    assert_eq!(setup.origins[0].accepted(), MAX_IDLE_PER_HOST + 2);
    assert_eq!(idle.parked(), MAX_IDLE_PER_HOST);

    let later = Instant::now() + IDLE_TIMEOUT;
    assert!(idle.take("a.example", later).is_none());
    assert_eq!(idle.parked(), 0, "the expired were closed on the way");
}

#[tokio::test]
async fn the_sweeper_closes_what_has_waited_too_long_and_a_closed_identity_parks_nothing() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/", "").await, "GET / 0");
    })
    .await;
    assert_eq!(idle.parked(), 1);
    assert!(idle.sweep(Instant::now()), "not yet expired");
    assert!(!idle.sweep(Instant::now() + IDLE_TIMEOUT));
    assert_eq!(idle.parked(), 0);

    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/", "").await, "GET / 0");
    })
    .await;
    assert_eq!(idle.parked(), 1);
    idle.close();
    assert_eq!(idle.parked(), 0);
    lane.drive(async {
        assert_eq!(fetch(&lane, "GET", "a.example", "/", "").await, "GET / 0");
    })
    .await;
    assert_eq!(idle.parked(), 0, "parked after its identity was closed");
}

#[tokio::test]
async fn a_request_while_an_answer_is_unread_goes_on_another_connection() {
    let setup = setup(&["a.example"]).await;
    let idle = idle_connections();
    let lane = Lane::new(setup.upstreams.clone(), idle.clone());
    let sent = tokio::time::timeout(
        Duration::from_secs(30),
        lane.drive(async {
            let held = lane
                .send("a.example", request("GET", "a.example", "/big", ""))
                .await
                .unwrap();
            assert_eq!(fetch(&lane, "GET", "a.example", "/2", "").await, "GET /2 0");
            drop(held);
        }),
    )
    .await;
    assert!(
        sent.is_ok(),
        "the second request waited for the unread answer"
    );
    assert_eq!(setup.origins[0].accepted(), 2);
}

#[test]
fn origin_form_keeps_path_and_query_only() {
    let cases = [
        ("https://a.example/x/y?z=1&w", "/x/y?z=1&w"),
        ("https://a.example/", "/"),
        ("https://a.example", "/"),
        ("https://a.example?q", "/?q"),
        ("/already", "/already"),
    ];
    for (from, want) in cases {
        let mut uri: Uri = from.parse().unwrap();
        origin_form(&mut uri);
        assert_eq!(uri.to_string(), want, "{from}");
    }
}

/// Pending on its first poll, after another thread has woken it (while it
/// is being polled, `during`) or before waking it later (`!during`).
struct WokenFromAnotherThread {
    polled: bool,
    during: bool,
}

impl Future for WokenFromAnotherThread {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.polled, true) {
            return Poll::Ready(());
        }
        let waker = cx.waker().clone();
        let waking = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            waker.wake();
        });
        if self.during {
            waking.join().unwrap();
        }
        Poll::Pending
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wake_during_the_drives_poll_or_after_it_is_never_lost() {
    let lane = Lane::new(Upstreams::new(&[]).unwrap(), idle_connections());
    for during in [true, false, true, false] {
        let woken = WokenFromAnotherThread {
            polled: false,
            during,
        };
        // The clock is looked at first: its wake must not be what ends it.
        let driven = tokio::select! {
            biased;
            () = tokio::time::sleep(Duration::from_secs(30)) => false,
            () = lane.drive(woken) => true,
        };
        assert!(driven, "the wake was lost (during the poll: {during})");
    }
}
