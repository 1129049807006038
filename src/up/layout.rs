//! Where everything goes, derived from the state and run directories and
//! the policy's repositories: a plain function over data
//! ([`Layout::new`]), and the directories to create with their owners and
//! modes ([`Layout::dirs`]). Who owns what is the privilege separation:
//!
//! ```text
//! <state>/config         root 0755   proxy.toml, supervisor.toml, router.toml (paths, no secrets)
//! <state>/logs           root 0700   one log per part (the parts write to an inherited descriptor)
//! <state>/proxy          proxy 0700  the audit log, identities.json (ticket identities, kept across restarts)
//! <state>/ca             proxy 0755  ca.pem (public: the router and sandboxes trust it), ca.key 0600
//! <state>/supervisor     root 0700   jobs database, work dirs, bin/gatehouse (what sandboxes bind)
//! <state>/router         router 0700 the router's database
//! <run>/proxy            proxy 0700  admin.sock (0600; root reaches it), identities/<ticket>/proxy.sock
//! <run>/router-proxy     proxy:router 0750  the router's identity sockets
//! <run>/jobs             root:router 0750   jobs.sock (0660, group router)
//! <run>/supervisor       root 0700   <job>/control.sock, each bind-mounted into its sandbox
//! <run>/feishu           router:proxy 2750  handoff.sock (0660, the proxy's group through
//!                                           the setgid bit): the long connection's events
//! ```
//!
//! Rootless, every owner is the invoking user and the modes stay.

use std::path::{Path, PathBuf};

/// Who owns a directory (and, for the group, who may enter it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The user `up` runs as (root, or the invoking user rootless).
    Up,
    Proxy,
    Router,
}

/// A directory to create (or re-own and re-mode if present).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirSpec {
    pub path: PathBuf,
    pub owner: Owner,
    pub group: Owner,
    pub mode: u32,
}

/// One of the router's static proxy identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterIdentity {
    pub name: String,
    pub socket: PathBuf,
    pub rule_set: &'static str,
    /// The repository it is bound to (`{repo}`); none for Feishu.
    pub repo: Option<String>,
}

/// The rule set of the router's GitHub identities.
pub const ROUTER_GITHUB_RULES: &str = "router-github";
/// The rule set of the router's Feishu identity.
pub const ROUTER_FEISHU_RULES: &str = "router-feishu";
/// The rule set of the router's GitHub App identity (webhook recovery).
pub const ROUTER_GITHUB_APP_RULES: &str = "router-github-app";

/// Every path `up` derives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub state_dir: PathBuf,
    pub run_dir: PathBuf,
    pub config_dir: PathBuf,
    pub proxy_toml: PathBuf,
    pub supervisor_toml: PathBuf,
    pub router_toml: PathBuf,
    pub logs_dir: PathBuf,
    pub proxy_state: PathBuf,
    pub audit_log: PathBuf,
    /// The proxy's saved ticket identities.
    pub identity_state: PathBuf,
    pub ca_dir: PathBuf,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub supervisor_state: PathBuf,
    pub router_state: PathBuf,
    pub router_db: PathBuf,
    pub proxy_run: PathBuf,
    pub admin_socket: PathBuf,
    pub identity_socket_dir: PathBuf,
    pub router_proxy_run: PathBuf,
    pub router_identities: Vec<RouterIdentity>,
    pub jobs_run: PathBuf,
    pub jobs_socket: PathBuf,
    /// The supervisor's runtime dir: each job's control socket, in
    /// `<job>/control.sock` (a sandbox's mount table shows its path).
    pub supervisor_run: PathBuf,
    /// The router's hand-off socket for the Feishu long connection, in its
    /// directory (see [`Layout::with_long_connection`]).
    pub feishu_handoff: Option<(PathBuf, PathBuf)>,
}

/// The longest path a unix socket may have (`sun_path` holds 108 bytes
/// with the terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

impl Layout {
    /// The layout under `state_dir` and `run_dir`, with one router GitHub
    /// identity per repository (in the order given) and a Feishu one when
    /// Feishu is a source (see [`Layout::with_github_app`] for the App's).
    pub fn new(state_dir: &Path, run_dir: &Path, repos: &[String], feishu: bool) -> Layout {
        let config_dir = state_dir.join("config");
        let proxy_state = state_dir.join("proxy");
        let ca_dir = state_dir.join("ca");
        let router_state = state_dir.join("router");
        let proxy_run = run_dir.join("proxy");
        let router_proxy_run = run_dir.join("router-proxy");
        let jobs_run = run_dir.join("jobs");
        let mut router_identities: Vec<RouterIdentity> = repos
            .iter()
            .enumerate()
            .map(|(i, repo)| RouterIdentity {
                name: format!("router-gh-{}", i + 1),
                socket: router_proxy_run.join(format!("gh-{}.sock", i + 1)),
                rule_set: ROUTER_GITHUB_RULES,
                repo: Some(repo.clone()),
            })
            .collect();
        if feishu {
            router_identities.push(RouterIdentity {
                name: "router-feishu".into(),
                socket: router_proxy_run.join("feishu.sock"),
                rule_set: ROUTER_FEISHU_RULES,
                repo: None,
            });
        }
        Layout {
            state_dir: state_dir.to_owned(),
            run_dir: run_dir.to_owned(),
            proxy_toml: config_dir.join("proxy.toml"),
            supervisor_toml: config_dir.join("supervisor.toml"),
            router_toml: config_dir.join("router.toml"),
            config_dir,
            logs_dir: state_dir.join("logs"),
            audit_log: proxy_state.join("audit.jsonl"),
            identity_state: proxy_state.join("identities.json"),
            proxy_state,
            ca_cert: ca_dir.join("ca.pem"),
            ca_key: ca_dir.join("ca.key"),
            ca_dir,
            supervisor_state: state_dir.join("supervisor"),
            router_db: router_state.join("router.db"),
            router_state,
            admin_socket: proxy_run.join("admin.sock"),
            identity_socket_dir: proxy_run.join("identities"),
            proxy_run,
            router_proxy_run,
            router_identities,
            jobs_socket: jobs_run.join("jobs.sock"),
            jobs_run,
            supervisor_run: run_dir.join("supervisor"),
            feishu_handoff: None,
        }
    }

    /// Adds the hand-off socket where the router takes over the events the
    /// long-connection client (the proxy's user) receives.
    pub fn with_long_connection(mut self) -> Layout {
        let dir = self.run_dir.join("feishu");
        self.feishu_handoff = Some((dir.join("handoff.sock"), dir));
        self
    }

    /// The hand-off socket, when the long connection is on.
    pub fn handoff_socket(&self) -> Option<&Path> {
        self.feishu_handoff.as_ref().map(|(s, _)| s.as_path())
    }

    /// The directories to create, parents first.
    pub fn dirs(&self) -> Vec<DirSpec> {
        use Owner::*;
        let d = |path: &Path, owner, group, mode| DirSpec {
            path: path.to_owned(),
            owner,
            group,
            mode,
        };
        let mut dirs = vec![
            d(&self.state_dir, Up, Up, 0o755),
            d(&self.config_dir, Up, Up, 0o755),
            d(&self.logs_dir, Up, Up, 0o700),
            d(&self.proxy_state, Proxy, Proxy, 0o700),
            d(&self.ca_dir, Proxy, Proxy, 0o755),
            d(&self.supervisor_state, Up, Up, 0o700),
            d(&self.router_state, Router, Router, 0o700),
            d(&self.run_dir, Up, Up, 0o755),
            d(&self.proxy_run, Proxy, Proxy, 0o700),
            d(&self.router_proxy_run, Proxy, Router, 0o750),
            d(&self.jobs_run, Up, Router, 0o750),
            d(&self.supervisor_run, Up, Up, 0o700),
        ];
        if let Some((_, dir)) = &self.feishu_handoff {
            // setgid: the router's socket in it gets the proxy's group.
            dirs.push(d(dir, Router, Proxy, 0o2750));
        }
        dirs
    }

    /// Every unix socket path the parts will bind, with what it is.
    pub fn sockets(&self) -> Vec<(&'static str, &Path)> {
        let mut all = vec![
            ("proxy admin", self.admin_socket.as_path()),
            ("job API", self.jobs_socket.as_path()),
        ];
        all.extend(
            self.router_identities
                .iter()
                .map(|i| ("router identity", i.socket.as_path())),
        );
        all.extend(self.handoff_socket().map(|s| ("Feishu hand-off", s)));
        all
    }

    /// Adds the router's GitHub App identity (rule set `router-github-app`,
    /// no variables), for the webhook recovery loop: when a `github_app`
    /// credential is configured.
    pub fn with_github_app(mut self) -> Layout {
        self.router_identities.push(RouterIdentity {
            name: "router-github-app".into(),
            socket: self.router_proxy_run.join("github-app.sock"),
            rule_set: ROUTER_GITHUB_APP_RULES,
            repo: None,
        });
        self
    }

    /// The first socket path too long to bind, if any. Ticket identities
    /// (`identities/tkt_…/proxy.sock`, names up to 64 bytes) are counted at
    /// their longest.
    pub fn overlong_socket(&self) -> Option<PathBuf> {
        let longest_ticket = self
            .identity_socket_dir
            .join("x".repeat(64))
            .join(gatehouse_types::sandbox::PROXY_SOCKET_NAME);
        // Job ids are `job_` and 16 hex digits.
        let control = self
            .supervisor_run
            .join("j".repeat(20))
            .join("control.sock");
        self.sockets()
            .into_iter()
            .map(|(_, p)| p.to_owned())
            .chain([longest_ticket, control])
            .find(|p| p.as_os_str().len() > MAX_SOCKET_PATH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(feishu: bool) -> Layout {
        Layout::new(
            Path::new("/var/lib/gatehouse"),
            Path::new("/run/gatehouse"),
            &["acme/widgets".into(), "acme/gadgets".into()],
            feishu,
        )
    }

    #[test]
    fn router_identities_one_per_repository_and_feishu_when_configured() {
        let l = layout(true);
        let got: Vec<(&str, &str, &str, Option<&str>)> = l
            .router_identities
            .iter()
            .map(|i| {
                (
                    i.name.as_str(),
                    i.socket.to_str().unwrap(),
                    i.rule_set,
                    i.repo.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "router-gh-1",
                    "/run/gatehouse/router-proxy/gh-1.sock",
                    "router-github",
                    Some("acme/widgets")
                ),
                (
                    "router-gh-2",
                    "/run/gatehouse/router-proxy/gh-2.sock",
                    "router-github",
                    Some("acme/gadgets")
                ),
                (
                    "router-feishu",
                    "/run/gatehouse/router-proxy/feishu.sock",
                    "router-feishu",
                    None
                ),
            ]
        );
        assert_eq!(layout(false).router_identities.len(), 2);
    }

    #[test]
    fn directories_owners_and_modes() {
        use Owner::*;
        let l = layout(false);
        let table: Vec<(String, Owner, Owner, u32)> = l
            .dirs()
            .into_iter()
            .map(|d| (d.path.display().to_string(), d.owner, d.group, d.mode))
            .collect();
        let want = [
            ("/var/lib/gatehouse", Up, Up, 0o755),
            ("/var/lib/gatehouse/config", Up, Up, 0o755),
            ("/var/lib/gatehouse/logs", Up, Up, 0o700),
            ("/var/lib/gatehouse/proxy", Proxy, Proxy, 0o700),
            ("/var/lib/gatehouse/ca", Proxy, Proxy, 0o755),
            ("/var/lib/gatehouse/supervisor", Up, Up, 0o700),
            ("/var/lib/gatehouse/router", Router, Router, 0o700),
            ("/run/gatehouse", Up, Up, 0o755),
            ("/run/gatehouse/proxy", Proxy, Proxy, 0o700),
            ("/run/gatehouse/router-proxy", Proxy, Router, 0o750),
            ("/run/gatehouse/jobs", Up, Router, 0o750),
            ("/run/gatehouse/supervisor", Up, Up, 0o700),
        ];
        let want: Vec<(String, Owner, Owner, u32)> = want
            .iter()
            .map(|(p, o, g, m)| (p.to_string(), *o, *g, *m))
            .collect();
        assert_eq!(table, want);
        let with = l.clone().with_long_connection();
        let last = with.dirs().pop().unwrap();
        assert_eq!(
            (last.path.as_path(), last.owner, last.group, last.mode),
            (Path::new("/run/gatehouse/feishu"), Router, Proxy, 0o2750)
        );
        assert_eq!(
            with.handoff_socket(),
            Some(Path::new("/run/gatehouse/feishu/handoff.sock"))
        );
        assert!(with
            .sockets()
            .contains(&("Feishu hand-off", with.handoff_socket().unwrap())));
        assert_eq!(with.dirs().len(), l.dirs().len() + 1);
        // No directory with a socket or a secret lets others in.
        for d in l.dirs() {
            let private = [
                &l.proxy_state,
                &l.proxy_run,
                &l.router_proxy_run,
                &l.jobs_run,
                &l.supervisor_run,
                &l.supervisor_state,
                &l.router_state,
                &l.logs_dir,
            ];
            if private.contains(&&d.path) {
                assert_eq!(d.mode & 0o007, 0, "{}", d.path.display());
            }
        }
        // Every socket sits in one of those, every part's state too.
        assert!(l.admin_socket.starts_with(&l.proxy_run));
        assert!(l.identity_socket_dir.starts_with(&l.proxy_run));
        assert!(l.jobs_socket.starts_with(&l.jobs_run));
        assert!(l.supervisor_run.starts_with(&l.run_dir));
        assert!(l.audit_log.starts_with(&l.proxy_state));
        assert!(l.router_db.starts_with(&l.router_state));
        assert!(l
            .router_identities
            .iter()
            .all(|i| i.socket.starts_with(&l.router_proxy_run)));
    }

    #[test]
    fn socket_paths_within_the_limit() {
        assert_eq!(layout(true).overlong_socket(), None);
        let deep = Path::new("/tmp").join("d".repeat(60));
        let l = Layout::new(Path::new("/var/lib/g"), &deep, &[], false);
        assert!(l.overlong_socket().is_some());
    }
}
