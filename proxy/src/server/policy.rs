//! What the server needs from the rule book, as a trait: the server asks
//! questions about one request and gets a decision it can act on. The rule
//! book (pure, in `rules`) answers them; tests may answer with a table.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

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
}

/// How a credential goes into the request (always a header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Injection {
    /// `Authorization: Bearer <token>` (GitHub REST/GraphQL, model APIs).
    Bearer,
    /// `Authorization: Basic base64(x-access-token:<token>)` (git smart HTTP).
    GitBasic,
    /// `Authorization: Bearer <tenant_access_token>` (Feishu).
    FeishuTenant,
}

/// A message-bearing call: what to log about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MessageSpec {
    /// e.g. `issue_comment`, `feishu_message`.
    pub kind: String,
    /// What the message is posted to, e.g. `owner/repo#12`.
    pub target: String,
    /// JSON pointer to the created message's id in the response, e.g. `/id`.
    pub id_pointer: String,
}

/// The verdict of a body check on the bytes read so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyVerdict {
    /// The body may pass.
    Allow,
    /// More bytes are needed to decide.
    NeedMore,
    /// The body is refused.
    Deny(String),
}

/// Decides on a body prefix; the flag says whether it is the whole body.
pub type BodyCheckFn = dyn Fn(&[u8], bool) -> BodyVerdict + Send + Sync;

/// A check of the request body's head (or all of it, up to a limit).
#[derive(Clone)]
pub struct BodyCheck {
    /// A short name for logs (`graphql`, `receive_pack`).
    pub name: &'static str,
    /// Bodies larger than this without a verdict are refused.
    pub limit: usize,
    /// Decides on the prefix read so far; `complete` when it is all of it.
    pub check: Arc<BodyCheckFn>,
}

impl std::fmt::Debug for BodyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyCheck")
            .field("name", &self.name)
            .field("limit", &self.limit)
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
    pub body: Option<BodyCheck>,
    /// Permissions a scoped token needs (GitHub App), e.g. `contents: write`.
    pub permissions: BTreeMap<String, String>,
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
    /// Whether rule set `name` exists (identities naming others are refused).
    fn has_rule_set(&self, name: &str) -> bool;
}
