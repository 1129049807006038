//! The one macro behind every string newtype: the type holds a `String`
//! that passed `$check`, and every way in (`FromStr`, `TryFrom`, serde)
//! goes through it.

/// Declares a validated string newtype.
///
/// `$check: fn(&str) -> bool` is the type's one rule; `$what` names the
/// type in errors and `$expected` describes the rule.
macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $what:literal, $expected:literal, $check:path) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(pub(crate) String);

        impl $name {
            /// What the type is called in error messages.
            pub const WHAT: &'static str = $what;
            /// The rule, in words.
            pub const EXPECTED: &'static str = $expected;

            /// Whether `s` satisfies the rule.
            pub fn is_valid(s: &str) -> bool {
                $check(s)
            }

            /// Parses `s`; the error says what was expected.
            pub fn parse(s: &str) -> Result<Self, $crate::ParseError> {
                s.parse()
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::ParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if $check(s) {
                    Ok(Self(s.to_owned()))
                } else {
                    Err($crate::ParseError::new($what, s, $expected))
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::ParseError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                if $check(&s) {
                    Ok(Self(s))
                } else {
                    Err($crate::ParseError::new($what, &s, $expected))
                }
            }
        }

        impl TryFrom<&str> for $name {
            type Error = $crate::ParseError;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                s.parse()
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}
