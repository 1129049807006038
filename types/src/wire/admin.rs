//! The proxy's admin API: the supervisor creates one identity per job.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{IdentityName, RuleSetName, TunnelTarget};

/// `POST /identities`: an identity to create. The proxy checks the rule
/// sets against its rule book and the variables with
/// [`crate::variables::check`]; the `repo` variable becomes the identity's
/// repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewIdentity {
    pub name: IdentityName,
    pub rule_sets: Vec<RuleSetName>,
    /// Sent as `host:port`; a bare `host` is accepted and means port 443.
    #[serde(default)]
    pub tunnel_hosts: Vec<TunnelTarget>,
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
}

/// The `201` answer to [`NewIdentity`]: where the identity's socket is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedIdentity {
    pub name: IdentityName,
    pub socket: PathBuf,
}

/// One entry of `GET /rule-sets`: a rule set the proxy knows, so that the
/// supervisor can refuse at start a profile naming one that does not exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownRuleSet {
    pub name: RuleSetName,
    /// The identity variables its rules refer to.
    #[serde(default)]
    pub variables: Vec<String>,
    /// Why the set is out of use (its credential is not defined), if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<String>,
}
