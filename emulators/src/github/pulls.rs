//! Pull requests as GitHub refuses and lists them: pure decisions over the
//! model and the branch facts the caller read from git ([`read_branches`],
//! the only I/O here).
//!
//! The refusals and their bodies are GitHub's (seen in answers to
//! `POST /repos/{o}/{r}/pulls`, documented as "Validation failed, or the
//! endpoint has been spammed" in the REST description): each is a 422
//! `Validation Failed` whose `errors` name `resource: "PullRequest"`.

use std::path::Path;

use http::StatusCode;
use serde_json::{json, Value};

use super::model::{Issue, Model};
use super::rest::Reply;

/// Where GitHub's answers to `POST …/pulls` point.
const CREATE_DOCS: &str = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request";

/// What git says about a proposed pull request's branches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Branches {
    /// The head branch's commit (`None`: no such branch).
    pub head_sha: Option<String>,
    /// The base branch's commit (`None`: no such branch).
    pub base_sha: Option<String>,
    /// Commits on the head that the base lacks; `None` when not known (a
    /// head in another repository, or git failed), which refuses nothing.
    pub ahead: Option<u64>,
}

/// Read both branches of a proposed pull request: `head_dir` holds the head
/// branch (a fork's repository for `owner:branch` across repositories),
/// `base_dir` the base. Blocking: runs git.
pub(crate) fn read_branches(head_dir: &Path, base_dir: &Path, head: &str, base: &str) -> Branches {
    let head_sha = super::rev_parse_blocking(head_dir, head);
    let base_sha = super::rev_parse_blocking(base_dir, base);
    let ahead = match (&head_sha, &base_sha) {
        (Some(h), Some(b)) if head_dir == base_dir => commits_between(base_dir, b, h),
        _ => None,
    };
    Branches {
        head_sha,
        base_sha,
        ahead,
    }
}

/// `git rev-list --count base..head`: the commits a pull request would bring.
fn commits_between(git_dir: &Path, base_sha: &str, head_sha: &str) -> Option<u64> {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(base_sha) || !hex(head_sha) {
        return None;
    }
    let output = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["rev-list", "--count"])
        .arg(format!("{base_sha}..{head_sha}"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()?.trim().parse().ok()
}

/// A pull request someone asks to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proposal<'a> {
    /// The owner the head branch belongs to (the repository's owner unless
    /// the request said `owner:branch`).
    pub head_owner: &'a str,
    /// The head branch's name.
    pub head: &'a str,
    /// The base branch's name.
    pub base: &'a str,
}

impl<'a> Proposal<'a> {
    /// Read the request's `head` (`branch` or `owner:branch`, "For
    /// cross-repository pull requests in the same network, namespace head
    /// with a user like this: username:branch", REST description).
    pub fn new(repo_owner: &'a str, head: &'a str, base: &'a str) -> Self {
        let (head_owner, head) = head.split_once(':').unwrap_or((repo_owner, head));
        Self {
            head_owner,
            head,
            base,
        }
    }

    /// `owner:branch`, GitHub's label of the head.
    pub fn label(&self) -> String {
        format!("{}:{}", self.head_owner, self.head)
    }
}

/// GitHub's 422 for a pull request it will not open, or `None` to open it.
/// Checked in GitHub's order: the branches exist, no open pull request has
/// the same head and base, the head brings a commit.
pub(crate) fn refusal(
    model: &Model,
    repo_id: u64,
    proposal: &Proposal<'_>,
    branches: &Branches,
) -> Option<Reply> {
    let invalid =
        |field: &str| json!({"resource": "PullRequest", "field": field, "code": "invalid"});
    let custom =
        |message: String| json!({"resource": "PullRequest", "code": "custom", "message": message});
    if branches.base_sha.is_none() {
        return Some(validation(invalid("base")));
    }
    if branches.head_sha.is_none() {
        return Some(validation(invalid("head")));
    }
    let repo_owner = model.repo_by_id(repo_id).map(|r| r.owner.as_str());
    let duplicate = model.issues.iter().any(|i| {
        i.repo_id == repo_id
            && i.open
            && i.pull.as_ref().is_some_and(|p| {
                p.base == proposal.base
                    && p.head == proposal.head
                    && repo_owner.is_some_and(|o| o.eq_ignore_ascii_case(proposal.head_owner))
            })
    });
    if duplicate {
        return Some(validation(custom(format!(
            "A pull request already exists for {}.",
            proposal.label()
        ))));
    }
    if branches.ahead == Some(0) {
        return Some(validation(custom(format!(
            "No commits between {} and {}",
            proposal.base, proposal.head
        ))));
    }
    None
}

fn validation(error: Value) -> Reply {
    let mut reply = Reply::error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
    reply.body["errors"] = json!([error]);
    reply.body["documentation_url"] = json!(CREATE_DOCS);
    reply
}

/// Whether `pull` is listed by `GET …/pulls` with these filters (GitHub's
/// REST description: `state` open (default), closed or all; `head` "Filter
/// pulls by head user or head organization and branch name in the format of
/// `user:ref-name` or `organization:ref-name`"; `base` the base branch).
/// A `head` without an owner filters nothing, as on GitHub (gh's
/// `pr list --head` and `pr create` look pull requests up by GraphQL for
/// this reason).
pub(crate) fn listed(
    model: &Model,
    pull: &Issue,
    state: Option<&str>,
    head: Option<&str>,
    base: Option<&str>,
) -> bool {
    let Some(info) = pull.pull.as_ref() else {
        return false;
    };
    let state_ok = match state.unwrap_or("open") {
        "all" => true,
        "closed" => !pull.open,
        _ => pull.open,
    };
    let head_ok = match head.and_then(|h| h.split_once(':')) {
        Some((owner, branch)) => {
            let repo_owner = model.repo_by_id(pull.repo_id).map(|r| r.owner.as_str());
            repo_owner.is_some_and(|o| o.eq_ignore_ascii_case(owner)) && info.head == branch
        }
        None => true,
    };
    let base_ok = base.is_none_or(|b| info.base == b);
    state_ok && head_ok && base_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::model::PullInfo;

    fn model_with_pull(head: &str, base: &str, open: bool) -> (Model, u64) {
        let mut model = Model::new();
        let repo_id = model.add_repo("acme", "widgets", "main");
        let pull = PullInfo::new(head, &"a".repeat(40), base, &"b".repeat(40), false);
        let number = model.add_issue(repo_id, "t", "", "alice", Some(pull), 1);
        if !open {
            if let Some(issue) = model.issue_mut(repo_id, number) {
                issue.close(2);
            }
        }
        (model, repo_id)
    }

    fn branches(head: bool, base: bool, ahead: Option<u64>) -> Branches {
        Branches {
            head_sha: head.then(|| "a".repeat(40)),
            base_sha: base.then(|| "b".repeat(40)),
            ahead,
        }
    }

    fn first_error(reply: &Reply) -> Value {
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(reply.body["message"], "Validation Failed");
        assert_eq!(reply.body["status"], "422");
        assert_eq!(reply.body["documentation_url"], CREATE_DOCS);
        reply.body["errors"][0].clone()
    }

    #[test]
    fn refuses_as_github_does_in_its_order() {
        let (model, repo_id) = model_with_pull("feature", "main", true);
        let p = Proposal::new("acme", "feature", "main");
        let other = Proposal::new("acme", "other", "main");
        let cases: Vec<(Proposal<'_>, Branches, Option<Value>)> = vec![
            // The base is checked first, then the head.
            (
                other.clone(),
                branches(false, false, None),
                Some(json!({"resource": "PullRequest", "field": "base", "code": "invalid"})),
            ),
            (
                other.clone(),
                branches(false, true, None),
                Some(json!({"resource": "PullRequest", "field": "head", "code": "invalid"})),
            ),
            // An open pull request from acme:feature into main exists.
            (
                p.clone(),
                branches(true, true, Some(3)),
                Some(
                    json!({"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for acme:feature."}),
                ),
            ),
            // The owner's case does not matter; the label is as asked.
            (
                Proposal::new("acme", "ACME:feature", "main"),
                branches(true, true, Some(3)),
                Some(
                    json!({"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for ACME:feature."}),
                ),
            ),
            (
                other.clone(),
                branches(true, true, Some(0)),
                Some(
                    json!({"resource": "PullRequest", "code": "custom", "message": "No commits between main and other"}),
                ),
            ),
            // Positive controls: commits ahead, or not known (a fork).
            (other.clone(), branches(true, true, Some(1)), None),
            (other.clone(), branches(true, true, None), None),
            // The same head into another base, and another owner's branch.
            (
                Proposal::new("acme", "feature", "release"),
                branches(true, true, Some(1)),
                None,
            ),
            (
                Proposal::new("acme", "mallory:feature", "main"),
                branches(true, true, None),
                None,
            ),
        ];
        for (proposal, facts, expected) in cases {
            let reply = refusal(&model, repo_id, &proposal, &facts);
            match expected {
                Some(error) => {
                    let reply = reply.unwrap_or_else(|| panic!("{proposal:?} {facts:?} opened"));
                    assert_eq!(first_error(&reply), error, "{proposal:?} {facts:?}");
                }
                None => assert!(reply.is_none(), "{proposal:?} {facts:?}: {reply:?}"),
            }
        }
    }

    #[test]
    fn a_closed_pull_request_is_no_duplicate() {
        let (model, repo_id) = model_with_pull("feature", "main", false);
        let p = Proposal::new("acme", "feature", "main");
        assert!(refusal(&model, repo_id, &p, &branches(true, true, Some(1))).is_none());
    }

    #[test]
    fn lists_by_state_head_and_base() {
        let (model, _) = model_with_pull("feature", "main", true);
        let pull = &model.issues[0];
        let cases = [
            (None, None, None, true),
            (Some("open"), None, None, true),
            (Some("closed"), None, None, false),
            (Some("all"), None, None, true),
            (None, Some("acme:feature"), None, true),
            (None, Some("ACME:feature"), None, true),
            (None, Some("acme:other"), None, false),
            (None, Some("mallory:feature"), None, false),
            // A bare branch name filters nothing, as on GitHub.
            (None, Some("other"), None, true),
            (None, Some("feature"), None, true),
            (None, None, Some("main"), true),
            (None, None, Some("release"), false),
            (None, Some("acme:feature"), Some("main"), true),
            (None, Some("acme:feature"), Some("release"), false),
        ];
        for (state, head, base, expected) in cases {
            assert_eq!(
                listed(&model, pull, state, head, base),
                expected,
                "{state:?} {head:?} {base:?}"
            );
        }
        let (closed, _) = model_with_pull("feature", "main", false);
        let pull = &closed.issues[0];
        assert!(!listed(&closed, pull, None, None, None));
        assert!(listed(&closed, pull, Some("closed"), None, None));
        assert!(listed(&closed, pull, Some("all"), None, None));
    }
}
