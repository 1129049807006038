//! The Chat Completions client: one structured request, retried.
//!
//! ```text
//! Structured ─► request_body (JSON schema, strict) ─► semaphore (concurrency)
//!   ─► ProxyClient: router's model identity ─► CONNECT host:443 ─► TLS ─► POST …/chat/completions
//!   ─► 200: completion_content (strict) ─► JSON value
//!   ─► 429 / 5xx / no answer: next_wait (Retry-After, else doubling backoff) ─► again, or Unavailable
//! ```
//!
//! The router sends no key: the proxy drops any `Authorization` and injects
//! the model key for the identity's `model-api` rule. What the request holds
//! and how answers are read are pure functions ([`request_body`],
//! [`completion_content`], [`next_wait`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::config::{ModelConfig, RetryPolicy};
use crate::live::http::{ClientSetupError, HttpError, ProxyClient};

/// Why a call gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No answer: unreachable, refused, timed out, rate limited or failing
    /// past the retries, or the model refused to answer.
    #[error("model unavailable: {0}")]
    Unavailable(String),
    /// An answer that is not a chat completion holding JSON.
    #[error("model answer invalid: {0}")]
    Invalid(String),
}

/// One structured request: the answer must be JSON matching `schema`.
#[derive(Debug, Clone, PartialEq)]
pub struct Structured {
    pub system: String,
    pub user: String,
    pub schema_name: &'static str,
    pub schema: Value,
    pub max_tokens: u32,
}

/// The request body (pure). Strict structured output: the provider is asked
/// to hold the answer to `schema`; the answer is checked here anyway.
pub fn request_body(model: &str, s: &Structured) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": s.system},
            {"role": "user", "content": s.user},
        ],
        "temperature": 0,
        "max_tokens": s.max_tokens,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": s.schema_name, "strict": true, "schema": s.schema},
        },
    })
}

/// The JSON the model answered, from a 200's body (pure): exactly one
/// choice, finished (`stop`), not a refusal, whose content parses as JSON.
pub fn completion_content(body: &[u8]) -> Result<Value, CallError> {
    let invalid = |why: &str| CallError::Invalid(why.to_owned());
    let v: Value =
        serde_json::from_slice(body).map_err(|e| CallError::Invalid(format!("not JSON: {e}")))?;
    let choices = v
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("no `choices`: not a chat completion"))?;
    let [choice] = choices.as_slice() else {
        return Err(invalid("not exactly one choice"));
    };
    let message = choice
        .get("message")
        .ok_or_else(|| invalid("a choice without a message"))?;
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
        return Err(CallError::Unavailable(format!(
            "the model refused: {}",
            cut(refusal, 200)
        )));
    }
    match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") => {}
        other => {
            return Err(CallError::Invalid(format!(
                "finish_reason {other:?}, not \"stop\" (cut short?)"
            )))
        }
    }
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("the message has no text content"))?;
    serde_json::from_str(content)
        .map_err(|e| CallError::Invalid(format!("the content is not JSON: {e}")))
}

/// How one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// An HTTP status other than 200, with its `Retry-After`.
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer (connect, TLS, timeout, a cut exchange).
    NoAnswer(String),
    /// The proxy refused the CONNECT: trying again cannot help.
    Refused(String),
}

/// How long to wait before attempt `retries_done + 2`, or `None` to give
/// up (pure). 429 and 5xx and no answer are retried; a `Retry-After`
/// replaces the doubling backoff, and one longer than `max_backoff` gives
/// up rather than hold the turn.
pub fn next_wait(policy: &RetryPolicy, retries_done: u32, failure: &Failure) -> Option<Duration> {
    if retries_done >= policy.retries {
        return None;
    }
    let backoff = policy
        .backoff
        .saturating_mul(1u32 << retries_done.min(16))
        .min(policy.max_backoff);
    match failure {
        Failure::Status {
            status,
            retry_after,
        } if *status == 429 || (500..600).contains(status) => match retry_after {
            Some(wait) if *wait > policy.max_backoff => None,
            Some(wait) => Some(*wait),
            None => Some(backoff),
        },
        Failure::Status { .. } | Failure::Refused(_) => None,
        Failure::NoAnswer(_) => Some(backoff),
    }
}

/// `Retry-After` in seconds (integer or decimal); a date is ignored (pure).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && (0.0..=86_400.0).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// The client; cheap to clone (the concurrency limit is shared).
#[derive(Clone)]
pub struct ModelClient {
    proxy: ProxyClient,
    config: ModelConfig,
    limit: Arc<Semaphore>,
}

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("host", &self.config.host)
            .field("model", &self.config.model)
            .finish_non_exhaustive()
    }
}

impl ModelClient {
    /// A client trusting only the gatehouse CA in `ca_cert`.
    pub fn new(config: ModelConfig, ca_cert: &Path) -> Result<Self, ClientSetupError> {
        Ok(Self {
            proxy: ProxyClient::new(ca_cert)?,
            limit: Arc::new(Semaphore::new(config.concurrency)),
            config,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// One structured call, retried per the policy.
    pub async fn call(&self, s: &Structured) -> Result<Value, CallError> {
        let body = request_body(&self.config.model, s).to_string().into_bytes();
        let mut retries_done = 0;
        loop {
            let failure = match self.attempt(body.clone()).await {
                Ok(answer) => return completion_content(&answer),
                Err(f) => f,
            };
            match next_wait(&self.config.retry, retries_done, &failure) {
                Some(wait) => {
                    tracing::debug!(?failure, ?wait, "model call retried");
                    tokio::time::sleep(wait).await;
                    retries_done += 1;
                }
                None => return Err(CallError::Unavailable(describe(&failure))),
            }
        }
    }

    async fn attempt(&self, body: Vec<u8>) -> Result<Vec<u8>, Failure> {
        // Closed only if the client is dropped; then there is no call to make.
        let _permit = self
            .limit
            .acquire()
            .await
            .map_err(|_| Failure::NoAnswer("the client is closing".into()))?;
        let c = &self.config;
        let answer = self
            .proxy
            .request(
                &c.socket,
                &c.host,
                Method::POST,
                &c.completions_path,
                Some(body),
                c.timeout,
            )
            .await;
        match answer {
            Ok(a) if a.status == http::StatusCode::OK => Ok(a.body.to_vec()),
            Ok(a) => Err(Failure::Status {
                status: a.status.as_u16(),
                retry_after: a
                    .headers
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_retry_after),
            }),
            Err(HttpError::Refused(why)) => Err(Failure::Refused(why)),
            Err(e) => Err(Failure::NoAnswer(e.to_string())),
        }
    }
}

fn describe(f: &Failure) -> String {
    match f {
        Failure::Status { status, .. } => format!("the model API answered {status}"),
        Failure::NoAnswer(why) => format!("no answer: {}", cut(why, 300)),
        Failure::Refused(why) => format!("the proxy refused: {}", cut(why, 300)),
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        retries: 3,
        backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(1000),
    };

    fn status(s: u16, after: Option<u64>) -> Failure {
        Failure::Status {
            status: s,
            retry_after: after.map(Duration::from_secs),
        }
    }

    #[test]
    fn retries_back_off_and_honour_retry_after() {
        let ms = Duration::from_millis;
        assert_eq!(next_wait(&POLICY, 0, &status(500, None)), Some(ms(100)));
        assert_eq!(next_wait(&POLICY, 1, &status(503, None)), Some(ms(200)));
        assert_eq!(next_wait(&POLICY, 2, &status(429, None)), Some(ms(400)));
        // Out of retries.
        assert_eq!(next_wait(&POLICY, 3, &status(500, None)), None);
        // Retry-After replaces the backoff; past the cap it gives up.
        assert_eq!(next_wait(&POLICY, 0, &status(429, Some(1))), Some(ms(1000)));
        assert_eq!(next_wait(&POLICY, 0, &status(429, Some(2))), None);
        // No answer is retried; other statuses and refusals are not.
        let none = Failure::NoAnswer("timeout".into());
        assert_eq!(next_wait(&POLICY, 0, &none), Some(ms(100)));
        for s in [400, 401, 403, 404, 422] {
            assert_eq!(next_wait(&POLICY, 0, &status(s, Some(0))), None, "{s}");
        }
        assert_eq!(next_wait(&POLICY, 0, &Failure::Refused("x".into())), None);
        // The doubling is capped.
        let long = RetryPolicy {
            retries: 10,
            ..POLICY
        };
        assert_eq!(next_wait(&long, 9, &status(500, None)), Some(ms(1000)));
    }

    #[test]
    fn retry_after_is_seconds() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("NaN"), None);
    }

    fn completion(content: &str, finish: &str, refusal: Value) -> Vec<u8> {
        json!({"choices": [{"index": 0, "finish_reason": finish,
            "message": {"role": "assistant", "content": content, "refusal": refusal}}]})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn completions_are_read_strictly() {
        assert_eq!(
            completion_content(&completion("{\"a\":1}", "stop", Value::Null)),
            Ok(json!({"a": 1}))
        );
        let bad = [
            b"{\"choices\": [".to_vec(),
            br#"{"output_text": "x"}"#.to_vec(),
            br#"{"choices": []}"#.to_vec(),
            completion("{\"a\":1}", "length", Value::Null),
            completion("not json", "stop", Value::Null),
            completion("{\"a\":", "stop", Value::Null),
        ];
        for b in bad {
            assert!(
                matches!(completion_content(&b), Err(CallError::Invalid(_))),
                "{}",
                String::from_utf8_lossy(&b)
            );
        }
        assert!(matches!(
            completion_content(&completion("", "stop", json!("I can't help with that"))),
            Err(CallError::Unavailable(_))
        ));
    }

    #[test]
    fn the_request_asks_for_strict_json_and_holds_no_key() {
        let s = Structured {
            system: "sys".into(),
            user: "data".into(),
            schema_name: "judgement",
            schema: json!({"type": "object"}),
            max_tokens: 100,
        };
        let body = request_body("m", &s);
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][1]["content"], "data");
        let text = body.to_string().to_lowercase();
        assert!(!text.contains("authorization") && !text.contains("api_key"));
    }
}
