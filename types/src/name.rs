//! Names: proxy identities, teams, proxy rule sets, sandbox profiles,
//! repositories.

/// 1 to `max` bytes of `[A-Za-z0-9_-]`: safe as one path component, in a
/// URL path and in a socket file name.
pub(crate) fn is_word(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_identity_name(s: &str) -> bool {
    is_word(s, 64)
}

fn is_team_name(s: &str) -> bool {
    is_word(s, 64)
}

fn is_rule_set_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn is_profile_name(s: &str) -> bool {
    s.len() <= 128 && s.split('/').all(|part| is_word(part, 64))
}

fn is_repo_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn is_repo_slug(s: &str) -> bool {
    matches!(s.split_once('/'), Some((owner, name)) if is_repo_segment(owner) && is_repo_segment(name))
}

string_newtype!(
    /// The name of a proxy identity: its admin-API key and its socket's file
    /// name (`<name>.sock`). A ticket's identity is named by its [`TicketId`].
    ///
    /// [`TicketId`]: crate::TicketId
    IdentityName,
    "identity name",
    "1-64 of [A-Za-z0-9_-]",
    is_identity_name
);

string_newtype!(
    /// A team: the router's policy names it, the supervisor renders its
    /// prompt (`prompts/team/<team>.md`).
    TeamName,
    "team name",
    "1-64 of [A-Za-z0-9_-]",
    is_team_name
);

string_newtype!(
    /// The name of a proxy rule set (`sandbox-profiles/rules/<name>.toml`);
    /// rules inside a set follow the same alphabet.
    RuleSetName,
    "rule-set name",
    "1-64 of [a-z0-9-]",
    is_rule_set_name
);

string_newtype!(
    /// A sandbox profile, by name: `/`-separated parts that are file names
    /// under a profile directory (`teams/web` → `teams/web.toml`), so it can
    /// name no other file (no `.`, no `..`, no empty part).
    ProfileName,
    "profile name",
    "`/`-separated parts of 1-64 of [A-Za-z0-9_-], at most 128 bytes",
    is_profile_name
);

string_newtype!(
    /// A repository, `owner/name`, as GitHub spells it in a path: bound as
    /// `{repo}` in rule paths, so each half is one path segment.
    RepoSlug,
    "repository",
    "`owner/name`, each 1-100 of [A-Za-z0-9_.-] and neither `.` nor `..`",
    is_repo_slug
);

impl RepoSlug {
    /// The part before the `/`.
    pub fn owner(&self) -> &str {
        self.0.split_once('/').map_or("", |(owner, _)| owner)
    }

    /// The part after the `/`.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, name)| name)
    }
}

#[cfg(test)]
mod tests;
