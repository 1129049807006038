//! Assembles a running proxy from a validated [`Config`]: the CA, the
//! upstream policy, the credentials, the audit writer, the static
//! identities and the admin socket.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::admin::{self, AdminError};
use crate::audit::{AuditError, AuditLog};
use crate::ca::{CaError, CertificateAuthority};
use crate::config::{Config, Credential};
use crate::credentials::{CredentialError, CredentialSpec, Credentials};
use crate::server::audit_writer::AuditWriter;
use crate::server::{IdentityError, IdentitySpec, Proxy, ProxyParts};
use crate::upstream::{UpstreamError, UpstreamOverride, Upstreams};

/// GitHub's REST API, where App installation tokens are minted (an upstream
/// override for `api.github.com` redirects it like any other call).
const GITHUB_API: &str = "https://api.github.com";

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error("starting the audit writer: {0}")]
    AuditThread(std::io::Error),
    #[error("identity {name}: {source}")]
    Identity {
        name: String,
        #[source]
        source: IdentityError,
    },
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// The saved identities could not be read.
    #[error(transparent)]
    Restore(#[from] crate::server::persist::PersistError),
    /// A static identity's socket would sit in a directory others may
    /// enter: anyone there could speak as that identity.
    #[error(
        "identity {name}: the directory of its socket, {dir}, is mode {mode:04o}: others may \
         enter it and speak as this identity; make it 0700 (the proxy's user) or 0750 (and \
         give its group to the one intended peer)"
    )]
    OpenSocketDir {
        name: String,
        dir: std::path::PathBuf,
        mode: u32,
    },
}

/// A started proxy.
pub struct Running {
    pub proxy: Arc<Proxy>,
    admin: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops serving: the admin socket closes and every identity is closed
    /// (sockets removed, connections cut); saved identities stay saved.
    pub async fn stop(self, config: &Config) {
        if let Some(admin) = self.admin {
            admin.abort();
        }
        if let Some(path) = &config.admin_socket {
            let _ = std::fs::remove_file(path);
        }
        self.proxy.shutdown().await;
    }
}

/// The credential specs of a config (paths only; secrets are read later).
pub fn credential_specs(config: &Config) -> BTreeMap<String, CredentialSpec> {
    config
        .credentials
        .iter()
        .map(|(name, credential)| {
            let spec = match credential {
                Credential::GithubToken { token_file, .. } => CredentialSpec::GithubToken {
                    token_file: token_file.clone(),
                },
                Credential::Bearer { key_file } => CredentialSpec::Bearer {
                    key_file: key_file.clone(),
                },
                Credential::FeishuApp {
                    app_id,
                    app_secret_file,
                    base_url,
                } => CredentialSpec::FeishuApp {
                    app_id: app_id.clone(),
                    app_secret_file: app_secret_file.clone(),
                    base_url: base_url.clone(),
                },
                Credential::GithubApp {
                    app_id,
                    private_key_file,
                    installation_id,
                } => CredentialSpec::GithubApp {
                    app_id: app_id.to_string(),
                    private_key_file: private_key_file.clone(),
                    installation_id: *installation_id,
                    api_url: GITHUB_API.into(),
                },
            };
            (name.clone(), spec)
        })
        .collect()
}

/// A static identity's socket is 0666 (a sandbox's worker reaches it through
/// a bind mount, whatever its uid), so its directory is the lock: refused
/// when others may search it. A missing directory is left to the bind,
/// which fails with its own error.
fn check_socket_dir(name: &str, socket: &std::path::Path) -> Result<(), StartError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = socket.parent().unwrap_or(std::path::Path::new("."));
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    let mode = meta.permissions().mode() & 0o7777;
    if dir_lets_others_in(mode) {
        return Err(StartError::OpenSocketDir {
            name: name.to_owned(),
            dir: dir.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Whether a directory of `mode` grants users other than its owner and
/// group anything (search is what a connect by path needs; listing or
/// writing is refused as well: there is no reason for either).
pub fn dir_lets_others_in(mode: u32) -> bool {
    mode & 0o007 != 0
}

/// Starts the proxy described by `config` (inside a tokio runtime).
pub fn start(config: &Config) -> Result<Running, StartError> {
    // Before anything is opened: the budget is split from the limit in force.
    crate::limits::raise_descriptor_limit();
    let ca = CertificateAuthority::load_or_generate(&config.ca_cert, &config.ca_key)?;
    let overrides: Vec<UpstreamOverride> = config
        .upstreams
        .iter()
        .map(|(host, o)| UpstreamOverride {
            host: host.clone(),
            url: format!("https://{}", o.authority),
            ca_file: o.ca_file.clone(),
        })
        .collect();
    let upstreams = Upstreams::new(&overrides)?;
    let credentials = Credentials::load(&credential_specs(config), &upstreams)?;
    let audit = AuditWriter::start_with(
        AuditLog::open_rotating(
            &config.audit_path,
            config.audit_rotation,
            &crate::audit::now_rfc3339(),
        )?,
        config.audit_sync_window,
    )
    .map_err(StartError::AuditThread)?;
    let proxy = Proxy::new(ProxyParts {
        ca: Arc::new(ca),
        upstreams,
        policy: Arc::new(config.rule_book.clone()),
        credentials: Arc::new(credentials),
        audit,
        socket_dir: config.identity_socket_dir.clone(),
        limits: config.limits,
    })
    .map_err(|source| StartError::Identity {
        name: "(identity socket dir)".into(),
        source,
    })?;
    for identity in &config.identities {
        check_socket_dir(&identity.name, &identity.socket)?;
        proxy
            .add_identity(IdentitySpec {
                name: identity.name.clone(),
                rule_sets: identity.rule_sets.clone(),
                tunnel_hosts: identity.tunnel_hosts.clone(),
                variables: identity.variables.clone(),
                socket: Some(identity.socket.clone()),
                peer_uid: identity.peer_uid,
            })
            .map_err(|source| StartError::Identity {
                name: identity.name.clone(),
                source,
            })?;
    }
    // Before the admin socket: the supervisor's first call after a restart
    // finds the identities of its running jobs in place.
    if let Some(path) = &config.identity_state {
        let restored = proxy.restore_identities(path)?;
        if !restored.is_empty() {
            tracing::info!(
                count = restored.len(),
                "identities of the admin API restored"
            );
        }
    }
    let admin = match &config.admin_socket {
        Some(path) => Some(admin::serve(proxy.clone(), path)?),
        None => None,
    };
    Ok(Running { proxy, admin })
}

#[cfg(test)]
mod tests {
    use super::dir_lets_others_in;

    #[test]
    fn socket_dir_modes() {
        for (mode, open) in [
            (0o700, false),
            (0o750, false),
            (0o770, false),
            (0o740, false),
            (0o704, true),
            (0o701, true),
            (0o711, true),
            (0o755, true),
            (0o777, true),
            (0o1777, true),
        ] {
            assert_eq!(dir_lets_others_in(mode), open, "{mode:o}");
        }
    }
}
