//! Small helpers shared by the emulators: query strings, random ids, and
//! the one HTTP client that pushes events (GitHub webhooks, Feishu events).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// POSTs a JSON `body` to an `http://` `url` with `headers` (each a whole
/// `Name: value` line without its line end) and `Connection: close`;
/// returns the answer's status, or why there was none.
pub(crate) fn post_json(url: &str, headers: &[String], body: &[u8]) -> Result<u16, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// targets are supported"))?;
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let mut stream =
        TcpStream::connect(authority).map_err(|e| format!("connect {authority}: {e}"))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for line in headers {
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "no HTTP status in the answer".to_owned())
}

/// `a=1&b=x%20y` → `[("a","1"),("b","x y")]`.
pub(crate) fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex_value = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match (hex_value(bytes[i + 1]), hex_value(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push(high << 4 | low);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    // ring is already the TLS provider; use its system RNG.
    let _ = ring_fill(&mut buffer);
    hex::encode(buffer)
}

fn ring_fill(buffer: &mut [u8]) -> Result<(), rustls::Error> {
    use rustls::crypto::ring::default_provider;
    default_provider()
        .secure_random
        .fill(buffer)
        .map_err(|_| rustls::Error::FailedToGetRandomBytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_queries() {
        assert_eq!(
            parse_query("since=2024-01-01T00%3A00%3A00Z&per_page=5&x&q=a+b&bad=%zz&cut=%4"),
            vec![
                ("since".into(), "2024-01-01T00:00:00Z".into()),
                ("per_page".into(), "5".into()),
                ("x".into(), "".into()),
                ("q".into(), "a b".into()),
                ("bad".into(), "%zz".into()),
                ("cut".into(), "%4".into()),
            ]
        );
    }

    #[test]
    fn random_hex_is_random_and_sized() {
        let (a, b) = (random_hex(16), random_hex(16));
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn encode(text: &str) -> String {
            text.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect()
        }

        proptest! {
            #[test]
            fn decoding_inverts_encoding(key in "\\PC{0,20}", value in "\\PC{0,40}") {
                let query = format!("{}={}", encode(&key), encode(&value));
                prop_assert_eq!(parse_query(&query), vec![(key, value)]);
            }

            #[test]
            fn parse_query_never_panics(query in "\\PC*") {
                let _ = parse_query(&query);
            }
        }
    }
}
