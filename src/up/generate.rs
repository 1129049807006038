//! The three parts' own config files, written from `gatehouse.toml` and the
//! layout: pure functions from data to TOML text, in the formats each part
//! already reads (and validates: `config check` loads what is generated
//! with each part's own loader).

use std::path::Path;

use toml::{Table, Value};

use super::check::Users;
use super::config::UpFile;
use super::layout::{Layout, ROUTER_GITHUB_APP_RULES};
use super::UpError;

/// The three files' contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub proxy: String,
    pub supervisor: String,
    pub router: String,
}

fn path(p: &Path) -> Value {
    Value::String(p.display().to_string())
}

fn table(entries: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Table(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn serialize(what: &str, t: &Table) -> Result<String, UpError> {
    toml::to_string(t).map_err(|e| UpError::Generate {
        what: what.to_owned(),
        message: e.to_string(),
    })
}

/// `api_socket_group`: the router's group when the router runs as its own
/// user; rootless, none (the socket is 0600, the same user's).
pub fn all(file: &UpFile, layout: &Layout, users: &Users) -> Result<Generated, UpError> {
    Ok(Generated {
        proxy: serialize("proxy.toml", &proxy(file, layout, users.router().uid)?)?,
        supervisor: serialize(
            "supervisor.toml",
            &supervisor(file, layout, users.router_group()),
        )?,
        router: serialize("router.toml", &router(file, layout, users.proxy().uid))?,
    })
}

/// proxy.toml: the credentials and overrides as given, the CA, audit log
/// and sockets from the layout, and the router's static identities, each
/// admitting the router's uid alone (and root).
pub fn proxy(file: &UpFile, layout: &Layout, router_uid: u32) -> Result<Table, UpError> {
    let to_value = |what: String, v: Result<Value, toml::ser::Error>| {
        v.map_err(|e| UpError::Generate {
            what,
            message: e.to_string(),
        })
    };
    let mut credentials = Table::new();
    for (name, credential) in &file.credentials {
        let value = to_value(format!("credentials.{name}"), Value::try_from(credential))?;
        credentials.insert(name.clone(), value);
    }
    let mut upstream = Table::new();
    for (host, o) in &file.upstream {
        let value = to_value(format!("upstream.{host}"), Value::try_from(o))?;
        upstream.insert(host.clone(), value);
    }
    let identities: Vec<Value> = layout
        .router_identities
        .iter()
        .map(|i| {
            let mut entries = vec![
                ("name", Value::String(i.name.clone())),
                ("socket", path(&i.socket)),
                (
                    "rule_sets",
                    Value::Array(vec![Value::String(i.rule_set.into())]),
                ),
                ("peer_uid", Value::Integer(i64::from(router_uid))),
            ];
            if let Some(repo) = &i.repo {
                entries.push(("variables", table([("repo", Value::String(repo.clone()))])));
            }
            table(entries)
        })
        .collect();
    let mut t = Table::new();
    t.insert(
        "identity_socket_dir".into(),
        path(&layout.identity_socket_dir),
    );
    t.insert(
        "rule_set_dirs".into(),
        Value::Array(vec![path(&file.rule_sets_dir)]),
    );
    t.insert(
        "ca".into(),
        table([
            ("cert", path(&layout.ca_cert)),
            ("key", path(&layout.ca_key)),
        ]),
    );
    t.insert("identity_state".into(), path(&layout.identity_state));
    t.insert("audit".into(), audit(file, layout));
    t.insert(
        "admin".into(),
        table([("socket", path(&layout.admin_socket))]),
    );
    t.insert("credentials".into(), Value::Table(credentials));
    if !identities.is_empty() {
        t.insert("identity".into(), Value::Array(identities));
    }
    if !upstream.is_empty() {
        t.insert("upstream".into(), Value::Table(upstream));
    }
    metrics(&mut t, file.metrics.proxy);
    Ok(t)
}

/// proxy.toml's `[audit]`: the log's path from the layout, rotation,
/// retention and sync window as `gatehouse.toml` gives them (keys left out
/// stay out).
fn audit(file: &UpFile, layout: &Layout) -> Value {
    let mut entries = vec![("path", path(&layout.audit_log))];
    let a = &file.audit;
    for (key, value) in [
        ("rotate_bytes", a.rotate_bytes),
        ("rotate_secs", a.rotate_secs),
        ("keep_files", a.keep_files),
        ("sync_window_ms", a.sync_window_ms),
    ] {
        if let Some(v) = value {
            // TOML integers are i64; what does not fit means "never".
            entries.push((key, Value::Integer(i64::try_from(v).unwrap_or(i64::MAX))));
        }
    }
    table(entries)
}

/// supervisor.toml: its state, the job API socket (group the router's),
/// prompts and profiles, the proxy's admin socket and CA.
pub fn supervisor(file: &UpFile, layout: &Layout, router_group: Option<&str>) -> Table {
    let mut t = Table::new();
    t.insert("state_dir".into(), path(&layout.supervisor_state));
    t.insert("run_dir".into(), path(&layout.supervisor_run));
    t.insert("api_socket".into(), path(&layout.jobs_socket));
    if let Some(group) = router_group {
        t.insert("api_socket_group".into(), Value::String(group.into()));
    }
    t.insert("prompts_dir".into(), path(&file.prompts_dir));
    if router_group.is_some() {
        // Under their own users the secrets are the proxy's and the
        // router's; the supervisor, root, covers them from itself.
        let secrets = file.secret_files().into_iter().map(path).collect();
        t.insert("hidden_paths".into(), Value::Array(secrets));
    }
    let mut sandbox = vec![("profiles_dir", path(&file.profiles_dir))];
    if let Some(range) = &file.jobs.worker_uids {
        sandbox.push(("worker_uids", Value::String(range.clone())));
    }
    t.insert("sandbox".into(), table(sandbox));
    t.insert(
        "proxy".into(),
        table([
            ("admin_socket", path(&layout.admin_socket)),
            ("ca_cert", path(&layout.ca_cert)),
        ]),
    );
    if let Some(command) = &file.jobs.worker_command {
        let argv = command.iter().map(|a| Value::String(a.clone())).collect();
        t.insert("worker".into(), table([("command", Value::Array(argv))]));
    }
    let deadline = i64::try_from(file.jobs.deadline_secs).unwrap_or(i64::MAX);
    let mut limits = vec![("default_deadline_secs", Value::Integer(deadline))];
    if let Some(n) = file.jobs.max_running_jobs {
        limits.push((
            "max_running_jobs",
            Value::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
        ));
    }
    t.insert("limits".into(), table(limits));
    metrics(&mut t, file.metrics.supervisor);
    t
}

/// A part's `[metrics] listen`, when `gatehouse.toml` gives it one.
fn metrics(t: &mut Table, addr: Option<std::net::SocketAddr>) {
    if let Some(addr) = addr {
        t.insert(
            "metrics".into(),
            table([("listen", Value::String(addr.to_string()))]),
        );
    }
}

/// router.toml: the policy, its database, the job API, its proxy
/// identities and CA, and the sources. It names no credential: only the
/// verification secrets of the sources, which the router checks itself.
/// `connect_uid` is the long-connection client's (the proxy's user): the
/// only peer its hand-off socket serves.
pub fn router(file: &UpFile, layout: &Layout, connect_uid: u32) -> Table {
    let mut t = Table::new();
    t.insert("policy".into(), path(&file.policy));
    t.insert("state".into(), path(&layout.router_db));
    let deadline = i64::try_from(file.jobs.deadline_secs).unwrap_or(i64::MAX);
    t.insert(
        "jobs".into(),
        table([
            ("socket", path(&layout.jobs_socket)),
            ("deadline_secs", Value::Integer(deadline)),
        ]),
    );
    let mut github_sockets = Table::new();
    let mut proxy = vec![("ca_cert", path(&layout.ca_cert))];
    let mut recovery = false;
    for identity in &layout.router_identities {
        match &identity.repo {
            Some(repo) => {
                github_sockets.insert(repo.clone(), path(&identity.socket));
            }
            None if identity.rule_set == ROUTER_GITHUB_APP_RULES => {
                proxy.push(("github_app_socket", path(&identity.socket)));
                recovery = true;
            }
            None => proxy.push(("feishu_socket", path(&identity.socket))),
        }
    }
    proxy.push(("github_sockets", Value::Table(github_sockets)));
    t.insert("proxy".into(), table(proxy));
    if recovery {
        // The App's failed webhook deliveries, asked for again (defaults).
        t.insert("github_recovery".into(), table([]));
    }
    if let Some(github) = &file.github {
        t.insert(
            "github".into(),
            table([
                ("listen", Value::String(github.listen.to_string())),
                (
                    "webhook_secret_files",
                    Value::Array(
                        github
                            .webhook_secret_files
                            .iter()
                            .map(|p| path(p))
                            .collect(),
                    ),
                ),
            ]),
        );
    }
    if let Some(poll) = &file.github_poll {
        let mut entries = Vec::new();
        if let Some(enabled) = poll.enabled {
            entries.push(("enabled", Value::Boolean(enabled)));
        }
        if let Some(secs) = poll.interval_secs {
            entries.push((
                "interval_secs",
                Value::Integer(i64::try_from(secs).unwrap_or(i64::MAX)),
            ));
        }
        t.insert("github_poll".into(), table(entries));
    }
    if let Some(feishu) = &file.feishu {
        let mut entries = vec![("app_id", Value::String(feishu.app_id.clone()))];
        if let Some(listen) = feishu.listen {
            entries.push(("listen", Value::String(listen.to_string())));
        }
        if let Some(socket) = layout.handoff_socket() {
            entries.push((
                "long_connection",
                table([
                    ("socket", path(socket)),
                    ("peer_uid", Value::Integer(i64::from(connect_uid))),
                ]),
            ));
        }
        if let Some(p) = &feishu.encrypt_key_file {
            entries.push(("encrypt_key_file", path(p)));
        }
        if let Some(p) = &feishu.verification_token_file {
            entries.push(("verification_token_file", path(p)));
        }
        t.insert("feishu".into(), table(entries));
    }
    metrics(&mut t, file.metrics.router);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::up::access::Who;

    const FILE: &str = r#"
policy = "policy.toml"
profiles_dir = "profiles"
rule_sets_dir = "rules"
prompts_dir = "prompts"
state_dir = "/var/lib/gatehouse"
[credentials.github]
kind = "github_token"
token_file = "secrets/github-token"
[credentials.feishu]
kind = "feishu_app"
app_id = "cli_a"
app_secret_file = "secrets/feishu"
base_url = "https://open.feishu.cn"
[github]
listen = "127.0.0.1:8080"
webhook_secret_files = ["secrets/webhook"]
[feishu]
listen = "127.0.0.1:8081"
app_id = "cli_a"
verification_token_file = "secrets/feishu-token"
[upstream."api.github.com"]
url = "https://127.0.0.1:9443"
ca_file = "emulator-ca.pem"
[jobs]
deadline_secs = 600
worker_command = ["/usr/bin/worker", "--go"]
worker_uids = "300000-300999"
[audit]
rotate_bytes = 1048576
keep_files = 7
sync_window_ms = 25
[metrics]
proxy = "127.0.0.1:9464"
router = "[::1]:9466"
"#;

    /// The router is uid 990 either way; separated, the proxy is 991.
    fn users(router_group: Option<&str>) -> Users {
        let router = Who { uid: 990, gid: 990 };
        match router_group {
            None => Users::Rootless(router),
            Some(group) => Users::Separated {
                proxy: Who { uid: 991, gid: 991 },
                router,
                router_group: group.to_owned(),
            },
        }
    }

    /// With the long connection, the router serves a hand-off socket to the
    /// proxy's uid alone, and `[feishu]` may have no HTTP listener.
    #[test]
    fn the_long_connection_gives_the_router_a_handoff_for_the_proxys_uid() {
        let (mut file, layout) = fixture();
        let without = all(&file, &layout, &users(Some("g"))).unwrap();
        let t: Table = toml::from_str(&without.router).unwrap();
        assert!(t["feishu"].get("long_connection").is_none());
        let feishu = file.feishu.as_mut().unwrap();
        feishu.long_connection = true;
        feishu.listen = None;
        let layout = layout.with_long_connection();
        let all = all(&file, &layout, &users(Some("g"))).unwrap();
        let config = gatehouse_router::live::RouterConfig::from_toml(
            "router.toml",
            &all.router,
            std::path::Path::new("/"),
        )
        .unwrap();
        let feishu = config.feishu.unwrap();
        assert_eq!(feishu.listen, None);
        assert_eq!(
            feishu.long_connection,
            Some(gatehouse_router::intake::HandoffConfig {
                socket: "/run/gatehouse/feishu/handoff.sock".into(),
                peer_uid: 991,
            })
        );
        assert!(!all.router.contains("secrets/feishu\""), "no app secret");
    }

    fn fixture() -> (UpFile, Layout) {
        let file = UpFile::parse(Path::new("/etc/g/gatehouse.toml"), FILE).unwrap();
        let layout = Layout::new(
            &file.state_dir,
            &file.run_dir,
            &["acme/widgets".into()],
            true,
        );
        (file, layout)
    }

    #[test]
    fn the_proxy_gets_credentials_with_absolute_paths_and_the_router_identities() {
        let (file, layout) = fixture();
        let t = proxy(&file, &layout, 990).unwrap();
        assert_eq!(
            t["credentials"]["github"]["kind"].as_str(),
            Some("github_token")
        );
        assert_eq!(
            t["credentials"]["github"]["token_file"].as_str(),
            Some("/etc/g/secrets/github-token")
        );
        assert_eq!(
            t["credentials"]["feishu"]["app_secret_file"].as_str(),
            Some("/etc/g/secrets/feishu")
        );
        assert_eq!(
            t["upstream"]["api.github.com"]["ca_file"].as_str(),
            Some("/etc/g/emulator-ca.pem")
        );
        assert_eq!(
            t["admin"]["socket"].as_str(),
            Some("/run/gatehouse/proxy/admin.sock")
        );
        let ids = t["identity"].as_array().unwrap();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0]["name"].as_str(), Some("router-gh-1"));
        assert_eq!(ids[0]["variables"]["repo"].as_str(), Some("acme/widgets"));
        assert_eq!(ids[1]["rule_sets"][0].as_str(), Some("router-feishu"));
        // Rotation and retention pass through; what is not set stays out.
        assert_eq!(
            t["audit"]["path"].as_str(),
            Some("/var/lib/gatehouse/proxy/audit.jsonl")
        );
        assert_eq!(t["audit"]["rotate_bytes"].as_integer(), Some(1_048_576));
        assert_eq!(t["audit"]["keep_files"].as_integer(), Some(7));
        assert_eq!(t["audit"]["sync_window_ms"].as_integer(), Some(25));
        assert!(t["audit"].get("rotate_secs").is_none());
        // Each admits the router's uid alone.
        assert!(ids.iter().all(|i| i["peer_uid"].as_integer() == Some(990)));
    }

    #[test]
    fn without_an_audit_table_the_proxy_log_is_one_file() {
        let text = FILE.replace(
            "[audit]\nrotate_bytes = 1048576\nkeep_files = 7\nsync_window_ms = 25\n",
            "",
        );
        assert_ne!(text, FILE);
        let file = UpFile::parse(Path::new("/etc/g/gatehouse.toml"), &text).unwrap();
        let layout = Layout::new(&file.state_dir, &file.run_dir, &[], false);
        let t = proxy(&file, &layout, 990).unwrap();
        let keys: Vec<&String> = t["audit"].as_table().unwrap().keys().collect();
        assert_eq!(keys, ["path"]);
    }

    #[test]
    fn the_proxy_loader_reads_the_generated_rotation() {
        let (file, layout) = fixture();
        let text = serialize("proxy.toml", &proxy(&file, &layout, 990).unwrap()).unwrap();
        let raw = gatehouse_proxy::config::ProxyConfig::parse(&layout.proxy_toml, &text).unwrap();
        let expected = file.audit.rotation().unwrap();
        let got = gatehouse_proxy::audit::Rotation::new(
            raw.audit.rotate_bytes,
            raw.audit.rotate_secs,
            raw.audit.keep_files,
        )
        .unwrap();
        assert_eq!(got, expected);
        assert_eq!(raw.audit.rotate_bytes, Some(1_048_576));
        assert_eq!(raw.audit.sync_window_ms, Some(25));
    }

    #[test]
    fn each_part_gets_its_metrics_address_or_none() {
        let (file, layout) = fixture();
        let all = all(&file, &layout, &users(None)).unwrap();
        let listen = |text: &str| {
            let t: Table = toml::from_str(text).unwrap();
            t.get("metrics")
                .map(|m| m["listen"].as_str().unwrap().to_owned())
        };
        assert_eq!(listen(&all.proxy).as_deref(), Some("127.0.0.1:9464"));
        assert_eq!(listen(&all.router).as_deref(), Some("[::1]:9466"));
        assert_eq!(listen(&all.supervisor), None);
    }

    #[test]
    fn the_router_gets_no_credential() {
        let (file, layout) = fixture();
        let all = all(&file, &layout, &users(Some("gatehouse-router"))).unwrap();
        for secret in [
            "github-token",
            "secrets/feishu\"",
            "credentials",
            "emulator-ca",
        ] {
            assert!(
                !all.router.contains(secret),
                "{secret} in router.toml:\n{}",
                all.router
            );
        }
        let t: Table = toml::from_str(&all.router).unwrap();
        assert_eq!(
            t["proxy"]["github_sockets"]["acme/widgets"].as_str(),
            Some("/run/gatehouse/router-proxy/gh-1.sock")
        );
        assert_eq!(
            t["proxy"]["feishu_socket"].as_str(),
            Some("/run/gatehouse/router-proxy/feishu.sock")
        );
        assert_eq!(
            t["proxy"]["ca_cert"].as_str(),
            Some("/var/lib/gatehouse/ca/ca.pem")
        );
        assert_eq!(
            t["jobs"]["socket"].as_str(),
            Some("/run/gatehouse/jobs/jobs.sock")
        );
        assert_eq!(t["jobs"]["deadline_secs"].as_integer(), Some(600));
        assert_eq!(
            t["github"]["webhook_secret_files"][0].as_str(),
            Some("/etc/g/secrets/webhook")
        );
        assert_eq!(
            t["feishu"]["verification_token_file"].as_str(),
            Some("/etc/g/secrets/feishu-token")
        );
        assert!(t["feishu"].get("encrypt_key_file").is_none());
        assert!(
            t.get("github_poll").is_none(),
            "polling is off unless asked"
        );
    }

    /// `[github_poll]` reaches the router's config, and the router reads it.
    #[test]
    fn polling_is_passed_to_the_router() {
        let (mut file, layout) = fixture();
        file.github_poll = Some(crate::up::config::GithubPoll {
            enabled: None,
            interval_secs: Some(30),
        });
        let all = all(&file, &layout, &users(Some("gatehouse-router"))).unwrap();
        let t: Table = toml::from_str(&all.router).unwrap();
        assert_eq!(t["github_poll"]["interval_secs"].as_integer(), Some(30));
        assert!(t["github_poll"].get("enabled").is_none());
        let config = gatehouse_router::live::RouterConfig::from_toml(
            "router.toml",
            &all.router,
            std::path::Path::new("/"),
        )
        .unwrap();
        assert_eq!(config.github_poll.map(|p| p.interval_secs), Some(30));
    }

    /// With a GitHub App, the router gets its App identity and recovers
    /// failed webhooks through it; the proxy gets the identity.
    #[test]
    fn a_github_app_gives_the_router_webhook_recovery() {
        let (file, layout) = fixture();
        let without = all(&file, &layout, &users(Some("gatehouse-router"))).unwrap();
        let t: Table = toml::from_str(&without.router).unwrap();
        assert!(t.get("github_recovery").is_none());
        assert!(t["proxy"].get("github_app_socket").is_none());
        let layout = layout.with_github_app();
        let all = all(&file, &layout, &users(Some("gatehouse-router"))).unwrap();
        let config = gatehouse_router::live::RouterConfig::from_toml(
            "router.toml",
            &all.router,
            std::path::Path::new("/"),
        )
        .unwrap();
        assert_eq!(config.github_recovery.map(|r| r.interval_secs), Some(60));
        assert_eq!(
            config.proxy.github_app_socket,
            Some(layout.router_proxy_run.join("github-app.sock"))
        );
        assert!(config.proxy.feishu_socket.is_some(), "Feishu's stays");
        let proxy: Table = toml::from_str(&all.proxy).unwrap();
        let app = proxy["identity"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"].as_str() == Some("router-github-app"))
            .unwrap();
        assert_eq!(app["rule_sets"][0].as_str(), Some("router-github-app"));
        assert!(app.get("variables").is_none());
    }

    #[test]
    fn the_supervisor_gets_the_job_socket_group_only_when_separated() {
        let (file, layout) = fixture();
        let t = supervisor(&file, &layout, Some("gatehouse-router"));
        assert_eq!(t["api_socket_group"].as_str(), Some("gatehouse-router"));
        assert_eq!(t["worker"]["command"][1].as_str(), Some("--go"));
        assert_eq!(t["limits"]["default_deadline_secs"].as_integer(), Some(600));
        assert_eq!(t["sandbox"]["worker_uids"].as_str(), Some("300000-300999"));
        assert!(supervisor(&file, &layout, None)
            .get("api_socket_group")
            .is_none());
    }

    #[test]
    fn the_supervisor_hides_every_secret_only_when_separated() {
        let (file, layout) = fixture();
        let t = supervisor(&file, &layout, Some("gatehouse-router"));
        let hidden: Vec<&str> = t["hidden_paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let want: Vec<String> = file
            .secret_files()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(hidden, want);
        // The credentials and the sources' verification secrets alike.
        assert!(want.len() > file.credentials.len(), "{want:?}");
        // Rootless the three are one user: nothing to hide from whom.
        assert!(supervisor(&file, &layout, None)
            .get("hidden_paths")
            .is_none());
    }
}
