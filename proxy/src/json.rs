//! One meaning per JSON document (pure): every JSON body the proxy inspects
//! (GraphQL envelopes, message bodies) is checked here before anything in
//! it is believed. A key that appears twice in one object is refused, keys
//! compared after JSON unescaping (`"\u0071uery"` is `"query"`): the proxy
//! would check one value while the upstream might read the other. Nesting
//! and the number of keys are bounded, so the check's work is linear in the
//! body and small.

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 32;
/// Object keys accepted in one document, all objects together.
pub const MAX_KEYS: usize = 4096;

/// Checks that `body` is one JSON value with no duplicate key in any
/// object, at most [`MAX_DEPTH`] deep and with at most [`MAX_KEYS`] keys;
/// the error says why not.
pub fn check_document(body: &[u8]) -> Result<(), String> {
    let keys = Cell::new(0);
    let mut de = serde_json::Deserializer::from_slice(body);
    Node {
        depth: 0,
        keys: &keys,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end())
    .map_err(|e| format!("the JSON body is refused: {e}"))
}

/// One value at `depth`; `keys` counts the document's keys so far.
#[derive(Clone, Copy)]
struct Node<'a> {
    depth: usize,
    keys: &'a Cell<usize>,
}

impl Node<'_> {
    fn child<E: serde::de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format_args!(
                "nested deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(Node {
            depth: self.depth + 1,
            keys: self.keys,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let child = self.child()?;
        while seq.next_element_seed(child)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let child = self.child()?;
        let mut seen = HashSet::new();
        // The key as serde_json unescaped it: `\u0071uery` arrives as `query`.
        while let Some(key) = map.next_key::<String>()? {
            let count = self.keys.get() + 1;
            if count > MAX_KEYS {
                return Err(A::Error::custom(format_args!("more than {MAX_KEYS} keys")));
            }
            self.keys.set(count);
            if !seen.insert(key) {
                return Err(A::Error::custom("a key appears twice in one object"));
            }
            map.next_value_seed(child)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_table() {
        let deep_ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let deep_objects = format!(
            "{}1{}",
            r#"{"a":"#.repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        let keys = |n: usize| {
            let inner: Vec<String> = (0..n).map(|i| format!(r#"{{"k{i}":1}}"#)).collect();
            format!("[{}]", inner.join(","))
        };
        let (max_keys, too_many_keys) = (keys(MAX_KEYS), keys(MAX_KEYS + 1));
        // (document, refused with)
        let cases: &[(&str, Option<&str>)] = &[
            (r#"{"query":"{ a }","variables":{"x":1}}"#, None),
            (r#"{"a":{"k":1},"b":{"k":1}}"#, None), // one key in two objects
            (r#"[{"k":1},{"k":2}]"#, None),
            (r#""\u0071uery""#, None),
            (&deep_ok, None),
            (&max_keys, None),
            (r#"{"query":"a","query":"b"}"#, Some("twice")),
            (r#"{"\u0071uery":"a","query":"b"}"#, Some("twice")),
            (r#"{"query":"a","\u0071\u0075ery":"b"}"#, Some("twice")),
            (r#"{"q\/":"a","q/":"b"}"#, Some("twice")),
            (r#"{"v":{"x":{"id":1,"id":2}}}"#, Some("twice")),
            (r#"{"v":[1,{"a":1,"a":1}]}"#, Some("twice")),
            (&deep, Some("deeper")),
            (&deep_objects, Some("deeper")),
            (&too_many_keys, Some("keys")),
            (r#"{"a":1} {"a":2}"#, Some("trailing")),
            (r#"{"\ud800":1}"#, Some("escape")), // a lone surrogate
            ("not json", Some("expected")),
            ("", Some("EOF")),
        ];
        for (document, refused) in cases {
            let result = check_document(document.as_bytes());
            let shown = &document[..document.len().min(60)];
            match refused {
                None => assert_eq!(result, Ok(()), "{shown}"),
                Some(why) => {
                    let error = result.expect_err(shown);
                    assert!(error.contains(why), "{shown}: {error}");
                }
            }
        }
    }
}
