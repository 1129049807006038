//! Escape attempts: each is made for real inside the sandbox and must fail,
//! as root and rootless.

// Helpers outside #[test] fns panic on setup failure, like the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use gatehouse_testkit::random::marker as token;
use gatehouse_testkit::sandbox::*;
use gatehouse_testkit::{require, Need};

#[test]
fn a_secret_outside_the_profile_cannot_be_read() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let secret = token("secret");
        let file = s.path("secret.txt");
        std::fs::write(&file, &secret).unwrap();
        // World-readable: only the sandbox stands between the worker and it.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let f = file.to_str().unwrap();
        let r = s.sh(&format!(
            "cat {f}; cat /work/../secret.txt; cat /proc/self/root{f}; cat /proc/1/root{f}; \
             cat /proc/1/cwd/../secret.txt; ls -a /work/..; echo done"
        ));
        assert!(r.stdout.contains("done"), "{mode:?}: {r:#?}");
        assert!(
            !r.stdout.contains(&secret),
            "{mode:?}: secret leaked: {r:#?}"
        );
        assert!(!r.stdout.contains("secret.txt"), "{mode:?}: {r:#?}");
    }
}

#[test]
fn host_private_dirs_are_not_there() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh(
            "for p in /root /home /var /run/user /etc/shadow /etc/ssh /sys /boot /mnt /srv /opt/../root; do \
               if ls -d $p >/dev/null 2>&1; then echo VISIBLE $p; fi; done; \
             ls -A /run; ls -A /etc; echo done",
        );
        assert!(r.stdout.contains("done"), "{mode:?}: {r:#?}");
        assert!(!r.stdout.contains("VISIBLE"), "{mode:?}: {r:#?}");
        // /etc holds only what the profile binds and the generated files.
        for line in r.stdout.lines() {
            assert!(
                !["shadow", "ssh", "sudoers", "gshadow"].contains(&line),
                "{mode:?}: {line} visible in /etc"
            );
        }
    }
}

#[test]
fn host_processes_are_invisible_and_unsignalable() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let mut host = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .unwrap();
        let pid = host.id();
        let r = s.sh(&format!(
            "ls /proc | grep -E '^[0-9]+$' | wc -l; kill -0 {pid} && echo SIGNALLED; \
             kill -KILL -1; echo done"
        ));
        std::thread::sleep(Duration::from_millis(50));
        let alive = host.try_wait().unwrap().is_none();
        let _ = host.kill();
        let _ = host.wait();
        assert!(
            alive,
            "{mode:?}: kill -1 inside the sandbox killed a host process"
        );
        assert!(!r.stdout.contains("SIGNALLED"), "{mode:?}: {r:#?}");
        let count: usize = r.stdout.lines().next().unwrap().trim().parse().unwrap();
        assert!(count <= 6, "{mode:?}: sees {count} processes: {r:#?}");
    }
}

#[test]
fn environment_holds_nothing_of_the_callers() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let marker = token("callerenv");
        let work = s.work.to_str().unwrap().to_string();
        let out = s
            .command(&[
                "sandbox", "run", "--profile", "default", "--workdir", &work, "--", "sh", "-c",
                "env; echo ---; cat /proc/1/environ; echo; echo ---; tr '\\0' ' ' < /proc/1/cmdline",
            ])
            .env("GATEHOUSE_TEST_MARKER", &marker)
            .env("GITHUB_TOKEN", &marker)
            .env("AWS_SECRET_ACCESS_KEY", &marker)
            .env("TERM", "xterm-test")
            .output()
            .unwrap();
        let r = Run::from(out);
        r.ok();
        // /proc/1/cmdline names neither host paths nor arguments.
        assert!(
            !r.stdout.contains(&work),
            "{mode:?}: host path visible: {r:#?}"
        );
        assert!(
            !r.stdout.contains(&marker),
            "{mode:?}: caller env leaked: {r:#?}"
        );
        let env_part = r.stdout.split("---").next().unwrap();
        let allowed = [
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "PWD",
            "SHLVL",
            "_",
            "GIT_TERMINAL_PROMPT",
            "PYTHONDONTWRITEBYTECODE",
            "OLDPWD",
        ];
        for line in env_part.lines().filter(|l| !l.is_empty()) {
            let key = line.split('=').next().unwrap();
            assert!(
                allowed.contains(&key),
                "{mode:?}: unexpected variable {line}"
            );
        }
        assert!(
            env_part.contains("TERM=xterm-test"),
            "{mode:?}: pass list not honoured"
        );
    }
}

#[test]
fn writes_outside_the_work_dir_fail() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let outside = s.path("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::symlink(&outside, s.work.join("link")).unwrap();
        std::os::unix::fs::symlink("/", s.work.join("rootlink")).unwrap();
        let o = outside.to_str().unwrap();
        let r = s.sh(&format!(
            "for t in /x /etc/x /usr/x /usr/bin/x /run/x /proc/x /dev/x /work/link/x /work/rootlink/etc/x \
                      /proc/self/root/x /proc/self/root/etc/x /proc/1/root/tmp/x /proc/1/cwd/x {o}/x /work/../x; do \
               if (echo pwned > $t) 2>/dev/null; then echo WROTE $t; fi; done; \
             mkdir /newdir 2>/dev/null && echo WROTE /newdir; \
             echo ok > /work/inside && echo ok > /tmp/inside && echo done"
        ));
        assert!(r.stdout.contains("done"), "{mode:?}: {r:#?}");
        assert!(!r.stdout.contains("WROTE"), "{mode:?}: {r:#?}");
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "{mode:?}: wrote through the symlink"
        );
        assert!(s.work.join("inside").exists());
    }
}

#[test]
fn sys_and_proc_sys_are_not_writable() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh(
            "for t in /proc/sys/kernel/hostname /proc/sys/vm/drop_caches /proc/sysrq-trigger \
                      /sys/kernel/uevent_helper /proc/sys/kernel/core_pattern; do \
               if (echo 1 > $t) 2>/dev/null; then echo WROTE $t; fi; done; \
             hostname evil 2>/dev/null && echo WROTE hostname; echo done",
        );
        assert!(r.stdout.contains("done"), "{mode:?}: {r:#?}");
        assert!(!r.stdout.contains("WROTE"), "{mode:?}: {r:#?}");
    }
}

#[test]
fn binaries_outside_executable_paths_do_not_run() {
    for mode in modes() {
        let s = Scratch::new(mode);
        // Outside /tmp, which the sandbox owns inside.
        let extra = outside_tmp();
        let data = extra.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::copy("/usr/bin/true", data.join("mytrue")).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = data.to_str().unwrap();
        // The directory is readable but listed as data, not as executable.
        let p = s.profile(
            "data",
            &format!("extends = \"default\"\n[filesystem]\nread = [\"{d}\"]\n"),
        );
        let r = s.sh_with(
            p.to_str().unwrap(),
            &[],
            &format!(
                "test -r {d}/mytrue && echo READABLE; {d}/mytrue && echo RAN-DATA; \
                 cp /usr/bin/true /dev/shm/t && /dev/shm/t && echo RAN-SHM; \
                 /lib64/ld-linux-x86-64.so.2 {d}/mytrue && echo RAN-VIA-LOADER; echo done"
            ),
        );
        assert!(r.stdout.contains("READABLE"), "{mode:?}: {r:#?}");
        assert!(r.stdout.contains("done"), "{mode:?}: {r:#?}");
        for bad in ["RAN-DATA", "RAN-SHM", "RAN-VIA-LOADER"] {
            assert!(!r.stdout.contains(bad), "{mode:?}: {bad}: {r:#?}");
        }
        // A profile that forbids exec from writable dirs.
        let r = s.sh_with(
            "teams/web",
            &[],
            "cp /usr/bin/true /work/t && /work/t && echo RAN-WORK; echo done",
        );
        assert!(
            r.stdout.contains("done") && !r.stdout.contains("RAN-WORK"),
            "{mode:?}: {r:#?}"
        );
    }
}

#[test]
fn a_setuid_binary_gains_nothing() {
    // Creating a setuid-root binary needs root.
    require!(Need::Root);
    for mode in modes() {
        let s = Scratch::new(mode);
        let extra = outside_tmp();
        let dir = extra.path().join("suid");
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy("/usr/bin/cat", dir.join("cat")).unwrap();
        std::fs::set_permissions(dir.join("cat"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = dir.to_str().unwrap();
        let p = s.profile(
            "suid",
            &format!("extends = \"default\"\n[filesystem]\nread_exec = [\"{d}\"]\n"),
        );
        let r = s.sh_with(
            p.to_str().unwrap(),
            &[],
            &format!("{d}/cat /proc/self/status"),
        );
        r.ok();
        let field = |name: &str| {
            r.stdout
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} missing: {r:#?}"))
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(field("Uid:"), "0 0 0 0", "{mode:?}: setuid changed the uid");
        assert_eq!(field("CapEff:"), "0000000000000000", "{mode:?}");
        assert_eq!(field("CapPrm:"), "0000000000000000", "{mode:?}");
        assert_eq!(field("NoNewPrivs:"), "1", "{mode:?}");
        assert_eq!(field("Seccomp:"), "2", "{mode:?}");
    }
}

/// Each attempted syscall with the errno the sandbox must produce.
const SYSCALL_PROBE: &str = r#"
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & 0xffffffffffffffff) for a in args])
    e = ctypes.get_errno()
    print(name, "OK" if r >= 0 else errno.errorcode.get(e, str(e)), flush=True)
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS = 0x10000000, 0x40000000, 0x20000
sc("mount", 165, 0, 0, 0, 0, 0)
sc("umount2", 166, 0, 0)
sc("pivot_root", 155, 0, 0)
sc("ptrace", 101, 0, 0, 0, 0)
sc("process_vm_readv", 310, os.getpid(), 0, 0, 0, 0, 0)
sc("kexec_load", 246, 0, 0, 0, 0)
sc("init_module", 175, 0, 0, 0)
sc("finit_module", 313, 0, 0, 0)
sc("delete_module", 176, 0, 0)
sc("bpf", 321, 0, 0, 0)
sc("perf_event_open", 298, 0, 0, 0, 0, 0)
sc("keyctl", 250, 0, (1 << 64) - 3, 0)
sc("add_key", 248, 0, 0, 0, 0, 0)
sc("request_key", 249, 0, 0, 0, 0)
sc("unshare_user", 272, CLONE_NEWUSER)
sc("unshare_net", 272, CLONE_NEWNET)
sc("unshare_mnt", 272, CLONE_NEWNS)
sc("setns", 308, 0, 0)
sc("clone_newuser", 56, CLONE_NEWUSER | 17, 0, 0, 0, 0)
sc("clone3", 435, 0, 0)
sc("io_uring_setup", 425, 1, 0)
sc("userfaultfd", 323, 0)
sc("open_by_handle_at", 304, 0, 0, 0)
sc("ioctl_tiocsti", 16, 0, 0x5412, 0)
sc("ioctl_tiocsti_high_bits", 16, 0, 0x5412 | (1 << 32), 0)
sc("ioctl_tioclinux", 16, 0, 0x541C, 0)
sc("socket_netlink", 41, 16, 3, 0)
sc("socket_vsock", 41, 40, 1, 0)
sc("socket_packet", 41, 17, 3, 0)
sc("x32_getpid", 39 | 0x40000000)
sc("mknod_char", 133, b"/tmp/null".__len__() and ctypes.cast(ctypes.c_char_p(b"/tmp/null"), ctypes.c_void_p).value, 0o20666, (1 << 8) | 3)
sc("getpid", 39)
sc("socket_inet", 41, 2, 1, 0)
"#;

#[test]
fn dangerous_syscalls_are_denied() {
    let expected: &[(&str, &str)] = &[
        ("mount", "EPERM"),
        ("umount2", "EPERM"),
        ("pivot_root", "EPERM"),
        ("ptrace", "EPERM"),
        ("process_vm_readv", "EPERM"),
        ("kexec_load", "EPERM"),
        ("init_module", "EPERM"),
        ("finit_module", "EPERM"),
        ("delete_module", "EPERM"),
        ("bpf", "EPERM"),
        ("perf_event_open", "EPERM"),
        ("keyctl", "EPERM"),
        ("add_key", "EPERM"),
        ("request_key", "EPERM"),
        ("unshare_user", "EPERM"),
        ("unshare_net", "EPERM"),
        ("unshare_mnt", "EPERM"),
        ("setns", "EPERM"),
        ("clone_newuser", "EPERM"),
        ("clone3", "ENOSYS"),
        ("io_uring_setup", "EPERM"),
        ("userfaultfd", "EPERM"),
        ("open_by_handle_at", "EPERM"),
        ("ioctl_tiocsti", "EPERM"),
        ("ioctl_tiocsti_high_bits", "EPERM"),
        ("ioctl_tioclinux", "EPERM"),
        ("socket_netlink", "EAFNOSUPPORT"),
        ("socket_vsock", "EAFNOSUPPORT"),
        ("socket_packet", "EAFNOSUPPORT"),
        ("x32_getpid", "ENOSYS"),
        ("mknod_char", "EPERM"),
        // Controls: the probe itself works.
        ("getpid", "OK"),
        ("socket_inet", "OK"),
    ];
    for mode in modes() {
        let s = Scratch::new(mode);
        std::fs::write(s.work.join("probe.py"), SYSCALL_PROBE).unwrap();
        let r = s.sh("python3 probe.py");
        r.ok();
        for (name, want) in expected {
            let line = r
                .stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("{mode:?}: no result for {name}: {r:#?}"));
            assert_eq!(line, format!("{name} {want}"), "{mode:?}: {r:#?}");
        }
    }
}

#[test]
fn nested_namespaces_and_threads() {
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh(
            "unshare -Ur true 2>/dev/null && echo NESTED-USERNS; unshare -n true 2>/dev/null && echo NESTED-NET; \
             unshare -m true 2>/dev/null && echo NESTED-MNT; \
             python3 -c 'import threading; t=threading.Thread(target=print, args=(\"thread-ok\",)); t.start(); t.join()'",
        );
        assert!(!r.stdout.contains("NESTED"), "{mode:?}: {r:#?}");
        // clone3 -> ENOSYS keeps glibc's pthread_create working.
        assert!(r.stdout.contains("thread-ok"), "{mode:?}: {r:#?}");
    }
}

const NET_PROBE: &str = r#"
import socket, sys
def attempt(what, fn):
    try:
        fn(); print("OK", what, flush=True)
    except OSError as e:
        print("DENIED", what, e.errno, flush=True)
def tcp(fam, host, port):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect((host, port)); s.close()
def udp(fam, host, port):
    s = socket.socket(fam, socket.SOCK_DGRAM); s.sendto(b"escape", (host, port)); s.close()
def bind_listen(port):
    s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen()
def unix(path):
    s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(path)
tcp_port, udp_port, abstract, host_sock = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
attempt("tcp4-host-loopback", lambda: tcp(socket.AF_INET, "127.0.0.1", tcp_port))
attempt("tcp6-host-loopback", lambda: tcp(socket.AF_INET6, "::1", tcp_port))
attempt("tcp4-internet", lambda: tcp(socket.AF_INET, "1.1.1.1", 443))
attempt("tcp6-internet", lambda: tcp(socket.AF_INET6, "2606:4700:4700::1111", 443))
attempt("tcp4-other-local-port", lambda: tcp(socket.AF_INET, "127.0.0.1", 22))
attempt("udp4-host-loopback", lambda: udp(socket.AF_INET, "127.0.0.1", udp_port) or (_ for _ in ()).throw(OSError(0, "sent")))
attempt("udp4-internet", lambda: udp(socket.AF_INET, "1.1.1.1", 53))
attempt("udp6-internet", lambda: udp(socket.AF_INET6, "2606:4700:4700::1111", 53))
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
attempt("bind-listen", lambda: bind_listen(8080))
attempt("abstract-unix", lambda: unix("\0" + abstract))
attempt("host-pathname-unix", lambda: unix(host_sock))
"#;

#[test]
fn no_network_but_the_relay() {
    use std::os::linux::net::SocketAddrExt;
    for mode in modes() {
        for with_relay in [false, true] {
            let s = Scratch::new(mode);
            let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
            tcp.set_nonblocking(true).unwrap();
            let tcp_port = tcp.local_addr().unwrap().port();
            let udp = UdpSocket::bind(("127.0.0.1", tcp_port))
                .or_else(|_| UdpSocket::bind("127.0.0.1:0"))
                .unwrap();
            udp.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let udp_port = udp.local_addr().unwrap().port();
            let abstract_name = token("gatehouse-abstract");
            let abs = std::os::unix::net::UnixListener::bind_addr(
                &std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                    .unwrap(),
            )
            .unwrap();
            abs.set_nonblocking(true).unwrap();
            let host_sock_path = s.path("host.sock");
            let host_sock = std::os::unix::net::UnixListener::bind(&host_sock_path).unwrap();
            std::fs::set_permissions(&host_sock_path, std::fs::Permissions::from_mode(0o777))
                .unwrap();
            host_sock.set_nonblocking(true).unwrap();
            let proxy = with_relay.then(|| FakeProxy::start(s.path("proxy.sock")));
            let proxy_path = proxy.as_ref().map(|p| p.path.to_str().unwrap().to_string());
            let mut flags = vec![];
            if let Some(p) = &proxy_path {
                flags.extend(["--proxy-socket", p.as_str()]);
            }
            std::fs::write(s.work.join("net.py"), NET_PROBE).unwrap();
            let r = s.sh_with(
                "default",
                &flags,
                &format!(
                    "python3 net.py {tcp_port} {udp_port} {abstract_name} {}",
                    host_sock_path.display()
                ),
            );
            r.ok();
            let lines: Vec<&str> = r.stdout.lines().collect();
            assert_eq!(lines.len(), 12, "{mode:?} relay={with_relay}: {r:#?}");
            for line in &lines {
                assert!(
                    line.starts_with("DENIED"),
                    "{mode:?} relay={with_relay}: {line}: {r:#?}"
                );
            }
            if with_relay {
                // Landlock refuses every TCP port but the relay's, and binding.
                for what in ["tcp4-other-local-port", "bind-listen"] {
                    let line = lines.iter().find(|l| l.contains(what)).unwrap();
                    assert!(line.ends_with(" 13"), "{mode:?}: {what} not EACCES: {line}");
                }
            }
            assert!(
                tcp.accept().is_err(),
                "{mode:?}: host TCP listener got a connection"
            );
            let mut buf = [0u8; 16];
            assert!(
                udp.recv(&mut buf).is_err(),
                "{mode:?}: host UDP socket got a datagram"
            );
            assert!(
                abs.accept().is_err(),
                "{mode:?}: host abstract socket got a connection"
            );
            assert!(
                host_sock.accept().is_err(),
                "{mode:?}: host pathname socket got a connection"
            );
        }
    }
}

#[test]
fn no_host_side_file_reaches_the_worker() {
    // The host side opens the cgroups' join files (as root, which the
    // kernel checks a write against); none may be inherited by the worker.
    // `ls` lists the shell's fds from outside it (the shell holds no pipe
    // of its own meanwhile).
    for mode in modes() {
        let s = Scratch::new(mode);
        let r = s.sh("ls -l /proc/$$/fd/; echo done");
        assert!(r.stdout.contains("done"), "{mode:?}: {r:#?}");
        let fds: Vec<&str> = r.stdout.lines().filter(|l| l.contains(" -> ")).collect();
        assert!(fds.len() >= 3, "{mode:?}: fds not listed: {r:#?}");
        for line in fds {
            let (left, target) = line.split_once(" -> ").unwrap();
            let fd = left.rsplit(' ').next().unwrap();
            assert!(
                ["0", "1", "2"].contains(&fd),
                "{mode:?}: the worker holds fd {fd} -> {target}"
            );
            assert!(!target.contains("cgroup"), "{mode:?}: {line}");
        }
    }
}

/// Calls with no use in a worker, each with arguments that succeed (or at
/// least reach the kernel) outside a sandbox, and the personality changes.
const KERNEL_SURFACE_PROBE: &str = r#"
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & 0xffffffffffffffff) for a in args])
    e = ctypes.get_errno()
    print(name, "OK" if r >= 0 else errno.errorcode.get(e, str(e)), flush=True)
    return r
addr = lambda b: ctypes.addressof(b)
here = ctypes.c_char_p(b".")
handle = ctypes.create_string_buffer(8 + 128); ctypes.c_uint.from_buffer(handle).value = 128
mount_id = ctypes.c_int()
sc("name_to_handle_at", 303, -100, ctypes.cast(here, ctypes.c_void_p).value, addr(handle), addr(mount_id), 0)
sc("open_tree_attr", 467, -100, ctypes.cast(here, ctypes.c_void_p).value, 0, 0, 0)
sc("kcmp", 312, os.getpid(), os.getpid(), 0, 0, 0)
ldt = ctypes.create_string_buffer(16)
sc("modify_ldt", 154, 0, addr(ldt), 16)
sc("memfd_secret", 447, 0)
fmt = ctypes.c_uint()
cwd = os.open(".", os.O_RDONLY)
sc("quotactl_fd", 443, cwd, 0x80000400, 0, addr(fmt))
page = mmap.mmap(-1, 4096); page.write(b"x" * 4096)
iov = (ctypes.c_ulong * 2)(ctypes.addressof(ctypes.c_char.from_buffer(page)), 4096)
pidfd = sc("pidfd_open", 434, os.getpid(), 0)
sc("process_madvise", 440, pidfd, addr(iov), 1, 20, 0)
lib = ctypes.c_char_p(b"/nonexistent-library")
sc("uselib", 134, ctypes.cast(lib, ctypes.c_void_p).value)
for name, persona in [("ADDR_NO_RANDOMIZE", 0x0040000), ("READ_IMPLIES_EXEC", 0x0400000),
                      ("PER_LINUX32", 8), ("high_bits_and_flag", (1 << 32) | 0x0040000)]:
    if sc("personality_" + name, 135, persona) >= 0:
        libc.syscall(ctypes.c_long(135), ctypes.c_ulong(0))
sc("personality_query", 135, 0xffffffff)
sc("personality_default", 135, 0)
sc("personality_default_high_bits", 135, 1 << 32)
sc("getpid", 39)
"#;

fn probe_results(r: &Run) -> std::collections::BTreeMap<String, String> {
    r.stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn kernel_surfaces_without_a_use_are_denied() {
    // What must be EPERM in the sandbox, and OK outside it (None: the
    // host's kernel may refuse for its own reasons, e.g. memfd_secret off
    // or no quotas, but not with the filter's EPERM).
    let calls: &[(&str, Option<&str>)] = &[
        ("name_to_handle_at", Some("OK")),
        ("open_tree_attr", Some("OK")),
        ("kcmp", Some("OK")),
        ("modify_ldt", Some("OK")),
        ("memfd_secret", None),
        ("quotactl_fd", None),
        ("process_madvise", Some("OK")),
        ("uselib", None),
        ("personality_ADDR_NO_RANDOMIZE", Some("OK")),
        ("personality_READ_IMPLIES_EXEC", Some("OK")),
        ("personality_PER_LINUX32", Some("OK")),
        ("personality_high_bits_and_flag", Some("OK")),
    ];
    let allowed = [
        "pidfd_open",
        "personality_query",
        "personality_default",
        "personality_default_high_bits",
        "getpid",
    ];
    // Positive control: outside the sandbox the probe's calls work, so an
    // EPERM inside is the filter's.
    let host_dir = tempfile::tempdir().unwrap();
    std::fs::write(host_dir.path().join("probe.py"), KERNEL_SURFACE_PROBE).unwrap();
    let out = std::process::Command::new("python3")
        .arg("probe.py")
        .current_dir(host_dir.path())
        .output()
        .unwrap();
    let host = Run::from(out);
    host.ok();
    let on_host = probe_results(&host);
    for (name, want) in calls {
        let got = on_host
            .get(*name)
            .unwrap_or_else(|| panic!("{name}: {host:#?}"));
        match want {
            Some(want) => assert_eq!(got, want, "host: {name}: {host:#?}"),
            None => assert_ne!(got, "EPERM", "host: {name}: {host:#?}"),
        }
    }
    for mode in modes() {
        let s = Scratch::new(mode);
        std::fs::write(s.work.join("probe.py"), KERNEL_SURFACE_PROBE).unwrap();
        let r = s.sh("python3 probe.py");
        r.ok();
        let inside = probe_results(&r);
        for (name, _) in calls {
            assert_eq!(
                inside.get(*name).map(String::as_str),
                Some("EPERM"),
                "{mode:?}: {name}: {r:#?}"
            );
        }
        for name in allowed {
            assert_eq!(
                inside.get(name).map(String::as_str),
                Some("OK"),
                "{mode:?}: {name}: {r:#?}"
            );
        }
    }
}

#[test]
fn the_worker_starts_with_the_default_persona() {
    // A caller running without address randomisation (setarch -R) does
    // not hand that to the worker.
    let host = std::process::Command::new("setarch")
        .args(["x86_64", "-R", "cat", "/proc/self/personality"])
        .output()
        .unwrap();
    let host = Run::from(host);
    host.ok();
    assert_eq!(host.stdout.trim(), "00040000", "control: {host:#?}");
    for mode in modes() {
        let s = Scratch::new(mode);
        let work = s.work.to_str().unwrap().to_string();
        let inner = s.command(&[
            "sandbox",
            "run",
            "--profile",
            "default",
            "--workdir",
            &work,
            "--",
            "cat",
            "/proc/self/personality",
        ]);
        let out = std::process::Command::new("setarch")
            .args(["x86_64", "-R"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(s.base.path())
            .output()
            .unwrap();
        let r = Run::from(out);
        r.ok();
        assert_eq!(r.stdout.trim(), "00000000", "{mode:?}: {r:#?}");
    }
}

/// Every way to run an ELF held in memory or in an unnamed file: each line
/// says whether `true` ran from it.
const MEMORY_EXEC_PROBE: &str = r#"
import ctypes, errno, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ELF = open("/usr/bin/true", "rb").read()
LOADER = "/lib64/ld-linux-x86-64.so.2"
AT_EMPTY_PATH, MFD_EXEC = 0x1000, 0x10

def memfd(flags=0):
    fd = os.memfd_create("elf", flags)
    os.write(fd, ELF)
    return fd

def tmpfile(directory):
    # An unnamed file, then a read-only descriptor of it: execve refuses
    # files open for writing.
    w = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o755)
    os.write(w, ELF)
    fd = os.open(f"/proc/self/fd/{w}", os.O_RDONLY)
    os.close(w)
    return fd

def in_child(do_exec):
    pid = os.fork()
    if pid == 0:
        try:
            do_exec()
        except OSError as e:
            os._exit(e.errno if 0 < e.errno < 100 else 99)
        os._exit(99)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code != 0:
        raise OSError(code, os.strerror(code))
    return True

def execveat(fd):
    argv = (ctypes.c_char_p * 2)(b"true", None)
    envp = (ctypes.c_char_p * 1)(None)
    libc.syscall(ctypes.c_long(322), fd, b"", argv, envp, AT_EMPTY_PATH)
    raise OSError(ctypes.get_errno(), "execveat")

def run_path(fd):
    return subprocess.run([f"/proc/self/fd/{fd}"], pass_fds=[fd]).returncode == 0

def loader(fd):
    return subprocess.run([LOADER, f"/proc/self/fd/{fd}"], pass_fds=[fd],
                          stderr=subprocess.DEVNULL).returncode == 0

ways = [
    ("memfd_fexecve", lambda: in_child(lambda: os.execve(memfd(), ["true"], {}))),
    ("memfd_execveat", lambda: in_child(lambda: execveat(memfd()))),
    ("memfd_proc_fd", lambda: run_path(memfd())),
    ("memfd_loader", lambda: loader(memfd())),
    ("memfd_mfd_exec", lambda: run_path(memfd(MFD_EXEC))),
    ("tmp_tmpfile_execveat", lambda: in_child(lambda: execveat(tmpfile("/tmp")))),
    ("tmp_tmpfile_loader", lambda: loader(tmpfile("/tmp"))),
    ("shm_tmpfile_execveat", lambda: in_child(lambda: execveat(tmpfile("/dev/shm")))),
    ("shm_tmpfile_loader", lambda: loader(tmpfile("/dev/shm"))),
    ("installed_execveat", lambda: in_child(lambda: execveat(os.open("/usr/bin/true", os.O_RDONLY)))),
    ("installed_loader", lambda: loader(os.open("/usr/bin/true", os.O_RDONLY))),
]
for way, attempt in ways:
    try:
        print(way, "RAN" if attempt() else "FAILED", flush=True)
    except OSError as e:
        print(way, "DENIED", errno.errorcode.get(e.errno, e.errno), flush=True)
"#;

#[test]
fn without_writable_exec_nothing_runs_from_memory_files() {
    // Under teams/web (writable_exec = false) no way runs anything but
    // the installed binary; under default (positive control) the memory
    // and /tmp ways do, so each refusal is the setting's. /dev/shm is
    // noexec under every profile.
    let memory_ways = [
        "memfd_fexecve",
        "memfd_execveat",
        "memfd_proc_fd",
        "memfd_loader",
        "memfd_mfd_exec",
    ];
    let tmp_ways = ["tmp_tmpfile_execveat", "tmp_tmpfile_loader"];
    let never = ["shm_tmpfile_execveat", "shm_tmpfile_loader"];
    let always = ["installed_execveat", "installed_loader"];
    for mode in modes() {
        let s = Scratch::new(mode);
        std::fs::write(s.work.join("probe.py"), MEMORY_EXEC_PROBE).unwrap();
        let web = s.sh_with("teams/web", &[], "python3 probe.py");
        web.ok();
        let web_results = probe_results(&web);
        let default = s.sh("python3 probe.py");
        default.ok();
        let default_results = probe_results(&default);
        let ran = |results: &std::collections::BTreeMap<String, String>, way: &str| {
            results
                .get(way)
                .unwrap_or_else(|| panic!("{mode:?}: no result for {way}"))
                == "RAN"
        };
        for way in memory_ways.iter().chain(&tmp_ways) {
            assert!(!ran(&web_results, way), "{mode:?}: web: {way}: {web:#?}");
            assert!(
                ran(&default_results, way),
                "{mode:?}: default: {way}: {default:#?}"
            );
        }
        for way in never {
            assert!(!ran(&web_results, way), "{mode:?}: web: {way}: {web:#?}");
            assert!(
                !ran(&default_results, way),
                "{mode:?}: default: {way}: {default:#?}"
            );
        }
        for way in always {
            assert!(ran(&web_results, way), "{mode:?}: web: {way}: {web:#?}");
            assert!(
                ran(&default_results, way),
                "{mode:?}: default: {way}: {default:#?}"
            );
        }
    }
}
