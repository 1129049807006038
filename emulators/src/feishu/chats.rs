//! Chats, the bot's membership of them, threads and message size limits
//! (pure rules over data; the handlers in `feishu.rs` apply them).
//!
//! Facts from Feishu's server API docs (open.feishu.cn / open.larksuite.com,
//! "Send a message", "Reply to a message", "List messages", "Get chat
//! info"; their error tables) and larksuite/oapi-sdk-go
//! (`service/im/v1/model.go`):
//! - Sending, replying or reading messages needs the bot in the chat, else
//!   HTTP 400 with code 230002 ("Bot/User can NOT be out of the chat.").
//! - A request body over 150 KB for `text`, over 30 KB for `post` and
//!   `interactive` (cards) is refused with HTTP 400 code 230025 ("The
//!   length of the message content reaches its limit.").
//! - `GET /im/v1/chats/{chat_id}` answers 232006 for an invalid chat id and
//!   232011 ("Operator can NOT be out of the chat.") when the bot is not in
//!   it, both on HTTP 400.
//! - A reply with `reply_in_thread: true` starts a thread (topic) on the
//!   message replied to; its messages carry the thread's `omt_…` id. Listing
//!   a chat shows a thread's first message only; `container_id_type=thread`
//!   lists the thread.

use http::StatusCode;

use super::{Answer, FeishuMessage};

/// An invalid parameter (a receive id or container naming nothing).
pub const CODE_INVALID_PARAM: i64 = 230_001;
/// The bot is not in the chat.
pub const CODE_BOT_NOT_IN_CHAT: i64 = 230_002;
/// The message body is over its type's limit.
pub const CODE_CONTENT_TOO_LONG: i64 = 230_025;
/// `GET /im/v1/chats/{chat_id}`: no such chat.
pub const CODE_INVALID_CHAT_ID: i64 = 232_006;
/// `GET /im/v1/chats/{chat_id}`: the bot is not in the chat.
pub const CODE_OPERATOR_NOT_IN_CHAT: i64 = 232_011;
/// The request body limit of a `text` message (150 KB; KB taken as 1024).
pub const TEXT_BODY_LIMIT: usize = 150 * 1024;
/// The request body limit of `post` and `interactive` messages (30 KB).
pub const CARD_BODY_LIMIT: usize = 30 * 1024;

/// A chat the emulator knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeishuChat {
    /// `oc_…`
    pub chat_id: String,
    pub name: String,
    /// `group`, `topic` or `p2p`.
    pub chat_mode: String,
    /// `private` or `public`.
    pub chat_type: String,
    /// The owner's open id (empty: none known).
    pub owner_id: String,
    /// Whether the bot is a member.
    pub bot_in: bool,
}

impl FeishuChat {
    /// A private group chat named `name` with the bot in it.
    pub fn group(chat_id: &str, name: &str) -> Self {
        Self {
            chat_id: chat_id.to_owned(),
            name: name.to_owned(),
            chat_mode: "group".to_owned(),
            chat_type: "private".to_owned(),
            owner_id: String::new(),
            bot_in: true,
        }
    }
}

/// What the bot may do in a chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No chat by that id.
    Unknown,
    /// The chat exists; the bot is not in it.
    Outside,
    Member,
}

pub(crate) fn access(chats: &[FeishuChat], chat_id: &str) -> Access {
    match chats.iter().find(|c| c.chat_id == chat_id) {
        None => Access::Unknown,
        Some(c) if c.bot_in => Access::Member,
        Some(_) => Access::Outside,
    }
}

/// Feishu's answer for a message call into a chat the bot is not in.
pub(super) fn bot_not_in_chat() -> Answer {
    Answer::error(
        StatusCode::BAD_REQUEST,
        CODE_BOT_NOT_IN_CHAT,
        "Bot/User can NOT be out of the chat.",
    )
}

/// Feishu's 230001 naming the parameter (`ext=invalid receive_id`).
pub(super) fn invalid_param(what: &str) -> Answer {
    Answer::error(
        StatusCode::BAD_REQUEST,
        CODE_INVALID_PARAM,
        &format!("Your request contains an invalid request parameter, ext=invalid {what}"),
    )
}

/// The refusal of a message call into `chat_id` unless the bot is in it.
pub(super) fn require_member(chats: &[FeishuChat], chat_id: &str, what: &str) -> Option<Answer> {
    match access(chats, chat_id) {
        Access::Member => None,
        Access::Outside => Some(bot_not_in_chat()),
        Access::Unknown => Some(invalid_param(what)),
    }
}

/// The size limit of a message type's request body, if it has one here.
pub(crate) fn body_limit(msg_type: &str) -> Option<usize> {
    match msg_type {
        "text" => Some(TEXT_BODY_LIMIT),
        "post" | "interactive" => Some(CARD_BODY_LIMIT),
        _ => None,
    }
}

/// 230025 when a `msg_type` request body of `len` bytes is over its limit.
pub(super) fn too_long(msg_type: &str, len: usize) -> Option<Answer> {
    let limit = body_limit(msg_type)?;
    (len > limit).then(|| {
        Answer::error(
            StatusCode::BAD_REQUEST,
            CODE_CONTENT_TOO_LONG,
            "The length of the message content reaches its limit.",
        )
    })
}

/// `GET /im/v1/chats/{chat_id}`: the chat's info, or Feishu's refusal.
pub(super) fn chat_info(chats: &[FeishuChat], chat_id: &str) -> Answer {
    match chats.iter().find(|c| c.chat_id == chat_id) {
        None => Answer::error(
            StatusCode::BAD_REQUEST,
            CODE_INVALID_CHAT_ID,
            "Your request specifies a chat_id which is invalid.",
        ),
        Some(c) if !c.bot_in => Answer::error(
            StatusCode::BAD_REQUEST,
            CODE_OPERATOR_NOT_IN_CHAT,
            "Operator can NOT be out of the chat.",
        ),
        Some(c) => Answer::ok(serde_json::json!({
            "code": 0,
            "msg": "success",
            "data": {
                "avatar": "",
                "name": c.name,
                "description": "",
                "i18n_names": {},
                "add_member_permission": "all_members",
                "share_card_permission": "allowed",
                "at_all_permission": "all_members",
                "edit_permission": "all_members",
                "owner_id_type": "open_id",
                "owner_id": c.owner_id,
                "chat_mode": c.chat_mode,
                "chat_type": c.chat_type,
                "chat_tag": "inner",
                "external": false,
                "tenant_key": "gatehouse-tenant",
                "user_count": "1",
                "bot_count": if c.bot_in { "1" } else { "0" },
            },
        })),
    }
}

/// The thread a reply to `parent` goes in: the parent's thread if it is in
/// one, a new thread (`fresh()`) started on the parent when asked, else none.
/// Returns (the reply's thread id, whether the parent starts a new thread).
pub(crate) fn reply_thread(
    parent: &FeishuMessage,
    reply_in_thread: bool,
    fresh: impl FnOnce() -> String,
) -> (String, bool) {
    if !parent.thread_id.is_empty() {
        (parent.thread_id.clone(), false)
    } else if reply_in_thread {
        (fresh(), true)
    } else {
        (String::new(), false)
    }
}

/// Whether `messages[index]` shows in its chat's listing: a thread shows
/// by its first message only.
pub(crate) fn listed_in_chat(messages: &[FeishuMessage], index: usize) -> bool {
    let message = &messages[index];
    message.thread_id.is_empty()
        || messages
            .iter()
            .position(|m| m.thread_id == message.thread_id)
            == Some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, thread: &str) -> FeishuMessage {
        FeishuMessage {
            message_id: id.into(),
            chat_id: "oc_a".into(),
            root_id: String::new(),
            parent_id: String::new(),
            thread_id: thread.into(),
            msg_type: "text".into(),
            content: "{\"text\":\"x\"}".into(),
            sender_id: "ou_a".into(),
            sender_type: "user".into(),
            receive_id: None,
            uuid: None,
            create_time_ms: 0,
        }
    }

    #[test]
    fn membership_decides_message_calls() {
        let mut outside = FeishuChat::group("oc_out", "Out");
        outside.bot_in = false;
        let chats = [FeishuChat::group("oc_in", "In"), outside];
        assert_eq!(access(&chats, "oc_in"), Access::Member);
        assert_eq!(access(&chats, "oc_out"), Access::Outside);
        assert_eq!(access(&chats, "oc_none"), Access::Unknown);
        assert!(require_member(&chats, "oc_in", "receive_id").is_none());
        let refused = require_member(&chats, "oc_out", "receive_id").unwrap();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert_eq!(refused.body["code"], CODE_BOT_NOT_IN_CHAT);
        assert_eq!(refused.body["msg"], "Bot/User can NOT be out of the chat.");
        let unknown = require_member(&chats, "oc_none", "receive_id").unwrap();
        assert_eq!(unknown.body["code"], CODE_INVALID_PARAM);
        assert!(unknown.body["msg"]
            .as_str()
            .unwrap()
            .ends_with("ext=invalid receive_id"));
    }

    #[test]
    fn size_limits_by_message_type() {
        let cases: &[(&str, usize, Option<i64>)] = &[
            ("text", TEXT_BODY_LIMIT, None),
            ("text", TEXT_BODY_LIMIT + 1, Some(CODE_CONTENT_TOO_LONG)),
            ("post", CARD_BODY_LIMIT, None),
            ("post", CARD_BODY_LIMIT + 1, Some(CODE_CONTENT_TOO_LONG)),
            (
                "interactive",
                CARD_BODY_LIMIT + 1,
                Some(CODE_CONTENT_TOO_LONG),
            ),
            // A 31 KB text is well within its own limit.
            ("text", CARD_BODY_LIMIT + 1, None),
            ("image", TEXT_BODY_LIMIT + 1, None),
        ];
        for (msg_type, len, code) in cases {
            let answer = too_long(msg_type, *len);
            assert_eq!(
                answer.as_ref().map(|a| a.body["code"].as_i64().unwrap()),
                *code,
                "{msg_type} {len}"
            );
            if let Some(a) = answer {
                assert_eq!(a.status, StatusCode::BAD_REQUEST);
            }
        }
    }

    #[test]
    fn chat_info_answers_member_unknown_and_outside() {
        let mut outside = FeishuChat::group("oc_out", "Out");
        outside.bot_in = false;
        let mut team = FeishuChat::group("oc_in", "Team");
        team.owner_id = "ou_alice".into();
        let chats = [team, outside];
        let ok = chat_info(&chats, "oc_in");
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(ok.body["data"]["name"], "Team");
        assert_eq!(ok.body["data"]["chat_mode"], "group");
        assert_eq!(ok.body["data"]["chat_type"], "private");
        assert_eq!(ok.body["data"]["owner_id"], "ou_alice");
        let unknown = chat_info(&chats, "oc_none");
        assert_eq!(
            (unknown.status, unknown.body["code"].as_i64()),
            (StatusCode::BAD_REQUEST, Some(CODE_INVALID_CHAT_ID))
        );
        let out = chat_info(&chats, "oc_out");
        assert_eq!(
            (out.status, out.body["code"].as_i64()),
            (StatusCode::BAD_REQUEST, Some(CODE_OPERATOR_NOT_IN_CHAT))
        );
    }

    #[test]
    fn replies_join_or_start_threads() {
        let fresh = || "omt_new".to_owned();
        let plain = message("om_1", "");
        let threaded = message("om_2", "omt_old");
        assert_eq!(reply_thread(&plain, false, fresh), (String::new(), false));
        assert_eq!(reply_thread(&plain, true, fresh), ("omt_new".into(), true));
        // A reply to a message in a thread stays in it, asked or not.
        for asked in [false, true] {
            assert_eq!(
                reply_thread(&threaded, asked, fresh),
                ("omt_old".into(), false)
            );
        }
    }

    #[test]
    fn a_chat_lists_a_thread_by_its_first_message() {
        let messages = [
            message("om_1", ""),
            message("om_2", "omt_a"),
            message("om_3", "omt_a"),
            message("om_4", ""),
        ];
        let listed: Vec<bool> = (0..messages.len())
            .map(|i| listed_in_chat(&messages, i))
            .collect();
        assert_eq!(listed, [true, true, false, true]);
    }
}
