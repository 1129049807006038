//! Identity variables: values the proxy binds into rule paths (`{repo}`).
//! The job API and the proxy check them with the same functions, so a job
//! that is accepted gets an identity the proxy accepts.

use crate::name::is_word;
use crate::RepoSlug;

/// The variable that names the identity's repository; its value is a
/// [`RepoSlug`] and travels as a typed field once it is checked.
pub const REPO: &str = "repo";

/// The variable that names the bot's fork of the repository, for teams
/// whose workers deliver from a fork (`github-worker-fork`); a [`RepoSlug`].
pub const FORK: &str = "fork";

/// Why a variable was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariableError {
    /// The name is not 1-64 of `[A-Za-z0-9_-]`.
    Name,
    /// The value is not what the variable holds.
    Value(&'static str),
}

impl VariableError {
    /// The rule, in words.
    pub fn expected(self) -> &'static str {
        match self {
            VariableError::Name => "names are A-Z a-z 0-9 _ -",
            VariableError::Value(expected) => expected,
        }
    }
}

/// One path segment: 1-100 of `[A-Za-z0-9_.-]`, neither `.` nor `..`.
fn is_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Checks one variable: `repo` and `fork` are `owner/name`, any other value
/// is one path segment; names are 1-64 of `[A-Za-z0-9_-]`.
pub fn check(name: &str, value: &str) -> Result<(), VariableError> {
    if !is_word(name, 64) {
        return Err(VariableError::Name);
    }
    if name == REPO || name == FORK {
        if !RepoSlug::is_valid(value) {
            return Err(VariableError::Value("expected owner/name"));
        }
    } else if !is_segment(value) {
        return Err(VariableError::Value(
            "expected one path segment of A-Z a-z 0-9 _ - .",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_table() {
        for (name, value) in [
            ("repo", "octo/hello"),
            ("fork", "bot/hello"),
            ("org", "octo"),
            ("a-b_C", "v1.2"),
        ] {
            assert_eq!(check(name, value), Ok(()), "{name}={value}");
        }
        for (name, value, err) in [
            ("bad name", "x", VariableError::Name),
            ("", "x", VariableError::Name),
            ("a.b", "x", VariableError::Name),
            ("repo", "octo", VariableError::Value("expected owner/name")),
            ("fork", "bot", VariableError::Value("expected owner/name")),
            (
                "fork",
                "bot/h/x",
                VariableError::Value("expected owner/name"),
            ),
            ("repo", "o/..", VariableError::Value("expected owner/name")),
            (
                "org",
                "..",
                VariableError::Value("expected one path segment of A-Z a-z 0-9 _ - ."),
            ),
            (
                "org",
                "a/b",
                VariableError::Value("expected one path segment of A-Z a-z 0-9 _ - ."),
            ),
            (
                "org",
                "",
                VariableError::Value("expected one path segment of A-Z a-z 0-9 _ - ."),
            ),
        ] {
            assert_eq!(check(name, value), Err(err), "{name}={value}");
        }
    }
}
