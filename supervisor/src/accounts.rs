//! Accounts and groups by name, read from `/etc/passwd` and `/etc/group`.
//!
//! gatehouse is built as a static executable, and glibc cannot load its
//! NSS modules (`systemd`, `sss`, `ldap`) into one: `getpwnam` for a name
//! the files lack goes on to those modules and crashes the process. The
//! accounts gatehouse needs (the worker user, the job API's group) are
//! local system accounts, so the files are the whole answer.

use std::collections::BTreeSet;

/// A local account's ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
}

/// The entry named `name` in `passwd`-format text (`name:x:uid:gid:...`).
pub fn user_in(passwd: &str, name: &str) -> Option<Account> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == name).then_some(())?;
        let _password = f.next()?;
        Some(Account {
            uid: f.next()?.parse().ok()?,
            gid: f.next()?.parse().ok()?,
        })
    })
}

/// The gid of the group named `name` in `group`-format text.
pub fn group_in(group: &str, name: &str) -> Option<u32> {
    group.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// Every id named in `passwd`- or `group`-format text (the third field).
pub fn ids_in(text: &str) -> BTreeSet<u32> {
    text.lines()
        .filter_map(|line| line.split(':').nth(2)?.parse().ok())
        .collect()
}

fn read(path: &str) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// The local account `name`, if `/etc/passwd` has it.
pub fn user(name: &str) -> std::io::Result<Option<Account>> {
    Ok(user_in(&read("/etc/passwd")?, name))
}

/// The local group `name`'s gid, if `/etc/group` has it.
pub fn group(name: &str) -> std::io::Result<Option<u32>> {
    Ok(group_in(&read("/etc/group")?, name))
}

/// Every uid of `/etc/passwd` and gid of `/etc/group`.
pub fn all_ids() -> std::io::Result<BTreeSet<u32>> {
    let mut ids = ids_in(&read("/etc/passwd")?);
    ids.extend(ids_in(&read("/etc/group")?));
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        gatehouse-worker:x:999:998::/nonexistent:/usr/sbin/nologin\n\
        broken:x:notanumber:1::/:/bin/sh\n\
        short:x\n\
        \n\
        gatehouse-worker-2:x:1001:1001::/:/bin/sh\n";
    const GROUP: &str = "root:x:0:\ngatehouse-api:x:995:router\nodd:x:\n";

    #[test]
    fn users_table() {
        let cases = [
            ("root", Some((0, 0))),
            ("gatehouse-worker", Some((999, 998))),
            ("gatehouse-worker-2", Some((1001, 1001))),
            // A prefix is not the name; malformed lines answer nothing.
            ("gatehouse", None),
            ("broken", None),
            ("short", None),
            ("", None),
            ("nosuchuser", None),
        ];
        for (name, expected) in cases {
            let got = user_in(PASSWD, name).map(|a| (a.uid, a.gid));
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn groups_and_ids_table() {
        assert_eq!(group_in(GROUP, "gatehouse-api"), Some(995));
        assert_eq!(group_in(GROUP, "root"), Some(0));
        assert_eq!(group_in(GROUP, "odd"), None);
        assert_eq!(group_in(GROUP, "router"), None);
        assert_eq!(
            ids_in(PASSWD).into_iter().collect::<Vec<_>>(),
            [0, 999, 1001]
        );
        assert_eq!(ids_in(GROUP).into_iter().collect::<Vec<_>>(), [0, 995]);
    }
}
