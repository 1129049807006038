//! The webhook listener: plain HTTP/1.1 (TLS is the reverse proxy's), for
//! GitHub deliveries or Feishu events, one source per listener.
//!
//! One GitHub request reads as steps: the head ([`check_head`]: method, event,
//! delivery id, declared length), the body (bounded in size and time), the
//! signature over the exact raw body, the JSON, the route on event and
//! action, the meaning, and the store. Only a delivery committed to the
//! store is answered 2xx as stored; everything refused is a 4xx naming why,
//! and nothing of it is stored. A Feishu request is checked and opened by
//! [`feishu::open`] (signature, decryption, token, envelope), then stored
//! the same way. Connections are bounded by a semaphore, so
//! a flood waits in the kernel's backlog instead of growing memory.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::feishu::{self, Opened, Signed};
use super::github::{self, Route};
use super::Verifier;
use crate::store::{DeliveryLog, Inserted, NewDelivery};

/// GitHub sends at most 25 MB.
pub const MAX_BODY: usize = 25 * 1024 * 1024;

/// Limits of the listener.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// Largest body accepted.
    pub max_body: usize,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Time allowed for a request's head, and then for its body.
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            max_body: MAX_BODY,
            max_connections: 64,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// What the listener shares between connections.
pub struct Listener {
    pub(super) verifier: Verifier,
    pub(super) log: Arc<Mutex<DeliveryLog>>,
    /// Wakes the processor after a delivery is stored.
    pub(super) wake: std::sync::mpsc::SyncSender<()>,
    pub(super) config: ListenerConfig,
    pub(super) clock: fn() -> u64,
}

/// An answer: a status and one line saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: StatusCode,
    pub message: String,
    /// A JSON body to send instead of the message (Feishu's challenge).
    pub json: Option<String>,
}

fn answer(status: StatusCode, message: impl Into<String>) -> Answer {
    Answer {
        status,
        message: message.into(),
        json: None,
    }
}

/// What the head says about a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub event: String,
    pub delivery: String,
    pub signature: Option<Vec<u8>>,
}

/// Checks a request head before its body is read.
pub fn check_head(method: &Method, headers: &HeaderMap, max_body: usize) -> Result<Head, Answer> {
    if method != Method::POST {
        return Err(answer(
            StatusCode::METHOD_NOT_ALLOWED,
            "only POST is accepted",
        ));
    }
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body as u64) {
        return Err(too_large(max_body));
    }
    let event = text("x-github-event")
        .filter(|e| {
            !e.is_empty() && e.len() <= 64 && e.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .ok_or_else(|| {
            answer(
                StatusCode::BAD_REQUEST,
                "missing or invalid X-GitHub-Event header",
            )
        })?;
    let delivery = text("x-github-delivery")
        .filter(|d| {
            !d.is_empty()
                && d.len() <= 64
                && d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        .ok_or_else(|| {
            answer(
                StatusCode::BAD_REQUEST,
                "missing or invalid X-GitHub-Delivery header",
            )
        })?;
    Ok(Head {
        event: event.to_owned(),
        delivery: delivery.to_owned(),
        signature: headers
            .get("x-hub-signature-256")
            .map(|v| v.as_bytes().to_vec()),
    })
}

fn too_large(max: usize) -> Answer {
    answer(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is larger than {max} bytes"),
    )
}

// === impl Listener ===

impl Listener {
    /// Answers one request; never fails.
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let a = match self.receive(request).await {
            Ok(a) | Err(a) => a,
        };
        if a.status.is_client_error() {
            tracing::info!(status = a.status.as_u16(), reason = %a.message, "webhook refused");
        }
        let (body, kind) = match a.json {
            Some(json) => (json, "application/json"),
            None => (format!("{}\n", a.message), "text/plain; charset=utf-8"),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = a.status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(kind),
        );
        response
    }

    async fn receive(&self, request: Request<Incoming>) -> Result<Answer, Answer> {
        match &self.verifier {
            Verifier::Github(_) => self.receive_github(request).await,
            Verifier::Feishu(_) => self.receive_feishu(request).await,
        }
    }

    async fn receive_github(&self, request: Request<Incoming>) -> Result<Answer, Answer> {
        let Verifier::Github(secrets) = &self.verifier else {
            return Err(answer(StatusCode::NOT_FOUND, "not a GitHub listener"));
        };
        let head = check_head(request.method(), request.headers(), self.config.max_body)?;
        let body = self.read_body(request.into_body()).await?;
        secrets
            .verify(head.signature.as_deref(), &body)
            .map_err(|e| answer(StatusCode::UNAUTHORIZED, e.to_string()))?;
        let payload: Value = serde_json::from_slice(&body).map_err(|e| {
            answer(
                StatusCode::BAD_REQUEST,
                format!("the body is not JSON: {e}"),
            )
        })?;
        let action = payload.get("action").and_then(Value::as_str);
        match github::route(&head.event, action) {
            None => Err(answer(
                StatusCode::BAD_REQUEST,
                format!("unknown event `{}`", head.event),
            )),
            Some(Route::Ping) => Ok(answer(StatusCode::OK, "pong")),
            Some(Route::Ignore) => Ok(answer(
                StatusCode::OK,
                format!(
                    "ignored: {} {} leads to no trigger",
                    head.event,
                    action.unwrap_or("-")
                ),
            )),
            Some(Route::Store) => {
                let meaning = github::meaning(&head.event, &payload)
                    .map_err(|e| answer(StatusCode::BAD_REQUEST, e.to_string()))?;
                self.store("github", head.delivery, head.event, meaning, body)
                    .await
            }
        }
    }

    /// Feishu: verified and opened as one pure step, then stored.
    async fn receive_feishu(&self, request: Request<Incoming>) -> Result<Answer, Answer> {
        let Verifier::Feishu(keys) = &self.verifier else {
            return Err(answer(StatusCode::NOT_FOUND, "not a Feishu listener"));
        };
        if request.method() != Method::POST {
            return Err(answer(
                StatusCode::METHOD_NOT_ALLOWED,
                "only POST is accepted",
            ));
        }
        let declared = request
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.config.max_body as u64) {
            return Err(too_large(self.config.max_body));
        }
        let headers = request.headers().clone();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let signed = Signed {
            timestamp: text("x-lark-request-timestamp"),
            nonce: text("x-lark-request-nonce"),
            signature: text("x-lark-signature"),
        };
        let body = self.read_body(request.into_body()).await?;
        let now = (self.clock)() / 1000;
        let opened = feishu::open(keys, signed, &body, now).map_err(|e| {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
            answer(status, e.to_string())
        })?;
        match opened {
            Opened::Challenge(challenge) => Ok(Answer {
                json: Some(serde_json::json!({ "challenge": challenge }).to_string()),
                ..answer(StatusCode::OK, "challenge answered")
            }),
            Opened::Ignore { event_type } => Ok(answer(
                StatusCode::OK,
                format!("ignored: {event_type} leads to no trigger"),
            )),
            Opened::Store {
                event_id,
                event_type,
                meaning,
                plain,
            } => {
                self.store("feishu", event_id, event_type, meaning, Bytes::from(plain))
                    .await
            }
        }
    }

    async fn read_body(&self, body: Incoming) -> Result<Bytes, Answer> {
        let limited = Limited::new(body, self.config.max_body);
        match tokio::time::timeout(self.config.body_timeout, limited.collect()).await {
            Err(_) => Err(answer(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time",
            )),
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                Err(too_large(self.config.max_body))
            }
            Ok(Err(e)) => Err(answer(
                StatusCode::BAD_REQUEST,
                format!("reading the body failed: {e}"),
            )),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
        }
    }

    /// Commits the delivery, then answers: the 2xx means it is durable.
    async fn store(
        &self,
        platform: &'static str,
        delivery: String,
        event: String,
        meaning: String,
        body: Bytes,
    ) -> Result<Answer, Answer> {
        let log = self.log.clone();
        let now = (self.clock)();
        let id = delivery.clone();
        let inserted = tokio::task::spawn_blocking(move || {
            let mut log = log
                .lock()
                .map_err(|_| "the delivery log is poisoned".to_owned())?;
            log.insert(&NewDelivery {
                platform,
                delivery_id: &id,
                event: &event,
                meaning: &meaning,
                body: &body,
                received_at: now,
            })
            .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        match inserted {
            Ok(Inserted::New) => {
                // A full channel means a wake-up is already pending.
                let _ = self.wake.try_send(());
                Ok(answer(StatusCode::OK, format!("stored {delivery}")))
            }
            Ok(Inserted::DuplicateDelivery) => Ok({
                crate::metrics::duplicate(platform, "delivery");
                answer(
                    StatusCode::OK,
                    format!("duplicate: {delivery} is already stored"),
                )
            }),
            Ok(Inserted::DuplicateMeaning) => Ok({
                crate::metrics::duplicate(platform, "meaning");
                answer(
                    StatusCode::OK,
                    format!("duplicate: the event of {delivery} is already stored"),
                )
            }),
            Err(problem) => {
                // Not acknowledged: GitHub lists it as failed, to be
                // redelivered; Feishu retries by itself.
                tracing::error!(%delivery, %problem, "storing a delivery failed");
                Err(answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the delivery could not be stored; redeliver it",
                ))
            }
        }
    }
}

/// Serves `listener` until `stop` changes (or its sender is dropped).
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Listener>,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(shared.config.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = stop.changed() => break,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (tcp, peer) = tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Out of descriptors and the like: back off, keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let shared = shared.clone();
        let header_timeout = shared.config.header_timeout;
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(shared.handle(request).await) }
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), service)
                .await
            {
                tracing::debug!(%peer, %error, "webhook connection ended with an error");
            }
            drop(permit);
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, http::HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn head_table() {
        let ok = [
            ("x-github-event", "issue_comment"),
            ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ];
        type Case<'a> = (
            &'a str,
            Method,
            Vec<(&'static str, &'a str)>,
            Option<StatusCode>,
        );
        let cases: &[Case<'_>] = &[
            ("a delivery", Method::POST, ok.to_vec(), None),
            (
                "GET",
                Method::GET,
                ok.to_vec(),
                Some(StatusCode::METHOD_NOT_ALLOWED),
            ),
            (
                "no event",
                Method::POST,
                vec![ok[1]],
                Some(StatusCode::BAD_REQUEST),
            ),
            (
                "no delivery id",
                Method::POST,
                vec![ok[0]],
                Some(StatusCode::BAD_REQUEST),
            ),
            (
                "odd event",
                Method::POST,
                vec![("x-github-event", "Issue Comment"), ok[1]],
                Some(StatusCode::BAD_REQUEST),
            ),
            (
                "odd delivery id",
                Method::POST,
                vec![ok[0], ("x-github-delivery", "../../x")],
                Some(StatusCode::BAD_REQUEST),
            ),
            (
                "declared too long",
                Method::POST,
                vec![ok[0], ok[1], ("content-length", "1001")],
                Some(StatusCode::PAYLOAD_TOO_LARGE),
            ),
            (
                "declared at the limit",
                Method::POST,
                vec![ok[0], ok[1], ("content-length", "1000")],
                None,
            ),
        ];
        for (name, method, pairs, expected) in cases {
            let got = check_head(method, &headers(pairs), 1000);
            assert_eq!(
                got.as_ref().err().map(|a| a.status),
                *expected,
                "{name}: {got:?}"
            );
        }
    }
}
