//! The supervisor's untrusted bodies: what a worker sends on its control
//! socket from inside the sandbox (`POST /report`, `POST /inbox/ack`), and
//! what the job API takes (`POST /jobs`, `POST /jobs/{id}/inbox`). The first
//! byte picks the body, the rest is the bytes as sent. Besides "no panic":
//! what is accepted meets every limit the checks state, re-serialises and
//! parses back to itself (what the store keeps is what was checked), and the
//! canonical hash of a job request does not depend on its spelling. Cost:
//! one body at its size limit parses and checks in under 50 ms (sanitizer
//! build), the fastest of three repetitions (one run on a loaded machine
//! once took 76 ms).
#![no_main]

use std::time::{Duration, Instant};

use gatehouse_supervisor::jobs::report::{
    check_inbox, check_report, InboxMessage, Report, MAX_INBOX_TEXT_BYTES, MAX_LINKS,
    MAX_LINK_BYTES, MAX_SUMMARY_CHARS,
};
use gatehouse_supervisor::jobs::spec::{JobRequest, SpecLimits};
use gatehouse_types::wire::InboxAck;
use libfuzzer_sys::fuzz_target;

/// The control socket's and the job API's body limits.
const MAX_BODY: usize = 64 * 1024;

/// How many times a body is checked for its time: the fastest counts.
const REPETITIONS: usize = 3;

fn round_trips<T>(value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = serde_json::to_vec(value).unwrap();
    let back: T = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(&back, value);
}

fn report(body: &[u8]) {
    let Ok(report) = serde_json::from_slice::<Report>(body) else {
        return;
    };
    if check_report(&report).is_err() {
        return;
    }
    let summary = report.summary.chars().count();
    assert!(summary > 0 && summary <= MAX_SUMMARY_CHARS);
    assert!(!report.summary.chars().any(char::is_control));
    assert!(report.links.len() <= MAX_LINKS);
    for link in &report.links {
        assert!(link.len() <= MAX_LINK_BYTES && !link.contains(' '));
        assert!(link.starts_with("https://") || link.starts_with("http://"));
    }
    round_trips(&report);
}

fn job(body: &[u8]) {
    let Ok(request) = serde_json::from_slice::<JobRequest>(body) else {
        return;
    };
    let limits = SpecLimits {
        max_task_bytes: 16 * 1024,
        default_deadline_secs: 3600,
        max_deadline_secs: 86_400,
        proxy_configured: true,
    };
    // Spelling (whitespace, key order) never changes the hash.
    let hash = request.canonical_hash().unwrap();
    let respelt: JobRequest =
        serde_json::from_slice(&serde_json::to_vec_pretty(&request).unwrap()).unwrap();
    assert_eq!(respelt.canonical_hash().unwrap(), hash);
    let Ok(spec) = request.clone().validate(&limits) else {
        return;
    };
    assert!(!spec.task.trim().is_empty() && spec.task.len() <= limits.max_task_bytes);
    assert!(spec.deadline_secs > 0 && spec.deadline_secs <= limits.max_deadline_secs);
    assert!(spec.rule_sets.len() <= 32 && spec.tunnel_hosts.len() <= 32);
    assert!(spec.variables.len() <= 32);
    if let Some(command) = &spec.command {
        assert!(!command.is_empty() && command.iter().all(|a| !a.contains('\0')));
    }
    round_trips(&spec);
    // Validation is a function of the request alone.
    assert_eq!(request.validate(&limits), Ok(spec));
}

fn inbox(body: &[u8]) {
    let Ok(message) = serde_json::from_slice::<InboxMessage>(body) else {
        return;
    };
    if check_inbox(&message).is_ok() {
        assert!(message.text.len() <= MAX_INBOX_TEXT_BYTES && !message.text.trim().is_empty());
        round_trips(&message);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    if body.len() > MAX_BODY {
        return;
    }
    // The fastest of a few repetitions: a machine loaded by other work
    // slows one run down, never all of them.
    let mut fastest = Duration::MAX;
    for _ in 0..REPETITIONS {
        let started = Instant::now();
        match which % 4 {
            0 => report(body),
            1 => job(body),
            2 => inbox(body),
            _ => {
                if let Ok(ack) = serde_json::from_slice::<InboxAck>(body) {
                    round_trips(&ack);
                }
            }
        }
        fastest = fastest.min(started.elapsed());
    }
    assert!(
        fastest < Duration::from_millis(50),
        "{} bytes took {fastest:?} (the fastest of {REPETITIONS})",
        body.len()
    );
});
