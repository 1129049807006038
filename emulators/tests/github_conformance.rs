//! Conformance of the GitHub emulator's REST answers to the shapes GitHub's
//! REST description (`github/rest-api-description`) gives them: for each
//! endpoint workers use, the status, the `content-type` and every required
//! property of the response schema, with its JSON type, recursively through
//! nested schemas and array items. The shapes are data, recorded from the
//! description, under `tests/shapes/github/` (one file a schema; see
//! `emulators/README.md` for the format).
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use serde_json::Value;

/// A recorded shape: required properties with their types, the schemas of
/// nested objects and of array items.
#[derive(Debug)]
struct Shape {
    required: BTreeMap<String, Vec<String>>,
    nested: BTreeMap<String, String>,
    items: BTreeMap<String, String>,
}

fn types_of(v: &Value) -> Vec<String> {
    match v {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts
            .iter()
            .map(|t| t.as_str().expect("a type name").to_owned())
            .collect(),
        other => panic!("a type is a name or a list of names, not {other}"),
    }
}

fn load_shapes() -> BTreeMap<String, Shape> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shapes/github");
    let mut shapes = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("the shapes directory") {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            v["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("github/rest-api-description")),
            "{name}: no source"
        );
        let map = |key: &str| -> BTreeMap<String, Value> {
            v.get(key)
                .and_then(Value::as_object)
                .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default()
        };
        let mut required: BTreeMap<String, Vec<String>> = map("required")
            .iter()
            .map(|(k, t)| (k.clone(), types_of(t)))
            .collect();
        // Fields the schema leaves optional but GitHub always sends (each
        // file says why).
        for (k, t) in map("also_checked") {
            required.insert(k, types_of(&t));
        }
        let names = |key: &str| -> BTreeMap<String, String> {
            map(key)
                .into_iter()
                .map(|(k, s)| (k, s.as_str().expect("a schema name").to_owned()))
                .collect()
        };
        shapes.insert(
            name.to_owned(),
            Shape {
                required,
                nested: names("nested"),
                items: names("items"),
            },
        );
    }
    // Every reference names a recorded schema.
    for (name, shape) in &shapes {
        for target in shape.nested.values().chain(shape.items.values()) {
            assert!(
                shapes.contains_key(target),
                "{name} refers to {target}, not recorded"
            );
        }
    }
    shapes
}

/// Required properties the emulator cannot give, with why. Each must stay
/// absent: once the emulator sends one, the entry has to go.
const NOT_EMULATED: &[(&str, &str, &str)] = &[];

/// The shapes `check` was asked about in this process (the conformance
/// test asserts every recorded one was).
static REACHED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Recorded shapes no emulated answer can reach, and why.
const NOT_REACHED: &[(&str, &str)] = &[(
    "milestone",
    "milestones are not modelled: every issue's `milestone` is null",
)];

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_fits(expected: &[String], got: &str) -> bool {
    expected
        .iter()
        .any(|t| t == got || (t == "number" && got == "integer"))
}

/// Checks `value` against shape `name`, pushing one line a difference.
fn check(
    shapes: &BTreeMap<String, Shape>,
    name: &str,
    value: &Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    let shape = &shapes[name];
    REACHED.lock().unwrap().insert(name.to_owned());
    let Some(object) = value.as_object() else {
        errors.push(format!(
            "{at}: expected an object ({name}), got {}",
            json_type(value)
        ));
        return;
    };
    for (field, expected) in &shape.required {
        let here = format!("{at}.{field}");
        let allowed = NOT_EMULATED
            .iter()
            .find(|(s, f, _)| *s == name && f == field);
        match (object.get(field), allowed) {
            (None, Some(_)) => {}
            (Some(_), Some((_, _, why))) => errors.push(format!(
                "{here} ({name}): listed as not emulated ({why}) but now present: drop it from NOT_EMULATED"
            )),
            (None, None) => errors.push(format!(
                "{here} ({name}): required, expected {expected:?}, got nothing"
            )),
            (Some(v), None) if !type_fits(expected, json_type(v)) => errors.push(format!(
                "{here} ({name}): expected {expected:?}, got {} ({v})",
                json_type(v)
            )),
            (Some(_), None) => {}
        }
    }
    for (field, target) in &shape.nested {
        if let Some(v) = object.get(field).filter(|v| v.is_object()) {
            check(shapes, target, v, &format!("{at}.{field}"), errors);
        }
    }
    for (field, target) in &shape.items {
        if let Some(list) = object.get(field).and_then(Value::as_array) {
            for (i, v) in list.iter().enumerate() {
                check(shapes, target, v, &format!("{at}.{field}[{i}]"), errors);
            }
        }
    }
}

struct Answer {
    status: u16,
    headers: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// One request with real curl, trusting the test CA only.
fn curl(
    emulator: &GithubHandle,
    ca: &Path,
    method: &str,
    url_path: &str,
    body: Option<&str>,
) -> Answer {
    let port = emulator.addr().port();
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("api.github.com:{port}:127.0.0.1")])
        .args(["-D", "-", "-o", "-", "-X", method])
        .args(["-H", "Authorization: token ghs_conformance_token"])
        .args(["-H", "Accept: application/vnd.github+json"]);
    if let Some(body) = body {
        command
            .args(["-H", "Content-Type: application/json"])
            .args(["--data", body]);
    }
    let output = command
        .arg(format!("https://api.github.com:{port}{url_path}"))
        .output()
        .expect("curl runs");
    assert!(
        output.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let (headers, body) = text.split_once("\r\n\r\n").unwrap();
    Answer {
        status: headers.split(' ').nth(1).unwrap().parse().unwrap(),
        headers: headers.to_owned(),
        body: body.to_owned(),
    }
}

/// Branch `branch` off `main` with one commit adding `path` (git
/// plumbing on the bare repository); returns the commit.
fn commit_file(git_dir: &Path, scratch: &Path, branch: &str, path: &str, text: &str) -> String {
    let index = scratch.join("conformance-index");
    let git = |args: &[&str], input: Option<&str>| -> String {
        use std::io::Write as _;
        let mut child = Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args(args)
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_AUTHOR_NAME", "Alice")
            .env("GIT_AUTHOR_EMAIL", "alice@example.com")
            .env("GIT_COMMITTER_NAME", "Alice")
            .env("GIT_COMMITTER_EMAIL", "alice@example.com")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git runs");
        if let Some(input) = input {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let blob = git(&["hash-object", "-w", "--stdin"], Some(text));
    git(&["read-tree", "main^{tree}"], None);
    let info = format!("100644,{blob},{path}");
    git(&["update-index", "--add", "--cacheinfo", &info], None);
    let tree = git(&["write-tree"], None);
    let commit = git(
        &["commit-tree", &tree, "-p", "main", "-m", "Fix the crash"],
        None,
    );
    git(
        &["update-ref", &format!("refs/heads/{branch}"), &commit],
        None,
    );
    commit
}

/// How an endpoint's body holds its schema.
enum Body {
    /// The object itself.
    One,
    /// An array of them.
    List,
    /// `{"total_count": n, key: [ … ]}`.
    Wrapped(&'static str),
}

struct Endpoint {
    method: &'static str,
    path: String,
    body: Option<String>,
    status: u16,
    schema: &'static str,
    shape: Body,
}

fn get(path: String, schema: &'static str, shape: Body) -> Endpoint {
    Endpoint {
        method: "GET",
        path,
        body: None,
        status: 200,
        schema,
        shape,
    }
}

fn post(path: String, body: &str, status: u16, schema: &'static str) -> Endpoint {
    Endpoint {
        method: "POST",
        path,
        body: Some(body.to_owned()),
        status,
        schema,
        shape: Body::One,
    }
}

#[test]
fn every_emulated_endpoint_answers_githubs_recorded_shape() {
    let shapes = load_shapes();
    let dir = tempfile::tempdir().unwrap();
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .token("ghs_conformance_token", "octocat")
            .repo(RepoSpec::new("acme", "widgets")),
    )
    .expect("emulator starts");
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();

    let repo = "acme/widgets";
    let issue = emulator
        .add_issue(repo, "Crash on start", "It crashes.", "alice")
        .unwrap();
    let issue_comment = emulator
        .add_issue_comment(repo, issue, "Seen it too.", "bob")
        .unwrap();
    // The workflow on the default branch, so that its runs are listed.
    commit_file(
        &emulator.repo_git_dir(repo).unwrap(),
        dir.path(),
        "main",
        ".github/workflows/ci.yml",
        "name: CI\non: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - run: make test\n",
    );
    let head_sha = commit_file(
        &emulator.repo_git_dir(repo).unwrap(),
        dir.path(),
        "fix/crash",
        "fix.txt",
        "first\nsecond\n",
    );
    emulator.add_branch(repo, "feature/new", "main").unwrap();
    let pull = emulator
        .add_pull(repo, "Fix the crash", "fix/crash", "main", "alice")
        .unwrap();
    // Labelled, so that its labels' shape is compared too.
    emulator.add_label(repo, pull, "bug").unwrap();
    let review_comment = emulator
        .add_review_comment(repo, pull, "fix.txt", 1, "Typo here.", "bob")
        .unwrap();
    let review = emulator
        .add_review(repo, pull, "APPROVED", "Looks good.", "bob")
        .unwrap();
    let (run, job) = emulator
        .add_workflow_job(
            repo,
            ".github/workflows/ci.yml",
            "test",
            &head_sha,
            "failure",
            "error: it failed\n",
        )
        .unwrap();

    let r = |tail: &str| format!("/repos/acme/widgets{tail}");
    let endpoints = [
        get(r(&format!("/issues/{issue}")), "issue", Body::One),
        get(r("/issues"), "issue", Body::List),
        get(
            r(&format!("/issues/{issue}/comments")),
            "issue-comment",
            Body::List,
        ),
        post(
            r(&format!("/issues/{issue}/comments")),
            r#"{"body":"On it."}"#,
            201,
            "issue-comment",
        ),
        get(r(&format!("/pulls/{pull}")), "pull-request", Body::One),
        get(r("/pulls"), "pull-request-simple", Body::List),
        post(
            r("/pulls"),
            r#"{"title":"New feature","head":"feature/new","base":"main","body":"Adds it."}"#,
            201,
            "pull-request",
        ),
        get(
            r(&format!("/pulls/{pull}/comments")),
            "pull-request-review-comment",
            Body::List,
        ),
        get(
            r(&format!("/pulls/{pull}/reviews")),
            "pull-request-review",
            Body::List,
        ),
        post(
            r(&format!("/pulls/{pull}/reviews")),
            r#"{"body":"One more thing.","event":"COMMENT"}"#,
            200,
            "pull-request-review",
        ),
        get(
            r(&format!("/issues/comments/{issue_comment}")),
            "issue-comment",
            Body::One,
        ),
        Endpoint {
            method: "PATCH",
            ..post(
                r(&format!("/issues/comments/{issue_comment}")),
                r#"{"body":"Seen it too, on 1.2."}"#,
                200,
                "issue-comment",
            )
        },
        post(
            r("/issues"),
            r#"{"title":"Another","body":"More."}"#,
            201,
            "issue",
        ),
        Endpoint {
            method: "PATCH",
            ..post(
                r(&format!("/pulls/{pull}")),
                r#"{"body":"Fixes the crash."}"#,
                200,
                "pull-request",
            )
        },
        post(
            r(&format!("/pulls/{pull}/requested_reviewers")),
            r#"{"reviewers":["carol"]}"#,
            201,
            "pull-request-simple",
        ),
        post(
            r(&format!("/pulls/{pull}/comments")),
            &format!(
                r#"{{"body":"And here.","commit_id":"{head_sha}","path":"fix.txt","line":2,"side":"RIGHT"}}"#
            ),
            201,
            "pull-request-review-comment",
        ),
        post(
            r(&format!("/pulls/{pull}/comments/{review_comment}/replies")),
            r#"{"body":"Fixed."}"#,
            201,
            "pull-request-review-comment",
        ),
        get(
            r(&format!("/pulls/comments/{review_comment}")),
            "pull-request-review-comment",
            Body::One,
        ),
        get(
            r(&format!("/pulls/{pull}/reviews/{review}")),
            "pull-request-review",
            Body::One,
        ),
        get(r(&format!("/pulls/{pull}/commits")), "commit", Body::List),
        get(r(&format!("/pulls/{pull}/files")), "diff-entry", Body::List),
        get(r("/readme"), "content-file", Body::One),
        get(r(""), "full-repository", Body::One),
        get(r("/branches"), "branch-short", Body::List),
        get(r("/branches/main"), "branch-with-protection", Body::One),
        get(r("/commits"), "commit", Body::List),
        get(r(&format!("/commits/{head_sha}")), "commit", Body::One),
        get(r("/contents/README.md"), "content-file", Body::One),
        get(r("/contents/"), "content-directory.item", Body::List),
        get(r(&format!("/check-runs/{job}")), "check-run", Body::One),
        get(
            r(&format!("/commits/{head_sha}/check-runs")),
            "check-run",
            Body::Wrapped("check_runs"),
        ),
        get(r(&format!("/check-suites/{run}")), "check-suite", Body::One),
        get(
            r(&format!("/check-suites/{run}/check-runs")),
            "check-run",
            Body::Wrapped("check_runs"),
        ),
        get(
            r(&format!("/commits/{head_sha}/check-suites")),
            "check-suite",
            Body::Wrapped("check_suites"),
        ),
        get(
            r("/actions/runs"),
            "workflow-run",
            Body::Wrapped("workflow_runs"),
        ),
        get(
            r(&format!("/actions/runs/{run}")),
            "workflow-run",
            Body::One,
        ),
        get(
            r("/actions/workflows/ci.yml/runs"),
            "workflow-run",
            Body::Wrapped("workflow_runs"),
        ),
        get(
            r(&format!("/actions/runs/{run}/jobs")),
            "job",
            Body::Wrapped("jobs"),
        ),
        get(r(&format!("/actions/jobs/{job}")), "job", Body::One),
        get("/user".into(), "private-user", Body::One),
        get("/rate_limit".into(), "rate-limit-overview", Body::One),
        Endpoint {
            status: 404,
            ..get(r("/issues/999"), "basic-error", Body::One)
        },
        post(
            r("/pulls"),
            r#"{"title":"Nothing","head":"no-such-branch","base":"main"}"#,
            422,
            "validation-error",
        ),
    ];

    let mut errors = Vec::new();
    for e in &endpoints {
        let name = format!("{} {}", e.method, e.path);
        let answer = curl(&emulator, &ca, e.method, &e.path, e.body.as_deref());
        if answer.status != e.status {
            errors.push(format!(
                "{name}: status expected {}, got {} ({})",
                e.status, answer.status, answer.body
            ));
            continue;
        }
        let content_type = answer.header("content-type").unwrap_or("");
        if content_type != "application/json; charset=utf-8" {
            errors.push(format!(
                "{name}: content-type expected application/json; charset=utf-8, got {content_type:?}"
            ));
        }
        let body: Value = match serde_json::from_str(&answer.body) {
            Ok(v) => v,
            Err(err) => {
                errors.push(format!("{name}: body is not JSON ({err}): {}", answer.body));
                continue;
            }
        };
        let at = format!("{name}: body");
        let list = match &e.shape {
            Body::One => {
                check(&shapes, e.schema, &body, &at, &mut errors);
                continue;
            }
            Body::List => body.as_array(),
            Body::Wrapped(key) => {
                if !body["total_count"].is_u64() {
                    errors.push(format!(
                        "{at}.total_count: expected integer, got {}",
                        json_type(&body["total_count"])
                    ));
                }
                body[key].as_array()
            }
        };
        match list {
            Some(list) if !list.is_empty() => {
                for (i, v) in list.iter().enumerate() {
                    check(&shapes, e.schema, v, &format!("{at}[{i}]"), &mut errors);
                }
            }
            // An empty list checks nothing: the seed gives each one entry.
            _ => errors.push(format!("{at}: expected a non-empty list of {}", e.schema)),
        }
    }
    // What the server reads from git for the handlers' JSON: a pull
    // request's diff counts and a run's head commit.
    let pull_json: Value = serde_json::from_str(
        &curl(&emulator, &ca, "GET", &r(&format!("/pulls/{pull}")), None).body,
    )
    .unwrap();
    for (field, expected) in [
        ("commits", 1),
        ("changed_files", 1),
        ("additions", 2),
        ("deletions", 0),
    ] {
        if pull_json[field] != expected {
            errors.push(format!(
                "GET /pulls/{pull}: {field} expected {expected} (the branch: one commit adding a file of two lines), got {}",
                pull_json[field]
            ));
        }
    }
    // A run's check suite is the one its jobs' check runs name.
    let get_json = |path: String| -> Value {
        serde_json::from_str(&curl(&emulator, &ca, "GET", &path, None).body).unwrap()
    };
    let suite = get_json(r(&format!("/check-suites/{run}")));
    let check_run = get_json(r(&format!("/check-runs/{job}")));
    if suite["id"] != check_run["check_suite"]["id"]
        || suite["head_commit"]["id"] != head_sha.as_str()
    {
        errors.push(format!(
            "GET /check-suites/{run}: id {} (the check run names {}), head_commit.id {} (expected {head_sha})",
            suite["id"], check_run["check_suite"]["id"], suite["head_commit"]["id"]
        ));
    }
    let suite_runs = get_json(r(&format!("/check-suites/{run}/check-runs")));
    if suite_runs["check_runs"][0]["id"] != job {
        errors.push(format!(
            "GET /check-suites/{run}/check-runs: expected check run {job}, got {}",
            suite_runs["check_runs"]
        ));
    }
    // A pull request's timeline holds its commits (`committed`).
    let timeline = get_json(r(&format!("/issues/{pull}/timeline")));
    let committed: Vec<&Value> = timeline
        .as_array()
        .map(|a| a.iter().filter(|e| e["event"] == "committed").collect())
        .unwrap_or_default();
    if committed.len() != 1 || committed[0]["sha"] != head_sha.as_str() {
        errors.push(format!(
            "GET /issues/{pull}/timeline: expected one committed item for {head_sha}, got {committed:?}"
        ));
    }
    for c in committed {
        let at = format!("GET /issues/{pull}/timeline: committed");
        check(&shapes, "timeline-committed-event", c, &at, &mut errors);
    }
    let missing = curl(&emulator, &ca, "GET", &r("/check-suites/999999"), None);
    if missing.status != 404 {
        errors.push(format!("GET /check-suites/999999: {}", missing.status));
    }
    let run_json: Value = serde_json::from_str(
        &curl(
            &emulator,
            &ca,
            "GET",
            &r(&format!("/actions/runs/{run}")),
            None,
        )
        .body,
    )
    .unwrap();
    if run_json["head_commit"]["id"] != head_sha.as_str() {
        errors.push(format!(
            "GET /actions/runs/{run}: head_commit.id expected {head_sha}, got {}",
            run_json["head_commit"]["id"]
        ));
    }
    assert!(
        errors.is_empty(),
        "{} differences from GitHub's recorded shapes:\n{}",
        errors.len(),
        errors.join("\n")
    );
    // Every recorded shape was compared with an answer (or cannot be).
    let reached = REACHED.lock().unwrap().clone();
    let unreached: Vec<&String> = shapes
        .keys()
        .filter(|name| !reached.contains(*name) && !NOT_REACHED.iter().any(|(n, _)| n == name))
        .collect();
    assert!(
        unreached.is_empty(),
        "recorded shapes no answer reached: {unreached:?}"
    );
    for (name, why) in NOT_REACHED {
        assert!(
            !reached.contains(*name),
            "{name} is reached now ({why}): drop it from NOT_REACHED"
        );
    }
}

#[test]
fn the_checker_names_endpoint_field_and_types() {
    let shapes = load_shapes();
    let mut errors = Vec::new();
    let user = serde_json::json!({"login": "octocat", "id": "1"});
    check(&shapes, "simple-user", &user, "GET /x: body", &mut errors);
    assert!(
        errors.iter().any(
            |e| e == r#"GET /x: body.id (simple-user): expected ["integer"], got string ("1")"#
        ),
        "{errors:#?}"
    );
    assert!(errors
        .iter()
        .any(|e| e.starts_with("GET /x: body.node_id (simple-user): required")));
}

/// An emulator of acme/widgets delivering webhooks to a port nothing
/// listens on: each delivery is kept with its failed attempt, which is all
/// the webhook tests read.
fn start_delivering(dir: &Path) -> GithubHandle {
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed_port.local_addr().unwrap());
    drop(closed_port);
    GithubEmulator::start(
        GithubOptions::new(dir.join("git"))
            .token("ghs_conformance_token", "octocat")
            .repo(RepoSpec::new("acme", "widgets"))
            .webhook(&url, "s3cret"),
    )
    .expect("emulator starts")
}

/// A `pull_request` webhook carries the full pull request, diff counts
/// included, as the REST answer does (both read them from git).
#[test]
fn webhook_pull_requests_carry_the_diff_counts_git_has() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = start_delivering(dir.path());
    let ca = dir.path().join("ca.pem");
    emulator.write_ca_pem(&ca).unwrap();
    let repo = "acme/widgets";
    commit_file(
        &emulator.repo_git_dir(repo).unwrap(),
        dir.path(),
        "fix/crash",
        "fix.txt",
        "first\nsecond\nthird\n",
    );
    let seeded = emulator
        .add_pull(repo, "Fix the crash", "fix/crash", "main", "alice")
        .unwrap();
    commit_file(
        &emulator.repo_git_dir(repo).unwrap(),
        dir.path(),
        "fix/other",
        "other.txt",
        "one\n",
    );
    let created = curl(
        &emulator,
        &ca,
        "POST",
        "/repos/acme/widgets/pulls",
        Some(r#"{"title":"Other","head":"fix/other","base":"main"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let opened: Vec<Value> = emulator
        .webhook_deliveries()
        .iter()
        .filter(|d| d.event == "pull_request" && d.action.as_deref() == Some("opened"))
        .map(|d| serde_json::from_slice(&d.body).unwrap())
        .collect();
    assert_eq!(opened.len(), 2, "{opened:#?}");
    for (number, lines) in [(seeded, 3), (seeded + 1, 1)] {
        let delivered = opened
            .iter()
            .find(|v| v["number"] == number)
            .unwrap_or_else(|| panic!("no opened delivery for #{number}"));
        let rest: Value = serde_json::from_str(
            &curl(
                &emulator,
                &ca,
                "GET",
                &format!("/repos/acme/widgets/pulls/{number}"),
                None,
            )
            .body,
        )
        .unwrap();
        for field in ["commits", "additions", "deletions", "changed_files"] {
            assert_eq!(
                delivered["pull_request"][field], rest[field],
                "#{number} {field}"
            );
        }
        assert_eq!(delivered["pull_request"]["additions"], lines, "#{number}");
        assert_eq!(delivered["pull_request"]["commits"], 1, "#{number}");
        assert_eq!(delivered["pull_request"]["changed_files"], 1, "#{number}");
    }
}

/// Every required field of a payload by its path from the payload
/// (`issue.user.login`, `pull_request.labels[].name`), with its types.
type PayloadShape = BTreeMap<String, Vec<String>>;

/// The recorded webhook payloads, each one or more alternatives (a payload
/// fits one of them: a review requested of a user or of a team), from
/// `tests/shapes/github-webhooks/` (recorded by `scripts/github-shapes` from
/// the description's `x-webhooks`).
fn load_webhook_shapes() -> BTreeMap<String, Vec<PayloadShape>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shapes/github-webhooks");
    let mut shapes = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("the webhook shapes directory") {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(
            v["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("github/rest-api-description x-webhooks/")),
            "{name}: no source"
        );
        let read = |shape: &Value| -> PayloadShape {
            shape
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, t)| (k.clone(), types_of(t)))
                .collect()
        };
        let alternatives: Vec<PayloadShape> = match v.get("one_of").and_then(Value::as_array) {
            Some(all) => all.iter().map(read).collect(),
            None => vec![read(&v["required"])],
        };
        // A shape that requires nothing would check nothing.
        assert!(
            !alternatives.is_empty() && alternatives.iter().all(|a| a.len() > 10),
            "{name}: a recorded payload with (almost) no required fields"
        );
        shapes.insert(name, alternatives);
    }
    shapes
}

/// The differences of `payload` from `required`, one line each.
fn payload_differences(key: &str, payload: &Value, required: &PayloadShape) -> Vec<String> {
    let mut errors = Vec::new();
    for (path, expected) in required {
        for (at, value) in at_path(payload, path) {
            match value {
                None => errors.push(format!(
                    "{key}: {at}: required, expected {expected:?}, got nothing"
                )),
                Some(v) if !type_fits(expected, json_type(v)) => errors.push(format!(
                    "{key}: {at}: expected {expected:?}, got {} ({v})",
                    json_type(v)
                )),
                Some(_) => {}
            }
        }
    }
    errors
}

/// The values at `path` in `payload` (a `[]` segment takes every item),
/// stopping where a parent is absent or null (its own path reports it).
fn at_path<'a>(payload: &'a Value, path: &str) -> Vec<(String, Option<&'a Value>)> {
    let (parents, field) = path.rsplit_once('.').unwrap_or(("", path));
    let mut here: Vec<(String, &Value)> = vec![(String::new(), payload)];
    for segment in parents.split('.').filter(|s| !s.is_empty()) {
        let (name, each) = match segment.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (segment, false),
        };
        let mut next = Vec::new();
        for (at, v) in here {
            let at = if at.is_empty() {
                name.to_owned()
            } else {
                format!("{at}.{name}")
            };
            match v.get(name) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) if each => {
                    for (k, item) in items.iter().enumerate() {
                        next.push((format!("{at}[{k}]"), item));
                    }
                }
                Some(child) => next.push((at, child)),
            }
        }
        here = next;
    }
    here.into_iter()
        .map(|(at, v)| {
            let at = if at.is_empty() {
                field.to_owned()
            } else {
                format!("{at}.{field}")
            };
            (at, v.get(field))
        })
        .collect()
}

/// Every webhook the emulator delivers carries each field GitHub's
/// description requires of that event's payload, with its type.
#[test]
fn every_delivered_webhook_has_the_payload_githubs_description_requires() {
    let shapes = load_webhook_shapes();
    let dir = tempfile::tempdir().unwrap();
    let emulator = start_delivering(dir.path());
    let repo = "acme/widgets";
    let issue = emulator
        .add_issue(repo, "Crash", "It crashes.", "alice")
        .unwrap();
    emulator.add_label(repo, issue, "bug").unwrap();
    emulator.assign(repo, issue, "bob", "alice").unwrap();
    emulator
        .add_issue_comment(repo, issue, "Seen it.", "bob")
        .unwrap();
    emulator.close(repo, issue, "alice").unwrap();
    emulator.reopen(repo, issue, "alice").unwrap();
    commit_file(
        &emulator.repo_git_dir(repo).unwrap(),
        dir.path(),
        "fix/crash",
        "fix.txt",
        "fixed\n",
    );
    let pull = emulator
        .add_pull(repo, "Fix the crash", "fix/crash", "main", "alice")
        .unwrap();
    emulator.add_label(repo, pull, "bug").unwrap();
    emulator.assign(repo, pull, "alice", "alice").unwrap();
    emulator.request_review(repo, pull, "bob", "alice").unwrap();
    emulator
        .add_review_comment(repo, pull, "fix.txt", 1, "Typo.", "bob")
        .unwrap();
    emulator
        .add_review(repo, pull, "APPROVED", "Good.", "bob")
        .unwrap();
    emulator.close(repo, pull, "alice").unwrap();
    emulator.reopen(repo, pull, "alice").unwrap();

    let mut errors = Vec::new();
    let mut delivered = std::collections::BTreeSet::new();
    for d in emulator.webhook_deliveries() {
        let key = format!(
            "{}-{}",
            d.event.replace('_', "-"),
            d.action.clone().unwrap_or_default().replace('_', "-")
        );
        let Some(alternatives) = shapes.get(&key) else {
            errors.push(format!("{key}: delivered, no recorded shape"));
            continue;
        };
        delivered.insert(key.clone());
        let payload: Value = serde_json::from_slice(&d.body).unwrap();
        // It fits one alternative; if none, the closest one's differences.
        let closest = alternatives
            .iter()
            .map(|required| payload_differences(&key, &payload, required))
            .min_by_key(Vec::len)
            .unwrap_or_default();
        errors.extend(closest);
    }
    let not_delivered: Vec<&String> = shapes.keys().filter(|k| !delivered.contains(*k)).collect();
    assert!(
        not_delivered.is_empty(),
        "recorded but not delivered by this test: {not_delivered:?}"
    );
    assert!(
        errors.is_empty(),
        "{} differences from GitHub's webhook payloads:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

#[test]
fn the_webhook_checker_walks_lists_and_stops_at_null_parents() {
    let payload = serde_json::json!({
        "issue": {"labels": [{"name": "bug"}, {}], "assignee": null},
    });
    let names = at_path(&payload, "issue.labels[].name");
    assert_eq!(names.len(), 2);
    assert_eq!(names[0].0, "issue.labels[0].name");
    assert_eq!(names[1], ("issue.labels[1].name".to_owned(), None));
    assert!(at_path(&payload, "issue.assignee.login").is_empty());
    assert_eq!(
        at_path(&payload, "issue.number"),
        [("issue.number".to_owned(), None)]
    );
}
