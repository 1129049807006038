//! The REST reads a repository's git data answers: contents and readme,
//! branches, commits, a comparison, a pull request's files and commits.
//! Read from the bare repository with `git` (blocking), in the shapes of
//! GitHub's REST description (github/rest-api-description:
//! `content-file`, `content-directory`, `short-branch`, `branch-with-protection`,
//! `commit`, `comparison`, `diff-entry`); fields gatehouse and `gh` read are
//! all there, the rest (`node_id`s, signatures) kept to GitHub's types.

use std::path::Path;

use base64::Engine as _;
use http::StatusCode;
use serde_json::{json, Value};

use super::model::API_BASE;
use super::rest::Reply;

/// What to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GitRead {
    /// `GET …/readme`: the README at the root of `reference`.
    Readme {
        reference: Option<String>,
    },
    /// `GET …/contents[/{path}]`: a file, or a directory's entries.
    Contents {
        path: String,
        reference: Option<String>,
    },
    Branches,
    Branch(String),
    /// `GET …/commits[?sha=]`: newest first.
    Commits {
        from: Option<String>,
    },
    Commit(String),
    /// `GET …/compare/{base}...{head}`.
    Compare(String),
    /// A pull request's files and commits, between its base and head.
    PullFiles {
        base: String,
        head: String,
    },
    PullCommits {
        base: String,
        head: String,
    },
    /// The git database: `trees`, `blobs`, `commits` (by id), `ref`,
    /// `matching-refs` (by name under `refs/`).
    Object(&'static str, String),
}

/// What a read gives: one object, or a list for the caller to page.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Read {
    One(Value),
    List(Vec<Value>),
}

/// A ref, branch or commit id as a URL gives it: what git takes as a
/// revision and nothing else (no option, no range, no reflog syntax).
fn revision(s: &str) -> Option<&str> {
    let ok = !s.is_empty()
        && s.len() <= 255
        && !s.starts_with(['-', '/', '.'])
        && !s.ends_with(['/', '.'])
        && !s.contains("..")
        && !s.contains("@{")
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
    ok.then_some(s)
}

/// A path inside the tree: segments without `.`/`..`, no NUL.
fn tree_path(s: &str) -> Option<&str> {
    let s = s.trim_matches('/');
    let ok = s.len() <= 4096
        && !s.contains('\0')
        && s.split('/')
            .all(|seg| s.is_empty() || !(seg.is_empty() || seg == "." || seg == ".."));
    ok.then_some(s)
}

/// git on the bare repository and nothing else: no configuration but its
/// own, no replace objects, pathspecs taken literally, none of the
/// caller's `GIT_*` variables.
pub(super) fn git(git_dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let out = std::process::Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// git's output as text; bytes that are not UTF-8 are replaced, not fatal.
fn git_text(git_dir: &Path, args: &[&str]) -> Option<String> {
    git(git_dir, args).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The commit an existing ref points at (exactly that ref: no revision
/// syntax is read in its name, such as `name-g<hex>` as a describe).
fn ref_commit(git_dir: &Path, full_ref: &str) -> Option<String> {
    let sha = git_text(git_dir, &["show-ref", "--verify", "--hash", full_ref])?;
    peel(git_dir, sha.trim())
}

/// A full or abbreviated object id's commit.
fn peel(git_dir: &Path, hex: &str) -> Option<String> {
    let hex = object_prefix(hex)?;
    let out = git_text(
        git_dir,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{hex}^{{commit}}"),
        ],
    )?;
    Some(out.trim().to_owned()).filter(|s| !s.is_empty())
}

fn object_prefix(s: &str) -> Option<&str> {
    (s.len() >= 4 && s.len() <= 40 && s.bytes().all(|b| b.is_ascii_hexdigit())).then_some(s)
}

/// The commit `rev` names, as GitHub reads a `ref`, `sha` or branch in a
/// URL: a branch, then a tag, then a commit id (`HEAD`: the default branch).
pub(super) fn commit_id(git_dir: &Path, rev: &str) -> Option<String> {
    let rev = revision(rev)?;
    if rev == "HEAD" {
        let head = git_text(git_dir, &["symbolic-ref", "-q", "HEAD"])?;
        return ref_commit(git_dir, head.trim());
    }
    ref_commit(git_dir, &format!("refs/heads/{rev}"))
        .or_else(|| ref_commit(git_dir, &format!("refs/tags/{rev}")))
        .or_else(|| peel(git_dir, rev))
}

fn not_found() -> Reply {
    Reply::error(StatusCode::NOT_FOUND, "Not Found")
}

/// GitHub's answer to a ref it cannot resolve in a listing or a commit.
fn no_commit(rev: &str) -> Reply {
    Reply::error(
        StatusCode::UNPROCESSABLE_ENTITY,
        &format!("No commit found for SHA: {rev}"),
    )
}

/// Reads `what` from the bare repository `git_dir` of `full_name`.
pub(crate) fn read(git_dir: &Path, full_name: &str, what: &GitRead) -> Result<Read, Reply> {
    let repo_url = format!("{API_BASE}/repos/{full_name}");
    let html = format!("https://github.com/{full_name}");
    let urls = Urls {
        repo: &repo_url,
        html: &html,
        full_name,
    };
    match what {
        GitRead::Readme { reference } => {
            let rev = reference.as_deref().unwrap_or("HEAD");
            let commit = commit_id(git_dir, rev).ok_or_else(not_found)?;
            let entries = tree_entries(git_dir, &commit, "").ok_or_else(not_found)?;
            // GitHub's preferred README: the first README* at the root.
            let readme = entries
                .iter()
                .filter(|e| e.kind == "blob")
                .find(|e| e.name.to_ascii_lowercase().starts_with("readme"))
                .ok_or_else(not_found)?;
            Ok(Read::One(file_json(git_dir, &urls, rev, readme)?))
        }
        GitRead::Contents { path, reference } => {
            let rev = reference.as_deref().unwrap_or("HEAD");
            let path = tree_path(path).ok_or_else(not_found)?;
            let commit = commit_id(git_dir, rev).ok_or_else(not_found)?;
            if path.is_empty() {
                let entries = tree_entries(git_dir, &commit, "").ok_or_else(not_found)?;
                return Ok(Read::One(Value::Array(
                    entries.iter().map(|e| entry_json(&urls, rev, e)).collect(),
                )));
            }
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
            let entries = tree_entries(git_dir, &commit, parent).ok_or_else(not_found)?;
            let entry = entries
                .into_iter()
                .find(|e| e.name == name)
                .ok_or_else(not_found)?;
            if entry.kind == "tree" {
                let inner = tree_entries(git_dir, &commit, path).ok_or_else(not_found)?;
                Ok(Read::One(Value::Array(
                    inner.iter().map(|e| entry_json(&urls, rev, e)).collect(),
                )))
            } else {
                Ok(Read::One(file_json(git_dir, &urls, rev, &entry)?))
            }
        }
        GitRead::Branches => {
            let out = git_text(
                git_dir,
                &[
                    "for-each-ref",
                    "--sort=refname",
                    "--format=%(refname:strip=2) %(objectname)",
                    "refs/heads/",
                ],
            )
            .unwrap_or_default();
            Ok(Read::List(
                out.lines()
                    .filter_map(|l| l.split_once(' '))
                    .map(|(name, sha)| {
                        json!({"name": name,
                               "commit": {"sha": sha, "url": format!("{repo_url}/commits/{sha}")},
                               "protected": false})
                    })
                    .collect(),
            ))
        }
        GitRead::Branch(name) => {
            let name = revision(name).ok_or_else(branch_not_found)?;
            let sha =
                ref_commit(git_dir, &format!("refs/heads/{name}")).ok_or_else(branch_not_found)?;
            let commit = commits(git_dir, &urls, &["-n", "1", &sha])
                .and_then(|mut c| c.pop())
                .ok_or_else(branch_not_found)?;
            Ok(Read::One(json!({
                "name": name,
                "commit": commit,
                "_links": {"self": format!("{repo_url}/branches/{name}"),
                           "html": format!("{html}/tree/{name}")},
                "protected": false,
                "protection": {"enabled": false,
                               "required_status_checks": {"enforcement_level": "off",
                                                          "contexts": [], "checks": []}},
                "protection_url": format!("{repo_url}/branches/{name}/protection"),
            })))
        }
        GitRead::Commits { from } => {
            let rev = from.as_deref().unwrap_or("HEAD");
            let sha = commit_id(git_dir, rev).ok_or_else(|| no_commit(rev))?;
            // An empty repository has no HEAD: GitHub answers 409 there.
            let list = commits(git_dir, &urls, &["-n", "1000", &sha]).unwrap_or_default();
            Ok(Read::List(list))
        }
        GitRead::Commit(rev) => {
            let sha = commit_id(git_dir, rev).ok_or_else(|| no_commit(rev))?;
            let mut commit = commits(git_dir, &urls, &["-n", "1", &sha])
                .and_then(|mut c| c.pop())
                .ok_or_else(|| no_commit(rev))?;
            let parent = git_text(
                git_dir,
                &["rev-parse", "--verify", "--quiet", &format!("{sha}^")],
            )
            .map(|s| s.trim().to_owned());
            let files = match &parent {
                Some(p) if !p.is_empty() => diff_files(git_dir, &urls, p, &sha),
                _ => diff_files(git_dir, &urls, EMPTY_TREE, &sha),
            };
            let (additions, deletions) = files.iter().fold((0, 0), |(a, d), f| {
                (
                    a + f["additions"].as_u64().unwrap_or(0),
                    d + f["deletions"].as_u64().unwrap_or(0),
                )
            });
            commit["stats"] = json!({"total": additions + deletions, "additions": additions, "deletions": deletions});
            commit["files"] = Value::Array(files);
            Ok(Read::One(commit))
        }
        GitRead::Compare(spec) => {
            let (base, head) = spec.split_once("...").ok_or_else(not_found)?;
            let (base, head) = (
                commit_id(git_dir, base).ok_or_else(not_found)?,
                commit_id(git_dir, head).ok_or_else(not_found)?,
            );
            let counts = git_text(
                git_dir,
                &[
                    "rev-list",
                    "--left-right",
                    "--count",
                    &format!("{base}...{head}"),
                ],
            )
            .ok_or_else(not_found)?;
            let mut n = counts
                .split_whitespace()
                .filter_map(|c| c.parse::<u64>().ok());
            let (behind, ahead) = (n.next().unwrap_or(0), n.next().unwrap_or(0));
            let status = match (ahead, behind) {
                (0, 0) => "identical",
                (_, 0) => "ahead",
                (0, _) => "behind",
                _ => "diverged",
            };
            let merge_base = git_text(git_dir, &["merge-base", &base, &head])
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|| base.clone());
            let one = |sha: &str| {
                commits(git_dir, &urls, &["-n", "1", sha])
                    .and_then(|mut c| c.pop())
                    .unwrap_or(Value::Null)
            };
            let list = commits(
                git_dir,
                &urls,
                &["--reverse", "-n", "250", &format!("{merge_base}..{head}")],
            )
            .unwrap_or_default();
            Ok(Read::One(json!({
                "url": format!("{repo_url}/compare/{spec}"),
                "html_url": format!("{html}/compare/{spec}"),
                "permalink_url": format!("{html}/compare/{full_name}:{base}...{full_name}:{head}"),
                "diff_url": format!("{html}/compare/{spec}.diff"),
                "patch_url": format!("{html}/compare/{spec}.patch"),
                "base_commit": one(&base),
                "merge_base_commit": one(&merge_base),
                "status": status,
                "ahead_by": ahead,
                "behind_by": behind,
                "total_commits": ahead,
                "commits": list,
                "files": diff_files(git_dir, &urls, &merge_base, &head),
            })))
        }
        GitRead::PullFiles { base, head } => {
            let merge_base = git_text(git_dir, &["merge-base", base, head])
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|| base.clone());
            Ok(Read::List(diff_files_up_to(
                git_dir,
                &urls,
                &merge_base,
                head,
                MAX_PULL_FILES,
            )))
        }
        GitRead::Object(kind, name) => git_object(git_dir, &urls, kind, name),
        GitRead::PullCommits { base, head } => Ok(Read::List(
            commits(
                git_dir,
                &urls,
                &["--reverse", "-n", "250", &format!("{base}..{head}")],
            )
            .unwrap_or_default(),
        )),
    }
}

/// A text media type a client may ask a commit, a comparison or a pull
/// request in (REST description: `application/vnd.github.diff`,
/// `.patch`, and `.sha` for a commit; clients such as gh send the `v3`
/// form, `application/vnd.github.v3.diff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Media {
    Diff,
    Patch,
    Sha,
}

impl Media {
    /// The text media type the `Accept` values ask for, if any.
    pub(crate) fn from_accept(values: &[&str]) -> Option<Self> {
        values
            .iter()
            .flat_map(|v| v.split(','))
            .filter_map(|item| {
                let name = item.split(';').next()?.trim().to_ascii_lowercase();
                let kind = name
                    .strip_prefix("application/vnd.github.v3.")
                    .or_else(|| name.strip_prefix("application/vnd.github."))?;
                match kind {
                    "diff" => Some(Self::Diff),
                    "patch" => Some(Self::Patch),
                    "sha" => Some(Self::Sha),
                    _ => None,
                }
            })
            .next()
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Self::Diff => "application/vnd.github.diff; charset=utf-8",
            Self::Patch => "application/vnd.github.patch; charset=utf-8",
            Self::Sha => "application/vnd.github.sha; charset=utf-8",
        }
    }
}

/// What a text media type is asked of.
pub(crate) enum MediaOf<'a> {
    /// A pull request: from the merge base of `base` and `head` to `head`.
    Pull { base: &'a str, head: &'a str },
    /// A commit (any revision), against its first parent.
    Commit(&'a str),
    /// `{base}...{head}`.
    Compare(&'a str),
}

/// The diff, patch or sha text of `of` in `media`, as git writes it (the
/// format GitHub serves: `diff --git` sections; `format-patch` mails).
/// `None`: the media type does not apply (a pull request's sha), answer JSON.
pub(crate) fn media_text(
    git_dir: &Path,
    of: &MediaOf<'_>,
    media: Media,
) -> Option<Result<String, Reply>> {
    let range = |base: &str, head: &str| {
        let merge_base = git_text(git_dir, &["merge-base", base, head])
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|| base.to_owned());
        (merge_base, head.to_owned())
    };
    let (from, to) = match of {
        MediaOf::Pull { base, head } => {
            if media == Media::Sha {
                return None;
            }
            range(base, head)
        }
        MediaOf::Commit(rev) => {
            let Some(sha) = commit_id(git_dir, rev) else {
                return Some(Err(no_commit(rev)));
            };
            let text = match media {
                Media::Sha => Some(sha),
                // Against the first parent (a merge's diff-tree is empty);
                // a root commit's whole tree.
                Media::Diff => {
                    let first_parent = format!("{sha}^1");
                    match git_text(git_dir, &["rev-parse", "-q", "--verify", &first_parent]) {
                        Some(parent) => git_text(
                            git_dir,
                            &["diff", "--no-color", "--no-ext-diff", parent.trim(), &sha],
                        ),
                        None => git_text(
                            git_dir,
                            &[
                                "diff-tree",
                                "-p",
                                "--root",
                                "--no-commit-id",
                                "--no-color",
                                &sha,
                            ],
                        ),
                    }
                }
                Media::Patch => git_text(
                    git_dir,
                    &["format-patch", "--stdout", "--no-color", "-1", &sha],
                ),
            };
            return Some(text.ok_or_else(|| no_commit(rev)));
        }
        MediaOf::Compare(spec) => {
            if media == Media::Sha {
                return None;
            }
            let resolved = spec.split_once("...").and_then(|(base, head)| {
                Some((commit_id(git_dir, base)?, commit_id(git_dir, head)?))
            });
            let Some((base, head)) = resolved else {
                return Some(Err(not_found()));
            };
            range(&base, &head)
        }
    };
    let text = match media {
        Media::Diff => git_text(
            git_dir,
            &["diff", "--no-color", "--no-ext-diff", &from, &to],
        ),
        _ => git_text(
            git_dir,
            &[
                "format-patch",
                "--stdout",
                "--no-color",
                &format!("{from}..{to}"),
            ],
        ),
    };
    Some(text.ok_or_else(not_found))
}

/// A full object id: 40 hex digits (what the git database routes take).
fn object_id(s: &str) -> Option<&str> {
    (s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())).then_some(s)
}

/// `GET …/git/{trees,blobs,commits}/{sha}`, `…/git/ref/{ref}`,
/// `…/git/matching-refs/{prefix}` (`git-tree`, `blob`, `git-commit`,
/// `git-ref` in the REST description).
fn git_object(git_dir: &Path, u: &Urls<'_>, kind: &str, name: &str) -> Result<Read, Reply> {
    let typed = |want: &str| -> Result<&str, Reply> {
        let sha = object_id(name).ok_or_else(not_found)?;
        let found = git_text(git_dir, &["cat-file", "-t", sha]).ok_or_else(not_found)?;
        if found.trim() == want {
            Ok(sha)
        } else {
            Err(not_found())
        }
    };
    match kind {
        "blobs" => {
            let sha = typed("blob")?;
            let bytes = git(git_dir, &["cat-file", "blob", sha]).ok_or_else(not_found)?;
            let content = base64::engine::general_purpose::STANDARD.encode(&bytes);
            Ok(Read::One(
                json!({"sha": sha, "node_id": format!("B_{sha}"), "size": bytes.len(),
                                "url": format!("{}/git/blobs/{sha}", u.repo),
                                "content": content, "encoding": "base64"}),
            ))
        }
        "trees" => {
            let sha = typed("tree")?;
            let entries = tree_entries(git_dir, sha, "").ok_or_else(not_found)?;
            let tree: Vec<Value> = entries
                .iter()
                .map(|e| {
                    let mut v = json!({"path": e.name, "mode": e.mode, "type": e.kind, "sha": e.sha,
                                       "url": format!("{}/git/{}s/{}", u.repo, e.kind, e.sha)});
                    if e.kind == "blob" {
                        v["size"] = json!(e.size);
                    }
                    v
                })
                .collect();
            Ok(Read::One(
                json!({"sha": sha, "url": format!("{}/git/trees/{sha}", u.repo),
                                "tree": tree, "truncated": false}),
            ))
        }
        "commits" => {
            let sha = typed("commit")?;
            let mut c = commits(git_dir, u, &["-n", "1", sha])
                .and_then(|mut c| c.pop())
                .ok_or_else(not_found)?;
            let mut inner = c["commit"].take();
            inner["sha"] = json!(sha);
            inner["html_url"] = json!(format!("{}/commit/{sha}", u.html));
            inner["parents"] = c["parents"].take();
            Ok(Read::One(inner))
        }
        "ref" | "matching-refs" => {
            // A prefix may end in `/` (`heads/`); the name itself is plain.
            revision(name.trim_end_matches('/')).ok_or_else(not_found)?;
            let out = git_text(
                git_dir,
                &[
                    "for-each-ref",
                    "--format=%(refname) %(objectname) %(objecttype)",
                    "refs/",
                ],
            )
            .unwrap_or_default();
            let exact = format!("refs/{name}");
            let refs: Vec<Value> = out
                .lines()
                .filter_map(|l| {
                    let mut f = l.split(' ');
                    Some((f.next()?, f.next()?, f.next()?))
                })
                // `ref` names one ref exactly; `matching-refs` is a prefix.
                .filter(|(r, _, _)| {
                    if kind == "ref" {
                        *r == exact
                    } else {
                        r.starts_with(&exact)
                    }
                })
                .map(|(r, sha, t)| {
                    json!({"ref": r, "node_id": format!("REF_{sha}"),
                           "url": format!("{}/git/{r}", u.repo),
                           "object": {"sha": sha, "type": t,
                                      "url": format!("{}/git/{t}s/{sha}", u.repo)}})
                })
                .collect();
            if kind == "ref" {
                refs.into_iter().next().map(Read::One).ok_or_else(not_found)
            } else {
                Ok(Read::One(Value::Array(refs)))
            }
        }
        _ => Err(not_found()),
    }
}

fn branch_not_found() -> Reply {
    Reply::error(StatusCode::NOT_FOUND, "Branch not found")
}

/// git's empty tree: what a root commit is compared with.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

struct Urls<'a> {
    repo: &'a str,
    html: &'a str,
    full_name: &'a str,
}

struct Entry {
    kind: String,
    sha: String,
    size: u64,
    name: String,
    path: String,
    mode: String,
}

/// The entries of the directory `dir` (empty: the root) in `commit`.
fn tree_entries(git_dir: &Path, commit: &str, dir: &str) -> Option<Vec<Entry>> {
    let tree = if dir.is_empty() {
        format!("{commit}^{{tree}}")
    } else {
        format!("{commit}:{dir}")
    };
    let out = git(git_dir, &["ls-tree", "-l", "-z", &tree])?;
    Some(
        out.split(|b| *b == 0)
            .filter(|l| !l.is_empty())
            .filter_map(|line| {
                let line = std::str::from_utf8(line).ok()?;
                let (meta, name) = line.split_once('\t')?;
                let mut meta = meta.split_whitespace();
                let mode = meta.next()?.to_owned();
                let kind = meta.next()?.to_owned();
                let sha = meta.next()?.to_owned();
                let size = meta.next()?.parse().unwrap_or(0);
                let path = if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                };
                Some(Entry {
                    kind,
                    sha,
                    size,
                    name: name.to_owned(),
                    path,
                    mode,
                })
            })
            .collect(),
    )
}

fn entry_type(e: &Entry) -> &'static str {
    match (e.kind.as_str(), e.mode.as_str()) {
        ("tree", _) => "dir",
        ("commit", _) => "submodule",
        (_, "120000") => "symlink",
        _ => "file",
    }
}

fn entry_json(u: &Urls<'_>, rev: &str, e: &Entry) -> Value {
    let kind = entry_type(e);
    let url = format!("{}/contents/{}?ref={rev}", u.repo, e.path);
    let git_url = match kind {
        "dir" => format!("{}/git/trees/{}", u.repo, e.sha),
        _ => format!("{}/git/blobs/{}", u.repo, e.sha),
    };
    let html_url = format!(
        "{}/{}/{rev}/{}",
        u.html,
        if kind == "dir" { "tree" } else { "blob" },
        e.path
    );
    let download = (kind == "file").then(|| {
        format!(
            "https://raw.githubusercontent.com/{}/{rev}/{}",
            u.full_name, e.path
        )
    });
    json!({"type": kind, "size": if kind == "dir" { 0 } else { e.size },
           "name": e.name, "path": e.path, "sha": e.sha,
           "url": url, "git_url": git_url, "html_url": html_url, "download_url": download,
           "_links": {"self": url, "git": git_url, "html": html_url}})
}

/// A file's content object: base64 in lines of 60, as GitHub sends it.
fn file_json(git_dir: &Path, u: &Urls<'_>, rev: &str, e: &Entry) -> Result<Value, Reply> {
    let bytes = git(git_dir, &["cat-file", "blob", &e.sha]).ok_or_else(not_found)?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let lines: Vec<&str> = encoded
        .as_bytes()
        .chunks(60)
        .filter_map(|c| std::str::from_utf8(c).ok())
        .collect();
    let mut content = lines.join("\n");
    content.push('\n');
    let mut v = entry_json(u, rev, e);
    v["encoding"] = json!("base64");
    v["content"] = json!(content);
    Ok(v)
}

/// Commits as `git log` lists them with `args`, in GitHub's commit shape.
fn commits(git_dir: &Path, u: &Urls<'_>, args: &[&str]) -> Option<Vec<Value>> {
    // Ten NUL-separated fields a commit, and `-z` puts a NUL between
    // commits: git allows no NUL in a commit's headers or message, so the
    // tokens group by ten whatever the names and messages hold.
    let format = "--format=%H%x00%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B";
    let mut all = vec!["log", "-z", format];
    all.extend_from_slice(args);
    let out = git_text(git_dir, &all)?;
    let tokens: Vec<&str> = out.split('\0').collect();
    Some(
        tokens
            .chunks_exact(10)
            .filter_map(|f| {
                let [sha, tree, parents, an, ae, ad, cn, ce, cd, message] = f else {
                    return None;
                };
                let parents: Vec<Value> = parents
                    .split_whitespace()
                    .map(|p| {
                        json!({"sha": p, "url": format!("{}/commits/{p}", u.repo),
                               "html_url": format!("{}/commit/{p}", u.html)})
                    })
                    .collect();
                Some(json!({
                    "sha": sha,
                    "node_id": format!("C_{sha}"),
                    "commit": {
                        "author": {"name": an, "email": ae, "date": utc(ad)},
                        "committer": {"name": cn, "email": ce, "date": utc(cd)},
                        "message": message.trim_end_matches('\n'),
                        "tree": {"sha": tree, "url": format!("{}/git/trees/{tree}", u.repo)},
                        "url": format!("{}/git/commits/{sha}", u.repo),
                        "comment_count": 0,
                        "verification": {"verified": false, "reason": "unsigned",
                                         "signature": null, "payload": null},
                    },
                    "url": format!("{}/commits/{sha}", u.repo),
                    "html_url": format!("{}/commit/{sha}", u.html),
                    "comments_url": format!("{}/commits/{sha}/comments", u.repo),
                    "author": null,
                    "committer": null,
                    "parents": parents,
                }))
            })
            .collect(),
    )
}

/// git's ISO date (`2026-12-03T06:00:00+00:00`) as GitHub writes it (`…Z`).
fn utc(date: &str) -> String {
    date.strip_suffix("+00:00")
        .map(|d| format!("{d}Z"))
        .unwrap_or_else(|| date.to_owned())
}

/// The files changed from `from` to `to` (`diff-entry`): status, counts,
/// and the patch of text files.
/// The most files GitHub lists for a commit or a comparison (a pull
/// request's list pages up to 3 000).
const MAX_FILES: usize = 300;
const MAX_PULL_FILES: usize = 3000;

fn diff_files(git_dir: &Path, u: &Urls<'_>, from: &str, to: &str) -> Vec<Value> {
    diff_files_up_to(git_dir, u, from, to, MAX_FILES)
}

fn diff_files_up_to(git_dir: &Path, u: &Urls<'_>, from: &str, to: &str, max: usize) -> Vec<Value> {
    let statuses = git_text(
        git_dir,
        &["diff", "--name-status", "-z", "--no-renames", from, to],
    )
    .unwrap_or_default();
    let numstat = git_text(
        git_dir,
        &["diff", "--numstat", "-z", "--no-renames", from, to],
    )
    .unwrap_or_default();
    let counts: Vec<(u64, u64, String)> = numstat
        .split('\0')
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let mut p = l.splitn(3, '\t');
            let a = p.next()?.parse().unwrap_or(0);
            let d = p.next()?.parse().unwrap_or(0);
            Some((a, d, p.next()?.to_owned()))
        })
        .collect();
    let mut fields = statuses.split('\0').filter(|s| !s.is_empty());
    let mut out = Vec::new();
    while let (Some(code), Some(name)) = (fields.next(), fields.next()) {
        if out.len() == max {
            break;
        }
        let status = match code {
            "A" => "added",
            "D" => "removed",
            "M" => "modified",
            "T" => "changed",
            _ => "modified",
        };
        let (additions, deletions) = counts
            .iter()
            .find(|(_, _, n)| n == name)
            .map_or((0, 0), |(a, d, _)| (*a, *d));
        let patch = git_text(
            git_dir,
            &[
                "diff",
                "--no-renames",
                "--format=",
                "-U3",
                from,
                to,
                "--",
                name,
            ],
        )
        .and_then(|d| d.split_once("\n@@").map(|(_, rest)| format!("@@{rest}")));
        let blob = git_text(
            git_dir,
            &["rev-parse", "--verify", "--quiet", &format!("{to}:{name}")],
        )
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
        let mut entry = json!({
            "sha": blob, "filename": name, "status": status,
            "additions": additions, "deletions": deletions, "changes": additions + deletions,
            "blob_url": format!("{}/blob/{to}/{name}", u.html),
            "raw_url": format!("{}/raw/{to}/{name}", u.html),
            "contents_url": format!("{}/contents/{name}?ref={to}", u.repo),
        });
        if let Some(patch) = patch {
            entry["patch"] = json!(patch.trim_end_matches('\n'));
        }
        out.push(entry);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_media_types_are_read_from_accept_as_github_names_them() {
        for (accept, want) in [
            (vec!["application/vnd.github.v3.diff"], Some(Media::Diff)),
            (vec!["application/vnd.github.diff"], Some(Media::Diff)),
            (
                vec!["Application/VND.GitHub.v3.Patch; charset=utf-8"],
                Some(Media::Patch),
            ),
            (
                vec!["application/json, application/vnd.github.sha"],
                Some(Media::Sha),
            ),
            (vec!["application/vnd.github+json"], None),
            (vec!["application/vnd.github.v3+json"], None),
            (vec!["application/vnd.github.raw"], None),
            (vec!["text/x-diff"], None),
            (vec![], None),
        ] {
            assert_eq!(Media::from_accept(&accept), want, "{accept:?}");
        }
    }

    #[test]
    fn revisions_and_paths_are_what_git_takes_as_such_only() {
        for (s, ok) in [
            ("main", true),
            ("feature/x-1", true),
            ("a1b2c3", true),
            ("v1.2", true),
            ("", false),
            ("-c", false),
            ("--output=/tmp/x", false),
            ("main..evil", false),
            ("main@{1}", false),
            ("/etc", false),
            ("main/", false),
            ("a b", false),
            ("HEAD^", false),
            ("HEAD~1", false),
            ("x:y", false),
        ] {
            assert_eq!(revision(s).is_some(), ok, "{s:?}");
        }
        for (s, ok) in [
            ("", true),
            ("src/lib.rs", true),
            ("/src/", true),
            ("a/../b", false),
            ("./a", false),
            ("a//b", false),
            ("a\0b", false),
        ] {
            assert_eq!(tree_path(s).is_some(), ok, "{s:?}");
        }
    }

    #[test]
    fn dates_are_written_as_github_writes_them() {
        assert_eq!(utc("2026-12-03T06:00:00+00:00"), "2026-12-03T06:00:00Z");
        assert_eq!(
            utc("2026-12-03T06:00:00+08:00"),
            "2026-12-03T06:00:00+08:00"
        );
    }
}
