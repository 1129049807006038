//! Any body: the GraphQL check never panics, costs at most a bound, and
//! what it allows names only listed root fields, of a listed kind; a
//! document it allows that selects the root `repository` is pinned to the
//! identity's repository: the same document is refused for another one.
//! With the worker's mutations allowed, on objects it owns: a document
//! allowed that reaches a mutation that posts (`addComment`,
//! `createPullRequest`) has it as its one message, the created id read
//! under its answer key; one that reaches none has no message.
#![no_main]

use gatehouse_proxy::graphql::{check, GraphQlAllow, KnownIds, MESSAGES};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Generous for a build with sanitizers at 1 MiB; a release build checks
/// the worst 1 MiB body in about a millisecond (`cargo bench --bench rules`).
const MOST: Duration = Duration::from_secs(2);

fn allow(repository: &str) -> GraphQlAllow {
    GraphQlAllow {
        query: BTreeSet::from(["repository".to_owned(), "rateLimit".to_owned()]),
        mutation: BTreeSet::new(),
        repository: Some(repository.to_owned()),
    }
}

/// The worker's GraphQL allowlist (`graphql-worker`), with ids it owns.
fn worker() -> (GraphQlAllow, KnownIds) {
    let allow = GraphQlAllow {
        query: BTreeSet::from(["repository".to_owned(), "rateLimit".to_owned()]),
        mutation: ["createPullRequest", "addComment", "requestReviews"]
            .map(str::to_owned)
            .into(),
        repository: Some("octo/hello".to_owned()),
    };
    let known = KnownIds {
        repositories: BTreeSet::from(["R_1".to_owned()]),
        own_pulls: BTreeSet::from(["PR_1".to_owned()]),
    };
    (allow, known)
}

fn message_properties(body: &[u8]) {
    let (allow, known) = worker();
    let Ok(summary) = check(body, &allow, &known) else {
        return;
    };
    let posts = summary.root_fields.iter().any(|f| {
        MESSAGES
            .iter()
            .any(|(m, _)| f.strip_prefix("mutation.") == Some(*m))
    });
    assert_eq!(posts, summary.message.is_some(), "{summary:?}");
    if let Some(m) = &summary.message {
        assert!(
            m.id_pointer.starts_with(&format!("/data/{}/", m.key)),
            "{m:?}"
        );
    }
}

fn properties(body: &[u8]) {
    message_properties(body);
    let started = Instant::now();
    let verdict = check(body, &allow("octo/hello"), &KnownIds::default());
    assert!(
        started.elapsed() < MOST,
        "a check took {:?}",
        started.elapsed()
    );
    let Ok(summary) = verdict else {
        return;
    };
    assert!(summary.operations.iter().all(|(kind, _)| *kind == "query"));
    // `__typename` is always allowed at the root: it names the root type
    // and reaches nothing.
    assert!(summary
        .root_fields
        .iter()
        .all(|f| { f == "query.repository" || f == "query.rateLimit" || f == "query.__typename" }));
    if summary.root_fields.iter().any(|f| f == "query.repository") {
        assert!(
            check(body, &allow("other/place"), &KnownIds::default()).is_err(),
            "repository not pinned"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    properties(data);
    // Also feed the bytes as the document itself.
    if let Ok(text) = std::str::from_utf8(data) {
        properties(serde_json_body(text).as_bytes());
    }
});

fn serde_json_body(query: &str) -> String {
    let escaped: String = query
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
            c => vec![c],
        })
        .collect();
    format!("{{\"query\":\"{escaped}\"}}")
}
