//! Stored deliveries ─► the engine, exactly once.
//!
//! Each pending delivery is mapped ([`github::map`]) and either decided
//! ([`Router::on_trigger_with`]) with the delivery marked processed in the
//! decision's own transaction, or marked skipped (or failed, when its
//! payload lacks what its event must carry) in a transaction of its own.
//! Marking refuses a delivery already processed, which rolls back the
//! decision with it, so a delivery's decision is recorded once even if two
//! processors ran; and since nothing else marks it, a crash before the
//! commit leaves it pending for the next run. Exactly once by transaction,
//! not by idempotence.

use crate::engine::{EngineError, Router};
use crate::eval::Judge;
use crate::store::{StoreError, StoredDelivery};
use crate::trigger::TriggerInput;

use super::feishu;
use super::github::{self, BotAccount, Mapped};

/// What processing a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Processed {
    pub triggers: usize,
    pub skipped: usize,
    pub failed: usize,
}

impl Processed {
    pub fn total(&self) -> usize {
        self.triggers + self.skipped + self.failed
    }
}

/// How many deliveries one batch reads.
const BATCH: usize = 64;

/// Processes every pending delivery; `now` gives the decision time of each.
pub fn process_pending<J: Judge>(
    router: &mut Router<J>,
    mut now: impl FnMut() -> u64,
) -> Result<Processed, EngineError> {
    let mut done = Processed::default();
    loop {
        let batch = router.store.read().pending_deliveries(BATCH)?;
        if batch.is_empty() {
            return Ok(done);
        }
        // One turn: the batch's candidates are judged together first (by a
        // batching judge), then each delivery is decided on its own.
        let mapped: Vec<_> = batch.iter().map(|d| (d, map(router, d))).collect();
        let inputs: Vec<TriggerInput> = mapped
            .iter()
            .filter_map(|(_, m)| match m {
                Ok(Mapped::Trigger(input)) => Some((**input).clone()),
                _ => None,
            })
            .collect();
        router.prepare_turn(&inputs)?;
        for (delivery, mapped) in mapped {
            process_one(router, delivery, mapped, now(), &mut done)?;
        }
    }
}

fn map<J: Judge>(router: &Router<J>, d: &StoredDelivery) -> Result<Mapped, String> {
    let bot = BotAccount::from_policy(router.policy());
    match d.platform.as_str() {
        "github" => {
            github::map(&d.event, &d.delivery_id, &d.body, bot.as_ref()).map_err(|e| e.to_string())
        }
        "feishu" => {
            let bot = router.policy().identity.feishu.clone();
            feishu::map(&d.body, bot.as_deref()).map_err(|e| e.to_string())
        }
        other => Err(format!("no source maps `{other}` deliveries")),
    }
}

fn process_one<J: Judge>(
    router: &mut Router<J>,
    d: &StoredDelivery,
    mapped: Result<Mapped, String>,
    now: u64,
    done: &mut Processed,
) -> Result<(), EngineError> {
    match mapped {
        Ok(Mapped::Trigger(input)) => {
            router.on_trigger_with(*input, now, |tx, decision| {
                tx.mark_delivery(d.seq, "trigger", Some(&decision.trigger), now)
            })?;
            done.triggers += 1;
        }
        Ok(Mapped::Skip(why)) => {
            tracing::debug!(delivery = %d.delivery_id, event = %d.event, reason = why.as_str(), "delivery skipped");
            mark(router, d, &format!("skipped: {}", why.as_str()), now)?;
            done.skipped += 1;
        }
        Err(problem) => {
            // Retrying cannot help: the stored body is what was signed.
            tracing::warn!(delivery = %d.delivery_id, event = %d.event, %problem, "delivery not mappable");
            mark(router, d, &format!("failed: {problem}"), now)?;
            done.failed += 1;
        }
    }
    Ok(())
}

fn mark<J: Judge>(
    router: &mut Router<J>,
    d: &StoredDelivery,
    outcome: &str,
    now: u64,
) -> Result<(), EngineError> {
    router
        .store
        .transaction(|tx| tx.mark_delivery(d.seq, outcome, None, now))
        .map_err(|e: StoreError| e.into())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::eval::RulesOnlyJudge;
    use crate::policy::tests::base;
    use crate::store::{DeliveryLog, Durability, Inserted, NewDelivery, Store};

    fn comment_body(id: u64, text: &str) -> Vec<u8> {
        json!({"action": "created",
               "issue": {"id": 1, "number": 1, "title": "t"},
               "comment": {"id": id, "body": text, "updated_at": "t"},
               "sender": {"login": "alice", "id": 101, "type": "User"},
               "repository": {"full_name": "acme/widgets"}})
        .to_string()
        .into_bytes()
    }

    fn setup() -> (tempfile::TempDir, DeliveryLog, Router<RulesOnlyJudge>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("router.db");
        let store = Store::open(&path, Durability::Normal).unwrap();
        let router = Router::new(store, base(), RulesOnlyJudge, 1).unwrap();
        let log = DeliveryLog::open(&path, Durability::Normal).unwrap();
        (dir, log, router)
    }

    fn insert(
        log: &mut DeliveryLog,
        id: &str,
        event: &str,
        meaning: &str,
        body: &[u8],
    ) -> Inserted {
        log.insert(&NewDelivery {
            platform: "github",
            delivery_id: id,
            event,
            meaning,
            body,
            received_at: 5,
        })
        .unwrap()
    }

    fn trigger_decisions(router: &Router<RulesOnlyJudge>) -> usize {
        let decisions = router.store().read().decisions().unwrap();
        decisions
            .iter()
            .filter(|d| d.contains(r#""type":"trigger""#))
            .count()
    }

    #[test]
    fn each_stored_delivery_is_decided_once() {
        let (_dir, mut log, mut router) = setup();
        let body = comment_body(5, "@gatehouse-bot fix it");
        assert_eq!(
            insert(&mut log, "d1", "issue_comment", "m1", &body),
            Inserted::New
        );
        assert_eq!(
            insert(&mut log, "d1", "issue_comment", "m-other", &body),
            Inserted::DuplicateDelivery
        );
        assert_eq!(
            insert(&mut log, "d2", "issue_comment", "m1", &body),
            Inserted::DuplicateMeaning
        );
        let done = process_pending(&mut router, || 10).unwrap();
        assert_eq!(
            done,
            Processed {
                triggers: 1,
                skipped: 0,
                failed: 0
            }
        );
        assert_eq!(trigger_decisions(&router), 1);
        let decision = router.store().read().decisions().unwrap().pop().unwrap();
        assert!(decision.contains(r#""admission":"explicit""#), "{decision}");
        // A second pass finds nothing pending.
        assert_eq!(process_pending(&mut router, || 11).unwrap().total(), 0);
        assert_eq!(trigger_decisions(&router), 1);
        let stored = log.read().deliveries().unwrap();
        assert_eq!(stored.len(), 1);
        let processed = stored[0].processed.clone().unwrap();
        assert_eq!(processed.outcome, "trigger");
        assert!(processed.trigger.is_some());
    }

    /// Marking is part of the decision: marking a processed delivery fails,
    /// and the decision it would have gone with is rolled back.
    #[test]
    fn marking_twice_rolls_back_the_second_decision() {
        let (_dir, mut log, mut router) = setup();
        insert(
            &mut log,
            "d1",
            "issue_comment",
            "m1",
            &comment_body(5, "@gatehouse-bot a"),
        );
        process_pending(&mut router, || 10).unwrap();
        let seq = log.read().deliveries().unwrap()[0].seq;
        let input = match github::map("issue_comment", "d1", &comment_body(5, "x"), None).unwrap() {
            Mapped::Trigger(t) => *t,
            other => panic!("{other:?}"),
        };
        let again = router.on_trigger_with(input.clone(), 20, |tx, d| {
            tx.mark_delivery(seq, "trigger", Some(&d.trigger), 20)
        });
        assert!(again.is_err());
        assert_eq!(trigger_decisions(&router), 1);
        // Positive control: the same trigger without the marking is decided.
        router.on_trigger(input, 21).unwrap();
        assert_eq!(trigger_decisions(&router), 2);
    }

    #[test]
    fn skipped_and_unmappable_deliveries_are_marked_without_a_trigger() {
        let (_dir, mut log, mut router) = setup();
        let assigned_to_bob = json!({"action": "assigned",
            "issue": {"id": 1, "number": 1, "title": "t", "updated_at": "t"},
            "assignee": {"login": "bob", "id": 102, "type": "User"},
            "sender": {"login": "alice", "id": 101, "type": "User"},
            "repository": {"full_name": "acme/widgets"}});
        insert(
            &mut log,
            "d1",
            "issues",
            "m1",
            assigned_to_bob.to_string().as_bytes(),
        );
        insert(
            &mut log,
            "d2",
            "issue_comment",
            "m2",
            br#"{"action":"created"}"#,
        );
        let done = process_pending(&mut router, || 10).unwrap();
        assert_eq!(
            done,
            Processed {
                triggers: 0,
                skipped: 1,
                failed: 1
            }
        );
        assert_eq!(trigger_decisions(&router), 0);
        let outcomes: Vec<String> = log
            .read()
            .deliveries()
            .unwrap()
            .into_iter()
            .map(|d| d.processed.unwrap().outcome)
            .collect();
        assert_eq!(outcomes[0], "skipped: not_the_bot");
        assert!(outcomes[1].starts_with("failed: "), "{}", outcomes[1]);
    }

    /// A round's deliveries and the polling state are stored together; an
    /// item a webhook brought first (same meaning) is left out, and asking
    /// again stores nothing new: one trigger either way.
    #[test]
    fn polled_deliveries_join_the_webhooks_by_meaning() {
        let (_dir, mut log, mut router) = setup();
        let body = comment_body(5, "@gatehouse-bot fix it");
        insert(&mut log, "guid-1", "issue_comment", "m5", &body);
        let polled = |id: &'static str, meaning: &'static str| NewDelivery {
            platform: "github",
            delivery_id: id,
            event: "issue_comment",
            meaning,
            body: &body,
            received_at: 6,
        };
        let round = [polled("poll:m5", "m5"), polled("poll:m6", "m6")];
        assert_eq!(
            log.insert_polled(&round, "github:acme/widgets", "{\"a\":1}", 6)
                .unwrap(),
            1
        );
        assert_eq!(
            log.read()
                .poll_state("github:acme/widgets")
                .unwrap()
                .as_deref(),
            Some("{\"a\":1}")
        );
        assert_eq!(log.read().poll_state("github:acme/other").unwrap(), None);
        assert_eq!(
            log.insert_polled(&round, "github:acme/widgets", "{\"a\":2}", 7)
                .unwrap(),
            0
        );
        assert_eq!(
            log.read()
                .poll_state("github:acme/widgets")
                .unwrap()
                .as_deref(),
            Some("{\"a\":2}")
        );
        // A webhook arriving after the poll is a duplicate too.
        assert_eq!(
            insert(&mut log, "guid-2", "issue_comment", "m6", &body),
            Inserted::DuplicateMeaning
        );
        assert_eq!(process_pending(&mut router, || 10).unwrap().triggers, 2);
        assert_eq!(trigger_decisions(&router), 2);
    }

    /// Deliveries left pending (a crash after the acknowledgement, before
    /// processing) are processed by the next router on the same state.
    #[test]
    fn pending_deliveries_survive_a_restart() {
        let (dir, mut log, router) = setup();
        insert(
            &mut log,
            "d1",
            "issue_comment",
            "m1",
            &comment_body(5, "@gatehouse-bot a"),
        );
        insert(
            &mut log,
            "d2",
            "issue_comment",
            "m2",
            &comment_body(6, "@gatehouse-bot b"),
        );
        drop(router);
        let path = dir.path().join("router.db");
        let store = Store::open(&path, Durability::Normal).unwrap();
        let mut router = Router::new(store, base(), RulesOnlyJudge, 2).unwrap();
        assert_eq!(process_pending(&mut router, || 10).unwrap().triggers, 2);
        assert_eq!(trigger_decisions(&router), 2);
    }
}
