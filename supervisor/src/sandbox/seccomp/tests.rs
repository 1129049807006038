//! The compiled filters, run through a small classic-BPF interpreter over
//! `struct seccomp_data`, so decisions are checked without installing them.

use proptest::prelude::*;

use super::*;
use crate::plan::{seccomp_denials, SeccompPlan};

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

/// The kernel runs every filter and keeps the most severe action.
fn decide(programs: &[BpfProgram], nr: i64, args: [u64; 6]) -> u32 {
    let d = Data {
        nr: nr as u32,
        arch: AUDIT_ARCH_X86_64,
        args,
    };
    programs
        .iter()
        .map(|p| run(p, &d))
        .min_by_key(|r| (r & 0xffff_0000) as i32)
        .unwrap()
}

fn programs() -> Vec<BpfProgram> {
    compile(&SeccompPlan {
        denials: seccomp_denials(),
        required: true,
    })
    .unwrap()
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
    assert_eq!(run(&arch_filter(), &d), RET_KILL_PROCESS);
}

#[test]
fn programs_fit_the_kernel_limit() {
    for p in programs() {
        assert!(p.len() < 4096, "{} instructions", p.len());
    }
}

proptest! {
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
