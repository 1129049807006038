//! A repository renamed (or transferred) while a ticket works on it.
//! GitHub answers a request that names it by its former name with a
//! redirect to the same resource under `/repositories/{id}` (301 for GET
//! and HEAD, 307 for other methods), and a client that follows it (`gh`,
//! Octokit, `curl -L`) asks for the id form, which no rule can tie to the
//! identity's repository by name: the ticket would stop at its first call
//! after the rename.
//!
//! The proxy learns the id from the redirect itself. The answer to a
//! request under `/repos/{the identity's repository}` is about that
//! repository, so a `Location` naming `/repositories/{id}` on the same host
//! names that repository's id. A request under `/repositories/{that id}`
//! is then checked as the same request under the repository's name, and
//! forwarded as it was asked. An id the identity has not learned this way
//! is refused, as before; what one identity learned is its own.

use gatehouse_types::RepoSlug;
use hyper::StatusCode;

/// The kind under which a learned id is kept with the identity's objects
/// (so an identity of the admin API keeps it across a restart).
pub(super) const REPOSITORY_ID: &str = "github_repository_id";

const BY_ID: &str = "/repositories/";

/// Added to the refusal of a request by an id the identity has not learned.
pub(super) const NOT_LEARNED: &str = " (a repository is reached by its id only after GitHub redirected this identity there from its own repository's name, as for a renamed repository)";

/// Whether `path` names a repository by id.
pub(super) fn by_id(path: &str) -> bool {
    id_and_tail(path).is_some()
}

/// The repository id named by a redirect answered to a request under
/// `/repos/{repo}` on `host`, if the answer is one.
pub(super) fn learned_id(
    status: StatusCode,
    location: Option<&str>,
    host: &str,
    request_path: &str,
    repo: &RepoSlug,
) -> Option<u64> {
    if !matches!(status.as_u16(), 301 | 302 | 307 | 308) {
        return None;
    }
    let named = super::headers::repository_prefix(request_path)?;
    let (owner, name) = named.strip_prefix("/repos/")?.split_once('/')?;
    if !(owner.eq_ignore_ascii_case(repo.owner()) && name.eq_ignore_ascii_case(repo.name())) {
        return None;
    }
    let path = location?.strip_prefix("https://")?.strip_prefix(host)?;
    let (id, _) = id_and_tail(path.split(['?', '#']).next()?)?;
    Some(id)
}

/// `path` under `/repositories/{id}` for an id `known` says the identity
/// learned, as the same path under `/repos/{repo}`.
pub(super) fn named_path(
    path: &str,
    known: impl Fn(u64) -> bool,
    repo: &RepoSlug,
) -> Option<String> {
    let (id, tail) = id_and_tail(path)?;
    known(id).then(|| format!("/repos/{}{tail}", repo.as_str()))
}

/// `/repositories/{digits}{tail}` → (id, tail), the tail empty or from a
/// `/`; digits without a sign or leading zero.
fn id_and_tail(path: &str) -> Option<(u64, &str)> {
    let rest = path.strip_prefix(BY_ID)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (id, tail) = rest.split_at(digits);
    if id.is_empty() || id.starts_with('0') || !(tail.is_empty() || tail.starts_with('/')) {
        return None;
    }
    Some((id.parse().ok()?, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> RepoSlug {
        RepoSlug::parse("acme/widgets").unwrap()
    }

    #[test]
    fn the_id_is_learned_only_from_a_redirect_about_the_identitys_repository() {
        let moved = Some("https://api.github.com/repositories/1296269/issues?page=2");
        let host = "api.github.com";
        // (status, location, request path, learned)
        let cases: &[(u16, Option<&str>, &str, Option<u64>)] = &[
            (301, moved, "/repos/acme/widgets/issues", Some(1_296_269)),
            (307, moved, "/repos/acme/widgets/issues", Some(1_296_269)),
            (308, moved, "/repos/ACME/Widgets/issues", Some(1_296_269)),
            (302, moved, "/repos/acme/widgets", Some(1_296_269)),
            (
                301,
                Some("https://api.github.com/repositories/7"),
                "/repos/acme/widgets",
                Some(7),
            ),
            // Not a redirect.
            (200, moved, "/repos/acme/widgets/issues", None),
            (404, moved, "/repos/acme/widgets/issues", None),
            // About another repository, or none.
            (301, moved, "/repos/acme/widgets-evil/issues", None),
            (301, moved, "/repos/acme/widget/issues", None),
            (301, moved, "/repos/other/widgets/issues", None),
            (301, moved, "/user", None),
            (301, moved, "/repositories/1296269/issues", None),
            // A Location elsewhere: another host, plain HTTP, relative,
            // not the id form, a malformed id.
            (
                301,
                Some("https://evil.example/repositories/1/issues"),
                "/repos/acme/widgets/issues",
                None,
            ),
            (
                301,
                Some("https://api.github.com.evil.example/repositories/1"),
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("http://api.github.com/repositories/1"),
                "/repos/acme/widgets",
                None,
            ),
            (301, Some("/repositories/1"), "/repos/acme/widgets", None),
            (
                301,
                Some("https://api.github.com/repos/acme/gadgets/issues"),
                "/repos/acme/widgets/issues",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/01/issues"),
                "/repos/acme/widgets/issues",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/12x/issues"),
                "/repos/acme/widgets/issues",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/99999999999999999999999"),
                "/repos/acme/widgets",
                None,
            ),
            (301, None, "/repos/acme/widgets/issues", None),
        ];
        for (status, location, path, learned) in cases {
            let status = StatusCode::from_u16(*status).unwrap();
            assert_eq!(
                learned_id(status, *location, host, path, &repo()),
                *learned,
                "{status} {location:?} for {path}"
            );
        }
    }

    #[test]
    fn only_a_learned_id_is_read_as_the_repositorys_name() {
        let known = |id: u64| id == 42;
        // (path, checked as)
        let cases: &[(&str, Option<&str>)] = &[
            ("/repositories/42", Some("/repos/acme/widgets")),
            (
                "/repositories/42/issues",
                Some("/repos/acme/widgets/issues"),
            ),
            (
                "/repositories/42/issues/3/comments",
                Some("/repos/acme/widgets/issues/3/comments"),
            ),
            ("/repositories/43/issues", None),
            ("/repositories/420/issues", None),
            ("/repositories/4/issues", None),
            ("/repositories/042/issues", None),
            ("/repositories/42x/issues", None),
            ("/repositories/42%2F/issues", None),
            ("/repositories/", None),
            ("/repositories", None),
            ("/repos/acme/widgets/issues", None),
            ("/x/repositories/42/issues", None),
        ];
        for (path, named) in cases {
            assert_eq!(
                named_path(path, known, &repo()).as_deref(),
                *named,
                "{path}"
            );
        }
    }
}
