//! Which headers cross the proxy (pure): the client's credentials,
//! forwarding metadata and hop-by-hop headers never reach the upstream; the
//! upstream's credentials, session state and anything carrying a secret the
//! proxy holds never reach the client.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::redact::contains_secret;

/// Request headers never forwarded: credentials the client may carry,
/// forwarding metadata, and hop-by-hop headers.
const DROPPED_REQUEST_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "cookie2",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "private-token",
    "x-auth-token",
    "x-access-token",
    "x-github-token",
    "forwarded",
    "x-real-ip",
    "via",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// Response headers never passed back: credentials or session state from
/// the upstream, hop-by-hop headers, and the length (redaction may change it).
const DROPPED_RESPONSE_HEADERS: &[&str] = &[
    "set-cookie",
    "set-cookie2",
    "www-authenticate",
    "proxy-authenticate",
    "authentication-info",
    "proxy-authentication-info",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// The headers of an allowed request as they go upstream: the client's,
/// filtered, with the target's `Host` and the injected credential.
pub(super) fn upstream_request_headers(
    incoming: &HeaderMap,
    host: &str,
    authorization: HeaderValue,
) -> HeaderMap {
    let mut headers = forwardable_headers(incoming);
    headers.insert(
        header::HOST,
        HeaderValue::from_str(host).unwrap_or(HeaderValue::from_static("invalid")),
    );
    headers.insert(header::AUTHORIZATION, authorization);
    headers
}

fn forwardable_headers(incoming: &HeaderMap) -> HeaderMap {
    // Headers named in Connection are hop-by-hop too.
    let named_in_connection: Vec<String> = incoming
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(incoming.len());
    for (name, value) in incoming {
        let n = name.as_str();
        if DROPPED_REQUEST_HEADERS.contains(&n)
            || n.starts_with("x-forwarded-")
            || n.starts_with("proxy-")
            || named_in_connection.iter().any(|c| c == n)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// A request header that would make the upstream treat the request as
/// another method than the one the rules decided on (`X-HTTP-Method-Override:
/// DELETE` on an allowed `POST`), named for the refusal. The family is
/// decided by a rule, not a list: any header name with a word `method` in it
/// (words split at `-` and `_`, any case), which covers
/// `X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`,
/// `X_HTTP_METHOD`, `X-Original-Method` and kin. They are refused rather than
/// dropped: a client that sends one means a method it did not send, and
/// forwarding the request as something else would act on a request the
/// client did not make.
pub(super) fn method_changing_header(headers: &HeaderMap) -> Option<&str> {
    headers.keys().map(HeaderName::as_str).find(|name| {
        name.split(['-', '_'])
            .any(|word| word.eq_ignore_ascii_case("method"))
    })
}

pub(super) fn strip_response_headers(headers: &mut HeaderMap, secrets: &[Vec<u8>]) {
    for name in DROPPED_RESPONSE_HEADERS {
        headers.remove(*name);
    }
    let leaking: Vec<HeaderName> = headers
        .iter()
        .filter(|(_, v)| contains_secret(secrets, v.as_bytes()))
        .map(|(n, _)| n.clone())
        .collect();
    for name in leaking {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_credentials_and_forwarding_headers_are_dropped() {
        let mut h = HeaderMap::new();
        for (n, v) in [
            ("authorization", "Bearer client"),
            ("proxy-authorization", "Basic x"),
            ("cookie", "a=b"),
            ("x-api-key", "k"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-host", "evil"),
            ("forwarded", "for=1"),
            ("connection", "x-custom, keep-alive"),
            ("x-custom", "hop"),
            ("accept", "application/json"),
            ("user-agent", "git/2.39"),
        ] {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let out = forwardable_headers(&h);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["accept", "user-agent"]);
    }

    #[test]
    fn method_changing_headers_table() {
        let cases = [
            ("x-http-method-override", true),
            ("x-http-method", true),
            ("x-method-override", true),
            ("x-http_method_override", true),
            ("x_http_method", true),
            ("method", true),
            ("x-original-method", true),
            ("access-control-request-method", true),
            ("accept", false),
            ("x-methods", false),
            ("x-github-api-version", false),
            ("content-type", false),
        ];
        for (name, refused) in cases {
            let mut h = HeaderMap::new();
            h.insert("accept", HeaderValue::from_static("*/*"));
            h.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_static("DELETE"),
            );
            let found = method_changing_header(&h);
            assert_eq!(found.is_some(), refused, "{name}");
            if refused {
                assert_eq!(found, Some(name));
            }
        }
    }

    #[test]
    fn response_headers_carrying_auth_or_secrets_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert("set-cookie", HeaderValue::from_static("s=1"));
        h.insert(
            "www-authenticate",
            HeaderValue::from_static("Basic realm=x"),
        );
        h.insert("x-echo", HeaderValue::from_static("token ghs_secret1"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_response_headers(&mut h, &[b"ghs_secret1".to_vec()]);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["content-type"]);
    }

    #[test]
    fn upstream_headers_carry_the_target_host_and_only_the_injected_credential() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.github.com:443"));
        h.insert("authorization", HeaderValue::from_static("Bearer client"));
        h.insert("x-github-token", HeaderValue::from_static("ghp_client"));
        h.insert("accept", HeaderValue::from_static("application/json"));
        let out = upstream_request_headers(
            &h,
            "api.github.com",
            HeaderValue::from_static("Bearer injected"),
        );
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out["host"], "api.github.com");
        assert_eq!(out["authorization"], "Bearer injected");
        assert_eq!(out.get_all("authorization").iter().count(), 1);
        assert_eq!(out["accept"], "application/json");
    }
}
