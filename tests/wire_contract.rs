//! The bodies two crates exchange, each produced by one side's code and
//! read by the other's: the supervisor's identity request and the proxy's
//! admin API, the proxy's answer and the supervisor's client, a worker's
//! report and the router's report input. Both ends use the shared types of
//! `gatehouse_types::wire`; these tests hold the glue on each side to them.
//! (The control socket's report and inbox bodies are exchanged end to end,
//! CLI to supervisor and back, in `service_jobs.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::collections::BTreeMap;
use std::path::PathBuf;

use gatehouse_proxy::admin::{created_body, parse_new_identity};
use gatehouse_proxy::server::validate_spec;
use gatehouse_router::engine::ReportInput;
use gatehouse_router::ticket;
use gatehouse_supervisor::jobs::codec::to_json_bytes;
use gatehouse_supervisor::jobs::proxy_admin::{created_socket, identity_for};
use gatehouse_supervisor::jobs::report;
use gatehouse_supervisor::jobs::spec::{JobRequest, JobSpec, SpecLimits};
use serde_json::{json, Value};

/// A job as the job API accepts it.
fn accepted_job(tunnel_hosts: &[&str]) -> JobSpec {
    let request = JobRequest {
        ticket: "tkt_000000000000000001".into(),
        team: "core".into(),
        profile: "github-worker".into(),
        rule_sets: vec!["github-worker".into()],
        tunnel_hosts: tunnel_hosts.iter().map(|h| h.to_string()).collect(),
        variables: BTreeMap::from([("repo".into(), "octo/hello".into())]),
        task: "fix the bug".into(),
        deadline_secs: None,
        command: None,
    };
    let limits = SpecLimits {
        max_task_bytes: 1024,
        default_deadline_secs: 60,
        max_deadline_secs: 600,
        proxy_configured: true,
    };
    request.validate(&limits).unwrap()
}

#[test]
fn the_proxy_accepts_the_identity_the_supervisor_sends_for_an_accepted_job() {
    for tunnels in [
        &[][..],
        &["registry.npmjs.org"],
        &["crates.io:443", "x.example.org:8443"],
    ] {
        let job = accepted_job(tunnels);
        let body = to_json_bytes("new identity", &identity_for(&job).unwrap()).unwrap();
        let spec = parse_new_identity(&body).unwrap();
        let checked = validate_spec(&spec).unwrap();
        assert_eq!(spec.name, job.ticket);
        assert_eq!(spec.rule_sets, job.rule_sets);
        assert_eq!(spec.variables, job.variables);
        assert_eq!(checked.repo.unwrap().as_str(), "octo/hello");
        // Tunnel targets travel as `host:port`; a bare host is port 443.
        let sent: Vec<String> = checked.tunnel_hosts.iter().map(|t| t.to_string()).collect();
        let want: Vec<String> = tunnels
            .iter()
            .map(|h| {
                if h.contains(':') {
                    h.to_string()
                } else {
                    format!("{h}:443")
                }
            })
            .collect();
        assert_eq!(sent, want);
    }
}

#[test]
fn the_proxy_refuses_identity_bodies_the_shared_type_refuses() {
    let good =
        json!({"name": "tkt_1", "rule_sets": ["github-worker"], "variables": {"repo": "o/r"}});
    assert!(parse_new_identity(good.to_string().as_bytes()).is_ok());
    let edits: [(&str, Value); 4] = [
        ("name", json!("tkt_v1.2")),
        ("rule_sets", json!(["../x"])),
        ("tunnel_hosts", json!(["localhost"])),
        ("admin", json!(true)),
    ];
    for (key, value) in edits {
        let mut bad = good.clone();
        bad[key] = value;
        assert!(
            parse_new_identity(bad.to_string().as_bytes()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn the_supervisor_reads_the_socket_from_the_proxys_answer() {
    let socket = PathBuf::from("/var/lib/gatehouse/proxy/sockets/tkt_1.sock");
    let body = created_body("tkt_1", socket.clone()).unwrap();
    assert_eq!(created_socket(body.as_bytes()), Some(socket));
    // An answer without a socket is not taken for one.
    assert_eq!(created_socket(br#"{"name":"tkt_1"}"#), None);
    assert_eq!(created_socket(br#"{"name":"tkt_1","socket":7}"#), None);
    assert!(created_body("../x", PathBuf::from("/s")).is_err());
}

#[test]
fn the_router_reads_the_report_a_worker_sends_the_supervisor() {
    let sent = report::Report {
        state: report::ReportState::Blocked,
        summary: "needs a decision".into(),
        question: Some("Which base branch?".into()),
        answers: Some("trg_00000000000a000001".parse().unwrap()),
        links: vec!["https://github.com/o/r/pull/7".into()],
    };
    report::check_report(&sent).unwrap();
    let body = to_json_bytes("report", &sent).unwrap();
    // What the supervisor parses off its control socket...
    let received: report::Report = serde_json::from_slice(&body).unwrap();
    assert_eq!(received, sent);
    // ...is what the router takes, alone and as a ticket's report input.
    let kept: ticket::Report = serde_json::from_slice(&body).unwrap();
    assert_eq!(kept, sent);
    let mut input: Value = serde_json::from_slice(&body).unwrap();
    input["ticket"] = json!("tkt_00000000000a000001");
    let input: ReportInput = serde_json::from_value(input).unwrap();
    assert_eq!(input.report, sent);
    // And the router's copy, as it stores it, is a report the supervisor takes.
    let stored = serde_json::to_vec(&kept).unwrap();
    assert_eq!(stored, body);
    let mut wrong = serde_json::from_slice::<Value>(&body).unwrap();
    wrong["answers"] = json!("tkt_00000000000a000001");
    assert!(serde_json::from_value::<ticket::Report>(wrong.clone()).is_err());
    assert!(serde_json::from_value::<report::Report>(wrong).is_err());
}

/// The router's job body (`live::plan::job_body`) is one the job API
/// accepts: its strict parse (unknown fields refused) and its validation.
#[test]
fn the_job_api_accepts_the_job_the_live_router_sends() {
    use gatehouse_router::gate::Author;
    use gatehouse_router::id::{TicketId, TriggerId};
    use gatehouse_router::live::plan::{idempotency_key, job_body};
    use gatehouse_router::policy::{PolicyVersion, Scope};
    use gatehouse_router::ticket::{Mandate, Ticket, TicketState};
    use gatehouse_router::trigger::{Sender, Source, TriggerInput, TriggerKind};

    let generation = TriggerId::parse("trg_000000000001000000").unwrap();
    let ticket = Ticket {
        id: TicketId::parse("tkt_000000000001000000").unwrap(),
        thread: gatehouse_router::id::ThreadId::parse("thr_000000000001000000").unwrap(),
        thread_key: "gh:acme/widgets#412".into(),
        state: TicketState::Open,
        outcome: None,
        mandate: Mandate {
            policy_version: PolicyVersion("sha256:00".into()),
            scope: Scope {
                team: "core".into(),
                repo: "acme/widgets".into(),
                sandbox_profile: "default".into(),
                rule_sets: vec!["github-worker".into(), "model-api".into()],
                fork: None,
            },
            matched_rules: vec![],
            requester: Author::Human("alice".into()),
            trigger: generation.clone(),
        },
        latest_report: None,
        opened_at: 1,
        updated_at: 1,
    };
    let input = TriggerInput {
        source: Source::Github,
        kind: TriggerKind::IssueComment,
        thread: "gh:acme/widgets#412".into(),
        message_id: "ic_1".into(),
        sender: Sender {
            id: "101".into(),
            login: Some("alice".into()),
            name: "alice".into(),
            is_bot: false,
        },
        addressed: vec![],
        chat: None,
        repo: Some("acme/widgets".into()),
        labels: vec![],
        branch: None,
        text: "@gatehouse-bot fix the flaky test".into(),
        head_ticket: None,
        pull_url: None,
        raw: None,
    };
    let body = serde_json::to_vec(&job_body(&ticket, &generation, &input, 600)).unwrap();
    let request: JobRequest = serde_json::from_slice(&body).unwrap();
    let limits = SpecLimits {
        max_task_bytes: 64 * 1024,
        default_deadline_secs: 60,
        max_deadline_secs: 3600,
        proxy_configured: true,
    };
    let spec = request.validate(&limits).unwrap();
    assert_eq!(spec.ticket, ticket.id.as_str());
    assert_eq!(spec.profile, "default");
    assert_eq!(spec.rule_sets, ["github-worker", "model-api"]);
    assert_eq!(spec.variables["repo"], "acme/widgets");
    assert_eq!(spec.deadline_secs, 600);
    assert!(spec.task.contains("fix the flaky test"));
    // The key is a header value the job API takes as is.
    let key = idempotency_key(&ticket.id, &generation, 1);
    assert!(key.bytes().all(|b| b.is_ascii_graphic()), "{key}");
}

/// A report event as the supervisor writes it (its stored report with its
/// own id and time) is read by the live router as the worker's report.
#[test]
fn the_live_router_reads_the_supervisors_report_events() {
    use gatehouse_router::live::events::{parse_page, JobEvent};
    use gatehouse_supervisor::jobs::store::{EventRecord, StoredReport};

    let report: gatehouse_types::wire::Report = serde_json::from_value(json!({
        "state": "blocked", "summary": "need a decision", "question": "Merge now?",
        "answers": "trg_000000000001000000", "links": ["https://github.com/acme/widgets/pull/7"]
    }))
    .unwrap();
    let stored = StoredReport {
        id: 3,
        at: 9,
        report: report.clone(),
    };
    let events = vec![
        EventRecord {
            seq: 4,
            at: 9,
            job_id: "job_1".into(),
            kind: "report".into(),
            data: json!({"job_id": "job_1", "ticket": "tkt_1", "report": stored}),
        },
        EventRecord {
            seq: 5,
            at: 10,
            job_id: "job_1".into(),
            kind: "job_state".into(),
            data: json!({"job_id": "job_1", "ticket": "tkt_1", "state": "done", "exit": {"code": 0}}),
        },
    ];
    let page = json!({"events": events, "next": 5}).to_string();
    let page = parse_page(page.as_bytes()).unwrap();
    assert_eq!(page.next, 5);
    assert_eq!(
        page.events,
        vec![
            (
                4,
                JobEvent::Report {
                    job_id: "job_1".into(),
                    report
                }
            ),
            (
                5,
                JobEvent::Ended {
                    job_id: "job_1".into(),
                    state: "done".into()
                }
            ),
        ]
    );
}
