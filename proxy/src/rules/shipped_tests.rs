//! The shipped rule sets in `sandbox-profiles/rules/`: they load (which
//! checks their examples), and the decisions the issue names hold for them.

use super::*;

pub(crate) const SHIPPED: &[(&str, &str)] = &[
    (
        "github-read.toml",
        include_str!("../../../sandbox-profiles/rules/github-read.toml"),
    ),
    (
        "github-worker.toml",
        include_str!("../../../sandbox-profiles/rules/github-worker.toml"),
    ),
    (
        "github-worker-fork.toml",
        include_str!("../../../sandbox-profiles/rules/github-worker-fork.toml"),
    ),
    (
        "feishu-read.toml",
        include_str!("../../../sandbox-profiles/rules/feishu-read.toml"),
    ),
    (
        "feishu-send.toml",
        include_str!("../../../sandbox-profiles/rules/feishu-send.toml"),
    ),
    (
        "model-api.toml",
        include_str!("../../../sandbox-profiles/rules/model-api.toml"),
    ),
];

pub(crate) fn shipped_book() -> RuleBook {
    RuleBook::new(
        SHIPPED
            .iter()
            .map(|(name, text)| RuleSet::parse(name, text).unwrap()),
    )
    .unwrap()
}

#[test]
fn shipped_sets_load_with_their_examples() {
    let book = shipped_book();
    let names: Vec<_> = book.names().collect();
    assert_eq!(
        names,
        [
            "feishu-read",
            "feishu-send",
            "github-read",
            "github-worker",
            "github-worker-fork",
            "model-api"
        ]
    );
    for (file, text) in SHIPPED {
        let set = RuleSet::parse(file, text).unwrap();
        assert!(
            set.examples.iter().any(|(_, allow)| *allow),
            "{file} has no allow example"
        );
        assert!(
            set.examples.iter().any(|(_, allow)| !*allow),
            "{file} has no deny example"
        );
        assert!(set.rules.iter().all(|r| !r.source.is_empty()));
    }
}

fn decide(book: &RuleBook, sets: &[&str], line: &str) -> Decision {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let vars = Vars::from([("repo".to_owned(), "octo-org/hello-world".to_owned())]);
    book.check(&parse_example(line).unwrap(), &sets, &vars)
}

#[test]
fn issue_negative_cases_are_denied_for_a_worker() {
    let book = shipped_book();
    let worker = ["github-worker", "feishu-send", "model-api"];
    let denied = [
        // other repositories, aliases
        "GET api.github.com/repos/octo-org/other/issues/1",
        "GET api.github.com/repos/mallory/hello-world/issues/1",
        "POST api.github.com/repos/octo-org/hello-world-2/issues/1/comments",
        "GET api.github.com/repositories/1296269",
        "GET api.github.com/repositories/1296269/issues/1",
        "POST api.github.com/repositories/1296269/pulls",
        "POST github.com/octo-org/other.git/git-receive-pack",
        "GET github.com/octo-org/other/info/refs?service=git-upload-pack",
        // path tricks
        "GET api.github.com/repos/octo-org/hello-world/./issues/1",
        "GET api.github.com/repos/octo-org/hello-world/issues/1/../../../other/issues/1",
        "GET api.github.com/repos/octo-org/hello-world//issues/1",
        "GET api.github.com/repos/octo-org/hello-world%2fissues/1",
        "GET api.github.com/repos/octo-org/hello-world%2Fissues/1",
        "GET api.github.com/repos/octo-org/hello-world/%2e%2e/other/issues/1",
        "GET api.github.com/repos/octo-org/hello-world/%2E%2E/other/issues/1",
        "GET api.github.com/repos/octo-org/hello-world%5c..%5cother/issues/1",
        "GET api.github.com/repos/octo-org/hello-world%5C..%5Cother/issues/1",
        "GET api.github.com/repos/octo-org/hello-world\\..\\other/issues/1",
        "GET api.github.com/repos/octo-org/hello-world/issues/1\t",
        "GET api.github.com/repos/octo-org/hello-world/issues/1%00",
        "GET api.github.com/repos/octo-org/hello-world/contents/%ff%fe",
        "GET api.github.com/repos/octo-org/hello-world/contents/é",
        // never: merge, auto-merge, admin, keys, tokens
        "PUT api.github.com/repos/octo-org/hello-world/pulls/1/merge",
        "DELETE api.github.com/repos/octo-org/hello-world",
        "PATCH api.github.com/repos/octo-org/hello-world",
        "POST api.github.com/repos/octo-org/hello-world/keys",
        "GET api.github.com/repos/octo-org/hello-world/actions/secrets/public-key",
        "POST api.github.com/app/installations/42/access_tokens",
        "POST api.github.com/APP/installations/42/access_tokens",
        "DELETE api.github.com/installation/token",
        "POST api.github.com/applications/Iv1.x/token",
        "POST open.feishu.cn/open-apis/auth/v3/tenant_access_token/internal",
        "POST open.feishu.cn/open-apis/auth/v3/app_access_token/internal",
        "GET evil.example/anything",
    ];
    for line in denied {
        assert!(
            matches!(decide(&book, &worker, line), Decision::Deny(_)),
            "{line:?} was allowed"
        );
    }
}

#[test]
fn a_worker_can_do_its_job_and_messages_are_marked() {
    let book = shipped_book();
    let worker = ["github-worker", "feishu-send", "model-api"];
    let cases = [
        (
            "GET api.github.com/repos/Octo-Org/Hello-World/issues/3",
            None,
        ),
        (
            "GET github.com/octo-org/hello-world/info/refs?service=git-upload-pack",
            None,
        ),
        ("POST github.com/octo-org/hello-world/git-upload-pack", None),
        (
            "GET github.com/octo-org/hello-world.git/info/refs?service=git-receive-pack",
            None,
        ),
        (
            "POST api.github.com/repos/octo-org/hello-world/pulls/4/requested_reviewers",
            None,
        ),
        ("POST api.openai.com/v1/chat/completions", None),
        (
            "POST api.github.com/repos/octo-org/hello-world/issues/3/comments",
            Some(("github_issue_comment", "octo-org/hello-world#3")),
        ),
        (
            "PATCH api.github.com/repos/octo-org/hello-world/issues/comments/77",
            Some((
                "github_issue_comment_edit",
                "octo-org/hello-world/issues/comments/77",
            )),
        ),
        (
            "POST api.github.com/repos/octo-org/hello-world/pulls",
            Some(("github_pull_request", "octo-org/hello-world")),
        ),
        (
            "PATCH api.github.com/repos/octo-org/hello-world/pulls/4",
            Some(("github_pull_request_edit", "octo-org/hello-world#4")),
        ),
        (
            "POST api.github.com/repos/octo-org/hello-world/pulls/4/comments/88/replies",
            Some((
                "github_review_comment_reply",
                "octo-org/hello-world#4/comments/88",
            )),
        ),
        (
            "POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id",
            Some(("feishu_message", "chat_id")),
        ),
        (
            "POST open.feishu.cn/open-apis/im/v1/messages/om_1/reply",
            Some(("feishu_reply", "om_1")),
        ),
    ];
    for (line, message) in cases {
        let Decision::Allow(a) = decide(&book, &worker, line) else {
            panic!("{line} denied")
        };
        let got = a
            .message
            .as_ref()
            .map(|m| (m.kind.as_str(), m.target.as_str()));
        assert_eq!(got, message, "{line}");
    }
    // Edits and closes name the object, which must be the identity's own.
    let own = |line: &str| match decide(&book, &worker, line) {
        Decision::Allow(a) => a.own.map(|o| (o.kind, o.id)),
        Decision::Deny(d) => panic!("{line}: {}", d.reason),
    };
    let owned = |kind: &str, id: &str| Some((kind.to_owned(), id.to_owned()));
    assert_eq!(
        own("PATCH api.github.com/repos/octo-org/hello-world/issues/comments/77"),
        owned("github_issue_comment", "77")
    );
    assert_eq!(
        own("PATCH api.github.com/repos/octo-org/hello-world/pulls/4"),
        owned("github_pull_request", "4")
    );
    // The router alone speaks in people's threads: a worker comments,
    // answers reviewers and asks for reviews only on a PR it opened.
    for (line, pull) in [
        (
            "POST api.github.com/repos/octo-org/hello-world/issues/3/comments",
            "3",
        ),
        (
            "POST api.github.com/repos/octo-org/hello-world/pulls/4/comments/88/replies",
            "4",
        ),
        (
            "POST api.github.com/repos/octo-org/hello-world/pulls/4/requested_reviewers",
            "4",
        ),
    ] {
        assert_eq!(own(line), owned("github_pull_request", pull), "{line}");
    }
    let fork = Vars::from([
        ("repo".to_owned(), "octo-org/hello-world".to_owned()),
        ("fork".to_owned(), "bot/hello-world".to_owned()),
    ]);
    let head =
        parse_example("POST api.github.com/repos/octo-org/hello-world/issues/3/comments").unwrap();
    let Decision::Allow(a) = book.check(&head, &["github-worker-fork".to_owned()], &fork) else {
        panic!("fork comment denied")
    };
    assert_eq!(
        a.own.map(|o| (o.kind, o.id)),
        owned("github_pull_request", "3")
    );
    for line in [
        "POST api.github.com/repos/octo-org/hello-world/pulls",
        "GET api.github.com/repos/octo-org/hello-world/issues/comments/77",
    ] {
        assert_eq!(own(line), None, "{line}");
    }
    let Decision::Allow(push) = decide(
        &book,
        &worker,
        "POST github.com/octo-org/hello-world.git/git-receive-pack",
    ) else {
        panic!("push denied")
    };
    assert_eq!(push.inject, Injection::GitBasic);
    let BodyCheck::ReceivePack(policy) = push.body else {
        panic!("push without ref policy")
    };
    let main = crate::receive_pack::RefUpdate {
        old: "1".repeat(40),
        new: "2".repeat(40),
        name: "refs/heads/main".into(),
    };
    assert!(crate::receive_pack::check(&[main], &policy).is_err());
    let delete = crate::receive_pack::RefUpdate {
        old: "1".repeat(40),
        new: "0".repeat(40),
        name: "refs/heads/gatehouse/x".into(),
    };
    assert!(crate::receive_pack::check(&[delete], &policy).is_err());
}

#[test]
fn read_only_identities_cannot_write() {
    let book = shipped_book();
    for line in [
        "POST api.github.com/repos/octo-org/hello-world/pulls",
        "POST github.com/octo-org/hello-world.git/git-receive-pack",
        "GET github.com/octo-org/hello-world.git/info/refs?service=git-receive-pack",
        "POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id",
    ] {
        assert!(
            matches!(
                decide(&book, &["github-read", "feishu-read"], line),
                Decision::Deny(_)
            ),
            "{line}"
        );
    }
    let Decision::Allow(a) = decide(&book, &["github-read"], "POST api.github.com/graphql") else {
        panic!("graphql denied")
    };
    let BodyCheck::GraphQl(allow) = a.body else {
        panic!("no graphql check")
    };
    let mutation = br#"{"query":"mutation { addComment(input: {subjectId: \"I_1\", body: \"hi\"}) { clientMutationId } }"}"#;
    let known = crate::graphql::KnownIds::default();
    assert!(crate::graphql::check(mutation, &allow, &known).is_err());
    let read = br#"{"query":"query($o: String!, $n: String!) { repository(owner: $o, name: $n) { issue(number: 1) { title } } }","variables":{"o":"octo-org","n":"hello-world"}}"#;
    assert!(crate::graphql::check(read, &allow, &known).is_ok());
}

proptest::proptest! {
    /// Paths assembled from tricky pieces: whatever the worker set allows is
    /// canonical and stays inside the identity's repository.
    #[test]
    fn allowed_paths_stay_in_the_repository(
        pieces in proptest::collection::vec(proptest::prop_oneof![
            proptest::strategy::Just("repos"), proptest::strategy::Just("octo-org"), proptest::strategy::Just("Hello-World"),
            proptest::strategy::Just("other"), proptest::strategy::Just("issues"), proptest::strategy::Just("1"),
            proptest::strategy::Just("comments"), proptest::strategy::Just(".."), proptest::strategy::Just("."),
            proptest::strategy::Just("%2e%2e"), proptest::strategy::Just("%2F"), proptest::strategy::Just(""),
            proptest::strategy::Just("repositories"), proptest::strategy::Just("pulls"), proptest::strategy::Just("\\"),
        ], 1..8),
        method in proptest::prop_oneof![proptest::strategy::Just("GET"), proptest::strategy::Just("POST"), proptest::strategy::Just("PATCH")],
    ) {
        let path = format!("/{}", pieces.join("/"));
        let book = shipped_book();
        let head = RequestHead { method, host: "api.github.com", path: &path, query: None };
        let vars = Vars::from([("repo".to_owned(), "octo-org/hello-world".to_owned())]);
        if let Decision::Allow(_) = book.check(&head, &["github-worker".to_owned()], &vars) {
            proptest::prop_assert!(crate::path::check_canonical(path.as_bytes()).is_ok());
            // The API root (`GET /`, links only) is the one path outside
            // the repository the worker may read.
            let api_root = path == "/" && method == "GET";
            proptest::prop_assert!(api_root || in_the_repository(&path), "{} {}", method, path);
        }
    }
}

/// The repository itself (`GET /repos/{repo}`, its metadata) or anything
/// below it; `/repos/octo-org/hello-world-2` is another repository.
fn in_the_repository(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p == "/repos/octo-org/hello-world" || p.starts_with("/repos/octo-org/hello-world/")
}

#[test]
fn the_repository_root_is_allowed_and_stays_in_the_repository() {
    // Found by the property above: the repository's own metadata is allowed.
    let book = shipped_book();
    let vars = Vars::from([("repo".to_owned(), "octo-org/hello-world".to_owned())]);
    for path in ["/repos/octo-org/Hello-World", "/repos/octo-org/hello-world"] {
        let head = RequestHead {
            method: "GET",
            host: "api.github.com",
            path,
            query: None,
        };
        assert!(
            matches!(
                book.check(&head, &["github-worker".to_owned()], &vars),
                Decision::Allow(_)
            ),
            "{path}"
        );
        assert!(in_the_repository(path), "{path}");
    }
    for path in [
        "/repos/octo-org/hello-world-2",
        "/repos/octo-org/other",
        "/repos/octo-org",
    ] {
        assert!(!in_the_repository(path), "{path}");
        let head = RequestHead {
            method: "GET",
            host: "api.github.com",
            path,
            query: None,
        };
        assert!(
            matches!(
                book.check(&head, &["github-worker".to_owned()], &vars),
                Decision::Deny(_)
            ),
            "{path}"
        );
    }
}

#[test]
fn github_permissions_are_the_union_with_write_winning() {
    let book = shipped_book();
    let read = book.github_permissions(&["github-read".to_owned()]);
    assert_eq!(read.get("contents"), Some(&Access::Read));
    assert_eq!(read.get("pull_requests"), Some(&Access::Read));
    let worker = book.github_permissions(&["github-worker".to_owned(), "feishu-send".to_owned()]);
    assert_eq!(worker.get("contents"), Some(&Access::Write));
    assert_eq!(worker.get("issues"), Some(&Access::Write));
    assert_eq!(
        worker.get("checks"),
        Some(&Access::Read),
        "inherited from github-read"
    );
    assert!(!worker.contains_key("administration"));
    assert!(book
        .github_permissions(&["feishu-send".to_owned()])
        .is_empty());
    let bad = SHIPPED[0]
        .1
        .replace("contents = \"read\"", "contents = \"admin\"");
    assert!(RuleSet::parse("github-read.toml", &bad)
        .unwrap_err()
        .to_string()
        .contains("unknown variant `admin`"));
}

#[test]
fn the_router_app_set_loads_and_the_app_jwt_goes_to_app_hooks_only() {
    let text = include_str!("../../../sandbox-profiles/rules/router-github-app.toml");
    let set = RuleSet::parse("router-github-app.toml", text).unwrap();
    assert!(set
        .rules
        .iter()
        .all(|r| r.inject == Injection::GithubAppJwt));
    RuleBook::new([set]).unwrap();
    // Anywhere else the App's JWT (which mints tokens for any repository)
    // is refused when the rule set loads.
    for path in ["/repos/{repo}/issues/{n}", "/app", "/app/hook", "/apps/x"] {
        let rule_set = format!(
            "name = \"x\"\ndescription = \"x\"\nvariables = [\"repo\"]\n\n[[rule]]\nname = \"r\"\nsource = \"s\"\nhost = \"api.github.com\"\nmethods = [\"GET\"]\npath = \"{path}\"\ncredential = \"github\"\ninject = \"github_app_jwt\"\n"
        );
        let error = RuleSet::parse("x.toml", &rule_set).unwrap_err().to_string();
        assert!(error.contains("github_app_jwt"), "{path}: {error}");
    }
}

#[test]
fn a_target_at_the_budget_is_decided_and_one_past_it_is_refused() {
    use crate::path::{MAX_PATH_BYTES, MAX_PATH_SEGMENTS, MAX_QUERY_PAIRS};
    let book = shipped_book();
    let worker = ["github-worker", "feishu-send", "model-api"];
    let contents = "GET api.github.com/repos/octo-org/hello-world/contents";
    // The 4 segments of `contents`, then the file's.
    let deep = |n: usize| format!("{contents}{}", "/a".repeat(n - 4));
    let long = |n: usize| format!("{contents}/{}", "a".repeat(n - 37));
    let pairs = |n: usize| {
        let query = vec!["per_page=1"; n].join("&");
        format!("GET api.github.com/repos/octo-org/hello-world/issues?{query}")
    };
    // (request, the bound it is refused by; None: allowed)
    let cases = [
        (deep(MAX_PATH_SEGMENTS), None),
        (deep(MAX_PATH_SEGMENTS + 1), Some("path segments")),
        (long(MAX_PATH_BYTES), None),
        (long(MAX_PATH_BYTES + 1), Some("bytes in the path")),
        (pairs(MAX_QUERY_PAIRS), None),
        (pairs(MAX_QUERY_PAIRS + 1), Some("query pairs")),
    ];
    for (line, refused) in cases {
        let decision = decide(&book, &worker, &line);
        let ok = match (refused, &decision) {
            (None, Decision::Allow(_)) => true,
            (Some(why), Decision::Deny(d)) => d.reason.contains(why),
            _ => false,
        };
        assert!(ok, "{} bytes: {decision:?}", line.len());
    }
    // The budget is the target's length as forwarded.
    assert_eq!(
        long(MAX_PATH_BYTES).len() - "GET api.github.com".len(),
        MAX_PATH_BYTES
    );
}
