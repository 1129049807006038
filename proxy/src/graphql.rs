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

use std::collections::{BTreeMap, BTreeSet};

use graphql_parser::query::{
    Definition, Document, FragmentDefinition, OperationDefinition, Selection, SelectionSet, Value,
};
use serde::Deserialize;

use crate::path::Vars;
use crate::rules::Denial;

/// Most fragment spreads followed while collecting root fields (a guard
/// against fragment cycles and blow-up).
const MAX_FRAGMENT_EXPANSIONS: usize = 256;

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
pub fn check(body: &[u8], allowed: &GraphQlAllow) -> Result<GraphQlSummary, Denial> {
    let deny = |reason: String| Denial::new(reason, &[]);
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| deny(format!("the GraphQL body is not JSON: {e}")))?;
    if value.is_array() {
        return Err(deny("batched GraphQL requests (a JSON array) are not allowed; send one operation per request".into()));
    }
    let request: Request = serde_json::from_value(value)
        .map_err(|e| deny(format!("the GraphQL body must be an object with `query`, optional `variables` and `operationName` ({e})")))?;
    let document = graphql_parser::parse_query::<String>(&request.query)
        .map_err(|e| deny(format!("the GraphQL document does not parse: {e}")))?;
    let variables = request.variables.unwrap_or_default();
    let fragments: BTreeMap<&str, &FragmentDefinition<String>> = fragments(&document);
    let mut summary = GraphQlSummary {
        operations: Vec::new(),
        root_fields: Vec::new(),
    };
    for definition in &document.definitions {
        let Definition::Operation(operation) = definition else {
            continue;
        };
        let (kind, name, variable_definitions, selection_set, listed) = match operation {
            OperationDefinition::SelectionSet(s) => ("query", None, &[][..], s, &allowed.query),
            OperationDefinition::Query(q) => (
                "query",
                q.name.clone(),
                &q.variable_definitions[..],
                &q.selection_set,
                &allowed.query,
            ),
            OperationDefinition::Mutation(m) => (
                "mutation",
                m.name.clone(),
                &m.variable_definitions[..],
                &m.selection_set,
                &allowed.mutation,
            ),
            OperationDefinition::Subscription(_) => {
                return Err(deny("GraphQL subscriptions are not allowed".into()))
            }
        };
        let mut fields = Vec::new();
        let mut budget = MAX_FRAGMENT_EXPANSIONS;
        root_fields(selection_set, &fragments, &mut budget, &mut fields).map_err(deny)?;
        for field in fields {
            let field_name = field.name.as_str();
            if field_name != "__typename" && !listed.contains(field_name) {
                let allowed_list = listed
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(deny(format!(
                    "the GraphQL {kind} field `{field_name}` is not allowed for this identity (allowed {kind} fields: {})",
                    if allowed_list.is_empty() { "none" } else { &allowed_list }
                )));
            }
            if kind == "query" && field_name == "repository" {
                check_repository(
                    field,
                    allowed.repository.as_deref(),
                    &variables,
                    variable_definitions,
                )
                .map_err(deny)?;
            }
            summary.root_fields.push(format!("{kind}.{field_name}"));
        }
        summary.operations.push((kind, name));
    }
    if summary.operations.is_empty() {
        return Err(deny("the GraphQL document has no operation".into()));
    }
    summary.root_fields.sort();
    summary.root_fields.dedup();
    Ok(summary)
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

/// Collect the root fields of a selection set, expanding fragments.
fn root_fields<'d>(
    set: &'d SelectionSet<'d, String>,
    fragments: &BTreeMap<&str, &'d FragmentDefinition<'d, String>>,
    budget: &mut usize,
    out: &mut Vec<&'d Field<'d>>,
) -> Result<(), String> {
    for selection in &set.items {
        match selection {
            Selection::Field(field) => out.push(field),
            Selection::InlineFragment(inline) => {
                root_fields(&inline.selection_set, fragments, budget, out)?
            }
            Selection::FragmentSpread(spread) => {
                *budget = budget
                    .checked_sub(1)
                    .ok_or("too many GraphQL fragment spreads (or a fragment cycle)")?;
                let fragment = fragments
                    .get(spread.fragment_name.as_str())
                    .ok_or_else(|| {
                        format!("unknown GraphQL fragment `{}`", spread.fragment_name)
                    })?;
                root_fields(&fragment.selection_set, fragments, budget, out)?;
            }
        }
    }
    Ok(())
}

fn check_repository(
    field: &Field,
    pinned: Option<&str>,
    variables: &serde_json::Map<String, serde_json::Value>,
    definitions: &[graphql_parser::query::VariableDefinition<String>],
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
    definitions: &[graphql_parser::query::VariableDefinition<String>],
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
