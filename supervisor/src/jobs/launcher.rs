//! How a job's process is started: a [`Launcher`] turns a job into a command
//! line (plain data, unit-tested) and classifies how it ended. The runner
//! spawns it as a child process: the supervisor's multi-threaded runtime
//! forks only to exec it at once, with nothing but async-signal-safe calls
//! in between (see `sandbox::sys::fork::die_with_parent`).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse_types::{env as vars, sandbox};

use super::state::ExitKind;
use crate::sandbox::worker_uids::UidRange;

/// `gatehouse sandbox run` exits with this when the sandbox could not be built.
pub const SANDBOX_EXIT_UNAVAILABLE: i32 = crate::sandbox::EXIT_SANDBOX_FAILED as i32;
/// `gatehouse sandbox run` exits with this when its wall time ran out.
pub const SANDBOX_EXIT_WALL_TIME: i32 = crate::sandbox::EXIT_WALL_TIME as i32;

/// Everything a launcher needs to know about one job.
#[derive(Clone, Debug)]
pub struct LaunchRequest<'a> {
    pub profile: &'a str,
    pub work_dir: &'a Path,
    pub proxy_socket: Option<&'a Path>,
    pub control_socket: &'a Path,
    pub ca_cert: Option<&'a Path>,
    /// Variables for the worker (never a secret).
    pub env: &'a [(String, String)],
    pub wall_time: Duration,
    /// Empty: the profile's worker command.
    pub command: &'a [String],
}

/// A process to spawn, as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The complete environment: the child inherits nothing else.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

pub trait Launcher: Send + Sync {
    fn command(&self, req: &LaunchRequest<'_>) -> LaunchCommand;
    fn classify(&self, status: std::process::ExitStatus) -> ExitKind;
    /// Where the worker finds its control socket.
    fn control_socket_inside(&self, host_path: &Path) -> PathBuf;
    /// Where the worker finds its work dir.
    fn work_dir_inside(&self, host_path: &Path) -> PathBuf;
}

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs each job in `gatehouse sandbox run`.
pub struct SandboxLauncher {
    pub gatehouse_bin: PathBuf,
    pub profiles_dir: Option<PathBuf>,
    /// `--worker-uids`; `None` leaves `sandbox run`'s default range.
    pub worker_uids: Option<UidRange>,
}

impl Launcher for SandboxLauncher {
    fn command(&self, req: &LaunchRequest<'_>) -> LaunchCommand {
        let mut args: Vec<OsString> = vec!["sandbox".into(), "run".into()];
        let mut push = |flag: &str, value: &std::ffi::OsStr| {
            args.push(flag.into());
            args.push(value.to_owned());
        };
        push("--profile", req.profile.as_ref());
        push("--workdir", req.work_dir.as_os_str());
        // An identity of the proxy's admin API has its socket alone in its
        // own directory: binding the directory keeps the sandbox's way out
        // when the proxy restarts and binds a new socket there.
        match req.proxy_socket {
            Some(p) if p.file_name() == Some(sandbox::PROXY_SOCKET_NAME.as_ref()) => {
                let dir = p.parent().unwrap_or(p);
                push("--proxy-dir", dir.as_os_str());
            }
            Some(p) => push("--proxy-socket", p.as_os_str()),
            None => {}
        }
        push("--control-socket", req.control_socket.as_os_str());
        if let Some(ca) = req.ca_cert {
            push("--ca-cert", ca.as_os_str());
        }
        if let Some(dir) = &self.profiles_dir {
            push("--profiles-dir", dir.as_os_str());
        }
        if let Some(range) = &self.worker_uids {
            push(
                "--worker-uids",
                format!("{}-{}", range.first, range.last).as_ref(),
            );
        }
        // Rounded up: the supervisor's own deadline is the precise one; the
        // sandbox's is the backstop that holds even if the supervisor dies.
        let secs = req.wall_time.as_millis().div_ceil(1000).max(1);
        push("--wall-time", secs.to_string().as_ref());
        for (k, v) in req.env {
            push("--env", format!("{k}={v}").as_ref());
        }
        if !req.command.is_empty() {
            args.push("--".into());
            args.extend(req.command.iter().map(OsString::from));
        }
        LaunchCommand {
            program: self.gatehouse_bin.clone(),
            args,
            env: vec![("PATH".into(), SYSTEM_PATH.into())],
            cwd: None,
        }
    }

    fn classify(&self, status: std::process::ExitStatus) -> ExitKind {
        match status.code() {
            Some(0) => ExitKind::Success,
            Some(SANDBOX_EXIT_WALL_TIME) => ExitKind::WallTimeExceeded,
            Some(SANDBOX_EXIT_UNAVAILABLE) => ExitKind::SandboxUnavailable,
            _ => ExitKind::WorkerFailed,
        }
    }

    fn control_socket_inside(&self, _host_path: &Path) -> PathBuf {
        PathBuf::from(sandbox::CONTROL_SOCKET)
    }

    fn work_dir_inside(&self, _host_path: &Path) -> PathBuf {
        PathBuf::from(sandbox::WORK)
    }
}

/// Runs each job as a plain child process in its work dir, with no isolation
/// whatsoever. Selected only by `dangerously_unsandboxed = true`, for tests
/// and benchmarks of the service itself.
pub struct UnsandboxedLauncher {
    /// Put on PATH so `gatehouse report` works as it does in a sandbox.
    pub gatehouse_bin: PathBuf,
}

impl Launcher for UnsandboxedLauncher {
    fn command(&self, req: &LaunchRequest<'_>) -> LaunchCommand {
        let bin_dir = self
            .gatehouse_bin
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        let mut env = vec![("PATH".to_owned(), format!("{bin_dir}:{SYSTEM_PATH}"))];
        env.extend(req.env.iter().cloned());
        env.push((
            vars::CONTROL_SOCKET.into(),
            req.control_socket.display().to_string(),
        ));
        let (program, rest) = match req.command.split_first() {
            Some((p, rest)) => (PathBuf::from(p), rest),
            None => (PathBuf::from("/bin/false"), &[][..]),
        };
        LaunchCommand {
            program,
            args: rest.iter().map(OsString::from).collect(),
            env,
            cwd: Some(req.work_dir.to_owned()),
        }
    }

    fn classify(&self, status: std::process::ExitStatus) -> ExitKind {
        if status.success() {
            ExitKind::Success
        } else {
            ExitKind::WorkerFailed
        }
    }

    fn control_socket_inside(&self, host_path: &Path) -> PathBuf {
        host_path.to_owned()
    }

    fn work_dir_inside(&self, host_path: &Path) -> PathBuf {
        host_path.to_owned()
    }
}

/// Exit code and signal of a wait status.
pub fn exit_parts(status: std::process::ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn req<'a>(env: &'a [(String, String)], cmd: &'a [String]) -> LaunchRequest<'a> {
        LaunchRequest {
            profile: "default",
            work_dir: Path::new("/s/tickets/tkt_1/work"),
            proxy_socket: Some(Path::new("/p/tkt_1.sock")),
            control_socket: Path::new("/s/run/job_1/control.sock"),
            ca_cert: Some(Path::new("/etc/ca.pem")),
            env,
            wall_time: Duration::from_millis(1500),
            command: cmd,
        }
    }

    #[test]
    fn sandbox_command_line() {
        let env = [("GATEHOUSE_JOB".to_owned(), "job_1".to_owned())];
        let cmd = ["agent".to_owned(), "--flag".to_owned()];
        let l = SandboxLauncher {
            gatehouse_bin: "/bin/gatehouse".into(),
            profiles_dir: Some("/etc/profiles".into()),
            worker_uids: Some("200000-200099".parse().unwrap()),
        };
        let c = l.command(&req(&env, &cmd));
        let args: Vec<String> = c.args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            args.join(" "),
            "sandbox run --profile default --workdir /s/tickets/tkt_1/work \
             --proxy-socket /p/tkt_1.sock --control-socket /s/run/job_1/control.sock \
             --ca-cert /etc/ca.pem --profiles-dir /etc/profiles \
             --worker-uids 200000-200099 --wall-time 2 \
             --env GATEHOUSE_JOB=job_1 -- agent --flag"
        );
        assert_eq!(c.program, Path::new("/bin/gatehouse"));
        assert_eq!(c.env.len(), 1, "the sandbox process inherits only PATH");
    }

    #[test]
    fn sandbox_exit_codes() {
        let l = SandboxLauncher {
            gatehouse_bin: "/bin/gatehouse".into(),
            profiles_dir: None,
            worker_uids: None,
        };
        let cases = [
            (ExitStatusExt::from_raw(0), ExitKind::Success),
            (ExitStatusExt::from_raw(1 << 8), ExitKind::WorkerFailed),
            (ExitStatusExt::from_raw(137 << 8), ExitKind::WorkerFailed),
            (ExitStatusExt::from_raw(9), ExitKind::WorkerFailed),
            (
                ExitStatusExt::from_raw(SANDBOX_EXIT_WALL_TIME << 8),
                ExitKind::WallTimeExceeded,
            ),
            (
                ExitStatusExt::from_raw(SANDBOX_EXIT_UNAVAILABLE << 8),
                ExitKind::SandboxUnavailable,
            ),
        ];
        for (status, kind) in cases {
            assert_eq!(l.classify(status), kind, "{status:?}");
        }
    }

    #[test]
    fn unsandboxed_command_runs_in_the_work_dir() {
        let env = [("A".to_owned(), "1".to_owned())];
        let cmd = ["sh".to_owned(), "-c".to_owned(), "true".to_owned()];
        let l = UnsandboxedLauncher {
            gatehouse_bin: "/opt/g/gatehouse".into(),
        };
        let c = l.command(&req(&env, &cmd));
        assert_eq!(c.program, Path::new("sh"));
        assert_eq!(c.cwd.as_deref(), Some(Path::new("/s/tickets/tkt_1/work")));
        assert!(c.env[0].1.starts_with("/opt/g:"));
        assert!(c.env.contains(&(
            "GATEHOUSE_CONTROL_SOCKET".into(),
            "/s/run/job_1/control.sock".into()
        )));
    }
}
