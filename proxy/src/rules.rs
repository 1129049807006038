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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use crate::graphql::GraphQlAllow;
use crate::path::{self, Captures, PathTemplate, Vars};
use crate::receive_pack::RefPolicy;

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
    /// An identity lacks a variable a rule set needs, or has a bad value.
    #[error("rule set `{rule_set}` needs variable `{variable}`: {message}")]
    Variable {
        rule_set: String,
        variable: String,
        message: String,
    },
}

// === file format ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSetFile {
    name: String,
    description: String,
    /// Rule sets whose rules come first in this one.
    #[serde(default)]
    extends: Vec<String>,
    #[serde(default)]
    variables: Vec<String>,
    #[serde(default, rename = "rule")]
    rules: Vec<RuleFile>,
    /// The GitHub App permissions the rules need, e.g. `contents = "read"`;
    /// installation tokens are scoped down to these.
    #[serde(default)]
    github_permissions: BTreeMap<String, Access>,
    #[serde(default)]
    example_variables: BTreeMap<String, String>,
    #[serde(default, rename = "example")]
    examples: Vec<ExampleFile>,
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    name: String,
    /// Where the endpoint comes from (GitHub's REST description, Feishu's docs).
    source: String,
    host: String,
    methods: Vec<String>,
    path: String,
    #[serde(default)]
    query: BTreeMap<String, Vec<String>>,
    credential: String,
    inject: Injection,
    message: Option<MessageFile>,
    graphql: Option<crate::graphql::GraphQlAllowFile>,
    receive_pack: Option<crate::receive_pack::RefPolicyFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageFile {
    kind: String,
    target: String,
    target_body_pointer: Option<String>,
    created_id_pointer: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExampleFile {
    allow: Option<String>,
    deny: Option<String>,
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

impl RuleSet {
    /// Parse and validate a rule set; its examples are checked by
    /// [`RuleBook::new`], once `extends` is resolved. `source_name` (usually
    /// the file path) is used in error messages.
    pub fn parse(source_name: &str, text: &str) -> Result<Self, RuleError> {
        let file: RuleSetFile = toml::from_str(text).map_err(|e| RuleError::Syntax {
            source_name: source_name.to_owned(),
            message: e.to_string(),
        })?;
        let invalid = |key: String, message: String| RuleError::Invalid {
            source_name: source_name.to_owned(),
            key,
            message,
        };
        if !is_name(&file.name) {
            return Err(invalid("name".into(), "expected [a-z0-9-]+".into()));
        }
        let variables: BTreeSet<String> = file.variables.iter().cloned().collect();
        let mut rules = Vec::new();
        let mut names = BTreeSet::new();
        for (i, raw) in file.rules.into_iter().enumerate() {
            let key = |field: &str| format!("rule[{i}].{field}");
            if !is_name(&raw.name) || !names.insert(raw.name.clone()) {
                return Err(invalid(
                    key("name"),
                    format!("`{}`: expected a unique name of [a-z0-9-]+", raw.name),
                ));
            }
            rules.push(
                validate_rule(raw, &variables)
                    .map_err(|(field, message)| invalid(key(&field), message))?,
            );
        }
        if let Some(key) = file
            .github_permissions
            .keys()
            .find(|k| k.is_empty() || !k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        {
            return Err(invalid(
                format!("github_permissions.{key}"),
                "expected a GitHub App permission name like `contents`".into(),
            ));
        }
        let mut examples = Vec::new();
        for (i, example) in file.examples.into_iter().enumerate() {
            let key = format!("example[{i}]");
            let (line, expect_allow) = match (example.allow, example.deny) {
                (Some(line), None) => (line, true),
                (None, Some(line)) => (line, false),
                _ => {
                    return Err(invalid(
                        key,
                        "expected exactly one of `allow` or `deny`".into(),
                    ))
                }
            };
            if parse_example(&line).is_none() {
                return Err(invalid(
                    key,
                    format!("`{line}`: expected `METHOD host/path[?query]`"),
                ));
            }
            examples.push((line, expect_allow));
        }
        Ok(Self {
            name: file.name,
            description: file.description,
            variables,
            extends: file.extends,
            rules,
            github_permissions: file.github_permissions,
            source_name: source_name.to_owned(),
            examples,
            example_variables: file.example_variables,
        })
    }
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn validate_rule(raw: RuleFile, variables: &BTreeSet<String>) -> Result<Rule, (String, String)> {
    let err = |field: &str, message: String| (field.to_owned(), message);
    if raw.source.trim().is_empty() {
        return Err(err(
            "source",
            "say where this endpoint is documented".into(),
        ));
    }
    if raw.host.is_empty()
        || !raw
            .host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return Err(err(
            "host",
            format!("`{}`: expected a lowercase DNS name", raw.host),
        ));
    }
    if raw.methods.is_empty()
        || raw.methods.iter().any(|m| {
            !matches!(
                m.as_str(),
                "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE"
            )
        })
    {
        return Err(err(
            "methods",
            "expected a non-empty list of GET, HEAD, POST, PUT, PATCH, DELETE".into(),
        ));
    }
    let path = PathTemplate::parse(&raw.path, variables)
        .map_err(|e| err("path", format!("`{}`: {e}", raw.path)))?;
    if let Some(why) = forbidden_endpoint(&raw.path) {
        return Err(err("path", format!("`{}`: {why}", raw.path)));
    }
    for (key, values) in &raw.query {
        if key.is_empty() || values.is_empty() {
            return Err(err(
                "query",
                format!("`{key}`: expected a key with a non-empty list of allowed values"),
            ));
        }
    }
    if raw.credential.is_empty() {
        return Err(err("credential", "expected a credential name".into()));
    }
    let is_graphql_path = raw.path == "/graphql" || raw.path.ends_with("/graphql");
    let body = match (raw.graphql, raw.receive_pack) {
        (None, None) => BodyRule::None,
        (Some(g), None) => {
            if raw.methods != ["POST"] {
                return Err(err(
                    "methods",
                    "a `graphql` rule takes exactly [\"POST\"]".into(),
                ));
            }
            BodyRule::GraphQl(g.validate(variables).map_err(|m| err("graphql", m))?)
        }
        (None, Some(r)) => {
            if raw.methods != ["POST"] || !raw.path.ends_with("/git-receive-pack") {
                return Err(err(
                    "receive_pack",
                    "only for POST …/git-receive-pack".into(),
                ));
            }
            BodyRule::ReceivePack(r.validate().map_err(|m| err("receive_pack", m))?)
        }
        (Some(_), Some(_)) => {
            return Err(err(
                "graphql",
                "a rule has at most one of `graphql` and `receive_pack`".into(),
            ))
        }
    };
    if raw.path.ends_with("/git-receive-pack")
        && !matches!(body, BodyRule::ReceivePack(_))
        && raw.methods.iter().any(|m| m == "POST")
    {
        return Err(err(
            "receive_pack",
            "a push rule must say which refs it allows".into(),
        ));
    }
    if is_graphql_path
        && !matches!(body, BodyRule::GraphQl(_))
        && raw.methods.iter().any(|m| m == "POST")
    {
        return Err(err(
            "graphql",
            "POST /graphql needs a `graphql` section listing what it allows".into(),
        ));
    }
    let message = raw.message.map(|m| MessageRule {
        kind: m.kind,
        target: m.target,
        target_body_pointer: m.target_body_pointer,
        created_id_pointer: m.created_id_pointer,
    });
    Ok(Rule {
        name: raw.name,
        source: raw.source,
        host: raw.host,
        methods: raw.methods,
        path,
        query: raw.query,
        credential: raw.credential,
        inject: raw.inject,
        message,
        body,
    })
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
    let lower = path.to_ascii_lowercase();
    FORBIDDEN_PREFIXES
        .iter()
        .find(|(prefix, _)| lower.starts_with(prefix) || lower == prefix.trim_end_matches('/'))
        .map(|(_, why)| *why)
}

fn parse_example(line: &str) -> Option<RequestHead<'_>> {
    let (method, rest) = line.split_once(' ')?;
    let slash = rest.find('/')?;
    let (host, target) = rest.split_at(slash);
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    Some(RequestHead {
        method,
        host,
        path,
        query,
    })
}

// === impl RuleBook ===

/// All loaded rule sets, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleBook {
    sets: BTreeMap<String, RuleSet>,
}

/// How far the closest rule got, for the denial reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Progress {
    Nothing,
    Host,
    Method(Vec<String>),
    Query(String),
}

impl RuleBook {
    /// Gather rule sets, resolve `extends`, then check every set's examples.
    pub fn new(sets: impl IntoIterator<Item = RuleSet>) -> Result<Self, RuleError> {
        let mut given = BTreeMap::new();
        for set in sets {
            if given.contains_key(&set.name) {
                return Err(RuleError::Duplicate(set.name));
            }
            given.insert(set.name.clone(), set);
        }
        let mut book = Self::default();
        for name in given.keys() {
            book.resolve(name, &given, &mut Vec::new())?;
        }
        for set in book.sets.values() {
            book.check_examples(set)?;
        }
        Ok(book)
    }

    /// Resolve one set's `extends` depth-first; `stack` detects cycles.
    fn resolve(
        &mut self,
        name: &str,
        given: &BTreeMap<String, RuleSet>,
        stack: &mut Vec<String>,
    ) -> Result<(), RuleError> {
        if self.sets.contains_key(name) {
            return Ok(());
        }
        let set = given
            .get(name)
            .ok_or_else(|| RuleError::UnknownRuleSet(name.to_owned()))?;
        let invalid = |message: String| RuleError::Invalid {
            source_name: set.source_name.clone(),
            key: "extends".into(),
            message,
        };
        if stack.iter().any(|s| s == name) {
            return Err(invalid(format!(
                "`extends` forms a cycle: {} -> {name}",
                stack.join(" -> ")
            )));
        }
        stack.push(name.to_owned());
        let mut resolved = set.clone();
        resolved.rules.clear();
        for parent in &set.extends {
            if !given.contains_key(parent) {
                return Err(invalid(format!("unknown rule set `{parent}`")));
            }
            self.resolve(parent, given, stack)?;
            let parent = &self.sets[parent];
            resolved.variables.extend(parent.variables.iter().cloned());
            for (permission, access) in &parent.github_permissions {
                let entry = resolved
                    .github_permissions
                    .entry(permission.clone())
                    .or_insert(*access);
                *entry = (*entry).max(*access);
            }
            resolved.rules.extend(parent.rules.iter().cloned());
        }
        stack.pop();
        for rule in &set.rules {
            if resolved.rules.iter().any(|r| r.name == rule.name) {
                return Err(invalid(format!(
                    "rule `{}` is also defined in an extended set",
                    rule.name
                )));
            }
            resolved.rules.push(rule.clone());
        }
        self.sets.insert(name.to_owned(), resolved);
        Ok(())
    }

    fn check_examples(&self, set: &RuleSet) -> Result<(), RuleError> {
        let names = [set.name.clone()];
        for (line, expect_allow) in &set.examples {
            let Some(head) = parse_example(line) else {
                continue;
            };
            let actual = match self.check(&head, &names, &set.example_variables) {
                Decision::Allow(_) if *expect_allow => continue,
                Decision::Deny(_) if !*expect_allow => continue,
                Decision::Allow(a) => format!("allowed by rule `{}`", a.rule),
                Decision::Deny(d) => format!("denied: {}", d.reason),
            };
            return Err(RuleError::Example {
                source_name: set.source_name.clone(),
                example: line.clone(),
                expected: if *expect_allow { "allowed" } else { "denied" },
                actual,
            });
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&RuleSet> {
        self.sets.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    /// The GitHub App permissions an identity with `rule_sets` needs: the
    /// union of the sets', the higher level winning. Unknown sets add nothing.
    pub fn github_permissions(&self, rule_sets: &[String]) -> BTreeMap<String, Access> {
        let mut permissions = BTreeMap::new();
        for set in rule_sets.iter().filter_map(|name| self.sets.get(name)) {
            for (permission, access) in &set.github_permissions {
                let entry = permissions.entry(permission.clone()).or_insert(*access);
                *entry = (*entry).max(*access);
            }
        }
        permissions
    }

    /// Check that an identity's rule sets exist and its variables bind every
    /// variable they need with a value that can stand in a path.
    pub fn check_identity(&self, rule_sets: &[String], vars: &Vars) -> Result<(), RuleError> {
        for name in rule_sets {
            let set = self
                .sets
                .get(name)
                .ok_or_else(|| RuleError::UnknownRuleSet(name.clone()))?;
            for variable in &set.variables {
                let value = vars.get(variable).ok_or_else(|| RuleError::Variable {
                    rule_set: name.clone(),
                    variable: variable.clone(),
                    message: "missing".into(),
                })?;
                path::check_variable_value(value).map_err(|message| RuleError::Variable {
                    rule_set: name.clone(),
                    variable: variable.clone(),
                    message,
                })?;
            }
        }
        Ok(())
    }

    /// Decide one request of an identity with `rule_sets` and `vars`.
    pub fn check(&self, head: &RequestHead, rule_sets: &[String], vars: &Vars) -> Decision {
        let deny = |reason: String| Decision::Deny(Denial::new(reason, rule_sets));
        if let Err(e) = path::check_canonical(head.path.as_bytes()) {
            return deny(format!(
                "the path is not canonical ({e}); send it exactly as the API documents it"
            ));
        }
        if let Some(query) = head.query {
            if let Some(b) = query
                .bytes()
                .find(|b| !(0x21..0x7f).contains(b) || *b == b'#')
            {
                return deny(format!(
                    "the query contains byte 0x{b:02x}; percent-encode it"
                ));
            }
        }
        if let Some(why) = forbidden_endpoint(head.path) {
            return deny(format!("{why}; this endpoint is never allowed"));
        }
        if let Err(e) = self.check_identity(rule_sets, vars) {
            return deny(format!("the identity is misconfigured: {e}"));
        }
        let query = match head.query.map(decode_query).transpose() {
            Ok(q) => q.unwrap_or_default(),
            Err(why) => return deny(why),
        };
        let sets = || rule_sets.iter().filter_map(|name| self.sets.get(name));
        // Only rules for this host and method can allow; try just those.
        let mut chosen: Option<(&RuleSet, &Rule, Captures)> = None;
        'sets: for set in sets() {
            let candidates = set.rules.iter().filter(|r| {
                r.host.eq_ignore_ascii_case(head.host) && r.methods.iter().any(|m| m == head.method)
            });
            for rule in candidates {
                if let Ok(captures) = match_rule(rule, head, &query, vars) {
                    let marked = rule.message.is_some();
                    if chosen.is_none() || marked {
                        chosen = Some((set, rule, captures));
                    }
                    if marked {
                        break 'sets;
                    }
                }
            }
        }
        if let Some((set, rule, captures)) = chosen {
            return Decision::Allow(allowed(set, rule, captures, vars));
        }
        // Denied: find the closest miss for the reason.
        let progress = sets()
            .flat_map(|set| &set.rules)
            .filter_map(|rule| match_rule(rule, head, &query, vars).err())
            .max()
            .unwrap_or(Progress::Nothing);
        deny(progress.reason(head))
    }
}

impl Progress {
    fn reason(&self, head: &RequestHead) -> String {
        let RequestHead {
            method, host, path, ..
        } = head;
        match self {
            Progress::Nothing => format!("no rule of this identity names host {host}"),
            Progress::Host => format!("no rule of this identity allows the path {path} on {host}"),
            Progress::Method(allowed) => {
                format!(
                    "{host}{path} allows only {} for this identity, not {method}",
                    allowed.join(", ")
                )
            }
            Progress::Query(why) => format!("{method} {host}{path}: {why}"),
        }
    }
}

/// The captures if `rule` allows the request, else how far it got.
fn match_rule(
    rule: &Rule,
    head: &RequestHead,
    query: &[QueryPair],
    vars: &Vars,
) -> Result<Captures, Progress> {
    if !rule.host.eq_ignore_ascii_case(head.host) {
        return Err(Progress::Nothing);
    }
    let mut captures = rule.path.matches(head.path, vars).ok_or(Progress::Host)?;
    if !rule.methods.iter().any(|m| m == head.method) {
        return Err(Progress::Method(rule.methods.clone()));
    }
    for (key, allowed) in &rule.query {
        let values: Vec<&[u8]> = query
            .iter()
            .filter(|(k, _)| k == key.as_bytes())
            .map(|(_, v)| v.as_slice())
            .collect();
        match values.as_slice() {
            [value] if allowed.iter().any(|a| a.as_bytes() == *value) => {
                captures.insert(key.clone(), String::from_utf8_lossy(value).into_owned());
            }
            [] => {
                return Err(Progress::Query(format!(
                    "query `{key}` is required, one of {allowed:?}"
                )))
            }
            [_] => {
                return Err(Progress::Query(format!(
                    "query `{key}` must be one of {allowed:?}"
                )))
            }
            _ => return Err(Progress::Query(format!("query `{key}` must appear once"))),
        }
    }
    Ok(captures)
}

/// A percent-decoded query `(key, value)`.
type QueryPair = (Vec<u8>, Vec<u8>);

/// Split a query into percent-decoded `(key, value)` pairs (`+` is a space),
/// so that an encoded key cannot slip past a constraint.
fn decode_query(query: &str) -> Result<Vec<QueryPair>, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                let value = hex
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("malformed percent-encoding in the query")?;
                out.push(value);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(out)
}

fn allowed(set: &RuleSet, rule: &Rule, captures: Captures, vars: &Vars) -> Allowed {
    let message = rule.message.as_ref().map(|m| MessageMarker {
        kind: m.kind.clone(),
        target: render(&m.target, vars, &captures),
        target_body_pointer: m.target_body_pointer.clone(),
        created_id_pointer: m.created_id_pointer.clone(),
    });
    let body = match &rule.body {
        BodyRule::None => BodyCheck::None,
        BodyRule::GraphQl(g) => BodyCheck::GraphQl(g.bind(vars)),
        BodyRule::ReceivePack(r) => BodyCheck::ReceivePack(r.clone()),
    };
    Allowed {
        rule_set: set.name.clone(),
        rule: rule.name.clone(),
        credential: rule.credential.clone(),
        inject: rule.inject,
        message,
        body,
        captures,
    }
}

/// Replace `{name}` in `template` with a variable or capture; unknown names stay.
fn render(template: &str, vars: &Vars, captures: &Captures) -> String {
    let mut out = template.to_owned();
    for (name, value) in vars.iter().chain(captures) {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

impl fmt::Display for Injection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Injection::Bearer => "bearer",
            Injection::GitBasic => "git_basic",
            Injection::FeishuTenant => "feishu_tenant",
        })
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod shipped_tests;
