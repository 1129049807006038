//! The gatehouse certificate authority: loaded from (or, on first start,
//! generated into) a certificate and key file pair, and used to mint one leaf
//! certificate per intercepted host. Leaves are cached, so a second
//! connection to the same host reuses the first one's certificate.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Errors loading the CA or minting a leaf.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Reading or writing a CA file failed.
    #[error("CA file {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The CA key file may be read by users other than its owner.
    #[error(
        "CA key file {path} has mode {mode:o}: it must not be readable by group or others (chmod 600 it)"
    )]
    KeyTooOpen { path: PathBuf, mode: u32 },
    /// Only one of the two CA files exists.
    #[error("CA certificate {cert} and key {key} must both exist or both be absent")]
    HalfPresent { cert: PathBuf, key: PathBuf },
    /// The certificate or key could not be parsed or generated.
    #[error("CA certificate or key: {0}")]
    Cert(#[from] rcgen::Error),
    /// The minted leaf was refused by rustls.
    #[error("TLS configuration for {host}")]
    Tls {
        host: String,
        #[source]
        source: rustls::Error,
    },
}

/// A CA able to mint leaf certificates, with a per-host cache of ready
/// server configurations.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("key", &"[redacted]")
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Loads the CA from `cert` and `key`, generating both if neither exists.
    /// A key file readable by group or others is refused.
    pub fn load_or_generate(cert: &Path, key: &Path) -> Result<Self, CaError> {
        match (cert.exists(), key.exists()) {
            (false, false) => Self::generate_into(cert, key),
            (true, true) => Self::load(cert, key),
            _ => Err(CaError::HalfPresent {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            }),
        }
    }

    fn load(cert: &Path, key: &Path) -> Result<Self, CaError> {
        fn io(path: &Path) -> impl Fn(std::io::Error) -> CaError + '_ {
            move |source| CaError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
        let mode = fs::metadata(key).map_err(io(key))?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CaError::KeyTooOpen {
                path: key.to_path_buf(),
                mode,
            });
        }
        let cert_pem = fs::read_to_string(cert).map_err(io(cert))?;
        let key_pem = fs::read_to_string(key).map_err(io(key))?;
        let key_pair = KeyPair::from_pem(&key_pem)?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key_pair)?;
        Ok(Self::from_parts(issuer, cert_pem))
    }

    fn generate_into(cert: &Path, key: &Path) -> Result<Self, CaError> {
        let key_pair = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "gatehouse proxy CA");
        name.push(DnType::OrganizationName, "gatehouse");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = std::time::SystemTime::now();
        params.not_before = (now - std::time::Duration::from_secs(3600)).into();
        params.not_after = (now + std::time::Duration::from_secs(10 * 365 * 86400)).into();
        let ca_cert = params.self_signed(&key_pair)?;
        let cert_pem = ca_cert.pem();
        write_new_file(key, key_pair.serialize_pem().as_bytes(), 0o600)?;
        write_new_file(cert, cert_pem.as_bytes(), 0o644)?;
        Ok(Self::from_parts(Issuer::new(params, key_pair), cert_pem))
    }

    fn from_parts(issuer: Issuer<'static, KeyPair>, cert_pem: String) -> Self {
        Self {
            issuer,
            cert_pem,
            leaves: Mutex::new(HashMap::new()),
        }
    }

    /// The CA certificate in PEM, for clients' trust bundles.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A TLS server configuration presenting a leaf for `host` (minted on
    /// first use, then cached), offering only HTTP/1.1.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        if let Some(config) = self.lock_leaves().get(host) {
            return Ok(config.clone());
        }
        let config = Arc::new(self.mint(host)?);
        self.lock_leaves().insert(host.to_string(), config.clone());
        Ok(config)
    }

    /// How many leaves are cached (tests check reuse through this).
    pub fn cached_leaves(&self) -> usize {
        self.lock_leaves().len()
    }

    fn lock_leaves(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ServerConfig>>> {
        // A poisoned cache only means a panic elsewhere mid-insert; the map
        // itself is still consistent.
        self.leaves.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A leaf certificate and its key for `host`, in PEM (for servers
    /// other than the proxy, e.g. a benchmark's baseline).
    pub fn leaf_pem(&self, host: &str) -> Result<(String, String), CaError> {
        let (leaf, key) = self.leaf(host)?;
        Ok((leaf.pem(), key.serialize_pem()))
    }

    fn leaf(&self, host: &str) -> Result<(rcgen::Certificate, KeyPair), CaError> {
        let leaf_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_string()])?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, host.to_string());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = std::time::SystemTime::now();
        params.not_before = (now - std::time::Duration::from_secs(3600)).into();
        params.not_after = (now + std::time::Duration::from_secs(30 * 86400)).into();
        let leaf = params.signed_by(&leaf_key, &self.issuer)?;
        Ok((leaf, leaf_key))
    }

    fn mint(&self, host: &str) -> Result<ServerConfig, CaError> {
        let (leaf, leaf_key) = self.leaf(host)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
        let tls = |source| CaError::Tls {
            host: host.to_string(),
            source,
        };
        let mut config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(tls)?
                .with_no_client_auth()
                .with_single_cert(chain, key_der)
                .map_err(tls)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

fn write_new_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), CaError> {
    let io = |source| CaError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    file.write_all(contents).map_err(io)?;
    file.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_then_reloads_with_a_private_key_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca.key"));
        let first = CertificateAuthority::load_or_generate(&cert, &key).unwrap();
        let mode = fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = CertificateAuthority::load_or_generate(&cert, &key).unwrap();
        assert_eq!(first.cert_pem(), second.cert_pem());
        second.server_config("api.github.com").unwrap();
    }

    #[test]
    fn refuses_a_key_readable_by_others() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca.key"));
        CertificateAuthority::load_or_generate(&cert, &key).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o640)).unwrap();
        let err = CertificateAuthority::load_or_generate(&cert, &key).unwrap_err();
        assert!(
            matches!(err, CaError::KeyTooOpen { mode: 0o640, .. }),
            "{err}"
        );
    }

    #[test]
    fn refuses_half_a_ca() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca.key"));
        fs::write(&cert, "x").unwrap();
        let err = CertificateAuthority::load_or_generate(&cert, &key).unwrap_err();
        assert!(matches!(err, CaError::HalfPresent { .. }));
    }

    #[test]
    fn leaves_are_cached_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::load_or_generate(
            &dir.path().join("ca.pem"),
            &dir.path().join("ca.key"),
        )
        .unwrap();
        let a = ca.server_config("api.github.com").unwrap();
        let b = ca.server_config("api.github.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        ca.server_config("github.com").unwrap();
        assert_eq!(ca.cached_leaves(), 2);
    }
}
