use super::*;

fn allow() -> GraphQlAllow {
    GraphQlAllow {
        query: BTreeSet::from(["repository".to_owned(), "rateLimit".to_owned()]),
        mutation: BTreeSet::from(["addReaction".to_owned()]),
        repository: Some("octo/hello".to_owned()),
    }
}

fn run(body: serde_json::Value) -> Result<GraphQlSummary, Denial> {
    check(body.to_string().as_bytes(), &allow())
}

#[test]
fn allowed_documents_pass() {
    let ok = [
        serde_json::json!({"query": "{ repository(owner: \"octo\", name: \"hello\") { id } }"}),
        serde_json::json!({"query": "query Q($o: String!, $n: String!) { repository(owner: $o, name: $n) { issues(first: 1) { nodes { title } } } }", "variables": {"o": "Octo", "n": "HELLO"}, "operationName": "Q"}),
        serde_json::json!({"query": "query Q($o: String = \"octo\") { repository(owner: $o, name: \"hello\") { id } }"}),
        serde_json::json!({"query": "query { rateLimit { remaining } __typename }"}),
        serde_json::json!({"query": "query { ...F } fragment F on Query { rateLimit { remaining } }"}),
        serde_json::json!({"query": "mutation { addReaction(input: {}) { clientMutationId } }"}),
    ];
    for body in ok {
        assert!(run(body.clone()).is_ok(), "{body} {:?}", run(body.clone()));
    }
    let summary = run(serde_json::json!({"query": "query A { rateLimit { remaining } } mutation B { x: addReaction(input: {}) { clientMutationId } }"})).unwrap();
    assert_eq!(
        summary.operations,
        [
            ("query", Some("A".to_owned())),
            ("mutation", Some("B".to_owned()))
        ]
    );
    assert_eq!(
        summary.root_fields,
        ["mutation.addReaction", "query.rateLimit"]
    );
}

#[test]
fn smuggled_and_malformed_documents_are_denied() {
    let denied = [
        // a comment mutation next to an allowed query; the client picks operationName
        (
            serde_json::json!({"query": "query A { rateLimit { remaining } } mutation B { addComment(input: {subjectId: \"x\", body: \"hi\"}) { clientMutationId } }", "operationName": "A"}),
            "addComment",
        ),
        // hidden behind an alias
        (
            serde_json::json!({"query": "mutation { addReaction: addComment(input: {}) { clientMutationId } }"}),
            "addComment",
        ),
        // hidden in a fragment
        (
            serde_json::json!({"query": "mutation { ...M } fragment M on Mutation { addComment(input: {}) { clientMutationId } }"}),
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
    assert!(check(b"not json", &allow()).is_err());
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
    assert!(check(body.as_bytes(), &a)
        .unwrap_err()
        .reason
        .contains("not pinned"));
}
