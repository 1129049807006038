//! The Feishu (Lark) open-platform emulator: tenant tokens and IM messages.
//!
//! `POST /open-apis/auth/v3/tenant_access_token/internal` exchanges an
//! `{app_id, app_secret}` for a tenant token that expires after
//! [`FeishuOptions::token_ttl`]; while more than 30 minutes remain, asking
//! again returns the same token (as Feishu does). The IM endpoints require
//! `Authorization: Bearer <a live token it issued>` and answer with
//! Feishu's distinct codes otherwise ([`TokenRefusal`]). A live token can be
//! invalidated before its expiry (as resetting the app secret does), now or
//! on its next use, to test that clients recover. Responses use Feishu's
//! `{code, msg, data}` shape.
//! The token rules are plain functions over data with `now` passed in.
//! Messages people send are pushed to configured event targets ([`events`]).
//! Chats, the bot's membership, threads and size limits: [`chats`].

pub mod chats;
pub mod events;
pub mod limits;
pub mod ws;

use std::net::SocketAddr;
use std::path::Path;
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
/// Feishu hands out the cached token until fewer than this many seconds remain.
const REISSUE_BELOW_SECS: u64 = 30 * 60;
/// No access token, or not in the `Bearer <token>` form (Feishu's code).
pub const CODE_MISSING_TOKEN: i64 = 99_991_661;
/// A tenant access token Feishu does not know or no longer accepts. The
/// official Go SDK names it `errCodeTenantAccessTokenInvalid` and retries
/// once with a new token on it (oapi-sdk-go, `core/constants.go`).
pub const CODE_INVALID_TOKEN: i64 = 99_991_663;
/// An access token past its expiry (Feishu's code).
pub const CODE_EXPIRED_TOKEN: i64 = 99_991_668;
/// `receive_id_type` values Feishu accepts for sending.
const RECEIVE_ID_TYPES: &[&str] = &["open_id", "user_id", "union_id", "email", "chat_id"];
const MSG_TYPES: &[&str] = &[
    "text",
    "post",
    "image",
    "file",
    "audio",
    "media",
    "sticker",
    "interactive",
    "share_chat",
    "share_user",
];

/// Failure to start the Feishu emulator.
#[derive(Debug, thiserror::Error)]
pub enum FeishuError {
    /// The test CA or TLS configuration could not be built.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// The listener or its runtime could not be started.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// An option is invalid.
    #[error("invalid Feishu emulator option {option}: {problem}")]
    Option {
        /// Which option.
        option: String,
        /// What is wrong and what was expected.
        problem: String,
    },
}

/// An app the token endpoint knows.
#[derive(Clone)]
pub struct FeishuApp {
    /// `cli_…`
    pub app_id: String,
    /// The app secret the token endpoint requires.
    pub app_secret: String,
}

impl std::fmt::Debug for FeishuApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuApp")
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

/// How to start a [`FeishuEmulator`].
#[derive(Debug, Clone)]
pub struct FeishuOptions {
    /// Apps whose credentials the token endpoint accepts.
    pub apps: Vec<FeishuApp>,
    /// How long issued tenant tokens live (Feishu: 2 hours).
    pub token_ttl: Duration,
    /// The bot's `open_id`, returned by `bot/v3/info`.
    pub bot_open_id: String,
    /// The bot's display name.
    pub bot_name: String,
    /// Listening address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Server runtime threads.
    pub worker_threads: usize,
    /// The CA to sign the server certificate with; `None` generates one.
    pub ca: Option<Arc<TestCa>>,
    /// Where messages people send are pushed as events.
    pub event_targets: Vec<events::EventTarget>,
    /// Serve the long connection ([`ws`]) for one app; its events go to
    /// the connected clients too.
    pub long_connection: Option<ws::LongConnection>,
}

impl Default for FeishuOptions {
    fn default() -> Self {
        Self {
            apps: Vec::new(),
            token_ttl: Duration::from_secs(7200),
            bot_open_id: "ou_gatehouse_bot".to_owned(),
            bot_name: "gatehouse".to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            worker_threads: 2,
            ca: None,
            event_targets: Vec::new(),
            long_connection: None,
        }
    }
}

impl FeishuOptions {
    /// Accept `app_id` with `app_secret`.
    pub fn app(mut self, app_id: &str, app_secret: &str) -> Self {
        self.apps.push(FeishuApp {
            app_id: app_id.to_owned(),
            app_secret: app_secret.to_owned(),
        });
        self
    }

    /// Push message events for `app_id` to `url`, encrypted and signed
    /// when `encrypt_key` is set.
    pub fn event_target(
        mut self,
        url: &str,
        app_id: &str,
        encrypt_key: Option<&str>,
        token: &str,
    ) -> Self {
        self.event_targets.push(events::EventTarget {
            url: url.to_owned(),
            app_id: app_id.to_owned(),
            encrypt_key: encrypt_key.map(str::to_owned),
            verification_token: token.to_owned(),
        });
        self
    }
}

/// A message as stored by the emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeishuMessage {
    /// `om_…`
    pub message_id: String,
    /// `oc_…`
    pub chat_id: String,
    /// The thread root for replies, empty otherwise.
    pub root_id: String,
    /// The message replied to, empty otherwise.
    pub parent_id: String,
    /// The thread (`omt_…`) it is in, empty otherwise.
    pub thread_id: String,
    /// `text`, `post`, …
    pub msg_type: String,
    /// The content JSON string exactly as sent, e.g. `{"text":"hi"}`.
    pub content: String,
    /// The app id for bot messages, the open id for seeded user messages.
    pub sender_id: String,
    /// `app` or `user`.
    pub sender_type: String,
    /// For sent messages: the `receive_id_type` and `receive_id` used.
    pub receive_id: Option<(String, String)>,
    /// The client's idempotency key, if any.
    pub uuid: Option<String>,
    /// Milliseconds since the epoch.
    pub create_time_ms: u64,
}

/// A tenant token the emulator issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IssuedToken {
    pub token: String,
    pub app_id: String,
    /// Seconds on the emulator's clock when it stops being valid.
    pub expires_at: u64,
    /// Invalidated before its expiry: refused, and never handed out again.
    pub revoked: bool,
}

/// What the token endpoint should do for a request at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenGrant {
    /// Hand out this already-issued token again.
    Reuse(IssuedToken),
    /// Issue a new token.
    Issue,
    /// Wrong app id or secret.
    Refuse { code: i64, msg: &'static str },
}

/// Feishu's rule: valid credentials get the cached token while more than
/// 30 minutes remain on it, otherwise a new one.
pub(crate) fn grant_token(
    apps: &[FeishuApp],
    issued: &[IssuedToken],
    app_id: &str,
    app_secret: &str,
    now: u64,
) -> TokenGrant {
    let Some(app) = apps.iter().find(|a| a.app_id == app_id) else {
        return TokenGrant::Refuse {
            code: 10_003,
            msg: "invalid param",
        };
    };
    if app.app_secret != app_secret {
        return TokenGrant::Refuse {
            code: 10_014,
            msg: "app secret invalid",
        };
    }
    issued
        .iter()
        .rev()
        .find(|t| t.app_id == app_id && !t.revoked && t.expires_at > now + REISSUE_BELOW_SECS)
        .map(|t| TokenGrant::Reuse(t.clone()))
        .unwrap_or(TokenGrant::Issue)
}

/// Why Feishu refuses the `Authorization` of a request, by its codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenRefusal {
    /// No header, or not `Bearer <token>`: 99991661.
    Missing,
    /// Not a token it issued, or one invalidated before its expiry: 99991663.
    Invalid,
    /// A token it issued, past its expiry: 99991668.
    Expired,
}

impl TokenRefusal {
    pub(crate) fn code(self) -> i64 {
        match self {
            Self::Missing => CODE_MISSING_TOKEN,
            Self::Invalid => CODE_INVALID_TOKEN,
            Self::Expired => CODE_EXPIRED_TOKEN,
        }
    }
}

/// The issued token an `Authorization` value carries if it is live at
/// `now` (its index in `issued`), or why it is refused.
pub(crate) fn authenticate(
    issued: &[IssuedToken],
    authorization: Option<&str>,
    now: u64,
) -> Result<usize, TokenRefusal> {
    let bearer = authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|b| !b.is_empty())
        .ok_or(TokenRefusal::Missing)?;
    let index = issued
        .iter()
        .position(|t| t.token == bearer)
        .ok_or(TokenRefusal::Invalid)?;
    let token = &issued[index];
    if token.revoked {
        Err(TokenRefusal::Invalid)
    } else if token.expires_at <= now {
        Err(TokenRefusal::Expired)
    } else {
        Ok(index)
    }
}

#[derive(Debug, Default)]
struct FeishuModel {
    issued: Vec<IssuedToken>,
    messages: Vec<FeishuMessage>,
    chats: Vec<chats::FeishuChat>,
    next: u64,
    /// The next this many requests with a live token find it invalidated.
    revoke_on_use: u32,
}

impl FeishuModel {
    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}_{:032x}", 0x6a7e_0000_0000u64 + self.next)
    }

    /// The chat `chat_id`, made (with the bot in it) if unknown.
    fn chat(&mut self, chat_id: &str, chat_mode: &str) -> &mut chats::FeishuChat {
        let index = match self.chats.iter().position(|c| c.chat_id == chat_id) {
            Some(index) => index,
            None => {
                let mut chat = chats::FeishuChat::group(chat_id, chat_id);
                chat.chat_mode = chat_mode.to_owned();
                self.chats.push(chat);
                self.chats.len() - 1
            }
        };
        &mut self.chats[index]
    }
}

/// Entry point: `FeishuEmulator::start(options)`.
#[derive(Debug)]
pub struct FeishuEmulator;

impl FeishuEmulator {
    /// Generate the CA and start serving.
    pub fn start(options: FeishuOptions) -> Result<FeishuHandle, FeishuError> {
        if options.token_ttl.as_secs() == 0 {
            return Err(FeishuError::Option {
                option: "token_ttl".into(),
                problem: "must be at least one second".into(),
            });
        }
        let ca = match options.ca.clone() {
            Some(ca) => ca,
            None => Arc::new(TestCa::generate()?),
        };
        let state = Arc::new(FeishuState {
            model: Mutex::new(FeishuModel::default()),
            recorder: Recorder::default(),
            clock: Clock::default(),
            events: events::Events::new(
                options.event_targets.clone(),
                options
                    .long_connection
                    .clone()
                    .map(|c| Arc::new(ws::Hub::new(c))),
            ),
            options: options.clone(),
            limits: Mutex::new(limits::Limits::default()),
        });
        let server = Server::start(
            options.listen,
            ca.server_config()?,
            state.clone(),
            options.worker_threads,
        )?;
        Ok(FeishuHandle { server, state, ca })
    }
}

/// A running Feishu emulator; dropping it stops it.
pub struct FeishuHandle {
    server: Server,
    state: Arc<FeishuState>,
    ca: Arc<TestCa>,
}

impl std::fmt::Debug for FeishuHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuHandle")
            .field("addr", &self.addr())
            .finish_non_exhaustive()
    }
}

impl FeishuHandle {
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

    /// The test CA, to share with another emulator (one CA file for both).
    pub fn ca(&self) -> Arc<TestCa> {
        self.ca.clone()
    }

    /// Write the test CA certificate (PEM) to `path`.
    pub fn write_ca_pem(&self, path: &Path) -> Result<(), FeishuError> {
        Ok(self.ca.write_cert_pem(path)?)
    }

    /// Everything received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorder.snapshot()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        self.state.recorder.clear();
    }

    /// Every message, seeded or sent, in order.
    pub fn messages(&self) -> Vec<FeishuMessage> {
        lock(&self.state.model).messages.clone()
    }

    /// How many distinct tenant tokens have been issued.
    pub fn tokens_issued(&self) -> usize {
        lock(&self.state.model).issued.len()
    }

    /// Make every issued token expired now (to test refresh without waiting).
    pub fn expire_tokens(&self) {
        let now = self.state.clock.now();
        for token in &mut lock(&self.state.model).issued {
            token.expires_at = token.expires_at.min(now);
        }
    }

    /// Every API call (not the token endpoint) answers 429 with code
    /// 99991400 and `x-ogw-ratelimit-reset` for `secs` (0: no longer), as
    /// Feishu's gateway does past an app's frequency limit.
    pub fn rate_limit_for(&self, secs: u64) {
        let now = self.state.clock.now();
        lock(&self.state.limits).busy_for(secs, now);
    }

    /// At most `limit.messages` messages into one chat per
    /// `limit.window_secs` (`None`: unlimited); past it a send or a reply
    /// into that chat answers 400 with code 230020, and nothing is sent.
    pub fn set_chat_limit(&self, limit: Option<limits::ChatLimit>) {
        lock(&self.state.limits).set_chat_limit(limit);
    }

    /// Invalidate every live tenant token now, before its expiry, as
    /// resetting the app secret does: requests carrying one are answered
    /// 99991663 and the token endpoint issues new ones.
    pub fn invalidate_tokens(&self) {
        for token in &mut lock(&self.state.model).issued {
            token.revoked = true;
        }
    }

    /// The next `requests` requests that carry a live tenant token find it
    /// invalidated at that moment (answered 99991663): a client that
    /// fetches a new token and retries can be refused again.
    pub fn invalidate_tokens_on_use(&self, requests: u32) {
        lock(&self.state.model).revoke_on_use = requests;
    }

    /// Add (or replace) a chat. Chats are also made, with the bot in them,
    /// by a person's message into an unknown chat, by `add_app_message` and
    /// by a direct message the bot sends (its p2p chat).
    pub fn add_chat(&self, chat: chats::FeishuChat) {
        let mut model = lock(&self.state.model);
        model.chats.retain(|c| c.chat_id != chat.chat_id);
        model.chats.push(chat);
    }

    /// The bot joins `chat_id` (a group chat named by its id if unknown).
    pub fn add_bot_to_chat(&self, chat_id: &str) {
        lock(&self.state.model).chat(chat_id, "group").bot_in = true;
    }

    /// The bot leaves `chat_id` (or was never in it): sending, replying and
    /// reading there answer 230002 (`GET /chats/{id}`: 232011).
    pub fn remove_bot_from_chat(&self, chat_id: &str) {
        lock(&self.state.model).chat(chat_id, "group").bot_in = false;
    }

    /// A person (`operator`) adds the bot to `chat_id`, or removes it: the
    /// membership changes and `im.chat.member.bot.added_v1` / `.deleted_v1`
    /// is pushed to every event target, as Feishu does.
    pub fn bot_membership_changed_by(&self, chat_id: &str, operator: &str, added: bool) {
        lock(&self.state.model).chat(chat_id, "group").bot_in = added;
        self.state.events.bot_membership(chat_id, operator, added);
    }

    /// The sender (`recall_type` `message_owner`) or a chat manager
    /// (`group_owner`, `group_manager`) recalls `message_id`: pushed as
    /// `im.message.recalled_v1`. `None` for a message never sent.
    pub fn recall_message(&self, message_id: &str, recall_type: &str) -> Option<()> {
        let chat_id = lock(&self.state.model)
            .messages
            .iter()
            .find(|m| m.message_id == message_id)?
            .chat_id
            .clone();
        self.state
            .events
            .message_recalled(message_id, &chat_id, recall_type);
        Some(())
    }

    /// Every chat known, in the order they were made.
    pub fn chats(&self) -> Vec<chats::FeishuChat> {
        lock(&self.state.model).chats.clone()
    }

    /// Seed a text message from a person in `chat_id`; returns its `om_…` id
    /// (a target for replies).
    pub fn add_user_message(&self, chat_id: &str, sender_open_id: &str, text: &str) -> String {
        self.send_user_message(chat_id, "group", sender_open_id, text, &[])
    }

    /// A person sends a text message to `chat_id` (a chat of `chat_type`:
    /// `p2p`, `group`); its text names the n-th of `mentions` `@_user_n`.
    /// It is stored and pushed to every event target; returns its id.
    pub fn send_user_message(
        &self,
        chat_id: &str,
        chat_type: &str,
        sender_open_id: &str,
        text: &str,
        mentions: &[events::Mention<'_>],
    ) -> String {
        let mut model = lock(&self.state.model);
        // Feishu pushes a chat's messages to a bot in it: the chat has the bot.
        let chat = model.chat(chat_id, if chat_type == "p2p" { "p2p" } else { "group" });
        if chat.owner_id.is_empty() {
            chat.owner_id = sender_open_id.to_owned();
        }
        let message_id = model.fresh("om");
        let message = FeishuMessage {
            message_id: message_id.clone(),
            chat_id: chat_id.to_owned(),
            root_id: String::new(),
            parent_id: String::new(),
            thread_id: String::new(),
            msg_type: "text".to_owned(),
            content: json!({ "text": text }).to_string(),
            sender_id: sender_open_id.to_owned(),
            sender_type: "user".to_owned(),
            receive_id: None,
            uuid: None,
            create_time_ms: crate::time::unix_now() * 1000,
        };
        model.messages.push(message.clone());
        // Pushed after the lock is released: the receiver may call back.
        drop(model);
        self.state
            .events
            .message_received(&message, chat_type, mentions);
        message_id
    }

    /// The app posts a text message to `chat_id` with its own credential,
    /// outside any gatehouse (what an audit must notice); returns its id.
    pub fn add_app_message(&self, chat_id: &str, app_id: &str, text: &str) -> String {
        let mut model = lock(&self.state.model);
        model.chat(chat_id, "group");
        let message_id = model.fresh("om");
        model.messages.push(FeishuMessage {
            message_id: message_id.clone(),
            chat_id: chat_id.to_owned(),
            root_id: String::new(),
            parent_id: String::new(),
            thread_id: String::new(),
            msg_type: "text".to_owned(),
            content: json!({ "text": text }).to_string(),
            sender_id: app_id.to_owned(),
            sender_type: "app".to_owned(),
            receive_id: Some(("chat_id".to_owned(), chat_id.to_owned())),
            uuid: None,
            create_time_ms: crate::time::unix_now() * 1000,
        });
        message_id
    }

    /// The app replies to `parent_id` with its own credential, outside any
    /// gatehouse, in a thread when `in_thread` (as `reply_in_thread` does);
    /// the new message's id, or Feishu's refusal (code, msg).
    pub fn add_app_reply(
        &self,
        parent_id: &str,
        app_id: &str,
        text: &str,
        in_thread: bool,
    ) -> Result<String, (i64, String)> {
        let body = json!({
            "msg_type": "text",
            "content": json!({ "text": text }).to_string(),
            "reply_in_thread": in_thread,
        })
        .to_string();
        let answer = reply_message(
            &mut lock(&self.state.model),
            app_id,
            parent_id,
            body.as_bytes(),
        );
        answer.created_id.ok_or_else(|| {
            (
                answer.body["code"].as_i64().unwrap_or_default(),
                answer.body["msg"].as_str().unwrap_or_default().to_owned(),
            )
        })
    }

    /// Faults for the next pushed events.
    pub fn set_event_faults(&self, faults: events::EventFaults) {
        self.state.events.set_faults(faults);
    }

    /// Pushes kept event `event_id` again (Feishu's retry: same event id);
    /// `None` for an event never pushed.
    pub fn repush(&self, event_id: &str) -> Option<Result<u16, String>> {
        self.state.events.repush(event_id)
    }

    /// Every event pushed so far, with what each attempt got back.
    pub fn event_deliveries(&self) -> Vec<events::EventDelivery> {
        self.state.events.deliveries()
    }

    /// Every event sent over the long connection, with its sends and
    /// whether it was acknowledged.
    pub fn long_deliveries(&self) -> Vec<ws::LongDelivery> {
        self.state
            .events
            .long
            .as_ref()
            .map(|h| h.deliveries())
            .unwrap_or_default()
    }

    /// Long connections open now.
    pub fn long_connected(&self) -> usize {
        self.state.events.long.as_ref().map_or(0, |h| h.connected())
    }

    /// Stop serving and join the server thread.
    pub fn shutdown(mut self) {
        self.server.shutdown();
    }
}

/// Seconds on a monotonic clock: token expiry must not jump with wall time.
#[derive(Debug)]
struct Clock(std::time::Instant);

impl Default for Clock {
    fn default() -> Self {
        Self(std::time::Instant::now())
    }
}

impl Clock {
    /// Starts at a large offset so `now + ttl` arithmetic never starts at 0.
    fn now(&self) -> u64 {
        1_000_000 + self.0.elapsed().as_secs()
    }
}

struct FeishuState {
    model: Mutex<FeishuModel>,
    recorder: Recorder,
    clock: Clock,
    options: FeishuOptions,
    events: events::Events,
    /// The rate limits knobs switched on.
    limits: Mutex<limits::Limits>,
}

/// An answer before it is put on the wire.
struct Answer {
    status: StatusCode,
    body: Value,
    created_id: Option<String>,
    /// Extra headers (the gateway's rate-limit headers).
    headers: Vec<(&'static str, String)>,
}

impl Answer {
    fn ok(body: Value) -> Self {
        Self {
            status: StatusCode::OK,
            body,
            created_id: None,
            headers: Vec::new(),
        }
    }

    fn error(status: StatusCode, code: i64, msg: &str) -> Self {
        Self {
            status,
            body: json!({ "code": code, "msg": msg }),
            created_id: None,
            headers: Vec::new(),
        }
    }

    /// Feishu's answers for a refused token (HTTP 400 with its code).
    fn refused_token(why: TokenRefusal) -> Self {
        let msg = match why {
            TokenRefusal::Missing => {
                "Missing access token for authorization. Please make a request with token attached."
            }
            TokenRefusal::Invalid => {
                "Invalid access token for authorization. Please make a request with token attached."
            }
            TokenRefusal::Expired => {
                "Invalid access token for authorization. The access token has expired."
            }
        };
        Self::error(StatusCode::BAD_REQUEST, why.code(), msg)
    }

    fn validation(detail: &str) -> Self {
        Self::error(
            StatusCode::BAD_REQUEST,
            99_992_402,
            &format!("field validation failed: {detail}"),
        )
    }

    fn message_not_found() -> Self {
        Self::error(
            StatusCode::BAD_REQUEST,
            230_001,
            "Your request contains an invalid request parameter, ext=invalid message_id",
        )
    }
}

impl Handler for FeishuState {
    fn handle(self: Arc<Self>, request: Request<Incoming>) -> HandlerFuture {
        Box::pin(async move {
            if request.uri().path() == ws::WS_PATH {
                return self.upgrade(request);
            }
            let (parts, body) = request.into_parts();
            let mut record = record_head(&parts);
            let answer = match Limited::new(body, MAX_BODY).collect().await {
                Err(_) => Answer::validation("request body too large"),
                Ok(collected) => {
                    let bytes = collected.to_bytes();
                    record.body_truncated = bytes.len() > BODY_RECORD_LIMIT;
                    record.body = bytes[..bytes.len().min(BODY_RECORD_LIMIT)].to_vec();
                    self.limited_answer(&parts, &bytes)
                }
            };
            record.status = answer.status.as_u16();
            record.created_id = answer.created_id.clone();
            self.recorder.push(record);
            let mut response = Response::new(full_body(Bytes::from(answer.body.to_string())));
            *response.status_mut() = answer.status;
            for (name, value) in &answer.headers {
                if let Ok(value) = http::HeaderValue::from_str(value) {
                    response.headers_mut().insert(*name, value);
                }
            }
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json; charset=utf-8"),
            );
            response
        })
    }
}

impl FeishuState {
    /// The long connection's WebSocket handshake, for a URL the endpoint
    /// handed out.
    fn upgrade(self: Arc<Self>, mut request: Request<Incoming>) -> Response<crate::server::Body> {
        let key = request
            .headers()
            .get(http::header::SEC_WEBSOCKET_KEY)
            .map(|k| k.as_bytes().to_vec());
        let hub = self.events.long.clone();
        let admitted = hub
            .as_ref()
            .is_some_and(|h| h.admits(request.uri().query().unwrap_or("")));
        let (Some(key), Some(hub), true) = (key, hub, admitted) else {
            let mut refused = Response::new(full_body("not a long connection ticket"));
            *refused.status_mut() = StatusCode::FORBIDDEN;
            return refused;
        };
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
        tokio::spawn(async move {
            match hyper::upgrade::on(&mut request).await {
                Ok(upgraded) => hub.serve(upgraded).await,
                Err(error) => tracing::debug!(%error, "long connection upgrade failed"),
            }
        });
        let mut response = Response::new(full_body(Bytes::new()));
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        headers.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("Upgrade"),
        );
        if let Ok(accept) = http::HeaderValue::from_str(&accept) {
            headers.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        response
    }

    /// `POST /callback/ws/endpoint`: the URL for an app with its secret.
    fn ws_endpoint(&self, parts: &http::request::Parts, body: &[u8]) -> Answer {
        let asked: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let known = self.options.apps.iter().any(|a| {
            Some(a.app_id.as_str()) == asked["AppID"].as_str()
                && Some(a.app_secret.as_str()) == asked["AppSecret"].as_str()
        });
        let host = parts
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok());
        match (&self.events.long, known, host) {
            (Some(hub), true, Some(host)) => {
                if Some(hub.config.app_id.as_str()) == asked["AppID"].as_str() {
                    Answer::ok(hub.endpoint_answer(&format!("wss://{host}")))
                } else {
                    Answer::error(StatusCode::OK, ws::CODE_AUTH_FAILED, "auth failed")
                }
            }
            (None, _, _) => Answer::error(StatusCode::NOT_FOUND, 404, "404 page not found"),
            _ => Answer::error(StatusCode::OK, ws::CODE_AUTH_FAILED, "auth failed"),
        }
    }

    fn answer(&self, parts: &http::request::Parts, body: &[u8]) -> Answer {
        let path = parts.uri.path();
        let query = crate::util::parse_query(parts.uri.query().unwrap_or(""));
        let query_param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let now = self.clock.now();
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        if parts.method == Method::POST
            && segments == ["open-apis", "auth", "v3", "tenant_access_token", "internal"]
        {
            return self.tenant_token(body, now);
        }
        if parts.method == Method::POST && path == ws::ENDPOINT_PATH {
            return self.ws_endpoint(parts, body);
        }
        // Everything else needs a live tenant token.
        let authorization = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let mut model = lock(&self.model);
        let index = match authenticate(&model.issued, authorization, now) {
            Ok(index) => index,
            Err(why) => return Answer::refused_token(why),
        };
        if model.revoke_on_use > 0 {
            model.revoke_on_use -= 1;
            model.issued[index].revoked = true;
            return Answer::refused_token(TokenRefusal::Invalid);
        }
        let app_id = model.issued[index].app_id.clone();
        match (&parts.method, segments.as_slice()) {
            (&Method::GET, ["open-apis", "bot", "v3", "info"]) => Answer::ok(json!({
                "code": 0,
                "msg": "ok",
                "bot": {
                    "activate_status": 2,
                    "app_name": self.options.bot_name,
                    "avatar_url": "",
                    "ip_white_list": [],
                    "open_id": self.options.bot_open_id,
                },
            })),
            (&Method::POST, ["open-apis", "im", "v1", "messages"]) => {
                let receive_id_type = query_param("receive_id_type").unwrap_or("");
                send_message(&mut model, &app_id, receive_id_type, body)
            }
            (&Method::POST, ["open-apis", "im", "v1", "messages", id, "reply"]) => {
                reply_message(&mut model, &app_id, id, body)
            }
            (&Method::GET, ["open-apis", "im", "v1", "messages", id]) => {
                match model.messages.iter().find(|m| m.message_id == *id) {
                    Some(message)
                        if chats::access(&model.chats, &message.chat_id)
                            != chats::Access::Member =>
                    {
                        chats::bot_not_in_chat()
                    }
                    Some(message) => Answer::ok(json!({
                        "code": 0,
                        "msg": "success",
                        "data": { "items": [message_json(message)] },
                    })),
                    None => Answer::message_not_found(),
                }
            }
            (&Method::GET, ["open-apis", "im", "v1", "messages"]) => {
                list_messages(&model, &query_param)
            }
            (&Method::GET, ["open-apis", "im", "v1", "chats", chat_id]) => {
                chats::chat_info(&model.chats, chat_id)
            }
            (&Method::GET, ["open-apis", "im", "v1", "chats"]) => {
                // The chats the bot is in (p2p ones too, here).
                let items: Vec<Value> = model
                    .chats
                    .iter()
                    .filter(|c| c.bot_in)
                    .map(|c| {
                        json!({
                            "chat_id": c.chat_id,
                            "avatar": "",
                            "name": c.name,
                            "description": "",
                            "owner_id": c.owner_id,
                            "owner_id_type": "open_id",
                            "external": false,
                            "tenant_key": "gatehouse-tenant",
                        })
                    })
                    .collect();
                page(
                    items,
                    CHATS_PAGE_MAX,
                    query_param("page_size"),
                    query_param("page_token"),
                )
            }
            _ => Answer::error(StatusCode::NOT_FOUND, 404, "404 page not found"),
        }
    }

    /// The rate limits first (the gateway's, then a chat's for a message
    /// into it), then the API; a message created counts for its chat.
    fn limited_answer(&self, parts: &http::request::Parts, body: &[u8]) -> Answer {
        let now = self.clock.now();
        let token_call = parts.uri.path() == "/open-apis/auth/v3/tenant_access_token/internal";
        if !token_call {
            if let Some((mut answer, reset)) = lock(&self.limits).gateway(now) {
                answer.headers = limits::gateway_headers(reset).into();
                return answer;
            }
        }
        let chat = self.message_chat(parts, body);
        if let Some(chat) = &chat {
            if let Some(refused) = lock(&self.limits).chat(chat, now) {
                return refused;
            }
        }
        let answer = self.answer(parts, body);
        if let (Some(chat), Some(_)) = (&chat, &answer.created_id) {
            lock(&self.limits).sent(chat, now);
        }
        answer
    }

    /// The chat a send or a reply puts a message into, if it is one.
    fn message_chat(&self, parts: &http::request::Parts, body: &[u8]) -> Option<String> {
        if parts.method != Method::POST {
            return None;
        }
        let segments: Vec<&str> = parts.uri.path().split('/').skip(1).collect();
        match segments.as_slice() {
            ["open-apis", "im", "v1", "messages"] => {
                let query = crate::util::parse_query(parts.uri.query().unwrap_or(""));
                let kind = query.iter().find(|(k, _)| k == "receive_id_type")?;
                let request: Value = serde_json::from_slice(body).ok()?;
                let id = request.get("receive_id")?.as_str()?;
                Some(if kind.1 == "chat_id" {
                    id.to_owned()
                } else {
                    format!("oc_p2p_{}", hex::encode(id.as_bytes()))
                })
            }
            ["open-apis", "im", "v1", "messages", parent, "reply"] => lock(&self.model)
                .messages
                .iter()
                .find(|m| m.message_id == *parent)
                .map(|m| m.chat_id.clone()),
            _ => None,
        }
    }

    fn tenant_token(&self, body: &[u8], now: u64) -> Answer {
        let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let field = |name: &str| request.get(name).and_then(Value::as_str).unwrap_or("");
        let mut model = lock(&self.model);
        let token = match grant_token(
            &self.options.apps,
            &model.issued,
            field("app_id"),
            field("app_secret"),
            now,
        ) {
            TokenGrant::Refuse { code, msg } => {
                return Answer::error(StatusCode::BAD_REQUEST, code, msg)
            }
            TokenGrant::Reuse(token) => token,
            TokenGrant::Issue => {
                let token = IssuedToken {
                    token: format!("t-{}", random_hex(20)),
                    app_id: field("app_id").to_owned(),
                    expires_at: now + self.options.token_ttl.as_secs(),
                    revoked: false,
                };
                model.issued.push(token.clone());
                token
            }
        };
        Answer::ok(json!({
            "code": 0,
            "msg": "ok",
            "tenant_access_token": token.token,
            "expire": token.expires_at.saturating_sub(now),
        }))
    }
}

/// Validate `msg_type` and `content` (a JSON string; text needs `text`).
fn check_content(body: &Value) -> Result<(String, String), Answer> {
    let msg_type = body.get("msg_type").and_then(Value::as_str).unwrap_or("");
    if !MSG_TYPES.contains(&msg_type) {
        return Err(Answer::validation("msg_type is invalid"));
    }
    let Some(content) = body.get("content").and_then(Value::as_str) else {
        return Err(Answer::validation(
            "content is required and must be a string",
        ));
    };
    let Ok(parsed) = serde_json::from_str::<Value>(content) else {
        return Err(Answer::validation("content is not valid JSON"));
    };
    if msg_type == "text" && !parsed.get("text").is_some_and(Value::is_string) {
        return Err(Answer::validation("text content needs a text field"));
    }
    Ok((msg_type.to_owned(), content.to_owned()))
}

fn send_message(
    model: &mut FeishuModel,
    app_id: &str,
    receive_id_type: &str,
    body: &[u8],
) -> Answer {
    if !RECEIVE_ID_TYPES.contains(&receive_id_type) {
        return Answer::validation("receive_id_type is invalid");
    }
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Answer::validation("body is not JSON");
    };
    let (msg_type, content) = match check_content(&request) {
        Ok(pair) => pair,
        Err(answer) => return answer,
    };
    if let Some(refused) = chats::too_long(&msg_type, body.len()) {
        return refused;
    }
    let Some(receive_id) = request
        .get("receive_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    else {
        return Answer::validation("receive_id is required");
    };
    let uuid = request
        .get("uuid")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(existing) = dedupe(model, uuid.as_deref()) {
        return created(&existing);
    }
    let chat_id = if receive_id_type == "chat_id" {
        if let Some(refused) = chats::require_member(&model.chats, receive_id, "receive_id") {
            return refused;
        }
        receive_id.to_owned()
    } else {
        // A direct message lands in the p2p chat with that person.
        let chat_id = format!("oc_p2p_{}", hex::encode(receive_id.as_bytes()));
        let chat = model.chat(&chat_id, "p2p");
        if chat.owner_id.is_empty() && receive_id_type == "open_id" {
            chat.owner_id = receive_id.to_owned();
        }
        if !chat.bot_in {
            return chats::bot_not_in_chat();
        }
        chat_id
    };
    let message = FeishuMessage {
        message_id: model.fresh("om"),
        chat_id,
        root_id: String::new(),
        parent_id: String::new(),
        thread_id: String::new(),
        msg_type,
        content,
        sender_id: app_id.to_owned(),
        sender_type: "app".to_owned(),
        receive_id: Some((receive_id_type.to_owned(), receive_id.to_owned())),
        uuid,
        create_time_ms: crate::time::unix_now() * 1000,
    };
    model.messages.push(message.clone());
    created(&message)
}

fn reply_message(model: &mut FeishuModel, app_id: &str, parent_id: &str, body: &[u8]) -> Answer {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Answer::validation("body is not JSON");
    };
    let (msg_type, content) = match check_content(&request) {
        Ok(pair) => pair,
        Err(answer) => return answer,
    };
    if let Some(refused) = chats::too_long(&msg_type, body.len()) {
        return refused;
    }
    let reply_in_thread = match request.get("reply_in_thread") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Answer::validation("reply_in_thread must be a boolean"),
    };
    let Some(parent) = model
        .messages
        .iter()
        .find(|m| m.message_id == parent_id)
        .cloned()
    else {
        return Answer::message_not_found();
    };
    let uuid = request
        .get("uuid")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(existing) = dedupe(model, uuid.as_deref()) {
        return created(&existing);
    }
    if let Some(refused) = chats::require_member(&model.chats, &parent.chat_id, "message_id") {
        return refused;
    }
    // In a topic-mode chat every reply is in the topic (oapi-sdk-go: "若群聊
    // 已经是话题模式，则自动回复该条消息所在的话题").
    let topic_chat = model
        .chats
        .iter()
        .any(|c| c.chat_id == parent.chat_id && c.chat_mode == "topic");
    let (thread_id, starts_thread) =
        chats::reply_thread(&parent, reply_in_thread || topic_chat, || {
            model.fresh("omt")
        });
    if starts_thread {
        // The message replied to becomes the thread's first message.
        if let Some(p) = model
            .messages
            .iter_mut()
            .find(|m| m.message_id == parent_id)
        {
            p.thread_id = thread_id.clone();
        }
    }
    let root_id = if parent.root_id.is_empty() {
        parent.message_id.clone()
    } else {
        parent.root_id.clone()
    };
    let message = FeishuMessage {
        message_id: model.fresh("om"),
        chat_id: parent.chat_id.clone(),
        root_id,
        parent_id: parent.message_id.clone(),
        thread_id,
        msg_type,
        content,
        sender_id: app_id.to_owned(),
        sender_type: "app".to_owned(),
        receive_id: None,
        uuid,
        create_time_ms: crate::time::unix_now() * 1000,
    };
    model.messages.push(message.clone());
    created(&message)
}

/// Feishu de-duplicates sends with the same `uuid` (for an hour; the
/// emulator for its lifetime).
fn dedupe(model: &FeishuModel, uuid: Option<&str>) -> Option<FeishuMessage> {
    let uuid = uuid?;
    model
        .messages
        .iter()
        .find(|m| m.uuid.as_deref() == Some(uuid))
        .cloned()
}

fn created(message: &FeishuMessage) -> Answer {
    Answer {
        status: StatusCode::OK,
        body: json!({ "code": 0, "msg": "success", "data": message_json(message) }),
        created_id: Some(message.message_id.clone()),
        headers: Vec::new(),
    }
}

/// `GET /im/v1/messages`: a chat's messages (a thread by its first one)
/// or a thread's, oldest first unless `sort_type=ByCreateTimeDesc`,
/// between `start_time` and `end_time` (seconds, inclusive; chats only).
/// The bot must be in the chat (230002), which must exist (230001).
fn list_messages<'q>(model: &FeishuModel, query_param: &dyn Fn(&str) -> Option<&'q str>) -> Answer {
    let container = query_param("container_id").unwrap_or("");
    let (chat_id, thread) = match query_param("container_id_type") {
        Some("chat") => (container.to_owned(), None),
        Some("thread") => match model.messages.iter().find(|m| m.thread_id == container) {
            Some(m) if !container.is_empty() => (m.chat_id.clone(), Some(container)),
            _ => return chats::invalid_param("container_id"),
        },
        _ => return Answer::validation("container_id_type must be chat or thread"),
    };
    if let Some(refused) = chats::require_member(&model.chats, &chat_id, "container_id") {
        return refused;
    }
    let descending = match query_param("sort_type") {
        None | Some("ByCreateTimeAsc") => false,
        Some("ByCreateTimeDesc") => true,
        Some(_) => return Answer::validation("sort_type is invalid"),
    };
    let secs = |name: &str| query_param(name).and_then(|v| v.parse::<u64>().ok());
    let (start, end) = match thread {
        None => (secs("start_time"), secs("end_time")),
        Some(_) => (None, None),
    };
    let mut items: Vec<Value> = model
        .messages
        .iter()
        .enumerate()
        .filter(|(i, m)| match thread {
            None => m.chat_id == chat_id && chats::listed_in_chat(&model.messages, *i),
            Some(t) => m.thread_id == t,
        })
        .map(|(_, m)| m)
        .filter(|m| start.is_none_or(|s| m.create_time_ms / 1000 >= s))
        .filter(|m| end.is_none_or(|e| m.create_time_ms / 1000 <= e))
        .map(message_json)
        .collect();
    if descending {
        items.reverse();
    }
    page(
        items,
        MESSAGES_PAGE_MAX,
        query_param("page_size"),
        query_param("page_token"),
    )
}

/// Feishu's `page_size` bounds: messages 1..=50, chats 1..=100; 20 unset.
const MESSAGES_PAGE_MAX: usize = 50;
const CHATS_PAGE_MAX: usize = 100;
const PAGE_SIZE_DEFAULT: usize = 20;

/// One page of a listing: `page_size` items (default 20, at most `max`;
/// outside `1..=max` refused as Feishu refuses it) from where `page_token`
/// says, with `has_more` and the next token. Tokens are opaque to clients
/// (Feishu's are too): a made-up one is refused.
fn page(
    items: Vec<Value>,
    max: usize,
    page_size: Option<&str>,
    page_token: Option<&str>,
) -> Answer {
    let size = match page_size {
        None => PAGE_SIZE_DEFAULT,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => n,
            _ => return Answer::validation(&format!("page_size must be 1 to {max}")),
        },
    };
    let from = match page_token.filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => match decode_page_token(t) {
            Some(n) => n,
            None => return Answer::validation("page_token is invalid"),
        },
    };
    let has_more = items.len() > from.saturating_add(size);
    let items: Vec<Value> = items.into_iter().skip(from).take(size).collect();
    Answer::ok(json!({
        "code": 0,
        "msg": "success",
        "data": {
            "has_more": has_more,
            "page_token": if has_more { encode_page_token(from + size) } else { String::new() },
            "items": items,
        },
    }))
}

const PAGE_TOKEN_PREFIX: &str = "fs-page:";

fn encode_page_token(offset: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{PAGE_TOKEN_PREFIX}{offset}"))
}

fn decode_page_token(token: &str) -> Option<usize> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    String::from_utf8(bytes)
        .ok()?
        .strip_prefix(PAGE_TOKEN_PREFIX)?
        .parse()
        .ok()
}

fn message_json(message: &FeishuMessage) -> Value {
    let id_type = if message.sender_type == "app" {
        "app_id"
    } else {
        "open_id"
    };
    json!({
        "message_id": message.message_id,
        "root_id": message.root_id,
        "parent_id": message.parent_id,
        "thread_id": message.thread_id,
        "msg_type": message.msg_type,
        "create_time": message.create_time_ms.to_string(),
        "update_time": message.create_time_ms.to_string(),
        "deleted": false,
        "updated": false,
        "chat_id": message.chat_id,
        "sender": {
            "id": message.sender_id,
            "id_type": id_type,
            "sender_type": message.sender_type,
            "tenant_key": "gatehouse-tenant",
        },
        "body": { "content": message.content },
        "mentions": [],
        "upper_message_id": "",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_page_by_token() {
        let items: Vec<Value> = (0..45).map(|i| json!(i)).collect();
        let first = page(items.clone(), 50, Some("20"), None);
        assert_eq!(first.body["data"]["items"].as_array().unwrap().len(), 20);
        assert_eq!(first.body["data"]["has_more"], true);
        let next = first.body["data"]["page_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let second = page(items.clone(), 50, Some("20"), Some(&next));
        assert_eq!(second.body["data"]["items"][0], 20);
        let next = second.body["data"]["page_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let last = page(items.clone(), 50, Some("20"), Some(&next));
        assert_eq!(last.body["data"]["items"][0], 40);
        assert_eq!(last.body["data"]["items"].as_array().unwrap().len(), 5);
        assert_eq!(last.body["data"]["has_more"], false);
        assert_eq!(last.body["data"]["page_token"], "");
        // At most 50 a page; a token that is not one is refused.
        let all = page(items.clone(), 50, Some("50"), None);
        assert_eq!(all.body["data"]["items"].as_array().unwrap().len(), 45);
        // Unset: 20.
        let default = page(items.clone(), 50, None, None);
        assert_eq!(default.body["data"]["items"].as_array().unwrap().len(), 20);
        // Outside 1..=max, or a token it did not hand out: refused.
        for (size, token) in [
            (Some("51"), None),
            (Some("0"), None),
            (Some("x"), None),
            (None, Some("20")),
            (None, Some("x")),
        ] {
            let refused = page(items.clone(), 50, size, token);
            assert_eq!(
                refused.status,
                StatusCode::BAD_REQUEST,
                "{size:?} {token:?}"
            );
            assert_eq!(refused.body["code"], 99_992_402);
        }
        assert_eq!(page(items, 100, Some("100"), None).status, StatusCode::OK);
    }

    fn apps() -> Vec<FeishuApp> {
        vec![FeishuApp {
            app_id: "cli_a".into(),
            app_secret: "secret".into(),
        }]
    }

    fn token(app: &str, expires_at: u64) -> IssuedToken {
        IssuedToken {
            token: format!("t-{app}-{expires_at}"),
            app_id: app.into(),
            expires_at,
            revoked: false,
        }
    }

    #[test]
    fn grant_follows_feishu_reuse_rule() {
        let now = 10_000;
        let live = token("cli_a", now + 7200);
        let near_expiry = token("cli_a", now + 1799);
        let expired = token("cli_a", now - 1);
        let revoked = IssuedToken {
            revoked: true,
            ..live.clone()
        };
        let cases = [
            (vec![revoked], "cli_a", "secret", TokenGrant::Issue),
            (vec![], "cli_a", "secret", TokenGrant::Issue),
            (
                vec![live.clone()],
                "cli_a",
                "secret",
                TokenGrant::Reuse(live.clone()),
            ),
            (vec![near_expiry], "cli_a", "secret", TokenGrant::Issue),
            (vec![expired], "cli_a", "secret", TokenGrant::Issue),
            (
                vec![live.clone()],
                "cli_a",
                "wrong",
                TokenGrant::Refuse {
                    code: 10_014,
                    msg: "app secret invalid",
                },
            ),
            (
                vec![live],
                "cli_b",
                "secret",
                TokenGrant::Refuse {
                    code: 10_003,
                    msg: "invalid param",
                },
            ),
        ];
        for (issued, app_id, secret, expected) in cases {
            assert_eq!(
                grant_token(&apps(), &issued, app_id, secret, now),
                expected,
                "{app_id} {secret}"
            );
        }
    }

    #[test]
    fn authenticate_requires_live_issued_token_with_distinct_codes() {
        let revoked = IssuedToken {
            revoked: true,
            ..token("cli_a", 200)
        };
        let issued = [token("cli_a", 100), revoked];
        use TokenRefusal::*;
        let cases: &[(Option<&str>, u64, Result<usize, TokenRefusal>)] = &[
            (Some("Bearer t-cli_a-100"), 99, Ok(0)),
            (Some("Bearer t-cli_a-100"), 100, Err(Expired)),
            (Some("Bearer t-cli_a-200"), 50, Err(Invalid)),
            (Some("Bearer t-cli_a-1000"), 50, Err(Invalid)),
            (Some("Bearer "), 50, Err(Missing)),
            (Some("t-cli_a-100"), 50, Err(Missing)),
            (Some("bearer t-cli_a-100"), 50, Err(Missing)),
            (None, 50, Err(Missing)),
        ];
        for (authorization, now, expected) in cases {
            assert_eq!(
                authenticate(&issued, *authorization, *now),
                *expected,
                "{authorization:?} at {now}"
            );
        }
        assert_eq!(
            [Missing, Invalid, Expired].map(TokenRefusal::code),
            [99_991_661, 99_991_663, 99_991_668]
        );
    }

    #[test]
    fn content_validation() {
        for (body, ok) in [
            (
                json!({"msg_type": "text", "content": "{\"text\":\"hi\"}"}),
                true,
            ),
            (
                json!({"msg_type": "post", "content": "{\"zh_cn\":{}}"}),
                true,
            ),
            (
                json!({"msg_type": "text", "content": {"text": "hi"}}),
                false,
            ),
            (
                json!({"msg_type": "text", "content": "{\"nope\":1}"}),
                false,
            ),
            (json!({"msg_type": "text", "content": "not json"}), false),
            (json!({"msg_type": "html", "content": "{}"}), false),
        ] {
            assert_eq!(check_content(&body).is_ok(), ok, "{body}");
        }
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            /// A reused token always belongs to the app and has more than
            /// 30 minutes left; wrong secrets never get a token.
            #[test]
            fn grants_respect_expiry_and_credentials(
                expiries in proptest::collection::vec(0u64..20_000, 0..6),
                now in 0u64..20_000,
                right_secret in any::<bool>(),
            ) {
                let issued: Vec<IssuedToken> = expiries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| IssuedToken {
                        token: format!("t-{i}"),
                        app_id: if i % 2 == 0 { "cli_a".into() } else { "cli_b".into() },
                        expires_at: *e,
                        revoked: false,
                    })
                    .collect();
                let secret = if right_secret { "secret" } else { "nope" };
                match grant_token(&super::apps(), &issued, "cli_a", secret, now) {
                    TokenGrant::Reuse(token) => {
                        prop_assert!(right_secret);
                        prop_assert_eq!(token.app_id.as_str(), "cli_a");
                        prop_assert!(token.expires_at > now + REISSUE_BELOW_SECS);
                    }
                    TokenGrant::Issue => prop_assert!(right_secret),
                    TokenGrant::Refuse { .. } => prop_assert!(!right_secret),
                }
                for token in &issued {
                    let bearer = format!("Bearer {}", token.token);
                    let authenticated = authenticate(&issued, Some(&bearer), now).is_ok();
                    prop_assert_eq!(authenticated, token.expires_at > now);
                }
            }
        }
    }
}
