//! `gatehouse.toml`, the one file `gatehouse up` and `gatehouse config
//! check` read: [`UpFile`] is the file as written (`deny_unknown_fields`
//! everywhere). Credentials and upstream overrides are the proxy's own
//! types, so they mean exactly what they mean in `proxy.toml`.
//! [`UpFile::parse`] reads it and makes every path absolute against the
//! file's directory; the layout and the parts' configs derive from it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gatehouse_proxy::config::{CredentialFile, UpstreamFile};
use serde::Deserialize;

use super::UpError;

/// Where state lives when the file names no `state_dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gatehouse";
/// Where sockets live when the file names no `run_dir`.
pub const DEFAULT_RUN_DIR: &str = "/run/gatehouse";
/// The proxy's account when run as root.
pub const DEFAULT_PROXY_USER: &str = "gatehouse-proxy";
/// The router's account when run as root.
pub const DEFAULT_ROUTER_USER: &str = "gatehouse-router";
/// A job's deadline when the file names none.
pub const DEFAULT_DEADLINE_SECS: u64 = 3600;

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpFile {
    /// The router's policy (teams, people, repositories).
    pub policy: PathBuf,
    /// Sandbox profiles, looked up by the name a repository's scope gives.
    pub profiles_dir: PathBuf,
    /// Proxy rule sets (`*.toml`), the teams' and the router's.
    pub rule_sets_dir: PathBuf,
    /// Worker prompts (`work.md`, `team/<team>.md`).
    pub prompts_dir: PathBuf,
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    #[serde(default = "default_run_dir")]
    pub run_dir: PathBuf,
    /// The proxy's account (as root); it alone reads the credentials.
    #[serde(default = "default_proxy_user")]
    pub proxy_user: String,
    /// The router's account (as root); it holds no credential.
    #[serde(default = "default_router_user")]
    pub router_user: String,
    /// API credentials, as in the proxy's `[credentials.<name>]`.
    #[serde(default)]
    pub credentials: BTreeMap<String, CredentialFile>,
    /// The GitHub webhook listener, if GitHub is a source.
    #[serde(default)]
    pub github: Option<GithubSource>,
    /// Polling GitHub (the router's `[github_poll]`), if configured: for a
    /// deployment without a public URL, or as backfill beside webhooks.
    #[serde(default)]
    pub github_poll: Option<GithubPoll>,
    /// The Feishu event listener, if Feishu is a source.
    #[serde(default)]
    pub feishu: Option<FeishuSource>,
    /// Per-host upstream overrides (emulators, GitHub Enterprise), as in
    /// the proxy's `[upstream."<host>"]`.
    #[serde(default)]
    pub upstream: BTreeMap<String, UpstreamFile>,
    #[serde(default)]
    pub jobs: JobsFile,
    /// The proxy's audit log: rotation and retention.
    #[serde(default)]
    pub audit: AuditSection,
    /// Prometheus metrics per part (off unless given).
    #[serde(default)]
    pub metrics: MetricsSection,
}

/// `[metrics]`: the loopback address each part serves `/metrics` on; a
/// part not named serves none.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    pub proxy: Option<SocketAddr>,
    pub supervisor: Option<SocketAddr>,
    pub router: Option<SocketAddr>,
}

impl MetricsSection {
    /// Each part's address, with its key.
    pub fn parts(&self) -> [(&'static str, Option<SocketAddr>); 3] {
        [
            ("metrics.proxy", self.proxy),
            ("metrics.supervisor", self.supervisor),
            ("metrics.router", self.router),
        ]
    }
}

/// `[audit]`: when the proxy's audit log moves to a new file, how many
/// old files it keeps, how long a record may wait to be synced; the
/// proxy's `[audit]` keys, passed through. None set: one file, never
/// rotated, nothing removed, synced within 100 ms.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Start a new file once the current one holds this many bytes.
    pub rotate_bytes: Option<u64>,
    /// ... or once it is this many seconds old.
    pub rotate_secs: Option<u64>,
    /// Rotated files kept; older ones are removed (default: all kept).
    pub keep_files: Option<u64>,
    /// How long an ordinary record may wait to be synced, in ms.
    pub sync_window_ms: Option<u64>,
}

impl AuditSection {
    /// The proxy's own check (one definition of what is valid), keyed
    /// as this file spells it (`audit.rotate_bytes`, …).
    pub fn rotation(&self) -> Result<gatehouse_proxy::audit::Rotation, (String, String)> {
        gatehouse_proxy::audit::Rotation::new(self.rotate_bytes, self.rotate_secs, self.keep_files)
            .map_err(|(key, message)| (format!("audit.{key}"), message))
    }

    /// The proxy's check of `sync_window_ms`.
    pub fn sync_window(&self) -> Result<std::time::Duration, (String, String)> {
        gatehouse_proxy::server::audit_writer::sync_window(self.sync_window_ms)
            .map_err(|message| ("audit.sync_window_ms".to_owned(), message))
    }
}

/// `[github]`: where webhooks arrive and the secrets that sign them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubSource {
    pub listen: SocketAddr,
    /// One or more (rotation); read by the router, which verifies.
    pub webhook_secret_files: Vec<PathBuf>,
}

/// `[github_poll]`: passed to the router's config as it is (the router
/// validates it: `interval_secs` 1..3600, default 60; `enabled` default true).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubPoll {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub interval_secs: Option<u64>,
}

/// `[feishu]`: where events arrive, the app, and its verification secrets.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeishuSource {
    /// The event subscription's HTTP listener (a public URL's backend).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Also (or instead) take events over Feishu's long connection, for an
    /// app without a public URL: `up` runs `gatehouse intake
    /// feishu-connect` as the proxy's user with the app's `feishu_app`
    /// credential, handing events to the router.
    #[serde(default)]
    pub long_connection: bool,
    pub app_id: String,
    #[serde(default)]
    pub encrypt_key_file: Option<PathBuf>,
    #[serde(default)]
    pub verification_token_file: Option<PathBuf>,
}

/// A `feishu_app` credential's parts the long connection needs.
#[derive(Debug, Clone, Copy)]
pub struct FeishuApp<'a> {
    pub app_secret_file: &'a Path,
    pub base_url: &'a str,
}

/// `[jobs]`: what the supervisor runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobsFile {
    /// A job's deadline, as the router asks for it.
    pub deadline_secs: u64,
    /// Jobs running at once; more wait queued.
    pub max_running_jobs: Option<usize>,
    /// The worker command, when the profiles name none.
    pub worker_command: Option<Vec<String>>,
    /// `FIRST-LAST`: host uids leased one per live sandbox (as root); the
    /// supervisor's `[sandbox] worker_uids`.
    pub worker_uids: Option<String>,
}

impl Default for JobsFile {
    fn default() -> Self {
        JobsFile {
            deadline_secs: DEFAULT_DEADLINE_SECS,
            max_running_jobs: None,
            worker_command: None,
            worker_uids: None,
        }
    }
}

fn default_state_dir() -> PathBuf {
    DEFAULT_STATE_DIR.into()
}
fn default_run_dir() -> PathBuf {
    DEFAULT_RUN_DIR.into()
}
fn default_proxy_user() -> String {
    DEFAULT_PROXY_USER.into()
}
fn default_router_user() -> String {
    DEFAULT_ROUTER_USER.into()
}

impl UpFile {
    /// Every secret file the deployment names: the credentials (the
    /// proxy's) and the sources' verification secrets (the router's).
    pub fn secret_files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.credentials.values().map(|c| c.secret_file()).collect();
        if let Some(github) = &self.github {
            files.extend(github.webhook_secret_files.iter().map(PathBuf::as_path));
        }
        if let Some(feishu) = &self.feishu {
            files.extend(feishu.encrypt_key_file.as_deref());
            files.extend(feishu.verification_token_file.as_deref());
        }
        files
    }

    /// The `feishu_app` credential of `app_id`, if one is configured.
    pub fn feishu_app(&self, app_id: &str) -> Option<FeishuApp<'_>> {
        self.credentials.values().find_map(|c| match c {
            CredentialFile::FeishuApp {
                app_id: id,
                app_secret_file,
                base_url,
            } if id == app_id => Some(FeishuApp {
                app_secret_file,
                base_url,
            }),
            _ => None,
        })
    }

    /// Where the long connection goes for Feishu at `base_url`: the
    /// address and CA of its `[upstream."<host>"]` override (an emulator,
    /// a test), if any. The connect process names an address, not a host:
    /// an override must give an IP address and port.
    pub fn long_connection_target(
        &self,
        base_url: &str,
    ) -> Result<Option<(SocketAddr, Option<&Path>)>, String> {
        let host = base_url
            .strip_prefix("https://")
            .map(|rest| rest.split(['/', ':']).next().unwrap_or(""))
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("the feishu_app base_url `{base_url}` is not https://host"))?;
        let Some(upstream) = self.upstream.get(host) else {
            return Ok(None);
        };
        let addr = upstream
            .url
            .strip_prefix("https://")
            .and_then(|rest| rest.trim_end_matches('/').parse::<SocketAddr>().ok())
            .ok_or_else(|| {
                format!(
                    "[upstream.\"{host}\"] url `{}`: the long connection needs https://IP:PORT",
                    upstream.url
                )
            })?;
        Ok(Some((addr, upstream.ca_file.as_deref())))
    }

    /// Parses `text` (the contents of `file`) and resolves every path
    /// against `file`'s directory, which must be absolute.
    pub fn parse(file: &Path, text: &str) -> Result<UpFile, UpError> {
        let mut parsed: UpFile = toml::from_str(text).map_err(|e| UpError::Syntax {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        let base = file.parent().unwrap_or(Path::new("/"));
        parsed.resolve_paths(base);
        parsed.validate(file)?;
        Ok(parsed)
    }

    fn resolve_paths(&mut self, base: &Path) {
        let at = |p: &mut PathBuf| *p = base.join(&*p);
        at(&mut self.policy);
        at(&mut self.profiles_dir);
        at(&mut self.rule_sets_dir);
        at(&mut self.prompts_dir);
        at(&mut self.state_dir);
        at(&mut self.run_dir);
        for credential in self.credentials.values_mut() {
            at(credential.secret_file_mut());
        }
        for upstream in self.upstream.values_mut() {
            if let Some(ca) = &mut upstream.ca_file {
                at(ca);
            }
        }
        if let Some(github) = &mut self.github {
            github.webhook_secret_files.iter_mut().for_each(at);
        }
        if let Some(feishu) = &mut self.feishu {
            feishu.encrypt_key_file.iter_mut().for_each(at);
            feishu.verification_token_file.iter_mut().for_each(at);
        }
    }

    /// What the types cannot say: a source needs its secrets, users differ.
    fn validate(&self, file: &Path) -> Result<(), UpError> {
        let invalid = |key: &str, message: &str| UpError::Invalid {
            file: file.to_owned(),
            key: key.to_owned(),
            message: message.to_owned(),
        };
        if let Some(github) = &self.github {
            if github.webhook_secret_files.is_empty() {
                return Err(invalid(
                    "github.webhook_secret_files",
                    "expected at least one file holding the webhook secret",
                ));
            }
        }
        if let Some(feishu) = &self.feishu {
            if feishu.encrypt_key_file.is_none() && feishu.verification_token_file.is_none() {
                return Err(invalid(
                    "feishu",
                    "expected `encrypt_key_file`, `verification_token_file` or both: \
                     events must be verifiable",
                ));
            }
            if !feishu.app_id.starts_with("cli_") {
                return Err(invalid("feishu.app_id", "expected the app id (cli_…)"));
            }
            if feishu.listen.is_none() && !feishu.long_connection {
                return Err(invalid(
                    "feishu",
                    "expected `listen`, `long_connection = true` or both: events must arrive somehow",
                ));
            }
            if feishu.long_connection {
                let app = self.feishu_app(&feishu.app_id).ok_or_else(|| {
                    invalid(
                        "feishu.long_connection",
                        &format!(
                            "needs a [credentials.<name>] of kind \"feishu_app\" with app_id = \"{}\": \
                             the long connection opens with the app secret",
                            feishu.app_id
                        ),
                    )
                })?;
                self.long_connection_target(app.base_url)
                    .map_err(|m| invalid("feishu.long_connection", &m))?;
            }
        }
        if self.proxy_user == self.router_user {
            return Err(invalid(
                "router_user",
                "must differ from proxy_user: the router must not read the credentials",
            ));
        }
        if let Some(range) = &self.jobs.worker_uids {
            if range
                .parse::<gatehouse_supervisor::sandbox::worker_uids::UidRange>()
                .is_err()
            {
                return Err(invalid(
                    "jobs.worker_uids",
                    "expected FIRST-LAST host uids, 0 < FIRST <= LAST < 4294967294, without 65534",
                ));
            }
        }
        if self.jobs.deadline_secs == 0 {
            return Err(invalid("jobs.deadline_secs", "expected at least 1"));
        }
        self.audit
            .rotation()
            .map_err(|(key, message)| invalid(&key, &message))?;
        self.audit
            .sync_window()
            .map_err(|(key, message)| invalid(&key, &message))?;
        let mut seen: Vec<SocketAddr> = Vec::new();
        for (key, addr) in self.metrics.parts() {
            let Some(addr) = addr else { continue };
            gatehouse_types::metrics::MetricsListen { listen: addr }
                .check()
                .map_err(|m| invalid(key, &m))?;
            if addr.port() == 0 {
                return Err(invalid(
                    key,
                    "expected a port (a scraper must know where to look)",
                ));
            }
            if seen.contains(&addr) {
                return Err(invalid(key, "expected an address no other part serves on"));
            }
            seen.push(addr);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
policy = "policy.toml"
profiles_dir = "profiles"
rule_sets_dir = "/usr/share/gatehouse/rules"
prompts_dir = "prompts"
[credentials.github]
kind = "github_token"
token_file = "secrets/github-token"
[github]
listen = "127.0.0.1:8080"
webhook_secret_files = ["secrets/webhook"]
"#;

    fn parse(text: &str) -> Result<UpFile, UpError> {
        UpFile::parse(Path::new("/etc/gatehouse/gatehouse.toml"), text)
    }

    #[test]
    fn defaults_and_paths_resolved_against_the_file() {
        let f = parse(MINIMAL).unwrap();
        assert_eq!(f.policy, Path::new("/etc/gatehouse/policy.toml"));
        assert_eq!(f.rule_sets_dir, Path::new("/usr/share/gatehouse/rules"));
        assert_eq!(f.state_dir, Path::new(DEFAULT_STATE_DIR));
        assert_eq!(f.run_dir, Path::new(DEFAULT_RUN_DIR));
        assert_eq!(f.proxy_user, DEFAULT_PROXY_USER);
        assert_eq!(f.router_user, DEFAULT_ROUTER_USER);
        assert_eq!(
            f.credentials["github"].secret_file(),
            Path::new("/etc/gatehouse/secrets/github-token")
        );
        assert_eq!(
            f.github.unwrap().webhook_secret_files,
            vec![PathBuf::from("/etc/gatehouse/secrets/webhook")]
        );
        assert_eq!(f.jobs.deadline_secs, DEFAULT_DEADLINE_SECS);
        assert_eq!(f.audit, AuditSection::default());
    }

    #[test]
    fn audit_rotation_and_retention_are_read() {
        let cases = [
            ("", AuditSection::default()),
            (
                "[audit]\nrotate_bytes = 67108864\n",
                AuditSection {
                    rotate_bytes: Some(64 << 20),
                    ..AuditSection::default()
                },
            ),
            (
                "[audit]\nrotate_secs = 86400\nkeep_files = 30\n",
                AuditSection {
                    rotate_secs: Some(86_400),
                    keep_files: Some(30),
                    ..AuditSection::default()
                },
            ),
            (
                "[audit]\nrotate_bytes = 1000\nrotate_secs = 60\nkeep_files = 1\n",
                AuditSection {
                    rotate_bytes: Some(1000),
                    rotate_secs: Some(60),
                    keep_files: Some(1),
                    ..AuditSection::default()
                },
            ),
            (
                "[audit]\nsync_window_ms = 10\n",
                AuditSection {
                    sync_window_ms: Some(10),
                    ..AuditSection::default()
                },
            ),
        ];
        for (table, expected) in cases {
            let f = parse(&format!("{MINIMAL}\n{table}")).unwrap();
            assert_eq!(f.audit, expected, "{table}");
        }
    }

    #[test]
    fn the_shipped_example_parses() {
        let text = include_str!("../../deploy/gatehouse.toml");
        let f = parse(text).unwrap();
        assert_eq!(f.state_dir, Path::new(DEFAULT_STATE_DIR));
        assert_eq!(f.run_dir, Path::new(DEFAULT_RUN_DIR));
        assert_eq!(f.proxy_user, DEFAULT_PROXY_USER);
        assert_eq!(f.router_user, DEFAULT_ROUTER_USER);
        assert_eq!(
            f.credentials.keys().collect::<Vec<_>>(),
            ["feishu", "github", "model"]
        );
        assert!(f.github.is_some() && f.feishu.is_some());
    }

    #[test]
    fn the_shipped_audit_and_metrics_examples_parse_when_uncommented() {
        let text = include_str!("../../deploy/gatehouse.toml");
        let mut on = false;
        let uncommented: String = text
            .lines()
            .map(|l| {
                on = (on && l.starts_with("# ") && l.contains(" = "))
                    || l == "# [audit]"
                    || l == "# [metrics]";
                if on {
                    format!("{}\n", &l[2..])
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let f = parse(&uncommented).unwrap();
        assert_eq!(
            f.metrics.parts().map(|(_, a)| a.map(|a| a.port())),
            [Some(9464), Some(9465), Some(9466)]
        );
        assert_eq!(
            f.audit,
            AuditSection {
                rotate_bytes: Some(256 << 20),
                rotate_secs: Some(86_400),
                keep_files: Some(90),
                sync_window_ms: Some(100),
            }
        );
    }

    const FEISHU_APP: &str = "[credentials.feishu]\nkind = \"feishu_app\"\napp_id = \"cli_x\"\n\
                              app_secret_file = \"s/app\"\nbase_url = \"https://open.feishu.cn\"\n";

    /// The long connection takes the app's credential and, where Feishu is
    /// overridden (an emulator), the override's address and CA.
    #[test]
    fn the_long_connection_finds_its_credential_and_target() {
        let text = format!(
            "{MINIMAL}\n{FEISHU_APP}[upstream.\"open.feishu.cn\"]\nurl = \"https://127.0.0.1:8443\"\n\
             ca_file = \"ca.pem\"\n[feishu]\nlong_connection = true\napp_id = \"cli_x\"\n\
             verification_token_file = \"t\"\n"
        );
        let f = parse(&text).unwrap();
        let feishu = f.feishu.as_ref().unwrap();
        assert!(feishu.long_connection && feishu.listen.is_none());
        let app = f.feishu_app("cli_x").unwrap();
        assert_eq!(app.app_secret_file, Path::new("/etc/gatehouse/s/app"));
        assert!(f.feishu_app("cli_other").is_none());
        assert_eq!(
            f.long_connection_target(app.base_url).unwrap(),
            Some((
                "127.0.0.1:8443".parse().unwrap(),
                Some(Path::new("/etc/gatehouse/ca.pem"))
            ))
        );
        // Not overridden: Feishu itself, by name.
        assert_eq!(
            f.long_connection_target("https://open.larksuite.com"),
            Ok(None)
        );
        assert!(f.long_connection_target("http://open.feishu.cn").is_err());
    }

    #[test]
    fn refusals_name_the_file_and_the_key() {
        let cases = [
            (format!("{MINIMAL}\nsurprise = 1\n"), "surprise"),
            (
                MINIMAL.replace("kind = \"github_token\"", "kind = \"github_token\"\nextra = 1"),
                "extra",
            ),
            (
                MINIMAL.replace("webhook_secret_files = [\"secrets/webhook\"]", "webhook_secret_files = []"),
                "github.webhook_secret_files",
            ),
            (
                format!("{MINIMAL}\n[feishu]\nlisten = \"127.0.0.1:1\"\napp_id = \"cli_x\"\n"),
                "feishu",
            ),
            (
                format!("{MINIMAL}\n[feishu]\nlisten = \"127.0.0.1:1\"\napp_id = \"x\"\nverification_token_file = \"t\"\n"),
                "feishu.app_id",
            ),
            (
                format!("{MINIMAL}\n[feishu]\napp_id = \"cli_x\"\nverification_token_file = \"t\"\n"),
                "`feishu`: expected `listen`, `long_connection = true` or both",
            ),
            (
                format!("{MINIMAL}\n[feishu]\nlong_connection = true\napp_id = \"cli_x\"\nverification_token_file = \"t\"\n"),
                "`feishu.long_connection`: needs a [credentials.<name>] of kind \"feishu_app\" with app_id = \"cli_x\"",
            ),
            (
                format!("{MINIMAL}\n{FEISHU_APP}[upstream.\"open.feishu.cn\"]\nurl = \"https://feishu.test:8443\"\n[feishu]\nlong_connection = true\napp_id = \"cli_x\"\nverification_token_file = \"t\"\n"),
                "the long connection needs https://IP:PORT",
            ),
            (
                format!("proxy_user = \"same\"\nrouter_user = \"same\"\n{MINIMAL}"),
                "router_user",
            ),
            (format!("{MINIMAL}\n[jobs]\ndeadline_secs = 0\n"), "jobs.deadline_secs"),
            (
                format!("{MINIMAL}\n[jobs]\nworker_uids = \"0-100\"\n"),
                "jobs.worker_uids",
            ),
            (
                format!("{MINIMAL}\n[jobs]\nworker_uids = \"60000-70000\"\n"),
                "jobs.worker_uids",
            ),
            (format!("{MINIMAL}\n[jobs]\nfoo = 0\n"), "foo"),
            (format!("{MINIMAL}\n[audit]\nrotate_bytes = 0\n"), "`audit.rotate_bytes`: expected at least 1"),
            (format!("{MINIMAL}\n[audit]\nrotate_secs = 0\n"), "`audit.rotate_secs`: expected at least 1"),
            (
                format!("{MINIMAL}\n[audit]\nrotate_bytes = 1000\nkeep_files = 0\n"),
                "`audit.keep_files`: expected at least 1",
            ),
            (
                format!("{MINIMAL}\n[audit]\nkeep_files = 3\n"),
                "`audit.keep_files`: needs rotate_bytes or rotate_secs",
            ),
            (
                format!("{MINIMAL}\n[audit]\nsync_window_ms = 0\n"),
                "`audit.sync_window_ms`: 0 is out of range: expected 1 to 10000",
            ),
            (
                format!("{MINIMAL}\n[audit]\nsync_window_ms = 60000\n"),
                "`audit.sync_window_ms`: 60000 is out of range",
            ),
            (format!("{MINIMAL}\n[audit]\nrotate_bytes = -1\n"), "rotate_bytes"),
            (format!("{MINIMAL}\n[audit]\nrotate_bytes = \"1M\"\n"), "rotate_bytes"),
            (format!("{MINIMAL}\n[audit]\nrotate_files = 2\n"), "unknown field `rotate_files`"),
            (format!("{MINIMAL}\n[audit]\npath = \"x\"\n"), "unknown field `path`"),
            (
                format!("{MINIMAL}\n[metrics]\nproxy = \"0.0.0.0:9464\"\n"),
                "`metrics.proxy`: 0.0.0.0:9464 is not a loopback address",
            ),
            (
                format!("{MINIMAL}\n[metrics]\nrouter = \"127.0.0.1:0\"\n"),
                "`metrics.router`: expected a port",
            ),
            (
                format!("{MINIMAL}\n[metrics]\nproxy = \"127.0.0.1:9464\"\nsupervisor = \"127.0.0.1:9464\"\n"),
                "`metrics.supervisor`: expected an address no other part serves on",
            ),
            (format!("{MINIMAL}\n[metrics]\nup = \"127.0.0.1:1\"\n"), "unknown field `up`"),
            (MINIMAL.replace("policy = \"policy.toml\"", ""), "policy"),
        ];
        for (text, key) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(
                err.starts_with("/etc/gatehouse/gatehouse.toml: ") && err.contains(key),
                "{key}: {err}"
            );
        }
    }
}
