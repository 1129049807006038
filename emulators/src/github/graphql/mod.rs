//! A small GraphQL executor over the model, enough for `gh` and for tests of
//! the proxy's GraphQL rules: `viewer`, `repository { issue, pullRequest,
//! issueOrPullRequest, issues, pullRequests }`, `node(id)`, `rateLimit`, and
//! the `addComment`, `createPullRequest` and `requestReviews` mutations.
//!
//! The document is parsed with `graphql-parser`; fields are resolved on
//! typed [`Node`]s and projected through the selection set (aliases, inline
//! fragments and named fragments included). Fields the model does not know
//! answer `null` rather than failing, so clients asking for more than is
//! modelled still get the parts that are; fields the schema does not have,
//! and arguments or variables it does not allow, fail the whole document
//! first, as on GitHub ([`schema::validate`]), then variable values that do
//! not fit their declared types ([`inputs`]).
//!
//! Connections follow GitHub's rules: `first` or `last` is required when
//! `nodes` or `edges` are asked (a bare `commits { totalCount }`, which gh
//! 2.23's `pr view` sends, is allowed, as github.com answers it), at most
//! 100, with opaque cursors for `after`/`before`. A token minted for an
//! installation sees only its repositories (`NOT_FOUND`, as if absent) and
//! acts only with its permissions (`FORBIDDEN`).

mod inputs;
pub(crate) mod pulls;
mod schema;

use std::collections::BTreeMap;

use graphql_parser::query::{
    Definition, Document, OperationDefinition, Selection, SelectionSet, TypeCondition,
    Value as GqlValue,
};
use serde_json::{json, Map, Value};

use super::app::Scope;
use super::model::{node_id, CommentKind, Model};
use crate::time::iso8601;

/// The answer to one GraphQL request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GraphqlAnswer {
    /// `{"data": …, "errors": […]}`, or GitHub's REST-style error for a body
    /// that is not a single GraphQL request.
    pub body: Value,
    /// 200 for executed requests (even with errors), 400 for unparsable ones.
    pub status: u16,
    /// The id of a comment created by a mutation.
    pub created_id: Option<String>,
}

/// Looks up the commit a branch of a repository (by id) points at; the
/// caller reads it from the bare repository.
pub(crate) type BranchHead<'a> = &'a dyn Fn(u64, &str) -> Option<String>;

/// Counts the commits of a repository (by id) reachable from the second
/// commit but not the first (`git rev-list --count base..head`).
pub(crate) type CommitsAhead<'a> = &'a dyn Fn(u64, &str, &str) -> Option<u64>;

/// Reads a pull request's commits and changed files (repository by id, base
/// and head commits) as `GET …/pulls/{n}/commits` and `…/files` list them;
/// the caller reads them from the bare repository.
pub(crate) type PullGit<'a> = &'a dyn Fn(u64, &str, &str) -> Option<pulls::PullFromGit>;

/// What the executor reads from git, through the caller.
pub(crate) struct GitReads<'a> {
    pub branch_head: BranchHead<'a>,
    pub commits_ahead: CommitsAhead<'a>,
    pub pull: PullGit<'a>,
}

/// Execute the JSON request `body` as `login`.
pub(crate) fn execute(
    model: &mut Model,
    login: &str,
    now: u64,
    body: &[u8],
    git: GitReads<'_>,
    scope: Option<&Scope>,
) -> GraphqlAnswer {
    let bad = |message: &str| GraphqlAnswer {
        body: json!({"message": message, "documentation_url": "https://docs.github.com/graphql"}),
        status: 400,
        created_id: None,
    };
    let request: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(_) => return bad("Problems parsing JSON"),
    };
    if request.is_array() {
        return bad("Batched queries are not supported");
    }
    let Some(query) = request.get("query").and_then(Value::as_str) else {
        return bad("A query attribute must be specified and must be a string.");
    };
    let variables = request
        .get("variables")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let operation_name = request.get("operationName").and_then(Value::as_str);
    let document: Document<'_, String> = match graphql_parser::parse_query(query) {
        Ok(document) => document,
        Err(error) => {
            return GraphqlAnswer {
                body: json!({"errors": [{"message": format!("Parse error: {error}")}]}),
                status: 200,
                created_id: None,
            }
        }
    };
    let invalid = schema::validate(query, &document);
    if !invalid.is_empty() {
        return GraphqlAnswer {
            body: json!({ "errors": invalid }),
            status: 200,
            created_id: None,
        };
    }
    let mut executor = Executor {
        scope,
        at: graphql_parser::Pos { line: 1, column: 1 },
        model,
        login,
        now,
        variables,
        fragments: BTreeMap::new(),
        errors: Vec::new(),
        created_id: None,
        git,
        pulls_read: BTreeMap::new(),
    };
    let mut operations = Vec::new();
    for definition in &document.definitions {
        match definition {
            Definition::Fragment(fragment) => {
                executor.fragments.insert(fragment.name.clone(), fragment);
            }
            Definition::Operation(operation) => operations.push(operation),
        }
    }
    let chosen = operations.iter().find(|op| match operation_name {
        Some(wanted) => operation_name_of(op) == Some(wanted),
        None => true,
    });
    let (root, selection_set, defaults) = match chosen {
        Some(OperationDefinition::SelectionSet(set)) => (Node::Query, set, Vec::new()),
        Some(OperationDefinition::Query(q)) => (
            Node::Query,
            &q.selection_set,
            defaults(&q.variable_definitions),
        ),
        Some(OperationDefinition::Mutation(m)) => (
            Node::Mutation,
            &m.selection_set,
            defaults(&m.variable_definitions),
        ),
        Some(OperationDefinition::Subscription(_)) => {
            return GraphqlAnswer {
                body: json!({"errors": [{"message": "Subscriptions are not supported"}]}),
                status: 200,
                created_id: None,
            }
        }
        None => {
            return GraphqlAnswer {
                body: json!({"errors": [{"message": "No operation named in the document matches operationName"}]}),
                status: 200,
                created_id: None,
            }
        }
    };
    if operations.len() > 1 && operation_name.is_none() {
        return GraphqlAnswer {
            body: json!({"errors": [{"message": "An operationName is required when the document has several operations"}]}),
            status: 200,
            created_id: None,
        };
    }
    // As GitHub, once the document is valid: the values given for the
    // chosen operation's variables must fit their declared types.
    let declared = match chosen {
        Some(OperationDefinition::Query(q)) => &q.variable_definitions[..],
        Some(OperationDefinition::Mutation(m)) => &m.variable_definitions[..],
        _ => &[][..],
    };
    let invalid = schema::schema().check_variables(declared, &executor.variables);
    if !invalid.is_empty() {
        return GraphqlAnswer {
            body: json!({ "errors": invalid }),
            status: 200,
            created_id: None,
        };
    }
    for (name, value) in defaults {
        executor.variables.entry(name).or_insert(value);
    }
    let data = executor.complete(&root, selection_set, &mut Vec::new());
    let mut body = json!({ "data": data });
    if !executor.errors.is_empty() {
        body["errors"] = Value::Array(std::mem::take(&mut executor.errors));
    }
    GraphqlAnswer {
        body,
        status: 200,
        created_id: executor.created_id,
    }
}

fn operation_name_of<'d>(op: &'d OperationDefinition<'_, String>) -> Option<&'d str> {
    match op {
        OperationDefinition::SelectionSet(_) => None,
        OperationDefinition::Query(q) => q.name.as_deref(),
        OperationDefinition::Mutation(m) => m.name.as_deref(),
        OperationDefinition::Subscription(s) => s.name.as_deref(),
    }
}

fn defaults(
    definitions: &[graphql_parser::query::VariableDefinition<'_, String>],
) -> Vec<(String, Value)> {
    definitions
        .iter()
        .filter_map(|d| {
            d.default_value
                .as_ref()
                .map(|v| (d.name.clone(), literal(v, &Map::new())))
        })
        .collect()
}

/// Convert a GraphQL value to JSON, substituting variables.
fn literal(value: &GqlValue<'_, String>, variables: &Map<String, Value>) -> Value {
    match value {
        GqlValue::Variable(name) => variables.get(name).cloned().unwrap_or(Value::Null),
        GqlValue::Int(n) => n.as_i64().map(Value::from).unwrap_or(Value::Null),
        GqlValue::Float(f) => json!(f),
        GqlValue::String(s) => Value::String(s.clone()),
        GqlValue::Boolean(b) => Value::Bool(*b),
        GqlValue::Null => Value::Null,
        GqlValue::Enum(e) => Value::String(e.clone()),
        GqlValue::List(items) => {
            Value::Array(items.iter().map(|v| literal(v, variables)).collect())
        }
        GqlValue::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), literal(v, variables)))
                .collect(),
        ),
    }
}

/// Something a field can resolve to.
#[derive(Debug, Clone)]
enum Node {
    Query,
    Mutation,
    User(String),
    Repository(u64),
    /// An issue or pull request: repository id and number.
    Issue(u64, u64),
    IssueComment(u64, u64),
    Connection(Page),
    /// A node and its position in the whole connection (its cursor).
    Edge(Box<Node>, usize),
    PageInfo(Page),
    /// A mutation's result type and its fields.
    Payload(&'static str, Vec<(&'static str, Node)>),
    /// Plain data whose sub-fields are looked up by name.
    Json(Value),
}

/// One page of a connection: the nodes with their positions in the whole
/// (filtered) list, and its size.
#[derive(Debug, Clone, Default)]
struct Page {
    nodes: Vec<(usize, Node)>,
    total: usize,
}

enum Resolved {
    Leaf(Value),
    Object(Node),
    List(Vec<Node>),
}

/// Concrete object types this executor produces; a fragment on any other
/// name (an interface or union such as `Node` or `IssueOrPullRequest`) applies.
const OBJECT_TYPES: &[&str] = &[
    "Query",
    "Mutation",
    "User",
    "Bot",
    "Repository",
    "Issue",
    "PullRequest",
    "IssueComment",
    "PageInfo",
    "AddCommentPayload",
    "CreatePullRequestPayload",
    // Built as JSON with their `__typename` (`pulls.rs`).
    "PullRequestCommit",
    "Commit",
    "GitActor",
    "StatusCheckRollup",
    "CheckRun",
    "StatusContext",
    "CheckSuite",
    "WorkflowRun",
    "Workflow",
    "PullRequestChangedFile",
    "PullRequestReview",
];

struct Executor<'m, 'd> {
    /// A minted installation token's reach; `None` for other tokens.
    scope: Option<&'m Scope>,
    /// Where the field being resolved is, for errors' `locations`.
    at: graphql_parser::Pos,
    model: &'m mut Model,
    login: &'m str,
    now: u64,
    variables: Map<String, Value>,
    fragments: BTreeMap<String, &'d graphql_parser::query::FragmentDefinition<'d, String>>,
    errors: Vec<Value>,
    created_id: Option<String>,
    git: GitReads<'m>,
    /// Pull requests' commits and files read from git so far, by
    /// (repository, number): a document asking several of their fields
    /// reads them once.
    pulls_read: BTreeMap<(u64, u64), Option<pulls::PullFromGit>>,
}

impl<'d> Executor<'_, 'd> {
    fn typename(&self, node: &Node) -> String {
        match node {
            Node::Query => "Query".into(),
            Node::Mutation => "Mutation".into(),
            Node::User(login) if login.ends_with("[bot]") => "Bot".into(),
            Node::User(_) => "User".into(),
            Node::Repository(_) => "Repository".into(),
            Node::Issue(repo, number) => match self.model.issue(*repo, *number) {
                Some(issue) if issue.pull.is_some() => "PullRequest".into(),
                _ => "Issue".into(),
            },
            Node::IssueComment(..) => "IssueComment".into(),
            Node::Connection(_) => "Connection".into(),
            Node::Edge(..) => "Edge".into(),
            Node::PageInfo(_) => "PageInfo".into(),
            Node::Payload(typename, _) => (*typename).into(),
            Node::Json(value) => value
                .get("__typename")
                .and_then(Value::as_str)
                .unwrap_or("Object")
                .into(),
        }
    }

    fn applies(&self, condition: Option<&TypeCondition<'_, String>>, node: &Node) -> bool {
        match condition {
            None => true,
            Some(TypeCondition::On(name)) => {
                *name == self.typename(node) || !OBJECT_TYPES.contains(&name.as_str())
            }
        }
    }

    /// Project `node` through `set` into a JSON object.
    fn complete(
        &mut self,
        node: &Node,
        set: &'d SelectionSet<'d, String>,
        path: &mut Vec<Value>,
    ) -> Value {
        // A part the token's permission must cover (`pulls.rs` marks it):
        // otherwise null and GitHub's FORBIDDEN there.
        if let Node::Json(value) = node {
            if let Some(permission) = value.get(pulls::REQUIRES).and_then(Value::as_str) {
                if !self.permitted(path, &[permission], "read") {
                    return Value::Null;
                }
            }
        }
        let mut out = Map::new();
        self.collect(node, set, path, &mut out);
        Value::Object(out)
    }

    fn collect(
        &mut self,
        node: &Node,
        set: &'d SelectionSet<'d, String>,
        path: &mut Vec<Value>,
        out: &mut Map<String, Value>,
    ) {
        for selection in &set.items {
            match selection {
                Selection::Field(field) => {
                    let key = field.alias.clone().unwrap_or_else(|| field.name.clone());
                    if out.contains_key(&key) {
                        continue;
                    }
                    path.push(Value::String(key.clone()));
                    self.at = field.position;
                    let args: Map<String, Value> = field
                        .arguments
                        .iter()
                        .map(|(k, v)| (k.clone(), literal(v, &self.variables)))
                        .collect();
                    let paginated = schema::schema()
                        .field(&self.typename(node), &field.name)
                        .ok()
                        .flatten()
                        .is_some_and(|f| f.paginated);
                    let bounds = if paginated {
                        let items = self.asks_items(&field.selection_set);
                        bounds(&field.name, &args, items)
                    } else {
                        Ok(())
                    };
                    let value = if field.name == "__typename" {
                        Value::String(self.typename(node))
                    } else if let Err((kind, message)) = bounds {
                        self.error(path, kind, message);
                        Value::Null
                    } else {
                        match self.resolve(node, &field.name, &args, path) {
                            Resolved::Leaf(value) => value,
                            Resolved::Object(child) => {
                                self.complete(&child, &field.selection_set, path)
                            }
                            Resolved::List(children) => Value::Array(
                                children
                                    .iter()
                                    .enumerate()
                                    .map(|(i, child)| match child {
                                        Node::Json(v) if field.selection_set.items.is_empty() => {
                                            v.clone()
                                        }
                                        _ => {
                                            path.push(json!(i));
                                            let item =
                                                self.complete(child, &field.selection_set, path);
                                            path.pop();
                                            item
                                        }
                                    })
                                    .collect(),
                            ),
                        }
                    };
                    path.pop();
                    out.insert(key, value);
                }
                Selection::InlineFragment(fragment) => {
                    if self.applies(fragment.type_condition.as_ref(), node) {
                        self.collect(node, &fragment.selection_set, path, out);
                    }
                }
                Selection::FragmentSpread(spread) => {
                    let Some(fragment) = self.fragments.get(&spread.fragment_name).copied() else {
                        self.errors.push(json!({"message": format!("Fragment {} was used, but not defined", spread.fragment_name)}));
                        continue;
                    };
                    if self.applies(Some(&fragment.type_condition), node) {
                        self.collect(node, &fragment.selection_set, path, out);
                    }
                }
            }
        }
    }

    fn error(&mut self, path: &[Value], kind: &str, message: String) {
        let mut error = json!({
            "type": kind,
            "path": path,
            "locations": [{"line": self.at.line, "column": self.at.column}],
            "message": message,
        });
        if kind == "FORBIDDEN" {
            error["extensions"] = json!({"saml_failure": false});
        }
        self.errors.push(error);
    }

    /// Whether `set` asks a connection for its `nodes` or `edges` (directly
    /// or through fragments).
    fn asks_items(&self, set: &'d SelectionSet<'d, String>) -> bool {
        set.items.iter().any(|s| match s {
            Selection::Field(f) => f.name == "nodes" || f.name == "edges",
            Selection::InlineFragment(f) => self.asks_items(&f.selection_set),
            Selection::FragmentSpread(spread) => self
                .fragments
                .get(&spread.fragment_name)
                .is_some_and(|f| self.asks_items(&f.selection_set)),
        })
    }

    /// Whether the token may reach repository `repo_id`.
    fn reaches(&self, repo_id: u64) -> bool {
        self.scope
            .and_then(|s| s.repo_ids.as_ref())
            .is_none_or(|ids| ids.contains(&repo_id))
    }

    /// Whether the token holds one of `any_of` at `level`; if not, the
    /// FORBIDDEN error is recorded.
    fn permitted(&mut self, path: &[Value], any_of: &[&str], level: &str) -> bool {
        let held = self
            .scope
            .is_none_or(|scope| super::app::holds(scope, any_of, level));
        if !held {
            self.error(
                path,
                "FORBIDDEN",
                "Resource not accessible by integration".to_owned(),
            );
        }
        held
    }

    fn resolve(
        &mut self,
        node: &Node,
        field: &str,
        args: &Map<String, Value>,
        path: &[Value],
    ) -> Resolved {
        let arg_str = |name: &str| {
            args.get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let arg_u64 = |name: &str| args.get(name).and_then(Value::as_u64);
        let leaf = Resolved::Leaf;
        match node {
            Node::Query => match field {
                // For an installation token `viewer` is the App's bot user
                // (`{slug}[bot]`), though REST refuses the same token
                // `GET /user` (seen on GitHub: fullsend-ai/fullsend#1953,
                // "viewer returns fullsend-ai-coder[bot]").
                "viewer" => Resolved::Object(Node::User(self.login.to_owned())),
                "__type" => {
                    Resolved::Object(Node::Json(schema::schema().introspect(&arg_str("name"))))
                }
                "repository" => {
                    let (owner, name) = (arg_str("owner"), arg_str("name"));
                    let found = self.model.repo(&owner, &name).map(|r| r.id);
                    match found.filter(|id| self.reaches(*id)) {
                        Some(id) => Resolved::Object(Node::Repository(id)),
                        None => {
                            self.error(path, "NOT_FOUND", format!("Could not resolve to a Repository with the name '{owner}/{name}'."));
                            leaf(Value::Null)
                        }
                    }
                }
                "node" => match self.node_by_id(&arg_str("id")) {
                    Some(found) => Resolved::Object(found),
                    None => {
                        self.error(
                            path,
                            "NOT_FOUND",
                            format!(
                                "Could not resolve to a node with the global id of '{}'",
                                arg_str("id")
                            ),
                        );
                        leaf(Value::Null)
                    }
                },
                "rateLimit" => Resolved::Object(Node::Json(json!({
                    "limit": 5000, "cost": 1, "remaining": 4999, "used": 1,
                    "resetAt": iso8601(self.now + 3600), "nodeCount": 0,
                }))),
                _ => leaf(Value::Null),
            },
            Node::Mutation => match field {
                "addComment" => self.add_comment(args, path),
                "createPullRequest" => self.create_pull_request(args, path),
                "requestReviews" => self.request_reviews(args, path),
                other => {
                    self.error(
                        path,
                        "UNSUPPORTED",
                        format!("The emulator does not implement the mutation '{other}'"),
                    );
                    leaf(Value::Null)
                }
            },
            Node::User(login) => match field {
                "login" => leaf(json!(login)),
                "id" => leaf(Model::user_json(login)["node_id"].clone()),
                "databaseId" => leaf(Model::user_json(login)["id"].clone()),
                "url" => leaf(Model::user_json(login)["html_url"].clone()),
                "name" => leaf(json!(login)),
                _ => leaf(Value::Null),
            },
            Node::Repository(repo_id) => {
                let Some(repo) = self.model.repo_by_id(*repo_id).cloned() else {
                    return leaf(Value::Null);
                };
                match field {
                    "id" => leaf(json!(node_id("R", repo.id))),
                    "databaseId" => leaf(json!(repo.id)),
                    "name" => leaf(json!(repo.name)),
                    "nameWithOwner" => leaf(json!(repo.full_name())),
                    "owner" => Resolved::Object(Node::User(repo.owner.clone())),
                    "url" => leaf(json!(format!("https://github.com/{}", repo.full_name()))),
                    "isPrivate" => leaf(json!(true)),
                    "visibility" => leaf(json!("PRIVATE")),
                    "hasIssuesEnabled" => leaf(json!(true)),
                    "viewerPermission" => leaf(json!("WRITE")),
                    "defaultBranchRef" => {
                        Resolved::Object(Node::Json(json!({"name": repo.default_branch})))
                    }
                    "issue" | "pullRequest" | "issueOrPullRequest" => {
                        let need: &[&str] = match field {
                            "issue" => ISSUES,
                            "pullRequest" => &["pull_requests"],
                            _ => ISSUES,
                        };
                        if !self.permitted(path, need, "read") {
                            return leaf(Value::Null);
                        }
                        let number = arg_u64("number").unwrap_or(0);
                        let found = self.model.issue(*repo_id, number).map(|i| i.pull.is_some());
                        let wanted_pull = match field {
                            "issue" => Some(false),
                            "pullRequest" => Some(true),
                            _ => None,
                        };
                        match (found, wanted_pull) {
                            (Some(is_pull), Some(want)) if is_pull != want => {
                                self.not_found_number(path, field, &repo.full_name(), number)
                            }
                            (Some(_), _) => Resolved::Object(Node::Issue(*repo_id, number)),
                            (None, _) => {
                                self.not_found_number(path, field, &repo.full_name(), number)
                            }
                        }
                    }
                    "issues" | "pullRequests" => {
                        let pulls = field == "pullRequests";
                        let need: &[&str] = if pulls { &["pull_requests"] } else { ISSUES };
                        if !self.permitted(path, need, "read") {
                            return leaf(Value::Null);
                        }
                        let states: Vec<String> = args
                            .get("states")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|s| s.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default();
                        let nodes = self
                            .model
                            .issues
                            .iter()
                            .filter(|i| i.repo_id == *repo_id && i.pull.is_some() == pulls)
                            .filter(|i| {
                                let state = match (&i.pull, i.open) {
                                    (Some(p), false) if p.merged => "MERGED",
                                    (_, true) => "OPEN",
                                    (_, false) => "CLOSED",
                                };
                                states.is_empty() || states.iter().any(|s| s == state)
                            })
                            .filter(|i| {
                                let matches = |arg: &str, value: Option<&String>| match args
                                    .get(arg)
                                    .and_then(Value::as_str)
                                {
                                    Some(wanted) => value.is_some_and(|v| v == wanted),
                                    None => true,
                                };
                                matches("headRefName", i.pull.as_ref().map(|p| &p.head))
                                    && matches("baseRefName", i.pull.as_ref().map(|p| &p.base))
                            })
                            .map(|i| Node::Issue(*repo_id, i.number))
                            .collect();
                        Resolved::Object(Node::Connection(page(nodes, args)))
                    }
                    _ => leaf(Value::Null),
                }
            }
            Node::Issue(repo_id, number) => {
                let Some(issue) = self.model.issue(*repo_id, *number).cloned() else {
                    return leaf(Value::Null);
                };
                let rest = self.model.issue_json(&issue);
                match field {
                    "id" => leaf(rest["node_id"].clone()),
                    "databaseId" => leaf(json!(issue.id)),
                    "number" => leaf(json!(issue.number)),
                    "title" => leaf(json!(issue.title)),
                    "body" => leaf(json!(issue.body)),
                    "url" => leaf(rest["html_url"].clone()),
                    "state" => leaf(json!(match (&issue.pull, issue.open) {
                        (Some(p), false) if p.merged => "MERGED",
                        (_, true) => "OPEN",
                        (_, false) => "CLOSED",
                    })),
                    "closed" => leaf(json!(!issue.open)),
                    "locked" => leaf(json!(false)),
                    "author" => Resolved::Object(Node::User(issue.author.clone())),
                    "createdAt" => leaf(json!(iso8601(issue.created_at))),
                    "updatedAt" => leaf(json!(iso8601(issue.updated_at))),
                    "repository" => Resolved::Object(Node::Repository(*repo_id)),
                    "comments" => {
                        let nodes = self
                            .model
                            .comments
                            .iter()
                            .filter(|c| {
                                c.comment.kind == CommentKind::Issue
                                    && c.repo_id == *repo_id
                                    && c.comment.number == *number
                            })
                            .map(|c| Node::IssueComment(*repo_id, c.comment.id))
                            .collect();
                        Resolved::Object(Node::Connection(page(nodes, args)))
                    }
                    "reactionGroups" => Resolved::List(Vec::new()),
                    "additions" | "deletions" | "changedFiles" | "commits" | "files"
                        if issue.pull.is_some() =>
                    {
                        let Some(from_git) = self.pull_from_git(&issue) else {
                            return leaf(Value::Null);
                        };
                        match field {
                            "additions" => leaf(json!(from_git.additions())),
                            "deletions" => leaf(json!(from_git.deletions())),
                            "changedFiles" => leaf(json!(from_git.files.len())),
                            "commits" => {
                                let Some(repo) = self.model.repo_by_id(*repo_id).cloned() else {
                                    return leaf(Value::Null);
                                };
                                let nodes = from_git
                                    .commit_nodes(self.model, &repo, *number)
                                    .into_iter()
                                    .map(Node::Json)
                                    .collect();
                                Resolved::Object(Node::Connection(page(nodes, args)))
                            }
                            _ => {
                                let nodes =
                                    from_git.file_nodes().into_iter().map(Node::Json).collect();
                                Resolved::Object(Node::Connection(page(nodes, args)))
                            }
                        }
                    }
                    "reviews" | "latestReviews" if issue.pull.is_some() => {
                        let Some(repo) = self.model.repo_by_id(*repo_id).cloned() else {
                            return leaf(Value::Null);
                        };
                        let head = issue.pull.as_ref().map_or("", |p| p.head_sha.as_str());
                        let mut reviews = pulls::review_nodes(self.model, &repo, *number, head);
                        if field == "latestReviews" {
                            reviews = pulls::latest(reviews);
                        }
                        let nodes = reviews.into_iter().map(Node::Json).collect();
                        Resolved::Object(Node::Connection(page(nodes, args)))
                    }
                    "labels" | "assignees" | "projectCards" | "reviewRequests" | "reviews"
                    | "latestReviews" | "commits" | "files" | "projectItems" => {
                        Resolved::Object(Node::Connection(Page::default()))
                    }
                    "headRefName" => {
                        leaf(issue.pull.as_ref().map_or(Value::Null, |p| json!(p.head)))
                    }
                    "headRefOid" => leaf(
                        issue
                            .pull
                            .as_ref()
                            .map_or(Value::Null, |p| json!(p.head_sha)),
                    ),
                    "baseRefName" => {
                        leaf(issue.pull.as_ref().map_or(Value::Null, |p| json!(p.base)))
                    }
                    "isDraft" => leaf(issue.pull.as_ref().map_or(Value::Null, |p| json!(p.draft))),
                    "merged" => leaf(issue.pull.as_ref().map_or(Value::Null, |p| json!(p.merged))),
                    "mergeable" => leaf(
                        issue
                            .pull
                            .as_ref()
                            .map_or(Value::Null, |_| json!("MERGEABLE")),
                    ),
                    _ => leaf(Value::Null),
                }
            }
            Node::IssueComment(repo_id, id) => {
                let Some(stored) = self
                    .model
                    .comment(CommentKind::Issue, *repo_id, *id)
                    .cloned()
                else {
                    return leaf(Value::Null);
                };
                let rest = self.model.comment_json(&stored);
                match field {
                    "id" => leaf(rest["node_id"].clone()),
                    "databaseId" => leaf(json!(stored.comment.id)),
                    "body" => leaf(json!(stored.comment.body)),
                    "url" => leaf(rest["html_url"].clone()),
                    "author" => Resolved::Object(Node::User(stored.comment.author.clone())),
                    "createdAt" => leaf(json!(iso8601(stored.created_at))),
                    "updatedAt" => leaf(json!(iso8601(stored.updated_at))),
                    "viewerDidAuthor" => leaf(json!(stored.comment.author == self.login)),
                    "authorAssociation" => leaf(json!("MEMBER")),
                    "issue" => Resolved::Object(Node::Issue(*repo_id, stored.comment.number)),
                    "reactionGroups" => Resolved::List(Vec::new()),
                    _ => leaf(Value::Null),
                }
            }
            Node::Connection(page) => match field {
                "nodes" => Resolved::List(page.nodes.iter().map(|(_, n)| n.clone()).collect()),
                "edges" => Resolved::List(
                    page.nodes
                        .iter()
                        .map(|(i, n)| Node::Edge(Box::new(n.clone()), *i))
                        .collect(),
                ),
                "totalCount" => leaf(json!(page.total)),
                "pageInfo" => Resolved::Object(Node::PageInfo(page.clone())),
                _ => leaf(Value::Null),
            },
            Node::Edge(inner, index) => match field {
                "node" => Resolved::Object((**inner).clone()),
                "cursor" => leaf(json!(cursor(*index))),
                _ => leaf(Value::Null),
            },
            Node::PageInfo(page) => {
                let first = page.nodes.first().map(|(i, _)| *i);
                let last = page.nodes.last().map(|(i, _)| *i);
                match field {
                    "hasNextPage" => leaf(json!(last.is_some_and(|i| i + 1 < page.total))),
                    "hasPreviousPage" => leaf(json!(first.is_some_and(|i| i > 0))),
                    "startCursor" => leaf(first.map_or(Value::Null, |i| json!(cursor(i)))),
                    "endCursor" => leaf(last.map_or(Value::Null, |i| json!(cursor(i)))),
                    _ => leaf(Value::Null),
                }
            }
            Node::Payload(_, fields) => match fields.iter().find(|(name, _)| *name == field) {
                Some((_, node)) => Resolved::Object(node.clone()),
                None => leaf(Value::Null),
            },
            Node::Json(value) => match value.get(field) {
                // A connection: paged by the field's arguments like any.
                Some(Value::Object(o)) if o.contains_key(pulls::CONNECTION) => {
                    let nodes = o[pulls::CONNECTION]
                        .as_array()
                        .map(|a| a.iter().cloned().map(Node::Json).collect())
                        .unwrap_or_default();
                    Resolved::Object(Node::Connection(page(nodes, args)))
                }
                Some(Value::Object(_)) => Resolved::Object(Node::Json(value[field].clone())),
                Some(Value::Array(items)) => {
                    Resolved::List(items.iter().cloned().map(Node::Json).collect())
                }
                Some(other) => leaf(other.clone()),
                None => leaf(Value::Null),
            },
        }
    }

    /// Pull request `issue`'s commits and files, read from git by the
    /// caller (`None` if git cannot say).
    fn pull_from_git(&mut self, issue: &super::model::Issue) -> Option<pulls::PullFromGit> {
        let pull = issue.pull.as_ref()?;
        let read = self.git.pull;
        self.pulls_read
            .entry((issue.repo_id, issue.number))
            .or_insert_with(|| read(issue.repo_id, &pull.base_sha, &pull.head_sha))
            .clone()
    }

    fn not_found_number(
        &mut self,
        path: &[Value],
        field: &str,
        repo: &str,
        number: u64,
    ) -> Resolved {
        let kind = match field {
            "pullRequest" => "PullRequest",
            "issue" => "Issue",
            _ => "issue or pull request",
        };
        self.error(
            path,
            "NOT_FOUND",
            format!("Could not resolve to an {kind} with the number of {number}. ({repo})"),
        );
        Resolved::Leaf(Value::Null)
    }

    /// Find an issue, pull request, comment or repository by node id, among
    /// the repositories the token reaches.
    fn node_by_id(&self, id: &str) -> Option<Node> {
        let found = self.any_node_by_id(id)?;
        let repo_id = match &found {
            Node::Repository(r) | Node::Issue(r, _) | Node::IssueComment(r, _) => *r,
            _ => return Some(found),
        };
        self.reaches(repo_id).then_some(found)
    }

    fn any_node_by_id(&self, id: &str) -> Option<Node> {
        if let Some(repo) = self.model.repos.iter().find(|r| node_id("R", r.id) == id) {
            return Some(Node::Repository(repo.id));
        }
        if let Some(issue) = self
            .model
            .issues
            .iter()
            .find(|i| node_id(if i.pull.is_some() { "PR" } else { "I" }, i.id) == id)
        {
            return Some(Node::Issue(issue.repo_id, issue.number));
        }
        self.model
            .comments
            .iter()
            .find(|c| c.comment.kind == CommentKind::Issue && node_id("IC", c.comment.id) == id)
            .map(|c| Node::IssueComment(c.repo_id, c.comment.id))
    }

    /// `addComment(input: {subjectId, body})` on an issue or pull request.
    fn add_comment(&mut self, args: &Map<String, Value>, path: &[Value]) -> Resolved {
        let input = args.get("input").cloned().unwrap_or(Value::Null);
        let subject_id = input.get("subjectId").and_then(Value::as_str).unwrap_or("");
        let body = input.get("body").and_then(Value::as_str).unwrap_or("");
        let Some(Node::Issue(repo_id, number)) = self.node_by_id(subject_id) else {
            self.error(
                path,
                "NOT_FOUND",
                format!("Could not resolve to a node with the global id of '{subject_id}'"),
            );
            return Resolved::Leaf(Value::Null);
        };
        if !self.permitted(path, ISSUES, "write") {
            return Resolved::Leaf(Value::Null);
        }
        if body.is_empty() {
            self.error(path, "UNPROCESSABLE", "Body can't be blank".to_owned());
            return Resolved::Leaf(Value::Null);
        }
        let id = self.model.add_comment(
            CommentKind::Issue,
            repo_id,
            number,
            body,
            self.login,
            None,
            None,
            None,
            None,
            self.now,
        );
        if let Some(issue) = self.model.issue_mut(repo_id, number) {
            issue.updated_at = self.now;
        }
        self.created_id = Some(id.to_string());
        let comment = Node::IssueComment(repo_id, id);
        Resolved::Object(Node::Payload(
            "AddCommentPayload",
            vec![
                ("commentEdge", Node::Edge(Box::new(comment.clone()), 0)),
                ("timelineEdge", Node::Edge(Box::new(comment), 0)),
                ("subject", Node::Issue(repo_id, number)),
            ],
        ))
    }
}

impl Executor<'_, '_> {
    /// `createPullRequest(input: {repositoryId, headRefName, baseRefName, title, body, draft})`;
    /// both branches must exist in the bare repository.
    fn create_pull_request(&mut self, args: &Map<String, Value>, path: &[Value]) -> Resolved {
        let input = args.get("input").cloned().unwrap_or(Value::Null);
        let text = |name: &str| {
            input
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let repository_id = text("repositoryId");
        let Some(Node::Repository(repo_id)) = self.node_by_id(&repository_id) else {
            self.error(
                path,
                "NOT_FOUND",
                format!("Could not resolve to a node with the global id of '{repository_id}'"),
            );
            return Resolved::Leaf(Value::Null);
        };
        if !self.permitted(path, &["pull_requests"], "write") {
            return Resolved::Leaf(Value::Null);
        }
        let (head, base, title) = (text("headRefName"), text("baseRefName"), text("title"));
        // An `owner:branch` head names the branch in this repository.
        let head = head.rsplit(':').next().unwrap_or(&head).to_owned();
        let head_sha = (self.git.branch_head)(repo_id, &head);
        let base_sha = (self.git.branch_head)(repo_id, &base);
        let (Some(head_sha), Some(base_sha), false) = (head_sha, base_sha, title.is_empty()) else {
            self.error(path, "UNPROCESSABLE", format!("Head sha can't be blank, Base sha can't be blank, or Title can't be blank (head {head}, base {base})"));
            return Resolved::Leaf(Value::Null);
        };
        // GitHub's refusals, as REST gives them (422 `errors[].message`).
        let owner = self
            .model
            .repo_by_id(repo_id)
            .map(|r| r.owner.clone())
            .unwrap_or_default();
        let duplicate = self.model.issues.iter().any(|i| {
            i.repo_id == repo_id
                && i.open
                && i.pull
                    .as_ref()
                    .is_some_and(|p| p.head == head && p.base == base)
        });
        if duplicate {
            self.error(
                path,
                "UNPROCESSABLE",
                format!("A pull request already exists for {owner}:{head}."),
            );
            return Resolved::Leaf(Value::Null);
        }
        if (self.git.commits_ahead)(repo_id, &base_sha, &head_sha) == Some(0) {
            self.error(
                path,
                "UNPROCESSABLE",
                format!("No commits between {base} and {head}"),
            );
            return Resolved::Leaf(Value::Null);
        }
        let draft = input.get("draft").and_then(Value::as_bool).unwrap_or(false);
        let pull = super::model::PullInfo::new(&head, &head_sha, &base, &base_sha, draft);
        let number = self.model.add_issue(
            repo_id,
            &title,
            &text("body"),
            self.login,
            Some(pull),
            self.now,
        );
        self.created_id = self.model.issue(repo_id, number).map(|i| i.id.to_string());
        Resolved::Object(Node::Payload(
            "CreatePullRequestPayload",
            vec![("pullRequest", Node::Issue(repo_id, number))],
        ))
    }
}

impl Executor<'_, '_> {
    /// `requestReviews(input: {pullRequestId, userIds, union})`: users are
    /// named by node id; a login of the model (an author) answers to its id.
    fn request_reviews(&mut self, args: &Map<String, Value>, path: &[Value]) -> Resolved {
        let input = args.get("input").cloned().unwrap_or(Value::Null);
        let pull_id = input
            .get("pullRequestId")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(Node::Issue(repo_id, number)) = self.node_by_id(pull_id) else {
            self.error(
                path,
                "NOT_FOUND",
                format!("Could not resolve to a node with the global id of '{pull_id}'"),
            );
            return Resolved::Leaf(Value::Null);
        };
        if !self.permitted(path, &["pull_requests"], "write") {
            return Resolved::Leaf(Value::Null);
        }
        let mut authors: Vec<String> = self.model.issues.iter().map(|i| i.author.clone()).collect();
        authors.extend(self.model.comments.iter().map(|c| c.comment.author.clone()));
        let wanted: Vec<&str> = input
            .get("userIds")
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut logins = Vec::new();
        for id in wanted {
            let login = authors
                .iter()
                .find(|login| Model::user_json(login)["node_id"] == id);
            let Some(login) = login else {
                self.error(
                    path,
                    "NOT_FOUND",
                    format!("Could not resolve to a User with the global id of '{id}'"),
                );
                return Resolved::Leaf(Value::Null);
            };
            logins.push(login.clone());
        }
        let Some(pull) = self
            .model
            .issue_mut(repo_id, number)
            .and_then(|i| i.pull.as_mut())
        else {
            self.error(
                path,
                "NOT_FOUND",
                format!("'{pull_id}' is not a pull request"),
            );
            return Resolved::Leaf(Value::Null);
        };
        let mut requested = Vec::new();
        for login in logins {
            if !pull.requested_reviewers.contains(&login) {
                pull.requested_reviewers.push(login.clone());
                requested.push(login);
            }
        }
        for reviewer in requested {
            let event = crate::github::events::EventKind::ReviewRequested { reviewer };
            self.model
                .record_event(repo_id, number, self.login, event, self.now);
        }
        Resolved::Object(Node::Payload(
            "RequestReviewsPayload",
            vec![("pullRequest", Node::Issue(repo_id, number))],
        ))
    }
}

/// Issue endpoints serve pull requests too; either permission reads them.
const ISSUES: &[&str] = &["issues", "pull_requests"];

/// Largest page GitHub hands out.
const MAX_PAGE: i64 = 100;

/// GitHub's checks of a connection's arguments before it is resolved:
/// `first` or `last` when items are asked, each within 0..=100, cursors
/// this server made. The error's type and message on refusal.
fn bounds(
    connection: &str,
    args: &Map<String, Value>,
    asks_items: bool,
) -> Result<(), (&'static str, String)> {
    let mut bounded = false;
    for name in ["first", "last"] {
        let Some(value) = args.get(name).filter(|v| !v.is_null()) else {
            continue;
        };
        bounded = true;
        let n = value.as_i64().unwrap_or(-1);
        if n < 0 {
            return Err((
                "INVALID_PAGINATION",
                format!("`{name}` on the `{connection}` connection cannot be less than zero."),
            ));
        }
        if n > MAX_PAGE {
            return Err((
                "EXCESSIVE_PAGINATION",
                format!("Requesting {n} records on the `{connection}` connection exceeds the `{name}` limit of {MAX_PAGE} records."),
            ));
        }
    }
    if asks_items && !bounded {
        return Err((
            "MISSING_PAGINATION_BOUNDARIES",
            format!("You must provide a `first` or `last` value to properly paginate the `{connection}` connection."),
        ));
    }
    for name in ["after", "before"] {
        if let Some(value) = args.get(name).filter(|v| !v.is_null()) {
            let text = value.as_str().unwrap_or("");
            if cursor_index(text).is_none() {
                return Err((
                    "INVALID_CURSOR_ARGUMENTS",
                    format!("`{text}` does not appear to be a valid cursor."),
                ));
            }
        }
    }
    Ok(())
}

/// Cut one page out of a connection's nodes (the Relay algorithm:
/// `after`/`before` narrow, then `first`/`last` take from either end);
/// arguments are already checked by [`bounds`].
fn page(nodes: Vec<Node>, args: &Map<String, Value>) -> Page {
    let total = nodes.len();
    let at = |name: &str| {
        args.get(name)
            .and_then(Value::as_str)
            .and_then(cursor_index)
    };
    let mut start = at("after").map_or(0, |i| i.saturating_add(1));
    let mut end = at("before").map_or(total, |i| i.min(total));
    start = start.min(end);
    let count = |name: &str| {
        args.get(name)
            .and_then(Value::as_u64)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    };
    if let Some(first) = count("first") {
        end = end.min(start.saturating_add(first));
    }
    if let Some(last) = count("last") {
        start = start.max(end.saturating_sub(last));
    }
    Page {
        nodes: nodes
            .into_iter()
            .enumerate()
            .skip(start)
            .take(end - start)
            .collect(),
        total,
    }
}

/// The position a cursor of [`cursor`] stands for.
fn cursor_index(cursor: &str) -> Option<usize> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(cursor)
        .ok()?;
    std::str::from_utf8(&bytes)
        .ok()?
        .strip_prefix("cursor:v2:")?
        .parse()
        .ok()
}

fn cursor(index: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("cursor:v2:{index}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        let mut model = Model::new();
        let repo = model.add_repo("acme", "widgets", "main");
        model.add_issue(repo, "Crash", "It crashes.", "alice", None, 1);
        model
    }

    /// `main` and `gatehouse/same` point at one commit, `gatehouse/x` is one
    /// commit ahead of it.
    fn heads(_repo: u64, branch: &str) -> Option<String> {
        match branch {
            "main" | "gatehouse/same" => Some("a".repeat(40)),
            "gatehouse/x" => Some("b".repeat(40)),
            _ => None,
        }
    }

    fn ahead(_repo: u64, base: &str, head: &str) -> Option<u64> {
        Some(u64::from(base != head))
    }

    fn run(model: &mut Model, request: Value) -> GraphqlAnswer {
        let heads = heads;
        execute(
            model,
            "bot[bot]",
            1_700_000_000,
            request.to_string().as_bytes(),
            GitReads {
                branch_head: &heads,
                commits_ahead: &ahead,
                pull: &|_, _, _| None,
            },
            None,
        )
    }

    #[test]
    fn viewer_repository_issue_with_alias_and_fragments() {
        let mut model = model();
        let answer = run(
            &mut model,
            json!({
                "query": "query Q($owner: String!, $name: String!, $n: Int = 1) { viewer { login } \
                          r: repository(owner: $owner, name: $name) { nameWithOwner \
                          issue(number: $n) { ...F ... on Issue { author { login } } ... on PullRequest { headRefName } } } } \
                          fragment F on Issue { __typename number title comments(first: 5) { totalCount nodes { body } } }",
                "variables": {"owner": "ACME", "name": "widgets"},
            }),
        );
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body["errors"], Value::Null, "{}", answer.body);
        let data = &answer.body["data"];
        assert_eq!(data["viewer"]["login"], "bot[bot]");
        assert_eq!(data["r"]["nameWithOwner"], "acme/widgets");
        let issue = &data["r"]["issue"];
        assert_eq!(issue["__typename"], "Issue");
        assert_eq!(issue["number"], 1);
        assert_eq!(issue["author"]["login"], "alice");
        assert_eq!(issue["comments"]["totalCount"], 0);
        assert!(issue.get("headRefName").is_none());
    }

    #[test]
    fn add_comment_creates_and_reports_id() {
        let mut model = model();
        let lookup = run(
            &mut model,
            json!({"query": "{ repository(owner:\"acme\", name:\"widgets\") { issue(number: 1) { id } } }"}),
        );
        let subject = lookup.body["data"]["repository"]["issue"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let answer = run(
            &mut model,
            json!({
                "query": "mutation C($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url databaseId body } } subject { id } } }",
                "variables": {"input": {"subjectId": subject, "body": "On it."}},
            }),
        );
        let node = &answer.body["data"]["addComment"]["commentEdge"]["node"];
        assert_eq!(node["body"], "On it.");
        let id = node["databaseId"].as_u64().unwrap();
        assert_eq!(answer.created_id, Some(id.to_string()));
        assert_eq!(
            node["url"],
            format!("https://github.com/acme/widgets/issues/1#issuecomment-{id}")
        );
        assert_eq!(model.comments.len(), 1);
    }

    #[test]
    fn create_pull_request_needs_existing_branches_and_is_found_by_head() {
        let mut model = model();
        let repo = run(
            &mut model,
            json!({"query": "{ repository(owner:\"acme\", name:\"widgets\") { id } }"}),
        );
        let repo_id = repo.body["data"]["repository"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mutation = "mutation P($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { number url headRefName state } } }";
        let missing = run(
            &mut model,
            json!({
                "query": mutation,
                "variables": {"input": {"repositoryId": repo_id, "headRefName": "gatehouse/nope", "baseRefName": "main", "title": "t"}},
            }),
        );
        assert!(missing.body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Head sha"));
        assert!(missing.created_id.is_none());
        let created = run(
            &mut model,
            json!({
                "query": mutation,
                "variables": {"input": {"repositoryId": repo_id, "headRefName": "gatehouse/x", "baseRefName": "main", "title": "Fix", "body": "Fixes #1"}},
            }),
        );
        let pull = &created.body["data"]["createPullRequest"]["pullRequest"];
        assert_eq!(pull["number"], 2, "issues and pulls share numbers");
        assert_eq!(pull["url"], "https://github.com/acme/widgets/pull/2");
        assert_eq!(pull["state"], "OPEN");
        assert!(created.created_id.is_some());
        for (head, count) in [("gatehouse/x", 1), ("other", 0)] {
            let found = run(
                &mut model,
                json!({
                    "query": "query($h: String) { repository(owner:\"acme\", name:\"widgets\") { pullRequests(headRefName: $h, states: [OPEN], first: 5) { totalCount } } }",
                    "variables": {"h": head},
                }),
            );
            assert_eq!(
                found.body["data"]["repository"]["pullRequests"]["totalCount"], count,
                "{head}"
            );
        }
    }

    #[test]
    fn errors_are_graphql_shaped_and_nothing_is_created() {
        let mut model = model();
        for (request, status, needle) in [
            (
                json!({"query": "{ repository(owner:\"x\", name:\"y\") { name } }"}),
                200,
                "Could not resolve to a Repository",
            ),
            (
                json!({"query": "{ repository(owner:\"acme\", name:\"widgets\") { pullRequest(number: 1) { id } } }"}),
                200,
                "PullRequest",
            ),
            (
                json!({"query": "mutation { mergePullRequest(input: {pullRequestId: \"x\"}) { clientMutationId } }"}),
                200,
                "mergePullRequest",
            ),
            (
                json!({"query": "mutation { addComment(input: {subjectId: \"nope\", body: \"x\"}) { clientMutationId } }"}),
                200,
                "global id",
            ),
            (
                json!({"query": "query A { viewer { login } } query B { viewer { login } }"}),
                200,
                "operationName",
            ),
            (json!({"query": "{ viewer { "}), 200, "Parse error"),
            (json!([{"query": "{ viewer { login } }"}]), 400, "Batched"),
            (json!({"nope": 1}), 400, "query attribute"),
        ] {
            let answer = run(&mut model, request.clone());
            assert_eq!(answer.status, status, "{request}");
            assert!(
                answer.body.to_string().contains(needle),
                "{request}: {}",
                answer.body
            );
            assert!(answer.created_id.is_none());
        }
        assert!(model.comments.is_empty());
    }

    fn run_as(model: &mut Model, scope: Option<&Scope>, request: Value) -> GraphqlAnswer {
        let heads = heads;
        execute(
            model,
            "app[bot]",
            1_700_000_000,
            request.to_string().as_bytes(),
            GitReads {
                branch_head: &heads,
                commits_ahead: &ahead,
                pull: &|_, _, _| None,
            },
            scope,
        )
    }

    #[test]
    fn an_unknown_field_fails_the_whole_document() {
        let mut model = model();
        let answer = run(
            &mut model,
            json!({"query": "{ viewer { login } repository(owner: \"acme\", name: \"widgets\") { nameWithOwner colour } }"}),
        );
        assert_eq!(answer.status, 200);
        assert!(answer.body.get("data").is_none(), "{}", answer.body);
        assert_eq!(
            answer.body["errors"][0]["message"],
            "Field 'colour' doesn't exist on type 'Repository'"
        );
        assert_eq!(
            answer.body["errors"][0]["extensions"]["code"],
            "undefinedField"
        );
        // Positive control: the same document without the unknown field runs.
        let answer = run(
            &mut model,
            json!({"query": "{ viewer { login } repository(owner: \"acme\", name: \"widgets\") { nameWithOwner } }"}),
        );
        assert_eq!(
            answer.body["data"]["repository"]["nameWithOwner"],
            "acme/widgets"
        );
        // A mutation not in the schema is refused before anything runs.
        let answer = run(
            &mut model,
            json!({"query": "mutation { addCommentz(input: {subjectId: \"x\", body: \"b\"}) { clientMutationId } }"}),
        );
        assert!(answer.body.get("data").is_none());
        assert!(model.comments.is_empty());
    }

    fn issues_query(args: &str, selection: &str) -> Value {
        let args = if args.is_empty() {
            String::new()
        } else {
            format!("({args})")
        };
        json!({"query": format!("{{ repository(owner: \"acme\", name: \"widgets\") {{ issues{args} {{ {selection} }} }} }}")})
    }

    #[test]
    fn connections_need_bounds_and_page_with_cursors() {
        let mut model = model();
        let repo = model.repos[0].id;
        for n in 2..=5 {
            model.add_issue(repo, &format!("Issue {n}"), "", "alice", None, n);
        }
        for (args, selection, kind, message) in [
            ("", "nodes { number }", "MISSING_PAGINATION_BOUNDARIES", "You must provide a `first` or `last` value to properly paginate the `issues` connection."),
            ("first: 101", "nodes { number }", "EXCESSIVE_PAGINATION", "Requesting 101 records on the `issues` connection exceeds the `first` limit of 100 records."),
            ("last: 101", "totalCount", "EXCESSIVE_PAGINATION", "Requesting 101 records on the `issues` connection exceeds the `last` limit of 100 records."),
            ("first: -1", "totalCount", "INVALID_PAGINATION", "`first` on the `issues` connection cannot be less than zero."),
            ("first: 1, after: \"bm9wZQ==\"", "totalCount", "INVALID_CURSOR_ARGUMENTS", "`bm9wZQ==` does not appear to be a valid cursor."),
            ("", "edges { cursor }", "MISSING_PAGINATION_BOUNDARIES", "You must provide a `first` or `last` value to properly paginate the `issues` connection."),
        ] {
            let answer = run(&mut model, issues_query(args, selection));
            let error = &answer.body["errors"][0];
            assert_eq!(error["type"], kind, "{args}: {}", answer.body);
            assert_eq!(error["message"], message);
            assert_eq!(error["path"], json!(["repository", "issues"]));
            assert_eq!(answer.body["data"]["repository"]["issues"], Value::Null);
        }
        // Positive controls: a bare count needs no bounds (gh's
        // `commits { totalCount }`), and 100 is allowed.
        let answer = run(&mut model, issues_query("", "totalCount"));
        assert_eq!(
            answer.body["data"]["repository"]["issues"]["totalCount"], 5,
            "{}",
            answer.body
        );
        let answer = run(
            &mut model,
            issues_query("first: 100", "totalCount nodes { number }"),
        );
        assert_eq!(answer.body["errors"], Value::Null);
        // Walk forwards two at a time, then backwards from the end.
        let mut after: Option<String> = None;
        let mut seen = Vec::new();
        loop {
            let args = match &after {
                Some(c) => format!("first: 2, after: \"{c}\""),
                None => "first: 2".to_owned(),
            };
            let answer = run(&mut model, issues_query(&args, "totalCount nodes { number } pageInfo { hasNextPage endCursor hasPreviousPage startCursor }"));
            let conn = &answer.body["data"]["repository"]["issues"];
            assert_eq!(conn["totalCount"], 5, "the whole list, not the page");
            seen.extend(
                conn["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n["number"].as_u64().unwrap()),
            );
            assert_eq!(conn["pageInfo"]["hasPreviousPage"], after.is_some());
            if conn["pageInfo"]["hasNextPage"] == false {
                break;
            }
            after = Some(conn["pageInfo"]["endCursor"].as_str().unwrap().to_owned());
        }
        assert_eq!(seen, vec![1, 2, 3, 4, 5]);
        let answer = run(
            &mut model,
            issues_query(
                "last: 2",
                "nodes { number } pageInfo { hasNextPage hasPreviousPage startCursor }",
            ),
        );
        let conn = &answer.body["data"]["repository"]["issues"];
        assert_eq!(conn["nodes"], json!([{"number": 4}, {"number": 5}]));
        assert_eq!(conn["pageInfo"]["hasNextPage"], false);
        assert_eq!(conn["pageInfo"]["hasPreviousPage"], true);
        let before = conn["pageInfo"]["startCursor"].as_str().unwrap().to_owned();
        let answer = run(
            &mut model,
            issues_query(
                &format!("last: 2, before: \"{before}\""),
                "edges { cursor node { number } }",
            ),
        );
        let edges = answer.body["data"]["repository"]["issues"]["edges"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            edges
                .iter()
                .map(|e| e["node"]["number"].clone())
                .collect::<Vec<_>>(),
            vec![json!(2), json!(3)]
        );
    }

    /// A pull request's checks over GraphQL: the check runs need `checks`,
    /// their workflow runs `actions` (GitHub's FORBIDDEN at that path
    /// otherwise), and the rollup's contexts page like any connection.
    #[test]
    fn a_pull_requests_checks_need_their_permissions_and_page() {
        use super::super::model::{Job, PullInfo};
        let mut model = model();
        let widgets = model.repos[0].id;
        let head = "b".repeat(40);
        let pull = PullInfo::new("gatehouse/x", &head, "main", &"a".repeat(40), false);
        let number = model.add_issue(widgets, "Fix", "", "alice", Some(pull), 2);
        for (id, conclusion) in [(7, "failure"), (8, "success")] {
            model.jobs.push(Job {
                id,
                run_id: id + 100,
                repo_id: widgets,
                name: format!("job{id}"),
                head_sha: head.clone(),
                conclusion: conclusion.into(),
                logs: String::new(),
                created_at: 2,
                workflow: Some(".github/workflows/ci.yml".into()),
                annotations: Vec::new(),
            });
        }
        let commit = json!({"sha": head, "commit": {"message": "Fix it\n\nbody",
            "author": {"name": "A", "email": "a@x", "date": "2026-01-01T00:00:00Z"},
            "committer": {"name": "A", "email": "a@x", "date": "2026-01-01T00:00:00Z"}}});
        let from_git = move |_: u64, _: &str, _: &str| {
            Some(pulls::PullFromGit {
                commits: vec![commit.clone()],
                files: Vec::new(),
            })
        };
        let query = |contexts: &str| json!({"query": format!("{{ repository(owner: \"acme\", name: \"widgets\") {{ pullRequest(number: {number}) {{ commits(last: 1) {{ nodes {{ commit {{ oid messageHeadline statusCheckRollup {{ state contexts{contexts} {{ totalCount pageInfo {{ hasNextPage }} nodes {{ __typename ... on CheckRun {{ name conclusion checkSuite {{ workflowRun {{ databaseId }} }} }} }} }} }} }} }} }} }} }} }}")});
        let ask = |model: &mut Model, scope: Option<&Scope>, request: Value| {
            execute(
                model,
                "app[bot]",
                1_700_000_000,
                request.to_string().as_bytes(),
                GitReads {
                    branch_head: &heads,
                    commits_ahead: &ahead,
                    pull: &from_git,
                },
                scope,
            )
            .body
        };
        let scope = |perms: &[&str]| Scope {
            repo_ids: Some(vec![widgets]),
            permissions: perms
                .iter()
                .map(|k| ((*k).to_owned(), "read".to_owned()))
                .collect(),
        };
        let at = |body: &Value| {
            body["data"]["repository"]["pullRequest"]["commits"]["nodes"][0]["commit"].clone()
        };

        // Every permission: both runs, their workflow runs, the rollup failing.
        let all = scope(&["pull_requests", "checks", "actions"]);
        let body = ask(&mut model, Some(&all), query("(first: 10)"));
        assert!(body.get("errors").is_none(), "{body}");
        let commit = at(&body);
        assert_eq!(commit["oid"], head.as_str());
        assert_eq!(commit["messageHeadline"], "Fix it");
        let rollup = &commit["statusCheckRollup"];
        assert_eq!(rollup["state"], "FAILURE");
        assert_eq!(rollup["contexts"]["totalCount"], 2);
        assert_eq!(rollup["contexts"]["nodes"][0]["name"], "job7");
        assert_eq!(
            rollup["contexts"]["nodes"][1]["checkSuite"]["workflowRun"]["databaseId"],
            108
        );

        // Paged: one of two, more to come.
        let body = ask(&mut model, Some(&all), query("(first: 1)"));
        let contexts = &at(&body)["statusCheckRollup"]["contexts"];
        assert_eq!(
            contexts["nodes"].as_array().map(Vec::len),
            Some(1),
            "{body}"
        );
        assert_eq!(contexts["pageInfo"]["hasNextPage"], true);
        // No bounds: GitHub's MISSING_PAGINATION_BOUNDARIES.
        let body = ask(&mut model, Some(&all), query(""));
        assert_eq!(
            body["errors"][0]["type"], "MISSING_PAGINATION_BOUNDARIES",
            "{body}"
        );

        // Without `actions`: each workflow run is refused where it is.
        let body = ask(
            &mut model,
            Some(&scope(&["pull_requests", "checks"])),
            query("(first: 10)"),
        );
        let errors = body["errors"].as_array().cloned().unwrap_or_default();
        assert_eq!(errors.len(), 2, "{body}");
        assert!(errors.iter().all(|e| e["type"] == "FORBIDDEN"
            && e["message"] == "Resource not accessible by integration"));
        let path: Vec<Value> = errors[0]["path"].as_array().unwrap().clone();
        assert_eq!(
            &path[path.len() - 4..],
            &[
                json!("nodes"),
                json!(0),
                json!("checkSuite"),
                json!("workflowRun")
            ][..],
            "{path:?}"
        );
        assert_eq!(
            at(&body)["statusCheckRollup"]["contexts"]["nodes"][0]["name"],
            "job7"
        );
        // Without `checks`: the check runs themselves.
        let body = ask(
            &mut model,
            Some(&scope(&["pull_requests", "actions"])),
            query("(first: 10)"),
        );
        assert_eq!(body["errors"].as_array().map(Vec::len), Some(2), "{body}");
        assert_eq!(
            at(&body)["statusCheckRollup"]["contexts"]["nodes"],
            json!([null, null])
        );
        // An unscoped token (a PAT) sees them.
        let body = ask(&mut model, None, query("(first: 10)"));
        assert!(body.get("errors").is_none(), "{body}");
    }

    #[test]
    fn an_installation_token_sees_only_its_repositories_and_permissions() {
        let mut model = model();
        let other = model.add_repo("acme", "gears", "main");
        model.add_issue(other, "Gear", "", "alice", None, 1);
        let widgets = model.repos[0].id;
        let scope = |perms: &[(&str, &str)]| Scope {
            repo_ids: Some(vec![widgets]),
            permissions: perms
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let read = scope(&[("issues", "read"), ("metadata", "read")]);
        let issue = |repo: &str| json!({"query": format!("{{ repository(owner: \"acme\", name: \"{repo}\") {{ issue(number: 1) {{ title }} }} }}")});
        let answer = run_as(&mut model, Some(&read), issue("gears"));
        assert_eq!(answer.body["errors"][0]["type"], "NOT_FOUND");
        assert_eq!(
            answer.body["errors"][0]["message"],
            "Could not resolve to a Repository with the name 'acme/gears'."
        );
        let answer = run_as(&mut model, Some(&read), issue("widgets"));
        assert_eq!(
            answer.body["data"]["repository"]["issue"]["title"], "Crash",
            "{}",
            answer.body
        );
        // The other repository's node ids do not resolve either.
        let gears_id = node_id("R", other);
        let answer = run_as(
            &mut model,
            Some(&read),
            json!({"query": format!("{{ node(id: \"{gears_id}\") {{ id }} }}")}),
        );
        assert_eq!(answer.body["errors"][0]["type"], "NOT_FOUND");
        assert_eq!(
            run(
                &mut model,
                json!({"query": format!("{{ node(id: \"{gears_id}\") {{ id }} }}")})
            )
            .body["data"]["node"]["id"],
            json!(gears_id)
        );
        // Reading pull requests needs `pull_requests`; commenting `issues: write`.
        let answer = run_as(
            &mut model,
            Some(&read),
            json!({"query": "{ repository(owner: \"acme\", name: \"widgets\") { pullRequests(first: 5) { totalCount } } }"}),
        );
        assert_eq!(answer.body["errors"][0]["type"], "FORBIDDEN");
        assert_eq!(
            answer.body["errors"][0]["message"],
            "Resource not accessible by integration"
        );
        let subject = node_id("I", model.issues[0].id);
        let comment = json!({"query": format!("mutation {{ addComment(input: {{subjectId: \"{subject}\", body: \"hi\"}}) {{ clientMutationId }} }}")});
        let answer = run_as(&mut model, Some(&read), comment.clone());
        assert_eq!(answer.body["errors"][0]["type"], "FORBIDDEN");
        assert!(model.comments.is_empty());
        let write = scope(&[("issues", "write")]);
        let answer = run_as(&mut model, Some(&write), comment);
        assert_eq!(answer.body["errors"], Value::Null, "{}", answer.body);
        assert_eq!(model.comments.len(), 1);
        // `viewer` is the installation's bot user, as for a token without
        // a scope.
        let answer = run_as(
            &mut model,
            Some(&write),
            json!({"query": "{ viewer { login } }"}),
        );
        assert_eq!(answer.body["errors"], Value::Null, "{}", answer.body);
        assert_eq!(answer.body["data"]["viewer"]["login"], "app[bot]");
        assert_eq!(
            run_as(&mut model, None, json!({"query": "{ viewer { login } }"})).body["data"]
                ["viewer"]["login"],
            "app[bot]"
        );
    }

    #[test]
    fn variable_values_must_fit_their_declared_types() {
        let mut model = model();
        let query = "query Q($owner: String!, $name: String!, $n: Int, $s: [IssueState!]) { repository(owner: $owner, name: $name) { issues(first: $n, states: $s) { totalCount } } }";
        let answer = run(
            &mut model,
            json!({"query": query, "variables": {"name": "widgets"}}),
        );
        assert_eq!(
            answer.body,
            json!({"errors": [{
                "message": "Variable $owner of type String! was provided invalid value",
                "locations": [{"line": 1, "column": 9}],
                "extensions": {"value": null, "problems": [{"path": [], "explanation": "Expected value to not be null"}]},
            }]})
        );
        for (variables, message, problems) in [
            (
                json!({"owner": "acme", "name": 7}),
                "Variable $name of type String! was provided invalid value",
                json!([{"path": [], "explanation": "Could not coerce value 7 to String"}]),
            ),
            (
                json!({"owner": "acme", "name": "widgets", "n": "5"}),
                "Variable $n of type Int was provided invalid value",
                json!([{"path": [], "explanation": "Could not coerce value \"5\" to Int"}]),
            ),
            (
                json!({"owner": "acme", "name": "widgets", "s": ["OPEN", "SHUT"]}),
                "Variable $s of type [IssueState!] was provided invalid value for 1 (Expected \"SHUT\" to be one of: CLOSED, OPEN)",
                json!([{"path": [1], "explanation": "Expected \"SHUT\" to be one of: CLOSED, OPEN"}]),
            ),
        ] {
            let answer = run(&mut model, json!({"query": query, "variables": variables}));
            assert!(answer.body.get("data").is_none(), "{}", answer.body);
            assert_eq!(answer.body["errors"][0]["message"], message);
            assert_eq!(answer.body["errors"][0]["extensions"]["problems"], problems);
        }
        // An input object: unknown and missing fields, each named.
        let mutation = "mutation C($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }";
        let answer = run(
            &mut model,
            json!({"query": mutation, "variables": {"input": {"subjectId": "I_1", "bdy": "x"}}}),
        );
        let error = &answer.body["errors"][0];
        assert_eq!(
            error["message"],
            "Variable $input of type AddCommentInput! was provided invalid value for bdy (Field is not defined on AddCommentInput), body (Expected value to not be null)"
        );
        assert_eq!(
            error["extensions"]["value"],
            json!({"subjectId": "I_1", "bdy": "x"})
        );
        let answer = run(
            &mut model,
            json!({"query": mutation, "variables": {"input": "I_1"}}),
        );
        assert_eq!(
            answer.body["errors"][0]["extensions"]["problems"][0]["explanation"],
            "Expected \"I_1\" to be a key-value object."
        );
        assert!(model.comments.is_empty());
        // Positive control: a single item for a list, an unset nullable.
        let answer = run(
            &mut model,
            json!({"query": query, "variables": {"owner": "acme", "name": "widgets", "s": "OPEN"}}),
        );
        assert_eq!(
            answer.body["data"]["repository"]["issues"]["totalCount"], 1,
            "{}",
            answer.body
        );
    }

    #[test]
    fn a_wrong_argument_fails_the_whole_document() {
        let mut model = model();
        for (query, code) in [
            ("{ repository(owner: \"acme\", nme: \"widgets\") { id } }", "argumentNotAccepted"),
            ("{ repository(owner: \"acme\") { id } }", "missingRequiredArguments"),
            ("{ repository(owner: \"acme\", name: \"widgets\") { issues(first: \"2\") { totalCount } } }", "argumentLiteralsIncompatible"),
            ("query Q($n: Int) { viewer { login } }", "variableNotUsed"),
            ("query Q { repository(owner: $o, name: \"widgets\") { id } }", "variableNotDefined"),
            ("query Q($o: String) { repository(owner: $o, name: \"widgets\") { id } }", "variableMismatch"),
        ] {
            let answer = run(&mut model, json!({"query": query, "variables": {"o": "acme", "n": 1}}));
            assert_eq!(answer.status, 200);
            assert!(answer.body.get("data").is_none(), "{query}: {}", answer.body);
            let codes: Vec<&Value> = answer.body["errors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| &e["extensions"]["code"])
                .collect();
            assert!(codes.contains(&&json!(code)), "{query}: {}", answer.body);
        }
    }

    #[test]
    fn type_introspection_lists_fields() {
        let mut model = model();
        let answer = run(
            &mut model,
            json!({"query": "query Issue_fields{Issue: __type(name: \"Issue\"){fields(includeDeprecated: true){name}}}"}),
        );
        let fields = answer.body["data"]["Issue"]["fields"].as_array().unwrap();
        assert!(
            fields.iter().any(|f| f["name"] == "title"),
            "{}",
            answer.body
        );
        assert!(!fields.iter().any(|f| f["name"] == "headRefName"));
    }

    #[test]
    fn create_pull_request_refuses_a_duplicate_and_an_empty_one() {
        let mut model = model();
        let repo_id = node_id("R", model.repos[0].id);
        let create = |head: &str| {
            json!({
                "query": "mutation P($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { number } } }",
                "variables": {"input": {"repositoryId": repo_id, "headRefName": head, "baseRefName": "main", "title": "t"}},
            })
        };
        let first = run(&mut model, create("gatehouse/x"));
        assert_eq!(
            first.body["data"]["createPullRequest"]["pullRequest"]["number"], 2,
            "{}",
            first.body
        );
        for (head, message) in [
            (
                "gatehouse/x",
                "A pull request already exists for acme:gatehouse/x.",
            ),
            (
                "gatehouse/same",
                "No commits between main and gatehouse/same",
            ),
        ] {
            let answer = run(&mut model, create(head));
            let error = &answer.body["errors"][0];
            assert_eq!(error["type"], "UNPROCESSABLE", "{}", answer.body);
            assert_eq!(error["message"], message);
            assert_eq!(error["path"], json!(["createPullRequest"]));
            assert_eq!(answer.body["data"]["createPullRequest"], Value::Null);
            assert!(answer.created_id.is_none());
        }
        assert_eq!(model.issues.len(), 2, "nothing more was created");
        // Once the first is closed, the same head and base may open again.
        model.issues[1].open = false;
        let again = run(&mut model, create("gatehouse/x"));
        assert_eq!(
            again.body["data"]["createPullRequest"]["pullRequest"]["number"], 3,
            "{}",
            again.body
        );
    }
}
