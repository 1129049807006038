//! Mutation pinning, exhaustively: each allowed shape beside the tricks
//! that would move it to another repository or a person's pull request.

use std::collections::BTreeSet;

use serde_json::json;

use crate::graphql::{
    check, GraphQlAllow, KnownIds, Learn, MessageField, PULL_REQUEST_NODE, REPOSITORY_NODE,
};

fn allow() -> GraphQlAllow {
    GraphQlAllow {
        query: BTreeSet::from(["repository".to_owned(), "rateLimit".to_owned()]),
        mutation: ["createPullRequest", "addComment", "requestReviews"]
            .map(str::to_owned)
            .into(),
        repository: Some("acme/widgets".to_owned()),
    }
}

fn known() -> KnownIds {
    KnownIds {
        repositories: BTreeSet::from(["R_mine".to_owned()]),
        own_pulls: BTreeSet::from(["PR_mine".to_owned()]),
    }
}

fn run(body: serde_json::Value) -> Result<Vec<Learn>, String> {
    check(body.to_string().as_bytes(), &allow(), &known())
        .map(|s| s.learn)
        .map_err(|d| d.reason)
}

/// gh 2.23's own documents (api/queries_pr.go, pkg/cmd/pr/shared).
const GH_CREATE: &str = "mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id url } } }";
const GH_COMMENT: &str = "mutation CommentCreate($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }";
const GH_REVIEWS: &str = "mutation PullRequestCreateRequestReviews($input: RequestReviewsInput!) { requestReviews(input: $input) { clientMutationId } }";

#[test]
fn the_mutations_gh_makes_pass_on_the_identitys_objects() {
    let created = Learn {
        kind: PULL_REQUEST_NODE,
        pointer: "/data/createPullRequest/pullRequest/id".into(),
    };
    let cases = [
        (
            json!({"query": GH_CREATE, "variables": {"input": {"repositoryId": "R_mine", "title": "t", "baseRefName": "main", "headRefName": "gatehouse/x"}}}),
            vec![created.clone()],
        ),
        (
            json!({"query": GH_COMMENT, "variables": {"input": {"subjectId": "PR_mine", "body": "done"}}}),
            vec![],
        ),
        (
            json!({"query": GH_REVIEWS, "variables": {"input": {"pullRequestId": "PR_mine", "userIds": ["U_1"], "union": true}}}),
            vec![],
        ),
        // inline, with a variable inside, with a default
        (
            json!({"query": "mutation { createPullRequest(input: {repositoryId: \"R_mine\", title: \"t\"}) { pullRequest { id url } } }"}),
            vec![created.clone()],
        ),
        (
            json!({"query": "mutation($s: ID!) { addComment(input: {subjectId: $s, body: \"b\"}) { commentEdge { node { url } } } }", "variables": {"s": "PR_mine"}}),
            vec![],
        ),
        (
            json!({"query": "mutation($i: AddCommentInput = {subjectId: \"PR_mine\", body: \"b\"}) { addComment(input: $i) { commentEdge { node { url } } } }"}),
            vec![],
        ),
        // an alias renames the answer's key, which is what is learnt
        (
            json!({"query": "mutation { made: createPullRequest(input: {repositoryId: \"R_mine\"}) { pullRequest { id url } } }"}),
            vec![Learn {
                kind: PULL_REQUEST_NODE,
                pointer: "/data/made/pullRequest/id".into(),
            }],
        ),
        // several pinned mutations in one document, each checked
        (
            json!({"query": "mutation { a: addComment(input: {subjectId: \"PR_mine\", body: \"1\"}) { commentEdge { node { url } } } b: requestReviews(input: {pullRequestId: \"PR_mine\"}) { clientMutationId } }"}),
            vec![],
        ),
        // through a fragment
        (
            json!({"query": "mutation { ...M } fragment M on Mutation { addComment(input: {subjectId: \"PR_mine\", body: \"b\"}) { commentEdge { node { url } } } }"}),
            vec![],
        ),
    ];
    for (body, learn) in cases {
        assert_eq!(run(body.clone()), Ok(learn), "{body}");
    }
}

#[test]
fn a_mutation_not_provably_pinned_is_refused() {
    let comment =
        |input: serde_json::Value| json!({"query": GH_COMMENT, "variables": {"input": input}});
    let create =
        |input: serde_json::Value| json!({"query": GH_CREATE, "variables": {"input": input}});
    // (body, words the refusal must hold)
    let cases = [
        // another repository, a person's pull request, an issue
        (
            create(json!({"repositoryId": "R_other", "title": "t"})),
            "another",
        ),
        (
            comment(json!({"subjectId": "PR_alice", "body": "b"})),
            "not one",
        ),
        (
            comment(json!({"subjectId": "I_issue", "body": "b"})),
            "not one",
        ),
        (
            json!({"query": GH_REVIEWS, "variables": {"input": {"pullRequestId": "PR_alice"}}}),
            "not one",
        ),
        // the pinned key missing, of another type, or the input not an object
        (
            comment(json!({"body": "b"})),
            "string literal or a string variable",
        ),
        (
            comment(json!({"subjectId": ["PR_mine"], "body": "b"})),
            "string literal",
        ),
        (
            json!({"query": GH_COMMENT, "variables": {"input": "PR_mine"}}),
            "string literal",
        ),
        (json!({"query": GH_COMMENT}), "string literal"),
        (
            json!({"query": "mutation { addComment(input: {subjectId: 7, body: \"b\"}) { commentEdge { node { url } } } }"}),
            "string literal",
        ),
        (
            json!({"query": "mutation($s: ID) { addComment(input: {subjectId: $s, body: \"b\"}) { commentEdge { node { url } } } }"}),
            "string literal",
        ),
        // a second argument, or another name for it
        (
            json!({"query": "mutation { addComment(input: {subjectId: \"PR_mine\"}, input: {subjectId: \"PR_alice\"}) { commentEdge { node { url } } } }"}),
            "exactly one argument",
        ),
        (
            json!({"query": "mutation { addComment(data: {subjectId: \"PR_mine\"}) { clientMutationId } }"}),
            "only `input`",
        ),
        // a repeated key in an object literal: the parser keeps the last,
        // which is refused as it is, or caught by the token count
        (
            json!({"query": "mutation { addComment(input: {subjectId: \"PR_mine\", subjectId: \"PR_alice\", body: \"b\"}) { commentEdge { node { url } } } }"}),
            "PR_alice is not one",
        ),
        (
            json!({"query": "mutation { addComment(input: {subjectId: \"PR_alice\", subjectId: \"PR_mine\", body: \"b\"}) { commentEdge { node { url } } } }"}),
            "written 2 times",
        ),
        // the same key in the document outside the mutation's input
        (
            json!({"query": "mutation($i: AddCommentInput = {subjectId: \"PR_alice\"}) { addComment(input: $i) { commentEdge { node { url } } } }", "variables": {"i": {"subjectId": "PR_mine", "body": "b"}}}),
            "written 1 times",
        ),
        // an extra mutation beside an allowed one, or hidden by an alias
        (
            json!({"query": "mutation { addComment(input: {subjectId: \"PR_mine\", body: \"b\"}) { commentEdge { node { url } } } mergePullRequest(input: {pullRequestId: \"PR_mine\"}) { clientMutationId } }"}),
            "mergePullRequest",
        ),
        (
            json!({"query": "mutation { addComment: deleteIssue(input: {issueId: \"I_1\"}) { clientMutationId } }"}),
            "deleteIssue",
        ),
        // the second of two operations, whatever operationName says
        (
            json!({"query": "mutation A { addComment(input: {subjectId: \"PR_mine\", body: \"b\"}) { commentEdge { node { url } } } } mutation B { addComment(input: {subjectId: \"PR_alice\", body: \"b\"}) { commentEdge { node { url } } } }", "operationName": "A"}),
            "PR_alice",
        ),
    ];
    for (body, needle) in cases {
        let got = run(body.clone());
        let Err(reason) = &got else {
            panic!("{body} allowed: {got:?}")
        };
        assert!(reason.contains(needle), "{body}: {reason}");
    }
    // A JSON key twice never reaches the pin (one meaning per document).
    let twice = br#"{"query":"mutation($i: AddCommentInput!) { addComment(input: $i) { commentEdge { node { url } } } }","variables":{"i":{"subjectId":"PR_mine","subjectId":"PR_alice"}}}"#;
    assert!(check(twice, &allow(), &known()).is_err());
}

#[test]
fn create_pull_request_waits_for_the_repositorys_id() {
    let body = json!({"query": GH_CREATE, "variables": {"input": {"repositoryId": "R_mine"}}});
    let reason = check(body.to_string().as_bytes(), &allow(), &KnownIds::default())
        .unwrap_err()
        .reason;
    assert!(reason.contains("has not seen yet"), "{reason}");
    // Nothing is pinned to an empty own set either.
    let comment = json!({"query": GH_COMMENT, "variables": {"input": {"subjectId": "PR_mine"}}});
    assert!(check(
        comment.to_string().as_bytes(),
        &allow(),
        &KnownIds::default()
    )
    .is_err());
}

#[test]
fn ids_are_learnt_only_where_the_answer_is_certain() {
    let repo = |pointer: &str| Learn {
        kind: REPOSITORY_NODE,
        pointer: pointer.into(),
    };
    let cases = [
        // gh's repository lookup, as is and aliased (gh's `repo_000:`)
        (
            "{ repository(owner: \"acme\", name: \"widgets\") { id name } }",
            vec![repo("/data/repository/id")],
        ),
        (
            "{ repo_000: repository(owner: \"acme\", name: \"widgets\") { id } }",
            vec![repo("/data/repo_000/id")],
        ),
        // gh's GitHubRepo: `id` in a named fragment, and again in `parent`
        (
            "fragment repo on Repository { id name } query RepositoryInfo($owner: String = \"acme\", $name: String = \"widgets\") { repository(owner: $owner, name: $name) { ...repo parent { ...repo } } }",
            vec![repo("/data/repository/id")],
        ),
        (
            "{ repository(owner: \"acme\", name: \"widgets\") { ... on Repository { id } } }",
            vec![repo("/data/repository/id")],
        ),
        // `id` aliased away, another field answering as `id` (directly or
        // through a fragment): nothing is learnt
        (
            "{ repository(owner: \"acme\", name: \"widgets\") { x: id } }",
            vec![],
        ),
        (
            "{ repository(owner: \"acme\", name: \"widgets\") { id: nameWithOwner } }",
            vec![],
        ),
        (
            "{ repository(owner: \"acme\", name: \"widgets\") { id ... on Repository { id: name } } }",
            vec![],
        ),
        (
            "fragment F on Repository { id: name } { repository(owner: \"acme\", name: \"widgets\") { id ...F } }",
            vec![],
        ),
        // two root fields answering under one key
        (
            "{ r: repository(owner: \"acme\", name: \"widgets\") { id } r: rateLimit { id: remaining } }",
            vec![],
        ),
        // two operations: which one runs is the client's choice
        (
            "query A { repository(owner: \"acme\", name: \"widgets\") { id } } query B { rateLimit { remaining } }",
            vec![],
        ),
        // a created pull request's id, not its aliased one
        (
            "mutation { createPullRequest(input: {repositoryId: \"R_mine\"}) { pullRequest { id: url number } } }",
            vec![],
        ),
        (
            "mutation { createPullRequest(input: {repositoryId: \"R_mine\"}) { pr: pullRequest { id } pullRequest { url } } }",
            vec![],
        ),
    ];
    for (query, learn) in cases {
        assert_eq!(run(json!({ "query": query })), Ok(learn), "{query}");
    }
}

#[test]
fn pinned_key_names_are_counted_as_tokens_only() {
    use super::name_tokens;
    let cases = [
        ("{subjectId: \"x\"}", 1),
        ("{subjectId: \"subjectId\"}", 1),
        ("($subjectId: ID) {subjectId: $subjectId}", 1),
        ("# subjectId\n{subjectId: 1, subjectId: 2}", 2),
        ("{subjectIdx: 1, xsubjectId: 2}", 0),
        ("\"\"\"subjectId\"\"\" subjectId", 1),
    ];
    for (document, count) in cases {
        assert_eq!(name_tokens(document, "subjectId"), count, "{document}");
    }
}

#[test]
fn rules_allow_only_pinnable_mutations_and_only_with_a_pinned_repository() {
    use crate::graphql::GraphQlAllowFile;
    let variables = BTreeSet::from(["repo".to_owned()]);
    let parse = |text: &str| {
        toml::from_str::<GraphQlAllowFile>(text)
            .unwrap()
            .validate(&variables)
    };
    assert!(parse("mutation = [\"addComment\"]\nrepository = \"{repo}\"").is_ok());
    let err = parse("mutation = [\"mergePullRequest\"]\nrepository = \"{repo}\"").unwrap_err();
    assert!(err.contains("cannot be pinned"), "{err}");
    let err = parse("mutation = [\"addComment\"]").unwrap_err();
    assert!(err.contains("repository = "), "{err}");
}

/// The message field of an allowed body, or the refusal.
fn message_of(query: &str, variables: serde_json::Value) -> Result<Option<MessageField>, String> {
    let body = json!({"query": query, "variables": variables});
    check(body.to_string().as_bytes(), &allow(), &known())
        .map(|s| s.message)
        .map_err(|d| d.reason)
}

#[test]
fn a_mutation_that_posts_is_the_bodys_message_whatever_its_spelling() {
    let comment = |key: &str, id: &str| MessageField {
        kind: "github_issue_comment",
        target: "PR_mine".into(),
        key: key.into(),
        id_pointer: format!("/data/{key}/commentEdge/node/{id}"),
    };
    let pull = |key: &str, id: &str| MessageField {
        kind: "github_pull_request",
        target: "acme/widgets".into(),
        key: key.into(),
        id_pointer: format!("/data/{key}/pullRequest/{id}"),
    };
    let on_mine = json!({"input": {"subjectId": "PR_mine", "body": "b"}});
    let in_mine = json!({"input": {"repositoryId": "R_mine", "title": "t"}});
    // (query, variables, message)
    let cases = [
        // gh 2.23's own
        (GH_COMMENT, on_mine.clone(), Some(comment("addComment", "url"))),
        (GH_CREATE, in_mine.clone(), Some(pull("createPullRequest", "url"))),
        // the numeric id where selected
        (
            "mutation($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url databaseId } } } }",
            on_mine.clone(),
            Some(comment("addComment", "databaseId")),
        ),
        (
            "mutation($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { number url } } }",
            in_mine.clone(),
            Some(pull("createPullRequest", "number")),
        ),
        // an alias is the answer's key
        (
            "mutation($input: AddCommentInput!) { said: addComment(input: $input) { commentEdge { node { url } } } }",
            on_mine.clone(),
            Some(comment("said", "url")),
        ),
        (
            "mutation($input: AddCommentInput!) { addComment: addComment(input: $input) { commentEdge { node { url } } } }",
            on_mine.clone(),
            Some(comment("addComment", "url")),
        ),
        // through a named fragment, an inline fragment, a fragment in the payload
        (
            "mutation($input: AddCommentInput!) { ...M } fragment M on Mutation { c: addComment(input: $input) { commentEdge { node { url } } } }",
            on_mine.clone(),
            Some(comment("c", "url")),
        ),
        (
            "mutation($input: AddCommentInput!) { ... on Mutation { addComment(input: $input) { commentEdge { node { url } } } } }",
            on_mine.clone(),
            Some(comment("addComment", "url")),
        ),
        (
            "mutation($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url ...N } } } } fragment N on IssueComment { body }",
            on_mine.clone(),
            Some(comment("addComment", "url")),
        ),
        // under any operation name, beside a query in a second operation
        (
            "query Q { rateLimit { remaining } } mutation Whatever($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }",
            on_mine.clone(),
            Some(comment("addComment", "url")),
        ),
        // beside a mutation that does not post
        (
            "mutation($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } requestReviews(input: {pullRequestId: \"PR_mine\"}) { clientMutationId } }",
            on_mine.clone(),
            Some(comment("addComment", "url")),
        ),
        // nothing posts
        (GH_REVIEWS, json!({"input": {"pullRequestId": "PR_mine"}}), None),
        ("{ rateLimit { remaining } }", json!({}), None),
    ];
    for (query, variables, want) in cases {
        assert_eq!(message_of(query, variables), Ok(want), "{query}");
    }
}

#[test]
fn a_mutation_that_posts_without_a_certain_created_id_or_beside_another_is_refused() {
    // One input for either mutation: each reads its own pinned key.
    let on_mine = json!({"input": {"subjectId": "PR_mine", "repositoryId": "R_mine", "body": "b"}});
    let comment = |selection: &str| {
        format!("mutation($input: AddCommentInput!) {{ addComment(input: $input) {selection} }}")
    };
    // (query, words the refusal must hold)
    let cases = [
        // no created id selected, or not for certain
        (comment("{ clientMutationId }"), "select `commentEdge { node { url } }`"),
        (comment("{ commentEdge { cursor } }"), "select"),
        (comment("{ commentEdge { node { body } } }"), "select"),
        (comment("{ e: commentEdge { node { url } } }"), "select"),
        (comment("{ commentEdge { n: node { url } } }"), "select"),
        (comment("{ commentEdge { node { u: url } } }"), "select"),
        (comment("{ commentEdge { node { url: body } } }"), "select"),
        (comment("{ commentEdge { node { url @skip(if: true) } } }"), "directives"),
        (comment("{ commentEdge @include(if: false) { node { url } } }"), "select"),
        (comment("{ ...P } fragment P on AddCommentPayload { commentEdge { node { url } } }"), "select"),
        (
            "mutation($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id } } }".into(),
            "select `pullRequest { url }`",
        ),
        (
            "mutation($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { number: id } } }".into(),
            "select",
        ),
        // two that post, in one operation, aliased, or in two operations
        (
            "mutation($input: AddCommentInput!) { a: addComment(input: $input) { commentEdge { node { url } } } b: addComment(input: $input) { commentEdge { node { url } } } }".into(),
            "more than one mutation that posts",
        ),
        (
            "mutation A($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } } mutation B($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }".into(),
            "more than one mutation that posts",
        ),
        (
            "mutation($input: AddCommentInput!) { ...M ...M } fragment M on Mutation { addComment(input: $input) { commentEdge { node { url } } } }".into(),
            "more than one mutation that posts",
        ),
        (
            "mutation($input: AddCommentInput!, $pr: CreatePullRequestInput = {repositoryId: \"R_mine\"}) { addComment(input: $input) { commentEdge { node { url } } } createPullRequest(input: $pr) { pullRequest { url } } }".into(),
            "more than one mutation that posts",
        ),
        // its answer key selected again, by another field or operation
        (
            "mutation($input: AddCommentInput!) { x: addComment(input: $input) { commentEdge { node { url } } } x: requestReviews(input: {pullRequestId: \"PR_mine\"}) { clientMutationId } }".into(),
            "more than once",
        ),
        (
            "query Q { addComment: rateLimit { remaining } } mutation M($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }".into(),
            "more than once",
        ),
    ];
    for (query, needle) in cases {
        let got = message_of(&query, on_mine.clone());
        let Err(reason) = &got else {
            panic!("{query} allowed: {got:?}")
        };
        assert!(reason.contains(needle), "{query}: {reason}");
    }
}

/// A root selection of the generated documents: (field text, whether it posts).
const PIECES: [(&str, bool); 7] = [
    ("addComment(input: {subjectId: \"PR_mine\", body: \"b\"}) { commentEdge { node { url } } }", true),
    ("addComment(input: {subjectId: \"PR_mine\", body: \"b\"}) { commentEdge { node { databaseId } } }", true),
    ("addComment(input: {subjectId: \"PR_mine\", body: \"b\"}) { clientMutationId }", true),
    ("createPullRequest(input: {repositoryId: \"R_mine\"}) { pullRequest { id url } }", true),
    ("createPullRequest(input: {repositoryId: \"R_mine\"}) { pullRequest { id } }", true),
    ("requestReviews(input: {pullRequestId: \"PR_mine\"}) { clientMutationId }", false),
    ("rateLimit { remaining }", false),
];
const ALIASES: [&str; 5] = ["", "a: ", "b: ", "addComment: ", "rateLimit: "];

proptest::proptest! {
    // Most generated documents are refused (a mutation in a query, two that
    // post): enough cases for a hundred and more allowed ones.
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
    /// Documents assembled from aliases, fragments and operations: an
    /// allowed one that reaches a mutation that posts has exactly one such
    /// selection, and it is the summary's message, under its answer key.
    #[test]
    fn every_allowed_field_that_posts_is_the_one_message(
        operations in proptest::collection::vec(
            (
                proptest::bool::ANY,
                proptest::collection::vec((0..PIECES.len(), 0..ALIASES.len(), 0..3usize), 1..4),
            ),
            1..3,
        ),
    ) {
        let (mut document, mut fragments, mut posting) = (String::new(), String::new(), 0);
        for (i, (mutation, selections)) in operations.iter().enumerate() {
            let kind = if *mutation { "mutation" } else { "query" };
            let mut body = String::new();
            for (j, (piece, alias, wrap)) in selections.iter().enumerate() {
                let (text, posts) = PIECES[*piece];
                posting += usize::from(posts && *mutation);
                let field = format!("{}{text}", ALIASES[*alias]);
                match wrap {
                    0 => body.push_str(&field),
                    1 => body.push_str(&format!("... on Root {{ {field} }}")),
                    _ => {
                        body.push_str(&format!("...F{i}_{j}"));
                        fragments.push_str(&format!(" fragment F{i}_{j} on Root {{ {field} }}"));
                    }
                }
                body.push(' ');
            }
            document.push_str(&format!("{kind} O{i} {{ {body}}} "));
        }
        document.push_str(&fragments);
        let body = json!({"query": document});
        let Ok(summary) = check(body.to_string().as_bytes(), &allow(), &known()) else {
            return Ok(());
        };
        let posts = summary
            .root_fields
            .iter()
            .any(|f| f == "mutation.addComment" || f == "mutation.createPullRequest");
        proptest::prop_assert_eq!(posts, summary.message.is_some(), "{}", document);
        proptest::prop_assert_eq!(posting, usize::from(posts), "{}", document);
        if let Some(m) = summary.message {
            let prefix = format!("/data/{}/", m.key);
            proptest::prop_assert!(m.id_pointer.starts_with(&prefix), "{:?}", m);
            let aliased = document.contains(&format!("{}: {}", m.key, if m.kind == "github_issue_comment" { "addComment" } else { "createPullRequest" }));
            let named = m.key == "addComment" || m.key == "createPullRequest";
            proptest::prop_assert!(aliased || named, "{:?} {}", m, document);
        }
    }
}
