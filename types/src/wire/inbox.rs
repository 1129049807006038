//! A job's inbox: messages for its worker (e.g. a pass-through trigger from
//! the router), delivered at least once over the job's control socket.

use serde::{Deserialize, Serialize};

use crate::TriggerId;

/// `POST /jobs/{id}/inbox` on the job API: a message for the job's worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxMessage {
    pub text: String,
    /// The trigger the message passes through, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerId>,
}

/// One message as the worker receives it: its place in the inbox (`seq`,
/// which [`InboxAck`] names), when it arrived (ms since the epoch), and
/// the message's own fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxDelivery {
    pub seq: i64,
    pub at: i64,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerId>,
}

impl InboxDelivery {
    pub fn new(seq: i64, at: i64, message: InboxMessage) -> Self {
        Self {
            seq,
            at,
            text: message.text,
            trigger: message.trigger,
        }
    }
}

/// `GET /inbox` on the control socket: every message not acknowledged yet,
/// oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxPage {
    pub messages: Vec<InboxDelivery>,
}

/// `POST /inbox/ack` on the control socket: the worker has every message
/// up to `through`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxAck {
    pub through: i64,
}
