use super::*;
use proptest::prelude::*;

const WORKER: &str = r#"
name = "test-worker"
description = "test"
variables = ["repo"]

[[rule]]
name = "issue-read"
source = "test"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/issues/{n}"
credential = "github"
inject = "bearer"

[[rule]]
name = "issues-any"
source = "test"
host = "api.github.com"
methods = ["GET", "POST"]
path = "/repos/{repo}/issues/**"
credential = "github"
inject = "bearer"

[[rule]]
name = "issue-comment"
source = "test"
host = "api.github.com"
methods = ["POST"]
path = "/repos/{repo}/issues/{n}/comments"
credential = "github"
inject = "bearer"
message = { kind = "github_issue_comment", target = "{repo}#{n}", created_id_pointer = "/id" }

[[rule]]
name = "feishu-send"
source = "test"
host = "open.feishu.cn"
methods = ["POST"]
path = "/open-apis/im/v1/messages"
query = { receive_id_type = ["chat_id", "open_id"] }
credential = "feishu"
inject = "feishu_tenant"
message = { kind = "feishu_message", target = "{receive_id_type}", target_body_pointer = "/receive_id", created_id_pointer = "/data/message_id" }

[[rule]]
name = "push"
source = "test"
host = "github.com"
methods = ["POST"]
path = "/{repo}.git/git-receive-pack"
credential = "github"
inject = "git_basic"
receive_pack = { refs = ["refs/heads/gatehouse/*"] }

[[rule]]
name = "graphql"
source = "test"
host = "api.github.com"
methods = ["POST"]
path = "/graphql"
credential = "github"
inject = "bearer"
graphql = { query = ["repository"], repository = "{repo}" }

[example_variables]
repo = "octo/hello"

[[example]]
allow = "GET api.github.com/repos/octo/hello/issues/1"

[[example]]
deny = "GET api.github.com/repos/octo/other/issues/1"
"#;

fn book() -> RuleBook {
    RuleBook::new([RuleSet::parse("test-worker.toml", WORKER).unwrap()]).unwrap()
}

fn sets() -> Vec<String> {
    vec!["test-worker".to_owned()]
}

fn vars() -> Vars {
    Vars::from([("repo".to_owned(), "octo/hello".to_owned())])
}

fn decide(line: &str) -> Decision {
    book().check(&parse_example(line).unwrap(), &sets(), &vars())
}

fn allowed_rule(line: &str) -> Option<String> {
    match decide(line) {
        Decision::Allow(a) => Some(a.rule),
        Decision::Deny(_) => None,
    }
}

#[test]
fn decisions_table() {
    let cases: &[(&str, Option<&str>)] = &[
        ("GET api.github.com/repos/octo/hello/issues/1", Some("issue-read")),
        ("GET api.github.com/repos/OCTO/HELLO/issues/1", Some("issue-read")),
        ("GET API.GITHUB.COM/repos/octo/hello/issues/1", Some("issue-read")),
        ("GET api.github.com/repos/octo/hello/issues/1/events", Some("issues-any")),
        ("POST api.github.com/repos/octo/hello/issues/7/comments", Some("issue-comment")),
        ("POST api.github.com/repos/Octo/Hello/issues/7/comments", Some("issue-comment")),
        ("POST github.com/octo/hello.git/git-receive-pack", Some("push")),
        ("POST api.github.com/graphql", Some("graphql")),
        ("POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id", Some("feishu-send")),
        ("POST open.feishu.cn/open-apis/im/v1/messages?uuid=1&receive_id_type=open_id", Some("feishu-send")),
        // other repo, alias, other host, method
        ("GET api.github.com/repos/octo/other/issues/1", None),
        ("GET api.github.com/repos/other/hello/issues/1", None),
        ("GET api.github.com/repos/octo/hello-fork/issues/1", None),
        ("GET api.github.com/repositories/1296269/issues/1", None),
        ("GET api.github.com/repositories/1296269", None),
        ("GET api.github.com.evil.com/repos/octo/hello/issues/1", None),
        ("GET evil.com/repos/octo/hello/issues/1", None),
        ("DELETE api.github.com/repos/octo/hello/issues/1", None),
        ("get api.github.com/repos/octo/hello/issues/1", None),
        ("PUT api.github.com/repos/octo/hello/pulls/1/merge", None),
        ("POST github.com/octo/other.git/git-receive-pack", None),
        // path tricks, each refused before matching
        ("GET api.github.com/repos/octo/hello/issues/1/../../../other/issues/1", None),
        ("GET api.github.com/repos/octo/hello/issues/./1", None),
        ("GET api.github.com/repos/octo/hello/issues/%2e%2e/1", None),
        ("GET api.github.com/repos/octo/hello/issues/%2E%2E/1", None),
        ("GET api.github.com/repos/octo/hello%2f..%2fother/issues/1", None),
        ("GET api.github.com/repos/octo/hello%2Fissues/1", None),
        ("GET api.github.com/repos/octo/hello/issues%5c1", None),
        ("GET api.github.com/repos/octo/hello/issues%5C1", None),
        ("GET api.github.com/repos/octo/hello/issues\\1", None),
        ("GET api.github.com//repos/octo/hello/issues/1", None),
        ("GET api.github.com/repos//octo/hello/issues/1", None),
        ("GET api.github.com/repos/octo/hello/issues/1\r\n", None),
        ("GET api.github.com/repos/octo/hello/issues/1\0", None),
        ("GET api.github.com/repos/octo/hello/issues/1;x", None),
        ("GET api.github.com/repos/%6fcto/hello/issues/1", None),
        // query constraints
        ("POST open.feishu.cn/open-apis/im/v1/messages", None),
        ("POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=email", None),
        ("POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&receive_id_type=email", None),
        ("POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&receive%5fid_type=email", None),
        ("POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&x=%zz", None),
        // a route whose body is checked takes no query its rule does not list
        ("POST api.github.com/graphql?query=mutation%7Bx%7D", None),
        ("POST api.github.com/graphql?%71uery=mutation%7Bx%7D", None),
        ("POST api.github.com/graphql?", None),
        ("POST api.github.com/graphql?&", None),
        ("POST api.github.com/graphql?=x", None),
        ("POST api.github.com/graphql?x", None),
        ("POST api.github.com/graphql?a=1;query=x", None),
        ("POST github.com/octo/hello.git/git-receive-pack?x=1", None),
        // token endpoints, never
        ("POST api.github.com/app/installations/1/access_tokens", None),
        ("POST open.feishu.cn/open-apis/auth/v3/tenant_access_token/internal", None),
    ];
    for (line, expected) in cases {
        assert_eq!(allowed_rule(line).as_deref(), *expected, "{line:?}");
    }
}

#[test]
fn message_marker_wins_and_is_rendered() {
    let Decision::Allow(a) = decide("POST api.github.com/repos/Octo/Hello/issues/7/comments")
    else {
        panic!("denied")
    };
    assert_eq!(a.rule, "issue-comment");
    assert_eq!(a.credential, "github");
    assert_eq!(a.inject, Injection::Bearer);
    let m = a.message.unwrap();
    assert_eq!(
        (
            m.kind.as_str(),
            m.target.as_str(),
            m.created_id_pointer.as_str()
        ),
        ("github_issue_comment", "octo/hello#7", "/id")
    );
    let Decision::Allow(a) =
        decide("POST open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id")
    else {
        panic!("denied")
    };
    let m = a.message.unwrap();
    assert_eq!(
        (m.target.as_str(), m.target_body_pointer.as_deref()),
        ("chat_id", Some("/receive_id"))
    );
    assert_eq!(a.inject, Injection::FeishuTenant);
}

#[test]
fn body_checks_are_bound() {
    let Decision::Allow(a) = decide("POST github.com/octo/hello.git/git-receive-pack") else {
        panic!("denied")
    };
    assert!(matches!(a.body, BodyCheck::ReceivePack(ref p) if !p.delete && p.refs.len() == 1));
    assert_eq!(a.inject, Injection::GitBasic);
    let Decision::Allow(a) = decide("POST api.github.com/graphql") else {
        panic!("denied")
    };
    let BodyCheck::GraphQl(g) = a.body else {
        panic!("no graphql check")
    };
    assert_eq!(g.repository.as_deref(), Some("octo/hello"));
}

#[test]
fn denials_say_why() {
    let reason = |line| match decide(line) {
        Decision::Deny(d) => {
            assert_eq!(d.rule_sets_tried, sets());
            d.reason
        }
        Decision::Allow(a) => panic!("allowed by {}", a.rule),
    };
    assert!(reason("GET evil.com/x").contains("no rule of this identity names host evil.com"));
    assert!(reason("GET api.github.com/repos/octo/other/issues/1").contains("allows the path"));
    assert!(reason("DELETE api.github.com/repos/octo/hello/issues/1").contains("allows only GET"));
    assert!(reason("GET api.github.com/repos/a/../b").contains("not canonical"));
    assert!(
        reason("POST api.github.com/app/installations/1/access_tokens").contains("never allowed")
    );
    assert!(reason("POST open.feishu.cn/open-apis/im/v1/messages").contains("receive_id_type"));
}

#[test]
fn identity_problems_deny() {
    let head = parse_example("GET api.github.com/repos/octo/hello/issues/1").unwrap();
    let unknown = vec!["nope".to_owned()];
    assert!(matches!(
        book().check(&head, &unknown, &vars()),
        Decision::Deny(_)
    ));
    assert!(matches!(
        book().check(&head, &sets(), &Vars::new()),
        Decision::Deny(_)
    ));
    assert!(matches!(
        book().check(&head, &[], &vars()),
        Decision::Deny(_)
    ));
    let bad = Vars::from([("repo".to_owned(), "octo/../x".to_owned())]);
    assert!(matches!(
        book().check(&head, &sets(), &bad),
        Decision::Deny(_)
    ));
    assert_eq!(
        book().check_identity(&unknown, &vars()),
        Err(RuleError::UnknownRuleSet("nope".into()))
    );
    assert!(matches!(
        book().check_identity(&sets(), &Vars::new()),
        Err(RuleError::Variable { .. })
    ));
    assert_eq!(book().check_identity(&sets(), &vars()), Ok(()));
}

const CHILD: &str = r#"
name = "child"
description = "extends test-worker"
extends = ["test-worker"]
variables = ["repo"]

[[rule]]
name = "pull-read"
source = "test"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/pulls/{n}"
credential = "github"
inject = "bearer"

[example_variables]
repo = "octo/hello"

[[example]]
allow = "GET api.github.com/repos/octo/hello/issues/1"

[[example]]
allow = "GET api.github.com/repos/octo/hello/pulls/1"
"#;

#[test]
fn extends_includes_parent_rules_and_checks_examples_after() {
    let parent = RuleSet::parse("w.toml", WORKER).unwrap();
    let child = RuleSet::parse("c.toml", CHILD).unwrap();
    let book = RuleBook::new([child.clone(), parent.clone()]).unwrap();
    let head = parse_example("GET api.github.com/repos/octo/hello/issues/1").unwrap();
    let Decision::Allow(a) = book.check(&head, &["child".to_owned()], &vars()) else {
        panic!("denied")
    };
    assert_eq!(
        (a.rule_set.as_str(), a.rule.as_str()),
        ("child", "issue-read")
    );
    assert_eq!(
        book.get("child").unwrap().rules.len(),
        parent.rules.len() + 1
    );
    // the parent does not gain the child's rules
    let head = parse_example("GET api.github.com/repos/octo/hello/pulls/1").unwrap();
    assert!(matches!(
        book.check(&head, &sets(), &vars()),
        Decision::Deny(_)
    ));
    // a missing parent, a cycle, a clashing rule name
    assert!(RuleBook::new([child.clone()])
        .unwrap_err()
        .to_string()
        .contains("unknown rule set `test-worker`"));
    let cyclic = RuleSet::parse(
        "p.toml",
        &WORKER.replacen(
            "description = \"test\"",
            "description = \"test\"\nextends = [\"child\"]",
            1,
        ),
    )
    .unwrap();
    assert!(RuleBook::new([child.clone(), cyclic])
        .unwrap_err()
        .to_string()
        .contains("cycle"));
    let clash = RuleSet::parse("c.toml", &CHILD.replace("pull-read", "issue-read")).unwrap();
    assert!(RuleBook::new([clash, parent])
        .unwrap_err()
        .to_string()
        .contains("also defined"));
}

#[test]
fn a_rule_replaces_an_extended_sets_rule_in_its_place() {
    let parent = RuleSet::parse("w.toml", WORKER).unwrap();
    let position = |book: &RuleBook, name: &str| {
        let rules = &book.get("child").unwrap().rules;
        rules.iter().position(|r| r.name == name)
    };
    // `pull-read` takes `issue-read`'s place in the order.
    let replacing = CHILD.replace(
        "name = \"pull-read\"\n",
        "name = \"pull-read\"\nreplaces = \"issue-read\"\n",
    );
    let child = RuleSet::parse("c.toml", &replacing).unwrap();
    let book = RuleBook::new([child, parent.clone()]).unwrap();
    let at = parent.rules.iter().position(|r| r.name == "issue-read");
    assert!(at.is_some());
    assert_eq!(position(&book, "pull-read"), at);
    assert_eq!(position(&book, "issue-read"), None);
    assert_eq!(book.get("child").unwrap().rules.len(), parent.rules.len());
    // Replacing what no extended set has does not load.
    let nothing = CHILD.replace(
        "name = \"pull-read\"\n",
        "name = \"pull-read\"\nreplaces = \"no-such-rule\"\n",
    );
    let err = RuleBook::new([RuleSet::parse("c.toml", &nothing).unwrap(), parent])
        .unwrap_err()
        .to_string();
    assert!(err.contains("which no extended set defines"), "{err}");
}

#[test]
fn bad_rule_sets_are_refused_with_the_key() {
    let swap = |from: &str, to: &str| {
        assert!(WORKER.contains(from), "{from}");
        let text = WORKER.replacen(from, to, 1);
        RuleSet::parse("w.toml", &text)
            .and_then(|set| RuleBook::new([set]))
            .unwrap_err()
            .to_string()
    };
    assert!(
        swap("name = \"issue-read\"", "name = \"issue-read\"\nbogus = 1")
            .contains("unknown field `bogus`")
    );
    assert!(swap("source = \"test\"", "source = \"\"").contains("rule[0].source"));
    assert!(swap("methods = [\"GET\"]", "methods = [\"get\"]").contains("rule[0].methods"));
    assert!(
        swap("host = \"api.github.com\"", "host = \"API.github.com\"").contains("rule[0].host")
    );
    assert!(swap(
        "path = \"/repos/{repo}/issues/{n}\"",
        "path = \"/repos/{repo}/../x\""
    )
    .contains("rule[0].path"));
    assert!(swap(
        "path = \"/repos/{repo}/issues/{n}\"",
        "path = \"/app/installations/{n}/access_tokens\""
    )
    .contains("rule[0].path"));
    assert!(swap(
        "path = \"/repos/{repo}/issues/{n}\"",
        "path = \"/open-apis/auth/v3/**\""
    )
    .contains("fetched by the proxy only"));
    assert!(swap("inject = \"bearer\"", "inject = \"cookie\"").contains("unknown variant"));
    assert!(swap("name = \"issues-any\"", "name = \"issue-read\"").contains("rule[1].name"));
    assert!(
        swap("receive_pack = { refs = [\"refs/heads/gatehouse/*\"] }", "")
            .contains("rule[4].receive_pack")
    );
    assert!(swap(
        "receive_pack = { refs = [\"refs/heads/gatehouse/*\"] }",
        "receive_pack = { refs = [\"heads/x\"] }"
    )
    .contains("rule[4].receive_pack"));
    assert!(swap(
        "graphql = { query = [\"repository\"], repository = \"{repo}\" }",
        ""
    )
    .contains("rule[5].graphql"));
    assert!(swap(", repository = \"{repo}\"", "").contains("pin"));
    // A GraphQL rule's messages are its mutations', never a fixed one.
    assert!(swap(
        "graphql = { query = [\"repository\"], repository = \"{repo}\" }",
        "graphql = { query = [\"repository\"], repository = \"{repo}\" }\nmessage = { kind = \"github_issue_comment\", target = \"{repo}\", created_id_pointer = \"/id\" }"
    )
    .contains("rule[5].message"));
    assert!(swap(
        "allow = \"GET api.github.com/repos/octo/hello/issues/1\"",
        "allow = \"GET api.github.com/repos/octo/other/issues/1\""
    )
    .contains("should be allowed but was denied"));
    assert!(swap(
        "deny = \"GET api.github.com/repos/octo/other/issues/1\"",
        "deny = \"GET api.github.com/repos/octo/hello/issues/1\""
    )
    .contains("should be denied but was allowed by rule `issue-read`"));
    assert!(swap("deny = \"GET", "allow = \"x\"\ndeny = \"GET").contains("exactly one"));
    assert_eq!(
        RuleBook::new([
            RuleSet::parse("a", WORKER).unwrap(),
            RuleSet::parse("b", WORKER).unwrap()
        ]),
        Err(RuleError::Duplicate("test-worker".into()))
    );
}

#[test]
fn own_must_name_a_capture_and_a_kind_the_set_creates() {
    let set = |own: &str| {
        let text = format!(
            r#"
name = "editor"
description = "test"
variables = ["repo"]

[[rule]]
name = "comment"
source = "test"
host = "api.github.com"
methods = ["POST"]
path = "/repos/{{repo}}/issues/{{n}}/comments"
credential = "github"
inject = "bearer"
message = {{ kind = "github_issue_comment", target = "{{repo}}#{{n}}", created_id_pointer = "/id" }}

[[rule]]
name = "edit"
source = "test"
host = "api.github.com"
methods = ["PATCH"]
path = "/repos/{{repo}}/issues/comments/{{comment_id}}"
credential = "github"
inject = "bearer"
{own}
"#
        );
        RuleSet::parse("e.toml", &text).and_then(|s| RuleBook::new([s]))
    };
    let good = set(r#"own = { id = "comment_id", created_as = "github_issue_comment" }"#).unwrap();
    let head = RequestHead {
        method: "PATCH",
        host: "api.github.com",
        path: "/repos/octo/hello/issues/comments/9",
        query: None,
    };
    let vars = Vars::from([("repo".to_owned(), "octo/hello".to_owned())]);
    let Decision::Allow(a) = good.check(&head, &["editor".to_owned()], &vars) else {
        panic!("denied")
    };
    assert_eq!(
        a.own,
        Some(OwnedObject {
            kind: "github_issue_comment".into(),
            id: "9".into()
        })
    );
    let cases = [
        (
            r#"own = { id = "n", created_as = "github_issue_comment" }"#,
            "rule[1].own",
        ),
        (
            r#"own = { id = "repo", created_as = "github_issue_comment" }"#,
            "rule[1].own",
        ),
        (
            r#"own = { id = "comment_id", created_as = "" }"#,
            "rule[1].own",
        ),
        // Learned repository forms are kept beside created objects; no rule
        // may count them as the worker's own.
        (
            r#"own = { id = "comment_id", created_as = "github_repository_id" }"#,
            "rule[1].own",
        ),
        (
            r#"own = { id = "comment_id", created_as = "github_repository_name" }"#,
            "rule[1].own",
        ),
        (
            r#"own = { id = "comment_id", created_as = "github_pull_request" }"#,
            "rule `edit`.own.created_as",
        ),
        (
            r#"own = { id = "comment_id", created_as = "github_issue_comment", by = "x" }"#,
            "unknown field `by`",
        ),
        (r#"own = "comment_id""#, "invalid type"),
    ];
    for (own, key) in cases {
        let err = set(own).unwrap_err().to_string();
        assert!(err.contains(key), "{own}: {err}");
    }
}

proptest! {
    /// No request for another repository is ever allowed, whatever the
    /// path suffix and method.
    #[test]
    fn other_repos_never_allowed(owner in "[a-zA-Z0-9-]{1,8}", name in "[a-zA-Z0-9._-]{1,8}", suffix in "(/[a-z0-9]{1,6}){0,4}", method in prop_oneof![Just("GET"), Just("POST"), Just("PATCH")]) {
        prop_assume!(!format!("{owner}/{name}").eq_ignore_ascii_case("octo/hello"));
        let path = format!("/repos/{owner}/{name}/issues{suffix}");
        let head = RequestHead { method, host: "api.github.com", path: &path, query: None };
        prop_assert!(matches!(book().check(&head, &sets(), &vars()), Decision::Deny(_)));
    }

    /// Token endpoints are denied on any host, in any case.
    #[test]
    fn token_endpoints_never_allowed(host in prop_oneof![Just("api.github.com"), Just("open.feishu.cn")], upper in any::<bool>(), tail in "[a-z0-9_/]{0,20}") {
        for prefix in ["/app/installations/", "/open-apis/auth/"] {
            let path = format!("{prefix}{tail}");
            let path = if upper { path.to_ascii_uppercase() } else { path };
            let head = RequestHead { method: "POST", host, path: &path, query: None };
            prop_assert!(matches!(book().check(&head, &sets(), &vars()), Decision::Deny(_)));
        }
    }
}
