//! HTTP/1.1 over unix sockets, both ways: a small server loop for the job
//! API and the control sockets, and a one-request client for the proxy's
//! admin socket and the `report`/`inbox` commands. Every error body is JSON.

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use serde_json::json;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use super::control_limits::ConnectionGate;

pub type Body = Full<Bytes>;

// Re-exported so clients of this module need no direct `http` dependency.
pub use http::{Method as HttpMethod, StatusCode as HttpStatus};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// connecting to the socket failed
    #[error("cannot connect to {socket}: {source}")]
    Connect {
        socket: String,
        source: std::io::Error,
    },
    /// the HTTP exchange failed
    #[error("HTTP over {socket}: {source}")]
    Exchange {
        socket: String,
        source: hyper::Error,
    },
    /// the request could not be built
    #[error("bad request: {0}")]
    Build(#[from] http::Error),
}

pub fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// `{"error": {"code": …, "message": …}}`.
pub fn error_response(
    status: StatusCode,
    code: &str,
    message: impl Into<String>,
) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"code": code, "message": message.into()}}),
    )
}

/// Reads a request body of at most `max` bytes; past that, 413.
async fn read_body(body: Incoming, max: usize) -> Result<Bytes, Box<Response<Body>>> {
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(_) => Err(too_large(max)),
    }
}

fn too_large(max: usize) -> Box<Response<Body>> {
    Box::new(error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body must be at most {max} bytes"),
    ))
}

/// A route's own bound on a body the server has read: 413 past `max`.
pub fn body_within(body: Bytes, max: usize) -> Result<Bytes, Box<Response<Body>>> {
    if body.len() > max {
        return Err(too_large(max));
    }
    Ok(body)
}

/// Parses a JSON body strictly; the error names what was wrong.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Box<Response<Body>>> {
    serde_json::from_slice(bytes).map_err(|e| {
        Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            format!("the JSON body is invalid: {e}"),
        ))
    })
}

/// Binds a unix socket at `path` (replacing a stale socket file) with `mode`.
pub fn bind(path: &Path, mode: u32) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
            std::fs::remove_file(path)?
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// How a server loop treats its connections.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// A request body of more bytes is answered 413.
    pub max_body: usize,
    /// How long a request's head, and then its body, may take to arrive;
    /// a kept-alive connection idle this long is closed.
    pub read_timeout: Duration,
    /// Every gate must admit a connection, else it is closed at accept.
    pub gates: Vec<Arc<ConnectionGate>>,
    /// What the socket is, for the log.
    pub what: &'static str,
}

impl ServeOptions {
    pub fn new(max_body: usize, what: &'static str) -> Self {
        Self {
            max_body,
            read_timeout: Duration::from_secs(30),
            gates: Vec::new(),
            what,
        }
    }
}

/// Serves HTTP/1.1 connections on `listener` until the returned future is
/// dropped; dropping it also cuts every open connection (they live in a
/// `JoinSet` owned by the future).
///
/// The handler gets the request with its body already read, at most
/// `max_body` bytes: every answer, an early refusal (400, 404, 405) too, is
/// given after the body arrived, so a client that writes its head and then
/// its body reads the answer instead of a broken pipe. Past `max_body` the
/// answer is 413 and the connection closes, the rest unread.
pub async fn serve<H, F>(listener: UnixListener, max_body: usize, handler: H)
where
    H: Fn(Request<Bytes>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    serve_with(
        listener,
        ServeOptions::new(max_body, "a unix socket"),
        |_, _| true,
        handler,
    )
    .await
}

/// [`serve`], closing at once each connection whose peer (`SO_PEERCRED`:
/// uid, gid) `admit` refuses, logged.
pub async fn serve_admitting<A, H, F>(listener: UnixListener, max_body: usize, admit: A, handler: H)
where
    A: Fn(u32, u32) -> bool + Send,
    H: Fn(Request<Bytes>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    serve_with(
        listener,
        ServeOptions::new(max_body, "the job API"),
        admit,
        handler,
    )
    .await
}

/// Request heads are bounded: at most this many bytes buffered...
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// ...and this many header fields; more is answered 431 and closed.
const MAX_HEADERS: usize = 64;

/// The server loop behind [`serve`] and [`serve_admitting`]: connections
/// the `options.gates` do not admit are closed at accept (counted, logged
/// at most every 10 s); a failing accept (out of descriptors) backs off,
/// doubling up to 1 s; request heads are bounded; a head or body that does
/// not arrive within `options.read_timeout` closes the connection (408 for
/// a body).
pub async fn serve_with<A, H, F>(
    listener: UnixListener,
    options: ServeOptions,
    admit: A,
    handler: H,
) where
    A: Fn(u32, u32) -> bool + Send,
    H: Fn(Request<Bytes>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut connections = JoinSet::new();
    let mut backoff = Backoff::new(options.what);
    let mut turned_away = Turned::default();
    let read_timeout = options.read_timeout;
    let max_body = options.max_body;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => {
                        backoff.succeeded();
                        stream
                    }
                    Err(e) => {
                        // E.g. out of descriptors: back off instead of spinning.
                        backoff.failed(&e).await;
                        continue;
                    }
                };
                match stream.peer_cred() {
                    Ok(cred) if admit(cred.uid(), cred.gid()) => {}
                    Ok(cred) => {
                        tracing::warn!(uid = cred.uid(), gid = cred.gid(), pid = cred.pid(),
                            "refused a peer of the job API (not root, this user or its group)");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!("refused a peer whose credentials are unknown: {e}");
                        continue;
                    }
                }
                let mut admitted = Vec::with_capacity(options.gates.len());
                for gate in &options.gates {
                    match gate.enter() {
                        Some(a) => admitted.push(a),
                        None => break,
                    }
                }
                if admitted.len() < options.gates.len() {
                    // Closed at accept: the stream and admissions drop here.
                    turned_away.one(options.what);
                    continue;
                }
                let handler = handler.clone();
                connections.spawn(async move {
                    let _admitted = admitted;
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let handler = handler.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let read = tokio::time::timeout(read_timeout, read_body(body, max_body));
                            let resp = match read.await {
                                Ok(Ok(bytes)) => handler(Request::from_parts(parts, bytes)).await,
                                Ok(Err(resp)) => *resp,
                                Err(_) => too_slow(read_timeout),
                            };
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(read_timeout)
                        .max_buf_size(MAX_HEAD_BYTES)
                        .max_headers(MAX_HEADERS)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

fn too_slow(timeout: Duration) -> Response<Body> {
    let mut resp = error_response(
        StatusCode::REQUEST_TIMEOUT,
        "body_too_slow",
        format!(
            "the request body did not arrive within {} s",
            timeout.as_secs()
        ),
    );
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
}

/// Connections closed at accept, logged at most every 10 s with a count.
#[derive(Default)]
struct Turned {
    unlogged: u64,
    logged: Option<Instant>,
}

impl Turned {
    fn one(&mut self, what: &str) {
        self.unlogged += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::warn!(
                closed = self.unlogged,
                socket = what,
                "closed connections at accept: over the connection cap"
            );
            self.unlogged = 0;
            self.logged = Some(Instant::now());
        }
    }
}

const LOG_EVERY: Duration = Duration::from_secs(10);

/// Backoff for an accept loop: each failure in a row doubles the pause
/// (5 ms up to 1 s), logged at most every 10 s with how many there were.
struct Backoff {
    what: &'static str,
    pause: Duration,
    unlogged: u64,
    logged: Option<Instant>,
}

impl Backoff {
    const MIN: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(1);

    fn new(what: &'static str) -> Self {
        Self {
            what,
            pause: Self::MIN,
            unlogged: 0,
            logged: None,
        }
    }

    fn succeeded(&mut self) {
        self.pause = Self::MIN;
    }

    async fn failed(&mut self, error: &std::io::Error) {
        self.unlogged += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::warn!(%error, failures = self.unlogged, socket = self.what,
                "accept failed; backing off");
            self.unlogged = 0;
            self.logged = Some(Instant::now());
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Self::MAX);
    }
}

/// A response as the client sees it.
#[derive(Debug)]
pub struct ClientResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl ClientResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends one request over the unix socket at `socket`.
pub async fn request(
    socket: &Path,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<ClientResponse, HttpError> {
    let name = socket.display().to_string();
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|source| HttpError::Connect {
            socket: name.clone(),
            source,
        })?;
    let exchange = |source| HttpError::Exchange {
        socket: name.clone(),
        source,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(exchange)?;
    let driver = tokio::spawn(conn);
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, "localhost");
    if body.is_some() {
        builder = builder.header(http::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let req = builder.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
    let resp = sender.send_request(req).await.map_err(exchange)?;
    let (parts, incoming) = resp.into_parts();
    let body = incoming.collect().await.map_err(exchange)?.to_bytes();
    driver.abort();
    Ok(ClientResponse {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}
