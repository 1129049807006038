//! Compiles the plan's seccomp denials into one BPF program (pure, on the
//! host side before the clone; the worker only installs it).
//!
//! Install cost, not run cost, is what this layout is for. At install the
//! kernel (≥ 5.11) emulates each filter for every syscall number of the
//! architecture to find the numbers it can allow without running it, and
//! it converts and JITs every filter; seccompiler's one-filter-per-action,
//! linear-chain output made that ~1150 instructions over 4 filters. Here:
//!
//! ```text
//! arch != x86-64        -> KILL_PROCESS
//! nr has the x32 bit    -> ENOSYS   (x32 numbers would dodge every rule)
//! binary search on nr over runs of equal outcome:
//!     ALLOW | ERRNO(e) | JA body      (one instruction per run)
//! bodies: argument rules of one syscall, strongest errno first -> ALLOW
//! ```
//!
//! So an unlisted number costs ~log2(runs) jumps to emulate; only the few
//! syscalls that test arguments (clone, unshare, socket, socketpair, ioctl,
//! personality) have bodies, shared when equal, with the namespace flags tested by one
//! JSET and the socket families by ranges: ~150 instructions in all, and
//! the kernel's convert/JIT cost grows with the length.
//!
//! Semantics are those of the former stack of filters (one per errno): when
//! several denials of one syscall match with different errnos, the kernel
//! reported the filter installed last, i.e. the highest errno, and so does
//! this program.

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram};

use super::SandboxError;
use crate::plan::{ArgMatch, ArgOp, Denial, SeccompPlan};

pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_AND_K: u16 = 0x54;
const BPF_JA: u16 = 0x05;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGT_K: u16 = 0x25;
const BPF_JGE_K: u16 = 0x35;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;
/// `BPF_MAXINSNS`.
pub const MAX_INSTRUCTIONS: usize = 4096;

/// Offsets into `struct seccomp_data` (little-endian x86-64).
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const ARGS_OFFSET: u32 = 16;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn ret(k: u32) -> sock_filter {
    ins(BPF_RET_K, 0, 0, k)
}

fn errno_ret(errno: i32) -> u32 {
    RET_ERRNO | (errno as u32 & 0xffff)
}

/// Kill on a foreign architecture; ENOSYS for x32 syscall numbers. Leaves
/// the syscall number in the accumulator.
fn arch_prologue() -> Vec<sock_filter> {
    vec![
        ins(BPF_LD_W_ABS, 0, 0, ARCH_OFFSET),
        ins(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ret(RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, NR_OFFSET),
        ins(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
        ret(errno_ret(libc::ENOSYS)),
    ]
}

/// What a run of syscall numbers leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Allow,
    Errno(i32),
    /// Index into the argument-rule bodies.
    Body(usize),
}

/// Syscall numbers from this one up to the next run's first (the last run
/// to the end of the 32-bit range) share an outcome.
type Run = (u32, Outcome);

/// The argument rules of one syscall: `(errno, conditions)`, every
/// condition of a rule must hold.
type Body = Vec<(i32, Vec<ArgMatch>)>;

/// The program to install.
pub fn compile(plan: &SeccompPlan) -> Result<BpfProgram, SandboxError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(SandboxError::Seccomp(
            "the seccomp filter is written for x86-64 only".to_string(),
        ));
    }
    let (runs, bodies) = outcomes(plan)?;
    let mut program = arch_prologue();
    let mut jumps_to_bodies = Vec::new();
    search(&runs, &mut program, &mut jumps_to_bodies)?;
    let mut body_starts = Vec::with_capacity(bodies.len());
    for body in &bodies {
        body_starts.push(program.len());
        emit_body(body, &mut program)?;
    }
    for (at, body) in jumps_to_bodies {
        program[at].k = (body_starts[body] - at - 1) as u32;
    }
    if program.len() > MAX_INSTRUCTIONS {
        return Err(SandboxError::Seccomp(format!(
            "the filter has {} instructions, the kernel takes at most {MAX_INSTRUCTIONS}",
            program.len()
        )));
    }
    Ok(program)
}

/// Per syscall: the strongest unconditional errno, and the conditional
/// rules by errno.
type Always = BTreeMap<u32, i32>;
type When = BTreeMap<u32, BTreeMap<i32, Vec<Vec<ArgMatch>>>>;

/// Sorted runs covering every syscall number, and the argument-rule bodies
/// they refer to.
fn outcomes(plan: &SeccompPlan) -> Result<(Vec<Run>, Vec<Body>), SandboxError> {
    let (always, when) = group(plan)?;
    let (by_nr, bodies) = by_syscall(&always, when);
    Ok((runs(&by_nr), bodies))
}

/// The denial's syscall number, once its numbers and tests are in range.
fn checked_nr(d: &Denial) -> Result<u32, SandboxError> {
    let nr = u32::try_from(d.nr)
        .ok()
        .filter(|nr| nr & X32_SYSCALL_BIT == 0)
        .ok_or_else(|| {
            SandboxError::Seccomp(format!("{}: syscall number {} out of range", d.name, d.nr))
        })?;
    if !(1..=0xfff).contains(&d.errno) {
        return Err(SandboxError::Seccomp(format!(
            "{}: errno {} out of range",
            d.name, d.errno
        )));
    }
    for m in &d.when {
        if m.index > 5
            || (m.dword && (m.mask | m.value) >> 32 != 0)
            || (m.op == ArgOp::Ne && !m.dword)
        {
            return Err(SandboxError::Seccomp(format!(
                "{}: bad argument test {m:?}",
                d.name
            )));
        }
    }
    Ok(nr)
}

/// Groups the denials per syscall, both kinds ordered by errno (highest
/// wins, as with stacked filters).
fn group(plan: &SeccompPlan) -> Result<(Always, When), SandboxError> {
    let mut always = Always::new();
    let mut when = When::new();
    for d in &plan.denials {
        let nr = checked_nr(d)?;
        if d.when.is_empty() {
            let e = always.entry(nr).or_insert(d.errno);
            *e = (*e).max(d.errno);
        } else {
            when.entry(nr)
                .or_default()
                .entry(d.errno)
                .or_default()
                .push(d.when.clone());
        }
    }
    Ok((always, when))
}

/// Each denied syscall's outcome, and the bodies the conditional ones use
/// (shared when equal).
fn by_syscall(always: &Always, when: When) -> (BTreeMap<u32, Outcome>, Vec<Body>) {
    let mut bodies: Vec<Body> = Vec::new();
    let mut by_nr: BTreeMap<u32, Outcome> = BTreeMap::new();
    for (&nr, &errno) in always {
        by_nr.insert(nr, Outcome::Errno(errno));
    }
    for (nr, rules) in when {
        // Rules with an errno at or below an unconditional one never change
        // the result.
        let floor = always.get(&nr).copied().unwrap_or(0);
        let mut body: Body = rules
            .into_iter()
            .rev()
            .filter(|(errno, _)| *errno > floor)
            .flat_map(|(errno, rules)| rules.into_iter().map(move |r| (errno, r)))
            .collect();
        if body.is_empty() {
            continue;
        }
        if floor > 0 {
            // Nothing stronger matched: the unconditional errno.
            body.push((floor, Vec::new()));
        }
        // socket and socketpair share theirs.
        let index = match bodies.iter().position(|b| *b == body) {
            Some(i) => i,
            None => {
                bodies.push(body);
                bodies.len() - 1
            }
        };
        by_nr.insert(nr, Outcome::Body(index));
    }
    (by_nr, bodies)
}

/// Sorted runs covering every syscall number: allowed between the denied
/// ones, equal neighbours merged.
fn runs(by_nr: &BTreeMap<u32, Outcome>) -> Vec<Run> {
    let mut points: Vec<Run> = Vec::new();
    if !by_nr.contains_key(&0) {
        points.push((0, Outcome::Allow));
    }
    for (&nr, &outcome) in by_nr {
        points.push((nr, outcome));
        if !by_nr.contains_key(&(nr + 1)) {
            points.push((nr + 1, Outcome::Allow));
        }
    }
    let mut runs: Vec<Run> = Vec::with_capacity(points.len());
    for (start, outcome) in points {
        if runs.last().map(|r| r.1) != Some(outcome) {
            runs.push((start, outcome));
        }
    }
    runs
}

/// Emits a binary search over `runs` (accumulator: the syscall number).
/// Each leaf is one instruction: a return, or a jump to a body whose
/// position `jumps` records for patching.
fn search(
    runs: &[Run],
    out: &mut Vec<sock_filter>,
    jumps: &mut Vec<(usize, usize)>,
) -> Result<(), SandboxError> {
    match runs {
        [] => Err(SandboxError::Seccomp("empty search".to_string())),
        [(_, outcome)] => {
            match *outcome {
                Outcome::Allow => out.push(ret(RET_ALLOW)),
                Outcome::Errno(e) => out.push(ret(errno_ret(e))),
                Outcome::Body(b) => {
                    jumps.push((out.len(), b));
                    out.push(ins(BPF_JA, 0, 0, 0));
                }
            }
            Ok(())
        }
        _ => {
            let mid = runs.len() / 2;
            let (mut left, mut left_jumps) = (Vec::new(), Vec::new());
            search(&runs[..mid], &mut left, &mut left_jumps)?;
            let first_right = runs[mid].0;
            match u8::try_from(left.len()) {
                Ok(skip) => out.push(ins(BPF_JGE_K, skip, 0, first_right)),
                // Too far for a conditional jump (long deny lists): go
                // through an unconditional one.
                Err(_) => {
                    out.push(ins(BPF_JGE_K, 0, 1, first_right));
                    out.push(ins(BPF_JA, 0, 0, left.len() as u32));
                }
            }
            let base = out.len();
            jumps.extend(left_jumps.into_iter().map(|(at, b)| (base + at, b)));
            out.extend(left);
            search(&runs[mid..], out, jumps)
        }
    }
}

fn short_jump(distance: usize) -> Result<u8, SandboxError> {
    u8::try_from(distance)
        .map_err(|_| SandboxError::Seccomp(format!("jump of {distance} exceeds 255")))
}

/// A rule as tests on 32-bit words of the arguments, simplified where
/// consecutive rules with one errno test one word alike (the namespace
/// flags, the socket families), so that they cost a few instructions.
#[derive(Debug, PartialEq)]
enum Test {
    /// `word & bits != 0`: single-bit `(word & bit) == bit` rules, merged.
    AnyBit { offset: u32, bits: u32 },
    /// `word` is one of `values`: full-mask equality rules, merged.
    OneOf { offset: u32, values: Vec<u32> },
    /// Every word test holds (none: always).
    All(Vec<Word>),
}

/// `(word at offset & mask) == value`, or `!=` when not `equal`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Word {
    offset: u32,
    mask: u32,
    value: u32,
    equal: bool,
}

/// The rule's tests on 32-bit words, without those that always hold;
/// `None` when one can never hold.
fn words(conditions: &[ArgMatch]) -> Option<Vec<Word>> {
    let mut words = Vec::new();
    for m in conditions {
        let low = ARGS_OFFSET + 8 * u32::from(m.index);
        let equal = m.op == ArgOp::Eq;
        words.push(Word {
            offset: low,
            mask: m.mask as u32,
            value: m.value as u32,
            equal,
        });
        if !m.dword {
            words.push(Word {
                offset: low + 4,
                mask: (m.mask >> 32) as u32,
                value: (m.value >> 32) as u32,
                equal,
            });
        }
    }
    let mut kept = Vec::with_capacity(words.len());
    for w in words {
        // Value bits outside the mask: `==` never holds, `!=` always does.
        let impossible = w.value & !w.mask != 0;
        match (w.equal, impossible) {
            (true, true) => return None,
            (false, true) => {}
            // 0 == 0 always holds; 0 != 0 never does.
            (true, false) if w.mask == 0 => {}
            (false, false) if w.mask == 0 => return None,
            _ => kept.push(w),
        }
    }
    Some(kept)
}

fn simplify(body: &Body) -> Vec<(i32, Test)> {
    let mut out: Vec<(i32, Test)> = Vec::new();
    for (errno, conditions) in body {
        // One test per 32-bit half that matters.
        let Some(words) = words(conditions) else {
            continue; // can never hold
        };
        let test = match words[..] {
            [Word {
                offset,
                mask,
                value,
                equal: true,
            }] if mask == value && mask.count_ones() == 1 => Test::AnyBit { offset, bits: mask },
            [Word {
                offset,
                mask: u32::MAX,
                value,
                equal: true,
            }] => Test::OneOf {
                offset,
                values: vec![value],
            },
            _ => Test::All(words),
        };
        match (out.last_mut(), test) {
            (
                Some((e, Test::AnyBit { offset, bits })),
                Test::AnyBit {
                    offset: o,
                    bits: more,
                },
            ) if *e == *errno && *offset == o => *bits |= more,
            (
                Some((e, Test::OneOf { offset, values })),
                Test::OneOf {
                    offset: o,
                    values: more,
                },
            ) if *e == *errno && *offset == o => values.extend(more),
            (_, test) => out.push((*errno, test)),
        }
    }
    out
}

/// Inclusive ranges covering exactly `values`.
fn ranges(values: &[u32]) -> Vec<(u32, u32)> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for v in sorted {
        match out.last_mut() {
            Some(last) if last.1.checked_add(1) == Some(v) => last.1 = v,
            _ => out.push((v, v)),
        }
    }
    out
}

/// Each rule: its test holds -> its errno; else the next rule; after the
/// last rule, ALLOW.
fn emit_body(body: &Body, out: &mut Vec<sock_filter>) -> Result<(), SandboxError> {
    for (errno, test) in simplify(body) {
        let mut rule = Vec::new();
        // Compares whose false (`misses`) or true (`misses_jt`) branch
        // skips the rule, and ones whose true (`jt`) or false (`jf`)
        // branch goes to the rule's return.
        let (mut misses, mut misses_jt) = (Vec::new(), Vec::new());
        let (mut hits_jt, mut hits_jf) = (Vec::new(), Vec::new());
        match test {
            Test::AnyBit { offset, bits } => {
                rule.push(ins(BPF_LD_W_ABS, 0, 0, offset));
                misses.push(rule.len());
                rule.push(ins(BPF_JSET_K, 0, 0, bits));
            }
            Test::OneOf { offset, values } => {
                rule.push(ins(BPF_LD_W_ABS, 0, 0, offset));
                for (lo, hi) in ranges(&values) {
                    if lo == hi {
                        hits_jt.push(rule.len());
                        rule.push(ins(BPF_JEQ_K, 0, 0, lo));
                    } else {
                        rule.push(ins(BPF_JGE_K, 0, 1, lo));
                        hits_jf.push(rule.len());
                        rule.push(ins(BPF_JGT_K, 0, 0, hi));
                    }
                }
                rule.push(ins(BPF_JA, 0, 0, 1));
            }
            Test::All(words) => {
                for w in words {
                    rule.push(ins(BPF_LD_W_ABS, 0, 0, w.offset));
                    if w.mask != u32::MAX {
                        rule.push(ins(BPF_AND_K, 0, 0, w.mask));
                    }
                    let misses = if w.equal { &mut misses } else { &mut misses_jt };
                    misses.push(rule.len());
                    rule.push(ins(BPF_JEQ_K, 0, 0, w.value));
                }
            }
        }
        rule.push(ret(errno_ret(errno)));
        let len = rule.len();
        for at in misses {
            rule[at].jf = short_jump(len - at - 1)?;
        }
        for at in misses_jt {
            rule[at].jt = short_jump(len - at - 1)?;
        }
        for at in hits_jt {
            rule[at].jt = short_jump(len - at - 2)?;
        }
        for at in hits_jf {
            rule[at].jf = short_jump(len - at - 2)?;
        }
        out.extend(rule);
    }
    out.push(ret(RET_ALLOW));
    Ok(())
}

#[cfg(test)]
mod tests;
