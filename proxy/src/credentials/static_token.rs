//! A static secret read once from a file: a GitHub token (PAT) or a bearer
//! key (model APIs). It is injected as it is and never refreshed.

use std::path::Path;

use http::HeaderValue;
use secrecy::SecretString;

use super::{header_value, read_secret, CredentialError};
use crate::server::policy::Injection;

/// The token, and the two `Authorization` values a static token is sent
/// as, built once (`None`: not a valid header value; the request path then
/// says so as it did).
pub(super) struct StaticToken {
    secret: SecretString,
    bearer: Option<HeaderValue>,
    basic: Option<HeaderValue>,
}

impl StaticToken {
    pub(super) fn load(name: &str, file: &Path) -> Result<Self, CredentialError> {
        let secret = read_secret(name, file)?;
        Ok(Self {
            bearer: header_value(Injection::Bearer, &secret),
            basic: header_value(Injection::GitBasic, &secret),
            secret,
        })
    }

    pub(super) fn secret(&self) -> &SecretString {
        &self.secret
    }

    /// The value built at load for `inject` (`Bearer …`, git's `Basic …`).
    pub(super) fn authorization(&self, inject: Injection) -> Option<&HeaderValue> {
        match inject {
            Injection::Bearer => self.bearer.as_ref(),
            Injection::GitBasic => self.basic.as_ref(),
            Injection::FeishuTenant | Injection::GithubAppJwt => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn the_file_is_read_trimmed_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "  sk-test \n").unwrap();
        let token = StaticToken::load("model", &file).unwrap();
        assert_eq!(token.secret().expose_secret(), "sk-test");
        let bearer = token.authorization(Injection::Bearer).unwrap();
        assert_eq!(bearer.to_str().unwrap(), "Bearer sk-test");
        assert!(bearer.is_sensitive());
        // base64("x-access-token:sk-test")
        let basic = token.authorization(Injection::GitBasic).unwrap();
        assert_eq!(
            basic.to_str().unwrap(),
            "Basic eC1hY2Nlc3MtdG9rZW46c2stdGVzdA=="
        );
        assert!(basic.is_sensitive());
        assert!(token.authorization(Injection::FeishuTenant).is_none());
        let err = StaticToken::load("model", &dir.path().join("absent"))
            .err()
            .unwrap();
        assert!(matches!(err, CredentialError::Read { .. }), "{err}");
        assert!(err.to_string().contains("credential model"), "{err}");
    }
}
