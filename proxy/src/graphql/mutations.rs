//! Mutations pinned to the identity's objects (pure).
//!
//! A mutation names its target by node id, which says nothing about the
//! repository in the document, so each allowed mutation has one input
//! field that must hold an id the proxy already knows as the identity's:
//!
//! | mutation            | pinned input   | must be                                   |
//! |---------------------|----------------|-------------------------------------------|
//! | `createPullRequest` | `repositoryId` | the node id of the identity's repository  |
//! | `addComment`        | `subjectId`    | a pull request this identity created      |
//! | `requestReviews`    | `pullRequestId`| a pull request this identity created      |
//!
//! The proxy learns these ids from answers it forwarded ([`Learn`]): the
//! `id` of a root `repository` field (pinned to the identity's repository)
//! and the `pullRequest { id }` a `createPullRequest` returns. A mutation
//! whose pinned value cannot be read for certain is refused: the `input`
//! argument must be the only argument, an object literal or a variable,
//! the pinned field a string literal or a string variable. GraphQL object
//! literals drop a repeated key when parsed, so the document's own tokens
//! are counted too: each pinned key must occur as often as the parsed
//! document shows it (`{subjectId: "mine", subjectId: "theirs"}` is refused).
//!
//! Two of them put text in front of people, so each is a message record in
//! the audit log like a REST comment or pull request ([`message`]):
//!
//! | mutation            | message kind           | target             | created id in the answer                          |
//! |---------------------|------------------------|--------------------|---------------------------------------------------|
//! | `addComment`        | `github_issue_comment` | the `subjectId`    | `commentEdge { node { databaseId } }`, or `url`   |
//! | `createPullRequest` | `github_pull_request`  | `owner/name`       | `pullRequest { number }`, or `url`                |
//!
//! gh 2.23 selects `commentEdge { node { url } }` and `pullRequest { id url }`
//! (api/queries_pr.go, api/queries_comments.go); a comment's url ends in
//! `#issuecomment-<id>`, a pull request's in `/pull/<number>`. The created id
//! must be selected, directly and for certain, or the mutation is refused:
//! a message the audit cannot tie to what the platform shows is not sent.

use std::collections::{BTreeMap, BTreeSet};

use graphql_parser::query::{FragmentDefinition, Selection, SelectionSet, Value};

use super::{Field, VariableDefinition};

/// Own-set kind of a repository's node id, learnt from a pinned
/// `repository { id }` answer.
pub const REPOSITORY_NODE: &str = "github_repository_node";
/// Own-set kind of a pull request's node id, learnt from the answer to a
/// `createPullRequest` (or REST pull-create's `node_id`).
pub const PULL_REQUEST_NODE: &str = "github_pull_request_node";

/// The mutations the proxy can pin, and the input field each is pinned by.
pub const PINNED: [(&str, &str); 3] = [
    ("createPullRequest", "repositoryId"),
    ("addComment", "subjectId"),
    ("requestReviews", "pullRequestId"),
];

/// The mutations that post, and the message kind each is recorded as (the
/// REST kinds: the platform objects are the same).
pub const MESSAGES: [(&str, &str); 2] = [
    ("addComment", "github_issue_comment"),
    ("createPullRequest", "github_pull_request"),
];

/// A mutation root field that posts, as the audit records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageField {
    /// [`MESSAGES`]' kind.
    pub kind: &'static str,
    /// What it posts to: a comment's `subjectId`, a pull request's
    /// repository (`owner/name`), as the check pinned them.
    pub target: String,
    /// The answer's key of the field: its alias, else its name.
    pub key: String,
    /// JSON pointer to the created object's id (or url) in the answer.
    pub id_pointer: String,
}

/// What the proxy knows as an identity's own, by node id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownIds {
    /// Node ids of the identity's repository (learnt; normally one).
    pub repositories: BTreeSet<String>,
    /// Node ids of pull requests this identity created.
    pub own_pulls: BTreeSet<String>,
}

/// A value to take from the answer: the string at `pointer` joins the
/// identity's own set as `kind`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Learn {
    pub kind: &'static str,
    pub pointer: String,
}

/// The pinned input key of `mutation`, if the proxy can pin it.
pub fn pinned_key(mutation: &str) -> Option<&'static str> {
    PINNED
        .iter()
        .find(|(name, _)| *name == mutation)
        .map(|(_, key)| *key)
}

/// The value of a mutation's pinned input field, and whether it was
/// written inline in the document (for the repeated-key count).
pub(super) fn pinned_value(
    field: &Field,
    key: &str,
    variables: &serde_json::Map<String, serde_json::Value>,
    definitions: &[VariableDefinition],
) -> Result<(String, bool), String> {
    let name = &field.name;
    let [(argument, input)] = field.arguments.as_slice() else {
        return Err(format!("`{name}` must have exactly one argument, `input`"));
    };
    if argument != "input" {
        return Err(format!("`{name}` takes only `input`, not `{argument}`"));
    }
    let unreadable =
        || format!("`{name}(input: {{{key}: …}})` must be a string literal or a string variable");
    match input {
        Value::Object(fields) => {
            let value = fields.get(key).ok_or_else(unreadable)?;
            let text =
                super::resolve_string(value, variables, definitions).ok_or_else(unreadable)?;
            Ok((text, true))
        }
        Value::Variable(var) => {
            let object = match variables.get(var) {
                Some(serde_json::Value::Object(object)) => object.clone(),
                Some(_) => return Err(unreadable()),
                // A default in the document is an object literal there.
                None => {
                    let default = definitions
                        .iter()
                        .find(|d| &d.name == var)
                        .and_then(|d| d.default_value.as_ref());
                    let Some(Value::Object(fields)) = default else {
                        return Err(unreadable());
                    };
                    let value = fields.get(key).ok_or_else(unreadable)?;
                    let text = super::resolve_string(value, variables, definitions)
                        .ok_or_else(unreadable)?;
                    return Ok((text, true));
                }
            };
            match object.get(key) {
                Some(serde_json::Value::String(s)) => Ok((s.clone(), false)),
                _ => Err(unreadable()),
            }
        }
        _ => Err(unreadable()),
    }
}

/// Whether `id` is what the mutation's pinned key must be, or why not.
pub(super) fn check_pin(mutation: &str, id: &str, known: &KnownIds) -> Result<(), String> {
    match mutation {
        "createPullRequest" if known.repositories.is_empty() => Err(
            "`createPullRequest` needs the node id of this identity's repository, which the proxy \
             has not seen yet: query `repository(owner:, name:) { id }` first (gh does)"
                .into(),
        ),
        "createPullRequest" if known.repositories.contains(id) => Ok(()),
        "createPullRequest" => Err(format!(
            "`createPullRequest` may only open a pull request in this identity's repository; \
             `repositoryId` {id} is another"
        )),
        "addComment" | "requestReviews" if known.own_pulls.contains(id) => Ok(()),
        "addComment" | "requestReviews" => Err(format!(
            "`{mutation}` is allowed only on a pull request this identity created; {id} is not \
             one (the router alone speaks in people's threads)"
        )),
        other => Err(format!("the mutation `{other}` cannot be pinned")),
    }
}

/// Named fragments of the document, by name.
pub(super) type Fragments<'d> = BTreeMap<&'d str, &'d FragmentDefinition<'d, String>>;

/// Whether the answer to `set` holds `name` as the field `name` itself: at
/// least one selection answers under that key (through fragments too), and
/// every one that does is the field `name`, unaliased or aliased to its own
/// name, without arguments. `None` when another field could answer there.
fn answers_as_itself<'d>(
    set: &'d SelectionSet<'d, String>,
    fragments: &Fragments<'d>,
    name: &str,
    depth: usize,
) -> Option<bool> {
    if depth > super::MAX_FRAGMENT_DEPTH {
        return None;
    }
    let mut found = false;
    for selection in &set.items {
        let inner = match selection {
            Selection::Field(field) => {
                if field.alias.as_deref().unwrap_or(&field.name) == name {
                    if field.name != name || !field.arguments.is_empty() {
                        return None;
                    }
                    found = true;
                }
                continue;
            }
            Selection::InlineFragment(inline) => &inline.selection_set,
            Selection::FragmentSpread(spread) => {
                &fragments.get(spread.fragment_name.as_str())?.selection_set
            }
        };
        found |= answers_as_itself(inner, fragments, name, depth + 1)?;
    }
    Some(found)
}

/// The pointer to `name` under `parent` if the answer to `set` holds the
/// field `name` there for certain ([`answers_as_itself`]).
fn child<'d>(
    parent: &str,
    set: &'d SelectionSet<'d, String>,
    fragments: &Fragments<'d>,
    name: &str,
) -> Option<String> {
    answers_as_itself(set, fragments, name, 0)?.then(|| format!("{parent}/{name}"))
}

/// What to learn from the answer to a root field, keyed by its response
/// key: a pinned `repository`'s `id`, a `createPullRequest`'s
/// `pullRequest { id }` (the `pullRequest` selected once, directly).
pub(super) fn learn<'d>(
    kind: &str,
    field: &'d Field<'d>,
    fragments: &Fragments<'d>,
) -> Option<Learn> {
    let root = format!("/data/{}", field.alias.as_deref().unwrap_or(&field.name));
    match (kind, field.name.as_str()) {
        ("query", "repository") => Some(Learn {
            kind: REPOSITORY_NODE,
            pointer: child(&root, &field.selection_set, fragments, "id")?,
        }),
        ("mutation", "createPullRequest") => {
            let [Selection::Field(pull)] = field.selection_set.items.as_slice() else {
                return None;
            };
            if pull.name != "pullRequest" || pull.alias.is_some() {
                return None;
            }
            let pointer = format!("{root}/pullRequest");
            Some(Learn {
                kind: PULL_REQUEST_NODE,
                pointer: child(&pointer, &pull.selection_set, fragments, "id")?,
            })
        }
        _ => None,
    }
}

/// The one field of `set` that answers as `name`, selected directly
/// (unaliased or aliased to its name, without arguments or directives): the
/// answer then holds it at `name` for certain ([`answers_as_itself`]).
fn direct_field<'d>(
    set: &'d SelectionSet<'d, String>,
    fragments: &Fragments<'d>,
    name: &str,
) -> Option<&'d Field<'d>> {
    if answers_as_itself(set, fragments, name, 0) != Some(true) {
        return None;
    }
    let mut direct = set.items.iter().filter_map(|s| match s {
        Selection::Field(f) if f.alias.as_deref().unwrap_or(&f.name) == name => Some(f),
        _ => None,
    });
    match (direct.next(), direct.next()) {
        (Some(f), None) if f.directives.is_empty() => Some(f),
        _ => None,
    }
}

/// The message record of a mutation root field that posts ([`MESSAGES`]),
/// `None` for one that does not; refused when the answer's created id is
/// not selected for certain. `pinned` is the value of its pinned input,
/// `repository` the identity's `owner/name`.
pub(super) fn message<'d>(
    field: &'d Field<'d>,
    pinned: &str,
    repository: Option<&str>,
    fragments: &Fragments<'d>,
) -> Result<Option<MessageField>, String> {
    let name = field.name.as_str();
    let Some((_, kind)) = MESSAGES.iter().find(|(m, _)| *m == name) else {
        return Ok(None);
    };
    let (target, path, ids, selection): (String, &[&str], [&str; 2], &str) = match name {
        "addComment" => (
            pinned.to_owned(),
            &["commentEdge", "node"],
            ["databaseId", "url"],
            "commentEdge { node { url } }",
        ),
        "createPullRequest" => (
            repository
                .ok_or("`createPullRequest` needs the identity's repository")?
                .to_owned(),
            &["pullRequest"],
            ["number", "url"],
            "pullRequest { url }",
        ),
        other => {
            return Err(format!(
                "the mutation `{other}` posts but has no message record"
            ))
        }
    };
    let unreadable = || {
        format!(
            "`{name}` posts, so the audit records what it creates: select `{selection}` (once, directly, unaliased, without directives)"
        )
    };
    let key = field.alias.as_deref().unwrap_or(name);
    let mut pointer = format!("/data/{key}");
    let mut set = &field.selection_set;
    for step in path {
        set = &direct_field(set, fragments, step)
            .ok_or_else(unreadable)?
            .selection_set;
        pointer = format!("{pointer}/{step}");
    }
    let id = ids
        .iter()
        .find(|id| direct_field(set, fragments, id).is_some())
        .ok_or_else(unreadable)?;
    Ok(Some(MessageField {
        kind,
        target,
        key: key.to_owned(),
        id_pointer: format!("{pointer}/{id}"),
    }))
}

/// How often `name` occurs in `document` as a name token not after `$`
/// (an object key, a field or an argument name; not a variable).
pub(super) fn name_tokens(document: &str, name: &str) -> usize {
    let bytes = document.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let (mut count, mut i, mut after_dollar) = (0, 0, false);
    while i < bytes.len() {
        let rest = &bytes[i..];
        match rest[0] {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => i += 1,
            b'#' => {
                let line = rest.iter().position(|&b| b == b'\n' || b == b'\r');
                i += line.unwrap_or(rest.len());
            }
            first => {
                let len = super::token_len(rest, word);
                if word(first) && !after_dollar && &rest[..len] == name.as_bytes() {
                    count += 1;
                }
                after_dollar = first == b'$';
                i += len;
            }
        }
    }
    count
}

#[cfg(test)]
mod tests;
