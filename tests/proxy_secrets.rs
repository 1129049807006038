//! No held secret leaves the proxy in any form: an upstream that echoes the
//! token compressed (asked or not, as `Content-Encoding` or
//! `Transfer-Encoding`), in a header name, in the reason phrase or in git's
//! Basic form is refused or redacted, each attempted through the identity
//! socket against the GitHub emulator set to misbehave, beside a control
//! showing the misbehaviour is real. A created message's id echoing the
//! token reaches neither the client nor the audit log. And a `gh`-like
//! client asking for gzip still has its created message's id recorded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use gatehouse_emulators::AnswerFault;
use gatehouse_testkit::proxy::{api_call, branches, identity, Harness, REPO};

/// An issue whose body carries `text`; returns its API path.
fn issue_saying(h: &Harness, text: &str) -> String {
    let n = h
        .github
        .add_issue(
            "acme/widgets",
            "leak",
            &format!("echo: {text} :end"),
            "mallory",
        )
        .unwrap();
    format!("/repos/acme/widgets/issues/{n}")
}

/// curl straight to the emulator as api.github.com (its own CA), with the
/// real token: what the upstream itself sends (its head, then its body).
fn direct(h: &Harness, args: &[&str], path: &str) -> String {
    let port = h.github.addr().port();
    let out = std::process::Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "-", "--max-time", "20"])
        .arg("--resolve")
        .arg(format!("api.github.com:{port}:127.0.0.1"))
        .arg("--cacert")
        .arg(h.dir.path().join("upstream-ca.pem"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", h.token))
        .args(args)
        .arg(format!("https://api.github.com:{port}{path}"))
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The completion lines of the audit log.
fn completions(h: &Harness) -> Vec<serde_json::Value> {
    h.audit_lines()
        .into_iter()
        .filter(|l| l["event"] == "completion")
        .collect()
}

fn assert_refused_as_unscannable(h: &Harness, fault: AnswerFault, path: &str) {
    h.github.set_answer_fault(Some(fault));
    let (status, head, body) = h.curl(&[], &format!("https://api.github.com{path}"));
    assert_eq!(status, 502, "{fault:?}: {head}\n{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"], "gatehouse_upstream", "{body}");
    assert!(
        answer["reason"].as_str().unwrap().contains("cannot scan"),
        "{body}"
    );
    // No coding header of the upstream's passed (the status line says why
    // in words, gzip among them).
    let headers = head.split_once("\r\n").map_or("", |(_, rest)| rest);
    assert!(!headers.to_ascii_lowercase().contains("gzip"), "{head}");
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    let last = completions(h).pop().unwrap();
    assert_eq!(last["status"], 502, "{last}");
    assert_eq!(
        last["error"], "response encoding cannot be scanned",
        "{last}"
    );
    h.github.set_answer_fault(None);
}

#[test]
fn an_answer_compressed_without_being_asked_is_refused() {
    let h = Harness::start();
    let path = issue_saying(&h, &h.token);
    // Control: the upstream does send it compressed, and gzip hides the token.
    h.github.set_answer_fault(Some(AnswerFault::GzipUnasked));
    let raw = direct(&h, &[], &path);
    assert!(
        raw.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{raw}"
    );
    assert_refused_as_unscannable(&h, AnswerFault::GzipUnasked, &path);
    // Control: answered plainly, the same issue passes, redacted.
    let (status, _, body) = h.curl(&[], &format!("https://api.github.com{path}"));
    assert_eq!(status, 200);
    assert!(body.contains("echo: [REDACTED] :end"), "{body}");
    assert!(!body.contains(&h.token));
}

#[test]
fn an_answer_gzipped_as_a_transfer_coding_is_refused() {
    let h = Harness::start();
    let path = issue_saying(&h, &h.token);
    h.github.set_answer_fault(Some(AnswerFault::GzipTransfer));
    let raw = direct(&h, &["--raw"], &path);
    assert!(
        raw.to_ascii_lowercase().contains("transfer-encoding: gzip"),
        "control: {raw}"
    );
    assert_refused_as_unscannable(&h, AnswerFault::GzipTransfer, &path);
}

#[test]
fn every_request_asks_upstream_for_identity_encoding() {
    let h = Harness::start();
    let path = issue_saying(&h, "hello");
    for args in [
        &["-H", "Accept-Encoding: gzip"][..],
        &["-H", "Accept-Encoding: gzip, deflate, br"],
        &["--compressed"],
        &[],
    ] {
        h.github.clear_requests();
        let (status, head, body) = h.curl(args, &format!("https://api.github.com{path}"));
        assert_eq!(status, 200, "{args:?}");
        assert!(body.contains("echo: hello :end"), "{args:?}: {body}");
        assert!(
            !head.to_ascii_lowercase().contains("content-encoding"),
            "{head}"
        );
        let seen = h.github.requests();
        assert_eq!(
            seen[0].header_all("accept-encoding"),
            ["identity"],
            "{args:?}"
        );
    }
    // Control: asked directly, the emulator compresses, as GitHub does.
    let raw = direct(&h, &["-H", "Accept-Encoding: gzip"], &path);
    assert!(
        raw.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{raw}"
    );
}

#[test]
fn a_gh_like_client_asking_for_gzip_has_its_message_id_recorded() {
    let h = Harness::start();
    let pull = h.own_pull();
    h.github.clear_requests();
    let (status, _, body) = h.curl(
        &[
            "-X",
            "POST",
            "-H",
            "Accept-Encoding: gzip",
            "-H",
            "User-Agent: GitHub CLI 2.63.0",
            "-d",
            r#"{"body":"from gh"}"#,
        ],
        &format!("https://api.github.com/repos/acme/widgets/issues/{pull}/comments"),
    );
    assert_eq!(status, 201, "{body}");
    let created = h.github.requests()[0].created_id.clone().unwrap();
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["id"].to_string(), created);
    let last = completions(&h).pop().unwrap();
    assert_eq!(last["message_id"], created.as_str(), "{last}");
}

#[test]
fn a_token_in_a_created_message_id_is_neither_answered_nor_recorded() {
    let h = Harness::start();
    let pull = h.own_pull();
    h.github.set_answer_fault(Some(AnswerFault::TokenInId));
    let comments = format!("/repos/acme/widgets/issues/{pull}/comments");
    // The control: the emulator's own answer carries the token in its id.
    let raw = direct(&h, &["-X", "POST", "-d", r#"{"body":"direct"}"#], &comments);
    assert!(raw.contains(&format!("-{}\"", h.token)), "control: {raw}");

    let (status, _, body) = h.curl(
        &["-X", "POST", "-d", r#"{"body":"through the proxy"}"#],
        &format!("https://api.github.com{comments}"),
    );
    assert_eq!(status, 201, "{body}");
    assert!(!body.contains(&h.token), "{body}");
    let last = completions(&h).pop().unwrap();
    let id = last["message_id"].as_str().unwrap();
    assert!(id.contains("[REDACTED]"), "{last}");
    let log = std::fs::read_to_string(&h.audit_path).unwrap();
    assert!(!log.contains(&h.token), "the token is in the audit log");
}

#[test]
fn an_id_echoing_the_token_is_not_saved_with_the_identity() {
    let h = Harness::start();
    let dir = h.dir.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let state = dir.join("identities.json");
    assert!(h.proxy.restore_identities(&state).unwrap().is_empty());
    let socket =
        h.rt.block_on(h.proxy.create_identity(identity("tkt_saved")))
            .unwrap();
    branches(&h.github, REPO, &["gatehouse/saved"]);
    let pull = r#"{"title":"t","head":"gatehouse/saved","base":"main"}"#;
    let (status, answer) = api_call(
        &socket,
        &h.proxy_ca,
        "POST",
        &format!("/repos/{REPO}/pulls"),
        pull,
    );
    assert_eq!(status, 201, "{answer}");
    let comments = format!("/repos/{REPO}/issues/{}/comments", answer["number"]);
    // The control: an honest comment's id is learnt and saved.
    let (status, answer) = api_call(&socket, &h.proxy_ca, "POST", &comments, r#"{"body":"a"}"#);
    assert_eq!(status, 201, "{answer}");
    let honest = answer["id"].to_string();
    assert!(std::fs::read_to_string(&state).unwrap().contains(&honest));
    h.github.set_answer_fault(Some(AnswerFault::TokenInId));
    let (status, answer) = api_call(&socket, &h.proxy_ca, "POST", &comments, r#"{"body":"b"}"#);
    assert_eq!(status, 201, "{answer}");
    // The proxy answered it (redacted) but learnt and saved nothing of it.
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(!saved.contains(&h.token), "the token is in the state file");
}

#[test]
fn a_redirect_to_a_location_holding_the_token_is_not_followed() {
    let h = Harness::start();
    let (_, job) = h
        .github
        .add_job("acme/widgets", "build", "abc123", "failure", "oops\n")
        .unwrap();
    let logs = format!("/repos/acme/widgets/actions/jobs/{job}/logs");
    h.github
        .set_answer_fault(Some(AnswerFault::TokenInLocation));
    let raw = direct(&h, &[], &logs);
    assert!(raw.contains(&format!("&{}=1", h.token)), "control: {raw}");
    h.github.clear_requests();
    let (status, head, body) = h.curl(&[], &format!("https://api.github.com{logs}"));
    assert_eq!(status, 502, "{head}{body}");
    assert!(!head.contains(&h.token) && !body.contains(&h.token));
    let seen = h.github.requests();
    assert!(
        seen.iter().all(|r| !r.path.starts_with("/_logs/")),
        "followed"
    );
    let log = std::fs::read_to_string(&h.audit_path).unwrap();
    assert!(!log.contains(&h.token), "the token is in the audit log");
    let last = completions(&h).pop().unwrap();
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("holding a credential"),
        "{last}"
    );
}

#[test]
fn a_token_in_a_header_name_is_dropped() {
    let h = Harness::start();
    let path = issue_saying(&h, "hello");
    h.github
        .set_answer_fault(Some(AnswerFault::TokenInHeaderName));
    let raw = direct(&h, &[], &path);
    let lower = h.token.to_ascii_lowercase();
    assert!(raw.to_ascii_lowercase().contains(&lower), "control: {raw}");
    let (status, head, body) = h.curl(&[], &format!("https://api.github.com{path}"));
    assert_eq!(status, 200);
    assert!(!head.to_ascii_lowercase().contains(&lower), "{head}");
    assert!(
        head.contains("x-github-media-type"),
        "other headers pass: {head}"
    );
    assert!(body.contains("echo: hello :end"));
}

#[test]
fn a_token_in_the_reason_phrase_is_dropped() {
    let h = Harness::start();
    let path = issue_saying(&h, "hello");
    h.github.set_answer_fault(Some(AnswerFault::TokenInReason));
    let raw = direct(&h, &[], &path);
    assert!(
        raw.starts_with(&format!("HTTP/1.1 200 OK {}", h.token)),
        "control: {raw}"
    );
    let (status, head, _) = h.curl(&[], &format!("https://api.github.com{path}"));
    assert_eq!(status, 200);
    assert!(!head.contains(&h.token), "{head}");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
}

#[test]
fn the_git_basic_form_of_the_token_is_redacted() {
    let h = Harness::start();
    let b64 = base64::engine::general_purpose::STANDARD;
    let basic = b64.encode(format!("x-access-token:{}", h.token));
    let alone = b64.encode(&h.token);
    let other = b64.encode("x-access-token:not-a-secret");
    for (text, want) in [
        (format!("Basic {basic}"), "Basic [REDACTED]"),
        (alone.trim_end_matches('=').to_string(), "[REDACTED]"),
        (other.clone(), other.as_str()),
    ] {
        let path = issue_saying(&h, &text);
        let (status, _, body) = h.curl(&[], &format!("https://api.github.com{path}"));
        assert_eq!(status, 200);
        assert!(!body.contains(basic.trim_end_matches('=')), "{body}");
        assert!(body.contains(&format!("echo: {want}")), "{want}: {body}");
    }
}
