//! The in-memory GitHub model: repositories, issues and pull requests (one
//! number space per repository, as on GitHub), comments, reviews, check runs
//! and Actions runs. Plain data, no I/O; timestamps come in as `now`.

use serde_json::{json, Value};

use crate::time::iso8601;

/// The public base URLs objects link to, as on github.com.
pub(crate) const API_BASE: &str = "https://api.github.com";
pub(crate) const WEB_BASE: &str = "https://github.com";

#[derive(Debug, Clone)]
pub(crate) struct Repo {
    pub id: u64,
    pub owner: String,
    pub name: String,
    pub default_branch: String,
}

impl Repo {
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
    pub(crate) fn api_url(&self) -> String {
        format!("{API_BASE}/repos/{}/{}", self.owner, self.name)
    }
    pub(crate) fn html_url(&self) -> String {
        format!("{WEB_BASE}/{}/{}", self.owner, self.name)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct PullInfo {
    pub head: String,
    pub head_sha: String,
    pub base: String,
    /// The base branch's commit when the pull request was opened.
    pub base_sha: String,
    pub draft: bool,
    pub merged: bool,
    pub merged_at: Option<u64>,
    pub requested_reviewers: Vec<String>,
    /// Whether GitHub has computed `mergeable` yet: it answers `null` (and
    /// starts the computation in the background) until a read finds it done
    /// ("The value of the mergeable attribute can be true, false, or null.
    /// If the value is null, then GitHub has started a background job to
    /// compute the mergeability", REST docs, "Get a pull request").
    pub mergeable_known: bool,
}

impl PullInfo {
    pub fn new(head: &str, head_sha: &str, base: &str, base_sha: &str, draft: bool) -> Self {
        Self {
            head: head.to_owned(),
            head_sha: head_sha.to_owned(),
            base: base.to_owned(),
            base_sha: base_sha.to_owned(),
            draft,
            merged: false,
            merged_at: None,
            requested_reviewers: Vec::new(),
            mergeable_known: false,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Issue {
    pub id: u64,
    pub repo_id: u64,
    pub number: u64,
    pub title: String,
    pub body: String,
    pub author: String,
    pub open: bool,
    pub created_at: u64,
    pub updated_at: u64,
    pub closed_at: Option<u64>,
    pub pull: Option<PullInfo>,
    /// Label names, as added (GitHub's default set: [`DEFAULT_LABELS`]).
    pub labels: Vec<String>,
}

/// The labels GitHub gives a new repository (name, color, description).
pub(crate) const DEFAULT_LABELS: &[(&str, &str, &str)] = &[
    ("bug", "d73a4a", "Something isn't working"),
    (
        "documentation",
        "0075ca",
        "Improvements or additions to documentation",
    ),
    (
        "duplicate",
        "cfd3d7",
        "This issue or pull request already exists",
    ),
    ("enhancement", "a2eeef", "New feature or request"),
    ("good first issue", "7057ff", "Good for newcomers"),
    ("help wanted", "008672", "Extra attention is needed"),
    ("invalid", "e4e669", "This doesn't seem right"),
    ("question", "d876e3", "Further information is requested"),
    ("wontfix", "ffffff", "This will not be worked on"),
];

impl Issue {
    /// Close (GitHub keeps the time as `closed_at`).
    pub fn close(&mut self, now: u64) {
        if self.open {
            self.open = false;
            self.closed_at = Some(now);
        }
    }

    /// Reopen: `closed_at` is `null` again. A merged pull request stays closed.
    pub fn reopen(&mut self) {
        if !self.pull.as_ref().is_some_and(|p| p.merged) {
            self.open = true;
            self.closed_at = None;
        }
    }

    /// Merge an open pull request (which closes it); `false` if it is not one.
    pub fn merge(&mut self, now: u64) -> bool {
        match self.pull.as_mut() {
            Some(pull) if self.open && !pull.merged => {
                pull.merged = true;
                pull.merged_at = Some(now);
                self.close(now);
                true
            }
            _ => false,
        }
    }
}

/// Which kind of comment a [`Comment`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentKind {
    /// A comment on an issue or pull request conversation.
    Issue,
    /// A pull-request review comment on a line of the diff.
    Review,
}

/// A comment as stored by the GitHub emulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// Issue comment or review comment.
    pub kind: CommentKind,
    /// The comment id (issue and review comments have separate id spaces on
    /// GitHub; here they share one counter, so ids are unique across kinds).
    pub id: u64,
    /// `owner/name`.
    pub repo: String,
    /// The issue or pull request number.
    pub number: u64,
    /// The text.
    pub body: String,
    /// The login that wrote it.
    pub author: String,
    /// For a review-comment reply: the top-level review comment it answers.
    pub in_reply_to: Option<u64>,
    /// For review comments: the file path.
    pub path: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct StoredComment {
    pub comment: Comment,
    pub repo_id: u64,
    pub line: Option<u64>,
    pub commit_id: Option<String>,
    /// The review a review comment was made in (`pull_request_review_id`);
    /// `None` for one made on its own.
    pub review_id: Option<u64>,
    pub created_at: u64,
    pub updated_at: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Review {
    pub id: u64,
    pub repo_id: u64,
    pub number: u64,
    pub author: String,
    pub body: String,
    pub state: String,
    pub submitted_at: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub id: u64,
    pub run_id: u64,
    pub repo_id: u64,
    pub name: String,
    pub head_sha: String,
    pub conclusion: String,
    pub logs: String,
    pub created_at: u64,
    /// The workflow file the run ran, e.g. `.github/workflows/ci.yml`.
    pub workflow: Option<String>,
    /// What the check run reported on lines of files.
    pub annotations: Vec<Annotation>,
}

/// A check run's annotation (GitHub's `check-annotation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    /// The file, relative to the repository's root.
    pub path: String,
    pub start_line: u64,
    pub end_line: u64,
    /// `notice`, `warning` or `failure`.
    pub level: String,
    pub title: Option<String>,
    pub message: String,
    pub raw_details: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Model {
    next_id: u64,
    pub repos: Vec<Repo>,
    pub issues: Vec<Issue>,
    pub comments: Vec<StoredComment>,
    pub reviews: Vec<Review>,
    pub jobs: Vec<Job>,
    pub events: Vec<super::events::IssueEvent>,
    /// Former names (owner, name) of renamed repositories, with their ids.
    pub former_names: Vec<(String, String, u64)>,
}

impl Model {
    pub fn new() -> Self {
        Self {
            // Start ids high enough to look like GitHub's and to never be
            // confused with issue numbers.
            next_id: 1_000_000_001,
            ..Self::default()
        }
    }

    pub fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub fn add_repo(&mut self, owner: &str, name: &str, default_branch: &str) -> u64 {
        let id = 100_000 + self.repos.len() as u64 + 1;
        self.repos.push(Repo {
            id,
            owner: owner.to_owned(),
            name: name.to_owned(),
            default_branch: default_branch.to_owned(),
        });
        id
    }

    /// Owner and name match case-insensitively, as on GitHub.
    pub fn repo(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    /// The id of the repository once named `owner/name`, unless a
    /// repository has that name now (on GitHub a new repository of the old
    /// name ends the redirect).
    pub fn former_name(&self, owner: &str, name: &str) -> Option<u64> {
        if self.repo(owner, name).is_some() {
            return None;
        }
        self.former_names
            .iter()
            .rev()
            .find(|(o, n, _)| o.eq_ignore_ascii_case(owner) && n.eq_ignore_ascii_case(name))
            .map(|(_, _, id)| *id)
    }

    pub fn repo_by_id(&self, id: u64) -> Option<&Repo> {
        self.repos.iter().find(|r| r.id == id)
    }

    pub fn issue(&self, repo_id: u64, number: u64) -> Option<&Issue> {
        self.issues
            .iter()
            .find(|i| i.repo_id == repo_id && i.number == number)
    }

    pub fn issue_mut(&mut self, repo_id: u64, number: u64) -> Option<&mut Issue> {
        self.issues
            .iter_mut()
            .find(|i| i.repo_id == repo_id && i.number == number)
    }

    fn next_number(&self, repo_id: u64) -> u64 {
        self.issues
            .iter()
            .filter(|i| i.repo_id == repo_id)
            .map(|i| i.number)
            .max()
            .unwrap_or(0)
            + 1
    }

    pub fn add_issue(
        &mut self,
        repo_id: u64,
        title: &str,
        body: &str,
        author: &str,
        pull: Option<PullInfo>,
        now: u64,
    ) -> u64 {
        let number = self.next_number(repo_id);
        let id = self.fresh_id();
        self.issues.push(Issue {
            id,
            repo_id,
            number,
            labels: Vec::new(),
            title: title.to_owned(),
            body: body.to_owned(),
            author: author.to_owned(),
            open: true,
            created_at: now,
            updated_at: now,
            closed_at: None,
            pull,
        });
        number
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add_comment(
        &mut self,
        kind: CommentKind,
        repo_id: u64,
        number: u64,
        body: &str,
        author: &str,
        in_reply_to: Option<u64>,
        path: Option<String>,
        line: Option<u64>,
        commit_id: Option<String>,
        now: u64,
    ) -> u64 {
        let id = self.fresh_id();
        let repo = self
            .repo_by_id(repo_id)
            .map(Repo::full_name)
            .unwrap_or_default();
        self.comments.push(StoredComment {
            comment: Comment {
                kind,
                id,
                repo,
                number,
                body: body.to_owned(),
                author: author.to_owned(),
                in_reply_to,
                path,
            },
            repo_id,
            line,
            commit_id,
            review_id: None,
            created_at: now,
            updated_at: now,
        });
        // On GitHub a new comment (or review comment) updates its issue or
        // pull request: listings sorted by `updated` and `since` find it.
        if let Some(issue) = self.issue_mut(repo_id, number) {
            issue.updated_at = issue.updated_at.max(now);
        }
        id
    }

    pub fn comment(&self, kind: CommentKind, repo_id: u64, id: u64) -> Option<&StoredComment> {
        self.comments
            .iter()
            .find(|c| c.comment.kind == kind && c.repo_id == repo_id && c.comment.id == id)
    }

    pub fn comment_mut(
        &mut self,
        kind: CommentKind,
        repo_id: u64,
        id: u64,
    ) -> Option<&mut StoredComment> {
        self.comments
            .iter_mut()
            .find(|c| c.comment.kind == kind && c.repo_id == repo_id && c.comment.id == id)
    }

    /// Wraps review comment `comment_id`, posted on its own, in a review of
    /// its own, as GitHub does: state `COMMENTED`, no body, submitted when
    /// the comment was made; the comment then carries its id
    /// (`pull_request_review_id`) and the pull request's reviews list it.
    /// Returns the review's id.
    pub fn wrap_in_review(&mut self, repo_id: u64, comment_id: u64, now: u64) -> Option<u64> {
        let (number, author) = self
            .comment(CommentKind::Review, repo_id, comment_id)
            .map(|c| (c.comment.number, c.comment.author.clone()))?;
        let id = self.fresh_id();
        self.reviews.push(Review {
            id,
            repo_id,
            number,
            author,
            body: String::new(),
            state: "COMMENTED".into(),
            submitted_at: now,
        });
        self.comment_mut(CommentKind::Review, repo_id, comment_id)?
            .review_id = Some(id);
        Some(id)
    }

    // === JSON views, shaped like GitHub's REST responses ===

    pub fn user_json(login: &str) -> Value {
        let is_bot = login.ends_with("[bot]");
        let id = stable_user_id(login);
        let api = format!("{API_BASE}/users/{login}");
        // The `simple-user` schema's required links, templated as GitHub
        // sends them (REST description, `simple-user`); the avatar is
        // GitHub's own address for the id.
        json!({
            "login": login,
            "id": id,
            "node_id": node_id(if is_bot { "BOT" } else { "U" }, id),
            "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
            "gravatar_id": "",
            "url": api,
            "html_url": format!("{WEB_BASE}/{}", login.trim_end_matches("[bot]")),
            "followers_url": format!("{api}/followers"),
            "following_url": format!("{api}/following{{/other_user}}"),
            "gists_url": format!("{api}/gists{{/gist_id}}"),
            "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
            "subscriptions_url": format!("{api}/subscriptions"),
            "organizations_url": format!("{api}/orgs"),
            "repos_url": format!("{api}/repos"),
            "events_url": format!("{api}/events{{/privacy}}"),
            "received_events_url": format!("{api}/received_events"),
            "type": if is_bot { "Bot" } else { "User" },
            "user_view_type": "public",
            "site_admin": false,
        })
    }

    /// `GET /user`: the caller as `private-user` (the profile fields are
    /// not modelled: null, as for a user who filled none in; counts 0).
    pub fn private_user_json(login: &str) -> Value {
        let mut value = Self::user_json(login);
        let extra = json!({
            "user_view_type": "private",
            "name": Value::Null, "company": Value::Null, "blog": "",
            "location": Value::Null, "email": Value::Null, "hireable": Value::Null,
            "bio": Value::Null, "twitter_username": Value::Null,
            "notification_email": Value::Null,
            "public_repos": 0, "public_gists": 0, "followers": 0, "following": 0,
            "created_at": iso8601(0), "updated_at": iso8601(0),
            "private_gists": 0, "total_private_repos": 0, "owned_private_repos": 0,
            "disk_usage": 0, "collaborators": 0, "two_factor_authentication": true,
        });
        if let (Some(v), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        value
    }

    /// `performed_via_github_app`: the App an installation token acted
    /// for (an `{slug}[bot]` login), `null` for a person's own call.
    pub fn app_json(login: &str) -> Value {
        let Some(slug) = login.strip_suffix("[bot]") else {
            return Value::Null;
        };
        json!({
            "id": stable_user_id(slug),
            "slug": slug,
            "node_id": node_id("A", stable_user_id(slug)),
            "name": slug,
            "description": Value::Null,
            "external_url": format!("{WEB_BASE}/apps/{slug}"),
            "owner": Self::user_json("gatehouse"),
            "html_url": format!("{WEB_BASE}/apps/{slug}"),
            "created_at": iso8601(0),
            "updated_at": iso8601(0),
            "permissions": {"contents": "write", "issues": "write", "pull_requests": "write"},
            "events": [],
        })
    }

    pub fn repo_json(repo: &Repo) -> Value {
        let api = repo.api_url();
        let html = repo.html_url();
        // The `repository` schema's required fields (REST description):
        // its URL templates as GitHub writes them, and the counts and
        // settings of a fresh private repository.
        let mut value = json!({
            "id": repo.id,
            "node_id": node_id("R", repo.id),
            "name": repo.name,
            "full_name": repo.full_name(),
            "private": true,
            "owner": Self::user_json(&repo.owner),
            "html_url": html,
            "description": Value::Null,
            "fork": false,
            "url": api,
            "clone_url": format!("{html}.git"),
            "git_url": format!("git://github.com/{}.git", repo.full_name()),
            "ssh_url": format!("git@github.com:{}.git", repo.full_name()),
            "svn_url": html,
            "mirror_url": Value::Null,
            "homepage": Value::Null,
            "language": Value::Null,
            "license": Value::Null,
            "default_branch": repo.default_branch,
            "visibility": "private",
            "permissions": {"admin": false, "maintain": false, "push": true, "triage": true, "pull": true},
        });
        let settings = json!({
            "size": 0,
            "forks": 0, "forks_count": 0,
            "stargazers_count": 0, "watchers": 0, "watchers_count": 0,
            "open_issues": 0, "open_issues_count": 0,
            "has_issues": true, "has_projects": true, "has_wiki": false,
            "has_pages": false, "has_downloads": true, "has_discussions": false,
            "archived": false, "disabled": false, "is_template": false,
            "allow_forking": false, "web_commit_signoff_required": false,
            "topics": [],
            "pushed_at": iso8601(0), "created_at": iso8601(0), "updated_at": iso8601(0),
        });
        if let (Some(v), Some(settings)) = (value.as_object_mut(), settings.as_object()) {
            v.extend(settings.clone());
        }
        let templates = [
            ("archive_url", "/{archive_format}{/ref}"),
            ("assignees_url", "/assignees{/user}"),
            ("blobs_url", "/git/blobs{/sha}"),
            ("branches_url", "/branches{/branch}"),
            ("collaborators_url", "/collaborators{/collaborator}"),
            ("comments_url", "/comments{/number}"),
            ("commits_url", "/commits{/sha}"),
            ("compare_url", "/compare/{base}...{head}"),
            ("contents_url", "/contents/{+path}"),
            ("contributors_url", "/contributors"),
            ("deployments_url", "/deployments"),
            ("downloads_url", "/downloads"),
            ("events_url", "/events"),
            ("forks_url", "/forks"),
            ("git_commits_url", "/git/commits{/sha}"),
            ("git_refs_url", "/git/refs{/sha}"),
            ("git_tags_url", "/git/tags{/sha}"),
            ("hooks_url", "/hooks"),
            ("issue_comment_url", "/issues/comments{/number}"),
            ("issue_events_url", "/issues/events{/number}"),
            ("issues_url", "/issues{/number}"),
            ("keys_url", "/keys{/key_id}"),
            ("labels_url", "/labels{/name}"),
            ("languages_url", "/languages"),
            ("merges_url", "/merges"),
            ("milestones_url", "/milestones{/number}"),
            (
                "notifications_url",
                "/notifications{?since,all,participating}",
            ),
            ("pulls_url", "/pulls{/number}"),
            ("releases_url", "/releases{/id}"),
            ("stargazers_url", "/stargazers"),
            ("statuses_url", "/statuses/{sha}"),
            ("subscribers_url", "/subscribers"),
            ("subscription_url", "/subscription"),
            ("tags_url", "/tags"),
            ("teams_url", "/teams"),
            ("trees_url", "/git/trees{/sha}"),
        ];
        for (field, tail) in templates {
            value[field] = json!(format!("{api}{tail}"));
        }
        value
    }

    /// `GET /repos/{owner}/{repo}`: `full-repository`, the `repository`
    /// fields plus the network's counts.
    pub fn full_repo_json(repo: &Repo) -> Value {
        let mut value = Self::repo_json(repo);
        value["network_count"] = json!(0);
        value["subscribers_count"] = json!(0);
        value
    }

    pub fn issue_json(&self, issue: &Issue) -> Value {
        let Some(repo) = self.repo_by_id(issue.repo_id) else {
            return Value::Null;
        };
        let comments = self
            .comments
            .iter()
            .filter(|c| {
                c.comment.kind == CommentKind::Issue
                    && c.repo_id == issue.repo_id
                    && c.comment.number == issue.number
            })
            .count();
        let kind_path = if issue.pull.is_some() {
            "pull"
        } else {
            "issues"
        };
        let mut value = json!({
            "id": issue.id,
            "node_id": node_id(if issue.pull.is_some() { "PR" } else { "I" }, issue.id),
            "url": format!("{}/issues/{}", repo.api_url(), issue.number),
            "repository_url": repo.api_url(),
            "comments_url": format!("{}/issues/{}/comments", repo.api_url(), issue.number),
            "labels_url": format!("{}/issues/{}/labels{{/name}}", repo.api_url(), issue.number),
            "events_url": format!("{}/issues/{}/events", repo.api_url(), issue.number),
            "timeline_url": format!("{}/issues/{}/timeline", repo.api_url(), issue.number),
            "html_url": format!("{}/{kind_path}/{}", repo.html_url(), issue.number),
            "number": issue.number,
            "title": issue.title,
            "body": issue.body,
            "user": Self::user_json(&issue.author),
            "state": if issue.open { "open" } else { "closed" },
            "locked": false,
            "active_lock_reason": Value::Null,
            "labels": self.labels_json(repo, &issue.labels),
            "assignee": Value::Null,
            "assignees": [],
            "milestone": Value::Null,
            "comments": comments,
            "created_at": iso8601(issue.created_at),
            "updated_at": iso8601(issue.updated_at),
            "closed_at": issue.closed_at.map(iso8601),
            "author_association": "MEMBER",
            "performed_via_github_app": Self::app_json(&issue.author),
            "reactions": reactions_json(&format!("{}/issues/{}", repo.api_url(), issue.number)),
        });
        if let Some(pull) = &issue.pull {
            value["pull_request"] = json!({
                "url": format!("{}/pulls/{}", repo.api_url(), issue.number),
                "html_url": format!("{}/pull/{}", repo.html_url(), issue.number),
                "diff_url": format!("{}/pull/{}.diff", repo.html_url(), issue.number),
                "patch_url": format!("{}/pull/{}.patch", repo.html_url(), issue.number),
                "merged_at": pull.merged_at.map(iso8601),
            });
        }
        value
    }

    /// A pull request as `GET …/pulls/{n}` and webhooks show it (GitHub's
    /// `pull-request` schema).
    pub fn pull_json(&self, issue: &Issue) -> Value {
        let mut value = self.pull_simple_json(issue);
        let Some(pull) = issue.pull.as_ref() else {
            return value;
        };
        // Not mergeable-computed yet, or merged: `null` and "unknown".
        let (mergeable, state) = if pull.merged || !pull.mergeable_known {
            (Value::Null, "unknown")
        } else if pull.draft {
            (json!(true), "draft")
        } else {
            (json!(true), "clean")
        };
        value["merged"] = json!(pull.merged);
        // Who merged: the model keeps no merger, so the author stands in.
        value["merged_by"] = if pull.merged {
            Self::user_json(&issue.author)
        } else {
            Value::Null
        };
        value["maintainer_can_modify"] = json!(false);
        // The diff's counts come from git: the server fills them in
        // (`GithubState::fill_from_git`); 0 where it cannot read them.
        for field in ["commits", "additions", "deletions", "changed_files"] {
            value[field] = json!(0);
        }
        value["mergeable"] = mergeable;
        value["mergeable_state"] = json!(state);
        value["rebaseable"] = value["mergeable"].clone();
        value["comments"] = json!(self
            .comments
            .iter()
            .filter(|c| c.comment.kind == CommentKind::Issue
                && c.repo_id == issue.repo_id
                && c.comment.number == issue.number)
            .count());
        value["review_comments"] = json!(self
            .comments
            .iter()
            .filter(|c| c.comment.kind == CommentKind::Review
                && c.repo_id == issue.repo_id
                && c.comment.number == issue.number)
            .count());
        value
    }

    /// A pull request as `GET …/pulls` lists it (GitHub's
    /// `pull-request-simple`: no `merged`, `mergeable` or counts).
    pub fn pull_simple_json(&self, issue: &Issue) -> Value {
        let (Some(repo), Some(pull)) = (self.repo_by_id(issue.repo_id), issue.pull.as_ref()) else {
            return Value::Null;
        };
        let branch = |name: &str, sha: &str| {
            json!({
                "label": format!("{}:{}", repo.owner, name),
                "ref": name,
                "sha": sha,
                "repo": Self::repo_json(repo),
                "user": Self::user_json(&repo.owner),
            })
        };
        let links = json!({
            "self": {"href": format!("{}/pulls/{}", repo.api_url(), issue.number)},
            "html": {"href": format!("{}/pull/{}", repo.html_url(), issue.number)},
            "issue": {"href": format!("{}/issues/{}", repo.api_url(), issue.number)},
            "comments": {"href": format!("{}/issues/{}/comments", repo.api_url(), issue.number)},
            "review_comments": {"href": format!("{}/pulls/{}/comments", repo.api_url(), issue.number)},
            "review_comment": {"href": format!("{}/pulls/comments{{/number}}", repo.api_url())},
            "commits": {"href": format!("{}/pulls/{}/commits", repo.api_url(), issue.number)},
            "statuses": {"href": format!("{}/statuses/{}", repo.api_url(), pull.head_sha)},
        });
        json!({
            "id": issue.id,
            "node_id": node_id("PR", issue.id),
            "url": format!("{}/pulls/{}", repo.api_url(), issue.number),
            "html_url": format!("{}/pull/{}", repo.html_url(), issue.number),
            "diff_url": format!("{}/pull/{}.diff", repo.html_url(), issue.number),
            "patch_url": format!("{}/pull/{}.patch", repo.html_url(), issue.number),
            "issue_url": format!("{}/issues/{}", repo.api_url(), issue.number),
            "commits_url": format!("{}/pulls/{}/commits", repo.api_url(), issue.number),
            "review_comments_url": format!("{}/pulls/{}/comments", repo.api_url(), issue.number),
            "review_comment_url": format!("{}/pulls/comments{{/number}}", repo.api_url()),
            "comments_url": format!("{}/issues/{}/comments", repo.api_url(), issue.number),
            "statuses_url": format!("{}/statuses/{}", repo.api_url(), pull.head_sha),
            "number": issue.number,
            "state": if issue.open { "open" } else { "closed" },
            "locked": false,
            "title": issue.title,
            "body": issue.body,
            "user": Self::user_json(&issue.author),
            "labels": self.labels_json(repo, &issue.labels),
            "milestone": Value::Null,
            "active_lock_reason": Value::Null,
            "assignee": Value::Null,
            "assignees": [],
            "draft": pull.draft,
            "head": branch(&pull.head, &pull.head_sha),
            "base": branch(&pull.base, &pull.base_sha),
            "requested_reviewers": pull.requested_reviewers.iter().map(|l| Self::user_json(l)).collect::<Vec<_>>(),
            "requested_teams": [],
            "created_at": iso8601(issue.created_at),
            "updated_at": iso8601(issue.updated_at),
            "closed_at": issue.closed_at.map(iso8601),
            "merged_at": pull.merged_at.map(iso8601),
            "merge_commit_sha": pull.merged.then(|| pull.head_sha.clone()),
            "author_association": "MEMBER",
            "auto_merge": Value::Null,
            "_links": links,
        })
    }

    pub fn comment_json(&self, stored: &StoredComment) -> Value {
        let Some(repo) = self.repo_by_id(stored.repo_id) else {
            return Value::Null;
        };
        let c = &stored.comment;
        match c.kind {
            CommentKind::Issue => {
                let is_pull = self
                    .issue(stored.repo_id, c.number)
                    .is_some_and(|i| i.pull.is_some());
                let kind_path = if is_pull { "pull" } else { "issues" };
                json!({
                    "id": c.id,
                    "node_id": node_id("IC", c.id),
                    "url": format!("{}/issues/comments/{}", repo.api_url(), c.id),
                    "html_url": format!("{}/{kind_path}/{}#issuecomment-{}", repo.html_url(), c.number, c.id),
                    "issue_url": format!("{}/issues/{}", repo.api_url(), c.number),
                    "body": c.body,
                    "user": Self::user_json(&c.author),
                    "created_at": iso8601(stored.created_at),
                    "updated_at": iso8601(stored.updated_at),
                    "author_association": "MEMBER",
                    "performed_via_github_app": Self::app_json(&c.author),
                    "reactions": reactions_json(&format!("{}/issues/comments/{}", repo.api_url(), c.id)),
                })
            }
            CommentKind::Review => {
                let mut value = json!({
                    "id": c.id,
                    "node_id": node_id("PRRC", c.id),
                    "url": format!("{}/pulls/comments/{}", repo.api_url(), c.id),
                    "html_url": format!("{}/pull/{}#discussion_r{}", repo.html_url(), c.number, c.id),
                    "pull_request_url": format!("{}/pulls/{}", repo.api_url(), c.number),
                    "body": c.body,
                    "path": c.path,
                    // The diff position fields GitHub gives a line comment
                    // (REST description, `pull-request-review-comment`):
                    // comments here are single-line, on the new side, made
                    // on the commit they still show.
                    "diff_hunk": diff_hunk(stored.line),
                    "position": stored.line,
                    "original_position": stored.line,
                    "line": stored.line,
                    "original_line": stored.line,
                    "start_line": Value::Null,
                    "original_start_line": Value::Null,
                    "side": "RIGHT",
                    "start_side": Value::Null,
                    "subject_type": "line",
                    "commit_id": stored.commit_id,
                    "original_commit_id": stored.commit_id,
                    "pull_request_review_id": stored.review_id,
                    "user": Self::user_json(&c.author),
                    "created_at": iso8601(stored.created_at),
                    "updated_at": iso8601(stored.updated_at),
                    "author_association": "MEMBER",
                    "reactions": reactions_json(&format!("{}/pulls/comments/{}", repo.api_url(), c.id)),
                    "_links": {
                        "self": {"href": format!("{}/pulls/comments/{}", repo.api_url(), c.id)},
                        "html": {"href": format!("{}/pull/{}#discussion_r{}", repo.html_url(), c.number, c.id)},
                        "pull_request": {"href": format!("{}/pulls/{}", repo.api_url(), c.number)},
                    },
                });
                if let Some(parent) = c.in_reply_to {
                    value["in_reply_to_id"] = json!(parent);
                }
                value
            }
        }
    }

    /// Labels by name, in the `label` shape (the default set's colors).
    pub fn labels_json(&self, repo: &Repo, names: &[String]) -> Value {
        Value::Array(names.iter().map(|n| label_json(repo, n)).collect())
    }

    pub fn review_json(&self, review: &Review) -> Value {
        let Some(repo) = self.repo_by_id(review.repo_id) else {
            return Value::Null;
        };
        // The pull request's head when the review was read: reviews do not
        // keep the commit they were made on here.
        let commit_id = self
            .issue(review.repo_id, review.number)
            .and_then(|i| i.pull.as_ref())
            .map(|p| p.head_sha.clone());
        json!({
            "commit_id": commit_id,
            "_links": {
                "html": {"href": format!("{}/pull/{}#pullrequestreview-{}", repo.html_url(), review.number, review.id)},
                "pull_request": {"href": format!("{}/pulls/{}", repo.api_url(), review.number)},
            },
            "id": review.id,
            "node_id": node_id("PRR", review.id),
            "user": Self::user_json(&review.author),
            "body": review.body,
            "state": review.state,
            "html_url": format!("{}/pull/{}#pullrequestreview-{}", repo.html_url(), review.number, review.id),
            "pull_request_url": format!("{}/pulls/{}", repo.api_url(), review.number),
            "submitted_at": iso8601(review.submitted_at),
            "author_association": "MEMBER",
        })
    }

    /// A job's `status`, `conclusion` and `completed_at`: a job added with
    /// conclusion `queued` or `in_progress` (or `waiting`, `pending`) has
    /// that status and no conclusion or completion yet, as GitHub shows a
    /// check run that has not finished.
    pub(crate) fn job_state(job: &Job) -> (&str, Value, Value) {
        match job.conclusion.as_str() {
            status @ ("queued" | "in_progress" | "waiting" | "pending") => {
                (status, Value::Null, Value::Null)
            }
            conclusion => (
                "completed",
                json!(conclusion),
                json!(iso8601(job.created_at)),
            ),
        }
    }

    pub fn job_json(&self, job: &Job) -> Value {
        let Some(repo) = self.repo_by_id(job.repo_id) else {
            return Value::Null;
        };
        let (status, conclusion, completed_at) = Self::job_state(job);
        let mut value = json!({
            "id": job.id,
            "run_id": job.run_id,
            "node_id": node_id("CR", job.id),
            "name": job.name,
            "head_sha": job.head_sha,
            "status": status,
            "conclusion": conclusion,
            "url": format!("{}/actions/jobs/{}", repo.api_url(), job.id),
            "html_url": format!("{}/actions/runs/{}/job/{}", repo.html_url(), job.run_id, job.id),
            "run_url": format!("{}/actions/runs/{}", repo.api_url(), job.run_id),
            "check_run_url": format!("{}/check-runs/{}", repo.api_url(), job.id),
            // The run's name (one job a run here); the branch is not kept
            // with a job, which the schema allows as null.
            "workflow_name": job.name,
            "head_branch": Value::Null,
            "run_attempt": 1,
            "labels": ["ubuntu-latest"],
            "created_at": iso8601(job.created_at),
            "started_at": iso8601(job.created_at),
            "completed_at": completed_at,
            "steps": [],
        });
        // A job waiting for a runner has none yet (null, as GitHub shows).
        let runner = if status == "queued" || status == "waiting" || status == "pending" {
            (Value::Null, Value::Null, Value::Null, Value::Null)
        } else {
            (
                json!(1),
                json!("GitHub Actions 1"),
                json!(0),
                json!("GitHub Actions"),
            )
        };
        value["runner_id"] = runner.0;
        value["runner_name"] = runner.1;
        value["runner_group_id"] = runner.2;
        value["runner_group_name"] = runner.3;
        value
    }

    pub fn run_json(&self, job: &Job) -> Value {
        let Some(repo) = self.repo_by_id(job.repo_id) else {
            return Value::Null;
        };
        let (status, conclusion, _) = Self::job_state(job);
        let mut value = json!({
            "id": job.run_id,
            "node_id": node_id("WFR", job.run_id),
            "name": job.name,
            "head_sha": job.head_sha,
            "status": status,
            "conclusion": conclusion,
            "url": format!("{}/actions/runs/{}", repo.api_url(), job.run_id),
            "html_url": format!("{}/actions/runs/{}", repo.html_url(), job.run_id),
            "jobs_url": format!("{}/actions/runs/{}/jobs", repo.api_url(), job.run_id),
            "logs_url": format!("{}/actions/runs/{}/logs", repo.api_url(), job.run_id),
            // The run's check suite has the run's id here (one suite a run).
            "check_suite_id": job.run_id,
            "check_suite_url": format!("{}/check-suites/{}", repo.api_url(), job.run_id),
            "cancel_url": format!("{}/actions/runs/{}/cancel", repo.api_url(), job.run_id),
            "rerun_url": format!("{}/actions/runs/{}/rerun", repo.api_url(), job.run_id),
            "artifacts_url": format!("{}/actions/runs/{}/artifacts", repo.api_url(), job.run_id),
            "display_title": job.name,
            "event": "push",
            "run_number": self.jobs.iter().filter(|j| j.repo_id == job.repo_id && j.workflow == job.workflow && j.run_id <= job.run_id).count(),
            "run_attempt": 1,
            // The branch is not kept with a job (null-able in the schema);
            // the head commit's details come from git, filled in by the
            // server (`GithubState::add_run_commits`).
            "head_branch": Value::Null,
            "head_commit": Value::Null,
            "pull_requests": [],
            "created_at": iso8601(job.created_at),
            "updated_at": iso8601(job.created_at),
            "run_started_at": iso8601(job.created_at),
            "repository": Self::repo_json(repo),
            "head_repository": Self::repo_json(repo),
        });
        if let Some(path) = &job.workflow {
            let id = workflow_id(repo.id, path);
            value["workflow_id"] = json!(id);
            value["path"] = json!(path);
            value["workflow_url"] = json!(format!("{}/actions/workflows/{id}", repo.api_url()));
        }
        value
    }

    pub fn check_run_json(&self, job: &Job) -> Value {
        let Some(repo) = self.repo_by_id(job.repo_id) else {
            return Value::Null;
        };
        let (status, conclusion, completed_at) = Self::job_state(job);
        json!({
            "id": job.id,
            "node_id": node_id("CR", job.id),
            "name": job.name,
            "head_sha": job.head_sha,
            "status": status,
            "conclusion": conclusion,
            "url": format!("{}/check-runs/{}", repo.api_url(), job.id),
            "html_url": format!("{}/actions/runs/{}/job/{}", repo.html_url(), job.run_id, job.id),
            "details_url": format!("{}/actions/runs/{}/job/{}", repo.html_url(), job.run_id, job.id),
            "started_at": iso8601(job.created_at),
            "completed_at": completed_at,
            "output": {
                "title": conclusion,
                "summary": "",
                "text": Value::Null,
                "annotations_count": job.annotations.len(),
                "annotations_url": format!("{}/check-runs/{}/annotations", repo.api_url(), job.id),
            },
            "external_id": "",
            "check_suite": {"id": job.run_id},
            "pull_requests": [],
            "app": github_actions_app(),
        })
    }

    /// A run's check suite (`check-suite`): GitHub makes one for each
    /// workflow run, owned by the Actions App; the run's one job is its one
    /// check run. `head_commit` is filled from git by the server, as for
    /// runs.
    pub fn check_suite_json(&self, job: &Job) -> Value {
        let Some(repo) = self.repo_by_id(job.repo_id) else {
            return Value::Null;
        };
        let (status, conclusion, _) = Self::job_state(job);
        let url = format!("{}/check-suites/{}", repo.api_url(), job.run_id);
        json!({
            "id": job.run_id,
            "node_id": node_id("CS", job.run_id),
            "head_branch": Value::Null,
            "head_sha": job.head_sha,
            "status": status,
            "conclusion": conclusion,
            "url": url,
            // The push that made the commit is not kept.
            "before": Value::Null,
            "after": job.head_sha,
            "pull_requests": [],
            "app": github_actions_app(),
            "repository": Self::repo_json(repo),
            "created_at": iso8601(job.created_at),
            "updated_at": iso8601(job.created_at),
            "head_commit": Value::Null,
            "latest_check_runs_count": 1,
            "check_runs_url": format!("{url}/check-runs"),
            "rerequestable": true,
            "runs_rerequestable": true,
        })
    }
}

/// The reactions of an issue or comment at `url` (`reaction-rollup`, which
/// issues and comments carry, REST and webhooks alike); none are modelled.
fn reactions_json(url: &str) -> Value {
    json!({"url": format!("{url}/reactions"), "total_count": 0, "+1": 0, "-1": 0,
           "laugh": 0, "confused": 0, "heart": 0, "hooray": 0, "eyes": 0, "rocket": 0})
}

/// The GitHub Actions App, which owns Actions' check runs, as the API
/// shows it (`integration`; id, dates and links as api.github.com gives
/// them for `/apps/github-actions`).
fn github_actions_app() -> Value {
    let mut owner = Model::user_json("github");
    owner["id"] = json!(9_919);
    owner["type"] = json!("Organization");
    json!({
        "id": 15_368,
        "slug": "github-actions",
        "node_id": "MDM6QXBwMTUzNjg=",
        "owner": owner,
        "name": "GitHub Actions",
        "description": "Automate your workflow from idea to production",
        "external_url": "https://help.github.com/en/actions",
        "html_url": "https://github.com/apps/github-actions",
        "created_at": "2018-07-30T09:30:17Z",
        "updated_at": "2019-12-10T19:04:12Z",
        "permissions": {"actions": "write", "checks": "write", "contents": "write",
                        "metadata": "read", "pull_requests": "write", "statuses": "write"},
        "events": ["check_run", "check_suite", "pull_request", "push", "workflow_dispatch"],
    })
}

/// An annotation as `GET …/check-runs/{id}/annotations` lists it
/// (`check-annotation`; `blob_href` names the file at the run's commit).
pub(crate) fn annotation_json(repo: &Repo, head_sha: &str, a: &Annotation) -> Value {
    json!({
        "path": a.path,
        "blob_href": format!("{}/blob/{head_sha}/{}", repo.html_url(), a.path),
        "start_line": a.start_line,
        "end_line": a.end_line,
        "start_column": Value::Null,
        "end_column": Value::Null,
        "annotation_level": a.level,
        "title": a.title,
        "message": a.message,
        "raw_details": a.raw_details,
    })
}

/// A workflow's id: stable per repository and file, numeric as GitHub's.
pub(crate) fn workflow_id(repo_id: u64, path: &str) -> u64 {
    stable_user_id(&format!("{repo_id}:{path}")) + 100_000_000
}

/// A review comment's `diff_hunk`: the hunk header down to its line (the
/// file's text is not modelled, so the hunk has no lines of its own).
fn diff_hunk(line: Option<u64>) -> String {
    let line = line.unwrap_or(1);
    format!("@@ -{line},1 +{line},1 @@")
}

/// A GitHub-looking global node id: a type prefix plus an opaque suffix.
pub(crate) fn node_id(prefix: &str, id: u64) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.to_be_bytes());
    format!("{prefix}_kwDO{encoded}")
}

/// Users are not modelled; give each login a stable id derived from its name.
pub(crate) fn stable_user_id(login: &str) -> u64 {
    // FNV-1a: stable across runs and platforms, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in login.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % 100_000_000 + 1
}

/// One label in the REST description's `label` shape.
pub(crate) fn label_json(repo: &Repo, name: &str) -> Value {
    let (color, description) = DEFAULT_LABELS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or(("ededed", None), |(_, c, d)| (*c, Some(*d)));
    let hash = name
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    json!({"id": hash % 1_000_000_000, "node_id": format!("LA_{}", hash % 1_000_000_000),
           "url": format!("{}/labels/{}", repo.api_url(), name.replace(' ', "%20")),
           "name": name, "color": color, "default": description.is_some(),
           "description": description})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(model: &mut Model, repo_id: u64, conclusion: &str) -> Job {
        Job {
            id: model.fresh_id(),
            run_id: model.fresh_id(),
            repo_id,
            name: "test".into(),
            head_sha: "a".repeat(40),
            conclusion: conclusion.into(),
            logs: String::new(),
            created_at: 1_700_000_000,
            workflow: None,
            annotations: Vec::new(),
        }
    }

    #[test]
    fn unfinished_check_runs_have_no_conclusion_yet() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        for (given, status, conclusion, done) in [
            ("queued", "queued", Value::Null, false),
            ("in_progress", "in_progress", Value::Null, false),
            ("success", "completed", json!("success"), true),
            ("failure", "completed", json!("failure"), true),
        ] {
            let j = job(&mut model, repo_id, given);
            for v in [model.check_run_json(&j), model.job_json(&j)] {
                assert_eq!(v["status"], status, "{given}");
                assert_eq!(v["conclusion"], conclusion, "{given}");
                assert_eq!(v["completed_at"].is_string(), done, "{given}");
            }
            let run = model.run_json(&j);
            assert_eq!(
                (&run["status"], &run["conclusion"]),
                (&json!(status), &conclusion)
            );
        }
    }

    #[test]
    fn review_comments_carry_the_diff_fields_and_apps_are_named() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let pull = PullInfo::new("x", &"a".repeat(40), "main", &"b".repeat(40), false);
        let n = model.add_issue(repo_id, "t", "", "alice", Some(pull), 1);
        let sha = "c".repeat(40);
        let id = model.add_comment(
            CommentKind::Review,
            repo_id,
            n,
            "nit",
            "gatehouse[bot]",
            None,
            Some("src/a.rs".into()),
            Some(7),
            Some(sha.clone()),
            2,
        );
        let v = model.comment_json(model.comment(CommentKind::Review, repo_id, id).unwrap());
        for (field, expected) in [
            ("path", json!("src/a.rs")),
            ("line", json!(7)),
            ("original_line", json!(7)),
            ("position", json!(7)),
            ("side", json!("RIGHT")),
            ("commit_id", json!(sha)),
            ("original_commit_id", json!(sha)),
            ("subject_type", json!("line")),
        ] {
            assert_eq!(v[field], expected, "{field}");
        }
        assert!(v["diff_hunk"]
            .as_str()
            .unwrap()
            .starts_with("@@ -7,1 +7,1 @@"));
        let by_app = model.add_comment(
            CommentKind::Issue,
            repo_id,
            n,
            "hi",
            "gatehouse[bot]",
            None,
            None,
            None,
            None,
            3,
        );
        let by_person = model.add_comment(
            CommentKind::Issue,
            repo_id,
            n,
            "hi",
            "alice",
            None,
            None,
            None,
            None,
            3,
        );
        let app = &model.comment_json(model.comment(CommentKind::Issue, repo_id, by_app).unwrap())
            ["performed_via_github_app"];
        assert_eq!(app["slug"], "gatehouse");
        assert!(app["id"].is_u64());
        let person = model.comment_json(
            model
                .comment(CommentKind::Issue, repo_id, by_person)
                .unwrap(),
        );
        assert!(person["performed_via_github_app"].is_null());
        assert!(person
            .as_object()
            .unwrap()
            .contains_key("performed_via_github_app"));
    }
}
