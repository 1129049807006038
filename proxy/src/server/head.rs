//! Checks of an inner request's head before any rule sees it (pure): the
//! request-target form, the method, the `Host` header and the framing
//! headers. A refused head is answered 400 with the connection closed.

use http::header::{self, HeaderMap};
use http::{Method, Request, Uri};

/// Whether the request head may be decided on; the error is the reason.
/// `host` is the connection's target (the CONNECT host, or the plain
/// request's), `tunnel` whether the request came inside a CONNECT tunnel.
pub(super) fn check<B>(req: &Request<B>, host: &str, tunnel: bool) -> Result<(), &'static str> {
    if req.method() == Method::CONNECT {
        return Err("CONNECT inside a tunnel is refused");
    }
    if tunnel && (req.uri().scheme().is_some() || req.uri().authority().is_some()) {
        return Err(
            "absolute-form request targets are refused inside a CONNECT tunnel; send origin-form (/path)",
        );
    }
    check_host_header(req.headers(), host, if tunnel { "443" } else { "80" })?;
    check_framing(req.headers())
}

/// The inner `Host` must name the CONNECT target (port optional), its
/// name in any case. Compared in place: this runs for every request.
fn check_host_header(
    headers: &HeaderMap,
    host: &str,
    default_port: &str,
) -> Result<(), &'static str> {
    let mut values = headers.get_all(header::HOST).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err("exactly one Host header is required");
    };
    let value = value.to_str().map_err(|_| "Host header is not ASCII")?;
    let name = value
        .strip_suffix(default_port)
        .and_then(|rest| rest.strip_suffix(':'))
        .unwrap_or(value);
    let lowercased_is_host = name.len() == host.len()
        && name
            .bytes()
            .zip(host.bytes())
            .all(|(n, h)| n.to_ascii_lowercase() == h);
    if lowercased_is_host {
        Ok(())
    } else {
        Err("the Host header does not match the CONNECT target")
    }
}

/// Ambiguous framing is refused: the proxy and the upstream could see
/// different requests in the same bytes.
fn check_framing(headers: &HeaderMap) -> Result<(), &'static str> {
    if headers.contains_key(header::TRANSFER_ENCODING)
        && headers.contains_key(header::CONTENT_LENGTH)
    {
        return Err("both Content-Length and Transfer-Encoding");
    }
    if headers.get_all(header::CONTENT_LENGTH).iter().count() > 1 {
        return Err("more than one Content-Length");
    }
    Ok(())
}

/// Where an allowed request goes: always HTTPS to the connection's target,
/// with the request's path and query as sent. `None` when they cannot form
/// a URI.
/// Built from parts: the path and query are the request's own (shared, not
/// copied or parsed again), the authority the target's.
pub(super) fn upstream_uri(host: &str, uri: &Uri) -> Option<Uri> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(http::uri::Scheme::HTTPS);
    parts.authority = Some(host.parse().ok()?);
    parts.path_and_query = Some(match uri.path_and_query() {
        Some(p) => p.clone(),
        None => http::uri::PathAndQuery::from_static("/"),
    });
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn request(method: &str, uri: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut req = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(()).unwrap()
    }

    #[test]
    fn request_heads_table() {
        let host = [("host", "api.github.com")];
        // (what, method, target, headers, tunnel, refused with)
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a str,
            &'a [(&'a str, &'a str)],
            bool,
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            (
                "origin-form in a tunnel",
                "GET",
                "/repos",
                &host,
                true,
                None,
            ),
            (
                "port 443 in a tunnel",
                "GET",
                "/",
                &[("host", "api.github.com:443")],
                true,
                None,
            ),
            (
                "absolute-form plain",
                "GET",
                "http://api.github.com/x",
                &[("host", "api.github.com:80")],
                false,
                None,
            ),
            (
                "one length",
                "POST",
                "/x",
                &[("host", "api.github.com"), ("content-length", "3")],
                true,
                None,
            ),
            (
                "chunked",
                "POST",
                "/x",
                &[("host", "api.github.com"), ("transfer-encoding", "chunked")],
                true,
                None,
            ),
            (
                "absolute-form in a tunnel",
                "GET",
                "https://api.github.com/x",
                &host,
                true,
                Some("absolute-form"),
            ),
            (
                "authority-form in a tunnel",
                "OPTIONS",
                "api.github.com:443",
                &host,
                true,
                Some("absolute-form"),
            ),
            (
                "CONNECT inside",
                "CONNECT",
                "evil.example:443",
                &host,
                false,
                Some("CONNECT inside"),
            ),
            ("no Host", "GET", "/", &[], true, Some("exactly one Host")),
            (
                "two Hosts",
                "GET",
                "/",
                &[("host", "api.github.com"), ("host", "api.github.com")],
                true,
                Some("exactly one Host"),
            ),
            (
                "other Host",
                "GET",
                "/",
                &[("host", "evil.example")],
                true,
                Some("does not match"),
            ),
            (
                "other port",
                "GET",
                "/",
                &[("host", "api.github.com:8443")],
                true,
                Some("does not match"),
            ),
            (
                "port 80 in a tunnel",
                "GET",
                "/",
                &[("host", "api.github.com:80")],
                true,
                Some("does not match"),
            ),
            (
                "port 443 plain",
                "GET",
                "/",
                &[("host", "api.github.com:443")],
                false,
                Some("does not match"),
            ),
            (
                "length and chunked",
                "POST",
                "/x",
                &[
                    ("host", "api.github.com"),
                    ("content-length", "3"),
                    ("transfer-encoding", "chunked"),
                ],
                true,
                Some("both Content-Length and Transfer-Encoding"),
            ),
            (
                "two lengths",
                "POST",
                "/x",
                &[
                    ("host", "api.github.com"),
                    ("content-length", "3"),
                    ("content-length", "3"),
                ],
                true,
                Some("more than one Content-Length"),
            ),
        ];
        for (what, method, target, headers, tunnel, refused) in cases {
            let result = check(&request(method, target, headers), "api.github.com", *tunnel);
            match refused {
                None => assert_eq!(result, Ok(()), "{what}"),
                Some(reason) => {
                    let error = result.expect_err(what);
                    assert!(error.contains(reason), "{what}: {error}");
                }
            }
        }
    }

    #[test]
    fn host_header_must_match() {
        let mut h = HeaderMap::new();
        assert!(check_host_header(&h, "api.github.com", "443").is_err());
        h.insert(header::HOST, HeaderValue::from_static("API.github.com:443"));
        assert!(check_host_header(&h, "api.github.com", "443").is_ok());
        h.insert(
            header::HOST,
            HeaderValue::from_static("api.github.com:8443"),
        );
        assert!(check_host_header(&h, "api.github.com", "443").is_err());
        h.insert(header::HOST, HeaderValue::from_static("evil.example"));
        assert!(check_host_header(&h, "api.github.com", "443").is_err());
        // Only the default port may be left out, and only after a colon.
        for (value, ok) in [
            ("api.github.com", true),
            ("api.github.com:80", false),
            ("api.github.com443", false),
            ("api.github.com:0443", false),
            ("api.github.com:", false),
            ("api.github.co", false),
            ("api.github.comm:443", false),
            ("Api.GitHub.COM:443", true),
        ] {
            h.insert(header::HOST, HeaderValue::from_static(value));
            assert_eq!(
                check_host_header(&h, "api.github.com", "443").is_ok(),
                ok,
                "{value}"
            );
        }
        h.insert(header::HOST, HeaderValue::from_static("example.org:80"));
        assert!(check_host_header(&h, "example.org", "80").is_ok());
        assert!(check_host_header(&h, "example.org", "443").is_err());
        h.insert(header::HOST, HeaderValue::from_static("api.github.com"));
        h.append(header::HOST, HeaderValue::from_static("api.github.com"));
        assert!(check_host_header(&h, "api.github.com", "443").is_err());
    }

    #[test]
    fn upstream_uri_is_https_to_the_target_with_path_and_query() {
        let cases = [
            (
                "/repos/o/r?per_page=5",
                "https://api.github.com/repos/o/r?per_page=5",
            ),
            (
                "http://api.github.com/x?a=1",
                "https://api.github.com/x?a=1",
            ),
            // The authority a plain request names is never used.
            ("http://evil.example/x", "https://api.github.com/x"),
        ];
        for (target, expected) in cases {
            let uri: Uri = target.parse().unwrap();
            let upstream = upstream_uri("api.github.com", &uri).map(|u| u.to_string());
            assert_eq!(upstream.as_deref(), Some(expected), "{target}");
        }
        assert_eq!(upstream_uri("bad host", &"/x".parse().unwrap()), None);
    }
}
