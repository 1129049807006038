//! The part of GitHub's GraphQL schema the emulator checks documents
//! against, and the static validation GitHub runs before executing one.
//!
//! `schema.txt` lists the types the emulator serves and `gh` or gatehouse
//! ask about, each with every field the public schema
//! (`octokit/graphql-schema`, `schema.graphql`) gives it and the field's
//! type; a `*` marks a field taking `first`/`last` (a connection). Types
//! named there but not listed (e.g. `License`) are not described, so
//! selections inside them are not checked. Scalars and enums the listed
//! fields return are named on the `scalars` and `enums` lines.
//!
//! Like GitHub, a document asking for a field its type does not have fails
//! as a whole: `{"errors": [...]}` with no `data`, each error carrying
//! `extensions.code`, `locations` and a `path` that starts with the
//! operation (`"query Name"`) or fragment (`"fragment Name"`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use graphql_parser::query::{
    Definition, Document, FragmentDefinition, OperationDefinition, Selection, SelectionSet,
    TypeCondition,
};
use serde_json::{json, Value};

const TABLE: &str = include_str!("schema.txt");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Interface,
    Union,
    Scalar,
    Enum,
}

impl Kind {
    fn introspection(self) -> &'static str {
        match self {
            Kind::Object => "OBJECT",
            Kind::Interface => "INTERFACE",
            Kind::Union => "UNION",
            Kind::Scalar => "SCALAR",
            Kind::Enum => "ENUM",
        }
    }
}

#[derive(Debug)]
pub(crate) struct FieldDef {
    pub name: &'static str,
    /// As written in the schema: `[Label!]!`.
    pub ty: &'static str,
    /// Takes `first`/`last`: a connection GitHub paginates.
    pub paginated: bool,
}

impl FieldDef {
    /// The named type under list and non-null wrappers.
    pub(crate) fn base(&self) -> &'static str {
        self.ty.trim_matches(|c| c == '[' || c == ']' || c == '!')
    }
}

#[derive(Debug)]
pub(crate) struct TypeDef {
    pub kind: Kind,
    pub fields: Vec<FieldDef>,
}

#[derive(Debug)]
pub(crate) struct Schema {
    types: BTreeMap<&'static str, TypeDef>,
}

/// The table, parsed once.
pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| parse(TABLE))
}

fn parse(table: &'static str) -> Schema {
    enum Current {
        None,
        Type(&'static str),
        Leaves(Kind),
    }
    let leaf = |kind| TypeDef {
        kind,
        fields: Vec::new(),
    };
    let mut types = BTreeMap::new();
    let mut current = Current::None;
    for line in table.lines() {
        if let Some(items) = line.strip_prefix(' ') {
            for item in items.split_whitespace() {
                match current {
                    Current::None => {}
                    Current::Leaves(kind) => {
                        types.insert(item, leaf(kind));
                    }
                    Current::Type(name) => {
                        let Some((field, ty)) = item.split_once(':') else {
                            continue;
                        };
                        let (field, paginated) = match field.strip_suffix('*') {
                            Some(f) => (f, true),
                            None => (field, false),
                        };
                        if let Some(def) = types.get_mut(name) {
                            let def: &mut TypeDef = def;
                            def.fields.push(FieldDef {
                                name: field,
                                ty,
                                paginated,
                            });
                        }
                    }
                }
            }
            continue;
        }
        let words: Vec<&'static str> = line.split_whitespace().filter(|w| *w != "=").collect();
        let Some((head, rest)) = words.split_first() else {
            continue;
        };
        current = match *head {
            "object" | "interface" | "union" => {
                let kind = match *head {
                    "object" => Kind::Object,
                    "interface" => Kind::Interface,
                    _ => Kind::Union,
                };
                let Some(name) = rest.first() else { continue };
                types.insert(*name, leaf(kind));
                Current::Type(name)
            }
            "scalars" | "enums" => {
                let kind = if *head == "scalars" {
                    Kind::Scalar
                } else {
                    Kind::Enum
                };
                for name in rest {
                    types.insert(*name, leaf(kind));
                }
                Current::Leaves(kind)
            }
            _ => Current::None,
        };
    }
    Schema { types }
}

impl Schema {
    pub(crate) fn get(&self, name: &str) -> Option<&TypeDef> {
        self.types.get(name)
    }

    /// The field `name` of type `ty`: `Err(())` if the type is described
    /// and has no such field, `Ok(None)` if the type is not described.
    pub(crate) fn field(&self, ty: &str, name: &str) -> Result<Option<&FieldDef>, ()> {
        match self.types.get(ty) {
            None => Ok(None),
            Some(def) => def
                .fields
                .iter()
                .find(|f| f.name == name)
                .map(Some)
                .ok_or(()),
        }
    }

    /// `__type(name:)`'s answer: name, kind and fields with their types, or
    /// null for a type the table does not describe.
    pub(crate) fn introspect(&self, name: &str) -> Value {
        let Some(def) = self.types.get(name) else {
            return Value::Null;
        };
        let fields: Vec<Value> = def
            .fields
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "type": self.type_ref(f.ty),
                    "isDeprecated": false,
                    "deprecationReason": null,
                    "args": [],
                })
            })
            .collect();
        let has_fields = matches!(def.kind, Kind::Object | Kind::Interface);
        json!({
            "__typename": "__Type",
            "name": name,
            "kind": def.kind.introspection(),
            "description": null,
            "fields": if has_fields { Value::Array(fields) } else { Value::Null },
        })
    }

    fn type_ref(&self, ty: &str) -> Value {
        if let Some(inner) = ty.strip_suffix('!') {
            return json!({"kind": "NON_NULL", "name": null, "ofType": self.type_ref(inner)});
        }
        if let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return json!({"kind": "LIST", "name": null, "ofType": self.type_ref(inner)});
        }
        let kind = self
            .types
            .get(ty)
            .map(|d| Value::from(d.kind.introspection()))
            .unwrap_or(Value::Null);
        json!({"kind": kind, "name": ty, "ofType": null})
    }
}

/// Check every operation and fragment of `document`; GitHub's errors, empty
/// when it may run.
pub(crate) fn validate<'d>(document: &'d Document<'d, String>) -> Vec<Value> {
    let schema = schema();
    let mut fragments = BTreeMap::new();
    for definition in &document.definitions {
        if let Definition::Fragment(f) = definition {
            fragments.insert(f.name.as_str(), f);
        }
    }
    let mut v = Validator {
        schema,
        fragments: &fragments,
        errors: Vec::new(),
        spread_missing: BTreeSet::new(),
    };
    for definition in &document.definitions {
        match definition {
            Definition::Operation(op) => {
                let (root, word, name, set) = match op {
                    OperationDefinition::SelectionSet(set) => ("Query", "query", None, set),
                    OperationDefinition::Query(q) => {
                        ("Query", "query", q.name.as_deref(), &q.selection_set)
                    }
                    OperationDefinition::Mutation(m) => {
                        ("Mutation", "mutation", m.name.as_deref(), &m.selection_set)
                    }
                    // Refused later as unsupported.
                    OperationDefinition::Subscription(_) => continue,
                };
                let head = match name {
                    Some(name) => format!("{word} {name}"),
                    None => word.to_owned(),
                };
                v.set(root, set, &mut vec![Value::String(head)]);
            }
            Definition::Fragment(f) => {
                let TypeCondition::On(on) = &f.type_condition;
                let mut path = vec![Value::String(format!("fragment {}", f.name))];
                if v.schema.get(on).is_none() && !known_elsewhere(on) {
                    v.push(
                        format!("No such type {on}, so it can't be a fragment condition"),
                        "undefinedType",
                        f.position,
                        &path,
                        json!({"typeName": on}),
                    );
                    continue;
                }
                v.set(on, &f.selection_set, &mut path);
            }
        }
    }
    v.errors
}

/// Type names GitHub has that the table does not describe are accepted as
/// fragment conditions (their selections go unchecked); only the
/// describable ones are refused when misspelt. A name is treated as known
/// elsewhere if it looks like a GitHub type (capitalised), since the full
/// list of types is not carried.
fn known_elsewhere(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
}

struct Validator<'s, 'd> {
    schema: &'s Schema,
    fragments: &'s BTreeMap<&'d str, &'d FragmentDefinition<'d, String>>,
    errors: Vec<Value>,
    spread_missing: BTreeSet<String>,
}

impl<'d> Validator<'_, 'd> {
    fn push(
        &mut self,
        message: String,
        code: &str,
        position: graphql_parser::Pos,
        path: &[Value],
        extra: Value,
    ) {
        let mut extensions = json!({ "code": code });
        if let (Some(ext), Value::Object(extra)) = (extensions.as_object_mut(), extra) {
            ext.extend(extra);
        }
        self.errors.push(json!({
            "path": path,
            "extensions": extensions,
            "locations": [{"line": position.line, "column": position.column}],
            "message": message,
        }));
    }

    fn set(&mut self, ty: &str, set: &'d SelectionSet<'d, String>, path: &mut Vec<Value>) {
        for selection in &set.items {
            match selection {
                Selection::Field(field) => self.field(ty, field, path),
                Selection::InlineFragment(fragment) => {
                    let on = match &fragment.type_condition {
                        Some(TypeCondition::On(on)) => on.as_str(),
                        None => ty,
                    };
                    let label = match &fragment.type_condition {
                        Some(TypeCondition::On(on)) => format!("... on {on}"),
                        None => "...".to_owned(),
                    };
                    path.push(Value::String(label));
                    if self.schema.get(on).is_some() {
                        self.set(on, &fragment.selection_set, path);
                    } else if !known_elsewhere(on) {
                        self.push(
                            format!("No such type {on}, so it can't be a fragment condition"),
                            "undefinedType",
                            fragment.position,
                            path,
                            json!({"typeName": on}),
                        );
                    }
                    path.pop();
                }
                Selection::FragmentSpread(spread) => {
                    let name = spread.fragment_name.as_str();
                    if !self.fragments.contains_key(name) && self.spread_missing.insert(name.into())
                    {
                        self.push(
                            format!("Fragment {name} was used, but not defined"),
                            "useAndDefineFragment",
                            spread.position,
                            path,
                            json!({"fragmentName": name}),
                        );
                    }
                    // A defined fragment is checked once, on its own type.
                }
            }
        }
    }

    fn field(
        &mut self,
        ty: &str,
        field: &'d graphql_parser::query::Field<'d, String>,
        path: &mut Vec<Value>,
    ) {
        let name = field.name.as_str();
        path.push(Value::String(
            field.alias.clone().unwrap_or_else(|| name.to_owned()),
        ));
        match name {
            "__typename" => {}
            // Introspection: answered from the table itself.
            "__type" | "__schema" if ty == "Query" => {}
            _ => match self.schema.field(ty, name) {
                Ok(None) => {}
                Err(()) => {
                    let message = match self.schema.get(ty).map(|d| d.kind) {
                        Some(Kind::Union) => format!(
                            "Selections can't be made directly on unions (see selections on {ty})"
                        ),
                        _ => format!("Field '{name}' doesn't exist on type '{ty}'"),
                    };
                    let code = if message.starts_with("Field") {
                        "undefinedField"
                    } else {
                        "selectionMismatch"
                    };
                    self.push(
                        message,
                        code,
                        field.position,
                        path,
                        json!({"typeName": ty, "fieldName": name}),
                    );
                }
                Ok(Some(def)) => {
                    let base = def.base();
                    let leaf = self
                        .schema
                        .get(base)
                        .is_some_and(|d| matches!(d.kind, Kind::Scalar | Kind::Enum));
                    let has_selections = !field.selection_set.items.is_empty();
                    if leaf && has_selections {
                        self.push(
                            format!("Selections can't be made on scalars (field '{name}' returns {base} but has selections [{}])", selection_names(&field.selection_set)),
                            "selectionMismatch",
                            field.position,
                            path,
                            json!({"nodeName": format!("field '{name}'"), "typeName": base}),
                        );
                    } else if !leaf && !has_selections {
                        self.push(
                            format!("Field must have selections (field '{name}' returns {base} but has no selections. Did you mean '{name} {{ ... }}'?)"),
                            "selectionMismatch",
                            field.position,
                            path,
                            json!({"nodeName": format!("field '{name}'"), "typeName": base}),
                        );
                    } else if has_selections {
                        self.set(base, &field.selection_set, path);
                    }
                }
            },
        }
        path.pop();
    }
}

fn selection_names(set: &SelectionSet<'_, String>) -> String {
    set.items
        .iter()
        .filter_map(|s| match s {
            Selection::Field(f) => Some(format!("\"{}\"", f.name)),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_describes_what_the_emulator_serves() {
        let s = schema();
        for (ty, field, base, paginated) in [
            ("Query", "repository", "Repository", false),
            ("Query", "viewer", "User", false),
            ("Repository", "pullRequests", "PullRequestConnection", true),
            (
                "PullRequest",
                "commits",
                "PullRequestCommitConnection",
                true,
            ),
            ("PullRequest", "headRefName", "String", false),
            (
                "Mutation",
                "createPullRequest",
                "CreatePullRequestPayload",
                false,
            ),
            ("PageInfo", "endCursor", "String", false),
            ("IssueCommentConnection", "totalCount", "Int", false),
        ] {
            let def = s.field(ty, field).unwrap().unwrap();
            assert_eq!(
                (def.base(), def.paginated),
                (base, paginated),
                "{ty}.{field}"
            );
        }
        assert!(s.field("Repository", "nope").is_err());
        assert!(s.field("License", "anything").unwrap().is_none());
        assert_eq!(s.get("String").map(|d| d.kind), Some(Kind::Scalar));
        assert_eq!(s.get("PullRequestState").map(|d| d.kind), Some(Kind::Enum));
        assert_eq!(
            s.get("IssueOrPullRequest").map(|d| d.kind),
            Some(Kind::Union)
        );
        assert_eq!(s.get("Node").map(|d| d.kind), Some(Kind::Interface));
    }

    fn errors(query: &str) -> Vec<Value> {
        validate(&graphql_parser::parse_query::<String>(query).unwrap())
    }

    #[test]
    fn unknown_fields_are_refused_with_githubs_shape() {
        let got = errors("query Q {\n  repository(owner: \"a\", name: \"b\") { nme }\n}");
        assert_eq!(
            got,
            vec![json!({
                "path": ["query Q", "repository", "nme"],
                "extensions": {"code": "undefinedField", "typeName": "Repository", "fieldName": "nme"},
                "locations": [{"line": 2, "column": 39}],
                "message": "Field 'nme' doesn't exist on type 'Repository'",
            })]
        );
        let got = errors("{ viewer { login } } fragment F on Issue { title nope }");
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["path"], json!(["fragment F", "nope"]));
        assert_eq!(
            got[0]["message"],
            "Field 'nope' doesn't exist on type 'Issue'"
        );
        let got = errors("mutation { closeEverything(input: {}) { x } }");
        assert_eq!(
            got[0]["message"],
            "Field 'closeEverything' doesn't exist on type 'Mutation'"
        );
        let got = errors("{ viewer { login { x } } }");
        assert_eq!(got[0]["extensions"]["code"], "selectionMismatch");
        let got = errors("{ viewer }");
        assert_eq!(got[0]["extensions"]["code"], "selectionMismatch");
        let got = errors("{ viewer { ...Missing } }");
        assert_eq!(
            got[0]["message"],
            "Fragment Missing was used, but not defined"
        );
        let got = errors("{ repository(owner: \"a\", name: \"b\") { issueOrPullRequest(number: 1) { number } } }");
        assert_eq!(got[0]["extensions"]["code"], "selectionMismatch");
        let got = errors("{ node(id: \"x\") { ... on pullrequest { id } } }");
        assert_eq!(got[0]["extensions"]["code"], "undefinedType");
    }

    #[test]
    fn what_gh_asks_is_valid() {
        // gh 2.23's queries (cli/cli api/query_builder.go and friends), as
        // it sent them to the emulator.
        for query in [
            "query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { ...repo parent { ...repo } mergeCommitAllowed rebaseMergeAllowed squashMergeAllowed } } fragment repo on Repository { id name owner { login } hasIssuesEnabled description hasWikiEnabled viewerPermission defaultBranchRef { name } }",
            "query PullRequestByNumber($owner: String!, $repo: String!, $pr_number: Int!) { repository(owner: $owner, name: $repo) { pullRequest(number: $pr_number) {url,number,title,state,body,author{login,...on User{id,name}},isDraft,maintainerCanModify,mergeable,additions,deletions,commits{totalCount},baseRefName,headRefName,headRepositoryOwner{id,login,...on User{name}},headRepository{id,name},isCrossRepository,reviewRequests(first: 100) {nodes {requestedReviewer {__typename,...on User{login},...on Team{organization{login}name,slug}}}},reviews(first: 100) {nodes {id,author{login},authorAssociation,submittedAt,body,state,commit{oid},reactionGroups{content,users{totalCount}}}pageInfo{hasNextPage,endCursor}totalCount},assignees(first:100){nodes{id,login,name},totalCount},labels(first:100){nodes{id,name,description,color},totalCount},projectCards(first:100){nodes{project{name}column{name}},totalCount},milestone{number,title,description,dueOn},comments(first: 100) {nodes {id,author{login,...on User{id,name}},authorAssociation,body,createdAt,includesCreatedEdit,isMinimized,minimizedReason,reactionGroups{content,users{totalCount}},url,viewerDidAuthor},pageInfo{hasNextPage,endCursor},totalCount},reactionGroups{content,users{totalCount}},createdAt,statusCheckRollup: commits(last: 1) {nodes {commit {statusCheckRollup {contexts(first:100) {nodes {__typename...on StatusContext {context,state,targetUrl,createdAt},...on CheckRun {name,checkSuite{workflowRun{workflow{name}}},status,conclusion,startedAt,completedAt,detailsUrl}},pageInfo{hasNextPage,endCursor}}}}}},id} } }",
            "query PullRequestForBranch($owner: String!, $repo: String!, $headRefName: String!, $states: [PullRequestState!]) { repository(owner: $owner, name: $repo) { pullRequests(headRefName: $headRefName, states: $states, first: 30, orderBy: { field: CREATED_AT, direction: DESC }) { nodes {url,id,number,state,baseRefName,headRefName,isCrossRepository,headRepositoryOwner{id,login,...on User{name}}} } defaultBranchRef { name } } }",
            "mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id url } } }",
            "mutation CommentCreate($input:AddCommentInput!){addComment(input: $input){commentEdge{node{url}}}}",
            "query Issue_fields{Issue: __type(name: \"Issue\"){fields(includeDeprecated: true){name}}}",
            "{ rateLimit { remaining resetAt } node(id: \"x\") { __typename ... on Issue { title } ... on IssueComment { body } } }",
        ] {
            assert_eq!(errors(query), Vec::<Value>::new(), "{query}");
        }
    }

    #[test]
    fn introspection_answers_fields_with_types() {
        let t = schema().introspect("PullRequest");
        assert_eq!(t["kind"], "OBJECT");
        let fields = t["fields"].as_array().unwrap();
        let head = fields.iter().find(|f| f["name"] == "headRefName").unwrap();
        assert_eq!(
            head["type"],
            json!({"kind": "NON_NULL", "name": null, "ofType": {"kind": "SCALAR", "name": "String", "ofType": null}})
        );
        assert_eq!(schema().introspect("NoSuchType"), Value::Null);
    }
}
