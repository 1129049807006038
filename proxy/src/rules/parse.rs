//! The rule-set file as written (`deny_unknown_fields` everywhere) and its
//! validation into a [`RuleSet`]: names, hosts, methods, path templates,
//! query constraints, body checks and examples.

use std::collections::{BTreeMap, BTreeSet};

use gatehouse_types::RuleSetName;
use serde::Deserialize;

use super::{forbidden_endpoint, Access, BodyRule, Injection, MessageRule, OwnRule, RequestHead};
use super::{Rule, RuleError, RuleSet};
use crate::path::PathTemplate;

/// Where a rule may inject a GitHub App JWT: the App's webhook endpoints.
const APP_JWT_PREFIX: &str = "/app/hook/";

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
    own: Option<OwnFile>,
    /// The name of an extended set's rule this one takes the place of.
    replaces: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnFile {
    /// The path capture holding the object's id.
    id: String,
    /// The message kind of the call that creates such objects.
    created_as: String,
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

/// Rule sets and the rules in them share one alphabet ([`RuleSetName`]).
fn is_name(name: &str) -> bool {
    RuleSetName::is_valid(name)
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
    // The App JWT can mint tokens for any repository: it goes to the App's
    // webhook endpoints only, never anywhere a template could widen.
    if raw.inject == Injection::GithubAppJwt && !raw.path.starts_with(APP_JWT_PREFIX) {
        return Err(err(
            "inject",
            format!(
                "`github_app_jwt` is only for paths under {APP_JWT_PREFIX} (the App's webhook deliveries), not `{}`",
                raw.path
            ),
        ));
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
    if raw.graphql.is_some() && raw.message.is_some() {
        return Err(err(
            "message",
            "a rule with a `graphql` check records its messages from the mutations it allows (addComment, createPullRequest); it takes no `message`".into(),
        ));
    }
    let body = validate_body(
        raw.graphql,
        raw.receive_pack,
        &raw.methods,
        &raw.path,
        variables,
    )?;
    let own = match raw.own {
        None => None,
        // The kinds the proxy keeps learned repository forms under are not
        // message kinds: no rule may treat them as objects a worker made.
        Some(own)
            if path.captures().any(|c| c == own.id)
                && !own.created_as.is_empty()
                && !crate::server::LEARNED_KINDS.contains(&own.created_as.as_str()) =>
        {
            Some(OwnRule {
                id: own.id,
                created_as: own.created_as,
            })
        }
        Some(own) => {
            return Err(err(
                "own",
                format!(
                "`id = {:?}` must name a capture of the path `{}` and `created_as` a message kind",
                own.id, raw.path
            ),
            ))
        }
    };
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
        own,
        replaces: raw.replaces,
    })
}

/// A rule's body check: at most one of `graphql` and `receive_pack`, each
/// only on its endpoint; a push or a GraphQL POST must have its check.
fn validate_body(
    graphql: Option<crate::graphql::GraphQlAllowFile>,
    receive_pack: Option<crate::receive_pack::RefPolicyFile>,
    methods: &[String],
    path: &str,
    variables: &BTreeSet<String>,
) -> Result<BodyRule, (String, String)> {
    let err = |field: &str, message: String| (field.to_owned(), message);
    let is_graphql_path = path == "/graphql" || path.ends_with("/graphql");
    let body = match (graphql, receive_pack) {
        (None, None) => BodyRule::None,
        (Some(g), None) => {
            if methods != ["POST"] {
                return Err(err(
                    "methods",
                    "a `graphql` rule takes exactly [\"POST\"]".into(),
                ));
            }
            BodyRule::GraphQl(g.validate(variables).map_err(|m| err("graphql", m))?)
        }
        (None, Some(r)) => {
            if methods != ["POST"] || !path.ends_with("/git-receive-pack") {
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
    if path.ends_with("/git-receive-pack")
        && !matches!(body, BodyRule::ReceivePack(_))
        && methods.iter().any(|m| m == "POST")
    {
        return Err(err(
            "receive_pack",
            "a push rule must say which refs it allows".into(),
        ));
    }
    if is_graphql_path
        && !matches!(body, BodyRule::GraphQl(_))
        && methods.iter().any(|m| m == "POST")
    {
        return Err(err(
            "graphql",
            "POST /graphql needs a `graphql` section listing what it allows".into(),
        ));
    }
    Ok(body)
}

pub(super) fn parse_example(line: &str) -> Option<RequestHead<'_>> {
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
