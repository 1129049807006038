//! A `github_app` credential against the GitHub emulator's App, through a
//! real `gatehouse proxy` process: installation tokens are minted with a
//! signed App JWT, scoped to the identity's repository and its rule sets'
//! permissions, reused, replaced before they expire and after GitHub stops
//! accepting one; a 422 (permissions the App was not granted) is a clear
//! refusal with an audit line; and GitHub itself (the emulator) refuses a
//! token minted for one repository on another, directly and through the
//! proxy with real curl behind a rule that names the other repository.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gatehouse_emulators::{
    rsa_public_key_der, GithubAppSpec, GithubEmulator, GithubHandle, GithubOptions, RepoSpec,
};
use gatehouse_testkit::proxy::process::{
    admin_call, start_proxy_process_with, thread_relay, ProxyProcess,
};
use gatehouse_testkit::proxy::{read_head, read_until_closed, tls_over};
use gatehouse_testkit::random::token as random_token;
use gatehouse_testkit::rules::TEST_RULES;
use serde_json::Value;

const APP_ID: u64 = 4242;
const INSTALLATION: u64 = 7;

/// A rule set that names another repository by mistake (a fixed path
/// instead of `{repo}`): the proxy allows the call, the token it mints for
/// the identity's repository does not reach there.
const STRAY: &str = r#"
name = "stray"
description = "a rule that names another repository than the identity's"
variables = ["repo"]
github_permissions = { issues = "read" }

[[rule]]
name = "gears-issue-read"
source = "GitHub REST: issues/get"
host = "api.github.com"
methods = ["GET"]
path = "/repos/acme/gears/issues/{n}"
credential = "github"
inject = "bearer"
"#;

/// A rule set asking for a permission the App was not granted.
const TOO_WIDE: &str = r#"
name = "too-wide"
description = "asks GitHub for more than the App holds"
variables = ["repo"]
github_permissions = { administration = "write", issues = "read" }

[[rule]]
name = "issue-read"
source = "GitHub REST: issues/get"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/issues/{n}"
credential = "github"
inject = "bearer"
"#;

struct World {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    github: GithubHandle,
    proxy: ProxyProcess,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let key = d.join("app.pem");
    let status = Command::new("openssl")
        .args(["genrsa", "-traditional", "-out"])
        .arg(&key)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "openssl genrsa failed");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let public_key_der = rsa_public_key_der(&std::fs::read_to_string(&key).unwrap()).unwrap();
    let app = GithubAppSpec {
        app_id: APP_ID,
        slug: "gatehouse-test".into(),
        public_key_der,
        installation_id: INSTALLATION,
        permissions: BTreeMap::from([
            ("contents".into(), "write".into()),
            ("issues".into(), "write".into()),
            ("metadata".into(), "read".into()),
        ]),
        repositories: Some(vec!["acme/widgets".into(), "acme/gears".into()]),
    };
    let github = GithubEmulator::start(
        GithubOptions::new(d.join("git"))
            .app(app)
            .repo(RepoSpec::new("acme", "widgets"))
            .repo(RepoSpec::new("acme", "gears")),
    )
    .unwrap();
    for repo in ["acme/widgets", "acme/gears"] {
        github
            .add_issue(repo, "Wobbles", "It wobbles.", "alice")
            .unwrap();
    }
    // The fixture's config and rules, with the App as the `github`
    // credential and the permissions the rules need.
    let unused = random_token("ghp_");
    let proxy = start_proxy_process_with(
        &d,
        &github,
        &unused,
        gatehouse_testkit::bin::command(),
        |d| {
            let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
            let static_token = "kind = \"github_token\"\ntoken_file = \"github.token\"\n";
            assert!(config.contains(static_token), "{config}");
            let config = config
            .replace(
                static_token,
                &format!(
                    "kind = \"github_app\"\napp_id = {APP_ID}\nprivate_key_file = \"app.pem\"\ninstallation_id = {INSTALLATION}\n"
                ),
            )
            .replace("dangerously_allow_unscoped_graphql = true\n", "")
            .replace(
                "rule_set_files = [\"rules.toml\"]",
                "rule_set_files = [\"rules.toml\", \"too-wide.toml\", \"stray.toml\"]",
            );
            std::fs::write(d.join("proxy.toml"), config).unwrap();
            let rules = TEST_RULES.replacen(
            "variables = [\"repo\"]\n",
            "variables = [\"repo\"]\ngithub_permissions = { issues = \"write\", contents = \"read\" }\n",
            1,
        );
            std::fs::write(d.join("rules.toml"), rules).unwrap();
            std::fs::write(d.join("too-wide.toml"), TOO_WIDE).unwrap();
            std::fs::write(d.join("stray.toml"), STRAY).unwrap();
        },
    );
    World {
        _dir: dir,
        dir: d,
        github,
        proxy,
    }
}

impl World {
    /// A ticket identity on `repo` with `rule_set`; its socket.
    fn identity(&self, name: &str, rule_set: &str, repo: &str) -> PathBuf {
        let new = format!(
            r#"{{"name":"{name}","rule_sets":["{rule_set}"],"tunnel_hosts":[],"variables":{{"repo":"{repo}"}}}}"#
        );
        let (status, body) = admin_call(&self.proxy.admin, "POST", "/identities", Some(&new));
        assert_eq!(status, 201, "{body}");
        let created: Value = serde_json::from_str(&body).unwrap();
        PathBuf::from(created["socket"].as_str().unwrap())
    }

    /// `GET path` on api.github.com through the identity's socket: (status, body).
    fn get(&self, socket: &Path, path: &str) -> (u16, String) {
        let mut s = UnixStream::connect(socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
        )
        .unwrap();
        assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
        let mut tls = tls_over(s, "api.github.com", &self.dir.join("ca.pem"), true);
        write!(
            tls,
            "GET {path} HTTP/1.1\r\nHost: api.github.com\r\nUser-Agent: gatehouse-test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let (_, answer) = read_until_closed(&mut tls);
        let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_owned())
    }

    /// curl straight to the emulator (not through the proxy) with `auth`.
    fn direct(&self, method: &str, path: &str, auth: &str) -> (u16, String) {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "-X",
                method,
                "--cacert",
            ])
            .arg(self.dir.join("upstream-ca.pem"))
            .args([
                "-H",
                &format!("Authorization: {auth}"),
                "-H",
                "Content-Type: application/json",
            ])
            .args(if method == "POST" {
                vec![
                    "--data",
                    "{\"title\":\"t\",\"head\":\"main\",\"base\":\"main\"}",
                ]
            } else {
                vec![]
            })
            .arg(format!("{}{path}", self.github.base_url()))
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, status) = text.rsplit_once('\n').unwrap();
        (status.trim().parse().unwrap(), body.to_owned())
    }

    /// A GraphQL query by curl straight to the emulator with `auth`: the body.
    fn direct_graphql(&self, query: &str, auth: &str) -> Value {
        let out = Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(self.dir.join("upstream-ca.pem"))
            .args(["-H", &format!("Authorization: {auth}"), "--data"])
            .arg(serde_json::json!({ "query": query }).to_string())
            .arg(format!("{}/graphql", self.github.base_url()))
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The `Authorization` the emulator got on its last request.
    fn last_authorization(&self) -> String {
        self.github
            .requests()
            .last()
            .unwrap()
            .authorization()
            .unwrap()
            .to_owned()
    }
}

#[test]
fn installation_tokens_are_minted_scoped_reused_and_replaced() {
    let w = world();
    let widgets = w.identity("tkt_widgets", "test-worker", "acme/widgets");

    // Minted once for the repository and the rule set's permissions, then reused.
    assert_eq!(w.get(&widgets, "/repos/acme/widgets/issues/1").0, 200);
    let first = w.last_authorization();
    assert_eq!(w.get(&widgets, "/repos/acme/widgets/issues/1").0, 200);
    assert_eq!(w.last_authorization(), first, "the cached token is reused");
    let minted = w.github.minted_tokens();
    assert_eq!(minted.len(), 1, "{minted:?}");
    assert_eq!(first, format!("Bearer {}", minted[0].token));
    assert_eq!(
        minted[0].repositories,
        Some(vec!["acme/widgets".to_owned()])
    );
    let asked = BTreeMap::from([
        ("contents".to_owned(), "read".to_owned()),
        ("issues".to_owned(), "write".to_owned()),
    ]);
    assert_eq!(minted[0].permissions, asked);
    let mint = w
        .github
        .requests()
        .into_iter()
        .find(|r| r.path == format!("/app/installations/{INSTALLATION}/access_tokens"))
        .unwrap();
    assert_eq!(mint.status, 201);
    assert!(
        mint.authorization().unwrap().starts_with("Bearer ey"),
        "an App JWT"
    );

    // GitHub stops accepting it (expired early, revoked): the request made
    // with it gets GitHub's 401, and the proxy mints anew for the next.
    w.github.expire_installation_tokens();
    assert_eq!(w.get(&widgets, "/repos/acme/widgets/issues/1").0, 401);
    assert_eq!(w.get(&widgets, "/repos/acme/widgets/issues/1").0, 200);
    let minted = w.github.minted_tokens();
    assert_eq!(minted.len(), 2, "{minted:?}");
    assert_eq!(
        w.last_authorization(),
        format!("Bearer {}", minted[1].token)
    );

    // A token whose `expires_at` is near is replaced before it ends: once
    // the emulator's clock has passed it, the proxy has already moved on.
    w.github.set_installation_token_lifetime(2);
    let gears = w.identity("tkt_gears", "test-worker", "acme/gears");
    assert_eq!(w.get(&gears, "/repos/acme/gears/issues/1").0, 200);
    let short = w.github.minted_tokens()[2].clone();
    assert_eq!(short.repositories, Some(vec!["acme/gears".to_owned()]));
    while unix_now() <= short.expires_at {
        std::thread::sleep(Duration::from_millis(100));
    }
    w.github.set_installation_token_lifetime(3600);
    assert_eq!(w.get(&gears, "/repos/acme/gears/issues/1").0, 200);
    let minted = w.github.minted_tokens();
    assert_eq!(minted.len(), 4, "{minted:?}");
    assert_eq!(
        w.last_authorization(),
        format!("Bearer {}", minted[3].token)
    );

    // GitHub itself refuses the widgets token elsewhere (behind the proxy's
    // own rules, which never send it there).
    let token = format!("Bearer {}", minted[1].token);
    assert_eq!(
        w.direct("GET", "/repos/acme/widgets/issues/1", &token).0,
        200
    );
    let (status, body) = w.direct("GET", "/repos/acme/gears/issues/1", &token);
    assert_eq!(status, 404, "{body}");
    // GraphQL likewise: the other repository does not resolve, the token's
    // own does; pull requests need a permission it was not given.
    let issue = |repo: &str| {
        format!("{{ repository(owner: \"acme\", name: \"{repo}\") {{ issue(number: 1) {{ title }} }} }}")
    };
    let answer = w.direct_graphql(&issue("gears"), &token);
    assert_eq!(answer["errors"][0]["type"], "NOT_FOUND", "{answer}");
    assert_eq!(
        answer["errors"][0]["message"],
        "Could not resolve to a Repository with the name 'acme/gears'."
    );
    let answer = w.direct_graphql(&issue("widgets"), &token);
    assert_eq!(
        answer["data"]["repository"]["issue"]["title"], "Wobbles",
        "{answer}"
    );
    let answer = w.direct_graphql(
        "{ repository(owner: \"acme\", name: \"widgets\") { pullRequests(first: 1) { totalCount } } }",
        &token,
    );
    assert_eq!(answer["errors"][0]["type"], "FORBIDDEN", "{answer}");
    assert_eq!(
        answer["errors"][0]["message"],
        "Resource not accessible by integration"
    );
    let (status, body) = w.direct("GET", "/user", &token);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("Resource not accessible by integration"),
        "{body}"
    );
    let (status, body) = w.direct("POST", "/repos/acme/widgets/pulls", &token);
    assert_eq!(status, 403, "no pull_requests permission: {body}");
    assert!(
        body.contains("Resource not accessible by integration"),
        "{body}"
    );
    let basic = {
        use base64::Engine as _;
        let t = &minted[1].token;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{t}"))
        )
    };
    let (status, body) = w.direct(
        "GET",
        "/acme/gears.git/info/refs?service=git-upload-pack",
        &basic,
    );
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("Repository not found"), "{body}");
    let (status, body) = w.direct(
        "GET",
        "/acme/widgets.git/info/refs?service=git-receive-pack",
        &basic,
    );
    assert_eq!(status, 403, "contents: read cannot push: {body}");
    assert_eq!(
        w.direct(
            "GET",
            "/acme/widgets.git/info/refs?service=git-upload-pack",
            &basic
        )
        .0,
        200,
        "contents: read fetches"
    );
    // The expired one is refused everywhere.
    let expired = format!("Bearer {}", minted[0].token);
    let (status, body) = w.direct("GET", "/repos/acme/widgets/issues/1", &expired);
    assert_eq!(status, 401, "{body}");
    // The App's own endpoint wants the App's JWT, not an installation token.
    let (status, body) = w.direct(
        "POST",
        &format!("/app/installations/{INSTALLATION}/access_tokens"),
        &token,
    );
    assert_eq!(status, 401, "{body}");

    // Nothing the proxy logged holds a token or the key.
    let log = std::fs::read_to_string(&w.proxy.log).unwrap();
    let key = std::fs::read_to_string(w.dir.join("app.pem")).unwrap();
    let key_line = key.lines().nth(1).unwrap();
    for m in &minted {
        assert!(!log.contains(&m.token));
    }
    assert!(!log.contains(key_line));
}

#[test]
fn permissions_the_app_was_not_granted_are_a_clear_refusal() {
    let w = world();
    let wide = w.identity("tkt_wide", "too-wide", "acme/widgets");
    let (status, body) = w.get(&wide, "/repos/acme/widgets/issues/1");
    assert_eq!(status, 403, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let reason = answer["reason"].as_str().unwrap();
    assert!(reason.contains("GitHub refused to mint"), "{reason}");
    assert!(reason.contains("administration: write"), "{reason}");
    assert!(
        reason.contains("The permissions requested are not granted to this installation."),
        "{reason}"
    );
    assert!(w.github.minted_tokens().is_empty());
    // Positive control: the same request under the granted rule set passes.
    let ok = w.identity("tkt_ok", "test-worker", "acme/widgets");
    assert_eq!(w.get(&ok, "/repos/acme/widgets/issues/1").0, 200);
    // On record as a denial of tkt_wide's request, with the reason.
    let denial = w
        .audit()
        .into_iter()
        .find(|r| r["identity"] == "tkt_wide" && r["path"] == "/repos/acme/widgets/issues/1")
        .unwrap_or_else(|| panic!("no audit line: {:?}", w.audit()));
    let text = denial.to_string();
    assert!(text.contains("not granted to this installation"), "{text}");
    assert!(text.contains("deny"), "{text}");
}

/// An unmodified client through the proxy: curl, with the identity's socket
/// behind a loopback relay as its HTTPS proxy. A rule that (by mistake)
/// allows another repository lets the call through; the installation token
/// minted for the identity's repository is refused there by GitHub, as if
/// the repository did not exist, while the same curl reads the identity's.
#[test]
fn a_token_minted_for_one_repository_is_refused_on_another_through_the_proxy() {
    let w = world();
    let curl = |socket: &Path, path: &str| {
        let port = thread_relay(socket.to_path_buf());
        let out = Command::new("curl")
            .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "--max-time", "20"])
            .args(["--proxy", &format!("http://127.0.0.1:{port}")])
            .arg("--cacert")
            .arg(w.dir.join("ca.pem"))
            .arg(format!("https://api.github.com{path}"))
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (status.parse::<u16>().unwrap_or(0), body.to_owned())
    };
    let stray = w.identity("tkt_stray", "stray", "acme/widgets");
    let (status, body) = curl(&stray, "/repos/acme/gears/issues/1");
    assert_eq!(
        status, 404,
        "GitHub refuses the widgets token on gears: {body}"
    );
    let minted = w.github.minted_tokens();
    assert_eq!(minted.len(), 1, "{minted:?}");
    assert_eq!(
        minted[0].repositories.as_deref(),
        Some(&["acme/widgets".to_owned()][..]),
        "minted for the identity's repository only"
    );
    let allowed = w
        .audit()
        .into_iter()
        .find(|r| r["identity"] == "tkt_stray" && r["path"] == "/repos/acme/gears/issues/1")
        .unwrap_or_else(|| panic!("no audit line: {:?}", w.audit()));
    assert_eq!(allowed["outcome"]["decision"], "allow", "{allowed}");
    // The same client on the identity's own repository is answered.
    let own = w.identity("tkt_own", "test-worker", "acme/widgets");
    let (status, body) = curl(&own, "/repos/acme/widgets/issues/1");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Wobbles"), "{body}");
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
