//! The Feishu emulator's long connection over TLS on loopback: the
//! endpoint asked with curl, the WebSocket spoken by tokio-tungstenite over
//! tokio-rustls trusting only the test CA.
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use gatehouse_emulators::feishu::ws::{Frame, Header, LongConnection, CODE_AUTH_FAILED};
use gatehouse_emulators::{FeishuEmulator, FeishuHandle, FeishuOptions};
use prost::Message as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const APP_ID: &str = "cli_long_app";
const APP_SECRET: &str = "long-connection-secret-for-this-test";

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

fn start() -> FeishuHandle {
    let options = FeishuOptions {
        long_connection: Some(LongConnection {
            app_id: APP_ID.into(),
            verification_token: "vt".into(),
            ack_timeout: Duration::from_millis(300),
        }),
        ..FeishuOptions::default()
    }
    .app(APP_ID, APP_SECRET);
    FeishuEmulator::start(options).unwrap()
}

fn endpoint(emulator: &FeishuHandle, secret: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let port = emulator.addr().port();
    let output = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&ca)
        .args(["--resolve", &format!("open.feishu.cn:{port}:127.0.0.1")])
        .args(["-H", "Content-Type: application/json", "--data"])
        .arg(json!({"AppID": APP_ID, "AppSecret": secret}).to_string())
        .arg(format!(
            "https://open.feishu.cn:{port}/callback/ws/endpoint"
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

async fn connect(emulator: &FeishuHandle, url: &str) -> Result<Ws, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(emulator.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(emulator.addr())
        .await
        .unwrap();
    let name = ServerName::try_from("open.feishu.cn").unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap();
    match tokio_tungstenite::client_async(url, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(e) => Err(e.to_string()),
    }
}

async fn next_frame(ws: &mut Ws) -> Frame {
    loop {
        match ws.next().await.unwrap().unwrap() {
            Message::Binary(bytes) => return Frame::decode(bytes).unwrap(),
            _ => continue,
        }
    }
}

fn header<'f>(frame: &'f Frame, key: &str) -> Option<&'f str> {
    frame
        .headers
        .iter()
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}

fn binary(frame: &Frame) -> Message {
    Message::Binary(frame.encode_to_vec().into())
}

#[test]
fn endpoint_checks_the_secret_and_hands_out_its_own_urls() {
    let emulator = start();
    let refused = endpoint(&emulator, "not-the-secret");
    assert_eq!(refused["code"], CODE_AUTH_FAILED, "{refused}");
    assert!(refused.get("data").is_none());
    let answer = endpoint(&emulator, APP_SECRET);
    assert_eq!(answer["code"], 0, "{answer}");
    let url = answer["data"]["URL"].as_str().unwrap().to_owned();
    assert!(url.starts_with("wss://open.feishu.cn:"), "{url}");
    assert!(answer["data"]["ClientConfig"]["PingInterval"].is_u64());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // A URL not from the endpoint is refused at the handshake.
        let (base, _) = url.split_once('?').unwrap();
        let guessed = format!("{base}?device_id=guessed&service_id=7");
        let error = connect(&emulator, &guessed).await.err().unwrap();
        assert!(error.contains("403"), "{error}");
        let mut ws = connect(&emulator, &url).await.unwrap();
        let ping = Frame {
            service: 7,
            method: 0,
            headers: vec![Header {
                key: "type".into(),
                value: "ping".into(),
            }],
            ..Frame::default()
        };
        ws.send(binary(&ping)).await.unwrap();
        let pong = next_frame(&mut ws).await;
        assert_eq!(header(&pong, "type"), Some("pong"));
        let config: Value = serde_json::from_slice(pong.payload.as_deref().unwrap()).unwrap();
        assert!(config["ReconnectInterval"].is_u64(), "{config}");
    });
}

/// Two clients: the event goes to one; unacknowledged, it comes again
/// (same event id) until acknowledged, then never again.
#[test]
fn an_event_goes_to_one_client_and_again_until_acknowledged() {
    let emulator = start();
    let url = endpoint(&emulator, APP_SECRET)["data"]["URL"]
        .as_str()
        .unwrap()
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let a = connect(&emulator, &url).await.unwrap();
        let b = connect(&emulator, &url).await.unwrap();
        while emulator.long_connected() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        emulator.send_user_message("oc_dm", "p2p", "ou_alice", "hello over ws", &[]);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (name, mut ws) in [("a", a), ("b", b)] {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut seen = 0;
                loop {
                    let frame = next_frame(&mut ws).await;
                    seen += 1;
                    let _ = tx.send((name, frame.clone()));
                    // Each client ignores the first event it gets.
                    if seen > 1 {
                        let mut ack = frame;
                        ack.payload = Some(b"{\"code\":200}".to_vec());
                        ws.send(binary(&ack)).await.unwrap();
                    }
                }
            });
        }
        let mut got = Vec::new();
        while !emulator.long_deliveries().iter().all(|d| d.acked) {
            // Polled: the last frame may be taken before its ack lands.
            if let Ok(more) = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await {
                got.push(more.unwrap());
            }
        }
        // Each frame went into the channel before its acknowledgement.
        while let Ok(more) = rx.try_recv() {
            got.push(more);
        }
        let ids: Vec<&str> = got
            .iter()
            .map(|(_, f)| header(f, "message_id").unwrap())
            .collect();
        assert!(ids.len() >= 2, "{ids:?}");
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        let event: Value = serde_json::from_slice(got[0].1.payload.as_deref().unwrap()).unwrap();
        assert_eq!(event["header"]["event_id"], ids[0]);
        assert_eq!(event["header"]["app_id"], APP_ID);
        assert_eq!(event["event"]["message"]["chat_type"], "p2p");
        let deliveries = emulator.long_deliveries();
        assert_eq!(deliveries.len(), 1);
        assert_eq!(deliveries[0].sent_to.len(), ids.len());
        // Acknowledged: nothing more comes, even after several timeouts.
        emulator.send_user_message("oc_dm", "p2p", "ou_alice", "second", &[]);
        while !emulator.long_deliveries().iter().all(|d| d.acked) {
            let _ = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await;
        }
        let deliveries = emulator.long_deliveries();
        assert_eq!(deliveries.len(), 2);
        assert_eq!(deliveries[0].sent_to.len(), ids.len());
    });
}
