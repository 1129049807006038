//! An identity's transparent socket: what the sandbox's relay took on
//! ports 443 and 80, for clients that ignore proxy settings and connect
//! to a name the sandbox resolves to loopback. No CONNECT names the
//! target, so the connection itself does:
//!
//! - a TLS ClientHello (first byte 0x16, which no HTTP request line starts
//!   with): the target is its server name (SNI). No SNI, a name no rule of
//!   the identity names, an IP address or a local name: refused before any
//!   certificate is made, on record. Otherwise the handshake completes with
//!   the minted leaf for that name and the requests inside are served as in
//!   a CONNECT tunnel to it: each one's Host must be the SNI.
//! - anything else is plain HTTP: each request's target is its Host header
//!   (origin-form) or its absolute-form URI, which must agree with Host.
//!
//! Either way the same rules decide as for the proxy socket, and the
//! identity is still the socket the connection arrived on.

use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio_rustls::LazyConfigAcceptor;

use super::client_socket::ClientSocket;
use super::connect::{
    connect_line, framing_observer, http1_server, serve_intercepted, wait_revoked, Held,
};
use super::forward::{self, Target};
use super::framing::Guarded;
use super::idle::Idle;
use super::records::{now, request_record};
use super::{is_dns_name, Identity, Proxy};
use crate::audit::Outcome;
use crate::body::ProxyBody;
use crate::upstream::Lane;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

pub(super) async fn serve(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    stream: ClientSocket,
    held: Arc<Held>,
) {
    let mut revoked = identity.revoked();
    let work = async {
        let first = match tokio::time::timeout(proxy.limits.idle(), stream.peek_byte()).await {
            Ok(Ok(Some(byte))) => byte,
            // Closed, failed or silent before its first byte: nothing asked.
            _ => return,
        };
        let stream = Idle::new(stream, proxy.limits.idle());
        if first == TLS_HANDSHAKE {
            serve_tls(proxy.clone(), identity.clone(), stream).await;
        } else {
            serve_plain(proxy.clone(), identity.clone(), stream).await;
        }
    };
    tokio::select! {
        () = work => {}
        _ = wait_revoked(&mut revoked) => {}
    }
    drop(held);
}

/// Why a ClientHello's server name is not served; `None`: it is.
pub(super) fn sni_refusal(
    sni: Option<&str>,
    names_host: impl Fn(&str) -> bool,
) -> Option<&'static str> {
    let Some(host) = sni else {
        return Some("no TLS server name (SNI): a transparent TLS connection must name its host");
    };
    if !is_dns_name(host) {
        return Some(
            "the TLS server name must be a DNS name; IP addresses and bare names are refused",
        );
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("the TLS server name names the local machine; refused");
    }
    if !names_host(host) {
        return Some(
            "no rule of this identity's rule sets names this host (transparent connections are \
             always intercepted, so tunnel hosts are reached only through the proxy)",
        );
    }
    None
}

async fn serve_tls(proxy: Arc<Proxy>, identity: Arc<Identity>, stream: Idle<ClientSocket>) {
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = match tokio::time::timeout(proxy.limits.tls_handshake(), acceptor).await {
        Ok(Ok(start)) => start,
        Ok(Err(error)) => return tracing::debug!(%error, "transparent ClientHello unreadable"),
        Err(_) => return tracing::debug!("transparent ClientHello timed out"),
    };
    let sni = start
        .client_hello()
        .server_name()
        .map(str::to_ascii_lowercase);
    let refusal = sni_refusal(sni.as_deref(), |host| {
        proxy.policy.names_host(host, &identity.scope.rule_sets)
    });
    if let Some(reason) = refusal {
        let host = sni.as_deref().unwrap_or("-");
        let outcome = Outcome::Deny {
            reason: reason.into(),
            rule_sets_tried: identity.scope.rule_sets.clone(),
        };
        let record = connect_line(&proxy, &identity, host, &format!("{host}:443"), outcome);
        if proxy.record_refusal(record).is_err() {
            tracing::error!(identity = %identity.name, "a transparent TLS refusal could not be recorded");
        }
        // No certificate for a name the rules do not name: the client sees
        // the connection close during its handshake.
        return;
    }
    let host = sni.unwrap_or_default();
    let config = match proxy.ca.server_config(&host) {
        Ok(config) => config,
        Err(error) => {
            let error = super::with_causes(&error);
            return tracing::error!(%error, "minting a leaf certificate");
        }
    };
    let tls =
        match tokio::time::timeout(proxy.limits.tls_handshake(), start.into_stream(config)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => return tracing::debug!(%error, %host, "client TLS handshake failed"),
            Err(_) => return tracing::debug!(%host, "client TLS handshake timed out"),
        };
    serve_intercepted(proxy, identity, host, tls).await;
}

async fn serve_plain(proxy: Arc<Proxy>, identity: Arc<Identity>, stream: Idle<ClientSocket>) {
    let observer = framing_observer(proxy.clone(), identity.clone(), "-");
    let lane = identity.lane(&proxy.upstreams);
    let service = {
        let identity = identity.clone();
        let lane = lane.clone();
        service_fn(move |req| plain(proxy.clone(), identity.clone(), lane.clone(), req))
    };
    let serving =
        http1_server().serve_connection(Guarded::observed(TokioIo::new(stream), observer), service);
    if let Err(error) = lane.drive(serving).await {
        tracing::debug!(%error, identity = %identity.name, "transparent HTTP connection ended");
    }
}

/// The target of a plain request on port 80: the absolute-form URI's host,
/// else the Host header's; either on port 80 only. Whether Host agrees
/// with an absolute-form URI is [`super::head::check`]'s to say.
pub(super) fn plain_target<B>(req: &Request<B>) -> Result<String, &'static str> {
    let uri = req.uri();
    if uri.authority().is_some() {
        return match (uri.scheme_str(), uri.host(), uri.port_u16()) {
            (Some("http"), Some(host), None | Some(80)) => Ok(host.to_ascii_lowercase()),
            _ => Err("a plain request on port 80 must be origin-form or http://host/path"),
        };
    }
    let mut values = req.headers().get_all(http::header::HOST).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err("exactly one Host header is required");
    };
    let authority: http::uri::Authority = value
        .to_str()
        .ok()
        .filter(|v| !v.contains('@'))
        .and_then(|v| v.parse().ok())
        .ok_or("the Host header is not a host name")?;
    if !matches!(authority.port_u16(), None | Some(80)) {
        return Err("the Host header must name a host on port 80");
    }
    Ok(authority.host().to_ascii_lowercase())
}

async fn plain(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    lane: Arc<Lane>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    match plain_target(&req) {
        Ok(host) => forward::handle(proxy, identity, Target::plain(host, lane), req).await,
        Err(reason) => {
            let host = req.uri().host().unwrap_or("-").to_ascii_lowercase();
            let record = request_record(
                now(),
                proxy.request_id(),
                &identity.name,
                &host,
                req.method(),
                req.uri(),
            );
            Ok(forward::refuse_head(&proxy, record, reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_table() {
        let rules = |h: &str| ["api.github.com", "github.com"].contains(&h);
        let cases: &[(Option<&str>, Option<&str>)] = &[
            (Some("api.github.com"), None),
            (Some("github.com"), None),
            (None, Some("no TLS server name (SNI)")),
            (Some("evil.example"), Some("no rule")),
            (Some("127.0.0.1"), Some("DNS name")),
            (Some("localhost"), Some("DNS name")),
            (Some("x.localhost"), Some("local machine")),
            (Some("[::1]"), Some("DNS name")),
            (Some("api"), Some("DNS name")),
        ];
        for (sni, refused) in cases {
            let got = sni_refusal(*sni, rules);
            match refused {
                None => assert_eq!(got, None, "{sni:?}"),
                Some(part) => assert!(got.is_some_and(|r| r.contains(part)), "{sni:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn plain_targets_table() {
        let req = |uri: &str, hosts: &[&str]| {
            let mut b = Request::builder().uri(uri);
            for h in hosts {
                b = b.header("host", *h);
            }
            b.body(()).unwrap()
        };
        let cases: &[(&str, &[&str], Result<&str, &str>)] = &[
            ("/x", &["api.github.com"], Ok("api.github.com")),
            ("/x", &["API.GitHub.com:80"], Ok("api.github.com")),
            ("http://github.com/x", &["github.com"], Ok("github.com")),
            (
                "http://github.com:80/x",
                &["evil.example"],
                Ok("github.com"),
            ),
            ("/x", &[], Err("exactly one Host")),
            ("/x", &["a.example", "b.example"], Err("exactly one Host")),
            ("/x", &["api.github.com:8080"], Err("port 80")),
            ("/x", &["user@api.github.com"], Err("not a host name")),
            ("/x", &["bad host"], Err("not a host name")),
            ("https://github.com/x", &["github.com"], Err("origin-form")),
            (
                "http://github.com:8080/x",
                &["github.com"],
                Err("origin-form"),
            ),
        ];
        for (uri, hosts, want) in cases {
            let got = plain_target(&req(uri, hosts));
            match want {
                Ok(host) => assert_eq!(got.as_deref(), Ok(*host), "{uri} {hosts:?}"),
                Err(part) => {
                    assert!(got.is_err_and(|e| e.contains(part)), "{uri} {hosts:?}")
                }
            }
        }
    }
}
