//! The live router's two HTTP clients, one request per connection:
//!
//! ```text
//! job API   unix socket ─► HTTP/1.1 ─► supervisor
//! platforms unix socket (the router's proxy identity) ─► CONNECT host:443
//!           ─► TLS (tokio-rustls; the gatehouse CA is the only root) ─► HTTP/1.1 ─► proxy ─► platform
//! ```
//!
//! Errors say how far the request got, which the outbox needs: before
//! anything left (`NotSent`: connect, CONNECT refused, TLS) or possibly
//! after (`Exchange`: the request may have been acted on).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

/// How far a request got before it failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Nothing of the request left the router (the socket could not be
    /// reached, the proxy refused the CONNECT, TLS failed).
    #[error("{0}")]
    NotSent(String),
    /// The request may have been received and acted on.
    #[error("{0}")]
    Exchange(String),
    /// The proxy refused the CONNECT (the identity may not reach the host):
    /// nothing was sent, and trying again will not change it.
    #[error("{0}")]
    Refused(String),
    /// The answer took longer than allowed (the request may have been acted on).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// An answer: status and whole body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// Failure to set up the HTTPS client.
#[derive(Debug, thiserror::Error)]
pub enum ClientSetupError {
    #[error("proxy.ca_cert {path}: {why}")]
    Ca { path: String, why: String },
}

/// Largest answer head read from a CONNECT.
const MAX_CONNECT_HEAD: usize = 16 * 1024;
/// Largest answer body read (a page of comments is well under).
const MAX_BODY: usize = 8 * 1024 * 1024;

/// One request over a unix socket (the job API). `headers` are added.
pub async fn unix_request(
    socket: &Path,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Answer, HttpError> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|e| HttpError::NotSent(format!("cannot connect to {}: {e}", socket.display())))?;
    with_timeout(
        timeout,
        exchange(stream, "localhost", method, path, headers, body),
    )
    .await
}

async fn with_timeout(
    timeout: Duration,
    f: impl std::future::Future<Output = Result<Answer, HttpError>>,
) -> Result<Answer, HttpError> {
    tokio::time::timeout(timeout, f)
        .await
        .map_err(|_| HttpError::Timeout(timeout))?
}

async fn exchange<S: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    stream: S,
    host: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<Answer, HttpError> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| HttpError::NotSent(format!("HTTP handshake: {e}")))?;
    let driver = tokio::spawn(conn);
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, "gatehouse-router");
    if body.is_some() {
        builder = builder.header(http::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| HttpError::NotSent(format!("building the request: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| HttpError::Exchange(format!("HTTP exchange: {e}")))?;
    let (parts, incoming) = response.into_parts();
    let body = http_body_util::Limited::new(incoming, MAX_BODY)
        .collect()
        .await
        .map_err(|e| HttpError::Exchange(format!("reading the answer: {e}")))?
        .to_bytes();
    driver.abort();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// HTTPS through the router's proxy identities, trusting only the gatehouse CA.
#[derive(Clone)]
pub struct ProxyClient {
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for ProxyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyClient").finish_non_exhaustive()
    }
}

impl ProxyClient {
    /// A client whose only root is the CA in `ca_cert` (PEM).
    pub fn new(ca_cert: &Path) -> Result<Self, ClientSetupError> {
        let why = |why: String| ClientSetupError::Ca {
            path: ca_cert.display().to_string(),
            why,
        };
        let certs = CertificateDer::pem_file_iter(ca_cert)
            .map_err(|e| why(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| why(e.to_string()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs {
            roots.add(cert).map_err(|e| why(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(why("no certificate in the file".into()));
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| why(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// `method https://host/path` through the identity at `socket`.
    pub async fn request(
        &self,
        socket: &Path,
        host: &str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        self.request_with(socket, host, method, path, &[], body, timeout)
            .await
    }

    /// [`ProxyClient::request`] with `headers` added (e.g. `If-None-Match`).
    #[allow(clippy::too_many_arguments)]
    pub async fn request_with(
        &self,
        socket: &Path,
        host: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        with_timeout(timeout, async {
            let stream = self.tunnel(socket, host).await?;
            exchange(stream, host, method, path, headers, body).await
        })
        .await
    }

    async fn tunnel(
        &self,
        socket: &Path,
        host: &str,
    ) -> Result<tokio_rustls::client::TlsStream<UnixStream>, HttpError> {
        let mut stream = UnixStream::connect(socket).await.map_err(|e| {
            HttpError::NotSent(format!(
                "cannot connect to the proxy identity {}: {e}",
                socket.display()
            ))
        })?;
        let head = format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n");
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| HttpError::NotSent(format!("CONNECT {host}: {e}")))?;
        let (status, rest) = read_connect_answer(&mut stream).await?;
        if status != 200 {
            return Err(HttpError::Refused(format!(
                "the proxy refused CONNECT {host}:443 ({status}): {}",
                String::from_utf8_lossy(&rest)
                    .chars()
                    .take(300)
                    .collect::<String>()
            )));
        }
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| HttpError::NotSent(format!("{host}: {e}")))?;
        self.tls
            .connect(name, stream)
            .await
            .map_err(|e| HttpError::NotSent(format!("TLS with {host} through the proxy: {e}")))
    }
}

/// Reads a CONNECT answer's head (byte by byte: what follows a 200 is the
/// tunnel's). Returns the status and, for a refusal, what came after.
async fn read_connect_answer(stream: &mut UnixStream) -> Result<(u16, Vec<u8>), HttpError> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_CONNECT_HEAD {
            return Err(HttpError::NotSent(
                "the CONNECT answer's head is too long".into(),
            ));
        }
        let n = stream
            .read(&mut byte)
            .await
            .map_err(|e| HttpError::NotSent(format!("reading the CONNECT answer: {e}")))?;
        if n == 0 {
            return Err(HttpError::NotSent(
                "the proxy closed the connection at CONNECT".into(),
            ));
        }
        head.push(byte[0]);
    }
    let status = connect_status(&head)
        .ok_or_else(|| HttpError::NotSent("the CONNECT answer is not HTTP".into()))?;
    let mut rest = Vec::new();
    if status != 200 {
        // A refusal carries a JSON body saying why, then the proxy closes.
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            stream.take(4096).read_to_end(&mut rest),
        )
        .await;
    }
    Ok((status, rest))
}

/// The status of an HTTP/1.x answer head (pure).
pub fn connect_status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}
