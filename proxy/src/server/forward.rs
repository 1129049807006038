//! One intercepted (or plain-HTTP) request: check it against the identity's
//! rules, inspect the body head where a rule asks, strip what the client
//! must not send, inject the credential, record, forward, and stream the
//! answer back with auth-bearing headers stripped and secrets redacted.
//!
//! This file is the I/O shell; each step's decision is a pure function in a
//! sibling module: [`super::head`] (request-head checks), the rule book
//! through [`super::policy`], [`super::inspect`] (body checks),
//! [`super::message`] (message records), [`super::headers`] (what crosses),
//! [`super::answers`] (the proxy's own answers).
//!
//! ```text
//! handle:  head::check ─► policy.check ─► inspect_body ─► message_record
//!            (each refusal: audit line, then 400/403/git report)
//! forward: credential ─► upstream request ─► audit line ─► send (+ redirect)
//!            (a Feishu tenant token refused: forget it, send once more,
//!             see [`super::token_retry`])
//! respond: strip headers ─► message id, learnt ids / small body whole /
//!            redacting stream ─► completion line ([`super::respond`])
//! ```

use std::convert::Infallible;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;

use super::answers::{audit_unavailable, bad_request, denied, push_refused, redact_text};
use super::answers::{busy, refused_identity, too_long, too_many, upstream_failed};
use super::completion::Completion;
use super::headers::upstream_request_headers;
use super::headers::{self, method_changing_header};
use super::inspect::{checked_message, inspect_body, BodyRefusal, Busy};
use super::policy::{Grant, RequestView};
use super::records::{now, request_record};
use super::renamed;
use super::respond::{respond, Learning};
use super::token_retry;
use super::{head, Identity, Proxy};
use crate::audit::{Outcome, Record, RequestRecord};
use crate::body::{self, BoxError, CountingBody, ProxyBody};
use crate::credentials::CredentialError;
use crate::graphql::Learn;
use crate::rules::Injection;
use crate::upstream::Lane;

/// Where requests on a connection go: the CONNECT authority (or the
/// absolute-form URI's host) is the single source of truth; and the
/// connection's lane upstream.
#[derive(Clone)]
pub(super) struct Target {
    host: Arc<str>,
    tunnel: bool,
    lane: Arc<Lane>,
}

impl Target {
    pub(super) fn tunnel(host: String, lane: Arc<Lane>) -> Self {
        Self {
            host: host.into(),
            tunnel: true,
            lane,
        }
    }
    pub(super) fn plain(host: String, lane: Arc<Lane>) -> Self {
        Self {
            host: host.into(),
            tunnel: false,
            lane,
        }
    }
}

/// Handles one request on an intercepted tunnel or a plain-HTTP request:
/// the head is checked, the rules decide, the body is inspected where the
/// rule asks and a message is recorded; then the request is forwarded.
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
    let mut record = request_record(
        now(),
        request_id,
        &identity.name,
        host,
        req.method(),
        req.uri(),
    );
    if let Err(reason) = head::check(&req, host, target.tunnel) {
        return Ok(refuse_head(&proxy, record, reason));
    }
    // Held until the answer's head is back: one identity's slow or stalled
    // requests cannot take every worker of the proxy.
    let Ok(_in_flight) = identity.requests.clone().try_acquire_owned() else {
        let reason = "this identity has as many requests in flight as it may (limits.requests_per_identity); retry when one has finished";
        record.outcome = Outcome::Deny {
            reason: reason.into(),
            rule_sets_tried: Vec::new(),
        };
        if proxy.record_refusal(Record::Request(record)).is_err() {
            return Ok(audit_unavailable());
        }
        return Ok(too_many(reason));
    };
    if let Some(name) = method_changing_header(req.headers()) {
        let reason = format!(
            "the header {name} could make the upstream read another method than {}; it is refused",
            req.method()
        );
        return Ok(deny(&proxy, record, &reason, &identity.scope.rule_sets));
    }
    // A renamed repository's id form is checked under its name
    // ([`renamed`]); the request is forwarded as it was asked.
    let named = identity.scope.repo.as_ref().and_then(|repo| {
        renamed::named_path(
            host,
            req.uri().path(),
            |kind, value| identity.created.knows(kind, value),
            repo,
        )
    });
    let view = RequestView {
        method: req.method().as_str(),
        host,
        path: named.as_deref().unwrap_or(req.uri().path()),
        query: req.uri().query(),
    };
    if let Err(reason) = crate::path::check_budget(view.path, view.query) {
        let answer = too_long(&reason);
        return Ok(refuse(&proxy, record, &reason, &[], answer));
    }
    let grant = match proxy.policy.check(&view, &identity.scope) {
        Ok(grant) => grant,
        Err(mut refusal) => {
            if named.is_none() && renamed::by_id(view.path) {
                refusal.reason.push_str(renamed::NOT_LEARNED);
            }
            return Ok(deny(
                &proxy,
                record,
                &refusal.reason,
                &refusal.rule_sets_tried,
            ));
        }
    };
    if let Some(reason) = grant.own.as_ref().and_then(|o| identity.created.refusal(o)) {
        return Ok(deny(&proxy, record, &reason, &identity.scope.rule_sets));
    }
    let (parts, incoming) = req.into_parts();
    // Only a body check reads them: a request without one takes no lock
    // and copies no id.
    let known = match grant.body {
        Some(_) => identity.created.known_ids(),
        None => Default::default(),
    };
    let mut inspected = match inspect_body(
        &parts.headers,
        incoming,
        &grant,
        &known,
        (&proxy.heavy, &identity.name),
    )
    .await
    {
        Ok(inspected) => inspected,
        Err(refusal) => return Ok(refuse_body(&proxy, &identity, record, refusal)),
    };
    // A GraphQL mutation that posts is a message from here on, as a REST
    // rule's call (a rule with a GraphQL check has no `message` of its own).
    let mut grant = grant;
    if let Some(message) = inspected.message.take() {
        grant.message = Some(message);
    }
    if let Some(message) = &grant.message {
        let Some(hash) = &inspected.sha256 else {
            let refusal = BodyRefusal::from("the message body was not read whole to hash it");
            return Ok(refuse_body(&proxy, &identity, record, refusal));
        };
        match checked_message(
            (&proxy.heavy, &identity.name),
            message,
            hash,
            inspected.whole.clone(),
        )
        .await
        {
            Ok(message) => record.message = Some(message),
            Err(refusal) => return Ok(refuse_body(&proxy, &identity, record, refusal)),
        }
    }
    record.outcome = Outcome::Allow {
        rule_set: grant.rule_set.clone(),
        rule: grant.rule.clone(),
    };
    let allowed = Forwarding {
        proxy,
        identity,
        host: target.host.clone(),
        lane: target.lane,
        grant,
        record,
        started,
        replay: inspected.replay,
        learn: inspected.learn,
    };
    Ok(forward(allowed, parts, inspected.body).await)
}

/// Records a request whose head cannot be decided on (target form, Host,
/// framing headers) and answers 400 with the connection closed.
pub(super) fn refuse_head(
    proxy: &Proxy,
    mut record: RequestRecord,
    reason: &str,
) -> Response<ProxyBody> {
    record.outcome = Outcome::Deny {
        reason: reason.to_string(),
        rule_sets_tried: Vec::new(),
    };
    if proxy.record_refusal(Record::Request(record)).is_err() {
        return audit_unavailable();
    }
    bad_request(reason)
}

/// Records a refused request and answers 403 (503 if the audit log cannot
/// be written: nothing is answered that is not on record).
fn deny(
    proxy: &Proxy,
    record: RequestRecord,
    reason: &str,
    tried: &[String],
) -> Response<ProxyBody> {
    let answer = denied(&record.method, &record.host, &record.path, reason, tried);
    refuse(proxy, record, reason, tried, answer)
}

/// Records a refused request and gives `answer` (503 if the audit log
/// cannot be written).
fn refuse(
    proxy: &Proxy,
    mut record: RequestRecord,
    reason: &str,
    tried: &[String],
    answer: Response<ProxyBody>,
) -> Response<ProxyBody> {
    record.outcome = Outcome::Deny {
        reason: reason.to_string(),
        rule_sets_tried: tried.to_vec(),
    };
    if proxy.record_refusal(Record::Request(record)).is_err() {
        return audit_unavailable();
    }
    answer
}

/// Records a refused body; a refused push the client wants a report for is
/// answered with one.
fn refuse_body(
    proxy: &Proxy,
    identity: &Identity,
    record: RequestRecord,
    refusal: BodyRefusal,
) -> Response<ProxyBody> {
    let tried = &identity.scope.rule_sets;
    match refusal.busy {
        Some(Busy::Pool) => {
            return refuse(proxy, record, &refusal.reason, tried, busy(&refusal.reason))
        }
        Some(Busy::OwnShare) => {
            return refuse(
                proxy,
                record,
                &refusal.reason,
                tried,
                too_many(&refusal.reason),
            )
        }
        None => {}
    }
    let answer = deny(proxy, record, &refusal.reason, tried);
    match refusal.git_report {
        Some(report) if answer.status() == StatusCode::FORBIDDEN => {
            push_refused(&report, &refusal.reason)
        }
        _ => answer,
    }
}

/// An allowed request on its way upstream.
struct Forwarding {
    proxy: Arc<Proxy>,
    identity: Arc<Identity>,
    host: Arc<str>,
    lane: Arc<Lane>,
    grant: Grant,
    /// Its audit line, with the decision and any message record.
    record: RequestRecord,
    started: Instant,
    /// The whole request body, when it can be sent again.
    replay: Option<Bytes>,
    /// Ids to take from the answer into the identity's own set.
    learn: Vec<Learn>,
}

/// What every attempt at sending one allowed request shares.
pub(super) struct Attempt<'a> {
    pub(super) proxy: &'a Arc<Proxy>,
    identity: &'a Identity,
    host: &'a str,
    lane: &'a Lane,
    grant: &'a Grant,
    parts: &'a Parts,
    uri: Uri,
    learn: &'a [Learn],
}

/// An attempt sent: its completion line (still to write), the credential
/// it carried and the answer.
pub(super) struct Sent {
    pub(super) completion: Completion,
    pub(super) authorization: HeaderValue,
    pub(super) response: Response<Incoming>,
}

impl Attempt<'_> {
    /// Injects the credential, writes the request's audit line and sends it.
    pub(super) async fn send(
        &self,
        record: RequestRecord,
        started: Instant,
        body: ProxyBody,
    ) -> Result<Sent, Response<ProxyBody>> {
        let authorization = match credential(self.proxy, self.identity, self.grant).await {
            Ok(value) => value,
            Err(Unavailable::Refused(reason)) => {
                let tried = &self.identity.scope.rule_sets;
                return Err(deny(self.proxy, record, &reason, tried));
            }
            Err(Unavailable::Failed(answer)) => return Err(answer),
        };
        let sent = Arc::new(AtomicU64::new(0));
        let mut completion = Completion {
            proxy: self.proxy.clone(),
            request_id: record.request_id.clone(),
            identity_kind: crate::metrics::identity_kind(&record.identity),
            started,
            sent: sent.clone(),
            note: None,
        };
        let mut upstream_req = Request::new(body::boxed(CountingBody::new(body, sent)));
        *upstream_req.method_mut() = self.parts.method.clone();
        *upstream_req.uri_mut() = self.uri.clone();
        *upstream_req.headers_mut() =
            upstream_request_headers(&self.parts.headers, self.host, authorization.clone());

        // Written before forwarding; a message is on disk before it can be sent.
        crate::metrics::request(&record);
        let record = Record::Request(record);
        let queued = if self.grant.message.is_some() {
            self.proxy.audit.record_durably(record).await
        } else {
            self.proxy.audit.record(record)
        };
        if queued.is_err() {
            return Err(audit_unavailable());
        }
        let method = &self.parts.method;
        let origin = Origin {
            identity: &self.identity.name,
            grant: self.grant,
        };
        let response = send(
            &mut completion,
            origin,
            self.lane,
            self.host,
            method,
            upstream_req,
        )
        .await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            // A minted token GitHub no longer takes: the next request mints anew.
            let credentials = &self.proxy.credentials;
            credentials
                .rejected(&self.grant.credential, &authorization)
                .await;
        }
        Ok(Sent {
            completion,
            authorization,
            response,
        })
    }

    /// Passes an answer on ([`respond`]).
    pub(super) async fn respond<B>(
        &self,
        completion: Completion,
        mut response: Response<B>,
    ) -> Response<ProxyBody>
    where
        B: hyper::body::Body<Data = Bytes> + Send + Sync + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        headers::name_repository_links(response.headers_mut(), self.parts.uri.path());
        let own_host = response.extensions().get::<FromAnotherHost>().is_none();
        if let Some(repo) = self.identity.scope.repo.as_ref().filter(|_| own_host) {
            let location = response
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|v| v.to_str().ok());
            let path = self.parts.uri.path();
            let learned = renamed::learned(response.status(), location, self.host, path, repo);
            // The new form is the upstream's text: one holding a secret is
            // not learnt, nor saved with the identity. (The held secrets
            // are asked for only then: not on every answer's path.)
            let learned = learned.filter(|(_, value)| {
                !self
                    .proxy
                    .credentials
                    .held_secrets()
                    .occur_in_ignoring_case(value.as_bytes())
            });
            if let Some((kind, value)) = learned {
                if self.identity.created.record(kind, &value) {
                    tracing::info!(
                        identity = %self.identity.name,
                        kind,
                        form = %value,
                        "GitHub redirected the identity's repository: the form is learned as it"
                    );
                    // Kept with the identity's objects; a failed save is
                    // logged and the id stays learned while this runs.
                    let _ = self.proxy.save_identities().done().await;
                }
            }
        }
        let learning = Learning {
            message: self.grant.message.as_ref(),
            learn: self.learn,
            created: &self.identity.created,
        };
        respond(completion, &self.parts.method, learning, response).await
    }

    /// Forgets the token Feishu refused, for the next request to get a new one.
    pub(super) async fn forget(&self, authorization: &HeaderValue) {
        let credentials = &self.proxy.credentials;
        credentials
            .token_refused(&self.grant.credential, authorization)
            .await;
    }
}

/// Sends an allowed request and passes the answer on; a Feishu tenant
/// token refused before its expiry is replaced and the request sent once
/// more ([`token_retry::retry_refused_token`]).
async fn forward(allowed: Forwarding, parts: Parts, body: ProxyBody) -> Response<ProxyBody> {
    let Forwarding {
        proxy,
        identity,
        host,
        lane,
        grant,
        record,
        started,
        replay,
        learn,
    } = allowed;
    let Some(uri) = head::upstream_uri(&host, &parts.uri) else {
        return bad_request("request target cannot be forwarded");
    };
    let attempt = Attempt {
        proxy: &proxy,
        identity: &identity,
        host: &host,
        lane: &lane,
        grant: &grant,
        parts: &parts,
        uri,
        learn: &learn,
    };
    let retry = (grant.inject == Injection::FeishuTenant).then(|| record.clone());
    let first = match attempt.send(record, started, body).await {
        Ok(sent) => sent,
        Err(answer) => return answer,
    };
    match retry {
        None => attempt.respond(first.completion, first.response).await,
        Some(record) => token_retry::retry_refused_token(&attempt, first, record, replay).await,
    }
}

/// Why a rule's credential cannot be injected.
enum Unavailable {
    /// The platform refused to issue it for this request (GitHub's 422 on
    /// permissions the App was not granted): a denial, with this reason.
    Refused(String),
    /// Anything else: the 502 to answer.
    Failed(Response<ProxyBody>),
}

/// The `Authorization` value of the rule's credential; a refusal to mint
/// it, said as such; or the 502 saying it is unavailable (the cause is
/// logged, redacted, never answered).
async fn credential(
    proxy: &Proxy,
    identity: &Identity,
    grant: &Grant,
) -> Result<HeaderValue, Unavailable> {
    let authorization = proxy
        .credentials
        .authorization(
            &grant.credential,
            grant.inject,
            identity.scope.repo.as_ref().map(|r| r.as_str()),
            &grant.permissions,
        )
        .await;
    authorization.map_err(|error| {
        let secrets = proxy.credentials.held_secrets();
        if let CredentialError::Refused {
            status: 422,
            message,
            ..
        } = &error
        {
            let reason = format!(
                "GitHub refused to mint an installation token with the permissions of this identity's rule sets ({}): {message}",
                permissions_text(&grant.permissions)
            );
            let reason = redact_text(&secrets, &reason);
            tracing::warn!(%reason, credential = %grant.credential, "token refused");
            return Unavailable::Refused(reason);
        }
        let error = redact_text(&secrets, &super::with_causes(&error));
        tracing::error!(%error, "credential unavailable");
        Unavailable::Failed(upstream_failed(
            &secrets,
            "the credential for this rule is unavailable",
        ))
    })
}

/// `contents: write, issues: read`.
fn permissions_text(permissions: &std::collections::BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = permissions
        .iter()
        .map(|(p, a)| format!("{p}: {a}"))
        .collect();
    pairs.join(", ")
}

/// Who asked for a request, and by which rule: what the line of a
/// redirect the proxy follows for it says.
struct Origin<'a> {
    identity: &'a str,
    grant: &'a Grant,
}

/// Sends the request; a GET redirected to another host is followed there,
/// as a request of its own: its line is written before it is sent, the
/// first request's completion names it, and `completion` becomes its.
/// A failure is recorded as the request's completion and answered 502.
async fn send(
    completion: &mut Completion,
    origin: Origin<'_>,
    lane: &Lane,
    host: &str,
    method: &Method,
    request: Request<ProxyBody>,
) -> Result<Response<Incoming>, Response<ProxyBody>> {
    let secrets = completion.proxy.credentials.held_secrets();
    let response = match lane.send(host, request).await {
        Ok(resp) => resp,
        Err(error) => {
            let text = redact_text(&secrets, &super::with_causes(&error));
            tracing::warn!(error = %text, %host, "upstream request failed");
            completion.record(502, 0, None, Some("upstream request failed".into()));
            return Err(upstream_failed(
                &secrets,
                "the upstream could not be reached",
            ));
        }
    };
    if method != Method::GET {
        return Ok(response);
    }
    let fail = |completion: &Completion, reason: String| {
        completion.record(502, 0, None, Some(reason.clone()));
        upstream_failed(&secrets, &reason)
    };
    let (location, next_host) = match cross_host_redirect(host, &response) {
        Ok(Some(target)) => target,
        Ok(None) => return Ok(response),
        Err(reason) => return Err(fail(completion, reason)),
    };
    // Neither to the other host nor into the log: a location holding a
    // credential (an upstream echoing it) is not followed.
    if secrets.occur_in_ignoring_case(location.to_string().as_bytes()) {
        let reason = "the upstream redirected to a location holding a credential; not followed";
        return Err(fail(completion, reason.into()));
    }
    let followed = completion.proxy.request_id();
    let mut record = request_record(
        now(),
        followed.clone(),
        origin.identity,
        &next_host,
        &Method::GET,
        &location,
    );
    record.outcome = Outcome::Allow {
        rule_set: origin.grant.rule_set.clone(),
        rule: origin.grant.rule.clone(),
    };
    crate::metrics::request(&record);
    if completion
        .proxy
        .audit
        .record(Record::Request(record))
        .is_err()
    {
        let why =
            "the redirect to another host was not followed: the audit log could not be written";
        completion.record(503, 0, None, Some(why.into()));
        return Err(audit_unavailable());
    }
    let redirected = response.status().as_u16();
    // The redirect's own body is not passed on.
    drop(response);
    let note = format!("redirected to another host; followed as {followed}");
    completion.record(redirected, 0, None, Some(note));
    *completion = Completion {
        proxy: completion.proxy.clone(),
        request_id: followed,
        identity_kind: completion.identity_kind,
        started: Instant::now(),
        sent: Arc::new(AtomicU64::new(0)),
        note: None,
    };
    let mut req = Request::new(body::empty());
    *req.uri_mut() = location;
    if let Ok(value) = HeaderValue::from_str(&next_host) {
        req.headers_mut().insert(header::HOST, value);
    }
    req.headers_mut().insert(
        header::USER_AGENT,
        HeaderValue::from_static("gatehouse-proxy"),
    );
    req.headers_mut().insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let mut answer = lane.send(&next_host, req).await.map_err(|_| {
        fail(
            completion,
            format!("following the redirect to {next_host} failed"),
        )
    })?;
    answer.extensions_mut().insert(FromAnotherHost);
    Ok(answer)
}

/// GitHub answers some downloads (Actions logs) with a redirect to a
/// short-lived URL on a storage host. The proxy follows it, without
/// credentials, so the sandbox never needs that host: this is where to,
/// if the answer is such a redirect (`None`: it is passed on as it is).
fn cross_host_redirect(
    host: &str,
    response: &Response<Incoming>,
) -> Result<Option<(Uri, String)>, String> {
    if !matches!(response.status().as_u16(), 301 | 302 | 303 | 307 | 308) {
        return Ok(None);
    }
    let Some(location) = response
        .headers()
        .get(header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .and_then(|l| l.parse::<Uri>().ok())
    else {
        return Ok(None);
    };
    let Some(next_host) = location.host().map(str::to_ascii_lowercase) else {
        return Ok(None);
    };
    if next_host == host {
        return Ok(None);
    }
    if location.scheme_str() != Some("https") || location.port_u16().is_some_and(|p| p != 443) {
        return Err("the upstream redirected to a non-https location".into());
    }
    Ok(Some((location, next_host)))
}

/// Marks an answer the proxy fetched from another host after a redirect:
/// nothing is learned from it about the request's own host.
#[derive(Clone, Copy)]
struct FromAnotherHost;
