//! The credentials the proxy injects. Secrets are read from files, held in
//! `secrecy` types and only exposed to build one `Authorization` header
//! (marked sensitive) for an allowed request.
//!
//! Kinds: a static GitHub token or bearer key; a Feishu app whose
//! `tenant_access_token` the proxy fetches and refreshes; a GitHub App whose
//! installation tokens the proxy mints, scoped to the identity's repository
//! and the rule's permissions, cached until shortly before they expire.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::BodyExt;
use secrecy::{ExposeSecret, SecretString};

use crate::body;
use crate::server::policy::Injection;
use crate::upstream::{UpstreamClient, Upstreams};

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

struct CachedToken {
    token: SecretString,
    refresh_at: Instant,
}

enum Credential {
    Static(SecretString),
    FeishuApp {
        app_id: String,
        app_secret: SecretString,
        base_url: String,
        cached: tokio::sync::Mutex<Option<CachedToken>>,
    },
    GithubApp {
        app_id: String,
        key: Arc<ring::signature::RsaKeyPair>,
        installation_id: u64,
        api_url: String,
        cached: tokio::sync::Mutex<HashMap<String, CachedToken>>,
    },
}

/// All configured credentials.
pub struct Credentials {
    by_name: HashMap<String, Credential>,
    client: UpstreamClient,
    /// Every secret value currently held, for redaction.
    held: Mutex<Arc<Vec<Vec<u8>>>>,
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
                    let secret = read_secret(name, file)?;
                    held.push(secret.expose_secret().as_bytes().to_vec());
                    Credential::Static(secret)
                }
                CredentialSpec::FeishuApp {
                    app_id,
                    app_secret_file,
                    base_url,
                } => {
                    let app_secret = read_secret(name, app_secret_file)?;
                    held.push(app_secret.expose_secret().as_bytes().to_vec());
                    Credential::FeishuApp {
                        app_id: app_id.clone(),
                        app_secret,
                        base_url: base_url.trim_end_matches('/').to_string(),
                        cached: tokio::sync::Mutex::new(None),
                    }
                }
                CredentialSpec::GithubApp {
                    app_id,
                    private_key_file,
                    installation_id,
                    api_url,
                } => {
                    let pem = read_secret(name, private_key_file)?;
                    let key =
                        rsa_key(pem.expose_secret()).ok_or_else(|| CredentialError::BadKey {
                            name: name.clone(),
                            path: private_key_file.clone(),
                        })?;
                    Credential::GithubApp {
                        app_id: app_id.clone(),
                        key: Arc::new(key),
                        installation_id: *installation_id,
                        api_url: api_url.trim_end_matches('/').to_string(),
                        cached: tokio::sync::Mutex::new(HashMap::new()),
                    }
                }
            };
            by_name.insert(name.clone(), credential);
        }
        Ok(Self {
            by_name,
            client: upstreams.client(),
            held: Mutex::new(Arc::new(held)),
        })
    }

    /// Every secret value the proxy holds right now (for redaction).
    pub fn held_secrets(&self) -> Arc<Vec<Vec<u8>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn remember(&self, secret: &SecretString) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let value = secret.expose_secret().as_bytes().to_vec();
        if !held.contains(&value) {
            let mut next = (**held).clone();
            next.push(value);
            *held = Arc::new(next);
        }
    }

    /// The `Authorization` header value for an allowed request.
    pub async fn authorization(
        &self,
        name: &str,
        inject: Injection,
        repo: Option<&str>,
        permissions: &BTreeMap<String, String>,
    ) -> Result<HeaderValue, CredentialError> {
        let token = self.token(name, repo, permissions).await?;
        let text = match inject {
            Injection::Bearer | Injection::FeishuTenant => {
                format!("Bearer {}", token.expose_secret())
            }
            Injection::GitBasic => {
                let basic = base64::engine::general_purpose::STANDARD
                    .encode(format!("x-access-token:{}", token.expose_secret()));
                format!("Basic {basic}")
            }
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| CredentialError::Fetch {
            name: name.to_string(),
            url: String::new(),
            why: "token contains characters not allowed in a header".into(),
        })?;
        value.set_sensitive(true);
        Ok(value)
    }

    async fn token(
        &self,
        name: &str,
        repo: Option<&str>,
        permissions: &BTreeMap<String, String>,
    ) -> Result<SecretString, CredentialError> {
        match self.by_name.get(name) {
            None => Err(CredentialError::Unknown(name.to_string())),
            Some(Credential::Static(secret)) => Ok(secret.clone()),
            Some(Credential::FeishuApp {
                app_id,
                app_secret,
                base_url,
                cached,
            }) => {
                let mut cached = cached.lock().await;
                if let Some(c) = cached.as_ref().filter(|c| Instant::now() < c.refresh_at) {
                    return Ok(c.token.clone());
                }
                let fresh = self
                    .fetch_feishu(name, app_id, app_secret, base_url)
                    .await?;
                self.remember(&fresh.token);
                let token = fresh.token.clone();
                *cached = Some(fresh);
                Ok(token)
            }
            Some(Credential::GithubApp {
                app_id,
                key,
                installation_id,
                api_url,
                cached,
            }) => {
                let repo = repo
                    .and_then(|r| r.split_once('/'))
                    .map(|(_, name)| name)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| CredentialError::NoRepo {
                        name: name.to_string(),
                    })?;
                let cache_key = format!("{repo}\n{permissions:?}");
                let mut cached = cached.lock().await;
                if let Some(c) = cached
                    .get(&cache_key)
                    .filter(|c| Instant::now() < c.refresh_at)
                {
                    return Ok(c.token.clone());
                }
                let fresh = self
                    .mint_installation_token(
                        name,
                        app_id,
                        key,
                        *installation_id,
                        api_url,
                        repo,
                        permissions,
                    )
                    .await?;
                self.remember(&fresh.token);
                let token = fresh.token.clone();
                cached.insert(cache_key, fresh);
                Ok(token)
            }
        }
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
        if !status.is_success() {
            return Err(fail(format!("status {status}")));
        }
        serde_json::from_slice(&bytes).map_err(|e| fail(format!("answer is not JSON: {e}")))
    }

    async fn fetch_feishu(
        &self,
        name: &str,
        app_id: &str,
        app_secret: &SecretString,
        base_url: &str,
    ) -> Result<CachedToken, CredentialError> {
        // Feishu open platform, "Get tenant_access_token (internal app)".
        let url = format!("{base_url}/open-apis/auth/v3/tenant_access_token/internal");
        let answer = self
            .post_json(
                name,
                &url,
                None,
                serde_json::json!({"app_id": app_id, "app_secret": app_secret.expose_secret()}),
            )
            .await?;
        let fail = |why: &str| CredentialError::Fetch {
            name: name.to_string(),
            url: url.clone(),
            why: why.to_string(),
        };
        if answer.get("code").and_then(|c| c.as_i64()) != Some(0) {
            return Err(fail("non-zero code in the answer"));
        }
        let token = answer
            .get("tenant_access_token")
            .and_then(|t| t.as_str())
            .ok_or_else(|| fail("no tenant_access_token in the answer"))?;
        let expire = answer.get("expire").and_then(|e| e.as_u64()).unwrap_or(0);
        Ok(CachedToken {
            token: SecretString::from(token.to_string()),
            refresh_at: Instant::now() + Duration::from_secs(expire).saturating_sub(REFRESH_MARGIN),
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn mint_installation_token(
        &self,
        name: &str,
        app_id: &str,
        key: &ring::signature::RsaKeyPair,
        installation_id: u64,
        api_url: &str,
        repo: &str,
        permissions: &BTreeMap<String, String>,
    ) -> Result<CachedToken, CredentialError> {
        // GitHub REST: POST /app/installations/{installation_id}/access_tokens,
        // authenticated with an RS256 JWT issued by the App.
        let url = format!("{api_url}/app/installations/{installation_id}/access_tokens");
        let fail = |why: &str| CredentialError::Fetch {
            name: name.to_string(),
            url: url.clone(),
            why: why.to_string(),
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| fail("clock before 1970"))?
            .as_secs();
        let jwt = app_jwt(key, app_id, now).ok_or_else(|| fail("signing the App JWT failed"))?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", jwt.expose_secret()))
            .map_err(|_| fail("JWT is not a valid header"))?;
        auth.set_sensitive(true);
        let mut body = serde_json::json!({ "repositories": [repo] });
        if !permissions.is_empty() {
            body["permissions"] = serde_json::to_value(permissions)
                .map_err(|_| fail("permissions are not serialisable"))?;
        }
        let answer = self.post_json(name, &url, Some(auth), body).await?;
        let token = answer
            .get("token")
            .and_then(|t| t.as_str())
            .ok_or_else(|| fail("no token in the answer"))?;
        // Installation tokens live one hour; `expires_at` is RFC 3339, but a
        // conservative fixed lifetime avoids parsing dates.
        Ok(CachedToken {
            token: SecretString::from(token.to_string()),
            refresh_at: Instant::now()
                + Duration::from_secs(3600).saturating_sub(REFRESH_MARGIN * 2),
        })
    }
}

fn rsa_key(pem: &str) -> Option<ring::signature::RsaKeyPair> {
    use rustls_pki_types::pem::PemObject;
    match rustls_pki_types::PrivateKeyDer::from_pem_slice(pem.as_bytes()).ok()? {
        rustls_pki_types::PrivateKeyDer::Pkcs1(der) => {
            ring::signature::RsaKeyPair::from_der(der.secret_pkcs1_der()).ok()
        }
        rustls_pki_types::PrivateKeyDer::Pkcs8(der) => {
            ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).ok()
        }
        _ => None,
    }
}

/// An App JWT: RS256, issued 60 s in the past (clock drift), valid 9 minutes.
fn app_jwt(key: &ring::signature::RsaKeyPair, app_id: &str, now: u64) -> Option<SecretString> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = b64.encode(
        serde_json::json!({"iat": now.saturating_sub(60), "exp": now + 540, "iss": app_id})
            .to_string(),
    );
    let signing_input = format!("{header}.{claims}");
    let mut signature = vec![0u8; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .ok()?;
    Some(SecretString::from(format!(
        "{signing_input}.{}",
        b64.encode(signature)
    )))
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
        assert_eq!(*creds.held_secrets(), vec![b"ghp_testvalue".to_vec()]);
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

#[cfg(test)]
mod github_app_tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use crate::ca::CertificateAuthority;
    use crate::upstream::UpstreamOverride;

    type Seen = Arc<StdMutex<Vec<(String, String, serde_json::Value)>>>;

    /// A stand-in for GitHub's access_tokens endpoint over TLS, recording
    /// (path, authorization, body) of each call.
    async fn fake_github(ca: &CertificateAuthority, seen: Seen) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config("api.github.com").unwrap());
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let tls = acceptor.accept(tcp).await.unwrap();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let auth = req
                                .headers()
                                .get("authorization")
                                .map(|v| v.to_str().unwrap().to_string())
                                .unwrap_or_default();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let n = {
                                let mut seen = seen.lock().unwrap();
                                seen.push((path, auth, body));
                                seen.len()
                            };
                            let answer = serde_json::json!({
                                "token": format!("ghs_minted{n}"),
                                "expires_at": "2099-01-01T00:00:00Z",
                            });
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(Bytes::from(answer.to_string())),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn github_app_tokens_are_minted_scoped_signed_and_cached() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("app.pem");
        let status = std::process::Command::new("openssl")
            .args(["genrsa", "-traditional", "-out"])
            .arg(&key_file)
            .arg("2048")
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "openssl genrsa failed");
        let ca = CertificateAuthority::load_or_generate(
            &dir.path().join("ca.pem"),
            &dir.path().join("ca.key"),
        )
        .unwrap();
        let seen: Seen = Arc::default();
        let addr = fake_github(&ca, seen.clone()).await;
        let upstreams = Upstreams::new(&[UpstreamOverride {
            host: "api.github.com".into(),
            url: format!("https://{addr}"),
            ca_file: Some(dir.path().join("ca.pem")),
        }])
        .unwrap();
        let specs = BTreeMap::from([(
            "app".to_string(),
            CredentialSpec::GithubApp {
                app_id: "12345".into(),
                private_key_file: key_file.clone(),
                installation_id: 777,
                api_url: "https://api.github.com".into(),
            },
        )]);
        let creds = Credentials::load(&specs, &upstreams).unwrap();
        let perms = BTreeMap::from([
            ("contents".to_string(), "write".to_string()),
            ("issues".to_string(), "write".to_string()),
        ]);
        let first = creds
            .authorization("app", Injection::Bearer, Some("acme/widgets"), &perms)
            .await
            .unwrap();
        assert_eq!(first.to_str().unwrap(), "Bearer ghs_minted1");
        let again = creds
            .authorization("app", Injection::GitBasic, Some("acme/widgets"), &perms)
            .await
            .unwrap();
        let basic = base64::engine::general_purpose::STANDARD.encode("x-access-token:ghs_minted1");
        assert_eq!(
            again.to_str().unwrap(),
            format!("Basic {basic}"),
            "cached per repo"
        );
        creds
            .authorization("app", Injection::Bearer, Some("acme/other"), &perms)
            .await
            .unwrap();
        let err = creds
            .authorization("app", Injection::Bearer, None, &perms)
            .await
            .unwrap_err();
        assert!(matches!(err, CredentialError::NoRepo { .. }));

        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "one mint per repo: {seen:?}");
        let (path, auth, body) = &seen[0];
        assert_eq!(path, "/app/installations/777/access_tokens");
        assert_eq!(body["repositories"], serde_json::json!(["widgets"]));
        assert_eq!(
            body["permissions"],
            serde_json::json!({"contents": "write", "issues": "write"})
        );
        assert_eq!(seen[1].2["repositories"], serde_json::json!(["other"]));
        // The JWT is RS256, issued by the App, and verifies with its key.
        let jwt = auth.strip_prefix("Bearer ").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header: serde_json::Value =
            serde_json::from_slice(&b64.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "RS256");
        let claims: serde_json::Value =
            serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], "12345");
        assert_eq!(
            claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
            600
        );
        let key = rsa_key(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            key.public().as_ref(),
        )
        .verify(
            format!("{}.{}", parts[0], parts[1]).as_bytes(),
            &b64.decode(parts[2]).unwrap(),
        )
        .unwrap();
        // Minted tokens are redacted like any other secret.
        assert!(creds.held_secrets().contains(&b"ghs_minted1".to_vec()));
    }
}
