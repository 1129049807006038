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
use crate::eval::{Ask, Judge};
use crate::model::window::{Flush, Window, WindowConfig};
use crate::store::{StoreError, StoredDelivery};
use crate::trigger::TriggerInput;

use super::feishu;
use super::github::{self, BotAccount, Mapped, Skip};

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

/// How many deliveries one batch reads (besides those held for company).
const BATCH: usize = 64;

/// What a pass did, and until when candidates are held for company.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    pub done: Processed,
    /// Held candidates are judged at this time (ms) at the latest: the
    /// next pass is due then.
    pub held_until: Option<u64>,
}

/// Processes every pending delivery; `now` gives the decision time of each.
/// Nothing waits for company (batching per turn).
pub fn process_pending<J: Judge>(
    router: &mut Router<J>,
    now: impl FnMut() -> u64,
) -> Result<Processed, EngineError> {
    let mut window = Window::new(WindowConfig::OFF);
    Ok(process_with_window(router, now, &mut window)?.done)
}

/// Processes pending deliveries, holding back the candidates a batching
/// judge would be asked about while the window says to wait for company
/// (and, to keep each thread's order, the later deliveries of their
/// threads); everything else is decided at once.
pub fn process_with_window<J: Judge>(
    router: &mut Router<J>,
    mut now: impl FnMut() -> u64,
    window: &mut Window,
) -> Result<Pass, EngineError> {
    let mut pass = Pass::default();
    let mut held_count = 0;
    loop {
        let limit = BATCH + held_count;
        let batch = router.store.read().pending_deliveries(limit)?;
        if batch.is_empty() {
            return Ok(pass);
        }
        // One turn: the batch's candidates are judged together first (by a
        // batching judge), then each delivery is decided on its own.
        let mapped: Vec<_> = batch.iter().map(|d| (d, map(router, d))).collect();
        let asks = asks_of(router, &mapped)?;
        let threads: Vec<(Option<&str>, bool)> = mapped
            .iter()
            .zip(&asks)
            .map(|((_, m), ask)| match m {
                Ok(Mapped::Trigger(input)) => (Some(input.thread.as_str()), ask.is_some()),
                _ => (None, false),
            })
            .collect();
        let held = held_back(&threads);
        let mut arrivals = Vec::new();
        for ((d, _), ask) in mapped.iter().zip(&asks) {
            if ask.is_some() {
                window.arrived(d.seq, d.received_at);
                arrivals.push(d.received_at);
            }
        }
        // A later delivery on a held candidate's thread ends the wait:
        // it is decided after the candidate, and nobody waits behind one.
        let follower = held
            .iter()
            .zip(&threads)
            .any(|(h, (_, asked))| *h && !asked);
        let flush = if follower {
            Flush::Now
        } else {
            window.flush(&arrivals, now())
        };
        match flush {
            Flush::Now => {
                router.prepare_asks(asks.into_iter().flatten().collect());
                for (delivery, mapped) in mapped {
                    process_one(router, delivery, mapped, now(), &mut pass.done)?;
                }
                held_count = 0;
                pass.held_until = None;
                if batch.len() < limit {
                    return Ok(pass);
                }
            }
            Flush::At(until) => {
                held_count = held.iter().filter(|h| **h).count();
                pass.held_until = Some(until);
                let mut decided = 0;
                for ((delivery, mapped), held) in mapped.into_iter().zip(held) {
                    if !held {
                        process_one(router, delivery, mapped, now(), &mut pass.done)?;
                        decided += 1;
                    }
                }
                if decided == 0 || batch.len() < limit {
                    return Ok(pass);
                }
            }
        }
    }
}

/// What a batching judge would be asked about each mapped delivery (none
/// for a judge that does not batch: it is asked during each decision).
fn asks_of<J: Judge>(
    router: &Router<J>,
    mapped: &[(&StoredDelivery, Result<Mapped, String>)],
) -> Result<Vec<Option<Ask>>, EngineError> {
    let mut asks: Vec<Option<Ask>> = vec![None; mapped.len()];
    if !router.judge_batches() {
        return Ok(asks);
    }
    let (at, inputs): (Vec<usize>, Vec<TriggerInput>) = mapped
        .iter()
        .enumerate()
        .filter_map(|(i, (_, m))| match m {
            Ok(Mapped::Trigger(input)) => Some((i, (**input).clone())),
            _ => None,
        })
        .unzip();
    for (i, ask) in at.into_iter().zip(router.judge_asks(&inputs)?) {
        asks[i] = ask;
    }
    Ok(asks)
}

/// Which deliveries wait with the held candidates (pure): each one asked
/// about (`(thread, asked)` with `asked`), and every later one on the
/// thread of a held one, so a thread's deliveries are decided in order.
pub fn held_back(items: &[(Option<&str>, bool)]) -> Vec<bool> {
    let mut threads: Vec<&str> = Vec::new();
    items
        .iter()
        .map(|(thread, asked)| {
            let held = *asked || thread.is_some_and(|t| threads.contains(&t));
            if let (true, Some(t)) = (held, thread) {
                threads.push(t);
            }
            held
        })
        .collect()
}

fn map<J: Judge>(router: &Router<J>, d: &StoredDelivery) -> Result<Mapped, String> {
    let bot = BotAccount::from_policy(router.policy());
    match d.platform.as_str() {
        "github" => {
            github::map(&d.event, &d.delivery_id, &d.body, bot.as_ref()).map_err(|e| e.to_string())
        }
        "feishu" => map_feishu(router, d),
        other => Err(format!("no source maps `{other}` deliveries")),
    }
}

/// A Feishu delivery, with what the store knows of a recall: the recalled
/// message's own event (where it was, who sent it) and whether it opened
/// the thread's live ticket; and, for a message, whether it was recalled
/// already (Feishu may deliver a retried message after its recall): a
/// recalled message opens nothing, whatever order the two arrive in.
fn map_feishu<J: Judge>(router: &Router<J>, d: &StoredDelivery) -> Result<Mapped, String> {
    let bot = router.policy().identity.feishu.clone();
    let read = router.store.read();
    let lookup = |meaning: String| {
        read.delivery_by_meaning("feishu", &meaning)
            .map_err(|e| format!("looking up {meaning}: {e}"))
    };
    if let Some(id) = feishu::recalled_message(&d.body) {
        let original = lookup(format!("feishu:message:{id}"))?;
        // Its decision's trigger, when it was decided into one.
        let decided = original
            .as_ref()
            .and_then(|o| o.processed.as_ref())
            .and_then(|p| p.trigger.as_ref());
        let opened_live_ticket = match decided {
            Some(trigger) => opened_live(router, trigger)?,
            None => false,
        };
        let original = original.as_ref().map(|o| o.body.as_slice());
        return feishu::map_recall(&d.body, original, opened_live_ticket, bot.as_deref())
            .map_err(|e| e.to_string());
    }
    let mapped = feishu::map(&d.body, bot.as_deref()).map_err(|e| e.to_string())?;
    if let Mapped::Trigger(input) = &mapped {
        if lookup(format!("feishu:recall:{}", input.message_id))?.is_some() {
            return Ok(Mapped::Skip(Skip::Recalled));
        }
    }
    Ok(mapped)
}

/// Whether `trigger` opened the live ticket of its thread (its mandate's).
fn opened_live<J: Judge>(
    router: &Router<J>,
    trigger: &crate::id::TriggerId,
) -> Result<bool, String> {
    let read = router.store.read();
    let record = read.trigger(trigger).map_err(|e| e.to_string())?;
    let Some(thread) = read
        .thread_by_key(&record.trigger.input.thread)
        .map_err(|e| e.to_string())?
    else {
        return Ok(false);
    };
    let latest = read.latest_ticket(&thread.id).map_err(|e| e.to_string())?;
    Ok(latest.is_some_and(|t| t.is_live() && &t.mandate.trigger == trigger))
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
            crate::metrics::intake_lag(&d.platform, d.received_at, now);
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
    use serde_json::{json, Value};

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

    fn feishu(log: &mut DeliveryLog, id: &str, event_type: &str, meaning: &str, event: Value) {
        let body = json!({"schema": "2.0",
            "header": {"event_id": id, "event_type": event_type, "create_time": "1",
                       "token": "t", "app_id": "cli_a", "tenant_key": "tk"},
            "event": event});
        let inserted = log
            .insert(&NewDelivery {
                platform: "feishu",
                delivery_id: id,
                event: event_type,
                meaning,
                body: body.to_string().as_bytes(),
                received_at: 5,
            })
            .unwrap();
        assert_eq!(inserted, Inserted::New);
    }

    /// A recall is decided on the recalled message's thread: its sender's
    /// recall of the message that opened the live ticket withdraws the
    /// request (the loop then ends the ticket); a recall of a message never
    /// received and the bot's membership changes are marked skipped, each
    /// with its reason.
    #[test]
    fn a_recall_joins_the_recalled_messages_live_ticket_and_membership_is_recorded() {
        let (_dir, mut log, mut router) = setup();
        feishu(
            &mut log,
            "ev_1",
            "im.message.receive_v1",
            "feishu:message:om_1",
            json!({"sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
                   "message": {"message_id": "om_1", "chat_id": "oc_1", "chat_type": "p2p",
                               "message_type": "text", "content": "{\"text\":\"fix the build\"}"}}),
        );
        // Decided (a ticket opens) before its recall arrives.
        assert_eq!(process_pending(&mut router, || 9).unwrap().triggers, 1);
        feishu(
            &mut log,
            "ev_2",
            "im.message.recalled_v1",
            "feishu:recall:om_1",
            json!({"message_id": "om_1", "chat_id": "oc_1", "recall_type": "message_owner"}),
        );
        feishu(
            &mut log,
            "ev_3",
            "im.message.recalled_v1",
            "feishu:recall:om_never",
            json!({"message_id": "om_never", "chat_id": "oc_1", "recall_type": "message_owner"}),
        );
        feishu(
            &mut log,
            "ev_4",
            "im.chat.member.bot.added_v1",
            "feishu:bot:added:oc_2:1",
            json!({"chat_id": "oc_2", "operator_id": {"open_id": "ou_alice"}}),
        );
        feishu(
            &mut log,
            "ev_5",
            "im.chat.member.bot.deleted_v1",
            "feishu:bot:removed:oc_2:1",
            json!({"chat_id": "oc_2", "operator_id": {"open_id": "ou_alice"}}),
        );
        let done = process_pending(&mut router, || 10).unwrap();
        assert_eq!(
            done,
            Processed {
                triggers: 1,
                skipped: 3,
                failed: 0
            }
        );
        let deliveries = log.read().deliveries().unwrap();
        let outcome = |i: usize| deliveries[i].processed.clone().unwrap();
        let asked = router
            .store()
            .read()
            .trigger(&outcome(0).trigger.unwrap())
            .unwrap();
        let recalled = router
            .store()
            .read()
            .trigger(&outcome(1).trigger.unwrap())
            .unwrap();
        assert_eq!(
            recalled.trigger.input.kind,
            crate::trigger::TriggerKind::RequestRecalled
        );
        assert_eq!(recalled.trigger.input.thread, asked.trigger.input.thread);
        assert_eq!(recalled.trigger.input.sender, asked.trigger.input.sender);
        let decisions = router.store().read().decisions().unwrap();
        let last_trigger = decisions
            .iter()
            .rev()
            .find(|d| d.contains(r#""type":"trigger""#))
            .unwrap();
        assert!(last_trigger.contains("pass_through"), "{last_trigger}");
        let tickets = router.store().read().tickets().unwrap();
        assert_eq!(tickets.len(), 1, "the recall opened nothing");
        assert_eq!(outcome(2).outcome, "skipped: never_received");
        assert_eq!(outcome(3).outcome, "skipped: bot_added");
        assert_eq!(outcome(4).outcome, "skipped: bot_removed");
    }

    /// Feishu may deliver a retried message after its recall: the message
    /// then opens nothing, in one pass or two, and a recall of a later
    /// message (not the ticket's) only informs.
    #[test]
    fn a_message_recalled_before_it_was_decided_opens_nothing() {
        let message = |id: &str, text: &str| {
            json!({"sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
                   "message": {"message_id": id, "chat_id": "oc_1", "chat_type": "p2p",
                               "message_type": "text", "content": json!({"text": text}).to_string()}})
        };
        let recall =
            |id: &str| json!({"message_id": id, "chat_id": "oc_1", "recall_type": "message_owner"});
        for passes in [1, 2] {
            let (_dir, mut log, mut router) = setup();
            feishu(
                &mut log,
                "ev_r",
                "im.message.recalled_v1",
                "feishu:recall:om_1",
                recall("om_1"),
            );
            if passes == 2 {
                process_pending(&mut router, || 10).unwrap();
            }
            feishu(
                &mut log,
                "ev_m",
                "im.message.receive_v1",
                "feishu:message:om_1",
                message("om_1", "fix it"),
            );
            process_pending(&mut router, || 11).unwrap();
            let outcomes: Vec<String> = log
                .read()
                .deliveries()
                .unwrap()
                .into_iter()
                .map(|d| d.processed.unwrap().outcome)
                .collect();
            let recall_outcome = if passes == 1 {
                "trigger"
            } else {
                "skipped: never_received"
            };
            assert_eq!(
                outcomes,
                [recall_outcome, "skipped: recalled"],
                "{passes} passes"
            );
            assert!(
                router.store().read().tickets().unwrap().is_empty(),
                "{passes} passes"
            );
        }
        // A later message of the thread recalled: information, not a withdrawal.
        let (_dir, mut log, mut router) = setup();
        feishu(
            &mut log,
            "ev_1",
            "im.message.receive_v1",
            "feishu:message:om_1",
            message("om_1", "fix it"),
        );
        process_pending(&mut router, || 10).unwrap();
        let mut later = message("om_2", "also the docs");
        later["message"]["root_id"] = json!("om_1");
        feishu(
            &mut log,
            "ev_2",
            "im.message.receive_v1",
            "feishu:message:om_2",
            later,
        );
        feishu(
            &mut log,
            "ev_3",
            "im.message.recalled_v1",
            "feishu:recall:om_2",
            recall("om_2"),
        );
        process_pending(&mut router, || 11).unwrap();
        let deliveries = log.read().deliveries().unwrap();
        let trigger = deliveries[2].processed.clone().unwrap().trigger.unwrap();
        let kind = router
            .store()
            .read()
            .trigger(&trigger)
            .unwrap()
            .trigger
            .input
            .kind;
        assert_eq!(kind, crate::trigger::TriggerKind::MessageRecalled);
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

    #[test]
    fn held_back_keeps_each_threads_order() {
        let t = |s: &'static str| Some(s);
        // (thread, asked) per delivery ─► held
        type Items<'a> = &'a [(Option<&'a str>, bool)];
        let cases: &[(Items, &[bool])] = &[
            (&[], &[]),
            (&[(t("a"), false), (t("b"), false)], &[false, false]),
            (&[(t("a"), true), (t("b"), false)], &[true, false]),
            // Later deliveries on a held thread wait too; earlier ones do not.
            (
                &[
                    (t("b"), false),
                    (t("a"), true),
                    (t("a"), false),
                    (t("b"), false),
                ],
                &[false, true, true, false],
            ),
            (
                &[(t("a"), true), (None, false), (t("a"), true)],
                &[true, false, true],
            ),
        ];
        for (items, want) in cases {
            assert_eq!(held_back(items), *want, "{items:?}");
        }
    }

    /// A batching judge that answers every ask "matches", counting the
    /// asks of each turn.
    struct CountingJudge {
        turns: Vec<usize>,
        window: WindowConfig,
    }

    impl Judge for CountingJudge {
        fn judge(
            &self,
            _: &crate::policy::Rule,
            _: &TriggerInput,
        ) -> Result<crate::eval::Judgement, crate::eval::JudgeError> {
            Ok(crate::eval::Judgement {
                matched: true,
                reason: "counted".into(),
            })
        }
        fn prepare(&mut self, asks: Vec<Ask>) {
            self.turns.push(asks.len());
        }
        fn batches(&self) -> bool {
            true
        }
        fn window(&self) -> WindowConfig {
            self.window
        }
    }

    const COMMENT_RULE: &str = r#"
[[rules]]
id = "comments"
team = "core"
text = "Someone asks for a change in a comment."
mode = "observe"
when = { kinds = ["issue_comment"], author = "human" }
"#;

    fn issue_comment(issue: u64, id: u64, text: &str) -> Vec<u8> {
        json!({"action": "created",
               "issue": {"id": issue, "number": issue, "title": "t"},
               "comment": {"id": id, "body": text, "updated_at": "t"},
               "sender": {"login": "alice", "id": 101, "type": "User"},
               "repository": {"full_name": "acme/widgets"}})
        .to_string()
        .into_bytes()
    }

    fn windowed() -> (
        tempfile::TempDir,
        DeliveryLog,
        Router<CountingJudge>,
        Window,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("router.db");
        let store = Store::open(&path, Durability::Normal).unwrap();
        let text = format!("{}{COMMENT_RULE}", crate::policy::tests::BASE);
        let policy = crate::policy::Policy::from_toml("policy.toml", &text).unwrap();
        let config = WindowConfig {
            bound_ms: 10_000,
            batch_max: 3,
        };
        let judge = CountingJudge {
            turns: Vec::new(),
            window: config,
        };
        let router = Router::new(store, policy, judge, 1).unwrap();
        let log = DeliveryLog::open(&path, Durability::Normal).unwrap();
        let mut window = Window::new(router.judge_window());
        // Six candidates in the last minute: company is likely.
        for (key, at) in (-6..0).zip(0..) {
            window.arrived(key, 1_000 * at);
        }
        (dir, log, router, window)
    }

    fn deliver(log: &mut DeliveryLog, n: u64, body: &[u8], at: u64) {
        log.insert(&NewDelivery {
            platform: "github",
            delivery_id: &format!("d{n}"),
            event: "issue_comment",
            meaning: &format!("m{n}"),
            body,
            received_at: at,
        })
        .unwrap();
    }

    #[test]
    fn candidates_wait_for_company_up_to_the_bound_and_nothing_else_waits() {
        let (_dir, mut log, mut router, mut window) = windowed();
        deliver(&mut log, 1, &issue_comment(1, 1, "please rename it"), 6_000);
        let pass = process_with_window(&mut router, || 6_100, &mut window).unwrap();
        assert_eq!((pass.done.total(), pass.held_until), (0, Some(16_000)));
        // An explicit request on another thread is decided at once; the
        // candidate still waits.
        deliver(
            &mut log,
            2,
            &issue_comment(2, 2, "@gatehouse-bot fix it"),
            7_000,
        );
        let pass = process_with_window(&mut router, || 7_100, &mut window).unwrap();
        assert_eq!((pass.done.triggers, pass.held_until), (1, Some(16_000)));
        assert!(router.judge().turns.is_empty());
        // Company arrives; the bound is reached: both judged in one turn.
        deliver(
            &mut log,
            3,
            &issue_comment(3, 3, "and the other one"),
            9_000,
        );
        let pass = process_with_window(&mut router, || 9_100, &mut window).unwrap();
        assert_eq!(pass.done.total(), 0);
        let pass = process_with_window(&mut router, || 16_000, &mut window).unwrap();
        assert_eq!((pass.done.triggers, pass.held_until), (2, None));
        assert_eq!(router.judge().turns, vec![2]);
        assert_eq!(trigger_decisions_of(&router), 3);
    }

    #[test]
    fn a_full_batch_a_follower_or_a_low_rate_ends_the_wait() {
        // A full batch (3) goes at once.
        let (_dir, mut log, mut router, mut window) = windowed();
        for n in 1..=3 {
            deliver(&mut log, n, &issue_comment(n, n, "rename it"), 6_000);
        }
        let pass = process_with_window(&mut router, || 6_100, &mut window).unwrap();
        assert_eq!(pass.done.triggers, 3);
        assert_eq!(router.judge().turns, vec![3]);

        // A later delivery on a held candidate's thread: both decided, in order.
        let (_dir, mut log, mut router, mut window) = windowed();
        deliver(&mut log, 1, &issue_comment(1, 1, "rename it"), 6_000);
        assert_eq!(
            process_with_window(&mut router, || 6_100, &mut window)
                .unwrap()
                .done
                .total(),
            0
        );
        deliver(
            &mut log,
            2,
            &issue_comment(1, 2, "@gatehouse-bot do it"),
            6_200,
        );
        let pass = process_with_window(&mut router, || 6_300, &mut window).unwrap();
        assert_eq!((pass.done.triggers, pass.held_until), (2, None));
        let decisions = router.store().read().decisions().unwrap();
        let triggers: Vec<&String> = decisions
            .iter()
            .filter(|d| d.contains(r#""type":"trigger""#))
            .collect();
        assert!(
            triggers[0].contains(r#""admission":"candidate""#),
            "{}",
            triggers[0]
        );
        assert!(
            triggers[1].contains(r#""admission":"explicit""#),
            "{}",
            triggers[1]
        );

        // A lone candidate when candidates are rare is judged at once.
        let (_dir, mut log, mut router, _) = windowed();
        let mut quiet = Window::new(router.judge_window());
        deliver(&mut log, 1, &issue_comment(1, 1, "rename it"), 6_000);
        let pass = process_with_window(&mut router, || 6_100, &mut quiet).unwrap();
        assert_eq!((pass.done.triggers, pass.held_until), (1, None));
        assert_eq!(router.judge().turns, vec![1]);
    }

    fn trigger_decisions_of<J: Judge>(router: &Router<J>) -> usize {
        let decisions = router.store().read().decisions().unwrap();
        decisions
            .iter()
            .filter(|d| d.contains(r#""type":"trigger""#))
            .count()
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
