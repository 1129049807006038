//! Webhook recovery, the pure half: from the App's deliveries list (GitHub's
//! `GET /app/hook/deliveries`, newest first) and the durable state, which
//! failed deliveries to ask GitHub to send again.
//!
//! GitHub never retries a failed delivery by itself; a redelivery reuses
//! the delivery's `guid` (`X-GitHub-Delivery`), so the intake's dedup makes
//! asking twice harmless. A delivery is asked for when one of its attempts
//! after the cursor failed, none of its listed attempts succeeded, the
//! router has not stored it, and it was asked for fewer than
//! [`MAX_ASKS`] times.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A delivery is asked for again at most this many times.
pub const MAX_ASKS: u32 = 3;
/// The state remembers this many asked-for deliveries (the oldest go).
const MAX_REMEMBERED: usize = 1000;

/// What the recovery loop keeps across rounds (stored as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryState {
    /// Items with ids up to this were seen (`0`: none yet).
    pub seen_up_to: u64,
    /// Deliveries asked for, by guid: how many times, and the id of the
    /// last attempt asked for (the oldest are forgotten first).
    #[serde(default)]
    pub asked: BTreeMap<String, (u32, u64)>,
}

/// One item of the deliveries list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: u64,
    pub guid: String,
    pub ok: bool,
}

impl Item {
    /// An item of GitHub's list; `None` when it lacks `id` or `guid`.
    pub fn from_json(v: &Value) -> Option<Self> {
        let code = v.get("status_code").and_then(Value::as_u64).unwrap_or(0);
        Some(Self {
            id: v.get("id")?.as_u64()?,
            guid: v.get("guid")?.as_str()?.to_owned(),
            ok: (200..300).contains(&code),
        })
    }
}

/// What one round decided: the attempts to redeliver (by item id, one per
/// delivery) and the state to store once they were asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub redeliver: Vec<u64>,
    pub after: RecoveryState,
    /// Deliveries that failed again after [`MAX_ASKS`] asks: given up on.
    pub given_up: Vec<String>,
}

/// Whether a page that ends with `items` (newest first) reached the cursor:
/// no older page is needed.
pub fn reached(items: &[Item], state: &RecoveryState) -> bool {
    items.last().is_some_and(|i| i.id <= state.seen_up_to)
}

/// Plans a round over `items` (every page read, newest first); `stored`
/// says whether the router already holds a delivery id.
pub fn plan(items: &[Item], before: &RecoveryState, stored: impl Fn(&str) -> bool) -> Plan {
    let succeeded: BTreeSet<&str> = items
        .iter()
        .filter(|i| i.ok)
        .map(|i| i.guid.as_str())
        .collect();
    let mut after = before.clone();
    let mut redeliver = Vec::new();
    let mut given_up = Vec::new();
    let mut planned: BTreeSet<&str> = BTreeSet::new();
    for item in items.iter().filter(|i| i.id > before.seen_up_to) {
        after.seen_up_to = after.seen_up_to.max(item.id);
        let guid = item.guid.as_str();
        if item.ok || succeeded.contains(guid) || planned.contains(guid) || stored(guid) {
            continue;
        }
        planned.insert(guid);
        let (asks, _) = before.asked.get(guid).copied().unwrap_or((0, 0));
        if asks >= MAX_ASKS {
            given_up.push(guid.to_owned());
            continue;
        }
        after.asked.insert(guid.to_owned(), (asks + 1, item.id));
        redeliver.push(item.id);
    }
    while after.asked.len() > MAX_REMEMBERED {
        let oldest = after
            .asked
            .iter()
            .min_by_key(|(_, (_, id))| *id)
            .map(|(g, _)| g.clone());
        match oldest {
            Some(g) => after.asked.remove(&g),
            None => break,
        };
    }
    Plan {
        redeliver,
        after,
        given_up,
    }
}

/// The path and query of a `Link` header's `rel="next"` target
/// (`<https://api.github.com/app/hook/deliveries?cursor=…>; rel="next"`),
/// if it is on the App's deliveries list.
pub fn next_page(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.trim().split_once(';')?;
        if !params.split(';').any(|p| p.trim() == "rel=\"next\"") {
            return None;
        }
        let url = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let rest = url.strip_prefix("https://")?;
        let path = &rest[rest.find('/')?..];
        path.starts_with("/app/hook/deliveries?")
            .then(|| path.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: u64, guid: &str, ok: bool) -> Item {
        Item {
            id,
            guid: guid.into(),
            ok,
        }
    }

    #[test]
    fn failed_unstored_deliveries_after_the_cursor_are_asked_for_once() {
        let items = [
            item(9, "a", true),  // a redelivered: fine now
            item(8, "b", false), // failed
            item(7, "c", false), // failed, stored (a poll found it)
            item(6, "b", false), // failed before: asked once for b
            item(5, "a", false), // failed, but a later attempt succeeded
            item(4, "d", false), // failed, at the cursor: seen before
        ];
        let before = RecoveryState {
            seen_up_to: 4,
            asked: BTreeMap::new(),
        };
        let plan = plan(&items, &before, |g| g == "c");
        assert_eq!(plan.redeliver, vec![8]);
        assert_eq!(plan.after.seen_up_to, 9);
        assert_eq!(plan.after.asked.get("b"), Some(&(1, 8)));
        assert!(plan.given_up.is_empty());

        // Nothing new: nothing asked, the cursor stays.
        let again = super::plan(&items, &plan.after, |_| false);
        assert_eq!(again.redeliver, Vec::<u64>::new());
        assert_eq!(again.after, plan.after);
    }

    #[test]
    fn a_delivery_that_keeps_failing_is_given_up_after_max_asks() {
        let mut state = RecoveryState::default();
        for round in 1..=MAX_ASKS + 1 {
            // Each round lists the new failed attempt the last ask made.
            let id = u64::from(round);
            let items = [item(id, "x", false)];
            let p = plan(&items, &state, |_| false);
            if round <= MAX_ASKS {
                assert_eq!(p.redeliver, vec![id], "round {round}");
            } else {
                assert!(p.redeliver.is_empty());
                assert_eq!(p.given_up, vec!["x".to_owned()]);
            }
            state = p.after;
        }
    }

    #[test]
    fn the_remembered_asks_are_bounded() {
        let items: Vec<Item> = (1..=(MAX_REMEMBERED as u64 + 5))
            .rev()
            .map(|i| item(i, &format!("g{i}"), false))
            .collect();
        let p = plan(&items, &RecoveryState::default(), |_| false);
        assert_eq!(p.redeliver.len(), MAX_REMEMBERED + 5);
        assert_eq!(p.after.asked.len(), MAX_REMEMBERED);
        assert!(!p.after.asked.contains_key("g1"), "the oldest go first");
    }

    #[test]
    fn pages_stop_at_the_cursor() {
        let state = RecoveryState {
            seen_up_to: 5,
            asked: BTreeMap::new(),
        };
        assert!(!reached(&[item(9, "a", true), item(6, "b", true)], &state));
        assert!(reached(&[item(9, "a", true), item(5, "b", true)], &state));
        assert!(!reached(&[], &state));
    }

    #[test]
    fn items_and_links_are_read_as_github_writes_them() {
        let v = serde_json::json!({"id": 12, "guid": "g", "status_code": 202, "status": "OK"});
        assert_eq!(Item::from_json(&v), Some(item(12, "g", true)));
        let failed = serde_json::json!({"id": 13, "guid": "g", "status_code": 0});
        assert_eq!(Item::from_json(&failed), Some(item(13, "g", false)));
        assert_eq!(Item::from_json(&serde_json::json!({"guid": "g"})), None);
        for (link, expected) in [
            (
                r#"<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_12>; rel="next""#,
                Some("/app/hook/deliveries?per_page=100&cursor=v1_12"),
            ),
            (
                r#"<https://api.github.com/app/hook/deliveries?cursor=v1_1>; rel="prev", <https://api.github.com/app/hook/deliveries?cursor=v1_9>; rel="next""#,
                Some("/app/hook/deliveries?cursor=v1_9"),
            ),
            (
                r#"<https://api.github.com/app/hook/deliveries?cursor=v1_1>; rel="prev""#,
                None,
            ),
            (
                r#"<https://api.github.com/repos/a/b/issues?page=2>; rel="next""#,
                None,
            ),
            (
                r#"<http://api.github.com/app/hook/deliveries?cursor=v1_1>; rel="next""#,
                None,
            ),
            ("", None),
        ] {
            assert_eq!(next_page(link).as_deref(), expected, "{link}");
        }
    }
}
