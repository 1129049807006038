//! A pull request's fields that come from git and the checks on its
//! commits, in GraphQL's shapes (`octokit/graphql-schema`: `PullRequest`
//! `additions`/`deletions`/`changedFiles`, `commits` of `PullRequestCommit`
//! with its `Commit` and the commit's `statusCheckRollup` of `CheckRun`s,
//! `files` of `PullRequestChangedFile`, `reviews`/`latestReviews` of
//! `PullRequestReview`), built from what the REST side reads from git
//! (`commit` and `diff-entry` objects) and the model. Values carry
//! `__typename`, so fragments on a union's members (`... on CheckRun`,
//! `... on StatusContext`) apply as on GitHub.

use serde_json::{json, Value};

use super::super::model::{node_id, Job, Model, Repo};

/// The key marking a JSON part as needing a token permission (read) to be
/// seen: GitHub answers FORBIDDEN "Resource not accessible by integration"
/// at a check run without `checks`, at its workflow run without `actions`.
pub(crate) const REQUIRES: &str = "__requires";

/// The key holding a JSON connection's nodes, which the executor pages by
/// the field's `first`/`last`/`after`/`before` like any connection.
pub(crate) const CONNECTION: &str = "__nodes";

/// A pull request's commits (oldest first) and changed files, as
/// `GET …/pulls/{n}/commits` and `…/files` list them.
#[derive(Debug, Clone, Default)]
pub(crate) struct PullFromGit {
    pub commits: Vec<Value>,
    pub files: Vec<Value>,
}

impl PullFromGit {
    fn sum(&self, key: &str) -> u64 {
        self.files.iter().filter_map(|f| f[key].as_u64()).sum()
    }

    pub(crate) fn additions(&self) -> u64 {
        self.sum("additions")
    }

    pub(crate) fn deletions(&self) -> u64 {
        self.sum("deletions")
    }

    /// `PullRequestCommit`s, each with its `Commit`.
    pub(crate) fn commit_nodes(&self, model: &Model, repo: &Repo, number: u64) -> Vec<Value> {
        self.commits
            .iter()
            .map(|c| {
                let sha = c["sha"].as_str().unwrap_or_default();
                json!({
                    "__typename": "PullRequestCommit",
                    "id": format!("PURC_{}", &sha[..sha.len().min(12)]),
                    "url": format!("{}/pull/{number}/commits/{sha}", repo.html_url()),
                    "commit": commit(model, repo, c),
                })
            })
            .collect()
    }

    /// `PullRequestChangedFile`s (`changeType` from the diff entry's
    /// `status`).
    pub(crate) fn file_nodes(&self) -> Vec<Value> {
        self.files
            .iter()
            .map(|f| {
                let change = match f["status"].as_str().unwrap_or_default() {
                    "added" => "ADDED",
                    "removed" => "DELETED",
                    "renamed" => "RENAMED",
                    "copied" => "COPIED",
                    _ => "MODIFIED",
                };
                json!({
                    "__typename": "PullRequestChangedFile",
                    "path": f["filename"],
                    "additions": f["additions"],
                    "deletions": f["deletions"],
                    "changeType": change,
                })
            })
            .collect()
    }
}

/// A `Commit` from a REST `commit` object, with the checks run on it.
fn commit(model: &Model, repo: &Repo, c: &Value) -> Value {
    let sha = c["sha"].as_str().unwrap_or_default();
    let git = &c["commit"];
    let message = git["message"].as_str().unwrap_or_default();
    let (headline, body) = message.split_once('\n').unwrap_or((message, ""));
    let person = |who: &Value| {
        json!({"__typename": "GitActor", "name": who["name"], "email": who["email"],
               "date": who["date"], "user": Value::Null})
    };
    json!({
        "__typename": "Commit",
        "id": format!("C_{sha}"),
        "oid": sha,
        "abbreviatedOid": &sha[..sha.len().min(7)],
        "message": message,
        "messageHeadline": headline,
        "messageBody": body.trim_start_matches('\n'),
        "committedDate": git["committer"]["date"],
        "authoredDate": git["author"]["date"],
        "url": format!("{}/commit/{sha}", repo.html_url()),
        "author": person(&git["author"]),
        "committer": person(&git["committer"]),
        "authors": {CONNECTION: [person(&git["author"])]},
        "statusCheckRollup": status_check_rollup(model, repo, sha),
    })
}

/// The checks on commit `sha` (`StatusCheckRollup`), `null` when none ran,
/// as on GitHub. Its state: failing if any check failed, pending while any
/// is not complete, else success.
fn status_check_rollup(model: &Model, repo: &Repo, sha: &str) -> Value {
    let jobs: Vec<&Job> = model
        .jobs
        .iter()
        .filter(|j| j.repo_id == repo.id && j.head_sha == sha)
        .collect();
    if jobs.is_empty() {
        return Value::Null;
    }
    let runs: Vec<Value> = jobs.iter().map(|j| check_run(repo, j)).collect();
    let failed = runs.iter().any(|r| {
        matches!(
            r["conclusion"].as_str(),
            Some("FAILURE" | "TIMED_OUT" | "CANCELLED" | "STARTUP_FAILURE" | "ACTION_REQUIRED")
        )
    });
    let pending = runs.iter().any(|r| r["status"] != "COMPLETED");
    let state = match (failed, pending) {
        (true, _) => "FAILURE",
        (false, true) => "PENDING",
        (false, false) => "SUCCESS",
    };
    json!({
        "__typename": "StatusCheckRollup",
        "id": format!("SCR_{}", &sha[..sha.len().min(12)]),
        "state": state,
        "contexts": {CONNECTION: runs},
    })
}

/// An Actions job as the `CheckRun` GraphQL shows (enum values upper case;
/// its suite is the run's, of the run's workflow).
fn check_run(repo: &Repo, job: &Job) -> Value {
    // REST's state of the job, in GraphQL's upper-case enum values.
    let (status, conclusion, completed_at) = Model::job_state(job);
    let status = status.to_ascii_uppercase();
    let conclusion = conclusion
        .as_str()
        .map_or(Value::Null, |c| json!(c.to_ascii_uppercase()));
    let at = crate::time::iso8601(job.created_at);
    let url = format!(
        "{}/actions/runs/{}/job/{}",
        repo.html_url(),
        job.run_id,
        job.id
    );
    json!({
        "__typename": "CheckRun",
        REQUIRES: "checks",
        "id": node_id("CR", job.id),
        "databaseId": job.id,
        "name": job.name,
        "status": status,
        "conclusion": conclusion,
        "startedAt": at,
        "completedAt": completed_at,
        "detailsUrl": url,
        "url": url,
        "isRequired": false,
        "checkSuite": {
            "__typename": "CheckSuite",
            "databaseId": job.run_id,
            "workflowRun": {
                "__typename": "WorkflowRun",
                REQUIRES: "actions",
                "databaseId": job.run_id,
                "event": "push",
                "workflow": {"__typename": "Workflow", "name": job.workflow.as_deref().map_or(job.name.as_str(), workflow_label)},
            },
        },
    })
}

/// A workflow's name as the run shows it when its file is not read here:
/// the file's name without the directory and extension (GitHub shows the
/// file's path when a workflow has no `name`).
fn workflow_label(path: &str) -> &str {
    path.rsplit('/')
        .next()
        .and_then(|f| f.strip_suffix(".yml").or_else(|| f.strip_suffix(".yaml")))
        .unwrap_or(path)
}

/// The reviews of pull request `number`, oldest first
/// (`PullRequestReview`), on its head commit.
pub(crate) fn review_nodes(model: &Model, repo: &Repo, number: u64, head_sha: &str) -> Vec<Value> {
    model
        .reviews
        .iter()
        .filter(|r| r.repo_id == repo.id && r.number == number)
        .map(|r| {
            let typename = if r.author.ends_with("[bot]") {
                "Bot"
            } else {
                "User"
            };
            json!({
                "__typename": "PullRequestReview",
                "id": node_id("PRR", r.id),
                "databaseId": r.id,
                "author": {"__typename": typename, "login": r.author},
                "authorAssociation": "MEMBER",
                "body": r.body,
                "state": r.state,
                "submittedAt": crate::time::iso8601(r.submitted_at),
                "createdAt": crate::time::iso8601(r.submitted_at),
                "includesCreatedEdit": false,
                "url": format!("{}/pull/{number}#pullrequestreview-{}", repo.html_url(), r.id),
                "commit": {"__typename": "Commit", "oid": head_sha},
                "reactionGroups": [],
            })
        })
        .collect()
}

/// Each reviewer's latest review (`latestReviews`), in the order of those.
pub(crate) fn latest(reviews: Vec<Value>) -> Vec<Value> {
    let mut latest: Vec<Value> = Vec::new();
    for review in reviews {
        latest.retain(|r| r["author"]["login"] != review["author"]["login"]);
        latest.push(review);
    }
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollup_fails_on_any_failure_waits_on_any_pending_and_is_null_without_checks() {
        let mut model = Model::new();
        let repo_id = model.add_repo("acme", "widgets", "main");
        let repo = model.repo_by_id(repo_id).unwrap().clone();
        assert_eq!(status_check_rollup(&model, &repo, "abc"), Value::Null);
        let job = |id: u64, conclusion: &str| Job {
            id,
            run_id: id + 100,
            repo_id,
            name: format!("job{id}"),
            head_sha: "abc".into(),
            conclusion: conclusion.into(),
            logs: String::new(),
            created_at: 1_700_000_000,
            workflow: Some(".github/workflows/ci.yml".into()),
            annotations: Vec::new(),
        };
        for (conclusions, state) in [
            (&["success"][..], "SUCCESS"),
            (&["success", "in_progress"][..], "PENDING"),
            (&["failure", "in_progress"][..], "FAILURE"),
            (&["success", "timed_out"][..], "FAILURE"),
            (&["skipped", "neutral"][..], "SUCCESS"),
        ] {
            model.jobs = conclusions
                .iter()
                .enumerate()
                .map(|(i, c)| job(i as u64, c))
                .collect();
            let rollup = status_check_rollup(&model, &repo, "abc");
            assert_eq!(rollup["state"], state, "{conclusions:?}");
            let runs = rollup["contexts"][CONNECTION].as_array().unwrap();
            assert_eq!(runs.len(), conclusions.len());
            assert_eq!(runs[0]["__typename"], "CheckRun");
            assert_eq!(runs[0][REQUIRES], "checks");
        }
        let run = check_run(&repo, &job(1, "in_progress"));
        assert_eq!(
            (run["status"].as_str(), &run["conclusion"]),
            (Some("IN_PROGRESS"), &Value::Null)
        );
        assert_eq!(run["checkSuite"]["workflowRun"]["workflow"]["name"], "ci");
    }

    #[test]
    fn latest_reviews_keep_each_reviewers_last() {
        let review = |who: &str, state: &str| json!({"author": {"login": who}, "state": state});
        let got = latest(vec![
            review("bob", "CHANGES_REQUESTED"),
            review("carol", "COMMENTED"),
            review("bob", "APPROVED"),
        ]);
        assert_eq!(
            got,
            vec![review("carol", "COMMENTED"), review("bob", "APPROVED")]
        );
    }
}
