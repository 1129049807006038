use std::path::PathBuf;

use super::*;
use crate::plan::{FsAccess, Identity, RunRequest};
use crate::profile::{resolve, DirSource};
use crate::sandbox::kernel::tests::Recording;

fn plan(command: &str, proxy: bool) -> Plan {
    let profile = resolve(&DirSource { dirs: vec![] }, "default").unwrap();
    let request = RunRequest {
        workdir: PathBuf::from("/srv/w"),
        proxy_socket: proxy.then(|| PathBuf::from("/run/p.sock")),
        command: vec![command.into()],
        ..RunRequest::default()
    };
    let identity = Identity {
        host_uid: 1000,
        host_gid: 1000,
        caller_is_root: false,
    };
    Plan::build(&profile, &request, identity, &[]).unwrap()
}

#[test]
fn rlimits_cover_processes_and_memory_only_without_cgroups() {
    let mut p = plan("true", false);
    p.limits.pids = Some(64);
    p.limits.memory_mib = Some(2);
    p.limits.open_files = 512;
    let names = |v: Vec<(Resource, u64, &'static str)>| -> Vec<(&'static str, u64)> {
        v.into_iter().map(|(_, n, w)| (w, n)).collect()
    };
    assert_eq!(
        names(rlimits(&p, true)),
        [("open files", 512), ("core size", 0)]
    );
    assert_eq!(
        names(rlimits(&p, false)),
        [
            ("open files", 512),
            ("core size", 0),
            ("processes", 64),
            ("data size", 2 << 20)
        ]
    );
}

#[test]
fn the_command_is_looked_up_in_the_sandboxs_path_unless_it_has_a_slash() {
    let p = plan("git", false);
    let path = p.env.iter().find(|(k, _)| k == "PATH").unwrap().1.clone();
    let expected: Vec<String> = path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| format!("{d}/git"))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(exec_candidates(&p), expected);
    assert_eq!(exec_candidates(&plan("./run.sh", false)), ["./run.sh"]);
    assert_eq!(exec_candidates(&plan("/bin/sh", false)), ["/bin/sh"]);
}

#[test]
fn landlock_grants_the_plans_rules_then_the_relay_port() {
    let p = plan("true", true);
    let mut k = Recording::default();
    landlock_ruleset(&mut k, &p.landlock).unwrap();
    assert_eq!(
        k.calls.first().map(String::as_str),
        Some("landlock ruleset")
    );
    assert!(k.calls.contains(&"landlock allow / ReadDir".to_string()));
    assert!(k
        .calls
        .contains(&"landlock allow /work ReadWriteExec".to_string()));
    assert!(k.calls.contains(&"landlock allow /dev Device".to_string()));
    assert_eq!(
        k.calls.last().map(String::as_str),
        Some("landlock connect 3128")
    );
    assert_eq!(
        k.calls_starting("landlock allow").len(),
        p.landlock.rules.len()
    );
    // Without a proxy socket, no TCP at all.
    let mut k = Recording::default();
    landlock_ruleset(&mut k, &plan("true", false).landlock).unwrap();
    assert!(k.calls_starting("landlock connect").is_empty());
}

#[test]
fn landlock_skips_paths_absent_here_and_grants_the_rest() {
    let p = plan("true", false);
    let mut k = Recording::default();
    k.absent.insert(PathBuf::from("/usr"));
    landlock_ruleset(&mut k, &p.landlock).unwrap();
    assert!(!k
        .calls
        .iter()
        .any(|c| c.starts_with("landlock allow /usr ")));
    assert!(k
        .calls
        .contains(&"landlock allow /work ReadWriteExec".to_string()));
    assert!(p
        .landlock
        .rules
        .contains(&(PathBuf::from("/usr"), FsAccess::ReadExec)));
}

#[test]
fn a_landlock_rule_that_fails_stops_the_ruleset() {
    let p = plan("true", true);
    let mut k = Recording::failing_on("landlock allow /work");
    let e = landlock_ruleset(&mut k, &p.landlock).unwrap_err();
    assert!(e.starts_with("landlock rule /work: "), "{e}");
    assert_eq!(
        k.calls.last().map(String::as_str),
        Some("landlock allow /work ReadWriteExec")
    );
    assert!(k.calls_starting("landlock connect").is_empty());
    let mut k = Recording::failing_on("landlock ruleset");
    assert!(landlock_ruleset(&mut k, &p.landlock).is_err());
    assert_eq!(k.calls, ["landlock ruleset"]);
}
