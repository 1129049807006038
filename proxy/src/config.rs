//! The proxy's TOML config: [`ProxyConfig`] is the file as written
//! (`deny_unknown_fields` everywhere); [`ProxyConfig::validate`] turns it and
//! the loaded rule sets into the runtime [`Config`], with errors that name the
//! file, the key and what was expected. [`Config::load`] is the I/O edge: it
//! reads the config file and the rule-set files it names.
//!
//! Relative paths are resolved against the config file's directory. The config
//! holds file *paths* of secrets only; reading them is the server's job.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gatehouse_types::{DnsName, IdentityName, TunnelTarget};
use serde::{Deserialize, Serialize};

use crate::limits::Limits;
use crate::path::Vars;
use crate::rules::{Injection, RuleBook, RuleError, RuleSet};

/// Why the config could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The TOML does not parse, or has an unknown key.
    #[error("{file}: {message}")]
    Syntax { file: PathBuf, message: String },
    /// A value is invalid.
    #[error("{file}: `{key}`: {message}")]
    Invalid {
        file: PathBuf,
        key: String,
        message: String,
    },
    /// A rule set is invalid.
    #[error(transparent)]
    Rules(#[from] RuleError),
}

// === file format ===

/// The config file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    pub ca: CaFile,
    pub audit: AuditFile,
    #[serde(default)]
    pub admin: Option<AdminFile>,
    /// Where sockets of identities created through the admin API go.
    pub identity_socket_dir: PathBuf,
    /// The file that keeps identities created through the admin API (and
    /// what they created) across restarts; none: they die with the process.
    #[serde(default)]
    pub identity_state: Option<PathBuf>,
    /// Rule-set files, and directories whose `*.toml` files are all loaded.
    #[serde(default)]
    pub rule_set_files: Vec<PathBuf>,
    #[serde(default)]
    pub rule_set_dirs: Vec<PathBuf>,
    #[serde(default)]
    pub credentials: BTreeMap<String, CredentialFile>,
    #[serde(default, rename = "identity")]
    pub identities: Vec<IdentityFile>,
    /// Per-host upstream overrides (tests, GitHub Enterprise).
    #[serde(default)]
    pub upstream: BTreeMap<String, UpstreamFile>,
    /// What one identity may hold (connections, requests, timeouts).
    #[serde(default)]
    pub limits: Limits,
    /// Where the Prometheus metrics are served (a loopback port); none:
    /// not served.
    #[serde(default)]
    pub metrics: Option<gatehouse_types::metrics::MetricsListen>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaFile {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditFile {
    pub path: PathBuf,
    /// Start a new file once the current one holds this many bytes.
    #[serde(default)]
    pub rotate_bytes: Option<u64>,
    /// ... or once it is this many seconds old.
    #[serde(default)]
    pub rotate_secs: Option<u64>,
    /// Rotated files kept; older ones are removed (default: all kept).
    #[serde(default)]
    pub keep_files: Option<u64>,
    /// How long an ordinary record may wait to be synced, in ms
    /// ([`crate::server::audit_writer::sync_window`]).
    #[serde(default)]
    pub sync_window_ms: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    pub socket: PathBuf,
}

/// Serializable too: `gatehouse up` writes the proxy's config from its own,
/// which names credentials the same way.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CredentialFile {
    GithubToken {
        token_file: PathBuf,
        /// Lets GraphQL rules use this token although it is not scoped to
        /// the identity's repository (see [`Credential::GithubToken`]).
        #[serde(default)]
        dangerously_allow_unscoped_graphql: bool,
    },
    GithubApp {
        app_id: u64,
        private_key_file: PathBuf,
        installation_id: u64,
    },
    FeishuApp {
        app_id: String,
        app_secret_file: PathBuf,
        base_url: String,
    },
    Bearer {
        key_file: PathBuf,
    },
}

impl CredentialFile {
    /// The file holding this credential's secret: every kind has exactly one.
    pub fn secret_file(&self) -> &Path {
        match self {
            CredentialFile::GithubToken { token_file, .. } => token_file,
            CredentialFile::GithubApp {
                private_key_file, ..
            } => private_key_file,
            CredentialFile::FeishuApp {
                app_secret_file, ..
            } => app_secret_file,
            CredentialFile::Bearer { key_file } => key_file,
        }
    }

    /// The same, to rewrite (resolve a relative path).
    pub fn secret_file_mut(&mut self) -> &mut PathBuf {
        match self {
            CredentialFile::GithubToken { token_file, .. } => token_file,
            CredentialFile::GithubApp {
                private_key_file, ..
            } => private_key_file,
            CredentialFile::FeishuApp {
                app_secret_file, ..
            } => app_secret_file,
            CredentialFile::Bearer { key_file } => key_file,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityFile {
    pub name: String,
    /// Defaults to `<identity_socket_dir>/<name>.sock`.
    pub socket: Option<PathBuf>,
    pub rule_sets: Vec<String>,
    #[serde(default)]
    pub tunnel_hosts: Vec<String>,
    #[serde(default)]
    pub variables: Vars,
    /// The one user (uid) whose connections the socket admits, checked by
    /// the peer's credentials (SO_PEERCRED; root is admitted too), beside
    /// the socket's modes. Unset: whoever can reach the socket.
    #[serde(default)]
    pub peer_uid: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamFile {
    /// `https://host[:port]`, no path.
    pub url: String,
    /// An extra CA to trust for this upstream, on top of the system roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

// === runtime types ===

/// The validated config.
#[derive(Debug, Clone)]
pub struct Config {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub credentials: BTreeMap<String, Credential>,
    pub rule_book: RuleBook,
    pub identities: Vec<StaticIdentity>,
    pub upstreams: BTreeMap<String, UpstreamAddress>,
    pub audit_path: PathBuf,
    pub audit_rotation: crate::audit::Rotation,
    /// How long an ordinary record may wait to be synced.
    pub audit_sync_window: std::time::Duration,
    pub admin_socket: Option<PathBuf>,
    pub identity_socket_dir: PathBuf,
    pub identity_state: Option<PathBuf>,
    pub limits: Limits,
    /// The loopback address of the metrics, when served.
    pub metrics: Option<std::net::SocketAddr>,
}

/// A credential: its kind and where its secret lives. Paths only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A personal access token read from a file. It reaches whatever its
    /// owner can, not only the identity's repository: a GraphQL document
    /// can walk from the pinned repository to any other
    /// (`repository { owner { repository(name: …) } }`), so GraphQL rules
    /// refuse it unless `unscoped_graphql` (the config's
    /// `dangerously_allow_unscoped_graphql`) says so.
    GithubToken {
        token_file: PathBuf,
        unscoped_graphql: bool,
    },
    /// A GitHub App; the proxy mints installation tokens.
    GithubApp {
        app_id: u64,
        private_key_file: PathBuf,
        installation_id: u64,
    },
    /// A Feishu app; the proxy fetches the tenant_access_token.
    FeishuApp {
        app_id: String,
        app_secret_file: PathBuf,
        base_url: String,
    },
    /// A static bearer key read from a file (e.g. a model API).
    Bearer { key_file: PathBuf },
}

impl Credential {
    /// Whether this credential can be injected the way a rule says.
    pub fn supports(&self, injection: Injection) -> bool {
        matches!(
            (self, injection),
            (
                Credential::GithubToken { .. } | Credential::GithubApp { .. },
                Injection::Bearer | Injection::GitBasic
            ) | (Credential::Bearer { .. }, Injection::Bearer)
                | (Credential::FeishuApp { .. }, Injection::FeishuTenant)
                | (Credential::GithubApp { .. }, Injection::GithubAppJwt)
        )
    }

    /// Whether GraphQL rules may use it: its tokens are scoped to the
    /// identity's repository (App installation tokens), or the config
    /// accepted that they are not.
    fn scopes_graphql(&self) -> bool {
        match self {
            Credential::GithubToken {
                unscoped_graphql, ..
            } => *unscoped_graphql,
            _ => true,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Credential::GithubToken { .. } => "github_token",
            Credential::GithubApp { .. } => "github_app",
            Credential::FeishuApp { .. } => "feishu_app",
            Credential::Bearer { .. } => "bearer",
        }
    }
}

/// An identity the config defines, started with the proxy; identities
/// created through the admin API are checked with [`check_identity`] and
/// get the same shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticIdentity {
    pub name: String,
    pub socket: PathBuf,
    pub rule_sets: Vec<String>,
    pub tunnel_hosts: Vec<String>,
    pub variables: Vars,
    /// The one user it admits, when set (`peer_uid`).
    pub peer_uid: Option<u32>,
}

/// Where to send requests for one host instead of resolving it (the
/// server's [`crate::upstream::UpstreamOverride`] is built from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamAddress {
    /// `host:port` to connect to; the certificate is still verified for the
    /// original host name.
    pub authority: String,
    pub ca_file: Option<PathBuf>,
}

impl Config {
    /// The warnings `gatehouse proxy` gives at start: each rule set out of
    /// use for want of a credential, and each `github_token` credential
    /// opted in to GraphQL rules it cannot scope.
    pub fn warnings(&self) -> Vec<String> {
        let withdrawn = self.rule_book.withdrawn().map(|(name, why)| {
            format!("rule set `{name}` is not in use ({why}): an identity naming it is refused")
        });
        let unscoped = self
            .credentials
            .iter()
            .filter(|(_, c)| {
                matches!(
                    c,
                    Credential::GithubToken {
                        unscoped_graphql: true,
                        ..
                    }
                )
            })
            .map(|(name, _)| {
                format!(
                    "credential `{name}` is a github_token with dangerously_allow_unscoped_graphql: \
                     GraphQL rules pin only root fields to the identity's repository, and this token \
                     lets a query walk from there to every repository it can read"
                )
            });
        withdrawn.chain(unscoped).collect()
    }

    /// Read and validate the config at `path` and the rule sets it names.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read(path)?;
        let file = ProxyConfig::parse(path, &text)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut sets = Vec::new();
        for rule_path in file.rule_set_paths(base)? {
            let text = read(&rule_path)?;
            sets.push(RuleSet::parse(&rule_path.display().to_string(), &text)?);
        }
        file.validate(path, sets)
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

impl ProxyConfig {
    /// Parse the TOML; `file` names it in errors.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.to_owned(),
            message: e.to_string(),
        })
    }

    /// The rule-set files to load: the listed files, then each listed
    /// directory's `*.toml` files in name order.
    pub fn rule_set_paths(&self, base: &Path) -> Result<Vec<PathBuf>, ConfigError> {
        let mut paths: Vec<PathBuf> = self.rule_set_files.iter().map(|p| base.join(p)).collect();
        for dir in &self.rule_set_dirs {
            let dir = base.join(dir);
            let entries = std::fs::read_dir(&dir).map_err(|source| ConfigError::Read {
                path: dir.clone(),
                source,
            })?;
            let mut found = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| ConfigError::Read {
                    path: dir.clone(),
                    source,
                })?;
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "toml") {
                    found.push(path);
                }
            }
            found.sort();
            paths.extend(found);
        }
        Ok(paths)
    }

    /// Validate into the runtime config. `file` is the config's path: errors
    /// name it, and relative paths are resolved against its directory. One
    /// validator per section, in the order a reader meets them.
    pub fn validate(self, file: &Path, rule_sets: Vec<RuleSet>) -> Result<Config, ConfigError> {
        let cx = Context {
            file,
            base: file.parent().unwrap_or(Path::new(".")),
        };
        validate_rule_set_sources(&cx, &self.rule_set_files, &self.rule_set_dirs)?;
        let (ca_cert, ca_key) = validate_ca(&cx, &self.ca)?;
        let credentials = validate_credentials(&cx, self.credentials)?;
        validate_rule_credentials(&cx, &rule_sets, &credentials)?;
        let mut rule_book = RuleBook::new(rule_sets)?;
        for (name, why) in sets_without_credentials(&rule_book, &credentials) {
            rule_book.withdraw(&name, why);
        }
        let identity_socket_dir = cx.resolve(&self.identity_socket_dir);
        let identities =
            validate_identities(&cx, self.identities, &rule_book, &identity_socket_dir)?;
        let upstreams = validate_upstreams(&cx, self.upstream)?;
        self.limits
            .check()
            .map_err(|message| cx.invalid("limits", message))?;
        if let Some(m) = &self.metrics {
            m.check()
                .map_err(|message| cx.invalid("metrics.listen", message))?;
        }
        Ok(Config {
            ca_cert,
            ca_key,
            credentials,
            rule_book,
            identities,
            upstreams,
            audit_path: cx.resolve(&self.audit.path),
            audit_rotation: crate::audit::Rotation::new(
                self.audit.rotate_bytes,
                self.audit.rotate_secs,
                self.audit.keep_files,
            )
            .map_err(|(key, message)| cx.invalid(&format!("audit.{key}"), message))?,
            audit_sync_window: crate::server::audit_writer::sync_window(self.audit.sync_window_ms)
                .map_err(|message| cx.invalid("audit.sync_window_ms", message))?,
            admin_socket: self.admin.map(|a| cx.resolve(&a.socket)),
            identity_socket_dir,
            identity_state: self.identity_state.map(|p| cx.resolve(&p)),
            limits: self.limits,
            metrics: self.metrics.map(|m| m.listen),
        })
    }
}

// === one validator per section ===

/// What every section's validator needs: the config file, which errors
/// name, and its directory, against which relative paths resolve.
struct Context<'a> {
    file: &'a Path,
    base: &'a Path,
}

impl Context<'_> {
    fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_owned(),
            key: key.to_owned(),
            message,
        }
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        self.base.join(path)
    }
}

/// `rule_set_files` / `rule_set_dirs`: at least one of them.
fn validate_rule_set_sources(
    cx: &Context,
    files: &[PathBuf],
    dirs: &[PathBuf],
) -> Result<(), ConfigError> {
    if files.is_empty() && dirs.is_empty() {
        return Err(cx.invalid(
            "rule_set_files",
            "expected at least one rule-set file or directory (`rule_set_dirs`)".into(),
        ));
    }
    Ok(())
}

/// `[ca]`: the certificate and key paths, which must differ.
fn validate_ca(cx: &Context, ca: &CaFile) -> Result<(PathBuf, PathBuf), ConfigError> {
    let ca_cert = cx.resolve(&ca.cert);
    let ca_key = cx.resolve(&ca.key);
    if ca_cert == ca_key {
        return Err(cx.invalid("ca.key", "must be a different file from ca.cert".into()));
    }
    Ok((ca_cert, ca_key))
}

/// `[credentials.<name>]`: names, and each credential's kind-specific keys.
fn validate_credentials(
    cx: &Context,
    raw: BTreeMap<String, CredentialFile>,
) -> Result<BTreeMap<String, Credential>, ConfigError> {
    let mut credentials = BTreeMap::new();
    for (name, credential) in raw {
        let key = format!("credentials.{name}");
        if !is_credential_name(&name) {
            return Err(cx.invalid(&key, "a credential name is [A-Za-z0-9_-]+".into()));
        }
        credentials.insert(name, validate_credential(cx, &key, credential)?);
    }
    Ok(credentials)
}

fn validate_credential(
    cx: &Context,
    key: &str,
    credential: CredentialFile,
) -> Result<Credential, ConfigError> {
    Ok(match credential {
        CredentialFile::GithubToken {
            token_file,
            dangerously_allow_unscoped_graphql,
        } => Credential::GithubToken {
            token_file: cx.resolve(&token_file),
            unscoped_graphql: dangerously_allow_unscoped_graphql,
        },
        CredentialFile::GithubApp {
            app_id,
            private_key_file,
            installation_id,
        } => Credential::GithubApp {
            app_id,
            private_key_file: cx.resolve(&private_key_file),
            installation_id,
        },
        CredentialFile::FeishuApp {
            app_id,
            app_secret_file,
            base_url,
        } => {
            check_https_origin(&base_url).map_err(|m| cx.invalid(&format!("{key}.base_url"), m))?;
            if app_id.is_empty() {
                return Err(cx.invalid(
                    &format!("{key}.app_id"),
                    "expected the app id (cli_…)".into(),
                ));
            }
            Credential::FeishuApp {
                app_id,
                app_secret_file: cx.resolve(&app_secret_file),
                base_url: base_url.trim_end_matches('/').to_owned(),
            }
        }
        CredentialFile::Bearer { key_file } => Credential::Bearer {
            key_file: cx.resolve(&key_file),
        },
    })
}

/// The sets (`extends` resolved) some rule of which needs a credential the
/// config does not define, each with why. They are withdrawn, not an error:
/// a deployment that uses GitHub alone loads the shipped rule-set directory
/// without defining Feishu or model credentials, is warned at start, and an
/// identity that names such a set is refused with the reason.
pub fn sets_without_credentials(
    book: &RuleBook,
    credentials: &BTreeMap<String, Credential>,
) -> Vec<(String, String)> {
    book.names()
        .filter_map(|name| {
            let set = book.get(name)?;
            if let Some(rule) = set
                .rules
                .iter()
                .find(|r| !credentials.contains_key(&r.credential))
            {
                return Some((
                    name.to_owned(),
                    format!(
                        "rule `{}` uses credential `{}`, which is not defined in [credentials]",
                        rule.name, rule.credential
                    ),
                ));
            }
            // The App's own endpoints need an App: a deployment with a
            // personal token loads the shipped directory all the same.
            let rule = set.rules.iter().find(|r| needs_an_app(r, credentials))?;
            Some((
                name.to_owned(),
                format!(
                    "rule `{}` injects an App JWT, which credential `{}` (not a github_app) cannot sign",
                    rule.name, rule.credential
                ),
            ))
        })
        .collect()
}

/// Whether `rule` injects an App JWT with a credential that is not an App.
fn needs_an_app(rule: &crate::rules::Rule, credentials: &BTreeMap<String, Credential>) -> bool {
    rule.inject == Injection::GithubAppJwt
        && !matches!(
            credentials.get(&rule.credential),
            Some(Credential::GithubApp { .. })
        )
}

/// Every rule of every loaded set that names a defined credential names
/// one of a fitting kind (sets naming an undefined one are withdrawn:
/// [`sets_without_credentials`]).
fn validate_rule_credentials(
    cx: &Context,
    rule_sets: &[RuleSet],
    credentials: &BTreeMap<String, Credential>,
) -> Result<(), ConfigError> {
    for set in rule_sets {
        for rule in &set.rules {
            let Some(credential) = credentials.get(&rule.credential) else {
                continue;
            };
            if needs_an_app(rule, credentials) {
                // Withdrawn instead (`sets_without_credentials`).
                continue;
            }
            if !credential.supports(rule.inject) {
                return Err(cx.invalid(
                    &format!("credentials.{}", rule.credential),
                    format!(
                        "rule set `{}` rule `{}` injects it as {}, which a {} credential cannot do",
                        set.name,
                        rule.name,
                        rule.inject,
                        credential.kind()
                    ),
                ));
            }
            if rule.checks_graphql() && !credential.scopes_graphql() {
                return Err(cx.invalid(
                    &format!("credentials.{}", rule.credential),
                    format!(
                        "rule set `{}` rule `{}` allows GraphQL with this github_token, which is not \
                         scoped to the identity's repository: a query can walk from it to any \
                         repository the token reads. Use a github_app credential (installation \
                         tokens are scoped to the repository), or set \
                         `dangerously_allow_unscoped_graphql = true` on the credential to accept it",
                        set.name, rule.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `[[identity]]`: unique names and sockets, each identity checked against
/// the rule book.
fn validate_identities(
    cx: &Context,
    raw: Vec<IdentityFile>,
    rule_book: &RuleBook,
    identity_socket_dir: &Path,
) -> Result<Vec<StaticIdentity>, ConfigError> {
    let mut identities = Vec::new();
    let mut names = BTreeSet::new();
    let mut sockets = BTreeSet::new();
    for (i, raw) in raw.into_iter().enumerate() {
        let key = |field: &str| format!("identity[{i}].{field}");
        if !names.insert(raw.name.clone()) {
            return Err(cx.invalid(&key("name"), format!("`{}` is defined twice", raw.name)));
        }
        let socket = raw
            .socket
            .map(|s| cx.resolve(&s))
            .unwrap_or_else(|| identity_socket_dir.join(format!("{}.sock", raw.name)));
        if !sockets.insert(socket.clone()) {
            return Err(cx.invalid(
                &key("socket"),
                format!("{} is used twice", socket.display()),
            ));
        }
        let peer_uid = raw.peer_uid;
        let mut identity = check_identity(
            rule_book,
            raw.name,
            socket,
            raw.rule_sets,
            raw.tunnel_hosts,
            raw.variables,
        )
        .map_err(|(field, message)| cx.invalid(&key(field), message))?;
        identity.peer_uid = peer_uid;
        identities.push(identity);
    }
    Ok(identities)
}

/// `[upstream."<host>"]`: a DNS host name and an `https://host[:port]` URL.
fn validate_upstreams(
    cx: &Context,
    raw: BTreeMap<String, UpstreamFile>,
) -> Result<BTreeMap<String, UpstreamAddress>, ConfigError> {
    let mut upstreams = BTreeMap::new();
    for (host, raw) in raw {
        let key = format!("upstream.\"{host}\"");
        check_host(&host).map_err(|m| cx.invalid(&key, m))?;
        let authority =
            check_https_origin(&raw.url).map_err(|m| cx.invalid(&format!("{key}.url"), m))?;
        upstreams.insert(
            host,
            UpstreamAddress {
                authority,
                ca_file: raw.ca_file.map(|p| cx.resolve(&p)),
            },
        );
    }
    Ok(upstreams)
}

/// Validate an identity (from the config or the admin API). On error,
/// returns the offending field (`name`, `rule_sets`, `tunnel_hosts`,
/// `variables`) and a message.
pub fn check_identity(
    rule_book: &RuleBook,
    name: String,
    socket: PathBuf,
    rule_sets: Vec<String>,
    tunnel_hosts: Vec<String>,
    variables: Vars,
) -> Result<StaticIdentity, (&'static str, String)> {
    if !IdentityName::is_valid(&name) {
        return Err((
            "name",
            format!("`{name}`: expected 1 to 64 characters of [A-Za-z0-9_-]"),
        ));
    }
    if rule_sets.is_empty() && tunnel_hosts.is_empty() {
        return Err((
            "rule_sets",
            "an identity needs at least one rule set or tunnel host".into(),
        ));
    }
    rule_book
        .check_identity(&rule_sets, &variables)
        .map_err(|e| match e {
            RuleError::UnknownRuleSet(_) | RuleError::Withdrawn { .. } => {
                ("rule_sets", e.to_string())
            }
            _ => ("variables", e.to_string()),
        })?;
    for host in &tunnel_hosts {
        TunnelTarget::parse(host).map_err(|e| ("tunnel_hosts", e.to_string()))?;
    }
    Ok(StaticIdentity {
        name,
        socket,
        rule_sets,
        tunnel_hosts,
        variables,
        peer_uid: None,
    })
}

fn is_credential_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A host name as every part of gatehouse spells it ([`DnsName`]).
pub fn check_host(host: &str) -> Result<(), String> {
    DnsName::parse(host).map(drop).map_err(|e| e.to_string())
}

/// `https://host[:port]` with nothing after it; returns `host:port`.
fn check_https_origin(url: &str) -> Result<String, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("`{url}`: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "`{url}`: expected an https:// URL (verification is never disabled)"
        ));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("`{url}`: expected a host"))?;
    if authority.as_str().contains('@') {
        return Err(format!("`{url}`: credentials in the URL are not allowed"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!("`{url}`: expected no path or query"));
    }
    Ok(format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(443)
    ))
}

#[cfg(test)]
mod tests;
