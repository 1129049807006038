use proptest::prelude::*;

use crate::{IdentityName, JobId, TicketId, TriggerId};

#[test]
fn ticket_id_table() {
    let longest = format!("tkt_{}", "a".repeat(60));
    for ok in [
        "tkt_1",
        "tkt_000000000000000000",
        "tkt_a-b_C",
        longest.as_str(),
    ] {
        assert!(TicketId::is_valid(ok), "{ok}");
    }
    let too_long = format!("tkt_{}", "a".repeat(61));
    for bad in [
        "",
        "tkt_",
        "tkt",
        "trg_1",
        "tkt_v1.2",
        "tkt_..",
        "tkt_a/b",
        "TKT_1",
        too_long.as_str(),
    ] {
        assert!(TicketId::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn trigger_and_job_id_tables() {
    for ok in ["trg_1", "trg_8f21", "trg_0193a5b2c4d5000001"] {
        assert!(TriggerId::is_valid(ok), "{ok}");
    }
    for bad in ["", "trg_", "tkt_1", "trg_a b", "trg_a.b", "trg_\n"] {
        assert!(TriggerId::parse(bad).is_err(), "{bad}");
    }
    for ok in ["job_1", "job_a", "job_00ff00ff00ff00ff"] {
        assert!(JobId::is_valid(ok), "{ok}");
    }
    for bad in ["", "job_", "job", "job_../x", "tkt_1"] {
        assert!(JobId::parse(bad).is_err(), "{bad}");
    }
}

proptest! {
    /// Every ticket id names a valid proxy identity: a ticket the job API
    /// accepts never fails later at the proxy.
    #[test]
    fn every_ticket_id_is_an_identity_name(s in "\\PC{0,70}") {
        if let Ok(t) = TicketId::parse(&s) {
            prop_assert!(IdentityName::is_valid(t.as_str()));
            let identity = t.identity();
            prop_assert_eq!(identity.as_str(), t.as_str());
        }
    }

    #[test]
    fn ticket_ids_round_trip(rest in "[A-Za-z0-9_-]{1,60}") {
        let text = format!("tkt_{rest}");
        let t = TicketId::parse(&text).unwrap();
        let json = serde_json::to_string(&t).unwrap();
        prop_assert_eq!(serde_json::from_str::<TicketId>(&json).unwrap(), t);
    }

    /// The router's issued shape (prefix, 12 + 6 lowercase hex digits).
    #[test]
    fn router_issued_ids_pass(hex in "[0-9a-f]{18}") {
        let ticket = format!("tkt_{hex}");
        prop_assert!(TicketId::is_valid(&ticket));
        let trigger = format!("trg_{hex}");
        prop_assert!(TriggerId::is_valid(&trigger));
    }
}
