//! The one error of this crate: a value that breaks its type's rule.

use std::fmt;

/// A string that is not a valid value of a type: which type, the value, and
/// the rule it breaks (the message a user sees).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    what: &'static str,
    value: String,
    expected: &'static str,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, value: &str, expected: &'static str) -> Self {
        // Long values are cut so an error message stays one readable line.
        let value: String = value.chars().take(80).collect();
        Self {
            what,
            value,
            expected,
        }
    }

    /// The kind of value, e.g. `ticket id`.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The rule, e.g. `` `tkt_` then 1-60 of [A-Za-z0-9_-] ``.
    pub fn expected(&self) -> &'static str {
        self.expected
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a valid {}: expected {}",
            self.value, self.what, self.expected
        )
    }
}

impl std::error::Error for ParseError {}
