//! A GitHub App installed on the emulator: App JWT verification, minting of
//! installation tokens (`POST /app/installations/{id}/access_tokens`) and
//! what each minted token may reach.
//!
//! From GitHub's REST description (`github/rest-api-description`,
//! `apps/create-installation-access-token`): "You must use a JWT to access
//! this endpoint"; "Installation tokens expire one hour from the time you
//! create them. Using an expired token produces a status code of
//! `401 - Unauthorized`"; the body takes `repositories` (names),
//! `repository_ids` and `permissions`; "When you omit `repository_ids`, the
//! response does not contain the `repositories` key"; 201 on success, 422
//! when the request cannot be granted.
//!
//! Tokens given in [`super::GithubOptions::token`] stay unrestricted (like a
//! personal token); only minted tokens are scoped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use base64::Engine as _;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::git::GitEndpoint;
use super::model::Model;
use super::rest::{Reply, Route};
use crate::record::lock;
use crate::time::iso8601;
use crate::util::random_hex;

/// How long a minted token lives unless a test says otherwise (GitHub: one hour).
const TOKEN_LIFETIME_SECS: u64 = 3600;
/// The longest an App JWT may live, `exp - iat` (GitHub: "no more than 10
/// minutes into the future").
const JWT_MAX_LIFETIME_SECS: u64 = 600;
/// Clock skew accepted between the App's clock and ours. GitHub's docs
/// advise setting `iat` 60 seconds in the past "to protect against clock
/// drift"; a client whose clock runs this much ahead is still accepted.
const CLOCK_SKEW_SECS: u64 = 60;

const DOCS_JWT: &str =
    "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app";

/// A GitHub App and its one installation.
#[derive(Clone)]
pub struct GithubAppSpec {
    /// The App's id, the JWT's `iss`.
    pub app_id: u64,
    /// Minted tokens act as `{slug}[bot]`.
    pub slug: String,
    /// The App's public key, PKCS#1 `RSAPublicKey` DER (see [`rsa_public_key_der`]).
    pub public_key_der: Vec<u8>,
    pub installation_id: u64,
    /// What the installation was granted, e.g. `issues = "write"`.
    pub permissions: BTreeMap<String, String>,
    /// The repositories (`owner/name`) it was installed on; `None`: all.
    pub repositories: Option<Vec<String>>,
}

impl std::fmt::Debug for GithubAppSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubAppSpec")
            .field("app_id", &self.app_id)
            .field("installation_id", &self.installation_id)
            .field("permissions", &self.permissions)
            .field("repositories", &self.repositories)
            .finish_non_exhaustive()
    }
}

/// The public half of an RSA private key in PEM (PKCS#1 or PKCS#8), as
/// [`GithubAppSpec::public_key_der`] wants it; `None` if it is not one.
pub fn rsa_public_key_der(private_key_pem: &str) -> Option<Vec<u8>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::PrivateKeyDer;
    let pair = match PrivateKeyDer::from_pem_slice(private_key_pem.as_bytes()).ok()? {
        PrivateKeyDer::Pkcs1(der) => {
            ring::signature::RsaKeyPair::from_der(der.secret_pkcs1_der()).ok()?
        }
        PrivateKeyDer::Pkcs8(der) => {
            ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).ok()?
        }
        _ => return None,
    };
    use ring::signature::KeyPair as _;
    Some(pair.public_key().as_ref().to_vec())
}

/// A minted token as a test sees it (the value itself is not shown).
#[derive(Clone, PartialEq, Eq)]
pub struct MintedToken {
    pub token: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// `owner/name` of each repository it reaches; `None`: all the installation's.
    pub repositories: Option<Vec<String>>,
    pub permissions: BTreeMap<String, String>,
}

impl std::fmt::Debug for MintedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MintedToken")
            .field("expires_at", &self.expires_at)
            .field("repositories", &self.repositories)
            .field("permissions", &self.permissions)
            .finish_non_exhaustive()
    }
}

/// What one minted token may reach: repository ids and permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope {
    /// `None`: every repository.
    pub repo_ids: Option<Vec<u64>>,
    pub permissions: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct Minted {
    public: MintedToken,
    scope: Scope,
}

/// The App, if one is configured, and the tokens minted for it.
pub(crate) struct Apps {
    spec: Option<GithubAppSpec>,
    login: String,
    minted: Mutex<Vec<Minted>>,
    lifetime: AtomicU64,
}

impl Apps {
    pub(crate) fn new(spec: Option<GithubAppSpec>) -> Self {
        let login = spec
            .as_ref()
            .map_or_else(String::new, |s| format!("{}[bot]", s.slug));
        Self {
            spec,
            login,
            minted: Mutex::new(Vec::new()),
            lifetime: AtomicU64::new(TOKEN_LIFETIME_SECS),
        }
    }

    /// The login a live minted `token` acts as; `None` if it is not one or
    /// has expired.
    pub(crate) fn login_for(&self, token: &str, now: u64) -> Option<&str> {
        lock(&self.minted)
            .iter()
            .any(|m| m.public.token == token && now < m.public.expires_at)
            .then_some(self.login.as_str())
    }

    /// The installation's id, when an App is installed.
    pub(crate) fn installation_id(&self) -> Option<u64> {
        self.spec.as_ref().map(|s| s.installation_id)
    }

    /// Whether `token` was minted here (an installation token).
    pub(crate) fn is_minted(&self, token: &str) -> bool {
        lock(&self.minted).iter().any(|m| m.public.token == token)
    }

    /// The scope of minted `token` (`None`: not a minted token).
    pub(crate) fn scope_of(&self, token: &str) -> Option<Scope> {
        lock(&self.minted)
            .iter()
            .find(|m| m.public.token == token)
            .map(|m| m.scope.clone())
    }

    pub(crate) fn minted(&self) -> Vec<MintedToken> {
        lock(&self.minted)
            .iter()
            .map(|m| m.public.clone())
            .collect()
    }

    pub(crate) fn set_lifetime(&self, secs: u64) {
        self.lifetime.store(secs, Ordering::SeqCst);
    }

    pub(crate) fn expire_all(&self, now: u64) {
        for m in lock(&self.minted).iter_mut() {
            m.public.expires_at = m.public.expires_at.min(now);
        }
    }

    /// Serves `/app/…` (the App's own endpoints, JWT-authenticated);
    /// `None` for any other path.
    pub(crate) fn serve(
        &self,
        model: &Model,
        method: &Method,
        path: &str,
        bearer: Option<&str>,
        body: &[u8],
        now: u64,
    ) -> Option<Reply> {
        // `/api/v3` was taken off by the caller, in Enterprise mode only.
        let rest = path.strip_prefix("/app")?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let spec = match self.verify(bearer, now) {
            Ok(spec) => spec,
            Err(reply) => return Some(reply),
        };
        let segments: Vec<&str> = rest.split('/').skip(1).collect();
        Some(match (method, segments.as_slice()) {
            (&Method::POST, ["installations", id, "access_tokens"]) => {
                if id.parse::<u64>().ok() != Some(spec.installation_id) {
                    return Some(Reply::error(StatusCode::NOT_FOUND, "Not Found"));
                }
                match mint_request(model, spec, body) {
                    Ok((repos, permissions)) => self.mint(model, repos, permissions, now),
                    Err(reply) => reply,
                }
            }
            _ => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
        })
    }

    /// The App, if `bearer` is its valid JWT; else GitHub's answer.
    fn verify(&self, bearer: Option<&str>, now: u64) -> Result<&GithubAppSpec, Reply> {
        let Some(spec) = &self.spec else {
            return Err(Reply::error(StatusCode::NOT_FOUND, "Not Found"));
        };
        verify_jwt(spec, bearer, now).map_err(|message| jwt_refused(&message))?;
        Ok(spec)
    }

    fn mint(
        &self,
        model: &Model,
        repo_ids: Option<Vec<u64>>,
        permissions: BTreeMap<String, String>,
        now: u64,
    ) -> Reply {
        let token = format!("ghs_{}", &random_hex(18));
        let expires_at = now + self.lifetime.load(Ordering::SeqCst);
        let repos: Option<Vec<&super::model::Repo>> = repo_ids
            .as_ref()
            .map(|ids| ids.iter().filter_map(|id| model.repo_by_id(*id)).collect());
        let mut body = json!({
            "token": token,
            "expires_at": iso8601(expires_at),
            "permissions": permissions,
            "repository_selection": if repos.is_some() { "selected" } else { "all" },
        });
        if let Some(repos) = &repos {
            body["repositories"] = repos.iter().map(|r| Model::repo_json(r)).collect();
        }
        let public = MintedToken {
            token,
            expires_at,
            repositories: repos.map(|rs| rs.iter().map(|r| r.full_name()).collect()),
            permissions: permissions.clone(),
        };
        lock(&self.minted).push(Minted {
            public,
            scope: Scope {
                repo_ids,
                permissions,
            },
        });
        Reply {
            status: StatusCode::CREATED,
            body,
            created_id: None,
            location: None,
            pages: None,
            media: None,
        }
    }
}

fn jwt_refused(message: &str) -> Reply {
    let mut reply = Reply::error(StatusCode::UNAUTHORIZED, message);
    reply.body["documentation_url"] = json!(DOCS_JWT);
    reply
}

/// Checks an App JWT: RS256 under the App's key, `iss` the App's id, `iat`
/// not in the future, `exp` not past and at most 10 minutes after `iat`.
/// The error is GitHub's message.
pub(crate) fn verify_jwt(
    spec: &GithubAppSpec,
    bearer: Option<&str>,
    now: u64,
) -> Result<(), String> {
    const UNDECODABLE: &str = "A JSON web token could not be decoded";
    let jwt = bearer.ok_or_else(|| UNDECODABLE.to_owned())?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [_, _, signature] = parts.as_slice() else {
        return Err(UNDECODABLE.to_owned());
    };
    let decode = |part: &str| -> Result<Value, String> {
        let bytes = b64.decode(part).map_err(|_| UNDECODABLE.to_owned())?;
        serde_json::from_slice(&bytes).map_err(|_| UNDECODABLE.to_owned())
    };
    let (header, claims) = (decode(parts[0])?, decode(parts[1])?);
    let signed = format!("{}.{}", parts[0], parts[1]);
    if header.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err(UNDECODABLE.to_owned());
    }
    let signature = b64.decode(signature).map_err(|_| UNDECODABLE.to_owned())?;
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        &spec.public_key_der,
    )
    .verify(signed.as_bytes(), &signature)
    .map_err(|_| "'Authorization' header is invalid: the JWT's signature does not verify with the App's public key".to_owned())?;
    // `iss` may be the App id as a number or a string.
    let iss = match claims.get("iss") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    if iss != Some(spec.app_id) {
        return Err("'Issuer' claim ('iss') must be an Integer".to_owned());
    }
    let iat = claims.get("iat").and_then(Value::as_u64);
    let Some(iat) = iat.filter(|iat| *iat <= now + CLOCK_SKEW_SECS) else {
        return Err(
            "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
                .to_owned(),
        );
    };
    let exp = claims.get("exp").and_then(Value::as_u64);
    let Some(exp) = exp.filter(|exp| *exp > now) else {
        return Err("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires".to_owned());
    };
    if exp.saturating_sub(iat) > JWT_MAX_LIFETIME_SECS
        || exp > now + JWT_MAX_LIFETIME_SECS + CLOCK_SKEW_SECS
    {
        return Err("'Expiration time' claim ('exp') is too far in the future".to_owned());
    }
    Ok(())
}

/// What a mint request asks for: repository ids (`None`: all the
/// installation's) and permissions.
type Asked = (Option<Vec<u64>>, BTreeMap<String, String>);

/// The repositories and permissions a mint request asks for, or GitHub's
/// 422.
fn mint_request(model: &Model, spec: &GithubAppSpec, body: &[u8]) -> Result<Asked, Reply> {
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|_| Reply::error(StatusCode::BAD_REQUEST, "Problems parsing JSON"))?
    };
    let installed: Vec<u64> = model
        .repos
        .iter()
        .filter(|r| {
            spec.repositories
                .as_ref()
                .is_none_or(|names| names.iter().any(|n| n.eq_ignore_ascii_case(&r.full_name())))
        })
        .map(|r| r.id)
        .collect();
    let inaccessible = || {
        Reply::error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "There is at least one repository that does not exist or is not accessible to the parent installation.",
        )
    };
    let mut ids: Option<Vec<u64>> = None;
    if let Some(names) = body.get("repositories") {
        let names = names.as_array().ok_or_else(inaccessible)?;
        for name in names {
            let name = name.as_str().ok_or_else(inaccessible)?;
            // Names without the owner; the installation's repositories.
            let id = installed
                .iter()
                .copied()
                .find(|id| {
                    model
                        .repo_by_id(*id)
                        .is_some_and(|r| r.name.eq_ignore_ascii_case(name))
                })
                .ok_or_else(inaccessible)?;
            ids.get_or_insert_with(Vec::new).push(id);
        }
    }
    if let Some(list) = body.get("repository_ids") {
        let list = list.as_array().ok_or_else(inaccessible)?;
        for id in list {
            let id = id
                .as_u64()
                .filter(|id| installed.contains(id))
                .ok_or_else(inaccessible)?;
            ids.get_or_insert_with(Vec::new).push(id);
        }
    }
    if let Some(ids) = ids.as_mut() {
        ids.sort_unstable();
        ids.dedup();
    }
    let permissions = match body.get("permissions") {
        None => spec.permissions.clone(),
        Some(asked) => granted(&spec.permissions, asked).ok_or_else(|| {
            Reply::error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "The permissions requested are not granted to this installation.",
            )
        })?,
    };
    Ok((ids, permissions))
}

/// `asked` if every permission in it is within `grant`.
fn granted(grant: &BTreeMap<String, String>, asked: &Value) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, level) in asked.as_object()? {
        let level = level.as_str()?;
        let held = grant.get(name)?;
        if rank(level)? > rank(held)? {
            return None;
        }
        out.insert(name.clone(), level.to_owned());
    }
    Some(out)
}

fn rank(level: &str) -> Option<u8> {
    match level {
        "read" => Some(1),
        "write" => Some(2),
        "admin" => Some(3),
        _ => None,
    }
}

/// What a route needs of an installation token.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Need<'a> {
    /// Not for installation tokens at all (e.g. `GET /user`).
    NotForInstallations,
    /// One of these permissions at `level`, on this repository.
    Repo {
        owner: &'a str,
        name: &'a str,
        any_of: &'static [&'static str],
        level: &'static str,
    },
    /// Nothing in particular (`/rate_limit`, GraphQL: checked by its executor).
    Nothing,
}

fn need<'a>(route: &'a Route, method: &Method) -> Need<'a> {
    let level = if method == Method::GET || method == Method::HEAD {
        "read"
    } else {
        "write"
    };
    let on = |repo: &'a super::rest::RepoPath, any_of: &'static [&'static str], level| Need::Repo {
        owner: &repo.owner,
        name: &repo.name,
        any_of,
        level,
    };
    // Issue endpoints serve pull requests too; GitHub accepts either
    // permission for them.
    const ISSUES: &[&str] = &["issues", "pull_requests"];
    match route {
        Route::User => Need::NotForInstallations,
        Route::Root | Route::RateLimit | Route::Graphql => Need::Nothing,
        Route::Repo(r) => on(r, &["metadata"], "read"),
        Route::Issues(r)
        | Route::Issue(r, _)
        | Route::IssueComments(r, _)
        | Route::RepoIssueComments(r)
        | Route::IssueComment(r, _)
        | Route::IssueLabels(r, _)
        | Route::IssueEvents(r, _)
        | Route::IssueTimeline(r, _) => on(r, ISSUES, level),
        Route::Labels(r) => on(r, &["metadata"], "read"),
        // Merging writes the base branch: `contents: write`.
        Route::PullMerge(r, _) if level == "write" => on(r, &["contents"], "write"),
        Route::Pulls(r)
        | Route::Pull(r, _)
        | Route::PullComments(r, _)
        | Route::RepoPullComments(r)
        | Route::PullCommentReplies(r, _, _)
        | Route::PullReviews(r, _)
        | Route::PullRequestedReviewers(r, _)
        | Route::PullMerge(r, _) => on(r, &["pull_requests"], level),
        Route::CommitCheckRuns(r, _) => on(r, &["checks"], level),
        Route::Readme(r)
        | Route::Contents(r, _)
        | Route::Branches(r)
        | Route::Branch(r, _)
        | Route::Commits(r)
        | Route::Commit(r, _)
        | Route::Compare(r, _) => on(r, &["contents"], level),
        Route::GitObject(r, _, _) => on(r, &["contents"], level),
        Route::PullFiles(r, _)
        | Route::PullCommits(r, _)
        | Route::RepoPullComment(r, _)
        | Route::PullReview(r, _, _)
        | Route::PullReviewComments(r, _, _) => on(r, &["pull_requests"], level),
        Route::CheckRun(r, _)
        | Route::CheckRunAnnotations(r, _)
        | Route::CheckSuite(r, _)
        | Route::CheckSuiteRuns(r, _)
        | Route::CommitCheckSuites(r, _) => on(r, &["checks"], level),
        Route::Workflows(r)
        | Route::Workflow(r, _)
        | Route::WorkflowRuns(r, _)
        | Route::ActionsRunLogs(r, _) => on(r, &["actions"], level),
        Route::ActionsRunAttemptJobs(r, _, _) => on(r, &["actions"], level),
        Route::ActionsRuns(r)
        | Route::ActionsRun(r, _)
        | Route::ActionsRunJobs(r, _)
        | Route::ActionsRunArtifacts(r, _)
        | Route::ActionsJob(r, _)
        | Route::ActionsJobLogs(r, _) => on(r, &["actions"], level),
    }
}

/// Why a scoped token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Outside its repositories: GitHub answers as if it did not exist.
    NotFound,
    /// A permission it does not have.
    NotAccessible,
}

impl Refusal {
    pub(crate) fn reply(self) -> Reply {
        match self {
            Refusal::NotFound => Reply::error(StatusCode::NOT_FOUND, "Not Found"),
            Refusal::NotAccessible => Reply::error(
                StatusCode::FORBIDDEN,
                "Resource not accessible by integration",
            ),
        }
    }
}

/// Whether `scope` reaches `owner/name` (metadata: any permission lets a
/// token see the repositories it was given).
fn reaches(model: &Model, scope: &Scope, owner: &str, name: &str) -> bool {
    let Some(repo) = model.repo(owner, name) else {
        // Nothing there: the handler's own 404.
        return true;
    };
    scope
        .repo_ids
        .as_ref()
        .is_none_or(|ids| ids.contains(&repo.id))
}

pub(crate) fn holds(scope: &Scope, any_of: &[&str], level: &str) -> bool {
    any_of.iter().any(|p| {
        *p == "metadata"
            || scope
                .permissions
                .get(*p)
                .and_then(|held| rank(held))
                .zip(rank(level))
                .is_some_and(|(held, need)| held >= need)
    })
}

/// Whether a minted token with `scope` may make this REST call.
pub(crate) fn authorize(
    model: &Model,
    scope: &Scope,
    method: &Method,
    route: &Route,
) -> Result<(), Refusal> {
    match need(route, method) {
        Need::Nothing => Ok(()),
        Need::NotForInstallations => Err(Refusal::NotAccessible),
        Need::Repo {
            owner,
            name,
            any_of,
            level,
        } => {
            if !reaches(model, scope, owner, name) {
                return Err(Refusal::NotFound);
            }
            if !holds(scope, any_of, level) {
                return Err(Refusal::NotAccessible);
            }
            Ok(())
        }
    }
}

/// Whether a minted token with `scope` may use git on `owner/name`:
/// fetching needs `contents: read`, pushing (and its ref advertisement)
/// `contents: write`.
pub(crate) fn authorize_git(
    model: &Model,
    scope: &Scope,
    owner: &str,
    name: &str,
    endpoint: GitEndpoint,
    query: &str,
) -> Result<(), Refusal> {
    if !reaches(model, scope, owner, name) {
        return Err(Refusal::NotFound);
    }
    let push = endpoint == GitEndpoint::ReceivePack
        || (endpoint == GitEndpoint::InfoRefs && query.contains("service=git-receive-pack"));
    let level = if push { "write" } else { "read" };
    if !holds(scope, &["contents"], level) {
        return Err(Refusal::NotAccessible);
    }
    Ok(())
}

// === impl GithubState, GithubHandle: the App ===

impl super::GithubState {
    /// The App's own endpoints (`/app/…`, the App JWT checked): the reply
    /// and a `Link` header for a list with more pages; `None` for any
    /// other path.
    pub(super) fn app_endpoint(
        &self,
        parts: &http::request::Parts,
        credential: Option<&super::Credential>,
        body: &[u8],
    ) -> Option<(Reply, Option<String>)> {
        let bearer = match credential {
            Some(super::Credential::Token(token)) => Some(token.as_str()),
            _ => None,
        };
        let now = crate::time::unix_now();
        let path = parts.uri.path();
        let path = match path.strip_prefix("/api/v3") {
            Some(tail) if self.enterprise => tail,
            _ => path,
        };
        if let Some(hook) = path.strip_prefix("/app/hook/") {
            let spec = match self.apps.verify(bearer, now) {
                Ok(spec) => spec,
                Err(reply) => return Some((reply, None)),
            };
            let segments: Vec<&str> = hook.split('/').collect();
            let query = crate::util::parse_query(parts.uri.query().unwrap_or(""));
            let host = parts
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok());
            let base = host.map_or_else(
                || super::model::API_BASE.to_owned(),
                |h| format!("https://{h}"),
            );
            return Some(super::deliveries::serve(
                &self.webhooks,
                spec.installation_id,
                &parts.method,
                &segments,
                &query,
                &base,
            ));
        }
        let model = lock(&self.model);
        self.apps
            .serve(&model, &parts.method, path, bearer, body, now)
            .map(|reply| (reply, None))
    }

    /// The answer refusing a minted token's git request outside its scope
    /// (GitHub's texts), or `None` to serve it.
    pub(super) fn git_scope(
        &self,
        parts: &http::request::Parts,
        git_path: &super::git::GitPath,
        credential: Option<&super::Credential>,
    ) -> Option<http::Response<crate::server::Body>> {
        let Some(super::Credential::Basic { password, .. }) = credential else {
            return None;
        };
        let scope = self.apps.scope_of(password)?;
        let refused = authorize_git(
            &lock(&self.model),
            &scope,
            &git_path.owner,
            &git_path.name,
            git_path.endpoint,
            parts.uri.query().unwrap_or(""),
        )
        .err()?;
        Some(match refused {
            Refusal::NotFound => super::plain(StatusCode::NOT_FOUND, "Repository not found."),
            Refusal::NotAccessible => super::plain(
                StatusCode::FORBIDDEN,
                &format!(
                    "Permission to {}/{}.git denied to {}.",
                    git_path.owner, git_path.name, self.apps.login
                ),
            ),
        })
    }
}

impl super::GithubHandle {
    /// Every installation token minted so far, in order.
    pub fn minted_tokens(&self) -> Vec<MintedToken> {
        self.state.apps.minted()
    }

    /// Tokens minted from now on expire after `secs` (GitHub: 3600).
    pub fn set_installation_token_lifetime(&self, secs: u64) {
        self.state.apps.set_lifetime(secs);
    }

    /// Every token minted so far expires now: each is answered 401 from
    /// now on, as GitHub answers an expired one.
    pub fn expire_installation_tokens(&self) {
        self.state.apps.expire_all(crate::time::unix_now());
    }
}

#[cfg(test)]
mod tests;
