//! Conformance of the Feishu emulator's answers and pushed events to the Go
//! types of Feishu's official SDK (`larksuite/oapi-sdk-go`), which real
//! clients decode them into: for each endpoint and event the emulator
//! serves, every field it sends is one the SDK's type has, with the JSON
//! type the SDK declares (a number where the SDK reads a string fails the
//! SDK's decoding: Feishu sends times and counts as strings), every field
//! the SDK declares without `omitempty` is present in a successful answer
//! (an error answer is the SDK's `CodeError`: `code`, `msg`), recursively. The shapes
//! are data recorded from the SDK by `scripts/feishu-shapes`, under
//! `tests/shapes/feishu/` (one file a Go type).
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gatehouse_emulators::{FeishuChat, FeishuEmulator, FeishuHandle, FeishuOptions};
use serde_json::{json, Value};

const APP_ID: &str = "cli_conformance_app";
const APP_SECRET: &str = "conformance-app-secret-generated-for-this-test";
const BOT: &str = "ou_conformance_bot";

/// A Go type as the SDK declares it.
#[derive(Debug)]
struct Shape {
    fields: BTreeMap<String, String>,
    always: Vec<String>,
    nested: BTreeMap<String, String>,
    items: BTreeMap<String, String>,
}

fn load_shapes() -> BTreeMap<String, Shape> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shapes/feishu");
    let mut shapes = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("the shapes directory") {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            v["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("larksuite/oapi-sdk-go")),
            "{name}: no source"
        );
        let names = |key: &str| -> BTreeMap<String, String> {
            v.get(key)
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, t)| (k.clone(), t.as_str().unwrap().to_owned()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let always = v["always"]
            .as_array()
            .map(|a| a.iter().map(|f| f.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        shapes.insert(
            name.to_owned(),
            Shape {
                fields: names("fields"),
                always,
                nested: names("nested"),
                items: names("items"),
            },
        );
    }
    for (name, shape) in &shapes {
        for target in shape.nested.values().chain(shape.items.values()) {
            assert!(shapes.contains_key(target), "{name} refers to {target}");
        }
    }
    shapes
}

/// What a message carries in every answer that holds one (created, read,
/// listed).
const MESSAGE_SENT: &[&str] = &[
    "message_id",
    "msg_type",
    "create_time",
    "update_time",
    "deleted",
    "updated",
    "chat_id",
    "sender",
    "body",
];

/// Fields Feishu sends in every successful answer or event of a type,
/// though the SDK declares them all `omitempty` (the example responses of
/// Feishu's API reference for these calls and events, open.feishu.cn
/// "im-v1/message/create", "…/reply", "…/get", "…/list", "im-v1/chat/get",
/// "…/list" and the `im.message.receive_v1` / `recalled_v1` /
/// `chat.member.bot.*` event pages): what clients read.
const SENT: &[(&str, &[&str])] = &[
    ("im.CreateMessageRespData", MESSAGE_SENT),
    (
        "im.ReplyMessageRespData",
        &[
            "message_id",
            "root_id",
            "parent_id",
            "msg_type",
            "create_time",
            "chat_id",
            "sender",
            "body",
        ],
    ),
    ("im.Message", MESSAGE_SENT),
    ("im.Sender", &["id", "id_type", "sender_type"]),
    ("im.MessageBody", &["content"]),
    ("im.GetMessageRespData", &["items"]),
    ("im.ListMessageRespData", &["has_more", "items"]),
    (
        "im.GetChatRespData",
        &[
            "name",
            "chat_mode",
            "chat_type",
            "owner_id",
            "owner_id_type",
        ],
    ),
    ("im.ListChatRespData", &["has_more", "items"]),
    ("im.ListChat", &["chat_id", "name", "owner_id"]),
    ("im.P2MessageReceiveV1Data", &["sender", "message"]),
    (
        "im.EventSender",
        &["sender_id", "sender_type", "tenant_key"],
    ),
    (
        "im.EventMessage",
        &[
            "message_id",
            "create_time",
            "chat_id",
            "chat_type",
            "message_type",
            "content",
        ],
    ),
    (
        "im.P2MessageRecalledV1Data",
        &["message_id", "chat_id", "recall_time", "recall_type"],
    ),
    ("im.P2ChatMemberBotAddedV1Data", &["chat_id", "operator_id"]),
    (
        "im.P2ChatMemberBotDeletedV1Data",
        &["chat_id", "operator_id"],
    ),
];

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks `value` against Go type `name`, one line a difference. `extra`
/// names fields the type is embedded beside (an envelope's `data`,
/// an event's `event`), checked by the caller.
fn check(
    shapes: &BTreeMap<String, Shape>,
    name: &str,
    value: &Value,
    at: &str,
    extra: &[&str],
    errors: &mut Vec<String>,
) {
    let shape = &shapes[name];
    let Some(object) = value.as_object() else {
        errors.push(format!("{at}: expected an object ({name}), got {value}"));
        return;
    };
    for (field, v) in object {
        if extra.contains(&field.as_str()) {
            continue;
        }
        let here = format!("{at}.{field}");
        match shape.fields.get(field) {
            None => errors.push(format!("{here}: not a field of {name}")),
            // Go decodes null into any field (it leaves it unset).
            Some(_) if v.is_null() => {}
            Some(t) if t == json_type(v) || (t == "number" && json_type(v) == "integer") => {}
            Some(t) => errors.push(format!(
                "{here} ({name}): the SDK reads {t}, got {} ({v})",
                json_type(v)
            )),
        }
    }
    let sent = SENT
        .iter()
        .find(|(type_name, _)| *type_name == name)
        .map_or(&[][..], |(_, fields)| *fields);
    for field in shape
        .always
        .iter()
        .map(String::as_str)
        .chain(sent.iter().copied())
    {
        if !object.contains_key(field) {
            errors.push(format!("{at}.{field} ({name}): always sent, missing"));
        }
    }
    for (field, target) in &shape.nested {
        if let Some(v) = object.get(field).filter(|v| !v.is_null()) {
            check(shapes, target, v, &format!("{at}.{field}"), &[], errors);
        }
    }
    for (field, target) in &shape.items {
        if let Some(list) = object.get(field).and_then(Value::as_array) {
            for (i, v) in list.iter().enumerate() {
                check(
                    shapes,
                    target,
                    v,
                    &format!("{at}.{field}[{i}]"),
                    &[],
                    errors,
                );
            }
        }
    }
}

/// An API answer: the SDK's `CodeError` envelope with `data` of `data`'s
/// type (if any).
fn check_answer(
    shapes: &BTreeMap<String, Shape>,
    data: Option<&str>,
    value: &Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    check(shapes, "core.CodeError", value, at, &["data"], errors);
    match (data, value.get("data")) {
        (Some(data), Some(v)) => check(shapes, data, v, &format!("{at}.data"), &[], errors),
        (Some(data), None) => errors.push(format!("{at}: no data ({data})")),
        (None, _) => {}
    }
}

struct World {
    dir: tempfile::TempDir,
    emulator: FeishuHandle,
    ca: PathBuf,
}

impl World {
    /// `method path` on open.feishu.cn with `token` (if any).
    fn call(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> (u16, Value) {
        let port = self.emulator.addr().port();
        let mut command = Command::new("curl");
        command
            .args(["-sS", "-w", "\n%{http_code}", "-X", method, "--cacert"])
            .arg(&self.ca)
            .args(["--resolve", &format!("open.feishu.cn:{port}:127.0.0.1")]);
        if !token.is_empty() {
            command.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        if let Some(body) = body {
            let file = self.dir.path().join("body.json");
            std::fs::write(&file, body.to_string()).unwrap();
            command
                .args(["-H", "Content-Type: application/json; charset=utf-8"])
                .arg("--data-binary")
                .arg(format!("@{}", file.display()));
        }
        let output = command
            .arg(format!("https://open.feishu.cn:{port}{path}"))
            .output()
            .expect("curl runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).unwrap();
        let (body, status) = text.rsplit_once('\n').unwrap();
        let value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        (status.parse().unwrap(), value)
    }
}

#[test]
fn every_emulated_endpoint_and_event_decodes_into_the_sdks_types() {
    let shapes = load_shapes();
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on the event target: each push is kept with its
    // failed attempt, and its event is what this test reads.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/events", closed_port.local_addr().unwrap());
    drop(closed_port);
    let emulator = FeishuEmulator::start(
        FeishuOptions::default()
            .app(APP_ID, APP_SECRET)
            .event_target(&url, APP_ID, None, "verification-token"),
    )
    .expect("emulator starts");
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let w = World { dir, emulator, ca };
    let mut errors = Vec::new();

    let (status, token) = w.call(
        "POST",
        "/open-apis/auth/v3/tenant_access_token/internal",
        "",
        Some(json!({"app_id": APP_ID, "app_secret": APP_SECRET})),
    );
    assert_eq!(status, 200, "{token}");
    check(
        &shapes,
        "core.TenantAccessTokenResp",
        &token,
        "POST tenant_access_token",
        &[],
        &mut errors,
    );
    let (_, refused) = w.call(
        "POST",
        "/open-apis/auth/v3/tenant_access_token/internal",
        "",
        Some(json!({"app_id": APP_ID, "app_secret": "wrong"})),
    );
    assert_ne!(refused["code"], 0, "{refused}");
    // An error answer is the `CodeError` alone (no token, no expiry).
    check(
        &shapes,
        "core.CodeError",
        &refused,
        "POST tenant_access_token (wrong secret)",
        &[],
        &mut errors,
    );
    let t = token["tenant_access_token"].as_str().unwrap().to_owned();

    w.emulator.add_chat(FeishuChat::group("oc_team", "Team"));
    let asked = w.emulator.send_user_message(
        "oc_team",
        "group",
        "ou_alice",
        "@_user_1 the login form rejects valid emails",
        &[(BOT, "gatehouse")],
    );
    let text = |s: &str| json!({"msg_type": "text", "content": json!({"text": s}).to_string()});
    let mut sent = text("On it.");
    sent["receive_id"] = json!("oc_team");
    let answers = [
        (
            "POST im/v1/messages",
            w.call(
                "POST",
                "/open-apis/im/v1/messages?receive_id_type=chat_id",
                &t,
                Some(sent),
            ),
            Some("im.CreateMessageRespData"),
        ),
        (
            "POST im/v1/messages/{id}/reply",
            w.call(
                "POST",
                &format!("/open-apis/im/v1/messages/{asked}/reply"),
                &t,
                Some(text("Looking.")),
            ),
            Some("im.ReplyMessageRespData"),
        ),
        (
            "GET im/v1/messages/{id}",
            w.call(
                "GET",
                &format!("/open-apis/im/v1/messages/{asked}"),
                &t,
                None,
            ),
            Some("im.GetMessageRespData"),
        ),
        (
            "GET im/v1/messages",
            w.call(
                "GET",
                "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_team&page_size=1",
                &t,
                None,
            ),
            Some("im.ListMessageRespData"),
        ),
        (
            "GET im/v1/chats/{id}",
            w.call("GET", "/open-apis/im/v1/chats/oc_team", &t, None),
            Some("im.GetChatRespData"),
        ),
        (
            "GET im/v1/chats",
            w.call("GET", "/open-apis/im/v1/chats?page_size=1", &t, None),
            Some("im.ListChatRespData"),
        ),
        (
            "GET im/v1/messages/{id} with a bad token",
            w.call(
                "GET",
                &format!("/open-apis/im/v1/messages/{asked}"),
                "t-not-a-token",
                None,
            ),
            None,
        ),
        (
            "GET im/v1/chats/{id} of an unknown chat",
            w.call("GET", "/open-apis/im/v1/chats/oc_nowhere", &t, None),
            None,
        ),
    ];
    for (at, (status, value), data) in &answers {
        let ok = value["code"] == 0;
        // An error answer has no data; a success has its type's.
        assert_eq!(ok, data.is_some(), "{at}: {status} {value}");
        // Feishu answers a success 200 and these errors 400, its code in
        // the body (a missing token too: "unexpect status Bad Request, resp
        // body: {"code":99991661,"msg":"Need a token"}", go-lark/lark#28).
        let expected = if ok { 200 } else { 400 };
        assert_eq!(*status, expected, "{at}: {value}");
        check_answer(&shapes, *data, value, at, &mut errors);
    }
    // The bot's info has no type in the SDK: its fields as Feishu's API
    // reference ("bot-v3/bot/get") shows them, `bot` beside `code`/`msg`.
    let (status, bot) = w.call("GET", "/open-apis/bot/v3/info", &t, None);
    assert_eq!(status, 200, "{bot}");
    check(
        &shapes,
        "core.CodeError",
        &bot,
        "GET bot/v3/info",
        &["bot"],
        &mut errors,
    );
    for (field, kind) in [
        ("activate_status", "integer"),
        ("app_name", "string"),
        ("avatar_url", "string"),
        ("ip_white_list", "array"),
        ("open_id", "string"),
    ] {
        if json_type(&bot["bot"][field]) != kind {
            errors.push(format!(
                "GET bot/v3/info: bot.{field}: expected {kind}, got {}",
                bot["bot"][field]
            ));
        }
    }
    // The list answers page (one item each, more to come).
    let (_, (_, listed), _) = &answers[3];
    assert_eq!(listed["data"]["items"].as_array().map(Vec::len), Some(1));

    // Events, as the SDK's `P2…V1` types read them: the v2 envelope
    // (`schema`, `header`) with `event` of the event's type.
    w.emulator.recall_message(&asked, "message_owner").unwrap();
    w.emulator
        .bot_membership_changed_by("oc_team", "ou_alice", false);
    w.emulator
        .bot_membership_changed_by("oc_team", "ou_alice", true);
    let wanted = [
        ("im.message.receive_v1", "im.P2MessageReceiveV1Data"),
        ("im.message.recalled_v1", "im.P2MessageRecalledV1Data"),
        (
            "im.chat.member.bot.deleted_v1",
            "im.P2ChatMemberBotDeletedV1Data",
        ),
        (
            "im.chat.member.bot.added_v1",
            "im.P2ChatMemberBotAddedV1Data",
        ),
    ];
    let deliveries = w.emulator.event_deliveries();
    for (event_type, data) in wanted {
        let Some(d) = deliveries
            .iter()
            .find(|d| d.event["header"]["event_type"] == event_type)
        else {
            errors.push(format!("no {event_type} pushed"));
            continue;
        };
        let at = format!("event {event_type}");
        check(
            &shapes,
            "event.EventV2Base",
            &d.event,
            &at,
            &["event"],
            &mut errors,
        );
        match d.event.get("event") {
            Some(v) => check(&shapes, data, v, &format!("{at}.event"), &[], &mut errors),
            None => errors.push(format!("{at}: no event")),
        }
    }
    assert!(
        errors.is_empty(),
        "{} differences from the SDK's types:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

#[test]
fn the_checker_names_field_type_and_go_type() {
    let shapes = load_shapes();
    let mut errors = Vec::new();
    let message = json!({"message_id": "om_1", "create_time": 1_700_000_000_000u64, "invented": 1});
    check(&shapes, "im.Message", &message, "GET /x", &[], &mut errors);
    assert!(
        errors.contains(
            &"GET /x.create_time (im.Message): the SDK reads string, got integer (1700000000000)"
                .to_owned()
        ),
        "{errors:#?}"
    );
    assert!(
        errors.contains(&"GET /x.invented: not a field of im.Message".to_owned()),
        "{errors:#?}"
    );
    let mut errors = Vec::new();
    check(
        &shapes,
        "core.CodeError",
        &json!({"code": 0}),
        "GET /y",
        &[],
        &mut errors,
    );
    assert_eq!(
        errors,
        ["GET /y.msg (core.CodeError): always sent, missing"]
    );
}
