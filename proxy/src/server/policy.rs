//! What the server needs from the rule book, as a trait: the server asks
//! questions about one request and gets a decision it can act on. The rule
//! book (pure, in `rules`) answers them; tests may answer with a table.

use std::collections::BTreeMap;
use std::sync::Arc;

use gatehouse_types::wire::KnownRuleSet;
use serde::Serialize;

use crate::rules::{self, Allowed, Decision, OwnedObject, RequestHead, RuleBook};
use crate::{graphql, receive_pack};

/// The request as it will be forwarded, for matching.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    pub method: &'a str,
    /// Lowercase, without the port (always 443).
    pub host: &'a str,
    /// Raw path as forwarded, without the query.
    pub path: &'a str,
    pub query: Option<&'a str>,
}

/// The identity's scope: its rule sets and bound variables.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Scope {
    pub rule_sets: Vec<String>,
    pub variables: BTreeMap<String, String>,
    /// The identity's repository (its `repo` variable, checked).
    pub repo: Option<gatehouse_types::RepoSlug>,
}

pub use crate::rules::Injection;

/// A message-bearing call: what to log about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MessageSpec {
    /// e.g. `issue_comment`, `feishu_message`.
    pub kind: String,
    /// What the message is posted to, e.g. `owner/repo#12`.
    pub target: String,
    /// A JSON pointer into the request body whose value completes the
    /// target (appended as `:<value>`), e.g. Feishu's `/receive_id`.
    pub target_body_pointer: Option<String>,
    /// JSON pointer to the created message's id in the response, e.g. `/id`.
    pub id_pointer: String,
}

/// What a body check that lets a body pass found in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Passed {
    /// Ids to learn from the answer.
    pub learn: Vec<graphql::Learn>,
    /// The message the body posts (a GraphQL mutation that comments or
    /// opens a pull request), recorded as a rule's `message` is.
    pub message: Option<MessageSpec>,
}

/// The verdict of a body check on the bytes read so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyVerdict {
    /// The body may pass.
    Allow,
    /// The body may pass, with ids to learn from the answer or a message.
    Pass(Passed),
    /// More bytes are needed to decide.
    NeedMore,
    /// The body is refused.
    Deny(String),
}

/// Decides on a body prefix; the flag says whether it is the whole body.
/// One per request: it may keep state between calls, each of which sees
/// the whole body so far (a prefix of the next call's).
pub type BodyCheckFn = dyn FnMut(&[u8], bool) -> BodyVerdict + Send;

/// Starts the check of one request body, given what the identity owns.
pub type StartBodyCheck = dyn Fn(&graphql::KnownIds) -> Box<BodyCheckFn> + Send + Sync;

/// Runs a rule's body check on the request body's head (or all of it, up
/// to a limit).
#[derive(Clone)]
pub struct BodyChecker {
    /// A short name for logs (`graphql`, `receive_pack`).
    pub name: &'static str,
    /// Bodies larger than this without a verdict are refused.
    pub limit: usize,
    /// Each call does work in proportion to the bytes added since the last
    /// one (receive-pack's parser keeps its state), so it runs in place.
    /// Otherwise the check reads the whole body once it is complete (and
    /// answers [`BodyVerdict::NeedMore`] at once before): that call runs on
    /// the bounded pool of body checks when the body is not small.
    pub incremental: bool,
    /// Starts a request's check, which decides on the prefix read so far
    /// (`complete` when it is all of it).
    pub start: Arc<StartBodyCheck>,
}

impl std::fmt::Debug for BodyChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyChecker")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("incremental", &self.incremental)
            .finish_non_exhaustive()
    }
}

/// An allowed request.
#[derive(Clone, Debug)]
pub struct Grant {
    pub rule_set: String,
    pub rule: String,
    /// Name of the credential to inject.
    pub credential: String,
    pub inject: Injection,
    pub message: Option<MessageSpec>,
    pub body: Option<BodyChecker>,
    /// Permissions a scoped token needs (GitHub App), e.g. `contents: write`.
    pub permissions: BTreeMap<String, String>,
    /// The object the request edits or closes: forwarded only if the
    /// identity created it.
    pub own: Option<OwnedObject>,
}

/// A refused request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub rule_sets_tried: Vec<String>,
}

/// The rule book as the server sees it.
pub trait Policy: Send + Sync + 'static {
    /// Whether some rule of these rule sets names `host` (so a CONNECT to
    /// it is intercepted).
    fn names_host(&self, host: &str, rule_sets: &[String]) -> bool;
    /// Decides on one request.
    fn check(&self, request: &RequestView<'_>, scope: &Scope) -> Result<Grant, Refusal>;
    /// Whether an identity's rule sets exist and its variables bind what
    /// they need; the error says what is wrong.
    fn check_identity(
        &self,
        rule_sets: &[String],
        variables: &BTreeMap<String, String>,
    ) -> Result<(), String>;
    /// Every rule set, withdrawn ones with why (`GET /rule-sets`).
    fn known_rule_sets(&self) -> Vec<KnownRuleSet>;
}

// === impl Policy for RuleBook ===

/// Largest body prefix read to decide a GraphQL document or receive-pack
/// command list.
const BODY_CHECK_LIMIT: usize = 1 << 20;

impl Policy for RuleBook {
    fn names_host(&self, host: &str, rule_sets: &[String]) -> bool {
        rule_sets
            .iter()
            .filter_map(|name| self.get(name))
            .flat_map(|set| &set.rules)
            .any(|rule| rule.host == host)
    }

    fn check(&self, request: &RequestView<'_>, scope: &Scope) -> Result<Grant, Refusal> {
        let head = RequestHead {
            method: request.method,
            host: request.host,
            path: request.path,
            query: request.query,
        };
        match RuleBook::check(self, &head, &scope.rule_sets, &scope.variables) {
            Decision::Deny(denial) => Err(Refusal {
                reason: denial.reason,
                rule_sets_tried: denial.rule_sets_tried,
            }),
            Decision::Allow(allowed) => {
                let mut grant = grant_of(allowed);
                // What a minted installation token may do: the identity's
                // rule sets' permissions, nothing more.
                grant.permissions = self
                    .github_permissions(&scope.rule_sets)
                    .into_iter()
                    .map(|(permission, access)| (permission, access.to_string()))
                    .collect();
                Ok(grant)
            }
        }
    }

    fn check_identity(
        &self,
        rule_sets: &[String],
        variables: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        RuleBook::check_identity(self, rule_sets, variables).map_err(|e| e.to_string())
    }

    fn known_rule_sets(&self) -> Vec<KnownRuleSet> {
        RuleBook::known_rule_sets(self)
    }
}

/// The verdict on an allowed GraphQL body: its message field is recorded
/// as a REST rule's message (no part of the target read from the body).
fn passed(summary: graphql::GraphQlSummary) -> BodyVerdict {
    if summary.learn.is_empty() && summary.message.is_none() {
        return BodyVerdict::Allow;
    }
    BodyVerdict::Pass(Passed {
        learn: summary.learn,
        message: summary.message.map(|m| MessageSpec {
            kind: m.kind.to_owned(),
            target: m.target,
            target_body_pointer: None,
            id_pointer: m.id_pointer,
        }),
    })
}

fn grant_of(allowed: Allowed) -> Grant {
    let body = match allowed.body {
        rules::BodyCheck::None => None,
        rules::BodyCheck::GraphQl(allow) => Some(BodyChecker {
            name: "graphql",
            limit: BODY_CHECK_LIMIT,
            incremental: false,
            start: Arc::new(move |known: &graphql::KnownIds| {
                let allow = allow.clone();
                let known = known.clone();
                Box::new(move |body: &[u8], complete: bool| {
                    if !complete {
                        return BodyVerdict::NeedMore;
                    }
                    match graphql::check(body, &allow, &known) {
                        Ok(summary) => passed(summary),
                        Err(denial) => BodyVerdict::Deny(denial.reason),
                    }
                })
            }),
        }),
        rules::BodyCheck::ReceivePack(policy) => Some(BodyChecker {
            name: "receive_pack",
            limit: BODY_CHECK_LIMIT,
            incremental: true,
            start: Arc::new(move |_: &graphql::KnownIds| {
                let policy = policy.clone();
                let mut parser = receive_pack::CommandParser::default();
                Box::new(move |prefix: &[u8], complete: bool| {
                    // Before a push bigger than http.postBuffer, git probes
                    // with a body of one flush packet; it updates nothing.
                    if prefix == b"0000" {
                        return if complete {
                            BodyVerdict::Allow
                        } else {
                            BodyVerdict::NeedMore
                        };
                    }
                    match parser.parse(prefix) {
                        Err(receive_pack::ParseError::NeedMore) => BodyVerdict::NeedMore,
                        Err(e) => BodyVerdict::Deny(e.to_string()),
                        Ok(parsed) => match receive_pack::check(&parsed.commands, &policy) {
                            Ok(()) => BodyVerdict::Allow,
                            Err(denial) => BodyVerdict::Deny(denial.reason),
                        },
                    }
                })
            }),
        }),
    };
    Grant {
        rule_set: allowed.rule_set,
        rule: allowed.rule,
        credential: allowed.credential,
        inject: allowed.inject,
        message: allowed.message.map(|m| MessageSpec {
            kind: m.kind,
            target: m.target,
            target_body_pointer: m.target_body_pointer,
            id_pointer: m.created_id_pointer,
        }),
        body,
        permissions: BTreeMap::new(),
        own: allowed.own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graphql_body_that_posts_passes_with_its_message_spec() {
        let summary = |learn: Vec<graphql::Learn>, message: Option<graphql::MessageField>| {
            graphql::GraphQlSummary {
                operations: vec![("mutation", None)],
                root_fields: vec!["mutation.addComment".into()],
                learn,
                message,
            }
        };
        let field = graphql::MessageField {
            kind: "github_issue_comment",
            target: "PR_1".into(),
            key: "said".into(),
            id_pointer: "/data/said/commentEdge/node/url".into(),
        };
        let learn = graphql::Learn {
            kind: graphql::PULL_REQUEST_NODE,
            pointer: "/data/createPullRequest/pullRequest/id".into(),
        };
        let spec = MessageSpec {
            kind: "github_issue_comment".into(),
            target: "PR_1".into(),
            target_body_pointer: None,
            id_pointer: "/data/said/commentEdge/node/url".into(),
        };
        let cases = [
            (summary(vec![], None), BodyVerdict::Allow),
            (
                summary(vec![learn.clone()], None),
                BodyVerdict::Pass(Passed {
                    learn: vec![learn.clone()],
                    message: None,
                }),
            ),
            (
                summary(vec![], Some(field.clone())),
                BodyVerdict::Pass(Passed {
                    learn: vec![],
                    message: Some(spec.clone()),
                }),
            ),
            (
                summary(vec![learn.clone()], Some(field)),
                BodyVerdict::Pass(Passed {
                    learn: vec![learn],
                    message: Some(spec),
                }),
            ),
        ];
        for (i, (summary, verdict)) in cases.into_iter().enumerate() {
            assert_eq!(passed(summary), verdict, "case {i}");
        }
    }
}
