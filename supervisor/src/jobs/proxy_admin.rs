//! Client of the proxy's admin socket: one identity per job, created before
//! the sandbox starts and revoked when the job ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use http::{Method, StatusCode};
use serde::Serialize;

use super::codec::{to_json_bytes, CodecError};
use super::http::{request, HttpError};

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
    #[error("proxy admin answered {what} without a usable `socket`")]
    Malformed { what: String },
    /// the request could not be encoded
    #[error(transparent)]
    Codec(#[from] CodecError),
}

#[derive(Serialize)]
pub struct NewIdentity<'a> {
    pub name: &'a str,
    pub rule_sets: &'a [String],
    pub tunnel_hosts: &'a [String],
    pub variables: &'a BTreeMap<String, String>,
}

pub struct ProxyAdmin {
    pub admin_socket: PathBuf,
}

impl ProxyAdmin {
    /// Creates the identity and returns the path of its socket. An identity
    /// of the same name left over from a crash is revoked and created anew:
    /// the supervisor is the only party that creates ticket identities.
    pub async fn create(&self, identity: &NewIdentity<'_>) -> Result<PathBuf, ProxyAdminError> {
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
                self.revoke(identity.name).await?;
                continue;
            }
            if resp.status != StatusCode::CREATED {
                return Err(ProxyAdminError::Refused {
                    what: format!("creating identity {}", identity.name),
                    status: resp.status,
                    body: String::from_utf8_lossy(&resp.body).into_owned(),
                });
            }
            let socket = resp.json()["socket"].as_str().map(PathBuf::from);
            return socket.ok_or_else(|| ProxyAdminError::Malformed {
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

    pub fn socket(&self) -> &Path {
        &self.admin_socket
    }
}
