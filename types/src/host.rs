//! Host names and tunnel targets.
//!
//! One host-name rule for every place a host is named (proxy config,
//! identities, profiles, job requests): a lowercase DNS name with at least
//! one dot, never an IP address. `localhost` and other bare names are
//! refused everywhere, so a config cannot name a host an identity refuses.

use std::fmt;
use std::str::FromStr;

use crate::ParseError;

fn is_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && !l.starts_with('-')
        && !l.ends_with('-')
        && l.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn is_dns_name(s: &str) -> bool {
    s.len() <= 253
        && s.contains('.')
        && s.split('.').all(is_label)
        // An all-numeric name is an IPv4 address in some spelling.
        && !s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

string_newtype!(
    /// A lowercase DNS name with at least one dot, not an IP address.
    DnsName,
    "host name",
    "a lowercase DNS name with a dot (labels of [a-z0-9-]), not an IP address",
    is_dns_name
);

/// A host and port the proxy may splice without interception (a package
/// registry), written `host:port`; a bare `host` means port 443. Displayed
/// always as `host:port`.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct TunnelTarget {
    host: DnsName,
    port: u16,
    /// `host:port`, kept for [`AsRef<str>`].
    text: String,
}

impl TunnelTarget {
    pub const WHAT: &'static str = "tunnel target";
    pub const EXPECTED: &'static str =
        "`host:port` (or `host` for port 443): a lowercase DNS name with a dot and a port 1-65535";
    /// The port a bare host means.
    pub const DEFAULT_PORT: u16 = 443;

    pub fn new(host: DnsName, port: u16) -> Result<Self, ParseError> {
        if port == 0 {
            return Err(ParseError::new(
                Self::WHAT,
                &format!("{host}:0"),
                Self::EXPECTED,
            ));
        }
        Ok(Self::from_parts(host, port))
    }

    fn from_parts(host: DnsName, port: u16) -> Self {
        let text = format!("{host}:{port}");
        Self { host, port, text }
    }

    pub fn parse(s: &str) -> Result<Self, ParseError> {
        s.parse()
    }

    pub fn is_valid(s: &str) -> bool {
        s.parse::<Self>().is_ok()
    }

    pub fn host(&self) -> &DnsName {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether a CONNECT to `host:port` is this target.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.host.as_str() == host && self.port == port
    }
}

impl FromStr for TunnelTarget {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let bad = || ParseError::new(Self::WHAT, s, Self::EXPECTED);
        let (host, port) = match s.split_once(':') {
            Some((host, port)) => {
                // Digits only: `u16::from_str` would also take a `+`.
                if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                (host, port.parse::<u16>().map_err(|_| bad())?)
            }
            None => (s, Self::DEFAULT_PORT),
        };
        let host = host.parse::<DnsName>().map_err(|_| bad())?;
        if port == 0 {
            return Err(bad());
        }
        Ok(Self::from_parts(host, port))
    }
}

impl TryFrom<String> for TunnelTarget {
    type Error = ParseError;
    fn try_from(s: String) -> Result<Self, ParseError> {
        s.parse()
    }
}

impl From<TunnelTarget> for String {
    fn from(t: TunnelTarget) -> String {
        t.text
    }
}

impl fmt::Display for TunnelTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl AsRef<str> for TunnelTarget {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests;
