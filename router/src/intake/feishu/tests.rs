use serde_json::{json, Value};

use super::*;

const NOW: u64 = 1_700_000_000;
const KEY: &[u8] = b"encrypt-key";
const TOKEN: &[u8] = b"v-token";

fn event(event_type: &str, app_id: &str, token: &str) -> Value {
    json!({"schema": "2.0",
           "header": {"event_id": "ev_1", "event_type": event_type, "create_time": "1700000000000",
                      "token": token, "app_id": app_id, "tenant_key": "tk"},
           "event": {"sender": {"sender_id": {"open_id": "ou_a"}, "sender_type": "user"},
                     "message": {"message_id": "om_1", "chat_id": "oc_1", "chat_type": "p2p",
                                 "message_type": "text", "content": "{\"text\":\"hi\"}"}}})
}

fn sealed(plain: &Value) -> Vec<u8> {
    json!({ "encrypt": encrypt(KEY, [3; 16], plain.to_string().as_bytes()) })
        .to_string()
        .into_bytes()
}

fn sign(ts: &str, body: &[u8]) -> String {
    hex::encode(signature(ts, "nonce", KEY, body))
}

fn both() -> FeishuKeys {
    FeishuKeys::new("cli_a", Some(KEY), Some(TOKEN)).unwrap()
}

fn token_only() -> FeishuKeys {
    FeishuKeys::new("cli_a", None, Some(TOKEN)).unwrap()
}

fn signed<'a>(ts: &'a str, sig: &'a str) -> Signed<'a> {
    Signed {
        timestamp: Some(ts),
        nonce: Some("nonce"),
        signature: Some(sig),
    }
}

fn stored(result: Result<Opened, Refused>) -> (String, String) {
    match result {
        Ok(Opened::Store {
            event_id, meaning, ..
        }) => (event_id, meaning),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_encrypted_signed_event_is_opened() {
    let body = sealed(&event(MESSAGE_RECEIVE, "cli_a", "v-token"));
    let ts = NOW.to_string();
    let sig = sign(&ts, &body);
    let (id, meaning) = stored(open(&both(), signed(&ts, &sig), &body, NOW));
    assert_eq!(id, "ev_1");
    assert_eq!(meaning, "feishu:message:om_1");
}

#[test]
fn encrypted_refusals() {
    let good = event(MESSAGE_RECEIVE, "cli_a", "v-token");
    let body = sealed(&good);
    let ts = NOW.to_string();
    let sig = sign(&ts, &body);
    let old = (NOW - MAX_AGE_SECS - 1).to_string();
    let old_sig = sign(&old, &body);
    let future = (NOW + MAX_AGE_SECS + 1).to_string();
    let future_sig = sign(&future, &body);
    let edge = (NOW - MAX_AGE_SECS).to_string();
    let edge_sig = sign(&edge, &body);
    let mut tampered = body.clone();
    tampered.push(b' ');
    let other_app = sealed(&event(MESSAGE_RECEIVE, "cli_b", "v-token"));
    let other_app_sig = sign(&ts, &other_app);
    let unknown = sealed(&event("contact.user.created_v3", "cli_a", "v-token"));
    let unknown_sig = sign(&ts, &unknown);
    let plain = good.to_string().into_bytes();
    let plain_sig = sign(&ts, &plain);
    let garbage = json!({"encrypt": "AAAA"}).to_string().into_bytes();
    let garbage_sig = sign(&ts, &garbage);
    let not_json = b"{not json".to_vec();
    let not_json_sig = sign(&ts, &not_json);
    let cases: Vec<(&str, Signed<'_>, &[u8], Option<Refused>)> = vec![
        ("positive control", signed(&ts, &sig), &body, None),
        ("at the age bound", signed(&edge, &edge_sig), &body, None),
        (
            "unsigned",
            Signed::default(),
            &body,
            Some(Refused::Unsigned),
        ),
        (
            "tampered body",
            signed(&ts, &sig),
            &tampered,
            Some(Refused::BadSignature),
        ),
        (
            "signature of another body",
            signed(&ts, &old_sig),
            &body,
            Some(Refused::BadSignature),
        ),
        (
            "not hex",
            signed(&ts, "zz"),
            &body,
            Some(Refused::BadSignature),
        ),
        ("stale", signed(&old, &old_sig), &body, Some(Refused::Stale)),
        (
            "from the future",
            signed(&future, &future_sig),
            &body,
            Some(Refused::Stale),
        ),
        (
            "no timestamp",
            Signed {
                timestamp: None,
                ..signed(&ts, &sig)
            },
            &body,
            Some(Refused::Stale),
        ),
        (
            "another app",
            signed(&ts, &other_app_sig),
            &other_app,
            Some(Refused::WrongApp),
        ),
        (
            "unknown event",
            signed(&ts, &unknown_sig),
            &unknown,
            Some(Refused::UnknownEvent("contact.user.created_v3".into())),
        ),
        (
            "plain text though a key is set",
            signed(&ts, &plain_sig),
            &plain,
            Some(Refused::Undecryptable),
        ),
        (
            "not a ciphertext",
            signed(&ts, &garbage_sig),
            &garbage,
            Some(Refused::Undecryptable),
        ),
    ];
    for (name, headers, body, want) in cases {
        let got = open(&both(), headers, body, NOW);
        match want {
            None => assert!(matches!(got, Ok(Opened::Store { .. })), "{name}: {got:?}"),
            Some(want) => assert_eq!(got, Err(want), "{name}"),
        }
    }
    let got = open(&both(), signed(&ts, &not_json_sig), &not_json, NOW);
    assert!(matches!(got, Err(Refused::Malformed(_))), "{got:?}");
}

#[test]
fn the_token_guards_when_there_is_no_encrypt_key() {
    let good = event(MESSAGE_RECEIVE, "cli_a", "v-token")
        .to_string()
        .into_bytes();
    stored(open(&token_only(), Signed::default(), &good, NOW));
    let wrong = event(MESSAGE_RECEIVE, "cli_a", "v-tokeN")
        .to_string()
        .into_bytes();
    assert_eq!(
        open(&token_only(), Signed::default(), &wrong, NOW),
        Err(Refused::BadToken)
    );
    let mut none = event(MESSAGE_RECEIVE, "cli_a", "x");
    none["header"].as_object_mut().unwrap().remove("token");
    let none = none.to_string().into_bytes();
    assert_eq!(
        open(&token_only(), Signed::default(), &none, NOW),
        Err(Refused::BadToken)
    );
    let encrypted = sealed(&event(MESSAGE_RECEIVE, "cli_a", "v-token"));
    assert_eq!(
        open(&token_only(), Signed::default(), &encrypted, NOW),
        Err(Refused::Encrypted)
    );
}

#[test]
fn challenges() {
    let challenge = json!({"challenge": "c-1", "token": "v-token", "type": "url_verification"});
    let plain = challenge.to_string().into_bytes();
    assert_eq!(
        open(&token_only(), Signed::default(), &plain, NOW),
        Ok(Opened::Challenge("c-1".into()))
    );
    // Encrypted and unsigned, as Feishu sends it with an encrypt key.
    assert_eq!(
        open(&both(), Signed::default(), &sealed(&challenge), NOW),
        Ok(Opened::Challenge("c-1".into()))
    );
    // A plain challenge when a key is set, or a wrong token: refused.
    assert_eq!(
        open(&both(), Signed::default(), &plain, NOW),
        Err(Refused::Undecryptable)
    );
    let wrong = json!({"challenge": "c-1", "token": "nope", "type": "url_verification"});
    assert_eq!(
        open(&both(), Signed::default(), &sealed(&wrong), NOW),
        Err(Refused::BadToken)
    );
    assert_eq!(
        open(
            &token_only(),
            Signed::default(),
            wrong.to_string().as_bytes(),
            NOW
        ),
        Err(Refused::BadToken)
    );
}

#[test]
fn envelope_table() {
    let keys = token_only();
    let drop = |path: &str| {
        let mut v = event(MESSAGE_RECEIVE, "cli_a", "v-token");
        let (parent, field) = path.rsplit_once('/').unwrap();
        v.pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(field);
        v
    };
    let cases: Vec<(&str, Value, Result<(), Refused>)> = vec![
        (
            "complete",
            event(MESSAGE_RECEIVE, "cli_a", "v-token"),
            Ok(()),
        ),
        (
            "schema 1.0",
            {
                let mut v = event(MESSAGE_RECEIVE, "cli_a", "v-token");
                v["schema"] = json!("1.0");
                v
            },
            Err(Refused::Envelope("`schema` is not 2.0")),
        ),
        (
            "no event id",
            drop("/header/event_id"),
            Err(Refused::Envelope("no `header.event_id`")),
        ),
        (
            "no event type",
            drop("/header/event_type"),
            Err(Refused::Envelope("no `header.event_type`")),
        ),
        (
            "no create time",
            drop("/header/create_time"),
            Err(Refused::Envelope("no `header.create_time`")),
        ),
        (
            "no tenant",
            drop("/header/tenant_key"),
            Err(Refused::Envelope("no `header.tenant_key`")),
        ),
        ("no app id", drop("/header/app_id"), Err(Refused::WrongApp)),
        (
            "no message id",
            drop("/event/message/message_id"),
            Err(Refused::Envelope("no `event.message.message_id`")),
        ),
    ];
    for (name, v, want) in cases {
        let got = open(&keys, Signed::default(), v.to_string().as_bytes(), NOW).map(|_| ());
        assert_eq!(got, want, "{name}");
    }
    let read = event("im.message.message_read_v1", "cli_a", "v-token")
        .to_string()
        .into_bytes();
    assert_eq!(
        open(&keys, Signed::default(), &read, NOW),
        Ok(Opened::Ignore {
            event_type: "im.message.message_read_v1".into()
        })
    );
}

#[test]
fn keys_need_a_secret_and_never_print_one() {
    assert!(FeishuKeys::new("cli_a", None, None).is_err());
    let shown = format!("{:?}", both());
    assert!(
        !shown.contains("encrypt-key") && !shown.contains("v-token"),
        "{shown}"
    );
    assert!(shown.contains("cli_a"));
}

#[test]
fn delivered_events_are_checked_like_pushed_ones() {
    let plain = event(MESSAGE_RECEIVE, "cli_a", "v-token").to_string();
    let (id, meaning) = stored(open_delivered(&token_only(), plain.as_bytes()));
    assert_eq!(
        (id.as_str(), meaning.as_str()),
        ("ev_1", "feishu:message:om_1")
    );
    // Unsigned is fine here (no HTTP), even with an encrypt key set.
    stored(open_delivered(&both(), plain.as_bytes()));
    stored(open_delivered(
        &both(),
        &sealed(&event(MESSAGE_RECEIVE, "cli_a", "v-token")),
    ));
    let refused = |payload: &[u8], keys: &FeishuKeys| open_delivered(keys, payload).err();
    let wrong_app = event(MESSAGE_RECEIVE, "cli_b", "v-token").to_string();
    assert_eq!(
        refused(wrong_app.as_bytes(), &token_only()),
        Some(Refused::WrongApp)
    );
    let wrong_token = event(MESSAGE_RECEIVE, "cli_a", "guess").to_string();
    assert_eq!(
        refused(wrong_token.as_bytes(), &token_only()),
        Some(Refused::BadToken)
    );
    let sealed_without_key = sealed(&event(MESSAGE_RECEIVE, "cli_a", "v-token"));
    assert_eq!(
        refused(&sealed_without_key, &token_only()),
        Some(Refused::Encrypted)
    );
    let challenge = json!({"type": "url_verification", "challenge": "c", "token": "v-token"});
    assert!(matches!(
        refused(challenge.to_string().as_bytes(), &token_only()),
        Some(Refused::Envelope(_))
    ));
    assert!(matches!(
        refused(b"{", &token_only()),
        Some(Refused::Malformed(_))
    ));
    let unknown = event("im.unknown_v1", "cli_a", "v-token").to_string();
    assert!(matches!(
        refused(unknown.as_bytes(), &token_only()),
        Some(Refused::UnknownEvent(_))
    ));
}

/// A recall and the bot's joining or leaving a chat are stored, each with a
/// meaning of its own (a message is recalled once, whatever the event ids);
/// one without the fields its meaning needs is refused, stored nowhere.
#[test]
fn recalls_and_membership_changes_are_stored_by_meaning() {
    let keys = token_only();
    let with_event = |event_type: &str, body: Value| {
        let mut v = event(event_type, "cli_a", "v-token");
        v["event"] = body;
        v.to_string().into_bytes()
    };
    let cases: Vec<(&str, Value, Result<&str, Refused>)> = vec![
        (
            MESSAGE_RECALLED,
            json!({"message_id": "om_9", "chat_id": "oc_1", "recall_time": "1", "recall_type": "message_owner"}),
            Ok("feishu:recall:om_9"),
        ),
        (
            MESSAGE_RECALLED,
            json!({"chat_id": "oc_1"}),
            Err(Refused::Envelope("no `event.message_id`")),
        ),
        (
            BOT_ADDED,
            json!({"chat_id": "oc_7", "operator_id": {"open_id": "ou_a"}, "name": "team"}),
            Ok("feishu:bot:added:oc_7:1700000000000"),
        ),
        (
            BOT_REMOVED,
            json!({"chat_id": "oc_7", "operator_id": {"open_id": "ou_a"}}),
            Ok("feishu:bot:removed:oc_7:1700000000000"),
        ),
        (
            BOT_REMOVED,
            json!({"operator_id": {"open_id": "ou_a"}}),
            Err(Refused::Envelope("no `event.chat_id`")),
        ),
    ];
    for (event_type, body, want) in cases {
        let bytes = with_event(event_type, body.clone());
        let got = open(&keys, Signed::default(), &bytes, NOW).map(|o| match o {
            Opened::Store { meaning, .. } => meaning,
            other => panic!("{other:?}"),
        });
        assert_eq!(got, want.clone().map(str::to_owned), "{event_type} {body}");
        // The long connection's path checks the same.
        let handed = open_delivered(&keys, &bytes).map(|o| match o {
            Opened::Store { meaning, .. } => meaning,
            other => panic!("{other:?}"),
        });
        assert_eq!(handed, want.map(str::to_owned), "{event_type} handed over");
    }
}
