//! The decision for one request head of an identity (pure): canonical
//! path, never-allowed endpoints, the identity's bindings, then the rules of
//! its sets in order; a denial says how close the nearest rule came.

use super::OwnedObject;
use super::{forbidden_endpoint, Allowed, BodyCheck, BodyRule, Decision, Denial, MessageMarker};
use super::{RequestHead, Rule, RuleBook, RuleSet};
use crate::path::{self, Captures, Vars};

impl RuleBook {
    /// Decide one request of an identity with `rule_sets` and `vars`.
    pub fn check(&self, head: &RequestHead, rule_sets: &[String], vars: &Vars) -> Decision {
        let deny = |reason: String| Decision::Deny(Denial::new(reason, rule_sets));
        // Bounded first: what follows is linear in the target, the rules'
        // matching linear in segments and pairs times rules.
        if let Err(why) = path::check_budget(head.path, head.query) {
            return deny(why);
        }
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

/// How far the closest rule got, for the denial reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Progress {
    Nothing,
    Host,
    Method(Vec<String>),
    Query(String),
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
    // `check` made sure the path is canonical, so ASCII.
    let mut captures = rule
        .path
        .matches_ascii(head.path, vars)
        .ok_or(Progress::Host)?;
    if !rule.methods.iter().any(|m| m == head.method) {
        return Err(Progress::Method(rule.methods.clone()));
    }
    if !matches!(rule.body, BodyRule::None) {
        only_listed_query_keys(head.query, &rule.query).map_err(Progress::Query)?;
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

/// On a route whose rule checks the body, the body is not the whole
/// request: many servers (GraphQL ones among them) read URL parameters
/// before or instead of it. So such a route takes no query but the keys its
/// rule lists, each `key=value` spelled literally: a percent-encoded key, an
/// empty key or pair, `;` anywhere, `+` in a key, a bare `?`, all are refused
/// rather than interpreted. The listed keys' values are checked as usual.
fn only_listed_query_keys(
    query: Option<&str>,
    listed: &std::collections::BTreeMap<String, Vec<String>>,
) -> Result<(), String> {
    let Some(query) = query else {
        return Ok(());
    };
    let refused = || {
        let keys: Vec<&str> = listed.keys().map(String::as_str).collect();
        Err(format!(
            "this route's body is checked, so its query may hold only the keys {keys:?}, spelled literally"
        ))
    };
    // Some servers split pairs on `;` as well as `&`.
    if query.is_empty() || query.contains(';') {
        return refused();
    }
    for pair in query.split('&') {
        let Some((key, _)) = pair.split_once('=') else {
            return refused();
        };
        if !listed.contains_key(key) {
            return refused();
        }
    }
    Ok(())
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
    // The template captures the id (checked at load), so it is there.
    let own = rule.own.as_ref().map(|o| OwnedObject {
        kind: o.created_as.clone(),
        id: captures.get(&o.id).cloned().unwrap_or_default(),
    });
    Allowed {
        rule_set: set.name.clone(),
        rule: rule.name.clone(),
        credential: rule.credential.clone(),
        inject: rule.inject,
        message,
        body,
        captures,
        own,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_checked_routes_take_only_listed_query_keys() {
        let listed = std::collections::BTreeMap::from([("kind".to_owned(), vec!["a".to_owned()])]);
        let none = std::collections::BTreeMap::new();
        // (query, listed keys, allowed)
        let cases = [
            (None, &none, true),
            (None, &listed, true),
            (Some("kind=a"), &listed, true),
            (Some("kind=b"), &listed, true), // the value is the constraint's to check
            (Some(""), &none, false),
            (Some(""), &listed, false),
            (Some("query=x"), &none, false),
            (Some("kind=a&query=x"), &listed, false),
            (Some("%6bind=a"), &listed, false),
            (Some("kind=a&"), &listed, false),
            (Some("&kind=a"), &listed, false),
            (Some("=a"), &listed, false),
            (Some("kind"), &listed, false),
            (Some("kind=a;query=x"), &listed, false), // some servers split on `;`
            (Some("kind;query=x"), &listed, false),
            (Some("kind+=a"), &listed, false),
            (Some("KIND=a"), &listed, false),
        ];
        for (query, listed, allowed) in cases {
            assert_eq!(
                only_listed_query_keys(query, listed).is_ok(),
                allowed,
                "{query:?}"
            );
        }
    }
}
