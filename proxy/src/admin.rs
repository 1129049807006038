//! The admin socket: create, list and revoke identities (HTTP/1.1 + JSON
//! over a 0600 unix socket, so only the proxy's own user — and root — can
//! use it).
//!
//! - `POST /identities` [`NewIdentity`] `{"name", "rule_sets", "tunnel_hosts",
//!   "variables"}` → `201` [`CreatedIdentity`] `{"name", "socket"}`; 400 for
//!   a bad request, 409 if the name exists. Both bodies are the shared wire
//!   types the supervisor's client uses too.
//! - `DELETE /identities/{name}` → 204 (socket removed, connections cut); 404.
//! - `GET /identities` → 200 `[{"name", "socket", "rule_sets", "tunnel_hosts", "variables"}]`.

use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gatehouse_types::wire::{CreatedIdentity, NewIdentity};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::UnixListener;

use crate::body::{self, ProxyBody};
use crate::server::{with_causes, IdentityError, IdentitySpec, Proxy};

/// Largest admin request body.
const ADMIN_BODY_LIMIT: usize = 64 * 1024;

/// Errors starting the admin socket.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The socket could not be created or restricted to its owner.
    #[error("admin socket {path}")]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Binds a unix socket that is 0600 from the moment anyone can reach it by
/// `path`: bound in a private (0700) directory beside `path`, restricted,
/// then renamed into place (the listening socket keeps its inode). The
/// process's umask is never touched: it is shared by every thread and
/// inherited by every child spawned meanwhile, and two binds at once could
/// leave it changed for good (a supervisor spawned then made its work dirs
/// 0600, which no worker could enter).
pub(crate) fn bind_private(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Short, so that the staged path fits where `path` fits (108 bytes).
    let staging = parent.join(format!(
        ".b{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    // Renaming would replace whatever is there: only a stale socket may be.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
    }
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let staged = staging.join("s");
    let bound = std::os::unix::net::UnixListener::bind(&staged).and_then(|listener| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    bound
}

/// Binds the admin socket (0600) and serves it until the process ends.
pub fn serve(proxy: Arc<Proxy>, path: &Path) -> Result<tokio::task::JoinHandle<()>, AdminError> {
    let err = |source| AdminError::Socket {
        path: path.to_path_buf(),
        source,
    };
    // A stale socket from an earlier run is replaced; anything else at the
    // path is left alone (binding then fails with a clear error).
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            std::fs::remove_file(path).map_err(err)?;
        }
    }
    let listener = bind_private(path)
        .and_then(|l| {
            l.set_nonblocking(true)?;
            UnixListener::from_std(l)
        })
        .map_err(err)?;
    // Besides the 0600 mode: only root (the supervisor) and this user, by
    // the peer's credentials.
    let own = nix::unistd::geteuid().as_raw();
    Ok(tokio::spawn(async move {
        // Out of descriptors, retrying at once would spin and flood the log.
        let mut backoff = crate::server::backoff::AcceptBackoff::new("admin");
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => {
                    backoff.succeeded();
                    stream
                }
                Err(error) => {
                    backoff.failed(&error).await;
                    continue;
                }
            };
            match stream.peer_cred() {
                Ok(c) if gatehouse_types::peer::admitted(c.uid(), c.gid(), own, None) => {}
                Ok(c) => {
                    tracing::warn!(
                        uid = c.uid(),
                        gid = c.gid(),
                        pid = c.pid(),
                        "refused a peer of the admin socket (not root or the proxy's user)"
                    );
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "refused an admin peer whose credentials are unknown");
                    continue;
                }
            }
            let proxy = proxy.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(proxy.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

fn reply(status: StatusCode, value: serde_json::Value) -> Response<ProxyBody> {
    reply_text(status, value.to_string())
}

fn reply_text(status: StatusCode, json: String) -> Response<ProxyBody> {
    let mut resp = Response::new(body::full(json));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, reason: impl std::fmt::Display) -> Response<ProxyBody> {
    reply(status, json!({"error": reason.to_string()}))
}

async fn handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    Ok(match (req.method().clone(), segments.as_slice()) {
        (Method::GET, ["identities"]) => reply(StatusCode::OK, json!(proxy.identities())),
        (Method::GET, ["rule-sets"]) => reply(StatusCode::OK, json!(proxy.known_rule_sets())),
        (Method::POST, ["identities"]) => create(&proxy, req).await,
        (Method::DELETE, ["identities", name]) => match proxy.revoke_identity(name).await {
            Ok(()) => {
                let mut resp = Response::new(body::empty());
                *resp.status_mut() = StatusCode::NO_CONTENT;
                resp
            }
            Err(e @ IdentityError::State(_)) => {
                error(StatusCode::SERVICE_UNAVAILABLE, with_causes(&e))
            }
            Err(e) => error(StatusCode::NOT_FOUND, e),
        },
        (_, ["identities"] | ["identities", _] | ["rule-sets"]) => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => error(
            StatusCode::NOT_FOUND,
            "no such endpoint; see /identities and /rule-sets",
        ),
    })
}

async fn create(proxy: &Arc<Proxy>, req: Request<Incoming>) -> Response<ProxyBody> {
    let bytes = match http_body_util::Limited::new(req.into_body(), ADMIN_BODY_LIMIT)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
    };
    let spec = match parse_new_identity(&bytes) {
        Ok(spec) => spec,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid identity: {e}")),
    };
    let name = spec.name.clone();
    match proxy.create_identity(spec).await {
        Ok(socket) => created_reply(&name, socket),
        Err(e @ IdentityError::Exists(_)) => error(StatusCode::CONFLICT, e),
        Err(e @ IdentityError::Socket { .. }) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, with_causes(&e))
        }
        Err(e @ IdentityError::State(_)) => error(StatusCode::SERVICE_UNAVAILABLE, with_causes(&e)),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// Parses a `POST /identities` body into the spec [`Proxy::add_identity`]
/// checks (pure): the shared wire type, so what the supervisor sends is
/// what is parsed here.
pub fn parse_new_identity(bytes: &[u8]) -> Result<IdentitySpec, serde_json::Error> {
    let new: NewIdentity = serde_json::from_slice(bytes)?;
    Ok(IdentitySpec {
        name: new.name.into_string(),
        rule_sets: new.rule_sets.into_iter().map(String::from).collect(),
        tunnel_hosts: new.tunnel_hosts.into_iter().map(String::from).collect(),
        variables: new.variables,
        socket: None,
        peer_uid: None,
    })
}

/// The `201` body for a created identity (pure).
pub fn created_body(name: &str, socket: PathBuf) -> Result<String, CreatedBodyError> {
    let name = name.parse().map_err(|_| CreatedBodyError)?;
    serde_json::to_string(&CreatedIdentity { name, socket }).map_err(|_| CreatedBodyError)
}

/// A created identity whose answer cannot be written (not reached: the name
/// was checked when the identity was created).
#[derive(Debug, thiserror::Error)]
#[error("the created identity's answer could not be encoded")]
pub struct CreatedBodyError;

fn created_reply(name: &str, socket: PathBuf) -> Response<ProxyBody> {
    match created_body(name, socket) {
        Ok(body) => reply_text(StatusCode::CREATED, body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// The process's umask, read without setting it (which would itself
    /// change it for a moment).
    fn current_umask() -> String {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        line.split_whitespace().nth(1).unwrap().to_owned()
    }

    #[test]
    fn a_private_socket_is_0600_in_place_and_leaves_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.sock");
        let listener = bind_private(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        listener.accept().unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["admin.sock"]);
        // A stale socket is replaced; anything else is left alone.
        drop(listener);
        bind_private(&path).unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "keep").unwrap();
        let e = bind_private(&file).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    }

    /// The process's umask is shared by every thread and inherited by
    /// every child: binding never changes it, however many bind at once
    /// (two binds that set and restored it in turn could leave it changed).
    #[test]
    fn binding_at_once_leaves_the_umask_alone() {
        let before = current_umask();
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let path = dir.path().join(format!("s{i}"));
                let before = before.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        drop(bind_private(&path).unwrap());
                        assert_eq!(current_umask(), before);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(current_umask(), before);
    }
}
