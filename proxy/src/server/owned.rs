//! People's words are theirs: a request that edits or closes an object
//! (a rule's `own`) is forwarded only if the identity created that object
//! through the proxy. The proxy learns what an identity created from the
//! answers to its message-bearing calls (the created id, at the rule's
//! `created_id_pointer`) and keeps the set in memory, per identity.
//!
//! Fail closed: objects created by an earlier identity of the same name
//! are not in the set, so editing them is refused. An identity of the
//! admin API keeps its set across a restart of the proxy (`persist`);
//! a static identity's starts empty.

use std::collections::HashSet;
use std::sync::Mutex;

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
            "{} {} was not created by this identity: a worker may edit or close only what it created \
             (objects created by an earlier identity of the same name count as not its own)",
            object.kind, object.id
        )
    })
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
