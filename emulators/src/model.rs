//! An OpenAI-compatible Chat Completions emulator over TLS.
//!
//! `POST /v1/chat/completions` and `GET /v1/models`, both requiring
//! `Authorization: Bearer <a configured key>` (401 otherwise, as OpenAI
//! answers). An answer is chosen per request, in this order:
//!
//! 1. the first [`Script`] whose every `contains` string occurs in the
//!    request's message contents (and that has uses left);
//! 2. the [`Responder`], if one is set (benchmarks answer by computing);
//! 3. the fixed text `"ok"`.
//!
//! An answer is a message content or a [`Fault`]: no answer at all (the
//! client's timeout fires), 429 with `Retry-After`, 500, a body cut in the
//! middle of its JSON, or well-formed JSON of the wrong schema. Each answer
//! waits `fixed_latency + per_token_latency × completion tokens` first, a
//! token being four characters of the content, rounded up (OpenAI's rule of
//! thumb; nothing here needs a real tokenizer). Requests are answered
//! concurrently; [`ModelHandle::max_in_flight`] tells a test how many were
//! in flight at once.
//!
//! As OpenAI's API does, a message's `content` may be a string or an array
//! of content parts (the `text` parts are what scripts match), and a request
//! with `"stream": true` is answered as server-sent events: `chat.completion.chunk`
//! objects on `data:` lines, the last with `finish_reason`, a usage chunk
//! when `stream_options.include_usage` asks for it, then `data: [DONE]`
//! (API reference, "Chat" > "The chat completion chunk object"). Coding-agent
//! CLIs stream by default.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::Request;
use serde_json::{json, Value};

use crate::ca::{CaError, TestCa};
use crate::record::{lock, record_head, RecordedRequest, Recorder, BODY_RECORD_LIMIT};
use crate::server::{full_body, Handler, HandlerFuture, ServeError, Server};
use crate::util::random_hex;

/// Largest request body accepted.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Failure to start the model emulator.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The test CA or TLS configuration could not be built.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// The listener or its runtime could not be started.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// An option is invalid.
    #[error("invalid model emulator option {option}: {problem}")]
    Option {
        /// Which option.
        option: String,
        /// What is wrong and what was expected.
        problem: String,
    },
}

/// A failure the emulator can play instead of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No answer for [`ModelOptions::hang`]: the client's timeout fires first.
    Timeout,
    /// 429 with `Retry-After: <secs>`.
    RateLimited { retry_after_secs: u64 },
    /// 500 with OpenAI's error shape.
    ServerError,
    /// 200 whose JSON body stops in the middle.
    TruncatedJson,
    /// 200 with well-formed JSON that is not a chat completion (no `choices`).
    WrongSchema,
}

/// What the emulator answers one request with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A completion whose message content is this text.
    Content(String),
    /// A failure instead.
    Fault(Fault),
}

/// A scripted answer, chosen when every `contains` string occurs in the
/// request's message contents. `uses: None` answers forever; `Some(n)`
/// answers `n` times, then the next matching script (or the default) does.
#[derive(Debug, Clone)]
pub struct Script {
    pub contains: Vec<String>,
    pub reply: Reply,
    pub uses: Option<usize>,
}

impl Script {
    /// Answer `reply` to every request whose contents hold all of `contains`.
    pub fn new(contains: &[&str], reply: Reply) -> Self {
        Self {
            contains: contains.iter().map(|s| (*s).to_owned()).collect(),
            reply,
            uses: None,
        }
    }

    /// Only the first `n` matching requests.
    pub fn times(mut self, n: usize) -> Self {
        self.uses = Some(n);
        self
    }
}

/// Computes an answer from the parsed request body; `None` falls through
/// to the default answer.
pub type Responder = Arc<dyn Fn(&Value) -> Option<Reply> + Send + Sync>;

/// How to start a [`ModelEmulator`].
#[derive(Clone)]
pub struct ModelOptions {
    /// Bearer keys the API accepts.
    pub api_keys: Vec<String>,
    /// Waited before every answer.
    pub fixed_latency: Duration,
    /// Waited per completion token before every answer.
    pub per_token_latency: Duration,
    /// How long a [`Fault::Timeout`] holds the request before giving up.
    pub hang: Duration,
    /// Scripted answers, tried in order.
    pub scripts: Vec<Script>,
    /// Answers requests no script matches.
    pub responder: Option<Responder>,
    /// Listening address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Server runtime threads.
    pub worker_threads: usize,
    /// The CA to sign the server certificate with; `None` generates one.
    pub ca: Option<Arc<TestCa>>,
}

impl std::fmt::Debug for ModelOptions {
    // Keys stay out of Debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelOptions")
            .field("fixed_latency", &self.fixed_latency)
            .field("per_token_latency", &self.per_token_latency)
            .field("scripts", &self.scripts.len())
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            fixed_latency: Duration::ZERO,
            per_token_latency: Duration::ZERO,
            hang: Duration::from_secs(600),
            scripts: Vec::new(),
            responder: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            worker_threads: 2,
            ca: None,
        }
    }
}

impl ModelOptions {
    /// Accept `key` as a bearer key.
    pub fn api_key(mut self, key: &str) -> Self {
        self.api_keys.push(key.to_owned());
        self
    }

    /// Wait `fixed` plus `per_token` per completion token before answering.
    pub fn latency(mut self, fixed: Duration, per_token: Duration) -> Self {
        self.fixed_latency = fixed;
        self.per_token_latency = per_token;
        self
    }

    /// Add a scripted answer (tried after those added before it).
    pub fn script(mut self, script: Script) -> Self {
        self.scripts.push(script);
        self
    }

    /// Compute answers no script matches.
    pub fn responder(
        mut self,
        f: impl Fn(&Value) -> Option<Reply> + Send + Sync + 'static,
    ) -> Self {
        self.responder = Some(Arc::new(f));
        self
    }
}

/// Starts the emulator.
pub struct ModelEmulator;

impl ModelEmulator {
    /// Generate the CA (unless given) and start serving.
    pub fn start(options: ModelOptions) -> Result<ModelHandle, ModelError> {
        if options.api_keys.iter().any(|k| k.is_empty()) {
            return Err(ModelError::Option {
                option: "api_keys".into(),
                problem: "a key must not be empty".into(),
            });
        }
        let ca = match options.ca.clone() {
            Some(ca) => ca,
            None => Arc::new(TestCa::generate()?),
        };
        let state = Arc::new(ModelState {
            scripts: Mutex::new(options.scripts.clone()),
            recorder: Recorder::default(),
            calls: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            options: options.clone(),
        });
        let server = Server::start(
            options.listen,
            ca.server_config()?,
            state.clone(),
            options.worker_threads,
        )?;
        Ok(ModelHandle { server, state, ca })
    }
}

/// A running model emulator; dropping it stops it.
pub struct ModelHandle {
    server: Server,
    state: Arc<ModelState>,
    ca: Arc<TestCa>,
}

impl std::fmt::Debug for ModelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelHandle")
            .field("addr", &self.addr())
            .finish_non_exhaustive()
    }
}

impl ModelHandle {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `https://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr())
    }

    /// The test CA certificate (PEM) clients must trust.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// Write the test CA certificate (PEM) to `path`.
    pub fn write_ca_pem(&self, path: &Path) -> Result<(), ModelError> {
        Ok(self.ca.write_cert_pem(path)?)
    }

    /// Everything received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorder.snapshot()
    }

    /// Forget the recorded requests and reset the counters.
    pub fn clear_requests(&self) {
        self.state.recorder.clear();
        self.state.calls.store(0, Ordering::SeqCst);
        self.state.max_in_flight.store(0, Ordering::SeqCst);
    }

    /// Add a script, tried after the existing ones.
    pub fn add_script(&self, script: Script) {
        lock(&self.state.scripts).push(script);
    }

    /// Replace every script.
    pub fn set_scripts(&self, scripts: Vec<Script>) {
        *lock(&self.state.scripts) = scripts;
    }

    /// Chat completion requests answered or in flight (authorised ones).
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::SeqCst)
    }

    /// The most chat completion requests in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Stop serving and wait.
    pub fn shutdown(mut self) {
        self.server.shutdown();
    }
}

struct ModelState {
    scripts: Mutex<Vec<Script>>,
    recorder: Recorder,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    options: ModelOptions,
}

/// What the handler sends back.
struct Answer {
    status: StatusCode,
    body: Bytes,
    /// `text/event-stream` instead of `application/json`.
    event_stream: bool,
    retry_after: Option<u64>,
    /// Waited before sending.
    delay: Duration,
}

impl Answer {
    fn json(status: StatusCode, body: &Value) -> Self {
        Self {
            status,
            body: Bytes::from(body.to_string()),
            event_stream: false,
            retry_after: None,
            delay: Duration::ZERO,
        }
    }

    fn error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Self {
        Self::json(
            status,
            &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        )
    }
}

impl Handler for ModelState {
    fn handle(self: Arc<Self>, request: Request<Incoming>) -> HandlerFuture {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let mut record = record_head(&parts);
            let answer = match Limited::new(body, MAX_BODY).collect().await {
                Err(_) => Answer::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "invalid_request_error",
                    None,
                    "request body too large",
                ),
                Ok(collected) => {
                    let bytes = collected.to_bytes();
                    record.body_truncated = bytes.len() > BODY_RECORD_LIMIT;
                    record.body = bytes[..bytes.len().min(BODY_RECORD_LIMIT)].to_vec();
                    self.answer(&parts, &bytes).await
                }
            };
            record.status = answer.status.as_u16();
            self.recorder.push(record);
            let mut response = Response::new(full_body(answer.body));
            *response.status_mut() = answer.status;
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(if answer.event_stream {
                    "text/event-stream"
                } else {
                    "application/json"
                }),
            );
            if let Some(secs) = answer.retry_after {
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
            }
            response
        })
    }
}

impl ModelState {
    async fn answer(&self, parts: &http::request::Parts, body: &[u8]) -> Answer {
        let bearer = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !self.options.api_keys.iter().any(|k| k == bearer) {
            return Answer::error(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                Some("invalid_api_key"),
                "Incorrect API key provided.",
            );
        }
        match (&parts.method, parts.uri.path()) {
            (&Method::GET, "/v1/models") => Answer::json(
                StatusCode::OK,
                &json!({"object": "list", "data": [
                    {"id": "gatehouse-emulated", "object": "model", "created": 0, "owned_by": "gatehouse"}
                ]}),
            ),
            (&Method::POST, "/v1/chat/completions") => {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                let answer = self.completion(body);
                tokio::time::sleep(answer.delay).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                answer
            }
            _ => Answer::error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                Some("unknown_url"),
                &format!("Unknown request URL: {} {}", parts.method, parts.uri.path()),
            ),
        }
    }

    fn completion(&self, body: &[u8]) -> Answer {
        let request = match parse_request(body) {
            Ok(r) => r,
            Err(problem) => {
                return Answer::error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    None,
                    &problem,
                )
            }
        };
        let reply = choose(&mut lock(&self.scripts), &request.contents)
            .or_else(|| {
                self.options
                    .responder
                    .as_ref()
                    .and_then(|f| f(&request.raw))
            })
            .unwrap_or_else(|| Reply::Content("ok".to_owned()));
        let o = &self.options;
        match reply {
            Reply::Content(content) => {
                let tokens = tokens(&content);
                let mut a = if request.stream {
                    Answer {
                        event_stream: true,
                        body: Bytes::from(event_stream_body(&request, &content)),
                        ..Answer::json(StatusCode::OK, &Value::Null)
                    }
                } else {
                    Answer::json(StatusCode::OK, &completion_body(&request, &content))
                };
                a.delay = o.fixed_latency + o.per_token_latency * tokens;
                a
            }
            Reply::Fault(fault) => fault_answer(fault, &request, o),
        }
    }
}

fn fault_answer(fault: Fault, request: &ChatRequest, o: &ModelOptions) -> Answer {
    let mut a = match fault {
        Fault::Timeout => {
            let mut a = Answer::error(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                None,
                "timed out",
            );
            a.delay = o.hang;
            return a;
        }
        Fault::RateLimited { retry_after_secs } => {
            let mut a = Answer::error(
                StatusCode::TOO_MANY_REQUESTS,
                "requests",
                Some("rate_limit_exceeded"),
                "Rate limit reached for requests.",
            );
            a.retry_after = Some(retry_after_secs);
            a
        }
        Fault::ServerError => Answer::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            None,
            "The server had an error while processing your request.",
        ),
        Fault::TruncatedJson => {
            let full = completion_body(request, "{\"truncated\": true}").to_string();
            let mut a = Answer::json(StatusCode::OK, &Value::Null);
            a.body = Bytes::from(full[..full.len() / 2].to_owned());
            a
        }
        Fault::WrongSchema => Answer::json(
            StatusCode::OK,
            &json!({"id": format!("resp_{}", random_hex(8)), "object": "response",
                    "output_text": "not a chat completion"}),
        ),
    };
    a.delay = o.fixed_latency;
    a
}

/// The parts of a chat completion request the emulator reads.
struct ChatRequest {
    raw: Value,
    model: String,
    /// Every message's content, joined by newlines (what scripts match).
    contents: String,
    /// `"stream": true`: answer with server-sent events.
    stream: bool,
}

/// A request must be an object with a `model` and non-empty `messages`,
/// each with a `role` and a `content` that is a string or an array of
/// content parts (text parts are read, others are skipped).
fn parse_request(body: &[u8]) -> Result<ChatRequest, String> {
    let raw: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let model = raw
        .get("model")
        .and_then(Value::as_str)
        .ok_or("you must provide a model parameter")?
        .to_owned();
    let messages = raw
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or("'messages' must be a non-empty array")?;
    let mut contents = Vec::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str);
        let content = match m.get("content") {
            Some(Value::String(c)) => Some(c.clone()),
            Some(Value::Array(parts)) => text_parts(parts),
            _ => None,
        };
        match (role, content) {
            (Some("system" | "user" | "assistant" | "developer"), Some(c)) => contents.push(c),
            _ => {
                return Err(
                    "each message needs a known 'role' and a 'content' string or parts".into(),
                )
            }
        }
    }
    let stream = match raw.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("'stream' must be a boolean".into()),
    };
    Ok(ChatRequest {
        contents: contents.join("\n"),
        model,
        stream,
        raw,
    })
}

/// The text of an array of content parts, joined by newlines; `None` when
/// a part is not an object with a `type` (a text part needs its `text`).
fn text_parts(parts: &[Value]) -> Option<String> {
    let mut texts = Vec::new();
    for part in parts {
        if part.get("type").and_then(Value::as_str)? == "text" {
            texts.push(part.get("text").and_then(Value::as_str)?);
        }
    }
    Some(texts.join("\n"))
}

/// The first script matching `contents` with uses left; uses one.
fn choose(scripts: &mut [Script], contents: &str) -> Option<Reply> {
    let script = scripts
        .iter_mut()
        .find(|s| s.uses != Some(0) && s.contains.iter().all(|needle| contents.contains(needle)))?;
    if let Some(n) = script.uses.as_mut() {
        *n -= 1;
    }
    Some(script.reply.clone())
}

/// Four characters a token, rounded up.
fn tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4)).unwrap_or(u32::MAX)
}

/// A streamed completion: the content in chunks of up to 64 characters,
/// a last chunk with `finish_reason`, the usage chunk if asked for, `[DONE]`.
fn event_stream_body(request: &ChatRequest, content: &str) -> String {
    let id = format!("chatcmpl-{}", random_hex(12));
    let created = crate::time::unix_now();
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created,
            "model": request.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let chars: Vec<char> = content.chars().collect();
    for piece in chars.chunks(64) {
        events.push(chunk(
            json!({"content": piece.iter().collect::<String>()}),
            None,
        ));
    }
    events.push(chunk(json!({}), Some("stop")));
    let include_usage = request
        .raw
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if include_usage {
        let (prompt, completion) = (tokens(&request.contents), tokens(content));
        events.push(json!({
            "id": id, "object": "chat.completion.chunk", "created": created,
            "model": request.model, "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }));
    }
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

fn completion_body(request: &ChatRequest, content: &str) -> Value {
    let prompt = tokens(&request.contents);
    let completion = tokens(content);
    json!({
        "id": format!("chatcmpl-{}", random_hex(12)),
        "object": "chat.completion",
        "created": crate::time::unix_now(),
        "model": request.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null},
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(contents: &[&str]) -> Vec<u8> {
        let messages: Vec<Value> = contents
            .iter()
            .map(|c| json!({"role": "user", "content": c}))
            .collect();
        json!({"model": "m", "messages": messages})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn requests_are_checked() {
        assert!(parse_request(b"{").is_err());
        assert!(parse_request(br#"{"messages":[{"role":"user","content":"x"}]}"#).is_err());
        assert!(parse_request(br#"{"model":"m","messages":[]}"#).is_err());
        assert!(
            parse_request(br#"{"model":"m","messages":[{"role":"boss","content":"x"}]}"#).is_err()
        );
        assert!(parse_request(br#"{"model":"m","messages":[{"role":"user"}]}"#).is_err());
        let r = parse_request(&request(&["a", "b"])).unwrap();
        assert_eq!(r.contents, "a\nb");
        assert_eq!(r.model, "m");
    }

    #[test]
    fn scripts_match_every_needle_in_order_and_run_out() {
        let mut scripts = vec![
            Script::new(&["judge", "r1"], Reply::Fault(Fault::ServerError)).times(1),
            Script::new(&["judge"], Reply::Content("J".into())),
        ];
        assert_eq!(choose(&mut scripts, "writer"), None);
        assert_eq!(
            choose(&mut scripts, "judge r1"),
            Some(Reply::Fault(Fault::ServerError))
        );
        // Used up: the next matching script answers.
        assert_eq!(
            choose(&mut scripts, "judge r1"),
            Some(Reply::Content("J".into()))
        );
        assert_eq!(
            choose(&mut scripts, "judge"),
            Some(Reply::Content("J".into()))
        );
    }

    #[test]
    fn tokens_are_four_characters_rounded_up() {
        assert_eq!(tokens(""), 0);
        assert_eq!(tokens("abcd"), 1);
        assert_eq!(tokens("abcde"), 2);
        assert_eq!(tokens("修复这个问题"), 2);
    }

    #[test]
    fn truncated_json_does_not_parse_and_wrong_schema_has_no_choices() {
        let r = parse_request(&request(&["x"])).unwrap();
        let o = ModelOptions::default();
        let cut = fault_answer(Fault::TruncatedJson, &r, &o);
        assert_eq!(cut.status, StatusCode::OK);
        assert!(serde_json::from_slice::<Value>(&cut.body).is_err());
        let wrong = fault_answer(Fault::WrongSchema, &r, &o);
        let v: Value = serde_json::from_slice(&wrong.body).unwrap();
        assert!(v.get("choices").is_none());
        let limited = fault_answer(
            Fault::RateLimited {
                retry_after_secs: 3,
            },
            &r,
            &o,
        );
        assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.retry_after, Some(3));
    }

    #[test]
    fn content_parts_are_read_and_a_bad_part_is_refused() {
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "first"},
                {"type": "image_url", "image_url": {"url": "data:,"}},
                {"type": "text", "text": "second"},
            ]},
        ]});
        let r = parse_request(body.to_string().as_bytes()).unwrap();
        assert_eq!(r.contents, "first\nsecond");
        assert!(!r.stream);
        for bad in [
            json!([{"text": "no type"}]),
            json!([{"type": "text"}]),
            json!(["a string part"]),
            json!(7),
        ] {
            let body = json!({"model": "m", "messages": [{"role": "user", "content": bad}]});
            assert!(parse_request(body.to_string().as_bytes()).is_err(), "{bad}");
        }
        let body =
            json!({"model": "m", "stream": "yes", "messages": [{"role": "user", "content": "x"}]});
        assert!(parse_request(body.to_string().as_bytes()).is_err());
    }

    #[test]
    fn a_streamed_answer_is_chunks_that_add_up_to_the_content_then_done() {
        let content = "é".repeat(70) + " and the rest";
        for include_usage in [false, true] {
            let body = json!({"model": "m", "stream": true,
                "stream_options": {"include_usage": include_usage},
                "messages": [{"role": "user", "content": "x"}]});
            let r = parse_request(body.to_string().as_bytes()).unwrap();
            assert!(r.stream);
            let text = event_stream_body(&r, &content);
            let mut data: Vec<&str> = text
                .split("\n\n")
                .filter(|e| !e.is_empty())
                .map(|e| e.strip_prefix("data: ").unwrap())
                .collect();
            assert_eq!(data.pop(), Some("[DONE]"));
            let chunks: Vec<Value> = data
                .iter()
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let joined: String = chunks
                .iter()
                .filter_map(|c| {
                    c.pointer("/choices/0/delta/content")
                        .and_then(Value::as_str)
                })
                .collect();
            assert_eq!(joined, content);
            let finishes: Vec<&Value> = chunks
                .iter()
                .filter_map(|c| c.pointer("/choices/0/finish_reason"))
                .filter(|f| !f.is_null())
                .collect();
            assert_eq!(finishes, [&json!("stop")]);
            let usage = chunks.iter().filter(|c| c.get("usage").is_some()).count();
            assert_eq!(usage, usize::from(include_usage));
            assert!(chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk"));
        }
    }
}
