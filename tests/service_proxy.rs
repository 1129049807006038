//! The supervisor against the real proxy (built in-process from the proxy
//! crate, in front of the GitHub emulator): a sandboxed job gets its own
//! identity, makes allowed and denied calls with no credential in sight, and
//! once the job ends its identity refuses everything — a kept socket path or
//! a connection left open are both useless.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_supervisor::jobs::http::{self, HttpMethod as Method};
use gatehouse_testkit::service::*;
use gatehouse_testkit::{require, Need};
use serde_json::{json, Value};

fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = vec![];
    let Ok(entries) = std::fs::read_dir(dir) else {
        return hits;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            hits.extend(files_containing(&path, needle));
        } else if meta.is_file() {
            let data = std::fs::read(&path).unwrap_or_default();
            if data.windows(needle.len()).any(|w| w == needle) {
                hits.push(path);
            }
        }
    }
    hits
}

#[test]
fn a_job_identity_works_while_the_job_runs_and_never_after() {
    require!(Need::Sandbox);
    let h = gatehouse_testkit::proxy::Harness::start();
    let admin = h.dir.path().join("admin.sock");
    let admin_task = {
        let _runtime = h.rt.enter();
        gatehouse_proxy::admin::serve(h.proxy.clone(), &admin).unwrap()
    };
    scenario(&h.rt, &admin, &h.proxy_ca, &h.token, "tkt_proxy");
    admin_task.abort();
}

/// The same against `gatehouse proxy --config` running as its own process.
#[test]
fn against_the_gatehouse_proxy_process() {
    require!(Need::Sandbox);
    let dir = tempfile::tempdir().unwrap();
    let token = gatehouse_testkit::random::token("ghs_");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets"))
            .repo(gatehouse_emulators::RepoSpec::new("acme", "secret-plans")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    let proxy = gatehouse_testkit::proxy::process::start_proxy_process(dir.path(), &github, &token);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    scenario(
        &rt,
        &proxy.admin,
        &dir.path().join("ca.pem"),
        &token,
        "tkt_proxy_proc",
    );
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    assert!(
        log.contains("tkt_proxy_proc"),
        "the proxy never saw the job's identity"
    );
    assert!(!log.contains(&token), "the token is in the proxy's log");
}

/// A sandboxed job of `ticket` makes an allowed and a denied call through
/// the proxy behind `admin`; afterwards its identity is gone for good.
fn scenario(rt: &tokio::runtime::Runtime, admin: &Path, ca: &Path, token: &str, ticket: &str) {
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(admin.to_owned()),
        ca_cert: Some(ca.to_owned()),
        ..Options::default()
    });
    let script = "curl -sS -o issue.json -w '%{http_code}' \
                      https://api.github.com/repos/acme/widgets/issues/1 > allowed; \
                  curl -sS -o denied.json -w '%{http_code}' \
                      https://api.github.com/repos/acme/secret-plans/issues/1 > denied; \
                  env > env.txt; \
                  while [ ! -e go ]; do sleep 0.05; done";
    let mut body = sh_job(ticket, script);
    body["rule_sets"] = json!(["test-worker"]);
    body["variables"] = json!({"repo": "acme/widgets"});
    let id = rt.block_on(svc.submit("k", body));
    let work = svc.work_dir(ticket);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !work.join("env.txt").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never got going"
        );
        let job = rt.block_on(svc.job(&id));
        let state = job["state"].clone();
        // The reason and the sandbox's own words, for a failure seen only
        // when other suites load the machine.
        let stderr = std::fs::read_dir(work.parent().unwrap().join("logs"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            state == "queued" || state == "running",
            "job ended early: {state}, reason {}, exit {}; logs:\n{stderr}",
            job["reason"],
            job["exit"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        std::fs::read_to_string(work.join("allowed")).unwrap(),
        "200"
    );
    let issue: Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("issue.json")).unwrap()).unwrap();
    assert_eq!(issue["title"], "Widgets wobble");
    assert_eq!(std::fs::read_to_string(work.join("denied")).unwrap(), "403");

    // The identity exists while the job runs, named after the ticket.
    let listed = rt
        .block_on(http::request(admin, Method::GET, "/identities", &[], None))
        .unwrap()
        .json();
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == ticket)
        .cloned()
        .expect("no identity for the running job");
    assert_eq!(entry["variables"]["repo"], "acme/widgets");
    let socket = PathBuf::from(entry["socket"].as_str().unwrap());
    // A connection opened now, as a leftover process would hold it.
    let mut held = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    std::fs::write(work.join("go"), "").unwrap();
    let end = rt.block_on(svc.wait_ended(&id));
    assert_eq!(end["state"], "done", "{end}");

    let listed = rt
        .block_on(http::request(admin, Method::GET, "/identities", &[], None))
        .unwrap()
        .json();
    assert!(
        !listed
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == ticket),
        "identity outlived its job: {listed}"
    );
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_err(),
        "a kept socket path still connects"
    );
    let _ = write!(
        held,
        "CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n"
    );
    let mut answer = Vec::new();
    let _ = held.read_to_end(&mut answer);
    assert!(
        !String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "a connection left open still tunnels"
    );

    // No credential reached the worker or the supervisor's files.
    let token = token.as_bytes();
    assert!(files_containing(&work, token).is_empty());
    assert!(files_containing(&svc.state_dir(), token).is_empty());
    let env = std::fs::read_to_string(work.join("env.txt")).unwrap();
    assert!(
        env.contains("HTTPS_PROXY=") || env.contains("https_proxy="),
        "{env}"
    );
}

/// A tunnel the profile lists, granted through the job API, reaches the
/// registry from inside the sandbox: job → identity with the tunnel →
/// CONNECT through the sandbox's relay → TLS end to end with the registry
/// (its own name, verified; the proxy only splices, adding no credential).
/// A tunnel host the job was not granted is refused on the same run.
#[test]
fn a_granted_tunnel_reaches_the_registry_from_a_sandbox() {
    use gatehouse_testkit::proxy::{REGISTRY_HOST, TUNNEL_HOST};
    require!(Need::Sandbox);
    let h = gatehouse_testkit::proxy::Harness::start();
    let admin = h.dir.path().join("admin.sock");
    let admin_task = {
        let _runtime = h.rt.enter();
        gatehouse_proxy::admin::serve(h.proxy.clone(), &admin).unwrap()
    };
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(admin.clone()),
        ca_cert: Some(h.proxy_ca.clone()),
        ..Options::default()
    });
    let ca = std::fs::read_to_string(h.dir.path().join("upstream-ca.pem")).unwrap();
    let curl = "curl -sS -o /dev/null -w '%{http_code} %{http_connect}' --cacert registry-ca.pem";
    let script = format!(
        "printf '%s\\n' '{ca}' > registry-ca.pem; \
         {curl} https://{REGISTRY_HOST}/left-pad > granted 2> granted.err; \
         {curl} https://{TUNNEL_HOST}/left-pad > refused 2> refused.err; true"
    );
    let ticket = "tkt_tunnel";
    let mut body = sh_job(ticket, &script);
    body["rule_sets"] = json!(["test-worker"]);
    body["tunnel_hosts"] = json!([format!("{REGISTRY_HOST}:443")]);
    body["variables"] = json!({"repo": "acme/widgets"});
    let id = h.rt.block_on(svc.submit("k", body));
    let end = h.rt.block_on(svc.wait_ended(&id));
    assert_eq!(end["state"], "done", "{end}");
    let work = svc.work_dir(ticket);
    let read = |name: &str| std::fs::read_to_string(work.join(name)).unwrap_or_default();
    // The emulator answers the registry's name 404: reached, over TLS
    // verified for that name, through a CONNECT the proxy accepted.
    assert_eq!(read("granted"), "404 200", "{}", read("granted.err"));
    let refused = read("refused");
    assert!(
        refused.starts_with("000") && !refused.ends_with("200"),
        "an ungranted tunnel was spliced: {refused} {}",
        read("refused.err")
    );
    let seen = h.github.requests();
    let reached: Vec<_> = seen
        .iter()
        .filter(|r| r.host.as_deref() == Some(REGISTRY_HOST))
        .collect();
    assert_eq!(reached.len(), 1, "{seen:?}");
    assert_eq!(reached[0].path, "/left-pad");
    assert!(reached[0].authorization().is_none());
    assert!(!seen.iter().any(|r| r.host.as_deref() == Some(TUNNEL_HOST)));
    drop(svc);
    admin_task.abort();
}

/// `gatehouse proxy` killed with SIGKILL while a sandboxed job runs, and
/// started again on the same config: the job's identity is restored from
/// the proxy's saved state, its socket re-created in the same directory
/// the sandbox holds bind-mounted, so the worker's next call goes through;
/// the comment it created before the crash is still its own to edit, and
/// one it did not create is still refused. When the job ends the identity
/// is gone, from the proxy and from the saved state.
#[test]
fn a_running_job_keeps_its_identity_across_a_proxy_killed_with_sigkill() {
    require!(Need::Sandbox);
    let dir = tempfile::tempdir().unwrap();
    let token = gatehouse_testkit::random::token("ghs_");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    let alices = github
        .add_issue_comment("acme/widgets", 1, "mine", "alice")
        .unwrap();
    // The worker comments on the pull request it opens (#2), the only
    // place it may speak.
    gatehouse_testkit::proxy::branches(&github, "acme/widgets", &["gatehouse/x"]);
    let state = dir.path().join("identities.json");
    let with_state = |d: &Path| {
        let config = d.join("proxy.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(
            &config,
            format!("identity_state = \"identities.json\"\n{text}"),
        )
        .unwrap();
    };
    let start = |dir: &Path| {
        gatehouse_testkit::proxy::process::start_proxy_process_with(
            dir,
            &github,
            &token,
            gatehouse_testkit::bin::command(),
            with_state,
        )
    };
    let mut proxy = start(dir.path());
    let admin = proxy.admin.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(admin.clone()),
        ca_cert: Some(dir.path().join("ca.pem")),
        ..Options::default()
    });
    let ticket = "tkt_proxy_crash";
    let api = "https://api.github.com/repos/acme/widgets";
    let curl = "curl -sS -o /dev/null -w '%{http_code}'";
    let script = format!(
        "{curl} -X POST -d '{{\"title\":\"t\",\"head\":\"gatehouse/x\",\"base\":\"main\"}}' \
             {api}/pulls > opened; \
         curl -sS -o created.json -w '%{{http_code}}' -X POST -d '{{\"body\":\"on it\"}}' \
             {api}/issues/2/comments > before; \
         touch ready; while [ ! -e go ]; do sleep 0.05; done; \
         {curl} {api}/issues/1 > after 2> after.err; \
         {curl} -X PATCH -d '{{\"body\":\"edited\"}}' {api}/issues/comments/$(cat id) > edited; \
         {curl} -X PATCH -d '{{\"body\":\"edited\"}}' {api}/issues/comments/{alices} > not_own"
    );
    let mut body = sh_job(ticket, &script);
    body["rule_sets"] = json!(["test-worker"]);
    body["variables"] = json!({"repo": "acme/widgets"});
    let id = rt.block_on(svc.submit("k", body));
    let work = svc.work_dir(ticket);
    let read = |name: &str| std::fs::read_to_string(work.join(name)).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !work.join("ready").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never got going"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read("opened"), "201");
    assert_eq!(read("before"), "201");
    let created: Value = serde_json::from_str(&read("created.json")).unwrap();
    let comment = created["id"].as_u64().unwrap();
    std::fs::write(work.join("id"), comment.to_string()).unwrap();
    // Saved: the identity and what it created.
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["identities"][0]["name"], ticket, "{saved}");
    let own = saved["identities"][0]["own"].as_array().unwrap();
    let comment_id = comment.to_string();
    assert!(
        own.iter()
            .any(|o| o["kind"] == "github_issue_comment" && o["id"] == comment_id.as_str()),
        "{saved}"
    );

    proxy.child.kill().unwrap();
    proxy.child.wait().unwrap();
    drop(proxy);
    // The dead proxy's admin socket file is left; the new one replaces it.
    std::fs::remove_file(&admin).unwrap();
    let proxy = start(dir.path());
    let listed = rt
        .block_on(http::request(&admin, Method::GET, "/identities", &[], None))
        .unwrap()
        .json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == ticket),
        "the identity was not restored: {listed}"
    );
    assert_eq!(rt.block_on(svc.job(&id))["state"], "running");

    std::fs::write(work.join("go"), "").unwrap();
    let end = rt.block_on(svc.wait_ended(&id));
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(read("after"), "200", "{}", read("after.err"));
    assert_eq!(
        read("edited"),
        "200",
        "its own comment, created before the crash"
    );
    assert_eq!(read("not_own"), "403", "alice's comment");
    let edited = github.comments();
    assert!(edited.iter().any(|c| c.id == comment && c.body == "edited"));
    assert!(edited.iter().any(|c| c.id == alices && c.body == "mine"));

    let listed = rt
        .block_on(http::request(&admin, Method::GET, "/identities", &[], None))
        .unwrap()
        .json();
    assert!(
        !listed
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == ticket),
        "identity outlived its job: {listed}"
    );
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["identities"], json!([]), "{saved}");
    let log = std::fs::read_to_string(&proxy.log).unwrap();
    assert!(log.contains("identity restored"), "{log}");
    assert!(!log.contains(&token), "the token is in the proxy's log");
}

/// A job started while the proxy is down waits for it (queued, not
/// failed), and runs once the proxy is back: its allowed call is answered.
#[test]
fn a_job_started_while_the_proxy_is_down_waits_for_it() {
    require!(Need::Sandbox);
    let dir = tempfile::tempdir().unwrap();
    let token = gatehouse_testkit::random::token("ghs_");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets")),
    )
    .unwrap();
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    let start =
        || gatehouse_testkit::proxy::process::start_proxy_process(dir.path(), &github, &token);
    let mut proxy = start();
    let admin = proxy.admin.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(admin.clone()),
        ca_cert: Some(dir.path().join("ca.pem")),
        ..Options::default()
    });
    proxy.child.kill().unwrap();
    proxy.child.wait().unwrap();
    drop(proxy);
    std::fs::remove_file(&admin).unwrap();
    let ticket = "tkt_proxy_down";
    let mut body = sh_job(
        ticket,
        "curl -sS -o /dev/null -w '%{http_code}' https://api.github.com/repos/acme/widgets/issues/1 > allowed",
    );
    body["rule_sets"] = json!(["test-worker"]);
    body["variables"] = json!({"repo": "acme/widgets"});
    let id = rt.block_on(svc.submit("k", body));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rt.block_on(svc.job(&id))["state"], "queued");
    let _proxy = start();
    let end = rt.block_on(svc.wait_ended(&id));
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(
        std::fs::read_to_string(svc.work_dir(ticket).join("allowed")).unwrap(),
        "200"
    );
}
