//! The audit log on a real full disk (a small tmpfs, so these tests need
//! root): a record is written whole or not at all, and nothing is forwarded
//! and no tunnel spliced that is not on record; once space is back, the
//! proxy serves again and the chain is intact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;

use gatehouse_proxy::audit::{self, AuditError, AuditLog, Outcome, Record, RequestRecord};
use gatehouse_testkit::proxy::{read_head, Harness, TUNNEL_HOST};
use gatehouse_testkit::require;
use gatehouse_testkit::skip::Need;
use gatehouse_testkit::smallfs::SmallFs;

/// A denial record of about 1 KiB.
fn record(i: usize) -> Record {
    Record::Request(RequestRecord {
        time: audit::rfc3339_utc(1_795_969_800_123),
        request_id: format!("req-{i}"),
        identity: "tkt_1".into(),
        method: "GET".into(),
        host: "api.github.com".into(),
        path: format!("/repos/octo/hello/issues/{}", "1".repeat(900)),
        query_keys: vec![],
        outcome: Outcome::Deny {
            reason: "no rule".into(),
            rule_sets_tried: vec![],
        },
        message: None,
        truncated: Default::default(),
    })
}

#[test]
fn a_record_that_does_not_fit_leaves_no_trace_and_the_log_goes_on_after() {
    require!(Need::Root);
    let fs = SmallFs::mount(64);
    let path = fs.path().join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    // Some records first, so the log's last page has room left when the
    // disk fills: the failing write is then cut off part-way through.
    for i in 0..3 {
        log.append(&record(i)).unwrap();
    }
    let filler = fs.fill();
    let mut written = 3;
    let error = loop {
        match log.append(&record(written)) {
            Ok(_) => written += 1,
            Err(error) => break error,
        }
        assert!(written < 100, "the disk never filled");
    };
    let AuditError::Io { source, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(source.raw_os_error(), Some(28), "ENOSPC: {error}");
    // Whole records only, the chain at the log's head.
    let report = audit::verify(&path).unwrap();
    assert_eq!(report.lines, written as u64);
    assert_eq!(report.last_hash, log.head().hash);
    assert!(log.append(&record(1000)).is_err(), "still full");
    assert_eq!(audit::verify(&path).unwrap().lines, written as u64);
    the_chain_goes_on_once_space_is_back(log, &filler, &path, written as u64);
}

/// Space again: one more record goes on from the last whole line of the
/// file, which then holds `lines` and that one, nothing torn.
fn the_chain_goes_on_once_space_is_back(mut log: AuditLog, filler: &Path, path: &Path, lines: u64) {
    std::fs::remove_file(filler).unwrap();
    log.append(&record(1001)).unwrap();
    drop(log);
    let report = audit::verify(path).unwrap();
    assert_eq!(report.lines, lines + 1);
    assert!(report.recoveries.is_empty(), "nothing torn: {report:?}");
}

#[test]
fn nothing_is_forwarded_or_spliced_while_the_log_cannot_be_written() {
    require!(Need::Root);
    let fs = SmallFs::mount(256);
    let h = Harness::start_logging_to(Some(fs.path().join("audit.jsonl")));
    let issue = "https://api.github.com/repos/acme/widgets/issues/1";
    let graphql = [
        "-X",
        "POST",
        "-d",
        r#"{"query":"{ repository(owner: \"acme\", name: \"widgets\") { id } }"}"#,
    ];
    let (status, _, body) = h.curl(&[], issue);
    assert_eq!(status, 200, "control: {body}");
    let (status, _, body) = h.curl(&graphql, "https://api.github.com/graphql");
    assert_eq!(status, 200, "control: {body}");

    let filler = fs.fill();
    // The log's last page may still hold a few records: GraphQL queries,
    // whose records are the smallest of those sent here, until one does
    // not fit. Every record sent after is larger, so none fits either.
    let mut tries = 0;
    loop {
        let (status, _, body) = h.curl(&graphql, "https://api.github.com/graphql");
        if status == 503 {
            assert!(body.contains("gatehouse_audit_unavailable"), "{body}");
            break;
        }
        assert_eq!(status, 200, "{body}");
        tries += 1;
        assert!(tries < 100, "the log never filled");
    }
    let served = h.github.requests().len();
    let (status, _, body) = h.curl(&[], issue);
    assert_eq!(status, 503, "{body}");
    let (status, _, body) = h.curl(&[], "https://api.github.com/repos/acme/secret-plans");
    assert_eq!(status, 503, "a denial that cannot be recorded: {body}");
    let mut s = h.raw();
    write!(
        s,
        "CONNECT {TUNNEL_HOST}:443 HTTP/1.1\r\nHost: {TUNNEL_HOST}:443\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 503"), "tunnel: {head}");
    assert_eq!(h.github.requests().len(), served, "nothing forwarded");
    assert!(audit::verify(&h.audit_path).is_ok(), "whole records only");

    std::fs::remove_file(filler).unwrap();
    let (status, _, body) = h.curl(&[], issue);
    assert_eq!(status, 200, "served again: {body}");
    let report = audit::verify(&h.audit_path).unwrap();
    assert!(report.recoveries.is_empty());
    assert!(h
        .audit_lines()
        .iter()
        .all(|l| l["outcome"]["rule"] != "tunnel_hosts"));
}

#[test]
fn audit_verify_explains_a_recovered_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    for i in 0..3 {
        log.append(&record(i)).unwrap();
    }
    drop(log);
    let verify = || {
        gatehouse_testkit::bin::command()
            .args(["audit", "verify"])
            .arg(&path)
            .output()
            .unwrap()
    };
    // Control: intact, nothing to explain.
    let out = verify();
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("recovered"));
    // A crash mid-write: the tail is torn, and verify says what start-up will do.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(br#"{"seq":3,"prev":"#).unwrap();
    drop(file);
    let out = verify();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 4") && err.contains("incomplete"),
        "{err}"
    );
    // The proxy's next start cuts it back and records that; verify explains.
    drop(AuditLog::open(&path).unwrap());
    let out = verify();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("recovered: line 4") && text.contains("cut its 16 bytes off"),
        "{text}"
    );
}

#[test]
fn deferred_lines_lost_with_a_failed_write_leave_the_chain_on_the_last_line_written() {
    require!(Need::Root);
    let fs = SmallFs::mount(64);
    let path = fs.path().join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    log.append(&record(0)).unwrap();
    let filler = fs.fill();
    // Each write carries a line deferred before it (chained, not yet
    // written), as a request's carries the previous one's completion.
    let mut i = 1;
    loop {
        log.defer(&record(i)).unwrap();
        if log.write_all(&[record(i + 1)]).is_err() {
            break;
        }
        i += 2;
        assert!(i < 200, "the disk never filled");
    }
    // The failed write's lines are lost, the deferred one with them; the
    // chain is on the file's last whole line.
    let report = audit::verify(&path).unwrap();
    assert_eq!(report.last_hash, log.head().hash);
    assert_eq!(report.lines, i as u64, "{report:?}");
    // Nothing of the failed write goes out later.
    the_chain_goes_on_once_space_is_back(log, &filler, &path, i as u64);
}

#[test]
fn a_rotation_whose_header_does_not_fit_is_undone_and_done_again_later() {
    require!(Need::Root);
    let fs = SmallFs::mount(64);
    let path = fs.path().join("audit.jsonl");
    let rotation = audit::Rotation::new(Some(1500), None, None).unwrap();
    let open = || AuditLog::open_rotating(&path, rotation, &audit::now_rfc3339());
    let mut log = open().unwrap();
    log.append(&record(0)).unwrap();
    log.append(&record(1)).unwrap();
    let filler = fs.fill();
    // Due to rotate: the new file is made, its header line does not fit.
    assert!(log.append(&record(2)).is_err());
    // Undone: still the first file, under its name, whole.
    assert_eq!(log.file_number(), 1);
    assert!(!audit::rotated_path(&path, 1).exists());
    let report = audit::verify(&path).unwrap();
    assert_eq!(report.lines, 2);
    assert_eq!(report.last_hash, log.head().hash);
    std::fs::remove_file(filler).unwrap();
    // Space again: the rotation is done, and the set opens again.
    log.append(&record(3)).unwrap();
    assert_eq!(log.file_number(), 2);
    let head = log.head().clone();
    drop(log);
    let reopened = open().expect("the log opens again after the rotation");
    assert_eq!(reopened.head(), &head);
    assert_eq!(reopened.file_number(), 2);
}

/// The bytes of the first `event` line whose `key` is `value` in the log
/// at `path`, its newline included.
fn line_len(path: &Path, event: &str, key: &str, value: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text
        .lines()
        .find(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["event"] == event && v[key] == value
        })
        .unwrap_or_else(|| panic!("no {event} with {key} {value}"));
    line.len() as u64 + 1
}

#[test]
fn a_redirect_whose_line_cannot_be_written_is_not_followed() {
    require!(Need::Root);
    let fs = SmallFs::mount(256);
    let h = Harness::start_logging_to(Some(fs.path().join("audit.jsonl")));
    let (_, job) = h
        .github
        .add_job("acme/widgets", "build", "abc123", "failure", "oops\n")
        .unwrap();
    let logs = format!("https://api.github.com/repos/acme/widgets/actions/jobs/{job}/logs");
    // The control: followed, and the sizes of the two request lines.
    let (status, _, body) = h.curl(&[], &logs);
    assert_eq!(status, 200, "control: {body}");
    h.audit_lines();
    let path = &h.audit_path;
    let first = line_len(
        path,
        "request",
        "path",
        &format!("/repos/acme/widgets/actions/jobs/{job}/logs"),
    );
    let followed = line_len(
        path,
        "request",
        "host",
        "pipelines.actions.githubusercontent.com",
    );
    // Denials (lines of their own, nothing deferred) until the log's last
    // page has room for the first request's line and not the followed
    // one's; then the disk is filled, which leaves that room only.
    let room = |path: &Path| 4096 - std::fs::metadata(path).unwrap().len() % 4096;
    let want = first + 40;
    // The room left, at most `first + 80`, cannot hold both lines.
    assert!(followed > 80, "{followed}");
    // A denial's line holds its path twice (as its path, in its reason):
    // 2 × the segment + a base, measured on the first.
    let mut base: Option<u64> = None;
    for i in 0.. {
        assert!(i < 30, "could not leave {want} bytes");
        let left = room(path);
        if (want..want + 40).contains(&left) {
            break;
        }
        let need = (left + 4096 - want - 20) % 4096;
        let segment = match base {
            Some(b) if need > b + 2 && need - b <= 800 => (need - b) / 2,
            _ => 300,
        };
        let target = format!("/repos/acme/secret-plans/{}", "x".repeat(segment as usize));
        let (status, _, _) = h.curl(&[], &format!("https://api.github.com{target}"));
        assert_eq!(status, 403, "padding");
        base = Some(line_len(path, "request", "path", &target) - 2 * segment);
    }
    let filler = fs.fill();
    let served = h.github.requests().len();
    let (status, _, body) = h.curl(&[], &logs);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("gatehouse_audit_unavailable"), "{body}");
    let seen = h.github.requests();
    assert_eq!(
        seen.len(),
        served + 1,
        "the first request went out, on record"
    );
    assert!(
        seen[served..]
            .iter()
            .all(|r| !r.path.starts_with("/_logs/")),
        "the redirect was followed without its line"
    );
    assert!(audit::verify(path).is_ok(), "whole records only");
    std::fs::remove_file(filler).unwrap();
}
