//! Any body: the GraphQL check never panics, and what it allows names only
//! listed root fields.
#![no_main]

use gatehouse_proxy::graphql::{check, GraphQlAllow};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;

fuzz_target!(|data: &[u8]| {
    let allow = GraphQlAllow {
        query: BTreeSet::from(["repository".to_owned(), "rateLimit".to_owned()]),
        mutation: BTreeSet::new(),
        repository: Some("octo/hello".to_owned()),
    };
    if let Ok(summary) = check(data, &allow) {
        assert!(summary.root_fields.iter().all(|f| f.starts_with("query.")));
    }
    // Also feed the bytes as the document itself.
    if let Ok(text) = std::str::from_utf8(data) {
        let body = serde_json_body(text);
        if let Ok(summary) = check(body.as_bytes(), &allow) {
            assert!(summary.operations.iter().all(|(kind, _)| *kind == "query"));
        }
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
