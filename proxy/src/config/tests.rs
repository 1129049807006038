use super::*;

const RULES: &str = r#"
name = "github-read"
description = "test"
variables = ["repo"]

[[rule]]
name = "issue-read"
source = "test"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/issues/{n}"
credential = "github"
inject = "bearer"
"#;

const CONFIG: &str = r#"
identity_socket_dir = "run/identities"
rule_set_files = ["rules/github-read.toml"]

[ca]
cert = "ca.pem"
key = "/secure/ca.key"

[audit]
path = "audit.jsonl"

[admin]
socket = "/run/admin.sock"

[credentials.github]
kind = "github_token"
token_file = "secrets/github"

[[identity]]
name = "tkt_1"
rule_sets = ["github-read"]
tunnel_hosts = ["registry.npmjs.org"]
variables = { repo = "octo/hello" }

[upstream."api.github.com"]
url = "https://127.0.0.1:8443"
ca_file = "emulator-ca.pem"
"#;

fn validate(text: &str) -> Result<Config, ConfigError> {
    let file = Path::new("/etc/gatehouse/proxy.toml");
    ProxyConfig::parse(file, text)?.validate(
        file,
        vec![RuleSet::parse("github-read.toml", RULES).unwrap()],
    )
}

fn error(from: &str, to: &str) -> String {
    assert!(CONFIG.contains(from), "{from}");
    validate(&CONFIG.replacen(from, to, 1))
        .unwrap_err()
        .to_string()
}

#[test]
fn valid_config_resolves_paths() {
    let config = validate(CONFIG).unwrap();
    assert_eq!(config.ca_cert, Path::new("/etc/gatehouse/ca.pem"));
    assert_eq!(config.ca_key, Path::new("/secure/ca.key"));
    assert_eq!(config.audit_path, Path::new("/etc/gatehouse/audit.jsonl"));
    assert_eq!(
        config.admin_socket.as_deref(),
        Some(Path::new("/run/admin.sock"))
    );
    assert_eq!(
        config.credentials["github"],
        Credential::GithubToken {
            token_file: "/etc/gatehouse/secrets/github".into(),
            unscoped_graphql: false,
        }
    );
    assert_eq!(
        config.identities[0].socket,
        Path::new("/etc/gatehouse/run/identities/tkt_1.sock")
    );
    assert_eq!(config.identities[0].tunnel_hosts, ["registry.npmjs.org"]);
    assert_eq!(
        config.upstreams["api.github.com"],
        UpstreamAddress {
            authority: "127.0.0.1:8443".into(),
            ca_file: Some("/etc/gatehouse/emulator-ca.pem".into())
        }
    );
    assert!(config.rule_book.get("github-read").is_some());
    assert_eq!(
        config.audit_sync_window,
        crate::server::audit_writer::DEFAULT_SYNC_WINDOW
    );
    let set = CONFIG.replace(
        "path = \"audit.jsonl\"",
        "path = \"audit.jsonl\"\nsync_window_ms = 5",
    );
    assert_eq!(
        validate(&set).unwrap().audit_sync_window,
        std::time::Duration::from_millis(5)
    );
}

#[test]
fn invalid_configs_name_the_key() {
    let cases = [
        ("[audit]", "bogus = 1\n[audit]", "unknown field `bogus`"),
        ("path = \"audit.jsonl\"", "path = \"audit.jsonl\"\nsync = false", "unknown field `sync`"),
        ("path = \"audit.jsonl\"", "path = \"audit.jsonl\"\nsync_window_ms = 0", "`audit.sync_window_ms`: 0 is out of range"),
        ("kind = \"github_token\"", "kind = \"github_pat\"", "unknown variant `github_pat`"),
        ("token_file = \"secrets/github\"", "token = \"ghp_x\"", "unknown field `token`"),
        ("[credentials.github]", "[credentials.other]", "uses credential `github`, which is not defined"),
        ("kind = \"github_token\"\ntoken_file = \"secrets/github\"", "kind = \"feishu_app\"\napp_id = \"cli_x\"\napp_secret_file = \"s\"\nbase_url = \"https://open.feishu.cn\"", "injects it as bearer, which a feishu_app credential cannot do"),
        ("kind = \"github_token\"\ntoken_file = \"secrets/github\"", "kind = \"feishu_app\"\napp_id = \"cli_x\"\napp_secret_file = \"s\"\nbase_url = \"http://open.feishu.cn\"", "credentials.github.base_url"),
        ("key = \"/secure/ca.key\"", "key = \"ca.pem\"", "`ca.key`"),
        ("rule_sets = [\"github-read\"]", "rule_sets = [\"github-write\"]", "identity[0].rule_sets"),
        ("variables = { repo = \"octo/hello\" }", "variables = {}", "identity[0].variables"),
        ("variables = { repo = \"octo/hello\" }", "variables = { repo = \"octo/../x\" }", "identity[0].variables"),
        ("name = \"tkt_1\"", "name = \"tkt 1\"", "identity[0].name"),
        ("tunnel_hosts = [\"registry.npmjs.org\"]", "tunnel_hosts = [\"10.0.0.1\"]", "identity[0].tunnel_hosts"),
        ("tunnel_hosts = [\"registry.npmjs.org\"]", "tunnel_hosts = [\"Registry.npmjs.org:443\"]", "identity[0].tunnel_hosts"),
        // One host-name rule: a bare name the identity would refuse is
        // refused here too.
        ("tunnel_hosts = [\"registry.npmjs.org\"]", "tunnel_hosts = [\"localhost\"]", "identity[0].tunnel_hosts"),
        ("tunnel_hosts = [\"registry.npmjs.org\"]", "tunnel_hosts = [\"registry.npmjs.org:0\"]", "identity[0].tunnel_hosts"),
        ("[upstream.\"api.github.com\"]", "[upstream.\"localhost\"]", "upstream.\"localhost\""),
        ("url = \"https://127.0.0.1:8443\"", "url = \"http://127.0.0.1:8443\"", "https://"),
        ("url = \"https://127.0.0.1:8443\"", "url = \"https://127.0.0.1:8443/api\"", "no path"),
        ("url = \"https://127.0.0.1:8443\"", "url = \"https://u:p@127.0.0.1:8443\"", "credentials in the URL"),
        ("[upstream.\"api.github.com\"]", "[upstream.\"API.github.com\"]", "upstream.\"API.github.com\""),
        ("rule_set_files = [\"rules/github-read.toml\"]", "", "rule_set_files"),
    ];
    for (from, to, needle) in cases {
        let message = error(from, to);
        assert!(message.contains(needle), "{to}: {message}");
        assert!(message.contains("proxy.toml"), "{message}");
    }
    let twice = format!("{CONFIG}\n[[identity]]\nname = \"tkt_1\"\nrule_sets = [\"github-read\"]\nvariables = {{ repo = \"a/b\" }}\n");
    assert!(validate(&twice)
        .unwrap_err()
        .to_string()
        .contains("identity[1].name"));
}

#[test]
fn credential_kinds_fit_injections() {
    let token = Credential::GithubToken {
        token_file: "t".into(),
        unscoped_graphql: false,
    };
    let feishu = Credential::FeishuApp {
        app_id: "a".into(),
        app_secret_file: "s".into(),
        base_url: "https://x".into(),
    };
    let bearer = Credential::Bearer {
        key_file: "k".into(),
    };
    assert!(
        token.supports(Injection::Bearer)
            && token.supports(Injection::GitBasic)
            && !token.supports(Injection::FeishuTenant)
    );
    assert!(feishu.supports(Injection::FeishuTenant) && !feishu.supports(Injection::Bearer));
    assert!(bearer.supports(Injection::Bearer) && !bearer.supports(Injection::GitBasic));
}

#[test]
fn example_config_validates_with_the_shipped_rule_sets() {
    let file = Path::new("/etc/gatehouse/proxy.toml");
    let example = ProxyConfig::parse(file, include_str!("../../examples/proxy.toml")).unwrap();
    let sets = crate::rules::shipped_tests::SHIPPED
        .iter()
        .map(|(name, text)| RuleSet::parse(name, text).unwrap())
        .collect();
    let config = example.validate(file, sets).unwrap();
    assert_eq!(config.identities.len(), 2);
    assert_eq!(
        config.identities[1].socket,
        Path::new("/run/gatehouse/identities/tkt_example.sock")
    );
    assert!(matches!(
        config.credentials["github"],
        Credential::GithubApp {
            app_id: 123456,
            installation_id: 7654321,
            ..
        }
    ));
}

#[test]
fn load_reads_the_config_and_its_rule_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("rules")).unwrap();
    std::fs::write(dir.path().join("rules/github-read.toml"), RULES).unwrap();
    std::fs::write(dir.path().join("rules/notes.txt"), "not a rule set").unwrap();
    let text = CONFIG.replace(
        "rule_set_files = [\"rules/github-read.toml\"]",
        "rule_set_dirs = [\"rules\"]",
    );
    std::fs::write(dir.path().join("proxy.toml"), text).unwrap();
    let config = Config::load(&dir.path().join("proxy.toml")).unwrap();
    assert_eq!(
        config.rule_book.names().collect::<Vec<_>>(),
        ["github-read"]
    );
    assert_eq!(config.audit_path, dir.path().join("audit.jsonl"));
    std::fs::write(dir.path().join("rules/broken.toml"), "name = 1").unwrap();
    let error = Config::load(&dir.path().join("proxy.toml"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("broken.toml"), "{error}");
    let missing = Config::load(&dir.path().join("absent.toml"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("absent.toml"), "{missing}");
}

// === each section's validator ===

const FILE: &str = "/etc/gatehouse/proxy.toml";

fn cx() -> Context<'static> {
    Context {
        file: Path::new(FILE),
        base: Path::new("/etc/gatehouse"),
    }
}

/// The key an error names, or the error itself when it is not `Invalid`.
fn key_of(error: ConfigError) -> String {
    match error {
        ConfigError::Invalid { file, key, .. } => {
            assert_eq!(file, Path::new(FILE));
            key
        }
        other => panic!("expected an invalid key, got {other}"),
    }
}

fn rule_sets() -> Vec<RuleSet> {
    vec![RuleSet::parse("github-read.toml", RULES).unwrap()]
}

#[test]
fn rule_set_sources_need_a_file_or_a_directory() {
    let some = [PathBuf::from("rules")];
    assert!(validate_rule_set_sources(&cx(), &some, &[]).is_ok());
    assert!(validate_rule_set_sources(&cx(), &[], &some).is_ok());
    let error = validate_rule_set_sources(&cx(), &[], &[]).unwrap_err();
    assert_eq!(key_of(error), "rule_set_files");
}

#[test]
fn ca_paths_resolve_and_must_differ() {
    let ca = |cert: &str, key: &str| CaFile {
        cert: cert.into(),
        key: key.into(),
    };
    assert_eq!(
        validate_ca(&cx(), &ca("ca.pem", "/secure/ca.key")).unwrap(),
        (
            PathBuf::from("/etc/gatehouse/ca.pem"),
            PathBuf::from("/secure/ca.key")
        )
    );
    for (cert, key) in [("ca.pem", "ca.pem"), ("ca.pem", "/etc/gatehouse/ca.pem")] {
        let error = validate_ca(&cx(), &ca(cert, key)).unwrap_err();
        assert_eq!(key_of(error), "ca.key", "{cert} {key}");
    }
}

#[test]
fn credentials_table() {
    let feishu = |app_id: &str, base_url: &str| CredentialFile::FeishuApp {
        app_id: app_id.into(),
        app_secret_file: "s".into(),
        base_url: base_url.into(),
    };
    let token = || CredentialFile::GithubToken {
        token_file: "secrets/github".into(),
        dangerously_allow_unscoped_graphql: false,
    };
    let ok = validate_credentials(
        &cx(),
        BTreeMap::from([
            ("github".to_string(), token()),
            (
                "lark".to_string(),
                feishu("cli_x", "https://open.feishu.cn/"),
            ),
        ]),
    )
    .unwrap();
    assert_eq!(
        ok["github"],
        Credential::GithubToken {
            token_file: "/etc/gatehouse/secrets/github".into(),
            unscoped_graphql: false,
        }
    );
    assert_eq!(
        ok["lark"],
        Credential::FeishuApp {
            app_id: "cli_x".into(),
            app_secret_file: "/etc/gatehouse/s".into(),
            base_url: "https://open.feishu.cn".into(),
        }
    );
    let bad = [
        ("git hub", token(), "credentials.git hub"),
        ("", token(), "credentials."),
        (
            "lark",
            feishu("", "https://open.feishu.cn"),
            "credentials.lark.app_id",
        ),
        (
            "lark",
            feishu("cli_x", "http://open.feishu.cn"),
            "credentials.lark.base_url",
        ),
        (
            "lark",
            feishu("cli_x", "https://open.feishu.cn/open-apis"),
            "credentials.lark.base_url",
        ),
    ];
    for (name, credential, key) in bad {
        let raw = BTreeMap::from([(name.to_string(), credential)]);
        assert_eq!(key_of(validate_credentials(&cx(), raw).unwrap_err()), key);
    }
}

#[test]
fn rules_need_a_defined_credential_of_a_fitting_kind() {
    let credentials = |credential: Credential| BTreeMap::from([("github".to_string(), credential)]);
    let github = credentials(Credential::GithubApp {
        app_id: 1,
        private_key_file: "k".into(),
        installation_id: 2,
    });
    assert!(validate_rule_credentials(&cx(), &rule_sets(), &github).is_ok());
    // An undefined credential is not this check's: its sets are withdrawn.
    assert!(validate_rule_credentials(&cx(), &rule_sets(), &BTreeMap::new()).is_ok());
    let cases = [(
        credentials(Credential::FeishuApp {
            app_id: "a".into(),
            app_secret_file: "s".into(),
            base_url: "https://x".into(),
        }),
        "credentials.github",
        "which a feishu_app credential cannot do",
    )];
    for (credentials, key, needle) in cases {
        let error = validate_rule_credentials(&cx(), &rule_sets(), &credentials).unwrap_err();
        assert!(error.to_string().contains(needle), "{error}");
        assert_eq!(key_of(error), key);
    }
}

/// A personal token is not a scope: GraphQL rules refuse a github_token
/// unless the credential opts in, and an opted-in credential is warned of.
#[test]
fn graphql_rules_refuse_an_unscoped_token_unless_opted_in() {
    const GRAPHQL: &str = r#"
name = "github-read"
description = "test"
variables = ["repo"]

[[rule]]
name = "graphql"
source = "test"
host = "api.github.com"
methods = ["POST"]
path = "/graphql"
credential = "github"
inject = "bearer"
graphql = { query = ["repository"], repository = "{repo}" }
"#;
    let file = Path::new("/etc/gatehouse/proxy.toml");
    let load = |credential: &str, rules: &str| {
        let text = CONFIG.replacen(
            "[credentials.github]\nkind = \"github_token\"\ntoken_file = \"secrets/github\"\n",
            credential,
            1,
        );
        assert_ne!(text, CONFIG);
        ProxyConfig::parse(file, &text)?.validate(
            file,
            vec![RuleSet::parse("github-read.toml", rules).unwrap()],
        )
    };
    let token = "[credentials.github]\nkind = \"github_token\"\ntoken_file = \"t\"\n";
    let opted = "[credentials.github]\nkind = \"github_token\"\ntoken_file = \"t\"\n\
                 dangerously_allow_unscoped_graphql = true\n";
    let app = "[credentials.github]\nkind = \"github_app\"\napp_id = 1\n\
               private_key_file = \"k\"\ninstallation_id = 2\n";

    let refused = load(token, GRAPHQL).unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("rule `graphql`"), "{text}");
    assert!(
        text.contains("dangerously_allow_unscoped_graphql"),
        "{text}"
    );
    assert_eq!(key_of(refused), "credentials.github");
    // Controls: the opt-in loads, with a warning; an App loads without
    // one; a token without GraphQL rules needs no opt-in.
    let config = load(opted, GRAPHQL).unwrap();
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("credential `github`"), "{warnings:?}");
    assert!(load(app, GRAPHQL).unwrap().warnings().is_empty());
    assert!(load(token, RULES).unwrap().warnings().is_empty());
    let typo = load(&opted.replace("dangerously_allow", "allow"), GRAPHQL).unwrap_err();
    assert!(typo.to_string().contains("unknown field"), "{typo}");
}

#[test]
fn identities_table() {
    let book = RuleBook::new(rule_sets()).unwrap();
    let dir = Path::new("/run/ids");
    let identity = |name: &str, socket: Option<&str>| IdentityFile {
        name: name.into(),
        socket: socket.map(PathBuf::from),
        rule_sets: vec!["github-read".into()],
        tunnel_hosts: Vec::new(),
        variables: Vars::from([("repo".to_string(), "octo/hello".to_string())]),
        peer_uid: name.strip_prefix('u').and_then(|u| u.parse().ok()),
    };
    let bound = validate_identities(&cx(), vec![identity("u990", None)], &book, dir).unwrap();
    assert_eq!(bound[0].peer_uid, Some(990), "peer_uid is kept");
    let ok = validate_identities(
        &cx(),
        vec![identity("a", None), identity("b", Some("b.sock"))],
        &book,
        dir,
    )
    .unwrap();
    assert_eq!(ok[0].socket, Path::new("/run/ids/a.sock"));
    assert_eq!(ok[1].socket, Path::new("/etc/gatehouse/b.sock"));
    let mut unbound = identity("b", None);
    unbound.variables.clear();
    let cases = [
        (
            vec![identity("a", None), identity("a", Some("x.sock"))],
            "identity[1].name",
        ),
        (
            vec![identity("a", None), identity("b", Some("/run/ids/a.sock"))],
            "identity[1].socket",
        ),
        (vec![identity("a", None), unbound], "identity[1].variables"),
        (vec![identity("a/b", None)], "identity[0].name"),
    ];
    for (raw, key) in cases {
        let error = validate_identities(&cx(), raw, &book, dir).unwrap_err();
        assert_eq!(key_of(error), key);
    }
}

#[test]
fn upstreams_table() {
    let upstream = |url: &str| UpstreamFile {
        url: url.into(),
        ca_file: Some("ca.pem".into()),
    };
    let ok = validate_upstreams(
        &cx(),
        BTreeMap::from([("api.github.com".to_string(), upstream("https://127.0.0.1"))]),
    )
    .unwrap();
    assert_eq!(
        ok["api.github.com"],
        UpstreamAddress {
            authority: "127.0.0.1:443".into(),
            ca_file: Some("/etc/gatehouse/ca.pem".into()),
        }
    );
    let cases = [
        (
            "API.github.com",
            "https://127.0.0.1",
            "upstream.\"API.github.com\"",
        ),
        ("10.0.0.1", "https://127.0.0.1", "upstream.\"10.0.0.1\""),
        (
            "api.github.com",
            "http://127.0.0.1",
            "upstream.\"api.github.com\".url",
        ),
        (
            "api.github.com",
            "https://127.0.0.1/x",
            "upstream.\"api.github.com\".url",
        ),
        (
            "api.github.com",
            "https://a:b@127.0.0.1",
            "upstream.\"api.github.com\".url",
        ),
    ];
    for (host, url, key) in cases {
        let raw = BTreeMap::from([(host.to_string(), upstream(url))]);
        assert_eq!(key_of(validate_upstreams(&cx(), raw).unwrap_err()), key);
    }
}

/// A deployment that uses GitHub alone loads a rule-set directory that also
/// holds Feishu and model sets without defining their credentials: those
/// sets (and every set extending one) are withdrawn, named in the start-up
/// warnings, and an identity naming one is refused with the reason.
#[test]
fn sets_whose_credential_is_undefined_are_withdrawn_not_fatal() {
    const FEISHU: &str = r#"
name = "feishu-send"
description = "test"

[[rule]]
name = "send"
source = "test"
host = "open.feishu.cn"
methods = ["POST"]
path = "/open-apis/im/v1/messages"
credential = "feishu"
inject = "feishu_tenant"
"#;
    const CHILD: &str = r#"
name = "feishu-more"
description = "test"
extends = ["feishu-send"]
"#;
    let sets = || {
        vec![
            RuleSet::parse("github-read.toml", RULES).unwrap(),
            RuleSet::parse("feishu-send.toml", FEISHU).unwrap(),
            RuleSet::parse("feishu-more.toml", CHILD).unwrap(),
        ]
    };
    let github = BTreeMap::from([(
        "github".to_string(),
        Credential::GithubToken {
            token_file: "t".into(),
            unscoped_graphql: false,
        },
    )]);
    let book = RuleBook::new(sets()).unwrap();
    let withdrawn = sets_without_credentials(&book, &github);
    let names: Vec<&str> = withdrawn.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["feishu-more", "feishu-send"]);
    assert!(
        withdrawn[1]
            .1
            .contains("rule `send` uses credential `feishu`, which is not defined"),
        "{withdrawn:?}"
    );
    // Every credential defined: nothing withdrawn.
    let mut all = github.clone();
    all.insert(
        "feishu".into(),
        Credential::FeishuApp {
            app_id: "a".into(),
            app_secret_file: "s".into(),
            base_url: "https://x".into(),
        },
    );
    assert!(sets_without_credentials(&book, &all).is_empty());

    // Through the whole config: it loads, warns, keeps the GitHub set.
    let file = Path::new("/etc/gatehouse/proxy.toml");
    let config = ProxyConfig::parse(file, CONFIG)
        .unwrap()
        .validate(file, sets())
        .unwrap();
    assert!(config.rule_book.get("github-read").is_some());
    assert!(config.rule_book.get("feishu-send").is_none());
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[1].contains("rule set `feishu-send` is not in use"),
        "{warnings:?}"
    );
    // An identity created later that names it is refused, with the reason.
    let refused = check_identity(
        &config.rule_book,
        "tkt_2".into(),
        "/run/ids/tkt_2.sock".into(),
        vec!["github-read".into(), "feishu-send".into()],
        Vec::new(),
        Vars::from([("repo".to_string(), "octo/hello".to_string())]),
    )
    .unwrap_err();
    assert_eq!(refused.0, "rule_sets");
    assert!(
        refused
            .1
            .contains("credential `feishu`, which is not defined"),
        "{refused:?}"
    );
    // A static identity that names it fails the load, naming the key.
    let text = CONFIG.replacen(
        "rule_sets = [\"github-read\"]",
        "rule_sets = [\"feishu-send\"]",
        1,
    );
    let error = ProxyConfig::parse(file, &text)
        .unwrap()
        .validate(file, sets())
        .unwrap_err()
        .to_string();
    assert!(error.contains("identity[0].rule_sets"), "{error}");
    assert!(error.contains("is not in use"), "{error}");
}
