use super::*;

const H: u64 = 3_600_000;

/// A row: (seq, at in hours, thread, explicit, verdicts).
fn row(
    seq: u64,
    hours: u64,
    thread: &str,
    explicit: bool,
    verdicts: &[(&str, Seen)],
) -> TriggerRow {
    TriggerRow {
        seq,
        at: hours * H,
        thread: thread.into(),
        explicit,
        verdicts: verdicts
            .iter()
            .map(|(r, s)| ((*r).to_owned(), *s))
            .collect(),
    }
}

fn stats(
    rule: &str,
    would_accept: usize,
    threads: usize,
    then_requested: usize,
    missed: usize,
) -> RuleStats {
    RuleStats {
        rule: rule.into(),
        would_accept,
        threads,
        then_requested,
        missed,
    }
}

use Seen::{Other, Rejected, WouldAccept};

#[test]
fn rule_stats_table() {
    let window = 24 * H;
    // (name, rows, since, expected per rule)
    let cases: Vec<(&str, Vec<TriggerRow>, u64, Vec<RuleStats>)> = vec![
        ("empty", vec![], 0, vec![]),
        (
            "a would-accept then a person's request within the window",
            vec![
                row(1, 1, "t1", false, &[("r", WouldAccept)]),
                row(2, 5, "t1", true, &[]),
            ],
            0,
            vec![stats("r", 1, 1, 1, 0)],
        ),
        (
            "the request came after the window, or on another thread, or before",
            vec![
                row(1, 1, "t1", false, &[("r", WouldAccept)]),
                row(2, 26, "t1", true, &[]),
                row(3, 2, "t2", false, &[("r", WouldAccept)]),
                row(4, 3, "t3", true, &[]),
                row(5, 4, "t4", true, &[]),
                row(6, 5, "t4", false, &[("r", WouldAccept)]),
            ],
            0,
            vec![stats("r", 3, 3, 0, 0)],
        ),
        (
            "two would-accepts on one thread: one thread, requested once",
            vec![
                row(1, 1, "t1", false, &[("r", WouldAccept)]),
                row(2, 2, "t1", false, &[("r", WouldAccept)]),
                row(3, 3, "t1", true, &[]),
                row(4, 4, "t1", true, &[]),
            ],
            0,
            vec![stats("r", 2, 1, 1, 0)],
        ),
        (
            "a miss: the rule judged and rejected, then a person asked",
            vec![
                row(1, 1, "t1", false, &[("r", Rejected), ("s", WouldAccept)]),
                row(2, 2, "t1", true, &[]),
            ],
            0,
            vec![stats("r", 0, 0, 0, 1), stats("s", 1, 1, 1, 0)],
        ),
        (
            "not a miss: conditions failed, a later would-accept, or out of the window",
            vec![
                row(1, 1, "t1", false, &[("r", Other)]),
                row(2, 2, "t1", true, &[]),
                row(3, 1, "t2", false, &[("r", Rejected)]),
                row(4, 2, "t2", false, &[("r", WouldAccept)]),
                row(5, 3, "t2", true, &[]),
                row(6, 1, "t3", false, &[("r", Rejected)]),
                row(7, 30, "t3", true, &[]),
            ],
            0,
            vec![stats("r", 1, 1, 1, 0)],
        ),
        (
            "since: older would-accepts and requests are not counted",
            vec![
                row(1, 1, "t1", false, &[("r", WouldAccept)]),
                row(2, 2, "t1", true, &[]),
                row(3, 1, "t2", false, &[("r", Rejected)]),
                row(4, 2, "t2", true, &[]),
                row(5, 10, "t3", false, &[("r", WouldAccept)]),
                row(6, 11, "t4", false, &[("r", Rejected)]),
                row(7, 12, "t4", true, &[]),
            ],
            10 * H,
            vec![stats("r", 1, 1, 0, 1)],
        ),
    ];
    for (name, rows, since, want) in cases {
        assert_eq!(rule_stats(&rows, since, window), want, "{name}");
    }
}

#[test]
fn trigger_rows_are_read_from_decisions() {
    let candidate = r#"{"type":"trigger","trigger":"trg_019b76daa800000000","thread":"thr_019b76daa800000000","admission":"candidate","author":{"kind":"human","name":"alice"},"eval":[{"rule":"bug-reports","mode":"observe","verdict":"would_accept","reason":"x"},{"rule":"ci","mode":"auto","verdict":"condition_failed","condition":"kind"},{"rule":"docs","mode":"observe","verdict":"not_judged","reason":"judge_unavailable","detail":"d"}],"ticket":{"action":"none","why":"not_accepted"}}"#;
    assert_eq!(
        trigger_row(3, 7, candidate),
        Some(TriggerRow {
            seq: 3,
            at: 7,
            thread: "thr_019b76daa800000000".into(),
            explicit: false,
            verdicts: vec![
                ("bug-reports".into(), WouldAccept),
                ("ci".into(), Other),
                ("docs".into(), Rejected)
            ],
        })
    );
    let explicit = r#"{"type":"trigger","trigger":"trg_1","thread":"thr_1","admission":"explicit","requester":"alice","via":"mention","ticket":{"action":"opened"}}"#;
    let r = trigger_row(4, 8, explicit).unwrap();
    assert!(r.explicit && r.verdicts.is_empty());
    for other in [
        r#"{"type":"reply","ticket":"tkt_1"}"#,
        r#"{"type":"policy","version":"v"}"#,
        "not json",
        r#"{"type":"trigger"}"#,
    ] {
        assert_eq!(trigger_row(1, 1, other), None, "{other}");
    }
}

#[test]
fn since_and_window_values() {
    let now = 1_764_547_200_000; // 2025-12-01T00:00:00Z
    let ok = [
        ("90m", now - 90 * 60_000),
        ("24h", now - 24 * H),
        ("7d", now - 7 * 24 * H),
        ("1970-01-01", 0),
        ("2025-12-01", now),
        ("2024-02-29", 1_709_164_800_000),
        ("2000-03-01", 951_868_800_000),
        ("1764547200000", now),
    ];
    for (text, want) in ok {
        assert_eq!(parse_since(text, now), Ok(want), "{text}");
    }
    for bad in [
        "",
        "7w",
        "d",
        "-1d",
        "2025-13-01",
        "2025-02-29",
        "2025-1-01",
        "yesterday",
        "1969-12-31",
    ] {
        assert!(parse_since(bad, now).is_err(), "{bad}");
    }
    assert_eq!(parse_duration("3d"), Ok(3 * 24 * H));
    assert!(parse_duration("12").is_err());
}
