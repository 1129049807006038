use super::*;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

fn request(id: &str, message: bool) -> Record {
    Record::Request(RequestRecord {
        time: rfc3339_utc(1_795_969_800_123),
        request_id: id.to_owned(),
        identity: "tkt_1".into(),
        method: "POST".into(),
        host: "api.github.com".into(),
        path: "/repos/octo/hello/issues/1/comments".into(),
        query_keys: vec!["per_page".into()],
        outcome: Outcome::Allow {
            rule_set: "github-worker".into(),
            rule: "issue-comment-create".into(),
        },
        message: message.then(|| MessageRecord {
            kind: "github_issue_comment".into(),
            target: "octo/hello#1".into(),
            body_sha256: "ab".repeat(32),
        }),
        truncated: Default::default(),
    })
}

fn completion(id: &str) -> Record {
    Record::Completion(CompletionRecord {
        time: rfc3339_utc(1_795_969_800_456),
        request_id: id.to_owned(),
        status: 201,
        bytes_sent: 20,
        bytes_received: 300,
        duration_ms: 333,
        message_id: Some("1234".into()),
        error: None,
        truncated: Default::default(),
    })
}

fn write_log(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    for i in 0..n {
        let id = format!("req-{i}");
        log.append(&request(&id, i % 2 == 0)).unwrap();
        log.append(&completion(&id)).unwrap();
    }
    path
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn appends_chain_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_log(dir.path(), 3);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let report = verify(&path).unwrap();
    assert_eq!(
        (report.lines, report.requests, report.completions),
        (6, 3, 3)
    );
    assert!(report.open_requests.is_empty());

    let mut log = AuditLog::open(&path).unwrap();
    assert_eq!(log.head().lines, 6);
    assert_eq!(log.head().hash, report.last_hash);
    let head = log
        .append_all(&[
            request("req-9", false),
            completion("req-9"),
            request("req-10", true),
        ])
        .unwrap();
    assert_eq!(head.lines, 9);
    let report = verify(&path).unwrap();
    assert_eq!(report.lines, 9);
    assert_eq!(report.open_requests, ["req-10"]);
    assert_eq!(report.last_hash, head.hash);

    let all = lines(&path);
    let first: serde_json::Value = serde_json::from_str(&all[0]).unwrap();
    assert_eq!(first["seq"], 0);
    assert_eq!(first["prev"], GENESIS);
    assert_eq!(first["event"], "request");
    assert_eq!(first["outcome"]["decision"], "allow");
    assert_eq!(first["message"]["kind"], "github_issue_comment");
    let second: serde_json::Value = serde_json::from_str(&all[1]).unwrap();
    assert_eq!(
        second["prev"],
        hex::encode(Sha256::digest(all[0].as_bytes()))
    );
    assert_eq!(second["message_id"], "1234");
}

#[test]
fn every_kind_of_tampering_is_found_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_log(dir.path(), 3);
    let original = lines(&path);
    let join = |ls: &[String]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
    let tampered: Vec<(&str, String, usize)> = vec![
        // A changed line is found at the next line, whose `prev` no longer matches.
        (
            "changed status",
            join(&original).replacen("\"status\":201", "\"status\":200", 1),
            3,
        ),
        (
            "changed last line",
            {
                let mut ls = original.clone();
                ls[5] = ls[5].replace("\"status\":201", "\"status\":500");
                join(&ls)
            },
            0,
        ),
        (
            "changed identity",
            {
                let mut ls = original.clone();
                ls[2] = ls[2].replace("tkt_1", "tkt_2");
                join(&ls)
            },
            4,
        ),
        (
            "removed line",
            {
                let mut ls = original.clone();
                ls.remove(3);
                join(&ls)
            },
            4,
        ),
        (
            "swapped lines",
            {
                let mut ls = original.clone();
                ls.swap(2, 3);
                join(&ls)
            },
            3,
        ),
        (
            "duplicated line",
            {
                let mut ls = original.clone();
                ls.insert(2, original[1].clone());
                join(&ls)
            },
            3,
        ),
        (
            "cut mid-line",
            join(&original)[..join(&original).len() - 10].to_owned(),
            6,
        ),
        (
            "garbage line",
            {
                let mut ls = original.clone();
                ls.insert(1, "{}".into());
                join(&ls)
            },
            2,
        ),
        (
            "empty line",
            {
                let mut ls = original.clone();
                ls.insert(1, String::new());
                join(&ls)
            },
            2,
        ),
    ];
    for (what, text, line) in tampered {
        let result = verify_bytes(text.as_bytes());
        if line == 0 {
            // A change to the last line is caught once anything follows it, or against an anchored head.
            let report = result.unwrap();
            assert_ne!(
                report.last_hash,
                verify_bytes(join(&original).as_bytes()).unwrap().last_hash,
                "{what}"
            );
            continue;
        }
        assert_eq!(result.map_err(|b| b.line), Err(line), "{what}");
    }
}

#[test]
fn open_refuses_a_broken_log_and_verify_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_log(dir.path(), 2);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("tkt_1", "tkt_X", 1);
    std::fs::write(&path, text).unwrap();
    let error = verify(&path).unwrap_err().to_string();
    assert!(error.contains("line 2"), "{error}");
    let error = AuditLog::open(&path).unwrap_err().to_string();
    assert!(
        error.contains("line 2") && error.contains("move it aside"),
        "{error}"
    );
}

#[test]
fn records_hold_query_keys_and_hashes_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_log(dir.path(), 1);
    let text = std::fs::read_to_string(&path).unwrap();
    let value: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in ["body", "query", "headers", "authorization"] {
        assert!(!keys.contains(&key), "{key} in {keys:?}");
    }
    assert_eq!(value["query_keys"], serde_json::json!(["per_page"]));
}

#[test]
fn timestamps_are_rfc3339_utc() {
    for (ms, expected) in [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_709_164_800_000, "2024-02-29T00:00:00.000Z"),
        (1_795_969_800_123, "2026-11-29T16:30:00.123Z"),
        (4_102_444_799_999, "2099-12-31T23:59:59.999Z"),
    ] {
        assert_eq!(rfc3339_utc(ms), expected);
    }
}

/// Every rendering up to year 9999 is 24 bytes and reads back as the same
/// instant: days across four centuries and every field's carry.
#[test]
fn timestamps_read_back_to_the_same_millisecond() {
    let mut ms = 0u64;
    while ms < 253_402_300_800_000 {
        let text = rfc3339_utc(ms);
        assert_eq!(text.len(), 24, "{text}");
        assert_eq!(rfc3339_ms(&text), Some(ms), "{text}");
        ms += 86_400_000 * 13 + 3_599_999 + 61_001;
    }
    assert_eq!(rfc3339_utc(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
}

#[test]
fn a_torn_last_line_is_cut_back_and_the_recovery_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_log(dir.path(), 3);
    let whole = std::fs::read(&path).unwrap();
    let before = verify(&path).unwrap();
    // A write cut off mid-line: the start of a seventh line.
    let torn = br#"{"seq":6,"prev":"ab12","event":"requ"#;
    let mut bytes = whole.clone();
    bytes.extend_from_slice(torn);
    std::fs::write(&path, &bytes).unwrap();
    let error = verify(&path).unwrap_err().to_string();
    assert!(
        error.contains("line 7") && error.contains("incomplete"),
        "{error}"
    );

    let mut log = AuditLog::open_at(&path, "2026-12-01T00:00:00.000Z").unwrap();
    assert_eq!(log.head().lines, 7);
    let report = verify(&path).unwrap();
    assert_eq!(report.lines, 7);
    assert_eq!(report.requests, before.requests);
    let [recovery] = report.recoveries.as_slice() else {
        panic!("one recovery expected: {report:?}")
    };
    assert_eq!(recovery.line, 7);
    assert_eq!(recovery.record.truncated_bytes, torn.len() as u64);
    assert_eq!(
        recovery.record.truncated_sha256,
        hex::encode(Sha256::digest(torn))
    );
    let told = recovery.to_string();
    assert!(told.contains("torn") && told.contains("line 6"), "{told}");
    // The whole records before it are untouched, and the chain goes on.
    assert!(std::fs::read(&path).unwrap().starts_with(&whole));
    log.append(&request("after", false)).unwrap();
    drop(log);
    let reopened = AuditLog::open(&path).unwrap();
    assert_eq!(reopened.head().lines, 8, "no second recovery");
    assert_eq!(verify(&path).unwrap().recoveries.len(), 1);
}

#[test]
fn recovery_cuts_only_a_torn_tail_never_a_broken_line() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing but a torn line: cut to empty, the recovery is line 1.
    let path = dir.path().join("only-torn.jsonl");
    std::fs::write(&path, br#"{"seq":0,"pr"#).unwrap();
    AuditLog::open(&path).unwrap();
    let report = verify(&path).unwrap();
    assert_eq!((report.lines, report.recoveries.len()), (1, 1));
    assert_eq!(report.recoveries[0].line, 1);
    // A changed whole line before a torn tail: refused as before.
    let path = write_log(dir.path(), 2);
    let mut text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("tkt_1", "tkt_X", 1);
    text.push_str(r#"{"seq":4"#);
    std::fs::write(&path, &text).unwrap();
    let error = AuditLog::open(&path).unwrap_err().to_string();
    assert!(error.contains("line 2"), "{error}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
}

// === rotation ===

fn rotating(dir: &Path, bytes: u64, keep: Option<u64>) -> AuditLog {
    let rotation = Rotation::new(Some(bytes), None, keep).unwrap();
    AuditLog::open_rotating(&dir.join("audit.jsonl"), rotation, &now_rfc3339()).unwrap()
}

fn write_pairs(log: &mut AuditLog, from: usize, n: usize) {
    for i in from..from + n {
        let id = format!("req-{i}");
        log.append(&request(&id, i % 2 == 0)).unwrap();
        log.append(&completion(&id)).unwrap();
    }
}

fn rotated_files(dir: &Path) -> Vec<PathBuf> {
    LogSet::find(&dir.join("audit.jsonl"))
        .unwrap()
        .files()
        .to_vec()
}

#[test]
fn a_rotated_set_is_one_chain_across_its_files_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = rotating(dir.path(), 2_000, None);
    write_pairs(&mut log, 0, 20);
    drop(log);
    let files = rotated_files(dir.path());
    assert!(files.len() > 3, "{files:?}");
    // Each later file opens with its header: its number, the lines before.
    for (i, f) in files.iter().enumerate().skip(1) {
        let first: serde_json::Value = serde_json::from_str(lines(f).first().unwrap()).unwrap();
        assert_eq!(first["event"], "header");
        assert_eq!(first["file"], i as u64 + 1);
        assert_eq!(first["seq"], 0);
    }
    let report = verify(&dir.path().join("audit.jsonl")).unwrap();
    assert_eq!((report.requests, report.completions), (20, 20));
    assert_eq!(report.lines, 40 + files.len() as u64 - 1);
    assert_eq!(
        (report.first_file, report.last_file),
        (1, files.len() as u64)
    );
    // The directory names the same set.
    assert_eq!(verify(dir.path()).unwrap(), report);
    // Reopened, the log goes on in the active file's numbering.
    let mut log = rotating(dir.path(), 2_000, None);
    assert_eq!(log.file_number(), files.len() as u64);
    write_pairs(&mut log, 20, 20);
    drop(log);
    let report = verify(dir.path()).unwrap();
    assert_eq!(report.requests, 40);
    assert!(report.open_requests.is_empty());
}

/// A set in `dir` rotated a few times, then its active file (file N)
/// rotated out and a new, empty one in its place, as a rotation whose
/// header is not on disk leaves it: the active file's path, and N.
fn rotated_out(dir: &Path) -> (PathBuf, u64) {
    let mut log = rotating(dir, 2_000, None);
    write_pairs(&mut log, 0, 20);
    drop(log);
    let files = rotated_files(dir).len() as u64;
    assert!(files > 3);
    let active = dir.join("audit.jsonl");
    std::fs::rename(&active, rotated_path(&active, files)).unwrap();
    std::fs::write(&active, b"").unwrap();
    (active, files)
}

/// A set rotated a few times, then as a crash during the last rotation
/// leaves it (`crash` acts on the active file), reopened and written on
/// past another rotation: the set verifies, and nothing was refused.
fn reopened_after_a_crash_in_rotation(crash: impl Fn(&Path)) -> VerifyReport {
    let dir = tempfile::tempdir().unwrap();
    let (active, files) = rotated_out(dir.path());
    crash(&active);
    let mut log = rotating(dir.path(), 2_000, None);
    assert_eq!(log.file_number(), files + 1, "the set's next file");
    write_pairs(&mut log, 20, 20);
    assert!(log.file_number() > files + 1, "rotated again");
    drop(log);
    let report = verify(dir.path()).unwrap();
    assert_eq!((report.requests, report.completions), (40, 40));
    assert_eq!(report.first_file, 1);
    report
}

#[test]
fn a_crash_that_lost_a_rotation_header_resumes_the_set() {
    let report = reopened_after_a_crash_in_rotation(|_| {});
    assert!(report.recoveries.is_empty());
}

#[test]
fn a_crash_that_tore_a_rotation_header_resumes_the_set_with_a_recovery() {
    let report = reopened_after_a_crash_in_rotation(|active| {
        std::fs::write(active, br#"{"seq":0,"prev":"ab"#).unwrap();
    });
    assert_eq!(report.recoveries.len(), 1);
    assert_eq!(report.recoveries[0].record.truncated_bytes, 19);
}

#[test]
fn a_crash_before_the_new_file_existed_resumes_the_set() {
    let report = reopened_after_a_crash_in_rotation(|active| std::fs::remove_file(active).unwrap());
    assert!(report.recoveries.is_empty());
}

#[test]
fn a_broken_last_rotated_file_is_refused_not_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let (active, files) = rotated_out(dir.path());
    let last = rotated_path(&active, files);
    let text = std::fs::read_to_string(&last)
        .unwrap()
        .replacen("req-", "REQ-", 1);
    std::fs::write(&last, text).unwrap();
    let error = AuditLog::open(&active).unwrap_err().to_string();
    assert!(error.contains(&last.display().to_string()), "{error}");
}

#[test]
fn a_stray_or_renamed_file_named_like_the_last_rotated_one_is_not_gone_on_from() {
    let dir = tempfile::tempdir().unwrap();
    let (active, files) = rotated_out(dir.path());
    // An empty stray with a higher number, then the last file renamed up.
    let stray = rotated_path(&active, 999);
    std::fs::write(&stray, b"").unwrap();
    let error = AuditLog::open(&active).unwrap_err().to_string();
    assert!(
        error.contains("audit.jsonl.000999") && error.contains("empty"),
        "{error}"
    );
    std::fs::remove_file(&stray).unwrap();
    let renamed = rotated_path(&active, files + 5);
    std::fs::rename(rotated_path(&active, files), &renamed).unwrap();
    let error = AuditLog::open(&active).unwrap_err().to_string();
    assert!(error.contains(&format!("file {files}")), "{error}");
    // Put back, the set goes on as its next file.
    std::fs::rename(&renamed, rotated_path(&active, files)).unwrap();
    assert_eq!(AuditLog::open(&active).unwrap().file_number(), files + 1);
}

#[test]
fn a_directory_named_like_a_rotated_file_is_no_file_of_the_set() {
    let dir = tempfile::tempdir().unwrap();
    let active = dir.path().join("audit.jsonl");
    std::fs::create_dir(rotated_path(&active, 1)).unwrap();
    let mut log = AuditLog::open(&active).unwrap();
    assert_eq!(log.file_number(), 1);
    log.append(&request("a", false)).unwrap();
}

#[test]
fn a_torn_tail_is_cut_before_its_file_is_rotated_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = rotating(dir.path(), 600, None);
    write_pairs(&mut log, 0, 1);
    // As a failed write whose cut-back failed too leaves the file.
    let active = dir.path().join("audit.jsonl");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&active)
        .unwrap()
        .write_all(br#"{"seq":2,"prev":"torn"#)
        .unwrap();
    log.torn = true;
    // Over the size: the next write rotates.
    write_pairs(&mut log, 1, 2);
    assert!(log.file_number() > 1);
    drop(log);
    let report = verify(dir.path()).unwrap();
    assert_eq!((report.requests, report.completions), (3, 3));
}

#[test]
fn a_missing_or_reordered_file_breaks_the_set_and_retention_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = rotating(dir.path(), 1_500, None);
    write_pairs(&mut log, 0, 20);
    drop(log);
    let files = rotated_files(dir.path());
    assert!(files.len() >= 4, "{files:?}");
    let copy = |name: &str| {
        let d = tempfile::tempdir().unwrap();
        for f in &files {
            std::fs::copy(f, d.path().join(f.file_name().unwrap())).unwrap();
        }
        let _ = name;
        d
    };
    // The control: the copy verifies.
    let d = copy("control");
    assert!(verify(d.path()).is_ok());
    // A file missing in the middle.
    let d = copy("missing");
    std::fs::remove_file(d.path().join("audit.jsonl.000002")).unwrap();
    let err = verify(d.path()).unwrap_err().to_string();
    assert!(err.contains("missing or out of order"), "{err}");
    assert!(err.contains("audit.jsonl.000003"), "{err}");
    // Two files swapped.
    let d = copy("swapped");
    let (a, b) = (
        d.path().join("audit.jsonl.000002"),
        d.path().join("audit.jsonl.000003"),
    );
    std::fs::rename(&a, d.path().join("tmp")).unwrap();
    std::fs::rename(&b, &a).unwrap();
    std::fs::rename(d.path().join("tmp"), &b).unwrap();
    let err = verify(d.path()).unwrap_err().to_string();
    assert!(err.contains("missing or out of order"), "{err}");
    // A file replaced by one of the right number from elsewhere: its
    // header's prev does not follow.
    let d = copy("replaced");
    let text = std::fs::read_to_string(d.path().join("audit.jsonl.000003")).unwrap();
    let first = text.lines().next().unwrap();
    let prev = serde_json::from_str::<serde_json::Value>(first).unwrap()["prev"]
        .as_str()
        .unwrap()
        .to_owned();
    let forged = text.replacen(&prev, &"1".repeat(64), 1);
    std::fs::write(d.path().join("audit.jsonl.000003"), forged).unwrap();
    let err = verify(d.path()).unwrap_err().to_string();
    assert!(
        err.contains("does not match the last line of file 2"),
        "{err}"
    );
    // Retention: the oldest files removed, the rest still one chain.
    let dir = tempfile::tempdir().unwrap();
    let mut log = rotating(dir.path(), 1_500, Some(2));
    write_pairs(&mut log, 0, 20);
    let active = log.file_number();
    drop(log);
    let files = rotated_files(dir.path());
    assert_eq!(files.len(), 3, "{files:?}");
    let report = verify(dir.path()).unwrap();
    assert_eq!((report.first_file, report.last_file), (active - 2, active));
}

/// The fast pass of [`Line::parse`] and the derived `Deserialize` read
/// every line alike: written lines of every kind, the same lines with
/// their keys reordered (the fast pass declines, the derived one reads
/// them), and broken lines (both refuse).
#[test]
fn a_line_is_read_alike_in_order_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut log = AuditLog::open(&path).unwrap();
    let mut cut = request("req-cut", true);
    if let Record::Request(r) = &mut cut {
        r.path = "/x".repeat(2000);
        r.outcome = Outcome::Deny {
            reason: "no rule \"matched\" \\ here".into(),
            rule_sets_tried: vec!["a".into(), "b".into()],
        };
    }
    let records = vec![
        request("req-1", true),
        completion("req-1"),
        request("req-2", false),
        bound(cut),
        Record::Suppressed(SuppressedRecord {
            time: rfc3339_utc(1),
            identity: "tkt_2".into(),
            refusals: 7,
            first: rfc3339_utc(1),
            last: rfc3339_utc(2),
        }),
        Record::Recovery(RecoveryRecord {
            time: rfc3339_utc(3),
            truncated_bytes: 9,
            truncated_sha256: "cd".repeat(32),
        }),
        Record::Header(HeaderRecord {
            time: rfc3339_utc(4),
            file: 2,
            previous_lines: 10,
        }),
    ];
    log.append_all(&records).unwrap();
    let derived = |l: &str| serde_json::from_slice::<Line<Record>>(l.as_bytes());
    for (text, written) in lines(&path).iter().zip(&records) {
        let fast = parse_in_order(text.as_bytes()).unwrap();
        let slow = derived(text).unwrap();
        assert_eq!(
            (fast.seq, &fast.prev, &fast.record),
            (slow.seq, &slow.prev, &slow.record)
        );
        assert_eq!(&fast.record, written);
        // Reordered: the record's fields first. Only the derived pass reads
        // it, and Line::parse gives the same line.
        let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).unwrap();
        let head: Vec<(String, serde_json::Value)> = ["seq", "prev", "event"]
            .iter()
            .map(|k| (k.to_string(), v.remove(*k).unwrap()))
            .collect();
        v.extend(head);
        let reordered = serde_json::to_string(&v).unwrap();
        assert!(parse_in_order(reordered.as_bytes()).is_err());
        let parsed = Line::parse(reordered.as_bytes()).unwrap();
        assert_eq!((parsed.seq, &parsed.record), (slow.seq, &slow.record));
    }
    let good = lines(&path)[0].clone();
    for bad in [
        good.replacen("\"seq\":0", "\"seq\":-1", 1),
        good.replacen("\"event\":\"request\"", "\"event\":\"requests\"", 1),
        good.replacen("\"method\"", "\"surprise\":1,\"method\"", 1),
        good.replacen("\"seq\":0,", "\"seq\":0,\"seq\":0,", 1),
        format!("{good} x"),
        good[..good.len() - 1].to_owned(),
        good.replacen("\"host\":\"api.github.com\",", "", 1),
    ] {
        assert_ne!(bad, good);
        assert!(derived(&bad).is_err(), "the derived pass read {bad}");
        assert!(Line::parse(bad.as_bytes()).is_err(), "read {bad}");
    }
}

#[test]
fn platform_ids_of_created_messages_table() {
    let (comment, pull) = ("github_issue_comment", "github_pull_request");
    let cases = [
        // REST answers' ids, as they are
        (comment, "1234", "1234"),
        (pull, "7", "7"),
        ("feishu_message", "om_1", "om_1"),
        // GraphQL answers' urls, by the number they end in
        (
            comment,
            "https://github.com/acme/widgets/pull/2#issuecomment-7001",
            "7001",
        ),
        (
            comment,
            "https://github.com/acme/widgets/issues/3#issuecomment-12",
            "12",
        ),
        (pull, "https://github.com/acme/widgets/pull/2", "2"),
        // anything else is itself (and names nothing on the platform)
        (
            comment,
            "https://github.com/acme/widgets/pull/2",
            "https://github.com/acme/widgets/pull/2",
        ),
        (
            pull,
            "https://github.com/a/b/pull/2#issuecomment-5",
            "https://github.com/a/b/pull/2#issuecomment-5",
        ),
        (
            pull,
            "https://github.com/a/b/pull/2/files",
            "https://github.com/a/b/pull/2/files",
        ),
        (
            pull,
            "https://github.com/a/b/pull/",
            "https://github.com/a/b/pull/",
        ),
        (
            comment,
            "https://github.com/a/b/pull/2#issuecomment-",
            "https://github.com/a/b/pull/2#issuecomment-",
        ),
        (
            comment,
            "https://github.com/a/b/pull/2#issuecomment-7x",
            "https://github.com/a/b/pull/2#issuecomment-7x",
        ),
        (pull, "x/pull/2", "x/pull/2"),
        (comment, "x#issuecomment-5", "x#issuecomment-5"),
        (
            "github_review",
            "https://github.com/a/b/pull/2",
            "https://github.com/a/b/pull/2",
        ),
    ];
    for (kind, id, want) in cases {
        assert_eq!(platform_id(kind, id), want, "{kind} {id}");
    }
}
