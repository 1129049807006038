//! A static secret read once from a file: a GitHub token (PAT) or a bearer
//! key (model APIs). It is injected as it is and never refreshed.

use std::path::Path;

use secrecy::SecretString;

use super::{read_secret, CredentialError};

pub(super) struct StaticToken(SecretString);

impl StaticToken {
    pub(super) fn load(name: &str, file: &Path) -> Result<Self, CredentialError> {
        read_secret(name, file).map(Self)
    }

    pub(super) fn secret(&self) -> &SecretString {
        &self.0
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
        let err = StaticToken::load("model", &dir.path().join("absent"))
            .err()
            .unwrap();
        assert!(matches!(err, CredentialError::Read { .. }), "{err}");
        assert!(err.to_string().contains("credential model"), "{err}");
    }
}
