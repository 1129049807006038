//! Arbitrary request heads against a rule set: the decision never panics,
//! costs at most a bound, and an allowed path is always canonical, never a
//! token endpoint, and inside the identity's repository: its exact
//! `owner/repo` segments (`/repos/octo/hello-evil/…` is another repository),
//! or the API root `GET /`.
#![no_main]

use gatehouse_proxy::path::{check_canonical, Vars};
use gatehouse_proxy::rules::{Decision, RequestHead, RuleBook, RuleSet};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Generous for a build with sanitizers: a decision at the request
/// target's budget takes microseconds in a release build.
const MOST: Duration = Duration::from_millis(50);

const WORKER: &str = include_str!("../../sandbox-profiles/rules/github-worker.toml");
const READ: &str = include_str!("../../sandbox-profiles/rules/github-read.toml");

fn book() -> &'static RuleBook {
    static BOOK: OnceLock<RuleBook> = OnceLock::new();
    BOOK.get_or_init(|| {
        let sets = [
            RuleSet::parse("github-read.toml", READ).unwrap(),
            RuleSet::parse("github-worker.toml", WORKER).unwrap(),
        ];
        RuleBook::new(sets).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // method \n host \n path [\n query]
    let mut parts = text.splitn(4, '\n');
    let (Some(method), Some(host), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let head = RequestHead {
        method,
        host,
        path,
        query: parts.next(),
    };
    let vars = Vars::from([("repo".to_owned(), "octo/hello".to_owned())]);
    let started = Instant::now();
    let decision = book().check(&head, &["github-worker".to_owned()], &vars);
    assert!(
        started.elapsed() < MOST,
        "a decision took {:?}",
        started.elapsed()
    );
    if let Decision::Allow(_) = decision {
        assert!(check_canonical(path.as_bytes()).is_ok());
        let lower = path.to_ascii_lowercase();
        assert!(!lower.starts_with("/app/") && !lower.starts_with("/open-apis/auth/"));
        let inside = |base: &str| {
            lower == base
                || lower.starts_with(&format!("{base}/"))
                || lower.starts_with(&format!("{base}.git/"))
        };
        // The API root (`GET /`: links only, where `gh auth status` checks
        // its token) is the one path outside the repository.
        let api_root = lower == "/" && method == "GET";
        assert!(
            inside("/repos/octo/hello") || inside("/octo/hello") || lower == "/graphql" || api_root,
            "{method} {lower}"
        );
    }
});
