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
        let state = rt.block_on(svc.job(&id))["state"].clone();
        assert!(
            state == "queued" || state == "running",
            "job ended early: {state}"
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
