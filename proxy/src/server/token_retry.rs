//! Feishu can refuse a tenant token before the expiry it announced (the app
//! secret was reset, the token was revoked). The proxy refreshes on its
//! timer, so without this every request would fail until then: an answer
//! that says the token is no longer valid makes the proxy forget it, fetch
//! a new one and send the request once more, when its body can be sent
//! again. The official Go SDK does the same for its own token cache: it
//! sends a request at most twice, the second time after one of these codes
//! (larksuite/oapi-sdk-go, `core/httptransport.go`, `doRequest`).
//!
//! The decision on an answer is pure ([`refused_token_code`],
//! [`worth_reading`]); [`read_answer`] reads the small error body it needs
//! and [`retry_refused_token`] is the shell around both.

use bytes::Bytes;
use std::time::Instant;

use http::response::Parts;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::forward::{Attempt, Sent};
use super::headers::unscannable_encoding;
use super::records::now;
use crate::audit::RequestRecord;
use crate::body::{self, ProxyBody};

/// Feishu's codes for an access token it does not accept: 99991661 none or
/// malformed, 99991663 tenant token invalid, 99991668 expired, 99991671
/// invalid (the last two of the SDK's retried codes, `core/constants.go`,
/// `errCodeTenantAccessTokenInvalid` and `errCodeAccessTokenInvalid`;
/// 99991664 is the app token, which the proxy never sends).
pub(super) const REFUSED_TOKEN_CODES: [i64; 4] = [99_991_661, 99_991_663, 99_991_668, 99_991_671];

/// The largest error answer read to look for the code. Feishu's are
/// `{"code":…,"msg":…}` of a few hundred bytes.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// The code when the answer says the token was refused.
pub(super) fn refused_token_code(body: &[u8]) -> Option<i64> {
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    let code = answer.get("code")?.as_i64()?;
    REFUSED_TOKEN_CODES.contains(&code).then_some(code)
}

/// Whether an answer may be a token refusal worth reading whole: a client
/// error, in a body the proxy can read, not declared larger than an error.
pub(super) fn worth_reading(status: StatusCode, headers: &HeaderMap) -> bool {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    status.is_client_error()
        && unscannable_encoding(headers).is_none()
        && declared.is_none_or(|n| n <= ERROR_BODY_LIMIT)
}

/// An upstream answer, looked at for a token refusal.
pub(super) enum Answer {
    /// Not a candidate: passed on as it streams.
    Streaming(Response<Incoming>),
    /// Read whole; `refused` holds the code when it refused the token.
    Read {
        parts: Parts,
        body: Bytes,
        refused: Option<i64>,
    },
    /// The body could not be read (or was larger than an error answer).
    Unreadable,
}

/// Reads the answer whole when it may be a token refusal.
pub(super) async fn read_answer(response: Response<Incoming>) -> Answer {
    if !worth_reading(response.status(), response.headers()) {
        return Answer::Streaming(response);
    }
    let (parts, body) = response.into_parts();
    match http_body_util::Limited::new(body, ERROR_BODY_LIMIT)
        .collect()
        .await
    {
        Ok(collected) => {
            let body = collected.to_bytes();
            let refused = refused_token_code(&body);
            Answer::Read {
                parts,
                body,
                refused,
            }
        }
        Err(_) => Answer::Unreadable,
    }
}

/// When Feishu refused the tenant token the first attempt carried, the
/// token is forgotten and, if the body can be sent again, the request goes
/// once more (a new request id, its own audit lines) with a new token; the
/// first attempt's completion line names the retry. A second refusal is
/// passed on: no loop. Without a replayable body the refusal is passed on
/// and the next request gets the new token.
pub(super) async fn retry_refused_token(
    attempt: &Attempt<'_>,
    first: Sent,
    mut record: RequestRecord,
    replay: Option<Bytes>,
) -> Response<ProxyBody> {
    let Sent {
        mut completion,
        authorization,
        response,
    } = first;
    let (parts, answer, code) = match read_answer(response).await {
        Answer::Streaming(response) => return attempt.respond(completion, response).await,
        Answer::Unreadable => return completion.unreadable(),
        Answer::Read {
            parts,
            body,
            refused: Some(code),
        } => (parts, body, code),
        Answer::Read { parts, body, .. } => {
            let response = Response::from_parts(parts, Full::new(body));
            return attempt.respond(completion, response).await;
        }
    };
    attempt.forget(&authorization).await;
    let Some(replay) = replay else {
        completion.note = Some(format!("Feishu refused the tenant token (code {code}); not retried (the request body was streamed); the next request gets a new token"));
        let response = Response::from_parts(parts, Full::new(answer));
        return attempt.respond(completion, response).await;
    };
    record.request_id = attempt.proxy.request_id();
    record.time = now();
    let why = format!(
        "Feishu refused the tenant token (code {code}); retried once with a new token as request {}",
        record.request_id
    );
    completion.record(parts.status.as_u16(), answer.len() as u64, None, Some(why));
    let Sent {
        mut completion,
        authorization,
        response,
    } = match attempt
        .send(record, Instant::now(), body::full(replay))
        .await
    {
        Ok(sent) => sent,
        Err(answer) => return answer,
    };
    match read_answer(response).await {
        Answer::Streaming(response) => attempt.respond(completion, response).await,
        Answer::Unreadable => completion.unreadable(),
        Answer::Read {
            parts,
            body,
            refused,
        } => {
            if let Some(code) = refused {
                attempt.forget(&authorization).await;
                completion.note = Some(format!(
                    "Feishu refused the new tenant token too (code {code}); not retried again"
                ));
            }
            attempt
                .respond(completion, Response::from_parts(parts, Full::new(body)))
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_token_codes_table() {
        let cases: &[(&str, Option<i64>)] = &[
            (
                r#"{"code":99991663,"msg":"Invalid access token"}"#,
                Some(99_991_663),
            ),
            (
                r#"{"code":99991661,"msg":"Missing access token"}"#,
                Some(99_991_661),
            ),
            (
                r#"{"code":99991668,"msg":"token expired"}"#,
                Some(99_991_668),
            ),
            (r#"{"code":99991671,"msg":"invalid"}"#, Some(99_991_671)),
            // The app token's code: the proxy never sends one.
            (r#"{"code":99991664}"#, None),
            (r#"{"code":0,"msg":"ok","data":{}}"#, None),
            (r#"{"code":230002,"msg":"Bot is not in the chat"}"#, None),
            (r#"{"code":"99991663"}"#, None),
            (r#"{"msg":"99991663"}"#, None),
            ("99991663", None),
            ("not json", None),
            ("", None),
        ];
        for (body, code) in cases {
            assert_eq!(refused_token_code(body.as_bytes()), *code, "{body}");
        }
    }

    #[test]
    fn only_small_readable_client_errors_are_read() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, v.parse().unwrap());
            }
            h
        };
        let bad = StatusCode::BAD_REQUEST;
        let cases = [
            (bad, headers(&[("content-length", "120")]), true),
            (StatusCode::UNAUTHORIZED, headers(&[]), true),
            (bad, headers(&[("transfer-encoding", "chunked")]), true),
            (StatusCode::OK, headers(&[("content-length", "120")]), false),
            (StatusCode::BAD_GATEWAY, headers(&[]), false),
            (bad, headers(&[("content-length", "65537")]), false),
            (bad, headers(&[("content-encoding", "gzip")]), false),
        ];
        for (status, h, read) in cases {
            assert_eq!(worth_reading(status, &h), read, "{status} {h:?}");
        }
    }
}
