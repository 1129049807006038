//! The credentials the proxy injects. Secrets are read from files, held in
//! `secrecy` types and only exposed to build one `Authorization` header
//! (marked sensitive) for an allowed request.
//!
//! This file is the registry: the configured credentials by name, the
//! secrets held (for redaction) and the header each injection builds. Each
//! kind obtains its token in its own module:
//!
//! ```text
//! Credentials::authorization(name, injection, repo, permissions)
//!   ─► static_token   a GitHub token or bearer key, read once
//!   ─► feishu_app     tenant_access_token, fetched and refreshed
//!   ─► github_app     installation tokens minted per repository and
//!                     permissions, cached until shortly before they expire
//!   ─► Bearer … / Basic base64(x-access-token:…)
//! ```

mod feishu_app;
mod github_app;
mod held;
mod static_token;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::BodyExt;
use secrecy::{ExposeSecret, SecretString};

use crate::body;
use crate::redact::Secrets;
use crate::server::policy::Injection;
use crate::upstream::{UpstreamClient, Upstreams};
use feishu_app::FeishuApp;
use github_app::GithubApp;
use held::HeldSecrets;
use static_token::StaticToken;

/// Refresh cached tokens this long before they expire.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// Errors reading or obtaining a credential. None of them contains a secret.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A secret file could not be read.
    #[error("credential {name}: reading {path}")]
    Read {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A secret file is empty.
    #[error("credential {name}: {path} is empty")]
    Empty { name: String, path: PathBuf },
    /// A rule names a credential that is not configured.
    #[error("no credential named {0:?} is configured")]
    Unknown(String),
    /// The private key of a GitHub App is not an RSA key ring accepts.
    #[error("credential {name}: the GitHub App private key in {path} is not a usable RSA key (PKCS#1 or PKCS#8 PEM)")]
    BadKey { name: String, path: PathBuf },
    /// Minting or fetching a token failed.
    #[error("credential {name}: obtaining a token from {url}: {why}")]
    Fetch {
        name: String,
        url: String,
        why: String,
    },
    /// The platform refused to issue the token asked for (GitHub answers
    /// 422 when the permissions exceed what the App was granted); its
    /// message, which holds no secret, is said.
    #[error("credential {name}: {url} refused: status {status}: {message}")]
    Refused {
        name: String,
        url: String,
        status: u16,
        message: String,
    },
    /// The identity has no `repo` variable but the App token must be scoped to one.
    #[error("credential {name}: a GitHub App token is scoped to the identity's `repo` variable, which is missing or not owner/name")]
    NoRepo { name: String },
}

/// How a credential is configured (file paths, never secrets).
#[derive(Clone, Debug)]
pub enum CredentialSpec {
    GithubToken {
        token_file: PathBuf,
    },
    Bearer {
        key_file: PathBuf,
    },
    FeishuApp {
        app_id: String,
        app_secret_file: PathBuf,
        base_url: String,
    },
    GithubApp {
        app_id: String,
        private_key_file: PathBuf,
        installation_id: u64,
        api_url: String,
    },
}

/// A token the proxy obtained, when to obtain a new one, and when it stops
/// working (`None`: the platform did not say).
struct CachedToken {
    token: SecretString,
    refresh_at: Instant,
    expires_at: Option<Instant>,
}

impl CachedToken {
    fn fresh(&self) -> bool {
        Instant::now() < self.refresh_at
    }
}

/// A loaded credential, by kind.
enum Loaded {
    Static(StaticToken),
    FeishuApp(FeishuApp),
    GithubApp(GithubApp),
}

/// All configured credentials.
pub struct Credentials {
    by_name: HashMap<String, Loaded>,
    endpoint: TokenEndpoint,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.by_name.keys().collect();
        names.sort();
        f.debug_struct("Credentials")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

fn read_secret(name: &str, path: &Path) -> Result<SecretString, CredentialError> {
    let text = std::fs::read_to_string(path).map_err(|source| CredentialError::Read {
        name: name.to_string(),
        path: path.to_path_buf(),
        source,
    })?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(CredentialError::Empty {
            name: name.to_string(),
            path: path.to_path_buf(),
        });
    }
    Ok(SecretString::from(trimmed.to_string()))
}

impl Credentials {
    /// Reads every credential's secret files.
    pub fn load(
        specs: &BTreeMap<String, CredentialSpec>,
        upstreams: &Upstreams,
    ) -> Result<Self, CredentialError> {
        let mut by_name = HashMap::new();
        let mut held = Vec::new();
        for (name, spec) in specs {
            let credential = match spec {
                CredentialSpec::GithubToken { token_file: file }
                | CredentialSpec::Bearer { key_file: file } => {
                    let token = StaticToken::load(name, file)?;
                    held.push(token.secret().expose_secret().as_bytes().to_vec());
                    Loaded::Static(token)
                }
                CredentialSpec::FeishuApp {
                    app_id,
                    app_secret_file,
                    base_url,
                } => {
                    let app = FeishuApp::load(name, app_id, app_secret_file, base_url)?;
                    held.push(app.secret().expose_secret().as_bytes().to_vec());
                    Loaded::FeishuApp(app)
                }
                CredentialSpec::GithubApp {
                    app_id,
                    private_key_file,
                    installation_id,
                    api_url,
                } => Loaded::GithubApp(GithubApp::load(
                    name,
                    app_id,
                    private_key_file,
                    *installation_id,
                    api_url,
                )?),
            };
            by_name.insert(name.clone(), credential);
        }
        Ok(Self {
            by_name,
            endpoint: TokenEndpoint {
                client: upstreams.client(),
                held: HeldSecrets::permanent(held),
            },
        })
    }

    /// Every secret the proxy holds right now, in every form it sends them
    /// (for redaction); fetched tokens leave once they have expired.
    pub fn held_secrets(&self) -> Arc<Secrets> {
        self.endpoint.held.current(Instant::now())
    }

    /// The `Authorization` header value for an allowed request.
    pub async fn authorization(
        &self,
        name: &str,
        inject: Injection,
        repo: Option<&str>,
        permissions: &BTreeMap<String, String>,
    ) -> Result<HeaderValue, CredentialError> {
        if let Some(Loaded::Static(token)) = self.by_name.get(name) {
            // Built once at load: the same value for every request.
            if let Some(value) = token.authorization(inject) {
                return Ok(value.clone());
            }
        }
        let token = match inject {
            Injection::GithubAppJwt => self.app_jwt(name)?,
            _ => self.token(name, repo, permissions).await?,
        };
        header_value(inject, &token).ok_or_else(|| CredentialError::Fetch {
            name: name.to_string(),
            url: String::new(),
            why: "token contains characters not allowed in a header".into(),
        })
    }

    /// The platform refused `authorization` (a value [`Self::authorization`]
    /// built) before its expiry: the cached token it carries is forgotten,
    /// so the next request obtains a new one. Only Feishu tenant tokens are
    /// fetched and refreshable this way; for the others nothing changes.
    /// Whether a token was forgotten.
    pub async fn token_refused(&self, name: &str, authorization: &HeaderValue) -> bool {
        let Some(Loaded::FeishuApp(app)) = self.by_name.get(name) else {
            return false;
        };
        let used = authorization
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "));
        match used {
            Some(used) => app.forget(used).await,
            None => false,
        }
    }

    /// The platform answered 401 to a request made with `authorization`
    /// (credential `name`): a fetched token it no longer accepts (revoked or
    /// expired early) is forgotten, so the next request obtains a new one.
    pub async fn rejected(&self, name: &str, authorization: &HeaderValue) {
        if let Some(Loaded::GithubApp(app)) = self.by_name.get(name) {
            app.forget(authorization).await;
        }
    }

    /// A freshly signed App JWT of GitHub App credential `name`, held for
    /// redaction while it is valid.
    fn app_jwt(&self, name: &str) -> Result<SecretString, CredentialError> {
        match self.by_name.get(name) {
            Some(Loaded::GithubApp(app)) => {
                let (jwt, expires_at) = app.jwt(name)?;
                self.endpoint
                    .held
                    .remember(jwt.expose_secret().as_bytes(), Some(expires_at));
                Ok(jwt)
            }
            Some(_) => Err(CredentialError::Fetch {
                name: name.to_string(),
                url: String::new(),
                why: "only a github_app credential signs App JWTs".into(),
            }),
            None => Err(CredentialError::Unknown(name.to_string())),
        }
    }

    async fn token(
        &self,
        name: &str,
        repo: Option<&str>,
        permissions: &BTreeMap<String, String>,
    ) -> Result<SecretString, CredentialError> {
        match self.by_name.get(name) {
            None => Err(CredentialError::Unknown(name.to_string())),
            Some(Loaded::Static(token)) => Ok(token.secret().clone()),
            Some(Loaded::FeishuApp(app)) => app.token(name, &self.endpoint).await,
            Some(Loaded::GithubApp(app)) => {
                app.token(name, repo, permissions, &self.endpoint).await
            }
        }
    }
}

/// The `Authorization` value that carries `token` as `inject` says, marked
/// sensitive; `None` when the token cannot be a header value.
fn header_value(inject: Injection, token: &SecretString) -> Option<HeaderValue> {
    let text = match inject {
        Injection::Bearer | Injection::FeishuTenant | Injection::GithubAppJwt => {
            format!("Bearer {}", token.expose_secret())
        }
        Injection::GitBasic => {
            let basic = base64::engine::general_purpose::STANDARD
                .encode(format!("x-access-token:{}", token.expose_secret()));
            format!("Basic {basic}")
        }
    };
    let mut value = HeaderValue::from_str(&text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Where the kinds that fetch their tokens send their requests, and the
/// record of every secret held, which each fetched token joins.
struct TokenEndpoint {
    client: UpstreamClient,
    /// Every secret held, for redaction.
    held: HeldSecrets,
}

impl TokenEndpoint {
    /// Holds a fetched token (for redaction) until it has expired.
    fn remember(&self, token: &CachedToken) {
        self.held
            .remember(token.token.expose_secret().as_bytes(), token.expires_at);
    }

    async fn post_json(
        &self,
        name: &str,
        url: &str,
        authorization: Option<HeaderValue>,
        body: serde_json::Value,
    ) -> Result<serde_json::Value, CredentialError> {
        let fail = |why: String| CredentialError::Fetch {
            name: name.to_string(),
            url: url.to_string(),
            why,
        };
        let uri: http::Uri = url.parse().map_err(|_| fail("bad URL".into()))?;
        let host = uri.host().ok_or_else(|| fail("URL has no host".into()))?;
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(uri.clone())
            .header(http::header::HOST, host)
            .header(
                http::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "gatehouse-proxy");
        if let Some(auth) = authorization {
            req = req.header(http::header::AUTHORIZATION, auth);
        }
        let req = req
            .body(body::full(Bytes::from(body.to_string())))
            .map_err(|e| fail(e.to_string()))?;
        let resp = self
            .client
            .send(req)
            .await
            .map_err(|e| fail(format!("request failed: {e}")))?;
        let status = resp.status();
        let bytes = http_body_util::Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| fail(format!("reading the answer: {e}")))?
            .to_bytes();
        if status.is_client_error() {
            // GitHub's error shape: `{"message": …, "documentation_url": …}`.
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("message")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(CredentialError::Refused {
                name: name.to_string(),
                url: url.to_string(),
                status: status.as_u16(),
                message,
            });
        }
        if !status.is_success() {
            return Err(fail(format!("status {status}")));
        }
        serde_json::from_slice(&bytes).map_err(|e| fail(format!("answer is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn static_tokens_inject_as_bearer_or_git_basic_and_are_held() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pat");
        std::fs::write(&file, "ghp_testvalue\n").unwrap();
        let specs = BTreeMap::from([(
            "gh".to_string(),
            CredentialSpec::GithubToken { token_file: file },
        )]);
        let creds = Credentials::load(&specs, &Upstreams::new(&[]).unwrap()).unwrap();
        let none = BTreeMap::new();
        let bearer = creds
            .authorization("gh", Injection::Bearer, None, &none)
            .await
            .unwrap();
        assert_eq!(bearer.to_str().unwrap(), "Bearer ghp_testvalue");
        assert!(bearer.is_sensitive());
        let basic = creds
            .authorization("gh", Injection::GitBasic, None, &none)
            .await
            .unwrap();
        let encoded =
            base64::engine::general_purpose::STANDARD.encode("x-access-token:ghp_testvalue");
        assert_eq!(basic.to_str().unwrap(), format!("Basic {encoded}"));
        let held = creds.held_secrets();
        assert!(held.holds(b"ghp_testvalue"));
        assert!(
            held.occur_in(basic.to_str().unwrap().as_bytes()),
            "the git form is held too"
        );
        assert!(!format!("{creds:?}").contains("ghp_testvalue"));
        let err = creds
            .authorization("nope", Injection::Bearer, None, &none)
            .await
            .unwrap_err();
        assert!(matches!(err, CredentialError::Unknown(_)));
    }

    #[test]
    fn empty_secret_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "\n").unwrap();
        let specs = BTreeMap::from([("m".to_string(), CredentialSpec::Bearer { key_file: file })]);
        let err = Credentials::load(&specs, &Upstreams::new(&[]).unwrap()).unwrap_err();
        assert!(matches!(err, CredentialError::Empty { .. }), "{err}");
    }
}
