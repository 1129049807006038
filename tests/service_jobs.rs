//! End-to-end tests of the supervisor's job API: idempotency, states,
//! results, cancel, deadlines, crashes, reports and inbox, proxy identities,
//! restarts and many jobs at once. Jobs run through the unsandboxed launcher
//! here (the service logic is the same); `service_sandbox.rs` runs them in
//! real sandboxes.

use gatehouse_supervisor::jobs::http::{self, HttpMethod as Method, HttpStatus as StatusCode};
use gatehouse_testkit::procs::{alive, pids_in, wait_for_pids};
use gatehouse_testkit::service::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_start_and_conflicting_key() {
    let svc = Service::start(Options::default());
    let body = sh_job("tkt_idem", "sleep 0.2");
    let first = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k1")],
            Some(body.clone()),
        )
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    let id = first.json()["job_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("job_"));
    assert_eq!(first.json()["state"], "queued");
    assert_eq!(first.headers["location"], format!("/jobs/{id}").as_str());

    // The same key and body: the same job, never a second one.
    let again = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k1")],
            Some(body.clone()),
        )
        .await;
    assert_eq!(again.status, StatusCode::ACCEPTED);
    assert_eq!(again.json()["job_id"], id.as_str());
    assert_eq!(again.headers["idempotent-replayed"], "true");

    // The same key with another body: 409, naming the job the key belongs to.
    let mut other = body.clone();
    other["task"] = json!("another task");
    let conflict = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k1")],
            Some(other.clone()),
        )
        .await;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    assert_eq!(conflict.json()["error"]["code"], "idempotency_key_reused");
    assert_eq!(conflict.json()["job_id"], id.as_str());

    // A new key for a ticket with a live job: 409 too (one job per ticket).
    let busy = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k2")],
            Some(other),
        )
        .await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_eq!(busy.json()["error"]["code"], "ticket_busy");

    // No key, unknown fields, malformed ids: 400 with a JSON error.
    let no_key = svc.call(Method::POST, "/jobs", Some(body.clone())).await;
    assert_eq!(no_key.status, StatusCode::BAD_REQUEST);
    assert_eq!(no_key.json()["error"]["code"], "missing_idempotency_key");
    let mut extra = body.clone();
    extra["privileged"] = json!(true);
    let unknown = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k3")],
            Some(extra),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(unknown.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("privileged"));
    let bad_ticket = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k4")],
            Some(sh_job("tkt_../../etc", "true")),
        )
        .await;
    assert_eq!(bad_ticket.status, StatusCode::BAD_REQUEST);

    // A profile that does not exist, or a scope beyond the profile's: 400.
    let mut no_profile = sh_job("tkt_np", "true");
    no_profile["profile"] = json!("no-such-profile");
    let mut wide = sh_job("tkt_wide", "true");
    wide["rule_sets"] = json!(["feishu-admin"]);
    for (key, body) in [("k5", no_profile), ("k6", wide)] {
        let resp = svc
            .call_with(
                Method::POST,
                "/jobs",
                &[("idempotency-key", key)],
                Some(body),
            )
            .await;
        assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{:?}", resp.json());
    }

    svc.wait_ended(&id).await;
    // Replaying after the end still names the same job, in its real state.
    let late = svc
        .call_with(
            Method::POST,
            "/jobs",
            &[("idempotency-key", "k1")],
            Some(body),
        )
        .await;
    assert_eq!(late.json()["job_id"], id.as_str());
    assert_eq!(late.json()["state"], "done");
}

#[tokio::test(flavor = "multi_thread")]
async fn states_result_and_unknown_ids() {
    let svc = Service::start(Options::default());
    // The job waits for a file the test creates, so "running" is observed.
    let id = svc
        .submit(
            "k",
            sh_job(
                "tkt_states",
                "while [ ! -e go ]; do sleep 0.02; done; echo out; echo err >&2",
            ),
        )
        .await;
    let running = svc.wait_for(&id, |s| s == "running").await;
    assert!(running["started_at"].is_i64());
    assert!(running["ended_at"].is_null());
    let early = svc
        .call(Method::GET, &format!("/jobs/{id}/result"), None)
        .await;
    assert_eq!(early.status, StatusCode::CONFLICT);
    assert_eq!(early.json()["error"]["code"], "job_not_ended");
    assert_eq!(early.json()["state"], "running");

    std::fs::write(svc.work_dir("tkt_states").join("go"), "").unwrap();
    let done = svc.wait_ended(&id).await;
    assert_eq!(done["state"], "done");
    assert_eq!(done["exit"]["code"], 0);
    assert!(done["ended_at"].as_i64() >= done["started_at"].as_i64());

    let result = svc
        .call(Method::GET, &format!("/jobs/{id}/result"), None)
        .await;
    assert_eq!(result.status, StatusCode::OK);
    let r = result.json();
    assert_eq!(r["state"], "done");
    let stdout = std::fs::read_to_string(r["logs"]["stdout"].as_str().unwrap()).unwrap();
    let stderr = std::fs::read_to_string(r["logs"]["stderr"].as_str().unwrap()).unwrap();
    assert_eq!((stdout.as_str(), stderr.as_str()), ("out\n", "err\n"));
    // Logs live outside the work dir.
    let work = r["work_dir"].as_str().unwrap();
    assert!(!r["logs"]["stdout"].as_str().unwrap().starts_with(work));

    for path in ["/jobs/job_nope", "/jobs/job_nope/result"] {
        let resp = svc.call(Method::GET, path, None).await;
        assert_eq!(resp.status, StatusCode::NOT_FOUND);
        assert_eq!(resp.json()["error"]["code"], "not_found");
    }
    let resp = svc.call(Method::DELETE, "/jobs/job_nope", None).await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND);
    let resp = svc.call(Method::PUT, "/jobs", None).await;
    assert_eq!(resp.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(resp.json()["error"]["message"].is_string());

    // The event log saw each state once, in order.
    let events = svc.call(Method::GET, "/events?after=0", None).await.json();
    let states: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["job_id"] == id.as_str())
        .map(|e| e["data"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["queued", "running", "done"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_while_queued_running_and_after_done() {
    let svc = Service::start(Options {
        max_running_jobs: 1,
        ..Options::default()
    });
    let a = svc
        .submit("a", sh_job("tkt_a", "echo $$ > pid; exec sleep 1000"))
        .await;
    svc.wait_for(&a, |s| s == "running").await;
    // One slot: b waits in the queue.
    let b = svc.submit("b", sh_job("tkt_b", "touch started")).await;
    assert_eq!(svc.job(&b).await["state"], "queued");

    let resp = svc.call(Method::DELETE, &format!("/jobs/{b}"), None).await;
    assert_eq!(resp.status, StatusCode::ACCEPTED);
    let b_end = svc.wait_ended(&b).await;
    assert_eq!(b_end["state"], "cancelled");
    assert!(b_end["started_at"].is_null(), "a queued job never starts");
    assert!(!svc.work_dir("tkt_b").join("started").exists());

    let pid = wait_for_pids(&svc.work_dir("tkt_a").join("pid")).await[0];
    assert!(alive(pid));
    let resp = svc.call(Method::DELETE, &format!("/jobs/{a}"), None).await;
    assert_eq!(resp.status, StatusCode::ACCEPTED);
    assert_eq!(resp.json()["state"], "running");
    let a_end = svc.wait_ended(&a).await;
    assert_eq!(a_end["state"], "cancelled");
    assert_eq!(a_end["exit"]["signal"], 15);
    assert!(!alive(pid), "the cancelled job's process is gone");

    // A job that finished before the cancel stays done; the cancel says so.
    let c = svc.submit("c", sh_job("tkt_c", "true")).await;
    svc.wait_ended(&c).await;
    let resp = svc.call(Method::DELETE, &format!("/jobs/{c}"), None).await;
    assert_eq!(resp.status, StatusCode::CONFLICT);
    assert_eq!(resp.json()["error"]["code"], "job_ended");
    assert_eq!(resp.json()["state"], "done");
    assert_eq!(svc.job(&c).await["state"], "done");
    // And a second cancel of the cancelled job is the same 409.
    let resp = svc.call(Method::DELETE, &format!("/jobs/{a}"), None).await;
    assert_eq!(resp.status, StatusCode::CONFLICT);
    assert_eq!(resp.json()["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_escalates_to_sigkill() {
    let svc = Service::start(Options {
        cancel_grace_ms: 200,
        ..Options::default()
    });
    let id = svc
        .submit(
            "k",
            sh_job(
                "tkt_stubborn",
                "trap '' TERM; echo $$ > pid; while :; do sleep 0.05; done",
            ),
        )
        .await;
    svc.wait_for(&id, |s| s == "running").await;
    wait_for_pids(&svc.work_dir("tkt_stubborn").join("pid")).await;
    svc.call(Method::DELETE, &format!("/jobs/{id}"), None).await;
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "cancelled");
    assert_eq!(end["exit"]["signal"], 9);
    let pid = pids_in(&svc.work_dir("tkt_stubborn").join("pid"))[0];
    assert!(!alive(pid));
}

#[tokio::test(flavor = "multi_thread")]
async fn deadline_kills_every_process() {
    let svc = Service::start(Options::default());
    let mut body = sh_job(
        "tkt_slow",
        "echo $$ > pids; sleep 1000 & echo $! >> pids; (sleep 1000 & echo $! >> pids; wait) & wait",
    );
    body["deadline_secs"] = json!(1);
    let id = svc.submit("k", body).await;
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "timed_out");
    assert_eq!(end["reason"], "deadline reached");
    let pids = pids_in(&svc.work_dir("tkt_slow").join("pids"));
    assert_eq!(pids.len(), 3, "{pids:?}");
    for pid in pids {
        assert!(!alive(pid), "process {pid} of a timed-out job survived");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_is_failed_with_its_exit() {
    let svc = Service::start(Options::default());
    let a = svc.submit("a", sh_job("tkt_exit", "exit 3")).await;
    let b = svc.submit("b", sh_job("tkt_segv", "kill -SEGV $$")).await;
    let c = svc
        .submit("c", sh_job("tkt_missing", "exec /nonexistent/agent"))
        .await;
    let a = svc.wait_ended(&a).await;
    assert_eq!(
        (a["state"].as_str(), a["exit"]["code"].as_i64()),
        (Some("failed"), Some(3))
    );
    let b = svc.wait_ended(&b).await;
    assert_eq!(
        (b["state"].as_str(), b["exit"]["signal"].as_i64()),
        (Some("failed"), Some(11))
    );
    let c = svc.wait_ended(&c).await;
    assert_eq!(
        (c["state"].as_str(), c["exit"]["code"].as_i64()),
        (Some("failed"), Some(127))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn report_and_inbox_round_trip() {
    let svc = Service::start(Options::default());
    let script = "gatehouse report --state working --summary 'starting'; \
                  gatehouse inbox --wait > got.jsonl; \
                  gatehouse report --state ready --summary 'PR opened' --answers trg_42 \
                      --link https://github.com/o/r/pull/7";
    let id = svc.submit("k", sh_job("tkt_talk", script)).await;
    // Wait for the first report through the event stream.
    let mut cursor = 0;
    let report = loop {
        let resp = svc
            .call(
                Method::GET,
                &format!("/events?after={cursor}&wait_ms=5000"),
                None,
            )
            .await
            .json();
        cursor = resp["next"].as_i64().unwrap();
        if let Some(e) = resp["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "report")
        {
            break e.clone();
        }
    };
    assert_eq!(report["job_id"], id.as_str());
    assert_eq!(report["data"]["ticket"], "tkt_talk");
    assert_eq!(report["data"]["report"]["state"], "working");
    assert_eq!(svc.job(&id).await["latest_report"]["summary"], "starting");

    let resp = svc
        .call(
            Method::POST,
            &format!("/jobs/{id}/inbox"),
            Some(json!({"text": "skip the e2e tests", "trigger": "trg_42"})),
        )
        .await;
    assert_eq!(resp.status, StatusCode::CREATED);
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "done", "{end}");
    let got = std::fs::read_to_string(svc.work_dir("tkt_talk").join("got.jsonl")).unwrap();
    let msg: Value = serde_json::from_str(got.lines().next().unwrap()).unwrap();
    assert_eq!(msg["text"], "skip the e2e tests");
    assert_eq!(msg["trigger"], "trg_42");

    let result = svc
        .call(Method::GET, &format!("/jobs/{id}/result"), None)
        .await
        .json();
    assert_eq!(result["final_report"]["state"], "ready");
    assert_eq!(result["final_report"]["answers"], "trg_42");
    assert_eq!(
        result["final_report"]["links"][0],
        "https://github.com/o/r/pull/7"
    );

    // The inbox of an ended job is closed.
    let resp = svc
        .call(
            Method::POST,
            &format!("/jobs/{id}/inbox"),
            Some(json!({"text": "late"})),
        )
        .await;
    assert_eq!(resp.status, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inbox_message_is_not_lost_when_printing_it_fails() {
    // At least once: `gatehouse inbox` acknowledges only what it printed.
    let svc = Service::start(Options::default());
    let script = "gatehouse report --state working --summary 'starting'; \
                  gatehouse inbox --wait > /dev/full 2> full.err && exit 91; \
                  gatehouse inbox > got.jsonl || exit 92; \
                  gatehouse inbox > again.jsonl || exit 93; \
                  gatehouse report --state ready --summary done";
    let id = svc.submit("k", sh_job("tkt_full", script)).await;
    loop {
        if !svc.job(&id).await["latest_report"].is_null() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let resp = svc
        .call(
            Method::POST,
            &format!("/jobs/{id}/inbox"),
            Some(json!({"text": "rebase on main"})),
        )
        .await;
    assert_eq!(resp.status, StatusCode::CREATED);
    let seq = resp.json()["seq"].as_i64().unwrap();
    let end = svc.wait_ended(&id).await;
    assert_eq!(end["state"], "done", "{end}");
    let work = svc.work_dir("tkt_full");
    let err = std::fs::read_to_string(work.join("full.err")).unwrap();
    assert!(err.contains("printing the inbox"), "{err}");
    let got = std::fs::read_to_string(work.join("got.jsonl")).unwrap();
    let msg: Value = serde_json::from_str(got.lines().next().unwrap()).unwrap();
    assert_eq!(
        (msg["text"].as_str(), msg["seq"].as_i64()),
        (Some("rebase on main"), Some(seq))
    );
    assert_eq!(got.lines().count(), 1, "{got}");
    let again = std::fs::read_to_string(work.join("again.jsonl")).unwrap();
    assert!(
        again.is_empty(),
        "acknowledged messages came again: {again}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_reports_are_refused() {
    let svc = Service::start(Options::default());
    let long = "x".repeat(301);
    let script = format!(
        "gatehouse report --state ready --summary '{long}'; echo $? > cli_long; \
         gatehouse report --state done --summary ok; echo $? > cli_state; \
         while [ ! -e go ]; do sleep 0.02; done"
    );
    let id = svc.submit("k", sh_job("tkt_bad", &script)).await;
    svc.wait_for(&id, |s| s == "running").await;
    let sock = svc.control_socket(&id);
    // Straight to the socket, bypassing the CLI's own checks.
    let bad = [
        json!({"state": "ready", "summary": long}),
        json!({"state": "merged", "summary": "x"}),
        json!({"state": "ready", "summary": "x", "links": ["file:///etc/passwd"]}),
        json!({"state": "ready", "summary": "x", "answers": "not-a-trigger"}),
    ];
    for body in bad {
        let resp = http::request(
            &sock,
            Method::POST,
            "/report",
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
        .unwrap();
        assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(resp.json()["error"]["message"].is_string());
    }
    std::fs::write(svc.work_dir("tkt_bad").join("go"), "").unwrap();
    svc.wait_ended(&id).await;
    for f in ["cli_long", "cli_state"] {
        let code = std::fs::read_to_string(svc.work_dir("tkt_bad").join(f)).unwrap();
        assert_ne!(code.trim(), "0", "{f}: the CLI accepted an invalid report");
    }
    assert!(svc.job(&id).await["latest_report"].is_null());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_cannot_report_for_another() {
    let svc = Service::start(Options::default());
    let wait = "while [ ! -e go ]; do sleep 0.02; done";
    let a = svc.submit("a", sh_job("tkt_ra", wait)).await;
    let b = svc.submit("b", sh_job("tkt_rb", wait)).await;
    svc.wait_for(&a, |s| s == "running").await;
    svc.wait_for(&b, |s| s == "running").await;
    let sock_a = svc.control_socket(&a);

    // Naming another job in the body is refused outright...
    for field in ["job_id", "job", "ticket"] {
        let mut body = json!({"state": "ready", "summary": "done for b"});
        body[field] = json!(if field == "ticket" {
            "tkt_rb"
        } else {
            b.as_str()
        });
        let resp = http::request(
            &sock_a,
            Method::POST,
            "/report",
            &[],
            Some(body.to_string().into_bytes()),
        )
        .await
        .unwrap();
        assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{field}");
    }
    // ...and a report on a's socket lands on a, never on b.
    let ok = json!({"state": "ready", "summary": "from a"});
    let resp = http::request(
        &sock_a,
        Method::POST,
        "/report",
        &[],
        Some(ok.to_string().into_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(resp.status, StatusCode::CREATED);
    assert_eq!(svc.job(&a).await["latest_report"]["summary"], "from a");
    assert!(svc.job(&b).await["latest_report"].is_null());

    // Once a job ends its socket is gone: a kept path is useless.
    std::fs::write(svc.work_dir("tkt_ra").join("go"), "").unwrap();
    svc.wait_ended(&a).await;
    assert!(!sock_a.exists());
    let late = http::request(
        &sock_a,
        Method::POST,
        "/report",
        &[],
        Some(ok.to_string().into_bytes()),
    )
    .await;
    assert!(late.is_err(), "an ended job's control socket still answers");
    std::fs::write(svc.work_dir("tkt_rb").join("go"), "").unwrap();
    svc.wait_ended(&b).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn work_dir_survives_a_resume_and_prompt_is_rendered() {
    let svc = Service::start(Options::default());
    let a = svc
        .submit("a", sh_job("tkt_resume", "echo first > notes"))
        .await;
    svc.wait_ended(&a).await;
    // $GATEHOUSE_PROMPT is absolute: it is found from another directory.
    let mut body = sh_job(
        "tkt_resume",
        "cat notes > seen; w=$(pwd); cd / && cp \"$GATEHOUSE_PROMPT\" \"$w/via-env\"",
    );
    body["task"] = json!("second round: {{literal braces}}");
    body["variables"] = json!({"repo": "acme/widgets"});
    let b = svc.submit("b", body).await;
    assert_eq!(svc.wait_ended(&b).await["state"], "done");
    let work = svc.work_dir("tkt_resume");
    assert_eq!(
        std::fs::read_to_string(work.join("seen")).unwrap(),
        "first\n"
    );
    let prompt = std::fs::read_to_string(work.join(".gatehouse/prompt.md")).unwrap();
    assert!(prompt.contains("ticket `tkt_resume`"), "{prompt}");
    assert!(prompt.contains(&format!("job `{b}`")));
    assert!(prompt.contains("acme/widgets"));
    assert!(prompt.contains("gatehouse report"));
    assert!(
        prompt.contains("Team conventions"),
        "the team prompt is included"
    );
    assert!(prompt.ends_with("second round: {{literal braces}}\n"));
    assert_eq!(
        std::fs::read_to_string(work.join("via-env")).unwrap(),
        prompt
    );
    // A job naming no repository: its prompt says nothing empty.
    let c = svc
        .submit("c", sh_job("tkt_resume", "cp .gatehouse/prompt.md no-repo"))
        .await;
    assert_eq!(svc.wait_ended(&c).await["state"], "done");
    let no_repo = std::fs::read_to_string(work.join("no-repo")).unwrap();
    assert!(!no_repo.contains("``"), "{no_repo}");
    assert!(!no_repo.contains("The repository is"), "{no_repo}");
    assert_eq!(
        std::fs::read_to_string(work.join(".gatehouse/.gitignore")).unwrap(),
        "*\n"
    );
    // Another ticket's files are elsewhere.
    assert!(!svc.work_dir("tkt_other").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn planted_symlinks_are_not_followed() {
    let svc = Service::start(Options::default());
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().display().to_string();
    // A first job replaces .gatehouse and its files with symlinks out of the
    // work dir; rendering the next prompt must not write through them.
    let script =
        format!("rm -rf .gatehouse; ln -s {target} .gatehouse; ln -s {target}/victim x; true");
    let a = svc.submit("a", sh_job("tkt_link", &script)).await;
    svc.wait_ended(&a).await;
    let b = svc
        .submit(
            "b",
            sh_job("tkt_link", "cat .gatehouse/prompt.md > /dev/null"),
        )
        .await;
    assert_eq!(svc.wait_ended(&b).await["state"], "done");
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    let dir = svc.work_dir("tkt_link").join(".gatehouse");
    assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_are_capped() {
    let svc = Service::start(Options {
        log_cap_bytes: 4096,
        ..Options::default()
    });
    let id = svc
        .submit(
            "k",
            sh_job(
                "tkt_loud",
                "head -c 1000000 /dev/zero | tr '\\0' x; echo end",
            ),
        )
        .await;
    let end = svc.wait_ended(&id).await;
    assert_eq!(
        end["state"], "done",
        "a capped log must not block the worker"
    );
    let result = svc
        .call(Method::GET, &format!("/jobs/{id}/result"), None)
        .await
        .json();
    let log = std::fs::read(result["logs"]["stdout"].as_str().unwrap()).unwrap();
    assert!(log.len() < 4096 + 100, "{} bytes", log.len());
    assert!(String::from_utf8_lossy(&log).contains("log truncated at 4096 bytes"));
}

#[tokio::test(flavor = "multi_thread")]
async fn events_cursor_never_skips_and_waits() {
    let svc = Service::start(Options::default());
    let after = svc.call(Method::GET, "/events", None).await.json()["next"]
        .as_i64()
        .unwrap();
    // A long-poll started before the job exists wakes when it is created.
    let waiter = {
        let socket = svc.socket.clone();
        tokio::spawn(async move {
            http::request(
                &socket,
                Method::GET,
                &format!("/events?after={after}&wait_ms=20000"),
                &[],
                None,
            )
            .await
            .unwrap()
            .json()
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut ids = vec![];
    for i in 0..5 {
        ids.push(
            svc.submit(&format!("k{i}"), sh_job(&format!("tkt_ev{i}"), "true"))
                .await,
        );
    }
    let woke = waiter.await.unwrap();
    assert!(!woke["events"].as_array().unwrap().is_empty());
    for id in &ids {
        svc.wait_ended(id).await;
    }
    // Page through one event at a time: contiguous, no repeats, none missed.
    let mut cursor = after;
    let mut seen = vec![];
    loop {
        let page = svc
            .call(Method::GET, &format!("/events?after={cursor}"), None)
            .await
            .json();
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            break;
        }
        for e in events {
            seen.push(e["seq"].as_i64().unwrap());
        }
        cursor = page["next"].as_i64().unwrap();
    }
    let expected: Vec<i64> = (after + 1..=after + seen.len() as i64).collect();
    assert_eq!(seen, expected);
    assert_eq!(seen.len(), 15, "queued, running, done for each of 5 jobs");
    let bad = svc.call(Method::GET, "/events?cursor=1", None).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

/// Writes a request's head, pauses so an early answer would go out first,
/// then its body; returns everything the server answered. Panics on a
/// setup failure, like the tests.
#[allow(clippy::unwrap_used)]
fn head_then_body(socket: &std::path::Path, head: &str, body: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "{head}Host: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    s.write_all(body)
        .unwrap_or_else(|e| panic!("{head:?}: the body could not be sent: {e}"));
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_early_error_is_answered_after_the_body() {
    let svc = Service::start(Options::default());
    let body = serde_json::to_vec(&sh_job("tkt_early", "true")).unwrap();
    let socket = svc.socket.clone();
    let cases = [
        (
            "POST /jobs HTTP/1.1\r\n",
            "HTTP/1.1 400",
            "missing_idempotency_key",
        ),
        (
            "PUT /jobs HTTP/1.1\r\n",
            "HTTP/1.1 405",
            "method_not_allowed",
        ),
        ("POST /nowhere HTTP/1.1\r\n", "HTTP/1.1 404", "not_found"),
        // A key sent twice, or with a space inside: refused, never picked from.
        (
            "POST /jobs HTTP/1.1\r\nIdempotency-Key: k\r\nIdempotency-Key: k\r\n",
            "HTTP/1.1 400",
            "invalid_idempotency_key",
        ),
        (
            "POST /jobs HTTP/1.1\r\nIdempotency-Key: k k\r\n",
            "HTTP/1.1 400",
            "invalid_idempotency_key",
        ),
        (
            "POST /jobs/job_nope/inbox HTTP/1.1\r\n",
            "HTTP/1.1 400",
            "invalid_body",
        ),
        // The positive control: the same exchange, accepted.
        (
            "POST /jobs HTTP/1.1\r\nIdempotency-Key: k\r\n",
            "HTTP/1.1 202",
            "job_id",
        ),
    ];
    for (head, status, code) in cases {
        let socket = socket.clone();
        let body = body.clone();
        let answer = tokio::task::spawn_blocking(move || head_then_body(&socket, head, &body))
            .await
            .unwrap();
        assert!(answer.starts_with(status), "{head:?}: {answer}");
        assert!(answer.contains(code), "{head:?}: {answer}");
    }
}
