//! The supervisor's untrusted bodies: what a worker sends on its control
//! socket from inside the sandbox (`POST /report`, `POST /inbox/ack`), and
//! what the job API takes (`POST /jobs`, `POST /jobs/{id}/inbox`). The first
//! byte picks the body, the rest is the bytes as sent. Besides "no panic":
//! what is accepted meets every limit the checks state, re-serialises and
//! parses back to itself (what the store keeps is what was checked), and the
//! canonical hash of a job request does not depend on its spelling. Each
//! body is taken up to its route's limit (32 KiB a report, 1 KiB an ack,
//! 64 KiB an inbox message, 2 MiB a job). Cost: one body parses and checks
//! within 50 ms + 100 ns a byte (sanitizer build; 260 ms at 2 MiB), the
//! fastest of three repetitions (one run on a loaded machine once took
//! 76 ms of a 64 KiB body).
#![no_main]

use std::time::{Duration, Instant};

use gatehouse_supervisor::jobs::api::{MAX_INBOX_BODY, MAX_JOB_BODY};
use gatehouse_supervisor::jobs::control::{MAX_ACK_BODY, MAX_REPORT_BODY};
use gatehouse_supervisor::jobs::report::{
    check_inbox, check_report, InboxMessage, Report, MAX_INBOX_TEXT_BYTES, MAX_LINKS,
    MAX_LINK_BYTES, MAX_SUMMARY_CHARS,
};
use gatehouse_supervisor::jobs::spec::{JobRequest, SpecLimits};
use gatehouse_types::wire::InboxAck;
use libfuzzer_sys::fuzz_target;

/// The time one body may take: a fixed part, and a part per byte for the
/// job API's 2 MiB bodies (a sanitizer build parses JSON at tens of MB/s).
const FIXED: Duration = Duration::from_millis(50);
const PER_BYTE_NS: u64 = 100;

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
    // Each route's own limit: what is longer is refused unread.
    let limit = match which % 4 {
        0 => MAX_REPORT_BODY,
        1 => MAX_JOB_BODY,
        2 => MAX_INBOX_BODY,
        _ => MAX_ACK_BODY,
    };
    if body.len() > limit {
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
    let bound = FIXED + Duration::from_nanos(PER_BYTE_NS * body.len() as u64);
    assert!(
        fastest < bound,
        "{} bytes took {fastest:?} (the fastest of {REPETITIONS}; bound {bound:?})",
        body.len()
    );
});
