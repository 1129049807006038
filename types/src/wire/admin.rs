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
