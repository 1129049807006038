//! Which headers cross the proxy (pure): the client's credentials,
//! forwarding metadata and hop-by-hop headers never reach the upstream; the
//! upstream's credentials, session state and anything carrying a secret the
//! proxy holds never reach the client.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::redact::Secrets;

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
    // Replaced by `identity`: see `upstream_request_headers`.
    "accept-encoding",
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
/// filtered, with the target's `Host`, the injected credential, and
/// `Accept-Encoding: identity`. The proxy must read every answer (to redact
/// held secrets, to find a created message's id), so it asks for answers
/// as they are rather than decoding what the client asked for; an answer
/// encoded anyway is refused ([`unscannable_encoding`]).
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
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    headers
}

/// Why an answer cannot be scanned, if it cannot: a `Content-Encoding`
/// other than `identity` (every header, every coding in each) or a
/// `Transfer-Encoding` other than exactly `chunked` (hyper removes the
/// chunked framing but would pass another coding's bytes on as they are).
/// A client, or a worker by hand, could decode what the redaction saw as
/// opaque bytes, so such an answer is not passed on.
pub(super) fn unscannable_encoding(headers: &HeaderMap) -> Option<String> {
    let codings = |name: header::HeaderName| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let content = codings(header::CONTENT_ENCODING);
    if let Some(c) = content.iter().find(|c| *c != "identity") {
        return Some(format!(
            "the upstream answered with content-encoding {c:?}, which the proxy cannot scan for secrets"
        ));
    }
    let transfer = codings(header::TRANSFER_ENCODING);
    if !transfer.is_empty() && transfer != ["chunked"] {
        return Some(format!(
            "the upstream answered with transfer-encoding {:?}, which the proxy cannot scan for secrets",
            transfer.join(", ")
        ));
    }
    None
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
    // Room for the three the caller adds (Host, Authorization,
    // Accept-Encoding): a map that grows rehashes every entry.
    let mut out = HeaderMap::with_capacity(incoming.len() + 3);
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

/// Drops the response headers that never cross, and every header carrying
/// a held secret in its value or in its name (names compared ignoring
/// case: HTTP/1 parsers lowercase them).
pub(super) fn strip_response_headers(headers: &mut HeaderMap, secrets: &Secrets) {
    // One pass over the answer's headers, then a removal of each name found
    // (usually only `content-length`): removing every listed name instead
    // parsed and looked up fourteen names an answer, present or not.
    let dropped: Vec<HeaderName> = headers
        .iter()
        .filter(|(n, v)| {
            DROPPED_RESPONSE_HEADERS.contains(&n.as_str())
                || secrets.occur_in(v.as_bytes())
                || secrets.occur_in_ignoring_case(n.as_str().as_bytes())
        })
        .map(|(n, _)| n.clone())
        .collect();
    for name in dropped {
        headers.remove(name);
    }
}

/// GitHub's pagination links name a repository by id
/// (`/repositories/{id}/issues?page=2`), a form no rule can tie to the
/// identity's repository, so every client following `next` (`gh api
/// --paginate`) would be refused on page 2. The answer to a request under
/// `/repos/{owner}/{repo}` is about that repository: its links are
/// rewritten to the same resource under the repository's name, which the
/// rules check as any other request. Links to anything else are left as
/// they are (and refused if followed).
pub(super) fn name_repository_links(headers: &mut HeaderMap, request_path: &str) {
    let Some(named) = repository_prefix(request_path) else {
        return;
    };
    let values: Vec<HeaderValue> = headers
        .get_all(header::LINK)
        .iter()
        .map(|v| match v.to_str() {
            Ok(text) => HeaderValue::from_str(&rename_repository_ids(text, named))
                .unwrap_or_else(|_| v.clone()),
            Err(_) => v.clone(),
        })
        .collect();
    if values.is_empty() {
        return;
    }
    headers.remove(header::LINK);
    for v in values {
        headers.append(header::LINK, v);
    }
}

/// `/repos/{owner}/{repo}` of a path under it, if it is one.
pub(super) fn repository_prefix(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/repos/")?;
    let mut segments = rest.splitn(3, '/');
    let (owner, repo) = (segments.next()?, segments.next()?);
    let valid = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    (valid(owner) && valid(repo)).then(|| &path[..("/repos/".len() + owner.len() + 1 + repo.len())])
}

/// `text` with each `/repositories/{digits}` followed by `/`, `?` or `>`
/// replaced by `named`.
fn rename_repository_ids(text: &str, named: &str) -> String {
    const ALIAS: &str = "/repositories/";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(ALIAS) {
        let after = &rest[at + ALIAS.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let ends = matches!(after.as_bytes().get(digits), Some(b'/' | b'?' | b'>'));
        out.push_str(&rest[..at]);
        if digits > 0 && ends {
            out.push_str(named);
            rest = &after[digits..];
        } else {
            out.push_str(ALIAS);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_links_are_renamed_only_under_a_named_repository() {
        let link = "<https://api.github.com/repositories/1296269/issues?per_page=1&page=2>; rel=\"next\", \
                    <https://api.github.com/repositories/1296269/issues?per_page=1&page=5>; rel=\"last\"";
        let named = "<https://api.github.com/repos/acme/widgets/issues?per_page=1&page=2>; rel=\"next\", \
                     <https://api.github.com/repos/acme/widgets/issues?per_page=1&page=5>; rel=\"last\"";
        // (request path, link in, link out)
        let cases = [
            ("/repos/acme/widgets/issues", link, named),
            (
                "/repos/acme/widgets",
                "<https://api.github.com/repositories/7>; rel=\"next\"",
                "<https://api.github.com/repos/acme/widgets>; rel=\"next\"",
            ),
            // Not under a named repository: left alone.
            ("/user/repos", link, link),
            ("/repos/acme", link, link),
            ("/repos//widgets/issues", link, link),
            ("/repos/acme/wid%2fgets/issues", link, link),
            // Not an id alias: left alone.
            (
                "/repos/acme/widgets/issues",
                "<https://x/repositories/abc/issues>; rel=\"next\"",
                "<https://x/repositories/abc/issues>; rel=\"next\"",
            ),
            (
                "/repos/acme/widgets/issues",
                "<https://x/repositories/12x/issues>; rel=\"next\"",
                "<https://x/repositories/12x/issues>; rel=\"next\"",
            ),
        ];
        for (i, (path, input, expected)) in cases.into_iter().enumerate() {
            let mut h = HeaderMap::new();
            h.insert(header::LINK, HeaderValue::from_str(input).unwrap());
            h.insert(header::ETAG, HeaderValue::from_static("\"e\""));
            name_repository_links(&mut h, path);
            assert_eq!(h.get(header::LINK).unwrap(), expected, "case {i}");
            assert_eq!(h.get(header::ETAG).unwrap(), "\"e\"", "case {i}");
        }
        let mut none = HeaderMap::new();
        name_repository_links(&mut none, "/repos/acme/widgets/issues");
        assert!(none.is_empty());
    }

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
        h.insert("x-ghs_secret1-name", HeaderValue::from_static("1"));
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        strip_response_headers(
            &mut h,
            &Secrets::new([b"ghs_Secret1".to_vec(), b"ghs_secret1".to_vec()]),
        );
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["content-type"]);
    }

    #[test]
    fn every_listed_response_header_is_dropped_with_all_its_values() {
        let secrets = Secrets::new([b"ghs_secret1".to_vec()]);
        for name in DROPPED_RESPONSE_HEADERS {
            let mut h = HeaderMap::new();
            h.insert("content-type", HeaderValue::from_static("text/plain"));
            h.append(*name, HeaderValue::from_static("1"));
            h.append(*name, HeaderValue::from_static("2"));
            // Names that only look like a listed one cross.
            let lookalike = format!("x-{name}");
            h.append(
                HeaderName::from_bytes(lookalike.as_bytes()).unwrap(),
                HeaderValue::from_static("3"),
            );
            strip_response_headers(&mut h, &secrets);
            let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
            assert_eq!(names, vec!["content-type", lookalike.as_str()], "{name}");
            assert_eq!(h.len(), 2, "{name}: {h:?}");
        }
    }

    #[test]
    fn answers_the_proxy_cannot_scan_are_named() {
        // (header, value) pairs, and whether the answer is refused
        let cases: [(&[(&str, &str)], bool); 12] = [
            (&[], false),
            (&[("content-encoding", "identity")], false),
            (&[("content-encoding", "IDENTITY")], false),
            (&[("transfer-encoding", "chunked")], false),
            (&[("transfer-encoding", "Chunked")], false),
            (&[("content-encoding", "gzip")], true),
            (&[("content-encoding", "identity, br")], true),
            (
                &[
                    ("content-encoding", "identity"),
                    ("content-encoding", "deflate"),
                ],
                true,
            ),
            (&[("content-encoding", "")], true),
            (&[("transfer-encoding", "gzip, chunked")], true),
            (
                &[
                    ("transfer-encoding", "chunked"),
                    ("transfer-encoding", "chunked"),
                ],
                true,
            ),
            (&[("transfer-encoding", "x-custom")], true),
        ];
        for (pairs, refused) in cases {
            let mut h = HeaderMap::new();
            for (n, v) in pairs {
                h.append(*n, HeaderValue::from_static(v));
            }
            assert_eq!(unscannable_encoding(&h).is_some(), refused, "{pairs:?}");
        }
    }

    #[test]
    fn upstream_headers_carry_the_target_host_and_only_the_injected_credential() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.github.com:443"));
        h.insert("authorization", HeaderValue::from_static("Bearer client"));
        h.insert("x-github-token", HeaderValue::from_static("ghp_client"));
        h.insert("accept", HeaderValue::from_static("application/json"));
        h.insert("accept-encoding", HeaderValue::from_static("gzip, br"));
        let out = upstream_request_headers(
            &h,
            "api.github.com",
            HeaderValue::from_static("Bearer injected"),
        );
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out["accept-encoding"], "identity");
        assert_eq!(out["host"], "api.github.com");
        assert_eq!(out["authorization"], "Bearer injected");
        assert_eq!(out.get_all("authorization").iter().count(), 1);
        assert_eq!(out["accept"], "application/json");
    }
}
