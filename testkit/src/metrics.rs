//! Scraping a process's `/metrics` and reading the Prometheus text format
//! strictly: every sample belongs to a family announced by `# TYPE`, names
//! and label names are well formed, label values properly quoted, values
//! numbers. A line that is none of those fails the parse.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// `GET /metrics`: the status line's code, the content type and the body.
pub fn scrape(addr: SocketAddr) -> (u16, String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or_default()
        .to_owned();
    (code, content_type, body.to_owned())
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// The family a sample name belongs to, given the announced types.
fn family<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.get(base).map(String::as_str) == Some("histogram") {
                return Some(base);
            }
        }
    }
    None
}

/// Parses the exposition; `Err` names the first line that is not valid.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or_else(|| bad("TYPE"))?;
            if !is_name(name)
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
            {
                return Err(bad("TYPE"));
            }
            if types.insert(name.into(), kind.into()).is_some() {
                return Err(bad("a second TYPE"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            if !is_name(name) {
                return Err(bad("HELP"));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
        let name = &line[..name_end];
        if !is_name(name) {
            return Err(bad("name"));
        }
        if family(name, &types).is_none() {
            return Err(bad("a sample of no announced family"));
        }
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            let mut end = None;
            while let Some(&(i, c)) = chars.peek() {
                if c == '}' {
                    end = Some(i);
                    break;
                }
                // key
                let start = i;
                while chars.peek().is_some_and(|&(_, c)| c != '=') {
                    chars.next();
                }
                let (eq, _) = chars.next().ok_or_else(|| bad("label without ="))?;
                let key = &inner[start..eq];
                if !is_name(key) {
                    return Err(bad("label name"));
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(bad("unquoted label value"));
                }
                let mut value = String::new();
                loop {
                    match chars.next().map(|(_, c)| c) {
                        Some('\\') => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            _ => return Err(bad("bad escape")),
                        },
                        Some('"') => break,
                        Some(c) => value.push(c),
                        None => return Err(bad("unterminated label value")),
                    }
                }
                if labels.insert(key.to_owned(), value).is_some() {
                    return Err(bad("a label twice"));
                }
                if chars.peek().map(|&(_, c)| c) == Some(',') {
                    chars.next();
                }
            }
            let end = end.ok_or_else(|| bad("no closing brace"))?;
            rest = &inner[end + 1..];
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| bad("no space before the value"))?;
        let value = value.split(' ').next().unwrap_or_default();
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse::<f64>().map_err(|_| bad("value"))?,
        };
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    Ok(samples)
}

/// The sum of the samples named `name` whose labels include `with`.
pub fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// A free loopback port (bound and released: another process could take
/// it in between, which a test would see as a failed start).
pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_format_allows_and_refuses_the_rest() {
        let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{k=\"v\\\"x\",l=\"\"} 3\n\
                    # TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\n";
        let s = parse(good).unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].labels["k"], "v\"x");
        assert_eq!(sum(&s, "h_count", &[]), 2.0);
        for bad in [
            "a_total 1\n",
            "# TYPE a counter\na{k=v} 1\n",
            "# TYPE a counter\na{k=\"v} 1\n",
            "# TYPE a counter\na 1x\n",
            "# TYPE a counter\na{1k=\"v\"} 1\n",
            "# TYPE a counter\n# TYPE a gauge\n",
            "# TYPE a counter\na{k=\"v\",k=\"w\"} 1\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
