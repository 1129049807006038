//! One intercepted (or plain-HTTP) request: check it against the identity's
//! rules, inspect the body head where a rule asks, strip what the client
//! must not send, inject the credential, record, forward, and stream the
//! answer back with auth-bearing headers stripped and secrets redacted.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use std::sync::atomic::{AtomicU64, Ordering};

use super::policy::{BodyVerdict, Grant, RequestView};
use super::{Identity, Proxy};
use crate::audit::{rfc3339_utc, CompletionRecord, MessageRecord, Outcome, Record, RequestRecord};
use crate::body::{self, CountingBody, PrefixedBody, ProxyBody, RedactingBody};
use crate::receive_pack;
use crate::redact::{contains_secret, redact_all, redact_body, Redactor};

/// Largest body buffered to hash a message or to find the created id.
const MESSAGE_BODY_LIMIT: usize = 1 << 20;

/// Answers up to this size with a declared length are sent in one piece.
const SMALL_BODY: usize = 64 * 1024;

/// Request headers never forwarded: credentials the client may carry,
/// forwarding metadata, and hop-by-hop headers.
const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "cookie2",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "private-token",
    "x-auth-token",
    "x-access-token",
    "x-github-token",
    "forwarded",
    "x-real-ip",
    "via",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// Response headers never passed back: credentials or session state from
/// the upstream, hop-by-hop headers, and the length (redaction may change it).
const DROPPED_RESPONSE_HEADERS: &[&str] = &[
    "set-cookie",
    "set-cookie2",
    "www-authenticate",
    "proxy-authenticate",
    "authentication-info",
    "proxy-authentication-info",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Where requests on a connection go: the CONNECT authority (or the
/// absolute-form URI's host) is the single source of truth.
#[derive(Clone, Debug)]
pub(super) struct Target {
    host: Arc<str>,
    tunnel: bool,
}

impl Target {
    pub(super) fn tunnel(host: String) -> Self {
        Self {
            host: host.into(),
            tunnel: true,
        }
    }
    pub(super) fn plain(host: String) -> Self {
        Self {
            host: host.into(),
            tunnel: false,
        }
    }
}

fn json_response(status: StatusCode, value: &Value, close: bool) -> Response<ProxyBody> {
    let mut resp = Response::new(body::full(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if close {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// 400 with the connection closed: the request's framing or target cannot
/// be trusted, so neither can anything after it on the same connection.
pub(super) fn bad_request(reason: &str) -> Response<ProxyBody> {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"error": "gatehouse_bad_request", "reason": reason}),
        true,
    )
}

pub(super) fn refused_identity() -> Response<ProxyBody> {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({"error": "gatehouse_denied", "reason": "this identity has been revoked"}),
        true,
    )
}

fn denied(
    method: &str,
    host: &str,
    path: &str,
    reason: &str,
    tried: &[String],
) -> Response<ProxyBody> {
    json_response(
        StatusCode::FORBIDDEN,
        &json!({
            "error": "gatehouse_denied",
            "reason": reason,
            "method": method,
            "host": host,
            "path": path,
            "rule_sets_tried": tried,
        }),
        false,
    )
}

fn now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339_utc(now.as_millis() as u64)
}

fn query_keys(query: Option<&str>) -> Vec<String> {
    query
        .map(|q| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split('=').next().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn connect_record(proxy: &Proxy, identity: &Identity, host: &str, outcome: Outcome) -> Record {
    Record::Request(RequestRecord {
        time: now(),
        request_id: proxy.request_id(),
        identity: identity.name.clone(),
        method: "CONNECT".into(),
        host: host.into(),
        path: format!("{host}:443"),
        query_keys: Vec::new(),
        outcome,
        message: None,
    })
}

/// Records a refused CONNECT and answers 403.
pub(super) fn deny_connect(
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
        .audit
        .record(connect_record(proxy, identity, host, outcome))
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
pub(super) fn audit_tunnel(proxy: &Proxy, identity: &Identity, host: &str) {
    let outcome = Outcome::Allow {
        rule_set: "(tunnel)".into(),
        rule: "tunnel_hosts".into(),
    };
    let _ = proxy
        .audit
        .record(connect_record(proxy, identity, host, outcome));
}

pub(super) fn audit_refused_tls(proxy: &Proxy, identity: &Identity, host: &str, sni: Option<&str>) {
    let outcome = Outcome::Deny {
        reason: format!("TLS server name {sni:?} does not match the CONNECT host"),
        rule_sets_tried: identity.scope.rule_sets.clone(),
    };
    let _ = proxy
        .audit
        .record(connect_record(proxy, identity, host, outcome));
}

/// The completion line of one forwarded request.
struct Completion {
    proxy: Arc<Proxy>,
    request_id: String,
    started: Instant,
    sent: Arc<AtomicU64>,
}

impl Completion {
    fn record(
        &self,
        status: u16,
        received: u64,
        message_id: Option<String>,
        error: Option<String>,
    ) {
        let record = Record::Completion(CompletionRecord {
            time: now(),
            request_id: self.request_id.clone(),
            status,
            bytes_sent: self.sent.load(Ordering::Relaxed),
            bytes_received: received,
            duration_ms: self.started.elapsed().as_millis() as u64,
            message_id,
            error,
        });
        if self.proxy.audit.record(record).is_err() {
            tracing::error!(request_id = %self.request_id, "audit completion record lost");
        }
    }
}

/// Handles one request on an intercepted tunnel or a plain-HTTP request.
pub(super) async fn handle(
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    target: Target,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    if *identity.revoked.borrow() {
        return Ok(refused_identity());
    }
    let started = Instant::now();
    let request_id = proxy.request_id();
    let host: &str = &target.host;
    if target.tunnel && (req.uri().scheme().is_some() || req.uri().authority().is_some()) {
        return Ok(bad_request(
            "absolute-form request targets are refused inside a CONNECT tunnel; send origin-form (/path)",
        ));
    }
    if req.method() == Method::CONNECT {
        return Ok(bad_request("CONNECT inside a tunnel is refused"));
    }
    if let Err(reason) =
        check_host_header(req.headers(), host, if target.tunnel { 443 } else { 80 })
    {
        return Ok(bad_request(reason));
    }
    if req.headers().contains_key(header::TRANSFER_ENCODING)
        && req.headers().contains_key(header::CONTENT_LENGTH)
    {
        return Ok(bad_request("both Content-Length and Transfer-Encoding"));
    }
    if req.headers().get_all(header::CONTENT_LENGTH).iter().count() > 1 {
        return Ok(bad_request("more than one Content-Length"));
    }

    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let view = RequestView {
        method: &method,
        host,
        path: &path,
        query: query.as_deref(),
    };
    let mut record = RequestRecord {
        time: now(),
        request_id: request_id.clone(),
        identity: identity.name.clone(),
        method: method.clone(),
        host: host.to_string(),
        path: path.clone(),
        query_keys: query_keys(query.as_deref()),
        outcome: Outcome::Deny {
            reason: String::new(),
            rule_sets_tried: Vec::new(),
        },
        message: None,
    };
    let deny = |mut record: RequestRecord, reason: &str, tried: &[String]| {
        record.outcome = Outcome::Deny {
            reason: reason.to_string(),
            rule_sets_tried: tried.to_vec(),
        };
        if proxy.audit.record(Record::Request(record)).is_err() {
            return audit_unavailable();
        }
        denied(&method, host, &path, reason, tried)
    };
    let grant = match proxy.policy.check(&view, &identity.scope) {
        Ok(grant) => grant,
        Err(refusal) => return Ok(deny(record, &refusal.reason, &refusal.rule_sets_tried)),
    };

    let (parts, incoming) = req.into_parts();
    let outgoing_body = match inspect_body(&parts.headers, incoming, &grant).await {
        Ok(inspected) => inspected,
        Err(refusal) => {
            let answer = deny(record, &refusal.reason, &identity.scope.rule_sets);
            return Ok(match refusal.git_report {
                // git prints a report's reasons next to each ref, where a
                // 403 would only say "RPC failed".
                Some(report) if answer.status() == StatusCode::FORBIDDEN => report(&refusal.reason),
                _ => answer,
            });
        }
    };
    if let (Some(message), Some(hash)) = (&grant.message, &outgoing_body.sha256) {
        let mut target = message.target.clone();
        if let Some(pointer) = &message.target_body_pointer {
            let value = outgoing_body
                .whole
                .as_ref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                .and_then(|v| v.pointer(pointer).cloned());
            match value {
                Some(Value::String(s)) => target = format!("{target}:{s}"),
                Some(other) => target = format!("{target}:{other}"),
                None => {
                    let reason = format!("the message body has no {pointer} naming its target");
                    return Ok(deny(record, &reason, &identity.scope.rule_sets));
                }
            }
        }
        record.message = Some(MessageRecord {
            kind: message.kind.clone(),
            target,
            body_sha256: hash.clone(),
        });
    }
    record.outcome = Outcome::Allow {
        rule_set: grant.rule_set.clone(),
        rule: grant.rule.clone(),
    };

    let authorization = match proxy
        .credentials
        .authorization(
            &grant.credential,
            grant.inject,
            identity.scope.variables.get("repo").map(String::as_str),
            &grant.permissions,
        )
        .await
    {
        Ok(value) => value,
        Err(error) => {
            let error = redact_text(&proxy, &super::with_causes(&error));
            tracing::error!(%error, "credential unavailable");
            return Ok(upstream_failed(
                &proxy,
                "the credential for this rule is unavailable",
            ));
        }
    };

    let uri: Uri = match format!(
        "https://{host}{}",
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    )
    .parse()
    {
        Ok(uri) => uri,
        Err(_) => return Ok(bad_request("request target cannot be forwarded")),
    };
    let mut headers = forwardable_headers(&parts.headers);
    headers.insert(
        header::HOST,
        HeaderValue::from_str(host).unwrap_or(HeaderValue::from_static("invalid")),
    );
    headers.insert(header::AUTHORIZATION, authorization);
    let sent = Arc::new(AtomicU64::new(0));
    let completion = Completion {
        proxy: proxy.clone(),
        request_id: request_id.clone(),
        started,
        sent: sent.clone(),
    };
    let mut upstream_req = Request::new(body::boxed(CountingBody::new(outgoing_body.body, sent)));
    *upstream_req.method_mut() = parts.method.clone();
    *upstream_req.uri_mut() = uri;
    *upstream_req.headers_mut() = headers;

    // Written before forwarding; a message is on disk before it can be sent.
    let record = Record::Request(record);
    let queued = if grant.message.is_some() {
        proxy.audit.record_durably(record).await
    } else {
        proxy.audit.record(record)
    };
    if queued.is_err() {
        return Ok(audit_unavailable());
    }

    let response = match identity.client.send(upstream_req).await {
        Ok(resp) => resp,
        Err(error) => {
            let text = redact_text(&proxy, &format!("{error:?}"));
            tracing::warn!(error = %text, %host, "upstream request failed");
            completion.record(502, 0, None, Some("upstream request failed".into()));
            return Ok(upstream_failed(&proxy, "the upstream could not be reached"));
        }
    };
    let response = if parts.method == Method::GET {
        follow_cross_host_redirect(&identity, host, response).await
    } else {
        Ok(response)
    };
    let response = match response {
        Ok(r) => r,
        Err(reason) => {
            completion.record(502, 0, None, Some(reason.clone()));
            return Ok(upstream_failed(&proxy, &reason));
        }
    };

    let status = response.status();
    let (mut resp_parts, resp_body) = response.into_parts();
    let declared_len = resp_parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let secrets = proxy.credentials.held_secrets();
    strip_response_headers(&mut resp_parts.headers, &secrets);

    if let Some(message) = &grant.message {
        // Message answers are small JSON: read them whole to log the id of
        // the created message, then pass them on.
        let bytes = match http_body_util::Limited::new(resp_body, MESSAGE_BODY_LIMIT)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                completion.record(502, 0, None, Some("response unreadable".into()));
                return Ok(upstream_failed(
                    &proxy,
                    "the upstream answer could not be read",
                ));
            }
        };
        let created = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.pointer(&message.id_pointer).cloned())
            .map(|id| match id {
                Value::String(s) => s,
                other => other.to_string(),
            });
        let redacted = redact_body(&secrets, bytes);
        completion.record(status.as_u16(), redacted.len() as u64, created, None);
        let mut resp = Response::from_parts(resp_parts, body::full(redacted));
        resp.headers_mut().remove(header::CONTENT_LENGTH);
        return Ok(resp);
    }

    // Small answers of known length (most API calls) are read whole and
    // sent with their length: one write to the client instead of a chunked
    // stream and its terminator.
    let bodiless = parts.method == Method::HEAD || matches!(status.as_u16(), 204 | 304);
    if !bodiless && declared_len.is_some_and(|n| n <= SMALL_BODY) {
        let bytes = match http_body_util::Limited::new(resp_body, SMALL_BODY)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                completion.record(502, 0, None, Some("response unreadable".into()));
                return Ok(upstream_failed(
                    &proxy,
                    "the upstream answer could not be read",
                ));
            }
        };
        let redacted = redact_body(&secrets, bytes);
        completion.record(status.as_u16(), redacted.len() as u64, None, None);
        return Ok(Response::from_parts(resp_parts, body::full(redacted)));
    }

    let on_end = Box::new(move |bytes: u64, completed: bool| {
        let error = (!completed).then(|| "the response body did not complete".to_string());
        completion.record(status.as_u16(), bytes, None, error);
    });
    let redactor = Redactor::shared(secrets);
    let body = body::boxed(RedactingBody::new(resp_body, redactor, on_end));
    Ok(Response::from_parts(resp_parts, body))
}

fn audit_unavailable() -> Response<ProxyBody> {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"error": "gatehouse_audit_unavailable", "reason": "the audit log cannot be written; nothing was forwarded"}),
        true,
    )
}

fn upstream_failed(proxy: &Proxy, reason: &str) -> Response<ProxyBody> {
    json_response(
        StatusCode::BAD_GATEWAY,
        &json!({"error": "gatehouse_upstream", "reason": redact_text(proxy, reason)}),
        false,
    )
}

fn redact_text(proxy: &Proxy, text: &str) -> String {
    String::from_utf8_lossy(&redact_all(
        &proxy.credentials.held_secrets(),
        text.as_bytes(),
    ))
    .into_owned()
}

/// The inner `Host` must name the CONNECT target (port optional).
fn check_host_header(
    headers: &HeaderMap,
    host: &str,
    default_port: u16,
) -> Result<(), &'static str> {
    let mut values = headers.get_all(header::HOST).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err("exactly one Host header is required");
    };
    let value = value
        .to_str()
        .map_err(|_| "Host header is not ASCII")?
        .to_ascii_lowercase();
    let port_suffix = format!(":{default_port}");
    let name = value.strip_suffix(port_suffix.as_str()).unwrap_or(&value);
    if name == host {
        Ok(())
    } else {
        Err("the Host header does not match the CONNECT target")
    }
}

fn forwardable_headers(incoming: &HeaderMap) -> HeaderMap {
    // Headers named in Connection are hop-by-hop too.
    let named_in_connection: Vec<String> = incoming
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        let n = name.as_str();
        if DROPPED_REQUEST_HEADERS.contains(&n)
            || n.starts_with("x-forwarded-")
            || n.starts_with("proxy-")
            || named_in_connection.iter().any(|c| c == n)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

fn strip_response_headers(headers: &mut HeaderMap, secrets: &[Vec<u8>]) {
    for name in DROPPED_RESPONSE_HEADERS {
        headers.remove(*name);
    }
    let leaking: Vec<HeaderName> = headers
        .iter()
        .filter(|(_, v)| contains_secret(secrets, v.as_bytes()))
        .map(|(n, _)| n.clone())
        .collect();
    for name in leaking {
        headers.remove(name);
    }
}

struct Inspected {
    body: ProxyBody,
    sha256: Option<String>,
    /// The whole body, when it was read to hash a message.
    whole: Option<Bytes>,
}

/// Reads as much of the body as the rule's check (and message hashing)
/// needs, decides, then replays it ahead of the rest of the stream.
/// Why a body was refused, and for a git push, how to tell git.
struct BodyRefusal {
    reason: String,
    git_report: Option<GitReport>,
}

impl From<String> for BodyRefusal {
    fn from(reason: String) -> Self {
        Self {
            reason,
            git_report: None,
        }
    }
}

impl From<&str> for BodyRefusal {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

type GitReport = Box<dyn FnOnce(&str) -> Response<ProxyBody> + Send>;

fn pkt_line(payload: &[u8]) -> Vec<u8> {
    let mut line = format!("{:04x}", payload.len() + 4).into_bytes();
    line.extend_from_slice(payload);
    line
}

/// A receive-pack answer rejecting every ref update of the push with the
/// reason, in git's report-status format (inside side-band 1, with the
/// reason also on side-band 2 as a `remote:` line, when the client asked
/// for side-band). `None` when the client did not ask for a report.
fn git_push_refusal(prefix: &[u8]) -> Option<GitReport> {
    let parsed = receive_pack::parse_commands(prefix).ok()?;
    let has = |cap: &str| parsed.capabilities.iter().any(|c| c == cap);
    // Rejections read the same in report-status and report-status-v2.
    if !has("report-status") && !has("report-status-v2") {
        return None;
    }
    let sideband = has("side-band-64k") || has("side-band");
    let refs: Vec<String> = parsed.commands.iter().map(|c| c.name.clone()).collect();
    Some(Box::new(move |reason: &str| {
        let one_line: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(900)
            .collect();
        let mut report = pkt_line(b"unpack ok\n");
        for name in &refs {
            report.extend(pkt_line(
                format!("ng {name} gatehouse: {one_line}\n").as_bytes(),
            ));
        }
        report.extend_from_slice(b"0000");
        let body = if sideband {
            let mut framed =
                pkt_line(format!("\x02gatehouse: push refused: {one_line}\n").as_bytes());
            framed.extend(pkt_line(&[b"\x01".as_slice(), &report].concat()));
            framed.extend_from_slice(b"0000");
            framed
        } else {
            report
        };
        let mut resp = Response::new(body::full(body));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-git-receive-pack-result"),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        // The pack was not read: the connection cannot be reused.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }))
}

async fn inspect_body(
    headers: &HeaderMap,
    mut incoming: Incoming,
    grant: &Grant,
) -> Result<Inspected, BodyRefusal> {
    let need_all = grant.message.is_some();
    if grant.body.is_none() && !need_all {
        return Ok(Inspected {
            body: body::boxed(incoming),
            sha256: None,
            whole: None,
        });
    }
    if grant.body.is_some()
        && headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes() != b"identity")
    {
        return Err(
            "encoded (compressed) bodies cannot be inspected and are refused for this rule".into(),
        );
    }
    let limit = grant.body.as_ref().map_or(MESSAGE_BODY_LIMIT, |c| {
        c.limit.max(if need_all { MESSAGE_BODY_LIMIT } else { 0 })
    });
    let mut prefix = BytesMut::new();
    let mut complete = incoming.is_end_stream();
    let mut verdict_ok = grant.body.is_none();
    loop {
        // Nothing to decide on until the first bytes (or the end) arrive.
        let ready = complete || !prefix.is_empty();
        if let (false, true, Some(check)) = (verdict_ok, ready, &grant.body) {
            match (check.check)(&prefix, complete) {
                BodyVerdict::Allow => verdict_ok = true,
                BodyVerdict::Deny(reason) => {
                    return Err(BodyRefusal {
                        reason,
                        git_report: (check.name == "receive_pack")
                            .then(|| git_push_refusal(&prefix))
                            .flatten(),
                    })
                }
                BodyVerdict::NeedMore if complete => {
                    return Err(
                        format!("the {} body ended before it could be checked", check.name).into(),
                    )
                }
                BodyVerdict::NeedMore => {}
            }
        }
        if complete || (verdict_ok && !need_all) {
            break;
        }
        if prefix.len() > limit {
            return Err(format!("the body is too large to be checked (over {limit} bytes)").into());
        }
        match incoming.frame().await {
            None => complete = true,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    prefix.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(format!("reading the request body failed: {e}").into()),
        }
    }
    let sha256 = need_all.then(|| hex::encode(Sha256::digest(&prefix)));
    let prefix = prefix.freeze();
    let whole = need_all.then(|| prefix.clone());
    let body = if complete {
        body::full(prefix)
    } else {
        body::boxed(PrefixedBody::new(prefix, incoming))
    };
    Ok(Inspected {
        body,
        sha256,
        whole,
    })
}

/// GitHub answers some downloads (Actions logs) with a redirect to a
/// short-lived URL on a storage host. Follow it here, without credentials,
/// so the sandbox never needs that host.
async fn follow_cross_host_redirect(
    identity: &Identity,
    host: &str,
    response: Response<Incoming>,
) -> Result<Response<Incoming>, String> {
    if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
        return Ok(response);
    }
    let Some(location) = response
        .headers()
        .get(header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .and_then(|l| l.parse::<Uri>().ok())
    else {
        return Ok(response);
    };
    let Some(next_host) = location.host().map(str::to_ascii_lowercase) else {
        return Ok(response);
    };
    if next_host == host {
        return Ok(response);
    }
    if location.scheme_str() != Some("https") || location.port_u16().is_some_and(|p| p != 443) {
        return Err("the upstream redirected to a non-https location".into());
    }
    let mut req = Request::new(body::empty());
    *req.uri_mut() = location.clone();
    if let Ok(value) = HeaderValue::from_str(&next_host) {
        req.headers_mut().insert(header::HOST, value);
    }
    req.headers_mut().insert(
        header::USER_AGENT,
        HeaderValue::from_static("gatehouse-proxy"),
    );
    identity
        .client
        .send(req)
        .await
        .map_err(|_| format!("following the redirect to {next_host} failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_keys_drop_values() {
        assert_eq!(query_keys(Some("a=1&b&c=x=y&")), vec!["a", "b", "c"]);
        assert!(query_keys(None).is_empty());
    }

    #[test]
    fn host_header_must_match() {
        let mut h = HeaderMap::new();
        assert!(check_host_header(&h, "api.github.com", 443).is_err());
        h.insert(header::HOST, HeaderValue::from_static("API.github.com:443"));
        assert!(check_host_header(&h, "api.github.com", 443).is_ok());
        h.insert(
            header::HOST,
            HeaderValue::from_static("api.github.com:8443"),
        );
        assert!(check_host_header(&h, "api.github.com", 443).is_err());
        h.insert(header::HOST, HeaderValue::from_static("evil.example"));
        assert!(check_host_header(&h, "api.github.com", 443).is_err());
        h.insert(header::HOST, HeaderValue::from_static("api.github.com"));
        h.append(header::HOST, HeaderValue::from_static("api.github.com"));
        assert!(check_host_header(&h, "api.github.com", 443).is_err());
    }

    #[test]
    fn client_credentials_and_forwarding_headers_are_dropped() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("authorization", "Bearer client"),
            ("proxy-authorization", "Basic x"),
            ("cookie", "a=b"),
            ("x-api-key", "k"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-host", "evil"),
            ("forwarded", "for=1"),
            ("connection", "x-custom, keep-alive"),
            ("x-custom", "hop"),
            ("accept", "application/json"),
            ("user-agent", "git/2.39"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let out = forwardable_headers(&h);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["accept", "user-agent"]);
    }

    #[test]
    fn response_headers_carrying_auth_or_secrets_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert("set-cookie", HeaderValue::from_static("s=1"));
        h.insert(
            "www-authenticate",
            HeaderValue::from_static("Basic realm=x"),
        );
        h.insert("x-echo", HeaderValue::from_static("token ghs_secret1"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_response_headers(&mut h, &[b"ghs_secret1".to_vec()]);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["content-type"]);
    }
}
