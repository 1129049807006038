//! The emulators' own test CA, generated in memory at start.
//!
//! Clients trust the emulators by being given [`TestCa::cert_pem`] (curl
//! `--cacert`, git `GIT_SSL_CAINFO`, the proxy's upstream override CA). The
//! CA key never leaves memory; each emulator gets one leaf certificate valid
//! for every host name it answers to.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Every name the emulators' server certificate is valid for.
pub const SERVER_NAMES: &[&str] = &[
    "api.github.com",
    "github.com",
    "uploads.github.com",
    // Where the job-logs endpoint redirects to (GitHub uses blob storage
    // hosts under this domain).
    "pipelines.actions.githubusercontent.com",
    "open.feishu.cn",
    "open.larksuite.com",
    // The model API (OpenAI-compatible; the proxy's model-api rule set).
    "api.openai.com",
    // A package registry, so a tunnel test verifies TLS end to end with
    // the registry's own name (the emulator answers it 404).
    "registry.npmjs.org",
    "localhost",
    "127.0.0.1",
    "::1",
];

/// Failure to build the test CA or the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Generating a key or signing a certificate failed.
    #[error("generating the test CA or server certificate failed: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the generated certificate or the protocol settings.
    #[error("building the TLS server configuration failed: {0}")]
    Tls(#[from] rustls::Error),
    /// Writing the CA certificate to a file failed.
    #[error("writing the CA certificate to {path} failed: {source}")]
    Write {
        /// The file that could not be written.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
}

/// A freshly generated CA plus one server certificate signed by it.
pub struct TestCa {
    cert_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: PrivatePkcs8KeyDer<'static>,
}

impl std::fmt::Debug for TestCa {
    // The server key is test material, but keep it out of Debug output anyway.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// Generate a CA and a server certificate for [`SERVER_NAMES`].
    pub fn generate() -> Result<Self, CaError> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        let mut ca_name = DistinguishedName::new();
        ca_name.push(DnType::CommonName, "gatehouse emulators test CA");
        ca_params.distinguished_name = ca_name;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let names: Vec<String> = SERVER_NAMES.iter().map(|n| n.to_string()).collect();
        let mut leaf_params = CertificateParams::new(names)?;
        let mut leaf_name = DistinguishedName::new();
        leaf_name.push(DnType::CommonName, "gatehouse emulator");
        leaf_params.distinguished_name = leaf_name;
        leaf_params.is_ca = IsCa::ExplicitNoCa;
        leaf_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_key = KeyPair::generate()?;
        let leaf_cert = leaf_params.signed_by(&leaf_key, &issuer)?;

        Ok(Self {
            cert_pem: ca_cert.pem(),
            server_chain: vec![leaf_cert.der().clone(), ca_cert.der().clone()],
            server_key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
        })
    }

    /// The CA certificate, PEM-encoded: what clients must trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Write the CA certificate (never the key) to `path`.
    pub fn write_cert_pem(&self, path: &std::path::Path) -> Result<(), CaError> {
        std::fs::write(path, &self.cert_pem).map_err(|source| CaError::Write {
            path: path.display().to_string(),
            source,
        })
    }

    /// A rustls server configuration presenting the server certificate,
    /// speaking HTTP/1.1 only (ALPN `http/1.1`).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, CaError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                self.server_chain.clone(),
                PrivateKeyDer::Pkcs8(self.server_key.clone_key()),
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
