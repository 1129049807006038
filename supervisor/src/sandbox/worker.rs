//! What the worker will do between its start and `execve`, prepared by the
//! init before the worker exists: the worker starts sharing the init's
//! memory and must not allocate (see `sys::exec`). The pure parts (limits,
//! where to look for the command, the environment) and the Landlock
//! ruleset (through [`Kernel`]) are tested without root.

use std::os::fd::OwnedFd;

use nix::sys::resource::Resource;
use seccompiler::BpfProgram;

use super::kernel::Kernel;
use super::sys::exec::{ExecArgs, Start};
use super::sys::host::Host;
use crate::plan::{LandlockPlan, Plan};

/// Prepares the worker's start; nothing of it runs yet.
pub(crate) fn prepare<'a>(
    k: &mut Host,
    plan: &'a Plan,
    filter: &'a BpfProgram,
    errors: &'a OwnedFd,
    limits_by_cgroup: bool,
) -> Result<Start<'a>, String> {
    let cwd = super::sys::inside::cstring(&plan.cwd)
        .map_err(|e| format!("work dir {}: {e}", plan.cwd.display()))?;
    let envp: Vec<String> = plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(Start {
        rlimits: rlimits(plan, limits_by_cgroup),
        cwd,
        cwd_shown: &plan.cwd,
        landlock: Some(landlock_ruleset(k, &plan.landlock)?),
        landlock_required: plan.landlock.required,
        filter,
        exec: ExecArgs::new(&exec_candidates(plan), &plan.argv, &envp),
        program: plan.argv.first().map(String::as_str).unwrap_or(""),
        errors,
    })
}

/// The rlimits the worker sets (soft and hard alike): always open files
/// and no core dumps; processes and data size too when no cgroup limits
/// them.
pub(crate) fn rlimits(plan: &Plan, limits_by_cgroup: bool) -> Vec<(Resource, u64, &'static str)> {
    let l = &plan.limits;
    let mut v = vec![
        (Resource::RLIMIT_NOFILE, l.open_files, "open files"),
        (Resource::RLIMIT_CORE, 0, "core size"),
    ];
    if !limits_by_cgroup {
        if let Some(pids) = l.pids {
            v.push((Resource::RLIMIT_NPROC, pids, "processes"));
        }
        if let Some(mib) = l.memory_mib {
            v.push((
                Resource::RLIMIT_DATA,
                mib.saturating_mul(1 << 20),
                "data size",
            ));
        }
    }
    v
}

/// Where `execve` looks for the command: the name itself when it has a
/// `/`, otherwise each directory of the sandbox's PATH, like a shell.
pub(crate) fn exec_candidates(plan: &Plan) -> Vec<String> {
    let prog = plan.argv.first().map(String::as_str).unwrap_or("");
    if prog.contains('/') {
        return vec![prog.to_string()];
    }
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
}

/// Creates the Landlock ruleset and grants the plan's rules (paths absent
/// here are skipped: nothing to grant). The worker enforces it on itself.
pub(crate) fn landlock_ruleset<K: Kernel>(
    k: &mut K,
    plan: &LandlockPlan,
) -> Result<K::Ruleset, String> {
    let mut ruleset = k
        .landlock_ruleset()
        .map_err(|e| format!("landlock create: {e}"))?;
    for (path, access) in &plan.rules {
        k.landlock_allow_path(&mut ruleset, path, *access)
            .map_err(|e| format!("landlock rule {}: {e}", path.display()))?;
    }
    for port in &plan.tcp_connect {
        k.landlock_allow_connect(&mut ruleset, *port)
            .map_err(|e| format!("landlock tcp rule: {e}"))?;
    }
    Ok(ruleset)
}

#[cfg(test)]
mod tests;
