use super::*;

const MINIMAL: &str = r#"
policy = "policy.toml"
state = "state/router.db"
[jobs]
socket = "/run/jobs.sock"
[proxy]
ca_cert = "ca.pem"
"#;

fn load(text: &str) -> Result<RouterConfig, ConfigError> {
    RouterConfig::from_toml("router.toml", text, Path::new("/etc/gh"))
}

#[test]
fn the_shipped_example_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/router.toml");
    let c = RouterConfig::load(&path).unwrap();
    assert_eq!(c.policy, Path::new("/etc/gatehouse/policy.toml"));
    assert_eq!(c.jobs.deadline_secs, 3600);
    assert_eq!(
        c.proxy.github_sockets["acme/widgets"],
        Path::new("/run/gatehouse/router-proxy/gh-1.sock")
    );
    assert!(c.proxy.feishu_socket.is_some());
    let g = c.github.unwrap();
    assert_eq!(g.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(g.webhook_secret_files.len(), 1);
    let f = c.feishu.unwrap();
    assert_eq!(f.app_id, "cli_x");
    assert!(f.encrypt_key_file.is_some() && f.verification_token_file.is_some());
}

#[test]
fn relative_paths_are_taken_from_the_files_directory() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.policy, Path::new("/etc/gh/policy.toml"));
    assert_eq!(c.state, Path::new("/etc/gh/state/router.db"));
    assert_eq!(c.proxy.ca_cert, Path::new("/etc/gh/ca.pem"));
    // Absolute paths stay as written.
    assert_eq!(c.jobs.socket, Path::new("/run/jobs.sock"));
    assert_eq!(c.jobs.deadline_secs, 3600, "the default deadline");
    assert!(c.github.is_none() && c.feishu.is_none());
    assert!(c.proxy.github_sockets.is_empty());
}

#[test]
fn mistakes_are_refused_naming_the_file_and_key() {
    let cases: &[(&str, &str)] = &[
        // Unknown keys, at every level.
        ("colour = \"red\"\n", "unknown field `colour`"),
        (
            "[metrics]\nlisten = \"0.0.0.0:9466\"\n",
            "`metrics.listen`",
        ),
        ("[metrics]\nport = 1\n", "unknown field `port`"),
        ("[jobs.extra]\n", "unknown field `extra`"),
        (
            "[github]\nlisten = \"127.0.0.1:1\"\nwebhook_secret_files = [\"s\"]\nsecret = \"x\"\n",
            "unknown field `secret`",
        ),
        (
            "[feishu]\nlisten = \"127.0.0.1:1\"\napp_id = \"cli_x\"\napp_secret_file = \"s\"\n",
            "unknown field `app_secret_file`",
        ),
        (
            "[github]\nlisten = \"127.0.0.1:1\"\nwebhook_secret_files = []\n",
            "`github.webhook_secret_files`",
        ),
        (
            "[github]\nlisten = \"not an address\"\nwebhook_secret_files = [\"s\"]\n",
            "listen",
        ),
        (
            "[feishu]\nlisten = \"127.0.0.1:1\"\napp_id = \"cli_x\"\n",
            "`feishu`: expected encrypt_key_file or verification_token_file",
        ),
        (
            "[feishu]\nlisten = \"127.0.0.1:1\"\napp_id = \"x\"\nencrypt_key_file = \"k\"\n",
            "`feishu.app_id`",
        ),
        (
            "[proxy.github_sockets]\n\"widgets\" = \"s.sock\"\n",
            "`proxy.github_sockets.\"widgets\"`",
        ),
        (
            "[github]\nlisten = \"127.0.0.1:9\"\nwebhook_secret_files = [\"s\"]\n[feishu]\nlisten = \"127.0.0.1:9\"\napp_id = \"cli_x\"\nencrypt_key_file = \"k\"\n",
            "`feishu.listen`",
        ),
        (
            "[feishu]\napp_id = \"cli_x\"\nencrypt_key_file = \"k\"\n",
            "`feishu`: expected listen, [feishu.long_connection] or both",
        ),
        ("[github_poll]\nevery = 5\n", "unknown field `every`"),
        (
            "[github_poll]\ninterval_secs = 0\n[proxy.github_sockets]\n\"a/b\" = \"s\"\n",
            "`github_poll.interval_secs`",
        ),
        (
            "[github_poll]\ninterval_secs = 3601\n[proxy.github_sockets]\n\"a/b\" = \"s\"\n",
            "`github_poll.interval_secs`",
        ),
        ("[github_poll]\n", "`github_poll`: expected [proxy.github_sockets]"),
        ("[github_recovery]\nevery = 5\n", "unknown field `every`"),
        (
            "[github_recovery]\n",
            "`github_recovery`: expected [proxy] github_app_socket",
        ),
    ];
    for (extra, expected) in cases {
        // Tables after the minimal file's own would merge into it; put the
        // extra text where TOML reads it as intended.
        let text = if extra.starts_with('[') {
            format!("{MINIMAL}{extra}")
        } else {
            format!("{extra}{MINIMAL}")
        };
        let err = load(&text).unwrap_err().to_string();
        assert!(err.starts_with("router.toml: "), "{extra:?}: {err}");
        assert!(err.contains(expected), "{extra:?}: {err}");
    }
    let zero = MINIMAL.replace(
        "socket = \"/run/jobs.sock\"",
        "socket = \"/run/jobs.sock\"\ndeadline_secs = 0",
    );
    assert!(load(&zero)
        .unwrap_err()
        .to_string()
        .contains("`jobs.deadline_secs`"));
    for missing in ["policy", "state"] {
        let text: String = MINIMAL
            .lines()
            .filter(|l| !l.starts_with(missing))
            .map(|l| format!("{l}\n"))
            .collect();
        let err = load(&text).unwrap_err().to_string();
        assert!(err.contains(&format!("missing field `{missing}`")), "{err}");
    }
}

#[test]
fn an_unreadable_file_is_named() {
    let err = RouterConfig::load(Path::new("/nonexistent/router.toml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/router.toml: cannot read"),
        "{err}"
    );
}

/// Polling is off without `[github_poll]` (webhooks or not), on with it
/// (every repository of `[proxy.github_sockets]`), and off again with
/// `enabled = false`.
#[test]
fn polling_is_on_only_when_configured() {
    let sockets = "[proxy.github_sockets]\n\"acme/widgets\" = \"gh.sock\"\n";
    let with = |extra: &str| load(&format!("{MINIMAL}{sockets}{extra}")).unwrap();
    assert_eq!(with("").github_poll, None);
    assert_eq!(
        with("[github_poll]\n").github_poll,
        Some(GithubPollConfig {
            interval_secs: DEFAULT_POLL_INTERVAL_SECS
        })
    );
    assert_eq!(
        with("[github_poll]\ninterval_secs = 15\n").github_poll,
        Some(GithubPollConfig { interval_secs: 15 })
    );
    assert_eq!(with("[github_poll]\nenabled = false\n").github_poll, None);
    let hooks = "[github]\nlisten = \"127.0.0.1:1\"\nwebhook_secret_files = [\"s\"]\n";
    assert_eq!(with(hooks).github_poll, None, "webhooks alone do not poll");
    let both = with(&format!("{hooks}[github_poll]\ninterval_secs = 300\n"));
    assert!(both.github.is_some());
    assert_eq!(
        both.github_poll,
        Some(GithubPollConfig { interval_secs: 300 })
    );
}

#[test]
fn recovery_needs_the_routers_app_identity() {
    let with_socket = MINIMAL.replace(
        "ca_cert = \"ca.pem\"",
        "ca_cert = \"ca.pem\"\ngithub_app_socket = \"app.sock\"",
    );
    let c = load(&with_socket).unwrap();
    assert_eq!(
        c.proxy.github_app_socket.as_deref(),
        Some(Path::new("/etc/gh/app.sock"))
    );
    assert_eq!(c.github_recovery, None, "off without the table");
    let on = load(&format!("{with_socket}[github_recovery]\n")).unwrap();
    assert_eq!(on.github_recovery.map(|r| r.interval_secs), Some(60));
    let every = load(&format!(
        "{with_socket}[github_recovery]\ninterval_secs = 5\n"
    ))
    .unwrap();
    assert_eq!(every.github_recovery.map(|r| r.interval_secs), Some(5));
    for bad in [0, 3601] {
        let text = format!("{with_socket}[github_recovery]\ninterval_secs = {bad}\n");
        let err = load(&text).unwrap_err().to_string();
        assert!(err.contains("`github_recovery.interval_secs`"), "{err}");
    }
}

#[test]
fn the_long_connection_hand_off_is_read_and_checked() {
    let feishu =
        "[feishu]\nlisten = \"127.0.0.1:1\"\napp_id = \"cli_x\"\nverification_token_file = \"t\"\n";
    let c = load(&format!(
        "{MINIMAL}{feishu}[feishu.long_connection]\nsocket = \"run/handoff.sock\"\npeer_uid = 998\n"
    ))
    .unwrap();
    let l = c.feishu.unwrap().long_connection.unwrap();
    assert_eq!(l.socket, Path::new("/etc/gh/run/handoff.sock"));
    assert_eq!(l.peer_uid, 998);
    assert!(load(&format!("{MINIMAL}{feishu}"))
        .unwrap()
        .feishu
        .unwrap()
        .long_connection
        .is_none());
    // The long connection alone: no HTTP listener.
    let alone = load(&format!(
        "{MINIMAL}[feishu]\napp_id = \"cli_x\"\nverification_token_file = \"t\"\n\
         [feishu.long_connection]\nsocket = \"h.sock\"\npeer_uid = 998\n"
    ))
    .unwrap()
    .feishu
    .unwrap();
    assert_eq!(alone.listen, None);
    assert!(alone.long_connection.is_some());
    for (extra, expected) in [
        (
            "socket = \"s\"\npeer_uid = 1\napp_secret_file = \"x\"\n",
            "unknown field `app_secret_file`",
        ),
        ("socket = \"s\"\n", "missing field `peer_uid`"),
        ("peer_uid = 1\n", "missing field `socket`"),
        (
            "socket = \"\"\npeer_uid = 1\n",
            "`feishu.long_connection.socket`",
        ),
        ("socket = \"s\"\npeer_uid = -1\n", "peer_uid"),
    ] {
        let text = format!("{MINIMAL}{feishu}[feishu.long_connection]\n{extra}");
        let error = load(&text).unwrap_err().to_string();
        assert!(error.contains(expected), "{extra}: {error}");
    }
}
