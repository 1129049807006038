//! The reference worker (`gatehouse reference-worker`) as a real job: a
//! sandbox built by the supervisor, the `gatehouse proxy` process with the
//! shipped `github-read` and `github-worker` rule sets, and the GitHub
//! emulator behind it. It clones, pushes `gatehouse/<ticket>`, opens a pull
//! request and reports ready with its link; a task that asks a question is
//! reported blocked until the inbox answers it; and with the probe switch
//! its push to `main` and its comment in another repository are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use gatehouse_supervisor::jobs::http::{self, HttpMethod as Method};
use gatehouse_testkit::service::{Options, Service};
use gatehouse_testkit::{bin, require, Need};
use serde_json::{json, Value};

const REPO: &str = "acme/widgets";
const OTHER: &str = "acme/secret-plans";

struct World {
    _dir: tempfile::TempDir,
    github: gatehouse_emulators::GithubHandle,
    proxy: gatehouse_testkit::proxy::process::ProxyProcess,
    audit: std::path::PathBuf,
    svc: Service,
    rt: tokio::runtime::Runtime,
}

/// The shipped profiles, plus `probe` (the default profile with the
/// reference worker's probe switch on).
fn profiles(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("profiles");
    std::fs::create_dir(&out).unwrap();
    for name in ["base.toml", "default.toml"] {
        std::fs::copy(
            bin::repo_path("sandbox-profiles").join(name),
            out.join(name),
        )
        .unwrap();
    }
    std::fs::write(
        out.join("probe.toml"),
        format!("extends = \"default\"\n[env.set]\nGATEHOUSE_WORKER_PROBE_REPO = \"{OTHER}\"\n"),
    )
    .unwrap();
    // A team that delivers from the bot's fork.
    std::fs::write(
        out.join("fork.toml"),
        "extends = \"default\"\n[network]\nrule_sets = [\"github-worker-fork\"]\n",
    )
    .unwrap();
    out
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let token = gatehouse_testkit::random::token("ghs_");
    let github = gatehouse_emulators::GithubEmulator::start(
        gatehouse_emulators::GithubOptions::new(dir.path().join("git"))
            .token(&token, "gatehouse-test[bot]")
            .repo(gatehouse_emulators::RepoSpec::new("acme", "widgets"))
            .repo(gatehouse_emulators::RepoSpec::new("acme", "secret-plans"))
            .repo(gatehouse_emulators::RepoSpec::new(
                "gatehouse-bot",
                "widgets",
            )),
    )
    .unwrap();
    github
        .add_issue(OTHER, "Plans", "Secret.", "alice")
        .unwrap();
    let rules = bin::repo_path("sandbox-profiles/rules");
    let proxy = gatehouse_testkit::proxy::process::start_proxy_process_with(
        dir.path(),
        &github,
        &token,
        bin::command(),
        |d| {
            // The shipped rule sets a worker gets, not the test ones.
            let config = std::fs::read_to_string(d.join("proxy.toml")).unwrap();
            let files = format!(
                "rule_set_files = [{:?}, {:?}, {:?}]",
                rules.join("github-read.toml"),
                rules.join("github-worker.toml"),
                rules.join("github-worker-fork.toml")
            );
            let config = config.replace("rule_set_files = [\"rules.toml\"]", &files);
            std::fs::write(d.join("proxy.toml"), config).unwrap();
        },
    );
    let svc = Service::start(Options {
        unsandboxed: false,
        proxy_admin: Some(proxy.admin.clone()),
        ca_cert: Some(dir.path().join("ca.pem")),
        profiles_dir: Some(profiles(dir.path())),
        ..Options::default()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    World {
        audit: dir.path().join("audit.jsonl"),
        _dir: dir,
        github,
        proxy,
        svc,
        rt,
    }
}

fn job(ticket: &str, profile: &str, task: &str) -> Value {
    json!({
        "ticket": ticket,
        "team": "core",
        "profile": profile,
        "rule_sets": ["github-worker"],
        "variables": {"repo": REPO},
        "task": task,
        "deadline_secs": 300,
        "command": ["gatehouse", "reference-worker"],
    })
}

fn git_ref(w: &World, repo: &str, name: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(w.github.repo_git_dir(repo).unwrap())
        .args(["rev-parse", "--verify", "-q", name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

fn stderr_log(w: &World, ticket: &str, job: &str) -> String {
    let logs = w.svc.state_dir().join("tickets").join(ticket).join("logs");
    std::fs::read_to_string(logs.join(format!("{job}.stderr.log"))).unwrap_or_default()
}

/// Ends `id`, asserting it ended `done` (with the worker's stderr otherwise).
fn finish(w: &World, ticket: &str, id: &str) -> Value {
    let end = w.rt.block_on(w.svc.wait_ended(id));
    assert_eq!(end["state"], "done", "{end}\n{}", stderr_log(w, ticket, id));
    end
}

fn pull_link(report: &Value) -> String {
    assert_eq!(report["state"], "ready", "{report}");
    let link = report["links"][0].as_str().unwrap().to_owned();
    assert!(
        link.starts_with(&format!("https://github.com/{REPO}/pull/")),
        "{link}"
    );
    link
}

#[test]
fn the_reference_worker_opens_a_pull_request_and_reports_ready() {
    require!(Need::Sandbox);
    let w = world();
    let main_before = git_ref(&w, REPO, "refs/heads/main").unwrap();
    let ticket = "tkt_ref_ready";
    let id = w.rt.block_on(w.svc.submit(
        "k1",
        job(ticket, "default", "Add a note on why widgets wobble"),
    ));
    let end = finish(&w, ticket, &id);
    pull_link(&end["latest_report"]);
    // The branch is on the emulator, the default branch untouched.
    let branch = git_ref(&w, REPO, &format!("refs/heads/gatehouse/{ticket}"));
    assert!(branch.is_some(), "the branch was not pushed");
    assert_eq!(git_ref(&w, REPO, "refs/heads/main").unwrap(), main_before);
    let created = w
        .github
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/repos/{REPO}/pulls"))
        .count();
    assert_eq!(created, 1, "one pull request opened");
}

/// A ticket's later job (a person's follow-up, a resume) runs in the same
/// work dir: it continues the clone, the branch and the open pull request
/// the first job left, and opens no second one.
#[test]
fn a_second_job_of_a_ticket_continues_its_branch_and_its_open_pull_request() {
    require!(Need::Sandbox);
    let w = world();
    let ticket = "tkt_ref_again";
    let first = w.rt.block_on(
        w.svc
            .submit("k6", job(ticket, "default", "Add a note on wobbling")),
    );
    let link = pull_link(&finish(&w, ticket, &first)["latest_report"]);
    let branch = format!("refs/heads/gatehouse/{ticket}");
    let after_first = git_ref(&w, REPO, &branch).expect("the branch was not pushed");

    let second = w.rt.block_on(
        w.svc
            .submit("k7", job(ticket, "default", "Also say why they stop")),
    );
    let end = finish(&w, ticket, &second);
    assert_eq!(pull_link(&end["latest_report"]), link, "{end}");
    assert!(
        end["latest_report"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("Updated its pull request"),
        "{end}"
    );
    let after_second = git_ref(&w, REPO, &branch).unwrap();
    assert_ne!(after_second, after_first, "the second job pushed nothing");
    // A fast-forward: the first job's commit is under the second's.
    let ancestor = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(w.github.repo_git_dir(REPO).unwrap())
        .args(["merge-base", "--is-ancestor", &after_first, &after_second])
        .status()
        .unwrap();
    assert!(
        ancestor.success(),
        "the branch was rewritten, not continued"
    );
    let note = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(w.github.repo_git_dir(REPO).unwrap())
        .args(["show", &format!("{after_second}:gatehouse/{ticket}.md")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&note.stdout),
        "Add a note on wobbling\nAlso say why they stop\n"
    );
    let created = w
        .github
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/repos/{REPO}/pulls"))
        .count();
    assert_eq!(created, 1, "a second pull request was opened");
}

#[test]
fn a_question_is_reported_blocked_until_the_inbox_answers_it() {
    require!(Need::Sandbox);
    let w = world();
    let ticket = "tkt_ref_question";
    let id = w.rt.block_on(w.svc.submit(
        "k2",
        job(ticket, "default", "Should the widgets wobble less?"),
    ));
    let blocked = w.rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let job = w.svc.job(&id).await;
            if job["latest_report"]["state"] == "blocked" {
                return job["latest_report"].clone();
            }
            assert!(
                matches!(job["state"].as_str(), Some("queued" | "running")),
                "{job}"
            );
            assert!(tokio::time::Instant::now() < deadline, "never blocked");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!(
        blocked["question"],
        "I make small changes and cannot answer questions. Which change should I make?"
    );
    // Nothing was pushed while it waited.
    assert!(git_ref(&w, REPO, &format!("refs/heads/gatehouse/{ticket}")).is_none());
    let trigger = "trg_0000000000aa000001";
    let resp = w.rt.block_on(w.svc.call(
        Method::POST,
        &format!("/jobs/{id}/inbox"),
        Some(json!({"text": "Add a note saying they should wobble less", "trigger": trigger})),
    ));
    assert_eq!(resp.status, http::HttpStatus::CREATED, "{:?}", resp.json());
    let end = finish(&w, ticket, &id);
    pull_link(&end["latest_report"]);
    let prompt_note = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(w.github.repo_git_dir(REPO).unwrap())
        .args(["show", &format!("gatehouse/{ticket}:gatehouse/{ticket}.md")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&prompt_note.stdout).trim(),
        "Add a note saying they should wobble less"
    );
    // The report after the answer named the message it answered.
    let reports = w.rt.block_on(events_reports(&w.svc));
    assert!(
        reports
            .iter()
            .any(|r| r["state"] == "working" && r["answers"] == trigger),
        "{reports:?}"
    );
}

/// Every report the event stream carried so far.
async fn events_reports(svc: &Service) -> Vec<Value> {
    let resp = svc.call(Method::GET, "/events?after=0", None).await;
    resp.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "report")
        .map(|e| e["data"]["report"].clone())
        .collect()
}

#[test]
fn the_probe_shows_a_push_to_main_and_a_comment_elsewhere_refused() {
    require!(Need::Sandbox);
    let w = world();
    let main_before = git_ref(&w, REPO, "refs/heads/main").unwrap();
    let ticket = "tkt_ref_probe";
    let id = w.rt.block_on(
        w.svc
            .submit("k3", job(ticket, "probe", "Add a note on probing")),
    );
    let end = finish(&w, ticket, &id);
    pull_link(&end["latest_report"]);
    let log = stderr_log(&w, ticket, &id);
    assert!(log.contains("a push to main was refused"), "{log}");
    assert!(
        log.contains(&format!("a comment in {OTHER} was refused")),
        "{log}"
    );
    assert_eq!(git_ref(&w, REPO, "refs/heads/main").unwrap(), main_before);
    assert!(
        w.github
            .comments()
            .iter()
            .all(|c| !c.body.contains("probe")),
        "a probe comment reached the emulator"
    );
    // Both refusals are on the proxy's record, under the ticket's identity.
    let audit = std::fs::read_to_string(&w.audit).unwrap();
    let denied: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.to_string().contains(ticket) && r.to_string().contains("deny"))
        .collect();
    assert!(
        denied
            .iter()
            .any(|r| r.to_string().contains("git-receive-pack")),
        "{denied:?}"
    );
    assert!(
        denied.iter().any(|r| r.to_string().contains(OTHER)),
        "{denied:?}"
    );
    drop(w.proxy);
}

const FORK: &str = "gatehouse-bot/widgets";

/// The safer delivery (`github-worker-fork`, the policy's `fork`): the
/// worker pushes its branch to the bot's fork, never to the repository, and
/// opens the pull request on the repository from the fork's branch.
#[test]
fn a_team_that_delivers_from_a_fork_pushes_there_and_opens_the_pull_request_from_it() {
    require!(Need::Sandbox);
    let w = world();
    let ticket = "tkt_ref_fork";
    let mut spec = job(ticket, "fork", "Add a note from the fork");
    spec["rule_sets"] = json!(["github-worker-fork"]);
    spec["variables"]["fork"] = json!(FORK);
    let id = w.rt.block_on(w.svc.submit("k4", spec));
    let end = finish(&w, ticket, &id);
    pull_link(&end["latest_report"]);
    let branch = format!("refs/heads/gatehouse/{ticket}");
    assert!(
        git_ref(&w, FORK, &branch).is_some(),
        "not pushed to the fork"
    );
    assert!(
        git_ref(&w, REPO, &branch).is_none(),
        "pushed to the repository"
    );
    let pulls: Vec<Value> = w
        .github
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == format!("/repos/{REPO}/pulls"))
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(
        pulls[0]["head"],
        format!("gatehouse-bot:gatehouse/{ticket}")
    );
    // The proxy refused nothing the worker did, and allowed its push by the
    // fork rule.
    let audit = std::fs::read_to_string(&w.audit).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["identity"] == ticket)
        .collect();
    assert!(
        lines.iter().all(|l| l["outcome"]["decision"] != "deny"),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(
            |l| l["outcome"]["rule"] == "fork-push" || l["outcome"]["rule"] == "fork-push-bare"
        ),
        "{lines:?}"
    );
    let _ = &w.proxy;
}

/// The control for the fork: with the fork's rules, a push to the
/// repository itself is refused.
#[test]
fn with_the_fork_rules_a_push_to_the_repository_is_refused() {
    require!(Need::Sandbox);
    let w = world();
    let ticket = "tkt_ref_fork_wrong";
    let mut spec = job(ticket, "fork", "Add a note");
    spec["rule_sets"] = json!(["github-worker-fork"]);
    // No fork variable for the worker: it pushes to origin, the repository.
    spec["variables"]["fork"] = json!(FORK);
    spec["command"] = json!(["sh", "-c", "git clone -q https://github.com/acme/widgets.git r && cd r && git -c user.name=w -c user.email=w@x commit -q --allow-empty -m x && if git push -q origin HEAD:refs/heads/gatehouse/x; then echo PUSHED; else echo REFUSED; fi"]);
    let id = w.rt.block_on(w.svc.submit("k5", spec));
    let end = w.rt.block_on(w.svc.wait_ended(&id));
    let out = std::fs::read_to_string(
        w.svc
            .state_dir()
            .join("tickets")
            .join(ticket)
            .join("logs")
            .join(format!("{id}.stdout.log")),
    )
    .unwrap_or_default();
    assert!(
        out.contains("REFUSED") && !out.contains("PUSHED"),
        "{end}\n{out}"
    );
    assert!(git_ref(&w, REPO, "refs/heads/gatehouse/x").is_none());
}
