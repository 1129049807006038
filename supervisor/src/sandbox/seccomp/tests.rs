//! The compiled filter, run through a small classic-BPF interpreter over
//! `struct seccomp_data`, so decisions are checked without installing them;
//! and proven to decide like the former stack of seccompiler filters.

use proptest::prelude::*;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use super::*;
use crate::plan::{seccomp_denials, ArgOp, Denial, SeccompPlan};

struct Data {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

impl Data {
    fn word(&self, offset: u32) -> u32 {
        match offset {
            0 => self.nr,
            4 => self.arch,
            8 | 12 => 0, // instruction pointer
            o if (16..64).contains(&o) => {
                let arg = self.args[((o - 16) / 8) as usize];
                if (o - 16) % 8 == 0 {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                }
            }
            o => panic!("load at offset {o}"),
        }
    }
}

fn run(prog: &[sock_filter], d: &Data) -> u32 {
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let i = &prog[pc];
        pc += 1;
        let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
        match i.code {
            0x20 => acc = d.word(i.k),
            0x54 => acc &= i.k,
            0x05 => pc += i.k as usize,
            0x15 => pc += jump(acc == i.k),
            0x25 => pc += jump(acc > i.k),
            0x35 => pc += jump(acc >= i.k),
            0x45 => pc += jump(acc & i.k != 0),
            0x06 => return i.k,
            code => panic!("unhandled BPF opcode {code:#x}"),
        }
    }
}

/// The kernel runs every filter, newest first, and keeps the most severe
/// action; among equally severe ones, the first it saw (the newest).
fn decide_on(programs: &[BpfProgram], d: &Data) -> u32 {
    programs
        .iter()
        .rev()
        .map(|p| run(p, d))
        .min_by_key(|r| (r & 0xffff_0000) as i32)
        .unwrap()
}

fn decide(programs: &[BpfProgram], nr: i64, args: [u64; 6]) -> u32 {
    let d = Data {
        nr: nr as u32,
        arch: AUDIT_ARCH_X86_64,
        args,
    };
    decide_on(programs, &d)
}

/// The denials of a profile without `writable_exec` (a superset of the
/// other's).
fn default_plan() -> SeccompPlan {
    plan_for(false)
}

fn plan_for(writable_exec: bool) -> SeccompPlan {
    SeccompPlan {
        denials: seccomp_denials(writable_exec),
        required: true,
    }
}

fn programs() -> Vec<BpfProgram> {
    vec![compile(&default_plan()).unwrap()]
}

/// The former compiler, kept as the reference: the x32/arch filter, then
/// one seccompiler filter (linear chains) per errno, installed in
/// ascending errno order.
fn linear_reference(plan: &SeccompPlan) -> Vec<BpfProgram> {
    let mut by_errno: BTreeMap<i32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    let always: std::collections::BTreeSet<(i32, i64)> = plan
        .denials
        .iter()
        .filter(|d| d.when.is_empty())
        .map(|d| (d.errno, d.nr))
        .collect();
    for d in &plan.denials {
        // A test `(arg & mask) == value` with bits of `value` outside `mask`
        // never holds. seccompiler masks the value first (so it can hold);
        // leave such rules out so the reference means what `ArgMatch` says.
        if d.when
            .iter()
            .any(|m| m.op == ArgOp::Eq && m.value & !m.mask != 0)
        {
            continue;
        }
        let rules = by_errno
            .entry(d.errno)
            .or_default()
            .entry(d.nr)
            .or_default();
        if always.contains(&(d.errno, d.nr)) {
            continue;
        }
        let conditions = d
            .when
            .iter()
            .map(|m| {
                let len = if m.dword {
                    SeccompCmpArgLen::Dword
                } else {
                    SeccompCmpArgLen::Qword
                };
                // seccompiler has no masked `!=`: plans here use `!=` on
                // whole 32-bit arguments only.
                let op = match m.op {
                    ArgOp::Eq => SeccompCmpOp::MaskedEq(m.mask),
                    ArgOp::Ne if m.dword && m.mask == 0xffff_ffff => SeccompCmpOp::Ne,
                    ArgOp::Ne => panic!("the reference cannot express {m:?}"),
                };
                SeccompCondition::new(m.index, len, op, m.value).unwrap()
            })
            .collect();
        rules.push(SeccompRule::new(conditions).unwrap());
    }
    let mut programs = vec![vec![
        ins(BPF_LD_W_ABS, 0, 0, 4),
        ins(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ins(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, 0),
        ins(BPF_JGE_K, 1, 0, X32_SYSCALL_BIT),
        ins(BPF_RET_K, 0, 0, RET_ALLOW),
        ins(BPF_RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
    ]];
    for (errno, rules) in by_errno {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            TargetArch::x86_64,
        )
        .unwrap();
        programs.push(BpfProgram::try_from(filter).unwrap());
    }
    programs
}

fn errno(e: i32) -> u32 {
    RET_ERRNO | e as u32
}

#[test]
fn decisions_for_the_listed_attacks() {
    use libc::*;
    let p = programs();
    let a = |a0: u64, a1: u64| [a0, a1, 0, 0, 0, 0];
    let cases: &[(&str, i64, [u64; 6], u32)] = &[
        ("mount", SYS_mount, a(0, 0), errno(EPERM)),
        ("ptrace", SYS_ptrace, a(0, 0), errno(EPERM)),
        ("bpf", SYS_bpf, a(0, 0), errno(EPERM)),
        ("clone3", SYS_clone3, a(0, 0), errno(ENOSYS)),
        ("thread clone", SYS_clone, a(0x3d0f00, 0), RET_ALLOW),
        ("fork clone", SYS_clone, a(SIGCHLD as u64, 0), RET_ALLOW),
        (
            "clone newuser",
            SYS_clone,
            a(CLONE_NEWUSER as u64 | 17, 0),
            errno(EPERM),
        ),
        (
            "unshare newns",
            SYS_unshare,
            a(CLONE_NEWNS as u64, 0),
            errno(EPERM),
        ),
        (
            "unshare files",
            SYS_unshare,
            a(CLONE_FILES as u64, 0),
            RET_ALLOW,
        ),
        ("socket inet", SYS_socket, a(AF_INET as u64, 1), RET_ALLOW),
        ("socket inet6", SYS_socket, a(AF_INET6 as u64, 1), RET_ALLOW),
        ("socket unix", SYS_socket, a(AF_UNIX as u64, 1), RET_ALLOW),
        (
            "socket netlink",
            SYS_socket,
            a(AF_NETLINK as u64, 3),
            errno(EAFNOSUPPORT),
        ),
        (
            "socket vsock",
            SYS_socket,
            a(AF_VSOCK as u64, 1),
            errno(EAFNOSUPPORT),
        ),
        ("tiocsti", SYS_ioctl, a(0, TIOCSTI), errno(EPERM)),
        (
            "tiocsti high bits",
            SYS_ioctl,
            a(0, TIOCSTI | (0xdead << 32)),
            errno(EPERM),
        ),
        ("tioclinux", SYS_ioctl, a(0, TIOCLINUX), errno(EPERM)),
        ("tcgets", SYS_ioctl, a(0, TCGETS), RET_ALLOW),
        (
            "name_to_handle_at",
            SYS_name_to_handle_at,
            a(0, 0),
            errno(EPERM),
        ),
        ("open_tree_attr", 467, a(0, 0), errno(EPERM)),
        ("kcmp", SYS_kcmp, a(0, 0), errno(EPERM)),
        ("modify_ldt", SYS_modify_ldt, a(0, 0), errno(EPERM)),
        ("memfd_secret", SYS_memfd_secret, a(0, 0), errno(EPERM)),
        ("quotactl_fd", SYS_quotactl_fd, a(0, 0), errno(EPERM)),
        (
            "process_madvise",
            SYS_process_madvise,
            a(0, 0),
            errno(EPERM),
        ),
        ("uselib", SYS_uselib, a(0, 0), errno(EPERM)),
        ("personality default", SYS_personality, a(0, 0), RET_ALLOW),
        (
            "personality query",
            SYS_personality,
            a(0xffff_ffff, 0),
            RET_ALLOW,
        ),
        (
            "personality query, high bits",
            SYS_personality,
            a(0xdead_ffff_ffff, 0),
            RET_ALLOW,
        ),
        (
            "personality default, high bits",
            SYS_personality,
            a(1 << 40, 0),
            RET_ALLOW,
        ),
        (
            "personality ADDR_NO_RANDOMIZE",
            SYS_personality,
            a(ADDR_NO_RANDOMIZE as u64, 0),
            errno(EPERM),
        ),
        (
            "personality READ_IMPLIES_EXEC",
            SYS_personality,
            a(READ_IMPLIES_EXEC as u64, 0),
            errno(EPERM),
        ),
        (
            "personality PER_LINUX32",
            SYS_personality,
            a(8, 0),
            errno(EPERM),
        ),
        (
            "personality all but one bit",
            SYS_personality,
            a(0xffff_fffe, 0),
            errno(EPERM),
        ),
        ("memfd_create", SYS_memfd_create, a(0, 0), errno(ENOSYS)),
        (
            "memfd_create, MFD_EXEC",
            SYS_memfd_create,
            a(0, 0x10),
            errno(ENOSYS),
        ),
        ("read", SYS_read, a(0, 0), RET_ALLOW),
        (
            "x32 read",
            SYS_read | X32_SYSCALL_BIT as i64,
            a(0, 0),
            errno(ENOSYS),
        ),
    ];
    for (what, nr, args, want) in cases {
        assert_eq!(decide(&p, *nr, *args), *want, "{what}");
    }
}

#[test]
fn a_foreign_architecture_is_killed() {
    let d = Data {
        nr: 0,
        arch: 0x4000_0003, // i386
        args: [0; 6],
    };
    assert_eq!(run(&programs()[0], &d), RET_KILL_PROCESS);
}

#[test]
fn programs_fit_the_kernel_limit() {
    for p in programs() {
        assert!(p.len() < 4096, "{} instructions", p.len());
    }
}

/// Counts the instructions the kernel's install-time emulation walks for a
/// number before it reaches a return (`None` once it would load an
/// argument, where the emulation gives up).
fn emulated_steps(prog: &[sock_filter], nr: u32) -> Option<usize> {
    let (mut acc, mut pc, mut steps) = (0u32, 0usize, 0usize);
    loop {
        let i = &prog[pc];
        pc += 1;
        steps += 1;
        let jump = |cond: bool| if cond { i.jt as usize } else { i.jf as usize };
        match i.code {
            0x20 if i.k == 0 => acc = nr,
            0x20 if i.k == 4 => acc = AUDIT_ARCH_X86_64,
            0x20 => return None,
            0x05 => pc += i.k as usize,
            0x15 => pc += jump(acc == i.k),
            0x35 => pc += jump(acc >= i.k),
            0x06 => return Some(steps),
            code => panic!("the kernel's emulation does not take opcode {code:#x}"),
        }
    }
}

#[test]
fn every_syscall_number_is_decided_in_a_few_steps() {
    let new = &programs()[0];
    let old = linear_reference(&default_plan());
    let worst = |p: &[sock_filter]| {
        (0..1024)
            .filter_map(|nr| emulated_steps(p, nr))
            .max()
            .unwrap()
    };
    let new_worst = worst(new);
    assert!(new_worst <= 16, "{new_worst} steps");
    // The former chain took far longer for the numbers it allowed.
    assert!(
        worst(&old[1]) > 4 * new_worst,
        "{} vs {new_worst}",
        worst(&old[1])
    );
}

#[test]
fn same_decisions_as_the_linear_filters_for_every_number() {
    let (new, old) = (programs(), linear_reference(&default_plan()));
    let arg_sets = interesting_args();
    for nr in (0..1024u32).chain((0..1024).map(|n| n | X32_SYSCALL_BIT)) {
        for args in &arg_sets {
            let d = Data {
                nr,
                arch: AUDIT_ARCH_X86_64,
                args: *args,
            };
            assert_eq!(
                decide_on(&new, &d),
                decide_on(&old, &d),
                "nr {nr} args {args:x?}"
            );
        }
    }
}

/// Argument values on both sides of every rule's boundary.
fn interesting_args() -> Vec<[u64; 6]> {
    let mut a0: Vec<u64> = (0..70).collect();
    a0.extend((0..64).map(|b| 1u64 << b));
    a0.extend([
        libc::SIGCHLD as u64,
        0x3d0f00,
        u64::MAX,
        0xdead_0000_0002,
        0xffff_ffff,
        0xffff_fffe,
        0x1_ffff_ffff,
    ]);
    let a1 = [
        0,
        libc::TIOCSTI,
        libc::TIOCLINUX,
        libc::TCGETS,
        libc::TIOCSTI | 1 << 40,
    ];
    a0.iter()
        .flat_map(|&x| a1.iter().map(move |&y| [x, y, 0, 0, 0, 0]))
        .collect()
}

/// A syscall number near the listed ones, or anything.
fn any_nr() -> impl Strategy<Value = u32> {
    let listed: Vec<u32> = seccomp_denials(false).iter().map(|d| d.nr as u32).collect();
    prop_oneof![
        (prop::sample::select(listed), -1i64..=1).prop_map(|(nr, d)| (i64::from(nr) + d) as u32),
        0u32..1024,
        any::<u32>(),
    ]
}

/// Arguments near the rules' values, with random bits around them.
fn any_arg() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..80,
        (any::<u32>(), 0u64..70).prop_map(|(h, l)| (u64::from(h) << 32) | l),
        (0u32..64).prop_map(|b| 1u64 << b),
        (any::<u32>(), 0u32..32).prop_map(|(h, b)| (u64::from(h) << 32) | (0xffff_ffff ^ 1 << b)),
        any::<u32>().prop_map(|h| (u64::from(h) << 32) | 0xffff_ffff),
        (any::<u64>(), 0u32..64).prop_map(|(x, b)| x | 1 << b),
        (
            any::<u32>(),
            prop::sample::select(vec![libc::TIOCSTI, libc::TIOCLINUX, libc::TCGETS])
        )
            .prop_map(|(h, r)| (u64::from(h) << 32) | r),
        any::<u64>(),
    ]
}

/// A random plan: few syscall numbers so denials collide, errnos that
/// conflict, conditions of both widths (some that can never hold).
fn any_plan() -> impl Strategy<Value = SeccompPlan> {
    let cond = (0u8..3, any::<bool>(), any::<u64>(), any::<u64>(), 0u8..5).prop_map(
        |(index, dword, mask, value, kind)| {
            if kind == 4 {
                // `!=` on a whole 32-bit argument (as personality's rule).
                let value = if value % 2 == 0 {
                    value % 8
                } else {
                    0xffff_ffff
                };
                return ArgMatch {
                    index,
                    dword: true,
                    mask: 0xffff_ffff,
                    value,
                    op: ArgOp::Ne,
                };
            }
            let (mask, value) = match kind {
                0 => (mask, value & mask),
                1 => (mask, value), // usually impossible
                2 => (u64::MAX, value % 8),
                _ => (1 << (mask % 64), 1 << (mask % 64)),
            };
            let (mask, value) = if dword {
                (mask & 0xffff_ffff, value & 0xffff_ffff)
            } else {
                (mask, value)
            };
            ArgMatch {
                index,
                dword,
                mask,
                value,
                op: ArgOp::Eq,
            }
        },
    );
    let denial = (
        0i64..12,
        prop::sample::select(vec![1, 13, 38, 97]),
        prop::collection::vec(cond, 0..3),
    )
        .prop_map(|(nr, errno, when)| Denial {
            name: "random",
            nr,
            errno,
            when,
        });
    prop::collection::vec(denial, 0..12).prop_map(|denials| SeccompPlan {
        denials,
        required: true,
    })
}

proptest! {
    /// The new program and the former filters decide alike on the default
    /// plan, for any number and arguments, on x86-64 and elsewhere.
    #[test]
    fn same_decisions_as_the_linear_filters(
        nr in any_nr(),
        args in prop::array::uniform6(any_arg()),
        foreign in prop::sample::select(vec![None, Some(0x4000_0003u32), Some(0xC000_00B7)]),
    ) {
        let d = Data { nr, arch: foreign.unwrap_or(AUDIT_ARCH_X86_64), args };
        let (new, old) = (programs(), linear_reference(&default_plan()));
        prop_assert_eq!(decide_on(&new, &d), decide_on(&old, &d));
    }

    /// The same for random plans, where denials of one syscall overlap and
    /// disagree on the errno.
    #[test]
    fn same_decisions_for_random_plans(
        plan in any_plan(),
        probes in prop::collection::vec((0u32..14, prop::array::uniform6(any_arg())), 32),
    ) {
        let new = vec![compile(&plan).unwrap()];
        let old = linear_reference(&plan);
        for (nr, args) in probes {
            let d = Data { nr, arch: AUDIT_ARCH_X86_64, args };
            prop_assert_eq!(decide_on(&new, &d), decide_on(&old, &d), "nr {} args {:x?}", nr, args);
        }
    }

    /// Any clone flags with a namespace bit are denied, whatever else is set.
    #[test]
    fn clone_with_any_namespace_flag_is_denied(other in any::<u64>(), pick in 0usize..8) {
        let ns = [libc::CLONE_NEWUSER, libc::CLONE_NEWNS, libc::CLONE_NEWPID, libc::CLONE_NEWNET,
                  libc::CLONE_NEWIPC, libc::CLONE_NEWUTS, libc::CLONE_NEWCGROUP, libc::CLONE_NEWTIME];
        let flags = other | ns[pick] as u32 as u64;
        let p = programs();
        prop_assert_eq!(decide(&p, libc::SYS_clone, [flags, 0, 0, 0, 0, 0]), errno(libc::EPERM));
        prop_assert_eq!(decide(&p, libc::SYS_unshare, [flags, 0, 0, 0, 0, 0]), errno(libc::EPERM));
    }

    /// TIOCSTI is caught whatever the upper 32 bits of the argument hold.
    #[test]
    fn tiocsti_upper_bits_do_not_matter(high in any::<u32>()) {
        let req = (u64::from(high) << 32) | libc::TIOCSTI;
        prop_assert_eq!(decide(&programs(), libc::SYS_ioctl, [0, req, 0, 0, 0, 0]), errno(libc::EPERM));
    }
}
#[test]
fn a_long_deny_list_decides_alike() {
    // Hundreds of scattered numbers put the search's branches beyond a
    // conditional jump's reach (255), so long jumps are needed.
    let denials: Vec<Denial> = (0..1200)
        .step_by(3)
        .map(|nr| Denial {
            name: "spread",
            nr,
            errno: if nr % 2 == 0 {
                libc::EPERM
            } else {
                libc::EACCES
            },
            when: if nr % 5 == 0 {
                vec![ArgMatch {
                    index: 2,
                    dword: true,
                    mask: 0xff,
                    value: 7,
                    op: ArgOp::Eq,
                }]
            } else {
                vec![]
            },
        })
        .collect();
    let plan = SeccompPlan {
        denials,
        required: true,
    };
    let new = vec![compile(&plan).unwrap()];
    let long_branch =
        |w: &[sock_filter]| w[0].code == BPF_JGE_K && w[0].jf == 1 && w[1].code == BPF_JA;
    assert!(
        new[0].windows(2).any(long_branch),
        "no long branch exercised"
    );
    let old = linear_reference(&plan);
    for nr in 0..1300 {
        for a2 in [0, 7, 0x107, 8] {
            let d = Data {
                nr,
                arch: AUDIT_ARCH_X86_64,
                args: [0, 0, a2, 0, 0, 0],
            };
            assert_eq!(
                decide_on(&new, &d),
                decide_on(&old, &d),
                "nr {nr} arg2 {a2:#x}"
            );
        }
    }
}

#[test]
fn ranges_cover_exactly_the_values() {
    type Case<'a> = (&'a [u32], &'a [(u32, u32)]);
    let cases: &[Case] = &[
        (&[], &[]),
        (&[5], &[(5, 5)]),
        (&[3, 1, 2, 2], &[(1, 3)]),
        (&[0, 3, 4, 9], &[(0, 0), (3, 4), (9, 9)]),
        (
            &[u32::MAX, u32::MAX - 1, 0],
            &[(0, 0), (u32::MAX - 1, u32::MAX)],
        ),
    ];
    for (values, want) in cases {
        assert_eq!(ranges(values), *want, "{values:?}");
    }
}

#[test]
fn the_default_filter_is_small() {
    // Namespace flags become one JSET, socket families three ranges.
    let len = programs()[0].len();
    assert!(len < 200, "{len} instructions");
}

#[test]
fn masked_inequality_tests_decide_as_written() {
    // seccompiler has no masked `!=`, so the reference cannot check these:
    // a table, including tests that always or never hold.
    let ne = |mask: u64, value: u64| ArgMatch {
        index: 1,
        dword: true,
        mask,
        value,
        op: ArgOp::Ne,
    };
    let deny = |when: Vec<ArgMatch>| SeccompPlan {
        denials: vec![Denial {
            name: "t",
            nr: 7,
            errno: libc::EPERM,
            when,
        }],
        required: true,
    };
    type Case = (&'static str, Vec<ArgMatch>, u64, bool);
    let cases: Vec<Case> = vec![
        ("masked, differs", vec![ne(0xf0, 0x30)], 0x40, true),
        ("masked, equal", vec![ne(0xf0, 0x30)], 0x3f, false),
        (
            "masked, upper half ignored",
            vec![ne(0xf0, 0x30)],
            0x5_0000_0031,
            false,
        ),
        (
            "value outside mask: always",
            vec![ne(0xf0, 0x31)],
            0x30,
            true,
        ),
        ("zero mask, zero value: never", vec![ne(0, 0)], 0x30, false),
        ("both must differ", vec![ne(0xff, 1), ne(0xff, 2)], 2, false),
        ("both differ", vec![ne(0xff, 1), ne(0xff, 2)], 3, true),
    ];
    for (what, when, arg, denied) in cases {
        let p = vec![compile(&deny(when)).unwrap()];
        let want = if denied {
            errno(libc::EPERM)
        } else {
            RET_ALLOW
        };
        assert_eq!(decide(&p, 7, [0, arg, 0, 0, 0, 0]), want, "{what}");
    }
}

#[test]
fn a_64_bit_inequality_is_refused() {
    let plan = SeccompPlan {
        denials: vec![Denial {
            name: "t",
            nr: 7,
            errno: libc::EPERM,
            when: vec![ArgMatch {
                index: 0,
                dword: false,
                mask: u64::MAX,
                value: 0,
                op: ArgOp::Ne,
            }],
        }],
        required: true,
    };
    assert!(compile(&plan).is_err());
}

#[test]
fn memory_files_are_denied_only_without_writable_exec() {
    let args = [0, 0, 0, 0, 0, 0];
    let with = vec![compile(&plan_for(true)).unwrap()];
    let without = vec![compile(&plan_for(false)).unwrap()];
    assert_eq!(decide(&with, libc::SYS_memfd_create, args), RET_ALLOW);
    assert_eq!(
        decide(&without, libc::SYS_memfd_create, args),
        errno(libc::ENOSYS)
    );
    // Everything else alike.
    for nr in (0..1024).filter(|&nr| nr != libc::SYS_memfd_create) {
        assert_eq!(decide(&with, nr, args), decide(&without, nr, args), "{nr}");
    }
}
