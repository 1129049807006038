use super::*;

use crate::github::rest::RepoPath;

/// An RSA key from openssl (ring cannot generate RSA keys), as PEM.
fn rsa_pem() -> String {
    let dir = std::env::temp_dir().join(format!("gh-app-key-{}", random_hex(8)));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("app.pem");
    let status = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&file)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "openssl genrsa failed");
    let pem = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    pem
}

fn sign(pem: &str, header: &Value, claims: &Value) -> String {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap();
    let rustls_pki_types::PrivateKeyDer::Pkcs1(der) = der else {
        panic!("not PKCS#1");
    };
    let key = ring::signature::RsaKeyPair::from_der(der.secret_pkcs1_der()).unwrap();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let input = format!(
        "{}.{}",
        b64.encode(header.to_string()),
        b64.encode(claims.to_string())
    );
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        input.as_bytes(),
        &mut signature,
    )
    .unwrap();
    format!("{input}.{}", b64.encode(signature))
}

fn spec(public_key_der: Vec<u8>) -> GithubAppSpec {
    GithubAppSpec {
        app_id: 4242,
        slug: "gatehouse-test".into(),
        public_key_der,
        installation_id: 7,
        permissions: BTreeMap::from([
            ("contents".into(), "write".into()),
            ("issues".into(), "write".into()),
            ("metadata".into(), "read".into()),
            ("pull_requests".into(), "read".into()),
        ]),
        repositories: Some(vec!["acme/widgets".into(), "acme/gears".into()]),
    }
}

#[test]
fn app_jwts_are_verified_as_github_does() {
    let (pem, other) = (rsa_pem(), rsa_pem());
    let app = spec(rsa_public_key_der(&pem).unwrap());
    let now = 1_800_000_000u64;
    let rs256 = json!({"alg": "RS256", "typ": "JWT"});
    let claims = |iat: u64, exp: u64| json!({"iat": iat, "exp": exp, "iss": "4242"});
    let good = sign(&pem, &rs256, &claims(now - 60, now + 540));
    assert_eq!(verify_jwt(&app, Some(&good), now), Ok(()));
    let numeric_iss = sign(
        &pem,
        &rs256,
        &json!({"iat": now, "exp": now + 600, "iss": 4242}),
    );
    assert_eq!(verify_jwt(&app, Some(&numeric_iss), now), Ok(()));
    // A client whose clock runs up to a minute ahead is accepted.
    let ahead = sign(&pem, &rs256, &claims(now + 60, now + 600));
    assert_eq!(verify_jwt(&app, Some(&ahead), now), Ok(()));
    let mut tampered = good.clone();
    tampered.insert(good.find('.').unwrap() + 1, 'e');
    for (jwt, why) in [
        (None, "decoded"),
        (Some("ghs_notajwt".to_owned()), "decoded"),
        (Some(tampered), ""),
        (
            Some(sign(&other, &rs256, &claims(now, now + 500))),
            "signature",
        ),
        (
            Some(sign(
                &pem,
                &json!({"alg": "HS256"}),
                &claims(now, now + 500),
            )),
            "decoded",
        ),
        (
            Some(sign(
                &pem,
                &rs256,
                &json!({"iat": now, "exp": now + 500, "iss": "4243"}),
            )),
            "'iss'",
        ),
        (
            Some(sign(&pem, &rs256, &json!({"iat": now, "exp": now + 500}))),
            "'iss'",
        ),
        (
            Some(sign(&pem, &rs256, &claims(now + 61, now + 500))),
            "'iat'",
        ),
        (
            Some(sign(&pem, &rs256, &claims(now - 700, now - 100))),
            "'exp'",
        ),
        (Some(sign(&pem, &rs256, &claims(now - 600, now))), "'exp'"),
        (
            Some(sign(&pem, &rs256, &claims(now - 10, now + 591))),
            "too far",
        ),
        (
            Some(sign(&pem, &rs256, &claims(now + 50, now + 661))),
            "too far",
        ),
    ] {
        let error = verify_jwt(&app, jwt.as_deref(), now).unwrap_err();
        assert!(error.contains(why), "{jwt:?}: {error}");
    }
}

#[test]
fn permissions_are_granted_within_the_installations_grant() {
    let grant = spec(Vec::new()).permissions;
    for (asked, expected) in [
        (json!({}), Some(json!({}))),
        (json!({"issues": "write"}), Some(json!({"issues": "write"}))),
        (
            json!({"issues": "read", "contents": "read"}),
            Some(json!({"issues": "read", "contents": "read"})),
        ),
        (json!({"pull_requests": "write"}), None),
        (json!({"administration": "read"}), None),
        (json!({"issues": "admin"}), None),
        (json!({"issues": "sudo"}), None),
        (json!({"issues": 1}), None),
        (json!(["issues"]), None),
    ] {
        let got = granted(&grant, &asked).map(|g| serde_json::to_value(g).unwrap());
        assert_eq!(got, expected, "{asked}");
    }
}

#[test]
fn mint_requests_name_the_installations_repositories() {
    let mut model = Model::new();
    let widgets = model.add_repo("acme", "widgets", "main");
    let gears = model.add_repo("acme", "gears", "main");
    let other = model.add_repo("acme", "other", "main");
    let app = spec(Vec::new());
    let ask = |body: Value| mint_request(&model, &app, body.to_string().as_bytes());
    let (ids, perms) = ask(json!({})).unwrap();
    assert_eq!(ids, None, "no list: all the installation's");
    assert_eq!(perms, app.permissions, "no permissions: the whole grant");
    let (ids, _) =
        ask(json!({"repositories": ["widgets"], "repository_ids": [gears, widgets]})).unwrap();
    assert_eq!(ids, Some(vec![widgets, gears]));
    for body in [
        json!({"repositories": ["other"]}),
        json!({"repository_ids": [other]}),
        json!({"repositories": ["missing"]}),
        json!({"repositories": "widgets"}),
        json!({"permissions": {"issues": "write", "workflows": "write"}}),
    ] {
        assert_eq!(
            ask(body.clone()).unwrap_err().status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
    }
    let broken = mint_request(&model, &app, b"{");
    assert_eq!(broken.unwrap_err().status, StatusCode::BAD_REQUEST);
}

#[test]
fn scoped_tokens_reach_their_repositories_with_their_permissions() {
    let mut model = Model::new();
    let widgets = model.add_repo("acme", "widgets", "main");
    model.add_repo("acme", "gears", "main");
    let scope = Scope {
        repo_ids: Some(vec![widgets]),
        permissions: BTreeMap::from([
            ("issues".into(), "write".into()),
            ("pull_requests".into(), "read".into()),
        ]),
    };
    let repo = |name: &str| RepoPath {
        owner: "acme".into(),
        name: name.into(),
    };
    let (get, post, put) = (Method::GET, Method::POST, Method::PUT);
    for (method, route, expected) in [
        (&get, Route::Repo(repo("widgets")), Ok(())),
        (&get, Route::Repo(repo("gears")), Err(Refusal::NotFound)),
        (&get, Route::Issue(repo("gears"), 1), Err(Refusal::NotFound)),
        (&post, Route::IssueComments(repo("widgets"), 1), Ok(())),
        (
            &post,
            Route::IssueComments(repo("gears"), 1),
            Err(Refusal::NotFound),
        ),
        (&get, Route::Pulls(repo("widgets")), Ok(())),
        (
            &post,
            Route::Pulls(repo("widgets")),
            Err(Refusal::NotAccessible),
        ),
        (
            &put,
            Route::PullMerge(repo("widgets"), 1),
            Err(Refusal::NotAccessible),
        ),
        (
            &get,
            Route::ActionsRuns(repo("widgets")),
            Err(Refusal::NotAccessible),
        ),
        (
            &get,
            Route::CommitCheckRuns(repo("widgets"), "main".into()),
            Err(Refusal::NotAccessible),
        ),
        (&get, Route::User, Err(Refusal::NotAccessible)),
        (&get, Route::RateLimit, Ok(())),
        (&get, Route::Root, Ok(())),
        // Nothing there: the handler's own 404.
        (&get, Route::Repo(repo("missing")), Ok(())),
    ] {
        assert_eq!(
            authorize(&model, &scope, method, &route),
            expected,
            "{method} {route:?}"
        );
    }
    let all = Scope {
        repo_ids: None,
        ..scope.clone()
    };
    assert_eq!(
        authorize(&model, &all, &get, &Route::Issue(repo("gears"), 1)),
        Ok(())
    );

    let read = Scope {
        permissions: BTreeMap::from([("contents".into(), "read".into())]),
        ..scope.clone()
    };
    let write = Scope {
        permissions: BTreeMap::from([("contents".into(), "write".into())]),
        ..scope
    };
    let (refs, fetch, push) = (
        GitEndpoint::InfoRefs,
        GitEndpoint::UploadPack,
        GitEndpoint::ReceivePack,
    );
    for (scope, name, endpoint, query, expected) in [
        (&read, "widgets", refs, "service=git-upload-pack", Ok(())),
        (&read, "widgets", fetch, "", Ok(())),
        (
            &read,
            "widgets",
            refs,
            "service=git-receive-pack",
            Err(Refusal::NotAccessible),
        ),
        (&read, "widgets", push, "", Err(Refusal::NotAccessible)),
        (&write, "widgets", push, "", Ok(())),
        (&write, "gears", fetch, "", Err(Refusal::NotFound)),
        (&write, "gears", push, "", Err(Refusal::NotFound)),
    ] {
        assert_eq!(
            authorize_git(&model, scope, "acme", name, endpoint, query),
            expected,
            "{name} {endpoint:?} {query}"
        );
    }
}

#[test]
fn minted_tokens_expire_and_debug_hides_them() {
    let apps = Apps::new(Some(spec(Vec::new())));
    let mut model = Model::new();
    let widgets = model.add_repo("acme", "widgets", "main");
    let now = 1_800_000_000;
    let reply = apps.mint(&model, Some(vec![widgets]), BTreeMap::new(), now);
    assert_eq!(reply.status, StatusCode::CREATED);
    let token = reply.body["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("ghs_"), "{token}");
    assert_eq!(reply.body["expires_at"], iso8601(now + 3600));
    assert_eq!(reply.body["repository_selection"], "selected");
    assert_eq!(reply.body["repositories"][0]["full_name"], "acme/widgets");
    assert_eq!(
        apps.login_for(&token, now + 3599),
        Some("gatehouse-test[bot]")
    );
    assert_eq!(
        apps.login_for(&token, now + 3600),
        None,
        "an hour later it is gone"
    );
    apps.set_lifetime(5);
    let all = apps.mint(&model, None, BTreeMap::new(), now);
    assert_eq!(all.body["repository_selection"], "all");
    assert!(
        all.body.get("repositories").is_none(),
        "no list without one asked"
    );
    assert_eq!(all.body["expires_at"], iso8601(now + 5));
    apps.expire_all(now + 1);
    assert_eq!(apps.login_for(&token, now + 1), None);
    let minted = apps.minted();
    assert_eq!(minted.len(), 2);
    assert!(!format!("{minted:?}").contains(&token));
    assert_eq!(
        minted[0].repositories,
        Some(vec!["acme/widgets".to_owned()])
    );
}
