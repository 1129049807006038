use super::*;
use proptest::prelude::*;

const A: &str = "1111111111111111111111111111111111111111";
const B: &str = "2222222222222222222222222222222222222222";
const Z: &str = "0000000000000000000000000000000000000000";

fn pkt(payload: &str) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload.as_bytes());
    out
}

fn body(lines: &[String]) -> Vec<u8> {
    let mut out: Vec<u8> = lines.iter().flat_map(|l| pkt(l)).collect();
    out.extend_from_slice(b"0000PACK\x00\x00\x00\x02");
    out
}

fn policy() -> RefPolicy {
    RefPolicyFile {
        refs: vec!["refs/heads/gatehouse/*".into()],
        delete: false,
    }
    .validate()
    .unwrap()
}

#[test]
fn parses_commands_and_stops_at_the_flush() {
    let b = body(&[
        format!("{A} {B} refs/heads/gatehouse/x\0report-status side-band-64k agent=git/2.39\n"),
        format!("{Z} {B} refs/heads/gatehouse/y\n"),
    ]);
    let parsed = parse_commands(&b).unwrap();
    assert_eq!(parsed.commands.len(), 2);
    assert_eq!(
        parsed.commands[0],
        RefUpdate {
            old: A.into(),
            new: B.into(),
            name: "refs/heads/gatehouse/x".into()
        }
    );
    assert!(parsed.commands[1].is_create());
    assert_eq!(
        parsed.capabilities,
        ["report-status", "side-band-64k", "agent=git/2.39"]
    );
    assert_eq!(&b[parsed.consumed..], b"PACK\x00\x00\x00\x02");
    assert_eq!(check(&parsed.commands, &policy()), Ok(()));
}

#[test]
fn short_prefixes_need_more() {
    let b = body(&[format!("{A} {B} refs/heads/gatehouse/x\0report-status\n")]);
    let flush_end = b.len() - 8;
    for cut in 0..flush_end {
        assert_eq!(
            parse_commands(&b[..cut]),
            Err(ParseError::NeedMore),
            "cut at {cut}"
        );
    }
    assert!(parse_commands(&b[..flush_end]).is_ok());
}

#[test]
fn malformed_commands_are_invalid() {
    let sha256 = "3".repeat(64);
    let cases: Vec<Vec<u8>> = vec![
        b"zzzz".to_vec(),
        b"0003".to_vec(),
        b"0001".to_vec(),
        b"0000".to_vec(),
        body(&[format!("{A} {B}\n")]),
        body(&[format!("{A} {B} main\n")]),
        body(&[format!("{A} {B} refs/heads/../x\n")]),
        body(&[format!("{A} {B} refs/heads/x y\n")]),
        body(&[format!("{A} {B} refs/heads/x\r\n")]),
        body(&[format!("{A} {B} refs/heads/x.lock\n")]),
        body(&[format!("{A} {B} refs/heads/@{{x}}\n")]),
        body(&[format!("{} {B} refs/heads/x\n", "A".repeat(40))]),
        body(&[format!("{A} {sha256} refs/heads/x\n")]),
        body(&[
            format!("{A} {B} refs/heads/a\0caps\n"),
            format!("{A} {B} refs/heads/b\0caps\n"),
        ]),
        body(&["push-cert\0report-status\n".to_string()]),
        body(&[format!("{A} {B} refs/heads/a\n"), format!("shallow {A}\n")]),
    ];
    for b in cases {
        assert!(
            matches!(parse_commands(&b), Err(ParseError::Invalid(_))),
            "{:?}",
            String::from_utf8_lossy(&b)
        );
    }
}

#[test]
fn shallow_lines_before_commands_are_skipped() {
    let b = body(&[
        format!("shallow {A}\n"),
        format!("{A} {B} refs/heads/gatehouse/x\0caps\n"),
    ]);
    assert_eq!(parse_commands(&b).unwrap().commands.len(), 1);
}

#[test]
fn policy_refuses_main_deletion_and_other_refs() {
    let update = |old: &str, new: &str, name: &str| RefUpdate {
        old: old.into(),
        new: new.into(),
        name: name.into(),
    };
    let p = policy();
    assert!(check(&[update(A, B, "refs/heads/gatehouse/x")], &p).is_ok());
    assert!(check(&[update(A, B, "refs/heads/gatehouse/a/b")], &p).is_ok());
    for denied in [
        vec![update(A, B, "refs/heads/main")],
        vec![update(A, B, "refs/heads/master")],
        vec![update(A, B, "refs/heads/gatehouse")],
        vec![update(A, B, "refs/heads/gatehouse/")],
        vec![update(A, B, "refs/heads/gatehousex")],
        vec![update(A, B, "refs/tags/gatehouse/x")],
        vec![update(A, Z, "refs/heads/gatehouse/x")],
        vec![
            update(A, B, "refs/heads/gatehouse/x"),
            update(A, B, "refs/heads/main"),
        ],
        vec![],
    ] {
        assert!(check(&denied, &p).is_err(), "{denied:?}");
    }
    let reason = check(&[update(A, B, "refs/heads/main")], &p)
        .unwrap_err()
        .reason;
    assert!(
        reason.contains("refs/heads/main") && reason.contains("refs/heads/gatehouse/*"),
        "{reason}"
    );
    let deleting = RefPolicyFile {
        refs: vec!["refs/heads/gatehouse/*".into()],
        delete: true,
    }
    .validate()
    .unwrap();
    assert!(check(&[update(A, Z, "refs/heads/gatehouse/x")], &deleting).is_ok());
    assert!(check(&[update(A, Z, "refs/heads/main")], &deleting).is_err());
}

#[test]
fn bad_patterns_are_refused() {
    for bad in [
        "heads/x",
        "refs/heads/*/x",
        "refs/heads/x*",
        "refs/heads/../*",
        "",
    ] {
        assert!(RefPattern::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_status_report_is_given_only_when_the_client_asked_for_one() {
    let first = |caps: &str| format!("{A} {B} refs/heads/main\0{caps}\n");
    // (what, body head, the refs and side-band of the report asked for)
    type Case = (
        &'static str,
        Vec<u8>,
        Option<(&'static [&'static str], bool)>,
    );
    let cases: [Case; 6] = [
        (
            "report-status",
            body(&[first("report-status")]),
            Some((&["refs/heads/main"], false)),
        ),
        (
            "report-status-v2",
            body(&[first("report-status-v2 agent=git/2.45")]),
            Some((&["refs/heads/main"], false)),
        ),
        (
            "side-band-64k, two refs",
            body(&[
                first("report-status side-band-64k"),
                format!("{Z} {B} refs/heads/x\n"),
            ]),
            Some((&["refs/heads/main", "refs/heads/x"], true)),
        ),
        (
            "side-band",
            body(&[first("side-band report-status")]),
            Some((&["refs/heads/main"], true)),
        ),
        (
            "no report asked for",
            body(&[first("side-band-64k agent=git/2.39")]),
            None,
        ),
        ("commands incomplete", pkt(&first("report-status")), None),
    ];
    for (name, prefix, expected) in cases {
        let expected = expected.map(|(refs, sideband)| StatusReport {
            refs: refs.iter().map(|r| r.to_string()).collect(),
            sideband,
        });
        assert_eq!(StatusReport::requested(&prefix), expected, "{name}");
    }
    assert_eq!(StatusReport::requested(b"garbage"), None);
}

#[test]
fn a_refusal_rejects_every_ref_in_report_status_format() {
    let report = StatusReport {
        refs: vec!["refs/heads/main".into(), "refs/heads/x".into()],
        sideband: false,
    };
    assert_eq!(
        report.refusal("no"),
        b"000eunpack ok\n0025ng refs/heads/main gatehouse: no\n0022ng refs/heads/x gatehouse: no\n0000"
            .to_vec()
    );
    // Control characters cannot end the line early or forge another one.
    assert_eq!(
        report.refusal("a\nok refs/heads/main\n\0"),
        report.refusal("a ok refs/heads/main  ")
    );
    // A long reason is cut, not spread over packets git would reject.
    let long = report.refusal(&"x".repeat(5000));
    assert!(long.len() < 2 * (MAX_REASON + 64) + 64, "{}", long.len());
}

#[test]
fn a_refusal_inside_side_band_carries_the_report_on_band_1_and_the_reason_on_band_2() {
    let report = StatusReport {
        refs: vec!["refs/heads/main".into()],
        sideband: true,
    };
    let inner = b"000eunpack ok\n0025ng refs/heads/main gatehouse: no\n0000";
    let mut expected = pkt("\x02gatehouse: push refused: no\n");
    expected.extend(pkt_line(&[b"\x01".as_slice(), inner].concat()));
    expected.extend_from_slice(b"0000");
    assert_eq!(report.refusal("no"), expected);
    assert_eq!(&expected[..4], b"0021");
}

proptest! {
    #[test]
    fn parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(parsed) = parse_commands(&bytes) {
            prop_assert!(parsed.consumed <= bytes.len());
            prop_assert!(!parsed.commands.is_empty());
        }
    }

    /// A push is allowed exactly when every ref is under gatehouse/ and none is deleted.
    #[test]
    fn policy_matches_its_meaning(names in proptest::collection::vec("refs/(heads|tags)/(gatehouse/)?[a-z]{1,5}", 1..4), delete in any::<bool>()) {
        let updates: Vec<_> = names.iter().map(|n| RefUpdate { old: A.into(), new: if delete { Z.into() } else { B.into() }, name: n.clone() }).collect();
        let expected = !delete && names.iter().all(|n| n.starts_with("refs/heads/gatehouse/"));
        prop_assert_eq!(check(&updates, &policy()).is_ok(), expected);
    }
}

/// Feeds `body` to one parser in chunks ending at `cuts` (then the rest),
/// as the proxy does: each call sees the whole body so far.
fn parse_in_chunks(body: &[u8], cuts: &[usize]) -> Result<Parsed, ParseError> {
    let mut parser = CommandParser::default();
    for &cut in cuts.iter().filter(|&&c| c < body.len()) {
        match parser.parse(&body[..cut]) {
            Err(ParseError::NeedMore) => {}
            done => return done,
        }
    }
    parser.parse(body)
}

#[test]
fn a_huge_command_list_sent_a_byte_at_a_time_costs_one_pass() {
    // 999 commands, then a pkt-line of 64 KiB, one byte per chunk: the
    // old parser re-read the whole prefix per chunk (77 s of CPU).
    let mut b: Vec<u8> = (0..999)
        .flat_map(|i| pkt(&format!("{A} {B} refs/heads/gatehouse/b{i}\n")))
        .collect();
    let long = format!(
        "{A} {B} refs/heads/gatehouse/{}\n",
        "x".repeat(65535 - 4 - 104)
    );
    b.extend(pkt(&long));
    assert_eq!(&b[b.len() - 65535..b.len() - 65531], b"ffff");
    b.extend_from_slice(b"0000");
    let mut parser = CommandParser::default();
    for end in 0..b.len() {
        assert_eq!(parser.parse(&b[..end]), Err(ParseError::NeedMore), "{end}");
    }
    let parsed = parser.parse(&b).unwrap();
    assert_eq!(parsed.commands.len(), 1000);
    assert_eq!(parsed.consumed, b.len());
    // Each pkt-line was parsed once, however the body was split.
    assert_eq!(parser.lines_parsed, 1000);
    // The answer is final: asking again repeats it.
    assert_eq!(parser.parse(&b), Ok(parsed));
}

#[test]
fn a_final_refusal_is_repeated() {
    let b = body(&[
        format!("{A} {B} refs/heads/x\0\n"),
        format!("{A} {B} refs/heads/y\0\n"),
    ]);
    let mut parser = CommandParser::default();
    let first = parser.parse(&b);
    assert!(matches!(first, Err(ParseError::Invalid(_))), "{first:?}");
    assert_eq!(parser.parse(&b), first);
}

fn command_lines() -> impl Strategy<Value = Vec<String>> {
    let line = ("[a-z]{1,8}", any::<bool>(), "[ -~]{0,12}").prop_map(|(name, create, caps)| {
        let old = if create { Z } else { A };
        format!("{old} {B} refs/heads/gatehouse/{name}\0{caps}\n")
    });
    proptest::collection::vec(line, 1..6).prop_map(|mut lines| {
        // Only the first command carries capabilities.
        for l in lines.iter_mut().skip(1) {
            if let Some(nul) = l.find('\0') {
                *l = format!("{}\n", &l[..nul]);
            }
        }
        lines
    })
}

proptest! {
    /// Every strict prefix of an accepted command list needs more, and so
    /// does every prefix of it fed in chunks.
    #[test]
    fn every_strict_prefix_of_an_accepted_body_needs_more(lines in command_lines()) {
        let b = body(&lines);
        let parsed = parse_commands(&b).unwrap();
        for cut in 0..parsed.consumed {
            prop_assert_eq!(parse_commands(&b[..cut]), Err(ParseError::NeedMore), "cut {}", cut);
        }
    }

    /// Feeding a body in any chunks gives the answer of parsing it whole.
    #[test]
    fn chunking_does_not_change_the_answer(
        bytes in prop_oneof![
            command_lines().prop_map(|l| body(&l)),
            proptest::collection::vec(any::<u8>(), 0..256),
        ],
        cuts in proptest::collection::vec(0usize..300, 0..8),
    ) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        prop_assert_eq!(parse_in_chunks(&bytes, &cuts), parse_commands(&bytes));
    }
}
