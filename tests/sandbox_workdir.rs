//! The work dir's size limit (`limits.work_dir_size`): a filesystem of its
//! own made the way the supervisor makes one per ticket
//! (`workdir_fs::ensure`), a worker writing past it, `sandbox run` refusing
//! a required limit it cannot see enforced, cleanup, and what the sandbox's
//! mount table says about the host. Root and rootless.

// Helpers outside #[test] fns panic on setup failure, like the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gatehouse_supervisor::workdir_fs;
use gatehouse_testkit::require;
use gatehouse_testkit::sandbox::*;
use gatehouse_testkit::Need;

const LIMIT: u64 = 32 << 20;

const LIMITED: &str = "extends = \"default\"\n[limits]\nwork_dir_size = \"32M\"\n";
const REQUIRED: &str =
    "extends = \"default\"\n[limits]\nwork_dir_size = \"32M\"\n[require]\nwork_dir_size = true\n";

/// A scratch whose work dir is a 32 MiB filesystem of its own, removed
/// (unmounted, image deleted) when dropped.
struct Limited {
    s: Scratch,
    image: PathBuf,
}

impl Limited {
    fn new(mode: Mode) -> Limited {
        let s = Scratch::new(mode);
        let image = s.path("work.img");
        assert!(workdir_fs::ensure(&s.work, &image, LIMIT).unwrap(), "made");
        // The new filesystem's root is root's: hand it over as before.
        s.give_to_worker(&s.work);
        Limited { s, image }
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = workdir_fs::remove(&self.s.work, &self.image);
    }
}

/// The loop devices whose backing file is `image`.
fn loops_backed_by(image: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return vec![];
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("loop/backing_file"))
                .is_ok_and(|b| Path::new(b.trim()) == image)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Whether the host's mount table has a mount at `dir`.
fn mounted_at(dir: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    table.lines().any(|l| l.split(' ').nth(4) == Some(dir))
}

#[test]
fn a_worker_cannot_write_past_the_work_dir_size() {
    require!(Need::Root);
    for mode in modes() {
        let l = Limited::new(mode);
        let profile = l.s.profile("limited", REQUIRED);
        // Under the limit first (the positive control), then past it.
        let r = l.s.sh_with(
            profile.to_str().unwrap(),
            &[],
            "head -c 8M /dev/zero > ok && wc -c < ok; \
             if head -c 64M /dev/zero > big; then echo wrote-past; else echo refused; fi",
        );
        r.ok();
        assert!(r.stdout.contains("8388608"), "{mode:?}: {r:#?}");
        assert!(r.stdout.contains("refused"), "{mode:?}: {r:#?}");
        assert!(!r.stdout.contains("wrote-past"), "{mode:?}: {r:#?}");
        assert!(
            r.stderr.contains("No space left on device"),
            "{mode:?}: {r:#?}"
        );
        assert!(
            !r.stderr.contains("not enforced"),
            "{mode:?}: enforced, so no warning: {r:#?}"
        );
        // The host filesystem holds at most the image, and the file the
        // worker tried to grow stopped within the limit.
        let on_disk = std::fs::metadata(&l.image).unwrap().blocks() * 512;
        assert!(
            on_disk <= LIMIT,
            "{mode:?}: the image takes {on_disk} bytes"
        );
        let big = std::fs::metadata(l.s.work.join("big")).unwrap().len();
        assert!(big < LIMIT - (8 << 20), "{mode:?}: big grew to {big}");
    }
}

#[test]
fn a_required_work_dir_size_fails_closed_on_a_plain_dir() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let required = s.profile("required", REQUIRED);
        let r = s.sh_with(required.to_str().unwrap(), &[], "echo should-not-run");
        assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{mode:?}: {r:#?}");
        assert!(
            r.stderr.contains("require.work_dir_size"),
            "{mode:?}: {r:#?}"
        );
        assert!(
            r.stderr.contains("not a filesystem of its own"),
            "{mode:?}: {r:#?}"
        );
        assert!(!r.stdout.contains("should-not-run"), "{mode:?}: {r:#?}");
        // Not required: it runs, and says the limit does not hold.
        let limited = s.profile("limited", LIMITED);
        let r = s.sh_with(limited.to_str().unwrap(), &[], "echo ran");
        r.ok();
        assert_eq!(r.stdout.trim(), "ran", "{mode:?}: {r:#?}");
        assert!(
            r.stderr.contains("limits.work_dir_size is not enforced"),
            "{mode:?}: {r:#?}"
        );
    }
}

#[test]
fn a_filesystem_bigger_than_the_limit_does_not_count() {
    require!(Need::Root);
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let image = s.path("work.img");
    workdir_fs::ensure(&s.work, &image, 64 << 20).unwrap();
    s.give_to_worker(&s.work);
    let required = s.profile("required", REQUIRED);
    let r = s.sh_with(required.to_str().unwrap(), &[], "echo should-not-run");
    workdir_fs::remove(&s.work, &image).unwrap();
    assert_eq!(r.code, Some(EXIT_SANDBOX_FAILED), "{r:#?}");
    assert!(
        r.stderr.contains("more than limits.work_dir_size"),
        "{r:#?}"
    );
    assert!(!r.stdout.contains("should-not-run"), "{r:#?}");
}

#[test]
fn the_filesystem_is_reused_remounted_and_removed_without_leftovers() {
    require!(Need::Root);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let image = workdir_fs::image_for(&work);
    assert!(workdir_fs::ensure(&work, &image, LIMIT).unwrap(), "made");
    let loops = loops_backed_by(&image);
    assert_eq!(loops.len(), 1, "{loops:?}");
    assert!(mounted_at(&work));
    assert!(!work.join("lost+found").exists());
    std::fs::write(work.join("kept"), "from the first job").unwrap();
    // The next job of the ticket: the same filesystem, nothing new.
    assert!(!workdir_fs::ensure(&work, &image, LIMIT).unwrap());
    assert_eq!(loops_backed_by(&image), loops);
    // Found unmounted (a reboot, the supervisor's mount namespace gone):
    // mounted again with what it held.
    nix::mount::umount2(&work, nix::mount::MntFlags::empty()).unwrap();
    assert!(loops_backed_by(&image).is_empty(), "autoclear detached it");
    assert!(!workdir_fs::ensure(&work, &image, LIMIT).unwrap());
    assert_eq!(
        std::fs::read_to_string(work.join("kept")).unwrap(),
        "from the first job"
    );
    // Removed: no mount, no loop device, no image.
    workdir_fs::remove(&work, &image).unwrap();
    assert!(!mounted_at(&work));
    assert!(loops_backed_by(&image).is_empty());
    assert!(!image.exists());
    assert!(
        !work.join("kept").exists(),
        "the dir is the empty mount point again"
    );
    // Removing again finds nothing to do.
    workdir_fs::remove(&work, &image).unwrap();
}

#[test]
fn a_crash_while_making_an_image_leaves_nothing_the_next_start_keeps() {
    require!(Need::Root);
    let tickets = tempfile::tempdir().unwrap();
    let work = tickets.path().join("tkt_1").join("work");
    std::fs::create_dir_all(&work).unwrap();
    let image = workdir_fs::image_for(&work);
    let partial = tickets.path().join("tkt_1").join("work.img.partial");
    // What a crash between creating the image and renaming it leaves.
    std::fs::write(&partial, b"half a filesystem").unwrap();
    assert_eq!(workdir_fs::sweep(tickets.path()), 1);
    assert!(!partial.exists());
    assert_eq!(workdir_fs::sweep(tickets.path()), 0);
    // And a leftover the sweep did not see is replaced by the next make.
    std::fs::write(&partial, b"half a filesystem").unwrap();
    assert!(workdir_fs::ensure(&work, &image, LIMIT).unwrap());
    assert!(!partial.exists());
    workdir_fs::remove(&work, &image).unwrap();
    assert!(loops_backed_by(&image).is_empty());
}

#[test]
fn a_work_dir_holding_files_is_not_hidden_under_a_new_filesystem() {
    require!(Need::Root);
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("old"), "from before the limit").unwrap();
    let image = workdir_fs::image_for(&work);
    let e = workdir_fs::ensure(&work, &image, LIMIT).unwrap_err();
    assert!(e.to_string().contains("holds files"), "{e}");
    assert!(!mounted_at(&work));
    assert!(!image.exists());
}

/// Part of the host's paths that would identify the caller: the scratch's
/// random directory name.
fn marker(s: &Scratch) -> String {
    s.base
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_work_dir_of_its_own_names_nothing_of_the_host_in_the_mount_table() {
    require!(Need::Root);
    for mode in modes() {
        let l = Limited::new(mode);
        let marker = marker(&l.s);
        let profile = l.s.profile("limited", REQUIRED);
        let r = l.s.sh_with(
            profile.to_str().unwrap(),
            &[],
            "cat /proc/self/mountinfo; echo ---; cat /proc/self/mounts; echo x > /work/w && echo wrote",
        );
        r.ok();
        assert!(!r.stdout.contains(&marker), "{mode:?}: {}", r.stdout);
        // The positive control: /work is mounted (its filesystem's root) and
        // writable.
        assert!(
            r.stdout
                .lines()
                .any(|l| l.split(' ').nth(3) == Some("/") && l.split(' ').nth(4) == Some("/work")),
            "{mode:?}: {}",
            r.stdout
        );
        assert!(r.stdout.contains("wrote"), "{mode:?}: {r:#?}");
    }
}

#[test]
fn a_bound_directory_shows_its_host_path_in_the_mount_table() {
    // What the filesystem of its own fixes: a plain work dir is a bind, and
    // the kernel names the bound directory's path within its filesystem.
    let Some(mode) = any_mode() else {
        return;
    };
    let s = Scratch::new(mode);
    let r = s.sh("cat /proc/self/mountinfo");
    r.ok();
    assert!(r.stdout.contains(&marker(&s)), "{}", r.stdout);
}

/// The supervisor, started by root, gives a ticket's work dir its own
/// filesystem at the first job and reuses it for the next.
#[tokio::test(flavor = "multi_thread")]
async fn the_supervisor_makes_one_filesystem_per_ticket() {
    use gatehouse_testkit::service::{sh_job, Options, Service, TEST_PROFILE};
    require!(Need::Root, Need::Sandbox);
    let profiles = tempfile::tempdir().unwrap();
    std::fs::write(
        profiles.path().join(format!("{TEST_PROFILE}.toml")),
        REQUIRED,
    )
    .unwrap();
    let mut svc = Service::start(Options {
        unsandboxed: false,
        profiles_dir: Some(profiles.path().to_path_buf()),
        ..Options::default()
    });
    let work = svc.work_dir("tkt_wdir");
    let image = workdir_fs::image_for(&work);
    let first = svc
        .submit(
            "one",
            sh_job(
                "tkt_wdir",
                "head -c 8M /dev/zero > a || exit 90; \
                 if head -c 64M /dev/zero > big; then exit 91; fi; rm -f big",
            ),
        )
        .await;
    let end = svc.wait_ended(&first).await;
    assert_eq!(end["state"], "done", "{end}");
    assert!(mounted_at(&work), "the work dir is a filesystem of its own");
    let devices = loops_backed_by(&image);
    assert_eq!(devices.len(), 1, "{devices:?}");
    // The ticket's next job: the same filesystem, its files still there.
    let second = svc
        .submit("two", sh_job("tkt_wdir", "test -s a || exit 92"))
        .await;
    let end = svc.wait_ended(&second).await;
    assert_eq!(end["state"], "done", "{end}");
    assert_eq!(loops_backed_by(&image), devices);
    assert!(std::fs::metadata(&image).unwrap().blocks() * 512 <= LIMIT);
    svc.stop();
    workdir_fs::remove(&work, &image).unwrap();
    assert!(loops_backed_by(&image).is_empty());
}
