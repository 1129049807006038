use super::*;

fn allow() -> GraphQlAllow {
    GraphQlAllow {
        query: BTreeSet::from(["repository".to_owned(), "rateLimit".to_owned()]),
        mutation: BTreeSet::from(["addComment".to_owned()]),
        repository: Some("octo/hello".to_owned()),
    }
}

fn known() -> KnownIds {
    KnownIds {
        repositories: BTreeSet::from(["R_own".to_owned()]),
        own_pulls: BTreeSet::from(["PR_own".to_owned()]),
    }
}

fn run(body: serde_json::Value) -> Result<GraphQlSummary, Denial> {
    check(body.to_string().as_bytes(), &allow(), &known())
}

#[test]
fn allowed_documents_pass() {
    let ok = [
        serde_json::json!({"query": "{ repository(owner: \"octo\", name: \"hello\") { id } }"}),
        serde_json::json!({"query": "query Q($o: String!, $n: String!) { repository(owner: $o, name: $n) { issues(first: 1) { nodes { title } } } }", "variables": {"o": "Octo", "n": "HELLO"}, "operationName": "Q"}),
        serde_json::json!({"query": "query Q($o: String = \"octo\") { repository(owner: $o, name: \"hello\") { id } }"}),
        serde_json::json!({"query": "query { rateLimit { remaining } __typename }"}),
        serde_json::json!({"query": "query { ...F } fragment F on Query { rateLimit { remaining } }"}),
        serde_json::json!({"query": "mutation { addComment(input: {subjectId: \"PR_own\", body: \"b\"}) { commentEdge { node { url } } } }"}),
    ];
    for body in ok {
        assert!(run(body.clone()).is_ok(), "{body} {:?}", run(body.clone()));
    }
    let summary = run(serde_json::json!({"query": "query A { rateLimit { remaining } } mutation B { x: addComment(input: {subjectId: \"PR_own\", body: \"b\"}) { commentEdge { node { url } } } }"})).unwrap();
    assert_eq!(
        summary.operations,
        [
            ("query", Some("A".to_owned())),
            ("mutation", Some("B".to_owned()))
        ]
    );
    assert_eq!(
        summary.root_fields,
        ["mutation.addComment", "query.rateLimit"]
    );
}

#[test]
fn smuggled_and_malformed_documents_are_denied() {
    let denied = [
        // a comment mutation next to an allowed query; the client picks operationName
        (
            serde_json::json!({"query": "query A { rateLimit { remaining } } mutation B { addComment(input: {subjectId: \"x\", body: \"hi\"}) { commentEdge { node { url } } } }", "operationName": "A"}),
            "addComment",
        ),
        // hidden behind an alias
        (
            serde_json::json!({"query": "mutation { addReaction: addComment(input: {}) { commentEdge { node { url } } } }"}),
            "addComment",
        ),
        // hidden in a fragment
        (
            serde_json::json!({"query": "mutation { ...M } fragment M on Mutation { addComment(input: {}) { commentEdge { node { url } } } }"}),
            "addComment",
        ),
        // in an inline fragment
        (
            serde_json::json!({"query": "mutation { ... on Mutation { mergePullRequest(input: {}) { clientMutationId } } }"}),
            "mergePullRequest",
        ),
        // nested fragments
        (
            serde_json::json!({"query": "mutation { ...A } fragment A on Mutation { ...B } fragment B on Mutation { enablePullRequestAutoMerge(input: {}) { clientMutationId } }"}),
            "enablePullRequestAutoMerge",
        ),
        // a fragment cycle
        (
            serde_json::json!({"query": "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }"}),
            "fragment",
        ),
        (
            serde_json::json!({"query": "query { ...Missing }"}),
            "unknown GraphQL fragment",
        ),
        // a query field not listed
        (
            serde_json::json!({"query": "{ viewer { login } }"}),
            "viewer",
        ),
        (
            serde_json::json!({"query": "{ node(id: \"x\") { id } }"}),
            "node",
        ),
        // a mutation field that is allowed only as a query
        (
            serde_json::json!({"query": "mutation { rateLimit { remaining } }"}),
            "rateLimit",
        ),
        // other repository
        (
            serde_json::json!({"query": "{ repository(owner: \"octo\", name: \"other\") { id } }"}),
            "octo/other",
        ),
        (
            serde_json::json!({"query": "query($n: String!) { repository(owner: \"octo\", name: $n) { id } }", "variables": {"n": "other"}}),
            "octo/other",
        ),
        (
            serde_json::json!({"query": "{ a: repository(owner: \"octo\", name: \"hello\") { id } b: repository(owner: \"x\", name: \"y\") { id } }"}),
            "x/y",
        ),
        (
            serde_json::json!({"query": "{ repository(owner: \"octo\", name: \"hello\", owner: \"x\") { id } }"}),
            "exactly one",
        ),
        (
            serde_json::json!({"query": "query($n: Int) { repository(owner: \"octo\", name: $n) { id } }", "variables": {"n": 1}}),
            "string",
        ),
        (
            serde_json::json!({"query": "{ repository(owner: \"octo\") { id } }"}),
            "exactly one `name`",
        ),
        // batched, subscriptions, junk
        (
            serde_json::json!([{"query": "{ rateLimit { remaining } }"}]),
            "batched",
        ),
        (
            serde_json::json!({"query": "subscription { x }"}),
            "subscriptions",
        ),
        (
            serde_json::json!({"query": "{ rateLimit { remaining }"}),
            "does not parse",
        ),
        (
            serde_json::json!({"query": "fragment F on Query { rateLimit { remaining } }"}),
            "no operation",
        ),
        (
            serde_json::json!({"query": "{ rateLimit { remaining } }", "extensions": {}}),
            "must be an object",
        ),
        (
            serde_json::json!({"extensions": {"persistedQuery": {"sha256Hash": "x"}}}),
            "must be an object",
        ),
        (serde_json::json!("query"), "must be an object"),
    ];
    for (body, needle) in denied {
        let reason = run(body.clone())
            .map(|s| format!("allowed: {s:?}"))
            .unwrap_or_else(|d| d.reason);
        assert!(reason.contains(needle), "{body}: {reason}");
    }
    assert!(check(b"not json", &allow(), &known()).is_err());
    let deep = format!("{}{}", "{ a ".repeat(200), "}".repeat(200));
    assert!(run(serde_json::json!({ "query": deep })).is_err());
}

#[test]
fn unpinned_repository_is_denied() {
    let mut a = allow();
    a.repository = None;
    let body =
        serde_json::json!({"query": "{ repository(owner: \"octo\", name: \"hello\") { id } }"})
            .to_string();
    assert!(check(body.as_bytes(), &a, &known())
        .unwrap_err()
        .reason
        .contains("not pinned"));
}

/// The expansion attack: a fragment of `n` root fields, spread `spreads`
/// times in each of `operations` operations.
fn expansion_body(n: usize, spreads: usize, operations: usize) -> Vec<u8> {
    let mut query = format!("fragment F on Query {{ {} }}\n", "__typename ".repeat(n));
    for k in 0..operations {
        query.push_str(&format!("query Q{k} {{ {} }}\n", "...F ".repeat(spreads)));
    }
    serde_json::json!({ "query": query })
        .to_string()
        .into_bytes()
}

#[test]
fn the_fragment_expansion_attack_is_refused_quickly() {
    // About 1 MiB: 1000 fields × 256 spreads × 780 operations = 200 million
    // root entries if each operation were expanded on its own budget.
    let body = expansion_body(1000, 256, 780);
    assert!((1_000_000..1 << 20).contains(&body.len()), "{}", body.len());
    let started = std::time::Instant::now();
    let denial = check(&body, &allow(), &known()).unwrap_err();
    let took = started.elapsed();
    assert!(denial.reason.contains("tokens"), "{}", denial.reason);
    // Generous for an unoptimised build on a busy machine; the old check
    // took tens of seconds and gigabytes here.
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");

    // A small document that expands: the root-selection budget ends the walk.
    let denial = check(&expansion_body(100, 50, 1), &allow(), &known()).unwrap_err();
    assert!(
        denial.reason.contains("more than 4096 root fields"),
        "{}",
        denial.reason
    );
}

#[test]
fn the_spread_budget_counts_across_operations() {
    // 200 spreads in each of two operations: each alone is within the limit,
    // the document is not.
    let denial = check(&expansion_body(1, 200, 2), &allow(), &known()).unwrap_err();
    assert!(
        denial.reason.contains("too many GraphQL fragment spreads"),
        "{}",
        denial.reason
    );
    assert!(check(&expansion_body(1, 128, 2), &allow(), &known()).is_ok());
}

#[test]
fn operation_and_selection_limits_are_exact() {
    let ops = |k: usize| {
        let query: String = (0..k)
            .map(|i| format!("query Q{i} {{ __typename }} "))
            .collect();
        serde_json::json!({ "query": query }).to_string()
    };
    assert!(check(ops(MAX_OPERATIONS).as_bytes(), &allow(), &known()).is_ok());
    assert!(
        check(ops(MAX_OPERATIONS + 1).as_bytes(), &allow(), &known())
            .unwrap_err()
            .reason
            .contains("operations")
    );
    let fields = |k: usize| {
        serde_json::json!({ "query": format!("{{ {} }}", "__typename ".repeat(k)) }).to_string()
    };
    assert!(check(fields(MAX_ROOT_SELECTIONS).as_bytes(), &allow(), &known()).is_ok());
    assert!(check(
        fields(MAX_ROOT_SELECTIONS + 1).as_bytes(),
        &allow(),
        &known()
    )
    .unwrap_err()
    .reason
    .contains("root fields"));
    let nested = |d: usize| {
        let query = format!("{{ {}__typename{} }}", "... { ".repeat(d), " }".repeat(d));
        serde_json::json!({ "query": query }).to_string()
    };
    assert!(check(nested(MAX_FRAGMENT_DEPTH).as_bytes(), &allow(), &known()).is_ok());
    assert!(check(
        nested(MAX_FRAGMENT_DEPTH + 1).as_bytes(),
        &allow(),
        &known()
    )
    .unwrap_err()
    .reason
    .contains("nested"));
}

#[test]
fn the_first_disallowed_field_is_named_in_a_long_document() {
    // The disallowed field comes first; thousands of allowed ones follow.
    let query = format!(
        "mutation {{ mergePullRequest(input: {{}}) {{ clientMutationId }} {} }}",
        "__typename ".repeat(4000)
    );
    let denial = run(serde_json::json!({ "query": query })).unwrap_err();
    assert!(
        denial.reason.contains("`mergePullRequest`"),
        "{}",
        denial.reason
    );
}

#[test]
fn a_gh_style_query_passes_with_fragments_and_duplicates_folded() {
    let query = r#"
        query PullRequestByNumber($owner: String!, $repo: String!, $pr_number: Int!) {
          repository(owner: $owner, name: $repo) {
            pullRequest(number: $pr_number) { ...pr }
          }
          ...limits
          ...limits
        }
        fragment pr on PullRequest { id title state author { login } labels(first: 100) { nodes { name } } }
        fragment limits on Query { rateLimit { remaining } __typename }
    "#;
    let summary = run(serde_json::json!({
        "query": query,
        "variables": {"owner": "octo", "repo": "hello", "pr_number": 1},
        "operationName": "PullRequestByNumber",
    }))
    .unwrap();
    assert_eq!(
        summary.root_fields,
        ["query.__typename", "query.rateLimit", "query.repository"]
    );
    assert_eq!(
        summary.operations,
        [("query", Some("PullRequestByNumber".to_owned()))]
    );
}

#[test]
fn tokens_are_counted_outside_strings_and_comments() {
    let cases: &[(&str, usize)] = &[
        ("", 0),
        ("{ a }", 3),
        ("query Q($x: Int = 1) { a(b: $x) ...F }", 21),
        ("{ a(b: \"x y { } ( ) ...\") }", 8),
        ("{ a(b: \"esc \\\" { }\") }", 8),
        ("{ a(b: \"\"\"block \\\"\"\" { } \"\"\") }", 8),
        ("# a comment { } ...\n{ a }", 3),
        ("{ __typename...F...F }", 7),
        ("{ a, b,,, c }", 5),
        ("{ a(b: \"unterminated", 6),
        ("{ é }", 3),
    ];
    for (document, want) in cases {
        assert_eq!(
            count_tokens(document, usize::MAX),
            Ok(*want),
            "{document:?}"
        );
    }
    assert!(count_tokens("{ a }", 2)
        .unwrap_err()
        .contains("more than 2 tokens"));
    assert_eq!(count_tokens("{ a }", 3), Ok(3));
}

#[test]
fn a_document_over_the_token_limit_is_refused_before_parsing() {
    let query = format!("{{ {} }}", "__typename ".repeat(MAX_DOCUMENT_TOKENS));
    let denial = run(serde_json::json!({ "query": query })).unwrap_err();
    assert!(denial.reason.contains("tokens"), "{}", denial.reason);
    // A long string literal is one token: a long comment body still passes.
    let body = "words ".repeat(100_000);
    let query =
        format!("mutation {{ addComment(input: {{subjectId: \"PR_own\", body: \"{body}\"}}) {{ commentEdge {{ node {{ url }} }} }} }}");
    assert!(run(serde_json::json!({ "query": query })).is_ok());
}

#[test]
fn a_second_query_key_in_any_spelling_is_denied() {
    let allowed = r#"{ rateLimit { remaining } }"#;
    let smuggled = r#"mutation { addComment(input: {}) { commentEdge { node { url } } } }"#;
    let ok = format!(r#"{{"query":"{allowed}"}}"#);
    assert!(check(ok.as_bytes(), &allow(), &known()).is_ok(), "control");
    for body in [
        format!(r#"{{"query":"{allowed}","query":"{smuggled}"}}"#),
        format!(r#"{{"query":"{smuggled}","\u0071uery":"{allowed}"}}"#),
        format!(r#"{{"\u0071uery":"{allowed}","query":"{smuggled}"}}"#),
        format!(r#"{{"query":"{allowed}","variables":{{"a":1,"\u0061":2}}}}"#),
    ] {
        let denial = check(body.as_bytes(), &allow(), &known()).expect_err(&body);
        assert!(denial.reason.contains("twice"), "{body}: {}", denial.reason);
    }
}
