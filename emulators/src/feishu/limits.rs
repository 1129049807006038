//! Feishu's rate limits, when a knob asks for them (pure bookkeeping; the
//! caller passes `now`, the emulator's clock in seconds).
//!
//! - The gateway's frequency limit: HTTP 429, body code 99991400 ("request
//!   trigger frequency limit"), headers `x-ogw-ratelimit-limit` and
//!   `x-ogw-ratelimit-reset` (seconds until the window resets).
//! - A chat's message limit: more than N messages sent into one chat within
//!   a window answers HTTP 400 with code 230020 (`ext=chat rate limit`),
//!   as Feishu's per-chat limit answers a send or a reply.
//!
//! Facts from Feishu's error code list and clients that meet them in
//! production (HTTP 429 + `x-ogw-ratelimit-reset` at the gateway; 230020
//! per chat on HTTP 400). The token endpoint is not limited here, so a test
//! of an API limit keeps its token.

use std::collections::HashMap;

use http::StatusCode;
use serde_json::json;

use super::Answer;

/// The gateway's code for a frequency limit.
pub const FREQUENCY_LIMIT: i64 = 99_991_400;
/// A chat's message limit.
pub const CHAT_RATE_LIMIT: i64 = 230_020;

/// At most `messages` messages into one chat per `window_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatLimit {
    pub messages: usize,
    pub window_secs: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Limits {
    /// Every API call answers 429 until then (`limit` named in the header).
    busy_until: Option<u64>,
    chat: Option<ChatLimit>,
    /// When each chat's recent messages were sent.
    sent: HashMap<String, Vec<u64>>,
}

/// The gateway's headers on a 429.
pub(crate) fn gateway_headers(reset_secs: u64) -> [(&'static str, String); 2] {
    [
        ("x-ogw-ratelimit-limit", "50".to_owned()),
        ("x-ogw-ratelimit-reset", reset_secs.to_string()),
    ]
}

impl Limits {
    /// Every API call answers 429 for `secs` from `now` (0: no longer).
    pub(crate) fn busy_for(&mut self, secs: u64, now: u64) {
        self.busy_until = (secs > 0).then_some(now.saturating_add(secs));
    }

    pub(crate) fn set_chat_limit(&mut self, limit: Option<ChatLimit>) {
        self.chat = limit;
        self.sent.clear();
    }

    /// The gateway's refusal and its seconds to reset, while busy.
    pub(super) fn gateway(&self, now: u64) -> Option<(Answer, u64)> {
        let until = self.busy_until.filter(|u| now < *u)?;
        let answer = Answer::error(
            StatusCode::TOO_MANY_REQUESTS,
            FREQUENCY_LIMIT,
            "request trigger frequency limit",
        );
        Some((answer, until - now))
    }

    /// The chat's refusal, if a message into `chat_id` now is over its limit.
    pub(super) fn chat(&mut self, chat_id: &str, now: u64) -> Option<Answer> {
        let limit = self.chat?;
        let recent = self.sent.entry(chat_id.to_owned()).or_default();
        recent.retain(|t| now < t.saturating_add(limit.window_secs));
        (recent.len() >= limit.messages).then(|| {
            let mut answer = Answer::error(
                StatusCode::BAD_REQUEST,
                CHAT_RATE_LIMIT,
                "The request you send is not a valid request, ext=chat rate limit",
            );
            answer.body["error"] = json!({"message": "chat rate limit"});
            answer
        })
    }

    /// A message was sent into `chat_id` at `now`.
    pub(crate) fn sent(&mut self, chat_id: &str, now: u64) {
        if self.chat.is_some() {
            self.sent.entry(chat_id.to_owned()).or_default().push(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_answers_429_with_the_frequency_code_until_it_ends() {
        let mut limits = Limits::default();
        assert!(limits.gateway(100).is_none());
        limits.busy_for(30, 100);
        let (answer, reset) = limits.gateway(110).expect("busy");
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.body["code"], FREQUENCY_LIMIT);
        assert_eq!(reset, 20);
        assert!(limits.gateway(130).is_none());
        limits.busy_for(30, 100);
        limits.busy_for(0, 100);
        assert!(limits.gateway(100).is_none());
    }

    #[test]
    fn a_chat_over_its_limit_gets_230020_and_others_go_on() {
        let mut limits = Limits::default();
        // No limit set: nothing is refused or counted.
        for t in 0..10 {
            assert!(limits.chat("oc_a", t).is_none());
            limits.sent("oc_a", t);
        }
        limits.set_chat_limit(Some(ChatLimit {
            messages: 2,
            window_secs: 60,
        }));
        for t in [0, 1] {
            assert!(limits.chat("oc_a", t).is_none());
            limits.sent("oc_a", t);
        }
        let refused = limits.chat("oc_a", 2).expect("over");
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert_eq!(refused.body["code"], CHAT_RATE_LIMIT);
        assert!(limits.chat("oc_b", 2).is_none(), "another chat");
        // The window slides: the first message leaves it at 60.
        assert!(limits.chat("oc_a", 59).is_some());
        assert!(limits.chat("oc_a", 60).is_none());
    }
}
