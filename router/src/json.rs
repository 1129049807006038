//! JSON for what is hashed or stored (a policy's version, a decision's
//! body, a stored record): a value that does not encode is an error, never
//! an empty string that would hash or store as if it were the value.

use serde::Serialize;

/// A value that does not encode as JSON.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the {what} as JSON: {source}")]
pub struct EncodeError {
    /// What was being encoded, in words (`decision`, `mandate`, …).
    pub what: &'static str,
    #[source]
    pub source: serde_json::Error,
}

/// `value` as JSON text; `what` names it in the error.
pub fn encode<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String, EncodeError> {
    serde_json::to_string(value).map_err(|source| EncodeError { what, source })
}

/// `value` as JSON bytes; `what` names it in the error.
pub fn encode_bytes<T: Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<Vec<u8>, EncodeError> {
    serde_json::to_vec(value).map_err(|source| EncodeError { what, source })
}

/// A unit enum value as its serde name (`timed_out`); anything that does not
/// encode to a JSON string is an error.
pub fn encode_name<T: Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<String, EncodeError> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        Ok(other) => Err(EncodeError {
            what,
            source: serde::ser::Error::custom(format!("expected a name, got {other}")),
        }),
        Err(source) => Err(EncodeError { what, source }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ticket::Outcome;

    /// serde_json refuses map keys that are not strings.
    fn unencodable() -> BTreeMap<(u8, u8), u8> {
        BTreeMap::from([((1, 2), 3)])
    }

    #[test]
    fn encodes_values() {
        assert_eq!(encode("list", &[1, 2]).unwrap(), "[1,2]");
        assert_eq!(encode_bytes("list", &[1, 2]).unwrap(), b"[1,2]");
        assert_eq!(
            encode_name("outcome", &Outcome::TimedOut).unwrap(),
            "timed_out"
        );
    }

    #[test]
    fn a_value_that_does_not_encode_is_an_error_naming_it() {
        let e = encode("decision", &unencodable()).unwrap_err();
        assert_eq!(e.what, "decision");
        assert!(
            e.to_string()
                .starts_with("cannot encode the decision as JSON: "),
            "{e}"
        );
        let e = encode_bytes("reply record", &unencodable()).unwrap_err();
        assert_eq!(e.what, "reply record");
    }

    #[test]
    fn a_name_is_only_a_string() {
        let e = encode_name("outcome", &7).unwrap_err();
        assert!(e.to_string().contains("expected a name"), "{e}");
        assert_eq!(
            encode_name("outcome", &unencodable()).unwrap_err().what,
            "outcome"
        );
    }
}
