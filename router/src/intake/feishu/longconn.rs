//! Feishu's long connection (the official SDKs' WebSocket mode), the
//! protocol as plain functions over data; the connection itself is I/O
//! around them. Facts from the official Go SDK (larksuite/oapi-sdk-go,
//! package `ws`: `client.go`, `const.go`, `model.go`, `pbbp2.pb.go`):
//!
//! ```text
//! POST {base}/callback/ws/endpoint {"AppID","AppSecret"}
//!   ─► {code, msg, data: {URL: wss://…?device_id=…&service_id=…,
//!                         ClientConfig: {ReconnectCount, ReconnectInterval,
//!                                        ReconnectNonce, PingInterval}}}   (seconds)
//! wss binary messages, each a protobuf pbbp2.Frame:
//!   1 SeqID u64, 2 LogID u64, 3 service i32, 4 method i32 (0 control, 1 data),
//!   5 headers [{key, value}], 6 payload_encoding, 7 payload_type, 8 payload,
//!   9 LogIDNew
//! control: client ─► ping (headers type=ping, service = the URL's service_id)
//!          server ─► pong, its payload (when any) a new ClientConfig
//! data:    server ─► type=event, message_id, sum/seq (a payload split in
//!          `sum` parts, seq 0-based), trace_id; payload the event JSON
//!          client ─► the same frame, headers + biz_rt (ms), payload
//!          {"code":200} (500 when handling failed): the acknowledgement
//! ```
//!
//! Feishu waits 3 s for the acknowledgement and delivers the event again
//! otherwise; with several clients of one app connected, each event goes to
//! one of them. The SDK reconnects after a random wait below
//! `ReconnectNonce`, then every `ReconnectInterval`, `ReconnectCount` times
//! (negative: for ever); [`reconnect_delay`] adds a doubling backoff under
//! that interval, jittered, so clients dropped together do not return
//! together.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// The endpoint request's path.
pub const ENDPOINT_PATH: &str = "/callback/ws/endpoint";

/// Frame methods (`FrameType` in the SDK).
pub const METHOD_CONTROL: i32 = 0;
pub const METHOD_DATA: i32 = 1;

/// A split payload waits this long for its other parts (the SDK's cache
/// keeps them 5 s).
pub const PARTS_TTL: Duration = Duration::from_secs(5);
/// Most parts a payload may be split in, and the most bytes held for
/// payloads being put together: a peer cannot make the client hold more.
pub const MAX_PARTS: usize = 64;
pub const MAX_PENDING_BYTES: usize = 16 << 20;

/// One frame header.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Header {
    #[prost(string, required, tag = "1")]
    pub key: String,
    #[prost(string, required, tag = "2")]
    pub value: String,
}

/// `pbbp2.Frame`, the unit of every WebSocket message.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Frame {
    #[prost(uint64, required, tag = "1")]
    pub seq_id: u64,
    #[prost(uint64, required, tag = "2")]
    pub log_id: u64,
    #[prost(int32, required, tag = "3")]
    pub service: i32,
    #[prost(int32, required, tag = "4")]
    pub method: i32,
    #[prost(message, repeated, tag = "5")]
    pub headers: Vec<Header>,
    #[prost(string, optional, tag = "6")]
    pub payload_encoding: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub payload_type: Option<String>,
    #[prost(bytes = "vec", optional, tag = "8")]
    pub payload: Option<Vec<u8>>,
    #[prost(string, optional, tag = "9")]
    pub log_id_new: Option<String>,
}

impl Frame {
    /// The first header named `key`.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }

    fn header_int(&self, key: &str) -> Option<usize> {
        self.header(key).and_then(|v| v.parse().ok())
    }
}

/// What the server says about reconnecting and pinging (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct ClientConfig {
    #[serde(rename = "ReconnectCount", default = "forever")]
    pub reconnect_count: i64,
    #[serde(rename = "ReconnectInterval", default = "two_minutes")]
    pub reconnect_interval: u64,
    #[serde(rename = "ReconnectNonce", default = "thirty")]
    pub reconnect_nonce: u64,
    #[serde(rename = "PingInterval", default = "two_minutes")]
    pub ping_interval: u64,
}

fn forever() -> i64 {
    -1
}
fn two_minutes() -> u64 {
    120
}
fn thirty() -> u64 {
    30
}

impl Default for ClientConfig {
    /// The SDK's defaults before the server has said anything.
    fn default() -> Self {
        Self {
            reconnect_count: forever(),
            reconnect_interval: two_minutes(),
            reconnect_nonce: thirty(),
            ping_interval: two_minutes(),
        }
    }
}

/// Where to connect, from the endpoint answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: String,
    /// The `service_id` of the URL's query, put in every ping.
    pub service_id: i32,
    pub config: ClientConfig,
}

/// Why the endpoint gave no URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Busy or failing: try again after the reconnect delay.
    #[error("the endpoint is unavailable (code {code}): {msg}")]
    Retry { code: i64, msg: String },
    /// Refused (wrong app id or secret, connection limit): trying again
    /// cannot help.
    #[error("the endpoint refused the app (code {code}): {msg}")]
    Refused { code: i64, msg: String },
    /// Not the answer's shape.
    #[error("the endpoint answer is malformed: {0}")]
    Malformed(&'static str),
}

/// Reads the endpoint answer. Codes as the SDK treats them: 0 ok; 1
/// (system busy) and 1000040343 (internal error) worth retrying; any other
/// a refusal.
pub fn endpoint(answer: &Value) -> Result<Endpoint, EndpointError> {
    let code = answer
        .get("code")
        .and_then(Value::as_i64)
        .ok_or(EndpointError::Malformed("no code"))?;
    let msg = answer
        .get("msg")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    match code {
        0 => {}
        1 | 1_000_040_343 => return Err(EndpointError::Retry { code, msg }),
        _ => return Err(EndpointError::Refused { code, msg }),
    }
    let data = answer
        .get("data")
        .ok_or(EndpointError::Malformed("no data"))?;
    let url = data
        .get("URL")
        .and_then(Value::as_str)
        .filter(|u| u.starts_with("wss://"))
        .ok_or(EndpointError::Malformed("no wss URL"))?;
    let service_id = query_value(url, "service_id")
        .and_then(|s| s.parse().ok())
        .ok_or(EndpointError::Malformed("no service_id in the URL"))?;
    let config = match data.get("ClientConfig") {
        None | Some(Value::Null) => ClientConfig::default(),
        Some(c) => serde_json::from_value(c.clone())
            .map_err(|_| EndpointError::Malformed("bad ClientConfig"))?,
    };
    Ok(Endpoint {
        url: url.to_owned(),
        service_id,
        config,
    })
}

fn query_value<'u>(url: &'u str, key: &str) -> Option<&'u str> {
    let query = url.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The ping the client sends every `PingInterval`.
pub fn ping(service_id: i32) -> Frame {
    Frame {
        service: service_id,
        method: METHOD_CONTROL,
        headers: vec![Header {
            key: "type".into(),
            value: "ping".into(),
        }],
        ..Frame::default()
    }
}

/// The acknowledgement of a data frame: the frame sent back with its
/// headers, the handling time `biz_rt` and the status (200 stored, 500
/// not).
pub fn ack(frame: &Frame, biz_rt_ms: u64, status: u16) -> Frame {
    let mut headers = frame.headers.clone();
    headers.push(Header {
        key: "biz_rt".into(),
        value: biz_rt_ms.to_string(),
    });
    Frame {
        headers,
        payload: Some(format!("{{\"code\":{status}}}").into_bytes()),
        ..frame.clone()
    }
}

/// A frame received, as the client acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A pong; a new configuration when it carries one.
    Pong(Option<ClientConfig>),
    /// A whole event: store it, then acknowledge `frame` ([`ack`]).
    Event {
        message_id: String,
        payload: Vec<u8>,
    },
    /// A part of a split event; the rest is awaited.
    Part,
    /// Not acted on (card callbacks, unknown types), with why; not
    /// acknowledged (the SDK answers only events).
    Ignored(&'static str),
}

/// Parts of split payloads being put together, by message id.
#[derive(Debug, Default)]
pub struct Reassembly {
    pending: HashMap<String, Pending>,
}

#[derive(Debug)]
struct Pending {
    parts: Vec<Option<Vec<u8>>>,
    since: Duration,
}

impl Reassembly {
    /// Reads a frame at `now` (any monotonic clock); parts of payloads
    /// older than [`PARTS_TTL`] are dropped first.
    pub fn receive(&mut self, frame: &Frame, now: Duration) -> Received {
        self.pending
            .retain(|_, p| now.saturating_sub(p.since) < PARTS_TTL);
        let kind = frame.header("type").unwrap_or("");
        match (frame.method, kind) {
            (METHOD_CONTROL, "pong") => Received::Pong(
                frame
                    .payload
                    .as_deref()
                    .filter(|p| !p.is_empty())
                    .and_then(|p| serde_json::from_slice(p).ok()),
            ),
            (METHOD_CONTROL, _) => Received::Ignored("a control frame other than pong"),
            (METHOD_DATA, "event") => self.event(frame, now),
            (METHOD_DATA, _) => Received::Ignored("a data frame that is not an event"),
            _ => Received::Ignored("an unknown frame method"),
        }
    }

    fn event(&mut self, frame: &Frame, now: Duration) -> Received {
        let Some(message_id) = frame.header("message_id").filter(|m| !m.is_empty()) else {
            return Received::Ignored("an event without a message_id");
        };
        let payload = frame.payload.clone().unwrap_or_default();
        let sum = frame.header_int("sum").unwrap_or(1);
        let seq = frame.header_int("seq").unwrap_or(0);
        if sum <= 1 {
            return Received::Event {
                message_id: message_id.to_owned(),
                payload,
            };
        }
        if sum > MAX_PARTS || seq >= sum {
            return Received::Ignored("a split event with impossible sum/seq");
        }
        let held: usize = self.held_bytes();
        if held + payload.len() > MAX_PENDING_BYTES {
            return Received::Ignored("too many bytes of split events pending");
        }
        let pending = self
            .pending
            .entry(message_id.to_owned())
            .or_insert_with(|| Pending {
                parts: vec![None; sum],
                since: now,
            });
        if pending.parts.len() != sum {
            return Received::Ignored("parts of one event disagree on their sum");
        }
        pending.parts[seq] = Some(payload);
        if pending.parts.iter().any(Option::is_none) {
            return Received::Part;
        }
        let parts = self
            .pending
            .remove(message_id)
            .map(|p| p.parts)
            .unwrap_or_default();
        Received::Event {
            message_id: message_id.to_owned(),
            payload: parts.into_iter().flatten().flatten().collect(),
        }
    }

    fn held_bytes(&self) -> usize {
        self.pending
            .values()
            .flat_map(|p| p.parts.iter().flatten())
            .map(Vec::len)
            .sum()
    }
}

/// How long to wait before reconnect attempt `attempt` (0 first), or
/// `None` when `ReconnectCount` attempts have been made. `unit` is a
/// random number in [0, 1): the first attempt waits that share of
/// `ReconnectNonce`; later ones wait 1, 2, 4, … s, at most
/// `ReconnectInterval`, less up to half of that (jitter).
pub fn reconnect_delay(attempt: u32, config: &ClientConfig, unit: f64) -> Option<Duration> {
    if config.reconnect_count >= 0 && i64::from(attempt) >= config.reconnect_count {
        return None;
    }
    let unit = unit.clamp(0.0, 1.0);
    if attempt == 0 {
        return Some(Duration::from_secs_f64(
            config.reconnect_nonce as f64 * unit,
        ));
    }
    let cap = config.reconnect_interval.max(1) as f64;
    let backoff = 2f64.powi(attempt.min(30) as i32 - 1).min(cap);
    Some(Duration::from_secs_f64(backoff * (1.0 - unit / 2.0)))
}

#[cfg(test)]
#[path = "longconn_tests.rs"]
mod tests;
