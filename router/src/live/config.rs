//! `router.toml`: what `gatehouse router run` reads. The file as written
//! (every table denies unknown keys) is validated into [`RouterConfig`],
//! with relative paths resolved against the file's directory and errors
//! naming the file and the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A mistake in the router's config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read the router config: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    /// Not valid TOML, or an unknown or mistyped key.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// A key holds a value the router does not accept.
    #[error("{file}: `{key}`: expected {expected}")]
    Invalid {
        file: String,
        key: String,
        expected: String,
    },
}

// === The file as written ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    policy: PathBuf,
    state: PathBuf,
    jobs: JobsFile,
    proxy: ProxyFile,
    github: Option<GithubFile>,
    github_poll: Option<GithubPollFile>,
    github_recovery: Option<GithubRecoveryFile>,
    feishu: Option<FeishuFile>,
    model: Option<crate::model::config::ModelFile>,
    metrics: Option<gatehouse_types::metrics::MetricsListen>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GithubPollFile {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default = "default_poll_interval")]
    interval_secs: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GithubRecoveryFile {
    #[serde(default = "default_poll_interval")]
    interval_secs: u64,
}

fn yes() -> bool {
    true
}

fn default_poll_interval() -> u64 {
    DEFAULT_POLL_INTERVAL_SECS
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    socket: PathBuf,
    #[serde(default = "default_deadline")]
    deadline_secs: u64,
}

fn default_deadline() -> u64 {
    3600
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProxyFile {
    ca_cert: PathBuf,
    feishu_socket: Option<PathBuf>,
    #[serde(default)]
    github_sockets: BTreeMap<String, PathBuf>,
    github_app_socket: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GithubFile {
    listen: SocketAddr,
    webhook_secret_files: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FeishuFile {
    listen: Option<SocketAddr>,
    app_id: String,
    encrypt_key_file: Option<PathBuf>,
    verification_token_file: Option<PathBuf>,
    long_connection: Option<LongConnectionFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LongConnectionFile {
    socket: PathBuf,
    peer_uid: u32,
}

// === The runtime config ===

/// The router's live config, validated, every path absolute or relative to
/// the working directory as the file's directory made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// The policy in force.
    pub policy: PathBuf,
    /// The router's SQLite store.
    pub state: PathBuf,
    pub jobs: JobsConfig,
    pub proxy: ProxyConfig,
    pub github: Option<GithubConfig>,
    /// Polling GitHub (`[github_poll]`); `None`: off.
    pub github_poll: Option<GithubPollConfig>,
    /// Asking GitHub to redeliver failed webhooks (`[github_recovery]`);
    /// `None`: off.
    pub github_recovery: Option<GithubRecoveryConfig>,
    pub feishu: Option<FeishuConfig>,
    /// The router's model; `None`: rules-only judge, template replies.
    pub model: Option<crate::model::ModelConfig>,
    /// Where the metrics are served (a loopback port), if at all.
    pub metrics: Option<std::net::SocketAddr>,
}

/// The supervisor's job API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsConfig {
    pub socket: PathBuf,
    /// Each job's deadline.
    pub deadline_secs: u64,
}

/// The router's own proxy identities (sockets; no credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The gatehouse CA the proxy mints its leaves from: the only root the
    /// router's HTTPS client trusts.
    pub ca_cert: PathBuf,
    /// The identity with rule set `router-feishu`.
    pub feishu_socket: Option<PathBuf>,
    /// One identity per team repository (`owner/name`), rule set `router-github`.
    pub github_sockets: BTreeMap<String, PathBuf>,
    /// The identity with rule set `router-github-app` (the GitHub App's
    /// webhook deliveries, for `[github_recovery]`).
    pub github_app_socket: Option<PathBuf>,
}

/// The GitHub webhook listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubConfig {
    pub listen: SocketAddr,
    pub webhook_secret_files: Vec<PathBuf>,
}

/// Polling GitHub: every repository of `[proxy.github_sockets]`, through
/// its identity, every `interval_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GithubPollConfig {
    pub interval_secs: u64,
}

/// Webhook recovery: every `interval_secs`, the App's recent deliveries
/// listed through `[proxy] github_app_socket`, the failed ones the router
/// has not stored asked for again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GithubRecoveryConfig {
    pub interval_secs: u64,
}

/// Seconds between polling rounds unless the config says otherwise.
pub const DEFAULT_POLL_INTERVAL_SECS: u64 = 60;
/// The bounds of `github_poll.interval_secs`.
const POLL_INTERVAL_SECS: std::ops::RangeInclusive<u64> = 1..=3600;

/// Where Feishu's events arrive: an HTTP listener, the long connection's
/// hand-off socket, or both (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeishuConfig {
    pub listen: Option<SocketAddr>,
    pub app_id: String,
    pub encrypt_key_file: Option<PathBuf>,
    pub verification_token_file: Option<PathBuf>,
    /// `[feishu.long_connection]`: also take events over from the
    /// long-connection client (`gatehouse intake feishu-connect`, the
    /// proxy's user, the app secret's only holder) on this socket.
    pub long_connection: Option<crate::intake::HandoffConfig>,
}

/// The longest job deadline the router asks for (a week).
const MAX_DEADLINE_SECS: u64 = 7 * 24 * 3600;

impl RouterConfig {
    /// Reads and validates the config at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: file.clone(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new(""));
        Self::from_toml(&file, &text, base)
    }

    /// Parses and validates config TOML; `file` names it in errors, and
    /// relative paths are taken relative to `base`.
    pub fn from_toml(file: &str, text: &str, base: &Path) -> Result<Self, ConfigError> {
        let raw: File = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        validate(raw, file, base)
    }
}

fn validate(raw: File, file: &str, base: &Path) -> Result<RouterConfig, ConfigError> {
    let invalid = |key: &str, expected: &str| ConfigError::Invalid {
        file: file.to_owned(),
        key: key.to_owned(),
        expected: expected.to_owned(),
    };
    let path = |key: &str, p: PathBuf| -> Result<PathBuf, ConfigError> {
        if p.as_os_str().is_empty() {
            return Err(invalid(key, "a path"));
        }
        Ok(base.join(p))
    };
    if raw.jobs.deadline_secs == 0 || raw.jobs.deadline_secs > MAX_DEADLINE_SECS {
        return Err(invalid(
            "jobs.deadline_secs",
            "seconds between 1 and 604800 (a week)",
        ));
    }
    let mut github_sockets = BTreeMap::new();
    for (repo, socket) in raw.proxy.github_sockets {
        let key = format!("proxy.github_sockets.\"{repo}\"");
        if !is_repo(&repo) {
            return Err(invalid(&key, "a repository written owner/name"));
        }
        github_sockets.insert(repo, path(&key, socket)?);
    }
    let github = match raw.github {
        None => None,
        Some(g) => {
            if g.webhook_secret_files.is_empty() {
                return Err(invalid(
                    "github.webhook_secret_files",
                    "at least one file holding a webhook secret",
                ));
            }
            let files = g
                .webhook_secret_files
                .into_iter()
                .map(|f| path("github.webhook_secret_files", f))
                .collect::<Result<_, _>>()?;
            Some(GithubConfig {
                listen: g.listen,
                webhook_secret_files: files,
            })
        }
    };
    let github_poll = match raw.github_poll {
        Some(p) if p.enabled => {
            if !POLL_INTERVAL_SECS.contains(&p.interval_secs) {
                return Err(invalid(
                    "github_poll.interval_secs",
                    "seconds between 1 and 3600",
                ));
            }
            if github_sockets.is_empty() {
                return Err(invalid(
                    "github_poll",
                    "[proxy.github_sockets] naming the repositories to poll (none is named)",
                ));
            }
            Some(GithubPollConfig {
                interval_secs: p.interval_secs,
            })
        }
        _ => None,
    };
    let github_app_socket = raw
        .proxy
        .github_app_socket
        .map(|p| path("proxy.github_app_socket", p))
        .transpose()?;
    let github_recovery = match raw.github_recovery {
        None => None,
        Some(r) => {
            if !POLL_INTERVAL_SECS.contains(&r.interval_secs) {
                return Err(invalid(
                    "github_recovery.interval_secs",
                    "seconds between 1 and 3600",
                ));
            }
            if github_app_socket.is_none() {
                return Err(invalid(
                    "github_recovery",
                    "[proxy] github_app_socket: the router's identity with rule set router-github-app",
                ));
            }
            Some(GithubRecoveryConfig {
                interval_secs: r.interval_secs,
            })
        }
    };
    let feishu = match raw.feishu {
        None => None,
        Some(f) => {
            if f.encrypt_key_file.is_none() && f.verification_token_file.is_none() {
                return Err(invalid(
                    "feishu",
                    "encrypt_key_file or verification_token_file (or both): events must be verified",
                ));
            }
            if !f.app_id.starts_with("cli_") {
                return Err(invalid("feishu.app_id", "a Feishu app id (cli_…)"));
            }
            if f.listen.is_none() && f.long_connection.is_none() {
                return Err(invalid(
                    "feishu",
                    "listen, [feishu.long_connection] or both: events must arrive somehow",
                ));
            }
            Some(FeishuConfig {
                listen: f.listen,
                app_id: f.app_id,
                encrypt_key_file: f
                    .encrypt_key_file
                    .map(|p| path("feishu.encrypt_key_file", p))
                    .transpose()?,
                verification_token_file: f
                    .verification_token_file
                    .map(|p| path("feishu.verification_token_file", p))
                    .transpose()?,
                long_connection: f
                    .long_connection
                    .map(|l| {
                        Ok::<_, ConfigError>(crate::intake::HandoffConfig {
                            socket: path("feishu.long_connection.socket", l.socket)?,
                            peer_uid: l.peer_uid,
                        })
                    })
                    .transpose()?,
            })
        }
    };
    if let (Some(g), Some(f)) = (&github, &feishu) {
        if Some(g.listen) == f.listen && g.listen.port() != 0 {
            return Err(invalid(
                "feishu.listen",
                "an address other than github.listen (one source per listener)",
            ));
        }
    }
    let model = match raw.model {
        None => None,
        Some(m) => Some(
            m.validate(|key, p| {
                if p.as_os_str().is_empty() {
                    return Err((key.to_owned(), "a path".to_owned()));
                }
                Ok(crate::model::config::resolve(base, p))
            })
            .map_err(|(key, expected)| invalid(&key, &expected))?,
        ),
    };
    if let Some(m) = &raw.metrics {
        m.check().map_err(|e| invalid("metrics.listen", &e))?;
    }
    Ok(RouterConfig {
        metrics: raw.metrics.map(|m| m.listen),
        model,
        policy: path("policy", raw.policy)?,
        state: path("state", raw.state)?,
        jobs: JobsConfig {
            socket: path("jobs.socket", raw.jobs.socket)?,
            deadline_secs: raw.jobs.deadline_secs,
        },
        proxy: ProxyConfig {
            ca_cert: path("proxy.ca_cert", raw.proxy.ca_cert)?,
            feishu_socket: raw
                .proxy
                .feishu_socket
                .map(|p| path("proxy.feishu_socket", p))
                .transpose()?,
            github_sockets,
            github_app_socket,
        },
        github,
        github_poll,
        github_recovery,
        feishu,
    })
}

/// `owner/name`, each part non-empty and of GitHub's characters.
fn is_repo(s: &str) -> bool {
    let ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!(s.split_once('/'), Some((o, n)) if ok(o) && ok(n))
}

#[cfg(test)]
mod tests;
