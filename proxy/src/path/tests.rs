use super::*;
use proptest::prelude::*;

#[test]
fn canonical_paths_pass() {
    for path in [
        "/",
        "/repos/octo/hello/issues/1/comments",
        "/repos/octo/hello.js/contents/src/main.rs",
        "/repos/octo/hello/contents/%E4%B8%AD%E6%96%87.md",
        "/repos/octo/hello/contents/a%20b",
        "/repos/octo/hello/git/refs/heads/gatehouse%3Bx",
        "/a/b.c/..d/.e/f..",
        "/a/~b/c!$&'()*+,=:@",
    ] {
        assert_eq!(check_canonical(path.as_bytes()), Ok(path), "{path}");
    }
}

#[test]
fn path_tricks_are_refused() {
    let cases: &[(&[u8], PathError)] = &[
        (b"", PathError::NotAbsolute),
        (b"repos/a", PathError::NotAbsolute),
        (b"*", PathError::NotAbsolute),
        (b"http://api.github.com/x", PathError::NotAbsolute),
        (b"/repos/a/./b", PathError::DotSegment(".")),
        (b"/repos/a/../b", PathError::DotSegment("..")),
        (b"/..", PathError::DotSegment("..")),
        (b"/repos/a/b/.", PathError::DotSegment(".")),
        (b"//repos/a", PathError::EmptySegment(1)),
        (b"/repos//a", PathError::EmptySegment(7)),
        (b"/repos/a/", PathError::EmptySegment(9)),
        (
            b"/repos/a%2fb",
            PathError::ForbiddenEncoding { what: "`/`", at: 8 },
        ),
        (
            b"/repos/a%2Fb",
            PathError::ForbiddenEncoding { what: "`/`", at: 8 },
        ),
        (
            b"/repos/%2e%2e/b",
            PathError::ForbiddenEncoding { what: "`.`", at: 7 },
        ),
        (
            b"/repos/%2E%2E/b",
            PathError::ForbiddenEncoding { what: "`.`", at: 7 },
        ),
        (
            b"/repos/.%2e/b",
            PathError::ForbiddenEncoding { what: "`.`", at: 8 },
        ),
        (
            b"/repos/a%5cb",
            PathError::ForbiddenEncoding {
                what: "`\\`",
                at: 8,
            },
        ),
        (
            b"/repos/a%5Cb",
            PathError::ForbiddenEncoding {
                what: "`\\`",
                at: 8,
            },
        ),
        (
            b"/repos/a%252eb",
            PathError::ForbiddenEncoding {
                what: "`%` (double encoding)",
                at: 8,
            },
        ),
        (
            b"/repos/%61dmin",
            PathError::ForbiddenEncoding {
                what: "unreserved character",
                at: 7,
            },
        ),
        (
            b"/repos/a%00",
            PathError::ForbiddenEncoding {
                what: "control character",
                at: 8,
            },
        ),
        (
            b"/repos/a%0d%0aX",
            PathError::ForbiddenEncoding {
                what: "control character",
                at: 8,
            },
        ),
        (
            b"/repos/a%7f",
            PathError::ForbiddenEncoding {
                what: "control character",
                at: 8,
            },
        ),
        (b"/repos/a%2", PathError::BadPercent(8)),
        (b"/repos/a%zz", PathError::BadPercent(8)),
        (b"/repos/a\\..\\b", PathError::Backslash(8)),
        (b"/repos\\a", PathError::Backslash(6)),
        (b"/repos/a\x00", PathError::ForbiddenByte { byte: 0, at: 8 }),
        (
            b"/repos/a\r\nHost: x",
            PathError::ForbiddenByte { byte: b'\r', at: 8 },
        ),
        (
            b"/repos/a\tb",
            PathError::ForbiddenByte { byte: b'\t', at: 8 },
        ),
        (
            b"/repos/a b",
            PathError::ForbiddenByte { byte: b' ', at: 8 },
        ),
        (
            b"/repos/a\x7f",
            PathError::ForbiddenByte { byte: 0x7f, at: 8 },
        ),
        (
            b"/repos/\xff",
            PathError::ForbiddenByte { byte: 0xff, at: 7 },
        ),
        (
            b"/repos/\xc3\xa9",
            PathError::ForbiddenByte { byte: 0xc3, at: 7 },
        ),
        (
            b"/repos/a;b",
            PathError::ForbiddenByte { byte: b';', at: 8 },
        ),
        (
            b"/repos/..;/b",
            PathError::ForbiddenByte { byte: b';', at: 9 },
        ),
        (
            b"/repos/a#b",
            PathError::ForbiddenByte { byte: b'#', at: 8 },
        ),
        (
            b"/repos/a?b",
            PathError::ForbiddenByte { byte: b'?', at: 8 },
        ),
        (b"/repos/%ff", PathError::NonUtf8(7)),
        (b"/repos/%c3%28", PathError::NonUtf8(7)),
        (b"/repos/%c3", PathError::NonUtf8(7)),
    ];
    for (path, expected) in cases {
        assert_eq!(
            check_canonical(path).as_ref(),
            Err(expected),
            "{}",
            String::from_utf8_lossy(path)
        );
    }
}

fn vars(repo: &str) -> Vars {
    Vars::from([("repo".to_owned(), repo.to_owned())])
}

fn template(source: &str) -> PathTemplate {
    PathTemplate::parse(source, &BTreeSet::from(["repo".to_owned()])).unwrap()
}

/// `(template, path, expected captures or no match)`.
type MatchCase<'a> = (&'a str, &'a str, Option<&'a [(&'a str, &'a str)]>);

#[test]
fn templates_match_anchored() {
    let v = vars("octo/hello");
    let cases: &[MatchCase] = &[
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/hello/issues/12/comments",
            Some(&[("n", "12")]),
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/OCTO/Hello/issues/12/comments",
            Some(&[("n", "12")]),
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/hello/issues/12/comments/x",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/hello/issues/x/comments",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/hello/issues//comments",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/other/issues/1/comments",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/hello2/issues/1/comments",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/octo/hell/issues/1/comments",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repos/evil/octo/hello/issues/1/comments",
            None,
        ),
        (
            "/repos/{repo}/issues/{n}/comments",
            "/repositories/1/issues/1/comments",
            None,
        ),
        ("/repos/{repo}", "/repos/octo/hello", Some(&[])),
        ("/repos/{repo}", "/repos/octo/hello/", None),
        (
            "/{repo}.git/info/refs",
            "/octo/hello.git/info/refs",
            Some(&[]),
        ),
        (
            "/{repo}.git/info/refs",
            "/Octo/HELLO.git/info/refs",
            Some(&[]),
        ),
        ("/{repo}.git/info/refs", "/octo/hello/info/refs", None),
        (
            "/{repo}.git/info/refs",
            "/octo/hello.git.git/info/refs",
            None,
        ),
        (
            "/repos/{repo}/contents/**",
            "/repos/octo/hello/contents/a/b/c.rs",
            Some(&[]),
        ),
        (
            "/repos/{repo}/contents/**",
            "/repos/octo/hello/contents",
            None,
        ),
        (
            "/repos/{repo}/contents/**",
            "/repos/octo/hello/contentsX/a",
            None,
        ),
        (
            "/repos/{repo}/branches/*",
            "/repos/octo/hello/branches/main",
            Some(&[]),
        ),
        (
            "/repos/{repo}/branches/*",
            "/repos/octo/hello/branches/a/b",
            None,
        ),
        (
            "/open-apis/im/v1/messages/{message_id:seg}/reply",
            "/open-apis/im/v1/messages/om_abc-1/reply",
            Some(&[("message_id", "om_abc-1")]),
        ),
        (
            "/open-apis/im/v1/messages/{message_id:seg}/reply",
            "/open-apis/im/v1/messages/reply",
            None,
        ),
        ("/a/{n}.diff", "/a/123.diff", Some(&[("n", "123")])),
        ("/a/{n}.diff", "/a/123x.diff", None),
        ("/a/{n}", "/a/123456789012345678901", None),
    ];
    for (source, path, expected) in cases {
        let got = template(source).matches(path, &v);
        let expected = expected.map(|pairs| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Captures>()
        });
        assert_eq!(got, expected, "{source} vs {path}");
    }
}

#[test]
fn unbound_variable_never_matches() {
    assert_eq!(
        template("/repos/{repo}").matches("/repos/octo/hello", &Vars::new()),
        None
    );
}

#[test]
fn bad_templates_are_refused() {
    let vars = BTreeSet::from(["repo".to_owned()]);
    for (source, expected) in [
        ("repos/{repo}", TemplateError::NotAbsolute),
        ("/repos/{repo", TemplateError::BadPlaceholder(7)),
        ("/repos/}", TemplateError::BadPlaceholder(7)),
        ("/repos/{Repo}", TemplateError::BadPlaceholder(7)),
        ("/repos/{repo:seg}", TemplateError::BadPlaceholder(7)),
        ("/repos/{x:int}", TemplateError::BadPlaceholder(7)),
        ("/repos/{a}{b}", TemplateError::AdjacentPlaceholders(10)),
        (
            "/repos/{a}/{a}",
            TemplateError::DuplicateCapture("a".into()),
        ),
        ("/repos/a*", TemplateError::BadWildcard),
        ("/repos/**/x", TemplateError::BadWildcard),
        ("/repos/***", TemplateError::BadWildcard),
        (
            "/repos/../x",
            TemplateError::NotCanonical(PathError::DotSegment("..")),
        ),
        (
            "/repos//x",
            TemplateError::NotCanonical(PathError::EmptySegment(7)),
        ),
        (
            "/repos/%2f",
            TemplateError::NotCanonical(PathError::ForbiddenEncoding { what: "`/`", at: 7 }),
        ),
    ] {
        assert_eq!(
            PathTemplate::parse(source, &vars),
            Err(expected),
            "{source}"
        );
    }
}

#[test]
fn variable_values_must_be_path_safe() {
    assert!(check_variable_value("octo/hello").is_ok());
    assert!(check_variable_value("octo-org/hello_world.js").is_ok());
    for bad in [
        "",
        "octo/",
        "/octo",
        "octo//x",
        "octo/..",
        "./x",
        "octo/hel lo",
        "octo/%2e",
        "octo\\x",
        "octo/é",
    ] {
        assert!(check_variable_value(bad).is_err(), "{bad:?}");
    }
}

proptest! {
    /// Whatever bytes arrive, the check never panics, and what it accepts is
    /// ASCII without dot segments, empty segments or backslashes.
    #[test]
    fn canonical_check_accepts_only_clean_paths(path in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(p) = check_canonical(&path) {
            prop_assert!(p.is_ascii());
            prop_assert!(p.starts_with('/'));
            prop_assert!(!p.contains('\\'));
            prop_assert!(!p.to_ascii_lowercase().contains("%2e") && !p.to_ascii_lowercase().contains("%2f"));
            if p != "/" {
                prop_assert!(p[1..].split('/').all(|s| !s.is_empty() && s != "." && s != ".."));
            }
        }
    }

    /// Paths built from dot-ish pieces: anything with a dot segment, an
    /// encoded dot or slash, or a backslash is refused.
    #[test]
    fn dot_tricks_are_always_refused(pieces in proptest::collection::vec(prop_oneof![
        Just("a"), Just("."), Just(".."), Just("%2e"), Just("%2E"), Just("%2f"), Just("\\"), Just("/"), Just("%5c"),
    ], 1..8)) {
        let path = format!("/{}", pieces.concat());
        let tricky = path[1..].split('/').any(|s| s == "." || s == ".." || s.is_empty())
            || path.contains('\\') || path.to_ascii_lowercase().contains('%');
        prop_assert_eq!(check_canonical(path.as_bytes()).is_err(), tricky, "{}", path);
    }

    /// The repo variable matches any re-casing of itself and nothing that
    /// differs in more than case.
    #[test]
    fn repo_matches_only_itself_up_to_case(owner in "[a-z][a-z0-9-]{0,8}", name in "[a-z][a-z0-9._-]{0,8}", other in "[a-zA-Z][a-zA-Z0-9-]{0,8}", upper in any::<bool>()) {
        let repo = format!("{owner}/{name}");
        let t = template("/repos/{repo}/issues");
        let shown = if upper { repo.to_ascii_uppercase() } else { repo.clone() };
        let shown_path = format!("/repos/{shown}/issues");
        prop_assert!(t.matches(&shown_path, &vars(&repo)).is_some());
        let other_repo = format!("{owner}/{other}");
        let expect = other_repo.eq_ignore_ascii_case(&repo);
        let other_path = format!("/repos/{other_repo}/issues");
        prop_assert_eq!(t.matches(&other_path, &vars(&repo)).is_some(), expect);
    }

    /// Matching never panics, whatever the path.
    #[test]
    fn matching_never_panics(path in "\\PC{0,40}") {
        let _ = template("/repos/{repo}/x/{n}/{id:seg}/*/**").matches(&path, &vars("a/b"));
    }
}

#[test]
fn the_request_target_budget_holds_at_its_limits() {
    let segments = |n: usize| "/a".repeat(n);
    let pairs = |n: usize| vec!["k=v"; n].join("&");
    let long_path = format!("/{}", "a".repeat(MAX_PATH_BYTES - 1));
    let long_query = format!("k={}", "v".repeat(MAX_QUERY_BYTES - 2));
    // (path, query, the bound refused, if any)
    let cases: Vec<(String, Option<String>, Option<&str>)> = vec![
        ("/".into(), None, None),
        ("/x".into(), Some(String::new()), None),
        (segments(MAX_PATH_SEGMENTS), None, None),
        (segments(MAX_PATH_SEGMENTS + 1), None, Some("path segments")),
        (long_path.clone(), None, None),
        (long_path + "a", None, Some("bytes in the path")),
        ("/x".into(), Some(pairs(MAX_QUERY_PAIRS)), None),
        (
            "/x".into(),
            Some(pairs(MAX_QUERY_PAIRS + 1)),
            Some("query pairs"),
        ),
        (
            "/x".into(),
            Some("&".repeat(MAX_QUERY_PAIRS)),
            Some("query pairs"),
        ),
        ("/x".into(), Some(long_query.clone()), None),
        (
            "/x".into(),
            Some(long_query + "v"),
            Some("bytes in the query"),
        ),
    ];
    for (path, query, refused) in cases {
        let verdict = check_budget(&path, query.as_deref());
        match refused {
            None => assert_eq!(
                verdict,
                Ok(()),
                "{} {:?}",
                path.len(),
                query.map(|q| q.len())
            ),
            Some(bound) => {
                let why = verdict.unwrap_err();
                assert!(why.contains(bound), "{why}");
            }
        }
    }
}

#[test]
fn matching_an_ascii_path_is_matching_a_checked_one() {
    let vars = Vars::from([("repo".to_owned(), "octo/hello".to_owned())]);
    let names = BTreeSet::from(["repo".to_owned()]);
    let template = PathTemplate::parse("/repos/{repo}/pulls/{n}/{id:seg}.diff", &names).unwrap();
    for path in [
        "/repos/octo/hello/pulls/12/abc.diff",
        "/repos/OCTO/hello/pulls/12/a.diff.diff",
        "/repos/octo/hello/pulls/x/abc.diff",
        "/repos/octo/hello-evil/pulls/12/abc.diff",
        "/repos/octo/hello/pulls/12/.diff",
    ] {
        assert_eq!(
            template.matches(path, &vars),
            template.matches_ascii(path, &vars),
            "{path}"
        );
    }
    assert_eq!(
        template.matches("/repos/octo/hello/pulls/1/é.diff", &vars),
        None
    );
}
