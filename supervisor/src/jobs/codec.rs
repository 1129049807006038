//! JSON encoding of what the supervisor hashes, stores or sends: one place,
//! and a value that cannot be encoded is an error, never an empty string
//! (an empty body would hash alike for every request, or store a record
//! that can never be read back).

use serde::Serialize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    /// a value could not be encoded as JSON
    #[error("encoding the {what} as JSON: {message}")]
    Encode { what: &'static str, message: String },
}

fn encode_error(what: &'static str) -> impl FnOnce(serde_json::Error) -> CodecError {
    move |e| CodecError::Encode {
        what,
        message: e.to_string(),
    }
}

/// `value` as JSON text; `what` names it in the error.
pub fn to_json<T: Serialize + ?Sized>(what: &'static str, value: &T) -> Result<String, CodecError> {
    serde_json::to_string(value).map_err(encode_error(what))
}

/// `value` as JSON bytes; `what` names it in the error.
pub fn to_json_bytes<T: Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<Vec<u8>, CodecError> {
    serde_json::to_vec(value).map_err(encode_error(what))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn encodes_what_serde_can() {
        assert_eq!(to_json("list", &[1, 2]).unwrap(), "[1,2]");
        assert_eq!(to_json_bytes("text", "a").unwrap(), b"\"a\"");
    }

    #[test]
    fn a_value_json_cannot_hold_is_an_error_naming_it() {
        // JSON object keys are strings: a map keyed by pairs cannot be encoded.
        let map: HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
        for err in [
            to_json("spec", &map).unwrap_err(),
            to_json_bytes("spec", &map).unwrap_err(),
        ] {
            let CodecError::Encode { what, message } = &err;
            assert_eq!(*what, "spec");
            assert!(!message.is_empty());
            assert!(err.to_string().starts_with("encoding the spec as JSON: "));
        }
    }
}
