//! The seccomp denials every worker gets, as data (compiled and proven in
//! `sandbox::seccomp`).

/// A seccomp argument test: `(arg & mask) == value` (or `!=`) on the low
/// 32 bits or all 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgMatch {
    pub index: u8,
    pub dword: bool,
    pub mask: u64,
    pub value: u64,
    pub op: ArgOp,
}

/// How an [`ArgMatch`] compares. `Ne` is for 32-bit arguments only (a
/// 64-bit one would need either half to differ, which one test cannot say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgOp {
    Eq,
    Ne,
}

/// Deny `syscall` (with `errno`) when all `when` tests hold (always, if empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub name: &'static str,
    pub nr: i64,
    pub errno: i32,
    pub when: Vec<ArgMatch>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeccompPlan {
    pub denials: Vec<Denial>,
    pub required: bool,
}

/// Syscalls newer than the `libc` crate's table (x86-64 numbers).
const SYS_OPEN_TREE_ATTR: i64 = 467;

/// `personality(2)`'s query: returns the persona, changes nothing.
const PERSONALITY_QUERY: u64 = 0xffff_ffff;

/// What a worker never needs. Everything else is allowed: a coding worker
/// runs arbitrary toolchains, so an allowlist would break them; the
/// namespaces and Landlock are the main walls, seccomp removes the kernel
/// surface that could get through them. `supervisor/README.md` says why
/// each allowed call that reaches beyond the process stays allowed.
/// `writable_exec` is the profile's: without it, memory files go too (see
/// [`memfd_denial`]). A table, one entry per denial, so longer than a
/// function should be.
pub fn seccomp_denials(writable_exec: bool) -> Vec<Denial> {
    use libc::*;
    let eperm = EPERM;
    let always = |name: &'static str, nr: i64| Denial {
        name,
        nr,
        errno: eperm,
        when: vec![],
    };
    let mut d = vec![
        always("mount", SYS_mount),
        always("umount2", SYS_umount2),
        always("pivot_root", SYS_pivot_root),
        always("chroot", SYS_chroot),
        always("fsopen", SYS_fsopen),
        always("fsconfig", SYS_fsconfig),
        always("fsmount", SYS_fsmount),
        always("fspick", SYS_fspick),
        always("move_mount", SYS_move_mount),
        always("open_tree", SYS_open_tree),
        always("mount_setattr", SYS_mount_setattr),
        always("ptrace", SYS_ptrace),
        always("process_vm_readv", SYS_process_vm_readv),
        always("process_vm_writev", SYS_process_vm_writev),
        always("kexec_load", SYS_kexec_load),
        always("kexec_file_load", SYS_kexec_file_load),
        always("init_module", SYS_init_module),
        always("finit_module", SYS_finit_module),
        always("delete_module", SYS_delete_module),
        always("bpf", SYS_bpf),
        always("perf_event_open", SYS_perf_event_open),
        always("keyctl", SYS_keyctl),
        always("add_key", SYS_add_key),
        always("request_key", SYS_request_key),
        always("setns", SYS_setns),
        always("io_uring_setup", SYS_io_uring_setup),
        always("io_uring_enter", SYS_io_uring_enter),
        always("io_uring_register", SYS_io_uring_register),
        always("userfaultfd", SYS_userfaultfd),
        always("open_by_handle_at", SYS_open_by_handle_at),
        always("swapon", SYS_swapon),
        always("swapoff", SYS_swapoff),
        always("reboot", SYS_reboot),
        always("syslog", SYS_syslog),
        always("acct", SYS_acct),
        always("quotactl", SYS_quotactl),
        always("iopl", SYS_iopl),
        always("ioperm", SYS_ioperm),
        always("settimeofday", SYS_settimeofday),
        always("clock_settime", SYS_clock_settime),
        always("clock_adjtime", SYS_clock_adjtime),
        always("adjtimex", SYS_adjtimex),
        always("pidfd_getfd", SYS_pidfd_getfd),
        always("lookup_dcookie", SYS_lookup_dcookie),
        always("vhangup", SYS_vhangup),
        // A handle names a file by inode, past every mount and Landlock
        // rule; only open_by_handle_at (denied) turns it back into a file,
        // but the handle itself leaks which host file a path is.
        always("name_to_handle_at", SYS_name_to_handle_at),
        // open_tree with mount attributes: the mount API, like open_tree.
        always("open_tree_attr", SYS_OPEN_TREE_ATTR),
        // Compares kernel objects of two processes: an ordering oracle on
        // kernel pointers, no use outside checkpoint/restore.
        always("kcmp", SYS_kcmp),
        // 16-bit segments: no use in 64-bit code, a long history of bugs.
        always("modify_ldt", SYS_modify_ldt),
        // Memory removed from the kernel's direct map, never swapped: no
        // use in a worker.
        always("memfd_secret", SYS_memfd_secret),
        // Quotas of the filesystem under an fd: the work dir's is the
        // host's (quotactl is denied for the same reason).
        always("quotactl_fd", SYS_quotactl_fd),
        // Advice on another process's memory, as ptrace-like access.
        always("process_madvise", SYS_process_madvise),
        // Loads a library from a path: obsolete since ELF.
        always("uselib", SYS_uselib),
        // glibc falls back to clone(2) only on ENOSYS; EPERM would break
        // pthread_create. clone3's flags live in memory, which seccomp
        // cannot inspect, so it goes entirely.
        Denial {
            name: "clone3",
            nr: SYS_clone3,
            errno: ENOSYS,
            when: vec![],
        },
    ];
    let ns_flags = [
        CLONE_NEWUSER,
        CLONE_NEWNS,
        CLONE_NEWPID,
        CLONE_NEWNET,
        CLONE_NEWIPC,
        CLONE_NEWUTS,
        CLONE_NEWCGROUP,
        CLONE_NEWTIME,
    ];
    for flag in ns_flags {
        let flag = u64::from(flag as u32);
        // clone's flags are arg 0 on x86-64; unshare's are arg 0 too.
        for (name, nr) in [("clone", SYS_clone), ("unshare", SYS_unshare)] {
            d.push(Denial {
                name,
                nr,
                errno: eperm,
                when: vec![ArgMatch {
                    index: 0,
                    dword: false,
                    mask: flag,
                    value: flag,
                    op: ArgOp::Eq,
                }],
            });
        }
    }
    // Sockets: only what loopback and unix sockets need. Deny every other
    // address family (netlink, packet, vsock, …) by value.
    // Linux's AF_MAX (46) with room for families added later.
    const FAMILIES_END: i32 = 64;
    for family in (0..FAMILIES_END).filter(|f| ![AF_UNIX, AF_INET, AF_INET6].contains(f)) {
        for (name, nr) in [("socket", SYS_socket), ("socketpair", SYS_socketpair)] {
            d.push(Denial {
                name,
                nr,
                errno: EAFNOSUPPORT,
                when: vec![ArgMatch {
                    index: 0,
                    dword: true,
                    mask: 0xffff_ffff,
                    value: family as u64,
                    op: ArgOp::Eq,
                }],
            });
        }
    }
    // The ioctl request is an unsigned int: compare its low 32 bits only, so
    // garbage in the upper half cannot slip past the match.
    for (name, req) in [("ioctl(TIOCSTI)", TIOCSTI), ("ioctl(TIOCLINUX)", TIOCLINUX)] {
        d.push(Denial {
            name,
            nr: SYS_ioctl,
            errno: eperm,
            when: vec![ArgMatch {
                index: 1,
                dword: true,
                mask: 0xffff_ffff,
                value: req,
                op: ArgOp::Eq,
            }],
        });
    }
    d.push(personality_denial());
    if !writable_exec {
        d.push(memfd_denial());
    }
    d
}

/// `personality(2)` may only query or keep the default (`PER_LINUX`, 0):
/// `ADDR_NO_RANDOMIZE` turns off ASLR for what the worker runs next,
/// `READ_IMPLIES_EXEC` makes readable mappings executable, other personas
/// change how the kernel treats the process. The argument is an unsigned
/// int: the upper half is ignored by the kernel, so it is here.
fn personality_denial() -> Denial {
    let differs = |value| ArgMatch {
        index: 0,
        dword: true,
        mask: 0xffff_ffff,
        value,
        op: ArgOp::Ne,
    };
    Denial {
        name: "personality",
        nr: libc::SYS_personality,
        errno: libc::EPERM,
        when: vec![differs(0), differs(PERSONALITY_QUERY)],
    }
}

/// Without `writable_exec`, no memory file: a memfd is on the kernel's
/// internal mount, which no Landlock rule or noexec mount covers, so an
/// ELF written into one runs (fexecve, execveat with `AT_EMPTY_PATH`,
/// `/proc/self/fd/N`). `vm.memfd_noexec` and `MFD_NOEXEC_SEAL` stop those,
/// but not the dynamic loader mapping the memfd executable (it needs no
/// exec permission, only a mount without noexec), so `memfd_create` goes
/// whole. ENOSYS, as on a kernel without memfds: programs then take their
/// fallback (a file in /dev/shm or /tmp, both noexec here).
fn memfd_denial() -> Denial {
    Denial {
        name: "memfd_create",
        nr: libc::SYS_memfd_create,
        errno: libc::ENOSYS,
        when: vec![],
    }
}
