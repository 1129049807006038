//! The upstream connection a client connection sends on, driven in the
//! client connection's own task.
//!
//! HTTP/1 carries one request at a time, so a client connection needs one
//! upstream connection at a time. Polling that connection in the task that
//! serves the client ([`Lane::drive`]) puts a request and its answer on
//! one task and one thread: no connection task to wake, no hand-off
//! between them per request and per body chunk, as a pooled client's own
//! connection task needs. When the client connection ends, an idle
//! upstream connection is parked with its identity
//! ([`IdleConnections`]) for the next client connection to the same host,
//! which saves it a TLS handshake upstream.

use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::client::TlsStream;

use super::{UpstreamError, Upstreams};
use crate::body::ProxyBody;

/// How long a parked connection may wait for its next client connection
/// (it is closed within a quarter of this after, by the sweeper).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The most connections parked for one host of one identity.
pub const MAX_IDLE_PER_HOST: usize = 64;
/// The most connections parked for one identity, all hosts together: a
/// parked connection holds a descriptor past its client connection (so
/// past the identity's connection cap), and redirects can name many hosts.
pub const MAX_IDLE_PER_IDENTITY: usize = 128;

type Connection = http1::Connection<TokioIo<TlsStream<TcpStream>>, ProxyBody>;

/// Why a request did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection to the upstream could be made.
    #[error("connecting upstream")]
    Connect(#[from] UpstreamError),
    /// The connection failed before or during the exchange.
    #[error("upstream exchange")]
    Http(#[from] hyper::Error),
}

/// An upstream connection: the handle requests are sent through and the
/// connection itself, which someone must poll for anything to move.
struct Upstream {
    host: Arc<str>,
    sender: SendRequest<ProxyBody>,
    connection: Pin<Box<Connection>>,
}

struct Parked {
    upstream: Upstream,
    since: Instant,
    /// One of the proxy's permits for parked connections, given back when
    /// the connection is taken or closed.
    permit: OwnedSemaphorePermit,
}

impl Upstream {
    /// Polls the connection once without a task: a close (or bytes) the
    /// upstream sent since it was last polled ends it now, and the waker
    /// of the task that last drove it is let go.
    fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.connection.as_mut().poll(&mut cx).is_pending() && !self.sender.is_closed()
    }
}

/// One identity's parked upstream connections, by host. They are polled
/// only when parked and when taken ([`Upstream::still_open`]): one the
/// upstream closes after that fails its first request unsent, and the
/// request goes on a new connection.
pub struct IdleConnections {
    by_host: Mutex<HashMap<Arc<str>, Vec<Parked>>>,
    /// The proxy's permits for parked connections, all identities together
    /// (each holds a descriptor the client connections' budget does not
    /// count: [`crate::limits::Budget::parked`]).
    permits: Arc<Semaphore>,
    /// Its identity was closed: nothing is parked any more.
    closed: AtomicBool,
    /// A sweeper runs while anything is parked.
    sweeping: Mutex<bool>,
}

impl IdleConnections {
    /// An identity's parked connections, drawing on the proxy's `permits`.
    pub fn new(permits: Arc<Semaphore>) -> Arc<Self> {
        Arc::new(Self {
            by_host: Mutex::new(HashMap::new()),
            permits,
            closed: AtomicBool::new(false),
            sweeping: Mutex::new(false),
        })
    }

    /// The most recently parked live connection to `host`.
    fn take(&self, host: &str, now: Instant) -> Option<Upstream> {
        let mut by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        let parked = by_host.get_mut(host)?;
        let found = std::iter::from_fn(|| parked.pop()).find_map(|mut p| {
            (now.duration_since(p.since) < IDLE_TIMEOUT && p.upstream.still_open()).then_some(p)
        });
        if parked.is_empty() {
            by_host.remove(host);
        }
        found.map(|p| p.upstream)
    }

    /// Parks a connection that is ready for its next request. To make
    /// room, the oldest of its host beyond [`MAX_IDLE_PER_HOST`] is closed,
    /// else the oldest of any host beyond [`MAX_IDLE_PER_IDENTITY`]; with
    /// none of the proxy's permits left it is closed instead.
    fn park(self: &Arc<Self>, mut upstream: Upstream) {
        if !upstream.sender.is_ready() || !upstream.still_open() {
            return;
        }
        let mut by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock, so that a `close` racing this parks nothing.
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let host_full = by_host
            .get(&upstream.host)
            .is_some_and(|parked| parked.len() >= MAX_IDLE_PER_HOST);
        let room = if host_full {
            by_host
                .get_mut(&upstream.host)
                .map(|parked| parked.remove(0))
        } else if by_host.values().map(Vec::len).sum::<usize>() >= MAX_IDLE_PER_IDENTITY {
            take_oldest(&mut by_host)
        } else {
            None
        };
        // A connection closed to make room hands its permit on.
        let (permit, closing) = match room {
            Some(old) => (old.permit, Some(old.upstream)),
            None => match self.permits.clone().try_acquire_owned() {
                Ok(permit) => (permit, None),
                // None left: this one is closed rather than parked.
                Err(_) => return,
            },
        };
        by_host
            .entry(upstream.host.clone())
            .or_default()
            .push(Parked {
                upstream,
                since: Instant::now(),
                permit,
            });
        drop(by_host);
        // Closed outside the lock.
        drop(closing);
        self.sweep_later();
    }

    /// Closes every parked connection, and parks none from now on: its
    /// identity was closed.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let mut by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        by_host.clear();
    }

    /// Closes what has waited longer than [`IDLE_TIMEOUT`] at `now`; says
    /// whether anything is still parked.
    fn sweep(&self, now: Instant) -> bool {
        let mut by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        by_host.retain(|_, parked| {
            parked.retain(|p| now.duration_since(p.since) < IDLE_TIMEOUT);
            !parked.is_empty()
        });
        !by_host.is_empty()
    }

    /// Starts the sweeper unless it runs; it ends when nothing is parked
    /// or the identity is gone.
    fn sweep_later(self: &Arc<Self>) {
        let mut sweeping = self.sweeping.lock().unwrap_or_else(|p| p.into_inner());
        if *sweeping {
            return;
        }
        *sweeping = true;
        let idle: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE_TIMEOUT / 4).await;
                let Some(idle) = idle.upgrade() else { return };
                let mut sweeping = idle.sweeping.lock().unwrap_or_else(|p| p.into_inner());
                if !idle.sweep(Instant::now()) {
                    *sweeping = false;
                    return;
                }
            }
        });
    }

    /// How many connections are parked (for tests).
    #[cfg(test)]
    fn parked(&self) -> usize {
        let by_host = self.by_host.lock().unwrap_or_else(|p| p.into_inner());
        by_host.values().map(Vec::len).sum()
    }
}

/// Takes out the connection parked longest, of any host. Each host's list
/// is in the order parked, so the oldest is the first of one of them.
fn take_oldest(by_host: &mut HashMap<Arc<str>, Vec<Parked>>) -> Option<Parked> {
    let (_, host) = by_host
        .iter()
        .filter_map(|(host, parked)| Some((parked.first()?.since, host.clone())))
        .min_by_key(|(since, _)| *since)?;
    let parked = by_host.get_mut(&host)?;
    let oldest = parked.remove(0);
    if parked.is_empty() {
        by_host.remove(&host);
    }
    Some(oldest)
}

/// A client connection's upstream connection.
pub struct Lane {
    upstreams: Upstreams,
    idle: Arc<IdleConnections>,
    /// Its connection, between requests and while one is answered; the
    /// sender is out of it while a request waits for the connection.
    current: Mutex<Current>,
}

#[derive(Default)]
struct Current {
    host: Option<Arc<str>>,
    sender: Option<SendRequest<ProxyBody>>,
    connection: Option<Pin<Box<Connection>>>,
}

/// Where a request's sender came from.
enum Source {
    /// Used before (by this lane, or parked): the upstream may have closed
    /// it meanwhile, so a request it gives back unsent goes again.
    Reused,
    Fresh,
}

impl Lane {
    pub fn new(upstreams: Upstreams, idle: Arc<IdleConnections>) -> Self {
        Self {
            upstreams,
            idle,
            current: Mutex::new(Current::default()),
        }
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `serving` (the client connection) and the lane's upstream
    /// connection together in the caller's task, then parks the upstream
    /// connection if it is idle.
    ///
    /// Each half wakes the other as a request goes out and its answer comes
    /// back. A task that wakes itself while it runs is put at the back of
    /// tokio's queue, with a parked worker woken to steal it; so wakes
    /// that arrive while the two are polled are taken here, by polling
    /// again, and only the others wake the task ([`LocalWake`]).
    pub async fn drive<F: Future>(&self, serving: F) -> F::Output {
        let mut serving = pin!(serving);
        let wake = Arc::new(LocalWake::default());
        let waker = std::task::Waker::from(wake.clone());
        let output = poll_fn(|cx| {
            wake.register(cx.waker());
            let mut inner = Context::from_waker(&waker);
            for _ in 0..LOCAL_ROUNDS {
                wake.polling.store(true, Ordering::SeqCst);
                wake.woken.store(false, Ordering::SeqCst);
                let served = serving.as_mut().poll(&mut inner);
                // After the client side: a request it just sent is written now.
                self.poll_connection(&mut inner);
                wake.polling.store(false, Ordering::SeqCst);
                if served.is_ready() {
                    return served;
                }
                if !wake.woken.swap(false, Ordering::SeqCst) {
                    return Poll::Pending;
                }
                // Out of tokio's budget for this poll: every resource
                // would answer Pending again.
                if !tokio::task::coop::has_budget_remaining() {
                    break;
                }
            }
            // Still being woken: the rest of the runtime's tasks go first.
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
        let mut current = self.current();
        if let Some(upstream) = take_upstream(&mut current) {
            self.idle.park(upstream);
        }
        output
    }

    fn poll_connection(&self, cx: &mut Context<'_>) {
        let mut current = self.current();
        let Some(connection) = current.connection.as_mut() else {
            return;
        };
        if let Poll::Ready(result) = connection.as_mut().poll(cx) {
            if let Err(error) = result {
                tracing::debug!(%error, "upstream connection ended");
            }
            // Its sender now says it is closed.
            current.connection = None;
        }
    }

    /// Sends `request` (an absolute `https://host/…` URI, `Host` set) to
    /// `host` and waits for the answer's head. Only from within
    /// [`Lane::drive`], one request at a time.
    pub async fn send(
        &self,
        host: &str,
        mut request: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        origin_form(request.uri_mut());
        loop {
            let (mut sender, source) = self.sender_for(host).await?;
            let failed = match sender.ready().await {
                Err(error) => Unsent(request, error),
                Ok(()) => {
                    let answer = sender.try_send_request(request);
                    self.current().sender = Some(sender);
                    match answer.await {
                        Ok(response) => return Ok(response),
                        Err(mut failed) => match failed.take_message() {
                            Some(back) => Unsent(back, failed.into_error()),
                            None => return Err(failed.into_error().into()),
                        },
                    }
                }
            };
            let Unsent(back, error) = failed;
            self.drop_connection();
            match source {
                Source::Reused => {
                    tracing::debug!(%error, %host, "a reused upstream connection was closed; sending on a new one");
                    request = back;
                }
                Source::Fresh => return Err(error.into()),
            }
        }
    }

    /// The sender for `host`: the lane's own, else a parked one, else a
    /// new connection's.
    async fn sender_for(&self, host: &str) -> Result<(SendRequest<ProxyBody>, Source), SendError> {
        {
            let mut current = self.current();
            if current.host.as_deref() != Some(host) {
                if let Some(upstream) = take_upstream(&mut current) {
                    self.idle.park(upstream);
                }
            }
            if let Some(sender) = current.sender.take() {
                // One not ready still carries an earlier answer nobody has
                // read to the end: waiting for it could wait forever, so
                // the request goes on another connection.
                if !sender.is_closed() && sender.is_ready() && current.connection.is_some() {
                    return Ok((sender, Source::Reused));
                }
                current.connection = None;
            }
            if let Some(upstream) = self.idle.take(host, Instant::now()) {
                current.host = Some(upstream.host);
                current.connection = Some(upstream.connection);
                return Ok((upstream.sender, Source::Reused));
            }
        }
        let tls = self.upstreams.connect_tls(host).await?;
        let (sender, connection) = http1::handshake(TokioIo::new(tls)).await?;
        let mut current = self.current();
        current.host = Some(host.into());
        current.connection = Some(Box::pin(connection));
        Ok((sender, Source::Fresh))
    }

    fn drop_connection(&self) {
        let mut current = self.current();
        current.sender = None;
        current.connection = None;
    }

    /// Whether the lane holds a connection (for tests).
    #[cfg(test)]
    fn connected(&self) -> bool {
        self.current().connection.is_some()
    }
}

/// How many times [`Lane::drive`] polls again for wakes of its own before
/// it yields to the runtime.
const LOCAL_ROUNDS: usize = 8;

/// The waker [`Lane::drive`] polls its halves with: a wake while they are
/// polled is noted (and polled for); any other wakes the task.
#[derive(Default)]
struct LocalWake {
    polling: AtomicBool,
    woken: AtomicBool,
    task: Mutex<Option<std::task::Waker>>,
}

impl LocalWake {
    fn register(&self, waker: &std::task::Waker) {
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if !task.as_ref().is_some_and(|t| t.will_wake(waker)) {
            *task = Some(waker.clone());
        }
    }
}

impl std::task::Wake for LocalWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Noted first, then the poller's state read: a poller that has
        // stopped polling either sees the note or is woken.
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            let task = self.task.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(task) = task.as_ref() {
                task.wake_by_ref();
            }
        }
    }
}

/// A request given back without having been written.
struct Unsent(Request<ProxyBody>, hyper::Error);

/// The lane's connection with its sender, when it has both.
fn take_upstream(current: &mut Current) -> Option<Upstream> {
    let host = current.host.take();
    let sender = current.sender.take();
    let connection = current.connection.take();
    Some(Upstream {
        host: host?,
        sender: sender?,
        connection: connection?,
    })
}

/// `https://host/p?q` → `/p?q`: an HTTP/1 request to the origin itself.
fn origin_form(uri: &mut Uri) {
    let path = uri.path_and_query().cloned();
    *uri = Uri::from(path.unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")));
}

#[cfg(test)]
mod tests;
