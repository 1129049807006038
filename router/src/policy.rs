//! Policy: who the bot is, who may assign it work, where, under which scope,
//! and the team rules for work nobody asked for.
//!
//! Loaded from TOML into [`PolicyFile`] (every table denies unknown keys),
//! then [`PolicyFile::validate`] turns it into the runtime [`Policy`], with
//! errors that name the file, the key and what was expected. The policy's
//! version is the SHA-256 of its normalised content (the validated policy as
//! canonical JSON, lists sorted where order means nothing), so reformatting
//! or reordering the file does not change it and any change of meaning does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::trigger::{Sender, Source, TriggerKind};

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

// === The file ===

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
    pub rules: Vec<Rule>,
    pub limits: Limits,
}

/// The resolved scope of work: which team, repository, sandbox profile and
/// proxy rule sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    pub team: String,
    pub repo: String,
    pub sandbox_profile: String,
    pub rule_sets: Vec<String>,
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
        })
    }

    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }
}

// === Validation ===

impl PolicyFile {
    /// Checks every cross-reference and value, producing the runtime policy.
    pub fn validate(self, file: &str) -> Result<Policy, PolicyError> {
        let invalid = |key: String, expected: &str| PolicyError::Invalid {
            file: file.to_owned(),
            key,
            expected: expected.to_owned(),
        };

        let identity = accounts(file, "identity", self.identity.github, self.identity.feishu)?;

        let mut teams = BTreeMap::new();
        let mut repo_owner: BTreeMap<String, String> = BTreeMap::new();
        for (name, team) in self.teams {
            let key = format!("teams.{name}");
            if !is_name(&name) {
                return Err(invalid(key, "a team name of letters, digits, `-` or `_`"));
            }
            if team.repos.is_empty() {
                return Err(invalid(format!("{key}.repos"), "at least one repository"));
            }
            let mut repos = BTreeMap::new();
            for (repo, scope) in team.repos {
                let rkey = format!("{key}.repos.\"{repo}\"");
                if !is_repo(&repo) {
                    return Err(invalid(rkey, "a repository named `owner/name`"));
                }
                if let Some(other) = repo_owner.insert(repo.clone(), name.clone()) {
                    return Err(invalid(
                        rkey,
                        &format!("a repository in one team only (also in team `{other}`)"),
                    ));
                }
                if !is_name(&scope.sandbox_profile) {
                    return Err(invalid(
                        format!("{rkey}.sandbox_profile"),
                        "a sandbox profile name of letters, digits, `-` or `_`",
                    ));
                }
                let mut rule_sets = scope.rule_sets;
                if let Some(bad) = rule_sets.iter().find(|r| !is_name(r)) {
                    return Err(invalid(
                        format!("{rkey}.rule_sets"),
                        &format!("rule set names of letters, digits, `-` or `_`, not `{bad}`"),
                    ));
                }
                rule_sets.sort();
                rule_sets.dedup();
                repos.insert(
                    repo,
                    RepoScope {
                        sandbox_profile: scope.sandbox_profile,
                        rule_sets,
                    },
                );
            }
            if let Some(default) = &team.default_repo {
                if !repos.contains_key(default) {
                    return Err(invalid(
                        format!("{key}.default_repo"),
                        "one of the team's own repositories",
                    ));
                }
            }
            teams.insert(
                name,
                Team {
                    default_repo: team.default_repo,
                    repos,
                },
            );
        }

        let mut people = Vec::new();
        for (i, p) in self.people.into_iter().enumerate() {
            let key = format!("people[{i}]");
            if p.name.trim().is_empty() {
                return Err(invalid(format!("{key}.name"), "a non-empty name"));
            }
            if !teams.contains_key(&p.team) {
                return Err(invalid(
                    format!("{key}.team"),
                    "a team defined under [teams]",
                ));
            }
            let accounts = accounts(file, &key, p.github, p.feishu)?;
            people.push(Person {
                name: p.name,
                team: p.team,
                accounts,
            });
        }
        let mut bots = Vec::new();
        for (i, b) in self.bots.into_iter().enumerate() {
            let key = format!("bots[{i}]");
            if b.name.trim().is_empty() {
                return Err(invalid(format!("{key}.name"), "a non-empty name"));
            }
            let accounts = accounts(file, &key, b.github, b.feishu)?;
            bots.push(Bot {
                name: b.name,
                accounts,
            });
        }
        // One account must mean one thing: a person, a bot or the bot itself.
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let owners = std::iter::once(("identity".to_owned(), &identity))
            .chain(
                people
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (format!("people[{i}]"), &p.accounts)),
            )
            .chain(
                bots.iter()
                    .enumerate()
                    .map(|(i, b)| (format!("bots[{i}]"), &b.accounts)),
            );
        for (key, acc) in owners {
            for handle in account_handles(acc) {
                if let Some(other) = seen.insert(handle.clone(), key.clone()) {
                    return Err(invalid(
                        key,
                        &format!("accounts not listed elsewhere (`{handle}` is also in {other})"),
                    ));
                }
            }
        }
        let mut names = BTreeSet::new();
        for p in &people {
            if !names.insert(p.name.clone()) {
                return Err(invalid(
                    "people".to_owned(),
                    &format!("unique names (`{}` twice)", p.name),
                ));
            }
        }
        people.sort_by(|a, b| a.name.cmp(&b.name));
        bots.sort_by(|a, b| a.name.cmp(&b.name));

        let mut chats = BTreeMap::new();
        for (i, c) in self.chats.into_iter().enumerate() {
            let key = format!("chats[{i}]");
            if c.id.trim().is_empty() {
                return Err(invalid(format!("{key}.id"), "a Feishu chat id"));
            }
            let Some(team) = teams.get(&c.team) else {
                return Err(invalid(
                    format!("{key}.team"),
                    "a team defined under [teams]",
                ));
            };
            if !team.repos.contains_key(&c.repo) {
                return Err(invalid(
                    format!("{key}.repo"),
                    "one of the team's repositories",
                ));
            }
            if chats
                .insert(
                    c.id.clone(),
                    ChatScope {
                        team: c.team,
                        repo: c.repo,
                    },
                )
                .is_some()
            {
                return Err(invalid(format!("{key}.id"), "a chat listed once"));
            }
        }

        let mut rules = Vec::new();
        let mut rule_ids = BTreeSet::new();
        for (i, r) in self.rules.into_iter().enumerate() {
            let key = format!("rules[{i}]");
            if !is_name(&r.id) {
                return Err(invalid(
                    format!("{key}.id"),
                    "a rule id of letters, digits, `-` or `_`",
                ));
            }
            if !rule_ids.insert(r.id.clone()) {
                return Err(invalid(format!("{key}.id"), "a unique rule id"));
            }
            let Some(team) = teams.get(&r.team) else {
                return Err(invalid(
                    format!("{key}.team"),
                    "a team defined under [teams]",
                ));
            };
            if r.text.trim().is_empty() {
                return Err(invalid(
                    format!("{key}.text"),
                    "the rule's meaning, in words",
                ));
            }
            if let Some(bad) = r
                .when
                .repos
                .iter()
                .find(|repo| !team.repos.contains_key(*repo))
            {
                return Err(invalid(
                    format!("{key}.when.repos"),
                    &format!("repositories of team `{}`, not `{bad}`", r.team),
                ));
            }
            let mut when = r.when;
            when.sources.sort();
            when.sources.dedup();
            when.kinds.sort();
            when.kinds.dedup();
            when.repos.sort();
            when.repos.dedup();
            when.labels.sort();
            when.labels.dedup();
            when.branches.sort();
            when.branches.dedup();
            rules.push(Rule {
                id: r.id,
                team: r.team,
                text: r.text,
                mode: r.mode,
                enabled: r.enabled,
                when,
            });
        }
        rules.sort_by(|a, b| a.id.cmp(&b.id));

        let limits = Limits {
            reply_words: self.limits.reply_words.unwrap_or(MAX_REPLY_WORDS),
            note_words: self.limits.note_words.unwrap_or(MAX_NOTE_WORDS),
        };
        if !(1..=MAX_REPLY_WORDS).contains(&limits.reply_words) {
            return Err(invalid(
                "limits.reply_words".to_owned(),
                "a number from 1 to 100",
            ));
        }
        if !(1..=MAX_NOTE_WORDS).contains(&limits.note_words) {
            return Err(invalid(
                "limits.note_words".to_owned(),
                "a number from 1 to 30",
            ));
        }

        let mut policy = Policy {
            version: PolicyVersion(String::new()),
            identity,
            people,
            bots,
            teams,
            chats,
            direct_messages: self.feishu.direct_messages,
            rules,
            limits,
        };
        policy.version = version_of(&policy).map_err(|source| PolicyError::Encode {
            file: file.to_owned(),
            source,
        })?;
        Ok(policy)
    }
}

fn version_of(policy: &Policy) -> Result<PolicyVersion, crate::json::EncodeError> {
    let canonical = crate::json::encode_bytes("policy", policy)?;
    Ok(PolicyVersion(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(&canonical))
    )))
}

fn accounts(
    file: &str,
    key: &str,
    github: Option<GithubAccount>,
    feishu: Option<String>,
) -> Result<Accounts, PolicyError> {
    let invalid = |k: &str, expected: &str| PolicyError::Invalid {
        file: file.to_owned(),
        key: format!("{key}{k}"),
        expected: expected.to_owned(),
    };
    if github.is_none() && feishu.is_none() {
        return Err(invalid("", "at least one account: `github` or `feishu`"));
    }
    if let Some(gh) = &github {
        if gh.login.trim().is_empty() || gh.login.contains(char::is_whitespace) {
            return Err(invalid(".github.login", "a GitHub login"));
        }
    }
    if let Some(open_id) = &feishu {
        if open_id.trim().is_empty() || open_id.contains(char::is_whitespace) {
            return Err(invalid(".feishu", "a Feishu open_id"));
        }
    }
    Ok(Accounts { github, feishu })
}

fn account_handles(acc: &Accounts) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(gh) = &acc.github {
        out.push(format!("github:{}", gh.login.to_ascii_lowercase()));
        if let Some(id) = gh.id {
            out.push(format!("github:#{id}"));
        }
    }
    if let Some(f) = &acc.feishu {
        out.push(format!("feishu:{f}"));
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

fn is_repo(s: &str) -> bool {
    match s.split_once('/') {
        Some((owner, name)) => is_name(owner) && is_name(name),
        None => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small policy most tests start from.
    pub(crate) const BASE: &str = r#"
identity = { github = { login = "gatehouse-bot", id = 900 }, feishu = "ou_bot" }

[[people]]
name = "alice"
team = "core"
github = { login = "alice", id = 101 }
feishu = "ou_alice"

[[people]]
name = "bob"
team = "core"
github = { login = "bob" }

[[bots]]
name = "ci"
github = { login = "ci-bot[bot]", id = 700 }

[teams.core]
default_repo = "acme/widgets"
[teams.core.repos."acme/widgets"]
sandbox_profile = "rust"
rule_sets = ["github-repo", "model"]

[[chats]]
id = "oc_core"
team = "core"
repo = "acme/widgets"

[feishu]
direct_messages = true

[[rules]]
id = "ci-fails-on-main"
team = "core"
text = "A CI run failed on main: diagnose and propose a fix."
mode = "auto"
when = { sources = ["github"], kinds = ["ci_result"], branches = ["main"], author = "bot" }

[[rules]]
id = "bug-reports"
team = "core"
text = "Someone describes a reproducible bug."
when = { kinds = ["issue_opened"], labels = ["bug"], author = "human" }
"#;

    pub(crate) fn base() -> Policy {
        Policy::from_toml("policy.toml", BASE).unwrap()
    }

    fn err(text: &str) -> String {
        Policy::from_toml("p.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn base_policy_validates_with_observe_default() {
        let p = base();
        assert_eq!(p.rule("bug-reports").unwrap().mode, Mode::Observe);
        assert_eq!(p.rule("ci-fails-on-main").unwrap().mode, Mode::Auto);
        assert_eq!(p.limits, Limits::default());
        assert!(p.version().0.starts_with("sha256:"));
        assert_eq!(p.version().0.len(), 7 + 64);
    }

    #[test]
    fn version_ignores_layout_and_order_but_not_meaning() {
        let reordered = BASE.replace(
            "rule_sets = [\"github-repo\", \"model\"]",
            "rule_sets = [\"model\", \"github-repo\"]  # reordered",
        );
        assert_ne!(reordered, BASE);
        assert_eq!(
            Policy::from_toml("a", &reordered).unwrap().version(),
            base().version()
        );
        let changed = BASE.replace("mode = \"auto\"", "mode = \"observe\"");
        assert_ne!(
            Policy::from_toml("a", &changed).unwrap().version(),
            base().version()
        );
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let e = err(&format!("{BASE}\n[limits]\nreply_wrds = 5\n"));
        assert!(e.contains("p.toml") && e.contains("reply_wrds"), "{e}");
        let e = err(&BASE.replace("mode = \"auto\"", "mode = \"auto\"\npriority = 1"));
        assert!(e.contains("priority"), "{e}");
    }

    #[test]
    fn invalid_values_name_file_key_and_expectation() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "team = \"core\"\ngithub = { login = \"alice\"",
                "team = \"nope\"\ngithub = { login = \"alice\"",
                "people[0].team",
            ),
            ("mode = \"auto\"", "mode = \"sometimes\"", "sometimes"),
            (
                "id = \"oc_core\"\nteam = \"core\"\nrepo = \"acme/widgets\"",
                "id = \"oc_core\"\nteam = \"core\"\nrepo = \"acme/gadgets\"",
                "chats[0].repo",
            ),
            (
                "branches = [\"main\"]",
                "branches = [\"main\"], repos = [\"other/repo\"]",
                "rules[0].when.repos",
            ),
            (
                "default_repo = \"acme/widgets\"",
                "default_repo = \"acme/gizmos\"",
                "teams.core.default_repo",
            ),
            (
                "name = \"ci\"\ngithub = { login = \"ci-bot[bot]\", id = 700 }",
                "name = \"ci\"\ngithub = { login = \"alice\" }",
                "also in people",
            ),
            (
                "[[rules]]\nid = \"bug-reports\"",
                "[[rules]]\nid = \"ci-fails-on-main\"",
                "unique rule id",
            ),
            (
                "[teams.core.repos.\"acme/widgets\"]",
                "[teams.core.repos.\"widgets\"]",
                "owner/name",
            ),
        ];
        for (from, to, needle) in cases {
            assert!(BASE.contains(from), "fixture lacks {from}");
            let e = err(&BASE.replacen(from, to, 1));
            assert!(e.starts_with("p.toml"), "{e}");
            assert!(e.contains(needle), "expected {needle:?} in {e}");
        }
        let e = err(&format!("{BASE}\n[limits]\nreply_words = 500\n"));
        assert!(
            e.contains("limits.reply_words") && e.contains("1 to 100"),
            "{e}"
        );
    }

    #[test]
    fn github_id_wins_over_login() {
        let p = base();
        let renamed = Sender {
            id: "101".into(),
            login: Some("alice-renamed".into()),
            name: String::new(),
            is_bot: false,
        };
        assert_eq!(p.person(Source::Github, &renamed).unwrap().name, "alice");
        let impostor = Sender {
            id: "555".into(),
            login: Some("alice".into()),
            name: String::new(),
            is_bot: false,
        };
        assert!(p.person(Source::Github, &impostor).is_none());
        // bob has no id: the login decides, case-insensitively like GitHub.
        let bob = Sender {
            id: "12".into(),
            login: Some("Bob".into()),
            name: String::new(),
            is_bot: false,
        };
        assert_eq!(p.person(Source::Github, &bob).unwrap().name, "bob");
    }
}
