use std::time::Duration;

use prost::Message;
use serde_json::json;

use super::*;

fn header(key: &str, value: &str) -> Header {
    Header {
        key: key.into(),
        value: value.into(),
    }
}

fn event(message_id: &str, sum: usize, seq: usize, payload: &[u8]) -> Frame {
    Frame {
        seq_id: 7,
        log_id: 9,
        service: 33,
        method: METHOD_DATA,
        headers: vec![
            header("type", "event"),
            header("message_id", message_id),
            header("sum", &sum.to_string()),
            header("seq", &seq.to_string()),
            header("trace_id", "tr-1"),
        ],
        payload: Some(payload.to_vec()),
        ..Frame::default()
    }
}

#[test]
fn frames_have_pbbp2_wire_bytes() {
    // Field numbers and wire types of pbbp2.Frame, encoded by hand: a
    // change in the derive's tags would be a different protocol.
    let frame = Frame {
        seq_id: 1,
        log_id: 2,
        service: 3,
        method: METHOD_DATA,
        headers: vec![header("type", "event")],
        payload: Some(b"{}".to_vec()),
        ..Frame::default()
    };
    let mut expected = vec![0x08, 1, 0x10, 2, 0x18, 3, 0x20, 1];
    expected.extend([0x2a, 13, 0x0a, 4]);
    expected.extend(b"type");
    expected.extend([0x12, 5]);
    expected.extend(b"event");
    expected.extend([0x42, 2]);
    expected.extend(b"{}");
    assert_eq!(frame.encode_to_vec(), expected);
    assert_eq!(Frame::decode(expected.as_slice()).unwrap(), frame);
    // Required fields are on the wire even when zero (proto2), as Go sends.
    let ping = ping(0).encode_to_vec();
    assert_eq!(&ping[..8], &[0x08, 0, 0x10, 0, 0x18, 0, 0x20, 0]);
    assert!(Frame::decode(&b"\x08"[..]).is_err(), "a truncated frame");
}

#[test]
fn endpoint_answers_table() {
    let url = "wss://msg-frontier.feishu.cn/ws/v2?fpid=493&device_id=7&service_id=33";
    let ok = endpoint(
        &json!({"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": {
        "ReconnectCount": 5, "ReconnectInterval": 60, "ReconnectNonce": 10, "PingInterval": 90}}}),
    );
    assert_eq!(
        ok,
        Ok(Endpoint {
            url: url.into(),
            service_id: 33,
            config: ClientConfig {
                reconnect_count: 5,
                reconnect_interval: 60,
                reconnect_nonce: 10,
                ping_interval: 90,
            },
        })
    );
    let plain = endpoint(&json!({"code": 0, "data": {"URL": url}})).unwrap();
    assert_eq!(plain.config, ClientConfig::default());
    let cases = [
        (json!({"code": 1, "msg": "busy"}), "Retry"),
        (json!({"code": 1000040343, "msg": "internal"}), "Retry"),
        (
            json!({"code": 10014, "msg": "app secret invalid"}),
            "Refused",
        ),
        (json!({"code": 403, "msg": "forbidden"}), "Refused"),
        (json!({"msg": "no code"}), "Malformed"),
        (json!({"code": 0}), "Malformed"),
        (
            json!({"code": 0, "data": {"URL": "ws://plain/?service_id=1"}}),
            "Malformed",
        ),
        (
            json!({"code": 0, "data": {"URL": "wss://h/ws?device_id=1"}}),
            "Malformed",
        ),
        (
            json!({"code": 0, "data": {"URL": "wss://h/?service_id=x"}}),
            "Malformed",
        ),
        (
            json!({"code": 0, "data": {"URL": url, "ClientConfig": {"PingInterval": "often"}}}),
            "Malformed",
        ),
    ];
    for (answer, kind) in cases {
        let got = endpoint(&answer).unwrap_err();
        let name = match got {
            EndpointError::Retry { .. } => "Retry",
            EndpointError::Refused { .. } => "Refused",
            EndpointError::Malformed(_) => "Malformed",
        };
        assert_eq!(name, kind, "{answer}");
    }
}

#[test]
fn ping_and_ack_frames() {
    let p = ping(33);
    assert_eq!((p.method, p.service), (METHOD_CONTROL, 33));
    assert_eq!(p.header("type"), Some("ping"));
    let frame = event("m1", 1, 0, b"{\"schema\":\"2.0\"}");
    let a = ack(&frame, 12, 200);
    assert_eq!(
        (a.seq_id, a.log_id, a.service, a.method),
        (7, 9, 33, METHOD_DATA)
    );
    assert_eq!(a.header("message_id"), Some("m1"));
    assert_eq!(a.header("trace_id"), Some("tr-1"));
    assert_eq!(a.header("biz_rt"), Some("12"));
    assert_eq!(a.payload.as_deref(), Some(&b"{\"code\":200}"[..]));
    assert_eq!(
        ack(&frame, 0, 500).payload.as_deref(),
        Some(&b"{\"code\":500}"[..])
    );
}

#[test]
fn received_frames_table() {
    let mut r = Reassembly::default();
    let now = Duration::from_secs(100);
    let pong = |payload: Option<&[u8]>| Frame {
        method: METHOD_CONTROL,
        headers: vec![header("type", "pong")],
        payload: payload.map(<[u8]>::to_vec),
        ..Frame::default()
    };
    assert_eq!(r.receive(&pong(None), now), Received::Pong(None));
    assert_eq!(
        r.receive(&pong(Some(br#"{"PingInterval": 5}"#)), now),
        Received::Pong(Some(ClientConfig {
            ping_interval: 5,
            ..ClientConfig::default()
        }))
    );
    assert_eq!(
        r.receive(&pong(Some(b"not json")), now),
        Received::Pong(None)
    );
    assert_eq!(
        r.receive(&event("m1", 1, 0, b"{}"), now),
        Received::Event {
            message_id: "m1".into(),
            payload: b"{}".to_vec()
        }
    );
    let mut card = event("m2", 1, 0, b"{}");
    card.headers[0] = header("type", "card");
    assert!(matches!(r.receive(&card, now), Received::Ignored(_)));
    assert!(matches!(
        r.receive(&event("", 1, 0, b"{}"), now),
        Received::Ignored(_)
    ));
    assert!(matches!(
        r.receive(&event("m3", 2, 2, b"x"), now),
        Received::Ignored(_)
    ));
    assert!(matches!(
        r.receive(&event("m4", MAX_PARTS + 1, 0, b"x"), now),
        Received::Ignored(_)
    ));
    let unknown = Frame {
        method: 7,
        ..event("m5", 1, 0, b"{}")
    };
    assert!(matches!(r.receive(&unknown, now), Received::Ignored(_)));
}

#[test]
fn split_payloads_are_put_together_in_seq_order_whatever_the_arrival() {
    let mut r = Reassembly::default();
    let now = Duration::from_secs(10);
    assert_eq!(r.receive(&event("m", 3, 2, b"ghi"), now), Received::Part);
    assert_eq!(r.receive(&event("m", 3, 0, b"abc"), now), Received::Part);
    // A part delivered twice changes nothing.
    assert_eq!(r.receive(&event("m", 3, 0, b"abc"), now), Received::Part);
    assert_eq!(
        r.receive(&event("m", 3, 1, b"def"), now),
        Received::Event {
            message_id: "m".into(),
            payload: b"abcdefghi".to_vec()
        }
    );
    // Parts that disagree on their sum are not mixed.
    assert_eq!(r.receive(&event("n", 2, 0, b"a"), now), Received::Part);
    assert!(matches!(
        r.receive(&event("n", 3, 1, b"b"), now),
        Received::Ignored(_)
    ));
    // Parts older than PARTS_TTL are dropped: the rest starts over.
    let later = now + PARTS_TTL;
    assert_eq!(r.receive(&event("n", 2, 1, b"b"), later), Received::Part);
    assert!(r.pending.len() == 1 && r.pending.contains_key("n"));
}

#[test]
fn pending_parts_are_bounded() {
    let mut r = Reassembly::default();
    let now = Duration::from_secs(1);
    let big = vec![b'x'; MAX_PENDING_BYTES / 2];
    assert_eq!(r.receive(&event("a", 2, 0, &big), now), Received::Part);
    assert_eq!(r.receive(&event("b", 2, 0, &big), now), Received::Part);
    assert!(matches!(
        r.receive(&event("c", 2, 0, b"y"), now),
        Received::Ignored(_)
    ));
    assert!(r.held_bytes() <= MAX_PENDING_BYTES);
}

#[test]
fn reconnect_delays_follow_the_server_config_with_jitter() {
    let config = ClientConfig {
        reconnect_count: 4,
        reconnect_interval: 10,
        reconnect_nonce: 30,
        ping_interval: 120,
    };
    let secs = |attempt, unit| reconnect_delay(attempt, &config, unit).map(|d| d.as_secs_f64());
    assert_eq!(secs(0, 0.0), Some(0.0));
    assert_eq!(secs(0, 0.5), Some(15.0));
    assert_eq!(secs(1, 0.0), Some(1.0));
    assert_eq!(secs(2, 0.0), Some(2.0));
    assert_eq!(secs(3, 0.0), Some(4.0));
    let jittered = secs(3, 0.99).unwrap();
    assert!(
        (jittered - 4.0 * (1.0 - 0.99 / 2.0)).abs() < 1e-6,
        "{jittered}"
    );
    assert_eq!(secs(4, 0.0), None, "ReconnectCount attempts made");
    let forever = ClientConfig {
        reconnect_count: -1,
        ..config
    };
    let capped = reconnect_delay(40, &forever, 0.0).unwrap();
    assert_eq!(
        capped,
        Duration::from_secs(10),
        "never above ReconnectInterval"
    );
    assert!(reconnect_delay(u32::MAX, &forever, 0.3).is_some());
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any frame survives the wire; any bytes decode or fail, never panic.
        #[test]
        fn frames_round_trip(
            seq in any::<u64>(), service in any::<i32>(), method in 0i32..3,
            headers in proptest::collection::vec(("[a-z_]{1,8}", ".{0,12}"), 0..6),
            payload in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let frame = Frame {
                seq_id: seq,
                log_id: seq ^ 1,
                service,
                method,
                headers: headers.iter().map(|(k, v)| header(k, v)).collect(),
                payload,
                ..Frame::default()
            };
            prop_assert_eq!(Frame::decode(frame.encode_to_vec().as_slice()).unwrap(), frame);
            let _ = Frame::decode(junk.as_slice());
        }

        /// Parts in any order make the payload in seq order, once.
        #[test]
        fn any_arrival_order_reassembles(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..16), 2..6),
            seed in any::<u64>(),
        ) {
            let mut order: Vec<usize> = (0..parts.len()).collect();
            let mut s = seed;
            for i in (1..order.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut r = Reassembly::default();
            let now = Duration::from_secs(1);
            let mut whole = Vec::new();
            for (n, &seq) in order.iter().enumerate() {
                let got = r.receive(&event("m", parts.len(), seq, &parts[seq]), now);
                if n + 1 < order.len() {
                    prop_assert_eq!(got, Received::Part);
                } else if let Received::Event { payload, .. } = got {
                    whole = payload;
                } else {
                    prop_assert!(false, "the last part completes the event");
                }
            }
            prop_assert_eq!(whole, parts.concat());
            prop_assert!(r.pending.is_empty());
        }
    }
}
