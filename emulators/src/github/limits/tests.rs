use super::*;

const NOW: u64 = 1_800_000_000;

fn rest(method: &str, token: Option<&str>) -> Call {
    Call::of(method, "/repos/acme/widgets/issues/1/comments", b"", token)
}

fn graphql(query: &str, operation: Option<&str>) -> Call {
    let body = json!({"query": query, "operationName": operation}).to_string();
    Call::of("POST", "/graphql", body.as_bytes(), Some("t"))
}

#[test]
fn calls_are_read_from_method_path_and_body() {
    // (call, resource, creation, counted)
    let cases = [
        (rest("GET", Some("t")), Resource::Core, false, true),
        (rest("POST", Some("t")), Resource::Core, true, true),
        (rest("PATCH", Some("t")), Resource::Core, true, true),
        (rest("PUT", Some("t")), Resource::Core, true, true),
        (rest("DELETE", Some("t")), Resource::Core, true, true),
        (rest("HEAD", Some("t")), Resource::Core, false, true),
        (
            Call::of("GET", "/rate_limit", b"", Some("t")),
            Resource::Core,
            false,
            false,
        ),
        (
            Call::of("GET", "/api/v3/rate_limit", b"", Some("t")),
            Resource::Core,
            false,
            false,
        ),
        (
            Call::of("POST", "/rate_limit", b"", Some("t")),
            Resource::Core,
            true,
            true,
        ),
        (graphql("{ viewer { login } }", None), Resource::Graphql, false, true),
        (
            graphql("query Q { viewer { login } }", None),
            Resource::Graphql,
            false,
            true,
        ),
        (
            graphql("mutation { addComment(input: {}) { clientMutationId } }", None),
            Resource::Graphql,
            true,
            true,
        ),
        // The operation named is the one that runs.
        (
            graphql(
                "query Q { viewer { login } } mutation M { addComment(input: {}) { clientMutationId } }",
                Some("Q"),
            ),
            Resource::Graphql,
            false,
            true,
        ),
        (
            graphql(
                "query Q { viewer { login } } mutation M { addComment(input: {}) { clientMutationId } }",
                Some("M"),
            ),
            Resource::Graphql,
            true,
            true,
        ),
        (graphql("mutation {", None), Resource::Graphql, false, true),
        (
            Call::of("POST", "/api/graphql", b"not json", Some("t")),
            Resource::Graphql,
            false,
            true,
        ),
    ];
    for (call, resource, creation, counted) in cases {
        assert_eq!(
            (call.resource, call.creation, call.counted),
            (resource, creation, counted),
            "{call:?}"
        );
    }
}

#[test]
fn remaining_decreases_per_token_and_resource_until_refused() {
    let mut limits = Limits::default();
    limits.set_budgets(RateBudgets {
        core: 3,
        graphql: 2,
        window_secs: 60,
        ..RateBudgets::default()
    });
    let a = rest("GET", Some("a"));
    let b = rest("GET", Some("b"));
    let q = graphql("{ viewer { login } }", None);
    let remaining: Vec<u64> = (0..3)
        .map(|_| {
            assert_eq!(limits.admit(&a, "user ID 1", NOW), None);
            limits.charge(&a, false, NOW).remaining
        })
        .collect();
    assert_eq!(remaining, [2, 1, 0]);
    let refused = limits.admit(&a, "user ID 1", NOW).expect("spent");
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        refused.body["message"],
        "API rate limit exceeded for user ID 1."
    );
    assert!(refused.body["documentation_url"]
        .as_str()
        .is_some_and(|u| u.starts_with("https://docs.github.com/")));
    let h = limits.charge(&a, false, NOW);
    assert_eq!((h.remaining, h.used, h.limit), (0, 3, 3));
    // Another token, and GraphQL, have their own budgets.
    assert_eq!(limits.admit(&b, "user ID 1", NOW), None);
    assert_eq!(limits.charge(&b, false, NOW).remaining, 2);
    let h = limits.charge(&q, false, NOW);
    assert_eq!((h.remaining, h.resource), (1, Resource::Graphql));
    limits.charge(&q, false, NOW);
    let refused = limits.admit(&q, "installation ID 7", NOW).expect("spent");
    assert_eq!(refused.status, StatusCode::OK);
    assert_eq!(refused.body["errors"][0]["type"], "RATE_LIMITED");
    assert_eq!(
        refused.body["errors"][0]["message"],
        "API rate limit exceeded for installation ID 7."
    );
    // The window resets.
    let later = NOW + 60;
    assert_eq!(limits.admit(&a, "user ID 1", later), None);
    let h = limits.charge(&a, false, later);
    assert_eq!((h.remaining, h.reset), (2, later + 60));
}

#[test]
fn a_304_and_the_rate_limit_endpoint_do_not_count() {
    let mut limits = Limits::default();
    let a = rest("GET", Some("a"));
    assert_eq!(limits.charge(&a, false, NOW).remaining, 4999);
    assert_eq!(limits.charge(&a, true, NOW).remaining, 4999);
    let overview = Call::of("GET", "/rate_limit", b"", Some("a"));
    assert_eq!(limits.charge(&overview, false, NOW).remaining, 4999);
    let body = limits.overview(Some("a"), NOW);
    assert_eq!(body["resources"]["core"]["remaining"], 4999);
    assert_eq!(body["resources"]["core"]["used"], 1);
    assert_eq!(body["resources"]["graphql"]["remaining"], 5000);
    assert_eq!(body["rate"]["resource"], "core");
    assert_eq!(limits.charge(&a, false, NOW).remaining, 4998);
}

#[test]
fn unauthenticated_calls_share_a_small_budget() {
    let mut limits = Limits::default();
    let anonymous = rest("GET", None);
    assert_eq!(
        limits.charge(&anonymous, false, NOW).limit,
        ANONYMOUS_BUDGET
    );
}

#[test]
fn held_creations_are_refused_with_retry_after_and_reads_go_on() {
    let mut limits = Limits::default();
    let post = rest("POST", Some("a"));
    let get = rest("GET", Some("a"));
    let mutation = graphql(
        "mutation { addComment(input: {}) { clientMutationId } }",
        None,
    );
    let query = graphql("{ viewer { login } }", None);
    for status in [StatusCode::FORBIDDEN, StatusCode::TOO_MANY_REQUESTS] {
        limits.hold_creations(30, status, NOW);
        for call in [&post, &mutation] {
            let refused = limits.admit(call, "user ID 1", NOW + 10).expect("held");
            assert_eq!(refused.status, status);
            assert!(refused.body["message"]
                .as_str()
                .is_some_and(|m| m.contains("secondary rate limit")));
            assert_eq!(limits.charge(call, false, NOW + 10).retry_after, Some(20));
        }
        for call in [&get, &query] {
            assert_eq!(limits.admit(call, "user ID 1", NOW + 10), None);
            assert_eq!(limits.charge(call, false, NOW + 10).retry_after, None);
        }
        // Once the hold ends, creations go (the positive control).
        assert_eq!(limits.admit(&post, "user ID 1", NOW + 30), None);
        assert_eq!(limits.charge(&post, false, NOW + 30).retry_after, None);
    }
    limits.hold_creations(30, StatusCode::FORBIDDEN, NOW);
    limits.hold_creations(0, StatusCode::FORBIDDEN, NOW);
    assert_eq!(limits.admit(&post, "user ID 1", NOW), None);
}

/// GitHub's counted secondary limit: 80 creations a minute and 500 an hour
/// per token; the refusal's `retry-after` is when the creation that fills
/// the window leaves it.
#[test]
fn creations_past_80_a_minute_or_500_an_hour_are_refused_until_the_window_moves() {
    let mut limits = Limits::default();
    let post = rest("POST", Some("a"));
    let other = rest("POST", Some("b"));
    let get = rest("GET", Some("a"));
    for i in 0..80 {
        assert_eq!(limits.admit(&post, "user ID 1", NOW + i / 2), None, "#{i}");
        assert_eq!(limits.charge(&post, false, NOW + i / 2).retry_after, None);
    }
    let at = NOW + 40;
    let refused = limits.admit(&post, "user ID 1", at).expect("the 81st");
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.body["message"]
        .as_str()
        .is_some_and(|m| m.contains("secondary rate limit")));
    // The first creation (at NOW) leaves the minute at NOW + 60.
    assert_eq!(limits.charge(&post, false, at).retry_after, Some(20));
    // Reads and another token's creations go on.
    assert_eq!(limits.admit(&get, "user ID 1", at), None);
    assert_eq!(limits.charge(&get, false, at).retry_after, None);
    assert_eq!(limits.admit(&other, "user ID 2", at), None);
    // A refused creation is not counted: once the first two (both at NOW)
    // have left the minute, exactly two more go, and so on.
    for at in [NOW + 60, NOW + 61] {
        assert!(limits.admit(&post, "user ID 1", at).is_none());
        assert!(limits.admit(&post, "user ID 1", at).is_none());
        assert!(limits.admit(&post, "user ID 1", at).is_some());
        assert_eq!(limits.charge(&post, false, at).retry_after, Some(1));
    }

    // The hour: 500 creations, 7 s apart (under 80 a minute), then refused
    // until the first leaves the hour.
    let mut limits = Limits::default();
    for i in 0..500 {
        assert_eq!(limits.admit(&post, "user ID 1", NOW + 7 * i), None, "#{i}");
    }
    let at = NOW + 3500;
    assert!(limits.admit(&post, "user ID 1", at).is_some());
    assert_eq!(limits.charge(&post, false, at).retry_after, Some(100));
    assert!(limits.admit(&post, "user ID 1", NOW + 3599).is_some());
    assert_eq!(limits.admit(&post, "user ID 1", NOW + 3600), None);

    // New budgets start afresh; the limits are settable.
    limits.set_budgets(RateBudgets {
        creations_per_minute: 1,
        ..RateBudgets::default()
    });
    assert_eq!(limits.admit(&post, "user ID 1", at), None);
    assert!(limits.admit(&post, "user ID 1", at).is_some());
    assert_eq!(limits.charge(&post, false, at).retry_after, Some(60));
}

#[test]
fn a_spent_budget_is_answered_before_a_hold() {
    let mut limits = Limits::default();
    limits.set_budgets(RateBudgets {
        core: 1,
        ..RateBudgets::default()
    });
    let post = rest("POST", Some("a"));
    limits.charge(&post, false, NOW);
    limits.hold_creations(30, StatusCode::TOO_MANY_REQUESTS, NOW);
    let refused = limits.admit(&post, "user ID 1", NOW).expect("spent");
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
}

#[test]
fn headers_name_every_field() {
    let h = RateHeaders {
        limit: 5000,
        remaining: 4990,
        used: 10,
        reset: NOW,
        resource: Resource::Graphql,
        retry_after: Some(5),
    };
    let names: Vec<&str> = h.pairs().iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-used",
            "x-ratelimit-reset",
            "x-ratelimit-resource",
            "retry-after"
        ]
    );
    assert!(h
        .pairs()
        .contains(&("x-ratelimit-resource", "graphql".to_owned())));
}

#[test]
fn installation_tokens_share_their_installations_limits() {
    assert_eq!(
        limit_subject(Some("ghs_a"), Some(7)).as_deref(),
        Some("installation 7")
    );
    assert_eq!(
        limit_subject(Some("ghs_a"), Some(7)),
        limit_subject(Some("ghs_b"), Some(7))
    );
    assert_eq!(limit_subject(Some("ghp_x"), None).as_deref(), Some("ghp_x"));
    assert_eq!(limit_subject(None, None), None);
    // Two tokens of one installation: the second is refused once the
    // first spent the minute's creations.
    let mut limits = Limits::default();
    limits.set_budgets(RateBudgets {
        creations_per_minute: 1,
        ..RateBudgets::default()
    });
    let post = |token: &str| {
        Call::of(
            "POST",
            "/repos/acme/widgets/issues/1/comments",
            b"",
            limit_subject(Some(token), Some(7)).as_deref(),
        )
    };
    assert_eq!(limits.admit(&post("ghs_a"), "installation ID 7", NOW), None);
    assert!(limits
        .admit(&post("ghs_b"), "installation ID 7", NOW)
        .is_some());
}
