//! The rule-set fixture the end-to-end tests run under (`test-worker`), one
//! copy for the in-process proxy, the `gatehouse proxy` process and the
//! supervisor's jobs.

/// The fixture's name, as identities and jobs list it.
pub const TEST_RULE_SET: &str = "test-worker";

/// `test-worker.toml`: what the proxy tests allow.
pub const TEST_RULES: &str = r#"
name = "test-worker"
description = "what the proxy tests allow"
variables = ["repo"]

[[rule]]
name = "repo-read"
source = "GitHub REST: repos/get"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}"
credential = "github"
inject = "bearer"

[[rule]]
name = "issue-read"
source = "GitHub REST: issues/get"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/issues/{n}"
credential = "github"
inject = "bearer"

[[rule]]
name = "issue-comments-read"
source = "GitHub REST: issues/list-comments"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/issues/{n}/comments"
credential = "github"
inject = "bearer"

[[rule]]
name = "issue-comment"
source = "GitHub REST: issues/create-comment"
host = "api.github.com"
methods = ["POST"]
path = "/repos/{repo}/issues/{n}/comments"
credential = "github"
inject = "bearer"
message = { kind = "github_issue_comment", target = "{repo}#{n}", created_id_pointer = "/id" }
# As the shipped worker sets: only on a pull request this identity opened.
own = { id = "n", created_as = "github_pull_request" }

[[rule]]
name = "issue-comment-edit"
source = "GitHub REST: issues/update-comment"
host = "api.github.com"
methods = ["PATCH"]
path = "/repos/{repo}/issues/comments/{comment_id}"
credential = "github"
inject = "bearer"
message = { kind = "github_issue_comment_edit", target = "{repo}/issues/comments/{comment_id}", created_id_pointer = "/id" }
own = { id = "comment_id", created_as = "github_issue_comment" }

[[rule]]
name = "pull-update"
source = "GitHub REST: pulls/update"
host = "api.github.com"
methods = ["PATCH"]
path = "/repos/{repo}/pulls/{n}"
credential = "github"
inject = "bearer"
message = { kind = "github_pull_request_edit", target = "{repo}#{n}", created_id_pointer = "/number" }
own = { id = "n", created_as = "github_pull_request" }

[[rule]]
name = "pull-create"
source = "GitHub REST: pulls/create"
host = "api.github.com"
methods = ["POST"]
path = "/repos/{repo}/pulls"
credential = "github"
inject = "bearer"
message = { kind = "github_pull_request", target = "{repo}", created_id_pointer = "/number" }

[[rule]]
name = "job-logs"
source = "GitHub REST: actions/download-job-logs-for-workflow-run"
host = "api.github.com"
methods = ["GET"]
path = "/repos/{repo}/actions/jobs/{n}/logs"
credential = "github"
inject = "bearer"

[[rule]]
name = "feishu-send"
source = "Feishu open platform: im/v1/messages create"
host = "open.feishu.cn"
methods = ["POST"]
path = "/open-apis/im/v1/messages"
query = { receive_id_type = ["chat_id", "open_id"] }
credential = "feishu"
inject = "feishu_tenant"
message = { kind = "feishu_message", target = "{receive_id_type}", target_body_pointer = "/receive_id", created_id_pointer = "/data/message_id" }

[[rule]]
name = "graphql"
source = "GitHub GraphQL"
host = "api.github.com"
methods = ["POST"]
path = "/graphql"
credential = "github"
inject = "bearer"
graphql = { query = ["repository", "viewer"], repository = "{repo}" }

[[rule]]
name = "git-refs"
source = "git smart HTTP"
host = "github.com"
methods = ["GET"]
path = "/{repo}.git/info/refs"
query = { service = ["git-upload-pack", "git-receive-pack"] }
credential = "github"
inject = "git_basic"

[[rule]]
name = "git-fetch"
source = "git smart HTTP"
host = "github.com"
methods = ["POST"]
path = "/{repo}.git/git-upload-pack"
credential = "github"
inject = "git_basic"

[[rule]]
name = "git-push"
source = "git smart HTTP"
host = "github.com"
methods = ["POST"]
path = "/{repo}.git/git-receive-pack"
credential = "github"
inject = "git_basic"
receive_pack = { refs = ["refs/heads/gatehouse/*"] }
"#;
