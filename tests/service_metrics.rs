//! `gatehouse supervisor` with `[metrics] listen`: scraped before, during
//! and after real jobs (one done, one failed, one running then cancelled),
//! the exposition parses, jobs by state and the live sandboxes moved by
//! exactly those jobs, and no label holds a job or ticket id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gatehouse_supervisor::jobs::http::{HttpMethod as Method, HttpStatus as StatusCode};
use gatehouse_testkit::metrics::{free_port, parse, scrape, sum, Sample};
use gatehouse_testkit::service::*;

fn samples(addr: std::net::SocketAddr) -> (String, Vec<Sample>) {
    let (code, _, body) = scrape(addr);
    assert_eq!(code, 200);
    let parsed = parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    (body, parsed)
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_by_state_and_live_sandboxes_move_with_real_jobs() {
    let addr = free_port();
    let svc = Service::start(Options {
        metrics: Some(addr),
        ..Options::default()
    });
    let (_, before) = samples(addr);
    let jobs =
        |s: &[Sample], state: &str| sum(s, "gatehouse_supervisor_jobs_total", &[("state", state)]);
    let live = |s: &[Sample]| sum(s, "gatehouse_supervisor_live_sandboxes", &[]);
    assert_eq!(live(&before), 0.0);

    let ok = svc.submit("ok", sh_job("tkt_metrics_ok", "true")).await;
    let bad = svc.submit("bad", sh_job("tkt_metrics_bad", "exit 3")).await;
    assert_eq!(svc.wait_ended(&ok).await["state"], "done");
    assert_eq!(svc.wait_ended(&bad).await["state"], "failed");
    let long = svc
        .submit("long", sh_job("tkt_metrics_long", "exec sleep 1000"))
        .await;
    svc.wait_for(&long, |s| s == "running").await;
    let (_, during) = samples(addr);
    assert_eq!(live(&during), 1.0, "one sandbox runs");
    let resp = svc
        .call(Method::DELETE, &format!("/jobs/{long}"), None)
        .await;
    assert_eq!(resp.status, StatusCode::ACCEPTED);
    assert_eq!(svc.wait_ended(&long).await["state"], "cancelled");
    let (text, after) = samples(addr);

    let moved = |state: &str| jobs(&after, state) - jobs(&before, state);
    for (state, n) in [
        ("queued", 3.0),
        ("running", 3.0),
        ("done", 1.0),
        ("failed", 1.0),
        ("cancelled", 1.0),
    ] {
        assert_eq!(moved(state), n, "{state}: {text}");
    }
    assert_eq!(live(&after), 0.0, "{text}");
    let started = |s: &[Sample]| sum(s, "gatehouse_supervisor_sandbox_start_seconds_count", &[]);
    assert_eq!(started(&after) - started(&before), 3.0, "{text}");
    assert!(
        sum(
            &after,
            "gatehouse_supervisor_sandbox_start_seconds_sum",
            &[]
        ) > 0.0
    );
    for s in &after {
        for (k, v) in &s.labels {
            assert!(
                !v.contains("tkt_") && !v.contains("job_"),
                "{}: label {k}={v} holds an id",
                s.name
            );
        }
    }
    for id in [&ok, &bad, &long] {
        assert!(!text.contains(id.as_str()), "{id} in the exposition");
    }
}
