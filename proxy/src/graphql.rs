//! The `POST /graphql` body check.
//!
//! The client chooses `operationName`, so checking it says nothing. Instead
//! the whole document is parsed (graphql-parser, with its nesting limit) and
//! every operation in it must pass: its type must be `query` or `mutation`,
//! and every root field — after expanding fragment spreads and inline
//! fragments, and looking through aliases — must be listed for that type. A
//! comment-posting mutation therefore cannot ride inside an allowed query.
//! Batched bodies (a JSON array) are refused.
//!
//! With `repository = "{repo}"` the rule also pins every root `repository`
//! field's `owner`/`name` arguments (literals, or variables resolved from the
//! request's `variables` or their defaults) to the identity's repository.
//! Fields nested below a root field are not checked: GraphQL can walk from one
//! object to others, so the scoped installation token stays the boundary for
//! what nested reads can reach.
//!
//! Mutations are pinned ([`mutations`]): each allowed one must name, by node
//! id, the identity's repository or a pull request the identity created,
//! ids the proxy learnt from earlier answers ([`GraphQlSummary::learn`]).
//! A mutation that posts (a comment, a pull request) is the body's message
//! record ([`GraphQlSummary::message`]); a document may hold one, whatever
//! its operations, aliases and fragments, as a REST call posts one.

use std::collections::{BTreeMap, BTreeSet};

use graphql_parser::query::{
    Definition, Document, FragmentDefinition, OperationDefinition, Selection, SelectionSet, Value,
};
use serde::Deserialize;

use crate::path::Vars;
use crate::rules::Denial;

mod mutations;

pub use mutations::{
    pinned_key, KnownIds, Learn, MessageField, MESSAGES, PINNED, PULL_REQUEST_NODE, REPOSITORY_NODE,
};

/// Work limits of one document's check. They count over the whole document,
/// not per operation, so no arrangement of operations and fragments spreads
/// multiplies them: the check visits at most [`MAX_ROOT_SELECTIONS`] root
/// selections, whatever the document.
pub const MAX_OPERATIONS: usize = 32;
/// Fragment spreads followed at the root, in all operations together (a
/// guard against fragment cycles and blow-up).
pub const MAX_FRAGMENT_SPREADS: usize = 256;
/// Root selections (fields, inline fragments, spreads) visited in all
/// operations together, each spread's fragment counted every time it is
/// followed.
pub const MAX_ROOT_SELECTIONS: usize = 4096;
/// Nesting of fragments and inline fragments at the root of an operation.
pub const MAX_FRAGMENT_DEPTH: usize = 16;
/// Lexical tokens in the document, counted in one pass before it is parsed:
/// the parser's cost grows with them, not with the bytes of string literals
/// (a comment's text is one token). A `gh` query has a few hundred.
pub const MAX_DOCUMENT_TOKENS: usize = 8192;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GraphQlAllowFile {
    #[serde(default)]
    query: Vec<String>,
    #[serde(default)]
    mutation: Vec<String>,
    /// `"{var}"`: pin root `repository(owner:, name:)` to this identity variable.
    repository: Option<String>,
}

/// A validated GraphQL rule, before binding to an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GraphQlRule {
    query: BTreeSet<String>,
    mutation: BTreeSet<String>,
    repository_variable: Option<String>,
}

impl GraphQlAllowFile {
    pub(crate) fn validate(self, variables: &BTreeSet<String>) -> Result<GraphQlRule, String> {
        if self.query.is_empty() && self.mutation.is_empty() {
            return Err("expected at least one field in `query` or `mutation`".into());
        }
        for field in self.query.iter().chain(&self.mutation) {
            let mut chars = field.chars();
            let ok = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(format!("`{field}` is not a GraphQL field name"));
            }
        }
        let repository_variable = match self.repository {
            None => None,
            Some(template) => {
                let name = template
                    .strip_prefix('{')
                    .and_then(|t| t.strip_suffix('}'))
                    .filter(|n| variables.contains(*n));
                Some(name.ok_or_else(|| format!("`repository`: expected `{{variable}}` naming a declared variable, got `{template}`"))?.to_owned())
            }
        };
        if let Some(field) = self.mutation.iter().find(|m| pinned_key(m).is_none()) {
            let pinnable: Vec<&str> = PINNED.iter().map(|(m, _)| *m).collect();
            return Err(format!(
                "the mutation `{field}` cannot be pinned to the identity's objects; allowed are only {}",
                pinnable.join(", ")
            ));
        }
        if repository_variable.is_none() && !self.mutation.is_empty() {
            return Err("allowing mutations needs `repository = \"{repo}\"`: they are pinned to the repository's node id, learnt from a pinned `repository` query".into());
        }
        if repository_variable.is_none() && self.query.iter().any(|f| f == "repository") {
            return Err(
                "allowing the root field `repository` needs `repository = \"{repo}\"` to pin it"
                    .into(),
            );
        }
        Ok(GraphQlRule {
            query: self.query.into_iter().collect(),
            mutation: self.mutation.into_iter().collect(),
            repository_variable,
        })
    }
}

impl GraphQlRule {
    pub(crate) fn bind(&self, vars: &Vars) -> GraphQlAllow {
        GraphQlAllow {
            query: self.query.clone(),
            mutation: self.mutation.clone(),
            repository: self
                .repository_variable
                .as_ref()
                .and_then(|v| vars.get(v))
                .cloned(),
        }
    }
}

/// What a GraphQL body may contain, bound to an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphQlAllow {
    /// Root fields allowed in `query` operations.
    pub query: BTreeSet<String>,
    /// Root fields allowed in `mutation` operations.
    pub mutation: BTreeSet<String>,
    /// `owner/name` every root `repository` field must name (case-insensitive).
    pub repository: Option<String>,
}

/// The operations and root fields of an allowed body, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphQlSummary {
    /// `(kind, name)` per operation, kind `query` or `mutation`.
    pub operations: Vec<(&'static str, Option<String>)>,
    /// Root fields as `kind.field`, e.g. `mutation.addComment`, sorted, unique.
    pub root_fields: Vec<String>,
    /// Ids to take from the answer into the identity's own set (only for a
    /// document of one operation, where the answer's keys are certain).
    pub learn: Vec<Learn>,
    /// The one mutation root field that posts, if any, for the audit's
    /// message record.
    pub message: Option<MessageField>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    query: String,
    #[serde(default)]
    variables: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, rename = "operationName")]
    _operation_name: Option<String>,
}

/// Check a GraphQL request body. The denial's `rule_sets_tried` is empty: the
/// caller knows which rule set allowed the request line.
pub fn check(
    body: &[u8],
    allowed: &GraphQlAllow,
    known: &KnownIds,
) -> Result<GraphQlSummary, Denial> {
    let deny = |reason: String| Denial::new(reason, &[]);
    // One meaning per document: no duplicate key (the upstream might read
    // the `query` this check did not), bounded depth and keys.
    crate::json::check_document(body).map_err(deny)?;
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| deny(format!("the GraphQL body is not JSON: {e}")))?;
    if value.is_array() {
        return Err(deny("batched GraphQL requests (a JSON array) are not allowed; send one operation per request".into()));
    }
    let request: Request = serde_json::from_value(value)
        .map_err(|e| deny(format!("the GraphQL body must be an object with `query`, optional `variables` and `operationName` ({e})")))?;
    count_tokens(&request.query, MAX_DOCUMENT_TOKENS).map_err(deny)?;
    let document = graphql_parser::parse_query::<String>(&request.query)
        .map_err(|e| deny(format!("the GraphQL document does not parse: {e}")))?;
    let variables = request.variables.unwrap_or_default();
    let fragments = fragments(&document);
    let mut walk = Walk {
        fragments: &fragments,
        allowed,
        known,
        variables: &variables,
        spreads_left: MAX_FRAGMENT_SPREADS,
        selections_left: MAX_ROOT_SELECTIONS,
        seen: BTreeSet::new(),
        inline_pins: BTreeMap::new(),
        learn: Vec::new(),
        root_keys: BTreeMap::new(),
        messages: Vec::new(),
    };
    let mut operations = Vec::new();
    for definition in &document.definitions {
        let Definition::Operation(operation) = definition else {
            continue;
        };
        if operations.len() == MAX_OPERATIONS {
            return Err(deny(format!(
                "the GraphQL document has more than {MAX_OPERATIONS} operations; send fewer per request"
            )));
        }
        let operation = match operation {
            OperationDefinition::SelectionSet(s) => Operation {
                kind: "query",
                name: None,
                variable_definitions: &[],
                selection_set: s,
            },
            OperationDefinition::Query(q) => Operation {
                kind: "query",
                name: q.name.as_deref(),
                variable_definitions: &q.variable_definitions,
                selection_set: &q.selection_set,
            },
            OperationDefinition::Mutation(m) => Operation {
                kind: "mutation",
                name: m.name.as_deref(),
                variable_definitions: &m.variable_definitions,
                selection_set: &m.selection_set,
            },
            OperationDefinition::Subscription(_) => {
                return Err(deny("GraphQL subscriptions are not allowed".into()))
            }
        };
        walk.selections(&operation, operation.selection_set, 0)
            .map_err(deny)?;
        operations.push((operation.kind, operation.name.map(str::to_owned)));
    }
    if operations.is_empty() {
        return Err(deny("the GraphQL document has no operation".into()));
    }
    for (_, key) in PINNED {
        let written = mutations::name_tokens(&request.query, key);
        let read = walk.inline_pins.get(key).copied().unwrap_or(0);
        if written != read {
            return Err(deny(format!(
                "`{key}` is written {written} times in the document but {read} times in its mutations' inputs (a repeated key, or the name elsewhere); write each input once"
            )));
        }
    }
    let message = one_message(walk.messages, &walk.root_keys).map_err(deny)?;
    let learn = if operations.len() == 1 {
        let keys = &walk.root_keys;
        let unique = |l: &Learn| {
            let root = l.pointer.split('/').nth(2).unwrap_or("");
            keys.get(root) == Some(&1)
        };
        walk.learn.iter().filter(|l| unique(l)).cloned().collect()
    } else {
        Vec::new()
    };
    Ok(GraphQlSummary {
        learn,
        message,
        operations,
        // The set is ordered by (kind, field), which is the order of `kind.field`.
        root_fields: walk
            .seen
            .iter()
            .map(|(kind, field)| format!("{kind}.{field}"))
            .collect(),
    })
}

/// The document's one message field. Each request line of the audit log
/// carries one message record and its completion one created id, so a
/// document with two fields that post is refused (in any operations: which
/// one runs is the upstream's reading of `operationName`), and so is one
/// whose field's answer key is selected again (the created id would not be
/// certain).
fn one_message(
    messages: Vec<MessageField>,
    root_keys: &BTreeMap<&str, usize>,
) -> Result<Option<MessageField>, String> {
    let mut messages = messages.into_iter();
    let (first, second) = (messages.next(), messages.next());
    if let (Some(a), Some(b)) = (&first, &second) {
        return Err(format!(
            "the GraphQL document has more than one mutation that posts (`{}`, `{}`, …); send one comment or pull request per request, so that each is one message record",
            a.key, b.key
        ));
    }
    if let Some(m) = &first {
        if root_keys.get(m.key.as_str()) != Some(&1) {
            return Err(format!(
                "the GraphQL document selects the root key `{}` more than once; a mutation that posts must have its own key, so that what it creates can be read from the answer",
                m.key
            ));
        }
    }
    Ok(first)
}

/// Counts the lexical tokens of a GraphQL document up to `limit`, in one
/// pass: a string or block string, a name or number, `...` and each other
/// punctuator are one token; whitespace, commas and comments are none. An
/// unterminated string runs to the end (the parser will refuse it).
fn count_tokens(document: &str, limit: usize) -> Result<usize, String> {
    let bytes = document.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut count = 0;
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        i += match rest[0] {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => 1,
            b'#' => {
                let line = rest.iter().position(|&b| b == b'\n' || b == b'\r');
                line.unwrap_or(rest.len())
            }
            _ => {
                count += 1;
                if count > limit {
                    return Err(format!(
                        "the GraphQL document has more than {limit} tokens; send a smaller query"
                    ));
                }
                token_len(rest, word)
            }
        };
    }
    Ok(count)
}

/// The length of the token at the start of `rest` (not blank).
fn token_len(rest: &[u8], word: impl Fn(u8) -> bool) -> usize {
    if let Some(body) = rest.strip_prefix(b"\"\"\"") {
        let mut j = 0;
        while j < body.len() {
            if body[j..].starts_with(b"\\\"\"\"") {
                j += 4;
            } else if body[j..].starts_with(b"\"\"\"") {
                return 3 + j + 3;
            } else {
                j += 1;
            }
        }
        return rest.len();
    }
    if rest[0] == b'"' {
        let mut j = 1;
        while j < rest.len() {
            match rest[j] {
                b'\\' => j += 2,
                b'"' => return j + 1,
                _ => j += 1,
            }
        }
        return rest.len();
    }
    if rest.starts_with(b"...") {
        return 3;
    }
    if word(rest[0]) {
        return rest.iter().position(|&b| !word(b)).unwrap_or(rest.len());
    }
    // One punctuator, or one (possibly multi-byte) character the parser refuses.
    let width = rest[1..]
        .iter()
        .position(|&b| (b & 0xc0) != 0x80)
        .map_or(rest.len(), |p| p + 1);
    width.min(rest.len())
}

fn fragments<'d>(
    document: &'d Document<'d, String>,
) -> BTreeMap<&'d str, &'d FragmentDefinition<'d, String>> {
    document
        .definitions
        .iter()
        .filter_map(|d| match d {
            Definition::Fragment(f) => Some((f.name.as_str(), f)),
            Definition::Operation(_) => None,
        })
        .collect()
}

type Field<'d> = graphql_parser::query::Field<'d, String>;
type VariableDefinition<'d> = graphql_parser::query::VariableDefinition<'d, String>;

/// One operation of the document, whatever its kind.
struct Operation<'d> {
    kind: &'static str,
    name: Option<&'d str>,
    variable_definitions: &'d [VariableDefinition<'d>],
    selection_set: &'d SelectionSet<'d, String>,
}

/// The walk over every operation's root selections, with the document's
/// budget and the root fields seen so far.
struct Walk<'d, 'r> {
    fragments: &'r BTreeMap<&'d str, &'d FragmentDefinition<'d, String>>,
    allowed: &'r GraphQlAllow,
    known: &'r KnownIds,
    variables: &'r serde_json::Map<String, serde_json::Value>,
    spreads_left: usize,
    selections_left: usize,
    seen: BTreeSet<(&'static str, &'d str)>,
    /// Pinned values read from object literals in the document, per key.
    inline_pins: BTreeMap<&'static str, usize>,
    learn: Vec<Learn>,
    /// Root response keys (alias or name) and how often each was selected.
    root_keys: BTreeMap<&'d str, usize>,
    /// The mutation fields that post, in the order reached.
    messages: Vec<MessageField>,
}

impl<'d> Walk<'d, '_> {
    /// Checks each root field of `set` as it is reached (expanding
    /// fragments): the first one not allowed ends the walk.
    fn selections(
        &mut self,
        operation: &Operation<'d>,
        set: &'d SelectionSet<'d, String>,
        depth: usize,
    ) -> Result<(), String> {
        if depth > MAX_FRAGMENT_DEPTH {
            return Err(format!(
                "GraphQL fragments are nested deeper than {MAX_FRAGMENT_DEPTH} at the root"
            ));
        }
        for selection in &set.items {
            self.selections_left = self.selections_left.checked_sub(1).ok_or_else(|| {
                format!("the GraphQL document selects more than {MAX_ROOT_SELECTIONS} root fields (counting each fragment spread); send a smaller query")
            })?;
            match selection {
                Selection::Field(field) => self.field(operation, field)?,
                Selection::InlineFragment(inline) => {
                    self.selections(operation, &inline.selection_set, depth + 1)?
                }
                Selection::FragmentSpread(spread) => {
                    self.spreads_left = self
                        .spreads_left
                        .checked_sub(1)
                        .ok_or("too many GraphQL fragment spreads (or a fragment cycle)")?;
                    let fragment = self
                        .fragments
                        .get(spread.fragment_name.as_str())
                        .ok_or_else(|| {
                            format!("unknown GraphQL fragment `{}`", spread.fragment_name)
                        })?;
                    self.selections(operation, &fragment.selection_set, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    fn field(&mut self, operation: &Operation<'d>, field: &'d Field<'d>) -> Result<(), String> {
        let kind = operation.kind;
        let field_name = field.name.as_str();
        let listed = if kind == "mutation" {
            &self.allowed.mutation
        } else {
            &self.allowed.query
        };
        if field_name != "__typename" && !listed.contains(field_name) {
            let allowed_list = listed
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            return Err(format!(
                "the GraphQL {kind} field `{field_name}` is not allowed for this identity (allowed {kind} fields: {})",
                if allowed_list.is_empty() { "none" } else { &allowed_list }
            ));
        }
        if kind == "query" && field_name == "repository" {
            check_repository(
                field,
                self.allowed.repository.as_deref(),
                self.variables,
                operation.variable_definitions,
            )?;
        }
        if kind == "mutation" && field_name != "__typename" {
            let key = pinned_key(field_name)
                .ok_or_else(|| format!("the mutation `{field_name}` cannot be pinned"))?;
            let definitions = operation.variable_definitions;
            let (id, inline) = mutations::pinned_value(field, key, self.variables, definitions)?;
            mutations::check_pin(field_name, &id, self.known)?;
            if inline {
                *self.inline_pins.entry(key).or_default() += 1;
            }
            let repository = self.allowed.repository.as_deref();
            self.messages
                .extend(mutations::message(field, &id, repository, self.fragments)?);
        }
        *self
            .root_keys
            .entry(field.alias.as_deref().unwrap_or(field_name))
            .or_default() += 1;
        self.learn
            .extend(mutations::learn(kind, field, self.fragments));
        self.seen.insert((kind, field_name));
        Ok(())
    }
}

fn check_repository(
    field: &Field,
    pinned: Option<&str>,
    variables: &serde_json::Map<String, serde_json::Value>,
    definitions: &[VariableDefinition],
) -> Result<(), String> {
    let Some(pinned) = pinned else {
        return Err(
            "the GraphQL field `repository` is not pinned to a repository for this identity".into(),
        );
    };
    let argument = |name: &str| -> Result<String, String> {
        let mut values = field
            .arguments
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v);
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(format!("`repository` needs exactly one `{name}` argument"));
        };
        resolve_string(value, variables, definitions).ok_or_else(|| {
            format!("`repository(…{name}:)` must be a string literal or a string variable")
        })
    };
    let repo = format!("{}/{}", argument("owner")?, argument("name")?);
    if repo.eq_ignore_ascii_case(pinned) {
        Ok(())
    } else {
        Err(format!(
            "GraphQL `repository` may only name {pinned}, not {repo}"
        ))
    }
}

fn resolve_string(
    value: &Value<String>,
    variables: &serde_json::Map<String, serde_json::Value>,
    definitions: &[VariableDefinition],
) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Variable(name) => match variables.get(name) {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(_) => None,
            None => match definitions
                .iter()
                .find(|d| &d.name == name)?
                .default_value
                .as_ref()?
            {
                Value::String(s) => Some(s.clone()),
                _ => None,
            },
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests;
