//! The ref-update commands at the head of a `git-receive-pack` request, and
//! the policy they must satisfy before the rest (the pack) is streamed.
//!
//! The body starts with pkt-lines (4 hex digits of length including
//! themselves, then the payload): optional `shallow <oid>` lines, then
//! `<old-oid> SP <new-oid> SP <refname>`, the first one followed by NUL and
//! the capabilities, then a flush `0000`, then the pack. [`parse_commands`]
//! works on a prefix of the body and says how many bytes the commands took,
//! or that it needs more; the proxy reads until it can decide, checks, then
//! forwards the prefix and streams the rest. Signed pushes (`push-cert`) are
//! refused: their commands sit inside the certificate.
//!
//! The parser sees the body as git framed it; a `Content-Encoding: gzip` body
//! must be decoded first.

use serde::Deserialize;

use crate::rules::Denial;

/// Upper bounds that keep a hostile prefix from costing memory or time.
pub const MAX_COMMANDS: usize = 1000;
/// The most bytes of commands the proxy reads before giving up.
pub const MAX_PREFIX: usize = 256 * 1024;

/// One ref update: `old` → `new` on `name`. Object ids are lowercase hex
/// (SHA-1 or SHA-256); all zeros means "absent".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub name: String,
}

impl RefUpdate {
    pub fn is_delete(&self) -> bool {
        is_zero(&self.new)
    }

    pub fn is_create(&self) -> bool {
        is_zero(&self.old)
    }
}

fn is_zero(oid: &str) -> bool {
    oid.bytes().all(|b| b == b'0')
}

/// The parsed command list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub commands: Vec<RefUpdate>,
    /// Capabilities announced on the first command.
    pub capabilities: Vec<String>,
    /// Bytes of the body up to and including the flush after the commands.
    pub consumed: usize,
}

/// Why the prefix could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The prefix ends before the flush packet; read more and try again.
    #[error("the ref-update commands are incomplete")]
    NeedMore,
    /// The commands are malformed, too many, or a form the proxy refuses.
    #[error("invalid ref-update commands: {0}")]
    Invalid(String),
}

/// Parse the command list at the head of a receive-pack request body.
pub fn parse_commands(prefix: &[u8]) -> Result<Parsed, ParseError> {
    CommandParser::default().parse(prefix)
}

/// The command-list parser as a state machine over a growing body: each
/// call resumes at the first pkt-line not yet parsed, so a body that
/// arrives a byte at a time costs one pass over it, not one per chunk.
#[derive(Debug, Default)]
pub struct CommandParser {
    /// Offset of the first pkt-line not yet parsed.
    at: usize,
    commands: Vec<RefUpdate>,
    capabilities: Vec<String>,
    /// The final answer, once there is one: later calls repeat it.
    finished: Option<Result<Parsed, ParseError>>,
    /// Pkt-lines parsed, counted so tests can see each is parsed once.
    #[cfg(test)]
    lines_parsed: usize,
}

impl CommandParser {
    /// Parses what `prefix` adds to the prefix given before (the body so
    /// far, which only grows): [`ParseError::NeedMore`] until the flush
    /// after the commands, then the command list or why it is invalid.
    pub fn parse(&mut self, prefix: &[u8]) -> Result<Parsed, ParseError> {
        if let Some(finished) = &self.finished {
            return finished.clone();
        }
        let outcome = self.resume(prefix);
        if outcome != Err(ParseError::NeedMore) {
            self.finished = Some(outcome.clone());
        }
        outcome
    }

    fn resume(&mut self, prefix: &[u8]) -> Result<Parsed, ParseError> {
        let invalid = |why: &str| Err(ParseError::Invalid(why.to_owned()));
        loop {
            if self.at > MAX_PREFIX {
                return invalid("the command list is longer than the proxy accepts");
            }
            let at = self.at;
            let Some(len_hex) = prefix.get(at..at + 4) else {
                return Err(ParseError::NeedMore);
            };
            let len = std::str::from_utf8(len_hex)
                .ok()
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| usize::from_str_radix(h, 16).ok());
            let Some(len) = len else {
                return invalid("bad pkt-line length");
            };
            if len == 0 {
                self.at += 4;
                break;
            }
            if len < 5 {
                return invalid(
                    "pkt-line length below 5 (delim and response-end packets do not belong here)",
                );
            }
            let Some(payload) = prefix.get(at + 4..at + len) else {
                return if at + len > MAX_PREFIX + 4 {
                    invalid("pkt-line longer than the proxy accepts")
                } else {
                    Err(ParseError::NeedMore)
                };
            };
            self.at += len;
            self.line(payload.strip_suffix(b"\n").unwrap_or(payload))?;
        }
        if self.commands.is_empty() {
            return invalid("no ref updates");
        }
        Ok(Parsed {
            commands: std::mem::take(&mut self.commands),
            capabilities: std::mem::take(&mut self.capabilities),
            consumed: self.at,
        })
    }

    /// One pkt-line's payload: a shallow line or a command.
    fn line(&mut self, payload: &[u8]) -> Result<(), ParseError> {
        let invalid = |why: &str| Err(ParseError::Invalid(why.to_owned()));
        #[cfg(test)]
        {
            self.lines_parsed += 1;
        }
        let seen_command = !self.commands.is_empty();
        if let Some(oid) = payload.strip_prefix(b"shallow ") {
            if seen_command || parse_oid(oid).is_none() {
                return invalid("misplaced or malformed shallow line");
            }
            return Ok(());
        }
        if payload.starts_with(b"push-cert") {
            return invalid("signed pushes (push-cert) are not supported through the proxy");
        }
        let (line, caps) = match payload.iter().position(|&b| b == 0) {
            Some(nul) if !seen_command => (&payload[..nul], Some(&payload[nul + 1..])),
            Some(_) => return invalid("NUL after the first command"),
            None => (payload, None),
        };
        if let Some(caps) = caps {
            self.capabilities = parse_capabilities(caps)?;
        }
        self.commands.push(parse_command(line).ok_or_else(|| {
            ParseError::Invalid(format!(
                "malformed command `{}`",
                String::from_utf8_lossy(line).escape_debug()
            ))
        })?);
        if self.commands.len() > MAX_COMMANDS {
            return invalid("more ref updates than the proxy accepts");
        }
        Ok(())
    }
}

/// The capabilities after the first command's NUL, space-separated.
fn parse_capabilities(caps: &[u8]) -> Result<Vec<String>, ParseError> {
    let caps = std::str::from_utf8(caps)
        .map_err(|_| ParseError::Invalid("capabilities are not UTF-8".into()))?;
    Ok(caps
        .split(' ')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect())
}

fn parse_command(line: &[u8]) -> Option<RefUpdate> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.splitn(3, ' ');
    let old = parse_oid(parts.next()?.as_bytes())?;
    let new = parse_oid(parts.next()?.as_bytes())?;
    let name = parts.next()?;
    if old.len() != new.len() || !valid_ref_name(name) {
        return None;
    }
    Some(RefUpdate {
        old,
        new,
        name: name.to_owned(),
    })
}

fn parse_oid(oid: &[u8]) -> Option<String> {
    let ok = matches!(oid.len(), 40 | 64)
        && oid
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    ok.then(|| String::from_utf8_lossy(oid).into_owned())
}

/// A strict subset of `git check-ref-format`: under `refs/`, visible ASCII
/// without `\ ~ ^ : ? * [ @{`, no `..`, no empty or dot-led component, no
/// `.lock` component ending, not ending in `/` or `.`.
pub fn valid_ref_name(name: &str) -> bool {
    name.starts_with("refs/")
        && name
            .bytes()
            .all(|b| (0x21..0x7f).contains(&b) && !b"\\~^:?*[".contains(&b))
        && !name.contains("..")
        && !name.contains("@{")
        && !name.ends_with('.')
        && name
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"))
}

// === policy ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefPolicyFile {
    refs: Vec<String>,
    #[serde(default)]
    delete: bool,
}

impl RefPolicyFile {
    pub(crate) fn validate(self) -> Result<RefPolicy, String> {
        if self.refs.is_empty() {
            return Err("`refs`: expected at least one ref pattern".into());
        }
        let refs = self
            .refs
            .iter()
            .map(|r| RefPattern::parse(r))
            .collect::<Result<_, _>>()?;
        Ok(RefPolicy {
            refs,
            delete: self.delete,
        })
    }
}

/// An exact ref name, or a prefix ending in `/*` matching one or more
/// further components (`refs/heads/gatehouse/*` matches
/// `refs/heads/gatehouse/x` and `refs/heads/gatehouse/a/b`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefPattern(String);

impl RefPattern {
    pub fn parse(pattern: &str) -> Result<Self, String> {
        let base = pattern
            .strip_suffix("/*")
            .map(|p| format!("{p}/x"))
            .unwrap_or_else(|| pattern.to_owned());
        if !valid_ref_name(&base) {
            return Err(format!(
                "`{pattern}`: expected a ref name under refs/, optionally ending in /*"
            ));
        }
        Ok(Self(pattern.to_owned()))
    }

    pub fn matches(&self, name: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => name.len() > prefix.len() && name.starts_with(prefix),
            None => name == self.0,
        }
    }
}

impl std::fmt::Display for RefPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which refs a push may update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefPolicy {
    pub refs: Vec<RefPattern>,
    /// Whether deletions of matching refs are allowed.
    pub delete: bool,
}

/// Check every update against the policy; the whole push is refused if one
/// update is not allowed. The denial's `rule_sets_tried` is empty: the caller
/// knows which rule set allowed the request line.
pub fn check(updates: &[RefUpdate], policy: &RefPolicy) -> Result<(), Denial> {
    let allowed = || {
        policy
            .refs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if updates.is_empty() {
        return Err(Denial::new("the push updates no ref", &[]));
    }
    for update in updates {
        if !policy.refs.iter().any(|p| p.matches(&update.name)) {
            return Err(Denial::new(
                format!(
                    "pushing to {} is not allowed; push to a branch matching {}",
                    update.name,
                    allowed()
                ),
                &[],
            ));
        }
        if update.is_delete() && !policy.delete {
            return Err(Denial::new(
                format!("deleting {} is not allowed", update.name),
                &[],
            ));
        }
    }
    Ok(())
}

// === report-status ===

/// How the client asked to hear a push's outcome: the refs it updates, and
/// whether the report travels inside side-band 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReport {
    refs: Vec<String>,
    sideband: bool,
}

/// Longest reason put on one report line (git prints it next to each ref).
const MAX_REASON: usize = 900;

impl StatusReport {
    /// The report a push asked for, from the head of its body; `None` when
    /// the commands do not parse or the client did not ask for a report.
    pub fn requested(prefix: &[u8]) -> Option<Self> {
        let parsed = parse_commands(prefix).ok()?;
        let has = |cap: &str| parsed.capabilities.iter().any(|c| c == cap);
        // Rejections read the same in report-status and report-status-v2.
        if !has("report-status") && !has("report-status-v2") {
            return None;
        }
        Some(Self {
            refs: parsed.commands.into_iter().map(|c| c.name).collect(),
            sideband: has("side-band-64k") || has("side-band"),
        })
    }

    /// A receive-pack answer body rejecting every ref update of the push
    /// with `reason`, in git's report-status format (inside side-band 1,
    /// with the reason also on side-band 2 as a `remote:` line, when the
    /// client asked for side-band). The reason is put on one line.
    pub fn refusal(&self, reason: &str) -> Vec<u8> {
        let one_line: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_REASON)
            .collect();
        let mut report = pkt_line(b"unpack ok\n");
        for name in &self.refs {
            report.extend(pkt_line(
                format!("ng {name} gatehouse: {one_line}\n").as_bytes(),
            ));
        }
        report.extend_from_slice(b"0000");
        if !self.sideband {
            return report;
        }
        let mut framed = pkt_line(format!("\x02gatehouse: push refused: {one_line}\n").as_bytes());
        framed.extend(pkt_line(&[b"\x01".as_slice(), &report].concat()));
        framed.extend_from_slice(b"0000");
        framed
    }
}

/// One pkt-line: four hex digits of length (including themselves), then the payload.
pub fn pkt_line(payload: &[u8]) -> Vec<u8> {
    let mut line = format!("{:04x}", payload.len() + 4).into_bytes();
    line.extend_from_slice(payload);
    line
}

#[cfg(test)]
mod tests;
