//! Any bytes as a CONNECT request target (parsed as hyper parses one): the
//! decision never panics, and what it admits is safe whatever the input. A
//! splice goes only to a listed tunnel that no rule names; an interception
//! only to a named host on 443; neither to an IP address, a bare name or
//! the local machine; and the host decided is the target's, lowercased.
#![no_main]

use gatehouse_proxy::connect_target::{decide, ConnectRefusal, ConnectTarget};
use http::Uri;
use libfuzzer_sys::fuzz_target;

const TUNNELS: [(&str, u16); 3] = [
    ("registry.npmjs.org", 443),
    ("git.example.org", 22),
    ("api.github.com", 443),
];
const NAMED: [&str; 2] = ["api.github.com", "uploads.github.com"];

fn is_tunnel(host: &str, port: u16) -> bool {
    TUNNELS.contains(&(host, port))
}

fn names_host(host: &str) -> bool {
    NAMED.contains(&host)
}

fn plain_dns(host: &str) -> bool {
    host.contains('.')
        && !host.starts_with('[')
        && host.parse::<std::net::IpAddr>().is_err()
        && host != "localhost"
        && !host.ends_with(".localhost")
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fuzz_target!(|data: &[u8]| {
    let Ok(uri) = Uri::try_from(data) else {
        return;
    };
    let decided = decide(&uri, is_tunnel, names_host);
    let authority_form = uri.scheme().is_none() && uri.path_and_query().is_none();
    match &decided {
        Ok(ConnectTarget::Splice { host, port }) => {
            assert!(is_tunnel(host, *port) && !names_host(host), "{uri}");
            assert!(plain_dns(host), "{uri}");
            assert_eq!(Some(*port), uri.port_u16(), "{uri}");
        }
        Ok(ConnectTarget::Intercept { host }) => {
            assert!(names_host(host) && uri.port_u16() == Some(443), "{uri}");
            assert!(plain_dns(host), "{uri}");
        }
        Err(ConnectRefusal::NotAuthorityForm) => assert!(!authority_form, "{uri}"),
        Err(ConnectRefusal::Denied { host, .. }) => {
            assert!(authority_form, "{uri}");
            let asked = uri.host().unwrap_or_default().to_ascii_lowercase();
            assert_eq!(*host, asked, "{uri}");
        }
    }
    // The decision is a function of the target alone.
    assert_eq!(decide(&uri, is_tunnel, names_host), decided);
});
