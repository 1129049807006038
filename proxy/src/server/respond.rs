//! Passing an allowed request's answer back to the client: auth-bearing
//! headers stripped, secrets redacted, a created message's id (or the ids a
//! body check asked for) taken from it, and the completion line written.

use bytes::Bytes;
use http::header;
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;

use super::completion::Completion;
use super::headers::{strip_response_headers, unscannable_encoding};
use super::inspect::MESSAGE_BODY_LIMIT;
use super::message::created_message_id;
use super::owned;
use super::policy::MessageSpec;
use crate::audit::platform_id;
use crate::body::{self, BoxError, ProxyBody, RedactingBody};
use crate::graphql::Learn;
use crate::redact::{redact_body, Redactor};

/// Answers up to this size with a declared length are sent in one piece.
const SMALL_BODY: usize = 64 * 1024;

/// What the answer to a request creates or tells about the identity's
/// own objects: a message's id, ids a GraphQL check asked to learn.
pub(super) struct Learning<'a> {
    pub(super) message: Option<&'a MessageSpec>,
    pub(super) learn: &'a [Learn],
    pub(super) created: &'a owned::Created,
}

/// Passes the upstream's answer on: auth-bearing headers stripped, secrets
/// redacted, and the completion line written once the body has been sent.
pub(super) async fn respond<B>(
    completion: Completion,
    method: &Method,
    learning: Learning<'_>,
    response: Response<B>,
) -> Response<ProxyBody>
where
    B: hyper::body::Body<Data = Bytes> + Send + Sync + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let Learning {
        message,
        learn,
        created,
    } = learning;
    let status = response.status();
    if let Some(reason) = unscannable_encoding(response.headers()) {
        return completion.refuse("response encoding cannot be scanned", &reason);
    }
    let (mut parts, resp_body) = response.into_parts();
    // hyper keeps a non-standard reason phrase in the extensions and its
    // server writes it back out: it is upstream text the redaction never
    // sees, so it goes, with anything else hyper might act on.
    parts.extensions = http::Extensions::new();
    let declared_len = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let secrets = completion.proxy.credentials.held_secrets();
    strip_response_headers(&mut parts.headers, &secrets);

    if message.is_some() || !learn.is_empty() {
        // Message answers are small JSON, as are those that name ids to
        // learn: read them whole (bounded) to log the created message's id
        // and learn the ids, then pass them on.
        let Ok(collected) = http_body_util::Limited::new(resp_body, MESSAGE_BODY_LIMIT)
            .collect()
            .await
        else {
            return completion.unreadable();
        };
        let bytes = collected.to_bytes();
        let id = message.and_then(|m| created_message_id(&bytes, &m.id_pointer));
        // An id is the upstream's text: one holding a secret (an upstream
        // echoing the token) is not learnt, nor saved with the identity.
        let learn_id =
            |kind: &str, id: &str| !secrets.occur_in(id.as_bytes()) && created.record(kind, id);
        let mut new = false;
        if owned::created(status) {
            if let (Some(message), Some(id)) = (message, id.as_deref()) {
                // The object is the identity's by the platform's id (a
                // GraphQL answer's url names it), and a REST pull request
                // by its node id too.
                new |= learn_id(&message.kind, platform_id(&message.kind, id));
                if let Some((kind, node)) = owned::node_of_created(&message.kind, &bytes) {
                    new |= learn_id(kind, &node);
                }
            }
            for (kind, id) in owned::learnt(learn, &bytes) {
                new |= learn_id(kind, &id);
            }
        }
        if new {
            // A failed save is logged: the object stays the identity's
            // while this process runs.
            let _ = completion.proxy.save_identities().done().await;
        }
        let redacted = redact_body(&secrets, bytes);
        completion.record(status.as_u16(), redacted.len() as u64, id, None);
        let mut resp = Response::from_parts(parts, body::full(redacted));
        resp.headers_mut().remove(header::CONTENT_LENGTH);
        return resp;
    }

    // Small answers of known length (most API calls) are read whole and
    // sent with their length: one write to the client instead of a chunked
    // stream and its terminator.
    if sent_whole(method, status, declared_len) {
        let Ok(collected) = http_body_util::Limited::new(resp_body, SMALL_BODY)
            .collect()
            .await
        else {
            return completion.unreadable();
        };
        let redacted = redact_body(&secrets, collected.to_bytes());
        completion.record(status.as_u16(), redacted.len() as u64, None, None);
        return Response::from_parts(parts, body::full(redacted));
    }

    let on_end = Box::new(move |bytes: u64, completed: bool| {
        let error = (!completed).then(|| "the response body did not complete".to_string());
        completion.record(status.as_u16(), bytes, None, error);
    });
    let redactor = Redactor::shared(secrets);
    let body = body::boxed(RedactingBody::new(resp_body, redactor, on_end));
    Response::from_parts(parts, body)
}

/// Whether an answer (not a message's) is read whole and sent with its
/// length rather than streamed: it has a body, of a declared small length.
fn sent_whole(method: &Method, status: StatusCode, declared_len: Option<usize>) -> bool {
    let bodiless = method == Method::HEAD || matches!(status.as_u16(), 204 | 304);
    !bodiless && declared_len.is_some_and(|n| n <= SMALL_BODY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_answers_of_known_length_are_sent_whole() {
        let ok = StatusCode::OK;
        let cases = [
            (Method::GET, ok, Some(0), true),
            (Method::GET, ok, Some(SMALL_BODY), true),
            (Method::POST, StatusCode::CREATED, Some(120), true),
            (Method::GET, ok, Some(SMALL_BODY + 1), false),
            (Method::GET, ok, None, false),
            (Method::HEAD, ok, Some(10), false),
            (Method::GET, StatusCode::NO_CONTENT, Some(0), false),
            (Method::GET, StatusCode::NOT_MODIFIED, Some(10), false),
        ];
        for (method, status, len, whole) in cases {
            assert_eq!(
                sent_whole(&method, status, len),
                whole,
                "{method} {status} {len:?}"
            );
        }
    }
}
