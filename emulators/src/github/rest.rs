//! GitHub REST: a pure router from path to [`Route`] and handlers that read
//! and change the [`Model`]. No I/O here; the caller passes the
//! authenticated login, the body and `now`.

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::events::EventKind;
use super::model::{CommentKind, Job, Model, PullInfo, Review, API_BASE};
use super::pulls;

/// A REST endpoint the emulator knows, with its path parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /`: the API's root, links to its resources; `gh auth status`
    /// checks its token with it (and reads `X-OAuth-Scopes`, which
    /// installation tokens do not have).
    Root,
    User,
    RateLimit,
    Repo(RepoPath),
    Issues(RepoPath),
    Issue(RepoPath, u64),
    IssueComments(RepoPath, u64),
    RepoIssueComments(RepoPath),
    RepoPullComments(RepoPath),
    IssueComment(RepoPath, u64),
    Pulls(RepoPath),
    Pull(RepoPath, u64),
    PullComments(RepoPath, u64),
    PullCommentReplies(RepoPath, u64, u64),
    PullReviews(RepoPath, u64),
    PullRequestedReviewers(RepoPath, u64),
    PullMerge(RepoPath, u64),
    CommitCheckRuns(RepoPath, String),
    ActionsRuns(RepoPath),
    ActionsRun(RepoPath, u64),
    ActionsRunJobs(RepoPath, u64),
    /// A run's artifacts (`gh run view` lists them); none are modelled.
    ActionsRunArtifacts(RepoPath, u64),
    ActionsJob(RepoPath, u64),
    ActionsJobLogs(RepoPath, u64),
    Graphql,
    /// Reads of the repository's git data (`super::contents`).
    Readme(RepoPath),
    /// The path inside the tree (empty: the root).
    Contents(RepoPath, String),
    Branches(RepoPath),
    Branch(RepoPath, String),
    Commits(RepoPath),
    Commit(RepoPath, String),
    /// `{base}...{head}`.
    Compare(RepoPath, String),
    PullFiles(RepoPath, u64),
    PullCommits(RepoPath, u64),
    /// `git/trees/{sha}`, `git/blobs/{sha}`, `git/commits/{sha}`,
    /// `git/ref/{ref}`, `git/matching-refs/{ref}`: (kind, the rest).
    GitObject(RepoPath, &'static str, String),
    RepoPullComment(RepoPath, u64),
    PullReview(RepoPath, u64, u64),
    CheckRun(RepoPath, u64),
    ActionsRunAttemptJobs(RepoPath, u64, u64),
    Labels(RepoPath),
    IssueLabels(RepoPath, u64),
    IssueEvents(RepoPath, u64),
    IssueTimeline(RepoPath, u64),
    /// `pulls/{n}/reviews/{id}/comments`.
    PullReviewComments(RepoPath, u64, u64),
    CheckRunAnnotations(RepoPath, u64),
    /// A run's check suite (one a run here: the suite has the run's id).
    CheckSuite(RepoPath, u64),
    CheckSuiteRuns(RepoPath, u64),
    CommitCheckSuites(RepoPath, String),
    /// The workflows read from `.github/workflows` (`super::actions`).
    Workflows(RepoPath),
    /// A workflow by id or file name.
    Workflow(RepoPath, String),
    WorkflowRuns(RepoPath, String),
    ActionsRunLogs(RepoPath, u64),
}

impl Route {
    /// Whether the route reads git data (answered from the bare repository).
    pub(crate) fn reads_git(&self) -> bool {
        matches!(
            self,
            Route::Readme(_)
                | Route::Contents(..)
                | Route::Branches(_)
                | Route::Branch(..)
                | Route::Commits(_)
                | Route::Commit(..)
                | Route::Compare(..)
                | Route::PullFiles(..)
                | Route::PullCommits(..)
                | Route::GitObject(..)
                | Route::Workflows(_)
                | Route::Workflow(..)
                | Route::WorkflowRuns(..)
        )
    }
}

/// `{owner}/{repo}` as written in the path (case preserved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RepoPath {
    pub owner: String,
    pub name: String,
}

/// Map a path to a route; `None` is a 404. `/repositories/{id}/…` aliases
/// are resolved by the caller (they need the model) via [`repository_alias`].
pub(crate) fn route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let number = |s: &str| s.parse::<u64>().ok().filter(|_| !s.starts_with('+'));
    Some(match segments.as_slice() {
        [""] => Route::Root,
        ["user"] => Route::User,
        ["rate_limit"] => Route::RateLimit,
        ["graphql"] => Route::Graphql,
        ["repos", owner, name, rest @ ..] => {
            if !valid_name(owner) || !valid_name(name) {
                return None;
            }
            let repo = RepoPath {
                owner: (*owner).to_owned(),
                name: (*name).to_owned(),
            };
            match rest {
                [] => Route::Repo(repo),
                ["issues"] => Route::Issues(repo),
                ["issues", "comments"] => Route::RepoIssueComments(repo),
                ["issues", "comments", id] => Route::IssueComment(repo, number(id)?),
                ["issues", n] => Route::Issue(repo, number(n)?),
                ["issues", n, "comments"] => Route::IssueComments(repo, number(n)?),
                ["pulls"] => Route::Pulls(repo),
                ["pulls", "comments"] => Route::RepoPullComments(repo),
                ["pulls", n] => Route::Pull(repo, number(n)?),
                ["pulls", n, "comments"] => Route::PullComments(repo, number(n)?),
                ["pulls", n, "comments", id, "replies"] => {
                    Route::PullCommentReplies(repo, number(n)?, number(id)?)
                }
                ["pulls", n, "reviews"] => Route::PullReviews(repo, number(n)?),
                ["pulls", n, "requested_reviewers"] => {
                    Route::PullRequestedReviewers(repo, number(n)?)
                }
                ["pulls", n, "merge"] => Route::PullMerge(repo, number(n)?),
                ["pulls", n, "files"] => Route::PullFiles(repo, number(n)?),
                ["pulls", n, "commits"] => Route::PullCommits(repo, number(n)?),
                ["readme"] => Route::Readme(repo),
                ["contents"] => Route::Contents(repo, String::new()),
                ["contents", path @ ..] => Route::Contents(repo, path.join("/")),
                ["branches"] => Route::Branches(repo),
                ["branches", name @ ..] if !name.is_empty() => Route::Branch(repo, name.join("/")),
                ["commits"] => Route::Commits(repo),
                ["commits", sha] if !sha.is_empty() => Route::Commit(repo, (*sha).to_owned()),
                ["compare", spec @ ..] if !spec.is_empty() => Route::Compare(repo, spec.join("/")),
                ["git", "trees", sha] => Route::GitObject(repo, "trees", (*sha).to_owned()),
                ["git", "blobs", sha] => Route::GitObject(repo, "blobs", (*sha).to_owned()),
                ["git", "commits", sha] => Route::GitObject(repo, "commits", (*sha).to_owned()),
                ["git", "ref", name @ ..] if !name.is_empty() => {
                    Route::GitObject(repo, "ref", name.join("/"))
                }
                ["git", "matching-refs", name @ ..] if !name.is_empty() => {
                    Route::GitObject(repo, "matching-refs", name.join("/"))
                }
                ["pulls", "comments", id] => Route::RepoPullComment(repo, number(id)?),
                ["pulls", n, "reviews", id] => Route::PullReview(repo, number(n)?, number(id)?),
                ["check-runs", id] => Route::CheckRun(repo, number(id)?),
                ["labels"] => Route::Labels(repo),
                ["issues", n, "labels"] => Route::IssueLabels(repo, number(n)?),
                ["issues", n, "events"] => Route::IssueEvents(repo, number(n)?),
                ["issues", n, "timeline"] => Route::IssueTimeline(repo, number(n)?),
                ["pulls", n, "reviews", id, "comments"] => {
                    Route::PullReviewComments(repo, number(n)?, number(id)?)
                }
                ["check-runs", id, "annotations"] => Route::CheckRunAnnotations(repo, number(id)?),
                ["check-suites", id] => Route::CheckSuite(repo, number(id)?),
                ["check-suites", id, "check-runs"] => Route::CheckSuiteRuns(repo, number(id)?),
                ["commits", git_ref, "check-suites"] if !git_ref.is_empty() => {
                    Route::CommitCheckSuites(repo, (*git_ref).to_owned())
                }
                ["actions", "workflows"] => Route::Workflows(repo),
                ["actions", "workflows", id] if !id.is_empty() => {
                    Route::Workflow(repo, (*id).to_owned())
                }
                ["actions", "workflows", id, "runs"] if !id.is_empty() => {
                    Route::WorkflowRuns(repo, (*id).to_owned())
                }
                ["actions", "runs", id, "logs"] => Route::ActionsRunLogs(repo, number(id)?),
                ["actions", "runs", id, "attempts", attempt, "jobs"] => {
                    Route::ActionsRunAttemptJobs(repo, number(id)?, number(attempt)?)
                }
                ["commits", git_ref, "check-runs"] if !git_ref.is_empty() => {
                    Route::CommitCheckRuns(repo, (*git_ref).to_owned())
                }
                ["actions", "runs"] => Route::ActionsRuns(repo),
                ["actions", "runs", id] => Route::ActionsRun(repo, number(id)?),
                ["actions", "runs", id, "jobs"] => Route::ActionsRunJobs(repo, number(id)?),
                ["actions", "runs", id, "artifacts"] => {
                    Route::ActionsRunArtifacts(repo, number(id)?)
                }
                ["actions", "jobs", id] => Route::ActionsJob(repo, number(id)?),
                ["actions", "jobs", id, "logs"] => Route::ActionsJobLogs(repo, number(id)?),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// `/repositories/{id}/rest` → (`id`, `/rest`), GitHub's id-based alias of
/// `/repos/{owner}/{repo}/rest`.
pub(crate) fn repository_alias(path: &str) -> Option<(u64, &str)> {
    let rest = path.strip_prefix("/repositories/")?;
    let (id, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    Some((id.parse().ok()?, tail))
}

/// `/repos/{owner}/{repo}/rest` → (`owner`, `repo`, `/rest`).
pub(crate) fn repository_named(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/repos/")?;
    let (owner, rest) = rest.split_once('/')?;
    let (name, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    (valid_name(owner) && valid_name(name)).then_some((owner, name, tail))
}

/// GitHub owner/repository name characters.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What a handler answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub body: Value,
    /// For created comments, reviews and pulls: the new id.
    pub created_id: Option<String>,
    /// For redirects.
    pub location: Option<String>,
    /// For a paginated list: where this page sits, for the `Link` header.
    pub pages: Option<Pages>,
    /// A text answer (`body` a string, sent as it is) in this media type
    /// instead of JSON: a diff, patch or sha.
    pub media: Option<super::contents::Media>,
}

/// A page of a list and how many pages the list has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pages {
    /// This page, from 1.
    pub page: usize,
    /// The last page (1 for an empty list).
    pub last: usize,
}

impl Reply {
    pub(crate) fn ok(body: Value) -> Self {
        Self {
            status: StatusCode::OK,
            body,
            created_id: None,
            location: None,
            pages: None,
            media: None,
        }
    }

    fn created(body: Value, id: u64) -> Self {
        Self {
            status: StatusCode::CREATED,
            body,
            created_id: Some(id.to_string()),
            location: None,
            pages: None,
            media: None,
        }
    }

    /// GitHub's error shape: `{message, documentation_url, status}`.
    pub fn error(status: StatusCode, message: &str) -> Self {
        Self {
            status,
            body: json!({
                "message": message,
                "documentation_url": "https://docs.github.com/rest",
                "status": status.as_u16().to_string(),
            }),
            created_id: None,
            location: None,
            pages: None,
            media: None,
        }
    }

    /// GitHub's answer to a request that names a repository by a former
    /// name: the same resource under `/repositories/{id}` (`url`), 301 for
    /// GET and HEAD, 307 for other methods, which a client repeats as they
    /// were (GitHub's "Repository redirects": "we'll respond with a 301 …
    /// for GET requests … 307 Temporary Redirect for other verbs"; the REST
    /// description's `moved_permanently` and `temporary_redirect`
    /// responses, a `basic-error` body with `url`).
    pub(crate) fn moved(method: &Method, url: String) -> Self {
        let status = if method == Method::GET || method == Method::HEAD {
            StatusCode::MOVED_PERMANENTLY
        } else {
            StatusCode::TEMPORARY_REDIRECT
        };
        let message = if status == StatusCode::MOVED_PERMANENTLY {
            "Moved Permanently"
        } else {
            "Temporary Redirect"
        };
        Self {
            status,
            body: json!({
                "message": message,
                "url": url,
                "documentation_url": "https://docs.github.com/rest/guides/best-practices-for-using-the-rest-api#follow-redirects",
            }),
            created_id: None,
            location: Some(url),
            pages: None,
            media: None,
        }
    }

    fn not_found() -> Self {
        Self::error(StatusCode::NOT_FOUND, "Not Found")
    }

    fn validation(field: &str, code: &str) -> Self {
        let mut reply = Self::error(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed");
        reply.body["errors"] = json!([{"field": field, "code": code}]);
        reply
    }
}

/// One authenticated REST call.
pub(crate) struct RestCall<'a> {
    pub method: &'a Method,
    pub route: Route,
    pub query: &'a [(String, String)],
    pub body: &'a [u8],
    pub login: &'a str,
    pub now: u64,
    /// For `POST …/pulls`: what the bare repositories say about the head
    /// and base branches, read by the caller.
    pub branches: Option<pulls::Branches>,
    /// For `GET …/issues/{n}/timeline` of a pull request: its commits
    /// (`base..head`, oldest first, in the `commit` shape), read by the
    /// caller.
    pub pull_commits: Vec<Value>,
    /// Where job logs are served from, e.g. `https://pipelines.actions.githubusercontent.com`.
    pub logs_base_url: &'a str,
    /// Signs job-log URLs so they work without a token, like GitHub's.
    pub logs_signature: &'a str,
}

/// The (first) job of run `run_id` of repository `repo_id`: the run, as
/// far as the model keeps one; 404 without.
fn run_job(model: &Model, repo_id: u64, run_id: u64) -> Result<&Job, Reply> {
    model
        .jobs
        .iter()
        .find(|j| j.repo_id == repo_id && j.run_id == run_id)
        .ok_or_else(Reply::not_found)
}

/// Job (check run) `job_id` of repository `repo_id`; 404 without.
fn job_by_id(model: &Model, repo_id: u64, job_id: u64) -> Result<&Job, Reply> {
    model
        .jobs
        .iter()
        .find(|j| j.repo_id == repo_id && j.id == job_id)
        .ok_or_else(Reply::not_found)
}

fn query_param<'q>(query: &'q [(String, String)], name: &str) -> Option<&'q str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Order `items` as a listing's `sort` and `direction` ask, GitHub's way:
/// `sort` is `created` or `updated` (other values GitHub takes, such as
/// `comments` or `popularity`, are taken as `created` here), and with no
/// `direction` the newest come first when sorting by creation (or with no
/// `sort` on a listing that defaults to it), the oldest otherwise.
/// `default_sort` is the listing's own order when `sort` is absent (`None`:
/// as stored, oldest first). GitHub's timestamps sort as text.
fn sorted(
    mut items: Vec<Value>,
    query: &[(String, String)],
    default_sort: Option<&str>,
) -> Vec<Value> {
    let sort = query_param(query, "sort").or(default_sort);
    let Some(sort) = sort else {
        return items;
    };
    let key = if sort == "updated" {
        "updated_at"
    } else {
        "created_at"
    };
    let desc = match query_param(query, "direction") {
        Some("asc") => false,
        Some("desc") => true,
        _ => key == "created_at" && default_sort.is_some(),
    };
    // Stable: equal times keep the stored (id) order.
    items.sort_by(|a, b| {
        let (x, y) = (a[key].as_str().unwrap_or(""), b[key].as_str().unwrap_or(""));
        x.cmp(y)
    });
    if desc {
        items.reverse();
    }
    items
}

/// Keep the items updated at or after `since` (ISO 8601), as GitHub's
/// `since` does; all of them without one.
fn updated_since(items: Vec<Value>, query: &[(String, String)]) -> Vec<Value> {
    let since = query_param(query, "since").unwrap_or("");
    items
        .into_iter()
        .filter(|v| v["updated_at"].as_str().unwrap_or("") >= since)
        .collect()
}

/// Apply `per_page` (default 30, at most 100) and `page` (from 1); say
/// where the page sits, for GitHub's `Link` header.
pub(crate) fn paginated(items: Vec<Value>, query: &[(String, String)]) -> Reply {
    let per_page = query_param(query, "per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let page = query_param(query, "page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let last = items.len().div_ceil(per_page).max(1);
    let mut reply = Reply::ok(Value::Array(
        items
            .into_iter()
            .skip((page - 1).saturating_mul(per_page))
            .take(per_page)
            .collect(),
    ));
    reply.pages = Some(Pages { page, last });
    reply
}

fn body_json(body: &[u8]) -> Result<Value, Reply> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|_| Reply::error(StatusCode::BAD_REQUEST, "Problems parsing JSON"))
}

fn required_text(body: &Value, field: &str) -> Result<String, Reply> {
    match body.get(field).and_then(Value::as_str) {
        Some(text) if !text.is_empty() => Ok(text.to_owned()),
        Some(_) => Err(Reply::validation(field, "missing_field")),
        None => Err(Reply::validation(field, "missing_field")),
    }
}

/// Handle one REST call against the model.
pub(crate) fn handle(model: &mut Model, call: RestCall<'_>) -> Reply {
    match handle_inner(model, call) {
        Ok(reply) | Err(reply) => with_location(reply),
    }
}

/// GitHub answers every 201 with `Location`: the created resource's API URL,
/// which is its `url` field ("Location: https://api.github.com/repos/…/issues/1347",
/// REST description examples of each create operation).
fn with_location(mut reply: Reply) -> Reply {
    if reply.status == StatusCode::CREATED && reply.location.is_none() {
        reply.location = reply.body["url"].as_str().map(str::to_owned);
    }
    reply
}

fn handle_inner(model: &mut Model, call: RestCall<'_>) -> Result<Reply, Reply> {
    let get = call.method == Method::GET;
    let post = call.method == Method::POST;
    let patch = call.method == Method::PATCH;
    let put = call.method == Method::PUT;
    let wrong_method = || Reply::error(StatusCode::NOT_FOUND, "Not Found");
    let repo_id = |model: &Model, path: &RepoPath| {
        model
            .repo(&path.owner, &path.name)
            .map(|r| r.id)
            .ok_or_else(Reply::not_found)
    };
    match &call.route {
        Route::Root if get => Ok(Reply::ok(json!({
            // A few of GitHub's root links (GET /, "meta/root" in the REST
            // description); clients read none of them.
            "current_user_url": format!("{API_BASE}/user"),
            "rate_limit_url": format!("{API_BASE}/rate_limit"),
            "repository_url": format!("{API_BASE}/repos/{{owner}}/{{repo}}"),
        }))),
        Route::User if get => Ok(Reply::ok(Model::private_user_json(call.login))),
        Route::RateLimit if get => {
            let core = json!({"limit": 5000, "remaining": 4999, "used": 1, "reset": call.now + 3600, "resource": "core"});
            Ok(Reply::ok(json!({
                "resources": {"core": core, "graphql": core, "search": core},
                "rate": core,
            })))
        }
        Route::Repo(path) if get => {
            let id = repo_id(model, path)?;
            let repo = model.repo_by_id(id).ok_or_else(Reply::not_found)?;
            let mut value = Model::full_repo_json(repo);
            // GitHub counts open issues and pull requests together.
            let open = model
                .issues
                .iter()
                .filter(|i| i.repo_id == id && i.open)
                .count();
            value["open_issues"] = json!(open);
            value["open_issues_count"] = json!(open);
            Ok(Reply::ok(value))
        }
        Route::Issues(path) if get => {
            let id = repo_id(model, path)?;
            let state = query_param(call.query, "state").unwrap_or("open");
            let mut issues: Vec<_> = model
                .issues
                .iter()
                .filter(|i| i.repo_id == id)
                .filter(|i| match state {
                    "all" => true,
                    "closed" => !i.open,
                    _ => i.open,
                })
                .collect();
            issues.sort_by_key(|i| i.number);
            let items = issues.into_iter().map(|i| model.issue_json(i)).collect();
            // GitHub's issue listing: `since`, `sort` (default created),
            // `direction` (default desc).
            let items = sorted(
                updated_since(items, call.query),
                call.query,
                Some("created"),
            );
            Ok(paginated(items, call.query))
        }
        Route::Issues(path) if post => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let title = required_text(&body, "title")?;
            let text = body.get("body").and_then(Value::as_str).unwrap_or("");
            let number = model.add_issue(id, &title, text, call.login, None, call.now);
            let issue = model.issue(id, number).ok_or_else(Reply::not_found)?;
            Ok(Reply::created(model.issue_json(issue), issue.id))
        }
        Route::Issue(path, number) if get => {
            let id = repo_id(model, path)?;
            let issue = model.issue(id, *number).ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.issue_json(issue)))
        }
        Route::Issue(path, number) if patch => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let now = call.now;
            let issue = model.issue_mut(id, *number).ok_or_else(Reply::not_found)?;
            for event in apply_issue_edit(issue, &body, now) {
                model.record_event(id, *number, call.login, event, now);
            }
            let issue = model.issue(id, *number).ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.issue_json(issue)))
        }
        Route::IssueComments(path, number) if get => {
            let id = repo_id(model, path)?;
            model.issue(id, *number).ok_or_else(Reply::not_found)?;
            let items = model
                .comments
                .iter()
                .filter(|c| {
                    c.comment.kind == CommentKind::Issue
                        && c.repo_id == id
                        && c.comment.number == *number
                })
                .map(|c| model.comment_json(c))
                .collect();
            Ok(paginated(items, call.query))
        }
        Route::IssueComments(path, number) if post => {
            let id = repo_id(model, path)?;
            model.issue(id, *number).ok_or_else(Reply::not_found)?;
            let body = body_json(call.body)?;
            let text = required_text(&body, "body")?;
            let comment_id = model.add_comment(
                CommentKind::Issue,
                id,
                *number,
                &text,
                call.login,
                None,
                None,
                None,
                None,
                call.now,
            );
            if let Some(issue) = model.issue_mut(id, *number) {
                issue.updated_at = call.now;
            }
            let stored = model
                .comment(CommentKind::Issue, id, comment_id)
                .ok_or_else(Reply::not_found)?;
            Ok(Reply::created(model.comment_json(stored), comment_id))
        }
        Route::RepoIssueComments(path) | Route::RepoPullComments(path) if get => {
            let id = repo_id(model, path)?;
            let kind = match call.route {
                Route::RepoPullComments(_) => CommentKind::Review,
                _ => CommentKind::Issue,
            };
            // `since` filters on updated_at; without `sort` the comments
            // come as created, oldest first.
            let items = model
                .comments
                .iter()
                .filter(|c| c.comment.kind == kind && c.repo_id == id)
                .map(|c| model.comment_json(c))
                .collect();
            let items = sorted(updated_since(items, call.query), call.query, None);
            Ok(paginated(items, call.query))
        }
        Route::IssueComment(path, comment_id) if get => {
            let id = repo_id(model, path)?;
            let stored = model
                .comment(CommentKind::Issue, id, *comment_id)
                .ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.comment_json(stored)))
        }
        Route::Labels(path) if get => {
            let id = repo_id(model, path)?;
            let repo = model.repo_by_id(id).ok_or_else(Reply::not_found)?;
            let items = super::model::DEFAULT_LABELS
                .iter()
                .map(|(name, _, _)| super::model::label_json(repo, name))
                .collect();
            Ok(paginated(items, call.query))
        }
        Route::IssueLabels(path, number) if get => {
            let id = repo_id(model, path)?;
            let issue = model.issue(id, *number).ok_or_else(Reply::not_found)?;
            let repo = model.repo_by_id(id).ok_or_else(Reply::not_found)?;
            let items = match model.labels_json(repo, &issue.labels) {
                Value::Array(items) => items,
                _ => Vec::new(),
            };
            Ok(paginated(items, call.query))
        }
        Route::RepoPullComment(path, comment_id) if get => {
            let id = repo_id(model, path)?;
            let stored = model
                .comment(CommentKind::Review, id, *comment_id)
                .ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.comment_json(stored)))
        }
        Route::PullReview(path, number, review_id) if get => {
            let id = repo_id(model, path)?;
            let review = model
                .reviews
                .iter()
                .find(|r| r.repo_id == id && r.number == *number && r.id == *review_id)
                .ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.review_json(review)))
        }
        Route::PullRequestedReviewers(path, number) if get => {
            let id = repo_id(model, path)?;
            let issue = model
                .issue(id, *number)
                .filter(|i| i.pull.is_some())
                .ok_or_else(Reply::not_found)?;
            let users: Vec<Value> = issue
                .pull
                .iter()
                .flat_map(|p| p.requested_reviewers.iter())
                .map(|login| super::model::Model::user_json(login))
                .collect();
            Ok(Reply::ok(json!({"users": users, "teams": []})))
        }
        Route::CheckRun(path, run_id) if get => {
            let id = repo_id(model, path)?;
            let job = job_by_id(model, id, *run_id)?;
            Ok(Reply::ok(model.check_run_json(job)))
        }
        Route::IssueEvents(path, number) if get => {
            let id = repo_id(model, path)?;
            model.issue(id, *number).ok_or_else(Reply::not_found)?;
            Ok(paginated(model.issue_events_json(id, *number), call.query))
        }
        Route::IssueTimeline(path, number) if get => {
            let id = repo_id(model, path)?;
            model.issue(id, *number).ok_or_else(Reply::not_found)?;
            Ok(paginated(
                model.timeline_json(id, *number, &call.pull_commits),
                call.query,
            ))
        }
        Route::PullReviewComments(path, number, review_id) if get => {
            let id = repo_id(model, path)?;
            model
                .reviews
                .iter()
                .find(|r| r.repo_id == id && r.number == *number && r.id == *review_id)
                .ok_or_else(Reply::not_found)?;
            let items = model
                .comments
                .iter()
                .filter(|c| {
                    c.comment.kind == CommentKind::Review
                        && c.repo_id == id
                        && c.comment.number == *number
                        && c.review_id == Some(*review_id)
                })
                .map(|c| model.comment_json(c))
                .collect();
            Ok(paginated(items, call.query))
        }
        Route::CheckRunAnnotations(path, run_id) if get => {
            let id = repo_id(model, path)?;
            let job = job_by_id(model, id, *run_id)?;
            let repo = model.repo_by_id(id).ok_or_else(Reply::not_found)?;
            let items = job
                .annotations
                .iter()
                .map(|a| super::model::annotation_json(repo, &job.head_sha, a))
                .collect();
            Ok(paginated(items, call.query))
        }
        Route::ActionsRunLogs(path, run_id) if get => {
            let id = repo_id(model, path)?;
            run_job(model, id, *run_id)?;
            // GitHub answers 302 to a zip archive of the run's logs on its
            // storage host ("Download workflow run logs", REST description:
            // 302 with `Location`).
            Ok(redirect(format!(
                "{}/_logs/runs/{run_id}?sig={}",
                call.logs_base_url,
                run_log_signature(call.logs_signature, *run_id)
            )))
        }
        Route::ActionsRunAttemptJobs(path, run_id, attempt) if get => {
            let id = repo_id(model, path)?;
            // Each emulated run ran once: attempt 1 is all there is.
            let jobs: Vec<Value> = model
                .jobs
                .iter()
                .filter(|j| j.repo_id == id && j.run_id == *run_id && *attempt == 1)
                .map(|j| model.job_json(j))
                .collect();
            if jobs.is_empty() {
                return Err(Reply::not_found());
            }
            Ok(Reply::ok(json!({"total_count": jobs.len(), "jobs": jobs})))
        }
        Route::IssueComment(path, comment_id) if patch => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let text = required_text(&body, "body")?;
            let stored = model
                .comment_mut(CommentKind::Issue, id, *comment_id)
                .ok_or_else(Reply::not_found)?;
            stored.comment.body = text;
            stored.updated_at = call.now;
            let stored = model
                .comment(CommentKind::Issue, id, *comment_id)
                .ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.comment_json(stored)))
        }
        Route::Pulls(path) if get => {
            let id = repo_id(model, path)?;
            let (state, head, base) = (
                query_param(call.query, "state"),
                query_param(call.query, "head"),
                query_param(call.query, "base"),
            );
            let mut pulls: Vec<_> = model
                .issues
                .iter()
                .filter(|i| i.repo_id == id && pulls::listed(model, i, state, head, base))
                .collect();
            pulls.sort_by_key(|i| i.number);
            let items = pulls
                .into_iter()
                .map(|i| model.pull_simple_json(i))
                .collect();
            // GitHub's pull listing: `sort` (default created), `direction`
            // (default desc for created, else asc); no `since`.
            let items = sorted(items, call.query, Some("created"));
            Ok(paginated(items, call.query))
        }
        Route::Pulls(path) if post => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let title = required_text(&body, "title")?;
            let head = required_text(&body, "head")?;
            let base = required_text(&body, "base")?;
            let owner = model
                .repo_by_id(id)
                .map(|r| r.owner.clone())
                .unwrap_or_default();
            let proposal = pulls::Proposal::new(&owner, &head, &base);
            let branches = call.branches.clone().unwrap_or_default();
            if let Some(refused) = pulls::refusal(model, id, &proposal, &branches) {
                return Err(refused);
            }
            let (Some(head_sha), Some(base_sha)) = (branches.head_sha, branches.base_sha) else {
                return Err(Reply::validation("head", "invalid"));
            };
            let text = body.get("body").and_then(Value::as_str).unwrap_or("");
            let draft = body.get("draft").and_then(Value::as_bool).unwrap_or(false);
            let pull = PullInfo::new(proposal.head, &head_sha, &base, &base_sha, draft);
            let number = model.add_issue(id, &title, text, call.login, Some(pull), call.now);
            let issue = model.issue(id, number).ok_or_else(Reply::not_found)?;
            let mut reply = Reply::created(model.pull_json(issue), issue.id);
            reply.location = Some(format!(
                "{API_BASE}/repos/{}/{}/pulls/{number}",
                path.owner, path.name
            ));
            Ok(reply)
        }
        Route::Pull(path, number) if get => {
            let id = repo_id(model, path)?;
            let issue = model
                .issue(id, *number)
                .filter(|i| i.pull.is_some())
                .ok_or_else(Reply::not_found)?;
            let reply = Reply::ok(model.pull_json(issue));
            // This read started GitHub's mergeability job; the next one finds it done.
            if let Some(pull) = model.issue_mut(id, *number).and_then(|i| i.pull.as_mut()) {
                pull.mergeable_known = true;
            }
            Ok(reply)
        }
        Route::Pull(path, number) if patch => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let now = call.now;
            let issue = model
                .issue_mut(id, *number)
                .filter(|i| i.pull.is_some())
                .ok_or_else(Reply::not_found)?;
            for event in apply_issue_edit(issue, &body, now) {
                model.record_event(id, *number, call.login, event, now);
            }
            let issue = model.issue(id, *number).ok_or_else(Reply::not_found)?;
            Ok(Reply::ok(model.pull_json(issue)))
        }
        Route::PullComments(path, number) if get => {
            let id = repo_id(model, path)?;
            let items = model
                .comments
                .iter()
                .filter(|c| {
                    c.comment.kind == CommentKind::Review
                        && c.repo_id == id
                        && c.comment.number == *number
                })
                .map(|c| model.comment_json(c))
                .collect();
            Ok(paginated(items, call.query))
        }
        Route::PullComments(path, number) if post => {
            let id = repo_id(model, path)?;
            let head_sha = model
                .issue(id, *number)
                .and_then(|i| i.pull.as_ref())
                .map(|p| p.head_sha.clone())
                .ok_or_else(Reply::not_found)?;
            let body = body_json(call.body)?;
            let text = required_text(&body, "body")?;
            if let Some(parent) = body.get("in_reply_to").and_then(Value::as_u64) {
                return reply_to_review_comment(model, &call, id, *number, parent, &text);
            }
            let file = required_text(&body, "path")?;
            let line = body.get("line").and_then(Value::as_u64);
            let commit = body
                .get("commit_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or(head_sha);
            let comment_id = model.add_comment(
                CommentKind::Review,
                id,
                *number,
                &text,
                call.login,
                None,
                Some(file),
                line,
                Some(commit),
                call.now,
            );
            // "Create a review comment" makes a review around it
            // (`pull_request_review_id` is set in GitHub's example response).
            model.wrap_in_review(id, comment_id, call.now);
            let stored = model
                .comment(CommentKind::Review, id, comment_id)
                .ok_or_else(Reply::not_found)?;
            Ok(Reply::created(model.comment_json(stored), comment_id))
        }
        Route::PullCommentReplies(path, number, parent) if post => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let text = required_text(&body, "body")?;
            reply_to_review_comment(model, &call, id, *number, *parent, &text)
        }
        Route::PullReviews(path, number) if get => {
            let id = repo_id(model, path)?;
            let items = model
                .reviews
                .iter()
                .filter(|r| r.repo_id == id && r.number == *number)
                .map(|r| model.review_json(r))
                .collect();
            Ok(paginated(items, call.query))
        }
        Route::PullReviews(path, number) if post => {
            let id = repo_id(model, path)?;
            model
                .issue(id, *number)
                .filter(|i| i.pull.is_some())
                .ok_or_else(Reply::not_found)?;
            let body = body_json(call.body)?;
            let text = body.get("body").and_then(Value::as_str).unwrap_or("");
            let state = match body.get("event").and_then(Value::as_str) {
                None => "PENDING",
                Some("APPROVE") => "APPROVED",
                Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
                Some("COMMENT") => "COMMENTED",
                Some(_) => return Err(Reply::validation("event", "invalid")),
            };
            // Draft comments made in the review (`comments: [{path, body,
            // line | position}]`, "Create a review for a pull request"): each
            // a review comment carrying the review's id.
            let drafts = review_drafts(&body)?;
            if matches!(state, "CHANGES_REQUESTED" | "COMMENTED")
                && text.is_empty()
                && drafts.is_empty()
            {
                return Err(Reply::validation("body", "missing_field"));
            }
            let head_sha = model
                .issue(id, *number)
                .and_then(|i| i.pull.as_ref())
                .map(|p| p.head_sha.clone());
            let review_id = model.fresh_id();
            for (file, line, draft) in drafts {
                let comment_id = model.add_comment(
                    CommentKind::Review,
                    id,
                    *number,
                    &draft,
                    call.login,
                    None,
                    Some(file),
                    Some(line),
                    head_sha.clone(),
                    call.now,
                );
                if let Some(c) = model.comment_mut(CommentKind::Review, id, comment_id) {
                    c.review_id = Some(review_id);
                }
            }
            model.reviews.push(Review {
                id: review_id,
                repo_id: id,
                number: *number,
                author: call.login.to_owned(),
                body: text.to_owned(),
                state: state.to_owned(),
                submitted_at: call.now,
            });
            if let Some(issue) = model.issue_mut(id, *number) {
                issue.updated_at = issue.updated_at.max(call.now);
            }
            let review = model
                .reviews
                .iter()
                .find(|r| r.id == review_id)
                .ok_or_else(Reply::not_found)?;
            let mut reply = Reply::created(model.review_json(review), review_id);
            reply.status = StatusCode::OK; // GitHub answers 200 here, not 201.
            Ok(reply)
        }
        Route::PullRequestedReviewers(path, number) if post => {
            let id = repo_id(model, path)?;
            let body = body_json(call.body)?;
            let logins: Vec<String> = body
                .get("reviewers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let issue = model
                .issue_mut(id, *number)
                .filter(|i| i.pull.is_some())
                .ok_or_else(Reply::not_found)?;
            let mut requested = Vec::new();
            if let Some(pull) = issue.pull.as_mut() {
                for login in logins {
                    if !pull.requested_reviewers.contains(&login) {
                        pull.requested_reviewers.push(login.clone());
                        requested.push(login);
                    }
                }
            }
            for reviewer in requested {
                let event = EventKind::ReviewRequested { reviewer };
                model.record_event(id, *number, call.login, event, call.now);
            }
            let issue = model.issue(id, *number).ok_or_else(Reply::not_found)?;
            let mut reply = Reply::ok(model.pull_json(issue));
            reply.status = StatusCode::CREATED;
            Ok(reply)
        }
        Route::PullMerge(path, number) if put => {
            let id = repo_id(model, path)?;
            let issue = model
                .issue_mut(id, *number)
                .filter(|i| i.pull.is_some())
                .ok_or_else(Reply::not_found)?;
            if !issue.merge(call.now) {
                return Err(Reply::error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Pull Request is not mergeable",
                ));
            }
            let sha = issue
                .pull
                .as_ref()
                .map(|p| p.head_sha.clone())
                .unwrap_or_default();
            // GitHub records `merged` (naming the merge commit), then `closed`.
            let merged = EventKind::Merged {
                commit_id: sha.clone(),
            };
            model.record_event(id, *number, call.login, merged, call.now);
            model.record_event(id, *number, call.login, EventKind::Closed, call.now);
            Ok(Reply::ok(
                json!({"sha": sha, "merged": true, "message": "Pull Request successfully merged"}),
            ))
        }
        Route::CheckSuite(path, suite_id) if get => {
            let id = repo_id(model, path)?;
            let job = run_job(model, id, *suite_id)?;
            Ok(Reply::ok(model.check_suite_json(job)))
        }
        Route::CheckSuiteRuns(path, suite_id) if get => {
            let id = repo_id(model, path)?;
            let runs: Vec<Value> = model
                .jobs
                .iter()
                .filter(|j| j.repo_id == id && j.run_id == *suite_id)
                .map(|j| model.check_run_json(j))
                .collect();
            if runs.is_empty() {
                return Err(Reply::not_found());
            }
            Ok(Reply::ok(
                json!({"total_count": runs.len(), "check_runs": runs}),
            ))
        }
        Route::CommitCheckSuites(path, git_ref) if get => {
            let id = repo_id(model, path)?;
            let suites: Vec<Value> = model
                .jobs
                .iter()
                .filter(|j| j.repo_id == id && &j.head_sha == git_ref)
                .map(|j| model.check_suite_json(j))
                .collect();
            Ok(Reply::ok(
                json!({"total_count": suites.len(), "check_suites": suites}),
            ))
        }
        Route::CommitCheckRuns(path, git_ref) if get => {
            let id = repo_id(model, path)?;
            let runs: Vec<Value> = model
                .jobs
                .iter()
                .filter(|j| j.repo_id == id && &j.head_sha == git_ref)
                .map(|j| model.check_run_json(j))
                .collect();
            Ok(Reply::ok(
                json!({"total_count": runs.len(), "check_runs": runs}),
            ))
        }
        Route::ActionsRuns(path) if get => {
            let id = repo_id(model, path)?;
            let runs: Vec<Value> = model
                .jobs
                .iter()
                .filter(|j| j.repo_id == id)
                .map(|j| model.run_json(j))
                .collect();
            Ok(Reply::ok(
                json!({"total_count": runs.len(), "workflow_runs": runs}),
            ))
        }
        Route::ActionsRun(path, run_id) if get => {
            let id = repo_id(model, path)?;
            let job = run_job(model, id, *run_id)?;
            Ok(Reply::ok(model.run_json(job)))
        }
        Route::ActionsRunJobs(path, run_id) if get => {
            let id = repo_id(model, path)?;
            let jobs: Vec<Value> = model
                .jobs
                .iter()
                .filter(|j| j.repo_id == id && j.run_id == *run_id)
                .map(|j| model.job_json(j))
                .collect();
            Ok(Reply::ok(json!({"total_count": jobs.len(), "jobs": jobs})))
        }
        Route::ActionsRunArtifacts(path, run_id) if get => {
            let id = repo_id(model, path)?;
            run_job(model, id, *run_id)?;
            // No run here uploads artifacts (`artifact` list, paged inside
            // its object like the jobs).
            Ok(Reply::ok(json!({"total_count": 0, "artifacts": []})))
        }
        Route::ActionsJob(path, job_id) if get => {
            let id = repo_id(model, path)?;
            let job = job_by_id(model, id, *job_id)?;
            Ok(Reply::ok(model.job_json(job)))
        }
        Route::ActionsJobLogs(path, job_id) if get => {
            let id = repo_id(model, path)?;
            job_by_id(model, id, *job_id)?;
            Ok(redirect(format!(
                "{}/_logs/jobs/{job_id}?sig={}",
                call.logs_base_url,
                log_signature(call.logs_signature, *job_id)
            )))
        }
        _ => Err(wrong_method()),
    }
}

/// Apply an issue or pull request edit; what it changed, as the events
/// GitHub records (`renamed`, `closed`, `reopened`).
fn apply_issue_edit(issue: &mut super::model::Issue, body: &Value, now: u64) -> Vec<EventKind> {
    let mut events = Vec::new();
    if let Some(title) = body.get("title").and_then(Value::as_str) {
        if title != issue.title {
            events.push(EventKind::Renamed {
                from: issue.title.clone(),
                to: title.to_owned(),
            });
        }
        issue.title = title.to_owned();
    }
    if let Some(text) = body.get("body").and_then(Value::as_str) {
        issue.body = text.to_owned();
    }
    let was_open = issue.open;
    match body.get("state").and_then(Value::as_str) {
        Some("closed") => issue.close(now),
        Some("open") => issue.reopen(),
        _ => {}
    }
    match (was_open, issue.open) {
        (true, false) => events.push(EventKind::Closed),
        (false, true) => events.push(EventKind::Reopened),
        _ => {}
    }
    issue.updated_at = now;
    events
}

/// Replies attach only to top-level review comments on the same pull request.
fn reply_to_review_comment(
    model: &mut Model,
    call: &RestCall<'_>,
    repo_id: u64,
    number: u64,
    parent: u64,
    text: &str,
) -> Result<Reply, Reply> {
    let parent_comment = model
        .comment(CommentKind::Review, repo_id, parent)
        .filter(|c| c.comment.number == number)
        .ok_or_else(Reply::not_found)?;
    if parent_comment.comment.in_reply_to.is_some() {
        return Err(Reply::validation("in_reply_to", "invalid"));
    }
    let (path, line, commit) = (
        parent_comment.comment.path.clone(),
        parent_comment.line,
        parent_comment.commit_id.clone(),
    );
    let comment_id = model.add_comment(
        CommentKind::Review,
        repo_id,
        number,
        text,
        call.login,
        Some(parent),
        path,
        line,
        commit,
        call.now,
    );
    // A reply, too, comes in a review of its own: "Create a reply for a
    // review comment" answers with `pull_request_review_id` set (REST
    // description, pulls/create-reply-for-review-comment example).
    model.wrap_in_review(repo_id, comment_id, call.now);
    let stored = model
        .comment(CommentKind::Review, repo_id, comment_id)
        .ok_or_else(Reply::not_found)?;
    Ok(Reply::created(model.comment_json(stored), comment_id))
}

/// The draft comments of a review being created: (path, line, body).
fn review_drafts(body: &Value) -> Result<Vec<(String, u64, String)>, Reply> {
    let Some(items) = body.get("comments") else {
        return Ok(Vec::new());
    };
    let items = items
        .as_array()
        .ok_or_else(|| Reply::validation("comments", "invalid"))?;
    items
        .iter()
        .map(|item| {
            let path = required_text(item, "path")?;
            let text = required_text(item, "body")?;
            let line = item
                .get("line")
                .or_else(|| item.get("position"))
                .and_then(Value::as_u64)
                .ok_or_else(|| Reply::validation("line", "missing_field"))?;
            Ok((path, line, text))
        })
        .collect()
}

/// A 302 to `location`.
fn redirect(location: String) -> Reply {
    Reply {
        status: StatusCode::FOUND,
        body: Value::Null,
        created_id: None,
        pages: None,
        media: None,
        location: Some(location),
    }
}

/// The `sig` of a run's log-archive URL (a domain of its own: a job's
/// `sig` does not open a run's archive).
pub(crate) fn run_log_signature(secret: &str, run_id: u64) -> String {
    log_signature(&format!("{secret}:run"), run_id)
}

/// The `sig` of a job-log URL: keyed by a per-emulator secret, so a URL is
/// usable without a token but cannot be made up.
pub(crate) fn log_signature(secret: &str, job_id: u64) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{secret}:{job_id}").as_bytes());
    hex::encode(&digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(owner: &str, name: &str) -> RepoPath {
        RepoPath {
            owner: owner.into(),
            name: name.into(),
        }
    }

    #[test]
    fn routes_known_paths() {
        let r = || repo("o", "r");
        let table = [
            ("/", Some(Route::Root)),
            ("/user", Some(Route::User)),
            ("/rate_limit", Some(Route::RateLimit)),
            ("/graphql", Some(Route::Graphql)),
            ("/repos/o/r", Some(Route::Repo(r()))),
            ("/repos/o/r/issues", Some(Route::Issues(r()))),
            ("/repos/o/r/issues/7", Some(Route::Issue(r(), 7))),
            (
                "/repos/o/r/issues/7/comments",
                Some(Route::IssueComments(r(), 7)),
            ),
            (
                "/repos/o/r/issues/comments",
                Some(Route::RepoIssueComments(r())),
            ),
            (
                "/repos/o/r/pulls/comments",
                Some(Route::RepoPullComments(r())),
            ),
            (
                "/repos/o/r/issues/comments/99",
                Some(Route::IssueComment(r(), 99)),
            ),
            (
                "/repos/o/r/pulls/3/comments/5/replies",
                Some(Route::PullCommentReplies(r(), 3, 5)),
            ),
            (
                "/repos/o/r/actions/jobs/5/logs",
                Some(Route::ActionsJobLogs(r(), 5)),
            ),
            (
                "/repos/o/r/commits/abc/check-runs",
                Some(Route::CommitCheckRuns(r(), "abc".into())),
            ),
            (
                "/repos/o/r/issues/7/events",
                Some(Route::IssueEvents(r(), 7)),
            ),
            (
                "/repos/o/r/issues/7/timeline",
                Some(Route::IssueTimeline(r(), 7)),
            ),
            (
                "/repos/o/r/pulls/3/reviews/9/comments",
                Some(Route::PullReviewComments(r(), 3, 9)),
            ),
            (
                "/repos/o/r/check-runs/4/annotations",
                Some(Route::CheckRunAnnotations(r(), 4)),
            ),
            ("/repos/o/r/actions/workflows", Some(Route::Workflows(r()))),
            (
                "/repos/o/r/actions/workflows/ci.yml",
                Some(Route::Workflow(r(), "ci.yml".into())),
            ),
            (
                "/repos/o/r/actions/workflows/12/runs",
                Some(Route::WorkflowRuns(r(), "12".into())),
            ),
            (
                "/repos/o/r/actions/runs/5/logs",
                Some(Route::ActionsRunLogs(r(), 5)),
            ),
            ("/repos/o/r/actions/workflows//runs", None),
            ("/repos/o/r/issues/x", None),
            ("/repos/o/r/issues/+7", None),
            ("/repos/o/r/issues/7/", None),
            ("/repos/o/../issues", None),
            ("/repos/o", None),
            ("/repos/o%2fr/x/issues", None),
            ("repos/o/r", None),
            ("//", None),
        ];
        for (path, expected) in table {
            assert_eq!(route(path), expected, "{path}");
        }
    }

    #[test]
    fn resolves_repository_alias() {
        assert_eq!(
            repository_alias("/repositories/100001/issues/1"),
            Some((100_001, "/issues/1"))
        );
        assert_eq!(
            repository_alias("/repositories/100001"),
            Some((100_001, ""))
        );
        assert_eq!(repository_alias("/repositories/x/issues"), None);
        assert_eq!(repository_alias("/repos/o/r"), None);
    }

    fn call<'a>(method: &'a Method, path: &str, body: &'a [u8]) -> RestCall<'a> {
        RestCall {
            method,
            route: route(path).unwrap(),
            query: &[],
            body,
            login: "bot[bot]",
            now: 1_700_000_000,
            branches: None,
            pull_commits: Vec::new(),
            logs_base_url: "https://logs.example",
            logs_signature: "k",
        }
    }

    #[test]
    fn comment_lifecycle_and_errors() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        model.add_issue(repo_id, "t", "b", "alice", None, 1);
        let post = Method::POST;
        let reply = handle(
            &mut model,
            call(&post, "/repos/o/r/issues/1/comments", br#"{"body":"hi"}"#),
        );
        assert_eq!(reply.status, StatusCode::CREATED);
        let id = reply.created_id.clone().unwrap();
        assert_eq!(reply.body["id"].to_string(), id);
        assert_eq!(
            reply.body["html_url"],
            format!("https://github.com/o/r/issues/1#issuecomment-{id}")
        );
        assert_eq!(reply.body["user"]["type"], "Bot");

        // Re-cased owner/repo reach the same repository, as on GitHub.
        let get = Method::GET;
        let reply = handle(&mut model, call(&get, "/repos/O/R/issues/1/comments", b""));
        assert_eq!(reply.body.as_array().unwrap().len(), 1);

        for (method, path, body, status) in [
            (
                &post,
                "/repos/o/r/issues/2/comments",
                &br#"{"body":"x"}"#[..],
                404,
            ),
            (
                &post,
                "/repos/o/r/issues/1/comments",
                &br#"{"body":""}"#[..],
                422,
            ),
            (&post, "/repos/o/r/issues/1/comments", &b"{"[..], 400),
            (
                &post,
                "/repos/x/r/issues/1/comments",
                &br#"{"body":"x"}"#[..],
                404,
            ),
            (&get, "/repos/o/r/pulls/1", &b""[..], 404),
        ] {
            let reply = handle(&mut model, call(method, path, body));
            assert_eq!(reply.status.as_u16(), status, "{method} {path}");
            assert!(reply.created_id.is_none());
        }
    }

    #[test]
    fn pagination_reports_the_page_and_the_last() {
        let items: Vec<Value> = (0..5).map(|i| json!(i)).collect();
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let pages = |page, last| Some(Pages { page, last });
        for (query, expected, at) in [
            (q(&[("per_page", "2")]), json!([0, 1]), pages(1, 3)),
            (
                q(&[("per_page", "2"), ("page", "2")]),
                json!([2, 3]),
                pages(2, 3),
            ),
            (
                q(&[("per_page", "2"), ("page", "3")]),
                json!([4]),
                pages(3, 3),
            ),
            (
                q(&[("per_page", "2"), ("page", "9")]),
                json!([]),
                pages(9, 3),
            ),
            (q(&[]), json!([0, 1, 2, 3, 4]), pages(1, 1)),
            (
                q(&[("per_page", "0"), ("page", "0")]),
                json!([0]),
                pages(1, 5),
            ),
            (q(&[("per_page", "5")]), json!([0, 1, 2, 3, 4]), pages(1, 1)),
        ] {
            let reply = paginated(items.clone(), &query);
            assert_eq!(reply.body, expected, "{query:?}");
            assert_eq!(reply.pages, at, "{query:?}");
        }
        assert_eq!(paginated(vec![], &q(&[])).pages, pages(1, 1));
    }

    /// `since`, `sort` and `direction` as GitHub's listings take them.
    #[test]
    fn listings_sort_and_filter_as_asked() {
        let item = |id: u64, created: &str, updated: &str| json!({"id": id, "created_at": created, "updated_at": updated});
        let items = vec![
            item(1, "2026-01-01T00:00:01Z", "2026-01-01T00:00:09Z"),
            item(2, "2026-01-01T00:00:02Z", "2026-01-01T00:00:03Z"),
            item(3, "2026-01-01T00:00:03Z", "2026-01-01T00:00:05Z"),
        ];
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ids = |v: Vec<Value>| {
            v.iter()
                .map(|i| i["id"].as_u64().unwrap())
                .collect::<Vec<_>>()
        };
        type Query = Vec<(String, String)>;
        let cases: [(Query, Option<&str>, Vec<u64>); 7] = [
            // A listing that defaults to `created` comes newest first.
            (q(&[]), Some("created"), vec![3, 2, 1]),
            (q(&[("direction", "asc")]), Some("created"), vec![1, 2, 3]),
            // Sorted by update, oldest first unless asked.
            (q(&[("sort", "updated")]), Some("created"), vec![2, 3, 1]),
            (
                q(&[("sort", "updated"), ("direction", "desc")]),
                Some("created"),
                vec![1, 3, 2],
            ),
            // The repository's comments: as stored without `sort`.
            (q(&[]), None, vec![1, 2, 3]),
            (
                q(&[("sort", "updated"), ("direction", "asc")]),
                None,
                vec![2, 3, 1],
            ),
            (
                q(&[("sort", "created"), ("direction", "desc")]),
                None,
                vec![3, 2, 1],
            ),
        ];
        for (query, default, expected) in cases {
            assert_eq!(
                ids(sorted(items.clone(), &query, default)),
                expected,
                "{query:?} {default:?}"
            );
        }
        let since = q(&[("since", "2026-01-01T00:00:05Z")]);
        assert_eq!(ids(updated_since(items.clone(), &since)), vec![1, 3]);
        assert_eq!(ids(updated_since(items, &q(&[]))), vec![1, 2, 3]);
    }

    #[test]
    fn review_comment_replies_only_to_top_level() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let pull = PullInfo::new(
            "gatehouse/x",
            &"a".repeat(40),
            "main",
            &"b".repeat(40),
            false,
        );
        model.add_issue(repo_id, "t", "b", "alice", Some(pull), 1);
        let post = Method::POST;
        let top = handle(
            &mut model,
            call(
                &post,
                "/repos/o/r/pulls/1/comments",
                br#"{"body":"nit","path":"a.rs","line":3}"#,
            ),
        );
        assert_eq!(top.status, StatusCode::CREATED);
        let top_id = top.created_id.unwrap();
        let reply = handle(
            &mut model,
            call(
                &post,
                &format!("/repos/o/r/pulls/1/comments/{top_id}/replies"),
                br#"{"body":"done"}"#,
            ),
        );
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.body["in_reply_to_id"].to_string(), top_id);
        let reply_id = reply.created_id.unwrap();
        let nested = handle(
            &mut model,
            call(
                &post,
                &format!("/repos/o/r/pulls/1/comments/{reply_id}/replies"),
                br#"{"body":"x"}"#,
            ),
        );
        assert_eq!(nested.status, StatusCode::UNPROCESSABLE_ENTITY);
    }

    /// A review's draft comments become review comments carrying the
    /// review's id, listed under it; one made on its own gets a review of
    /// its own (`COMMENTED`, no body), as on GitHub.
    #[test]
    fn a_reviews_comments_carry_its_id() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let pull = PullInfo::new("x", &"a".repeat(40), "main", &"b".repeat(40), false);
        model.add_issue(repo_id, "t", "b", "alice", Some(pull), 1);
        let (post, get) = (Method::POST, Method::GET);
        let alone = handle(
            &mut model,
            call(
                &post,
                "/repos/o/r/pulls/1/comments",
                br#"{"body":"nit","path":"a.rs","line":3}"#,
            ),
        );
        let wrapper = alone.body["pull_request_review_id"].as_u64().unwrap();
        let reviews = handle(&mut model, call(&get, "/repos/o/r/pulls/1/reviews", b""));
        let reviews = reviews.body.as_array().unwrap().clone();
        assert_eq!(reviews.len(), 1, "{reviews:?}");
        assert_eq!(reviews[0]["id"], wrapper);
        assert_eq!(reviews[0]["state"], "COMMENTED");
        assert_eq!(reviews[0]["body"], "");
        // A reply comes in a review of its own too.
        let parent = alone.body["id"].as_u64().unwrap();
        let reply = handle(
            &mut model,
            call(
                &post,
                &format!("/repos/o/r/pulls/1/comments/{parent}/replies"),
                br#"{"body":"fixed"}"#,
            ),
        );
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
        let reply_review = reply.body["pull_request_review_id"].as_u64().unwrap();
        assert_ne!(reply_review, wrapper);
        let reviews = handle(&mut model, call(&get, "/repos/o/r/pulls/1/reviews", b""));
        let reviews = reviews.body.as_array().unwrap().clone();
        assert_eq!(reviews.len(), 2, "{reviews:?}");
        assert_eq!(reviews[1]["id"], reply_review);
        assert_eq!(reviews[1]["state"], "COMMENTED");
        let review = handle(
            &mut model,
            call(
                &post,
                "/repos/o/r/pulls/1/reviews",
                br#"{"event":"COMMENT","comments":[{"path":"a.rs","line":4,"body":"why?"}]}"#,
            ),
        );
        assert_eq!(review.status, StatusCode::OK, "{}", review.body);
        let review_id = review.body["id"].as_u64().unwrap();
        let listed = handle(
            &mut model,
            call(
                &get,
                &format!("/repos/o/r/pulls/1/reviews/{review_id}/comments"),
                b"",
            ),
        );
        let items = listed.body.as_array().unwrap();
        assert_eq!(items.len(), 1, "{}", listed.body);
        assert_eq!(items[0]["pull_request_review_id"], review_id);
        assert_eq!(items[0]["line"], 4);
        assert_eq!(items[0]["body"], "why?");
        let unknown = handle(
            &mut model,
            call(&get, "/repos/o/r/pulls/1/reviews/5/comments", b""),
        );
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        // A draft without its line is GitHub's 422, and no review is made.
        let before = model.reviews.len();
        let bad = handle(
            &mut model,
            call(
                &post,
                "/repos/o/r/pulls/1/reviews",
                br#"{"event":"COMMENT","comments":[{"path":"a.rs","body":"x"}]}"#,
            ),
        );
        assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(model.reviews.len(), before);
    }

    /// A merge, an edit and a review request are recorded as GitHub's events.
    #[test]
    fn api_changes_are_recorded_as_issue_events() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let pull = PullInfo::new("x", &"a".repeat(40), "main", &"b".repeat(40), false);
        model.add_issue(repo_id, "t", "b", "alice", Some(pull), 1);
        let (patch, post, put, get) = (Method::PATCH, Method::POST, Method::PUT, Method::GET);
        handle(
            &mut model,
            call(&patch, "/repos/o/r/pulls/1", br#"{"title":"u"}"#),
        );
        handle(
            &mut model,
            call(
                &post,
                "/repos/o/r/pulls/1/requested_reviewers",
                br#"{"reviewers":["bob","bob"]}"#,
            ),
        );
        handle(&mut model, call(&put, "/repos/o/r/pulls/1/merge", b""));
        let events = handle(&mut model, call(&get, "/repos/o/r/issues/1/events", b""));
        let names: Vec<&str> = events
            .body
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["renamed", "review_requested", "merged", "closed"]);
        assert_eq!(events.body[0]["actor"]["login"], "bot[bot]");
        assert_eq!(events.body[0]["performed_via_github_app"]["slug"], "bot");
        let missing = handle(&mut model, call(&get, "/repos/o/r/issues/9/events", b""));
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn route_never_panics(path in "\\PC*") {
                let _ = route(&path);
                let _ = repository_alias(&path);
            }

            #[test]
            fn valid_names_and_numbers_route_to_comments(
                owner in "[A-Za-z0-9][A-Za-z0-9-]{0,20}",
                name in "[A-Za-z0-9_.-]{1,20}",
                number in 0u64..u64::MAX,
            ) {
                prop_assume!(name != "." && name != "..");
                let expected = RepoPath { owner: owner.clone(), name: name.clone() };
                prop_assert_eq!(
                    route(&format!("/repos/{owner}/{name}/issues/{number}/comments")),
                    Some(Route::IssueComments(expected, number))
                );
            }

            #[test]
            fn names_with_other_characters_never_route(
                owner in "[A-Za-z0-9]{1,8}",
                bad in "[^A-Za-z0-9_./-]",
            ) {
                let path = format!("/repos/{owner}{bad}/r/issues");
                prop_assert_eq!(route(&path), None);
            }
        }
    }
}
