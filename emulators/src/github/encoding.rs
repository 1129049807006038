//! How a REST answer goes on the wire: gzip-compressed when the client asks
//! (`Accept-Encoding: gzip`), as api.github.com does — and `gh`, through Go's
//! transport, always asks — and, for tests of a proxy in front, the ways a
//! hostile or broken upstream could smuggle the credential it received past
//! a scanner ([`AnswerFault`]).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};

/// A misbehaviour the emulator can be set to, on every REST answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswerFault {
    /// Gzip the body whether or not the client asked for it (an upstream
    /// may compress without being asked).
    GzipUnasked,
    /// Gzip the body and say so in `Transfer-Encoding: gzip, chunked`
    /// instead of `Content-Encoding` (a client framing by
    /// `Transfer-Encoding` strips `chunked` and keeps the gzip bytes).
    GzipTransfer,
    /// Echo the request's token in a header *name* (`x-echo-<token>`).
    TokenInHeaderName,
    /// Echo the request's token in the status line's reason phrase.
    TokenInReason,
    /// Echo the request's token in a JSON object answer's `id` (as a
    /// created comment's id, which the proxy records and learns).
    TokenInId,
    /// Echo the request's token in a redirect's `Location`, as a query key.
    TokenInLocation,
}

/// Whether an `Accept-Encoding` list (all of its headers' values) accepts
/// gzip: `gzip`, `x-gzip` or `*`, with a non-zero `q` (RFC 9110 12.5.3).
pub(crate) fn accepts_gzip(values: &[&str]) -> bool {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .filter_map(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next()?.to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            matches!(coding.as_str(), "gzip" | "x-gzip" | "*").then_some(q > 0.0)
        })
        .any(|accepted| accepted)
}

/// `data` as a gzip member (RFC 1952).
pub(crate) fn gzip(data: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write as _;
    let mut encoder = libflate::gzip::Encoder::new(Vec::with_capacity(data.len() / 2 + 32))?;
    encoder.write_all(data)?;
    encoder.finish().into_result().map(Bytes::from)
}

/// What is added to an answer on the wire.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Wire {
    pub(crate) body: Bytes,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// A reason phrase other than the status's own.
    pub(crate) reason: Option<String>,
}

/// The body and extra headers of an answer: compressed if the client
/// accepts gzip (or a fault says so), with the fault applied. `token` is
/// the credential the request carried.
pub(crate) fn on_the_wire(
    body: Bytes,
    accept_encoding: &[&str],
    fault: Option<AnswerFault>,
    token: Option<&str>,
) -> std::io::Result<Wire> {
    let mut wire = Wire::default();
    let echoed = token.unwrap_or("no-token").to_owned();
    match fault {
        Some(AnswerFault::TokenInHeaderName) => {
            // Header names are case-insensitive tokens; a GitHub token is one.
            if let Ok(name) = HeaderName::from_bytes(format!("x-echo-{echoed}").as_bytes()) {
                wire.headers.push((name, HeaderValue::from_static("1")));
            }
        }
        Some(AnswerFault::TokenInReason) => wire.reason = Some(format!("OK {echoed}")),
        _ => {}
    }
    let body = match fault {
        Some(AnswerFault::TokenInId) => with_token_in_id(body, &echoed),
        _ => body,
    };
    let compress = !body.is_empty()
        && (matches!(
            fault,
            Some(AnswerFault::GzipUnasked | AnswerFault::GzipTransfer)
        ) || accepts_gzip(accept_encoding));
    if !compress {
        wire.body = body;
        return Ok(wire);
    }
    wire.body = gzip(&body)?;
    let coding = if fault == Some(AnswerFault::GzipTransfer) {
        http::header::TRANSFER_ENCODING
    } else {
        http::header::CONTENT_ENCODING
    };
    wire.headers
        .push((coding, HeaderValue::from_static("gzip")));
    wire.headers.push((
        http::header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    ));
    Ok(wire)
}

/// `body` with its top-level `id` (if it is a JSON object with one) made
/// a string ending in `token`.
fn with_token_in_id(body: Bytes, token: &str) -> Bytes {
    let Ok(serde_json::Value::Object(mut object)) = serde_json::from_slice(&body) else {
        return body;
    };
    let Some(id) = object.get("id") else {
        return body;
    };
    let id = format!(
        "{}-{token}",
        id.as_str().map_or_else(|| id.to_string(), str::to_owned)
    );
    object.insert("id".into(), serde_json::Value::String(id));
    serde_json::to_vec(&object).map_or(body, Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_lists_table() {
        let cases: [(&[&str], bool); 11] = [
            (&[], false),
            (&["gzip"], true),
            (&["GZIP"], true),
            (&["deflate, gzip;q=0.5"], true),
            (&["gzip;q=0"], false),
            (&["gzip; q=0.0"], false),
            (&["identity"], false),
            (&["br", "x-gzip"], true),
            (&["*"], true),
            (&["*;q=0"], false),
            (&["gzipx, br"], false),
        ];
        for (values, accepted) in cases {
            assert_eq!(accepts_gzip(values), accepted, "{values:?}");
        }
    }

    #[test]
    fn gzip_is_what_a_gzip_reader_reads() {
        use std::io::Read as _;
        let data = br#"{"id":1,"body":"hello hello hello hello"}"#;
        let packed = gzip(data).unwrap();
        assert_eq!(&packed[..2], &[0x1f, 0x8b]);
        let mut out = Vec::new();
        libflate::gzip::Decoder::new(&packed[..])
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn answers_are_compressed_when_asked_or_faulted() {
        let body = Bytes::from_static(b"{\"a\":1}");
        let plain = on_the_wire(body.clone(), &["identity"], None, Some("t")).unwrap();
        assert_eq!(plain.body, body);
        assert!(plain.headers.is_empty() && plain.reason.is_none());
        let asked = on_the_wire(body.clone(), &["gzip"], None, None).unwrap();
        assert_eq!(asked.headers[0].0, http::header::CONTENT_ENCODING);
        assert_ne!(asked.body, body);
        let unasked = on_the_wire(body.clone(), &[], Some(AnswerFault::GzipUnasked), None).unwrap();
        assert_eq!(unasked.headers[0].0, http::header::CONTENT_ENCODING);
        let transfer =
            on_the_wire(body.clone(), &[], Some(AnswerFault::GzipTransfer), None).unwrap();
        assert_eq!(transfer.headers[0].0, http::header::TRANSFER_ENCODING);
        let empty = on_the_wire(Bytes::new(), &["gzip"], None, None).unwrap();
        assert!(empty.headers.is_empty(), "an empty body is not compressed");
        let named = on_the_wire(
            body.clone(),
            &[],
            Some(AnswerFault::TokenInHeaderName),
            Some("ghs_X"),
        )
        .unwrap();
        assert_eq!(named.headers[0].0.as_str(), "x-echo-ghs_x");
        let reason =
            on_the_wire(body, &[], Some(AnswerFault::TokenInReason), Some("ghs_X")).unwrap();
        assert_eq!(reason.reason.as_deref(), Some("OK ghs_X"));
    }
}
