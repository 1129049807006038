//! Transparent mode (`network.transparent`): where the relay sends ports
//! 443 and 80, and which names resolve to the relay.

use std::path::{Path, PathBuf};

use super::{inside, PlanError, RunRequest};
use crate::profile::Profile;

/// The transparent socket inside the sandbox, when the profile turns the
/// mode on and the worker has a proxy (without one there is nothing to
/// reach, and no name resolves).
pub(super) fn transparent_target(
    profile: &Profile,
    request: &RunRequest,
) -> Result<Option<PathBuf>, PlanError> {
    if !profile.network.transparent || !request.has_proxy() {
        return Ok(None);
    }
    if request.proxy_dir.is_none() {
        return Err(PlanError::TransparentNeedsProxyDir);
    }
    Ok(Some(
        Path::new(inside::PROXY_DIR).join(inside::TRANSPARENT_SOCKET_NAME),
    ))
}

/// `/etc/hosts`: localhost, and in transparent mode the profile's hosts on
/// 127.0.0.1, where the relay takes ports 443 and 80. Nothing else
/// resolves: the sandbox has no DNS.
pub(super) fn hosts_file(profile: &Profile, transparent: bool) -> String {
    let mut text = "127.0.0.1 localhost\n::1 localhost\n".to_string();
    if transparent {
        for host in &profile.network.transparent_hosts {
            text.push_str(&format!("127.0.0.1 {host}\n"));
        }
    }
    text
}

/// `/etc/nsswitch.conf` in transparent mode: names from `/etc/hosts` only.
/// Without the file glibc asks DNS first and, finding no server, gives up
/// before it reads `/etc/hosts`.
pub(super) const NSSWITCH: &str = "passwd: files\ngroup: files\nhosts: files\n";
