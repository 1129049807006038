//! The file system side of identity sockets: each dynamic identity's own
//! directory, and binding a socket in it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

use super::{Identity, IdentityError, IDENTITY_SOCKET, TRANSPARENT_SOCKET};

/// The directory of a dynamic identity's socket, 0711. Restored: kept as
/// a run that died left it (a sandbox may hold it bind-mounted: a new
/// directory would be a different one). Created: always a new one, so that
/// a sandbox still holding an earlier identity's directory of that name
/// never reaches this socket; one that cannot be removed is refused. It
/// sits in the 0700 socket directory, so only the proxy's user and root
/// reach it by path; 0711 lets a sandbox's relay, whatever its uid, reach
/// the socket inside it through the bind mount, without listing it.
pub(super) fn identity_dir(dir: &Path, fresh: bool) -> Result<PathBuf, IdentityError> {
    let err = |source| IdentityError::Socket {
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_dir() && !fresh => {}
        Ok(meta) if meta.file_type().is_dir() => {
            let _ = std::fs::remove_file(dir.join(IDENTITY_SOCKET));
            let _ = std::fs::remove_file(dir.join(TRANSPARENT_SOCKET));
            std::fs::remove_dir(dir).map_err(|e| {
                err(std::io::Error::other(format!(
                    "left by an earlier identity of this name and not removable ({e}): not reused"
                )))
            })?;
            std::fs::create_dir(dir).map_err(err)?;
        }
        Ok(_) => return Err(err(std::io::Error::other("exists and is not a directory"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(dir).map_err(err)?;
        }
        Err(e) => return Err(err(e)),
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(err)?;
    Ok(dir.to_path_buf())
}

/// Removes a revoked dynamic identity's directory. One that stays is
/// logged; the next identity of that name gets a new one anyway.
pub(super) fn remove_identity_dir(identity: &Identity) {
    if let Some(dir) = identity.socket.parent() {
        if let Err(error) = std::fs::remove_dir(dir) {
            tracing::error!(identity = %identity.name, dir = %dir.display(), %error, "a revoked identity's directory could not be removed; not reused");
        }
    }
}

/// Binds an identity socket. The socket is world-connectable (0666) but
/// lives in a 0700 directory: only the proxy's user (and root, i.e. the
/// supervisor) can reach it by path, and a sandbox reaches it through the
/// bind mount of the socket itself, whichever uid its worker runs as.
pub(super) fn bind_socket(path: &Path) -> Result<UnixListener, IdentityError> {
    let err = |source| IdentityError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            std::fs::remove_file(path).map_err(err)?;
        }
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(listener)
}
