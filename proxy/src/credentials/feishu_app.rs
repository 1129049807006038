//! A Feishu (Lark) app: the proxy fetches its `tenant_access_token` with the
//! app secret and refreshes it shortly before it expires.

use std::path::Path;
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::{read_secret, CachedToken, CredentialError, TokenEndpoint, REFRESH_MARGIN};

pub(super) struct FeishuApp {
    app_id: String,
    app_secret: SecretString,
    base_url: String,
    cached: tokio::sync::Mutex<Option<CachedToken>>,
}

impl FeishuApp {
    pub(super) fn load(
        name: &str,
        app_id: &str,
        app_secret_file: &Path,
        base_url: &str,
    ) -> Result<Self, CredentialError> {
        Ok(Self {
            app_id: app_id.to_owned(),
            app_secret: read_secret(name, app_secret_file)?,
            base_url: base_url.trim_end_matches('/').to_string(),
            cached: tokio::sync::Mutex::new(None),
        })
    }

    /// The app secret (held for redaction).
    pub(super) fn secret(&self) -> &SecretString {
        &self.app_secret
    }

    /// The cached tenant token, or a newly fetched one.
    pub(super) async fn token(
        &self,
        name: &str,
        endpoint: &TokenEndpoint,
    ) -> Result<SecretString, CredentialError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| c.fresh()) {
            return Ok(c.token.clone());
        }
        let fresh = self.fetch(name, endpoint).await?;
        endpoint.remember(&fresh);
        let token = fresh.token.clone();
        *cached = Some(fresh);
        Ok(token)
    }

    /// Forgets the cached token if it is `used`: Feishu refused it before
    /// its expiry, so the next request fetches a new one. A token fetched
    /// since (by a concurrent request refused too) is kept. Whether one was
    /// forgotten.
    pub(super) async fn forget(&self, used: &str) -> bool {
        let mut cached = self.cached.lock().await;
        let matches = cached
            .as_ref()
            .is_some_and(|c| c.token.expose_secret() == used);
        if matches {
            *cached = None;
        }
        matches
    }

    async fn fetch(
        &self,
        name: &str,
        endpoint: &TokenEndpoint,
    ) -> Result<CachedToken, CredentialError> {
        // Feishu open platform, "Get tenant_access_token (internal app)".
        let url = format!(
            "{}/open-apis/auth/v3/tenant_access_token/internal",
            self.base_url
        );
        let answer = endpoint
            .post_json(
                name,
                &url,
                None,
                serde_json::json!({"app_id": self.app_id, "app_secret": self.app_secret.expose_secret()}),
            )
            .await?;
        let (token, expire) = tenant_token(&answer).map_err(|why| CredentialError::Fetch {
            name: name.to_string(),
            url: url.clone(),
            why: why.to_string(),
        })?;
        // `expire` is the seconds left, counted from Feishu's answer: from
        // now it ends no earlier. Without one the token is held for good.
        let now = Instant::now();
        let lifetime = Duration::from_secs(expire);
        Ok(CachedToken {
            token: SecretString::from(token.to_string()),
            refresh_at: now + lifetime.saturating_sub(REFRESH_MARGIN),
            expires_at: (expire > 0).then(|| now + lifetime),
        })
    }
}

/// The token and its lifetime in seconds (0 when not given) in Feishu's
/// answer; the error says what is wrong with the answer.
fn tenant_token(answer: &Value) -> Result<(&str, u64), &'static str> {
    if answer.get("code").and_then(|c| c.as_i64()) != Some(0) {
        return Err("non-zero code in the answer");
    }
    let token = answer
        .get("tenant_access_token")
        .and_then(|t| t.as_str())
        .ok_or("no tenant_access_token in the answer")?;
    let expire = answer.get("expire").and_then(|e| e.as_u64()).unwrap_or(0);
    Ok((token, expire))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn forget_drops_only_the_refused_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "app-secret").unwrap();
        let app = FeishuApp::load("f", "cli_a", &file, "https://open.feishu.cn").unwrap();
        assert!(!app.forget("t-old").await, "nothing cached yet");
        let later = Instant::now() + Duration::from_secs(3600);
        *app.cached.lock().await = Some(CachedToken {
            token: SecretString::from("t-new".to_string()),
            refresh_at: later,
            expires_at: Some(later),
        });
        // A concurrent request refused with the old token keeps the new one.
        assert!(!app.forget("t-old").await);
        assert!(app.cached.lock().await.is_some());
        assert!(app.forget("t-new").await);
        assert!(app.cached.lock().await.is_none());
    }

    #[test]
    fn tenant_token_answers_table() {
        let cases = [
            (
                json!({"code": 0, "tenant_access_token": "t-1", "expire": 7200}),
                Ok(("t-1", 7200)),
            ),
            (
                json!({"code": 0, "tenant_access_token": "t-2"}),
                Ok(("t-2", 0)),
            ),
            (
                json!({"code": 99991663, "msg": "app secret invalid"}),
                Err("non-zero code in the answer"),
            ),
            (
                json!({"tenant_access_token": "t-3", "expire": 7200}),
                Err("non-zero code in the answer"),
            ),
            (
                json!({"code": 0, "expire": 7200}),
                Err("no tenant_access_token in the answer"),
            ),
            (
                json!({"code": 0, "tenant_access_token": 12}),
                Err("no tenant_access_token in the answer"),
            ),
        ];
        for (answer, expected) in cases {
            assert_eq!(tenant_token(&answer), expected, "{answer}");
        }
    }
}
