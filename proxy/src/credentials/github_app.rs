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
        // Installation tokens live one hour ("Installation tokens expire
        // one hour from the time you create them", REST description);
        // `expires_at` says when, and is believed when it says sooner.
        let unix_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| fail("clock before 1970"))?
            .as_secs();
        let lifetime = answer
            .get("expires_at")
            .and_then(|t| t.as_str())
            .and_then(unix_of_rfc3339)
            .map_or(TOKEN_LIFETIME, |at| {
                Duration::from_secs(at.saturating_sub(unix_now)).min(TOKEN_LIFETIME)
            });
        let now = Instant::now();
        Ok(CachedToken {
            token: SecretString::from(token.to_string()),
            refresh_at: now + lifetime - refresh_margin(lifetime),
            expires_at: Some(now + lifetime),
        })
    }

    /// A fresh App JWT and when it stops being valid.
    pub(super) fn jwt(&self, name: &str) -> Result<(SecretString, Instant), CredentialError> {
        let fail = |why: &str| CredentialError::Fetch {
            name: name.to_string(),
            url: String::new(),
            why: why.to_string(),
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| fail("clock before 1970"))?
            .as_secs();
        let jwt = app_jwt(&self.key, &self.app_id, now)
            .ok_or_else(|| fail("signing the App JWT failed"))?;
        Ok((jwt, Instant::now() + JWT_LIFETIME))
    }

    /// Drops the cached token `authorization` carries (either form).
    pub(super) async fn forget(&self, authorization: &HeaderValue) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let sent = authorization.as_bytes();
        self.cached.lock().await.retain(|_, c| {
            let token = c.token.expose_secret();
            let bearer = format!("Bearer {token}");
            let basic = format!("Basic {}", b64.encode(format!("x-access-token:{token}")));
            sent != bearer.as_bytes() && sent != basic.as_bytes()
        });
    }
}

/// How long an App JWT is valid from now (`exp` of [`app_jwt`]).
const JWT_LIFETIME: Duration = Duration::from_secs(540);

/// How long an installation token lives when GitHub does not say.
const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// How long before its end a token of `lifetime` is replaced: twice the
/// usual margin, or half its life for a token that lives less than that.
fn refresh_margin(lifetime: Duration) -> Duration {
    (REFRESH_MARGIN * 2).min(lifetime / 2)
}

/// Unix seconds of a UTC timestamp as GitHub writes them,
/// `2016-07-11T22:14:10Z` (fractions of a second ignored).
fn unix_of_rfc3339(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let time = time.split('.').next()?;
    let number = |s: &str| {
        s.parse::<u64>()
            .ok()
            .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
    };
    let mut d = date.splitn(3, '-').map(number);
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':').map(number);
    let (h, m, s) = (t.next()??, t.next()??, t.next()??);
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || h > 23
        || m > 59
        || s > 60
    {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), March-based years.
    let (y, mp) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let (era, yoe) = (y / 400, y % 400);
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
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

    #[test]
    fn githubs_timestamps_are_read_back_as_the_audit_log_writes_them() {
        for unix in [
            0u64,
            951_782_400,
            1_700_000_000,
            1_709_164_799,
            4_102_444_799,
        ] {
            let text = crate::audit::rfc3339_utc(unix * 1000);
            let github = text.replace(".000Z", "Z");
            assert_eq!(unix_of_rfc3339(&github), Some(unix), "{github}");
            assert_eq!(unix_of_rfc3339(&text), Some(unix), "{text}");
        }
        assert_eq!(unix_of_rfc3339("2016-07-11T22:14:10Z"), Some(1_468_275_250));
        for bad in [
            "",
            "2016-07-11T22:14:10",
            "2016-07-11 22:14:10Z",
            "2016-13-11T22:14:10Z",
            "2016-07-11T24:14:10Z",
            "1969-12-31T23:59:59Z",
            "2016-07-+1T22:14:10Z",
            "2016-07T22:14:10Z",
        ] {
            assert_eq!(unix_of_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn short_lived_tokens_are_replaced_half_way() {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(refresh_margin(minutes(60)), minutes(10));
        assert_eq!(refresh_margin(minutes(20)), minutes(10));
        assert_eq!(refresh_margin(minutes(10)), minutes(5));
        assert_eq!(
            refresh_margin(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(refresh_margin(Duration::ZERO), Duration::ZERO);
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
