//! Path canonicality and path templates.
//!
//! Matching happens on the path exactly as it will be forwarded, so a path
//! that some layer upstream could read differently from us is refused rather
//! than cleaned: dot segments, empty segments, backslashes, percent-encoded
//! `/`, `.`, `\`, `%` or unreserved characters, control characters and
//! anything outside RFC 3986's `pchar` set. What passes [`check_canonical`]
//! means the same thing to us, to GitHub and to any intermediary.
//!
//! A [`PathTemplate`] is anchored at both ends. Its segments hold literals and
//! placeholders:
//!
//! | syntax        | matches                                                         |
//! |---------------|-----------------------------------------------------------------|
//! | `{repo}`      | an identity variable declared by the rule set (ASCII case-insensitive, may span segments, e.g. `owner/repo`) |
//! | `{n}`         | any other name: a decimal number, captured                      |
//! | `{id:seg}`    | one or more characters of a single segment, captured            |
//! | `*`           | exactly one whole segment                                       |
//! | `/**`         | the rest of the path, one or more segments (last only)          |

use std::collections::{BTreeMap, BTreeSet};

/// Identity variables, e.g. `repo = "owner/repo"`, bound per identity.
pub type Vars = BTreeMap<String, String>;

/// Values captured by a template's `{n}` / `{id:seg}` placeholders.
pub type Captures = BTreeMap<String, String>;

/// Why a request path is not canonical.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path is empty or does not start with `/`.
    #[error("the path must start with `/`")]
    NotAbsolute,
    /// A backslash, which some servers read as `/`.
    #[error("backslash at byte {0}")]
    Backslash(usize),
    /// A byte outside RFC 3986 `pchar` (controls, space, non-ASCII, `;`, `#`, `?`, ...).
    #[error("byte 0x{byte:02x} at byte {at} is not allowed in a path")]
    ForbiddenByte { byte: u8, at: usize },
    /// `//` or a trailing `/`.
    #[error("empty path segment (`//` or trailing `/`) at byte {0}")]
    EmptySegment(usize),
    /// A `.` or `..` segment.
    #[error("dot segment `{0}`")]
    DotSegment(&'static str),
    /// `%` not followed by two hex digits.
    #[error("malformed percent-encoding at byte {0}")]
    BadPercent(usize),
    /// A percent-encoded byte that must not be encoded, or must not appear at all.
    #[error("percent-encoded {what} at byte {at}")]
    ForbiddenEncoding { what: &'static str, at: usize },
    /// Percent-encoded bytes that do not decode to UTF-8.
    #[error("percent-encoded bytes in the segment at byte {0} are not valid UTF-8")]
    NonUtf8(usize),
}

/// Most segments in a request path. GitHub's deepest routes (a file's
/// contents) nest a repository path; 128 is far beyond any real one.
pub const MAX_PATH_SEGMENTS: usize = 128;
/// Most bytes in a request path.
pub const MAX_PATH_BYTES: usize = 8 * 1024;
/// Most `&`-separated pairs in a query.
pub const MAX_QUERY_PAIRS: usize = 64;
/// Most bytes in a query.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;

/// Whether a request target is small enough to be decided on: the rule
/// book's work grows with the path's segments and the query's pairs, so
/// both are bounded before any rule is tried. Linear in the target; the
/// error says which bound and what the request had.
pub fn check_budget(path: &str, query: Option<&str>) -> Result<(), String> {
    let segments = path.bytes().filter(|&b| b == b'/').count();
    let pairs = query.map_or(0, |q| q.bytes().filter(|&b| b == b'&').count() + 1);
    let query_bytes = query.map_or(0, str::len);
    let over = [
        ("bytes in the path", path.len(), MAX_PATH_BYTES),
        ("path segments", segments, MAX_PATH_SEGMENTS),
        ("bytes in the query", query_bytes, MAX_QUERY_BYTES),
        ("query pairs", pairs, MAX_QUERY_PAIRS),
    ];
    match over.iter().find(|(_, n, max)| n > max) {
        Some((what, n, max)) => Err(format!(
            "the request target has {n} {what}, more than the {max} the proxy decides on"
        )),
        None => Ok(()),
    }
}

/// Check that `path` (raw, as it will be forwarded, without the query) is
/// canonical, and return it as `&str`.
pub fn check_canonical(path: &[u8]) -> Result<&str, PathError> {
    if path.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    if path == b"/" {
        return Ok("/");
    }
    let mut segment_start = 1;
    for end in (1..=path.len()).filter(|&i| i == path.len() || path[i] == b'/') {
        check_segment(&path[segment_start..end], segment_start)?;
        segment_start = end + 1;
    }
    // Every byte was checked to be ASCII above.
    std::str::from_utf8(path).map_err(|_| PathError::NonUtf8(0))
}

fn check_segment(segment: &[u8], offset: usize) -> Result<(), PathError> {
    match segment {
        b"" => return Err(PathError::EmptySegment(offset)),
        b"." => return Err(PathError::DotSegment(".")),
        b".." => return Err(PathError::DotSegment("..")),
        _ => {}
    }
    let mut has_high = false;
    let mut i = 0;
    while i < segment.len() {
        let at = offset + i;
        let byte = segment[i];
        match byte {
            b'\\' => return Err(PathError::Backslash(at)),
            b'%' => {
                let value = percent_value(segment, i).ok_or(PathError::BadPercent(at))?;
                let forbidden = |what| Err(PathError::ForbiddenEncoding { what, at });
                match value {
                    b'/' => return forbidden("`/`"),
                    b'.' => return forbidden("`.`"),
                    b'\\' => return forbidden("`\\`"),
                    b'%' => return forbidden("`%` (double encoding)"),
                    0..=0x1f | 0x7f => return forbidden("control character"),
                    b if is_unreserved(b) => return forbidden("unreserved character"),
                    0x80..=0xff => has_high = true,
                    _ => {}
                }
                i += 3;
                continue;
            }
            b if is_pchar(b) => {}
            _ => return Err(PathError::ForbiddenByte { byte, at }),
        }
        i += 1;
    }
    // Encoded non-ASCII must decode to UTF-8, as upstream will read it;
    // decoded (one allocation) only for the segments that have any.
    if has_high && std::str::from_utf8(&decode_segment(segment)).is_err() {
        return Err(PathError::NonUtf8(offset));
    }
    Ok(())
}

/// The byte `%XY` at `i` encodes, if `XY` are two hex digits.
fn percent_value(segment: &[u8], i: usize) -> Option<u8> {
    let hex = segment.get(i + 1..i + 3)?;
    Some(hex_value(hex[0])? << 4 | hex_value(hex[1])?)
}

/// A segment already checked by [`check_segment`], percent-decoded.
fn decode_segment(segment: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::with_capacity(segment.len());
    let mut i = 0;
    while i < segment.len() {
        match percent_value(segment, i).filter(|_| segment[i] == b'%') {
            Some(value) => {
                decoded.push(value);
                i += 3;
            }
            None => {
                decoded.push(segment[i]);
                i += 1;
            }
        }
    }
    decoded
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `pchar` without `%` (handled separately) and without `;`, which
/// some servers treat as a path-parameter delimiter.
fn is_pchar(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'=' | b':' | b'@'
        )
}

/// Check that an identity variable's value can stand in a path: one or more
/// `/`-separated segments of `[A-Za-z0-9._-]`, none of them `.` or `..`.
pub fn check_variable_value(value: &str) -> Result<(), String> {
    for segment in value.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!("`{value}` has an empty or dot segment"));
        }
        if let Some(c) = segment
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c)))
        {
            return Err(format!(
                "`{value}` contains `{c}`; only A-Z a-z 0-9 . _ - and / are allowed"
            ));
        }
    }
    Ok(())
}

/// Why a path template is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The template does not start with `/`.
    #[error("a path template must start with `/`")]
    NotAbsolute,
    /// An unclosed `{`, a stray `}`, or a bad placeholder name or kind.
    #[error("bad placeholder near byte {0}: expected `{{name}}`, `{{name:seg}}` with name [a-z_][a-z0-9_]*")]
    BadPlaceholder(usize),
    /// Two placeholders with nothing between them cannot be matched unambiguously.
    #[error("two placeholders next to each other near byte {0}")]
    AdjacentPlaceholders(usize),
    /// `*` or `**` not forming a whole segment, or `**` not last.
    #[error("`*` must be a whole segment and `**` only the last segment (`/**`)")]
    BadWildcard,
    /// The same capture name twice.
    #[error("capture `{0}` appears twice")]
    DuplicateCapture(String),
    /// The literal parts are not a canonical path.
    #[error("literal parts are not canonical: {0}")]
    NotCanonical(PathError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// An identity variable, matched ASCII case-insensitively.
    Variable(String),
    /// A decimal number, captured.
    Number(String),
    /// One or more characters within one segment, captured.
    Segment(String),
    /// Exactly one whole segment.
    Star,
    /// The rest: one or more segments.
    Rest,
}

/// An anchored path template; see the module documentation for its syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    source: String,
    tokens: Vec<Token>,
}

impl std::fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

impl PathTemplate {
    /// Parse `source`; placeholders whose name is in `variables` are identity
    /// variables, other bare placeholders are numbers.
    pub fn parse(source: &str, variables: &BTreeSet<String>) -> Result<Self, TemplateError> {
        if !source.starts_with('/') {
            return Err(TemplateError::NotAbsolute);
        }
        let mut tokens: Vec<Token> = Vec::new();
        let mut literal = String::new();
        // The template with each placeholder replaced by `x`: its literal
        // parts must themselves be canonical.
        let mut skeleton = String::new();
        let mut captures = BTreeSet::new();
        let bytes = source.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let segment_start = i == 0 || bytes[i - 1] == b'/';
            match bytes[i] {
                b'{' => {
                    let close = source[i..]
                        .find('}')
                        .map(|c| i + c)
                        .ok_or(TemplateError::BadPlaceholder(i))?;
                    let token = parse_placeholder(&source[i + 1..close], variables)
                        .ok_or(TemplateError::BadPlaceholder(i))?;
                    if literal.is_empty()
                        && tokens
                            .last()
                            .is_some_and(|t| !matches!(t, Token::Literal(_)))
                    {
                        return Err(TemplateError::AdjacentPlaceholders(i));
                    }
                    if let Token::Number(name) | Token::Segment(name) = &token {
                        if !captures.insert(name.clone()) {
                            return Err(TemplateError::DuplicateCapture(name.clone()));
                        }
                    }
                    flush_literal(&mut literal, &mut tokens);
                    tokens.push(token);
                    skeleton.push('x');
                    i = close + 1;
                }
                b'}' => return Err(TemplateError::BadPlaceholder(i)),
                b'*' => {
                    let double = bytes.get(i + 1) == Some(&b'*');
                    let end = if double { i + 2 } else { i + 1 };
                    let segment_end = end == bytes.len() || bytes[end] == b'/';
                    if !segment_start || !segment_end || (double && end != bytes.len()) {
                        return Err(TemplateError::BadWildcard);
                    }
                    flush_literal(&mut literal, &mut tokens);
                    tokens.push(if double { Token::Rest } else { Token::Star });
                    skeleton.push('x');
                    i = end;
                }
                b => {
                    literal.push(b as char);
                    skeleton.push(b as char);
                    i += 1;
                }
            }
        }
        flush_literal(&mut literal, &mut tokens);
        check_canonical(skeleton.as_bytes()).map_err(TemplateError::NotCanonical)?;
        Ok(Self {
            source: source.to_owned(),
            tokens,
        })
    }

    /// The identity variables this template refers to.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.tokens.iter().filter_map(|t| match t {
            Token::Variable(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The names this template captures (`{n}`, `{id:seg}`).
    pub fn captures(&self) -> impl Iterator<Item = &str> {
        self.tokens.iter().filter_map(|t| match t {
            Token::Number(name) | Token::Segment(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// Match a canonical path; `None` if it does not match or a variable is unbound.
    pub fn matches(&self, path: &str, vars: &Vars) -> Option<Captures> {
        // Canonical paths are ASCII; slicing below relies on it.
        if !path.is_ascii() {
            return None;
        }
        self.matches_ascii(path, vars)
    }

    /// [`Self::matches`] for a path known to be ASCII (one that passed
    /// [`check_canonical`]): the rule book tries every rule on the same
    /// path, so it checks the path once, not once per rule. A non-ASCII
    /// path may panic.
    pub(crate) fn matches_ascii(&self, path: &str, vars: &Vars) -> Option<Captures> {
        debug_assert!(path.is_ascii());
        let mut captures = Captures::new();
        match_tokens(&self.tokens, path, vars, &mut captures).then_some(captures)
    }
}

fn flush_literal(literal: &mut String, tokens: &mut Vec<Token>) {
    if !literal.is_empty() {
        tokens.push(Token::Literal(std::mem::take(literal)));
    }
}

fn parse_placeholder(inner: &str, variables: &BTreeSet<String>) -> Option<Token> {
    let (name, kind) = match inner.split_once(':') {
        Some((name, kind)) => (name, Some(kind)),
        None => (inner, None),
    };
    let mut chars = name.chars();
    let valid_name = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid_name {
        return None;
    }
    match kind {
        None if variables.contains(name) => Some(Token::Variable(name.to_owned())),
        None => Some(Token::Number(name.to_owned())),
        Some("seg") if !variables.contains(name) => Some(Token::Segment(name.to_owned())),
        Some(_) => None,
    }
}

/// Backtracking matcher; templates are short and have at most a few
/// placeholders, so the search is tiny.
fn match_tokens(tokens: &[Token], path: &str, vars: &Vars, captures: &mut Captures) -> bool {
    let Some((token, rest)) = tokens.split_first() else {
        return path.is_empty();
    };
    match token {
        Token::Literal(literal) => path
            .strip_prefix(literal.as_str())
            .is_some_and(|p| match_tokens(rest, p, vars, captures)),
        Token::Variable(name) => {
            let Some(value) = vars.get(name) else {
                return false;
            };
            path.get(..value.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(value))
                && match_tokens(rest, &path[value.len()..], vars, captures)
        }
        Token::Number(name) => {
            let digits = path.bytes().take_while(u8::is_ascii_digit).count();
            // Longest first; at most 20 digits (u64).
            (1..=digits.min(20))
                .rev()
                .any(|len| capture(name, len, rest, path, vars, captures))
        }
        Token::Segment(name) => {
            let len = path.find('/').unwrap_or(path.len());
            (1..=len)
                .rev()
                .any(|len| capture(name, len, rest, path, vars, captures))
        }
        Token::Star => {
            let len = path.find('/').unwrap_or(path.len());
            len > 0 && match_tokens(rest, &path[len..], vars, captures)
        }
        Token::Rest => !path.is_empty(),
    }
}

fn capture(
    name: &str,
    len: usize,
    rest: &[Token],
    path: &str,
    vars: &Vars,
    captures: &mut Captures,
) -> bool {
    if match_tokens(rest, &path[len..], vars, captures) {
        captures.insert(name.to_owned(), path[..len].to_owned());
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests;
