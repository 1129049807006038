//! The long connection (the official SDKs' WebSocket mode), as Feishu
//! serves it. Facts from larksuite/oapi-sdk-go, package `ws`:
//!
//! - `POST /callback/ws/endpoint` `{"AppID","AppSecret"}` answers
//!   `{code: 0, data: {URL, ClientConfig}}`; a wrong app or secret gets
//!   code 514 (`AuthFailed` in the SDK's `const.go`).
//! - The URL (`wss://…/ws/v2?device_id=…&service_id=…`) is served on the
//!   emulator's own TLS listener; every WebSocket message is a binary
//!   protobuf `pbbp2.Frame`.
//! - A control frame `type=ping` gets a `type=pong` whose payload is the
//!   ClientConfig. Each event goes out as a data frame (`type=event`,
//!   `message_id`, `sum=1`, `seq=0`, `trace_id`) to ONE connected client;
//!   the client acknowledges with the same frame, payload `{"code":200}`.
//!   Unacknowledged after [`LongConnection::ack_timeout`] (Feishu: 3 s), it
//!   is delivered again, to whichever client asks first.
//!
//! Clients take work when they have nothing in flight or a deadline passed;
//! no task of its own: each connection polls the shared queue.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::protocol::{Message, Role};
use tokio_tungstenite::WebSocketStream;

use crate::record::lock;
use crate::util::random_hex;

/// Where clients ask for the URL.
pub const ENDPOINT_PATH: &str = "/callback/ws/endpoint";
/// The path of the URL the endpoint hands out.
pub const WS_PATH: &str = "/ws/v2";
/// The `service_id` in that URL (pings carry it back).
const SERVICE_ID: i32 = 7;
/// Feishu's code for a wrong app id or secret at the endpoint.
pub const CODE_AUTH_FAILED: i64 = 514;
const METHOD_CONTROL: i32 = 0;
const METHOD_DATA: i32 = 1;
/// How often a connection looks for work or an overdue acknowledgement.
const POLL: Duration = Duration::from_millis(50);

/// Serve the long connection for one app.
#[derive(Debug, Clone)]
pub struct LongConnection {
    /// The app whose events go over it.
    pub app_id: String,
    /// `header.token` of its events.
    pub verification_token: String,
    /// How long an event waits for its acknowledgement before it is sent
    /// again (Feishu: 3 s); a knob so tests need not wait.
    pub ack_timeout: Duration,
}

/// One frame header (`pbbp2.Header`).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Header {
    #[prost(string, required, tag = "1")]
    pub key: String,
    #[prost(string, required, tag = "2")]
    pub value: String,
}

/// `pbbp2.Frame`.
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
    fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }
}

fn header(key: &str, value: &str) -> Header {
    Header {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

/// One event sent over the long connection and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongDelivery {
    /// `header.event_id`, also the frame's `message_id`.
    pub event_id: String,
    /// The connection (numbered from 1 in connection order) of each send.
    pub sent_to: Vec<u64>,
    /// An acknowledgement with code 200 came back.
    pub acked: bool,
}

#[derive(Debug)]
struct Pending {
    event_id: String,
    payload: Vec<u8>,
    /// The connection it was last sent to, and when.
    sent: Option<(u64, Instant)>,
}

#[derive(Debug, Default)]
struct HubState {
    pending: VecDeque<Pending>,
    deliveries: Vec<LongDelivery>,
    tickets: Vec<String>,
    connections: u64,
    connected: usize,
}

/// The events waiting for clients, shared by every connection.
#[derive(Debug)]
pub(crate) struct Hub {
    pub(crate) config: LongConnection,
    state: Mutex<HubState>,
}

impl Hub {
    pub(crate) fn new(config: LongConnection) -> Self {
        Self {
            config,
            state: Mutex::new(HubState::default()),
        }
    }

    /// Queue `event` for one client.
    pub(crate) fn push(&self, event: &Value) {
        let event_id = event["header"]["event_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut state = lock(&self.state);
        state.deliveries.push(LongDelivery {
            event_id: event_id.clone(),
            sent_to: Vec::new(),
            acked: false,
        });
        state.pending.push_back(Pending {
            event_id,
            payload: event.to_string().into_bytes(),
            sent: None,
        });
    }

    pub(crate) fn deliveries(&self) -> Vec<LongDelivery> {
        lock(&self.state).deliveries.clone()
    }

    pub(crate) fn connected(&self) -> usize {
        lock(&self.state).connected
    }

    /// The endpoint's answer for an app that gave the right secret: a URL
    /// with a fresh ticket (`device_id`) only this emulator will accept.
    pub(crate) fn endpoint_answer(&self, base_wss: &str) -> Value {
        let ticket = random_hex(12);
        lock(&self.state).tickets.push(ticket.clone());
        json!({"code": 0, "msg": "ok", "data": {
            "URL": format!("{base_wss}{WS_PATH}?device_id={ticket}&service_id={SERVICE_ID}"),
            "ClientConfig": client_config()}})
    }

    pub(crate) fn admits(&self, query: &str) -> bool {
        let query = crate::util::parse_query(query);
        let ticket = query.iter().find(|(k, _)| k == "device_id");
        ticket.is_some_and(|(_, t)| lock(&self.state).tickets.contains(t))
    }

    /// Events for connection `conn` at `now`: those never sent, and those
    /// whose acknowledgement is overdue; at most one in flight per connection.
    fn take(&self, conn: u64, now: Instant) -> Option<(String, Vec<u8>)> {
        let mut state = lock(&self.state);
        let timeout = self.config.ack_timeout;
        let busy = state
            .pending
            .iter()
            .any(|p| matches!(p.sent, Some((c, at)) if c == conn && now < at + timeout));
        if busy {
            return None;
        }
        let due = state.pending.iter_mut().find(|p| match p.sent {
            None => true,
            Some((_, at)) => now >= at + timeout,
        })?;
        due.sent = Some((conn, now));
        let picked = (due.event_id.clone(), due.payload.clone());
        if let Some(d) = state
            .deliveries
            .iter_mut()
            .rev()
            .find(|d| d.event_id == picked.0)
        {
            d.sent_to.push(conn);
        }
        Some(picked)
    }

    fn ack(&self, event_id: &str) {
        let mut state = lock(&self.state);
        state.pending.retain(|p| p.event_id != event_id);
        if let Some(d) = state.deliveries.iter_mut().find(|d| d.event_id == event_id) {
            d.acked = true;
        }
    }

    /// Speak the protocol on one upgraded connection until it closes.
    pub(crate) async fn serve(&self, upgraded: Upgraded) {
        let conn = {
            let mut state = lock(&self.state);
            state.connections += 1;
            state.connected += 1;
            state.connections
        };
        let io = TokioIo::new(upgraded);
        let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
        if let Err(error) = self.run(conn, ws).await {
            tracing::debug!(conn, %error, "long connection ended");
        }
        lock(&self.state).connected -= 1;
    }

    async fn run(
        &self,
        conn: u64,
        mut ws: WebSocketStream<TokioIo<Upgraded>>,
    ) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        let mut seq = 0u64;
        let mut tick = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Some((event_id, payload)) = self.take(conn, Instant::now()) {
                        seq += 1;
                        ws.send(binary(event_frame(seq, &event_id, payload))).await?;
                    }
                }
                message = ws.next() => {
                    let Some(message) = message else { return Ok(()) };
                    let bytes = match message? {
                        Message::Binary(bytes) => bytes,
                        Message::Close(_) => return Ok(()),
                        _ => continue,
                    };
                    let Ok(frame) = <Frame as prost::Message>::decode(bytes) else {
                        return Ok(());
                    };
                    if let Some(answer) = self.received(frame) {
                        ws.send(binary(answer)).await?;
                    }
                }
            }
        }
    }

    /// A pong for a ping; an acknowledgement is recorded.
    fn received(&self, frame: Frame) -> Option<Frame> {
        match (frame.method, frame.header("type")) {
            (METHOD_CONTROL, Some("ping")) => Some(Frame {
                headers: vec![header("type", "pong")],
                payload: Some(client_config().to_string().into_bytes()),
                ..frame
            }),
            (METHOD_DATA, Some("event")) => {
                let ok = frame
                    .payload
                    .as_deref()
                    .and_then(|p| serde_json::from_slice::<Value>(p).ok())
                    .is_some_and(|v| v["code"] == 200);
                if let (true, Some(id)) = (ok, frame.header("message_id")) {
                    self.ack(id);
                }
                None
            }
            _ => None,
        }
    }
}

fn client_config() -> Value {
    json!({"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 1,
           "PingInterval": 120})
}

fn event_frame(seq: u64, event_id: &str, payload: Vec<u8>) -> Frame {
    Frame {
        seq_id: seq,
        log_id: seq,
        service: SERVICE_ID,
        method: METHOD_DATA,
        headers: vec![
            header("type", "event"),
            header("message_id", event_id),
            header("sum", "1"),
            header("seq", "0"),
            header("trace_id", &random_hex(8)),
        ],
        payload: Some(payload),
        ..Frame::default()
    }
}

fn binary(frame: Frame) -> Message {
    Message::Binary(prost::Message::encode_to_vec(&frame).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(timeout: Duration) -> Hub {
        Hub::new(LongConnection {
            app_id: "cli_a".into(),
            verification_token: "v".into(),
            ack_timeout: timeout,
        })
    }

    fn event(id: &str) -> Value {
        json!({"header": {"event_id": id}})
    }

    #[test]
    fn one_client_each_redelivered_to_any_when_overdue() {
        let h = hub(Duration::from_secs(3));
        let t0 = Instant::now();
        h.push(&event("e1"));
        h.push(&event("e2"));
        assert_eq!(h.take(1, t0).map(|t| t.0).as_deref(), Some("e1"));
        // One in flight per connection; the other connection gets e2.
        assert_eq!(h.take(1, t0), None);
        assert_eq!(h.take(2, t0).map(|t| t.0).as_deref(), Some("e2"));
        assert_eq!(h.take(3, t0), None);
        h.ack("e2");
        // e1 unacknowledged past the timeout: to whoever asks.
        let late = t0 + Duration::from_secs(3);
        assert_eq!(h.take(3, late).map(|t| t.0).as_deref(), Some("e1"));
        h.ack("e1");
        assert_eq!(h.take(1, late + Duration::from_secs(9)), None);
        let d = h.deliveries();
        assert_eq!(d[0].sent_to, vec![1, 3]);
        assert_eq!(d[1].sent_to, vec![2]);
        assert!(d.iter().all(|d| d.acked));
    }

    #[test]
    fn pings_get_pongs_and_only_code_200_acknowledges() {
        let h = hub(Duration::from_secs(3));
        h.push(&event("e1"));
        let pong = h.received(Frame {
            service: SERVICE_ID,
            method: METHOD_CONTROL,
            headers: vec![header("type", "ping")],
            ..Frame::default()
        });
        assert_eq!(pong.as_ref().and_then(|f| f.header("type")), Some("pong"));
        let ack = |code: u16| Frame {
            method: METHOD_DATA,
            headers: vec![header("type", "event"), header("message_id", "e1")],
            payload: Some(format!("{{\"code\":{code}}}").into_bytes()),
            ..Frame::default()
        };
        assert_eq!(h.received(ack(500)), None);
        assert!(!h.deliveries()[0].acked);
        h.received(ack(200));
        assert!(h.deliveries()[0].acked);
    }

    #[test]
    fn tickets_are_the_emulators_own() {
        let h = hub(Duration::from_secs(3));
        let answer = h.endpoint_answer("wss://127.0.0.1:1");
        let url = answer["data"]["URL"].as_str().unwrap_or_default();
        let query = url.split_once('?').map(|q| q.1).unwrap_or_default();
        assert!(h.admits(query));
        assert!(!h.admits("device_id=guessed&service_id=7"));
        assert!(!h.admits(""));
    }
}
