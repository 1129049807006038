//! Everything `up` needs, checked before anything starts (`gatehouse config
//! check` runs exactly this): the file, the accounts, the policy, the
//! credential and verification secret files at rest, the socket paths, and
//! the three generated configs loaded by each part's own loader.

use std::path::{Path, PathBuf};

use gatehouse_proxy::config::ProxyConfig;
use gatehouse_proxy::rules::RuleSet;
use gatehouse_router::policy::Policy;
use gatehouse_supervisor::accounts;

use super::access::{self, Who};
use super::config::UpFile;
use super::generate::{self, Generated};
use super::layout::Layout;
use super::UpError;

/// Under which users the parts run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Users {
    /// `up` is root: the proxy and the router each get their account, the
    /// supervisor stays root (it builds sandboxes).
    Separated {
        proxy: Who,
        router: Who,
        /// The group named like the router's account, its primary group:
        /// the job API socket's group.
        router_group: String,
    },
    /// Everything under the invoking user: weaker (the router could read
    /// the credential files), documented as such.
    Rootless(Who),
}

impl Users {
    pub fn up(&self) -> Who {
        match self {
            Users::Separated { .. } => Who { uid: 0, gid: 0 },
            Users::Rootless(me) => *me,
        }
    }
    pub fn proxy(&self) -> Who {
        match self {
            Users::Separated { proxy, .. } => *proxy,
            Users::Rootless(me) => *me,
        }
    }
    pub fn router(&self) -> Who {
        match self {
            Users::Separated { router, .. } => *router,
            Users::Rootless(me) => *me,
        }
    }
    pub fn router_group(&self) -> Option<&str> {
        match self {
            Users::Separated { router_group, .. } => Some(router_group),
            Users::Rootless(_) => None,
        }
    }
    pub fn separated(&self) -> bool {
        matches!(self, Users::Separated { .. })
    }
}

/// A checked configuration, ready to start.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub config_path: PathBuf,
    pub file: UpFile,
    pub users: Users,
    /// Every repository of the policy's teams, sorted.
    pub repos: Vec<String>,
    pub layout: Layout,
    pub generated: Generated,
}

/// Reads and checks the config at `path`; see the module doc.
pub fn prepare(path: &Path) -> Result<Prepared, UpError> {
    let path = std::path::absolute(path).map_err(|source| UpError::Read {
        path: path.to_owned(),
        source,
    })?;
    let text = std::fs::read_to_string(&path).map_err(|source| UpError::Read {
        path: path.clone(),
        source,
    })?;
    let file = UpFile::parse(&path, &text)?;
    let invalid = |key: &str, message: String| UpError::Invalid {
        file: path.clone(),
        key: key.to_owned(),
        message,
    };
    let users = resolve_users(&file).map_err(|(key, m)| invalid(key, m))?;
    let policy = Policy::load(&file.policy).map_err(|e| invalid("policy", e.to_string()))?;
    let mut repos: Vec<String> = policy
        .teams
        .values()
        .flat_map(|t| t.repos.keys().cloned())
        .collect();
    repos.sort();
    let mut layout = Layout::new(
        &file.state_dir,
        &file.run_dir,
        &repos,
        file.feishu.is_some(),
    );
    // With a GitHub App, the router recovers failed webhooks through an
    // identity of its own (the proxy signs the App JWT).
    if file
        .credentials
        .values()
        .any(|c| matches!(c, gatehouse_proxy::config::CredentialFile::GithubApp { .. }))
    {
        layout = layout.with_github_app();
    }
    if file.feishu.as_ref().is_some_and(|f| f.long_connection) {
        layout = layout.with_long_connection();
    }
    if let Some(socket) = layout.overlong_socket() {
        return Err(invalid(
            "run_dir",
            format!(
                "the socket path {} is longer than {} bytes: choose a shorter run_dir",
                socket.display(),
                super::layout::MAX_SOCKET_PATH
            ),
        ));
    }
    check_secrets(&file, &users).map_err(|(key, m)| invalid(&key, m))?;
    readable(&file.policy, users.router(), "the router's").map_err(|m| invalid("policy", m))?;
    let generated = generate::all(&file, &layout, &users)?;
    load_generated(&layout, &generated, &policy)?;
    Ok(Prepared {
        config_path: path,
        file,
        users,
        repos,
        layout,
        generated,
    })
}

/// As root, the two accounts from `/etc/passwd` (never NSS: the binary is
/// static) and the router's group; otherwise the invoking user.
fn resolve_users(file: &UpFile) -> Result<Users, (&'static str, String)> {
    let me = Who {
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
    };
    if me.uid != 0 {
        return Ok(Users::Rootless(me));
    }
    let account = |key: &'static str, name: &str| {
        let found = accounts::user(name).map_err(|e| (key, format!("reading /etc/passwd: {e}")))?;
        let a = found.ok_or_else(|| {
            (
                key,
                format!("no account `{name}` in /etc/passwd (scripts/setup-debian creates it)"),
            )
        })?;
        if a.uid == 0 {
            return Err((
                key,
                format!("`{name}` is root: expected an unprivileged account"),
            ));
        }
        Ok(Who {
            uid: a.uid,
            gid: a.gid,
        })
    };
    let proxy = account("proxy_user", &file.proxy_user)?;
    let router = account("router_user", &file.router_user)?;
    if proxy.uid == router.uid || proxy.gid == router.gid {
        return Err((
            "router_user",
            "the router's account shares a uid or primary group with the proxy's: it could \
             read the credentials"
                .into(),
        ));
    }
    let group = accounts::group(&file.router_user)
        .map_err(|e| ("router_user", format!("reading /etc/group: {e}")))?;
    if group != Some(router.gid) {
        return Err((
            "router_user",
            format!(
                "expected a group named `{}` that is the account's primary group (gid {}): \
                 the job API socket is shared through it",
                file.router_user, router.gid
            ),
        ));
    }
    Ok(Users::Separated {
        proxy,
        router,
        router_group: file.router_user.clone(),
    })
}

/// Credential files are the proxy's alone; verification secrets the
/// router's (it verifies deliveries). Returns the key and why.
fn check_secrets(file: &UpFile, users: &Users) -> Result<(), (String, String)> {
    let router = users.separated().then(|| users.router());
    for (name, credential) in &file.credentials {
        let path = credential.secret_file();
        let key = format!("credentials.{name}");
        let (dirs, meta) =
            access::walk(path).map_err(|e| (key.clone(), format!("{}: {e}", path.display())))?;
        if let Some(problem) = access::credential_problem(&dirs, meta, users.proxy(), router) {
            return Err((key, format!("{} {problem}", path.display())));
        }
    }
    let mut verification: Vec<(String, &Path)> = Vec::new();
    if let Some(github) = &file.github {
        for (i, p) in github.webhook_secret_files.iter().enumerate() {
            verification.push((format!("github.webhook_secret_files[{i}]"), p));
        }
    }
    if let Some(feishu) = &file.feishu {
        if let Some(p) = &feishu.encrypt_key_file {
            verification.push(("feishu.encrypt_key_file".into(), p));
        }
        if let Some(p) = &feishu.verification_token_file {
            verification.push(("feishu.verification_token_file".into(), p));
        }
    }
    for (key, path) in verification {
        let (dirs, meta) =
            access::walk(path).map_err(|e| (key.clone(), format!("{}: {e}", path.display())))?;
        if let Some(problem) = access::verification_secret_problem(&dirs, meta, users.router()) {
            return Err((key, format!("{} {problem}", path.display())));
        }
    }
    Ok(())
}

fn readable(path: &Path, who: Who, whose: &str) -> Result<(), String> {
    let (dirs, meta) = access::walk(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if access::may_read_path(&dirs, meta, who) {
        Ok(())
    } else {
        Err(format!(
            "{}: {whose} user (uid {}) cannot read it",
            path.display(),
            who.uid
        ))
    }
}

/// Each generated file, loaded by its part's own loader; then the rule
/// sets the policy's repositories name must be among the proxy's.
fn load_generated(layout: &Layout, generated: &Generated, policy: &Policy) -> Result<(), UpError> {
    let part = |part: &'static str, file: &Path, message: String| UpError::Part {
        part,
        file: file.to_owned(),
        message,
    };
    // The proxy's: parse, read the rule sets it names, validate.
    let proxy_file = &layout.proxy_toml;
    let raw = ProxyConfig::parse(proxy_file, &generated.proxy)
        .map_err(|e| part("proxy", proxy_file, e.to_string()))?;
    let mut sets = Vec::new();
    let base = proxy_file.parent().unwrap_or(Path::new("/"));
    for rule_path in raw
        .rule_set_paths(base)
        .map_err(|e| part("proxy", proxy_file, e.to_string()))?
    {
        let text = std::fs::read_to_string(&rule_path)
            .map_err(|e| part("proxy", proxy_file, format!("{}: {e}", rule_path.display())))?;
        let set = RuleSet::parse(&rule_path.display().to_string(), &text)
            .map_err(|e| part("proxy", proxy_file, e.to_string()))?;
        sets.push(set);
    }
    let proxy = raw
        .validate(proxy_file, sets)
        .map_err(|e| part("proxy", proxy_file, e.to_string()))?;
    for (team_name, team) in &policy.teams {
        for (repo, scope) in &team.repos {
            for set in &scope.rule_sets {
                if proxy.rule_book.get(set).is_none() {
                    let why = proxy
                        .rule_book
                        .withdrawn()
                        .find(|(name, _)| name == set)
                        .map(|(_, why)| format!("which is not in use: {why}"))
                        .unwrap_or_else(|| "which rule_sets_dir does not define".into());
                    return Err(part(
                        "proxy",
                        proxy_file,
                        format!(
                            "the policy's team `{team_name}` gives {repo} rule set `{set}`, {why}"
                        ),
                    ));
                }
            }
        }
    }
    // The supervisor's: parse, then its start-up checks (prompts, profiles).
    let sup_file = &layout.supervisor_toml;
    let base = sup_file.parent().unwrap_or(Path::new("/"));
    let sup = gatehouse_supervisor::jobs::Config::parse(&generated.supervisor, sup_file, base)
        .map_err(|e| part("supervisor", sup_file, e.to_string()))?;
    gatehouse_supervisor::jobs::preflight::check(&sup)
        .map_err(|e| part("supervisor", sup_file, e.to_string()))?;
    // Every repository's profile resolves and lets its jobs use the rule
    // sets the policy gives them (else each of its jobs is refused at start).
    let profiles = gatehouse_supervisor::profile::DirSource {
        dirs: sup.profiles_dir.iter().cloned().collect(),
    };
    for (team_name, team) in &policy.teams {
        for (repo, scope) in &team.repos {
            let name = &scope.sandbox_profile;
            let profile = gatehouse_supervisor::profile::resolve(&profiles, name).map_err(|e| {
                part(
                    "supervisor",
                    sup_file,
                    format!(
                        "the policy's team `{team_name}` gives {repo} sandbox profile `{name}`, \
                         which profiles_dir does not resolve: {e}"
                    ),
                )
            })?;
            let allowed = &profile.network.rule_sets;
            if let Some(set) = scope.rule_sets.iter().find(|s| !allowed.contains(s)) {
                return Err(part(
                    "supervisor",
                    sup_file,
                    format!(
                        "the policy's team `{team_name}` gives {repo} rule set `{set}`, which its \
                         sandbox profile `{name}` does not allow (network.rule_sets = [{}])",
                        allowed.join(", ")
                    ),
                ));
            }
        }
    }
    // The router's.
    let router_file = &layout.router_toml;
    let base = router_file.parent().unwrap_or(Path::new("/"));
    gatehouse_router::live::RouterConfig::from_toml(
        &router_file.display().to_string(),
        &generated.router,
        base,
    )
    .map_err(|e| part("router", router_file, e.to_string()))?;
    Ok(())
}
