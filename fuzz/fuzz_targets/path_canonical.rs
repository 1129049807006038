//! Any bytes: the canonicality check never panics, and what it accepts is
//! ASCII without dot, empty or backslash segments, and matches templates
//! without panicking.
#![no_main]

use gatehouse_proxy::path::{check_canonical, PathTemplate, Vars};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = check_canonical(data) else {
        return;
    };
    assert!(path.is_ascii() && path.starts_with('/') && !path.contains('\\'));
    if path != "/" {
        assert!(path[1..]
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != ".."));
    }
    let variables = BTreeSet::from(["repo".to_owned()]);
    let vars = Vars::from([("repo".to_owned(), "octo/hello".to_owned())]);
    for source in [
        "/repos/{repo}/issues/{n}/comments",
        "/{repo}.git/info/refs",
        "/a/{id:seg}/*/**",
    ] {
        let template = PathTemplate::parse(source, &variables).unwrap();
        if let Some(captures) = template.matches(path, &vars) {
            assert!(captures.values().all(|v| !v.is_empty() && !v.contains('/')));
        }
    }
});
