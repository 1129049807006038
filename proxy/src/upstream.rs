//! Connections to the real services.
//!
//! A host name is resolved once per connection and the TCP connection goes to
//! exactly the address checked: non-public addresses (private, loopback,
//! link-local, CGNAT, documentation, multicast, …) are refused unless an
//! explicit override points the host there. TLS is always verified against
//! the system roots (plus an override's extra CA) for the *original* host
//! name; there is no way to turn verification off.
//!
//! Each identity parks its own idle connections ([`IdleConnections`]), so
//! they are never shared across identities; a client connection sends on
//! one upstream connection at a time, driven in its own task ([`Lane`]).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::body::ProxyBody;

pub mod lane;
pub use lane::{IdleConnections, Lane};

/// Errors reaching an upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Name resolution failed.
    #[error("resolving {host}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    /// The name resolved to nothing.
    #[error("{host} resolved to no address")]
    NoAddress { host: String },
    /// The name resolved to an address a sandbox must never reach.
    #[error("{host} resolves to non-public address {addr}; refused (only an explicit upstream override may point at one)")]
    NonPublic { host: String, addr: IpAddr },
    /// TCP or TLS connection failed.
    #[error("connecting to {host} ({addr})")]
    Connect {
        host: String,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The request URI had no host.
    #[error("request to upstream has no host")]
    NoHost,
    /// An override's URL is not `https://host[:port]`.
    #[error("upstream override for {host}: url {url:?} must be https://host[:port]")]
    BadOverrideUrl { host: String, url: String },
    /// An override's CA file could not be read.
    #[error("upstream override for {host}: CA file {path}: {why}")]
    BadOverrideCa {
        host: String,
        path: PathBuf,
        why: String,
    },
    /// The TLS client configuration could not be built.
    #[error("TLS client configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Where a host's traffic goes instead of its public address (tests, GitHub
/// Enterprise). The certificate is still verified for the original host.
#[derive(Clone, Debug)]
pub struct UpstreamOverride {
    /// The original host name, e.g. `api.github.com`.
    pub host: String,
    /// `https://address[:port]` to connect to.
    pub url: String,
    /// An extra CA trusted (in addition to the system roots) for this host.
    pub ca_file: Option<PathBuf>,
}

#[derive(Clone, Debug)]
struct Route {
    connect_host: String,
    port: u16,
    tls: Arc<ClientConfig>,
    overridden: bool,
}

/// The routing and TLS policy for all upstream connections.
#[derive(Clone, Debug)]
pub struct Upstreams {
    default_tls: Arc<ClientConfig>,
    overrides: Arc<HashMap<String, Route>>,
}

impl Upstreams {
    /// Builds the policy: the system roots, plus each override's CA for its host.
    pub fn new(overrides: &[UpstreamOverride]) -> Result<Self, UpstreamError> {
        let system = system_roots();
        let default_tls = client_config(system.clone())?;
        let mut routes = HashMap::new();
        for o in overrides {
            let uri: Uri = o.url.parse().map_err(|_| bad_url(o))?;
            if uri.scheme_str() != Some("https") || uri.path() != "/" && !uri.path().is_empty() {
                return Err(bad_url(o));
            }
            let connect_host = uri.host().ok_or_else(|| bad_url(o))?;
            let connect_host = connect_host.trim_start_matches('[').trim_end_matches(']');
            let mut roots = system.clone();
            if let Some(path) = &o.ca_file {
                for cert in read_certs(&o.host, path)? {
                    roots.add(cert).map_err(|e| UpstreamError::BadOverrideCa {
                        host: o.host.clone(),
                        path: path.clone(),
                        why: e.to_string(),
                    })?;
                }
            }
            routes.insert(
                o.host.to_ascii_lowercase(),
                Route {
                    connect_host: connect_host.to_string(),
                    port: uri.port_u16().unwrap_or(443),
                    tls: client_config(roots)?,
                    overridden: true,
                },
            );
        }
        Ok(Self {
            default_tls,
            overrides: Arc::new(routes),
        })
    }

    fn route(&self, host: &str, port: u16) -> Route {
        self.overrides
            .get(&host.to_ascii_lowercase())
            .cloned()
            .unwrap_or_else(|| Route {
                connect_host: host.to_string(),
                port,
                tls: self.default_tls.clone(),
                overridden: false,
            })
    }

    /// Whether an override names `host`.
    pub fn is_overridden(&self, host: &str) -> bool {
        self.overrides.contains_key(&host.to_ascii_lowercase())
    }

    /// A TCP connection for `host:port`, resolved once and checked.
    pub async fn connect_tcp(&self, host: &str, port: u16) -> Result<TcpStream, UpstreamError> {
        let route = self.route(host, port);
        connect_checked(host, &route).await
    }

    /// A verified TLS connection for `host` (port 443 unless overridden).
    pub async fn connect_tls(&self, host: &str) -> Result<TlsStream<TcpStream>, UpstreamError> {
        let route = self.route(host, 443);
        let tcp = connect_checked(host, &route).await?;
        let name = ServerName::try_from(host.to_string()).map_err(|_| UpstreamError::NoHost)?;
        TlsConnector::from(route.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|source| UpstreamError::Connect {
                host: host.to_string(),
                addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), route.port),
                source,
            })
    }

    /// A pooled HTTP/1.1 client, for calls made outside any client
    /// connection (the credential issuers' token requests).
    pub fn client(&self) -> UpstreamClient {
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(64)
            .set_host(false)
            .build(Connector {
                upstreams: self.clone(),
            });
        UpstreamClient { client }
    }
}

fn bad_url(o: &UpstreamOverride) -> UpstreamError {
    UpstreamError::BadOverrideUrl {
        host: o.host.clone(),
        url: o.url.clone(),
    }
}

fn read_certs(host: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, UpstreamError> {
    let why = |why: String| UpstreamError::BadOverrideCa {
        host: host.to_string(),
        path: path.to_path_buf(),
        why,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| why(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| why(e.to_string()))?;
    if certs.is_empty() {
        return Err(why("no certificate in file".into()));
    }
    Ok(certs)
}

fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "loading a system root certificate");
    }
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    tracing::debug!(added, ignored, "system root certificates");
    roots
}

fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, UpstreamError> {
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

async fn connect_checked(host: &str, route: &Route) -> Result<TcpStream, UpstreamError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((route.connect_host.as_str(), route.port))
        .await
        .map_err(|source| UpstreamError::Resolve {
            host: host.to_string(),
            source,
        })?
        .collect();
    if !route.overridden {
        if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
            return Err(UpstreamError::NonPublic {
                host: host.to_string(),
                addr: bad.ip(),
            });
        }
    }
    let mut last = None;
    for addr in &addrs {
        match TcpStream::connect(addr).await {
            Ok(tcp) => {
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(source) => {
                last = Some(UpstreamError::Connect {
                    host: host.to_string(),
                    addr: *addr,
                    source,
                })
            }
        }
    }
    Err(last.unwrap_or_else(|| UpstreamError::NoAddress {
        host: host.to_string(),
    }))
}

/// Whether a sandbox may reach `ip` without an explicit override.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b))) // benchmarking 198.18/15
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local
        || (s[0] & 0xffc0) == 0xfe80 // link local
        || (s[0] & 0xffc0) == 0xfec0 // site local (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 embeds IPv4
        || s[0] == 0x2002 // 6to4 embeds IPv4
        || (s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0 && s[4] == 0 && s[5] == 0))
    // IPv4-compatible
}

/// A pooled client for one identity.
#[derive(Clone)]
pub struct UpstreamClient {
    client: hyper_util::client::legacy::Client<Connector, ProxyBody>,
}

impl UpstreamClient {
    /// Sends `req` (absolute `https://host/...` URI, `Host` already set).
    pub async fn send(
        &self,
        req: hyper::Request<ProxyBody>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        self.client.request(req).await
    }
}

#[derive(Clone)]
struct Connector {
    upstreams: Upstreams,
}

impl tower_service::Service<Uri> for Connector {
    type Response = UpstreamStream;
    type Error = UpstreamError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamStream, UpstreamError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let upstreams = self.upstreams.clone();
        Box::pin(async move {
            let host = uri.host().ok_or(UpstreamError::NoHost)?.to_string();
            let tls = upstreams.connect_tls(&host).await?;
            Ok(UpstreamStream(TokioIo::new(tls)))
        })
    }
}

/// A verified TLS connection to an upstream.
pub struct UpstreamStream(TokioIo<TlsStream<TcpStream>>);

impl Connection for UpstreamStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl Read for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl Write for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_address_table() {
        let cases = [
            ("140.82.112.3", true),
            ("8.8.8.8", true),
            ("2606:50c0:8000::154", true),
            ("127.0.0.1", false),
            ("10.1.2.3", false),
            ("172.16.0.1", false),
            ("192.168.1.1", false),
            ("169.254.169.254", false),
            ("100.64.0.1", false),
            ("100.127.255.255", false),
            ("0.0.0.0", false),
            ("255.255.255.255", false),
            ("224.0.0.1", false),
            ("198.18.0.1", false),
            ("192.0.0.8", false),
            ("::1", false),
            ("::", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:10.0.0.1", false),
            ("::127.0.0.1", false),
            ("64:ff9b::a00:1", false),
            ("2002:a00:1::", false),
            ("2001:db8::1", false),
        ];
        for (ip, want) in cases {
            assert_eq!(is_public(ip.parse().unwrap()), want, "{ip}");
        }
    }

    #[tokio::test]
    async fn loopback_is_refused_without_an_override() {
        let upstreams = Upstreams::new(&[]).unwrap();
        let err = upstreams.connect_tcp("localhost", 443).await.unwrap_err();
        assert!(matches!(err, UpstreamError::NonPublic { .. }), "{err}");
    }
}
