//! The payload fields the mapping reads (GitHub sends many more; unknown
//! fields are ignored, missing required ones make the delivery unmappable).

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub(super) struct User {
    pub(super) id: u64,
    pub(super) login: String,
    #[serde(rename = "type", default)]
    pub(super) kind: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Repository {
    pub(super) full_name: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Label {
    pub(super) name: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Issue {
    pub(super) id: u64,
    pub(super) number: u64,
    #[serde(default)]
    pub(super) title: String,
    #[serde(default)]
    pub(super) body: Option<String>,
    #[serde(default)]
    pub(super) labels: Vec<Label>,
    #[serde(default)]
    pub(super) pull_request: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Branch {
    #[serde(rename = "ref")]
    pub(super) name: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Pull {
    pub(super) id: u64,
    pub(super) number: u64,
    #[serde(default)]
    pub(super) title: String,
    #[serde(default)]
    pub(super) body: Option<String>,
    #[serde(default)]
    pub(super) labels: Vec<Label>,
    pub(super) base: Branch,
    #[serde(default)]
    pub(super) head: Option<Branch>,
    /// Who opened it.
    #[serde(default)]
    pub(super) user: Option<User>,
    #[serde(default)]
    pub(super) merged: bool,
    #[serde(default)]
    pub(super) html_url: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Comment {
    pub(super) id: u64,
    #[serde(default)]
    pub(super) body: String,
    /// Set when an app wrote the comment, also on a person's behalf.
    #[serde(default)]
    pub(super) performed_via_github_app: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Review {
    pub(super) id: u64,
    #[serde(default)]
    pub(super) body: Option<String>,
    #[serde(default)]
    pub(super) state: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct PullRef {
    pub(super) number: u64,
}

#[derive(Debug, Deserialize)]
pub(super) struct CiRun {
    pub(super) id: u64,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) conclusion: Option<String>,
    #[serde(default)]
    pub(super) head_branch: Option<String>,
    #[serde(default)]
    pub(super) pull_requests: Vec<PullRef>,
    #[serde(default)]
    pub(super) check_suite: Option<Box<CiRun>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Envelope {
    pub(super) sender: User,
    pub(super) repository: Repository,
    #[serde(default)]
    pub(super) issue: Option<Issue>,
    #[serde(default)]
    pub(super) pull_request: Option<Pull>,
    #[serde(default)]
    pub(super) comment: Option<Comment>,
    #[serde(default)]
    pub(super) review: Option<Review>,
    #[serde(default)]
    pub(super) assignee: Option<User>,
    #[serde(default)]
    pub(super) requested_reviewer: Option<User>,
    #[serde(default)]
    pub(super) check_run: Option<CiRun>,
    #[serde(default)]
    pub(super) check_suite: Option<CiRun>,
    #[serde(default)]
    pub(super) workflow_run: Option<CiRun>,
    #[serde(default)]
    pub(super) action: String,
}
