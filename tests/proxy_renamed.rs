//! A repository renamed while a ticket works on it. GitHub redirects a
//! request that names the former name to `/repositories/{id}/…` (301 for
//! GET, 307 for other methods); real `gh` follows it, and the proxy, which
//! learned the id from that redirect, checks the id form as the repository
//! it names. Ids not learned so, and another identity's, stay refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use gatehouse_testkit::proxy::{api_call_text, identity, Harness, REPO};

/// Real `gh` through the harness's proxy (its relay as `HTTPS_PROXY`,
/// trusting the proxy's CA); returns (success, stdout, stderr).
fn gh(h: &Harness, args: &[&str]) -> (bool, String, String) {
    let config = tempfile::tempdir().unwrap();
    let out = Command::new("gh")
        .args(args)
        .env("HTTPS_PROXY", h.proxy_url())
        .env("SSL_CERT_FILE", &h.proxy_ca)
        .env("GH_CONFIG_DIR", config.path())
        // gh wants a token; the proxy puts the real one in.
        .env("GH_TOKEN", "not-a-token")
        .env("GH_NO_UPDATE_NOTIFIER", "1")
        .env("GH_PROMPT_DISABLED", "1")
        .env_remove("GH_HOST")
        .env_remove("https_proxy")
        .output()
        .expect("gh runs (scripts/setup-debian installs it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn gh_follows_a_renamed_repositorys_redirect_through_the_proxy_and_only_there() {
    let h = Harness::start();
    let number = h
        .github
        .add_issue(REPO, "Renamed under a ticket", "", "alice")
        .unwrap();
    for text in ["one", "two", "three"] {
        h.github
            .add_issue_comment(REPO, number, text, "alice")
            .unwrap();
    }
    let comments = format!("/repos/{REPO}/issues/{number}/comments");
    let (status, answer) = api_call_text(&h.socket, &h.proxy_ca, "GET", &comments, "");
    assert_eq!(status, 200, "{answer}");

    h.github.rename_repo(REPO, "widgets-renamed").unwrap();

    // The former name is redirected, as on GitHub (the comments by id).
    // A deeper path's redirect teaches nothing (it could be an issue
    // transferred elsewhere): another identity sees the id, and is still
    // refused it, with what to do.
    let probe = {
        let _rt = h.rt.enter();
        h.proxy.add_identity(identity("tkt_probe")).unwrap()
    };
    let (status, answer) = api_call_text(&probe, &h.proxy_ca, "GET", &comments, "");
    assert_eq!(status, 301, "{answer}");
    let moved: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let url = moved["url"].as_str().unwrap();
    let tail = format!("/issues/{number}/comments");
    let id: u64 = url
        .strip_prefix("https://api.github.com/repositories/")
        .and_then(|rest| rest.strip_suffix(tail.as_str()))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("GitHub's redirect form: {url}"));
    let by_id = format!("/repositories/{id}{tail}");
    let (status, answer) = api_call_text(&probe, &h.proxy_ca, "GET", &by_id, "");
    assert_eq!(
        status, 403,
        "a deeper path's redirect teaches nothing: {answer}"
    );
    assert!(
        answer.contains("ask for the repository by its name first"),
        "{answer}"
    );

    // The repository itself, by name: GitHub redirects it to its id, which
    // this identity (only) learns.
    let (status, answer) = api_call_text(&probe, &h.proxy_ca, "GET", &format!("/repos/{REPO}"), "");
    assert_eq!(status, 301, "{answer}");
    let (status, answer) = api_call_text(&probe, &h.proxy_ca, "GET", &by_id, "");
    assert_eq!(status, 200, "the identity that learned it may: {answer}");
    let (status, answer) = api_call_text(&h.socket, &h.proxy_ca, "GET", &by_id, "");
    assert_eq!(status, 403, "another identity has not learned it: {answer}");

    // gh asks for the repository, then its comments by the former name,
    // and follows each redirect and every page after it, in the id form.
    let (ok, out, err) = gh(&h, &["api", &format!("repos/{REPO}"), "--jq", ".id"]);
    assert!(ok, "gh failed: {err}\n{out}");
    assert_eq!(out.trim(), id.to_string(), "{err}");
    let (ok, out, err) = gh(
        &h,
        &[
            "api",
            "--paginate",
            &format!("repos/{REPO}/issues/{number}/comments?per_page=1"),
            "--jq",
            ".[].body",
        ],
    );
    assert!(ok, "gh failed: {err}\n{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["one", "two", "three"],
        "{err}"
    );
    let lines = h.audit_lines();
    let allowed_by_id: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "request" && l["outcome"]["decision"] == "allow")
        .filter(|l| l["identity"] == gatehouse_testkit::proxy::IDENTITY)
        .filter_map(|l| l["path"].as_str())
        .filter(|p| p.starts_with(&format!("/repositories/{id}/")))
        .collect();
    assert!(
        allowed_by_id.len() >= 3,
        "every page was asked by id and allowed: {allowed_by_id:?}"
    );

    // Another repository's id is not the identity's.
    let other = format!("/repositories/{}/issues/{number}/comments", id + 1);
    let (status, answer) = api_call_text(&h.socket, &h.proxy_ca, "GET", &other, "");
    assert_eq!(status, 403, "{answer}");
    // Nor is a path the rules do not allow under the learned id.
    let (status, answer) = api_call_text(
        &h.socket,
        &h.proxy_ca,
        "DELETE",
        &format!("/repositories/{id}/issues/{number}/comments"),
        "",
    );
    assert_eq!(status, 403, "{answer}");
}

/// git's smart HTTP likewise: GitHub sends a clone of the former name to
/// the new one, git follows its first request's redirect, and the proxy
/// checks the new name as the identity's repository, for this identity.
#[test]
fn git_clones_a_renamed_repository_by_its_former_name_through_the_proxy() {
    let h = Harness::start();
    h.github.rename_repo(REPO, "widgets-renamed").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        Command::new("git")
            .args(["-c", &format!("http.proxy={}", h.proxy_url())])
            .args(args)
            .current_dir(dir.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            // The environment's wins over `http.sslCAInfo`.
            .env("GIT_SSL_CAINFO", &h.proxy_ca)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .output()
            .unwrap()
    };
    // The new name is not the identity's until GitHub has said so.
    let early = git(&["ls-remote", "https://github.com/acme/widgets-renamed.git"]);
    assert!(
        !early.status.success(),
        "the new name is not yet the identity's"
    );
    let out = git(&[
        "clone",
        "-q",
        &format!("https://github.com/{REPO}.git"),
        "w",
    ]);
    assert!(
        out.status.success(),
        "git clone: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("w/.git").is_dir());
    let lines = h.audit_lines();
    let allowed: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "request" && l["outcome"]["decision"] == "allow")
        .filter_map(|l| l["path"].as_str())
        .collect();
    assert!(
        allowed.contains(&"/acme/widgets-renamed.git/git-upload-pack"),
        "the pack was fetched under the new name: {allowed:?}"
    );
    // Another repository's name is still refused.
    let other = git(&["ls-remote", "https://github.com/acme/elsewhere.git"]);
    assert!(!other.status.success());
}
