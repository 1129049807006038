//! The CA bundle a sandbox trusts: the system roots plus the gatehouse CA.
//! The CA's certificate is public; its key must never enter a sandbox, so
//! a file holding any private key is refused here, whoever the caller is.

use std::path::{Path, PathBuf};

/// Where Debian and its derivatives keep the system's trusted roots.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Why a CA certificate cannot be put in a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// the PEM holds a private key
    #[error("the file holds a private key; pass the public certificate only")]
    PrivateKey,
    /// the text is not a PEM certificate
    #[error("expected a PEM certificate")]
    NotCertificate,
}

#[derive(Debug, thiserror::Error)]
pub enum CaBundleError {
    /// the CA certificate could not be read
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// the CA certificate is refused
    #[error("{}: {refusal}", path.display())]
    Refused { path: PathBuf, refusal: Refusal },
}

/// The system roots followed by the gatehouse CA, or why not: a text that
/// holds a private key, or holds no certificate, is refused.
pub fn bundle(ca_pem: &str, system_roots: &str) -> Result<String, Refusal> {
    if ca_pem.contains("PRIVATE KEY") {
        return Err(Refusal::PrivateKey);
    }
    if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(Refusal::NotCertificate);
    }
    Ok(format!("{}\n{}", system_roots.trim_end(), ca_pem))
}

/// Reads the CA certificate at `ca_cert` and bundles it with the roots at
/// `system_roots` (none if that file is missing or unreadable).
pub fn load(ca_cert: &Path, system_roots: &Path) -> Result<String, CaBundleError> {
    let ca = std::fs::read_to_string(ca_cert).map_err(|source| CaBundleError::Read {
        path: ca_cert.to_owned(),
        source,
    })?;
    let system = std::fs::read_to_string(system_roots).unwrap_or_default();
    bundle(&ca, &system).map_err(|refusal| CaBundleError::Refused {
        path: ca_cert.to_owned(),
        refusal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn bundle_table() {
        let key_kinds = [
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        ];
        for key in key_kinds {
            // Alone, or next to the certificate (a combined PEM): refused.
            assert_eq!(bundle(key, "ROOTS"), Err(Refusal::PrivateKey), "{key}");
            let combined = format!("{CERT}{key}");
            assert_eq!(bundle(&combined, "ROOTS"), Err(Refusal::PrivateKey));
            let combined = format!("{key}{CERT}");
            assert_eq!(bundle(&combined, "ROOTS"), Err(Refusal::PrivateKey));
        }
        assert_eq!(bundle("", "ROOTS"), Err(Refusal::NotCertificate));
        assert_eq!(bundle("not a pem", "ROOTS"), Err(Refusal::NotCertificate));
        assert_eq!(
            bundle(CERT, "ROOT-A\nROOT-B\n\n").unwrap(),
            format!("ROOT-A\nROOT-B\n{CERT}")
        );
        assert_eq!(bundle(CERT, "").unwrap(), format!("\n{CERT}"));
    }

    #[test]
    fn load_refuses_a_key_file_and_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("ca.key");
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n").unwrap();
        let err = load(&key, Path::new("/nonexistent")).unwrap_err();
        assert!(matches!(
            err,
            CaBundleError::Refused {
                refusal: Refusal::PrivateKey,
                ..
            }
        ));
        let msg = err.to_string();
        assert!(msg.starts_with(&key.display().to_string()), "{msg}");
        assert!(msg.contains("private key"), "{msg}");
    }

    #[test]
    fn load_bundles_the_system_roots_first() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let roots = dir.path().join("roots.pem");
        std::fs::write(&ca, CERT).unwrap();
        std::fs::write(&roots, "SYSTEM\n").unwrap();
        assert_eq!(load(&ca, &roots).unwrap(), format!("SYSTEM\n{CERT}"));
        // Missing roots: the gatehouse CA alone.
        let only = load(&ca, &dir.path().join("none")).unwrap();
        assert_eq!(only, format!("\n{CERT}"));
        let missing = load(&dir.path().join("missing.pem"), &roots).unwrap_err();
        assert!(matches!(missing, CaBundleError::Read { .. }));
    }
}
