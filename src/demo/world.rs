//! The demo's world: the GitHub and Feishu emulators, and a `gatehouse.toml`
//! with everything it names (policy, profiles, rule sets, prompts, secrets)
//! written into a temporary directory. Every file the parts read comes from
//! this binary (the shipped rule sets, profiles and prompts are embedded),
//! so the demo runs from anywhere.

use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use gatehouse_emulators::{
    user_id, FeishuEmulator, FeishuHandle, FeishuOptions, GithubEmulator, GithubHandle,
    GithubOptions, RepoSpec,
};

pub const BOT_LOGIN: &str = "gatehouse-bot";
pub const FEISHU_BOT: &str = "ou_gatehouse_bot";
pub const FEISHU_APP: &str = "cli_gatehouse_demo";
pub const ALICE_FEISHU: &str = "ou_alice";
pub const ALICE_CHAT: &str = "oc_p2p_alice";
/// The team's repository, where the work happens.
pub const REPO: &str = "acme/widgets";
/// Another team's repository: the demo's worker tries to comment there.
pub const OTHER_REPO: &str = "acme/gadgets";
pub const CI_BOT: &str = "ci-bot[bot]";

const WEBHOOK_SECRET_LEN: usize = 32;

/// Files the demo writes from this binary: (path under the dir, text).
const SHIPPED: &[(&str, &str)] = &[
    (
        "rules/github-read.toml",
        include_str!("../../sandbox-profiles/rules/github-read.toml"),
    ),
    (
        "rules/github-worker.toml",
        include_str!("../../sandbox-profiles/rules/github-worker.toml"),
    ),
    (
        "rules/router-github.toml",
        include_str!("../../sandbox-profiles/rules/router-github.toml"),
    ),
    (
        "rules/router-feishu.toml",
        include_str!("../../sandbox-profiles/rules/router-feishu.toml"),
    ),
    (
        "profiles/base.toml",
        include_str!("../../sandbox-profiles/base.toml"),
    ),
    (
        "profiles/default.toml",
        include_str!("../../sandbox-profiles/default.toml"),
    ),
    ("prompts/work.md", include_str!("../../prompts/work.md")),
];

/// The demo team's profile: the reference worker, with its probe of two
/// forbidden calls switched on.
const DEMO_PROFILE: &str = r#"extends = "default"
description = "gatehouse demo: the reference worker, which first tries two calls its rules forbid"
[env.set]
GATEHOUSE_WORKER_PROBE_REPO = "acme/gadgets"
[network]
rule_sets = ["github-worker"]
[worker]
command = ["gatehouse", "reference-worker"]
"#;

/// Who owns what: `None` rootless (everything is the caller's).
#[derive(Clone, Copy)]
pub struct Owners {
    pub proxy: (u32, u32),
    pub router: (u32, u32),
}

pub struct World {
    pub config: PathBuf,
    pub github: GithubHandle,
    pub feishu: FeishuHandle,
    /// The bot's token on the emulator: never printed; the demo checks it
    /// appears in no router file.
    pub token: String,
}

fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    let mut f = std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?;
    std::io::Read::read_exact(&mut f, &mut buf).context("reading /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .context("finding a free port")?
        .local_addr()?
        .port())
}

/// Writes `text` to `dir/rel` with `mode`, owned by `owner` when given.
fn write(
    dir: &Path,
    rel: &str,
    text: &str,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> anyhow::Result<()> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        chown(&path, Some(uid), Some(gid)).with_context(|| format!("chown {}", path.display()))?;
    }
    Ok(())
}

fn policy() -> String {
    format!(
        r#"identity = {{ github = {{ login = "{BOT_LOGIN}", id = {bot} }}, feishu = "{FEISHU_BOT}" }}

[[people]]
name = "alice"
team = "core"
github = {{ login = "alice", id = {alice} }}
feishu = "{ALICE_FEISHU}"

[[bots]]
name = "ci"
github = {{ login = "{CI_BOT}", id = {ci} }}

[teams.core]
default_repo = "{REPO}"
[teams.core.repos."{REPO}"]
sandbox_profile = "demo"
rule_sets = ["github-worker"]

[teams.ops.repos."{OTHER_REPO}"]
sandbox_profile = "demo"
rule_sets = ["github-worker"]

[feishu]
direct_messages = true
"#,
        bot = user_id(BOT_LOGIN),
        alice = user_id("alice"),
        ci = user_id(CI_BOT),
    )
}

impl World {
    /// Starts the emulators and writes the config; `run_dir` holds the
    /// sockets (short, for the 107-byte limit).
    pub fn create(dir: &Path, run_dir: &Path, owners: Option<Owners>) -> anyhow::Result<World> {
        let (gh_port, fs_port) = (free_port()?, free_port()?);
        let token = format!("ghs_{}", random_hex(18)?);
        let feishu_secret = random_hex(16)?;
        let webhook_secret = random_hex(WEBHOOK_SECRET_LEN / 2)?;
        let feishu_key = random_hex(16)?;
        let feishu_token = random_hex(16)?;
        let github = GithubEmulator::start(
            GithubOptions::new(dir.join("emulator-git"))
                .token(&token, BOT_LOGIN)
                .repo(RepoSpec::new("acme", "widgets"))
                .repo(RepoSpec::new("acme", "gadgets"))
                .webhook(
                    &format!("http://127.0.0.1:{gh_port}/webhook"),
                    &webhook_secret,
                ),
        )
        .context("starting the GitHub emulator")?;
        let feishu = FeishuEmulator::start(FeishuOptions {
            bot_open_id: FEISHU_BOT.to_owned(),
            ..FeishuOptions::default()
                .app(FEISHU_APP, &feishu_secret)
                .event_target(
                    &format!("http://127.0.0.1:{fs_port}/feishu/events"),
                    FEISHU_APP,
                    Some(&feishu_key),
                    &feishu_token,
                )
        })
        .context("starting the Feishu emulator")?;
        github.write_ca_pem(&dir.join("github-ca.pem"))?;
        feishu.write_ca_pem(&dir.join("feishu-ca.pem"))?;
        for ca in ["github-ca.pem", "feishu-ca.pem"] {
            std::fs::set_permissions(dir.join(ca), std::fs::Permissions::from_mode(0o644))?;
        }
        for (rel, text) in SHIPPED {
            write(dir, rel, text, 0o644, None)?;
        }
        write(dir, "profiles/demo.toml", DEMO_PROFILE, 0o644, None)?;
        write(dir, "policy.toml", &policy(), 0o644, None)?;
        // Credentials: the proxy's alone. Verification secrets: the router's.
        let proxy = owners.map(|o| o.proxy);
        let router = owners.map(|o| (0, o.router.1));
        let router_mode = if owners.is_some() { 0o640 } else { 0o600 };
        write(dir, "secrets/github-token", &token, 0o600, proxy)?;
        write(
            dir,
            "secrets/feishu-app-secret",
            &feishu_secret,
            0o600,
            proxy,
        )?;
        write(
            dir,
            "secrets/webhook-secret",
            &webhook_secret,
            router_mode,
            router,
        )?;
        write(
            dir,
            "secrets/feishu-encrypt-key",
            &feishu_key,
            router_mode,
            router,
        )?;
        write(
            dir,
            "secrets/feishu-verification-token",
            &feishu_token,
            router_mode,
            router,
        )?;
        let config = format!(
            r#"# Written by `gatehouse demo`: the emulators stand in for GitHub and Feishu.
policy = "policy.toml"
profiles_dir = "profiles"
rule_sets_dir = "rules"
prompts_dir = "prompts"
state_dir = "state"
run_dir = {run_dir:?}

# The emulator's token stands in for an App installation token, which is
# scoped to the repository; a real personal token would not be.
[credentials.github]
kind = "github_token"
token_file = "secrets/github-token"
dangerously_allow_unscoped_graphql = true

[credentials.feishu]
kind = "feishu_app"
app_id = "{FEISHU_APP}"
app_secret_file = "secrets/feishu-app-secret"
base_url = "https://open.feishu.cn"

[github]
listen = "127.0.0.1:{gh_port}"
webhook_secret_files = ["secrets/webhook-secret"]

[feishu]
listen = "127.0.0.1:{fs_port}"
app_id = "{FEISHU_APP}"
encrypt_key_file = "secrets/feishu-encrypt-key"
verification_token_file = "secrets/feishu-verification-token"

[jobs]
deadline_secs = 300

[upstream."api.github.com"]
url = "https://{gh}"
ca_file = "github-ca.pem"

[upstream."github.com"]
url = "https://{gh}"
ca_file = "github-ca.pem"

[upstream."open.feishu.cn"]
url = "{fs}"
ca_file = "feishu-ca.pem"
"#,
            gh = github.addr(),
            fs = feishu.base_url(),
        );
        write(dir, "gatehouse.toml", &config, 0o644, None)?;
        Ok(World {
            config: dir.join("gatehouse.toml"),
            github,
            feishu,
            token,
        })
    }

    /// The bot's comments on issue `number` of [`REPO`], in order.
    pub fn bot_comments(&self, number: u64) -> Vec<String> {
        self.github
            .comments()
            .into_iter()
            .filter(|c| c.repo == REPO && c.number == number && c.author == BOT_LOGIN)
            .map(|c| c.body)
            .collect()
    }

    /// Every comment the bot's account made anywhere.
    pub fn all_bot_comments(&self) -> usize {
        self.github
            .comments()
            .iter()
            .filter(|c| c.author == BOT_LOGIN)
            .count()
    }

    /// The bot's Feishu messages (their text), in order.
    pub fn bot_messages(&self) -> Vec<String> {
        self.feishu
            .messages()
            .into_iter()
            .filter(|m| m.sender_type == "app")
            .map(|m| {
                serde_json::from_str::<serde_json::Value>(&m.content)
                    .ok()
                    .and_then(|v| v["text"].as_str().map(str::to_owned))
                    .unwrap_or_default()
            })
            .collect()
    }
}
