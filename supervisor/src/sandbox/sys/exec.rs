//! The worker between its start and `execve`. It runs sharing the init's
//! memory (see [`fork`](super::fork)), so it must neither allocate, free,
//! nor take a lock: it may be killed at any instruction, and a heap or a
//! lock left half-updated would be the init's. Everything it needs is
//! prepared by the init beforehand ([`Start`]); its error messages are
//! formatted into a buffer on its stack ([`StackMessage`]).

use std::convert::Infallible;
use std::ffi::CString;
use std::fmt::{self, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use landlock::{RulesetCreated, RulesetStatus};
use nix::errno::Errno;
use nix::sys::resource::{setrlimit, Resource};
use seccompiler::BpfProgram;

use super::fork::{self, ForkError};

/// Exit status of a worker whose set-up failed (the sandbox's).
const SETUP_FAILED: i32 = crate::sandbox::EXIT_SANDBOX_FAILED as i32;
const NOT_FOUND: i32 = crate::sandbox::EXIT_NOT_FOUND as i32;
const NOT_EXECUTABLE: i32 = crate::sandbox::EXIT_NOT_EXECUTABLE as i32;

/// A message formatted on the stack, cut at its capacity.
pub struct StackMessage {
    buf: [u8; 512],
    len: usize,
}

impl StackMessage {
    pub fn new() -> StackMessage {
        StackMessage {
            buf: [0; 512],
            len: 0,
        }
    }

    pub fn format(args: fmt::Arguments<'_>) -> StackMessage {
        let mut m = StackMessage::new();
        // A full buffer cuts the message; nothing else can fail.
        let _ = m.write_fmt(args);
        m
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Default for StackMessage {
    fn default() -> Self {
        StackMessage::new()
    }
}

impl fmt::Write for StackMessage {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// The program, its arguments and environment as C arrays, and where to
/// look for it (the sandbox's PATH, as a shell does).
pub struct ExecArgs {
    candidates: Vec<CString>,
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
}

impl ExecArgs {
    /// `candidates` are the paths tried in order. Strings holding a NUL
    /// byte become empty.
    pub fn new(candidates: &[String], argv: &[String], envp: &[String]) -> ExecArgs {
        let to_c = |s: &String| CString::new(s.as_str()).unwrap_or_default();
        let argv: Vec<CString> = argv.iter().map(to_c).collect();
        let envp: Vec<CString> = envp.iter().map(to_c).collect();
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        ExecArgs {
            candidates: candidates.iter().map(to_c).collect(),
            argv_ptrs: ptrs(&argv),
            envp_ptrs: ptrs(&envp),
            _argv: argv,
            _envp: envp,
        }
    }

    /// Tries each candidate; returns only when none could be executed, with
    /// the exit status a shell would give (127 not found, 126 otherwise).
    fn exec(&self) -> (i32, Errno) {
        let mut last = Errno::ENOENT;
        for cand in &self.candidates {
            // SAFETY: `cand` is NUL-terminated, and both arrays are
            // NULL-terminated arrays of pointers into the CStrings this
            // struct owns, all alive for the call.
            unsafe {
                libc::execve(
                    cand.as_ptr(),
                    self.argv_ptrs.as_ptr(),
                    self.envp_ptrs.as_ptr(),
                )
            };
            let e = Errno::last();
            if e != Errno::ENOENT && e != Errno::ENOTDIR {
                last = e;
            }
        }
        let code = if last == Errno::ENOENT {
            NOT_FOUND
        } else {
            NOT_EXECUTABLE
        };
        (code, last)
    }
}

/// Everything the worker does before `execve`, prepared by the init.
pub struct Start<'a> {
    /// (resource, limit, name for messages), soft and hard alike.
    pub rlimits: Vec<(Resource, u64, &'static str)>,
    pub cwd: CString,
    /// The work dir as the profile names it, for messages.
    pub cwd_shown: &'a Path,
    /// The Landlock ruleset, created and filled by the init; the worker
    /// enforces a duplicate of it on itself.
    pub landlock: Option<RulesetCreated>,
    pub landlock_required: bool,
    pub filter: &'a BpfProgram,
    pub exec: ExecArgs,
    /// The program as named, for messages.
    pub program: &'a str,
    /// Where set-up errors go (the host side reports them).
    pub errors: &'a OwnedFd,
}

/// Starts the worker, sharing this process's memory until it execs, after
/// checking that this process has one thread. Returns its pid.
pub fn start_worker(start: &Start<'_>) -> Result<i32, ForkError> {
    fork::single_threaded()?;
    // SAFETY: one thread, counted just now (only this thread could start
    // another, and it is making this call). `Start::run` execs or exits and
    // never returns; it allocates, frees and locks nothing (what it needs
    // was prepared before this call; messages are formatted on its stack;
    // the Errno values it formats describe themselves from static strings),
    // and it only reads this process's data: what it changes (descriptors,
    // credentials, limits) is its own.
    unsafe { fork::spawn_sharing_memory(&mut || start.run()) }.map_err(ForkError::Sys)
}

impl Start<'_> {
    fn run(&self) -> Infallible {
        if let Err(msg) = self.harden() {
            write_all(self.errors.as_raw_fd(), msg.as_bytes());
            super::exit_now(SETUP_FAILED);
        }
        let (code, e) = self.exec.exec();
        let msg = StackMessage::format(format_args!(
            "gatehouse sandbox: cannot execute {}: {}\n",
            self.program,
            e.desc()
        ));
        write_all(libc::STDERR_FILENO, msg.as_bytes());
        super::exit_now(code)
    }

    /// New session, limits, no capabilities, no_new_privs, the work dir,
    /// Landlock, seccomp: in this order.
    // The message is on the stack by design: this must not allocate.
    #[allow(clippy::result_large_err)]
    fn harden(&self) -> Result<(), StackMessage> {
        let fail = |args: fmt::Arguments<'_>| StackMessage::format(args);
        nix::unistd::setsid().map_err(|e| fail(format_args!("setsid: {e}")))?;
        super::reset_signals();
        default_persona().map_err(|e| fail(format_args!("personality: {e}")))?;
        for &(res, v, what) in &self.rlimits {
            setrlimit(res, v, v).map_err(|e| fail(format_args!("setrlimit {what}={v}: {e}")))?;
        }
        super::inside::lock_securebits()
            .map_err(|e| fail(format_args!("securebits: {}", errno(&e))))?;
        super::inside::clear_capabilities()
            .map_err(|(what, e)| fail(format_args!("capabilities: {what}: {e}")))?;
        nix::sys::prctl::set_no_new_privs().map_err(|e| fail(format_args!("no_new_privs: {e}")))?;
        nix::unistd::chdir(self.cwd.as_c_str()).map_err(|e| {
            if e != Errno::EACCES {
                return fail(format_args!(
                    "chdir {}: {}",
                    self.cwd_shown.display(),
                    e.desc()
                ));
            }
            // The common mistake: root runs the sandbox on a directory only
            // root may enter. Say how the dir and the worker look from here,
            // so a wrong id mapping shows in the message itself.
            let seen = nix::sys::stat::stat(self.cwd.as_c_str()).ok();
            let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
            fail(format_args!(
                "chdir {}: {} (it shows as uid {} gid {} mode {:o}; the worker is uid {uid} \
                 gid {gid}: the worker's host user cannot enter the work dir; make it the \
                 worker's, e.g. with chown)",
                self.cwd_shown.display(),
                e.desc(),
                seen.map_or(-1, |m| i64::from(m.st_uid)),
                seen.map_or(-1, |m| i64::from(m.st_gid)),
                seen.map_or(0, |m| m.st_mode & 0o7777),
            ))
        })?;
        self.restrict_landlock()?;
        seccompiler::apply_filter(self.filter).map_err(|e| {
            let why = match &e {
                seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => errno(io).desc(),
                _ => "the filter is empty or invalid",
            };
            fail(format_args!("installing seccomp filter: {why}"))
        })?;
        Ok(())
    }

    #[allow(clippy::result_large_err)]
    fn restrict_landlock(&self) -> Result<(), StackMessage> {
        let Some(ruleset) = &self.landlock else {
            return Ok(());
        };
        // A duplicate (dup(2) and a copy of plain fields): enforcing consumes
        // it, and the original stays the init's to close.
        let ruleset = ruleset.try_clone().map_err(|e| {
            StackMessage::format(format_args!(
                "landlock: duplicating the ruleset: {}",
                errno(&e)
            ))
        })?;
        let status = ruleset.restrict_self().map_err(|e| {
            let e = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .map_or(Errno::UnknownErrno, errno);
            StackMessage::format(format_args!("landlock restrict_self: {e}"))
        })?;
        if self.landlock_required && status.ruleset == RulesetStatus::NotEnforced {
            return Err(StackMessage::format(format_args!("required protection missing: Landlock is not enforced by this kernel. Run `gatehouse doctor`; use a profile with require.landlock = false only if you accept that")));
        }
        Ok(())
    }
}

/// The errno of an OS error (formatting an `io::Error` itself allocates).
/// `PER_LINUX`: the persona is the caller's until here (e.g. one started
/// under `setarch -R`), and the seccomp filter lets the worker keep only
/// the default, not change it.
fn default_persona() -> Result<(), Errno> {
    // SAFETY: personality(2) takes a plain integer and changes only the
    // calling process's persona; it touches no memory of ours.
    let r = unsafe { libc::personality(0) };
    if r == -1 {
        return Err(Errno::last());
    }
    Ok(())
}

fn errno(e: &std::io::Error) -> Errno {
    e.raw_os_error()
        .map_or(Errno::UnknownErrno, Errno::from_raw)
}

/// write(2) until done or failed; for messages on the way out.
fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid slice for the call; `fd` is a
        // descriptor number the kernel checks.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && Errno::last() == Errno::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_messages_format_and_cut_at_their_capacity() {
        let m = StackMessage::format(format_args!(
            "setrlimit {}={}: {}",
            "open files",
            64,
            Errno::EPERM
        ));
        assert_eq!(
            std::str::from_utf8(m.as_bytes()).unwrap(),
            "setrlimit open files=64: EPERM: Operation not permitted"
        );
        let long = "x".repeat(600);
        let m = StackMessage::format(format_args!("{long}"));
        assert_eq!(m.as_bytes().len(), 512);
    }

    #[test]
    fn exec_arrays_are_null_terminated_and_nul_bytes_empty_a_string() {
        let a = ExecArgs::new(
            &["/bin/true".into()],
            &["true".into(), "a\0b".into()],
            &["K=V".into()],
        );
        assert_eq!(a.argv_ptrs.len(), 3);
        assert!(a.argv_ptrs[2].is_null());
        assert_eq!(a.envp_ptrs.len(), 2);
        assert!(a.envp_ptrs[1].is_null());
        assert_eq!(a._argv[1].as_bytes(), b"");
        assert_eq!(a.candidates[0].as_bytes(), b"/bin/true");
    }
}
