//! Who may use a local socket, by the credentials the kernel gives for its
//! peer (`SO_PEERCRED`), beside the socket file's mode: the job API admits
//! root, the supervisor's own user and the router's group; the proxy's
//! admin socket root and the proxy's own user; a proxy identity socket bound
//! to a user (the router's) that user and root. A mode loosened by mistake
//! (or a descriptor passed on) then still admits no one else.

/// Whether a peer running as `uid`/`gid` (effective, at connect) may use a
/// socket served by `own_uid` and shared with `group`, if any.
pub fn admitted(uid: u32, gid: u32, own_uid: u32, group: Option<u32>) -> bool {
    uid == 0 || uid == own_uid || group.is_some_and(|g| g == gid)
}

/// Whether a peer running as `uid` may use a proxy identity socket bound to
/// the uid `peer` (the one user it is for, where the proxy knows it): that
/// uid, or root (which could take any uid anyway). One bound to no uid is
/// guarded by its socket's file and directory modes alone.
pub fn identity_admitted(uid: u32, peer: Option<u32>) -> bool {
    peer.is_none_or(|p| uid == p || uid == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_bound_to_a_uid_admits_it_and_root_only() {
        // (uid, peer, admitted)
        let cases = [
            (990, Some(990), true),
            (0, Some(990), true),
            (1000, Some(990), false),
            (991, Some(990), false),
            (65534, Some(990), false),
            (1000, Some(1000), true),
            (0, Some(0), true),
            (1000, Some(0), false),
            (1000, None, true),
            (0, None, true),
        ];
        for (uid, peer, want) in cases {
            assert_eq!(identity_admitted(uid, peer), want, "{uid} {peer:?}");
        }
    }

    #[test]
    fn root_the_owner_and_the_one_group_only() {
        // (uid, gid, own, group, admitted)
        let cases = [
            (0, 0, 1000, None, true),
            (0, 5, 1000, Some(7), true),
            (1000, 1000, 1000, None, true),
            (1000, 9, 1000, Some(7), true),
            (1001, 7, 1000, Some(7), true),
            (1001, 1001, 1000, Some(7), false),
            (1001, 1001, 1000, None, false),
            (65534, 65534, 0, None, false),
            (65534, 0, 0, None, false),
            (1001, 0, 1000, Some(7), false),
        ];
        for (uid, gid, own, group, want) in cases {
            assert_eq!(
                admitted(uid, gid, own, group),
                want,
                "{uid} {gid} {own} {group:?}"
            );
        }
    }
}
