//! The proxy's saved identities fail closed. A revoke (or a create) whose
//! new state cannot be written is not answered as done, the revoked
//! identity stays down, and asking again retries until it is durable: a
//! restart then does not bring it back. A restore saves once and keeps an
//! identity it could not bind. A state file (or its directory) someone
//! else could write is refused. A new identity never reuses a directory a
//! stale sandbox mount could still reach. Each beside its control.
//!
//! A write is made to fail without root tricks: the state file's directory
//! is moved away and a regular file put in its place (even root cannot
//! create a file under a file).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use gatehouse_proxy::server::IdentityError;
use gatehouse_testkit::proxy::{identity, Harness, IDENTITY};
use gatehouse_testkit::{require, Need};
use serde_json::Value;

/// The harness's own identity's socket sits in the identity socket directory.
fn socket_dir(h: &Harness) -> PathBuf {
    h.socket.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A harness whose proxy saves its identities in `<dir>/state/identities.json`.
fn with_state() -> (Harness, PathBuf) {
    let h = Harness::start();
    let dir = h.dir.path().join("state");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = dir.join("identities.json");
    assert!(h.proxy.restore_identities(&state).unwrap().is_empty());
    (h, state)
}

/// The names in the state file (none before the first write).
fn saved(state: &Path) -> Vec<String> {
    if !state.exists() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&std::fs::read(state).unwrap()).unwrap();
    v["identities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .filter(|n| n != IDENTITY)
        .collect()
}

fn live(h: &Harness) -> Vec<String> {
    h.proxy
        .identities()
        .into_iter()
        .map(|i| i.name)
        .filter(|n| n != IDENTITY)
        .collect()
}

/// Replaces the state file's directory with a regular file (writes fail);
/// the returned guard's `repair` puts it back.
struct Broken {
    dir: PathBuf,
    away: PathBuf,
}

fn break_state(state: &Path) -> Broken {
    let dir = state.parent().unwrap().to_path_buf();
    let away = dir.with_extension("away");
    std::fs::rename(&dir, &away).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    Broken { dir, away }
}

impl Broken {
    fn repair(self) {
        std::fs::remove_file(&self.dir).unwrap();
        std::fs::rename(&self.away, &self.dir).unwrap();
    }
}

/// A second proxy restoring from `state` (what a restart restores; its own
/// identity of the harness's name is not restored over).
fn restart_restores(state: &Path) -> Vec<String> {
    let h2 = Harness::start();
    let _rt = h2.rt.enter();
    let mut names = h2.proxy.restore_identities(state).unwrap();
    names.sort();
    names
}

#[test]
fn a_revoke_that_cannot_be_saved_is_not_done_and_a_restart_does_not_bring_it_back() {
    let (h, state) = with_state();
    let _rt = h.rt.enter();
    let a = h.proxy.add_identity(identity("tkt_a")).unwrap();
    h.proxy.add_identity(identity("tkt_b")).unwrap();
    assert_eq!(saved(&state), ["tkt_a", "tkt_b"]);

    let broken = break_state(&state);
    let err = h.proxy.remove_identity("tkt_a").unwrap_err();
    assert!(matches!(err, IdentityError::State(_)), "{err:?}");
    // Down at once all the same: its socket gone, not listed.
    assert!(UnixStream::connect(&a).is_err());
    assert_eq!(live(&h), ["tkt_b"]);
    // Asked again: still not done (not "no such identity", which the
    // supervisor would take as revoked).
    let err = h.proxy.remove_identity("tkt_a").unwrap_err();
    assert!(matches!(err, IdentityError::State(_)), "{err:?}");
    // A create that cannot be saved is not done either, and not left live.
    let err = h.proxy.add_identity(identity("tkt_c")).unwrap_err();
    assert!(matches!(err, IdentityError::State(_)), "{err:?}");
    assert_eq!(live(&h), ["tkt_b"]);
    assert!(!socket_dir(&h).join("tkt_c").exists());

    broken.repair();
    // The file never lost it: a restart now would bring tkt_a back, which
    // is why the revoke was not answered as done.
    assert_eq!(saved(&state), ["tkt_a", "tkt_b"]);
    h.proxy.remove_identity("tkt_a").unwrap();
    assert_eq!(saved(&state), ["tkt_b"]);
    assert!(matches!(
        h.proxy.remove_identity("tkt_a").unwrap_err(),
        IdentityError::NotFound(_)
    ));
    assert_eq!(restart_restores(&state), ["tkt_b"]);

    // Control: a revoke that can be saved is done at once.
    h.proxy.remove_identity("tkt_b").unwrap();
    assert!(saved(&state).is_empty());
    assert!(restart_restores(&state).is_empty());
}

/// Through the admin socket: 503 while the revoke cannot be saved, 204 once
/// it can, 404 after.
#[test]
fn the_admin_api_answers_503_for_a_revoke_that_is_not_durable() {
    use gatehouse_supervisor::jobs::http::{self, HttpMethod as Method};
    let (h, state) = with_state();
    let admin = h.dir.path().join("admin.sock");
    let _task = {
        let _rt = h.rt.enter();
        gatehouse_proxy::admin::serve(h.proxy.clone(), &admin).unwrap()
    };
    {
        let _rt = h.rt.enter();
        h.proxy.add_identity(identity("tkt_a")).unwrap();
    }
    let delete = || {
        h.rt.block_on(http::request(
            &admin,
            Method::DELETE,
            "/identities/tkt_a",
            &[],
            None,
        ))
        .unwrap()
        .status
        .as_u16()
    };
    let broken = break_state(&state);
    assert_eq!(delete(), 503);
    assert_eq!(delete(), 503);
    broken.repair();
    assert_eq!(delete(), 204);
    assert_eq!(delete(), 404);
    assert!(saved(&state).is_empty());
}

/// A restore inserts every identity and writes once: one the rules refuse
/// is dropped from the file, one whose socket cannot be bound stays saved
/// (its job is revoked later, or a later start restores it).
#[test]
fn a_restore_drops_only_what_the_rules_refuse() {
    let (h, state) = with_state();
    {
        let _rt = h.rt.enter();
        for name in ["tkt_a", "tkt_bad", "tkt_c"] {
            h.proxy.add_identity(identity(name)).unwrap();
        }
    }
    // tkt_bad's rule set no longer exists.
    let mut v: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    for i in v["identities"].as_array_mut().unwrap() {
        if i["name"] == "tkt_bad" {
            i["rule_sets"] = serde_json::json!(["no-such-rule-set"]);
        }
    }
    std::fs::write(&state, serde_json::to_vec(&v).unwrap()).unwrap();

    let h2 = Harness::start();
    let _rt = h2.rt.enter();
    // tkt_c's socket directory cannot be made: a regular file is there.
    let blocker = socket_dir(&h2).join("tkt_c");
    std::fs::write(&blocker, "in the way").unwrap();
    assert_eq!(h2.proxy.restore_identities(&state).unwrap(), ["tkt_a"]);
    assert_eq!(saved(&state), ["tkt_a", "tkt_c"]);
    // Revoking the one kept but not live makes it go from the file.
    h2.proxy.remove_identity("tkt_c").unwrap();
    assert_eq!(saved(&state), ["tkt_a"]);
    assert!(matches!(
        h2.proxy.remove_identity("tkt_c").unwrap_err(),
        IdentityError::NotFound(_)
    ));
    // A later save (a revoke) still keeps what is live.
    h2.proxy.remove_identity("tkt_a").unwrap();
    assert!(saved(&state).is_empty());
}

/// A state file, or its directory, that someone other than the proxy's
/// user could write is refused at start, as is a symlink.
#[test]
fn a_state_file_others_could_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let state = state_dir.join("identities.json");
    std::fs::write(&state, br#"{"version": 1, "identities": []}"#).unwrap();
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(&state_dir, 0o700);
    let read = |p: &Path| gatehouse_proxy::server::persist::read(p);

    mode(&state, 0o600);
    read(&state).unwrap();
    mode(&state, 0o644);
    read(&state).unwrap();
    for bad in [0o664, 0o646, 0o666] {
        mode(&state, bad);
        let err = read(&state).unwrap_err().to_string();
        assert!(err.contains("lets group or others write"), "{bad:o}: {err}");
    }
    mode(&state, 0o600);
    for bad in [0o770, 0o707, 0o777] {
        mode(&state_dir, bad);
        let err = read(&state).unwrap_err().to_string();
        assert!(err.contains("lets group or others write"), "{bad:o}: {err}");
    }
    mode(&state_dir, 0o700);
    read(&state).unwrap();

    let link = state_dir.join("link.json");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    assert!(read(&link).is_err(), "a symlink was followed");
}

/// Owned by another uid: refused (chown needs root).
#[test]
fn a_state_file_of_another_user_is_refused() {
    require!(Need::Root);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("identities.json");
    std::fs::write(&state, br#"{"version": 1, "identities": []}"#).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
    gatehouse_proxy::server::persist::read(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(4242), None).unwrap();
    let err = gatehouse_proxy::server::persist::read(&state)
        .unwrap_err()
        .to_string();
    assert!(err.contains("owned by uid 4242"), "{err}");
    std::os::unix::fs::chown(dir.path(), Some(4242), None).unwrap();
    std::os::unix::fs::chown(&state, Some(0), None).unwrap();
    let err = gatehouse_proxy::server::persist::read(&state)
        .unwrap_err()
        .to_string();
    assert!(err.contains("owned by uid 4242"), "{err}");
}

/// A revoked identity's directory that stays (here: something else left
/// in it) is not reused: the next identity of that name gets a new one, so
/// a stale handle on the old one (a sandbox's bind mount; here an open
/// descriptor) does not reach the new socket; one that cannot be removed
/// is refused.
#[test]
fn a_new_identity_never_reuses_a_directory_a_stale_mount_reaches() {
    let (h, _state) = with_state();
    let _rt = h.rt.enter();
    let socket = h.proxy.add_identity(identity("tkt_x")).unwrap();
    let dir = socket.parent().unwrap().to_path_buf();
    let held = std::fs::File::open(&dir).unwrap();
    let through_held = format!(
        "/proc/self/fd/{}/proxy.sock",
        std::os::fd::AsRawFd::as_raw_fd(&held)
    );
    // Control: the held directory reaches the live socket.
    UnixStream::connect(&through_held).unwrap();
    std::fs::write(dir.join("left"), "x").unwrap();
    h.proxy.remove_identity("tkt_x").unwrap();
    assert!(
        dir.exists(),
        "the directory could not go: something is in it"
    );
    let err = h.proxy.add_identity(identity("tkt_x")).unwrap_err();
    assert!(matches!(err, IdentityError::Socket { .. }), "{err:?}");
    assert!(UnixStream::connect(&through_held).is_err());

    std::fs::remove_file(dir.join("left")).unwrap();
    let socket = h.proxy.add_identity(identity("tkt_x")).unwrap();
    UnixStream::connect(&socket).unwrap();
    assert!(
        UnixStream::connect(&through_held).is_err(),
        "the new socket is reachable through the old directory"
    );
}

/// The supervisor's side: a job ends while the proxy cannot make its
/// revocation durable. The job's release is refused (503) and the proxy's
/// file still holds the identity; the supervisor keeps it to revoke and
/// retries, with backoff, until the proxy confirms: then the file no longer
/// holds it and a restart would not bring it back.
#[test]
fn the_supervisor_retries_a_revoke_the_proxy_could_not_make_durable() {
    use gatehouse_testkit::service::{sh_job, Options, Service};
    let (h, state) = with_state();
    let admin = h.dir.path().join("admin.sock");
    let _task = {
        let _rt = h.rt.enter();
        gatehouse_proxy::admin::serve(h.proxy.clone(), &admin).unwrap()
    };
    let svc = Service::start(Options {
        unsandboxed: true,
        proxy_admin: Some(admin.clone()),
        ca_cert: Some(h.proxy_ca.clone()),
        ..Options::default()
    });
    let ticket = "tkt_retry_revoke";
    let mut body = sh_job(ticket, "while [ ! -e go ]; do sleep 0.05; done");
    body["rule_sets"] = serde_json::json!(["test-worker"]);
    body["variables"] = serde_json::json!({"repo": "acme/widgets"});
    let id = h.rt.block_on(svc.submit("k", body));
    let work = svc.work_dir(ticket);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !saved(&state).contains(&ticket.to_string()) {
        assert!(std::time::Instant::now() < deadline, "no identity saved");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let broken = break_state(&state);
    std::fs::write(work.join("go"), "").unwrap();
    let end = h.rt.block_on(svc.wait_ended(&id));
    assert!(
        end["reason"]
            .as_str()
            .unwrap_or("")
            .contains("cleanup failed"),
        "{end}"
    );
    // Down at the proxy, but not yet durably revoked.
    assert!(!live(&h).contains(&ticket.to_string()));
    std::thread::sleep(std::time::Duration::from_secs(6));
    assert!(
        saved(&broken.away.join("identities.json")).contains(&ticket.to_string()),
        "the file lost it without a write?"
    );

    broken.repair();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while saved(&state).contains(&ticket.to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor never retried the revoke"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(restart_restores(&state).is_empty());
    drop(svc);
}

/// Creates and revokes answered together (their writes batched on the
/// state writer's thread, off the runtime's) are each answered only once
/// the file says so.
#[test]
fn concurrent_creates_and_revokes_are_each_answered_only_once_durable() {
    let (h, state) = with_state();
    let names: Vec<String> = (0..24).map(|i| format!("tkt_c{i:02}")).collect();
    h.rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for name in names.clone() {
            let (proxy, state) = (h.proxy.clone(), state.clone());
            set.spawn(async move {
                proxy.create_identity(identity(&name)).await.unwrap();
                assert!(saved(&state).contains(&name), "{name} answered unsaved");
            });
        }
        while let Some(done) = set.join_next().await {
            done.unwrap();
        }
        for name in names.iter().step_by(2) {
            let (proxy, state, name) = (h.proxy.clone(), state.clone(), name.clone());
            set.spawn(async move {
                proxy.revoke_identity(&name).await.unwrap();
                assert!(
                    !saved(&state).contains(&name),
                    "{name} revoked, still saved"
                );
            });
        }
        while let Some(done) = set.join_next().await {
            done.unwrap();
        }
    });
    let kept: Vec<String> = names.iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(saved(&state), kept);
    assert_eq!(restart_restores(&state), kept);
    // Control: the same through the blocking form, from a thread of its own.
    let _rt = h.rt.enter();
    h.proxy.remove_identity(&kept[0]).unwrap();
    assert_eq!(saved(&state), kept[1..]);
}
