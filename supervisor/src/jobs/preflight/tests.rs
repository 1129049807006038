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
    check(&config)
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
