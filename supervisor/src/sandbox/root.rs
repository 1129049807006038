//! The init's mount steps: stage a tmpfs as `/` with the old root at
//! `/oldroot`, assemble `/newroot` from the plan's steps (binds through the
//! descriptors opened before, fresh filesystems, generated files), make
//! `/proc`'s sensitive parts read-only, then pivot into `/newroot`, drop the
//! old root and seal `/` read-only. Every call goes through [`Kernel`], so
//! the sequence is tested without root.

use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::kernel::{ms_flags, Kernel};
use super::Source;
use crate::plan::{dev, MountAttrs, MountStep, Plan};

/// Where the new root is assembled, on a tmpfs that becomes `/` first.
const STAGE: &str = "/tmp";
const NEWROOT: &str = "/newroot";
const OLDROOT: &str = "/oldroot";

fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

fn under(root: &str, inside: &Path) -> PathBuf {
    Path::new(root).join(inside.strip_prefix("/").unwrap_or(inside))
}

fn bind<K: Kernel>(k: &mut K, src: &Path, dst: &Path) -> Result<(), String> {
    k.mount(
        Some(src),
        dst,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )
    .map_err(err(format!("bind {} at {}", src.display(), dst.display())))
}

fn tmpfs<K: Kernel>(k: &mut K, dst: &Path, attrs: MountAttrs, data: &str) -> Result<(), String> {
    k.mount(
        Some(Path::new("tmpfs")),
        dst,
        Some("tmpfs"),
        ms_flags(attrs),
        Some(data),
    )
    .map_err(err(format!("tmpfs at {}", dst.display())))
}

fn mkdir_p<K: Kernel>(k: &mut K, path: &Path) -> Result<(), String> {
    k.create_dir_all(path)
        .map_err(err(format!("mkdir {}", path.display())))
}

fn mkdir_parent<K: Kernel>(k: &mut K, path: &Path) -> Result<(), String> {
    match path.parent() {
        Some(parent) => mkdir_p(k, parent),
        None => Ok(()),
    }
}

/// Builds the new root and enters it.
pub(crate) fn build_root<K: Kernel>(
    k: &mut K,
    plan: &Plan,
    sources: &[Source],
) -> Result<(), String> {
    stage(k)?;
    for (step, source) in plan.mounts.iter().zip(sources) {
        apply_step(k, step, source)?;
    }
    for inside in &plan.proc_read_only {
        let p = under(NEWROOT, inside);
        if k.exists(&p) {
            bind(k, &p, &p)?;
            k.set_mount_attrs(&p, MountAttrs::LOCKED)
                .map_err(err(format!("read-only {}", p.display())))?;
        }
    }
    enter(k)
}

/// A private tmpfs as `/`, the old root below it, an empty `/newroot`.
fn stage<K: Kernel>(k: &mut K) -> Result<(), String> {
    let stage_attrs = MountAttrs {
        nosuid: true,
        nodev: true,
        ..MountAttrs::default()
    };
    k.mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )
    .map_err(err("make / rprivate"))?;
    tmpfs(k, Path::new(STAGE), stage_attrs, "mode=0755,size=1m")?;
    k.chdir(Path::new(STAGE)).map_err(err("chdir stage"))?;
    mkdir_p(k, Path::new("newroot"))?;
    mkdir_p(k, Path::new("oldroot"))?;
    k.pivot_root(Path::new("."), Path::new("oldroot"))
        .map_err(err("pivot_root to stage"))?;
    k.chdir(Path::new("/")).map_err(err("chdir /"))?;
    tmpfs(k, Path::new(NEWROOT), stage_attrs, "mode=0755,size=4m")
}

/// Drops the old root, makes `/newroot` the root, seals it read-only: only
/// the work dir, /tmp and /dev/shm stay writable.
fn enter<K: Kernel>(k: &mut K) -> Result<(), String> {
    k.unmount_detach(Path::new(OLDROOT))
        .map_err(err("detach old root"))?;
    k.chdir(Path::new(NEWROOT)).map_err(err("chdir newroot"))?;
    k.pivot_root(Path::new("."), Path::new("."))
        .map_err(err("pivot_root into new root"))?;
    k.unmount_detach(Path::new("."))
        .map_err(err("detach stage"))?;
    k.chdir(Path::new("/")).map_err(err("chdir /"))?;
    k.mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        None,
    )
    .map_err(err("remount / read-only"))
}

fn apply_step<K: Kernel>(k: &mut K, step: &MountStep, source: &Source) -> Result<(), String> {
    match step {
        MountStep::BindReadOnly { inside, .. } | MountStep::BindWritable { inside, .. } => {
            bind_source(k, inside, source, step.attrs())
        }
        MountStep::Tmpfs {
            inside, size_mib, ..
        } => {
            let dst = under(NEWROOT, inside);
            mkdir_p(k, &dst)?;
            tmpfs(
                k,
                &dst,
                step.attrs(),
                &format!("mode=1777,size={size_mib}m"),
            )
        }
        MountStep::Proc => {
            let dst = under(NEWROOT, Path::new("/proc"));
            mkdir_p(k, &dst)?;
            k.mount(
                Some(Path::new("proc")),
                &dst,
                Some("proc"),
                ms_flags(step.attrs()),
                None,
            )
            .map_err(err("mount /proc"))
        }
        MountStep::Dev => build_dev(k, step.attrs()),
        MountStep::File { inside, contents } => {
            let dst = under(NEWROOT, inside);
            mkdir_parent(k, &dst)?;
            k.write_file(&dst, contents.as_bytes(), 0o444)
                .map_err(err(format!("write {}", dst.display())))
        }
    }
}

/// Binds an opened source at `inside` (or recreates its symlink) and sets
/// the step's flags on it.
fn bind_source<K: Kernel>(
    k: &mut K,
    inside: &Path,
    source: &Source,
    attrs: MountAttrs,
) -> Result<(), String> {
    let dst = under(NEWROOT, inside);
    let fd = match source {
        Source::Absent => return Ok(()),
        Source::Symlink(target) => {
            mkdir_parent(k, &dst)?;
            return k
                .symlink(target, &dst)
                .map_err(err(format!("symlink {}", dst.display())));
        }
        Source::Tree { tree, is_dir } => {
            if *is_dir {
                mkdir_p(k, &dst)?;
            } else {
                mkdir_parent(k, &dst)?;
                k.create_file(&dst)
                    .map_err(err(format!("create {}", dst.display())))?;
            }
            k.attach_tree(tree, &dst)
                .map_err(err(format!("attach the host's mount at {}", dst.display())))?;
            return k
                .set_mount_attrs(&dst, attrs)
                .map_err(err(format!("restrict {}", inside.display())));
        }
        Source::Fd { fd, is_dir } => {
            if *is_dir {
                mkdir_p(k, &dst)?;
            } else {
                mkdir_parent(k, &dst)?;
                k.create_file(&dst)
                    .map_err(err(format!("create {}", dst.display())))?;
            }
            fd
        }
    };
    let by_fd = format!("/proc/self/fd/{}", super::sys::raw(fd));
    bind(k, &under(OLDROOT, Path::new(&by_fd)), &dst)?;
    k.set_mount_attrs(&dst, attrs)
        .map_err(err(format!("restrict {}", inside.display())))
}

/// The minimal /dev (see [`dev`]).
fn build_dev<K: Kernel>(k: &mut K, attrs: MountAttrs) -> Result<(), String> {
    let dir = under(NEWROOT, Path::new("/dev"));
    mkdir_p(k, &dir)?;
    tmpfs(k, &dir, attrs, "mode=0755,size=64k")?;
    for node in dev::NODES {
        let dst = dir.join(node);
        k.create_file(&dst)
            .map_err(err(format!("create {}", dst.display())))?;
        bind(k, &under(OLDROOT, &Path::new("/dev").join(node)), &dst)?;
    }
    let pts = dir.join("pts");
    mkdir_p(k, &pts)?;
    k.mount(
        Some(Path::new("devpts")),
        &pts,
        Some("devpts"),
        ms_flags(dev::PTS),
        Some(dev::PTS_OPTIONS),
    )
    .map_err(err("mount devpts"))?;
    k.symlink(Path::new("pts/ptmx"), &dir.join("ptmx"))
        .map_err(err("symlink ptmx"))?;
    let shm = dir.join("shm");
    mkdir_p(k, &shm)?;
    tmpfs(k, &shm, dev::SHM, dev::SHM_OPTIONS)?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        k.symlink(Path::new(target), &dir.join(name))
            .map_err(err(format!("symlink /dev/{name}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
