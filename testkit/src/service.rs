//! The supervisor service's end-to-end harness: a running `gatehouse
//! supervisor` child with its own state dir, a client for its job API, and
//! a fake proxy admin server that speaks the admin API's contract.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::http::Response;
use gatehouse_supervisor::jobs::http::{
    self, Body, ClientResponse, HttpMethod as Method, HttpStatus as StatusCode,
};
use gatehouse_types::wire::{CreatedIdentity, KnownRuleSet, NewIdentity};
use serde_json::{json, Value};

use crate::rules::TEST_RULE_SET;

pub struct Options {
    pub unsandboxed: bool,
    pub max_running_jobs: usize,
    pub log_cap_bytes: u64,
    pub cancel_grace_ms: u64,
    pub proxy_admin: Option<PathBuf>,
    pub ca_cert: Option<PathBuf>,
    pub profiles_dir: Option<PathBuf>,
    pub api_socket_group: Option<String>,
    /// More `[limits]` lines (`key = value`), appended to the table.
    pub limits: String,
    /// Runs the supervisor under `prlimit --nofile=N:N`.
    pub nofile: Option<u64>,
    /// `[metrics] listen`.
    pub metrics: Option<std::net::SocketAddr>,
    /// `run_dir` (the control sockets); `None`: the default, `<state>/run`.
    pub run_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            unsandboxed: true,
            max_running_jobs: 64,
            log_cap_bytes: 1 << 20,
            cancel_grace_ms: 500,
            proxy_admin: None,
            ca_cert: None,
            profiles_dir: None,
            api_socket_group: None,
            limits: String::new(),
            nofile: None,
            metrics: None,
            run_dir: None,
        }
    }
}

/// A `gatehouse supervisor` process with its own state dir.
pub struct Service {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    /// Where the jobs' control sockets are.
    pub run_dir: PathBuf,
    child: Option<Child>,
    nofile: Option<u64>,
    /// Every line the supervisor logged, across restarts.
    log: Arc<Mutex<Vec<String>>>,
}

impl Service {
    pub fn start(opts: Options) -> Service {
        let dir = tempfile::Builder::new().prefix("gh-svc").tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let profiles = dir.path().join("profiles");
        std::fs::create_dir(&profiles).unwrap();
        std::fs::write(
            profiles.join(format!("{TEST_PROFILE}.toml")),
            test_profile_toml(),
        )
        .unwrap();
        let profiles_dir = opts.profiles_dir.clone().unwrap_or(profiles);
        let mut toml = format!(
            "state_dir = {state:?}\napi_socket = {socket:?}\nprompts_dir = {prompts:?}\n\
             [limits]\nmax_running_jobs = {max}\nlog_cap_bytes = {cap}\ncancel_grace_ms = {grace}\n",
            state = dir.path().join("state"),
            prompts = crate::bin::repo_path("prompts"),
            max = opts.max_running_jobs,
            cap = opts.log_cap_bytes,
            grace = opts.cancel_grace_ms,
        );
        toml.push_str(&opts.limits);
        if !opts.limits.is_empty() && !opts.limits.ends_with('\n') {
            toml.push('\n');
        }
        toml.push_str(&format!(
            "[sandbox]\ndangerously_unsandboxed = {}\n",
            opts.unsandboxed
        ));
        toml.push_str(&format!("profiles_dir = {profiles_dir:?}\n"));
        if let Some(group) = &opts.api_socket_group {
            // A top-level key: insert it before the first table.
            toml.insert_str(0, &format!("api_socket_group = {group:?}\n"));
        }
        if let Some(run) = &opts.run_dir {
            toml.insert_str(0, &format!("run_dir = {run:?}\n"));
        }
        let run_dir = opts
            .run_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("state").join("run"));
        if let Some(admin) = &opts.proxy_admin {
            toml.push_str(&format!("[proxy]\nadmin_socket = {admin:?}\n"));
            if let Some(ca) = &opts.ca_cert {
                toml.push_str(&format!("ca_cert = {ca:?}\n"));
            }
        }
        if let Some(addr) = &opts.metrics {
            toml.push_str(&format!("[metrics]\nlisten = \"{addr}\"\n"));
        }
        let config = dir.path().join("supervisor.toml");
        std::fs::write(&config, toml).unwrap();
        let mut service = Service {
            dir,
            config,
            socket,
            run_dir,
            child: None,
            nofile: opts.nofile,
            log: Arc::default(),
        };
        service.spawn();
        service
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Starts the supervisor process and returns once its API is served
    /// (it logs "job API on" when the socket is bound).
    pub fn spawn(&mut self) {
        // `prlimit` execs the supervisor: the child is the supervisor itself.
        let mut command = match self.nofile {
            Some(n) => {
                let mut c = std::process::Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}"))
                    .arg(crate::bin::gatehouse());
                c
            }
            None => crate::bin::command(),
        };
        let mut child = command
            .args(["supervisor", "--config"])
            .arg(&self.config)
            .env(
                "RUST_LOG",
                std::env::var("GATEHOUSE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[supervisor] {line}");
                log.lock().unwrap().push(line.clone());
                if line.contains("job API on") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the supervisor did not start");
        self.child = Some(child);
    }

    /// The lines the supervisor has logged so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// SIGKILLs the supervisor: no cleanup of any kind happens.
    pub fn kill_9(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERMs the supervisor and waits for it to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        crate::procs::signal(child.id(), "TERM");
        child.wait().unwrap()
    }

    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> ClientResponse {
        self.call_with(method, path, &[], body).await
    }

    pub async fn call_with(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> ClientResponse {
        let body = body.map(|b| serde_json::to_vec(&b).unwrap());
        http::request(&self.socket, method, path, headers, body)
            .await
            .unwrap()
    }

    /// `POST /jobs` with `key`; asserts 202 and returns the job id.
    pub async fn submit(&self, key: &str, body: Value) -> String {
        let resp = self
            .call_with(
                Method::POST,
                "/jobs",
                &[("idempotency-key", key)],
                Some(body),
            )
            .await;
        assert_eq!(resp.status, StatusCode::ACCEPTED, "{:?}", resp.json());
        resp.json()["job_id"].as_str().unwrap().to_owned()
    }

    pub async fn job(&self, id: &str) -> Value {
        let resp = self.call(Method::GET, &format!("/jobs/{id}"), None).await;
        assert_eq!(resp.status, StatusCode::OK, "{:?}", resp.json());
        resp.json()
    }

    /// Waits, through the events long-poll, until job `id` reaches a state
    /// for which `done` holds; returns the job view then.
    pub async fn wait_for(&self, id: &str, done: impl Fn(&str) -> bool) -> Value {
        let mut cursor = 0i64;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let job = self.job(id).await;
            if done(job["state"].as_str().unwrap()) {
                return job;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} stuck in {}",
                job["state"]
            );
            let resp = self
                .call(
                    Method::GET,
                    &format!("/events?after={cursor}&wait_ms=5000"),
                    None,
                )
                .await;
            assert_eq!(resp.status, StatusCode::OK);
            cursor = resp.json()["next"].as_i64().unwrap();
        }
    }

    pub async fn wait_ended(&self, id: &str) -> Value {
        self.wait_for(id, |s| !matches!(s, "queued" | "running"))
            .await
    }

    pub fn control_socket(&self, job_id: &str) -> PathBuf {
        self.run_dir.join(job_id).join("control.sock")
    }

    pub fn work_dir(&self, ticket: &str) -> PathBuf {
        self.state_dir().join("tickets").join(ticket).join("work")
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}

/// The profile test jobs use: the repository's `default` coding profile,
/// plus a tunnel and a rule set the fake proxy refuses.
pub const TEST_PROFILE: &str = "svc-test";
fn test_profile_toml() -> String {
    format!(
        r#"
extends = "default"
description = "supervisor service tests"
[network]
rule_sets = ["github-repo", "{TEST_RULE_SET}", "no-such-rules"]
tunnels = ["registry.npmjs.org:443"]
"#
    )
}

/// The rule sets [`FakeProxyAdmin`] lists. `no-such-rules` is listed but
/// refused when an identity names it: a set taken out of the proxy after
/// the supervisor started.
pub const FAKE_ADMIN_RULE_SETS: [&str; 3] = ["github-repo", TEST_RULE_SET, "no-such-rules"];

/// A job body running `sh -c script` for `ticket`.
pub fn sh_job(ticket: &str, script: &str) -> Value {
    json!({
        "ticket": ticket,
        "team": "default",
        "profile": TEST_PROFILE,
        "task": "test task",
        "command": ["sh", "-c", script],
    })
}

/// One call to the fake proxy admin API.
#[derive(Clone, Debug)]
pub struct AdminCall {
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// A stand-in for the proxy's admin socket, speaking its contract:
/// `POST /identities` → 201 `{name, socket}` (409 existing, 400 unknown rule
/// set), `DELETE /identities/{name}` → 204 (socket removed) or 404,
/// `GET /identities`, `GET /rule-sets` ([`FAKE_ADMIN_RULE_SETS`]).
pub struct FakeProxyAdmin {
    pub socket: PathBuf,
    pub calls: Arc<Mutex<Vec<AdminCall>>>,
    pub live: Arc<Mutex<BTreeMap<String, PathBuf>>>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl FakeProxyAdmin {
    pub fn start() -> FakeProxyAdmin {
        let dir = tempfile::Builder::new().prefix("gh-fpa").tempdir().unwrap();
        let socket = dir.path().join("admin.sock");
        let listener = http::bind(&socket, 0o600).unwrap();
        let state = FakeState {
            calls: Arc::default(),
            live: Arc::default(),
            base: dir.path().to_owned(),
        };
        let served = state.clone();
        let task = tokio::spawn(http::serve(listener, 1 << 20, move |req| {
            let state = served.clone();
            async move {
                let (parts, bytes) = req.into_parts();
                state.answer(parts.method.as_str(), parts.uri.path(), &bytes)
            }
        }));
        FakeProxyAdmin {
            socket,
            calls: state.calls,
            live: state.live,
            _dir: dir,
            task,
        }
    }

    pub fn live_identities(&self) -> Vec<String> {
        self.live.lock().unwrap().keys().cloned().collect()
    }

    pub fn calls(&self) -> Vec<AdminCall> {
        self.calls.lock().unwrap().clone()
    }

    /// The calls on `/identities…`, leaving out the start-up `GET /rule-sets`.
    pub fn identity_calls(&self) -> Vec<AdminCall> {
        let mut calls = self.calls();
        calls.retain(|c| c.path.starts_with("/identities"));
        calls
    }
}

impl Drop for FakeProxyAdmin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the fake admin API shares between its connections.
#[derive(Clone)]
struct FakeState {
    calls: Arc<Mutex<Vec<AdminCall>>>,
    live: Arc<Mutex<BTreeMap<String, PathBuf>>>,
    /// Where identity sockets are made.
    base: PathBuf,
}

impl FakeState {
    /// Records the call, then answers it as the proxy would.
    fn answer(&self, method: &str, path: &str, body: &[u8]) -> Response<Body> {
        self.calls.lock().unwrap().push(AdminCall {
            method: method.to_owned(),
            path: path.to_owned(),
            body: serde_json::from_slice(body).unwrap_or(Value::Null),
        });
        match (method, path.strip_prefix("/identities")) {
            ("POST", Some("")) => self.create(body),
            ("GET", Some("")) => {
                let live = self.live.lock().unwrap();
                let names: Vec<&String> = live.keys().collect();
                http::json_response(StatusCode::OK, &json!(names))
            }
            ("DELETE", Some(rest)) if rest.starts_with('/') => self.revoke(&rest[1..]),
            _ if (method, path) == ("GET", "/rule-sets") => {
                let known: Vec<KnownRuleSet> = FAKE_ADMIN_RULE_SETS
                    .iter()
                    .map(|name| KnownRuleSet {
                        name: name.parse().unwrap(),
                        variables: vec![],
                        withdrawn: None,
                    })
                    .collect();
                http::json_response(StatusCode::OK, &json!(known))
            }
            _ => http::error_response(StatusCode::NOT_FOUND, "not_found", "no route"),
        }
    }

    /// `POST /identities`: the body is the shared wire type, as the proxy
    /// reads it; the rule set `no-such-rules` stands for one the proxy
    /// does not have.
    fn create(&self, body: &[u8]) -> Response<Body> {
        let new: NewIdentity = match serde_json::from_slice(body) {
            Ok(new) => new,
            Err(e) => {
                return http::error_response(StatusCode::BAD_REQUEST, "invalid", e.to_string())
            }
        };
        if new.rule_sets.iter().any(|r| r.as_str() == "no-such-rules") {
            return http::error_response(
                StatusCode::BAD_REQUEST,
                "unknown_rule_set",
                "unknown rule set no-such-rules",
            );
        }
        let mut live = self.live.lock().unwrap();
        if live.contains_key(new.name.as_str()) {
            return http::error_response(StatusCode::CONFLICT, "exists", "identity exists");
        }
        let socket = self.base.join(format!("{}.sock", new.name));
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::mem::forget(listener);
        live.insert(new.name.to_string(), socket.clone());
        let created = CreatedIdentity {
            name: new.name,
            socket,
        };
        http::json_response(StatusCode::CREATED, &created)
    }

    /// `DELETE /identities/{name}`: the socket is removed.
    fn revoke(&self, name: &str) -> Response<Body> {
        match self.live.lock().unwrap().remove(name) {
            Some(socket) => {
                let _ = std::fs::remove_file(socket);
                http::json_response(StatusCode::NO_CONTENT, &json!(null))
            }
            None => http::error_response(StatusCode::NOT_FOUND, "not_found", "no such identity"),
        }
    }
}

/// A `sleep` whose argument is unique to this test run, to find leftovers.
pub fn marker_sleep(tag: u32) -> String {
    format!("{}{:03}", 9000 + std::process::id() % 1000, tag)
}
