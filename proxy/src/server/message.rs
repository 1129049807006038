//! The audit's view of a message-bearing call (pure): whom the message goes
//! to and the hash of what it says, written before it is forwarded; the
//! platform's id of the created message, found in the answer.

use serde_json::Value;

use super::policy::MessageSpec;
use crate::audit::MessageRecord;

/// The message record of an allowed message-bearing call. `body` is the
/// whole request body, read to hash it. Every message API the rules name
/// takes JSON, so a body must be one JSON document with one meaning (no
/// duplicate key: the log and the platform must read the same target and
/// text). When the rule completes the target from the body (e.g. Feishu's
/// `/receive_id`), a body without that value is refused, with the reason.
pub(super) fn message_record(
    spec: &MessageSpec,
    body_sha256: &str,
    body: Option<&[u8]>,
) -> Result<MessageRecord, String> {
    if let Some(body) = body {
        crate::json::check_document(body)?;
    }
    let mut target = spec.target.clone();
    if let Some(pointer) = &spec.target_body_pointer {
        let value = body
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .and_then(|v| v.pointer(pointer).cloned());
        match value {
            Some(Value::String(s)) => target = format!("{target}:{s}"),
            Some(other) => target = format!("{target}:{other}"),
            None => {
                return Err(format!(
                    "the message body has no {pointer} naming its target"
                ))
            }
        }
    }
    Ok(MessageRecord {
        kind: spec.kind.clone(),
        target,
        body_sha256: body_sha256.to_owned(),
    })
}

/// The created message's id in the platform's answer, at `pointer`; `None`
/// when the answer is not JSON or has no such value (e.g. an error answer).
pub(super) fn created_message_id(answer: &[u8], pointer: &str) -> Option<String> {
    serde_json::from_slice::<Value>(answer)
        .ok()
        .and_then(|v| v.pointer(pointer).cloned())
        .map(|id| match id {
            Value::String(s) => s,
            other => other.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pointer: Option<&str>) -> MessageSpec {
        MessageSpec {
            kind: "feishu_message".into(),
            target: "chat_id".into(),
            target_body_pointer: pointer.map(str::to_owned),
            id_pointer: "/data/message_id".into(),
        }
    }

    #[test]
    fn message_records_table() {
        // (what, target pointer, request body, target or refusal)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a [u8]>,
            Result<&'a str, &'a str>,
        );
        let cases: [Case; 10] = [
            ("no pointer, no body", None, None, Ok("chat_id")),
            (
                "no pointer, JSON body",
                None,
                Some(br#"{"text":"hi"}"#),
                Ok("chat_id"),
            ),
            (
                "no pointer, body not JSON",
                None,
                Some(b"not json"),
                Err("JSON body is refused"),
            ),
            (
                "a second receive_id",
                Some("/receive_id"),
                Some(br#"{"receive_id":"oc_1","receive_id":"oc_2"}"#),
                Err("twice"),
            ),
            (
                "string value",
                Some("/receive_id"),
                Some(br#"{"receive_id":"oc_1"}"#),
                Ok("chat_id:oc_1"),
            ),
            (
                "number value",
                Some("/receive_id"),
                Some(br#"{"receive_id":12}"#),
                Ok("chat_id:12"),
            ),
            (
                "nested pointer",
                Some("/to/id"),
                Some(br#"{"to":{"id":"ou_2"}}"#),
                Ok("chat_id:ou_2"),
            ),
            (
                "value missing",
                Some("/receive_id"),
                Some(br#"{"text":"hi"}"#),
                Err("has no /receive_id"),
            ),
            (
                "body not JSON",
                Some("/receive_id"),
                Some(b"receive_id=oc_1"),
                Err("JSON body is refused"),
            ),
            (
                "no body",
                Some("/receive_id"),
                None,
                Err("has no /receive_id"),
            ),
        ];
        for (what, pointer, body, expected) in cases {
            let got = message_record(&spec(pointer), "ab12", body);
            match expected {
                Ok(target) => assert_eq!(
                    got,
                    Ok(MessageRecord {
                        kind: "feishu_message".into(),
                        target: target.into(),
                        body_sha256: "ab12".into(),
                    }),
                    "{what}"
                ),
                Err(reason) => {
                    let error = got.expect_err(what);
                    assert!(error.contains(reason), "{what}: {error}");
                }
            }
        }
    }

    #[test]
    fn created_ids_table() {
        let cases: [(&[u8], &str, Option<&str>); 6] = [
            (br#"{"id":1234}"#, "/id", Some("1234")),
            (
                br#"{"data":{"message_id":"om_1"}}"#,
                "/data/message_id",
                Some("om_1"),
            ),
            (br#"{"data":{}}"#, "/data/message_id", None),
            (br#"{"message":"Not Found"}"#, "/id", None),
            (b"<html>502</html>", "/id", None),
            (b"", "/id", None),
        ];
        for (answer, pointer, expected) in cases {
            assert_eq!(
                created_message_id(answer, pointer).as_deref(),
                expected,
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
    }
}
