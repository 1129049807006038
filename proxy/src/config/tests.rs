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
            token_file: "/etc/gatehouse/secrets/github".into()
        }
    );
    assert_eq!(
        config.identities[0].socket,
        Path::new("/etc/gatehouse/run/identities/tkt_1.sock")
    );
    assert_eq!(config.identities[0].tunnel_hosts, ["registry.npmjs.org"]);
    assert_eq!(
        config.upstreams["api.github.com"],
        UpstreamOverride {
            authority: "127.0.0.1:8443".into(),
            ca_file: Some("/etc/gatehouse/emulator-ca.pem".into())
        }
    );
    assert!(config.rule_book.get("github-read").is_some());
}

#[test]
fn invalid_configs_name_the_key() {
    let cases = [
        ("[audit]", "bogus = 1\n[audit]", "unknown field `bogus`"),
        ("path = \"audit.jsonl\"", "path = \"audit.jsonl\"\nsync = false", "unknown field `sync`"),
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
