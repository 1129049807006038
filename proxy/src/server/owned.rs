//! People's words are theirs: a request that edits or closes an object, or
//! speaks on it (a rule's `own`), is forwarded only if the identity created
//! that object through the proxy. The proxy learns what an identity created from the
//! answers to its message-bearing calls (the created id, at the rule's
//! `created_id_pointer`) and keeps the set in memory, per identity.
//!
//! Fail closed: objects created by an earlier identity of the same name
//! are not in the set, so editing them is refused. An identity of the
//! admin API keeps its set across a restart of the proxy (`persist`);
//! a static identity's starts empty.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::graphql::{KnownIds, Learn, PULL_REQUEST_NODE, REPOSITORY_NODE};
use crate::rules::OwnedObject;

/// The objects an identity created, by message kind and the platform's id.
#[derive(Debug, Default)]
pub(super) struct Created(Mutex<HashSet<OwnedObject>>);

impl Created {
    /// Records a created object (an answer of 2xx to a message call);
    /// whether it is new.
    pub(super) fn record(&self, kind: &str, id: &str) -> bool {
        self.lock().insert(OwnedObject {
            kind: kind.to_owned(),
            id: id.to_owned(),
        })
    }

    /// Every object recorded (to save them).
    pub(super) fn snapshot(&self) -> Vec<OwnedObject> {
        self.lock().iter().cloned().collect()
    }

    /// Puts saved objects back (a restarted proxy).
    pub(super) fn restore(&self, objects: impl IntoIterator<Item = OwnedObject>) {
        self.lock().extend(objects);
    }

    /// The node ids a GraphQL mutation may be pinned to.
    pub(super) fn known_ids(&self) -> KnownIds {
        let mut known = KnownIds::default();
        for object in self.lock().iter() {
            match object.kind.as_str() {
                REPOSITORY_NODE => known.repositories.insert(object.id.clone()),
                PULL_REQUEST_NODE => known.own_pulls.insert(object.id.clone()),
                _ => false,
            };
        }
        known
    }

    /// Whether the identity learned `value` of `kind` as a form of its
    /// repository ([`super::renamed`]).
    pub(super) fn knows(&self, kind: &str, value: &str) -> bool {
        self.lock().contains(&OwnedObject {
            kind: kind.to_owned(),
            id: value.to_owned(),
        })
    }

    /// Why a request on `object` is refused, if it is.
    pub(super) fn refusal(&self, object: &OwnedObject) -> Option<String> {
        refusal(object, self.lock().contains(object))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<OwnedObject>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The refusal of a request on `object` unless this identity created it.
fn refusal(object: &OwnedObject, created_here: bool) -> Option<String> {
    (!created_here).then(|| {
        format!(
            "{} {} was not created by this identity: a worker may edit, close or speak on only what it created \
             (objects created by an earlier identity of the same name count as not its own)",
            object.kind, object.id
        )
    })
}

/// A pull request created over REST is also the identity's by its node id
/// (`node_id` in the answer), so that a GraphQL `addComment` may name it.
pub(super) fn node_of_created(kind: &str, answer: &[u8]) -> Option<(&'static str, String)> {
    if kind != "github_pull_request" {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let id = value.get("node_id")?.as_str()?;
    (!id.is_empty()).then(|| (PULL_REQUEST_NODE, id.to_owned()))
}

/// The ids a GraphQL answer gives at the pointers a check asked for: each
/// a non-empty string (a failed mutation answers `null` there).
pub(super) fn learnt(learn: &[Learn], answer: &[u8]) -> Vec<(&'static str, String)> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return Vec::new();
    };
    learn
        .iter()
        .filter_map(|l| {
            let id = value.pointer(&l.pointer)?.as_str()?;
            (!id.is_empty()).then(|| (l.kind, id.to_owned()))
        })
        .collect()
}

/// Whether an answer's status means the object was created.
pub(super) fn created(status: http::StatusCode) -> bool {
    status.is_success()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, id: &str) -> OwnedObject {
        OwnedObject {
            kind: kind.into(),
            id: id.into(),
        }
    }

    #[test]
    fn only_what_was_recorded_under_its_kind_is_own() {
        let created = Created::default();
        created.record("github_issue_comment", "17");
        created.record("github_pull_request", "3");
        // (object, allowed)
        let cases = [
            (object("github_issue_comment", "17"), true),
            (object("github_pull_request", "3"), true),
            (object("github_issue_comment", "18"), false),
            (object("github_issue_comment", "3"), false),
            (object("github_pull_request", "17"), false),
            (object("github_issue_comment", "017"), false),
            (object("github_issue_comment", ""), false),
        ];
        for (o, allowed) in cases {
            let refusal = created.refusal(&o);
            assert_eq!(refusal.is_none(), allowed, "{o:?}");
            if let Some(why) = refusal {
                assert!(why.contains("not created by this identity"), "{why}");
                assert!(why.contains(&o.kind), "{why}");
            }
        }
    }

    #[test]
    fn node_ids_are_known_by_kind_and_learnt_only_as_strings() {
        let created = Created::default();
        created.record(REPOSITORY_NODE, "R_1");
        created.record(PULL_REQUEST_NODE, "PR_1");
        created.record("github_pull_request", "7");
        let known = created.known_ids();
        assert_eq!(known.repositories, ["R_1".to_owned()].into());
        assert_eq!(known.own_pulls, ["PR_1".to_owned()].into());

        let learn = |pointer: &str| Learn {
            kind: PULL_REQUEST_NODE,
            pointer: pointer.into(),
        };
        let answer = br#"{"data":{"c":{"pullRequest":{"id":"PR_2"}},"n":null,"e":"","x":7}}"#;
        let cases = [
            (
                "/data/c/pullRequest/id",
                vec![(PULL_REQUEST_NODE, "PR_2".to_owned())],
            ),
            ("/data/n", vec![]),
            ("/data/e", vec![]),
            ("/data/x", vec![]),
            ("/data/missing/id", vec![]),
        ];
        for (pointer, want) in cases {
            assert_eq!(learnt(&[learn(pointer)], answer), want, "{pointer}");
        }
        assert!(learnt(&[learn("/data")], b"not json").is_empty());

        let rest = br#"{"number":7,"node_id":"PR_7"}"#;
        assert_eq!(
            node_of_created("github_pull_request", rest),
            Some((PULL_REQUEST_NODE, "PR_7".to_owned()))
        );
        assert_eq!(node_of_created("github_issue_comment", rest), None);
        assert_eq!(
            node_of_created("github_pull_request", br#"{"number":7}"#),
            None
        );
    }

    #[test]
    fn only_successful_answers_create() {
        for (status, yes) in [
            (201, true),
            (200, true),
            (403, false),
            (422, false),
            (502, false),
        ] {
            assert_eq!(
                created(http::StatusCode::from_u16(status).unwrap()),
                yes,
                "{status}"
            );
        }
    }
}
