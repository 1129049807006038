//! Rule sets and the decision for one request head.
//!
//! A rule set is a TOML file (`sandbox-profiles/rules/*.toml`) with a list of
//! allow rules. [`RuleSet::parse`] validates it into runtime types;
//! [`RuleBook::new`] resolves `extends` and checks every set's `examples`, then
//! answers [`RuleBook::check`] for a request of an identity: pure, no I/O.
//!
//! Order of the decision: the path must be canonical ([`crate::path`]); token
//! endpoints are never allowed, whatever a rule says; the identity's rule sets
//! must exist and its variables be bound; then the rules of the identity's
//! sets are tried in order. When several rules match, the first one that
//! marks a message wins, so a call that posts text to a person is always
//! logged as a message; otherwise the first match wins. Anything no rule
//! allows is denied, with the reason that got closest.
//!
//! ```text
//! rules.rs         the request head, the decision, the runtime rule types
//! rules/parse.rs   the TOML format and its validation into a RuleSet
//! rules/book.rs    RuleBook: `extends` resolved, examples checked, identities checked
//! rules/decide.rs  RuleBook::check: one request head → Allow | Deny (pure)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use crate::graphql::GraphQlAllow;
use crate::path::{Captures, PathTemplate, Vars};
use crate::receive_pack::RefPolicy;

mod book;
mod decide;
mod parse;

#[cfg(test)]
use parse::parse_example;

/// The parts of a request the rules look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// The method, as sent (HTTP methods are case-sensitive).
    pub method: &'a str,
    /// The target host, lowercase, without the port when it is 443.
    pub host: &'a str,
    /// The raw path as it will be forwarded, without the query.
    pub path: &'a str,
    /// The raw query, without `?`.
    pub query: Option<&'a str>,
}

/// The outcome of [`RuleBook::check`].
// Allow is the common outcome; boxing it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(Allowed),
    Deny(Denial),
}

/// What an allowed request may do, with everything bound to the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub rule_set: String,
    pub rule: String,
    /// The name of the credential to inject (a key of the config's credentials).
    pub credential: String,
    pub inject: Injection,
    /// Set for calls that put text in front of a person.
    pub message: Option<MessageMarker>,
    /// A check the body must pass before it is forwarded.
    pub body: BodyCheck,
    /// Values captured by the path template (`{n}`, `{id:seg}`) and constrained query keys.
    pub captures: Captures,
    /// The object the request changes, which must be one the identity
    /// created (people's words are theirs).
    pub own: Option<OwnedObject>,
}

/// An object a request edits or closes, named as its creation was
/// recorded: the message kind of the call that created it and the id the
/// platform gave it (e.g. `github_issue_comment` `1234`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnedObject {
    pub kind: String,
    pub id: String,
}

/// Why a request was denied; the proxy turns it into a 403 JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub reason: String,
    pub rule_sets_tried: Vec<String>,
}

impl Denial {
    pub fn new(reason: impl Into<String>, rule_sets_tried: &[String]) -> Self {
        Self {
            reason: reason.into(),
            rule_sets_tried: rule_sets_tried.to_vec(),
        }
    }
}

/// How the credential goes into the request (always a header, never the body,
/// path or query).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Injection {
    /// `Authorization: Bearer <token>` (GitHub REST and GraphQL, model APIs).
    Bearer,
    /// `Authorization: Basic base64(x-access-token:<token>)` (git smart HTTP).
    GitBasic,
    /// `Authorization: Bearer <tenant_access_token>`, fetched by the proxy.
    FeishuTenant,
    /// `Authorization: Bearer <App JWT>`, freshly signed with a GitHub App's
    /// key: the App's own endpoints (its webhook deliveries), which refuse
    /// installation tokens. Only on `/app/hook/…` paths.
    GithubAppJwt,
}

/// Marks a call that posts text a person will read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageMarker {
    /// E.g. `github_issue_comment`, `feishu_message`.
    pub kind: String,
    /// The target, rendered from identity variables, captures and constrained
    /// query values, e.g. `octo/hello#12`.
    pub target: String,
    /// A JSON pointer into the request body whose value completes the target
    /// (e.g. Feishu's `/receive_id`); the proxy appends it as `:<value>`.
    pub target_body_pointer: Option<String>,
    /// A JSON pointer into the response body to the created message's id.
    pub created_id_pointer: String,
}

/// A check on the request body, bound to the identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyCheck {
    None,
    GraphQl(GraphQlAllow),
    ReceivePack(RefPolicy),
}

/// Why a rule set could not be loaded. Each message names the rule set's
/// source (usually its file), the key, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// The TOML does not parse or has unknown keys.
    #[error("{source_name}: {message}")]
    Syntax {
        source_name: String,
        message: String,
    },
    /// A value is invalid.
    #[error("{source_name}: `{key}`: {message}")]
    Invalid {
        source_name: String,
        key: String,
        message: String,
    },
    /// An example is decided differently from what it says.
    #[error("{source_name}: example `{example}` should be {expected} but was {actual}")]
    Example {
        source_name: String,
        example: String,
        expected: &'static str,
        actual: String,
    },
    /// Two rule sets with the same name.
    #[error("rule set `{0}` is defined twice")]
    Duplicate(String),
    /// An identity names a rule set that is not loaded.
    #[error("unknown rule set `{0}`")]
    UnknownRuleSet(String),
    /// An identity names a rule set that was withdrawn at load.
    #[error("rule set `{rule_set}` is not in use: {why}")]
    Withdrawn { rule_set: String, why: String },
    /// An identity lacks a variable a rule set needs, or has a bad value.
    #[error("rule set `{rule_set}` needs variable `{variable}`: {message}")]
    Variable {
        rule_set: String,
        variable: String,
        message: String,
    },
}

/// A GitHub App permission level; `write` includes `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::Write => "write",
        })
    }
}

// === runtime types ===

/// One allow rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub source: String,
    pub host: String,
    pub methods: Vec<String>,
    pub path: PathTemplate,
    /// Keys that must appear exactly once with one of the listed values
    /// (compared after percent-decoding); other keys are free.
    pub query: BTreeMap<String, Vec<String>>,
    pub credential: String,
    pub inject: Injection,
    message: Option<MessageRule>,
    body: BodyRule,
    own: Option<OwnRule>,
    /// An extended set's rule this one takes the place of (in its place in
    /// the order), e.g. a GraphQL rule that also allows mutations.
    pub replaces: Option<String>,
}

impl Rule {
    /// Whether the rule's body check is a GraphQL document check.
    pub fn checks_graphql(&self) -> bool {
        matches!(self.body, BodyRule::GraphQl(_))
    }
}

/// `own = { id = "<capture>", created_as = "<message kind>" }`: the
/// captured id must be of an object this identity created by a call
/// logged as that message kind.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnRule {
    id: String,
    created_as: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MessageRule {
    kind: String,
    target: String,
    target_body_pointer: Option<String>,
    created_id_pointer: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BodyRule {
    None,
    GraphQl(crate::graphql::GraphQlRule),
    ReceivePack(RefPolicy),
}

/// A named, validated list of rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    pub name: String,
    pub description: String,
    /// Identity variables the rules refer to (including those of extended
    /// sets); every identity using the set must bind them.
    pub variables: BTreeSet<String>,
    /// The extended sets, by name; their rules are part of `rules` once the
    /// set is in a [`RuleBook`].
    pub extends: Vec<String>,
    pub rules: Vec<Rule>,
    /// GitHub App permissions the rules need (including extended sets').
    pub github_permissions: BTreeMap<String, Access>,
    /// Where the set came from (usually its file), for error messages.
    pub source_name: String,
    examples: Vec<(String, bool)>,
    example_variables: Vars,
}

/// Endpoints that mint or reveal credentials: never available to an identity,
/// whatever a rule set says. Compared case-insensitively, on any host (GitHub
/// Enterprise serves the same API under `/api/v3`).
const FORBIDDEN_PREFIXES: &[(&str, &str)] = &[
    (
        "/app/installations/",
        "GitHub App installation tokens are minted by the proxy only",
    ),
    (
        "/api/v3/app/installations/",
        "GitHub App installation tokens are minted by the proxy only",
    ),
    (
        "/app-manifests/",
        "GitHub App credentials are never available to an identity",
    ),
    (
        "/applications/",
        "OAuth token endpoints are never available to an identity",
    ),
    (
        "/installation/token",
        "installation tokens are managed by the proxy only",
    ),
    (
        "/open-apis/auth/",
        "Feishu tokens are fetched by the proxy only",
    ),
];

fn forbidden_endpoint(path: &str) -> Option<&'static str> {
    let starts = |prefix: &str| {
        path.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    FORBIDDEN_PREFIXES
        .iter()
        .find(|(prefix, _)| {
            let bare = prefix.trim_end_matches('/');
            starts(prefix) || (path.len() == bare.len() && starts(bare))
        })
        .map(|(_, why)| *why)
}

/// All loaded rule sets, by name, and the sets withdrawn from use with why
/// (their rules need a credential the proxy does not hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleBook {
    sets: BTreeMap<String, RuleSet>,
    withdrawn: BTreeMap<String, String>,
}

impl fmt::Display for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Injection::Bearer => "bearer",
            Injection::GitBasic => "git_basic",
            Injection::FeishuTenant => "feishu_tenant",
            Injection::GithubAppJwt => "github_app_jwt",
        })
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod shipped_tests;
