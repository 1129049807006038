//! A repository renamed (or transferred) while a ticket works on it.
//! GitHub answers a request that names it by its former name with a
//! redirect: the REST API to the same resource under `/repositories/{id}`
//! (301 for GET and HEAD, 307 for other methods), git's smart HTTP to the
//! same endpoint under the new name. A client that follows it (`gh`,
//! Octokit, `curl -L`, git) asks for a form no rule ties to the identity's
//! repository, and the ticket would stop at its first call after the
//! rename.
//!
//! The proxy learns the other form from a redirect of the repository
//! itself: `GET /repos/{repo}` answered with a `Location` of exactly
//! `/repositories/{id}` on the same host, or git's
//! `/{repo}[.git]/{endpoint}` answered with the same endpoint under another
//! name. Only those: a redirect of a deeper path may be about an object that
//! moved on its own (an issue transferred to another repository answers
//! `/repos/{repo}/issues/{n}` with a redirect to the other repository's
//! issue, by id, possibly of the same number), so it teaches nothing. A later
//! request in the learned form, on the same host, is checked as the same
//! request under the repository's name, and forwarded as it was asked. A
//! form the identity has not learned this way is refused, as before (the
//! refusal says to ask for the repository by name first); what one identity
//! learned is its own. Learning reads the first answer of the request's own
//! host, never one the proxy fetched after a redirect to another host.

use gatehouse_types::RepoSlug;
use hyper::StatusCode;

/// The kinds under which learned forms are kept with the identity's
/// objects (so an identity of the admin API keeps them across a restart),
/// each with its host: a REST id (`api.github.com/1296269`), a git name
/// (`github.com/owner/name`, lowercase).
pub(super) const REPOSITORY_ID: &str = "github_repository_id";
pub(super) const REPOSITORY_NAME: &str = "github_repository_name";

const BY_ID: &str = "/repositories/";

/// git's smart-HTTP endpoints, after the repository.
const GIT_ENDPOINTS: [&str; 3] = ["/info/refs", "/git-upload-pack", "/git-receive-pack"];

/// Added to the refusal of a request by an id the identity has not learned.
pub(super) const NOT_LEARNED: &str = " (a repository is reached by its id only after GitHub redirected this identity's GET /repos/{its repository} there, as for a renamed repository: ask for the repository by its name first)";

/// Whether `path` names a repository by id.
pub(super) fn by_id(path: &str) -> bool {
    id_and_tail(path).is_some()
}

/// What a redirect answered to a request about `repo` on `host` teaches:
/// the kind and value to keep, if the answer is one.
pub(super) fn learned(
    status: StatusCode,
    location: Option<&str>,
    host: &str,
    request_path: &str,
    repo: &RepoSlug,
) -> Option<(&'static str, String)> {
    if !matches!(status.as_u16(), 301 | 302 | 307 | 308) {
        return None;
    }
    let target = location?.strip_prefix("https://")?.strip_prefix(host)?;
    let target = target.split(['?', '#']).next()?;
    if let Some(tail) = under_name(request_path, repo) {
        // REST: the repository itself, by id.
        let (id, moved_tail) = id_and_tail(target)?;
        return (tail.is_empty() && moved_tail.is_empty())
            .then(|| (REPOSITORY_ID, format!("{host}/{id}").to_ascii_lowercase()));
    }
    // git: the same endpoint under another name.
    let (owner, name, tail) = git_parts(request_path)?;
    if !same_repo(owner, name, repo) {
        return None;
    }
    let (new_owner, new_name, moved_tail) = git_parts(target)?;
    if moved_tail != tail || same_repo(new_owner, new_name, repo) {
        return None;
    }
    Some((REPOSITORY_NAME, git_key(host, new_owner, new_name)))
}

/// `path` in a form `knows` says the identity learned, as the same path
/// under `repo`'s name.
pub(super) fn named_path(
    host: &str,
    path: &str,
    knows: impl Fn(&str, &str) -> bool,
    repo: &RepoSlug,
) -> Option<String> {
    if let Some((id, tail)) = id_and_tail(path) {
        return knows(REPOSITORY_ID, &format!("{host}/{id}").to_ascii_lowercase())
            .then(|| format!("/repos/{}{tail}", repo.as_str()));
    }
    let (owner, name, tail) = git_parts(path)?;
    // The repository's own name (every ordinary git request) is no alias:
    // no lookup, no allocation.
    if same_repo(owner, name, repo) || !knows(REPOSITORY_NAME, &git_key(host, owner, name)) {
        return None;
    }
    let suffix = if path[1 + owner.len() + 1 + name.len()..].starts_with(".git/") {
        ".git"
    } else {
        ""
    };
    Some(format!("/{}{suffix}{tail}", repo.as_str()))
}

/// The tail of a path under `/repos/{repo}` (empty or from a `/`).
fn under_name<'p>(path: &'p str, repo: &RepoSlug) -> Option<&'p str> {
    let named = super::headers::repository_prefix(path)?;
    let (owner, name) = named.strip_prefix("/repos/")?.split_once('/')?;
    same_repo(owner, name, repo).then(|| &path[named.len()..])
}

/// `/{owner}/{name}[.git]{endpoint}` → (owner, name without `.git`,
/// endpoint), for git's endpoints only.
fn git_parts(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix('/')?;
    let (owner, rest) = rest.split_once('/')?;
    let at = rest.find('/')?;
    let (segment, tail) = rest.split_at(at);
    let name = segment.strip_suffix(".git").unwrap_or(segment);
    let valid = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    (valid(owner) && valid(name) && GIT_ENDPOINTS.contains(&tail)).then_some((owner, name, tail))
}

fn same_repo(owner: &str, name: &str, repo: &RepoSlug) -> bool {
    owner.eq_ignore_ascii_case(repo.owner()) && name.eq_ignore_ascii_case(repo.name())
}

fn git_key(host: &str, owner: &str, name: &str) -> String {
    format!("{host}/{owner}/{name}").to_ascii_lowercase()
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

    /// A learned form: its kind and value.
    type Form = Option<(&'static str, String)>;

    fn id(n: u64) -> Form {
        Some((REPOSITORY_ID, format!("api.github.com/{n}")))
    }

    fn name(key: &str) -> Form {
        Some((REPOSITORY_NAME, key.to_owned()))
    }

    #[test]
    fn a_form_is_learned_only_from_a_redirect_of_the_same_resource_of_the_identitys_repository() {
        let api = "api.github.com";
        let git = "github.com";
        let moved = Some("https://api.github.com/repositories/1296269/issues?page=2");
        // (status, location, host, request path, learned)
        let cases: &[(u16, Option<&str>, &str, &str, Form)] = &[
            (
                301,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/acme/widgets",
                id(7),
            ),
            (
                307,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/ACME/Widgets",
                id(7),
            ),
            (
                308,
                Some("https://api.github.com/repositories/7?x=1"),
                api,
                "/repos/acme/widgets",
                id(7),
            ),
            // A deeper path teaches nothing, even with the same tail: an
            // issue transferred to another repository (id 999) answers so.
            (301, moved, api, "/repos/acme/widgets/issues", None),
            (
                301,
                Some("https://api.github.com/repositories/999/issues/3"),
                api,
                "/repos/acme/widgets/issues/3",
                None,
            ),
            (301, moved, api, "/repos/acme/widgets", None),
            (
                301,
                Some("https://api.github.com/repositories/7/"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            // Not a redirect.
            (
                200,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                404,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            // About another repository, or none.
            (
                301,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/acme/widgets-evil",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/acme/widget",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repos/other/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/7"),
                api,
                "/user",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/7"),
                api,
                "/repositories/7",
                None,
            ),
            // A Location elsewhere: another host, plain HTTP, relative,
            // not the id form, a malformed id.
            (
                301,
                Some("https://evil.example/repositories/1"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com.evil.example/repositories/1"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com:443/repositories/1"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://user@api.github.com/repositories/1"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("http://api.github.com/repositories/1"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("/repositories/1"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repos/acme/gadgets"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/01"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/12x"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (
                301,
                Some("https://api.github.com/repositories/99999999999999999999999"),
                api,
                "/repos/acme/widgets",
                None,
            ),
            (301, None, api, "/repos/acme/widgets", None),
            // git: the same endpoint under the new name.
            (
                301,
                Some("https://github.com/acme/gadgets.git/info/refs?service=git-upload-pack"),
                git,
                "/acme/widgets.git/info/refs",
                name("github.com/acme/gadgets"),
            ),
            (
                301,
                Some("https://github.com/NewOwner/Gadgets/git-upload-pack"),
                git,
                "/acme/widgets/git-upload-pack",
                name("github.com/newowner/gadgets"),
            ),
            // Another endpoint, not a git endpoint, the same name, another
            // repository's request, another host.
            (
                301,
                Some("https://github.com/acme/gadgets.git/git-upload-pack"),
                git,
                "/acme/widgets.git/info/refs",
                None,
            ),
            (
                301,
                Some("https://github.com/acme/gadgets/issues"),
                git,
                "/acme/widgets/issues",
                None,
            ),
            (
                301,
                Some("https://github.com/Acme/Widgets.git/info/refs"),
                git,
                "/acme/widgets.git/info/refs",
                None,
            ),
            (
                301,
                Some("https://github.com/acme/gadgets.git/info/refs"),
                git,
                "/acme/other.git/info/refs",
                None,
            ),
            (
                301,
                Some("https://evil.example/acme/gadgets.git/info/refs"),
                git,
                "/acme/widgets.git/info/refs",
                None,
            ),
            (
                301,
                Some("https://github.com/acme/gad%2Fgets.git/info/refs"),
                git,
                "/acme/widgets.git/info/refs",
                None,
            ),
            (
                200,
                Some("https://github.com/acme/gadgets.git/info/refs"),
                git,
                "/acme/widgets.git/info/refs",
                None,
            ),
        ];
        for (status, location, host, path, learned_form) in cases {
            let status = StatusCode::from_u16(*status).unwrap();
            assert_eq!(
                learned(status, *location, host, path, &repo()),
                learned_form.clone(),
                "{status} {location:?} for {host}{path}"
            );
        }
    }

    #[test]
    fn only_a_learned_form_is_read_as_the_repositorys_name() {
        let knows = |kind: &str, value: &str| {
            (kind == REPOSITORY_ID && value == "api.github.com/42")
                || (kind == REPOSITORY_NAME && value == "github.com/acme/gadgets")
        };
        // (host, path, checked as)
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "api.github.com",
                "/repositories/42",
                Some("/repos/acme/widgets"),
            ),
            (
                "api.github.com",
                "/repositories/42/issues",
                Some("/repos/acme/widgets/issues"),
            ),
            (
                "api.github.com",
                "/repositories/42/issues/3/comments",
                Some("/repos/acme/widgets/issues/3/comments"),
            ),
            ("api.github.com", "/repositories/43/issues", None),
            ("api.github.com", "/repositories/420/issues", None),
            ("api.github.com", "/repositories/4/issues", None),
            ("api.github.com", "/repositories/042/issues", None),
            ("api.github.com", "/repositories/42x/issues", None),
            ("api.github.com", "/repositories/42%2F/issues", None),
            ("api.github.com", "/repositories/", None),
            ("api.github.com", "/repositories", None),
            ("api.github.com", "/repos/acme/widgets/issues", None),
            ("api.github.com", "/x/repositories/42/issues", None),
            (
                "github.com",
                "/acme/gadgets.git/info/refs",
                Some("/acme/widgets.git/info/refs"),
            ),
            (
                "github.com",
                "/Acme/Gadgets/git-upload-pack",
                Some("/acme/widgets/git-upload-pack"),
            ),
            (
                "github.com",
                "/acme/gadgets.git/git-receive-pack",
                Some("/acme/widgets.git/git-receive-pack"),
            ),
            ("github.com", "/acme/gadgets.git/objects/info/packs", None),
            ("github.com", "/acme/gadgets/issues", None),
            ("github.com", "/acme/other.git/info/refs", None),
            ("uploads.github.com", "/acme/gadgets.git/info/refs", None),
            // An id is learned with its host.
            ("uploads.github.com", "/repositories/42/issues", None),
        ];
        for (host, path, named) in cases {
            assert_eq!(
                named_path(host, path, knows, &repo()).as_deref(),
                *named,
                "{host}{path}"
            );
        }
    }
}
