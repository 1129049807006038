//! The long-connection client: its own process (`gatehouse intake
//! feishu-connect`), run as the proxy's user, the only one besides the
//! proxy that reads the Feishu app secret. The router never sees it.
//!
//! ```text
//! loop:  POST {base}/callback/ws/endpoint {AppID, AppSecret}   (TLS, system roots [+ a CA file])
//!        ─► wss URL ─► WebSocket over TLS
//!        ├─ every PingInterval: ping ─► pong (may carry a new ClientConfig)
//!        └─ data frames ─► Reassembly ─► whole event ─► hand-off socket ─► router stores, confirms
//!              confirmed (stored / duplicate / ignored) ─► ack {"code":200}
//!              refused ─► ack {"code":500};  no answer ─► no ack (Feishu delivers again)
//!        on any end: wait reconnect_delay(attempt, ClientConfig, random) and start over;
//!        a refused endpoint (wrong app or secret) stops the process
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use prost::Message as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

use super::longconn::{self, ClientConfig, EndpointError, Frame, Reassembly, Received};
use crate::intake::handoff::{self, Confirm};

/// How long the router may take to confirm: Feishu waits 3 s for the ack.
const CONFIRM_TIMEOUT: Duration = Duration::from_millis(2500);
/// Connecting, TLS and the endpoint answer, each.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest endpoint answer read.
const MAX_ANSWER: usize = 64 * 1024;

/// What the client needs. The secret is read from a file, never argv.
pub struct ConnectConfig {
    pub app_id: String,
    pub app_secret: SecretString,
    /// `https://open.feishu.cn` (Lark: `https://open.larksuite.com`).
    pub base_url: String,
    /// Connect here instead of resolving the host (an emulator, a test);
    /// certificates are still verified for the host name.
    pub connect_to: Option<SocketAddr>,
    /// A CA (PEM) trusted beside the system roots.
    pub ca_file: Option<PathBuf>,
    /// The router's hand-off socket.
    pub handoff: PathBuf,
    /// The router's uid, when known: the socket's server must be it
    /// (`SO_PEERCRED`), so the secret's holder hands events to nothing else
    /// a path could be made to lead to.
    pub router_uid: Option<u32>,
}

impl std::fmt::Debug for ConnectConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectConfig")
            .field("app_id", &self.app_id)
            .field("app_secret", &"[redacted]")
            .field("base_url", &self.base_url)
            .field("connect_to", &self.connect_to)
            .field("handoff", &self.handoff)
            .field("router_uid", &self.router_uid)
            .finish_non_exhaustive()
    }
}

/// Why the client stopped.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The base URL is not `https://host[:port]`.
    #[error("the base URL `{0}` is not https://host[:port]")]
    BaseUrl(String),
    /// The TLS roots could not be loaded.
    #[error("cannot load the TLS roots: {0}")]
    Roots(String),
    /// Feishu refused the app: a wrong app id or secret does not get better.
    #[error("{0}; check the app id and the app secret file")]
    Refused(EndpointError),
    /// `ReconnectCount` attempts failed.
    #[error("gave up after {0} reconnect attempts")]
    GaveUp(u32),
}

/// `https://host[:port]` ─► (host, port).
pub fn host_port(url: &str, scheme: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix(scheme)?.strip_prefix("://")?;
    let authority = rest.split(['/', '?']).next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => Some((host.to_owned(), port.parse().ok()?)),
        Some(_) => None,
        None => Some((authority.to_owned(), 443)),
    }
}

struct Client {
    config: ConnectConfig,
    host: String,
    port: u16,
    tls: tokio_rustls::TlsConnector,
}

/// Runs until `stop` changes, Feishu refuses the app, or the reconnect
/// attempts run out.
pub async fn run(
    config: ConnectConfig,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnectError> {
    let (host, port) = host_port(config.base_url.trim_end_matches('/'), "https")
        .ok_or_else(|| ConnectError::BaseUrl(config.base_url.clone()))?;
    let tls = connector(config.ca_file.as_deref())?;
    let client = Client {
        config,
        host,
        port,
        tls,
    };
    let mut server_config = ClientConfig::default();
    let mut attempt = 0u32;
    loop {
        let outcome = tokio::select! {
            _ = stop.changed() => return Ok(()),
            o = client.session(&mut server_config) => o,
        };
        match outcome {
            Ok(()) => {
                tracing::info!("long connection closed");
                attempt = 0;
            }
            Err(SessionError::Refused(e)) => return Err(ConnectError::Refused(e)),
            Err(SessionError::Connected(error)) => {
                tracing::warn!(%error, "long connection lost");
                attempt = 0;
            }
            Err(SessionError::Failed(error)) => {
                tracing::warn!(%error, attempt, "long connection failed");
            }
        }
        let Some(delay) = longconn::reconnect_delay(attempt, &server_config, unit()) else {
            return Err(ConnectError::GaveUp(attempt));
        };
        attempt = attempt.saturating_add(1);
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// A random number in [0, 1) for the reconnect jitter.
fn unit() -> f64 {
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

fn connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, ConnectError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let why = |e: String| ConnectError::Roots(format!("{}: {e}", path.display()));
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| why(e.to_string()))? {
            roots
                .add(cert.map_err(|e| why(e.to_string()))?)
                .map_err(|e| why(e.to_string()))?;
        }
    }
    if roots.is_empty() {
        return Err(ConnectError::Roots("no trusted certificate".into()));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ConnectError::Roots(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

#[derive(Debug)]
enum SessionError {
    /// The endpoint refused the app.
    Refused(EndpointError),
    /// Failed before the connection was up.
    Failed(String),
    /// Was connected, then lost: the backoff starts over.
    Connected(String),
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

// === impl Client ===

impl Client {
    async fn tls_to(&self, host: &str, port: u16) -> Result<Tls, String> {
        let tcp = match self.config.connect_to {
            Some(addr) => timeout(TcpStream::connect(addr)).await?,
            None => timeout(TcpStream::connect((host, port))).await?,
        }
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
        timeout(self.tls.connect(name, tcp))
            .await?
            .map_err(|e| format!("TLS with {host}: {e}"))
    }

    /// Asks the endpoint for a URL; the only place the secret is used.
    async fn endpoint(&self) -> Result<longconn::Endpoint, SessionError> {
        let failed = SessionError::Failed;
        let tls = self.tls_to(&self.host, self.port).await.map_err(failed)?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| failed(e.to_string()))?;
        tokio::spawn(conn);
        let body = serde_json::json!({
            "AppID": self.config.app_id,
            "AppSecret": self.config.app_secret.expose_secret(),
        })
        .to_string();
        let authority = match self.port {
            443 => self.host.clone(),
            p => format!("{}:{p}", self.host),
        };
        let request = http::Request::post(longconn::ENDPOINT_PATH)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| failed(e.to_string()))?;
        let response = timeout(sender.send_request(request))
            .await
            .map_err(failed)?
            .map_err(|e| failed(format!("the endpoint request: {e}")))?;
        let status = response.status();
        let bytes = timeout(Limited::new(response.into_body(), MAX_ANSWER).collect())
            .await
            .map_err(failed)?
            .map_err(|e| failed(format!("the endpoint answer: {e}")))?
            .to_bytes();
        let answer: Value = serde_json::from_slice(&bytes)
            .map_err(|_| failed(format!("the endpoint answered {status} without JSON")))?;
        longconn::endpoint(&answer).map_err(|e| match e {
            EndpointError::Refused { .. } => SessionError::Refused(e),
            other => failed(other.to_string()),
        })
    }

    /// One connection: endpoint, WebSocket, then frames until it ends.
    async fn session(&self, server_config: &mut ClientConfig) -> Result<(), SessionError> {
        let endpoint = self.endpoint().await?;
        *server_config = endpoint.config;
        let (host, port) = host_port(&endpoint.url, "wss")
            .ok_or_else(|| SessionError::Failed("the wss URL has no host".into()))?;
        let tls = self
            .tls_to(&host, port)
            .await
            .map_err(SessionError::Failed)?;
        let (ws, _) = timeout(tokio_tungstenite::client_async(endpoint.url.as_str(), tls))
            .await
            .map_err(SessionError::Failed)?
            .map_err(|e| SessionError::Failed(format!("the WebSocket handshake: {e}")))?;
        tracing::info!(host = %host, "long connection open");
        self.frames(ws, endpoint.service_id, server_config)
            .await
            .map_err(SessionError::Connected)
    }

    async fn frames(
        &self,
        mut ws: tokio_tungstenite::WebSocketStream<Tls>,
        service_id: i32,
        server_config: &mut ClientConfig,
    ) -> Result<(), String> {
        let started = Instant::now();
        let mut parts = Reassembly::default();
        let mut handoff: Option<UnixStream> = None;
        let mut ping = ping_timer(server_config.ping_interval);
        loop {
            let message = tokio::select! {
                _ = ping.tick() => {
                    send(&mut ws, &longconn::ping(service_id)).await?;
                    continue;
                }
                m = ws.next() => m,
            };
            let bytes = match message {
                None => return Ok(()),
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(Message::Binary(bytes))) => bytes,
                Some(Ok(Message::Close(_))) => return Ok(()),
                Some(Ok(_)) => continue,
            };
            let frame = Frame::decode(bytes).map_err(|e| format!("a frame: {e}"))?;
            match parts.receive(&frame, started.elapsed()) {
                Received::Pong(Some(config)) => {
                    if config.ping_interval != server_config.ping_interval {
                        ping = ping_timer(config.ping_interval);
                    }
                    *server_config = config;
                }
                Received::Pong(None) | Received::Part => {}
                Received::Ignored(why) => tracing::debug!(why, "frame not acted on"),
                Received::Event {
                    message_id,
                    payload,
                } => {
                    let begun = Instant::now();
                    let status = match hand_over(
                        &self.config.handoff,
                        self.config.router_uid,
                        &mut handoff,
                        &payload,
                    )
                    .await
                    {
                        Ok(c) if c.status.acknowledge() => Some(200),
                        Ok(c) => {
                            tracing::warn!(%message_id, reason = %c.reason, "the router refused an event");
                            Some(500)
                        }
                        Err(error) => {
                            handoff = None;
                            tracing::warn!(%message_id, %error, "the router did not confirm an event; not acknowledged");
                            None
                        }
                    };
                    if let Some(status) = status {
                        let rt = u64::try_from(begun.elapsed().as_millis()).unwrap_or(u64::MAX);
                        send(&mut ws, &longconn::ack(&frame, rt, status)).await?;
                    }
                }
            }
        }
    }
}

fn ping_timer(secs: u64) -> tokio::time::Interval {
    let period = Duration::from_secs(secs.max(1));
    let mut timer = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    timer
}

async fn send(
    ws: &mut tokio_tungstenite::WebSocketStream<Tls>,
    frame: &Frame,
) -> Result<(), String> {
    ws.send(Message::Binary(frame.encode_to_vec().into()))
        .await
        .map_err(|e| e.to_string())
}

/// Hands one event to the router and waits for its confirmation; the
/// connection is kept for the next event. A kept connection that fails (the
/// router restarted since) is tried once more on a fresh one, within the
/// same [`CONFIRM_TIMEOUT`].
async fn hand_over(
    socket: &Path,
    router_uid: Option<u32>,
    held: &mut Option<UnixStream>,
    payload: &[u8],
) -> Result<Confirm, String> {
    let deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
    if held.is_some() {
        match exchange(socket, router_uid, held, payload, deadline).await {
            Ok(confirm) => return Ok(confirm),
            Err(error) => {
                tracing::debug!(%error, "the kept hand-off connection failed; reconnecting");
                *held = None;
            }
        }
    }
    exchange(socket, router_uid, held, payload, deadline).await
}

/// Whether the server of a hand-off connection is the router: its uid as
/// the kernel reports it is the expected one (none expected: any).
pub fn served_by_router(server_uid: Option<u32>, router_uid: Option<u32>) -> bool {
    router_uid.is_none_or(|want| server_uid == Some(want))
}

async fn exchange(
    socket: &Path,
    router_uid: Option<u32>,
    held: &mut Option<UnixStream>,
    payload: &[u8],
    deadline: tokio::time::Instant,
) -> Result<Confirm, String> {
    let exchange = async {
        if held.is_none() {
            let stream = UnixStream::connect(socket)
                .await
                .map_err(|e| format!("cannot reach {}: {e}", socket.display()))?;
            let server = stream.peer_cred().ok().map(|c| c.uid());
            if !served_by_router(server, router_uid) {
                return Err(format!(
                    "{} is served by uid {server:?}, not the router's {router_uid:?}: nothing handed over",
                    socket.display()
                ));
            }
            *held = Some(stream);
        }
        let stream = held.as_mut().ok_or("no hand-off connection")?;
        handoff::write_frame(stream, payload)
            .await
            .map_err(|e| e.to_string())?;
        let answer = handoff::read_frame(stream)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the router closed the hand-off connection")?;
        serde_json::from_slice::<Confirm>(&answer).map_err(|e| e.to_string())
    };
    tokio::time::timeout_at(deadline, exchange)
        .await
        .map_err(|_| format!("no confirmation within {CONFIRM_TIMEOUT:?}"))?
}

async fn timeout<F: std::future::Future>(f: F) -> Result<F::Output, String> {
    tokio::time::timeout(STEP_TIMEOUT, f)
        .await
        .map_err(|_| format!("no answer within {STEP_TIMEOUT:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_routers_uid_is_handed_events_when_it_is_known() {
        for (server, want, ok) in [
            (Some(990), Some(990), true),
            (Some(0), Some(990), false),
            (None, Some(990), false),
            (Some(5), None, true),
            (None, None, true),
        ] {
            assert_eq!(served_by_router(server, want), ok, "{server:?} {want:?}");
        }
    }

    #[test]
    fn host_and_port_of_urls() {
        for (url, scheme, expected) in [
            (
                "https://open.feishu.cn",
                "https",
                Some(("open.feishu.cn", 443)),
            ),
            (
                "https://open.feishu.cn:8443/x",
                "https",
                Some(("open.feishu.cn", 8443)),
            ),
            (
                "wss://open.feishu.cn:9/ws/v2?device_id=a&service_id=7",
                "wss",
                Some(("open.feishu.cn", 9)),
            ),
            ("wss://h?x=1", "wss", Some(("h", 443))),
            ("http://open.feishu.cn", "https", None),
            ("https://", "https", None),
            ("https://:443", "https", None),
            ("https://u:p@h", "https", None),
            ("https://h:port", "https", None),
        ] {
            let got = host_port(url, scheme);
            assert_eq!(
                got.as_ref().map(|(h, p)| (h.as_str(), *p)),
                expected,
                "{url}"
            );
        }
    }

    #[test]
    fn the_secret_is_not_in_debug() {
        let config = ConnectConfig {
            app_id: "cli_a".into(),
            app_secret: SecretString::from("s3cr3t-app-secret"),
            base_url: "https://open.feishu.cn".into(),
            connect_to: None,
            ca_file: None,
            handoff: PathBuf::from("h.sock"),
            router_uid: None,
        };
        assert!(!format!("{config:?}").contains("s3cr3t"));
    }

    #[test]
    fn jitter_units_are_below_one() {
        for _ in 0..1000 {
            let u = unit();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
