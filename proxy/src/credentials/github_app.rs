//! A GitHub App: the proxy mints installation tokens with an RS256 JWT
//! signed by the App's key, each scoped to the identity's repository and the
//! permissions its rule sets need, and caches them per repository and
//! permissions until shortly before they expire.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use http::HeaderValue;
use secrecy::{ExposeSecret, SecretString};

use super::{read_secret, CachedToken, CredentialError, TokenEndpoint, REFRESH_MARGIN};

pub(super) struct GithubApp {
    app_id: String,
    key: Arc<ring::signature::RsaKeyPair>,
    installation_id: u64,
    api_url: String,
    cached: tokio::sync::Mutex<HashMap<String, CachedToken>>,
}

impl GithubApp {
    pub(super) fn load(
        name: &str,
        app_id: &str,
        private_key_file: &Path,
        installation_id: u64,
        api_url: &str,
    ) -> Result<Self, CredentialError> {
        let pem = read_secret(name, private_key_file)?;
        let key = rsa_key(pem.expose_secret()).ok_or_else(|| CredentialError::BadKey {
            name: name.to_owned(),
            path: private_key_file.to_path_buf(),
        })?;
        Ok(Self {
            app_id: app_id.to_owned(),
            key: Arc::new(key),
            installation_id,
            api_url: api_url.trim_end_matches('/').to_string(),
            cached: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The cached installation token for `repo` (`owner/name`) and
    /// `permissions`, or a newly minted one.
    pub(super) async fn token(
        &self,
        name: &str,
        repo: Option<&str>,
        permissions: &BTreeMap<String, String>,
        endpoint: &TokenEndpoint,
    ) -> Result<SecretString, CredentialError> {
        let repo = repo
            .and_then(|r| r.split_once('/'))
            .map(|(_, name)| name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| CredentialError::NoRepo {
                name: name.to_string(),
            })?;
        let cache_key = format!("{repo}\n{permissions:?}");
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.get(&cache_key).filter(|c| c.fresh()) {
            return Ok(c.token.clone());
        }
        let fresh = self
            .mint_installation_token(name, repo, permissions, endpoint)
            .await?;
        endpoint.remember(&fresh);
        let token = fresh.token.clone();
        cached.insert(cache_key, fresh);
        Ok(token)
    }

    async fn mint_installation_token(
        &self,
        name: &str,
        repo: &str,
        permissions: &BTreeMap<String, String>,
        endpoint: &TokenEndpoint,
    ) -> Result<CachedToken, CredentialError> {
        // GitHub REST: POST /app/installations/{installation_id}/access_tokens,
        // authenticated with an RS256 JWT issued by the App.
        let url = format!(
            "{}/app/installations/{}/access_tokens",
            self.api_url, self.installation_id
        );
        let fail = |why: &str| CredentialError::Fetch {
            name: name.to_string(),
            url: url.clone(),
            why: why.to_string(),
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| fail("clock before 1970"))?
            .as_secs();
        let jwt = app_jwt(&self.key, &self.app_id, now)
            .ok_or_else(|| fail("signing the App JWT failed"))?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", jwt.expose_secret()))
            .map_err(|_| fail("JWT is not a valid header"))?;
        auth.set_sensitive(true);
        let mut body = serde_json::json!({ "repositories": [repo] });
        if !permissions.is_empty() {
            body["permissions"] = serde_json::to_value(permissions)
                .map_err(|_| fail("permissions are not serialisable"))?;
        }
        let answer = endpoint.post_json(name, &url, Some(auth), body).await?;
        let token = answer
            .get("token")
            .and_then(|t| t.as_str())
            .ok_or_else(|| fail("no token in the answer"))?;
        // Installation tokens live one hour; `expires_at` is RFC 3339, but a
        // conservative fixed lifetime avoids parsing dates. Counted from
        // now, after GitHub created it, the hour ends no earlier than its.
        let now = Instant::now();
        let lifetime = Duration::from_secs(3600);
        Ok(CachedToken {
            token: SecretString::from(token.to_string()),
            refresh_at: now + lifetime.saturating_sub(REFRESH_MARGIN * 2),
            expires_at: Some(now + lifetime),
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
    use std::sync::Mutex as StdMutex;

    use bytes::Bytes;

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use crate::ca::CertificateAuthority;
    use crate::credentials::{CredentialSpec, Credentials};
    use crate::server::policy::Injection;
    use crate::upstream::{UpstreamOverride, Upstreams};

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
        assert!(creds.held_secrets().holds(b"ghs_minted1"));
    }
}
