use proptest::prelude::*;

use crate::{IdentityName, ProfileName, RepoSlug, RuleSetName, TeamName};

#[test]
fn identity_name_table() {
    let long = "x".repeat(64);
    for ok in ["router", "tkt_1", "a-b_C9", long.as_str()] {
        assert!(IdentityName::is_valid(ok), "{ok}");
    }
    let too_long = "x".repeat(65);
    for bad in ["", "tkt_v1.2", "../x", "a/b", "a b", "é", too_long.as_str()] {
        let err = IdentityName::parse(bad).unwrap_err();
        assert_eq!(err.what(), "identity name", "{bad}");
    }
}

#[test]
fn team_name_table() {
    for ok in ["core", "web-team", "a_b9"] {
        assert!(TeamName::is_valid(ok), "{ok}");
    }
    let too_long = "t".repeat(65);
    for bad in ["", ".", "..", ".hidden", "a.b", "a/b", too_long.as_str()] {
        assert!(TeamName::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn rule_set_name_table() {
    for ok in ["github-worker", "npm", "a1-b2"] {
        assert!(RuleSetName::is_valid(ok), "{ok}");
    }
    let too_long = "a".repeat(65);
    for bad in ["", "GitHub", "git_hub", "a.b", "a/b", too_long.as_str()] {
        assert!(RuleSetName::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn profile_name_table() {
    for ok in ["default", "teams/web", "a/b_c/d-e"] {
        assert!(ProfileName::is_valid(ok), "{ok}");
    }
    let too_long = format!("{}/{}", "a".repeat(64), "b".repeat(64));
    for bad in [
        "",
        "/etc",
        "teams/",
        "teams//web",
        "../x",
        "teams/../x",
        "a.b",
        "a b",
        too_long.as_str(),
    ] {
        assert!(ProfileName::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn repo_slug_table() {
    for ok in ["octo/hello", "o/r.js", "A-b/_c", ".github/x"] {
        let slug = RepoSlug::parse(ok).unwrap();
        assert_eq!(format!("{}/{}", slug.owner(), slug.name()), ok);
    }
    for bad in [
        "",
        "octo",
        "octo/",
        "/r",
        "../x",
        "o/..",
        "o/.",
        "o/r/extra",
        "o%2fr/x",
        "o r/x",
    ] {
        assert!(RepoSlug::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn deserialize_goes_through_the_rule() {
    let ok: IdentityName = serde_json::from_str("\"tkt_1\"").unwrap();
    assert_eq!(ok, "tkt_1");
    assert_eq!(serde_json::to_string(&ok).unwrap(), "\"tkt_1\"");
    let err = serde_json::from_str::<IdentityName>("\"tkt_v1.2\"").unwrap_err();
    assert!(
        err.to_string().contains("not a valid identity name"),
        "{err}"
    );
    assert!(serde_json::from_str::<RepoSlug>("\"octo\"").is_err());
}

#[test]
fn error_names_value_and_rule() {
    let err = RuleSetName::parse("Bad").unwrap_err();
    assert_eq!(
        err.to_string(),
        "`Bad` is not a valid rule-set name: expected 1-64 of [a-z0-9-]"
    );
}

proptest! {
    #[test]
    fn identity_names_round_trip(s in "[A-Za-z0-9_-]{1,64}") {
        let name = IdentityName::parse(&s).unwrap();
        prop_assert_eq!(name.to_string(), s.clone());
        let json = serde_json::to_string(&name).unwrap();
        prop_assert_eq!(serde_json::from_str::<IdentityName>(&json).unwrap(), name);
    }

    #[test]
    fn identity_names_refuse_any_other_byte(
        a in "[A-Za-z0-9_-]{0,30}", c in "[^A-Za-z0-9_-]", b in "[A-Za-z0-9_-]{0,30}"
    ) {
        let bad = format!("{a}{c}{b}");
        prop_assert!(IdentityName::parse(&bad).is_err());
    }

    #[test]
    fn rule_set_names_round_trip(s in "[a-z0-9-]{1,64}") {
        let name = RuleSetName::parse(&s).unwrap();
        prop_assert_eq!(name.as_str(), s.as_str());
    }

    #[test]
    fn profile_names_never_escape(s in "[A-Za-z0-9_./-]{0,40}") {
        if let Ok(p) = ProfileName::parse(&s) {
            prop_assert!(!p.as_str().contains('.'));
            prop_assert!(!p.as_str().starts_with('/') && !p.as_str().ends_with('/'));
            prop_assert!(!p.as_str().contains("//"));
        }
    }

    #[test]
    fn repo_slugs_round_trip(o in "[A-Za-z0-9_-][A-Za-z0-9_.-]{0,20}", n in "[A-Za-z0-9_-][A-Za-z0-9_.-]{0,20}") {
        let text = format!("{o}/{n}");
        let slug = RepoSlug::parse(&text).unwrap();
        prop_assert_eq!(slug.owner(), o.as_str());
        prop_assert_eq!(slug.name(), n.as_str());
        let json = serde_json::to_string(&slug).unwrap();
        prop_assert_eq!(serde_json::from_str::<RepoSlug>(&json).unwrap(), slug);
    }

    #[test]
    fn repo_slugs_have_exactly_one_slash(s in "[a-z/.]{0,12}") {
        if let Ok(slug) = RepoSlug::parse(&s) {
            prop_assert_eq!(slug.as_str().matches('/').count(), 1);
            prop_assert!(slug.owner() != ".." && slug.name() != "..");
        }
    }
}
