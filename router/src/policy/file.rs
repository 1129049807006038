//! The policy file as written: every table denies unknown keys; validation
//! (`validate`) turns it into the runtime policy.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Conditions, Mode};

/// The policy file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// The bot's own accounts; its messages are dropped at the gate.
    pub identity: AccountsFile,
    #[serde(default)]
    pub people: Vec<PersonFile>,
    #[serde(default)]
    pub bots: Vec<BotFile>,
    #[serde(default)]
    pub teams: BTreeMap<String, TeamFile>,
    #[serde(default)]
    pub chats: Vec<ChatFile>,
    #[serde(default)]
    pub feishu: FeishuFile,
    #[serde(default)]
    pub rules: Vec<RuleFile>,
    #[serde(default)]
    pub limits: LimitsFile,
    /// Who may ask for work, or be a candidate, on a team's repository or chat.
    #[serde(default)]
    pub team_scoping: super::TeamScoping,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountsFile {
    pub github: Option<GithubAccount>,
    /// Feishu open_id (`ou_…`).
    pub feishu: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubAccount {
    pub login: String,
    /// The numeric user id. When given, it alone identifies the account
    /// (logins can be renamed and taken over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonFile {
    pub name: String,
    pub team: String,
    pub github: Option<GithubAccount>,
    pub feishu: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BotFile {
    pub name: String,
    pub github: Option<GithubAccount>,
    pub feishu: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamFile {
    /// The repository for work requested where no repository is implied
    /// (a direct message).
    pub default_repo: Option<String>,
    pub repos: BTreeMap<String, RepoFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoFile {
    pub sandbox_profile: String,
    #[serde(default)]
    pub rule_sets: Vec<String>,
    /// The bot's fork of this repository (`owner/name`): its workers push
    /// there and open pull requests from it (rule set `github-worker-fork`,
    /// variable `fork`), so the repository's CI runs their commits as an
    /// outside contribution.
    #[serde(default)]
    pub fork: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatFile {
    /// Feishu chat id (`oc_…`).
    pub id: String,
    pub team: String,
    /// The repository work requested in this chat is about.
    pub repo: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeishuFile {
    /// Accept direct messages from allowlisted people.
    #[serde(default)]
    pub direct_messages: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub id: String,
    pub team: String,
    /// What the rule means, for the judge and for people reading decisions.
    pub text: String,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_true")]
    pub enabled: bool,
    #[serde(default)]
    pub when: Conditions,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    pub reply_words: Option<usize>,
    pub note_words: Option<usize>,
}
