use serde::de::DeserializeOwned;
use serde::Serialize;

use super::*;
use crate::{TriggerId, TunnelTarget};

/// `value` serializes to exactly `json` (the bytes the two ends exchanged
/// before these types were shared), and `json` deserializes back to it.
fn exact<T>(value: &T, json: &str)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(value).unwrap();
    assert_eq!(text, json);
    assert_eq!(&serde_json::from_str::<T>(&text).unwrap(), value);
}

fn refused<T: DeserializeOwned + std::fmt::Debug>(json: &str) {
    let got = serde_json::from_str::<T>(json);
    assert!(got.is_err(), "{json} was accepted: {got:?}");
}

fn new_identity() -> NewIdentity {
    NewIdentity {
        name: "tkt_1".parse().unwrap(),
        rule_sets: vec!["github-worker".parse().unwrap()],
        tunnel_hosts: vec!["registry.npmjs.org:443".parse().unwrap()],
        variables: [("repo".to_string(), "octo/hello".to_string())].into(),
    }
}

#[test]
fn new_identity_round_trips() {
    exact(
        &new_identity(),
        r#"{"name":"tkt_1","rule_sets":["github-worker"],"tunnel_hosts":["registry.npmjs.org:443"],"variables":{"repo":"octo/hello"}}"#,
    );
    // Optional fields default; a bare tunnel host means port 443.
    let minimal: NewIdentity =
        serde_json::from_str(r#"{"name":"a","rule_sets":[],"tunnel_hosts":["x.org"]}"#).unwrap();
    assert_eq!(
        minimal.tunnel_hosts,
        vec![TunnelTarget::parse("x.org:443").unwrap()]
    );
    assert!(minimal.variables.is_empty());
}

#[test]
fn new_identity_refuses_what_the_proxy_refuses() {
    refused::<NewIdentity>(r#"{"name":"tkt_v1.2","rule_sets":[]}"#);
    refused::<NewIdentity>(r#"{"name":"../x","rule_sets":[]}"#);
    refused::<NewIdentity>(r#"{"name":"a","rule_sets":["../x"]}"#);
    refused::<NewIdentity>(r#"{"name":"a","rule_sets":[],"tunnel_hosts":["localhost"]}"#);
    refused::<NewIdentity>(r#"{"name":"a","rule_sets":[],"admin":true}"#);
    refused::<NewIdentity>(r#"{"name":"a"}"#);
    // The positive control for the table above.
    serde_json::from_str::<NewIdentity>(r#"{"name":"a","rule_sets":[]}"#).unwrap();
}

#[test]
fn created_identity_round_trips_and_takes_new_fields() {
    let created = CreatedIdentity {
        name: "tkt_1".parse().unwrap(),
        socket: "/var/lib/gatehouse/proxy/sockets/tkt_1.sock".into(),
    };
    exact(
        &created,
        r#"{"name":"tkt_1","socket":"/var/lib/gatehouse/proxy/sockets/tkt_1.sock"}"#,
    );
    let newer: CreatedIdentity =
        serde_json::from_str(r#"{"name":"tkt_1","socket":"/s","since":1}"#).unwrap();
    assert_eq!(newer.socket, std::path::PathBuf::from("/s"));
    refused::<CreatedIdentity>(r#"{"name":"tkt_1"}"#);
}

fn report() -> Report {
    Report {
        state: ReportState::Ready,
        summary: "PR opened".into(),
        question: Some("May I merge?".into()),
        answers: Some(TriggerId::parse("trg_42").unwrap()),
        links: vec!["https://github.com/o/r/pull/7".into()],
    }
}

#[test]
fn report_round_trips() {
    exact(
        &report(),
        r#"{"state":"ready","summary":"PR opened","question":"May I merge?","answers":"trg_42","links":["https://github.com/o/r/pull/7"]}"#,
    );
    // Empty optional fields are left out, and default when absent.
    let bare = Report {
        question: None,
        answers: None,
        links: vec![],
        state: ReportState::Working,
        ..report()
    };
    exact(&bare, r#"{"state":"working","summary":"PR opened"}"#);
}

#[test]
fn report_refuses_a_bad_state_answers_or_a_job_field() {
    refused::<Report>(r#"{"state":"done","summary":"x"}"#);
    refused::<Report>(r#"{"state":"ready","summary":"x","answers":"tkt_1"}"#);
    refused::<Report>(r#"{"state":"ready","summary":"x","answers":"not-a-trigger"}"#);
    refused::<Report>(r#"{"state":"ready","summary":"x","job_id":"job_other"}"#);
    serde_json::from_str::<Report>(r#"{"state":"ready","summary":"x","answers":"trg_1"}"#).unwrap();
    for (text, state) in [
        ("working", Some(ReportState::Working)),
        ("ready", Some(ReportState::Ready)),
        ("blocked", Some(ReportState::Blocked)),
        ("done", None),
        ("Ready", None),
    ] {
        assert_eq!(ReportState::parse(text), state, "{text}");
    }
}

#[test]
fn inbox_bodies_round_trip() {
    let message = InboxMessage {
        text: "skip the e2e tests".into(),
        trigger: Some(TriggerId::parse("trg_42").unwrap()),
    };
    exact(
        &message,
        r#"{"text":"skip the e2e tests","trigger":"trg_42"}"#,
    );
    exact(
        &InboxMessage {
            text: "late".into(),
            trigger: None,
        },
        r#"{"text":"late"}"#,
    );
    let page = InboxPage {
        messages: vec![InboxDelivery::new(3, 1700000000000, message)],
    };
    exact(
        &page,
        r#"{"messages":[{"seq":3,"at":1700000000000,"text":"skip the e2e tests","trigger":"trg_42"}]}"#,
    );
    exact(&InboxAck { through: 3 }, r#"{"through":3}"#);
}

#[test]
fn inbox_bodies_refuse_bad_triggers_and_unknown_fields() {
    refused::<InboxMessage>(r#"{"text":"x","trigger":"1"}"#);
    refused::<InboxMessage>(r#"{"text":"x","job":"job_1"}"#);
    refused::<InboxDelivery>(r#"{"seq":1,"at":1,"text":"x","trigger":"tkt_1"}"#);
    refused::<InboxAck>(r#"{"through":1,"all":true}"#);
    refused::<InboxAck>(r#"{"through":"1"}"#);
    serde_json::from_str::<InboxMessage>(r#"{"text":"x","trigger":"trg_1"}"#).unwrap();
}
