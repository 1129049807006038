//! Policy: who the bot is, who may assign it work, where, under which scope,
//! and the team rules for work nobody asked for.
//!
//! Loaded from TOML into [`PolicyFile`] (every table denies unknown keys),
//! then [`PolicyFile::validate`] turns it into the runtime [`Policy`], with
//! errors that name the file, the key and what was expected. The policy's
//! version is the SHA-256 of its normalised content (the validated policy as
//! canonical JSON, lists sorted where order means nothing), so reformatting
//! or reordering the file does not change it and any change of meaning does.
//!
//! This file holds the runtime policy and its queries; `file` the format as
//! written, `validate` one validator per section.

mod file;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::trigger::{Sender, Source, TriggerKind};

pub use file::{
    AccountsFile, BotFile, ChatFile, FeishuFile, GithubAccount, LimitsFile, PersonFile, PolicyFile,
    RepoFile, RuleFile, TeamFile,
};

/// Errors loading or validating a policy.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file could not be read.
    #[error("{file}: cannot read the policy: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown or mistyped key.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// A key holds a value the policy does not accept.
    #[error("{file}: `{key}`: expected {expected}")]
    Invalid {
        file: String,
        key: String,
        expected: String,
    },
    /// The validated policy does not encode, so it has no version.
    #[error("{file}: {source}")]
    Encode {
        file: String,
        source: crate::json::EncodeError,
    },
}

// === The runtime policy ===

/// What a team rule does with a matching candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The rule is not evaluated.
    Off,
    /// Record "would accept", accept nothing. The default.
    #[default]
    Observe,
    /// Accept.
    Auto,
}

/// Structured conditions a candidate must meet before a judge sees it. An
/// empty list places no constraint; a non-empty one must contain the
/// trigger's value (for labels: share at least one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conditions {
    #[serde(default)]
    pub sources: Vec<Source>,
    #[serde(default)]
    pub kinds: Vec<TriggerKind>,
    #[serde(default)]
    pub repos: Vec<String>,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub branches: Vec<String>,
    #[serde(default)]
    pub author: AuthorKind,
}

/// Which authors a rule accepts candidates from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthorKind {
    Human,
    Bot,
    #[default]
    Any,
}

/// An account on each platform.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accounts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GithubAccount>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feishu: Option<String>,
}

impl Accounts {
    /// Whether `sender` on `source` is this account.
    pub fn is_sender(&self, source: Source, sender: &Sender) -> bool {
        match source {
            Source::Github => self.github.as_ref().is_some_and(|gh| match gh.id {
                Some(id) => sender.id == id.to_string(),
                None => sender
                    .login
                    .as_deref()
                    .is_some_and(|l| l.eq_ignore_ascii_case(&gh.login)),
            }),
            Source::Feishu => self.feishu.as_deref() == Some(sender.id.as_str()),
        }
    }

    /// Whether `account`, as named in a structured address field, is this
    /// account.
    pub fn is_account(&self, source: Source, account: &str) -> bool {
        match source {
            Source::Github => self.github.as_ref().is_some_and(|gh| {
                account.eq_ignore_ascii_case(&gh.login)
                    || gh.id.is_some_and(|id| account == id.to_string())
            }),
            Source::Feishu => self.feishu.as_deref() == Some(account),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    pub name: String,
    pub team: String,
    pub accounts: Accounts,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bot {
    pub name: String,
    pub accounts: Accounts,
}

/// What work on one repository may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoScope {
    pub sandbox_profile: String,
    pub rule_sets: Vec<String>,
    /// The bot's fork its workers deliver from (`github-worker-fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_repo: Option<String>,
    pub repos: BTreeMap<String, RepoScope>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatScope {
    pub team: String,
    pub repo: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub team: String,
    pub text: String,
    pub mode: Mode,
    pub enabled: bool,
    pub when: Conditions,
}

/// Word limits on what the router says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// A reply to a person.
    pub reply_words: usize,
    /// A note to a worker.
    pub note_words: usize,
}

/// The most a reply or note may hold; a policy may only tighten these.
pub const MAX_REPLY_WORDS: usize = 100;
pub const MAX_NOTE_WORDS: usize = 30;

impl Default for Limits {
    fn default() -> Self {
        Self {
            reply_words: MAX_REPLY_WORDS,
            note_words: MAX_NOTE_WORDS,
        }
    }
}

/// A policy's version: `sha256:` and the hex digest of its normalised content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PolicyVersion(pub String);

impl fmt::Display for PolicyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The validated policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    #[serde(skip)]
    version: PolicyVersion,
    pub identity: Accounts,
    pub people: Vec<Person>,
    pub bots: Vec<Bot>,
    pub teams: BTreeMap<String, Team>,
    pub chats: BTreeMap<String, ChatScope>,
    pub direct_messages: bool,
    pub team_scoping: TeamScoping,
    pub rules: Vec<Rule>,
    pub limits: Limits,
}

/// Whose messages count on a team's repository or group chat.
///
/// The safe default is the team's own people: an allowlisted person of
/// another team who mentions the bot on this team's repository is ignored
/// (`other_team`), as is their comment there for the team's rules. A direct
/// message is always scoped to the sender's own team.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TeamScoping {
    /// Only people of the team that owns the repository or chat.
    #[default]
    OwnTeam,
    /// Any allowlisted person, on any team's repository or chat.
    AnyTeam,
}

/// The resolved scope of work: which team, repository, sandbox profile and
/// proxy rule sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    pub team: String,
    pub repo: String,
    pub sandbox_profile: String,
    pub rule_sets: Vec<String>,
    /// The bot's fork of `repo` the worker pushes to, if the team delivers
    /// from one; absent from mandates made before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
}

impl Policy {
    /// Reads and validates a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            file: file.clone(),
            source,
        })?;
        Self::from_toml(&file, &text)
    }

    /// Parses and validates policy TOML; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Self, PolicyError> {
        let raw: PolicyFile = toml::from_str(text).map_err(|e| PolicyError::Parse {
            file: file.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        raw.validate(file)
    }

    pub fn version(&self) -> &PolicyVersion {
        &self.version
    }

    /// The allowlisted person `sender` is on `source`, if any.
    pub fn person(&self, source: Source, sender: &Sender) -> Option<&Person> {
        self.people
            .iter()
            .find(|p| p.accounts.is_sender(source, sender))
    }

    /// The person named `name`.
    pub fn person_named(&self, name: &str) -> Option<&Person> {
        self.people.iter().find(|p| p.name == name)
    }

    /// The listed bot `sender` is on `source`, if any.
    pub fn bot(&self, source: Source, sender: &Sender) -> Option<&Bot> {
        self.bots
            .iter()
            .find(|b| b.accounts.is_sender(source, sender))
    }

    /// The team that owns `repo`, if the repository is allowed.
    pub fn repo_team(&self, repo: &str) -> Option<(&str, &RepoScope)> {
        self.teams
            .iter()
            .find_map(|(name, team)| team.repos.get(repo).map(|s| (name.as_str(), s)))
    }

    /// The full scope of work on `repo`, if it is allowed.
    pub fn scope_of_repo(&self, repo: &str) -> Option<Scope> {
        self.repo_team(repo).map(|(team, s)| Scope {
            team: team.to_owned(),
            repo: repo.to_owned(),
            sandbox_profile: s.sandbox_profile.clone(),
            rule_sets: s.rule_sets.clone(),
            fork: s.fork.clone(),
        })
    }

    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }
}

#[cfg(test)]
pub(crate) mod tests;
