//! Each section's validator on its own.

use super::*;
use crate::policy::{AuthorKind, Mode};
use crate::trigger::{Source, TriggerKind};

const F: &str = "p.toml";

/// The key and expectation of a validation error.
fn refusal<T: std::fmt::Debug>(r: Result<T, PolicyError>) -> (String, String) {
    match r {
        Err(PolicyError::Invalid {
            file,
            key,
            expected,
        }) => {
            assert_eq!(file, F);
            (key, expected)
        }
        other => panic!("expected a validation error, got {other:?}"),
    }
}

fn teams_of(text: &str) -> BTreeMap<String, TeamFile> {
    toml::from_str(text).unwrap()
}

/// One team `core` owning `acme/widgets` and `acme/gadgets`.
fn core() -> BTreeMap<String, Team> {
    teams(
        F,
        teams_of(
            r#"
[core.repos."acme/widgets"]
sandbox_profile = "rust"
[core.repos."acme/gadgets"]
sandbox_profile = "rust"
[other.repos."other/thing"]
sandbox_profile = "rust"
"#,
        ),
    )
    .unwrap()
}

fn list<T: serde::de::DeserializeOwned>(key: &str, text: &str) -> Vec<T> {
    #[derive(serde::Deserialize)]
    struct Wrap<T> {
        #[serde(default = "Vec::new")]
        items: Vec<T>,
    }
    let text = text.replace(&format!("[[{key}]]"), "[[items]]");
    toml::from_str::<Wrap<T>>(&text).unwrap().items
}

fn gh(login: &str, id: Option<u64>) -> Option<GithubAccount> {
    Some(GithubAccount {
        login: login.to_owned(),
        id,
    })
}

#[test]
fn teams_keep_their_repositories_with_rule_sets_sorted_once() {
    let t = teams(
        F,
        teams_of(
            r#"
[core]
default_repo = "acme/widgets"
[core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["model", "github-repo", "model"]
"#,
        ),
    )
    .unwrap();
    let core = &t["core"];
    assert_eq!(core.default_repo.as_deref(), Some("acme/widgets"));
    assert_eq!(
        core.repos["acme/widgets"].rule_sets,
        ["github-repo", "model"]
    );
    assert_eq!(core.repos["acme/widgets"].sandbox_profile, "rust");
}

#[test]
fn teams_refuse_each_bad_value_naming_its_key() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[\"core team\".repos.\"a/b\"]\nsandbox_profile = \"rust\"",
            "teams.core team",
            "a team name",
        ),
        ("[core]\nrepos = {}", "teams.core.repos", "at least one repository"),
        (
            "[core.repos.\"widgets\"]\nsandbox_profile = \"rust\"",
            "teams.core.repos.\"widgets\"",
            "`owner/name`",
        ),
        (
            "[core.repos.\"a/b/c\"]\nsandbox_profile = \"rust\"",
            "teams.core.repos.\"a/b/c\"",
            "`owner/name`",
        ),
        (
            "[a.repos.\"x/y\"]\nsandbox_profile = \"rust\"\n[b.repos.\"x/y\"]\nsandbox_profile = \"rust\"",
            "teams.b.repos.\"x/y\"",
            "also in team `a`",
        ),
        (
            "[core.repos.\"a/b\"]\nsandbox_profile = \"rust ok\"",
            "teams.core.repos.\"a/b\".sandbox_profile",
            "a sandbox profile name",
        ),
        (
            "[core.repos.\"a/b\"]\nsandbox_profile = \"rust\"\nrule_sets = [\"ok\", \"no/slash\"]",
            "teams.core.repos.\"a/b\".rule_sets",
            "not `no/slash`",
        ),
        (
            "[core]\ndefault_repo = \"x/y\"\n[core.repos.\"a/b\"]\nsandbox_profile = \"rust\"",
            "teams.core.default_repo",
            "one of the team's own repositories",
        ),
    ];
    for (text, key, expected) in cases {
        let (k, e) = refusal(teams(F, teams_of(text)));
        assert_eq!(&k, key, "{text}");
        assert!(
            e.contains(expected),
            "expected {expected:?} in {e:?} for {text}"
        );
    }
}

#[test]
fn people_need_a_name_a_known_team_and_an_account() {
    let ok = people(
        F,
        list(
            "people",
            "[[people]]\nname = \"alice\"\nteam = \"core\"\nfeishu = \"ou_a\"",
        ),
        &core(),
    )
    .unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].name, "alice");
    assert_eq!(ok[0].accounts.feishu.as_deref(), Some("ou_a"));
    let cases: &[(&str, &str, &str)] = &[
        (
            "[[people]]\nname = \" \"\nteam = \"core\"\nfeishu = \"ou_a\"",
            "people[0].name",
            "a non-empty name",
        ),
        (
            "[[people]]\nname = \"a\"\nteam = \"nope\"\nfeishu = \"ou_a\"",
            "people[0].team",
            "a team defined under [teams]",
        ),
        (
            "[[people]]\nname = \"a\"\nteam = \"core\"",
            "people[0]",
            "at least one account",
        ),
    ];
    for (text, key, expected) in cases {
        let (k, e) = refusal(people(F, list("people", text), &core()));
        assert_eq!(&k, key, "{text}");
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
}

#[test]
fn bots_need_a_name_and_an_account() {
    let ok = bots(
        F,
        list(
            "bots",
            "[[bots]]\nname = \"ci\"\ngithub = { login = \"ci[bot]\" }",
        ),
    )
    .unwrap();
    assert_eq!(ok[0].accounts.github, gh("ci[bot]", None));
    let (k, e) = refusal(bots(
        F,
        list("bots", "[[bots]]\nname = \"\"\ngithub = { login = \"ci\" }"),
    ));
    assert_eq!(
        (k.as_str(), e.as_str()),
        ("bots[0].name", "a non-empty name")
    );
    let (k, e) = refusal(bots(F, list("bots", "[[bots]]\nname = \"ci\"")));
    assert_eq!(k, "bots[0]");
    assert!(e.contains("at least one account"), "{e}");
}

#[test]
fn accounts_need_a_login_or_open_id_without_spaces() {
    let ok = accounts(F, "identity", gh("bot", Some(9)), Some("ou_bot".into())).unwrap();
    assert_eq!(ok.github, gh("bot", Some(9)));
    assert_eq!(ok.feishu.as_deref(), Some("ou_bot"));
    let cases = [
        (None, None, "identity", "at least one account"),
        (
            gh("", None),
            None,
            "identity.github.login",
            "a GitHub login",
        ),
        (
            gh("a b", None),
            None,
            "identity.github.login",
            "a GitHub login",
        ),
        (
            None,
            Some(" ".to_owned()),
            "identity.feishu",
            "a Feishu open_id",
        ),
        (
            None,
            Some("ou_a\tb".to_owned()),
            "identity.feishu",
            "a Feishu open_id",
        ),
    ];
    for (github, feishu, key, expected) in cases {
        let (k, e) = refusal(accounts(F, "identity", github, feishu));
        assert_eq!(k, key);
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
}

fn person(name: &str, github: Option<GithubAccount>, feishu: Option<&str>) -> Person {
    Person {
        name: name.to_owned(),
        team: "core".to_owned(),
        accounts: Accounts {
            github,
            feishu: feishu.map(str::to_owned),
        },
    }
}

#[test]
fn an_account_belongs_to_one_person_bot_or_the_bot_itself() {
    let identity = Accounts {
        github: gh("gatehouse-bot", Some(900)),
        feishu: Some("ou_bot".into()),
    };
    let alice = person("alice", gh("alice", Some(101)), Some("ou_alice"));
    let ci = Bot {
        name: "ci".into(),
        accounts: Accounts {
            github: gh("ci[bot]", Some(700)),
            feishu: None,
        },
    };
    accounts_unique(
        F,
        &identity,
        std::slice::from_ref(&alice),
        std::slice::from_ref(&ci),
    )
    .unwrap();
    // Logins compare case-insensitively, like GitHub's.
    let shadow = person("mallory", gh("Gatehouse-Bot", None), None);
    let (k, e) = refusal(accounts_unique(F, &identity, &[alice.clone(), shadow], &[]));
    assert_eq!(k, "people[1]");
    assert!(
        e.contains("`github:gatehouse-bot` is also in identity"),
        "{e}"
    );
    // The numeric id alone is the same account.
    let renamed = person("eve", gh("someone", Some(101)), None);
    let (k, e) = refusal(accounts_unique(
        F,
        &identity,
        &[alice.clone(), renamed],
        &[],
    ));
    assert_eq!(k, "people[1]");
    assert!(e.contains("`github:#101` is also in people[0]"), "{e}");
    let feishu_bot = Bot {
        name: "x".into(),
        accounts: Accounts {
            github: None,
            feishu: Some("ou_alice".into()),
        },
    };
    let (k, e) = refusal(accounts_unique(F, &identity, &[alice], &[ci, feishu_bot]));
    assert_eq!(k, "bots[1]");
    assert!(e.contains("`feishu:ou_alice` is also in people[0]"), "{e}");
}

#[test]
fn a_name_names_one_person() {
    let a = person("alice", gh("a", None), None);
    let b = person("bob", gh("b", None), None);
    names_unique(F, &[a.clone(), b]).unwrap();
    let again = person("alice", gh("c", None), None);
    let (k, e) = refusal(names_unique(F, &[a, again]));
    assert_eq!(k, "people");
    assert_eq!(e, "unique names (`alice` twice)");
}

#[test]
fn chats_are_listed_once_for_a_repository_of_their_team() {
    let ok = chats(
        F,
        list(
            "chats",
            "[[chats]]\nid = \"oc_1\"\nteam = \"core\"\nrepo = \"acme/gadgets\"",
        ),
        &core(),
    )
    .unwrap();
    assert_eq!(
        ok["oc_1"],
        ChatScope {
            team: "core".into(),
            repo: "acme/gadgets".into()
        }
    );
    let chat = |id: &str, team: &str, repo: &str| {
        format!("[[chats]]\nid = \"{id}\"\nteam = \"{team}\"\nrepo = \"{repo}\"\n")
    };
    let cases = [
        (
            chat(" ", "core", "acme/widgets"),
            "chats[0].id",
            "a Feishu chat id",
        ),
        (
            chat("oc_1", "nope", "acme/widgets"),
            "chats[0].team",
            "a team defined",
        ),
        (
            chat("oc_1", "core", "other/thing"),
            "chats[0].repo",
            "one of the team's repositories",
        ),
        (
            chat("oc_1", "core", "acme/widgets") + &chat("oc_1", "core", "acme/gadgets"),
            "chats[1].id",
            "a chat listed once",
        ),
    ];
    for (text, key, expected) in cases {
        let (k, e) = refusal(chats(F, list("chats", &text), &core()));
        assert_eq!(k, key, "{text}");
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
}

#[test]
fn rules_are_checked_normalised_and_kept_in_id_order() {
    let ok = rules(
        F,
        list(
            "rules",
            r#"
[[rules]]
id = "z-last"
team = "core"
text = "later"
[[rules]]
id = "a-first"
team = "core"
text = "earlier"
mode = "auto"
enabled = false
when = { kinds = ["issue_opened", "ci_result", "issue_opened"], sources = ["github", "github"], repos = ["acme/widgets", "acme/gadgets"], labels = ["b", "a", "b"], branches = ["main", "main"], author = "bot" }
"#,
        ),
        &core(),
    )
    .unwrap();
    assert_eq!(
        ok.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["a-first", "z-last"]
    );
    let first = &ok[0];
    assert_eq!((first.mode, first.enabled), (Mode::Auto, false));
    let mut kinds = vec![TriggerKind::IssueOpened, TriggerKind::CiResult];
    kinds.sort();
    assert_eq!(first.when.kinds, kinds, "sorted, each once");
    assert_eq!(first.when.sources, [Source::Github]);
    assert_eq!(first.when.repos, ["acme/gadgets", "acme/widgets"]);
    assert_eq!(first.when.labels, ["a", "b"]);
    assert_eq!(first.when.branches, ["main"]);
    assert_eq!(first.when.author, AuthorKind::Bot);
    // The defaults: observe, enabled, no conditions.
    assert_eq!((ok[1].mode, ok[1].enabled), (Mode::Observe, true));
    assert_eq!(ok[1].when, crate::policy::Conditions::default());

    let rule = |id: &str, team: &str, text: &str, when: &str| {
        format!(
            "[[rules]]\nid = \"{id}\"\nteam = \"{team}\"\ntext = \"{text}\"\nwhen = {{ {when} }}\n"
        )
    };
    let cases = [
        (rule("a b", "core", "t", ""), "rules[0].id", "a rule id"),
        (
            rule("r", "core", "t", "") + &rule("r", "core", "u", ""),
            "rules[1].id",
            "a unique rule id",
        ),
        (
            rule("r", "nope", "t", ""),
            "rules[0].team",
            "a team defined",
        ),
        (
            rule("r", "core", " ", ""),
            "rules[0].text",
            "the rule's meaning",
        ),
        (
            rule("r", "core", "t", "repos = [\"other/thing\"]"),
            "rules[0].when.repos",
            "repositories of team `core`, not `other/thing`",
        ),
    ];
    for (text, key, expected) in cases {
        let (k, e) = refusal(rules(F, list("rules", &text), &core()));
        assert_eq!(k, key, "{text}");
        assert!(e.contains(expected), "expected {expected:?} in {e:?}");
    }
}

#[test]
fn limits_default_to_the_maximum_and_may_only_tighten() {
    assert_eq!(
        limits(F, &LimitsFile::default()).unwrap(),
        Limits::default()
    );
    let tight = LimitsFile {
        reply_words: Some(1),
        note_words: Some(MAX_NOTE_WORDS),
    };
    assert_eq!(
        limits(F, &tight).unwrap(),
        Limits {
            reply_words: 1,
            note_words: MAX_NOTE_WORDS
        }
    );
    let cases = [
        (
            Some(0),
            None,
            "limits.reply_words",
            "a number from 1 to 100",
        ),
        (
            Some(MAX_REPLY_WORDS + 1),
            None,
            "limits.reply_words",
            "a number from 1 to 100",
        ),
        (None, Some(0), "limits.note_words", "a number from 1 to 30"),
        (
            None,
            Some(MAX_NOTE_WORDS + 1),
            "limits.note_words",
            "a number from 1 to 30",
        ),
    ];
    for (reply_words, note_words, key, expected) in cases {
        let (k, e) = refusal(limits(
            F,
            &LimitsFile {
                reply_words,
                note_words,
            },
        ));
        assert_eq!((k.as_str(), e.as_str()), (key, expected));
    }
}

#[test]
fn names_and_repositories() {
    for ok in ["a", "A-b_c.1"] {
        assert!(is_name(ok), "{ok}");
    }
    for bad in ["", "a b", "a/b", "ä", "a:b"] {
        assert!(!is_name(bad), "{bad}");
    }
    assert!(is_repo("acme/widgets"));
    for bad in ["acme", "acme/", "/widgets", "a/b/c", "a b/c"] {
        assert!(!is_repo(bad), "{bad}");
    }
}
