//! One job cannot starve the supervisor through its control socket. The
//! supervisor runs under a low open-file limit (`prlimit`); job A opens far
//! more connections to its control socket than the process has
//! descriptors, sends heads and bodies slowly or never, and floods reports
//! and acknowledgements. Meanwhile `POST /jobs` and job B's reports are
//! served, A's connections beyond its share are closed at accept, idle and
//! slow ones are closed, and A's stored reports stop at its budget with a
//! 429 that says why. Jobs run unsandboxed here, as in `service_jobs.rs`:
//! the control socket is the same one a sandbox has mounted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use gatehouse_supervisor::jobs::http::{
    self, ClientResponse, HttpMethod as Method, HttpStatus as StatusCode,
};
use gatehouse_testkit::service::*;
use serde_json::{json, Value};

const WAIT: &str = "while [ ! -e go ]; do sleep 0.05; done";

/// A call that must be answered: a stall fails the test instead of
/// hanging it.
async fn answered(
    socket: &Path,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> ClientResponse {
    let body = body.map(|b| b.to_string().into_bytes());
    tokio::time::timeout(
        Duration::from_secs(60),
        http::request(socket, method.clone(), path, headers, body),
    )
    .await
    .unwrap_or_else(|_| panic!("{method} {path} was not answered within 60 s"))
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

async fn report(socket: &Path, summary: &str) -> ClientResponse {
    answered(
        socket,
        Method::POST,
        "/report",
        &[],
        Some(json!({"state": "working", "summary": summary})),
    )
    .await
}

/// Whether the server has closed `s` (a read sees end of file or a reset).
fn closed(mut s: &UnixStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut byte = [0u8; 1];
    match gatehouse_testkit::proxy::raw::read_some(&mut s, &mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// Waits (at most 60 s) until every stream in `held` is closed.
fn all_closed_eventually(held: &[UnixStream]) -> bool {
    for _ in 0..600 {
        if held.iter().all(closed) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Everything the server answers on `s` until it closes (10 s at most).
fn answer_of(mut s: UnixStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The report events of job `id` in the event log.
async fn stored_reports(svc: &Service, id: &str) -> Vec<Value> {
    let mut cursor = 0;
    let mut reports = Vec::new();
    loop {
        let page = svc
            .call(Method::GET, &format!("/events?after={cursor}"), None)
            .await
            .json();
        let events = page["events"].as_array().unwrap();
        if events.is_empty() {
            return reports;
        }
        cursor = page["next"].as_i64().unwrap();
        reports.extend(
            events
                .iter()
                .filter(|e| e["kind"] == "report" && e["job_id"] == id)
                .cloned(),
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_flood_on_one_control_socket_stalls_nothing_else() {
    // 512 descriptors: 128 control connections in all, 8 for one job.
    let svc = Service::start(Options {
        nofile: Some(512),
        limits: "control_read_secs = 2\n".into(),
        ..Default::default()
    });
    let a = svc.submit("a", sh_job("tkt_flood_a", WAIT)).await;
    let b = svc.submit("b", sh_job("tkt_flood_b", WAIT)).await;
    svc.wait_for(&a, |s| s == "running").await;
    svc.wait_for(&b, |s| s == "running").await;
    let sock_a = svc.control_socket(&a);
    let sock_b = svc.control_socket(&b);
    assert_eq!(report(&sock_a, "control").await.status, StatusCode::CREATED);

    // A opens 700 connections, more than the supervisor has descriptors,
    // and sends nothing on them.
    let held: Vec<UnixStream> = (0..700)
        .map(|_| UnixStream::connect(&sock_a).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let open = held.iter().filter(|s| !closed(s)).count();
    assert!(open <= 8, "job A holds {open} control connections");
    assert!(open >= 1, "job A's first connections are served");

    // The job API and job B are served meanwhile.
    let c = svc.submit("c", sh_job("tkt_flood_c", "true")).await;
    assert_eq!(svc.wait_ended(&c).await["state"], "done");
    for i in 0..5 {
        let resp = report(&sock_b, &format!("b {i}")).await;
        assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.json());
    }
    assert_eq!(svc.job(&b).await["latest_report"]["summary"], "b 4");

    // Idle connections are closed after control_read_secs; A is served again.
    assert!(
        all_closed_eventually(&held),
        "idle control connections stay open"
    );
    drop(held);
    assert_eq!(report(&sock_a, "again").await.status, StatusCode::CREATED);

    // A head that never ends is cut; a body that never ends is answered 408.
    let mut slow_head = UnixStream::connect(&sock_a).unwrap();
    write!(slow_head, "POST /report HTTP/1.1\r\nHost: localhost\r\n").unwrap();
    let mut slow_body = UnixStream::connect(&sock_a).unwrap();
    write!(
        slow_body,
        "POST /report HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"state\":"
    )
    .unwrap();
    let (head_answer, body_answer) = tokio::task::spawn_blocking(move || {
        (
            all_closed_eventually(std::slice::from_ref(&slow_head)),
            answer_of(slow_body),
        )
    })
    .await
    .unwrap();
    assert!(head_answer, "a head that never ends is held open");
    assert!(
        body_answer.starts_with("HTTP/1.1 408") && body_answer.contains("body_too_slow"),
        "{body_answer}"
    );

    // A head past the bound is refused, the connection closed. First the
    // slow connections above must have left the job's connection budget (the
    // server counts a close a moment after it happens): a request answered
    // shows there is room, so the next connection is judged on its head,
    // not closed at accept.
    let room = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match http::request(&sock_a, Method::GET, "/inbox", &[], None).await {
            Ok(r) if r.status == StatusCode::OK => break,
            other => assert!(
                tokio::time::Instant::now() < room,
                "no room on the control socket: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut big = UnixStream::connect(&sock_a).unwrap();
    // The server may answer and close before the whole head is written:
    // a broken pipe here still leaves its answer to read.
    let _ = write!(
        big,
        "GET /inbox HTTP/1.1\r\nHost: localhost\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(20 * 1024)
    );
    let answer = tokio::task::spawn_blocking(move || answer_of(big))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let mut many = UnixStream::connect(&sock_a).unwrap();
    let headers: String = (0..100).map(|i| format!("X-H{i}: v\r\n")).collect();
    write!(
        many,
        "GET /inbox HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n"
    )
    .unwrap();
    let answer = tokio::task::spawn_blocking(move || answer_of(many))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // The positive control: the same request with a small head.
    let resp = answered(&sock_a, Method::GET, "/inbox", &[("x-pad", "p")], None).await;
    assert_eq!(resp.status, StatusCode::OK);

    for t in ["tkt_flood_a", "tkt_flood_b"] {
        std::fs::write(svc.work_dir(t).join("go"), "").unwrap();
    }
    assert_eq!(svc.wait_ended(&a).await["state"], "done");
    assert_eq!(svc.wait_ended(&b).await["state"], "done");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_report_flood_is_answered_429_and_stored_state_stays_bounded() {
    // A wide bucket, so the budget is what stops the flood here; and room
    // for connections, so that a busy machine's late close of the last
    // round's four (the per-job cap is 8) never refuses this round's.
    let svc = Service::start(Options {
        limits: "control_write_burst = 1000\ncontrol_writes_per_minute = 60000\n\
                 reports_per_job = 20\nreport_bytes_per_job = 8192\n\
                 control_connections_per_job = 64\n"
            .into(),
        ..Default::default()
    });
    let a = svc.submit("a", sh_job("tkt_budget_a", WAIT)).await;
    let b = svc.submit("b", sh_job("tkt_budget_b", WAIT)).await;
    svc.wait_for(&a, |s| s == "running").await;
    svc.wait_for(&b, |s| s == "running").await;
    let sock_a = svc.control_socket(&a);
    let sock_b = svc.control_socket(&b);

    // A floods 100 small reports, 4 at a time.
    let mut statuses = Vec::new();
    for round in 0..25 {
        let sends = (0..4).map(|i| {
            let sock = sock_a.clone();
            tokio::spawn(async move { report(&sock, &format!("a {round}.{i}")).await })
        });
        for send in sends.collect::<Vec<_>>() {
            let resp = send.await.unwrap();
            if resp.status == StatusCode::TOO_MANY_REQUESTS {
                assert_eq!(resp.json()["error"]["code"], "report_budget_spent");
                assert!(
                    resp.json()["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("20 reports"),
                    "{:?}",
                    resp.json()
                );
            }
            statuses.push(resp.status);
        }
    }
    let created = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((created, refused), (20, 80));
    assert_eq!(stored_reports(&svc, &a).await.len(), 20);

    // B, meanwhile, is within its own budget: large reports until their
    // bytes reach 8 KiB.
    let question = "q".repeat(1000);
    let mut b_created = 0;
    let refusal = loop {
        let resp = answered(
            &sock_b,
            Method::POST,
            "/report",
            &[],
            Some(json!({"state": "blocked", "summary": "b", "question": question})),
        )
        .await;
        if resp.status != StatusCode::CREATED {
            break resp;
        }
        b_created += 1;
        assert!(b_created <= 8, "B stored more than 8 KiB of reports");
    };
    assert_eq!(refusal.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        refusal.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("8192 bytes of reports"),
        "{:?}",
        refusal.json()
    );
    let stored_b = stored_reports(&svc, &b).await;
    assert_eq!(stored_b.len(), 7);
    let bytes: usize = stored_b
        .iter()
        .map(|e| {
            let mut r = e["data"]["report"].clone();
            let o = r.as_object_mut().unwrap();
            o.remove("id");
            o.remove("at");
            r.to_string().len()
        })
        .sum();
    assert!(bytes <= 8192, "{bytes}");

    // The job API still starts jobs.
    let c = svc.submit("c", sh_job("tkt_budget_c", "true")).await;
    assert_eq!(svc.wait_ended(&c).await["state"], "done");
    for t in ["tkt_budget_a", "tkt_budget_b"] {
        std::fs::write(svc.work_dir(t).join("go"), "").unwrap();
    }
    svc.wait_ended(&a).await;
    svc.wait_ended(&b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reports_and_acknowledgements_share_a_rate_per_job() {
    let svc = Service::start(Options {
        limits: "control_write_burst = 5\ncontrol_writes_per_minute = 1\n".into(),
        ..Default::default()
    });
    let a = svc.submit("a", sh_job("tkt_rate_a", WAIT)).await;
    let b = svc.submit("b", sh_job("tkt_rate_b", WAIT)).await;
    svc.wait_for(&a, |s| s == "running").await;
    svc.wait_for(&b, |s| s == "running").await;
    let sock_a = svc.control_socket(&a);
    let sock_b = svc.control_socket(&b);

    for i in 0..4 {
        assert_eq!(
            report(&sock_a, &format!("a {i}")).await.status,
            StatusCode::CREATED
        );
    }
    let ack = |sock: std::path::PathBuf| async move {
        answered(
            &sock,
            Method::POST,
            "/inbox/ack",
            &[],
            Some(json!({"through": 0})),
        )
        .await
    };
    assert_eq!(ack(sock_a.clone()).await.status, StatusCode::OK);
    // The burst is spent: a sixth write of either kind is 429, with when
    // to come back.
    for resp in [report(&sock_a, "a 5").await, ack(sock_a.clone()).await] {
        assert_eq!(resp.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.json()["error"]["code"], "too_many_writes");
        // One write a minute: back within the minute.
        let retry: u64 = resp.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
    }
    // Reading the inbox is not a write; B has its own bucket.
    let inbox = answered(&sock_a, Method::GET, "/inbox", &[], None).await;
    assert_eq!(inbox.status, StatusCode::OK);
    assert_eq!(report(&sock_b, "b").await.status, StatusCode::CREATED);
    assert_eq!(svc.job(&a).await["latest_report"]["summary"], "a 3");

    for t in ["tkt_rate_a", "tkt_rate_b"] {
        std::fs::write(svc.work_dir(t).join("go"), "").unwrap();
    }
    svc.wait_ended(&a).await;
    svc.wait_ended(&b).await;
}
