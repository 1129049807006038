//! A stored `im.message.receive_v1` event ─► a [`TriggerInput`].
//!
//! The chat's type gives its kind (`p2p` is a direct message); the bot is
//! addressed when a mention's open_id is the bot's; a sender of type `app`
//! (or anything but `user`) is a bot; the thread is the chat and the
//! message's root (its parent, or itself, when it has none). The text of
//! `text` and `post` messages is kept, mention placeholders (`@_user_1`)
//! replaced by the names they stand for.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::intake::github::{Mapped, Skip};
use crate::trigger::{
    Address, AddressKind, Chat, ChatKind, Sender, Source, TriggerInput, TriggerKind,
};

#[derive(Debug, Deserialize)]
struct Envelope {
    header: Header,
    event: Event,
}

#[derive(Debug, Deserialize)]
struct Header {
    event_id: String,
    event_type: String,
}

#[derive(Debug, Deserialize)]
struct Event {
    sender: EventSender,
    message: Message,
}

#[derive(Debug, Deserialize)]
struct EventSender {
    sender_id: Ids,
    #[serde(default)]
    sender_type: String,
}

#[derive(Debug, Default, Deserialize)]
struct Ids {
    #[serde(default)]
    open_id: String,
}

#[derive(Debug, Deserialize)]
struct Message {
    message_id: String,
    #[serde(default)]
    root_id: String,
    #[serde(default)]
    parent_id: String,
    chat_id: String,
    chat_type: String,
    #[serde(default)]
    message_type: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    mentions: Vec<Mention>,
}

#[derive(Debug, Deserialize)]
struct Mention {
    #[serde(default)]
    key: String,
    #[serde(default)]
    id: Ids,
    #[serde(default)]
    name: String,
}

/// What a stored Feishu event lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("the event is not a message event: {0}")]
    Payload(String),
    #[error("the message has no sender open_id")]
    NoSender,
    #[error("unknown chat type `{0}`")]
    ChatType(String),
}

fn chat_kind(chat_type: &str) -> Result<ChatKind, MapError> {
    match chat_type {
        "p2p" => Ok(ChatKind::Direct),
        "group" => Ok(ChatKind::Group),
        "topic_group" => Ok(ChatKind::Topic),
        other => Err(MapError::ChatType(other.chars().take(32).collect())),
    }
}

/// The header alone: what every stored event has.
#[derive(Debug, Deserialize)]
struct HeaderOnly {
    header: Header,
}

/// `im.message.recalled_v1`'s event (oapi-sdk-go `P2MessageRecalledV1Data`:
/// `message_id`, `chat_id`, `recall_time`, `recall_type`). It names no
/// operator: `recall_type` says whether the sender (`message_owner`) or a
/// chat or tenant manager recalled it.
#[derive(Debug, Deserialize)]
struct RecallEnvelope {
    event: Recall,
}

#[derive(Debug, Deserialize)]
struct Recall {
    message_id: String,
    #[serde(default)]
    chat_id: String,
    #[serde(default)]
    recall_type: String,
}

/// The id of the message a stored event recalls, when it is a recall: the
/// processor looks up that message's own event for [`map_recall`].
pub fn recalled_message(body: &[u8]) -> Option<String> {
    let head: HeaderOnly = serde_json::from_slice(body).ok()?;
    if head.header.event_type != super::MESSAGE_RECALLED {
        return None;
    }
    let e: RecallEnvelope = serde_json::from_slice(body).ok()?;
    Some(e.event.message_id)
}

/// Maps a stored recall, given the stored event of the message it recalls
/// (`None`: the bot never received it, so nothing of ours refers to it)
/// and whether that message opened the thread's live ticket.
///
/// The recall becomes a lifecycle trigger on the recalled message's thread,
/// sent by that message's sender (Feishu names no operator; `recall_type`
/// goes into the text). Its sender recalling the message that opened the
/// live ticket withdraws the request ([`TriggerKind::RequestRecalled`]: the
/// work ends, as a close ends it); any other recall (a later message, or a
/// chat manager's) is information for the live work
/// ([`TriggerKind::MessageRecalled`]). Neither opens, resumes or is
/// evaluated.
pub fn map_recall(
    body: &[u8],
    original: Option<&[u8]>,
    opened_live_ticket: bool,
    bot: Option<&str>,
) -> Result<Mapped, MapError> {
    let e: RecallEnvelope =
        serde_json::from_slice(body).map_err(|e| MapError::Payload(e.to_string()))?;
    let head: HeaderOnly =
        serde_json::from_slice(body).map_err(|e| MapError::Payload(e.to_string()))?;
    let Some(original) = original else {
        return Ok(Mapped::Skip(Skip::NeverReceived));
    };
    let mut input = match map(original, bot)? {
        Mapped::Trigger(input)
            if input.message_id == e.event.message_id
                && input.chat.as_ref().is_some_and(|c| c.id == e.event.chat_id) =>
        {
            input
        }
        Mapped::Trigger(_) => {
            return Err(MapError::Payload(
                "the recalled message's event names another message or chat".into(),
            ))
        }
        Mapped::Skip(_) => return Ok(Mapped::Skip(Skip::NeverReceived)),
    };
    let by_sender = matches!(e.event.recall_type.as_str(), "" | "message_owner");
    let by = if by_sender {
        "its sender".to_owned()
    } else {
        e.event
            .recall_type
            .chars()
            .take(32)
            .collect::<String>()
            .replace('_', " ")
    };
    input.kind = if by_sender && opened_live_ticket {
        TriggerKind::RequestRecalled
    } else {
        TriggerKind::MessageRecalled
    };
    // The mention was the recalled message's; the recall addresses no one.
    input.addressed = Vec::new();
    input.text = format!("(message {} was recalled by {by})", e.event.message_id);
    input.raw =
        Some(json!({ "feishu_event": head.header.event_id, "event": head.header.event_type }));
    Ok(Mapped::Trigger(input))
}

/// Maps a stored event; `bot` is the bot's open_id. A recall needs the
/// recalled message: see [`map_recall`].
pub fn map(body: &[u8], bot: Option<&str>) -> Result<Mapped, MapError> {
    let head: HeaderOnly =
        serde_json::from_slice(body).map_err(|e| MapError::Payload(e.to_string()))?;
    match head.header.event_type.as_str() {
        super::MESSAGE_RECEIVE => {}
        // Recorded with the delivery (chat, operator, time); they ask
        // nothing, and a reply into a chat the bot left is refused by Feishu
        // (230002), which ends that reply (the outbox).
        super::BOT_ADDED => return Ok(Mapped::Skip(Skip::BotAdded)),
        super::BOT_REMOVED => return Ok(Mapped::Skip(Skip::BotRemoved)),
        super::MESSAGE_RECALLED => return Ok(Mapped::Skip(Skip::NeverReceived)),
        _ => return Ok(Mapped::Skip(Skip::NotMapped)),
    }
    let e: Envelope = serde_json::from_slice(body).map_err(|e| MapError::Payload(e.to_string()))?;
    let m = e.event.message;
    let sender_id = e.event.sender.sender_id.open_id;
    if sender_id.is_empty() {
        return Err(MapError::NoSender);
    }
    let kind = chat_kind(&m.chat_type)?;
    let root = [&m.root_id, &m.parent_id, &m.message_id]
        .into_iter()
        .find(|id| !id.is_empty())
        .unwrap_or(&m.message_id);
    let addressed = match bot {
        Some(bot) if m.mentions.iter().any(|x| x.id.open_id == bot) => vec![Address {
            kind: AddressKind::Mention,
            account: bot.to_owned(),
        }],
        _ => Vec::new(),
    };
    let text = text_of(&m.message_type, &m.content, &m.mentions);
    Ok(Mapped::Trigger(Box::new(TriggerInput {
        source: Source::Feishu,
        kind: TriggerKind::ChatMessage,
        thread: format!("fs:{}:{root}", m.chat_id),
        message_id: m.message_id.clone(),
        sender: Sender {
            id: sender_id,
            login: None,
            name: String::new(),
            // Only a person is a user; an app, or a type we do not know, is not.
            is_bot: e.event.sender.sender_type != "user",
        },
        addressed,
        chat: Some(Chat {
            id: m.chat_id,
            kind,
        }),
        repo: None,
        labels: Vec::new(),
        branch: None,
        text,
        head_ticket: None,
        pull_url: None,
        raw: Some(json!({ "feishu_event": e.header.event_id, "event": e.header.event_type })),
    })))
}

/// The text of a `text` or `post` message; empty for other types.
fn text_of(message_type: &str, content: &str, mentions: &[Mention]) -> String {
    let Ok(content) = serde_json::from_str::<Value>(content) else {
        return String::new();
    };
    let text = match message_type {
        "text" => content
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        "post" => post_text(&content),
        _ => String::new(),
    };
    // Longest keys first, so `@_user_10` is not read as `@_user_1` and a 0.
    let mut keyed: Vec<&Mention> = mentions.iter().filter(|m| !m.key.is_empty()).collect();
    keyed.sort_by_key(|m| std::cmp::Reverse(m.key.len()));
    keyed
        .into_iter()
        .fold(text, |t, m| t.replace(&m.key, &format!("@{}", m.name)))
}

/// A post: its title and its lines, each the text of its elements. Events
/// carry `{title, content}`; a language-keyed form is read too.
fn post_text(content: &Value) -> String {
    let post = if content.get("content").is_some() {
        content
    } else {
        content
            .as_object()
            .and_then(|o| o.values().find(|v| v.get("content").is_some()))
            .unwrap_or(content)
    };
    let mut lines = Vec::new();
    if let Some(title) = post.get("title").and_then(Value::as_str) {
        if !title.is_empty() {
            lines.push(title.to_owned());
        }
    }
    for line in post
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let words: String = line
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|el| match el.get("tag").and_then(Value::as_str)? {
                "text" | "a" | "md" => el.get("text").and_then(Value::as_str).map(str::to_owned),
                "at" => el
                    .get("user_name")
                    .and_then(Value::as_str)
                    .map(|n| format!("@{n}")),
                _ => None,
            })
            .collect();
        lines.push(words);
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const BOT: &str = "ou_bot";

    fn event(sender_type: &str, message: Value) -> Vec<u8> {
        json!({"schema": "2.0",
               "header": {"event_id": "e1", "event_type": "im.message.receive_v1",
                          "create_time": "1", "token": "t", "app_id": "cli_a", "tenant_key": "tk"},
               "event": {"sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": sender_type},
                         "message": message}})
        .to_string()
        .into_bytes()
    }

    fn text(s: &str) -> String {
        json!({ "text": s }).to_string()
    }

    fn mention(key: &str, open_id: &str, name: &str) -> Value {
        json!({"key": key, "id": {"open_id": open_id}, "name": name})
    }

    fn message(chat_type: &str, content: String, mentions: Value) -> Value {
        json!({"message_id": "om_3", "chat_id": "oc_1", "chat_type": chat_type,
               "message_type": "text", "content": content, "mentions": mentions})
    }

    fn trigger(body: &[u8]) -> TriggerInput {
        match map(body, Some(BOT)) {
            Ok(Mapped::Trigger(t)) => *t,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn message_table() {
        let at_bot = json!([mention("@_user_1", BOT, "Gatehouse")]);
        let at_bob = json!([mention("@_user_1", "ou_bob", "Bob")]);
        // (name, sender type, message, chat kind, thread, addressed, bot, text)
        type Case = (
            &'static str,
            &'static str,
            Value,
            ChatKind,
            &'static str,
            bool,
            bool,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "group mention",
                "user",
                message("group", text("@_user_1 fix it"), at_bot.clone()),
                ChatKind::Group,
                "fs:oc_1:om_3",
                true,
                false,
                "@Gatehouse fix it",
            ),
            (
                "someone else mentioned",
                "user",
                message("group", text("@_user_1 hi"), at_bob),
                ChatKind::Group,
                "fs:oc_1:om_3",
                false,
                false,
                "@Bob hi",
            ),
            (
                "direct message",
                "user",
                message("p2p", text("hello"), json!([])),
                ChatKind::Direct,
                "fs:oc_1:om_3",
                false,
                false,
                "hello",
            ),
            (
                "topic group",
                "user",
                message("topic_group", text("x"), json!([])),
                ChatKind::Topic,
                "fs:oc_1:om_3",
                false,
                false,
                "x",
            ),
            (
                "an app sends",
                "app",
                message("group", text("@_user_1 x"), at_bot.clone()),
                ChatKind::Group,
                "fs:oc_1:om_3",
                true,
                true,
                "@Gatehouse x",
            ),
            (
                "unknown sender type",
                "robot",
                message("p2p", text("x"), json!([])),
                ChatKind::Direct,
                "fs:oc_1:om_3",
                false,
                true,
                "x",
            ),
            (
                "a reply in a thread",
                "user",
                {
                    let mut m = message("group", text("more"), json!([]));
                    m["root_id"] = json!("om_1");
                    m["parent_id"] = json!("om_2");
                    m
                },
                ChatKind::Group,
                "fs:oc_1:om_1",
                false,
                false,
                "more",
            ),
            (
                "a reply with only a parent",
                "user",
                {
                    let mut m = message("group", text("more"), json!([]));
                    m["parent_id"] = json!("om_2");
                    m
                },
                ChatKind::Group,
                "fs:oc_1:om_2",
                false,
                false,
                "more",
            ),
            (
                "a post",
                "user",
                {
                    let mut m = message("group", json!({"title": "T", "content": [
                 [{"tag": "at", "user_id": BOT, "user_name": "Gatehouse"}, {"tag": "text", "text": " see "},
                  {"tag": "a", "text": "link", "href": "https://x"}],
                 [{"tag": "img", "image_key": "k"}, {"tag": "text", "text": "line 2"}]]}).to_string(), at_bot);
                    m["message_type"] = json!("post");
                    m
                },
                ChatKind::Group,
                "fs:oc_1:om_3",
                true,
                false,
                "T\n@Gatehouse see link\nline 2",
            ),
            (
                "an image",
                "user",
                {
                    let mut m = message("p2p", json!({"image_key": "k"}).to_string(), json!([]));
                    m["message_type"] = json!("image");
                    m
                },
                ChatKind::Direct,
                "fs:oc_1:om_3",
                false,
                false,
                "",
            ),
        ];
        for (name, sender_type, msg, kind, thread, addressed, is_bot, want) in cases {
            let t = trigger(&event(sender_type, msg));
            assert_eq!(t.source, Source::Feishu, "{name}");
            assert_eq!(t.kind, TriggerKind::ChatMessage, "{name}");
            assert_eq!(
                t.chat,
                Some(Chat {
                    id: "oc_1".into(),
                    kind
                }),
                "{name}"
            );
            assert_eq!(t.thread, thread, "{name}");
            assert_eq!(t.message_id, "om_3", "{name}");
            assert_eq!(t.sender.id, "ou_alice", "{name}");
            assert_eq!(t.sender.is_bot, is_bot, "{name}");
            let want_addr: Vec<Address> = if addressed {
                vec![Address {
                    kind: AddressKind::Mention,
                    account: BOT.into(),
                }]
            } else {
                Vec::new()
            };
            assert_eq!(t.addressed, want_addr, "{name}");
            assert_eq!(t.text, want, "{name}");
        }
    }

    #[test]
    fn without_a_bot_id_nobody_is_addressed() {
        let body = event(
            "user",
            message(
                "group",
                text("@_user_1"),
                json!([mention("@_user_1", BOT, "G")]),
            ),
        );
        match map(&body, None).unwrap() {
            Mapped::Trigger(t) => assert!(t.addressed.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn longer_mention_keys_are_replaced_first() {
        let ms: Vec<Mention> = (1..=10)
            .map(|i| Mention {
                key: format!("@_user_{i}"),
                id: Ids::default(),
                name: format!("n{i}"),
            })
            .collect();
        assert_eq!(
            text_of("text", &text("@_user_10 @_user_1"), &ms),
            "@n10 @n1"
        );
    }

    #[test]
    fn refusals() {
        let bad_chat = event("user", message("secret", text("x"), json!([])));
        assert!(matches!(
            map(&bad_chat, Some(BOT)),
            Err(MapError::ChatType(_))
        ));
        let mut v: Value =
            serde_json::from_slice(&event("user", message("p2p", text("x"), json!([])))).unwrap();
        v["event"]["sender"]["sender_id"]["open_id"] = json!("");
        assert_eq!(
            map(v.to_string().as_bytes(), Some(BOT)),
            Err(MapError::NoSender)
        );
        assert!(matches!(map(b"{}", Some(BOT)), Err(MapError::Payload(_))));
    }

    fn other_event(event_type: &str, event: Value) -> Vec<u8> {
        json!({"schema": "2.0",
               "header": {"event_id": "e9", "event_type": event_type,
                          "create_time": "2", "token": "t", "app_id": "cli_a", "tenant_key": "tk"},
               "event": event})
        .to_string()
        .into_bytes()
    }

    fn recall(message_id: &str, recall_type: &str) -> Vec<u8> {
        other_event(
            "im.message.recalled_v1",
            json!({"message_id": message_id, "chat_id": "oc_1", "recall_time": "3",
                   "recall_type": recall_type}),
        )
    }

    /// A recall lands on the recalled message's thread, from its sender,
    /// addressing no one, as a lifecycle trigger; without the message (the
    /// bot never got it) it is skipped; the bot's chat changes are skipped
    /// with their own reasons.
    #[test]
    fn recalls_join_the_recalled_messages_thread_and_membership_is_recorded() {
        let at_bot = json!([mention("@_user_1", BOT, "G")]);
        let mut threaded = message("group", text("@_user_1 fix it"), at_bot.clone());
        threaded["root_id"] = json!("om_root");
        let original = event("user", threaded);
        let asked = trigger(&original);
        // (recall type, whether the message opened the live ticket, by, kind)
        for (recall_type, opened, by, kind) in [
            (
                "message_owner",
                false,
                "its sender",
                TriggerKind::MessageRecalled,
            ),
            (
                "message_owner",
                true,
                "its sender",
                TriggerKind::RequestRecalled,
            ),
            ("", true, "its sender", TriggerKind::RequestRecalled),
            (
                "group_manager",
                false,
                "group manager",
                TriggerKind::MessageRecalled,
            ),
            // A manager's recall is not the sender's withdrawal.
            (
                "group_manager",
                true,
                "group manager",
                TriggerKind::MessageRecalled,
            ),
            ("", false, "its sender", TriggerKind::MessageRecalled),
        ] {
            let got = match map_recall(
                &recall("om_3", recall_type),
                Some(&original),
                opened,
                Some(BOT),
            ) {
                Ok(Mapped::Trigger(t)) => *t,
                other => panic!("{other:?}"),
            };
            assert_eq!(got.kind, kind, "{recall_type} {opened}");
            assert!(got.kind.is_lifecycle());
            assert_eq!(got.kind.ends_work(), kind == TriggerKind::RequestRecalled);
            assert_eq!(
                got.thread, "fs:oc_1:om_root",
                "the recalled message's thread"
            );
            assert_eq!(got.thread, asked.thread);
            assert_eq!(got.sender, asked.sender);
            assert_eq!(got.message_id, "om_3");
            assert!(got.addressed.is_empty(), "a recall addresses no one");
            assert_eq!(got.text, format!("(message om_3 was recalled by {by})"));
        }
        assert_eq!(
            map_recall(&recall("om_3", "message_owner"), None, false, Some(BOT)),
            Ok(Mapped::Skip(Skip::NeverReceived))
        );
        // The looked-up event must be the recalled message's own.
        assert!(matches!(
            map_recall(
                &recall("om_other", "message_owner"),
                Some(&original),
                false,
                Some(BOT)
            ),
            Err(MapError::Payload(_))
        ));
        let elsewhere = other_event(
            "im.message.recalled_v1",
            json!({"message_id": "om_3", "chat_id": "oc_2", "recall_type": "message_owner"}),
        );
        assert!(matches!(
            map_recall(&elsewhere, Some(&original), false, Some(BOT)),
            Err(MapError::Payload(_))
        ));
        assert_eq!(recalled_message(&recall("om_3", "")), Some("om_3".into()));
        assert_eq!(recalled_message(&original), None);
        // Mapped alone (no lookup), a recall opens nothing.
        assert_eq!(
            map(&recall("om_3", ""), Some(BOT)),
            Ok(Mapped::Skip(Skip::NeverReceived))
        );
        for (event_type, skip) in [
            ("im.chat.member.bot.added_v1", Skip::BotAdded),
            ("im.chat.member.bot.deleted_v1", Skip::BotRemoved),
            ("im.message.reaction.created_v1", Skip::NotMapped),
        ] {
            let body = other_event(
                event_type,
                json!({"chat_id": "oc_1", "operator_id": {"open_id": "ou_alice"}}),
            );
            assert_eq!(
                map(&body, Some(BOT)),
                Ok(Mapped::Skip(skip)),
                "{event_type}"
            );
        }
    }
}
