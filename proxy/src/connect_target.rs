//! What a `CONNECT` asks for, decided from its request target alone, before
//! anything is dialled: splice a tunnel, intercept TLS, or refuse. The
//! identity's tunnel list and rule sets come in as two questions, so the
//! decision is a plain function the tests and the fuzz target drive with
//! any target.

use http::Uri;

/// Where an admitted `CONNECT` goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectTarget {
    /// A tunnel host no rule names, on a port its listing gives: spliced
    /// byte for byte, not inspected.
    Splice { host: String, port: u16 },
    /// A host a rule names, on 443: TLS is terminated and every request
    /// inside checked against the rules.
    Intercept { host: String },
}

/// Why a `CONNECT` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectRefusal {
    /// The target is not in authority form (`host:port`): 400.
    NotAuthorityForm,
    /// Refused by policy (403); `host` is the one recorded (lowercased).
    Denied { host: String, reason: &'static str },
}

pub const NOT_AUTHORITY_FORM: &str = "CONNECT needs an authority-form target host:port";
pub const ONLY_443: &str = "only port 443 may be reached through the proxy";
pub const NOT_A_DNS_NAME: &str =
    "CONNECT targets must be DNS names; IP addresses and bare names are refused";
pub const LOCAL_MACHINE: &str = "CONNECT to the local machine is refused";
pub const UNNAMED_HOST: &str =
    "no rule of this identity's rule sets names this host, and it is not a tunnel host";

/// Decides a `CONNECT` to `target`. `is_tunnel(host, port)`: the identity
/// lists that tunnel; `names_host(host)`: a rule of its sets names the host.
/// A host a rule names is always intercepted, even if it is also a tunnel
/// host: splicing it would bypass the rules and the log.
pub fn decide(
    target: &Uri,
    is_tunnel: impl Fn(&str, u16) -> bool,
    names_host: impl Fn(&str) -> bool,
) -> Result<ConnectTarget, ConnectRefusal> {
    let authority = match target.authority() {
        Some(a) if target.scheme().is_none() && target.path_and_query().is_none() => a,
        _ => return Err(ConnectRefusal::NotAuthorityForm),
    };
    let host = authority.host().to_ascii_lowercase();
    let port = authority.port_u16();
    let deny = |reason| {
        Err(ConnectRefusal::Denied {
            host: host.clone(),
            reason,
        })
    };
    // A tunnel is reached on the port it lists; everything else on 443.
    let tunnel_port = port.filter(|&p| is_tunnel(&host, p));
    if port != Some(443) && tunnel_port.is_none() {
        return deny(ONLY_443);
    }
    if host.starts_with('[') || !crate::server::is_dns_name(&host) {
        return deny(NOT_A_DNS_NAME);
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return deny(LOCAL_MACHINE);
    }
    let intercepted = names_host(&host);
    match (intercepted, tunnel_port) {
        (false, Some(port)) => Ok(ConnectTarget::Splice { host, port }),
        (false, None) => deny(UNNAMED_HOST),
        // Interception speaks TLS on 443 only.
        (true, _) if port != Some(443) => deny(ONLY_443),
        (true, _) => Ok(ConnectTarget::Intercept { host }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The identity of the table: `api.github.com` named by a rule;
    /// tunnels `registry.npmjs.org:443`, `git.example.org:22`, and
    /// `api.github.com:443` (listed, but named, so intercepted).
    fn decided(target: &str) -> Result<ConnectTarget, ConnectRefusal> {
        let uri: Uri = target.parse().unwrap_or_else(|e| panic!("{target}: {e}"));
        decide(
            &uri,
            |h, p| {
                matches!(
                    (h, p),
                    ("registry.npmjs.org", 443) | ("git.example.org", 22) | ("api.github.com", 443)
                )
            },
            |h| h == "api.github.com",
        )
    }

    fn denied(host: &str, reason: &'static str) -> Result<ConnectTarget, ConnectRefusal> {
        Err(ConnectRefusal::Denied {
            host: host.into(),
            reason,
        })
    }

    #[test]
    fn decisions_table() {
        let intercept = |h: &str| Ok(ConnectTarget::Intercept { host: h.into() });
        let splice = |h: &str, port| {
            Ok(ConnectTarget::Splice {
                host: h.into(),
                port,
            })
        };
        let cases = [
            ("api.github.com:443", intercept("api.github.com")),
            ("API.GitHub.COM:443", intercept("api.github.com")),
            ("registry.npmjs.org:443", splice("registry.npmjs.org", 443)),
            ("git.example.org:22", splice("git.example.org", 22)),
            // Named hosts are intercepted on 443 only, never spliced.
            ("api.github.com:22", denied("api.github.com", ONLY_443)),
            ("api.github.com:80", denied("api.github.com", ONLY_443)),
            // A tunnel on a port it does not list.
            (
                "git.example.org:443",
                denied("git.example.org", UNNAMED_HOST),
            ),
            (
                "registry.npmjs.org:8443",
                denied("registry.npmjs.org", ONLY_443),
            ),
            ("api.github.com", denied("api.github.com", ONLY_443)),
            ("api.github.com:0443", intercept("api.github.com")),
            ("evil.example:443", denied("evil.example", UNNAMED_HOST)),
            ("127.0.0.1:443", denied("127.0.0.1", NOT_A_DNS_NAME)),
            ("[::1]:443", denied("[::1]", NOT_A_DNS_NAME)),
            // A bare name is no DNS name; `.localhost` names are refused
            // for what they are.
            ("localhost:443", denied("localhost", NOT_A_DNS_NAME)),
            ("a.localhost:443", denied("a.localhost", LOCAL_MACHINE)),
            (
                "https://api.github.com:443/x",
                Err(ConnectRefusal::NotAuthorityForm),
            ),
            (
                "https://api.github.com:443",
                Err(ConnectRefusal::NotAuthorityForm),
            ),
            ("/repos", Err(ConnectRefusal::NotAuthorityForm)),
        ];
        for (target, want) in cases {
            assert_eq!(decided(target), want, "{target}");
        }
    }

    #[test]
    fn a_bare_name_or_an_underscore_is_not_a_dns_target() {
        assert_eq!(decided("github:443"), denied("github", NOT_A_DNS_NAME));
        assert!(matches!(
            decided("a_b.example:443"),
            Err(ConnectRefusal::Denied { .. })
        ));
    }
}
