//! Event subscription: messages sent to a chat, pushed as Feishu pushes them.
//!
//! Each message a person sends (seeded through the handle) becomes one
//! `im.message.receive_v1` event (schema 2.0, a fresh `event_id`) per
//! configured target. With an encrypt key the body is `{"encrypt": …}`
//! (AES-256-CBC under SHA-256 of the key, a random IV in front, PKCS#7) and
//! signed: `X-Lark-Signature` = hex SHA-256 of timestamp + nonce + key +
//! body; without one the body is plain and carries the verification token.
//! Sent over plain HTTP, synchronously, so when a seeding call returns the
//! receiver has answered. Faults on request: send each event twice (a
//! retry: same event id), sign it with a wrong key, drop it (kept unsent;
//! [`Events::repush`] sends it later, as Feishu retries a push that got no
//! 200), send it after the next one, or late.

use std::sync::Mutex;

use aes::cipher::{block_padding::Pkcs7, BlockEncryptMut, KeyIvInit};
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::FeishuMessage;
use crate::record::lock;
use crate::time::unix_now;
use crate::util::{post_json, random_hex};

/// Where events go, and what secures them.
#[derive(Clone)]
pub struct EventTarget {
    /// `http://host:port/path`.
    pub url: String,
    /// The app the events are for (`header.app_id`).
    pub app_id: String,
    /// Encrypt and sign when set.
    pub encrypt_key: Option<String>,
    /// `header.token`.
    pub verification_token: String,
}

impl std::fmt::Debug for EventTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventTarget")
            .field("url", &self.url)
            .field("app_id", &self.app_id)
            .finish_non_exhaustive()
    }
}

/// Faults to inject into the next pushes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventFaults {
    /// Send every event twice (same event id), as Feishu's retry would.
    pub duplicate: bool,
    /// Sign with a key the receiver does not know.
    pub bad_signature: bool,
    /// Send nothing: the event is kept with no attempt (a push that got no
    /// answer); `FeishuHandle::repush` sends it, as Feishu's retry would.
    pub drop: bool,
    /// Swap pushes in pairs: the first is held back and sent right after the
    /// second (one left held goes when the faults are changed): Feishu does
    /// not promise order.
    pub reorder: bool,
    /// Wait this long before each push (a slow network or a busy Feishu).
    pub delay_ms: u64,
}

/// One pushed event and what its attempts got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDelivery {
    pub event_id: String,
    pub url: String,
    /// The event before encryption.
    pub event: Value,
    /// Per attempt: the status answered, or why there was none.
    pub attempts: Vec<Result<u16, String>>,
}

#[derive(Debug, Default)]
pub(crate) struct Events {
    targets: Vec<EventTarget>,
    /// The long connection's queue, when it is served.
    pub(crate) long: Option<std::sync::Arc<super::ws::Hub>>,
    deliveries: Mutex<Vec<EventDelivery>>,
    faults: Mutex<EventFaults>,
    /// Under `reorder`: the pushes held back, sealed, with the signing key.
    held: Mutex<Vec<Held>>,
}

/// A push not yet made: the delivery, its sealed body and the key it is
/// signed with.
type Held = (EventDelivery, Vec<u8>, Option<String>);

/// A mention in a pushed message: the open_id and the display name. The
/// text names the n-th mention `@_user_n`, as Feishu's does.
pub type Mention<'a> = (&'a str, &'a str);

impl Events {
    pub(crate) fn new(
        targets: Vec<EventTarget>,
        long: Option<std::sync::Arc<super::ws::Hub>>,
    ) -> Self {
        Self {
            targets,
            long,
            ..Self::default()
        }
    }

    /// Faults from now on; a push `reorder` still holds is sent first.
    pub(crate) fn set_faults(&self, faults: EventFaults) {
        let held = std::mem::take(&mut *lock(&self.held));
        for (d, body, key) in held {
            self.deliver(d, &body, key.as_deref(), EventFaults::default());
        }
        *lock(&self.faults) = faults;
    }

    /// Pushes a kept event again under its event id (Feishu's retry), signed
    /// with its target's key.
    pub(crate) fn repush(&self, event_id: &str) -> Option<Result<u16, String>> {
        let d = lock(&self.deliveries)
            .iter()
            .find(|d| d.event_id == event_id)
            .cloned()?;
        let target = self.targets.iter().find(|t| t.url == d.url)?;
        let key = target.encrypt_key.as_deref();
        let result = send(&d.url, key, &seal(key, &d.event));
        if let Some(stored) = lock(&self.deliveries)
            .iter_mut()
            .find(|s| s.event_id == event_id)
        {
            stored.attempts.push(result.clone());
        }
        Some(result)
    }

    /// Sends `body` for `d` under `faults` (delay, duplicate) and keeps it.
    fn deliver(&self, mut d: EventDelivery, body: &[u8], key: Option<&str>, faults: EventFaults) {
        if faults.delay_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(faults.delay_ms));
        }
        for _ in 0..if faults.duplicate { 2 } else { 1 } {
            d.attempts.push(send(&d.url, key, body));
        }
        lock(&self.deliveries).push(d);
    }

    pub(crate) fn deliveries(&self) -> Vec<EventDelivery> {
        lock(&self.deliveries).clone()
    }

    /// Pushes `m` (sent in a chat of `chat_type`) to every target.
    pub(crate) fn message_received(
        &self,
        m: &FeishuMessage,
        chat_type: &str,
        mentions: &[Mention<'_>],
    ) {
        self.push(|target, event_id| message_event(target, event_id, m, chat_type, mentions));
    }

    /// Pushes `im.message.recalled_v1` for `message_id` in `chat_id`
    /// (oapi-sdk-go `P2MessageRecalledV1Data`: `message_id`, `chat_id`,
    /// `recall_time`, `recall_type`; no operator).
    pub(crate) fn message_recalled(&self, message_id: &str, chat_id: &str, recall_type: &str) {
        let now_ms = (unix_now() * 1000).to_string();
        self.push(|target, event_id| {
            envelope(
                target,
                event_id,
                "im.message.recalled_v1",
                &now_ms,
                json!({"message_id": message_id, "chat_id": chat_id,
                       "recall_time": now_ms, "recall_type": recall_type}),
            )
        });
    }

    /// Pushes `im.chat.member.bot.added_v1` or `.deleted_v1` for `chat_id`
    /// (`P2ChatMemberBotAddedV1Data`: `chat_id`, `operator_id`, `external`,
    /// `operator_tenant_key`, `name`).
    pub(crate) fn bot_membership(&self, chat_id: &str, operator: &str, added: bool) {
        let now_ms = (unix_now() * 1000).to_string();
        let event_type = if added {
            "im.chat.member.bot.added_v1"
        } else {
            "im.chat.member.bot.deleted_v1"
        };
        self.push(|target, event_id| {
            envelope(
                target,
                event_id,
                event_type,
                &now_ms,
                json!({"chat_id": chat_id, "operator_id": {"open_id": operator},
                       "external": false, "operator_tenant_key": "tenant_emulator",
                       "name": chat_id}),
            )
        });
    }

    /// Pushes one event, built per target (a fresh event id each), to the
    /// long connection and every HTTP target, with the faults in force.
    fn push(&self, build: impl Fn(&EventTarget, &str) -> Value) {
        let faults = *lock(&self.faults);
        if let Some(hub) = &self.long {
            let target = EventTarget {
                url: String::new(),
                app_id: hub.config.app_id.clone(),
                encrypt_key: None,
                verification_token: hub.config.verification_token.clone(),
            };
            hub.push(&build(&target, &random_hex(16)));
        }
        for target in &self.targets {
            let event_id = random_hex(16);
            let event = build(target, &event_id);
            let key = match (&target.encrypt_key, faults.bad_signature) {
                (Some(_), true) => Some("not-the-configured-key".to_owned()),
                (key, _) => key.clone(),
            };
            let d = EventDelivery {
                event_id,
                url: target.url.clone(),
                event,
                attempts: Vec::new(),
            };
            let body = seal(target.encrypt_key.as_deref(), &d.event);
            if faults.drop {
                lock(&self.deliveries).push(d);
            } else if faults.reorder {
                // Pairs swapped: the first is held, the next sent before it.
                let earlier = std::mem::take(&mut *lock(&self.held));
                if earlier.is_empty() {
                    lock(&self.held).push((d, body, key));
                } else {
                    self.deliver(d, &body, key.as_deref(), faults);
                    for (d, body, key) in earlier {
                        self.deliver(d, &body, key.as_deref(), faults);
                    }
                }
            } else {
                self.deliver(d, &body, key.as_deref(), faults);
            }
        }
    }
}

/// A 2.0 envelope around `event`.
fn envelope(
    target: &EventTarget,
    event_id: &str,
    event_type: &str,
    create_time_ms: &str,
    event: Value,
) -> Value {
    json!({"schema": "2.0",
           "header": {"event_id": event_id, "event_type": event_type,
                      "create_time": create_time_ms, "token": target.verification_token,
                      "app_id": target.app_id, "tenant_key": "tenant_emulator"},
           "event": event})
}

fn message_event(
    target: &EventTarget,
    event_id: &str,
    m: &FeishuMessage,
    chat_type: &str,
    mentions: &[Mention<'_>],
) -> Value {
    let mentions: Vec<Value> = mentions
        .iter()
        .enumerate()
        .map(|(i, (open_id, name))| {
            json!({"key": format!("@_user_{}", i + 1), "id": {"open_id": open_id}, "name": name,
                   "tenant_key": "tenant_emulator"})
        })
        .collect();
    json!({"schema": "2.0",
           "header": {"event_id": event_id, "event_type": "im.message.receive_v1",
                      "create_time": m.create_time_ms.to_string(), "token": target.verification_token,
                      "app_id": target.app_id, "tenant_key": "tenant_emulator"},
           "event": {"sender": {"sender_id": {"open_id": m.sender_id}, "sender_type": m.sender_type,
                                "tenant_key": "tenant_emulator"},
                     "message": {"message_id": m.message_id, "root_id": m.root_id,
                                 "parent_id": m.parent_id, "create_time": m.create_time_ms.to_string(),
                                 "chat_id": m.chat_id, "chat_type": chat_type,
                                 "message_type": m.msg_type, "content": m.content,
                                 "mentions": mentions}}})
}

/// The body as sent: encrypted under `key` when there is one.
pub fn seal(key: Option<&str>, event: &Value) -> Vec<u8> {
    let plain = event.to_string().into_bytes();
    let Some(key) = key else {
        return plain;
    };
    let mut iv = [0u8; 16];
    if let Ok(bytes) = hex::decode(random_hex(16)) {
        iv.copy_from_slice(&bytes);
    }
    let aes_key: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    let ciphertext = cbc::Encryptor::<aes::Aes256>::new(&aes_key.into(), &iv.into())
        .encrypt_padded_vec_mut::<Pkcs7>(&plain);
    let mut sealed = iv.to_vec();
    sealed.extend_from_slice(&ciphertext);
    json!({ "encrypt": base64::engine::general_purpose::STANDARD.encode(sealed) })
        .to_string()
        .into_bytes()
}

/// `X-Lark-Signature`: hex SHA-256 of timestamp, nonce, key and body.
pub fn lark_signature(timestamp: &str, nonce: &str, key: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(timestamp.as_bytes());
    h.update(nonce.as_bytes());
    h.update(key.as_bytes());
    h.update(body);
    hex::encode(h.finalize())
}

/// One HTTP/1.1 POST over plain TCP, signed when `key` is set.
fn send(url: &str, key: Option<&str>, body: &[u8]) -> Result<u16, String> {
    let mut headers = vec!["User-Agent: Feishu-Event/emulator".to_owned()];
    if let Some(key) = key {
        let (timestamp, nonce) = (unix_now().to_string(), random_hex(8));
        headers.extend([
            format!(
                "X-Lark-Signature: {}",
                lark_signature(&timestamp, &nonce, key, body)
            ),
            format!("X-Lark-Request-Timestamp: {timestamp}"),
            format!("X-Lark-Request-Nonce: {nonce}"),
        ]);
    }
    post_json(url, &headers, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same vector the router's decryption is tested with.
    #[test]
    fn signature_vector() {
        assert_eq!(
            lark_signature("1700000000", "n1", "ek", b"{}"),
            "001f046b4bb8b103bc3d4de31943942f10ea8bef28a23f107d952bf20782f26f"
        );
    }

    #[test]
    fn unencrypted_bodies_are_the_event() {
        let v = json!({"a": 1});
        assert_eq!(seal(None, &v), v.to_string().into_bytes());
        let sealed: Value = serde_json::from_slice(&seal(Some("k"), &v)).unwrap();
        assert!(sealed["encrypt"].is_string());
    }
}
