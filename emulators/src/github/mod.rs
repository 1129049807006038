//! The GitHub emulator: REST, GraphQL and git smart HTTP on one listener.
//!
//! Requests are dispatched on `Host` (`api.github.com` → REST and GraphQL,
//! `github.com` → git), or on the path when the Host is an IP literal or
//! `localhost`. Every request must carry one of the configured tokens
//! (REST: `token …`/`Bearer …`; git: Basic with the token as password), so a
//! test can prove which credential a proxy injected; everything received is
//! recorded. A GitHub App installed here mints installation tokens, each
//! scoped to its repositories and permissions (`app.rs`).

mod actions;
mod app;
mod contents;
mod deliveries;
mod encoding;
mod events;
mod git;
mod graphql;
mod limits;
mod model;
mod pulls;
mod rest;
mod webhooks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::Request;
use serde_json::{json, Value};

pub use app::{rsa_public_key_der, GithubAppSpec, MintedToken};
pub use encoding::AnswerFault;
pub use limits::RateBudgets;

pub use model::{Annotation, Comment, CommentKind};
pub use webhooks::{signature as webhook_signature, WebhookDelivery, WebhookFaults, WebhookTarget};

/// The numeric id the emulator gives `login` (users are not modelled; the
/// id is derived from the login and stable across runs).
pub fn user_id(login: &str) -> u64 {
    model::stable_user_id(login)
}

use crate::ca::{CaError, TestCa};
use crate::record::{lock, record_head, RecordedRequest, Recorder, BODY_RECORD_LIMIT};
use crate::server::{full_body, Body, Handler, HandlerFuture, ServeError, Server};
use crate::time::unix_now;
use crate::util::{parse_query, random_hex};
use model::{Job, Model, PullInfo};

/// The Basic-auth user name git requests must carry with the token.
pub const GIT_USER: &str = "x-access-token";

/// Largest REST or GraphQL body accepted (git bodies stream and have no limit).
const MAX_API_BODY: usize = 16 * 1024 * 1024;

/// GitHub's answer to an API request without a `User-Agent`.
const USER_AGENT_REQUIRED: &str = "Request forbidden by administrative rules. Please make sure your request has a User-Agent header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). Check https://developer.github.com for other possible causes.\n";

/// Failure to start or drive the GitHub emulator.
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    /// The test CA or TLS configuration could not be built.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// The listener or its runtime could not be started.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// An option is invalid.
    #[error("invalid GitHub emulator option {option}: {problem}")]
    Option {
        /// Which option.
        option: String,
        /// What is wrong and what was expected.
        problem: String,
    },
    /// Creating or seeding a bare repository failed.
    #[error("preparing the bare repository {repo} failed: {detail}")]
    Repository {
        /// `owner/name`.
        repo: String,
        /// What git said.
        detail: String,
    },
    /// A seeding call named something the model does not have.
    #[error("{0} not found in the GitHub emulator")]
    NotFound(String),
    /// A seeding call asked for what GitHub refuses (with GitHub's reason).
    #[error("GitHub would refuse {0}")]
    Refused(String),
}

/// A token the emulator accepts, and the login it authenticates as.
#[derive(Clone)]
pub struct GithubToken {
    /// The token value, as a client would send it.
    pub token: String,
    /// The login calls made with it act as, e.g. `gatehouse-test[bot]`.
    pub login: String,
}

impl std::fmt::Debug for GithubToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubToken")
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

/// A repository to create at start: a bare repository on disk plus its REST view.
#[derive(Debug, Clone)]
pub struct RepoSpec {
    /// Owner login.
    pub owner: String,
    /// Repository name.
    pub name: String,
    /// The branch the first commit goes to.
    pub default_branch: String,
    /// Files of the first commit (path, content); none means an empty repository.
    pub files: Vec<(String, String)>,
}

impl RepoSpec {
    /// `owner/name` on `main` with one `README.md`.
    pub fn new(owner: &str, name: &str) -> Self {
        Self {
            owner: owner.to_owned(),
            name: name.to_owned(),
            default_branch: "main".to_owned(),
            files: vec![("README.md".to_owned(), format!("# {name}\n"))],
        }
    }
}

/// How to start a [`GithubEmulator`].
#[derive(Debug, Clone)]
pub struct GithubOptions {
    /// Where bare repositories live: `{root_dir}/{owner}/{name}.git`.
    pub root_dir: PathBuf,
    /// The only credentials accepted.
    pub tokens: Vec<GithubToken>,
    /// Repositories created at start.
    pub repos: Vec<RepoSpec>,
    /// Listening address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Base URL job-log redirects point at; GitHub uses a storage host.
    pub logs_base_url: String,
    /// Server runtime threads.
    pub worker_threads: usize,
    /// The CA to sign the server certificate with; `None` generates one.
    pub ca: Option<Arc<TestCa>>,
    /// Where state changes are delivered as signed webhooks.
    pub webhooks: Vec<WebhookTarget>,
    /// A GitHub App installed here, which mints scoped installation tokens.
    pub app: Option<GithubAppSpec>,
    /// Serve as GitHub Enterprise Server does too: REST under `/api/v3`,
    /// GraphQL at `/api/graphql` (what `gh` asks with `GH_HOST` set to a
    /// host other than github.com). Off: those paths are 404, as on
    /// api.github.com.
    pub enterprise: bool,
    /// Refuse REST and GraphQL requests without a `User-Agent` as GitHub
    /// does (403 "Request forbidden by administrative rules…"). On by
    /// default, as on api.github.com: a client that sends none fails here
    /// as it would in production.
    pub require_user_agent: bool,
}

impl GithubOptions {
    /// Defaults: loopback, a free port, no tokens, no repositories.
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        Self {
            root_dir: root_dir.into(),
            tokens: Vec::new(),
            repos: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            logs_base_url: "https://pipelines.actions.githubusercontent.com".to_owned(),
            worker_threads: 2,
            ca: None,
            webhooks: Vec::new(),
            app: None,
            enterprise: false,
            require_user_agent: true,
        }
    }

    /// Also serve GitHub Enterprise Server's paths (`/api/v3/…`, `/api/graphql`).
    pub fn enterprise(mut self, on: bool) -> Self {
        self.enterprise = on;
        self
    }

    /// Refuse API requests that carry no `User-Agent`, as GitHub does (the
    /// default); `false` answers them (a kinder GitHub than the real one).
    pub fn require_user_agent(mut self, on: bool) -> Self {
        self.require_user_agent = on;
        self
    }

    /// Install the GitHub App `app`: its JWT mints installation tokens.
    pub fn app(mut self, app: GithubAppSpec) -> Self {
        self.app = Some(app);
        self
    }

    /// Accept `token`, acting as `login`.
    pub fn token(mut self, token: &str, login: &str) -> Self {
        self.tokens.push(GithubToken {
            token: token.to_owned(),
            login: login.to_owned(),
        });
        self
    }

    /// Deliver state changes to `url` (`http://…`), signed with `secret`.
    pub fn webhook(mut self, url: &str, secret: &str) -> Self {
        self.webhooks.push(WebhookTarget {
            url: url.to_owned(),
            secret: secret.to_owned(),
        });
        self
    }

    /// Create `repo` at start.
    pub fn repo(mut self, repo: RepoSpec) -> Self {
        self.repos.push(repo);
        self
    }
}

/// Entry point: `GithubEmulator::start(options)`.
#[derive(Debug)]
pub struct GithubEmulator;

impl GithubEmulator {
    /// Create the repositories, generate the CA and start serving.
    pub fn start(options: GithubOptions) -> Result<GithubHandle, GithubError> {
        let mut model = Model::new();
        for repo in &options.repos {
            if !rest::valid_name(&repo.owner) || !rest::valid_name(&repo.name) {
                return Err(GithubError::Option {
                    option: "repos".into(),
                    problem: format!(
                        "`{}/{}` is not a valid owner/name (letters, digits, `-`, `_`, `.`)",
                        repo.owner, repo.name
                    ),
                });
            }
            if model.repo(&repo.owner, &repo.name).is_some() {
                return Err(GithubError::Option {
                    option: "repos".into(),
                    problem: format!("`{}/{}` is listed twice", repo.owner, repo.name),
                });
            }
            create_bare_repo(&options.root_dir, repo)?;
            model.add_repo(&repo.owner, &repo.name, &repo.default_branch);
        }
        let ca = match options.ca.clone() {
            Some(ca) => ca,
            None => Arc::new(TestCa::generate()?),
        };
        let state = Arc::new(GithubState {
            model: Mutex::new(model),
            recorder: Recorder::default(),
            tokens: options.tokens,
            root_dir: options.root_dir,
            logs_base_url: options.logs_base_url.trim_end_matches('/').to_owned(),
            logs_host: url_host(&options.logs_base_url),
            enterprise: options.enterprise,
            require_user_agent: options.require_user_agent,
            logs_signature: random_hex(16),
            webhooks: webhooks::Webhooks::new(options.webhooks),
            apps: app::Apps::new(options.app),
            answer_fault: Mutex::new(None),
            failed_creations: std::sync::atomic::AtomicUsize::new(0),
            rate_limit: Mutex::new(None),
            limits: Mutex::new(limits::Limits::default()),
        });
        let server = Server::start(
            options.listen,
            ca.server_config()?,
            state.clone(),
            options.worker_threads,
        )?;
        Ok(GithubHandle { server, state, ca })
    }
}

/// A running GitHub emulator; dropping it stops it.
pub struct GithubHandle {
    server: Server,
    state: Arc<GithubState>,
    ca: Arc<TestCa>,
}

impl std::fmt::Debug for GithubHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubHandle")
            .field("addr", &self.addr())
            .finish_non_exhaustive()
    }
}

impl GithubHandle {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `https://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr())
    }

    /// The test CA certificate (PEM) clients must trust.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// The test CA, to share with another emulator (one CA file for both).
    pub fn ca(&self) -> Arc<TestCa> {
        self.ca.clone()
    }

    /// Write the test CA certificate (PEM) to `path`.
    pub fn write_ca_pem(&self, path: &Path) -> Result<(), GithubError> {
        Ok(self.ca.write_cert_pem(path)?)
    }

    /// Everything received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorder.snapshot()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        self.state.recorder.clear();
    }

    /// Make every REST answer misbehave so (`None`: answer properly again).
    pub fn set_answer_fault(&self, fault: Option<AnswerFault>) {
        *lock(&self.state.answer_fault) = fault;
    }

    /// The next `n` creations (comments, pull requests, …) are made and then
    /// answered `502 Bad Gateway`, as GitHub sometimes does after acting: the
    /// client cannot tell whether it posted.
    pub fn fail_after_creating(&self, n: usize) {
        self.state
            .failed_creations
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Fixed rate-limit headers REST answers report from now on, in place
    /// of the counted ones (`None`: the counts of `set_rate_budgets` again).
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) {
        *lock(&self.state.rate_limit) = limit;
    }

    /// Per-token budgets of the primary limits from now on (every window
    /// starts afresh). Default: 5000 `core` and 5000 `graphql` an hour.
    pub fn set_rate_budgets(&self, budgets: RateBudgets) {
        lock(&self.state.limits).set_budgets(budgets);
    }

    /// Content creation (REST POST/PATCH/PUT/DELETE, GraphQL mutations) is
    /// refused for `secs` seconds with `status` (403 or 429) and
    /// `retry-after`, as GitHub's secondary limit does; nothing is created.
    /// `secs` 0 lifts the hold.
    pub fn hold_creations(&self, secs: u64, status: u16) -> Result<(), GithubError> {
        let status = match StatusCode::from_u16(status) {
            Ok(s @ (StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS)) => s,
            _ => {
                return Err(GithubError::Option {
                    option: "hold_creations".into(),
                    problem: format!(
                        "status {status}: GitHub's secondary limit answers 403 or 429"
                    ),
                })
            }
        };
        lock(&self.state.limits).hold_creations(secs, status, unix_now());
        Ok(())
    }

    /// Submit a review of pull request `number` as `author` (`state`
    /// `APPROVED`, `CHANGES_REQUESTED` or `COMMENTED`); GitHub sends
    /// `pull_request_review` with action `submitted`. Returns its id.
    pub fn add_review(
        &self,
        full_name: &str,
        number: u64,
        state: &str,
        body: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        let now = unix_now();
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let issue = model
            .issue_mut(repo_id, number)
            .filter(|i| i.pull.is_some())
            .ok_or_else(|| GithubError::NotFound(format!("pull {full_name}#{number}")))?;
        issue.updated_at = issue.updated_at.max(now);
        let id = model.fresh_id();
        model.reviews.push(model::Review {
            id,
            repo_id,
            number,
            author: author.to_owned(),
            body: body.to_owned(),
            state: state.to_owned(),
            submitted_at: now,
        });
        drop(model);
        self.emit_review(repo_id, number, id);
        Ok(id)
    }

    /// Every issue and review comment, seeded or created, in creation order.
    pub fn comments(&self) -> Vec<Comment> {
        lock(&self.state.model)
            .comments
            .iter()
            .map(|c| c.comment.clone())
            .collect()
    }

    /// Renames `owner/name` to `owner/new_name`, as its owner renaming it
    /// in the repository's settings would: its bare repository moves, and
    /// requests naming the old name are redirected to the repository's id
    /// (no webhook is sent).
    pub fn rename_repo(&self, full_name: &str, new_name: &str) -> Result<(), GithubError> {
        if !rest::valid_name(new_name) {
            return Err(GithubError::Refused(format!(
                "the repository name {new_name:?}"
            )));
        }
        let mut model = lock(&self.state.model);
        let id = repo_id_of(&model, full_name)?;
        let (owner, old_name) = model
            .repo_by_id(id)
            .map(|r| (r.owner.clone(), r.name.clone()))
            .ok_or_else(|| GithubError::NotFound(format!("repository {full_name}")))?;
        if model.repo(&owner, new_name).is_some() {
            return Err(GithubError::Refused(format!(
                "{owner}/{new_name}: it exists"
            )));
        }
        let dir = self.state.root_dir.join(&owner);
        std::fs::rename(
            dir.join(format!("{old_name}.git")),
            dir.join(format!("{new_name}.git")),
        )
        .map_err(|e| GithubError::Repository {
            repo: full_name.to_owned(),
            detail: format!("moving it to {new_name}: {e}"),
        })?;
        if let Some(repo) = model.repos.iter_mut().find(|r| r.id == id) {
            repo.name = new_name.to_owned();
        }
        model.former_names.push((owner, old_name, id));
        Ok(())
    }

    /// The bare repository of `owner/name`.
    pub fn repo_git_dir(&self, full_name: &str) -> Result<PathBuf, GithubError> {
        let (owner, name) = self.state.repo_names(full_name)?;
        Ok(self.state.root_dir.join(owner).join(format!("{name}.git")))
    }

    /// Open an issue in `owner/name`; returns its number.
    pub fn add_issue(
        &self,
        full_name: &str,
        title: &str,
        body: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let number = model.add_issue(repo_id, title, body, author, None, unix_now());
        drop(model);
        self.emit_issue("opened", repo_id, number, author, None);
        Ok(number)
    }

    /// Label issue (or pull request) `number` of `full_name` with `name`,
    /// as the repository's owner labelling it would: the issue's events
    /// show `labeled` by the owner, and `labeled` is delivered.
    pub fn add_label(&self, full_name: &str, number: u64, name: &str) -> Result<(), GithubError> {
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let owner = model
            .repo_by_id(repo_id)
            .map(|r| r.owner.clone())
            .unwrap_or_default();
        let issue = model
            .issue_mut(repo_id, number)
            .ok_or_else(|| GithubError::NotFound(format!("issue {number} of {full_name}")))?;
        if issue.labels.iter().any(|l| l == name) {
            return Ok(());
        }
        issue.labels.push(name.to_owned());
        let event = events::EventKind::Labeled {
            name: name.to_owned(),
        };
        model.record_event(repo_id, number, &owner, event, unix_now());
        let label = model
            .repo_by_id(repo_id)
            .map(|repo| model::label_json(repo, name));
        drop(model);
        // GitHub delivers `issues` / `pull_request` `labeled` with the label.
        self.emit_issue(
            "labeled",
            repo_id,
            number,
            &owner,
            label.map(|l| ("label", l)),
        );
        Ok(())
    }

    /// Add a top-level review comment on `path:line` of pull request
    /// `number` made in review `review_id` (see [`GithubHandle::add_review`]):
    /// it carries the review's id as `pull_request_review_id` and is listed
    /// by `GET …/pulls/{n}/reviews/{review_id}/comments`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_review_comment_in_review(
        &self,
        full_name: &str,
        number: u64,
        review_id: u64,
        path: &str,
        line: u64,
        body: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        {
            let model = lock(&self.state.model);
            let repo_id = repo_id_of(&model, full_name)?;
            if !model
                .reviews
                .iter()
                .any(|r| r.repo_id == repo_id && r.number == number && r.id == review_id)
            {
                return Err(GithubError::NotFound(format!(
                    "review {review_id} of {full_name}#{number}"
                )));
            }
        }
        let id = self.push_review_comment(full_name, number, path, line, body, author)?;
        let mut model = lock(&self.state.model);
        if let Some(c) = model.comments.iter_mut().find(|c| c.comment.id == id) {
            c.review_id = Some(review_id);
        }
        drop(model);
        let repo_id = repo_id_of(&lock(&self.state.model), full_name)?;
        self.emit_comment(CommentKind::Review, repo_id, id);
        Ok(id)
    }

    /// Add an annotation to check run `check_run_id` (a job of
    /// [`GithubHandle::add_job`]), as the check's tool reports one.
    pub fn add_annotation(
        &self,
        full_name: &str,
        check_run_id: u64,
        annotation: Annotation,
    ) -> Result<(), GithubError> {
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let job = model
            .jobs
            .iter_mut()
            .find(|j| j.repo_id == repo_id && j.id == check_run_id)
            .ok_or_else(|| {
                GithubError::NotFound(format!("check run {check_run_id} of {full_name}"))
            })?;
        job.annotations.push(annotation);
        Ok(())
    }

    /// Create `branch` in `owner/name`'s bare repository with one commit on
    /// top of `from` (same tree, so nothing changes on disk), as a pushed
    /// work branch would be: a pull request from it has a commit to bring.
    /// Returns the new commit.
    pub fn add_branch(
        &self,
        full_name: &str,
        branch: &str,
        from: &str,
    ) -> Result<String, GithubError> {
        let git_dir = self.repo_git_dir(full_name)?;
        let fail = |detail: String| GithubError::Repository {
            repo: full_name.to_owned(),
            detail,
        };
        let parent = rev_parse_blocking(&git_dir, from)
            .ok_or_else(|| GithubError::NotFound(format!("branch {from} of {full_name}")))?;
        let git = |args: &[&str]| -> Result<String, GithubError> {
            let output = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(&git_dir)
                .args([
                    "-c",
                    "user.name=emulator",
                    "-c",
                    "user.email=emulator@localhost",
                ])
                .args(args)
                .output()
                .map_err(|e| fail(e.to_string()))?;
            if !output.status.success() {
                return Err(fail(String::from_utf8_lossy(&output.stderr).into_owned()));
            }
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        };
        let tree = format!("{parent}^{{tree}}");
        let message = format!("work on {branch}");
        let commit = git(&["commit-tree", &tree, "-p", &parent, "-m", &message])?;
        git(&["update-ref", &format!("refs/heads/{branch}"), &commit])?;
        Ok(commit)
    }

    /// Open a pull request from `head` (which must exist in the bare
    /// repository) into `base`; returns its number.
    pub fn add_pull(
        &self,
        full_name: &str,
        title: &str,
        head: &str,
        base: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        let (owner, name) = self.state.repo_names(full_name)?;
        let branches = branches_of(&self.state.root_dir, &owner, &name, head, base);
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        // Seeded as strictly as the API opens them (a test cannot seed what
        // GitHub would refuse, such as a pull request from main into main).
        let proposal = pulls::Proposal::new(&owner, head, base);
        let missing =
            |branch: &str| GithubError::NotFound(format!("branch {branch} of {full_name}"));
        let head_sha = branches.head_sha.as_deref().ok_or_else(|| missing(head))?;
        let base_sha = branches.base_sha.as_deref().ok_or_else(|| missing(base))?;
        if let Some(refused) = pulls::refusal(&model, repo_id, &proposal, &branches) {
            return Err(GithubError::Refused(format!(
                "the pull request {head} into {base} of {full_name}: {}",
                refused.body["errors"]
            )));
        }
        let pull = PullInfo::new(proposal.head, head_sha, base, base_sha, false);
        let number = model.add_issue(repo_id, title, "", author, Some(pull), unix_now());
        drop(model);
        self.emit_issue("opened", repo_id, number, author, None);
        Ok(number)
    }

    /// Add a comment to issue or pull request `number` as `author`; returns its id.
    pub fn add_issue_comment(
        &self,
        full_name: &str,
        number: u64,
        body: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        model
            .issue(repo_id, number)
            .ok_or_else(|| GithubError::NotFound(format!("issue {full_name}#{number}")))?;
        let id = model.add_comment(
            CommentKind::Issue,
            repo_id,
            number,
            body,
            author,
            None,
            None,
            None,
            None,
            unix_now(),
        );
        drop(model);
        self.emit_comment(CommentKind::Issue, repo_id, id);
        Ok(id)
    }

    /// Add a top-level review comment on `path:line` of pull request
    /// `number`, posted on its own: as on GitHub it comes in a review of its
    /// own (`COMMENTED`, no body), and GitHub sends both
    /// `pull_request_review_comment` (created) and `pull_request_review`
    /// (submitted).
    pub fn add_review_comment(
        &self,
        full_name: &str,
        number: u64,
        path: &str,
        line: u64,
        body: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        let id = self.push_review_comment(full_name, number, path, line, body, author)?;
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let review = model.wrap_in_review(repo_id, id, unix_now());
        drop(model);
        self.emit_comment(CommentKind::Review, repo_id, id);
        if let Some(review) = review {
            self.emit_review(repo_id, number, review);
        }
        Ok(id)
    }

    /// Stores a review comment; the caller says which review it is in and
    /// sends its webhooks.
    fn push_review_comment(
        &self,
        full_name: &str,
        number: u64,
        path: &str,
        line: u64,
        body: &str,
        author: &str,
    ) -> Result<u64, GithubError> {
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let head_sha = model
            .issue(repo_id, number)
            .and_then(|i| i.pull.as_ref())
            .map(|p| p.head_sha.clone())
            .ok_or_else(|| GithubError::NotFound(format!("pull {full_name}#{number}")))?;
        let id = model.add_comment(
            CommentKind::Review,
            repo_id,
            number,
            body,
            author,
            None,
            Some(path.to_owned()),
            Some(line),
            Some(head_sha),
            unix_now(),
        );
        Ok(id)
    }

    /// Record a finished Actions run with one job (also visible as a check
    /// run on `head_sha`) whose log is `logs`; returns `(run_id, job_id)`.
    pub fn add_job(
        &self,
        full_name: &str,
        name: &str,
        head_sha: &str,
        conclusion: &str,
        logs: &str,
    ) -> Result<(u64, u64), GithubError> {
        self.push_job(full_name, None, name, head_sha, conclusion, logs)
    }

    /// As [`GithubHandle::add_job`], the run being one of the workflow
    /// in `workflow_path` (e.g. `.github/workflows/ci.yml`; the file is
    /// not required to exist, but `GET …/actions/workflows` only lists the
    /// files on the default branch): the run carries `workflow_id` and
    /// `path`, and `GET …/actions/workflows/{id}/runs` lists it.
    pub fn add_workflow_job(
        &self,
        full_name: &str,
        workflow_path: &str,
        name: &str,
        head_sha: &str,
        conclusion: &str,
        logs: &str,
    ) -> Result<(u64, u64), GithubError> {
        let workflow = Some(workflow_path.to_owned());
        self.push_job(full_name, workflow, name, head_sha, conclusion, logs)
    }

    fn push_job(
        &self,
        full_name: &str,
        workflow: Option<String>,
        name: &str,
        head_sha: &str,
        conclusion: &str,
        logs: &str,
    ) -> Result<(u64, u64), GithubError> {
        let mut model = lock(&self.state.model);
        let repo_id = repo_id_of(&model, full_name)?;
        let run_id = model.fresh_id();
        let id = model.fresh_id();
        model.jobs.push(Job {
            id,
            run_id,
            repo_id,
            name: name.to_owned(),
            head_sha: head_sha.to_owned(),
            conclusion: conclusion.to_owned(),
            logs: logs.to_owned(),
            created_at: unix_now(),
            workflow,
            annotations: Vec::new(),
        });
        Ok((run_id, id))
    }

    /// Stop serving: cut connections, end git child processes, join the thread.
    pub fn shutdown(mut self) {
        self.server.shutdown();
    }
}

fn repo_id_of(model: &Model, full_name: &str) -> Result<u64, GithubError> {
    let (owner, name) = full_name
        .split_once('/')
        .ok_or_else(|| GithubError::NotFound(format!("repository {full_name}")))?;
    model
        .repo(owner, name)
        .map(|r| r.id)
        .ok_or_else(|| GithubError::NotFound(format!("repository {full_name}")))
}

// === impl GithubState ===

struct GithubState {
    model: Mutex<Model>,
    recorder: Recorder,
    tokens: Vec<GithubToken>,
    root_dir: PathBuf,
    logs_base_url: String,
    logs_host: String,
    enterprise: bool,
    require_user_agent: bool,
    logs_signature: String,
    webhooks: webhooks::Webhooks,
    /// The installed GitHub App and the tokens it minted.
    apps: app::Apps,
    /// How REST answers misbehave, if they do (tests of a proxy in front).
    answer_fault: Mutex<Option<AnswerFault>>,
    /// How many more creations (answers 201) are answered 502 instead, the
    /// object created all the same: a platform that acted, then failed.
    failed_creations: std::sync::atomic::AtomicUsize,
    /// The rate limit REST answers report, if a test set one (it
    /// overrides the counted limits below).
    rate_limit: Mutex<Option<RateLimit>>,
    /// Per-token primary limits and the secondary limit on creations.
    limits: Mutex<limits::Limits>,
}

/// The rate limit the emulator reports on REST answers (GitHub's headers
/// `X-RateLimit-Remaining`, `X-RateLimit-Reset`, `Retry-After`,
/// `X-Poll-Interval`), and whether it refuses calls while it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimit {
    pub remaining: u64,
    /// Unix seconds when the window resets.
    pub reset: u64,
    pub retry_after: Option<u64>,
    pub poll_interval: Option<u64>,
    /// Answer every REST call with this status (403 or 429, GitHub's limit
    /// answers) instead of serving it; `None`: serve, with the headers.
    pub refuse_with: Option<u16>,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Rest,
    Git(git::GitPath),
    JobLogs,
    /// A host this emulator serves, but not at this path (e.g. REST on github.com).
    NotFound,
}

/// Dispatch on Host as GitHub's hosts do; IP literals, `localhost` and a
/// missing Host fall back to the path, so tests can connect by address.
fn classify(host: Option<&str>, path: &str, logs_host: &str) -> Target {
    let is_logs = path.starts_with("/_logs/");
    let git = git::git_path(path);
    match host {
        Some("api.github.com" | "uploads.github.com") => Target::Rest,
        Some("github.com") => git.map_or(Target::NotFound, Target::Git),
        Some(h) if h == logs_host => {
            if is_logs {
                Target::JobLogs
            } else {
                Target::NotFound
            }
        }
        Some(h) if h == "localhost" || h.parse::<std::net::IpAddr>().is_ok() => {
            by_path(is_logs, git)
        }
        None => by_path(is_logs, git),
        Some(_) => Target::NotFound,
    }
}

fn by_path(is_logs: bool, git: Option<git::GitPath>) -> Target {
    match (is_logs, git) {
        (true, _) => Target::JobLogs,
        (false, Some(git)) => Target::Git(git),
        (false, None) => Target::Rest,
    }
}

/// The host name of a base URL such as `https://host[:port]/…`.
fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    crate::record::strip_port(authority).to_ascii_lowercase()
}

/// A parsed `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Credential {
    /// `token X` or `Bearer X`.
    Token(String),
    /// `Basic base64(user:password)`.
    Basic { user: String, password: String },
}

fn parse_authorization(value: &str) -> Option<Credential> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
        return (!rest.is_empty()).then(|| Credential::Token(rest.to_owned()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        return Some(Credential::Basic {
            user: user.to_owned(),
            password: password.to_owned(),
        });
    }
    None
}

impl GithubState {
    /// The login `token` acts as: a configured token, or a live minted one.
    fn login_for(&self, token: &str) -> Option<&str> {
        self.tokens
            .iter()
            .find(|t| t.token == token)
            .map(|t| t.login.as_str())
            .or_else(|| self.apps.login_for(token, unix_now()))
    }

    /// Where git is sent for a repository known by `git_path`'s former
    /// name: the same path and query with the repository's name now.
    fn git_moved(&self, parts: &http::request::Parts, git_path: &git::GitPath) -> Option<String> {
        let model = lock(&self.model);
        let id = model.former_name(&git_path.owner, &git_path.name)?;
        let repo = model.repo_by_id(id)?;
        let path = parts.uri.path();
        // `/{owner}/{name}[.git]{endpoint}`: keep the suffix and the endpoint.
        let rest = path.strip_prefix('/')?.split_once('/')?.1;
        let (segment, endpoint) = rest.split_at(rest.find('/')?);
        let suffix = if segment.ends_with(".git") {
            ".git"
        } else {
            ""
        };
        let host = parts
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("github.com");
        let query = parts.uri.query().map_or(String::new(), |q| format!("?{q}"));
        Some(format!(
            "https://{host}/{}/{}{suffix}{endpoint}{query}",
            repo.owner, repo.name
        ))
    }

    fn repo_names(&self, full_name: &str) -> Result<(String, String), GithubError> {
        let model = lock(&self.model);
        let id = repo_id_of(&model, full_name)?;
        let repo = model
            .repo_by_id(id)
            .ok_or_else(|| GithubError::NotFound(format!("repository {full_name}")))?;
        Ok((repo.owner.clone(), repo.name.clone()))
    }

    /// The bare repository of `repo` (as the request names it) and its
    /// canonical `owner/name`; `None` for no such repository.
    fn bare_repo(&self, repo: &rest::RepoPath) -> Option<(PathBuf, String)> {
        let (owner, name) = self
            .repo_names(&format!("{}/{}", repo.owner, repo.name))
            .ok()?;
        let git_dir = self.root_dir.join(&owner).join(format!("{name}.git"));
        Some((git_dir, format!("{owner}/{name}")))
    }

    /// Pull request `number`'s base and head commits; `None` for an issue
    /// or nothing.
    fn pull_shas(&self, repo: &rest::RepoPath, number: u64) -> Option<(String, String)> {
        let model = lock(&self.model);
        let pull = model
            .repo(&repo.owner, &repo.name)
            .and_then(|r| model.issue(r.id, number))?
            .pull
            .as_ref()?;
        Some((pull.base_sha.clone(), pull.head_sha.clone()))
    }

    async fn dispatch(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let mut record = record_head(&parts);
        let target = classify(record.host.as_deref(), &record.path, &self.logs_host);
        let credential = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_authorization);
        let response = match target {
            Target::JobLogs => self.job_logs(&record),
            Target::NotFound => plain(StatusCode::NOT_FOUND, "Not Found"),
            Target::Git(git_path) => {
                let user = match &credential {
                    // GitHub wants `x-access-token` as the user for app
                    // installation tokens; requiring it catches a proxy that
                    // injects the token in the wrong form.
                    Some(Credential::Basic { user, password })
                        if user == GIT_USER && self.login_for(password).is_some() =>
                    {
                        Some(user.clone())
                    }
                    _ => None,
                };
                let Some(user) = user else {
                    record.status = StatusCode::UNAUTHORIZED.as_u16();
                    self.recorder.push(record);
                    return git_unauthorized();
                };
                // A former name of a renamed repository: GitHub sends git to
                // the same endpoint under the new name (git follows the
                // redirect of its first request, `http.followRedirects`).
                if let Some(location) = self.git_moved(&parts, &git_path) {
                    record.status = StatusCode::MOVED_PERMANENTLY.as_u16();
                    self.recorder.push(record);
                    let mut response = plain(StatusCode::MOVED_PERMANENTLY, "Moved Permanently");
                    if let Ok(value) = http::HeaderValue::from_str(&location) {
                        response.headers_mut().insert(http::header::LOCATION, value);
                    }
                    return response;
                }
                if let Some(refused) = self.git_scope(&parts, &git_path, credential.as_ref()) {
                    record.status = refused.status().as_u16();
                    self.recorder.push(record);
                    return refused;
                }
                // Recorded now, completed as the body streams and the answer starts.
                let index = self.recorder.push_pending(record);
                let state = self.clone();
                let capture: git::BodyCapture = Box::new(move |prefix, truncated| {
                    state.recorder.update(index, |r| {
                        r.body = prefix;
                        r.body_truncated = truncated;
                    });
                });
                // GitHub: pushing workflow files needs `workflows: write`.
                let refuse_workflows = match &credential {
                    Some(Credential::Basic { password, .. }) => self
                        .apps
                        .scope_of(password)
                        .is_some_and(|scope| !app::holds(&scope, &["workflows"], "write")),
                    _ => false,
                };
                // The token's account (the git user is `x-access-token`).
                let pusher = match &credential {
                    Some(Credential::Basic { password, .. }) => self.login_for(password),
                    _ => None,
                }
                .unwrap_or(GIT_USER)
                .to_owned();
                let response = self
                    .git(
                        &parts,
                        &git_path,
                        &user,
                        body,
                        capture,
                        refuse_workflows,
                        &pusher,
                    )
                    .await;
                let status = response.status().as_u16();
                self.recorder.update(index, |r| r.status = status);
                return response;
            }
            Target::Rest
                if self.require_user_agent
                    && !parts.headers.contains_key(http::header::USER_AGENT) =>
            {
                // "All API requests MUST include a valid User-Agent header.
                // Requests with no User-Agent header will be rejected" (GitHub
                // REST docs, "User agent required"); the answer is plain text.
                plain(StatusCode::FORBIDDEN, USER_AGENT_REQUIRED)
            }
            Target::Rest => {
                let login = match &credential {
                    Some(Credential::Token(token)) => self.login_for(token),
                    Some(Credential::Basic { password, .. }) => self.login_for(password),
                    None => None,
                }
                .map(str::to_owned);
                let bytes = match Limited::new(body, MAX_API_BODY).collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(_) => {
                        let reply = rest::Reply::error(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "Request body too large",
                        );
                        return self.finish(record, reply);
                    }
                };
                record.body_truncated = bytes.len() > BODY_RECORD_LIMIT;
                record.body = bytes[..bytes.len().min(BODY_RECORD_LIMIT)].to_vec();
                if let Some((reply, link)) = self.app_endpoint(&parts, credential.as_ref(), &bytes)
                {
                    let mut response = self.finish(record, reply);
                    if let Some(link) = link.and_then(|l| http::HeaderValue::from_str(&l).ok()) {
                        response.headers_mut().insert(http::header::LINK, link);
                    }
                    return response;
                }
                let scope = match &credential {
                    Some(Credential::Token(token)) => self.apps.scope_of(token),
                    _ => None,
                };
                let reply = match login {
                    None if credential.is_none() => {
                        rest::Reply::error(StatusCode::UNAUTHORIZED, "Requires authentication")
                    }
                    None => rest::Reply::error(StatusCode::UNAUTHORIZED, "Bad credentials"),
                    Some(login) => {
                        let token = match &credential {
                            Some(Credential::Token(t)) => Some(t.as_str()),
                            Some(Credential::Basic { password, .. }) => Some(password.as_str()),
                            None => None,
                        };
                        if let Some(refused) =
                            self.rate_limited(&record, token, &login, scope.is_some())
                        {
                            return self.finish(record, refused);
                        }
                        let mut changes = Vec::new();
                        let reply = self
                            .rest(&parts, &bytes, &login, scope.as_ref(), &mut changes)
                            .await;
                        // As GitHub does: what the API changed is delivered
                        // too (the bot's own comments included; receivers
                        // drop their own events).
                        tokio::task::block_in_place(|| {
                            for (event, payload) in changes {
                                self.emit_webhook(event, payload);
                            }
                        });
                        reply
                    }
                };
                return self.finish(record, reply);
            }
        };
        record.status = response.status().as_u16();
        self.recorder.push(record);
        response
    }

    /// Record a REST reply and turn it into a response. A GET answered 200
    /// carries an `ETag`; a matching `If-None-Match` gets 304 with no body,
    /// as GitHub does for polling.
    fn finish(&self, mut record: RecordedRequest, mut reply: rest::Reply) -> Response<Body> {
        if self.enterprise {
            if let Some(host) = record.header("host") {
                enterprise_urls(&mut reply.body, host);
                if let Some(location) = reply.location.take() {
                    let mut location = Value::String(location);
                    enterprise_urls(&mut location, host);
                    reply.location = location.as_str().map(str::to_owned);
                }
            }
        }
        let body = match &reply.body {
            Value::String(text) if reply.media.is_some() => Bytes::from(text.clone()),
            Value::Null => Bytes::new(),
            other => Bytes::from(other.to_string()),
        };
        let etag = (record.method == "GET" && reply.status == StatusCode::OK).then(|| {
            use sha2::Digest as _;
            format!("W/\"{}\"", hex::encode(&sha2::Sha256::digest(&body)[..16]))
        });
        let not_modified = etag.as_deref().is_some_and(|tag| {
            record
                .header_all("if-none-match")
                .iter()
                .any(|v| v.split(',').any(|candidate| candidate.trim() == tag))
        });
        if not_modified {
            reply.status = StatusCode::NOT_MODIFIED;
        }
        let acted_then_failed = reply.status == StatusCode::CREATED
            && self
                .failed_creations
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| n.checked_sub(1),
                )
                .is_ok();
        let body = if acted_then_failed {
            reply.status = StatusCode::BAD_GATEWAY;
            reply.location = None;
            Bytes::from_static(b"{\"message\":\"Server Error\"}")
        } else {
            body
        };
        record.status = reply.status.as_u16();
        record.created_id = reply.created_id.clone();
        let (host, path, query) = (
            record.header("host").map(str::to_owned),
            record.path.clone(),
            record.query.clone(),
        );
        let accept_encoding: Vec<String> = record
            .header_all("accept-encoding")
            .into_iter()
            .map(str::to_owned)
            .collect();
        let token = match record.authorization().and_then(parse_authorization) {
            Some(Credential::Token(token)) => Some(token),
            Some(Credential::Basic { password, .. }) => Some(password),
            None => None,
        };
        // Held until the request is recorded: a request recorded after
        // `set_rate_limit` returns is answered under the new limit.
        let limit_guard = lock(&self.rate_limit);
        let limit = *limit_guard;
        let refused = limit
            .and_then(|l| l.refuse_with)
            .and_then(|s| StatusCode::from_u16(s).ok());
        let (reply_status, body) = match refused {
            Some(status) => {
                record.status = status.as_u16();
                let text = json!({"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"});
                (status, Bytes::from(text.to_string()))
            }
            None => (reply.status, body),
        };
        let not_modified = not_modified && refused.is_none();
        let etag = etag.filter(|_| refused.is_none());
        let counted = self.rate_headers(&record, token.as_deref(), not_modified);
        self.recorder.push(record);
        drop(limit_guard);
        let rate = match limit {
            // A test's fixed limit replaces what was counted.
            Some(l) => limits::RateHeaders {
                limit: 5000,
                remaining: l.remaining,
                used: 5000u64.saturating_sub(l.remaining),
                reset: l.reset,
                resource: counted.resource,
                retry_after: l.retry_after,
            },
            None => counted,
        };
        let mut builder = Response::builder()
            .status(reply_status)
            .header("x-github-media-type", "github.v3; format=json");
        for (name, value) in rate.pairs() {
            builder = builder.header(name, value);
        }
        if let Some(interval) = limit.and_then(|l| l.poll_interval) {
            builder = builder.header("x-poll-interval", interval.to_string());
        }
        if let Some(location) = &reply.location {
            let location = match (*lock(&self.answer_fault), token.as_deref()) {
                (Some(AnswerFault::TokenInLocation), Some(token)) => {
                    let joint = if location.contains('?') { '&' } else { '?' };
                    format!("{location}{joint}{token}=1")
                }
                _ => location.clone(),
            };
            builder = builder.header(http::header::LOCATION, location);
        }
        if let Some(etag) = &etag {
            builder = builder.header(http::header::ETAG, etag);
        }
        if let Some(pages) = reply.pages {
            let path = id_form(&lock(&self.model), &path);
            if let Some(link) = link_header(host.as_deref(), &path, query.as_deref(), pages) {
                builder = builder.header(http::header::LINK, link);
            }
        }
        let body = if not_modified || body.is_empty() {
            Bytes::new()
        } else {
            builder = builder.header(
                http::header::CONTENT_TYPE,
                reply.media.map_or(
                    "application/json; charset=utf-8",
                    contents::Media::content_type,
                ),
            );
            body
        };
        let fault = *lock(&self.answer_fault);
        let accept: Vec<&str> = accept_encoding.iter().map(String::as_str).collect();
        let Ok(wire) = encoding::on_the_wire(body, &accept, fault, token.as_deref()) else {
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "compression failed");
        };
        for (name, value) in wire.headers {
            builder = builder.header(name, value);
        }
        if let Some(reason) = wire
            .reason
            .and_then(|r| hyper::ext::ReasonPhrase::try_from(r).ok())
        {
            builder = builder.extension(reason);
        }
        builder
            .body(full_body(wire.body))
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "response build failed"))
    }

    /// A REST or GraphQL call; the webhooks for what it changed go to
    /// `changes` (taken under the same lock as the change: each is sent once).
    async fn rest(
        &self,
        parts: &http::request::Parts,
        body: &[u8],
        login: &str,
        scope: Option<&app::Scope>,
        changes: &mut Vec<(&'static str, Value)>,
    ) -> rest::Reply {
        // GitHub Enterprise Server serves REST under `/api/v3` and GraphQL at
        // `/api/graphql` only (elsewhere is its web interface), which lets
        // clients such as gh talk to the emulator directly with
        // `GH_HOST=localhost:PORT`.
        let path = match parts.uri.path() {
            "/api/graphql" if self.enterprise => "/graphql",
            other if self.enterprise => {
                match other.strip_prefix("/api/v3").filter(|p| p.starts_with('/')) {
                    Some(api) => api,
                    None => return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found"),
                }
            }
            other => other,
        };
        // A former name of a renamed repository is redirected to its id.
        if let Some((owner, name, tail)) = rest::repository_named(path) {
            if let Some(id) = lock(&self.model).former_name(owner, name) {
                let host = parts
                    .headers
                    .get(http::header::HOST)
                    .and_then(|v| v.to_str().ok());
                let base =
                    host.map_or_else(|| model::API_BASE.to_owned(), |h| format!("https://{h}"));
                let prefix = if parts.uri.path() == path {
                    ""
                } else {
                    "/api/v3"
                };
                let query = parts.uri.query().map_or(String::new(), |q| format!("?{q}"));
                let url = format!("{base}{prefix}/repositories/{id}{tail}{query}");
                return rest::Reply::moved(&parts.method, url);
            }
        }
        // `/repositories/{id}/…` is GitHub's alias of `/repos/{owner}/{repo}/…`.
        let aliased;
        let path = match rest::repository_alias(path) {
            Some((id, tail)) => {
                let model = lock(&self.model);
                let Some(repo) = model.repo_by_id(id) else {
                    return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
                };
                aliased = format!("/repos/{}/{}{tail}", repo.owner, repo.name);
                aliased.as_str()
            }
            None => path,
        };
        let Some(mut route) = rest::route(path) else {
            return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
        };
        if let Some(scope) = scope {
            let allowed = app::authorize(&lock(&self.model), scope, &parts.method, &route);
            if let Err(refusal) = allowed {
                return refusal.reply();
            }
        }
        if route == rest::Route::Graphql {
            if parts.method != Method::POST {
                return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
            }
            let root_dir = self.root_dir.clone();
            let repos: Vec<(u64, String, String)> = lock(&self.model)
                .repos
                .iter()
                .map(|r| (r.id, r.owner.clone(), r.name.clone()))
                .collect();
            let git_dir = |repo_id: u64| {
                let (_, owner, name) = repos.iter().find(|(id, _, _)| *id == repo_id)?;
                Some((
                    root_dir.join(owner).join(format!("{name}.git")),
                    format!("{owner}/{name}"),
                ))
            };
            // Reading a branch runs git; only createPullRequest asks, once per branch.
            let branch_head =
                |repo_id: u64, branch: &str| rev_parse_blocking(&git_dir(repo_id)?.0, branch);
            let commits_ahead = |repo_id: u64, base: &str, head: &str| {
                rev_list_count_blocking(&git_dir(repo_id)?.0, base, head)
            };
            // A pull request's commits and files, only when a query asks.
            let pull = |repo_id: u64, base: &str, head: &str| {
                let (dir, full_name) = git_dir(repo_id)?;
                let list = |what: contents::GitRead| match contents::read(&dir, &full_name, &what) {
                    Ok(contents::Read::List(items)) => Some(items),
                    _ => None,
                };
                let (base, head) = (base.to_owned(), head.to_owned());
                Some(graphql::pulls::PullFromGit {
                    commits: list(contents::GitRead::PullCommits {
                        base: base.clone(),
                        head: head.clone(),
                    })?,
                    files: list(contents::GitRead::PullFiles { base, head })?,
                })
            };
            // The executor may run git (blocking) while holding the model lock.
            let answer = tokio::task::block_in_place(|| {
                let mut model = lock(&self.model);
                let before = model.before();
                let answer = graphql::execute(
                    &mut model,
                    login,
                    unix_now(),
                    body,
                    graphql::GitReads {
                        branch_head: &branch_head,
                        commits_ahead: &commits_ahead,
                        pull: &pull,
                    },
                    scope,
                );
                *changes = model.changes(&before, login);
                answer
            });
            return rest::Reply {
                status: StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_REQUEST),
                body: answer.body,
                created_id: answer.created_id,
                location: None,
                pages: None,
                media: None,
            };
        }
        if parts.method == Method::GET {
            if let Some(reply) = self.media_reply(parts, &route) {
                return reply;
            }
        }
        let query = parse_query(parts.uri.query().unwrap_or(""));
        if route.reads_git() {
            return self.git_read(&parts.method, &route, &query);
        }
        // A commit's checks are asked by any ref ("a SHA, branch name, or
        // a tag name", GitHub's REST docs): resolved to its commit first,
        // and GitHub's 422 for a ref that names none.
        if let rest::Route::CommitCheckRuns(repo, git_ref)
        | rest::Route::CommitCheckSuites(repo, git_ref) = &mut route
        {
            // (An unknown repository is the handler's 404.)
            if let Some((git_dir, _)) = self.bare_repo(repo) {
                // A branch name's `/` comes encoded (`gatehouse%2Fx`).
                let named = git_ref.replace("%2F", "/").replace("%2f", "/");
                match tokio::task::block_in_place(|| contents::commit_id(&git_dir, &named)) {
                    Some(sha) => *git_ref = sha,
                    None => {
                        return rest::Reply::error(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            &format!("No commit found for SHA: {git_ref}"),
                        )
                    }
                }
            }
        }
        // Opening a pull request needs both branches' commits from disk.
        let branches = match (&route, &parts.method) {
            (rest::Route::Pulls(repo), &Method::POST) => {
                let field = |name: &str| {
                    serde_json::from_slice::<Value>(body)
                        .ok()
                        .and_then(|v| v.get(name).and_then(Value::as_str).map(str::to_owned))
                };
                match (
                    field("head"),
                    field("base"),
                    self.repo_names(&format!("{}/{}", repo.owner, repo.name)),
                ) {
                    (Some(head), Some(base), Ok((owner, name))) => {
                        let root = self.root_dir.clone();
                        tokio::task::spawn_blocking(move || {
                            branches_of(&root, &owner, &name, &head, &base)
                        })
                        .await
                        .ok()
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let pull_commits = match (&route, &parts.method) {
            (rest::Route::IssueTimeline(repo, n), &Method::GET) => self.pull_commits(repo, *n),
            _ => Vec::new(),
        };
        let mut model = lock(&self.model);
        let before = model.before();
        let reply = rest::handle(
            &mut model,
            rest::RestCall {
                method: &parts.method,
                route,
                query: &query,
                body,
                login,
                now: unix_now(),
                branches,
                pull_commits,
                logs_base_url: &self.logs_base_url,
                logs_signature: &self.logs_signature,
            },
        );
        *changes = model.changes(&before, login);
        drop(model);
        let mut reply = reply;
        self.fill_from_git(&mut reply.body);
        reply
    }

    /// Fills in what the pure handlers cannot know without git: a pull
    /// request's diff counts (`pull-request`: `commits`, `additions`,
    /// `deletions`, `changed_files`) and a workflow run's `head_commit`
    /// (`simple-commit`), for one object, a list, or a run listing. Most
    /// answers hold neither and cost no git run and no blocking section.
    fn fill_from_git(&self, body: &mut Value) {
        let fills = git_fills(body);
        if fills.is_empty() {
            return;
        }
        tokio::task::block_in_place(|| self.fill(fills));
    }

    /// A pull request, commit or comparison asked for as a diff, patch or
    /// sha (`Accept: application/vnd.github.v3.diff`, as `gh pr diff`
    /// asks): git's text of it. `None`: answered as JSON.
    fn media_reply(
        &self,
        parts: &http::request::Parts,
        route: &rest::Route,
    ) -> Option<rest::Reply> {
        use contents::{Media, MediaOf};
        let accept: Vec<&str> = parts
            .headers
            .get_all(http::header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let media = Media::from_accept(&accept)?;
        let (repo, pull) = match route {
            rest::Route::Pull(repo, n) => (repo, Some(self.pull_shas(repo, *n)?)),
            rest::Route::Commit(repo, _) | rest::Route::Compare(repo, _) => (repo, None),
            _ => return None,
        };
        let of = match (route, &pull) {
            (rest::Route::Commit(_, rev), _) => MediaOf::Commit(rev),
            (rest::Route::Compare(_, spec), _) => MediaOf::Compare(spec),
            (_, Some((base, head))) => MediaOf::Pull { base, head },
            _ => return None,
        };
        let (git_dir, _) = self.bare_repo(repo)?;
        let text = tokio::task::block_in_place(|| contents::media_text(&git_dir, &of, media))?;
        Some(match text {
            Ok(text) => rest::Reply {
                media: Some(media),
                ..rest::Reply::ok(Value::String(text))
            },
            Err(reply) => reply,
        })
    }

    /// The commits of pull request `number` (`base..head`, oldest first, as
    /// `GET …/pulls/{n}/commits` lists them); none for an issue.
    fn pull_commits(&self, repo: &rest::RepoPath, number: u64) -> Vec<Value> {
        let (Some((base, head)), Some((git_dir, full_name))) =
            (self.pull_shas(repo, number), self.bare_repo(repo))
        else {
            return Vec::new();
        };
        let what = contents::GitRead::PullCommits { base, head };
        match tokio::task::block_in_place(|| contents::read(&git_dir, &full_name, &what)) {
            Ok(contents::Read::List(commits)) => commits,
            _ => Vec::new(),
        }
    }

    /// After a push to `owner/name` by `pusher`: each open pull request whose
    /// head branch moved takes the new head commit, as GitHub updates a pull
    /// request on push, and `pull_request` `synchronize` (with `before` and
    /// `after`) is delivered. Blocking: runs git.
    fn refresh_pull_heads(&self, owner: &str, name: &str, pusher: &str) {
        let git_dir = self.root_dir.join(owner).join(format!("{name}.git"));
        let (repo_id, pulls): (u64, Vec<(u64, String, String)>) = {
            let model = lock(&self.model);
            let Some(repo) = model.repo(owner, name) else {
                return;
            };
            let pulls = model
                .issues
                .iter()
                .filter(|i| i.repo_id == repo.id && i.open)
                .filter_map(|i| {
                    let p = i.pull.as_ref()?;
                    Some((i.number, p.head.clone(), p.head_sha.clone()))
                })
                .collect();
            (repo.id, pulls)
        };
        for (number, head, before) in pulls {
            let Some(after) = rev_parse_blocking(&git_dir, &head) else {
                continue;
            };
            if after == before {
                continue;
            }
            let event = {
                let mut model = lock(&self.model);
                let Some(issue) = model.issue_mut(repo_id, number) else {
                    continue;
                };
                issue.updated_at = unix_now();
                if let Some(pull) = issue.pull.as_mut() {
                    pull.head_sha = after.clone();
                }
                model.issue_event("synchronize", repo_id, number, pusher)
            };
            if let Some((event, mut payload)) = event {
                payload["before"] = json!(before);
                payload["after"] = json!(after);
                self.emit_webhook(event, payload);
            }
        }
    }

    /// Runs git for each fill; blocking.
    fn fill(&self, fills: Vec<(&mut Value, GitFill)>) {
        for (v, fill) in fills {
            let repo = match fill {
                GitFill::PullStats => v["base"]["repo"]["full_name"].as_str(),
                GitFill::HeadCommit => v["repository"]["full_name"].as_str(),
            };
            let Some(Ok((owner, name))) = repo.map(|r| self.repo_names(r)) else {
                continue;
            };
            let git_dir = self.root_dir.join(&owner).join(format!("{name}.git"));
            match fill {
                GitFill::PullStats => fill_pull_stats(&git_dir, v),
                GitFill::HeadCommit => fill_head_commit(&git_dir, v),
            }
        }
    }

    /// Delivers a webhook whose pull request carries the diff counts read
    /// from git, as the REST answer does (GitHub's `pull_request` payloads
    /// hold the full pull request). Blocking: callers are a handle's thread
    /// or inside `block_in_place`, like the delivery itself.
    pub(super) fn emit_webhook(&self, event: &str, mut payload: Value) {
        if let Some(pull) = payload.get_mut("pull_request") {
            self.fill(git_fills(pull));
        }
        self.webhooks.emit(event, &payload);
    }

    /// A read of the repository's git data: what the route names is read
    /// from the bare repository (a pull request's commits from the model
    /// first), then paged like any listing.
    fn git_read(
        &self,
        method: &Method,
        route: &rest::Route,
        query: &[(String, String)],
    ) -> rest::Reply {
        use contents::GitRead;
        use rest::Route;
        if method != Method::GET {
            return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
        }
        let param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        if let Route::Workflows(r) | Route::Workflow(r, _) | Route::WorkflowRuns(r, _) = route {
            return self.workflows(route, r, query);
        }
        let (repo, what) = match route {
            Route::Readme(r) => (
                r,
                GitRead::Readme {
                    reference: param("ref"),
                },
            ),
            Route::Contents(r, path) => (
                r,
                GitRead::Contents {
                    path: path.clone(),
                    reference: param("ref"),
                },
            ),
            Route::Branches(r) => (r, GitRead::Branches),
            Route::Branch(r, name) => (r, GitRead::Branch(name.clone())),
            Route::Commits(r) => (r, GitRead::Commits { from: param("sha") }),
            Route::Commit(r, sha) => (r, GitRead::Commit(sha.clone())),
            Route::Compare(r, spec) => (r, GitRead::Compare(spec.clone())),
            Route::GitObject(r, kind, name) => (r, GitRead::Object(kind, name.clone())),
            Route::PullFiles(r, n) | Route::PullCommits(r, n) => {
                let Some((base, head)) = self.pull_shas(r, *n) else {
                    return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
                };
                let what = if matches!(route, Route::PullFiles(..)) {
                    GitRead::PullFiles { base, head }
                } else {
                    GitRead::PullCommits { base, head }
                };
                (r, what)
            }
            _ => return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        };
        let Some((git_dir, canonical)) = self.bare_repo(repo) else {
            return rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
        };
        match tokio::task::block_in_place(|| contents::read(&git_dir, &canonical, &what)) {
            Ok(contents::Read::One(v)) => rest::Reply::ok(v),
            Ok(contents::Read::List(items)) => rest::paginated(items, query),
            Err(reply) => reply,
        }
    }

    /// The workflows of the repository's default branch, one of them, or
    /// its runs (newest first), each list paged inside its object as GitHub
    /// pages `{total_count, workflows | workflow_runs}`.
    fn workflows(
        &self,
        route: &rest::Route,
        repo: &rest::RepoPath,
        query: &[(String, String)],
    ) -> rest::Reply {
        use rest::Route;
        let not_found = || rest::Reply::error(StatusCode::NOT_FOUND, "Not Found");
        let Some((repo_id, owner, name, branch)) = ({
            let model = lock(&self.model);
            model.repo(&repo.owner, &repo.name).map(|r| {
                (
                    r.id,
                    r.owner.clone(),
                    r.name.clone(),
                    r.default_branch.clone(),
                )
            })
        }) else {
            return not_found();
        };
        let git_dir = self.root_dir.join(&owner).join(format!("{name}.git"));
        let files = tokio::task::block_in_place(|| actions::workflow_files(&git_dir, &branch))
            .unwrap_or_default();
        let model = lock(&self.model);
        let Some(repo) = model.repo_by_id(repo_id) else {
            return not_found();
        };
        let in_object = |key: &str, items: Vec<Value>| {
            let total = items.len();
            let mut reply = rest::paginated(items, query);
            reply.body = json!({"total_count": total, key: reply.body});
            reply
        };
        match route {
            Route::Workflows(_) => in_object(
                "workflows",
                files
                    .iter()
                    .map(|f| actions::workflow_json(repo, &branch, f))
                    .collect(),
            ),
            Route::Workflow(_, wanted) => match actions::find(&files, repo_id, wanted) {
                Some(f) => rest::Reply::ok(actions::workflow_json(repo, &branch, f)),
                None => not_found(),
            },
            Route::WorkflowRuns(_, wanted) => {
                let Some(f) = actions::find(&files, repo_id, wanted) else {
                    return not_found();
                };
                let mut runs: Vec<&Job> = Vec::new();
                for job in model.jobs.iter().filter(|j| {
                    j.repo_id == repo_id && j.workflow.as_deref() == Some(f.path.as_str())
                }) {
                    if !runs.iter().any(|r| r.run_id == job.run_id) {
                        runs.push(job);
                    }
                }
                runs.reverse();
                let mut reply = in_object(
                    "workflow_runs",
                    runs.into_iter().map(|j| model.run_json(j)).collect(),
                );
                drop(model);
                self.fill_from_git(&mut reply.body);
                reply
            }
            _ => not_found(),
        }
    }

    /// A run's logs: a zip archive with one `{n}_{job name}.txt` per job,
    /// as GitHub's log archive has at its top level.
    fn run_logs(&self, run_id: u64) -> Response<Body> {
        let model = lock(&self.model);
        let jobs: Vec<&Job> = model.jobs.iter().filter(|j| j.run_id == run_id).collect();
        let Some(first) = jobs.first() else {
            return plain(StatusCode::NOT_FOUND, "BlobNotFound");
        };
        let files: Vec<(String, Vec<u8>)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (format!("{i}_{}.txt", j.name), j.logs.as_bytes().to_vec()))
            .collect();
        let zip = actions::zip_stored(&files, first.created_at);
        let mut response = Response::new(full_body(Bytes::from(zip)));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/zip"),
        );
        response
    }

    fn job_logs(&self, record: &RecordedRequest) -> Response<Body> {
        let query = parse_query(record.query.as_deref().unwrap_or(""));
        let sig = query
            .iter()
            .find(|(k, _)| k == "sig")
            .map(|(_, v)| v.as_str());
        if let Some(run_id) = record.path.strip_prefix("/_logs/runs/") {
            let Ok(run_id) = run_id.parse::<u64>() else {
                return plain(StatusCode::NOT_FOUND, "BlobNotFound");
            };
            if sig != Some(rest::run_log_signature(&self.logs_signature, run_id).as_str()) {
                return plain(StatusCode::FORBIDDEN, "AuthenticationFailed");
            }
            return self.run_logs(run_id);
        }
        let job_id = record
            .path
            .strip_prefix("/_logs/jobs/")
            .and_then(|id| id.parse::<u64>().ok());
        let Some(job_id) = job_id else {
            return plain(StatusCode::NOT_FOUND, "BlobNotFound");
        };
        if sig != Some(rest::log_signature(&self.logs_signature, job_id).as_str()) {
            return plain(StatusCode::FORBIDDEN, "AuthenticationFailed");
        }
        let model = lock(&self.model);
        match model.jobs.iter().find(|j| j.id == job_id) {
            Some(job) => plain(StatusCode::OK, &job.logs),
            None => plain(StatusCode::NOT_FOUND, "BlobNotFound"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn git(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        git_path: &git::GitPath,
        user: &str,
        body: Incoming,
        capture: git::BodyCapture,
        refuse_workflows: bool,
        pusher: &str,
    ) -> Response<Body> {
        let Ok((owner, name)) = self.repo_names(&format!("{}/{}", git_path.owner, git_path.name))
        else {
            return plain(StatusCode::NOT_FOUND, "Repository not found.");
        };
        let endpoint = match git_path.endpoint {
            git::GitEndpoint::InfoRefs => "info/refs",
            git::GitEndpoint::UploadPack => "git-upload-pack",
            git::GitEndpoint::ReceivePack => "git-receive-pack",
        };
        let request = git::CgiRequest {
            project_root: &self.root_dir,
            path_info: format!("/{owner}/{name}.git/{endpoint}"),
            method: parts.method.as_str(),
            query: parts.uri.query().unwrap_or(""),
            headers: &parts.headers,
            remote_user: user,
            refuse_workflows,
        };
        let pushed = matches!(git_path.endpoint, git::GitEndpoint::ReceivePack);
        match git::serve(request, body, capture).await {
            // A push's refs are updated by the time its answer has been
            // sent: pull requests on the pushed branches follow then.
            Ok(response) if pushed => {
                let (parts, body) = response.into_parts();
                let state = self.clone();
                let pusher = pusher.to_owned();
                let hook = move || {
                    // Off the connection's task: this runs git.
                    std::thread::spawn(move || state.refresh_pull_heads(&owner, &name, &pusher));
                };
                Response::from_parts(parts, crate::server::on_end(body, hook))
            }
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, "git http-backend failed");
                plain(StatusCode::INTERNAL_SERVER_ERROR, "git http-backend failed")
            }
        }
    }
}

impl Handler for GithubState {
    fn handle(self: Arc<Self>, request: Request<Incoming>) -> HandlerFuture {
        Box::pin(self.dispatch(request))
    }
}

/// A path under `/repos/{owner}/{repo}` in the form GitHub's pagination
/// links use, `/repositories/{id}/…` (as api.github.com answers, e.g.
/// `GET /repos/cli/cli/issues` links `/repositories/212613049/issues?page=2`);
/// any other path as it is. An Enterprise path keeps its `/api/v3`.
fn id_form(model: &model::Model, path: &str) -> String {
    let (prefix, path) = match path.strip_prefix("/api/v3") {
        Some(rest) if rest.starts_with('/') => ("/api/v3", rest),
        _ => ("", path),
    };
    let Some(rest) = path.strip_prefix("/repos/") else {
        return format!("{prefix}{path}");
    };
    let mut segments = rest.splitn(3, '/');
    let (Some(owner), Some(name)) = (segments.next(), segments.next()) else {
        return path.to_owned();
    };
    match model.repo(owner, name) {
        Some(repo) => {
            let tail = segments.next().map_or(String::new(), |t| format!("/{t}"));
            format!("{prefix}/repositories/{}{tail}", repo.id)
        }
        None => format!("{prefix}{path}"),
    }
}

/// The URLs in an answer as a GitHub Enterprise Server at `host` writes
/// them: the API under `https://{host}/api/v3`, the web (and git) under
/// `https://{host}` (the model writes github.com's). Clients follow them:
/// `gh run view` fetches a run's `jobs_url`.
fn enterprise_urls(value: &mut Value, host: &str) {
    match value {
        Value::String(s) => {
            if let Some(rest) = s.strip_prefix(model::API_BASE) {
                *s = format!("https://{host}/api/v3{rest}");
            } else if let Some(rest) = s.strip_prefix("https://github.com") {
                if rest.is_empty() || rest.starts_with('/') {
                    *s = format!("https://{host}{rest}");
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| enterprise_urls(v, host)),
        Value::Object(map) => map.values_mut().for_each(|v| enterprise_urls(v, host)),
        _ => {}
    }
}

/// GitHub's `Link` header for a page of a list, on the host the client
/// asked (api.github.com on GitHub; `localhost:PORT` for gh in Enterprise
/// mode): `prev`, `next`, `last`, `first` where they exist, in GitHub's
/// order ("link: <…/repositories/1300192/issues?page=2>; rel=\"prev\",
/// <…?page=4>; rel=\"next\", <…?page=515>; rel=\"last\", <…?page=1>;
/// rel=\"first\"", GitHub docs, "Using pagination in the REST API").
/// A list of one page has none.
fn link_header(
    host: Option<&str>,
    path: &str,
    query: Option<&str>,
    pages: rest::Pages,
) -> Option<String> {
    let pairs: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("page="))
        .collect();
    let base = host.map_or_else(|| model::API_BASE.to_owned(), |h| format!("https://{h}"));
    let url = |page: usize| {
        let mut query = pairs.join("&");
        if !query.is_empty() {
            query.push('&');
        }
        format!("<{base}{path}?{query}page={page}>")
    };
    let rest::Pages { page, last } = pages;
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("{}; rel=\"prev\"", url((page - 1).min(last))));
    }
    if page < last {
        links.push(format!("{}; rel=\"next\"", url(page + 1)));
        links.push(format!("{}; rel=\"last\"", url(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", url(1)));
    }
    (!links.is_empty()).then(|| links.join(", "))
}

/// GitHub's answer to git without valid credentials.
fn git_unauthorized() -> Response<Body> {
    let mut response = plain(StatusCode::UNAUTHORIZED, "Invalid username or token.");
    response.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Basic realm=\"GitHub\""),
    );
    response
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(full_body(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// What git says about the branches of a pull request proposed in
/// `owner/name` (a `fork:branch` head lives in `fork`'s repository of the
/// same name, as GitHub reads it). Blocking: runs git.
fn branches_of(root: &Path, owner: &str, name: &str, head: &str, base: &str) -> pulls::Branches {
    let proposal = pulls::Proposal::new(owner, head, base);
    let plain = |o: &str| {
        !o.is_empty()
            && o.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let base_dir = root.join(owner).join(format!("{name}.git"));
    let head_owner = if proposal.head_owner.eq_ignore_ascii_case(owner) {
        owner
    } else {
        proposal.head_owner
    };
    if !plain(head_owner) {
        return pulls::Branches {
            base_sha: rev_parse_blocking(&base_dir, base),
            ..pulls::Branches::default()
        };
    }
    let head_dir = root.join(head_owner).join(format!("{name}.git"));
    pulls::read_branches(&head_dir, &base_dir, proposal.head, base)
}

/// The commit `branch` points at in `git_dir`, if the branch exists.
fn rev_parse_blocking(git_dir: &Path, branch: &str) -> Option<String> {
    if branch.starts_with('-') {
        return None;
    }
    // Exactly the ref: `rev-parse` would read a name like `x-g<hex>` as
    // `git describe` output and answer with that commit.
    let output = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["show-ref", "--verify", "--hash"])
        .arg(format!("refs/heads/{branch}"))
        .output()
        .ok()?;
    let sha = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && sha.len() == 40).then_some(sha)
}

/// What of an answer only git can fill.
#[derive(Clone, Copy)]
enum GitFill {
    /// A pull request's diff counts.
    PullStats,
    /// A workflow run's `head_commit`, while it is `null`.
    HeadCommit,
}

/// The objects of an answer (one, a list, or a run listing's
/// `workflow_runs`) that git has to fill in, and what each needs.
fn git_fills(body: &mut Value) -> Vec<(&mut Value, GitFill)> {
    let listing = ["workflow_runs", "check_suites"]
        .into_iter()
        .find(|key| body.get(key).is_some());
    let candidates: Vec<&mut Value> = if let Some(key) = listing {
        body[key]
            .as_array_mut()
            .map(|a| a.iter_mut().collect())
            .unwrap_or_default()
    } else if let Value::Array(items) = body {
        items.iter_mut().collect()
    } else {
        vec![body]
    };
    candidates
        .into_iter()
        .filter_map(|v| {
            let fill = if v.get("additions").is_some() {
                GitFill::PullStats
            } else if (v.get("jobs_url").is_some() || v.get("check_runs_url").is_some())
                && v.get("head_commit").is_some_and(Value::is_null)
            {
                GitFill::HeadCommit
            } else {
                return None;
            };
            Some((v, fill))
        })
        .collect()
}

/// A pull request's diff counts from git, as GitHub counts them: commits
/// `base..head`, lines and files changed from the merge base to the head.
fn fill_pull_stats(git_dir: &Path, pull: &mut Value) {
    let hex = |s: &str| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let (Some(base), Some(head)) = (
        pull["base"]["sha"]
            .as_str()
            .filter(|s| hex(s))
            .map(str::to_owned),
        pull["head"]["sha"]
            .as_str()
            .filter(|s| hex(s))
            .map(str::to_owned),
    ) else {
        return;
    };
    if let Some(n) = rev_list_count_blocking(git_dir, &base, &head) {
        pull["commits"] = json!(n);
    }
    let text =
        |args: &[&str]| contents::git(git_dir, args).and_then(|out| String::from_utf8(out).ok());
    let merge_base = text(&["merge-base", &base, &head])
        .map(|s| s.trim().to_owned())
        .unwrap_or(base);
    let Some(numstat) = text(&["diff", "--numstat", &merge_base, &head]) else {
        return;
    };
    let (mut additions, mut deletions, mut files) = (0u64, 0u64, 0u64);
    for line in numstat.lines() {
        let mut fields = line.split('\t');
        // A binary file shows `-` for both counts: no lines, one file.
        additions += fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        deletions += fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        files += 1;
    }
    pull["additions"] = json!(additions);
    pull["deletions"] = json!(deletions);
    pull["changed_files"] = json!(files);
}

/// A workflow run's `head_commit` (`simple-commit`) from git.
fn fill_head_commit(git_dir: &Path, run: &mut Value) {
    let Some(sha) = run["head_sha"]
        .as_str()
        .filter(|s| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned)
    else {
        return;
    };
    let format = "--format=%H%x00%T%x00%cI%x00%an%x00%ae%x00%cn%x00%ce%x00%B";
    let Some(out) = contents::git(git_dir, &["log", "-1", format, &sha])
        .and_then(|out| String::from_utf8(out).ok())
    else {
        return;
    };
    let fields: Vec<&str> = out.splitn(8, '\0').collect();
    let [id, tree, date, an, ae, cn, ce, message] = fields.as_slice() else {
        return;
    };
    let timestamp = date
        .strip_suffix("+00:00")
        .map_or_else(|| (*date).to_owned(), |d| format!("{d}Z"));
    run["head_commit"] = json!({
        "id": id,
        "tree_id": tree,
        "message": message.trim_end_matches('\n'),
        "timestamp": timestamp,
        "author": {"name": an, "email": ae},
        "committer": {"name": cn, "email": ce},
    });
}

/// The number of commits reachable from `head` but not `base` (two
/// commit ids), as `git rev-list --count base..head` counts them.
fn rev_list_count_blocking(git_dir: &Path, base: &str, head: &str) -> Option<u64> {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(base) || !hex(head) {
        return None;
    }
    let output = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["rev-list", "--count"])
        .arg(format!("{base}..{head}"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    String::from_utf8(output.stdout).ok()?.trim().parse().ok()
}

/// `git init --bare` plus, if the spec has files, one commit on the default
/// branch written with plumbing (no work tree needed).
fn create_bare_repo(root: &Path, spec: &RepoSpec) -> Result<(), GithubError> {
    let full_name = format!("{}/{}", spec.owner, spec.name);
    let fail = |detail: String| GithubError::Repository {
        repo: full_name.clone(),
        detail,
    };
    let git_dir = root.join(&spec.owner).join(format!("{}.git", spec.name));
    std::fs::create_dir_all(&git_dir).map_err(|e| fail(format!("{}: {e}", git_dir.display())))?;
    let index = git_dir.join("gatehouse-seed-index");
    let run = |args: &[&str], input: Option<&str>| -> Result<String, GithubError> {
        use std::io::Write as _;
        let mut command = std::process::Command::new("git");
        command
            .arg("--git-dir")
            .arg(&git_dir)
            .args(args)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "gatehouse emulator")
            .env("GIT_AUTHOR_EMAIL", "emulator@example.invalid")
            .env("GIT_COMMITTER_NAME", "gatehouse emulator")
            .env("GIT_COMMITTER_EMAIL", "emulator@example.invalid")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|e| fail(format!("running git: {e}")))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .map_err(|e| fail(format!("writing to git: {e}")))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| fail(format!("running git: {e}")))?;
        if !output.status.success() {
            return Err(fail(format!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let head = format!("--initial-branch={}", spec.default_branch);
    run(&["init", "--quiet", "--bare", &head], None)?;
    run(&["config", "http.receivepack", "true"], None)?;
    if spec.files.is_empty() {
        return Ok(());
    }
    for (path, content) in &spec.files {
        let blob = run(&["hash-object", "-w", "--stdin"], Some(content))?;
        let cacheinfo = format!("100644,{blob},{path}");
        run(&["update-index", "--add", "--cacheinfo", &cacheinfo], None)?;
    }
    let tree = run(&["write-tree"], None)?;
    let commit = run(&["commit-tree", &tree, "-m", "Initial commit"], None)?;
    let branch = format!("refs/heads/{}", spec.default_branch);
    run(&["update-ref", &branch, &commit], None)?;
    let _ = std::fs::remove_file(&index);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enterprise_answers_name_the_server_not_github_com() {
        let mut body = json!({
            "url": "https://api.github.com/repos/acme/widgets/issues/1",
            "html_url": "https://github.com/acme/widgets/issues/1",
            "nested": [{"jobs_url": "https://api.github.com/repos/acme/widgets/actions/runs/1/jobs"}],
            "clone_url": "https://github.com/acme/widgets.git",
            "text": "see https://github.com/acme/widgets",
            "other": "https://github.community/x",
            "n": 1,
        });
        enterprise_urls(&mut body, "ghes.example:8443");
        assert_eq!(
            body,
            json!({
                "url": "https://ghes.example:8443/api/v3/repos/acme/widgets/issues/1",
                "html_url": "https://ghes.example:8443/acme/widgets/issues/1",
                "nested": [{"jobs_url": "https://ghes.example:8443/api/v3/repos/acme/widgets/actions/runs/1/jobs"}],
                "clone_url": "https://ghes.example:8443/acme/widgets.git",
                "text": "see https://github.com/acme/widgets",
                "other": "https://github.community/x",
                "n": 1,
            })
        );
    }

    #[test]
    fn pagination_links_name_the_repository_by_id_as_github_does() {
        let mut model = model::Model::new();
        let id = model.add_repo("acme", "widgets", "main");
        for (path, expected) in [
            (
                "/repos/acme/widgets/issues",
                format!("/repositories/{id}/issues"),
            ),
            (
                "/repos/ACME/widgets/pulls/1/files",
                format!("/repositories/{id}/pulls/1/files"),
            ),
            ("/repos/acme/widgets", format!("/repositories/{id}")),
            (
                "/repos/acme/other/issues",
                "/repos/acme/other/issues".to_owned(),
            ),
            ("/user/repos", "/user/repos".to_owned()),
            ("/repos/acme", "/repos/acme".to_owned()),
            // Enterprise paths keep their prefix.
            (
                "/api/v3/repos/acme/widgets/issues",
                format!("/api/v3/repositories/{id}/issues"),
            ),
            ("/api/v3/user", "/api/v3/user".to_owned()),
            (
                "/api/v3x/repos/acme/widgets",
                "/api/v3x/repos/acme/widgets".to_owned(),
            ),
        ] {
            assert_eq!(id_form(&model, path), expected, "{path}");
        }
    }

    #[test]
    fn link_headers_name_prev_next_last_and_first_as_github_does() {
        let at = |page, last| rest::Pages { page, last };
        let u = |p: usize| {
            format!("<https://api.github.com/repositories/7/issues?per_page=2&page={p}>")
        };
        for (pages, expected) in [
            (at(1, 1), None),
            (
                at(1, 3),
                Some(format!("{}; rel=\"next\", {}; rel=\"last\"", u(2), u(3))),
            ),
            (
                at(2, 3),
                Some(format!(
                    "{}; rel=\"prev\", {}; rel=\"next\", {}; rel=\"last\", {}; rel=\"first\"",
                    u(1),
                    u(3),
                    u(3),
                    u(1)
                )),
            ),
            (
                at(3, 3),
                Some(format!("{}; rel=\"prev\", {}; rel=\"first\"", u(2), u(1))),
            ),
            // Past the end: back to the last page, and the first.
            (
                at(9, 3),
                Some(format!("{}; rel=\"prev\", {}; rel=\"first\"", u(3), u(1))),
            ),
        ] {
            assert_eq!(
                link_header(
                    Some("api.github.com"),
                    "/repositories/7/issues",
                    Some("per_page=2&page=5"),
                    pages
                ),
                expected,
                "{pages:?}"
            );
        }
        // No query of its own: `page` alone; no host: api.github.com.
        assert_eq!(
            link_header(None, "/x", None, at(1, 2)).unwrap(),
            "<https://api.github.com/x?page=2>; rel=\"next\", <https://api.github.com/x?page=2>; rel=\"last\""
        );
    }

    #[test]
    fn classifies_by_host_then_path() {
        let git = |path| Target::Git(git::git_path(path).unwrap());
        let logs = "pipelines.actions.githubusercontent.com";
        for (host, path, expected) in [
            (Some("api.github.com"), "/repos/o/r", Target::Rest),
            (Some("api.github.com"), "/o/r.git/info/refs", Target::Rest),
            (Some("api.github.com"), "/_logs/jobs/1", Target::Rest),
            (
                Some("github.com"),
                "/o/r.git/info/refs",
                git("/o/r.git/info/refs"),
            ),
            (Some("github.com"), "/repos/o/r", Target::NotFound),
            (
                Some("127.0.0.1"),
                "/o/r.git/git-receive-pack",
                git("/o/r.git/git-receive-pack"),
            ),
            (Some("127.0.0.1"), "/repos/o/r/issues", Target::Rest),
            (Some("::1"), "/repos/o/r/issues", Target::Rest),
            (Some("localhost"), "/_logs/jobs/1", Target::JobLogs),
            (None, "/_logs/jobs/1", Target::JobLogs),
            (Some(logs), "/_logs/jobs/1", Target::JobLogs),
            (Some(logs), "/repos/o/r", Target::NotFound),
            (Some("open.feishu.cn"), "/user", Target::NotFound),
        ] {
            assert_eq!(classify(host, path, logs), expected, "{host:?} {path}");
        }
    }

    #[test]
    fn url_host_strips_scheme_port_and_path() {
        assert_eq!(url_host("https://Logs.Example:8443/x"), "logs.example");
        assert_eq!(url_host("https://[::1]:1/"), "::1");
        assert_eq!(url_host("logs.example"), "logs.example");
    }

    #[test]
    fn parses_authorization_schemes() {
        use base64::Engine as _;
        let basic = base64::engine::general_purpose::STANDARD.encode("x-access-token:t1");
        for (header, expected) in [
            ("token t1", Some(Credential::Token("t1".into()))),
            ("Bearer t1", Some(Credential::Token("t1".into()))),
            ("bearer  t1 ", Some(Credential::Token("t1".into()))),
            (
                &*format!("Basic {basic}"),
                Some(Credential::Basic {
                    user: "x-access-token".into(),
                    password: "t1".into(),
                }),
            ),
            ("Basic !!!", None),
            ("Bearer", None),
            ("Digest x", None),
            ("", None),
        ] {
            assert_eq!(parse_authorization(header), expected, "{header}");
        }
    }
}
