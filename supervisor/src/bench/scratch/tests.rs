use std::os::unix::fs::{symlink, PermissionsExt};

use super::*;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// A directory standing for what an attacker wants opened: 0700, empty.
fn victim(base: &Path) -> PathBuf {
    let v = base.join("victim");
    std::fs::create_dir(&v).unwrap();
    std::fs::set_permissions(&v, Permissions::from_mode(0o700)).unwrap();
    v
}

#[test]
fn planted_names_are_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = victim(tmp.path());
    // The name the bench used to take, planted with a link and a `work`.
    let planted = tmp
        .path()
        .join(format!("gatehouse-bench-{}", std::process::id()));
    symlink(&victim, &planted).unwrap();
    symlink(&victim, tmp.path().join("gatehouse-bench-XXXXXX")).unwrap();
    // Control: following the plant would reach the victim.
    assert_eq!(std::fs::canonicalize(&planted).unwrap(), victim);

    let scratch = Scratch::create(tmp.path()).unwrap();
    let made = std::fs::symlink_metadata(scratch.path()).unwrap();
    assert!(made.is_dir() && !made.file_type().is_symlink());
    assert_eq!(scratch.path().parent(), Some(tmp.path()));
    assert_ne!(scratch.path(), planted.as_path());
    assert_eq!(mode(scratch.path()), 0o755);
    assert_eq!(mode(&scratch.work()), 0o777);
    assert_eq!(mode(&victim), 0o700, "the victim was opened");
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
}

#[test]
fn two_scratch_dirs_never_share_a_name() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Scratch::create(tmp.path()).unwrap();
    let b = Scratch::create(tmp.path()).unwrap();
    assert_ne!(a.path(), b.path());
}

#[test]
fn modes_are_not_changed_through_a_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = victim(tmp.path());
    let link = tmp.path().join("link");
    symlink(&victim, &link).unwrap();
    assert!(set_mode(&link, 0o777).is_err());
    assert_eq!(mode(&victim), 0o700);
    // Control: the directory itself can be changed.
    set_mode(&victim, 0o755).unwrap();
    assert_eq!(mode(&victim), 0o755);
}

#[test]
fn removal_does_not_follow_links_planted_in_the_work_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = victim(tmp.path());
    std::fs::write(victim.join("keep"), "x").unwrap();
    let scratch = Scratch::create(tmp.path()).unwrap();
    let path = scratch.path().to_path_buf();
    // The work dir is writable by every user, who may plant a link.
    symlink(&victim, scratch.work().join("link")).unwrap();
    assert!(scratch.work().join("link/keep").exists()); // control
    drop(scratch);
    assert!(!path.exists());
    assert!(victim.join("keep").exists());
}
