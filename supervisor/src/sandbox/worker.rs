//! The worker process between fork and execve: new session, limits, no
//! capabilities, no_new_privs, Landlock, seccomp, then the command.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::sys::resource::{setrlimit, Resource};
use seccompiler::BpfProgram;

use super::init::fail;
use super::{sys, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};
use crate::plan::{FsAccess, LandlockPlan, Plan};

/// The Landlock ABI this code is written against. Rights of newer ABIs
/// (e.g. ABI 9's pathname-socket control) are not handled, so they stay
/// allowed rather than silently breaking the control socket.
const LANDLOCK_ABI: ABI = ABI::V7;

pub(crate) fn main(
    plan: &Plan,
    filter: &BpfProgram,
    errors: &OwnedFd,
    limits_by_cgroup: bool,
) -> ! {
    if let Err(msg) = harden(plan, filter, limits_by_cgroup) {
        fail(errors, &msg);
    }
    exec(plan)
}

fn harden(plan: &Plan, filter: &BpfProgram, limits_by_cgroup: bool) -> Result<(), String> {
    nix::unistd::setsid().map_err(|e| format!("setsid: {e}"))?;
    sys::reset_signals();
    set_rlimits(plan, limits_by_cgroup)?;
    sys::lock_securebits().map_err(|e| format!("securebits: {e}"))?;
    for set in [
        caps::CapSet::Bounding,
        caps::CapSet::Ambient,
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("dropping {set:?} capabilities: {e}"))?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    std::env::set_current_dir(&plan.cwd).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            // The common mistake: root runs the sandbox on a directory only
            // root may enter, but the worker is `--worker-user`, not root.
            " (the worker's host user cannot enter the work dir: when started by root \
                 the worker runs as --worker-user, default gatehouse-worker; make the \
                 work dir readable and writable by it, e.g. with chown)"
        } else {
            ""
        };
        format!("chdir {}: {e}{hint}", plan.cwd.display())
    })?;
    apply_landlock(&plan.landlock)?;
    seccompiler::apply_filter(filter).map_err(|e| format!("installing seccomp filter: {e}"))?;
    Ok(())
}

fn set_rlimits(plan: &Plan, limits_by_cgroup: bool) -> Result<(), String> {
    let l = &plan.limits;
    let set = |res: Resource, v: u64, what: &str| {
        setrlimit(res, v, v).map_err(|e| format!("setrlimit {what}={v}: {e}"))
    };
    set(Resource::RLIMIT_NOFILE, l.open_files, "open files")?;
    set(Resource::RLIMIT_CORE, 0, "core size")?;
    if !limits_by_cgroup {
        if let Some(pids) = l.pids {
            set(Resource::RLIMIT_NPROC, pids, "processes")?;
        }
        if let Some(mib) = l.memory_mib {
            set(
                Resource::RLIMIT_DATA,
                mib.saturating_mul(1 << 20),
                "data size",
            )?;
        }
    }
    Ok(())
}

fn fs_access(a: FsAccess) -> BitFlags<AccessFs> {
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    match a {
        FsAccess::ReadDir => AccessFs::ReadDir.into(),
        FsAccess::Read => read,
        FsAccess::ReadExec => read | AccessFs::Execute,
        FsAccess::Device => read | AccessFs::WriteFile | AccessFs::IoctlDev,
        FsAccess::ReadWrite => all & !AccessFs::Execute,
        FsAccess::ReadWriteExec => all,
    }
}

fn apply_landlock(plan: &LandlockPlan) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: landlock::RulesetError| format!("landlock {what}: {err}")
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .map_err(e("handle fs"))?
        .handle_access(AccessNet::from_all(LANDLOCK_ABI))
        .map_err(e("handle net"))?
        .scope(Scope::from_all(LANDLOCK_ABI))
        .map_err(e("scope"))?
        .create()
        .map_err(e("create"))?;
    for (path, access) in &plan.rules {
        let Ok(fd) = PathFd::new(path) else {
            continue; // absent on this host, so nothing to grant
        };
        let mut bits = fs_access(*access);
        // fstat on the fd just opened, not a second walk of the path.
        if !is_dir(&fd) {
            bits &= AccessFs::from_file(LANDLOCK_ABI);
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, bits))
            .map_err(e(&format!("rule {}", path.display())))?;
    }
    for port in &plan.tcp_connect {
        ruleset = ruleset
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(e("tcp rule"))?;
    }
    let status = ruleset.restrict_self().map_err(e("restrict_self"))?;
    if plan.required && status.ruleset == RulesetStatus::NotEnforced {
        return Err("required protection missing: Landlock is not enforced by this kernel. Run `gatehouse doctor`; use a profile with require.landlock = false only if you accept that".to_string());
    }
    Ok(())
}

/// Whether `fd` is a directory; an fd that cannot be stat'ed counts as a
/// file, which grants fewer rights.
fn is_dir(fd: &PathFd) -> bool {
    use nix::sys::stat::{fstat, SFlag};
    fstat(fd).is_ok_and(|st| {
        SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
    })
}

/// execve through the sandbox's PATH, like a shell: 127 when not found,
/// 126 when found but not executable.
fn exec(plan: &Plan) -> ! {
    let to_c = |s: &str| CString::new(s).unwrap_or_default();
    let argv: Vec<CString> = plan.argv.iter().map(|a| to_c(a)).collect();
    let envp: Vec<CString> = plan
        .env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect();
    let prog = plan.argv.first().map(String::as_str).unwrap_or("");
    let candidates: Vec<String> = if prog.contains('/') {
        vec![prog.to_string()]
    } else {
        let path = plan
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
            .unwrap_or("/usr/bin:/bin");
        path.split(':')
            .filter(|d| !d.is_empty())
            .map(|d| format!("{d}/{prog}"))
            .collect()
    };
    let mut last = nix::errno::Errno::ENOENT;
    for cand in &candidates {
        let Err(e) = nix::unistd::execve(&to_c(cand), &argv, &envp);
        if e != nix::errno::Errno::ENOENT && e != nix::errno::Errno::ENOTDIR {
            last = e;
        }
    }
    let code = if last == nix::errno::Errno::ENOENT {
        EXIT_NOT_FOUND
    } else {
        EXIT_NOT_EXECUTABLE
    };
    eprintln!("gatehouse sandbox: cannot execute {prog}: {}", last.desc());
    sys::exit_now(i32::from(code))
}
