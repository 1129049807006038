use std::path::Path;

use super::*;

/// A config over a fresh dir with good prompts and profiles; `spoil`
/// breaks one thing before the check runs.
fn checked(spoil: impl FnOnce(&Path)) -> Result<(), PreflightError> {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("prompts/team")).unwrap();
    std::fs::write(
        root.join("prompts/work.md"),
        "Ticket {{ticket}}, job {{job}}.",
    )
    .unwrap();
    std::fs::write(
        root.join("prompts/team/web.md"),
        "Team {{team}} on {{repo}}.",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("profiles/teams")).unwrap();
    std::fs::create_dir_all(root.join("profiles/rules")).unwrap();
    std::fs::write(root.join("profiles/mine.toml"), "extends = \"default\"\n").unwrap();
    std::fs::write(root.join("profiles/teams/ops.toml"), "extends = \"mine\"\n").unwrap();
    // Not a profile: rule sets kept beside them.
    std::fs::write(root.join("profiles/rules/x.toml"), "[[rule]]\n").unwrap();
    spoil(root);
    let text = "state_dir = \"/s\"\napi_socket = \"/a.sock\"\nprompts_dir = \"prompts\"\n\
                [sandbox]\nprofiles_dir = \"profiles\"\n";
    let config = Config::parse(text, &root.join("s.toml"), root).unwrap();
    check(&config).map(|_| ())
}

#[test]
fn a_good_config_passes() {
    assert_eq!(checked(|_| {}), Ok(()));
}

/// A change that breaks the config, the key refused, a word the error names.
type Mistake = (Box<dyn FnOnce(&Path)>, &'static str, &'static str);

#[test]
fn each_mistake_is_refused_naming_its_key() {
    let write = |rel: &'static str, text: &'static str| {
        move |root: &Path| std::fs::write(root.join(rel), text).unwrap()
    };
    let cases: Vec<Mistake> = vec![
        (
            Box::new(|root: &Path| std::fs::remove_dir_all(root.join("prompts")).unwrap()),
            "prompts_dir",
            "is not a directory",
        ),
        (
            Box::new(|root: &Path| std::fs::remove_file(root.join("prompts/work.md")).unwrap()),
            "prompts_dir",
            "work.md",
        ),
        (
            Box::new(write("prompts/team/web.md", "{{repository}}")),
            "prompts_dir",
            "repository",
        ),
        (
            Box::new(|root: &Path| std::fs::remove_dir_all(root.join("profiles")).unwrap()),
            "sandbox.profiles_dir",
            "is not a directory",
        ),
        (
            Box::new(write(
                "profiles/mine.toml",
                "extends = \"no-such-profile\"\n",
            )),
            "sandbox.profiles_dir",
            "no-such-profile",
        ),
        (
            Box::new(write("profiles/teams/ops.toml", "surprise = 1\n")),
            "sandbox.profiles_dir",
            "teams/ops",
        ),
    ];
    for (spoil, key, names) in cases {
        let err = checked(spoil).unwrap_err();
        assert_eq!(err.key, key, "{err}");
        let text = err.to_string();
        assert!(text.contains(key) && text.contains(names), "{text}");
    }
}

fn known(name: &str, withdrawn: Option<&str>) -> KnownRuleSet {
    KnownRuleSet {
        name: name.parse().unwrap(),
        variables: vec!["repo".into()],
        withdrawn: withdrawn.map(String::from),
    }
}

#[test]
fn profiles_are_read_with_the_rule_sets_they_allow() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("prompts")).unwrap();
    std::fs::write(root.join("prompts/work.md"), "Ticket {{ticket}}.").unwrap();
    std::fs::create_dir_all(root.join("profiles/teams")).unwrap();
    std::fs::write(
        root.join("profiles/teams/web.toml"),
        "extends = \"default\"\n[network]\nrule_sets = [\"github-worker\"]\n",
    )
    .unwrap();
    let text = "state_dir = \"/s\"\napi_socket = \"/a.sock\"\nprompts_dir = \"prompts\"\n\
                [sandbox]\nprofiles_dir = \"profiles\"\n";
    let config = Config::parse(text, &root.join("s.toml"), root).unwrap();
    let allowed = check(&config).unwrap();
    let web = allowed
        .iter()
        .find(|(name, _)| name == "teams/web")
        .unwrap();
    assert!(web.1.contains(&"github-worker".to_string()), "{allowed:?}");
}

#[test]
fn each_rule_set_the_proxy_cannot_serve_is_named_once() {
    let known = [
        known("github-read", None),
        known("github-worker", None),
        known("feishu-send", Some("credential `feishu` is not defined")),
    ];
    let profiles = |sets: &[&str]| {
        vec![
            ("default".to_string(), vec!["github-read".to_string()]),
            (
                "teams/web".to_string(),
                sets.iter().map(|s| s.to_string()).collect(),
            ),
        ]
    };
    // Every set served: nothing to say; no profile: nothing to check.
    assert!(check_rule_sets(&profiles(&["github-worker"]), &known).is_empty());
    assert!(check_rule_sets(&[], &known).is_empty());
    // A misspelt set and a withdrawn one: a line each, naming profile and set.
    let warnings = check_rule_sets(
        &profiles(&["github-worker", "github-wroker", "feishu-send"]),
        &known,
    );
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("teams/web")
            && warnings[0].contains("`github-wroker`")
            && warnings[0].contains("does not have"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("`feishu-send`") && warnings[1].contains("credential `feishu`"),
        "{warnings:?}"
    );
    // Against a proxy that knows nothing, every allowed set is named.
    assert_eq!(check_rule_sets(&profiles(&["github-worker"]), &[]).len(), 2);
}
