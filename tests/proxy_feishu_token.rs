//! Feishu refusing the proxy's tenant token before its expiry: the proxy
//! forgets it, fetches a new one and sends the request once more, with
//! both attempts on record; a refusal of the new token too is passed on,
//! not retried again. Driven by real curl through the real proxy against
//! the Feishu emulator over TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gatehouse_testkit::proxy::Harness;
use serde_json::Value;

const SEND_PATH: &str = "/open-apis/im/v1/messages";

fn send(h: &Harness, text: &str) -> (u16, Value) {
    let (status, _, body) = h.curl(
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            &serde_json::json!({
                "receive_id": "oc_team",
                "msg_type": "text",
                "content": serde_json::json!({"text": text}).to_string(),
            })
            .to_string(),
        ],
        "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id",
    );
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// The bearer tokens the emulator saw on message sends, in order.
fn send_tokens(h: &Harness) -> Vec<String> {
    h.feishu
        .requests()
        .into_iter()
        .filter(|r| r.path == SEND_PATH)
        .map(|r| r.authorization().unwrap_or("").to_string())
        .collect()
}

fn completion<'a>(audit: &'a [Value], request: &Value) -> &'a Value {
    audit
        .iter()
        .find(|l| l["event"] == "completion" && l["request_id"] == request["request_id"])
        .unwrap_or_else(|| panic!("no completion for {request}"))
}

#[test]
fn a_send_after_the_tenant_token_was_invalidated_succeeds_with_one_retry() {
    let h = Harness::start();
    let (status, body) = send(&h, "before");
    assert_eq!(status, 200, "{body}");
    assert_eq!(h.feishu.tokens_issued(), 1);

    // Hours are left on the cached token when Feishu stops accepting it.
    h.feishu.invalidate_tokens();
    let (status, body) = send(&h, "after");
    assert_eq!(status, 200, "the client never sees the refusal: {body}");
    assert_eq!(body["code"], 0);
    assert_eq!(h.feishu.tokens_issued(), 2, "one new token fetched");
    let messages = h.feishu.messages();
    assert_eq!(messages.len(), 2, "the retried send is created once");

    let tokens = send_tokens(&h);
    assert_eq!(tokens.len(), 3, "before, the refused attempt, the retry");
    assert_eq!(
        tokens[0], tokens[1],
        "the refused attempt used the cached token"
    );
    assert_ne!(tokens[1], tokens[2], "the retry carried the new token");

    // Both attempts are on record, as requests with the same message.
    let audit = h.audit_lines();
    let sends: Vec<&Value> = audit
        .iter()
        .filter(|l| l["event"] == "request" && l["message"]["kind"] == "feishu_message")
        .collect();
    assert_eq!(sends.len(), 3, "{audit:#?}");
    let (refused, retry) = (sends[1], sends[2]);
    assert_ne!(refused["request_id"], retry["request_id"]);
    assert_eq!(
        refused["message"]["body_sha256"],
        retry["message"]["body_sha256"]
    );
    let first = completion(&audit, refused);
    assert_eq!(first["status"], 400);
    assert!(first.get("message_id").is_none());
    let why = first["error"].as_str().unwrap();
    assert!(why.contains("99991663"), "{why}");
    assert!(
        why.contains(retry["request_id"].as_str().unwrap()),
        "the refused attempt names its retry: {why}"
    );
    let second = completion(&audit, retry);
    assert_eq!(second["status"], 200);
    assert_eq!(second["message_id"], messages[1].message_id.as_str());
    assert!(second.get("error").is_none(), "{second}");

    let text = std::fs::read_to_string(&h.audit_path).unwrap();
    for token in &tokens {
        let token = token.trim_start_matches("Bearer ");
        assert!(!text.contains(token), "a tenant token in the audit log");
    }
    assert!(!text.contains(&h.feishu_secret));
}

#[test]
fn a_refusal_of_the_new_token_too_is_passed_on_and_not_retried_again() {
    let h = Harness::start();
    // The cached token and the new one fetched for the retry are both refused.
    h.feishu.invalidate_tokens_on_use(2);
    let (status, body) = send(&h, "refused twice");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], 99991663, "Feishu's answer is passed on");
    let tokens = send_tokens(&h);
    assert_eq!(tokens.len(), 2, "one retry, no loop: {tokens:?}");
    assert_ne!(tokens[0], tokens[1]);
    assert!(h.feishu.messages().is_empty());

    let audit = h.audit_lines();
    let sends: Vec<&Value> = audit
        .iter()
        .filter(|l| l["event"] == "request" && l["message"]["kind"] == "feishu_message")
        .collect();
    assert_eq!(sends.len(), 2, "{audit:#?}");
    let last = completion(&audit, sends[1]);
    assert_eq!(last["status"], 400);
    let why = last["error"].as_str().unwrap();
    assert!(why.contains("not retried again"), "{why}");

    // The refused token is not kept: the next send gets a new one at once.
    let (status, body) = send(&h, "recovered");
    assert_eq!(status, 200, "{body}");
    assert_eq!(h.feishu.tokens_issued(), 3);
    assert_eq!(send_tokens(&h).len(), 3, "no retry needed");
    assert_eq!(h.feishu.messages().len(), 1);
}
