//! A TLS HTTP/1.1 server on its own thread and tokio runtime.
//!
//! Each emulator owns one: the listener is bound before `start` returns (so
//! the caller knows the port and bind errors surface at once), and the
//! runtime lives on a dedicated thread so that synchronous tests, async tests
//! and the binary can all use the emulators the same way. Shutdown stops
//! accepting, aborts open connections (child processes die with them, they
//! are spawned `kill_on_drop`) and joins the thread.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The response body type every handler returns: buffered or streamed.
pub(crate) type Body = BoxBody<Bytes, std::io::Error>;

/// The future a handler returns.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// Something that answers requests.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Answer one request. Errors become responses; this never fails.
    fn handle(self: Arc<Self>, request: Request<Incoming>) -> HandlerFuture;
}

/// Failure to start a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening socket could not be bound.
    #[error("binding {addr} failed: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The tokio runtime or server thread could not be created.
    #[error("starting the server runtime failed: {0}")]
    Runtime(std::io::Error),
}

/// A running server; dropping it shuts it down.
pub(crate) struct Server {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Bind `listen` and serve `handler` over TLS with `tls`, on `worker_threads` threads.
    pub(crate) fn start(
        listen: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
        handler: Arc<dyn Handler>,
        worker_threads: usize,
    ) -> Result<Self, ServeError> {
        let std_listener =
            std::net::TcpListener::bind(listen).map_err(|source| ServeError::Bind {
                addr: listen,
                source,
            })?;
        let addr = std_listener
            .local_addr()
            .map_err(|source| ServeError::Bind {
                addr: listen,
                source,
            })?;
        std_listener
            .set_nonblocking(true)
            .map_err(|source| ServeError::Bind {
                addr: listen,
                source,
            })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads.max(1))
            .thread_name("gatehouse-emulator")
            .enable_all()
            .build()
            .map_err(ServeError::Runtime)?;
        let (stop, stopped) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name(format!("emulator-{addr}"))
            .spawn(move || {
                runtime.block_on(accept_loop(std_listener, tls, handler, stopped));
                runtime.shutdown_background();
            })
            .map_err(ServeError::Runtime)?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, cut open connections and wait for the server thread.
    pub(crate) fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!(addr = %self.addr, "emulator server thread panicked");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

async fn accept_loop(
    std_listener: std::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    handler: Arc<dyn Handler>,
    mut stopped: watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(std_listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "emulator listener could not be registered");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                connections.spawn(async move {
                    let tls_stream = match acceptor.accept(tcp).await {
                        Ok(stream) => stream,
                        Err(error) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                            return;
                        }
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let handler = handler.clone();
                        async move { Ok::<_, std::convert::Infallible>(handler.handle(request).await) }
                    });
                    if let Err(error) = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .serve_connection(TokioIo::new(tls_stream), service)
                        // Feishu's long connection upgrades to a WebSocket.
                        .with_upgrades()
                        .await
                    {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// `body`, running `hook` once it has been read to its end (or dropped
/// unread, e.g. the client went away): work that must follow what the
/// response's producer did, such as a push's ref updates.
pub(crate) fn on_end(body: Body, hook: impl FnOnce() + Send + Sync + 'static) -> Body {
    OnEnd {
        inner: body,
        hook: Some(Box::new(hook)),
    }
    .boxed()
}

struct OnEnd {
    inner: Body,
    hook: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl OnEnd {
    fn run(&mut self) {
        if let Some(hook) = self.hook.take() {
            hook();
        }
    }
}

impl hyper::body::Body for OnEnd {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.run();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for OnEnd {
    fn drop(&mut self) {
        self.run();
    }
}

/// A buffered response body.
pub(crate) fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}
