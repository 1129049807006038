use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::*;
use crate::plan::{Identity, LandlockPlan, SeccompPlan};
use crate::profile::{resolve, DirSource};
use crate::sandbox::kernel::tests::Recording;

fn plan_with(mounts: Vec<MountStep>) -> Plan {
    let profile = resolve(&DirSource { dirs: vec![] }, "default").unwrap();
    let request = crate::plan::RunRequest {
        workdir: PathBuf::from("/srv/w"),
        command: vec!["true".into()],
        ..Default::default()
    };
    let identity = Identity {
        host_uid: 1000,
        host_gid: 1000,
        caller_is_root: false,
    };
    let mut plan = Plan::build(&profile, &request, identity, &[]).unwrap();
    plan.mounts = mounts;
    plan.landlock = LandlockPlan {
        rules: vec![],
        tcp_connect: vec![],
        required: true,
    };
    plan.seccomp = SeccompPlan {
        denials: vec![],
        required: true,
    };
    plan
}

fn some_fd() -> OwnedFd {
    OwnedFd::from(std::fs::File::open("/dev/null").unwrap())
}

fn steps() -> (Vec<MountStep>, Vec<Source>) {
    let usr = MountStep::BindReadOnly {
        host: "/usr".into(),
        inside: "/usr".into(),
        exec: true,
        optional: true,
    };
    let certs = MountStep::BindReadOnly {
        host: "/etc/ssl/certs".into(),
        inside: "/etc/ssl/certs".into(),
        exec: false,
        optional: true,
    };
    let work = MountStep::BindWritable {
        host: "/srv/w".into(),
        inside: "/work".into(),
        exec: false,
    };
    let tmp = MountStep::Tmpfs {
        inside: "/tmp".into(),
        size_mib: 16,
        exec: false,
    };
    let bin = MountStep::BindReadOnly {
        host: "/bin".into(),
        inside: "/bin".into(),
        exec: true,
        optional: true,
    };
    let mounts = vec![usr, certs, work, tmp, MountStep::Proc, bin];
    let sources = vec![
        Source::Fd {
            fd: some_fd(),
            is_dir: true,
        },
        Source::Fd {
            fd: some_fd(),
            is_dir: true,
        },
        Source::Fd {
            fd: some_fd(),
            is_dir: true,
        },
        Source::Absent,
        Source::Absent,
        Source::Symlink("usr/bin".into()),
    ];
    (mounts, sources)
}

#[test]
fn binds_get_the_plans_flags_and_the_root_is_sealed() {
    let (mounts, sources) = steps();
    let plan = plan_with(mounts);
    let mut k = Recording::default();
    build_root(&mut k, &plan, &sources).unwrap();
    assert_eq!(
        k.calls_starting("setattr /newroot/"),
        [
            "setattr /newroot/usr ro,nosuid,nodev",
            "setattr /newroot/etc/ssl/certs ro,nosuid,nodev,noexec",
            "setattr /newroot/work nosuid,nodev,noexec",
            "setattr /newroot/proc/sys ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/sysrq-trigger ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/irq ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/bus ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/fs ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/acpi ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/scsi ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/keys ro,nosuid,nodev,noexec",
            "setattr /newroot/proc/kcore ro,nosuid,nodev,noexec",
        ]
    );
    // Binds come from the descriptors opened before, through the old root.
    let usr_bind = k
        .calls
        .iter()
        .find(|c| c.starts_with("mount /oldroot/proc/self/fd/") && c.contains(" /newroot/usr "))
        .unwrap();
    assert!(
        usr_bind.contains("MS_BIND") && usr_bind.contains("MS_REC"),
        "{usr_bind}"
    );
    assert!(k
        .calls
        .contains(&"symlink usr/bin /newroot/bin".to_string()));
    let tmp = k.calls_starting("mount tmpfs /newroot/tmp ");
    assert_eq!(tmp.len(), 1);
    assert!(
        tmp[0].contains("MS_NOSUID | MS_NODEV | MS_NOEXEC")
            && tmp[0].ends_with("mode=1777,size=16m"),
        "{}",
        tmp[0]
    );
    let proc = k.calls_starting("mount proc /newroot/proc proc ");
    assert!(
        proc[0].contains("MS_NOSUID | MS_NODEV | MS_NOEXEC"),
        "{}",
        proc[0]
    );
    // The last steps: leave the old root, enter the new one, seal it.
    let n = k.calls.len();
    assert_eq!(
        k.calls[n - 6..],
        [
            "umount /oldroot",
            "chdir /newroot",
            "pivot_root . .",
            "umount .",
            "chdir /",
            "mount - / - MS_RDONLY | MS_NOSUID | MS_NODEV | MS_REMOUNT | MS_BIND -",
        ]
    );
}

#[test]
fn the_root_is_staged_private_before_anything_is_mounted() {
    let plan = plan_with(vec![]);
    let mut k = Recording::default();
    build_root(&mut k, &plan, &[]).unwrap();
    assert_eq!(
        k.calls[..3],
        [
            "mount - / - MS_REC | MS_PRIVATE -",
            "mount tmpfs /tmp tmpfs MS_NOSUID | MS_NODEV mode=0755,size=1m",
            "chdir /tmp",
        ]
    );
    assert!(k.calls.contains(&"pivot_root . oldroot".to_string()));
}

#[test]
fn a_proc_entry_this_kernel_lacks_is_skipped_not_created() {
    let plan = plan_with(vec![MountStep::Proc]);
    let mut k = Recording::default();
    k.absent.insert(PathBuf::from("/newroot/proc/acpi"));
    build_root(&mut k, &plan, &[Source::Absent]).unwrap();
    assert!(
        !k.calls.iter().any(|c| c.contains("/proc/acpi")),
        "{:?}",
        k.calls
    );
    assert!(k
        .calls
        .contains(&"setattr /newroot/proc/kcore ro,nosuid,nodev,noexec".to_string()));
}

#[test]
fn a_failing_step_stops_the_sequence_and_says_which() {
    let (mounts, sources) = steps();
    let plan = plan_with(mounts);
    let mut k = Recording::failing_on("setattr /newroot/etc/ssl/certs");
    let e = build_root(&mut k, &plan, &sources).unwrap_err();
    assert!(e.starts_with("restrict /etc/ssl/certs: "), "{e}");
    assert_eq!(
        k.calls.last().map(String::as_str),
        Some("setattr /newroot/etc/ssl/certs ro,nosuid,nodev,noexec")
    );
    // Nothing after it ran: not the work dir, not the pivot, not the seal.
    assert!(!k.calls.iter().any(|c| c.contains("/newroot/work")));
    assert!(!k.calls.iter().any(|c| c.starts_with("pivot_root . .")));
    assert!(!k.calls.iter().any(|c| c.contains("MS_REMOUNT")));
}

#[test]
fn a_read_only_proc_entry_that_cannot_be_locked_fails_the_build() {
    let plan = plan_with(vec![MountStep::Proc]);
    let mut k = Recording::failing_on("setattr /newroot/proc/sysrq-trigger");
    let e = build_root(&mut k, &plan, &[Source::Absent]).unwrap_err();
    assert!(e.contains("read-only /newroot/proc/sysrq-trigger"), "{e}");
    assert!(!k.calls.iter().any(|c| c.contains("/proc/kcore")));
}

#[test]
fn dev_holds_only_the_harmless_nodes_a_private_devpts_and_shm() {
    let plan = plan_with(vec![MountStep::Dev]);
    let mut k = Recording::default();
    build_root(&mut k, &plan, &[Source::Absent]).unwrap();
    let binds: Vec<&str> = k.calls_starting("mount /oldroot/dev/");
    assert_eq!(binds.len(), 6, "{binds:?}");
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        assert!(binds
            .iter()
            .any(|b| b.starts_with(&format!("mount /oldroot/dev/{node} /newroot/dev/{node} "))));
    }
    let devtmpfs = k.calls_starting("mount tmpfs /newroot/dev tmpfs");
    assert_eq!(
        devtmpfs,
        ["mount tmpfs /newroot/dev tmpfs MS_NOSUID | MS_NOEXEC mode=0755,size=64k"]
    );
    assert!(k.calls.contains(
        &"mount devpts /newroot/dev/pts devpts MS_NOSUID | MS_NOEXEC newinstance,ptmxmode=0666,mode=0620"
            .to_string()
    ));
    assert!(k.calls.contains(
        &"mount tmpfs /newroot/dev/shm tmpfs MS_NOSUID | MS_NODEV | MS_NOEXEC mode=1777,size=64m"
            .to_string()
    ));
}

#[test]
fn generated_files_are_written_read_only() {
    let plan = plan_with(vec![MountStep::File {
        inside: "/etc/hosts".into(),
        contents: "127.0.0.1 localhost\n".into(),
    }]);
    let mut k = Recording::default();
    build_root(&mut k, &plan, &[Source::Absent]).unwrap();
    assert!(k
        .calls
        .contains(&"write /newroot/etc/hosts 444 127.0.0.1 localhost".to_string()));
}

#[test]
fn an_idmapped_work_dir_is_attached_not_bound_and_gets_the_plans_flags() {
    let work = MountStep::BindWritable {
        host: "/srv/w".into(),
        inside: "/work".into(),
        exec: false,
    };
    let plan = plan_with(vec![work]);
    let mut k = Recording::default();
    build_root(
        &mut k,
        &plan,
        &[Source::Tree {
            tree: some_fd(),
            is_dir: true,
        }],
    )
    .unwrap();
    let work_calls: Vec<&str> = k
        .calls
        .iter()
        .map(String::as_str)
        .filter(|c| c.contains("/newroot/work"))
        .collect();
    assert_eq!(
        work_calls,
        [
            "mkdir /newroot/work",
            "attach /newroot/work",
            "setattr /newroot/work nosuid,nodev,noexec"
        ]
    );
    // An attach that fails stops the build and says what it was.
    let mut k = Recording::failing_on("attach /newroot/work");
    let e = build_root(
        &mut k,
        &plan,
        &[Source::Tree {
            tree: some_fd(),
            is_dir: true,
        }],
    )
    .unwrap_err();
    assert!(
        e.starts_with("attach the host's mount at /newroot/work: "),
        "{e}"
    );
    assert!(!k.calls.iter().any(|c| c.starts_with("pivot_root . .")));
}
