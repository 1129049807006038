//! Bounded records (pure): every text field a client or an upstream can
//! make long is cut to [`MAX_FIELD`] bytes, and the list of query keys to
//! [`MAX_QUERY_KEYS`] keys, before a record is written. What was cut is
//! noted in the record's `truncated` map: the field's full length and the
//! SHA-256 of its full value, so a record still identifies what was asked
//! without a 30 KB path costing 30 KB of log.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Outcome, Record};

/// Most bytes kept of one text field.
pub const MAX_FIELD: usize = 1024;

/// Most query keys kept (each of them cut to [`MAX_FIELD`] too).
pub const MAX_QUERY_KEYS: usize = 32;

/// A field that was cut: its full length and the hash of its full value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    /// Bytes of the full value (for `query_keys`: the keys joined by `&`).
    pub bytes: u64,
    /// Hex SHA-256 of the full value.
    pub sha256: String,
}

impl Cut {
    fn of(full: &[u8]) -> Self {
        Self {
            bytes: full.len() as u64,
            sha256: hex::encode(Sha256::digest(full)),
        }
    }
}

/// What was cut of a record, by field name.
pub type Truncated = BTreeMap<String, Cut>;

/// `text` cut to at most `max` bytes on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Cuts `value` to [`MAX_FIELD`], noting it under `name` if it was longer.
fn bound_field(truncated: &mut Truncated, name: &str, value: &mut String) {
    if value.len() > MAX_FIELD {
        truncated.insert(name.to_string(), Cut::of(value.as_bytes()));
        let kept = prefix(value, MAX_FIELD).len();
        value.truncate(kept);
    }
}

fn bound_keys(truncated: &mut Truncated, keys: &mut Vec<String>) {
    let long = keys.len() > MAX_QUERY_KEYS || keys.iter().any(|k| k.len() > MAX_FIELD);
    if !long {
        return;
    }
    truncated.insert("query_keys".into(), Cut::of(keys.join("&").as_bytes()));
    keys.truncate(MAX_QUERY_KEYS);
    for key in keys.iter_mut() {
        let kept = prefix(key, MAX_FIELD).len();
        key.truncate(kept);
    }
}

/// The record with its fields bounded (a record within bounds is unchanged).
pub fn bound(record: Record) -> Record {
    match record {
        Record::Request(mut r) => {
            let t = &mut r.truncated;
            bound_field(t, "identity", &mut r.identity);
            bound_field(t, "method", &mut r.method);
            bound_field(t, "host", &mut r.host);
            bound_field(t, "path", &mut r.path);
            bound_keys(t, &mut r.query_keys);
            match &mut r.outcome {
                Outcome::Deny { reason, .. } => bound_field(t, "reason", reason),
                Outcome::Allow { rule_set, rule } => {
                    bound_field(t, "rule_set", rule_set);
                    bound_field(t, "rule", rule);
                }
            }
            if let Some(message) = &mut r.message {
                bound_field(t, "message.kind", &mut message.kind);
                bound_field(t, "message.target", &mut message.target);
            }
            Record::Request(r)
        }
        Record::Completion(mut c) => {
            let t = &mut c.truncated;
            bound_field(t, "request_id", &mut c.request_id);
            if let Some(id) = &mut c.message_id {
                bound_field(t, "message_id", id);
            }
            if let Some(error) = &mut c.error {
                bound_field(t, "error", error);
            }
            Record::Completion(c)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{CompletionRecord, RequestRecord};

    fn request(path: &str, keys: Vec<String>, reason: &str) -> RequestRecord {
        RequestRecord {
            time: "t".into(),
            request_id: "req_1".into(),
            identity: "tkt_1".into(),
            method: "GET".into(),
            host: "api.github.com".into(),
            path: path.into(),
            query_keys: keys,
            outcome: Outcome::Deny {
                reason: reason.into(),
                rule_sets_tried: vec![],
            },
            message: None,
            truncated: Truncated::new(),
        }
    }

    #[test]
    fn records_within_bounds_are_unchanged() {
        let r = Record::Request(request(&"p".repeat(MAX_FIELD), vec!["a".into(); 32], "no"));
        assert_eq!(bound(r.clone()), r);
    }

    #[test]
    fn long_fields_are_cut_with_the_hash_of_the_whole() {
        let path = format!("/{}", "é".repeat(20_000));
        let keys: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
        let Record::Request(r) = bound(Record::Request(request(&path, keys.clone(), &path))) else {
            panic!("a request stays a request");
        };
        assert!(r.path.len() <= MAX_FIELD && path.starts_with(&r.path));
        assert!(r.path.len() > MAX_FIELD - 4, "cut at a character boundary");
        assert_eq!(
            r.truncated["path"],
            Cut {
                bytes: path.len() as u64,
                sha256: hex::encode(Sha256::digest(path.as_bytes())),
            }
        );
        assert_eq!(r.query_keys, keys[..MAX_QUERY_KEYS]);
        assert_eq!(
            r.truncated["query_keys"],
            Cut::of(keys.join("&").as_bytes())
        );
        assert!(r.truncated.contains_key("reason"));
        assert!(!r.truncated.contains_key("host"));
        let line = serde_json::to_string(&Record::Request(r)).unwrap();
        assert!(line.len() < 4 * MAX_FIELD, "{} bytes", line.len());
    }

    #[test]
    fn one_long_query_key_is_cut_too() {
        let keys = vec!["a".into(), "k".repeat(5000)];
        let Record::Request(r) = bound(Record::Request(request("/", keys, "no"))) else {
            panic!("a request stays a request");
        };
        assert_eq!(r.query_keys[1].len(), MAX_FIELD);
        assert_eq!(r.truncated["query_keys"].bytes, 5002);
    }

    #[test]
    fn completion_fields_an_upstream_chooses_are_cut() {
        let c = CompletionRecord {
            time: "t".into(),
            request_id: "req_1".into(),
            status: 201,
            bytes_sent: 0,
            bytes_received: 0,
            duration_ms: 0,
            message_id: Some("m".repeat(4000)),
            error: Some("short".into()),
            truncated: Truncated::new(),
        };
        let Record::Completion(c) = bound(Record::Completion(c)) else {
            panic!("a completion stays a completion");
        };
        assert_eq!(c.message_id.unwrap().len(), MAX_FIELD);
        assert_eq!(c.truncated["message_id"].bytes, 4000);
        assert!(!c.truncated.contains_key("error"));
    }
}
