//! Argument values as the document writes them, and the checks on input
//! values that GitHub's graphql-ruby runs: literals against the argument's
//! type, variable types against the argument's, and a request's variable
//! values against their declared types.
//!
//! `graphql-parser` keeps no positions for arguments and sorts input
//! object fields, but GitHub's errors point at the argument and follow the
//! document's order; so the arguments of a field or directive are read
//! again from the source, from the position the parser gave it, with a
//! tokenizer that counts lines and columns as `graphql-parser` does.
//!
//! Facts used (graphql-ruby, `lib/graphql/static_validation/literal_validator.rb`,
//! `lib/graphql/schema/{non_null,list,enum,input_object,scalar}.rb`,
//! `lib/graphql/query/{variables,variable_validation_error}.rb`): a list
//! type takes a single item as a one-item list; `Int` takes 32-bit
//! integers, `Float` integers or floats, `ID` strings or integers; an enum
//! only an enum literal (a string for a variable) among its values; an
//! input object its fields, required ones (non-null without a default)
//! present; problems read "Expected value to not be null", "Could not
//! coerce value V to T", "Expected V to be one of: A, B", "Field is not
//! defined on T" and "Expected V to be a key-value object.".

use graphql_parser::query::{Type, VariableDefinition};
use graphql_parser::Pos;
use serde_json::{json, Map, Value};

use super::schema::{base, Kind, Schema};

/// An argument or input object field as written.
#[derive(Debug, Clone)]
pub(crate) struct Arg {
    pub name: String,
    pub pos: Pos,
    pub value: Lit,
}

/// A value as written, with the positions errors name.
#[derive(Debug, Clone)]
pub(crate) enum Lit {
    Var(String, Pos),
    Int(String),
    Float(String),
    Str(String),
    Bool(bool),
    Null,
    Enum(String),
    List(Vec<Lit>),
    Object(Pos, Vec<Arg>),
}

impl Lit {
    /// As graphql-ruby prints a value in its messages: `"x"`, `[A, B]`,
    /// `{field: CREATED_AT, direction: DESC}`, `$x`.
    pub(crate) fn print(&self) -> String {
        match self {
            Lit::Var(name, _) => format!("${name}"),
            Lit::Int(s) | Lit::Float(s) | Lit::Enum(s) => s.clone(),
            Lit::Str(s) => Value::String(s.clone()).to_string(),
            Lit::Bool(b) => b.to_string(),
            Lit::Null => "null".to_owned(),
            Lit::List(items) => format!(
                "[{}]",
                items.iter().map(Lit::print).collect::<Vec<_>>().join(", ")
            ),
            Lit::Object(_, fields) => format!(
                "{{{}}}",
                fields
                    .iter()
                    .map(|f| format!("{}: {}", f.name, f.value.print()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// How deep lists nest in the value (graphql-ruby wraps a variable
    /// written inside a list by that many list levels before comparing).
    pub(crate) fn list_depth(&self) -> usize {
        match self {
            Lit::List(items) => 1 + items.iter().map(Lit::list_depth).max().unwrap_or(0),
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    Punct,
    Name,
    Int,
    Float,
    Str,
    Block,
}

/// The document's tokens with `graphql-parser`'s positions.
pub(crate) struct Spots<'s> {
    tokens: Vec<(Tok, &'s str, Pos)>,
}

impl<'s> Spots<'s> {
    /// Tokenize an already parsed document; counts as `graphql-parser`'s
    /// tokenizer does (a tab is 8 columns, `\r` and a BOM none, a string's
    /// characters one each).
    pub(crate) fn new(source: &'s str) -> Self {
        let mut tokens = Vec::new();
        let (mut line, mut column) = (1, 1);
        let mut off = 0;
        while off < source.len() {
            let rest = &source[off..];
            let c = rest.chars().next().unwrap_or(' ');
            let pos = Pos { line, column };
            let len = match c {
                '\u{feff}' | '\r' => {
                    off += c.len_utf8();
                    continue;
                }
                '\t' => {
                    column += 8;
                    off += 1;
                    continue;
                }
                '\n' => {
                    line += 1;
                    column = 1;
                    off += 1;
                    continue;
                }
                ' ' | ',' => {
                    column += 1;
                    off += 1;
                    continue;
                }
                '#' => {
                    let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
                    off += end;
                    if end < rest.len() {
                        line += 1;
                        column = 1;
                        off += 1;
                    }
                    continue;
                }
                '.' if rest.starts_with("...") => {
                    tokens.push((Tok::Punct, &rest[..3], pos));
                    3
                }
                '_' | 'a'..='z' | 'A'..='Z' => {
                    let n = rest
                        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
                        .unwrap_or(rest.len());
                    tokens.push((Tok::Name, &rest[..n], pos));
                    n
                }
                '-' | '0'..='9' => {
                    let n = rest
                        .find(|c: char| " \n\r\t,#!$:=@|&()[]{}".contains(c))
                        .unwrap_or(rest.len());
                    let text = &rest[..n];
                    let kind = if text.contains(['.', 'e', 'E']) {
                        Tok::Float
                    } else {
                        Tok::Int
                    };
                    tokens.push((kind, text, pos));
                    n
                }
                '"' if rest.starts_with("\"\"\"") => {
                    let tail = &rest[3..];
                    let end = tail
                        .match_indices("\"\"\"")
                        .find(|(i, _)| !tail[..*i].ends_with('\\'))
                        .map_or(tail.len(), |(i, _)| i + 6);
                    let text = &rest[..end.min(rest.len())];
                    tokens.push((Tok::Block, text, pos));
                    let lines = text.matches('\n').count();
                    if lines > 0 {
                        line += lines;
                        column = text[text.rfind('\n').unwrap_or(0) + 1..].chars().count() + 1;
                    } else {
                        column += text.chars().count();
                    }
                    off += text.len();
                    continue;
                }
                '"' => {
                    let mut escaped = false;
                    let mut end = rest.len();
                    for (i, ch) in rest.char_indices().skip(1) {
                        if ch == '"' && !escaped {
                            end = i + 1;
                            break;
                        }
                        escaped = !escaped && ch == '\\';
                    }
                    let text = &rest[..end];
                    tokens.push((Tok::Str, text, pos));
                    column += text.chars().count();
                    off += end;
                    continue;
                }
                _ => {
                    // `!$:=@|&()[]{}`, or what the parser would have refused.
                    tokens.push((Tok::Punct, &rest[..c.len_utf8()], pos));
                    c.len_utf8()
                }
            };
            column += len;
            off += len;
        }
        Spots { tokens }
    }

    /// The arguments of the field (at its alias or name) or directive (at
    /// its `@`) that starts at `pos`, in the document's order.
    pub(crate) fn arguments(&self, pos: Pos) -> Vec<Arg> {
        let key = |p: &Pos| (p.line, p.column);
        let Ok(mut i) = self
            .tokens
            .binary_search_by_key(&key(&pos), |(_, _, p)| key(p))
        else {
            return Vec::new();
        };
        if self.text(i) == "@" {
            i += 1;
        }
        i += 1;
        if self.text(i) == ":" {
            i += 2;
        }
        if self.text(i) != "(" {
            return Vec::new();
        }
        let mut i = i + 1;
        self.fields(&mut i, ")")
    }

    #[cfg(test)]
    pub(crate) fn starts_token(&self, pos: Pos) -> bool {
        self.tokens.iter().any(|t| t.2 == pos)
    }

    fn text(&self, i: usize) -> &'s str {
        self.tokens.get(i).map_or("", |t| t.1)
    }

    fn fields(&self, i: &mut usize, close: &str) -> Vec<Arg> {
        let mut out = Vec::new();
        while *i < self.tokens.len() && self.text(*i) != close {
            let (_, name, pos) = self.tokens[*i];
            *i += 2; // the name and `:`
            let value = self.value(i);
            out.push(Arg {
                name: name.to_owned(),
                pos,
                value,
            });
        }
        *i += 1;
        out
    }

    fn value(&self, i: &mut usize) -> Lit {
        let Some(&(kind, text, pos)) = self.tokens.get(*i) else {
            return Lit::Null;
        };
        *i += 1;
        match (kind, text) {
            (Tok::Punct, "$") => {
                let name = self.text(*i).to_owned();
                *i += 1;
                Lit::Var(name, pos)
            }
            (Tok::Punct, "[") => {
                let mut items = Vec::new();
                while *i < self.tokens.len() && self.text(*i) != "]" {
                    items.push(self.value(i));
                }
                *i += 1;
                Lit::List(items)
            }
            (Tok::Punct, "{") => Lit::Object(pos, self.fields(i, "}")),
            (Tok::Int, _) => Lit::Int(text.to_owned()),
            (Tok::Float, _) => Lit::Float(text.to_owned()),
            (Tok::Str, _) => Lit::Str(
                serde_json::from_str(text).unwrap_or_else(|_| text.trim_matches('"').to_owned()),
            ),
            (Tok::Block, _) => Lit::Str(text[3..text.len().saturating_sub(3)].to_owned()),
            (Tok::Name, "true") => Lit::Bool(true),
            (Tok::Name, "false") => Lit::Bool(false),
            (Tok::Name, "null") => Lit::Null,
            (_, _) => Lit::Enum(text.to_owned()),
        }
    }
}

/// A type as written in a variable definition: `[PullRequestState!]`.
pub(crate) fn signature(ty: &Type<'_, String>) -> String {
    match ty {
        Type::NamedType(name) => name.clone(),
        Type::ListType(inner) => format!("[{}]", signature(inner)),
        Type::NonNullType(inner) => format!("{}!", signature(inner)),
    }
}

/// The type one wrapper in: `[A!]!` → `[A!]` → `A!` → `A`.
fn of_type(ty: &str) -> &str {
    if let Some(inner) = ty.strip_suffix('!') {
        inner
    } else if let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        inner
    } else {
        ty
    }
}

fn is_list(ty: &str) -> bool {
    ty.trim_end_matches('!').starts_with('[')
}

fn list_dimension(ty: &str) -> usize {
    ty.chars().filter(|c| *c == '[').count()
}

/// graphql-ruby's `non_null_levels_match`: wherever the argument is
/// non-null the variable must be too.
fn levels_match(arg: &str, var: &str) -> bool {
    if arg.ends_with('!') && !var.ends_with('!') {
        return false;
    }
    let wraps = |t: &str| t.ends_with('!') || t.starts_with('[');
    if wraps(arg) && wraps(var) {
        let var = if var.ends_with('!') && !arg.ends_with('!') {
            of_type(var)
        } else {
            var
        };
        return levels_match(of_type(arg), of_type(var));
    }
    true
}

/// Whether a variable of type `var` (with a default or not) may be used
/// where the argument of type `arg` (with a default or not) is, written
/// `depth` lists deep: `None`, or the mismatch ("Type mismatch", "List
/// dimension mismatch", "Nullability mismatch") and the variable's type
/// as compared.
pub(crate) fn usage_mismatch(
    var: &str,
    var_default: bool,
    arg: &str,
    arg_default: bool,
    depth: usize,
) -> Option<(&'static str, String)> {
    let mut var = var.to_owned();
    if var_default && !var.ends_with('!') {
        var.push('!');
    }
    // A non-null argument with a default takes a nullable variable
    // (graphql-ruby issue 3793).
    let arg = match arg.strip_suffix('!') {
        Some(inner) if arg_default => inner,
        _ => arg,
    };
    let same_type = base(&var) == base(arg);
    for _ in 0..depth {
        var = format!("[{var}]!");
    }
    let problem = if !same_type {
        "Type mismatch"
    } else if list_dimension(&var) != list_dimension(arg) {
        "List dimension mismatch"
    } else if !levels_match(arg, &var) {
        "Nullability mismatch"
    } else {
        return None;
    };
    Some((problem, var))
}

/// The item type of a list type; a non-list type is its own.
pub(crate) fn item_type(ty: &str) -> &str {
    let ty = ty.strip_suffix('!').unwrap_or(ty);
    if is_list(ty) {
        of_type(ty)
    } else {
        ty
    }
}

/// Whether an argument of type `ty` is a list (its input objects are then
/// named by index in errors' paths).
pub(crate) fn list_typed(ty: &str) -> bool {
    is_list(ty)
}

impl Schema {
    /// graphql-ruby's literal validator: whether `lit` fits `ty`. Types
    /// the table does not describe (input objects of mutations the
    /// emulator does not serve, GitHub's own scalars) take anything.
    pub(crate) fn literal_fits(&self, lit: &Lit, ty: &str) -> bool {
        if let Some(inner) = ty.strip_suffix('!') {
            return !matches!(lit, Lit::Null) && self.literal_fits(lit, inner);
        }
        if matches!(lit, Lit::Null | Lit::Var(..)) {
            return true;
        }
        if is_list(ty) {
            let item = of_type(ty);
            return match lit {
                Lit::List(items) => items.iter().all(|l| self.literal_fits(l, item)),
                one => self.literal_fits(one, item),
            };
        }
        let Some(def) = self.get(ty) else {
            return true;
        };
        match def.kind {
            Kind::Scalar => match (ty, lit) {
                ("Int", Lit::Int(n)) => n.parse::<i32>().is_ok(),
                ("Float", Lit::Int(_) | Lit::Float(_)) => true,
                ("String", Lit::Str(_)) => true,
                ("Boolean", Lit::Bool(_)) => true,
                ("ID", Lit::Str(_) | Lit::Int(_)) => true,
                ("Int" | "Float" | "String" | "Boolean" | "ID", _) => false,
                _ => true,
            },
            Kind::Enum => match lit {
                Lit::Enum(value) => def.values.is_empty() || def.values.contains(&value.as_str()),
                _ => false,
            },
            Kind::InputObject => match lit {
                Lit::Object(_, fields) => {
                    def.inputs
                        .iter()
                        .filter(|f| f.required())
                        .all(|f| fields.iter().any(|g| g.name == f.name))
                        && fields.iter().all(|g| {
                            def.inputs
                                .iter()
                                .find(|f| f.name == g.name)
                                .is_some_and(|f| self.literal_fits(&g.value, f.ty))
                        })
                }
                _ => false,
            },
            Kind::Object | Kind::Interface | Kind::Union => true,
        }
    }

    /// A JSON variable value against `ty`: graphql-ruby's problems, each
    /// `{"path", "explanation"}`, empty when it fits.
    fn value_problems(&self, value: &Value, ty: &str, path: &mut Vec<Value>, out: &mut Vec<Value>) {
        if let Some(inner) = ty.strip_suffix('!') {
            if value.is_null() {
                problem(out, path, "Expected value to not be null".to_owned());
                return;
            }
            return self.value_problems(value, inner, path, out);
        }
        if value.is_null() {
            return;
        }
        if is_list(ty) {
            let item = of_type(ty);
            match value {
                Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        path.push(json!(i));
                        self.value_problems(v, item, path, out);
                        path.pop();
                    }
                }
                one => {
                    path.push(json!(0));
                    self.value_problems(one, item, path, out);
                    path.pop();
                }
            }
            return;
        }
        let Some(def) = self.get(ty) else { return };
        match def.kind {
            Kind::Scalar => {
                let fits = match ty {
                    "Int" => value.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                    "Float" => value.is_number(),
                    "String" => value.is_string(),
                    "Boolean" => value.is_boolean(),
                    "ID" => value.is_string() || value.is_i64() || value.is_u64(),
                    _ => true,
                };
                if !fits {
                    problem(
                        out,
                        path,
                        format!("Could not coerce value {} to {ty}", serialize(value)),
                    );
                }
            }
            Kind::Enum => {
                let known = value
                    .as_str()
                    .is_some_and(|v| def.values.is_empty() || def.values.contains(&v));
                if !known {
                    problem(
                        out,
                        path,
                        format!(
                            "Expected {} to be one of: {}",
                            serialize(value),
                            def.values.join(", ")
                        ),
                    );
                }
            }
            Kind::InputObject => {
                let Some(fields) = value.as_object() else {
                    problem(
                        out,
                        path,
                        format!("Expected {value} to be a key-value object."),
                    );
                    return;
                };
                for (name, v) in fields {
                    path.push(json!(name));
                    match def.inputs.iter().find(|f| f.name == name) {
                        None => problem(out, path, format!("Field is not defined on {ty}")),
                        Some(f) => self.value_problems(v, f.ty, path, out),
                    }
                    path.pop();
                }
                for f in def.inputs.iter().filter(|f| f.required()) {
                    if !fields.contains_key(f.name) {
                        path.push(json!(f.name));
                        self.value_problems(&Value::Null, f.ty, path, out);
                        path.pop();
                    }
                }
            }
            Kind::Object | Kind::Interface | Kind::Union => {}
        }
    }

    /// The request's variable values against the chosen operation's
    /// declarations, as GitHub checks them once the document is valid:
    /// one error per variable that does not fit (a required one not
    /// given is `null`), with `extensions.value` and `problems`.
    pub(crate) fn check_variables(
        &self,
        definitions: &[VariableDefinition<'_, String>],
        provided: &Map<String, Value>,
    ) -> Vec<Value> {
        let mut errors = Vec::new();
        for definition in definitions {
            let ty = signature(&definition.var_type);
            if !self.knows(base(&ty)) {
                continue;
            }
            // graphql-ruby checks the value given, `null` when none was,
            // even where the declaration has a default.
            let value = provided
                .get(&definition.name)
                .cloned()
                .unwrap_or(Value::Null);
            let mut problems = Vec::new();
            self.value_problems(&value, &ty, &mut Vec::new(), &mut problems);
            if problems.is_empty() {
                continue;
            }
            let mut message = format!(
                "Variable ${} of type {ty} was provided invalid value",
                definition.name
            );
            let located: Vec<String> = problems
                .iter()
                .filter_map(|p| {
                    let path = p["path"].as_array()?;
                    if path.is_empty() {
                        return None;
                    }
                    let joined: Vec<String> = path
                        .iter()
                        .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_owned))
                        .collect();
                    Some(format!(
                        "{} ({})",
                        joined.join("."),
                        p["explanation"].as_str()?
                    ))
                })
                .collect();
            if !located.is_empty() {
                message = format!("{message} for {}", located.join(", "));
            }
            let at = definition.position;
            errors.push(json!({
                "message": message,
                "locations": [{"line": at.line, "column": at.column}],
                "extensions": {"value": value, "problems": problems},
            }));
        }
        errors
    }
}

fn problem(out: &mut Vec<Value>, path: &[Value], explanation: String) {
    out.push(json!({"path": path, "explanation": explanation}));
}

/// graphql-ruby's `GraphQL::Language.serialize`: objects as `{k:v}`,
/// lists as `[a,b]`, the rest as JSON.
fn serialize(value: &Value) -> String {
    match value {
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{k}:{}", serialize(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(serialize).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}
