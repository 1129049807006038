//! Compiles the plan's seccomp denials into BPF programs (pure; installing
//! them happens in the worker).
//!
//! seccompiler gives one match action per filter, so denials are grouped by
//! errno into one filter each. A small hand-written filter in front checks
//! the architecture and refuses the x32 ABI, whose syscall numbers carry bit
//! 30 under the same AUDIT_ARCH_X86_64 and would otherwise bypass every
//! number-based rule.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::SandboxError;
use crate::plan::SeccompPlan;

pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Kill on a foreign architecture; ENOSYS for x32 syscall numbers.
pub fn arch_filter() -> BpfProgram {
    vec![
        ins(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ins(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(BPF_JGE_K, 1, 0, X32_SYSCALL_BIT),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
        ins(BPF_RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
    ]
}

/// The programs to install, in order.
pub fn compile(plan: &SeccompPlan) -> Result<Vec<BpfProgram>, SandboxError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(SandboxError::Seccomp(
            "the seccomp filter is written for x86-64 only".to_string(),
        ));
    }
    let err = |e: seccompiler::BackendError| SandboxError::Seccomp(e.to_string());
    let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    let always: std::collections::BTreeSet<(i32, i64)> = plan
        .denials
        .iter()
        .filter(|d| d.when.is_empty())
        .map(|d| (d.errno, d.nr))
        .collect();
    for d in &plan.denials {
        let rules = by_errno
            .entry(d.errno)
            .or_default()
            .entry(d.nr)
            .or_default();
        if always.contains(&(d.errno, d.nr)) {
            // An empty chain matches the syscall unconditionally.
            continue;
        }
        let conditions = d
            .when
            .iter()
            .map(|m| {
                SeccompCondition::new(
                    m.index,
                    if m.dword {
                        SeccompCmpArgLen::Dword
                    } else {
                        SeccompCmpArgLen::Qword
                    },
                    SeccompCmpOp::MaskedEq(m.mask),
                    m.value,
                )
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        rules.push(SeccompRule::new(conditions).map_err(err)?);
    }
    let mut programs = vec![arch_filter()];
    for (errno, rules) in by_errno {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            TargetArch::x86_64,
        )
        .map_err(err)?;
        programs.push(BpfProgram::try_from(filter).map_err(err)?);
    }
    Ok(programs)
}

#[cfg(test)]
mod tests;
