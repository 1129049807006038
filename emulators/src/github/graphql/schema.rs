//! The part of GitHub's GraphQL schema the emulator checks documents
//! against, and the static validation GitHub runs before executing one.
//!
//! `schema.txt` (written by `scripts/graphql-schema-table` from the public
//! schema, `octokit/graphql-schema`'s `schema.graphql`) lists the types the
//! emulator serves and `gh` or gatehouse ask about, each with every field
//! the public schema gives it, the field's arguments and its type
//! (`issues*(labels:[String!],orderBy:IssueOrder):IssueConnection!`); a `*`
//! marks a connection, which also takes `after`, `before`, `first` and
//! `last`; `=` after an argument's type marks a default. Input objects and
//! enums those arguments take are listed with their fields and values.
//! Types named there but not described (e.g. `License`, the inputs of
//! mutations the emulator does not serve) are not checked inside. Scalars
//! and the enums fields only return are named on the `scalars` and `enums`
//! lines.
//!
//! Like GitHub, a document asking for a field its type does not have fails
//! as a whole: `{"errors": [...]}` with no `data`, each error carrying
//! `extensions.code`, `locations` and a `path` that starts with the
//! operation (`"query Name"`) or fragment (`"fragment Name"`). Arguments
//! and variables are checked as graphql-ruby's static validation rules do
//! (`lib/graphql/static_validation/rules/`: `arguments_are_defined`,
//! `required_arguments_are_present`,
//! `required_input_object_attributes_are_present`,
//! `argument_literals_are_compatible`, `variables_are_used_and_defined`,
//! `variable_usages_are_allowed`, with their `*_error.rb` codes and
//! extensions), in the order its single pass reports them: per field,
//! missing arguments, then each argument (a variable's type, what the value
//! holds, then the literal); variables unused or undeclared at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use graphql_parser::query::{
    Definition, Document, FragmentDefinition, OperationDefinition, Selection, SelectionSet,
    TypeCondition,
};
use serde_json::{json, Value};

use super::inputs::{self, signature, Arg, Lit, Spots};

const TABLE: &str = include_str!("schema.txt");

/// Every type name of the public schema (`scripts/graphql-schema-table`
/// writes it with the table): a name outside it is no type at all.
const NAMES: &str = include_str!("schema-names.txt");

fn names() -> &'static BTreeSet<&'static str> {
    static NAMES_SET: OnceLock<BTreeSet<&'static str>> = OnceLock::new();
    NAMES_SET.get_or_init(|| NAMES.split_whitespace().collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Interface,
    Union,
    Scalar,
    Enum,
    InputObject,
}

impl Kind {
    fn introspection(self) -> &'static str {
        match self {
            Kind::Object => "OBJECT",
            Kind::Interface => "INTERFACE",
            Kind::Union => "UNION",
            Kind::Scalar => "SCALAR",
            Kind::Enum => "ENUM",
            Kind::InputObject => "INPUT_OBJECT",
        }
    }
}

/// An argument of a field, or a field of an input object.
#[derive(Debug)]
pub(crate) struct ArgDef {
    pub name: &'static str,
    /// As written in the schema: `[IssueState!]`.
    pub ty: &'static str,
    /// Has a default value (which the table does not record).
    pub default: bool,
}

impl ArgDef {
    /// Non-null without a default: GitHub refuses a document leaving it out.
    pub(crate) fn required(&self) -> bool {
        self.ty.ends_with('!') && !self.default
    }
}

#[derive(Debug)]
pub(crate) struct FieldDef {
    pub name: &'static str,
    /// As written in the schema: `[Label!]!`.
    pub ty: &'static str,
    /// Takes `first`/`last`: a connection GitHub paginates.
    pub paginated: bool,
    /// In the schema's (alphabetical) order, the connection's four included.
    pub args: Vec<ArgDef>,
}

impl FieldDef {
    /// The named type under list and non-null wrappers.
    pub(crate) fn base(&self) -> &'static str {
        base(self.ty)
    }
}

/// The named type under list and non-null wrappers.
pub(crate) fn base(ty: &str) -> &str {
    ty.trim_matches(|c| c == '[' || c == ']' || c == '!')
}

#[derive(Debug)]
pub(crate) struct TypeDef {
    pub kind: Kind,
    pub fields: Vec<FieldDef>,
    /// An input object's fields.
    pub inputs: Vec<ArgDef>,
    /// An enum's values; empty for an enum the table only names.
    pub values: Vec<&'static str>,
}

#[derive(Debug)]
pub(crate) struct Schema {
    types: BTreeMap<&'static str, TypeDef>,
    /// Every type name the table mentions, described or not: GitHub has
    /// them all, so a variable declared with one is of a real type.
    names: BTreeSet<&'static str>,
}

/// The table, parsed once.
pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| parse(TABLE))
}

/// The arguments every connection (`*` in the table) takes.
const CONNECTION: [(&str, &str); 4] = [
    ("after", "String"),
    ("before", "String"),
    ("first", "Int"),
    ("last", "Int"),
];

/// `name:Type` or `name:Type=` (has a default).
fn arg_def(item: &'static str) -> Option<ArgDef> {
    let (name, ty) = item.split_once(':')?;
    let (ty, default) = match ty.strip_suffix('=') {
        Some(ty) => (ty, true),
        None => (ty, false),
    };
    Some(ArgDef { name, ty, default })
}

/// `name*(a:T,b:U=):Type`: the field, its arguments and its type.
fn field_def(item: &'static str) -> Option<FieldDef> {
    let (head, args, ty) = match item.split_once('(') {
        Some((head, rest)) => {
            let (args, ty) = rest.rsplit_once("):")?;
            (head, args, ty)
        }
        None => {
            let (head, ty) = item.split_once(':')?;
            (head, "", ty)
        }
    };
    let (name, paginated) = match head.strip_suffix('*') {
        Some(name) => (name, true),
        None => (head, false),
    };
    let mut args: Vec<ArgDef> = args.split(',').filter_map(arg_def).collect();
    if paginated {
        args.extend(CONNECTION.iter().map(|(name, ty)| ArgDef {
            name,
            ty,
            default: false,
        }));
        args.sort_by_key(|a| a.name);
    }
    Some(FieldDef {
        name,
        ty,
        paginated,
        args,
    })
}

fn parse(table: &'static str) -> Schema {
    let leaf = |kind| TypeDef {
        kind,
        fields: Vec::new(),
        inputs: Vec::new(),
        values: Vec::new(),
    };
    let mut types = BTreeMap::new();
    let mut names = BTreeSet::new();
    // The type the following items belong to, or the leaf kind a list of
    // names (`scalars`, `enums`) goes on naming.
    let mut current: Result<&'static str, Option<Kind>> = Err(None);
    for line in table.lines() {
        let mut words = line.split_whitespace().filter(|w| *w != "=");
        if !line.starts_with(' ') {
            let Some(head) = words.next() else { continue };
            let kind = match head {
                "object" => Kind::Object,
                "interface" => Kind::Interface,
                "union" => Kind::Union,
                "input" => Kind::InputObject,
                "enum" => Kind::Enum,
                "scalars" | "enums" => {
                    let kind = if head == "scalars" {
                        Kind::Scalar
                    } else {
                        Kind::Enum
                    };
                    current = Err(Some(kind));
                    for name in words.by_ref() {
                        types.insert(name, leaf(kind));
                    }
                    continue;
                }
                _ => {
                    current = Err(None);
                    continue;
                }
            };
            let Some(name) = words.next() else { continue };
            types.insert(name, leaf(kind));
            current = Ok(name);
        }
        for item in words {
            match current {
                Err(None) => {}
                Err(Some(kind)) => {
                    types.insert(item, leaf(kind));
                }
                Ok(name) => {
                    let Some(def) = types.get_mut(name) else {
                        continue;
                    };
                    let def: &mut TypeDef = def;
                    match def.kind {
                        Kind::Object | Kind::Interface => {
                            if let Some(field) = field_def(item) {
                                names.insert(base(field.ty));
                                names.extend(field.args.iter().map(|a| base(a.ty)));
                                def.fields.push(field);
                            }
                        }
                        Kind::InputObject => {
                            if let Some(arg) = arg_def(item) {
                                names.insert(base(arg.ty));
                                def.inputs.push(arg);
                            }
                        }
                        Kind::Enum => def.values.push(item),
                        Kind::Union => {
                            names.insert(item);
                        }
                        Kind::Scalar => {}
                    }
                }
            }
        }
    }
    names.extend(types.keys());
    Schema { types, names }
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

    /// Whether the table names the type at all (described or not).
    pub(crate) fn knows(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// `__type(name:)`'s answer: name, kind, fields with their arguments
    /// and types, input fields, enum values; null for a type the table
    /// does not describe.
    pub(crate) fn introspect(&self, name: &str) -> Value {
        let Some(def) = self.types.get(name) else {
            return Value::Null;
        };
        let input = |a: &ArgDef| json!({"name": a.name, "type": self.type_ref(a.ty)});
        let fields: Vec<Value> = def
            .fields
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "type": self.type_ref(f.ty),
                    "isDeprecated": false,
                    "deprecationReason": null,
                    "args": f.args.iter().map(input).collect::<Vec<_>>(),
                })
            })
            .collect();
        let has_fields = matches!(def.kind, Kind::Object | Kind::Interface);
        let inputs: Vec<Value> = def.inputs.iter().map(input).collect();
        let values: Vec<Value> = def
            .values
            .iter()
            .map(|v| json!({"name": v, "isDeprecated": false, "deprecationReason": null}))
            .collect();
        json!({
            "__typename": "__Type",
            "name": name,
            "kind": def.kind.introspection(),
            "description": null,
            "fields": if has_fields { Value::Array(fields) } else { Value::Null },
            "inputFields": if def.kind == Kind::InputObject { Value::Array(inputs) } else { Value::Null },
            "enumValues": if def.kind == Kind::Enum { Value::Array(values) } else { Value::Null },
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

/// Check every operation and fragment of `document` (parsed from
/// `source`); GitHub's errors, empty when it may run.
pub(crate) fn validate<'d>(source: &str, document: &'d Document<'d, String>) -> Vec<Value> {
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
        spots: Spots::new(source),
        errors: Vec::new(),
        spread_missing: BTreeSet::new(),
        contexts: Vec::new(),
        declared: BTreeMap::new(),
    };
    for definition in &document.definitions {
        match definition {
            Definition::Operation(op) => {
                let (root, word, name, vars, position, set) = match op {
                    OperationDefinition::SelectionSet(set) => {
                        ("Query", "query", None, &[][..], set.span.0, set)
                    }
                    OperationDefinition::Query(q) => (
                        "Query",
                        "query",
                        q.name.as_deref(),
                        &q.variable_definitions[..],
                        q.position,
                        &q.selection_set,
                    ),
                    OperationDefinition::Mutation(m) => (
                        "Mutation",
                        "mutation",
                        m.name.as_deref(),
                        &m.variable_definitions[..],
                        m.position,
                        &m.selection_set,
                    ),
                    // Refused later as unsupported.
                    OperationDefinition::Subscription(_) => continue,
                };
                let head = match name {
                    Some(name) => format!("{word} {name}"),
                    None => word.to_owned(),
                };
                let path = vec![Value::String(head)];
                // graphql-ruby names an unnamed operation "anonymous query".
                let label = name.map_or_else(|| format!("anonymous {word}"), str::to_owned);
                let mut context = Context::new(label, true);
                v.declared.clear();
                for d in vars {
                    // graphql-ruby's VariablesAreInputTypes: a type the
                    // schema does not have.
                    let ty = signature(&d.var_type);
                    let named = base(&ty).to_owned();
                    if !known_elsewhere(&named) {
                        v.push(
                            format!("{named} isn't a defined input type (on ${})", d.name),
                            "variableRequiresValidType",
                            d.position,
                            &path,
                            json!({"typeName": named, "variableName": d.name}),
                        );
                    }
                    let usage = context.usage(&d.name);
                    usage.declared = Some(position);
                    usage.path = path.clone();
                    v.declared.insert(
                        d.name.clone(),
                        (signature(&d.var_type), d.default_value.is_some()),
                    );
                }
                v.contexts.push(context);
                v.set(Some(root), set, &mut path.clone());
            }
            Definition::Fragment(f) => {
                let TypeCondition::On(on) = &f.type_condition;
                let mut path = vec![Value::String(format!("fragment {}", f.name))];
                v.contexts.push(Context::new(f.name.clone(), false));
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
                let on = v.schema.get(on).map(|_| on.as_str());
                v.set(on, &f.selection_set, &mut path);
            }
        }
    }
    v.variables_used_and_defined();
    v.errors
}

/// Type names GitHub has that the table does not describe are accepted as
/// fragment conditions (their selections go unchecked); only the
/// describable ones are refused when misspelt. A name is treated as known
/// elsewhere if it looks like a GitHub type (capitalised), since the full
/// list of types is not carried.
fn known_elsewhere(name: &str) -> bool {
    names().contains(name)
}

/// The variables an operation or fragment declares and uses, in the order
/// graphql-ruby keeps them (declarations first, then first uses); a name
/// used again keeps its last use.
struct Context {
    label: String,
    operation: bool,
    usages: Vec<(String, Usage)>,
    spreads: Vec<String>,
}

#[derive(Clone, Default)]
struct Usage {
    /// Where the declaring operation is.
    declared: Option<graphql_parser::Pos>,
    /// The operation or fragment using it (its label), and where.
    used_by: Option<String>,
    at: Option<graphql_parser::Pos>,
    path: Vec<Value>,
}

impl Context {
    fn new(label: String, operation: bool) -> Self {
        Context {
            label,
            operation,
            usages: Vec::new(),
            spreads: Vec::new(),
        }
    }

    fn usage(&mut self, name: &str) -> &mut Usage {
        let i = match self.usages.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.usages.push((name.to_owned(), Usage::default()));
                self.usages.len() - 1
            }
        };
        &mut self.usages[i].1
    }
}

/// What takes arguments: a field, a directive, or an input object (its
/// fields are checked as arguments).
struct Owner<'a> {
    /// `Field`, `Directive` or `InputObject`, as graphql-ruby names it.
    kind: &'static str,
    /// The field's alias or name, the directive's name, the input type.
    name: &'a str,
    /// Where literal errors point: the field, directive or `{`.
    at: graphql_parser::Pos,
}

/// `@include(if:)` and `@skip(if:)`, the directives GitHub's documents use.
const DIRECTIVE_IF: [ArgDef; 1] = [ArgDef {
    name: "if",
    ty: "Boolean!",
    default: false,
}];

struct Validator<'s, 'd> {
    schema: &'s Schema,
    fragments: &'s BTreeMap<&'d str, &'d FragmentDefinition<'d, String>>,
    spots: Spots<'s>,
    errors: Vec<Value>,
    spread_missing: BTreeSet<String>,
    contexts: Vec<Context>,
    /// The variables of the operation last begun, with their types and
    /// whether they have defaults; graphql-ruby checks fragments that
    /// follow it against the same declarations.
    declared: BTreeMap<String, (String, bool)>,
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

    /// The selections of `set` on type `ty`; `None` for a type the table
    /// does not describe, whose selections are walked only for the
    /// variables they use.
    fn set(&mut self, ty: Option<&str>, set: &'d SelectionSet<'d, String>, path: &mut Vec<Value>) {
        for selection in &set.items {
            match selection {
                Selection::Field(field) => self.field(ty, field, path),
                Selection::InlineFragment(fragment) => {
                    let on = match &fragment.type_condition {
                        Some(TypeCondition::On(on)) => Some(on.as_str()),
                        None => ty,
                    };
                    let label = match &fragment.type_condition {
                        Some(TypeCondition::On(on)) => format!("... on {on}"),
                        None => "...".to_owned(),
                    };
                    path.push(Value::String(label));
                    self.directives(&fragment.directives, path);
                    match on {
                        Some(on) if self.schema.get(on).is_some() => {
                            self.set(Some(on), &fragment.selection_set, path)
                        }
                        Some(on) if !known_elsewhere(on) => self.push(
                            format!("No such type {on}, so it can't be a fragment condition"),
                            "undefinedType",
                            fragment.position,
                            path,
                            json!({"typeName": on}),
                        ),
                        _ => self.set(None, &fragment.selection_set, path),
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
                    if let Some(context) = self.contexts.last_mut() {
                        context.spreads.push(name.to_owned());
                    }
                    path.push(Value::String(format!("... {name}")));
                    self.directives(&spread.directives, path);
                    path.pop();
                    // A defined fragment is checked once, on its own type.
                }
            }
        }
    }

    fn field(
        &mut self,
        ty: Option<&str>,
        field: &'d graphql_parser::query::Field<'d, String>,
        path: &mut Vec<Value>,
    ) {
        let name = field.name.as_str();
        let shown = field.alias.as_deref().unwrap_or(name);
        path.push(Value::String(shown.to_owned()));
        let found = match (ty, name) {
            (_, "__typename") => Ok(None),
            // Introspection: answered from the table itself, unchecked.
            (Some("Query"), "__type" | "__schema") | (None, _) => Ok(None),
            (Some(ty), _) => self.schema.field(ty, name),
        };
        match found {
            Err(()) => {
                let ty = ty.unwrap_or_default();
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
                // graphql-ruby goes no further into an undefined field: its
                // arguments are not checked and its variables not used.
                self.push(
                    message,
                    code,
                    field.position,
                    path,
                    json!({"typeName": ty, "fieldName": name}),
                );
            }
            Ok(None) => {
                for arg in self.spots.arguments(field.position) {
                    self.argument_unchecked(&arg, path);
                }
                self.directives(&field.directives, path);
                self.set(None, &field.selection_set, path);
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
                }
                let args = self.spots.arguments(field.position);
                self.required("Field", name, field.position, &def.args, &args, path);
                let owner = Owner {
                    kind: "Field",
                    name: shown,
                    at: field.position,
                };
                for arg in &args {
                    self.argument(&owner, &def.args, arg, path);
                }
                self.directives(&field.directives, path);
                if has_selections && !leaf {
                    let described = self.schema.get(base).map(|_| base);
                    self.set(described, &field.selection_set, path);
                }
            }
        }
        path.pop();
    }

    /// `@include`/`@skip` take `if: Boolean!`; other directives' arguments
    /// are only walked for the variables they use.
    fn directives(
        &mut self,
        directives: &'d [graphql_parser::query::Directive<'d, String>],
        path: &mut Vec<Value>,
    ) {
        for directive in directives {
            let args = self.spots.arguments(directive.position);
            if matches!(directive.name.as_str(), "include" | "skip") {
                self.required(
                    "Directive",
                    &directive.name,
                    directive.position,
                    &DIRECTIVE_IF,
                    &args,
                    path,
                );
                let owner = Owner {
                    kind: "Directive",
                    name: &directive.name,
                    at: directive.position,
                };
                for arg in &args {
                    self.argument(&owner, &DIRECTIVE_IF, arg, path);
                }
            } else {
                for arg in &args {
                    self.argument_unchecked(arg, path);
                }
            }
        }
    }

    /// graphql-ruby's required_arguments_are_present: the non-null
    /// arguments without defaults `args` leaves out, named in the schema's
    /// order (the field's name, not its alias).
    fn required(
        &mut self,
        class: &str,
        name: &str,
        at: graphql_parser::Pos,
        defs: &[ArgDef],
        args: &[Arg],
        path: &[Value],
    ) {
        let missing: Vec<&str> = defs
            .iter()
            .filter(|d| d.required() && !args.iter().any(|a| a.name == d.name))
            .map(|d| d.name)
            .collect();
        if missing.is_empty() {
            return;
        }
        let list = missing.join(", ");
        self.push(
            format!("{class} '{name}' is missing required arguments: {list}"),
            "missingRequiredArguments",
            at,
            path,
            json!({"className": class, "name": name, "arguments": list}),
        );
    }

    /// One argument (or input object field) of `owner`, whose arguments are
    /// `defs`: unknown (graphql-ruby's arguments_are_defined, which then
    /// looks no further inside), then what its value holds, then whether a
    /// literal fits (argument_literals_are_compatible, only when nothing
    /// inside it was refused already).
    fn argument(&mut self, owner: &Owner<'_>, defs: &[ArgDef], arg: &Arg, path: &mut Vec<Value>) {
        path.push(Value::String(arg.name.clone()));
        let Some(def) = defs.iter().find(|d| d.name == arg.name) else {
            self.push(
                format!(
                    "{} '{}' doesn't accept argument '{}'",
                    owner.kind, owner.name, arg.name
                ),
                "argumentNotAccepted",
                arg.pos,
                path,
                json!({"name": owner.name, "typeName": owner.kind, "argumentName": arg.name}),
            );
            path.pop();
            return;
        };
        // variable_usages_are_allowed: a variable as the value, or as an
        // item of a list written as the value.
        let direct: Vec<&Lit> = match &arg.value {
            Lit::List(items) => items.iter().collect(),
            one => vec![one],
        };
        for lit in direct {
            if let Lit::Var(var, _) = lit {
                self.variable_fits(var, def, arg, path);
            }
        }
        self.value(def.ty, &arg.value, path);
        let refused_inside = self.errors.iter().any(|e| {
            e["path"]
                .as_array()
                .is_some_and(|p| p.len() >= path.len() && p[..path.len()] == path[..])
        });
        if !matches!(arg.value, Lit::Var(..))
            && !refused_inside
            && !self.schema.literal_fits(&arg.value, def.ty)
        {
            self.push(
                format!(
                    "Argument '{}' on {} '{}' has an invalid value ({}). Expected type '{}'.",
                    arg.name,
                    owner.kind,
                    owner.name,
                    arg.value.print(),
                    def.ty
                ),
                "argumentLiteralsIncompatible",
                owner.at,
                path,
                json!({"typeName": owner.kind, "argumentName": arg.name}),
            );
        }
        path.pop();
    }

    /// An argument of something the table does not describe: only the
    /// variables it uses count.
    fn argument_unchecked(&mut self, arg: &Arg, path: &mut Vec<Value>) {
        path.push(Value::String(arg.name.clone()));
        self.value("", &arg.value, path);
        path.pop();
    }

    /// What a value of type `ty` holds: variables (used here), input
    /// objects (their required fields, then each field as an argument).
    fn value(&mut self, ty: &str, lit: &Lit, path: &mut Vec<Value>) {
        match lit {
            Lit::Var(name, at) => {
                let Some(context) = self.contexts.last_mut() else {
                    return;
                };
                let label = context.label.clone();
                let usage = context.usage(name);
                usage.used_by = Some(label);
                usage.at = Some(*at);
                usage.path = path.clone();
            }
            Lit::List(items) => {
                let item = inputs::item_type(ty);
                for (i, lit) in items.iter().enumerate() {
                    // graphql-ruby names an input object in a list by index.
                    let indexed = matches!(lit, Lit::Object(..)) && inputs::list_typed(ty);
                    if indexed {
                        path.push(json!(i));
                    }
                    self.value(item, lit, path);
                    if indexed {
                        path.pop();
                    }
                }
            }
            Lit::Object(at, fields) => {
                let name = base(ty);
                let input = self
                    .schema
                    .get(name)
                    .filter(|d| d.kind == Kind::InputObject);
                let Some(input) = input else {
                    for field in fields {
                        self.argument_unchecked(field, path);
                    }
                    return;
                };
                // required_input_object_attributes_are_present
                for missing in input
                    .inputs
                    .iter()
                    .filter(|f| f.required() && !fields.iter().any(|g| g.name == f.name))
                {
                    path.push(Value::String(missing.name.to_owned()));
                    self.push(
                        format!(
                            "Argument '{}' on InputObject '{name}' is required. Expected type {}",
                            missing.name, missing.ty
                        ),
                        "missingRequiredInputObjectAttribute",
                        *at,
                        path,
                        json!({"argumentName": missing.name, "argumentType": missing.ty, "inputObjectType": name}),
                    );
                    path.pop();
                }
                let owner = Owner {
                    kind: "InputObject",
                    name,
                    at: *at,
                };
                for field in fields {
                    self.argument(&owner, &input.inputs, field, path);
                }
            }
            _ => {}
        }
    }

    /// variable_usages_are_allowed: the declared type of `$var` against the
    /// argument's, where both are types GitHub has.
    fn variable_fits(&mut self, var: &str, def: &ArgDef, arg: &Arg, path: &[Value]) {
        let Some((declared, has_default)) = self.declared.get(var).cloned() else {
            return;
        };
        if !self.schema.knows(base(&declared)) {
            return;
        }
        let depth = arg.value.list_depth();
        let Some((problem, as_compared)) =
            inputs::usage_mismatch(&declared, has_default, def.ty, def.default, depth)
        else {
            return;
        };
        self.push(
            format!(
                "{problem} on variable ${var} and argument {} ({as_compared} / {})",
                arg.name, def.ty
            ),
            "variableMismatch",
            arg.pos,
            path,
            json!({"variableName": var, "typeName": as_compared, "argumentName": arg.name, "errorMessage": problem}),
        );
    }

    /// variables_are_used_and_defined, once the whole document is read: an
    /// operation uses what it and the fragments it spreads (transitively)
    /// use; per operation, declared but unused ones, then used but
    /// undeclared ones (named by the fragment using them, if one does).
    fn variables_used_and_defined(&mut self) {
        for i in 0..self.contexts.len() {
            if !self.contexts[i].operation {
                continue;
            }
            let mut usages = self.contexts[i].usages.clone();
            let mut visited: Vec<String> = Vec::new();
            let mut pending = self.contexts[i].spreads.clone();
            while let Some(spread) = pending.first().cloned() {
                pending.remove(0);
                if visited.contains(&spread) {
                    continue;
                }
                let Some(fragment) = self
                    .contexts
                    .iter()
                    .find(|c| !c.operation && c.label == spread)
                else {
                    continue;
                };
                visited.push(spread);
                for (name, child) in &fragment.usages {
                    let i = match usages.iter().position(|(n, _)| n == name) {
                        Some(i) => i,
                        None => {
                            usages.push((name.clone(), Usage::default()));
                            usages.len() - 1
                        }
                    };
                    if child.used_by.is_some() {
                        let parent = &mut usages[i].1;
                        parent.used_by = child.used_by.clone();
                        parent.at = child.at;
                        parent.path = child.path.clone();
                    }
                }
                // Depth first, as graphql-ruby follows them.
                let mut next = fragment.spreads.clone();
                next.append(&mut pending);
                pending = next;
            }
            let label = self.contexts[i].label.clone();
            for (name, usage) in &usages {
                if let (Some(at), None) = (usage.declared, &usage.used_by) {
                    self.push(
                        format!("Variable ${name} is declared by {label} but not used"),
                        "variableNotUsed",
                        at,
                        &usage.path,
                        json!({"variableName": name}),
                    );
                }
            }
            for (name, usage) in &usages {
                if let (None, Some(by), Some(at)) = (usage.declared, &usage.used_by, usage.at) {
                    self.push(
                        format!("Variable ${name} is used by {by} but not declared"),
                        "variableNotDefined",
                        at,
                        &usage.path,
                        json!({"variableName": name}),
                    );
                }
            }
        }
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
        validate(
            query,
            &graphql_parser::parse_query::<String>(query).unwrap(),
        )
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

    /// The one error `query` gets: its code and message.
    fn refused(query: &str) -> (Value, Value) {
        let got = errors(query);
        assert_eq!(got.len(), 1, "{query}: {got:#?}");
        (
            got[0]["extensions"]["code"].clone(),
            got[0]["message"].clone(),
        )
    }

    /// A type name the schema does not have, as a fragment's condition or a
    /// variable's type, fails as on GitHub; one it has but the table does
    /// not describe passes (unchecked inside); described newcomers are
    /// checked (`files { nodes { pathh } }`).
    #[test]
    fn type_names_are_the_schemas() {
        assert_eq!(
            refused("{ repository(owner: \"a\", name: \"b\") { ... on Repositoryy { id } } }"),
            (
                json!("undefinedType"),
                json!("No such type Repositoryy, so it can't be a fragment condition")
            )
        );
        let got = errors("query($x: Strng) { repository(owner: \"a\", name: \"b\") { labels(first: 1, query: $x) { totalCount } } }");
        assert!(
            got.iter()
                .any(|e| e["extensions"]["code"] == "variableRequiresValidType"
                    && e["message"] == "Strng isn't a defined input type (on $x)"),
            "{got:#?}"
        );
        // A real type the table does not describe: accepted.
        assert_eq!(
            errors("{ node(id: \"x\") { ... on Discussion { id } } }"),
            Vec::<Value>::new()
        );
        assert_eq!(
            refused("{ repository(owner: \"a\", name: \"b\") { pullRequest(number: 1) { files(first: 1) { nodes { pathh } } } } }"),
            (
                json!("undefinedField"),
                json!("Field 'pathh' doesn't exist on type 'PullRequestChangedFile'")
            )
        );
    }

    #[test]
    fn arguments_are_checked_as_github_checks_them() {
        // Unknown argument: located at the argument, nothing inside checked.
        let got = errors("query Q {\n  repository(owner: \"a\", name: \"b\", nam: 1) { id }\n}");
        assert_eq!(
            got,
            vec![json!({
                "path": ["query Q", "repository", "nam"],
                "extensions": {"code": "argumentNotAccepted", "name": "repository", "typeName": "Field", "argumentName": "nam"},
                "locations": [{"line": 2, "column": 37}],
                "message": "Field 'repository' doesn't accept argument 'nam'",
            })]
        );
        // An alias names the field in the message.
        assert_eq!(
            refused(
                "{ r: repository(owner: \"a\", name: \"b\") { issues(frist: 1) { totalCount } } }"
            ),
            (
                json!("argumentNotAccepted"),
                json!("Field 'issues' doesn't accept argument 'frist'")
            )
        );
        // Missing required: at the field, by name, in the schema's order.
        let got = errors("{ repository(owner: \"a\") { id } }");
        assert_eq!(
            got,
            vec![json!({
                "path": ["query", "repository"],
                "extensions": {"code": "missingRequiredArguments", "className": "Field", "name": "repository", "arguments": "name"},
                "locations": [{"line": 1, "column": 3}],
                "message": "Field 'repository' is missing required arguments: name",
            })]
        );
        assert_eq!(
            refused("{ node { id } }"),
            (
                json!("missingRequiredArguments"),
                json!("Field 'node' is missing required arguments: id")
            )
        );
        assert_eq!(
            refused("mutation { mergePullRequest { clientMutationId } }").1,
            "Field 'mergePullRequest' is missing required arguments: input"
        );
        // Literals of the wrong type: at the field, the argument in the path.
        let got = errors(
            "{ repository(owner: \"a\", name: \"b\") { issues(first: \"x\") { totalCount } } }",
        );
        assert_eq!(
            got,
            vec![json!({
                "path": ["query", "repository", "issues", "first"],
                "extensions": {"code": "argumentLiteralsIncompatible", "typeName": "Field", "argumentName": "first"},
                "locations": [{"line": 1, "column": 39}],
                "message": "Argument 'first' on Field 'issues' has an invalid value (\"x\"). Expected type 'Int'.",
            })]
        );
        for (args, message) in [
            ("states: [OPN]", "Argument 'states' on Field 'issues' has an invalid value ([OPN]). Expected type '[IssueState!]'."),
            ("states: \"OPEN\"", "Argument 'states' on Field 'issues' has an invalid value (\"OPEN\"). Expected type '[IssueState!]'."),
            ("first: 1.5", "Argument 'first' on Field 'issues' has an invalid value (1.5). Expected type 'Int'."),
            ("first: 3000000000", "Argument 'first' on Field 'issues' has an invalid value (3000000000). Expected type 'Int'."),
            ("orderBy: {field: CREATED, direction: DESC}", "Argument 'field' on InputObject 'IssueOrder' has an invalid value (CREATED). Expected type 'IssueOrderField!'."),
            ("orderBy: CREATED_AT", "Argument 'orderBy' on Field 'issues' has an invalid value (CREATED_AT). Expected type 'IssueOrder'."),
        ] {
            let query = format!("{{ repository(owner: \"a\", name: \"b\") {{ issues({args}) {{ totalCount }} }} }}");
            assert_eq!(refused(&query), (json!("argumentLiteralsIncompatible"), json!(message)), "{args}");
        }
        assert_eq!(
            refused("{ repository(owner: null, name: \"b\") { id } }").1,
            "Argument 'owner' on Field 'repository' has an invalid value (null). Expected type 'String!'."
        );
        // Input objects: unknown fields, missing required ones, wrong types.
        let got = errors(
            "mutation { addComment(input: {subjectId: \"I_1\", bdy: \"x\"}) { clientMutationId } }",
        );
        assert_eq!(got.len(), 2, "{got:#?}");
        assert_eq!(
            got[0],
            json!({
                "path": ["mutation", "addComment", "input", "body"],
                "extensions": {"code": "missingRequiredInputObjectAttribute", "argumentName": "body", "argumentType": "String!", "inputObjectType": "AddCommentInput"},
                "locations": [{"line": 1, "column": 30}],
                "message": "Argument 'body' on InputObject 'AddCommentInput' is required. Expected type String!",
            })
        );
        assert_eq!(
            got[1]["message"],
            "InputObject 'AddCommentInput' doesn't accept argument 'bdy'"
        );
        assert_eq!(got[1]["extensions"]["code"], "argumentNotAccepted");
        assert_eq!(
            got[1]["path"],
            json!(["mutation", "addComment", "input", "bdy"])
        );
        assert_eq!(
            refused("mutation { addComment(input: {subjectId: \"I_1\", body: 7}) { clientMutationId } }").1,
            "Argument 'body' on InputObject 'AddCommentInput' has an invalid value (7). Expected type 'String!'."
        );
        assert_eq!(
            refused("mutation { createPullRequest(input: {repositoryId: \"R\", baseRefName: \"main\", headRefName: \"x\", title: \"t\", draft: \"yes\"}) { clientMutationId } }").1,
            "Argument 'draft' on InputObject 'CreatePullRequestInput' has an invalid value (\"yes\"). Expected type 'Boolean'."
        );
        // Directives: `if` is required and a Boolean.
        assert_eq!(
            refused("{ viewer { login @include } }").1,
            "Directive 'include' is missing required arguments: if"
        );
        // Positive controls: defaults, single items for lists, IDs as ints.
        for query in [
            "{ repository(owner: \"a\", name: \"b\") { issues(first: 1, states: OPEN, orderBy: {field: CREATED_AT, direction: ASC}, filterBy: {since: \"2024-01-01T00:00:00Z\", states: [OPEN, CLOSED]}) { totalCount } } }",
            "{ node(id: 12) { id } rateLimit { remaining } }",
            "mutation { requestReviews(input: {pullRequestId: \"PR_1\", userIds: [\"U_1\"], union: true}) { clientMutationId } }",
            "mutation { mergePullRequest(input: {anything: [1, {x: 2}]}) { clientMutationId } }",
            "{ viewer { login @include(if: true) @skip(if: false) } }",
        ] {
            assert_eq!(errors(query), Vec::<Value>::new(), "{query}");
        }
    }

    #[test]
    fn variables_are_declared_used_and_of_the_arguments_types() {
        // Used, not declared: at the use, named by the operation.
        let got = errors("query Q {\n  repository(owner: $o, name: \"b\") { id }\n}");
        assert_eq!(
            got,
            vec![json!({
                "path": ["query Q", "repository", "owner"],
                "extensions": {"code": "variableNotDefined", "variableName": "o"},
                "locations": [{"line": 2, "column": 21}],
                "message": "Variable $o is used by Q but not declared",
            })]
        );
        // In a fragment: named by the fragment, once per operation.
        assert_eq!(
            refused("query Q { ...F } fragment F on Query { repository(owner: $o, name: \"b\") { id } }").1,
            "Variable $o is used by F but not declared"
        );
        // Declared, not used: at the operation.
        let got = errors("query Q($n: Int) { viewer { login } }");
        assert_eq!(
            got,
            vec![json!({
                "path": ["query Q"],
                "extensions": {"code": "variableNotUsed", "variableName": "n"},
                "locations": [{"line": 1, "column": 1}],
                "message": "Variable $n is declared by Q but not used",
            })]
        );
        assert_eq!(
            refused("query($n: Int) { viewer { login } }").1,
            "Variable $n is declared by anonymous query but not used"
        );
        // Used only inside an unknown field: graphql-ruby never reaches it.
        let got = errors("query Q($n: Int) { viewer { nope(x: $n) } }");
        assert_eq!(
            got.iter()
                .map(|e| e["extensions"]["code"].clone())
                .collect::<Vec<_>>(),
            vec![json!("undefinedField"), json!("variableNotUsed")]
        );
        // Types: at the argument.
        let got = errors("query Q($o: String) {\n  repository(owner: $o, name: \"b\") { id }\n}");
        assert_eq!(
            got,
            vec![json!({
                "path": ["query Q", "repository", "owner"],
                "extensions": {"code": "variableMismatch", "variableName": "o", "typeName": "String", "argumentName": "owner", "errorMessage": "Nullability mismatch"},
                "locations": [{"line": 2, "column": 14}],
                "message": "Nullability mismatch on variable $o and argument owner (String / String!)",
            })]
        );
        for (query, message) in [
            ("query Q($o: Int!) { repository(owner: $o, name: \"b\") { id } }", "Type mismatch on variable $o and argument owner (Int! / String!)"),
            ("query Q($s: [IssueState]) { repository(owner: \"a\", name: \"b\") { issues(states: $s) { totalCount } } }", "Nullability mismatch on variable $s and argument states ([IssueState] / [IssueState!])"),
            ("query Q($s: IssueState) { repository(owner: \"a\", name: \"b\") { issues(states: [$s]) { totalCount } } }", "Nullability mismatch on variable $s and argument states ([IssueState]! / [IssueState!])"),
            ("query Q($s: [[IssueState!]]) { repository(owner: \"a\", name: \"b\") { issues(states: $s) { totalCount } } }", "List dimension mismatch on variable $s and argument states ([[IssueState!]] / [IssueState!])"),
            ("mutation M($i: AddCommentInput) { addComment(input: $i) { clientMutationId } }", "Nullability mismatch on variable $i and argument input (AddCommentInput / AddCommentInput!)"),
            ("mutation M($b: Int!) { addComment(input: {subjectId: \"I\", body: $b}) { clientMutationId } }", "Type mismatch on variable $b and argument body (Int! / String!)"),
            ("query Q($b: Boolean) { viewer { login @include(if: $b) } }", "Nullability mismatch on variable $b and argument if (Boolean / Boolean!)"),
        ] {
            assert_eq!(refused(query), (json!("variableMismatch"), json!(message)), "{query}");
        }
        // Positive controls: a default makes a nullable variable non-null;
        // a non-null variable fits a nullable argument; a variable of a
        // type the table does not know is not judged.
        for query in [
            "query Q($o: String = \"a\") { repository(owner: $o, name: \"b\") { id } }",
            "query Q($n: Int!, $s: IssueState!) { repository(owner: \"a\", name: \"b\") { issues(first: $n, states: [$s]) { totalCount } } }",
            "query Q($s: [IssueState!]!) { repository(owner: \"a\", name: \"b\") { issues(states: $s) { totalCount } } }",
            "mutation M($i: MergePullRequestInput!) { mergePullRequest(input: $i) { clientMutationId } }",
            "query Q($x: SomethingElse) { viewer { status { anything(x: $x) } } }",
            "query Q($b: Boolean!) { viewer { login @skip(if: $b) } }",
            "query Q($n: String!) { Issue: __type(name: $n) { name } }",
        ] {
            let got = errors(query);
            let codes: Vec<Value> = got.iter().map(|e| e["extensions"]["code"].clone()).collect();
            assert!(!codes.contains(&json!("variableMismatch")) && !codes.contains(&json!("variableNotUsed")), "{query}: {got:#?}");
        }
    }

    #[test]
    fn gatehouses_own_documents_are_valid() {
        // The documents gatehouse's tests and benches send through the
        // proxy to the emulator (tests/worker_speech.rs, proxy_negative.rs,
        // proxy_audit.rs, proxy_bypass.rs, proxy_cost.rs,
        // proxy_github_app.rs, proxy/benches/rules.rs); the router and
        // proxy send none of their own.
        for query in [
            "mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { id url } } }",
            "mutation CommentCreate($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { url } } } }",
            "mutation PullRequestCreateRequestReviews($input: RequestReviewsInput!) { requestReviews(input: $input) { clientMutationId } }",
            "query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { id name } }",
            "mutation Anything($input: AddCommentInput!) { ...Say } fragment Say on Mutation { said: addComment(input: $input) { commentEdge { node { databaseId url } } } }",
            "mutation CommentCreate($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }",
            "query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { ...repo } } fragment repo on Repository { id name }",
            "{ repository(owner: \"acme\", name: \"widgets\") { id } }",
            "#cccc\nquery { repository(owner: \"acme\", name: \"widgets\") { issue(number: 1) { title } } }",
            "{ repository(owner: \"acme\", name: \"widgets\") { issue(number: 1) { title } } }",
            "{ repository(owner: \"acme\", name: \"widgets\") { pullRequests(first: 1) { totalCount } } }",
            "query RepositoryInfo($owner: String!, $name: String!) { repository(owner: $owner, name: $name) { id name description defaultBranchRef { name } } }",
        ] {
            assert_eq!(errors(query), Vec::<Value>::new(), "{query}");
        }
    }

    #[test]
    fn positions_are_counted_as_graphql_parser_counts_them() {
        // A tab is 8 columns, `\r` none, a comment ends its line.
        let got =
            errors("query Q {\r\n\trepository(owner: \"é\", # x\n name: \"b\", nam: 1) { id }\n}");
        assert_eq!(
            got[0]["locations"],
            json!([{"line": 3, "column": 13}]),
            "{got:#?}"
        );
        let got = errors("{ viewer { login } }\n{ repository(owner: \"\"\"a\nb\"\"\", name: \"b\", x: 1) { id } }");
        assert_eq!(
            got.iter()
                .map(|e| e["locations"].clone())
                .collect::<Vec<_>>(),
            vec![json!([{"line": 3, "column": 18}])]
        );
        // Every field and directive graphql-parser places starts a token.
        let source = "query Q($a: Int) {\r\n\tviewer { login @include(if: true) }\n  # é\n  a: repository(owner: \"ü\\\"\", name: \"\"\"x\n\n y\"\"\") {\tissues(first: $a) { totalCount } }\n}";
        let document = graphql_parser::parse_query::<String>(source).unwrap();
        let spots = Spots::new(source);
        let mut seen = 0;
        fn walk(set: &SelectionSet<'_, String>, spots: &Spots<'_>, seen: &mut usize) {
            for item in &set.items {
                if let Selection::Field(f) = item {
                    assert!(
                        spots.starts_token(f.position),
                        "{} at {}",
                        f.name,
                        f.position
                    );
                    for d in &f.directives {
                        assert!(
                            spots.starts_token(d.position),
                            "@{} at {}",
                            d.name,
                            d.position
                        );
                    }
                    *seen += 1;
                    walk(&f.selection_set, spots, seen);
                }
            }
        }
        for definition in &document.definitions {
            if let Definition::Operation(OperationDefinition::Query(q)) = definition {
                walk(&q.selection_set, &spots, &mut seen);
            }
        }
        assert_eq!(seen, 5);
        assert_eq!(
            errors(source),
            Vec::<Value>::new(),
            "the arguments were read back"
        );
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
