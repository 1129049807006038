//! The live loop's end-to-end world: every part a real process. The
//! GitHub and Feishu emulators push events to `gatehouse router run`, which
//! runs jobs on `gatehouse supervisor` (a real sandbox where the machine
//! can build one) and replies through `gatehouse proxy` with identities of
//! its own (rule sets `router-github`, `router-feishu`, as shipped).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use gatehouse_emulators::{
    user_id, FeishuEmulator, FeishuHandle, FeishuOptions, GithubEmulator, GithubHandle,
    GithubOptions, ModelEmulator, ModelHandle, ModelOptions, RepoSpec,
};
use serde_json::{json, Value};

use crate::proxy::process::{admin_call, start_proxy_process_with, ProxyProcess};
use crate::service::{Options, Service};

pub const WEBHOOK_SECRET: &str = "loop-webhook-secret";
pub const FEISHU_APP: &str = "cli_gatehouse_loop";
pub const FEISHU_KEY: &str = "loop-encrypt-key";
pub const FEISHU_TOKEN: &str = "loop-verification-token";
pub const FEISHU_BOT: &str = "ou_gatehouse_bot";
/// The Feishu group chat of the team (repository acme/widgets).
pub const FEISHU_CHAT: &str = "oc_core";
/// The workers' sandbox profile.
pub const PROFILE: &str = "live-test";
/// The bot's GitHub login (its token's user on the emulator).
pub const BOT_LOGIN: &str = "gatehouse-bot";

pub struct LiveWorld {
    pub dir: tempfile::TempDir,
    pub github: GithubHandle,
    pub feishu: FeishuHandle,
    pub proxy: ProxyProcess,
    pub supervisor: Service,
    router: Option<Child>,
    pub router_log: PathBuf,
    /// The router's GitHub identity socket (rule set `router-github`).
    pub github_identity: PathBuf,
    /// The model emulator, when the router's model writes replies
    /// ([`LiveWorld::start_with_writer`]).
    pub model: Option<ModelHandle>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn create_identity(admin: &std::path::Path, name: &str, spec: Value) -> PathBuf {
    let mut body = spec;
    body["name"] = json!(name);
    let (status, created) = admin_call(admin, "POST", "/identities", Some(&body.to_string()));
    assert_eq!(status, 201, "{created}");
    PathBuf::from(
        serde_json::from_str::<Value>(&created).unwrap()["socket"]
            .as_str()
            .unwrap(),
    )
}

/// How GitHub reaches the router of a [`LiveWorld`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intake {
    /// The router's webhook listener (`[github]`); without it the
    /// emulator's deliveries find nobody listening.
    pub webhooks: bool,
    /// Polling (`[github_poll]`) every so many seconds.
    pub poll_secs: Option<u64>,
}

impl Default for Intake {
    fn default() -> Self {
        Self {
            webhooks: true,
            poll_secs: None,
        }
    }
}

impl LiveWorld {
    /// Starts everything; `worker` is the worker's shell script.
    pub fn start(worker: &str) -> LiveWorld {
        Self::start_full(worker, Intake::default(), None)
    }

    /// [`LiveWorld::start`] with GitHub reaching the router as `intake` says.
    pub fn start_with(worker: &str, intake: Intake) -> LiveWorld {
        Self::start_full(worker, intake, None)
    }

    /// [`LiveWorld::start`] with the router model writing reply texts
    /// (`[model] writer = true`): the model emulator behind the proxy,
    /// which holds its key (credential `model`, the shipped `model-api`
    /// rule set) and which the router reaches through an identity of its
    /// own with that rule set alone.
    pub fn start_with_writer(worker: &str, model: ModelOptions) -> LiveWorld {
        Self::start_full(worker, Intake::default(), Some(model))
    }

    fn start_full(worker: &str, intake: Intake, model: Option<ModelOptions>) -> LiveWorld {
        let dir = tempfile::Builder::new()
            .prefix("gh-loop")
            .tempdir()
            .unwrap();
        let (gh_port, fs_port) = (free_port(), free_port());
        let token = crate::random::token("ghs_");
        let github = GithubEmulator::start(
            GithubOptions::new(dir.path().join("git"))
                .token(&token, BOT_LOGIN)
                .repo(RepoSpec::new("acme", "widgets"))
                .webhook(
                    &format!("http://127.0.0.1:{gh_port}/webhook"),
                    WEBHOOK_SECRET,
                ),
        )
        .unwrap();
        let feishu_secret = crate::random::token("");
        let feishu = FeishuEmulator::start(FeishuOptions {
            bot_open_id: FEISHU_BOT.to_owned(),
            ..FeishuOptions::default()
                .app(FEISHU_APP, &feishu_secret)
                .event_target(
                    &format!("http://127.0.0.1:{fs_port}/feishu/events"),
                    FEISHU_APP,
                    Some(FEISHU_KEY),
                    FEISHU_TOKEN,
                )
        })
        .unwrap();
        let model = model.map(|options| {
            let key = crate::random::token("sk-loop-");
            (ModelEmulator::start(options.api_key(&key)).unwrap(), key)
        });
        let proxy = start_proxy(
            &dir,
            &github,
            &feishu,
            &token,
            &feishu_secret,
            model.as_ref(),
        );
        let model_identity = model.as_ref().map(|_| {
            create_identity(
                &proxy.admin,
                "router-model",
                json!({"rule_sets": ["model-api"]}),
            )
        });
        let github_identity = create_identity(
            &proxy.admin,
            "router-gh-1",
            json!({"rule_sets": ["router-github"], "variables": {"repo": "acme/widgets"}}),
        );
        let feishu_identity = create_identity(
            &proxy.admin,
            "router-fs",
            json!({"rule_sets": ["router-feishu"]}),
        );
        let supervisor = start_supervisor(&dir, &proxy, worker);
        write_router_config(
            &dir,
            &supervisor,
            &github_identity,
            &feishu_identity,
            (gh_port, fs_port),
            intake,
            model_identity.as_deref(),
        );
        let mut w = LiveWorld {
            router_log: dir.path().join("router.log"),
            dir,
            github,
            feishu,
            proxy,
            supervisor,
            router: None,
            github_identity,
            model: model.map(|(m, _)| m),
        };
        w.start_router();
        w
    }

    pub fn start_router(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.router_log)
            .unwrap();
        let mut child = crate::bin::command()
            .args(["router", "run", "--config"])
            .arg(self.dir.path().join("router.toml"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains("listening"),
            "router run: {line:?}: {}",
            self.log()
        );
        self.router = Some(child);
    }

    /// SIGKILL: nothing of the router's is cleaned up.
    pub fn kill_router(&mut self) {
        let mut child = self.router.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.router_log).unwrap_or_default()
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("router.db")
    }

    pub fn proxy_ca(&self) -> PathBuf {
        self.dir.path().join("proxy/ca.pem")
    }

    /// The bot's comments on issue `number`, in order.
    pub fn bot_comments(&self, number: u64) -> Vec<String> {
        self.github
            .comments()
            .into_iter()
            .filter(|c| c.number == number && c.author == BOT_LOGIN)
            .map(|c| c.body)
            .collect()
    }

    /// The bot's Feishu messages (their text), in order.
    pub fn bot_messages(&self) -> Vec<String> {
        self.feishu
            .messages()
            .into_iter()
            .filter(|m| m.sender_type == "app")
            .map(|m| {
                serde_json::from_str::<Value>(&m.content).unwrap()["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    /// Waits until `done` holds (a deadline, not a timing assertion).
    pub fn wait(&self, what: &str, done: impl Fn(&LiveWorld) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "waiting for {what}; router log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LiveWorld {
    fn drop(&mut self) {
        if let Some(mut child) = self.router.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The proxy with the shipped router rule sets beside the test's own, the
/// emulators' hosts routed to them, and the Feishu app's credentials.
fn start_proxy(
    dir: &tempfile::TempDir,
    github: &GithubHandle,
    feishu: &FeishuHandle,
    token: &str,
    feishu_secret: &str,
    model: Option<&(ModelHandle, String)>,
) -> ProxyProcess {
    let proxy_dir = dir.path().join("proxy");
    std::fs::create_dir(&proxy_dir).unwrap();
    let shipped = crate::bin::repo_path("sandbox-profiles/rules");
    start_proxy_process_with(&proxy_dir, github, token, crate::bin::command(), |d| {
        for set in ["router-github.toml", "router-feishu.toml", "model-api.toml"] {
            std::fs::copy(shipped.join(set), d.join(set)).unwrap();
        }
        feishu.write_ca_pem(&d.join("feishu-ca.pem")).unwrap();
        std::fs::write(d.join("feishu.secret"), feishu_secret).unwrap();
        let config = std::fs::read_to_string(d.join("proxy.toml"))
            .unwrap()
            .replace(
                "rule_set_files = [\"rules.toml\"]",
                "rule_set_files = [\"rules.toml\", \"router-github.toml\", \"router-feishu.toml\", \"model-api.toml\"]",
            )
            .replace(
                "app_id = \"cli_unused\"",
                &format!("app_id = \"{FEISHU_APP}\""),
            );
        // Identities of the admin API (the workers', the router's here)
        // are kept across a restart of the proxy, as `gatehouse up` does.
        let mut config = format!(
            "identity_state = \"identities.json\"\n{config}\n[upstream.\"open.feishu.cn\"]\nurl = \"{}\"\nca_file = \"feishu-ca.pem\"\n",
            feishu.base_url()
        );
        if let Some((model, key)) = model {
            use std::os::unix::fs::PermissionsExt;
            model.write_ca_pem(&d.join("model-ca.pem")).unwrap();
            std::fs::write(d.join("model.key"), key).unwrap();
            std::fs::set_permissions(d.join("model.key"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
            config.push_str(&format!(
                "\n[credentials.model]\nkind = \"bearer\"\nkey_file = \"model.key\"\n\n\
                 [upstream.\"api.openai.com\"]\nurl = \"{}\"\nca_file = \"model-ca.pem\"\n",
                model.base_url()
            ));
        }
        std::fs::write(d.join("proxy.toml"), config).unwrap();
    })
}

/// The supervisor: the worker's profile, the proxy for its identity; a
/// real sandbox when the machine can build one.
fn start_supervisor(dir: &tempfile::TempDir, proxy: &ProxyProcess, worker: &str) -> Service {
    let sandboxed = crate::sandbox::any_mode().is_some();
    if !sandboxed {
        eprintln!("live world: no sandbox on this machine; the worker runs unsandboxed");
    }
    let profiles = dir.path().join("profiles");
    std::fs::create_dir(&profiles).unwrap();
    std::fs::write(
        profiles.join(format!("{PROFILE}.toml")),
        format!(
            "extends = \"default\"\ndescription = \"live loop test\"\n\
             [network]\nrule_sets = [\"{}\"]\n[worker]\ncommand = [\"sh\", \"-c\", {worker:?}]\n",
            crate::rules::TEST_RULE_SET
        ),
    )
    .unwrap();
    Service::start(Options {
        unsandboxed: !sandboxed,
        proxy_admin: Some(proxy.admin.clone()),
        ca_cert: Some(dir.path().join("proxy/ca.pem")),
        profiles_dir: Some(profiles),
        ..Options::default()
    })
}

fn write_router_config(
    dir: &tempfile::TempDir,
    supervisor: &Service,
    github_identity: &std::path::Path,
    feishu_identity: &std::path::Path,
    (gh_port, fs_port): (u16, u16),
    intake: Intake,
    model_identity: Option<&std::path::Path>,
) {
    std::fs::write(
        dir.path().join("policy.toml"),
        format!(
            r#"
identity = {{ github = {{ login = "{BOT_LOGIN}", id = {bot} }}, feishu = "{FEISHU_BOT}" }}

[[people]]
name = "alice"
team = "core"
github = {{ login = "alice", id = {alice} }}
feishu = "ou_alice"

[teams.core.repos."acme/widgets"]
sandbox_profile = "{PROFILE}"
rule_sets = ["{rules}"]

[[chats]]
id = "{FEISHU_CHAT}"
team = "core"
repo = "acme/widgets"
"#,
            bot = user_id(BOT_LOGIN),
            alice = user_id("alice"),
            rules = crate::rules::TEST_RULE_SET,
        ),
    )
    .unwrap();
    for (file, text) in [
        ("webhook-secret", WEBHOOK_SECRET),
        ("feishu-key", FEISHU_KEY),
        ("feishu-token", FEISHU_TOKEN),
    ] {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let github = if intake.webhooks {
        format!("[github]\nlisten = \"127.0.0.1:{gh_port}\"\nwebhook_secret_files = [\"webhook-secret\"]\n")
    } else {
        String::new()
    };
    let poll = intake.poll_secs.map_or(String::new(), |secs| {
        format!("[github_poll]\ninterval_secs = {secs}\n")
    });
    // The router's model: the writer only, through its own identity (no key).
    let model = model_identity.map_or(String::new(), |socket| {
        format!(
            "[model]\nsocket = {socket:?}\nbase_url = \"https://api.openai.com/v1\"\n\
             model = \"gatehouse-emulated\"\nwriter = true\ntimeout_ms = 5000\nretries = 0\n"
        )
    });
    std::fs::write(
        dir.path().join("router.toml"),
        format!(
            "policy = \"policy.toml\"\nstate = \"router.db\"\n\
             [jobs]\nsocket = {jobs:?}\ndeadline_secs = 120\n\
             [proxy]\nca_cert = \"proxy/ca.pem\"\nfeishu_socket = {feishu_identity:?}\n\
             [proxy.github_sockets]\n\"acme/widgets\" = {github_identity:?}\n\
             {github}{poll}\
             [feishu]\nlisten = \"127.0.0.1:{fs_port}\"\napp_id = \"{FEISHU_APP}\"\n\
             encrypt_key_file = \"feishu-key\"\nverification_token_file = \"feishu-token\"\n{model}",
            jobs = supervisor.socket,
        ),
    )
    .unwrap();
}

impl LiveWorld {
    /// Stops the proxy (SIGKILL): every identity socket goes with it.
    pub fn kill_proxy(&mut self) {
        let _ = self.proxy.child.kill();
        let _ = self.proxy.child.wait();
    }

    /// Starts the proxy again on the same config (same CA); it restores the
    /// identities it had (the router's and the running workers'), at the
    /// same socket paths.
    pub fn restart_proxy(&mut self) {
        let dir = self.dir.path().join("proxy");
        let _ = std::fs::remove_file(&self.proxy.admin);
        self.proxy.child = crate::bin::command()
            .args(["proxy", "--config"])
            .arg(dir.join("proxy.toml"))
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.proxy.log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&self.proxy.admin).is_err() {
            assert!(Instant::now() < deadline, "the proxy did not start again");
            std::thread::sleep(Duration::from_millis(25));
        }
        let (status, listed) = admin_call(&self.proxy.admin, "GET", "/identities", None);
        assert_eq!(status, 200, "{listed}");
        let listed: Value = serde_json::from_str(&listed).unwrap();
        let gh = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == "router-gh-1")
            .unwrap_or_else(|| panic!("the router's identity was not restored: {listed}"));
        assert_eq!(
            gh["socket"].as_str().map(PathBuf::from).as_ref(),
            Some(&self.github_identity)
        );
    }
}
