//! Identities created and revoked through the admin API (or a test), each
//! answered only once the saved state says so ([`super::persist`]): the
//! blocking forms for threads of their own, the async forms for the admin
//! socket, whose wait holds no runtime thread ([`super::state_writer`]).

use std::path::PathBuf;
use std::sync::Arc;

use super::persist::PersistError;
use super::sockets::remove_identity_dir;
use super::state_writer::Durable;
use super::{IdentityError, IdentitySpec, Placement, Proxy};

/// An identity inserted: static (done), or created and waiting to be saved.
enum Added {
    Static(PathBuf),
    Dynamic(String, PathBuf, Durable),
}

impl Proxy {
    /// Creates an identity: checks it, binds its socket and starts serving.
    /// Without a socket path it is an identity of the admin API: its socket
    /// goes in a directory of its own and it is saved (see [`persist`]),
    /// this thread waiting for the write (from async code use
    /// [`Proxy::create_identity`]).
    pub fn add_identity(self: &Arc<Self>, spec: IdentitySpec) -> Result<PathBuf, IdentityError> {
        match self.begin_add(spec)? {
            Added::Static(socket) => Ok(socket),
            Added::Dynamic(name, socket, durable) => self.finish_add(&name, socket, durable.wait()),
        }
    }

    /// [`Proxy::add_identity`], waiting for the saved state without holding
    /// a runtime thread.
    pub async fn create_identity(
        self: &Arc<Self>,
        spec: IdentitySpec,
    ) -> Result<PathBuf, IdentityError> {
        match self.begin_add(spec)? {
            Added::Static(socket) => Ok(socket),
            Added::Dynamic(name, socket, durable) => {
                self.finish_add(&name, socket, durable.done().await)
            }
        }
    }

    fn begin_add(self: &Arc<Self>, spec: IdentitySpec) -> Result<Added, IdentityError> {
        if spec.socket.is_some() {
            return self
                .insert(spec, Placement::Static, std::iter::empty())
                .map(Added::Static);
        }
        let name = spec.name.clone();
        let socket = self.insert(spec, Placement::Created, std::iter::empty())?;
        Ok(Added::Dynamic(name, socket, self.save_identities()))
    }

    /// Answered only once saved: an identity a restart would lose is taken
    /// down again.
    fn finish_add(
        &self,
        name: &str,
        socket: PathBuf,
        saved: Result<bool, PersistError>,
    ) -> Result<PathBuf, IdentityError> {
        if let Err(e) = saved {
            if let Ok(identity) = self.close_identity(name) {
                remove_identity_dir(&identity);
            }
            return Err(IdentityError::State(e));
        }
        Ok(socket)
    }

    /// Revokes an identity: its connections cut, its socket (and directory)
    /// removed, and then no longer saved. Answered done only once the saved
    /// state no longer holds it: else [`IdentityError::State`], and asking
    /// again retries the write (the identity stays down meanwhile). This
    /// thread waits for the write (from async code use
    /// [`Proxy::revoke_identity`]).
    pub fn remove_identity(&self, name: &str) -> Result<(), IdentityError> {
        let (durable, not_live) = self.begin_remove(name);
        let saved = durable.map(|d| d.wait());
        self.finish_remove(name, saved, not_live)
    }

    /// [`Proxy::remove_identity`], waiting for the saved state without
    /// holding a runtime thread.
    pub async fn revoke_identity(&self, name: &str) -> Result<(), IdentityError> {
        let (durable, not_live) = self.begin_remove(name);
        let saved = match durable {
            Some(d) => Some(d.done().await),
            None => None,
        };
        self.finish_remove(name, saved, not_live)
    }

    /// Takes the identity down; what to make durable (none for a static
    /// one), and the error to answer if it turns out unknown.
    fn begin_remove(&self, name: &str) -> (Option<Durable>, Option<IdentityError>) {
        match self.close_identity(name) {
            Ok(identity) if !identity.dynamic => (None, None),
            Ok(identity) => {
                remove_identity_dir(&identity);
                (Some(self.save_revoked(name, true)), None)
            }
            Err(not_live) => (Some(self.save_revoked(name, false)), Some(not_live)),
        }
    }

    fn finish_remove(
        &self,
        name: &str,
        saved: Option<Result<bool, PersistError>>,
        not_live: Option<IdentityError>,
    ) -> Result<(), IdentityError> {
        if let Some(saved) = saved {
            let known = saved.map_err(IdentityError::State)?;
            if let (false, Some(not_live)) = (known, not_live) {
                return Err(not_live);
            }
        }
        self.write_refusal_counts(Some(name));
        tracing::info!(identity = %name, "identity revoked");
        Ok(())
    }
}
