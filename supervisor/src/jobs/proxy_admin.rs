//! Client of the proxy's admin socket: one identity per job, created before
//! the sandbox starts and revoked when the job ends.

use std::path::{Path, PathBuf};

use gatehouse_types::wire::{CreatedIdentity, KnownRuleSet, NewIdentity};
use gatehouse_types::ParseError;
use http::{Method, StatusCode};

use super::codec::{to_json_bytes, CodecError};
use super::http::{request, HttpError};
use super::spec::JobSpec;

#[derive(Debug, thiserror::Error)]
pub enum ProxyAdminError {
    /// the admin socket could not be reached
    #[error("proxy admin: {0}")]
    Http(#[from] HttpError),
    /// the proxy refused the request
    #[error("proxy admin refused {what} ({status}): {body}")]
    Refused {
        what: String,
        status: StatusCode,
        body: String,
    },
    /// the proxy answered something this client does not understand
    #[error("proxy admin answered {what} with a body this supervisor cannot read")]
    Malformed { what: String },
    /// the request could not be encoded
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// a job's field is not what an identity takes (not reached for a job
    /// the API accepted: it checks the same types)
    #[error("the job's identity: {0}")]
    Spec(#[from] ParseError),
}

/// The identity a job's worker gets: named after its ticket, with the
/// job's rule sets, tunnel hosts and variables (pure).
pub fn identity_for(spec: &JobSpec) -> Result<NewIdentity, ParseError> {
    Ok(NewIdentity {
        name: spec.ticket.parse()?,
        rule_sets: parse_all(&spec.rule_sets)?,
        tunnel_hosts: parse_all(&spec.tunnel_hosts)?,
        variables: spec.variables.clone(),
    })
}

fn parse_all<T: std::str::FromStr<Err = ParseError>>(
    items: &[String],
) -> Result<Vec<T>, ParseError> {
    items.iter().map(|s| s.parse()).collect()
}

/// The socket in the proxy's `201` answer (pure).
pub fn created_socket(body: &[u8]) -> Option<PathBuf> {
    serde_json::from_slice::<CreatedIdentity>(body)
        .ok()
        .map(|created| created.socket)
}

pub struct ProxyAdmin {
    pub admin_socket: PathBuf,
}

impl ProxyAdmin {
    /// Creates the identity and returns the path of its socket. An identity
    /// of the same name left over from a crash is revoked and created anew:
    /// the supervisor is the only party that creates ticket identities.
    pub async fn create(&self, identity: &NewIdentity) -> Result<PathBuf, ProxyAdminError> {
        let body = to_json_bytes("new identity", identity)?;
        for attempt in 0..2 {
            let resp = request(
                &self.admin_socket,
                Method::POST,
                "/identities",
                &[],
                Some(body.clone()),
            )
            .await?;
            if resp.status == StatusCode::CONFLICT && attempt == 0 {
                self.revoke(identity.name.as_str()).await?;
                continue;
            }
            if resp.status != StatusCode::CREATED {
                return Err(ProxyAdminError::Refused {
                    what: format!("creating identity {}", identity.name),
                    status: resp.status,
                    body: String::from_utf8_lossy(&resp.body).into_owned(),
                });
            }
            return created_socket(&resp.body).ok_or_else(|| ProxyAdminError::Malformed {
                what: format!("creating identity {}", identity.name),
            });
        }
        Err(ProxyAdminError::Refused {
            what: format!("creating identity {}", identity.name),
            status: StatusCode::CONFLICT,
            body: "the identity exists even after revoking it".into(),
        })
    }

    /// Revokes the identity; an unknown one counts as revoked.
    pub async fn revoke(&self, name: &str) -> Result<(), ProxyAdminError> {
        let resp = request(
            &self.admin_socket,
            Method::DELETE,
            &format!("/identities/{name}"),
            &[],
            None,
        )
        .await?;
        match resp.status {
            StatusCode::NO_CONTENT | StatusCode::NOT_FOUND | StatusCode::OK => Ok(()),
            status => Err(ProxyAdminError::Refused {
                what: format!("revoking identity {name}"),
                status,
                body: String::from_utf8_lossy(&resp.body).into_owned(),
            }),
        }
    }

    /// The rule sets the proxy knows (`GET /rule-sets`), for the start-up
    /// check that every profile names only sets that exist.
    pub async fn known_rule_sets(&self) -> Result<Vec<KnownRuleSet>, ProxyAdminError> {
        let what = || "listing rule sets".to_string();
        let resp = request(&self.admin_socket, Method::GET, "/rule-sets", &[], None).await?;
        if resp.status != StatusCode::OK {
            return Err(ProxyAdminError::Refused {
                what: what(),
                status: resp.status,
                body: String::from_utf8_lossy(&resp.body).into_owned(),
            });
        }
        serde_json::from_slice(&resp.body).map_err(|_| ProxyAdminError::Malformed { what: what() })
    }

    pub fn socket(&self) -> &Path {
        &self.admin_socket
    }
}
