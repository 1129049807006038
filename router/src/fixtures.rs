//! Builders for triggers used across unit tests.

use crate::trigger::{
    Address, AddressKind, Chat, ChatKind, Sender, Source, TriggerInput, TriggerKind,
};

pub(crate) fn gh_user(login: &str, id: u64) -> Sender {
    Sender {
        id: id.to_string(),
        login: Some(login.to_owned()),
        name: login.to_owned(),
        is_bot: false,
    }
}

pub(crate) fn alice_gh() -> Sender {
    gh_user("alice", 101)
}

pub(crate) fn ci_bot() -> Sender {
    Sender {
        is_bot: true,
        ..gh_user("ci-bot[bot]", 700)
    }
}

pub(crate) fn fs_user(open_id: &str) -> Sender {
    Sender {
        id: open_id.to_owned(),
        login: None,
        name: open_id.to_owned(),
        is_bot: false,
    }
}

/// A comment on issue 1 of acme/widgets.
pub(crate) fn gh(sender: Sender, kind: TriggerKind) -> TriggerInput {
    TriggerInput {
        source: Source::Github,
        kind,
        thread: "gh:acme/widgets#1".to_owned(),
        message_id: "c1".to_owned(),
        sender,
        addressed: Vec::new(),
        chat: None,
        repo: Some("acme/widgets".to_owned()),
        labels: Vec::new(),
        branch: None,
        text: "hello".to_owned(),
        head_ticket: None,
        pull_url: None,
        raw: None,
    }
}

pub(crate) fn fs(sender: Sender, chat_id: &str, kind: ChatKind) -> TriggerInput {
    TriggerInput {
        source: Source::Feishu,
        kind: TriggerKind::ChatMessage,
        thread: format!("fs:{chat_id}:om_1"),
        message_id: "om_1".to_owned(),
        sender,
        addressed: Vec::new(),
        chat: Some(Chat {
            id: chat_id.to_owned(),
            kind,
        }),
        repo: None,
        labels: Vec::new(),
        branch: None,
        text: "你好".to_owned(),
        head_ticket: None,
        pull_url: None,
        raw: None,
    }
}

pub(crate) fn mention(account: &str) -> Address {
    Address {
        kind: AddressKind::Mention,
        account: account.to_owned(),
    }
}

pub(crate) fn addressed(mut t: TriggerInput, a: Address) -> TriggerInput {
    t.addressed.push(a);
    t
}

pub(crate) fn with_text(mut t: TriggerInput, text: &str) -> TriggerInput {
    t.text = text.to_owned();
    t
}
