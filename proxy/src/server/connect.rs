//! The outer connection on an identity socket: `CONNECT` (intercepted or
//! spliced) and plain-HTTP absolute-form requests.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio_rustls::TlsAcceptor;

use super::answers::{audit_unavailable, bad_request, denied, refused_identity};
use super::backoff::AcceptBackoff;
use super::client_socket::ClientSocket;
use super::forward::{self, Target};
use super::framing::{Guarded, Observer, MAX_HEAD_BYTES};
use super::idle::Idle;
use super::records::{connect_record, framing_record, now, request_record};
use super::{Identity, Proxy};
use crate::audit::{Outcome, Record};
use crate::body::{self, ProxyBody};
use crate::connect_target::{self, ConnectRefusal, ConnectTarget};
use crate::upstream::Lane;

pub(super) fn http1_server() -> http1::Builder {
    http1_server_reading_heads_within(HEADER_READ_TIMEOUT)
}

/// How long hyper waits for a whole request head, from when it starts
/// waiting (a connection's start, the end of the previous response): a
/// keep-alive connection silent that long between requests is closed, and
/// so is one trickling a head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// [`http1_server`] with another header-read timeout (for tests).
pub(super) fn http1_server_reading_heads_within(timeout: Duration) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        // hyper sets the timeout again for every head it waits for; this
        // timer moves one deadline per connection instead.
        .timer(super::deadline::ConnectionTimer::default())
        .header_read_timeout(timeout)
        // The framing guard's limits: one number each for both, so hyper
        // never refuses (431) a head the guard passed, however it arrives.
        // Header lines are left at hyper's default, which is the guard's
        // MAX_HEADERS (a test holds them equal): set, even to that, hyper
        // fills its two parse arrays an element at a time on every head,
        // 2% of the proxy's user time; unset, they are inline arrays.
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    builder
}

/// The permits an open client connection holds (the identity's and the
/// proxy's); a tunnel it turns into holds them until it ends.
pub(super) struct Held {
    _identity: OwnedSemaphorePermit,
    _proxy: OwnedSemaphorePermit,
}

/// Takes a connection's permits, or says which cap is full.
fn admit(proxy: &Proxy, identity: &Identity) -> Result<Arc<Held>, &'static str> {
    let own = identity
        .connections
        .clone()
        .try_acquire_owned()
        .map_err(|_| "this identity has as many connections open as it may (limits.connections_per_identity, or its share of the open-file limit); the connection was closed")?;
    let all = proxy
        .connections
        .clone()
        .try_acquire_owned()
        .map_err(|_| "the proxy has as many connections open as its open-file limit allows; the connection was closed")?;
    Ok(Arc::new(Held {
        _identity: own,
        _proxy: all,
    }))
}

/// Whether the connection's peer (SO_PEERCRED) is the user the identity is
/// for, when it is bound to one: else why not (logged with the peer's ids,
/// and put on record by the caller).
fn peer_admitted(identity: &Identity, stream: &UnixStream) -> Result<(), &'static str> {
    let Some(peer) = identity.peer_uid else {
        return Ok(());
    };
    match stream.peer_cred() {
        Ok(c) if gatehouse_types::peer::identity_admitted(c.uid(), Some(peer)) => Ok(()),
        Ok(c) => {
            tracing::warn!(identity = %identity.name, uid = c.uid(), gid = c.gid(), pid = c.pid(),
                expected = peer, "refused a peer of an identity socket (not the user it is for)");
            Err("the connecting user is not the one this identity is for; the connection was closed")
        }
        Err(error) => {
            tracing::warn!(identity = %identity.name, %error, "refused an identity peer whose credentials are unknown");
            Err("the connecting user could not be known; the connection was closed")
        }
    }
}

/// Which of an identity's sockets a listener is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// The HTTP proxy (`CONNECT`, absolute-form).
    Proxy,
    /// Connections the sandbox's relay took on ports 443 and 80
    /// ([`super::transparent`]).
    Transparent,
}

/// Accepts connections until the identity is revoked. A connection over
/// the identity's cap (or the proxy's) is closed at once, its refusal on
/// record; accept failures back off instead of spinning.
pub(super) async fn accept_loop(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    listener: UnixListener,
    endpoint: Endpoint,
) {
    let mut revoked = identity.revoked();
    let mut backoff = AcceptBackoff::new("identity");
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff.succeeded();
                    if let Err(reason) = peer_admitted(&identity, &stream) {
                        drop(stream);
                        let record = framing_record(now(), proxy.request_id(), &identity.name, "-", None, reason);
                        let _ = proxy.record_refusal(record);
                        continue;
                    }
                    match admit(&proxy, &identity) {
                        Ok(held) => {
                            let socket = match ClientSocket::new(stream) {
                                Ok(socket) => socket,
                                Err(error) => {
                                    tracing::warn!(%error, identity = %identity.name, "a client connection could not be registered; closed");
                                    continue;
                                }
                            };
                            if endpoint == Endpoint::Proxy {
                                tokio::spawn(serve_outer(proxy.clone(), identity.clone(), socket, held));
                            } else {
                                tokio::spawn(super::transparent::serve(proxy.clone(), identity.clone(), socket, held));
                            }
                        }
                        Err(reason) => {
                            drop(stream);
                            let record = framing_record(now(), proxy.request_id(), &identity.name, "-", None, reason);
                            let _ = proxy.record_refusal(record);
                        }
                    }
                }
                Err(error) => backoff.failed(&error).await,
            },
            _ = wait_revoked(&mut revoked) => break,
        }
    }
}

/// Resolves once the identity is revoked (or its registry entry is gone).
pub(super) async fn wait_revoked(revoked: &mut watch::Receiver<bool>) {
    let _ = revoked.wait_for(|r| *r).await;
}

async fn serve_outer(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    stream: ClientSocket,
    held: Arc<Held>,
) {
    let mut revoked = identity.revoked();
    // Every byte of the connection, the tunnels it becomes included, passes
    // the idle clock.
    let stream = Idle::new(stream, proxy.limits.idle());
    let guarded = Guarded::observed(
        TokioIo::new(stream),
        framing_observer(proxy.clone(), identity.clone(), "-"),
    );
    let lane = identity.lane(&proxy.upstreams);
    let service = {
        let identity = identity.clone();
        let lane = lane.clone();
        service_fn(move |req| {
            outer(
                proxy.clone(),
                identity.clone(),
                held.clone(),
                lane.clone(),
                req,
            )
        })
    };
    let conn = http1_server()
        .serve_connection(guarded, service)
        .with_upgrades();
    tokio::select! {
        result = lane.drive(conn) => {
            if let Err(error) = result {
                tracing::debug!(%error, identity = %identity.name, "client connection ended");
            }
        }
        _ = wait_revoked(&mut revoked) => {}
    }
}

/// Puts a request the framing guard refused on the record: the guard makes
/// hyper answer it 400 and close, so no handler sees it. `host` is the
/// connection's target (`-` on the outer socket).
pub(super) fn framing_observer(proxy: Arc<Proxy>, identity: Arc<Identity>, host: &str) -> Observer {
    let host = host.to_string();
    Box::new(move |violation, line| {
        let record = framing_record(
            now(),
            proxy.request_id(),
            &identity.name,
            &host,
            line,
            violation.reason(),
        );
        if proxy.record_refusal(record).is_err() {
            tracing::error!(identity = %identity.name, "a framing refusal could not be recorded");
        }
    })
}

async fn outer(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    held: Arc<Held>,
    lane: Arc<Lane>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    if *identity.revoked.borrow() {
        return Ok(closing(refused_identity()));
    }
    if req.method() == Method::CONNECT {
        let answer = connect(proxy, identity, held, req).await;
        // After a CONNECT head the framing guard passes the stream through
        // untouched (it is a tunnel); a refused CONNECT must therefore end
        // the connection, or the next request would go unguarded.
        return Ok(if answer.status().is_success() {
            answer
        } else {
            closing(answer)
        });
    }
    // Plain HTTP: only absolute-form `http://host/...` on the default port.
    let uri = req.uri();
    let host = match (uri.scheme_str(), uri.host(), uri.port_u16()) {
        (Some("http"), Some(host), None | Some(80)) => host.to_ascii_lowercase(),
        _ => {
            let reason =
                "a proxy request must be CONNECT host:443 or absolute-form http://host/path";
            let host = uri.host().unwrap_or("-").to_ascii_lowercase();
            let record = request_record(
                now(),
                proxy.request_id(),
                &identity.name,
                &host,
                req.method(),
                uri,
            );
            return Ok(forward::refuse_head(&proxy, record, reason));
        }
    };
    let target = Target::plain(host, lane);
    forward::handle(proxy, identity, target, req).await
}

/// Decides a CONNECT: splice, intercept, or refuse.
async fn connect(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    held: Arc<Held>,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let decided = connect_target::decide(
        req.uri(),
        |host, port| identity.tunnel_hosts.iter().any(|t| t.matches(host, port)),
        |host| proxy.policy.names_host(host, &identity.scope.rule_sets),
    );
    // What the record names as asked for: the target as sent (its port
    // included, `host:22` stays `host:22`).
    let asked = req.uri().to_string();
    let host = match decided {
        Err(ConnectRefusal::NotAuthorityForm) => {
            let outcome = Outcome::Deny {
                reason: connect_target::NOT_AUTHORITY_FORM.into(),
                rule_sets_tried: Vec::new(),
            };
            let record = connect_line(&proxy, &identity, "-", &asked, outcome);
            if proxy.record_refusal(record).is_err() {
                return audit_unavailable();
            }
            return bad_request(connect_target::NOT_AUTHORITY_FORM);
        }
        Err(ConnectRefusal::Denied { host, reason }) => {
            return deny_connect(&proxy, &identity, &host, &asked, reason)
        }
        Ok(ConnectTarget::Splice { host, port }) => {
            // Connect first, so a refused upstream (non-public address,
            // nothing listening) is a clear answer rather than a 200 and a
            // closed tunnel.
            let upstream = match proxy.upstreams.connect_tcp(&host, port).await {
                Ok(s) => s,
                Err(error) => {
                    let reason = format!("tunnel refused: {}", super::with_causes(&error));
                    return deny_connect(&proxy, &identity, &host, &asked, &reason);
                }
            };
            // No tunnel that is not on record.
            let authority = format!("{host}:{port}");
            if audit_tunnel(&proxy, &identity, &host, &authority).is_err() {
                return audit_unavailable();
            }
            let upgrade = hyper::upgrade::on(req);
            tokio::spawn(splice(identity, upgrade, upstream, held));
            return established();
        }
        Ok(ConnectTarget::Intercept { host }) => host,
    };
    let upgrade = hyper::upgrade::on(req);
    tokio::spawn(intercept(proxy, identity, host, upgrade, held));
    established()
}

/// The answer with `Connection: close`: hyper closes the connection after
/// it and reads nothing more from it.
fn closing(mut answer: Response<ProxyBody>) -> Response<ProxyBody> {
    answer.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    answer
}

fn established() -> Response<ProxyBody> {
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = StatusCode::OK;
    resp
}

async fn splice(
    identity: Arc<Identity>,
    upgrade: hyper::upgrade::OnUpgrade,
    mut upstream: tokio::net::TcpStream,
    _held: Arc<Held>,
) {
    let mut revoked = identity.revoked();
    let work = async {
        let client = match upgrade.await {
            Ok(u) => u,
            Err(error) => return tracing::debug!(%error, "tunnel upgrade failed"),
        };
        let mut client = TokioIo::new(client);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    };
    tokio::select! {
        () = work => {}
        _ = wait_revoked(&mut revoked) => {}
    }
}

async fn intercept(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    host: String,
    upgrade: hyper::upgrade::OnUpgrade,
    _held: Arc<Held>,
) {
    let mut revoked = identity.revoked();
    let work = async {
        let handshake = async {
            let upgraded = upgrade.await.map_err(|e| e.to_string())?;
            let config = proxy.ca.server_config(&host).map_err(|error| {
                let error = super::with_causes(&error);
                tracing::error!(%error, "minting a leaf certificate");
                error
            })?;
            TlsAcceptor::from(config)
                .accept(TokioIo::new(upgraded))
                .await
                .map_err(|e| e.to_string())
        };
        // A client that stalls its handshake does not hold the connection.
        let tls = match tokio::time::timeout(proxy.limits.tls_handshake(), handshake).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => return tracing::debug!(%error, %host, "client TLS handshake failed"),
            Err(_) => return tracing::debug!(%host, "client TLS handshake timed out"),
        };
        // The CONNECT authority is the target; a different (or missing) SNI
        // means the client believes it talks to someone else.
        let sni = tls.get_ref().1.server_name().map(str::to_ascii_lowercase);
        if sni.as_deref() != Some(host.as_str()) {
            audit_refused_tls(&proxy, &identity, &host, sni.as_deref());
            return;
        }
        serve_intercepted(proxy, identity.clone(), host, tls).await;
    };
    tokio::select! {
        () = work => {}
        _ = wait_revoked(&mut revoked) => {}
    }
}

/// Serves the requests inside an accepted TLS connection to `host`: each
/// one's Host must name it ([`super::head::check`]).
pub(super) async fn serve_intercepted<S>(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    host: String,
    tls: tokio_rustls::server::TlsStream<S>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let lane = identity.lane(&proxy.upstreams);
    let target = Target::tunnel(host.clone(), lane.clone());
    let observer = framing_observer(proxy.clone(), identity.clone(), &host);
    let service = service_fn(move |req| {
        forward::handle(proxy.clone(), identity.clone(), target.clone(), req)
    });
    let serving =
        http1_server().serve_connection(Guarded::observed(TokioIo::new(tls), observer), service);
    if let Err(error) = lane.drive(serving).await {
        tracing::debug!(%error, %host, "intercepted connection ended");
    }
}

// === audit of CONNECTs ===

/// A CONNECT's audit line, for the proxy's audit writer.
pub(super) fn connect_line(
    proxy: &Proxy,
    identity: &Identity,
    host: &str,
    authority: &str,
    outcome: Outcome,
) -> Record {
    connect_record(
        now(),
        proxy.request_id(),
        &identity.name,
        host,
        authority,
        outcome,
    )
}

/// Records a refused CONNECT and answers 403.
fn deny_connect(
    proxy: &Proxy,
    identity: &Identity,
    host: &str,
    authority: &str,
    reason: &str,
) -> Response<ProxyBody> {
    let outcome = Outcome::Deny {
        reason: reason.into(),
        rule_sets_tried: identity.scope.rule_sets.clone(),
    };
    if proxy
        .record_refusal(connect_line(proxy, identity, host, authority, outcome))
        .is_err()
    {
        return audit_unavailable();
    }
    denied(
        "CONNECT",
        host,
        authority,
        reason,
        &identity.scope.rule_sets,
    )
}

/// Records a spliced tunnel (it carries no credential and is not inspected).
fn audit_tunnel(
    proxy: &Proxy,
    identity: &Identity,
    host: &str,
    authority: &str,
) -> Result<(), super::audit_writer::AuditUnavailable> {
    let outcome = Outcome::Allow {
        rule_set: "(tunnel)".into(),
        rule: "tunnel_hosts".into(),
    };
    let record = connect_line(proxy, identity, host, authority, outcome);
    if let Record::Request(r) = &record {
        crate::metrics::request(r);
    }
    proxy.audit.record(record)
}

fn audit_refused_tls(proxy: &Proxy, identity: &Identity, host: &str, sni: Option<&str>) {
    let outcome = Outcome::Deny {
        reason: format!("TLS server name {sni:?} does not match the CONNECT host"),
        rule_sets_tried: identity.scope.rule_sets.clone(),
    };
    let authority = format!("{host}:443");
    let _ = proxy.record_refusal(connect_line(proxy, identity, host, &authority, outcome));
}

#[cfg(test)]
mod tests;
