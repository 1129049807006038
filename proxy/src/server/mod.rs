//! The proxy's I/O: one unix listener per identity, CONNECT interception,
//! forwarding, and the registry of identities the admin socket changes.
//!
//! ```text
//! identity socket ─► outer HTTP/1.1 (connect.rs)
//!     CONNECT host:443 ─┬─ tunnel host ─► spliced TCP (no credentials)
//!                       ├─ rule host ───► TLS with a minted leaf ─► inner HTTP/1.1
//!                       └─ else 403                                   │
//!     GET http://host/… ───────────────────────────────────────────────┤
//!                                                       forward.rs: check ─► inject ─► upstream
//! ```
//!
//! The identity of a request is the socket it arrived on. Revoking an
//! identity closes its listener, removes its socket and cuts every open
//! connection (outer, intercepted and spliced).

mod answers;
pub mod audit_writer;
pub(crate) mod backoff;
pub mod client_socket;
mod completion;
mod connect;
mod deadline;
mod forward;
pub mod framing;
mod head;
mod headers;
mod heavy;
mod idle;
mod inspect;
mod lifecycle;
mod message;
mod owned;
pub mod persist;
pub mod policy;
mod records;
pub mod refusals;
mod renamed;
mod respond;
mod sockets;
mod state_writer;
mod token_retry;
mod transparent;

/// Kinds of the identity's kept objects that are learned repository forms,
/// not objects it created ([`renamed`]).
pub const LEARNED_KINDS: [&str; 2] = [renamed::REPOSITORY_ID, renamed::REPOSITORY_NAME];

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use gatehouse_types::{variables, DnsName, IdentityName, RepoSlug, TunnelTarget};
use serde::Serialize;
use tokio::sync::{watch, Semaphore};

use crate::ca::CertificateAuthority;
use crate::credentials::Credentials;
use crate::limits::{Budget, Limits};
use crate::upstream::{IdleConnections, Lane, Upstreams};
use audit_writer::AuditWriter;
use policy::{Policy, Scope};
use sockets::{bind_socket, identity_dir};

/// Errors creating or removing identities.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The name is not `[A-Za-z0-9_-]{1,64}`.
    #[error("identity name {0:?} must be 1 to 64 characters of A-Z a-z 0-9 _ -")]
    BadName(String),
    /// An identity of that name exists.
    #[error("identity {0:?} already exists")]
    Exists(String),
    /// No identity of that name exists.
    #[error("no identity named {0:?}")]
    NotFound(String),
    /// The rule book refuses the identity's rule sets or variables.
    #[error("{0}")]
    Rules(String),
    /// A tunnel host is not `host[:port]` with a lowercase DNS name.
    #[error("tunnel host {0:?} must be a lowercase DNS name with a dot and an optional port (`host:port`, no IP address)")]
    BadTunnelHost(String),
    /// A variable's name or value is not acceptable.
    #[error("variable {name:?}: {why}")]
    BadVariable { name: String, why: String },
    /// The saved identities could not be written: what was asked is not
    /// durable, so it is not answered as done.
    #[error("the identity state could not be saved")]
    State(#[source] persist::PersistError),
    /// The socket could not be created.
    #[error("identity socket {path}")]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What an identity may do; given by the config or `POST /identities`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IdentitySpec {
    pub name: String,
    pub rule_sets: Vec<String>,
    pub tunnel_hosts: Vec<String>,
    pub variables: BTreeMap<String, String>,
    /// Where its socket goes (a static identity of the config). `None`: an
    /// identity of the admin API, whose socket is
    /// `<identity socket dir>/<name>/proxy.sock`, saved across restarts.
    pub socket: Option<PathBuf>,
    /// The one user whose connections it admits (SO_PEERCRED; root too),
    /// when known: the router's for its identities. `None`: whoever
    /// reaches the socket.
    pub peer_uid: Option<u32>,
}

/// The file name of a dynamic identity's socket in its own directory.
pub const IDENTITY_SOCKET: &str = gatehouse_types::sandbox::PROXY_SOCKET_NAME;
/// Beside it, the socket a sandbox's relay sends ports 443 and 80 to
/// ([`transparent`]).
pub const TRANSPARENT_SOCKET: &str = gatehouse_types::sandbox::TRANSPARENT_SOCKET_NAME;

/// A live identity.
pub struct Identity {
    pub name: String,
    pub scope: Scope,
    /// The `host:port`s it may splice (a bare host in the spec is port 443).
    pub tunnel_hosts: BTreeSet<TunnelTarget>,
    pub socket: PathBuf,
    /// Its transparent socket: a dynamic identity's, beside `socket`.
    transparent_socket: Option<PathBuf>,
    /// The one user it admits, when bound ([`IdentitySpec::peer_uid`]).
    peer_uid: Option<u32>,
    /// Created through the admin API: in its own directory, saved.
    dynamic: bool,
    /// Its upstream connections between client connections.
    idle: Arc<IdleConnections>,
    revoked: watch::Sender<bool>,
    /// The objects it created (people's words are theirs).
    created: owned::Created,
    /// Its open client connections ([`Budget::per_identity`] permits).
    connections: Arc<Semaphore>,
    /// Its requests in flight ([`Limits::requests_per_identity`] permits).
    requests: Arc<Semaphore>,
}

impl Identity {
    fn revoked(&self) -> watch::Receiver<bool> {
        self.revoked.subscribe()
    }

    /// The upstream lane of one of its client connections.
    fn lane(&self, upstreams: &Upstreams) -> Arc<Lane> {
        Arc::new(Lane::new(upstreams.clone(), self.idle.clone()))
    }
}

/// What `GET /identities` lists.
#[derive(Clone, Debug, Serialize)]
pub struct IdentityInfo {
    pub name: String,
    pub socket: PathBuf,
    pub rule_sets: Vec<String>,
    pub tunnel_hosts: Vec<String>,
    pub variables: BTreeMap<String, String>,
}

/// Everything the proxy's tasks share.
pub struct Proxy {
    ca: Arc<CertificateAuthority>,
    upstreams: Upstreams,
    policy: Arc<dyn Policy>,
    credentials: Arc<Credentials>,
    audit: AuditWriter,
    socket_dir: PathBuf,
    identities: Mutex<HashMap<String, Arc<Identity>>>,
    refusals: Mutex<refusals::RefusalLimiter>,
    limits: Limits,
    budget: Budget,
    /// Parked upstream connections of all identities ([`Budget::parked`]).
    parked: Arc<Semaphore>,
    /// Client connections of all identities ([`Budget::connections`]).
    connections: Arc<Semaphore>,
    /// Where whole-body checks run, off the runtime's worker threads.
    heavy: heavy::HeavyPool,
    request_prefix: String,
    next_request: AtomicU64,
    /// Where the dynamic identities are saved ([`persist`]), once set.
    identity_state: OnceLock<state_writer::StateWriter>,
    identity_state_lock: Mutex<persist::Pending>,
}

/// Where an identity's socket goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// The config's path.
    Static,
    /// Created through the admin API: a new directory of its own.
    Created,
    /// Restored from the saved state: the directory a sandbox may hold.
    Restored,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("socket_dir", &self.socket_dir)
            .finish_non_exhaustive()
    }
}

/// The parts a proxy is built from.
pub struct ProxyParts {
    pub ca: Arc<CertificateAuthority>,
    pub upstreams: Upstreams,
    pub policy: Arc<dyn Policy>,
    pub credentials: Arc<Credentials>,
    pub audit: AuditWriter,
    /// Directory for identity sockets (created 0700 if absent).
    pub socket_dir: PathBuf,
    /// What one identity may hold; capped further by the open-file limit
    /// in force when the proxy is built.
    pub limits: Limits,
}

impl Proxy {
    pub fn new(parts: ProxyParts) -> Result<Arc<Self>, IdentityError> {
        let dir = &parts.socket_dir;
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|source| IdentityError::Socket {
                path: dir.clone(),
                source,
            })?;
        let socket_dir = std::fs::canonicalize(dir).map_err(|source| IdentityError::Socket {
            path: dir.clone(),
            source,
        })?;
        let budget = Budget::of(crate::limits::descriptor_limit(), &parts.limits);
        tracing::info!(
            connections = budget.connections,
            per_identity = budget.per_identity,
            parked = budget.parked,
            requests_per_identity = parts.limits.requests_per_identity,
            "connection budget"
        );
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Ok(Arc::new(Self {
            ca: parts.ca,
            upstreams: parts.upstreams,
            policy: parts.policy,
            credentials: parts.credentials,
            audit: parts.audit,
            socket_dir,
            identities: Mutex::new(HashMap::new()),
            refusals: Mutex::new(refusals::RefusalLimiter::default()),
            limits: parts.limits,
            budget,
            connections: Arc::new(Semaphore::new(budget.connections)),
            parked: Arc::new(Semaphore::new(budget.parked)),
            heavy: heavy::HeavyPool::for_this_machine(),
            request_prefix: format!("req_{:x}", started.as_nanos()),
            next_request: AtomicU64::new(1),
            identity_state: OnceLock::new(),
            identity_state_lock: Mutex::new(persist::Pending::default()),
        }))
    }

    fn request_id(&self) -> String {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        format!("{}_{n}", self.request_prefix)
    }

    fn lock_identities(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Identity>>> {
        self.identities.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a refused request on record (503 instead of the refusal when
    /// that fails): its own line, or, past the identity's rate of refusal
    /// records, a count in a later `suppressed` line ([`refusals`]).
    fn record_refusal(
        &self,
        record: crate::audit::Record,
    ) -> Result<(), audit_writer::AuditUnavailable> {
        let identity = match &record {
            crate::audit::Record::Request(r) => {
                // Counted whether or not the rate limit lets its line through.
                crate::metrics::request(r);
                r.identity.as_str()
            }
            _ => return self.audit.record(record),
        };
        let time = records::now();
        let admission = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(identity, std::time::Instant::now(), &time);
        if let Some(summary) = admission.summary {
            self.audit
                .record(crate::audit::Record::Suppressed(summary))?;
        }
        if admission.write {
            self.audit.record(record)?;
        }
        Ok(())
    }

    /// Writes the refusal counts still pending: `name`'s, or everyone's.
    fn write_refusal_counts(&self, name: Option<&str>) {
        let time = records::now();
        let counts = {
            let mut limiter = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            match name {
                Some(name) => limiter.remove(name, &time).into_iter().collect(),
                None => limiter.drain(&time),
            }
        };
        for count in counts {
            if self
                .audit
                .record(crate::audit::Record::Suppressed(count))
                .is_err()
            {
                tracing::error!("a count of refusals could not be recorded");
            }
        }
    }

    /// The CA (for tests and for writing the trust bundle).
    pub fn ca(&self) -> &CertificateAuthority {
        &self.ca
    }

    fn insert(
        self: &Arc<Self>,
        spec: IdentitySpec,
        placement: Placement,
        own: impl IntoIterator<Item = crate::rules::OwnedObject>,
    ) -> Result<PathBuf, IdentityError> {
        let checked = self.validate(&spec)?;
        let mut identities = self.lock_identities();
        if identities.contains_key(&spec.name) {
            return Err(IdentityError::Exists(spec.name));
        }
        // The name is checked (no `/`, no `..`): the directory is the socket
        // directory's own child.
        let socket = match &spec.socket {
            Some(socket) => socket.clone(),
            None => identity_dir(
                &self.socket_dir.join(&spec.name),
                placement == Placement::Created,
            )?
            .join(IDENTITY_SOCKET),
        };
        let listener = bind_socket(&socket)?;
        let transparent = match (&spec.socket, socket.parent()) {
            (None, Some(dir)) => {
                let path = dir.join(TRANSPARENT_SOCKET);
                let listener = bind_socket(&path)?;
                Some((path, listener))
            }
            _ => None,
        };
        let (revoked, _) = watch::channel(false);
        let created = owned::Created::default();
        created.restore(own);
        let identity = Arc::new(Identity {
            name: spec.name.clone(),
            scope: Scope {
                rule_sets: spec.rule_sets.clone(),
                variables: spec.variables.clone(),
                repo: checked.repo,
            },
            tunnel_hosts: checked.tunnel_hosts.into_iter().collect(),
            socket: socket.clone(),
            transparent_socket: transparent.as_ref().map(|(path, _)| path.clone()),
            peer_uid: spec.peer_uid,
            dynamic: placement != Placement::Static,
            idle: IdleConnections::new(self.parked.clone()),
            revoked,
            created,
            connections: Arc::new(Semaphore::new(self.budget.per_identity)),
            requests: Arc::new(Semaphore::new(self.limits.requests_per_identity)),
        });
        identities.insert(spec.name.clone(), identity.clone());
        drop(identities);
        if let Some((_, listener)) = transparent {
            tokio::spawn(connect::accept_loop(
                self.clone(),
                identity.clone(),
                listener,
                connect::Endpoint::Transparent,
            ));
        }
        tokio::spawn(connect::accept_loop(
            self.clone(),
            identity,
            listener,
            connect::Endpoint::Proxy,
        ));
        tracing::info!(identity = %spec.name, socket = %socket.display(), "identity created");
        Ok(socket)
    }

    /// Stops serving an identity (socket removed, connections cut) without
    /// forgetting it: what a shutdown does, so that a restart brings back
    /// the identities of jobs that still run.
    fn close_identity(&self, name: &str) -> Result<Arc<Identity>, IdentityError> {
        let identity = self
            .lock_identities()
            .remove(name)
            .ok_or_else(|| IdentityError::NotFound(name.to_string()))?;
        let _ = std::fs::remove_file(&identity.socket);
        if let Some(path) = &identity.transparent_socket {
            let _ = std::fs::remove_file(path);
        }
        identity.revoked.send_replace(true);
        identity.idle.close();
        Ok(identity)
    }

    /// Every rule set the policy knows, withdrawn ones with why.
    pub fn known_rule_sets(&self) -> Vec<gatehouse_types::wire::KnownRuleSet> {
        self.policy.known_rule_sets()
    }

    /// All live identities, by name.
    pub fn identities(&self) -> Vec<IdentityInfo> {
        let mut list: Vec<IdentityInfo> = self
            .lock_identities()
            .values()
            .map(|i| IdentityInfo {
                name: i.name.clone(),
                socket: i.socket.clone(),
                rule_sets: i.scope.rule_sets.clone(),
                tunnel_hosts: i.tunnel_hosts.iter().map(|t| t.to_string()).collect(),
                variables: i.scope.variables.clone(),
            })
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// Closes every identity and writes out the audit log (shutdown). The
    /// saved identities stay saved: the jobs they belong to may outlive
    /// this process (the supervisor revokes them when the jobs end).
    pub async fn shutdown(&self) {
        let names: Vec<String> = self.lock_identities().keys().cloned().collect();
        for name in names {
            let _ = self.close_identity(&name);
            self.write_refusal_counts(Some(&name));
        }
        // Let cut connections record their completions, then sync.
        tokio::task::yield_now().await;
        self.write_refusal_counts(None);
        if self.audit.flush().await.is_err() {
            tracing::error!("the audit log could not be flushed at shutdown");
        }
    }

    fn validate(&self, spec: &IdentitySpec) -> Result<CheckedSpec, IdentityError> {
        let checked = validate_spec(spec)?;
        self.policy
            .check_identity(&spec.rule_sets, &spec.variables)
            .map_err(IdentityError::Rules)?;
        Ok(checked)
    }
}

/// An error with its causes, `a: b: c` (error types here keep their cause
/// out of their own message, so that `anyhow`'s chain shows it once).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The typed parts of a spec that [`validate_spec`] accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedSpec {
    pub name: IdentityName,
    pub tunnel_hosts: Vec<TunnelTarget>,
    /// The `repo` variable, which the rules bind as `{repo}` and the GitHub
    /// credential scopes its token to.
    pub repo: Option<RepoSlug>,
}

/// Checks an identity's name, tunnel hosts and variable shapes (pure).
pub fn validate_spec(spec: &IdentitySpec) -> Result<CheckedSpec, IdentityError> {
    let name =
        IdentityName::parse(&spec.name).map_err(|_| IdentityError::BadName(spec.name.clone()))?;
    let tunnel_hosts = spec
        .tunnel_hosts
        .iter()
        .map(|h| TunnelTarget::parse(h).map_err(|_| IdentityError::BadTunnelHost(h.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    for (var, value) in &spec.variables {
        variables::check(var, value).map_err(|e| IdentityError::BadVariable {
            name: var.clone(),
            why: e.expected().to_string(),
        })?;
    }
    let repo = match spec.variables.get(variables::REPO) {
        Some(value) => Some(
            RepoSlug::parse(value).map_err(|_| IdentityError::BadVariable {
                name: variables::REPO.to_string(),
                why: "expected owner/name".to_string(),
            })?,
        ),
        None => None,
    };
    Ok(CheckedSpec {
        name,
        tunnel_hosts,
        repo,
    })
}

/// A lowercase DNS name with at least one dot and no IP-literal shape.
pub fn is_dns_name(host: &str) -> bool {
    DnsName::is_valid(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, vars: &[(&str, &str)]) -> IdentitySpec {
        IdentitySpec {
            name: name.into(),
            rule_sets: vec!["github-worker".into()],
            tunnel_hosts: vec!["registry.npmjs.org".into()],
            variables: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            socket: None,
            peer_uid: None,
        }
    }

    #[test]
    fn identity_spec_table() {
        let ok = [
            spec("tkt_1", &[("repo", "octo/hello")]),
            spec("router", &[]),
            spec("a-b_C9", &[("repo", "o/r.js")]),
        ];
        for s in ok {
            validate_spec(&s).unwrap();
        }
        let checked = validate_spec(&spec("tkt_1", &[("repo", "octo/hello")])).unwrap();
        assert_eq!(checked.repo.unwrap().as_str(), "octo/hello");
        assert_eq!(
            checked.tunnel_hosts[0].to_string(),
            "registry.npmjs.org:443"
        );
        let bad = [
            spec("", &[]),
            spec("../x", &[]),
            spec("a/b", &[]),
            spec(&"x".repeat(65), &[]),
            spec("t", &[("repo", "octo")]),
            spec("t", &[("repo", "../x")]),
            spec("t", &[("repo", "o/..")]),
            spec("t", &[("repo", "o/r/extra")]),
            spec("t", &[("repo", "o%2fr/x")]),
            spec("t", &[("bad name", "x")]),
        ];
        for s in bad {
            assert!(validate_spec(&s).is_err(), "{s:?}");
        }
        // A profile's tunnels are `host:port`: the identity takes them as
        // they are (a bare host is port 443).
        for host in ["x.org:443", "registry.npmjs.org", "index.crates.io:8443"] {
            let mut s = spec("t", &[]);
            s.tunnel_hosts = vec![host.into()];
            validate_spec(&s).unwrap();
        }
        for host in [
            "127.0.0.1",
            "Registry.npmjs.org",
            "x.org:0",
            "x.org:443:1",
            "127.0.0.1:443",
            "localhost",
            "localhost:443",
            "",
        ] {
            let mut s = spec("t", &[]);
            s.tunnel_hosts = vec![host.into()];
            assert!(validate_spec(&s).is_err(), "{host}");
        }
    }
}
