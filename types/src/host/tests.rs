use proptest::prelude::*;

use crate::{DnsName, TunnelTarget};

#[test]
fn dns_name_table() {
    for ok in [
        "registry.npmjs.org",
        "api.github.com",
        "a-b.c0.io",
        "1x.example",
    ] {
        assert!(DnsName::is_valid(ok), "{ok}");
    }
    let long_label = format!("{}.org", "a".repeat(64));
    for bad in [
        "",
        "localhost",
        "127.0.0.1",
        "1.2.3",
        "Registry.npmjs.org",
        "x.org:443",
        "-a.org",
        "a-.org",
        "a..org",
        ".a.org",
        "a.org.",
        "[::1]",
        "a_b.org",
        long_label.as_str(),
    ] {
        assert!(DnsName::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn tunnel_target_table() {
    let t = TunnelTarget::parse("registry.npmjs.org:443").unwrap();
    assert_eq!((t.host().as_str(), t.port()), ("registry.npmjs.org", 443));
    assert!(t.matches("registry.npmjs.org", 443));
    assert!(!t.matches("registry.npmjs.org", 80));
    let bare = TunnelTarget::parse("registry.npmjs.org").unwrap();
    assert_eq!(bare, t);
    assert_eq!(bare.to_string(), "registry.npmjs.org:443");
    assert_eq!(
        TunnelTarget::parse("index.crates.io:8443").unwrap().port(),
        8443
    );
    for bad in [
        "",
        ":443",
        "localhost:443",
        "127.0.0.1:443",
        "x.org:",
        "x.org:0",
        "x.org:65536",
        "x.org:+443",
        "x.org:443:1",
        "X.org:443",
        "x.org: 443",
    ] {
        assert!(TunnelTarget::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn tunnel_target_wire_form() {
    let t: TunnelTarget = serde_json::from_str("\"registry.npmjs.org:443\"").unwrap();
    assert_eq!(
        serde_json::to_string(&t).unwrap(),
        "\"registry.npmjs.org:443\""
    );
    assert!(serde_json::from_str::<TunnelTarget>("\"localhost:443\"").is_err());
}

proptest! {
    #[test]
    fn dns_names_round_trip(labels in prop::collection::vec("[a-z][a-z0-9-]{0,10}[a-z0-9]", 2..5)) {
        let text = labels.join(".");
        let name = DnsName::parse(&text).unwrap();
        prop_assert_eq!(name.as_str(), text.as_str());
    }

    #[test]
    fn dns_names_are_never_ip_addresses(s in "[0-9.:a-f]{1,20}") {
        if DnsName::is_valid(&s) {
            prop_assert!(s.parse::<std::net::IpAddr>().is_err());
        }
    }

    #[test]
    fn tunnel_targets_round_trip(host in "[a-z]{1,10}\\.[a-z]{2,5}", port in 1u16..) {
        let t = TunnelTarget::parse(&format!("{host}:{port}")).unwrap();
        prop_assert_eq!((t.host().as_str(), t.port()), (host.as_str(), port));
        prop_assert_eq!(TunnelTarget::parse(&format!("{t}")).unwrap(), t.clone());
        let json = serde_json::to_string(&t).unwrap();
        prop_assert_eq!(serde_json::from_str::<TunnelTarget>(&json).unwrap(), t);
    }
}
