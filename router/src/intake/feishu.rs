//! Feishu event subscription over HTTP: a request ─► a challenge to answer,
//! or a verified 2.0 event to store, as pure functions.
//!
//! ```text
//! raw body ─► X-Lark-Signature (when signed; required for events when an
//!             encrypt key is set) ─► JSON ─► {"encrypt": …} decrypted
//!          ─► url_verification: token checked ─► {"challenge": …} at once
//!          ─► 2.0 envelope: schema, event id, type, app id (ours), token
//!             (when no encrypt key) ─► route on event type ─► dedup key
//! ```
//!
//! The encrypt key and the verification token are verification secrets,
//! read from files and kept out of every message and `Debug`. Feishu sends
//! the challenge encrypted when an encrypt key is set and unsigned; it
//! expects the challenge back in plain JSON. Events are signed over the raw
//! body; a signed request's timestamp must be within [`MAX_AGE_SECS`] of
//! now, and a replay inside that window is caught by the deduplication.

pub mod connect;
pub mod crypt;
pub mod longconn;
mod map;

use serde_json::Value;

use crate::intake::signature::SecretError;

pub use crypt::{decrypt, encrypt, signature};
pub use map::{map, map_recall, recalled_message};

/// How far a signed request's timestamp may be from now, either way.
pub const MAX_AGE_SECS: u64 = 15 * 60;

/// The event type of a chat message.
pub const MESSAGE_RECEIVE: &str = "im.message.receive_v1";

/// A message was recalled (by its sender or a chat manager).
pub const MESSAGE_RECALLED: &str = "im.message.recalled_v1";
/// The bot was added to a chat.
pub const BOT_ADDED: &str = "im.chat.member.bot.added_v1";
/// The bot was removed from a chat.
pub const BOT_REMOVED: &str = "im.chat.member.bot.deleted_v1";

/// Event types answered 200 and not stored: known, and asking nothing of
/// the bot nor changing what it may do.
const IGNORED: &[&str] = &[
    "im.message.message_read_v1",
    "im.message.reaction.created_v1",
    "im.message.reaction.deleted_v1",
];

/// What verifies a Feishu app's requests. At least one of the encrypt key
/// and the verification token is set.
pub struct FeishuKeys {
    app_id: String,
    encrypt_key: Option<Vec<u8>>,
    token: Option<Vec<u8>>,
}

impl std::fmt::Debug for FeishuKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeishuKeys")
            .field("app_id", &self.app_id)
            .field("encrypt_key", &self.encrypt_key.is_some())
            .field("token", &self.token.is_some())
            .finish()
    }
}

impl Drop for FeishuKeys {
    fn drop(&mut self) {
        for secret in [&mut self.encrypt_key, &mut self.token]
            .into_iter()
            .flatten()
        {
            secret.iter_mut().for_each(|b| *b = 0);
        }
    }
}

impl FeishuKeys {
    /// Keys for `app_id`; fails without an encrypt key and a token.
    pub fn new(
        app_id: &str,
        encrypt_key: Option<&[u8]>,
        token: Option<&[u8]>,
    ) -> Result<Self, SecretError> {
        if encrypt_key.is_none() && token.is_none() {
            return Err(SecretError::NoSecret);
        }
        Ok(Self {
            app_id: app_id.to_owned(),
            encrypt_key: encrypt_key.map(<[u8]>::to_vec),
            token: token.map(<[u8]>::to_vec),
        })
    }

    /// Reads the encrypt key and the token from files (a final line break
    /// is not part of either).
    pub fn from_files(
        app_id: &str,
        encrypt_key: Option<&std::path::Path>,
        token: Option<&std::path::Path>,
    ) -> Result<Self, SecretError> {
        let key = encrypt_key.map(read_secret).transpose()?;
        let token = token.map(read_secret).transpose()?;
        Self::new(app_id, key.as_deref(), token.as_deref())
    }
}

fn read_secret(path: &std::path::Path) -> Result<Vec<u8>, SecretError> {
    let mut bytes = std::fs::read(path).map_err(|source| SecretError::Read {
        path: path.to_owned(),
        source,
    })?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(SecretError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(bytes)
}

/// The signature headers of a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Signed<'a> {
    pub timestamp: Option<&'a str>,
    pub nonce: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Why a request is refused; each maps to a 4xx.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the X-Lark-Signature header is missing")]
    Unsigned,
    #[error("the X-Lark-Signature header does not match the body")]
    BadSignature,
    #[error("the request timestamp is missing, malformed or more than {MAX_AGE_SECS} s from now")]
    Stale,
    #[error("the verification token does not match")]
    BadToken,
    #[error("the body cannot be decrypted with the encrypt key")]
    Undecryptable,
    #[error("the body is encrypted but no encrypt key is configured")]
    Encrypted,
    #[error("the body is not JSON: {0}")]
    Malformed(String),
    #[error("the event is not a 2.0 event: {0}")]
    Envelope(&'static str),
    #[error("the event is for another app")]
    WrongApp,
    #[error("unknown event type `{0}`")]
    UnknownEvent(String),
}

impl Refused {
    /// 401 for what fails authentication, 403 for another app, 400 else.
    pub fn status(&self) -> u16 {
        match self {
            Refused::Unsigned
            | Refused::BadSignature
            | Refused::Stale
            | Refused::BadToken
            | Refused::Undecryptable => 401,
            Refused::WrongApp => 403,
            _ => 400,
        }
    }
}

/// A verified request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// `url_verification`: answer `{"challenge": …}`.
    Challenge(String),
    /// A known event not acted on: answer 200, store nothing.
    Ignore { event_type: String },
    /// An event to store: `event_id` and `meaning` are its two dedup keys;
    /// `plain` is the decrypted event as stored.
    Store {
        event_id: String,
        event_type: String,
        meaning: String,
        plain: Vec<u8>,
    },
}

/// Verifies and opens one request. `now` is seconds since the epoch.
pub fn open(
    keys: &FeishuKeys,
    signed: Signed<'_>,
    body: &[u8],
    now: u64,
) -> Result<Opened, Refused> {
    let was_signed = signed.signature.is_some();
    if let (Some(key), Some(_)) = (&keys.encrypt_key, signed.signature) {
        check_signature(key, signed, body, now)?;
    }
    let outer: Value = parse(body)?;
    let (plain, value) = match outer.get("encrypt") {
        Some(sealed) => unseal(keys, sealed)?,
        // With an encrypt key Feishu encrypts everything; plain text is forged.
        None if keys.encrypt_key.is_some() => return Err(Refused::Undecryptable),
        None => (body.to_vec(), outer),
    };
    if value.get("type").and_then(Value::as_str) == Some("url_verification") {
        check_token(keys, value.get("token"))?;
        let challenge = value
            .get("challenge")
            .and_then(Value::as_str)
            .ok_or(Refused::Envelope("a challenge without `challenge`"))?;
        return Ok(Opened::Challenge(challenge.to_owned()));
    }
    // Events are signed whenever an encrypt key is set.
    if keys.encrypt_key.is_some() && !was_signed {
        return Err(Refused::Unsigned);
    }
    envelope(keys, value, plain)
}

/// The plain text of an `{"encrypt": …}` body and its JSON.
fn unseal(keys: &FeishuKeys, sealed: &Value) -> Result<(Vec<u8>, Value), Refused> {
    let key = keys.encrypt_key.as_deref().ok_or(Refused::Encrypted)?;
    let sealed = sealed.as_str().ok_or(Refused::Undecryptable)?;
    let plain = decrypt(key, sealed).ok_or(Refused::Undecryptable)?;
    let value = parse(&plain)?;
    Ok((plain, value))
}

/// Opens an event that came over the long connection (handed over by the
/// connect process): no HTTP signature exists there, the TLS connection to
/// Feishu authenticated it. Still checked as an HTTP event is: decrypted
/// when encrypted, the 2.0 envelope, our app id, the token when one is
/// configured, the event type and its dedup keys. A challenge is refused
/// (only HTTP subscriptions are challenged).
pub fn open_delivered(keys: &FeishuKeys, payload: &[u8]) -> Result<Opened, Refused> {
    let outer: Value = parse(payload)?;
    let (plain, value) = match outer.get("encrypt") {
        Some(sealed) => unseal(keys, sealed)?,
        None => (payload.to_vec(), outer),
    };
    if value.get("type").and_then(Value::as_str) == Some("url_verification") {
        return Err(Refused::Envelope("a challenge over the long connection"));
    }
    envelope(keys, value, plain)
}

fn parse(bytes: &[u8]) -> Result<Value, Refused> {
    serde_json::from_slice(bytes).map_err(|e| Refused::Malformed(e.to_string()))
}

fn check_signature(key: &[u8], signed: Signed<'_>, body: &[u8], now: u64) -> Result<(), Refused> {
    let timestamp = signed.timestamp.ok_or(Refused::Stale)?;
    let at: u64 = timestamp.parse().map_err(|_| Refused::Stale)?;
    if at.abs_diff(now) > MAX_AGE_SECS {
        return Err(Refused::Stale);
    }
    let mut given = [0u8; 32];
    let header = signed.signature.ok_or(Refused::Unsigned)?;
    hex::decode_to_slice(header, &mut given).map_err(|_| Refused::BadSignature)?;
    let expected = signature(timestamp, signed.nonce.unwrap_or(""), key, body);
    if crypt::same(&given, &expected) {
        Ok(())
    } else {
        Err(Refused::BadSignature)
    }
}

/// The token is checked whenever one is configured; without an encrypt key
/// it is the only check, so it is then required.
fn check_token(keys: &FeishuKeys, given: Option<&Value>) -> Result<(), Refused> {
    let Some(token) = &keys.token else {
        return Ok(());
    };
    let given = given.and_then(Value::as_str).unwrap_or("");
    if crypt::same(given.as_bytes(), token) {
        Ok(())
    } else {
        Err(Refused::BadToken)
    }
}

fn envelope(keys: &FeishuKeys, value: Value, plain: Vec<u8>) -> Result<Opened, Refused> {
    if value.get("schema").and_then(Value::as_str) != Some("2.0") {
        return Err(Refused::Envelope("`schema` is not 2.0"));
    }
    let header = value
        .get("header")
        .ok_or(Refused::Envelope("no `header`"))?;
    let text = |field| header.get(field).and_then(Value::as_str);
    check_token(keys, header.get("token"))?;
    if text("app_id") != Some(keys.app_id.as_str()) {
        return Err(Refused::WrongApp);
    }
    let event_id = text("event_id")
        .filter(|id| !id.is_empty() && id.len() <= 128)
        .ok_or(Refused::Envelope("no `header.event_id`"))?;
    let event_type = text("event_type").ok_or(Refused::Envelope("no `header.event_type`"))?;
    text("create_time").ok_or(Refused::Envelope("no `header.create_time`"))?;
    text("tenant_key").ok_or(Refused::Envelope("no `header.tenant_key`"))?;
    if IGNORED.contains(&event_type) {
        return Ok(Opened::Ignore {
            event_type: event_type.to_owned(),
        });
    }
    let meaning = meaning(event_type, &value)?;
    Ok(Opened::Store {
        event_id: event_id.to_owned(),
        event_type: event_type.to_owned(),
        meaning,
        plain,
    })
}

/// A stored event's second dedup key, beside its event id: what it means.
/// A message is received once and recalled once, whatever its event ids;
/// the bot joins or leaves a chat at a time.
fn meaning(event_type: &str, value: &Value) -> Result<String, Refused> {
    let field = |pointer: &str, missing: &'static str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.len() <= 128)
            .ok_or(Refused::Envelope(missing))
    };
    match event_type {
        MESSAGE_RECEIVE => {
            let id = field("/event/message/message_id", "no `event.message.message_id`")?;
            Ok(format!("feishu:message:{id}"))
        }
        MESSAGE_RECALLED => {
            let id = field("/event/message_id", "no `event.message_id`")?;
            Ok(format!("feishu:recall:{id}"))
        }
        BOT_ADDED | BOT_REMOVED => {
            let chat = field("/event/chat_id", "no `event.chat_id`")?;
            let at = field("/header/create_time", "no `header.create_time`")?;
            let change = if event_type == BOT_ADDED {
                "added"
            } else {
                "removed"
            };
            Ok(format!("feishu:bot:{change}:{chat}:{at}"))
        }
        other => Err(Refused::UnknownEvent(other.chars().take(64).collect())),
    }
}

#[cfg(test)]
mod tests;
