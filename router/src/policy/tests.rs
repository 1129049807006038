use super::*;

/// A small policy most tests start from.
pub(crate) const BASE: &str = r#"
identity = { github = { login = "gatehouse-bot", id = 900 }, feishu = "ou_bot" }

[[people]]
name = "alice"
team = "core"
github = { login = "alice", id = 101 }
feishu = "ou_alice"

[[people]]
name = "bob"
team = "core"
github = { login = "bob" }

[[bots]]
name = "ci"
github = { login = "ci-bot[bot]", id = 700 }

[teams.core]
default_repo = "acme/widgets"
[teams.core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["github-repo", "model"]

[[chats]]
id = "oc_core"
team = "core"
repo = "acme/widgets"

[feishu]
direct_messages = true

[[rules]]
id = "ci-fails-on-main"
team = "core"
text = "A CI run failed on main: diagnose and propose a fix."
mode = "auto"
when = { sources = ["github"], kinds = ["ci_result"], branches = ["main"], author = "bot" }

[[rules]]
id = "bug-reports"
team = "core"
text = "Someone describes a reproducible bug."
when = { kinds = ["issue_opened"], labels = ["bug"], author = "human" }
"#;

pub(crate) fn base() -> Policy {
    Policy::from_toml("policy.toml", BASE).unwrap()
}

fn err(text: &str) -> String {
    Policy::from_toml("p.toml", text).unwrap_err().to_string()
}

#[test]
fn base_policy_validates_with_observe_default() {
    let p = base();
    assert_eq!(p.rule("bug-reports").unwrap().mode, Mode::Observe);
    assert_eq!(p.rule("ci-fails-on-main").unwrap().mode, Mode::Auto);
    assert_eq!(p.limits, Limits::default());
    assert!(p.version().0.starts_with("sha256:"));
    assert_eq!(p.version().0.len(), 7 + 64);
}

#[test]
fn version_ignores_layout_and_order_but_not_meaning() {
    let reordered = BASE.replace(
        "rule_sets = [\"github-repo\", \"model\"]",
        "rule_sets = [\"model\", \"github-repo\"]  # reordered",
    );
    assert_ne!(reordered, BASE);
    assert_eq!(
        Policy::from_toml("a", &reordered).unwrap().version(),
        base().version()
    );
    let changed = BASE.replace("mode = \"auto\"", "mode = \"observe\"");
    assert_ne!(
        Policy::from_toml("a", &changed).unwrap().version(),
        base().version()
    );
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let e = err(&format!("{BASE}\n[limits]\nreply_wrds = 5\n"));
    assert!(e.contains("p.toml") && e.contains("reply_wrds"), "{e}");
    let e = err(&BASE.replace("mode = \"auto\"", "mode = \"auto\"\npriority = 1"));
    assert!(e.contains("priority"), "{e}");
}

#[test]
fn invalid_values_name_file_key_and_expectation() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "team = \"core\"\ngithub = { login = \"alice\"",
            "team = \"nope\"\ngithub = { login = \"alice\"",
            "people[0].team",
        ),
        ("mode = \"auto\"", "mode = \"sometimes\"", "sometimes"),
        (
            "id = \"oc_core\"\nteam = \"core\"\nrepo = \"acme/widgets\"",
            "id = \"oc_core\"\nteam = \"core\"\nrepo = \"acme/gadgets\"",
            "chats[0].repo",
        ),
        (
            "branches = [\"main\"]",
            "branches = [\"main\"], repos = [\"other/repo\"]",
            "rules[0].when.repos",
        ),
        (
            "kinds = [\"issue_opened\"]",
            "kinds = [\"issue_opened\", \"pull_request_merged\"]",
            "not the state change `pull_request_merged`",
        ),
        (
            "kinds = [\"issue_opened\"]",
            "kinds = [\"reopened\"]",
            "not the state change `reopened`",
        ),
        (
            "default_repo = \"acme/widgets\"",
            "default_repo = \"acme/gizmos\"",
            "teams.core.default_repo",
        ),
        (
            "name = \"ci\"\ngithub = { login = \"ci-bot[bot]\", id = 700 }",
            "name = \"ci\"\ngithub = { login = \"alice\" }",
            "also in people",
        ),
        (
            "[[rules]]\nid = \"bug-reports\"",
            "[[rules]]\nid = \"ci-fails-on-main\"",
            "unique rule id",
        ),
        (
            "[teams.core.repos.\"acme/widgets\"]",
            "[teams.core.repos.\"widgets\"]",
            "owner/name",
        ),
        (
            "rule_sets = [\"github-repo\", \"model\"]",
            "rule_sets = [\"github-repo\", \"model\"]\nfork = \"gatehouse-bot\"",
            "teams.core.repos.\"acme/widgets\".fork",
        ),
    ];
    for (from, to, needle) in cases {
        assert!(BASE.contains(from), "fixture lacks {from}");
        let e = err(&BASE.replacen(from, to, 1));
        assert!(e.starts_with("p.toml"), "{e}");
        assert!(e.contains(needle), "expected {needle:?} in {e}");
    }
    let e = err(&format!("{BASE}\n[limits]\nreply_words = 500\n"));
    assert!(
        e.contains("limits.reply_words") && e.contains("1 to 100"),
        "{e}"
    );
}

#[test]
fn github_id_wins_over_login() {
    let p = base();
    let renamed = Sender {
        id: "101".into(),
        login: Some("alice-renamed".into()),
        name: String::new(),
        is_bot: false,
    };
    assert_eq!(p.person(Source::Github, &renamed).unwrap().name, "alice");
    let impostor = Sender {
        id: "555".into(),
        login: Some("alice".into()),
        name: String::new(),
        is_bot: false,
    };
    assert!(p.person(Source::Github, &impostor).is_none());
    // bob has no id: the login decides, case-insensitively like GitHub.
    let bob = Sender {
        id: "12".into(),
        login: Some("Bob".into()),
        name: String::new(),
        is_bot: false,
    };
    assert_eq!(p.person(Source::Github, &bob).unwrap().name, "bob");
}

/// A repository may name the bot's fork its workers deliver from; it is in
/// the scope of work (and so in every mandate made under it) and in the
/// policy's version; without it the scope, and the version, are as before.
#[test]
fn a_repository_may_name_the_fork_its_workers_deliver_from() {
    let forked = BASE.replacen(
        "rule_sets = [\"github-repo\", \"model\"]",
        "rule_sets = [\"github-repo\", \"model\"]\nfork = \"gatehouse-bot/widgets\"",
        1,
    );
    assert_ne!(forked, BASE);
    let p = Policy::from_toml("p.toml", &forked).unwrap();
    let scope = p.scope_of_repo("acme/widgets").unwrap();
    assert_eq!(scope.fork.as_deref(), Some("gatehouse-bot/widgets"));
    assert_ne!(p.version(), base().version());
    assert_eq!(base().scope_of_repo("acme/widgets").unwrap().fork, None);
    // A mandate stored before forks existed reads back without one.
    let old = serde_json::json!({"team": "core", "repo": "acme/widgets",
        "sandbox_profile": "rust", "rule_sets": ["github-repo"]});
    let scope: crate::policy::Scope = serde_json::from_value(old.clone()).unwrap();
    assert_eq!(scope.fork, None);
    assert_eq!(serde_json::to_value(&scope).unwrap(), old);
}
