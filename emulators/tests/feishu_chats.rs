//! The Feishu emulator's chats, driven by real curl over TLS: the bot's
//! membership (230002 outside a chat), message size limits (230025),
//! threads (`reply_in_thread`), history pagination and chat info.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use gatehouse_emulators::{FeishuChat, FeishuEmulator, FeishuHandle, FeishuOptions};
use serde_json::{json, Value};

const APP_ID: &str = "cli_chats_app";
const APP_SECRET: &str = "chats-app-secret-generated-for-this-test";

struct World {
    dir: tempfile::TempDir,
    emulator: FeishuHandle,
    ca: PathBuf,
    token: String,
}

impl World {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let emulator =
            FeishuEmulator::start(FeishuOptions::default().app(APP_ID, APP_SECRET)).unwrap();
        let ca = dir.path().join("ca.pem");
        emulator.write_ca_pem(&ca).unwrap();
        let mut world = Self {
            dir,
            emulator,
            ca,
            token: String::new(),
        };
        let (status, body) = world.call(
            "POST",
            "/open-apis/auth/v3/tenant_access_token/internal",
            Some(json!({"app_id": APP_ID, "app_secret": APP_SECRET}).to_string()),
        );
        assert_eq!(status, 200, "{body}");
        world.token = body["tenant_access_token"].as_str().unwrap().to_owned();
        world
    }

    /// `method path` on open.feishu.cn with the tenant token (once it has
    /// one); a body goes from a file, as large ones do not fit in argv.
    fn call(&self, method: &str, path: &str, body: Option<String>) -> (u16, Value) {
        let port = self.emulator.addr().port();
        let mut command = Command::new("curl");
        command
            .args(["-sS", "-w", "\n%{http_code}", "-X", method, "--cacert"])
            .arg(&self.ca)
            .args(["--resolve", &format!("open.feishu.cn:{port}:127.0.0.1")]);
        if !self.token.is_empty() {
            command.args(["-H", &format!("Authorization: Bearer {}", self.token)]);
        }
        if let Some(body) = body {
            let file = self.dir.path().join("body.json");
            std::fs::write(&file, body).unwrap();
            command
                .args(["-H", "Content-Type: application/json; charset=utf-8"])
                .arg("--data-binary")
                .arg(format!("@{}", file.display()));
        }
        let output = command
            .arg(format!("https://open.feishu.cn:{port}{path}"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).unwrap();
        let (body, status) = text.rsplit_once('\n').unwrap();
        (status.parse().unwrap(), serde_json::from_str(body).unwrap())
    }

    fn send(&self, chat: &str, text: &str) -> (u16, Value) {
        self.call(
            "POST",
            "/open-apis/im/v1/messages?receive_id_type=chat_id",
            Some(text_body(Some(chat), text)),
        )
    }

    fn reply(&self, parent: &str, extra: Value) -> (u16, Value) {
        let mut body = json!({"msg_type": "text", "content": json!({"text": "re"}).to_string()});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.call(
            "POST",
            &format!("/open-apis/im/v1/messages/{parent}/reply"),
            Some(body.to_string()),
        )
    }
}

fn text_body(chat: Option<&str>, text: &str) -> String {
    let mut body = json!({"msg_type": "text", "content": json!({"text": text}).to_string()});
    if let Some(chat) = chat {
        body["receive_id"] = json!(chat);
    }
    body.to_string()
}

fn code(answer: &(u16, Value)) -> (u16, Option<i64>) {
    (answer.0, answer.1["code"].as_i64())
}

#[test]
fn outside_a_chat_the_bot_cannot_send_reply_or_read_there() {
    let w = World::start();
    let asked = w
        .emulator
        .add_user_message("oc_team", "ou_alice", "anyone there?");
    // Positive control: the bot is in the chat a person wrote in.
    assert_eq!(code(&w.send("oc_team", "hello")), (200, Some(0)));
    assert_eq!(code(&w.reply(&asked, json!({}))), (200, Some(0)));
    let sent = w.emulator.messages().len();

    w.emulator.remove_bot_from_chat("oc_team");
    for answer in [
        w.send("oc_team", "still here?"),
        w.reply(&asked, json!({})),
        w.call("GET", &format!("/open-apis/im/v1/messages/{asked}"), None),
        w.call(
            "GET",
            "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_team",
            None,
        ),
    ] {
        assert_eq!(code(&answer), (400, Some(230_002)), "{}", answer.1);
        assert_eq!(answer.1["msg"], "Bot/User can NOT be out of the chat.");
    }
    assert_eq!(w.emulator.messages().len(), sent, "nothing was sent");
    let (_, chats) = w.call("GET", "/open-apis/im/v1/chats", None);
    assert_eq!(chats["data"]["items"], json!([]), "{chats}");

    // A chat id naming no chat is an invalid receive id.
    let unknown = w.send("oc_nowhere", "hello");
    assert_eq!(code(&unknown), (400, Some(230_001)), "{}", unknown.1);

    w.emulator.add_bot_to_chat("oc_team");
    assert_eq!(code(&w.send("oc_team", "back")), (200, Some(0)));
}

#[test]
fn messages_over_their_type_limit_answer_230025_and_are_not_sent() {
    let w = World::start();
    w.emulator.add_bot_to_chat("oc_team");
    // A text body of exactly `len` bytes.
    let text_of = |len: usize| {
        let base = text_body(Some("oc_team"), "").len();
        text_body(Some("oc_team"), &"a".repeat(len - base))
    };
    let send = |body: String| {
        w.call(
            "POST",
            "/open-apis/im/v1/messages?receive_id_type=chat_id",
            Some(body),
        )
    };
    let limit = 150 * 1024;
    let at_limit = send(text_of(limit));
    assert_eq!(code(&at_limit), (200, Some(0)), "{}", at_limit.1);
    let over = send(text_of(limit + 1));
    assert_eq!(code(&over), (400, Some(230_025)), "{}", over.1);
    assert_eq!(
        over.1["msg"],
        "The length of the message content reaches its limit."
    );

    // A rich-text post is limited to 30 KB, as a reply too.
    let post = |len: usize| {
        let content = |s: &str| {
            json!({"zh_cn": {"title": "t", "content": [[{"tag": "text", "text": s}]]}}).to_string()
        };
        let body = |s: &str| json!({"msg_type": "post", "content": content(s)}).to_string();
        body(&"b".repeat(len - body("").len()))
    };
    let parent = w.emulator.add_user_message("oc_team", "ou_alice", "q");
    let reply = |body: String| {
        w.call(
            "POST",
            &format!("/open-apis/im/v1/messages/{parent}/reply"),
            Some(body),
        )
    };
    let ok = reply(post(30 * 1024));
    assert_eq!(code(&ok), (200, Some(0)), "{}", ok.1);
    let over = reply(post(30 * 1024 + 1));
    assert_eq!(code(&over), (400, Some(230_025)), "{}", over.1);
    let sent: Vec<_> = w
        .emulator
        .messages()
        .into_iter()
        .filter(|m| m.sender_type == "app")
        .collect();
    assert_eq!(sent.len(), 2, "only the two within their limits");
}

#[test]
fn a_reply_in_thread_starts_a_thread_that_later_replies_carry() {
    let w = World::start();
    let asked = w.emulator.add_user_message("oc_team", "ou_alice", "q");
    let plain = w.emulator.add_user_message("oc_team", "ou_bob", "other");

    let (status, first) = w.reply(&asked, json!({"reply_in_thread": true}));
    assert_eq!(status, 200, "{first}");
    let thread = first["data"]["thread_id"].as_str().unwrap().to_owned();
    assert!(thread.starts_with("omt_"), "{thread}");
    // The message replied to is the thread's first message.
    let (_, read) = w.call("GET", &format!("/open-apis/im/v1/messages/{asked}"), None);
    assert_eq!(read["data"]["items"][0]["thread_id"], thread.as_str());
    // A later reply to a message in the thread is in it, asked or not.
    let in_thread = first["data"]["message_id"].as_str().unwrap().to_owned();
    let (_, second) = w.reply(&in_thread, json!({}));
    assert_eq!(second["data"]["thread_id"], thread.as_str(), "{second}");
    assert_eq!(second["data"]["root_id"], asked.as_str());
    // A plain reply elsewhere has none (the control).
    let (_, other) = w.reply(&plain, json!({"reply_in_thread": false}));
    assert_eq!(other["data"]["thread_id"], "", "{other}");
    let bad = w.reply(&plain, json!({"reply_in_thread": "yes"}));
    assert_eq!(code(&bad), (400, Some(99_992_402)), "{}", bad.1);

    let ids = |answer: &Value| -> Vec<String> {
        answer["data"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["message_id"].as_str().unwrap().to_owned())
            .collect()
    };
    // The chat shows the thread by its first message; the thread shows all.
    let (_, chat) = w.call(
        "GET",
        "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_team",
        None,
    );
    let other_id = other["data"]["message_id"].as_str().unwrap().to_owned();
    assert_eq!(ids(&chat), [asked.clone(), plain, other_id]);
    let (_, listed) = w.call(
        "GET",
        &format!("/open-apis/im/v1/messages?container_id_type=thread&container_id={thread}"),
        None,
    );
    let second_id = second["data"]["message_id"].as_str().unwrap().to_owned();
    assert_eq!(ids(&listed), [asked, in_thread, second_id]);
    let unknown = w.call(
        "GET",
        "/open-apis/im/v1/messages?container_id_type=thread&container_id=omt_nope",
        None,
    );
    assert_eq!(code(&unknown), (400, Some(230_001)), "{}", unknown.1);

    // In a topic-mode chat a reply is in a topic unasked.
    let mut topics = FeishuChat::group("oc_topics", "Topics");
    topics.chat_mode = "topic".into();
    w.emulator.add_chat(topics);
    let post = w
        .emulator
        .add_user_message("oc_topics", "ou_alice", "topic");
    let (_, answer) = w.reply(&post, json!({}));
    assert!(
        answer["data"]["thread_id"]
            .as_str()
            .unwrap()
            .starts_with("omt_"),
        "{answer}"
    );
}

#[test]
fn history_pages_by_opaque_tokens_within_feishus_page_sizes() {
    let w = World::start();
    for i in 0..45 {
        w.emulator
            .add_user_message("oc_team", "ou_alice", &format!("m{i}"));
    }
    let list = |query: &str| {
        w.call(
            "GET",
            &format!(
                "/open-apis/im/v1/messages?container_id_type=chat&container_id=oc_team{query}"
            ),
            None,
        )
    };
    let texts = |answer: &Value| -> Vec<String> {
        answer["data"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let content: Value =
                    serde_json::from_str(m["body"]["content"].as_str().unwrap()).unwrap();
                content["text"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    // Following the tokens reads every message once, oldest first.
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let (status, page) = list(&format!("&page_size=20&page_token={token}"));
        assert_eq!(status, 200, "{page}");
        pages += 1;
        seen.extend(texts(&page));
        if page["data"]["has_more"] == false {
            assert_eq!(page["data"]["page_token"], "");
            break;
        }
        token = page["data"]["page_token"].as_str().unwrap().to_owned();
        assert!(!token.is_empty());
    }
    assert_eq!(pages, 3);
    let all: Vec<String> = (0..45).map(|i| format!("m{i}")).collect();
    assert_eq!(seen, all);
    // Unset: 20 a page. Newest first when asked.
    assert_eq!(texts(&list("").1).len(), 20);
    let (_, newest) = list("&sort_type=ByCreateTimeDesc&page_size=2");
    assert_eq!(texts(&newest), ["m44", "m43"]);
    // Out of range, a made-up token or sort: refused as Feishu refuses them.
    for query in [
        "&page_size=51",
        "&page_size=0",
        "&page_token=20",
        "&sort_type=newest",
    ] {
        let refused = list(query);
        assert_eq!(
            code(&refused),
            (400, Some(99_992_402)),
            "{query}: {}",
            refused.1
        );
    }
    assert_eq!(list("&page_size=50").0, 200);
    let (status, chats) = w.call("GET", "/open-apis/im/v1/chats?page_size=100", None);
    assert_eq!(status, 200, "chats page up to 100: {chats}");
    let refused = w.call("GET", "/open-apis/im/v1/chats?page_size=101", None);
    assert_eq!(code(&refused), (400, Some(99_992_402)));
}

#[test]
fn chat_info_for_a_member_and_feishus_refusals_otherwise() {
    let w = World::start();
    let mut team = FeishuChat::group("oc_team", "Team widgets");
    team.owner_id = "ou_alice".into();
    w.emulator.add_chat(team);
    let (status, info) = w.call("GET", "/open-apis/im/v1/chats/oc_team", None);
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["code"], 0);
    let data = &info["data"];
    assert_eq!(data["name"], "Team widgets");
    assert_eq!(data["chat_mode"], "group");
    assert_eq!(data["chat_type"], "private");
    assert_eq!(data["owner_id"], "ou_alice");
    assert_eq!(data["owner_id_type"], "open_id");

    let unknown = w.call("GET", "/open-apis/im/v1/chats/oc_nowhere", None);
    assert_eq!(code(&unknown), (400, Some(232_006)), "{}", unknown.1);
    w.emulator.remove_bot_from_chat("oc_team");
    let outside = w.call("GET", "/open-apis/im/v1/chats/oc_team", None);
    assert_eq!(code(&outside), (400, Some(232_011)), "{}", outside.1);
    assert_eq!(outside.1["msg"], "Operator can NOT be out of the chat.");
}
