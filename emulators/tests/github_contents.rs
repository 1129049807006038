//! The repository reads answered from the bare repository, through the
//! real `gh` (as a GitHub Enterprise host): contents and readme, branches,
//! commits, a commit's files, a comparison, a pull request's files and
//! commits; and what is refused (an unknown path, ref or branch, a ref
//! that is really a git option, a path that climbs out of the tree).
// Helpers outside #[test] functions panic on setup failure too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use base64::Engine as _;
use gatehouse_emulators::{GithubEmulator, GithubHandle, GithubOptions, RepoSpec};
use gatehouse_testkit::proxy::{git_in, push_change};
use serde_json::Value;

const TOKEN: &str = "ghs_contents_test_token";

fn gh(emulator: &GithubHandle, dir: &Path, args: &[&str]) -> Output {
    Command::new("gh")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GH_CONFIG_DIR", dir.join("gh-config"))
        .env("GH_HOST", format!("localhost:{}", emulator.addr().port()))
        .env("GH_ENTERPRISE_TOKEN", TOKEN)
        .env("GH_PROMPT_DISABLED", "1")
        .env("GH_NO_UPDATE_NOTIFIER", "1")
        .env("NO_COLOR", "1")
        .env("SSL_CERT_FILE", dir.join("ca.pem"))
        .output()
        .expect("gh runs")
}

fn api(emulator: &GithubHandle, dir: &Path, path: &str) -> Value {
    let out = gh(emulator, dir, &["api", path]);
    assert!(
        out.status.success(),
        "gh api {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The status `gh api` reports for a refused read (its stderr names it).
fn refused(emulator: &GithubHandle, dir: &Path, path: &str) -> String {
    let out = gh(emulator, dir, &["api", path]);
    assert!(!out.status.success(), "gh api {path} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn repository_reads_come_from_the_repository_in_githubs_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = RepoSpec::new("acme", "widgets");
    spec.files = vec![
        ("README.md".into(), "# widgets\n".into()),
        (
            "src/lib.rs".into(),
            "pub fn one() -> u32 {\n    1\n}\n".into(),
        ),
    ];
    let emulator = GithubEmulator::start(
        GithubOptions::new(dir.path().join("git"))
            .enterprise(true)
            .token(TOKEN, "gatehouse-test[bot]")
            .repo(spec),
    )
    .unwrap();
    emulator.write_ca_pem(&dir.path().join("ca.pem")).unwrap();
    // A branch with one change, pushed straight into the bare repository.
    let (work, head) = push_change(
        &emulator,
        "acme/widgets",
        dir.path(),
        "fix/two",
        &[
            ("src/lib.rs", "pub fn one() -> u32 {\n    2\n}\n"),
            ("NOTES.txt", "new\n"),
        ],
        "Return two\n\nAnd add notes.",
    );
    let main = git_in(&work, &["rev-parse", "main"]);

    let readme = api(&emulator, dir.path(), "repos/acme/widgets/readme");
    assert_eq!(
        (readme["type"].as_str(), readme["encoding"].as_str()),
        (Some("file"), Some("base64"))
    );
    let content: String = readme["content"].as_str().unwrap().split('\n').collect();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(content)
        .unwrap();
    assert_eq!(decoded, b"# widgets\n");
    assert_eq!(readme["path"], "README.md");

    let root = api(&emulator, dir.path(), "repos/acme/widgets/contents");
    let names: Vec<(&str, &str)> = root
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["type"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("README.md", "file"), ("src", "dir")]);
    let on_branch = api(
        &emulator,
        dir.path(),
        "repos/acme/widgets/contents/src/lib.rs?ref=fix/two",
    );
    let content: String = on_branch["content"].as_str().unwrap().split('\n').collect();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(content)
        .unwrap();
    assert!(String::from_utf8(decoded).unwrap().contains('2'));
    let dir_listing = api(&emulator, dir.path(), "repos/acme/widgets/contents/src");
    assert_eq!(dir_listing[0]["path"], "src/lib.rs");

    let branches = api(&emulator, dir.path(), "repos/acme/widgets/branches");
    let names: Vec<&str> = branches
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fix/two", "main"]);
    let branch = api(&emulator, dir.path(), "repos/acme/widgets/branches/fix/two");
    assert_eq!(branch["commit"]["sha"], head.as_str());
    assert_eq!(
        branch["commit"]["commit"]["message"],
        "Return two\n\nAnd add notes."
    );
    assert_eq!(branch["commit"]["parents"][0]["sha"], main.as_str());

    let commits = api(
        &emulator,
        dir.path(),
        "repos/acme/widgets/commits?sha=fix/two",
    );
    let shas: Vec<&str> = commits
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sha"].as_str().unwrap())
        .collect();
    assert_eq!(shas, [head.as_str(), main.as_str()], "newest first");
    assert!(commits[0]["commit"]["author"]["date"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    let commit = api(
        &emulator,
        dir.path(),
        &format!("repos/acme/widgets/commits/{head}"),
    );
    let files: Vec<(&str, &str)> = commit["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["filename"].as_str().unwrap(),
                f["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(files, [("NOTES.txt", "added"), ("src/lib.rs", "modified")]);
    assert_eq!(commit["stats"]["additions"], 2);
    assert!(commit["files"][1]["patch"]
        .as_str()
        .unwrap()
        .contains("+    2"));

    let compare = api(
        &emulator,
        dir.path(),
        "repos/acme/widgets/compare/main...fix/two",
    );
    assert_eq!(
        (
            compare["status"].as_str(),
            compare["ahead_by"].as_u64(),
            compare["behind_by"].as_u64()
        ),
        (Some("ahead"), Some(1), Some(0))
    );
    assert_eq!(compare["commits"][0]["sha"], head.as_str());
    assert_eq!(compare["files"].as_array().unwrap().len(), 2);
    let behind = api(
        &emulator,
        dir.path(),
        "repos/acme/widgets/compare/fix/two...main",
    );
    assert_eq!(behind["status"], "behind");

    let number = emulator
        .add_pull("acme/widgets", "Return two", "fix/two", "main", "alice")
        .unwrap();
    let pull_files = api(
        &emulator,
        dir.path(),
        &format!("repos/acme/widgets/pulls/{number}/files"),
    );
    assert_eq!(pull_files.as_array().unwrap().len(), 2);
    let pull_commits = api(
        &emulator,
        dir.path(),
        &format!("repos/acme/widgets/pulls/{number}/commits"),
    );
    assert_eq!(pull_commits[0]["sha"], head.as_str());

    // The git database.
    let tree_sha = commit["commit"]["tree"]["sha"].as_str().unwrap().to_owned();
    let tree = api(
        &emulator,
        dir.path(),
        &format!("repos/acme/widgets/git/trees/{tree_sha}"),
    );
    let paths: Vec<&str> = tree["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["NOTES.txt", "README.md", "src"]);
    let blob_sha = tree["tree"][1]["sha"].as_str().unwrap().to_owned();
    let blob = api(
        &emulator,
        dir.path(),
        &format!("repos/acme/widgets/git/blobs/{blob_sha}"),
    );
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(blob["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        decoded,
        b"# widgets
"
    );
    let git_commit = api(
        &emulator,
        dir.path(),
        &format!("repos/acme/widgets/git/commits/{head}"),
    );
    assert_eq!(git_commit["sha"], head.as_str());
    assert_eq!(git_commit["tree"]["sha"], tree_sha.as_str());
    let git_ref = api(
        &emulator,
        dir.path(),
        "repos/acme/widgets/git/ref/heads/fix/two",
    );
    assert_eq!(git_ref["object"]["sha"], head.as_str());
    let matching = api(
        &emulator,
        dir.path(),
        "repos/acme/widgets/git/matching-refs/heads/",
    );
    assert_eq!(matching.as_array().unwrap().len(), 2);

    // Refusals: GitHub's status for each, and nothing read outside the tree.
    let tree_as_blob = format!("repos/acme/widgets/git/blobs/{tree_sha}");
    let describe_branch = format!("repos/acme/widgets/branches/nope-g{}", &head[..8]);
    let describe_ref = format!(
        "repos/acme/widgets/contents/README.md?ref=zzz-g{}",
        &head[..8]
    );
    for (path, status) in [
        ("repos/acme/widgets/contents/nope.txt", "404"),
        ("repos/acme/widgets/contents/src/../README.md", "404"),
        (
            "repos/acme/widgets/contents/README.md?ref=--output=x",
            "404",
        ),
        ("repos/acme/widgets/branches/nope", "404"),
        ("repos/acme/widgets/commits?sha=nope", "422"),
        (
            "repos/acme/widgets/commits/0123456789abcdef0123456789abcdef01234567",
            "422",
        ),
        ("repos/acme/widgets/compare/main...nope", "404"),
        ("repos/acme/widgets/pulls/99/files", "404"),
        ("repos/acme/nothing/readme", "404"),
        // A tree id asked for as a blob, a short id, a ref that is a prefix only.
        (tree_as_blob.as_str(), "404"),
        ("repos/acme/widgets/git/commits/abc123", "404"),
        ("repos/acme/widgets/git/ref/heads/fix", "404"),
        // A name git would read as `git describe` output names no branch.
        (describe_branch.as_str(), "404"),
        (describe_ref.as_str(), "404"),
    ] {
        let said = refused(&emulator, dir.path(), path);
        assert!(said.contains(&format!("HTTP {status}")), "{path}: {said}");
    }
    assert!(
        !dir.path().join("x").exists(),
        "a ref was taken as a git option"
    );
}
