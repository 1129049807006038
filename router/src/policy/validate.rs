//! Validation: the policy file as written into the runtime [`Policy`], one
//! validator per section, in the order the sections are checked. Every
//! error names the file, the key and what was expected.

use std::collections::{BTreeMap, BTreeSet};

use gatehouse_types::{ProfileName, RepoSlug, RuleSetName, TeamName};
use sha2::{Digest, Sha256};

use super::file::{
    BotFile, ChatFile, GithubAccount, LimitsFile, PersonFile, RepoFile, RuleFile, TeamFile,
};
use super::{
    Accounts, Bot, ChatScope, Limits, Person, Policy, PolicyError, PolicyFile, PolicyVersion,
    RepoScope, Rule, Team, MAX_NOTE_WORDS, MAX_REPLY_WORDS,
};

impl PolicyFile {
    /// Checks every cross-reference and value, producing the runtime policy.
    pub fn validate(self, file: &str) -> Result<Policy, PolicyError> {
        let identity = accounts(file, "identity", self.identity.github, self.identity.feishu)?;
        let teams = teams(file, self.teams)?;
        let mut people = people(file, self.people, &teams)?;
        let mut bots = bots(file, self.bots)?;
        accounts_unique(file, &identity, &people, &bots)?;
        names_unique(file, &people)?;
        people.sort_by(|a, b| a.name.cmp(&b.name));
        bots.sort_by(|a, b| a.name.cmp(&b.name));
        let chats = chats(file, self.chats, &teams)?;
        let rules = rules(file, self.rules, &teams)?;
        let limits = limits(file, &self.limits)?;

        let mut policy = Policy {
            version: PolicyVersion(String::new()),
            identity,
            people,
            bots,
            teams,
            chats,
            direct_messages: self.feishu.direct_messages,
            team_scoping: self.team_scoping,
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

fn invalid(file: &str, key: String, expected: &str) -> PolicyError {
    PolicyError::Invalid {
        file: file.to_owned(),
        key,
        expected: expected.to_owned(),
    }
}

/// `[teams]`: names, repositories (each in one team only), their scopes,
/// and each team's default repository.
fn teams(
    file: &str,
    raw: BTreeMap<String, TeamFile>,
) -> Result<BTreeMap<String, Team>, PolicyError> {
    let mut teams = BTreeMap::new();
    let mut repo_owner: BTreeMap<String, String> = BTreeMap::new();
    for (name, team) in raw {
        let key = format!("teams.{name}");
        if !TeamName::is_valid(&name) {
            return Err(invalid(
                file,
                key,
                "a team name of letters, digits, `-` or `_`",
            ));
        }
        if team.repos.is_empty() {
            return Err(invalid(
                file,
                format!("{key}.repos"),
                "at least one repository",
            ));
        }
        let mut repos = BTreeMap::new();
        for (repo, scope) in team.repos {
            let rkey = format!("{key}.repos.\"{repo}\"");
            if !is_repo(&repo) {
                return Err(invalid(file, rkey, "a repository named `owner/name`"));
            }
            if let Some(other) = repo_owner.insert(repo.clone(), name.clone()) {
                return Err(invalid(
                    file,
                    rkey,
                    &format!("a repository in one team only (also in team `{other}`)"),
                ));
            }
            repos.insert(repo, repo_scope(file, &rkey, scope)?);
        }
        if let Some(default) = &team.default_repo {
            if !repos.contains_key(default) {
                return Err(invalid(
                    file,
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
    Ok(teams)
}

/// A repository's scope: a sandbox profile and proxy rule sets (sorted, once each).
fn repo_scope(file: &str, rkey: &str, scope: RepoFile) -> Result<RepoScope, PolicyError> {
    if !ProfileName::is_valid(&scope.sandbox_profile) {
        return Err(invalid(
            file,
            format!("{rkey}.sandbox_profile"),
            &format!("a sandbox profile name: {}", ProfileName::EXPECTED),
        ));
    }
    let mut rule_sets = scope.rule_sets;
    if let Some(bad) = rule_sets.iter().find(|r| !RuleSetName::is_valid(r)) {
        return Err(invalid(
            file,
            format!("{rkey}.rule_sets"),
            &format!("rule set names of lowercase letters, digits or `-`, not `{bad}`"),
        ));
    }
    rule_sets.sort();
    rule_sets.dedup();
    if let Some(fork) = &scope.fork {
        if !RepoSlug::is_valid(fork) {
            return Err(invalid(
                file,
                format!("{rkey}.fork"),
                &format!("the fork as owner/name: {}", RepoSlug::EXPECTED),
            ));
        }
    }
    Ok(RepoScope {
        sandbox_profile: scope.sandbox_profile,
        rule_sets,
        fork: scope.fork,
    })
}

/// `[[people]]`: a name, a team defined under `[teams]`, accounts.
fn people(
    file: &str,
    raw: Vec<PersonFile>,
    teams: &BTreeMap<String, Team>,
) -> Result<Vec<Person>, PolicyError> {
    let mut people = Vec::new();
    for (i, p) in raw.into_iter().enumerate() {
        let key = format!("people[{i}]");
        if p.name.trim().is_empty() {
            return Err(invalid(file, format!("{key}.name"), "a non-empty name"));
        }
        if !teams.contains_key(&p.team) {
            return Err(invalid(
                file,
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
    Ok(people)
}

/// `[[bots]]`: a name and accounts.
fn bots(file: &str, raw: Vec<BotFile>) -> Result<Vec<Bot>, PolicyError> {
    let mut bots = Vec::new();
    for (i, b) in raw.into_iter().enumerate() {
        let key = format!("bots[{i}]");
        if b.name.trim().is_empty() {
            return Err(invalid(file, format!("{key}.name"), "a non-empty name"));
        }
        let accounts = accounts(file, &key, b.github, b.feishu)?;
        bots.push(Bot {
            name: b.name,
            accounts,
        });
    }
    Ok(bots)
}

/// One account must mean one thing: a person, a bot or the bot itself.
fn accounts_unique(
    file: &str,
    identity: &Accounts,
    people: &[Person],
    bots: &[Bot],
) -> Result<(), PolicyError> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let owners = std::iter::once(("identity".to_owned(), identity))
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
                    file,
                    key,
                    &format!("accounts not listed elsewhere (`{handle}` is also in {other})"),
                ));
            }
        }
    }
    Ok(())
}

/// A person's name names one person.
fn names_unique(file: &str, people: &[Person]) -> Result<(), PolicyError> {
    let mut names = BTreeSet::new();
    for p in people {
        if !names.insert(p.name.clone()) {
            return Err(invalid(
                file,
                "people".to_owned(),
                &format!("unique names (`{}` twice)", p.name),
            ));
        }
    }
    Ok(())
}

/// `[[chats]]`: each chat listed once, for one of its team's repositories.
fn chats(
    file: &str,
    raw: Vec<ChatFile>,
    teams: &BTreeMap<String, Team>,
) -> Result<BTreeMap<String, ChatScope>, PolicyError> {
    let mut chats = BTreeMap::new();
    for (i, c) in raw.into_iter().enumerate() {
        let key = format!("chats[{i}]");
        if c.id.trim().is_empty() {
            return Err(invalid(file, format!("{key}.id"), "a Feishu chat id"));
        }
        let Some(team) = teams.get(&c.team) else {
            return Err(invalid(
                file,
                format!("{key}.team"),
                "a team defined under [teams]",
            ));
        };
        if !team.repos.contains_key(&c.repo) {
            return Err(invalid(
                file,
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
            return Err(invalid(file, format!("{key}.id"), "a chat listed once"));
        }
    }
    Ok(chats)
}

/// `[[rules]]`: unique ids, a team, a meaning in words, conditions on the
/// team's own repositories; condition lists sorted, rules in id order.
fn rules(
    file: &str,
    raw: Vec<RuleFile>,
    teams: &BTreeMap<String, Team>,
) -> Result<Vec<Rule>, PolicyError> {
    let mut rules = Vec::new();
    let mut rule_ids = BTreeSet::new();
    for (i, r) in raw.into_iter().enumerate() {
        let key = format!("rules[{i}]");
        if !is_name(&r.id) {
            return Err(invalid(
                file,
                format!("{key}.id"),
                "a rule id of letters, digits, `-` or `_`",
            ));
        }
        if !rule_ids.insert(r.id.clone()) {
            return Err(invalid(file, format!("{key}.id"), "a unique rule id"));
        }
        let Some(team) = teams.get(&r.team) else {
            return Err(invalid(
                file,
                format!("{key}.team"),
                "a team defined under [teams]",
            ));
        };
        if r.text.trim().is_empty() {
            return Err(invalid(
                file,
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
                file,
                format!("{key}.when.repos"),
                &format!("repositories of team `{}`, not `{bad}`", r.team),
            ));
        }
        if let Some(bad) = r.when.kinds.iter().find(|k| k.is_state_change()) {
            // A close, merge or reopen is never evaluated: such a rule could never match.
            return Err(invalid(
                file,
                format!("{key}.when.kinds"),
                &format!(
                    "kinds of messages, not the state change `{}`",
                    kind_name(*bad)
                ),
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
    Ok(rules)
}

/// `[limits]`: a policy may only tighten the word limits.
fn limits(file: &str, raw: &LimitsFile) -> Result<Limits, PolicyError> {
    let limits = Limits {
        reply_words: raw.reply_words.unwrap_or(MAX_REPLY_WORDS),
        note_words: raw.note_words.unwrap_or(MAX_NOTE_WORDS),
    };
    if !(1..=MAX_REPLY_WORDS).contains(&limits.reply_words) {
        return Err(invalid(
            file,
            "limits.reply_words".to_owned(),
            "a number from 1 to 100",
        ));
    }
    if !(1..=MAX_NOTE_WORDS).contains(&limits.note_words) {
        return Err(invalid(
            file,
            "limits.note_words".to_owned(),
            "a number from 1 to 30",
        ));
    }
    Ok(limits)
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

/// A rule id: letters, digits, `-`, `_` or `.` (ids stay inside the
/// router; the names that leave it are `gatehouse-types` names).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

/// A repository, as the proxy and the supervisor take it.
fn is_repo(s: &str) -> bool {
    RepoSlug::is_valid(s)
}

#[cfg(test)]
mod tests;

/// A trigger kind as the policy file spells it.
fn kind_name(kind: crate::trigger::TriggerKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
