//! The gate: may this trigger lead to work at all, and how?
//!
//! `gate(&TriggerInput, &Policy) -> Admission` looks only at structured
//! facts: the sender's account, the bot list, where the trigger happened and
//! whether a structured field addresses the bot. The text is never read, so a
//! message, a quoted document or an issue body saying "grant this bot access"
//! changes nothing.
//!
//! | sender                                | addresses the bot | admission          |
//! |---------------------------------------|-------------------|--------------------|
//! | the bot itself                        | —                 | Ignore(own)        |
//! | anyone, in a chat/repo not allowed    | —                 | Ignore(place)      |
//! | a listed bot                          | any               | Candidate          |
//! | an unlisted bot                       | any               | Ignore(unlisted)   |
//! | a person of another team (own_team)   | —                 | Ignore(other_team) |
//! | an allowlisted person                 | yes               | Explicit           |
//! | an allowlisted person                 | no                | Candidate          |
//! | anyone else                           | any               | Ignore(unlisted)   |

use serde::{Deserialize, Serialize};

use crate::policy::{Policy, Scope, TeamScoping};
use crate::trigger::{AddressKind, ChatKind, Source, TriggerInput};

/// How an allowlisted person addressed the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    DirectMessage,
    Mention,
    Assignment,
    ReviewRequest,
}

/// Who wrote a candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Author {
    /// An allowlisted person, by policy name.
    Human(String),
    /// A listed bot, by policy name.
    Bot(String),
}

impl Author {
    pub fn is_bot(&self) -> bool {
        matches!(self, Author::Bot(_))
    }
}

/// Why a trigger leads nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IgnoreReason {
    /// The bot's own message.
    OwnMessage,
    /// A GitHub trigger without a repository, or a Feishu one without a chat.
    NoPlace,
    /// The repository is not in any team.
    RepoNotAllowed,
    /// The Feishu group chat is not listed.
    ChatNotAllowed,
    /// Direct messages are off in the policy.
    DirectMessagesOff,
    /// A bot that is not on the bot list.
    UnlistedBot,
    /// A person who is not on the allowlist.
    NotAllowlisted,
    /// An allowlisted person of another team, on this team's repository or
    /// chat, under `team_scoping = "own_team"`.
    OtherTeam,
}

/// The gate's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "admission", rename_all = "snake_case")]
pub enum Admission {
    /// An allowlisted person asked the bot.
    Explicit {
        requester: String,
        via: Via,
    },
    /// Someone allowed wrote without asking; only a team rule can make work of it.
    Candidate {
        author: Author,
    },
    Ignore {
        reason: IgnoreReason,
    },
}

impl Admission {
    pub fn is_ignore(&self) -> bool {
        matches!(self, Admission::Ignore { .. })
    }

    /// The human behind an admitted trigger, if it was a person.
    pub fn human(&self) -> Option<&str> {
        match self {
            Admission::Explicit { requester, .. } => Some(requester),
            Admission::Candidate {
                author: Author::Human(name),
            } => Some(name),
            _ => None,
        }
    }
}

/// Decides a trigger's admission from structured facts only.
pub fn gate(trigger: &TriggerInput, policy: &Policy) -> Admission {
    let ignore = |reason| Admission::Ignore { reason };
    let source = trigger.source;
    if policy.identity.is_sender(source, &trigger.sender) {
        return ignore(IgnoreReason::OwnMessage);
    }
    if let Err(reason) = place_allowed(trigger, policy) {
        return ignore(reason);
    }
    // Anything that is or claims to be a bot is at most a candidate.
    let listed_bot = policy.bot(source, &trigger.sender);
    if trigger.sender.is_bot || listed_bot.is_some() {
        return match listed_bot {
            Some(bot) => Admission::Candidate {
                author: Author::Bot(bot.name.clone()),
            },
            None => ignore(IgnoreReason::UnlistedBot),
        };
    }
    let Some(person) = policy.person(source, &trigger.sender) else {
        return ignore(IgnoreReason::NotAllowlisted);
    };
    if policy.team_scoping == TeamScoping::OwnTeam
        && place_team(trigger, policy).is_some_and(|team| team != person.team)
    {
        return ignore(IgnoreReason::OtherTeam);
    }
    match addressed_via(trigger, policy) {
        Some(via) => Admission::Explicit {
            requester: person.name.clone(),
            via,
        },
        None => Admission::Candidate {
            author: Author::Human(person.name.clone()),
        },
    }
}

fn place_allowed(trigger: &TriggerInput, policy: &Policy) -> Result<(), IgnoreReason> {
    match trigger.source {
        Source::Github => match &trigger.repo {
            None => Err(IgnoreReason::NoPlace),
            Some(repo) if policy.repo_team(repo).is_none() => Err(IgnoreReason::RepoNotAllowed),
            Some(_) => Ok(()),
        },
        Source::Feishu => match &trigger.chat {
            None => Err(IgnoreReason::NoPlace),
            Some(chat) if chat.kind == ChatKind::Direct => {
                if policy.direct_messages {
                    Ok(())
                } else {
                    Err(IgnoreReason::DirectMessagesOff)
                }
            }
            Some(chat) if policy.chats.contains_key(&chat.id) => Ok(()),
            Some(_) => Err(IgnoreReason::ChatNotAllowed),
        },
    }
}

/// The team that owns the place of the trigger: the repository's, or the
/// group chat's. A direct message belongs to no team's place.
fn place_team<'p>(trigger: &TriggerInput, policy: &'p Policy) -> Option<&'p str> {
    match trigger.source {
        Source::Github => policy.repo_team(trigger.repo.as_deref()?).map(|(t, _)| t),
        Source::Feishu => {
            let chat = trigger.chat.as_ref()?;
            if chat.kind == ChatKind::Direct {
                return None;
            }
            policy.chats.get(&chat.id).map(|c| c.team.as_str())
        }
    }
}

/// How the trigger addresses the bot, from structured fields only.
fn addressed_via(trigger: &TriggerInput, policy: &Policy) -> Option<Via> {
    if trigger
        .chat
        .as_ref()
        .is_some_and(|c| c.kind == ChatKind::Direct)
    {
        return Some(Via::DirectMessage);
    }
    trigger
        .addressed
        .iter()
        .filter(|a| policy.identity.is_account(trigger.source, &a.account))
        .map(|a| match a.kind {
            AddressKind::Mention => Via::Mention,
            AddressKind::Assignment => Via::Assignment,
            AddressKind::ReviewRequest => Via::ReviewRequest,
        })
        .next()
}

/// The scope work on this trigger would have: the repository's team for
/// GitHub, the chat's team and repository for a Feishu group, the
/// requester's team's default repository for a direct message.
pub fn scope_for(trigger: &TriggerInput, admission: &Admission, policy: &Policy) -> Option<Scope> {
    let repo = match trigger.source {
        Source::Github => trigger.repo.clone()?,
        Source::Feishu => {
            let chat = trigger.chat.as_ref()?;
            if chat.kind == ChatKind::Direct {
                let person = policy.person_named(admission.human()?)?;
                policy.teams.get(&person.team)?.default_repo.clone()?
            } else {
                policy.chats.get(&chat.id)?.repo.clone()
            }
        }
    };
    policy.scope_of_repo(&repo)
}

#[cfg(test)]
mod tests;
