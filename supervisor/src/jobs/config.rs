//! The supervisor's config file: parsed strictly (unknown keys are errors),
//! then validated into [`Config`] with errors that name the file and key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::control_limits::ControlLimits;
use super::spec::SpecLimits;
use crate::sandbox::worker_uids::UidRange;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// the file could not be read
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    /// the file is not valid TOML for this schema (unknown key, wrong type)
    #[error("{file}: {message}")]
    Parse { file: PathBuf, message: String },
    /// a key holds a value outside what is allowed
    #[error("{file}: key `{key}`: expected {expected}")]
    Invalid {
        file: PathBuf,
        key: &'static str,
        expected: &'static str,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: PathBuf,
    /// The per-job control sockets; default `<state_dir>/run`.
    run_dir: Option<PathBuf>,
    api_socket: PathBuf,
    api_socket_group: Option<String>,
    prompts_dir: PathBuf,
    #[serde(default)]
    sandbox: RawSandbox,
    proxy: Option<RawProxy>,
    #[serde(default)]
    worker: RawWorker,
    #[serde(default)]
    limits: RawLimits,
    /// Files (or directories) the supervisor covers in a mount namespace of
    /// its own at start: the deployment's secrets (`hide`).
    #[serde(default)]
    hidden_paths: Vec<PathBuf>,
    metrics: Option<gatehouse_types::metrics::MetricsListen>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    gatehouse_bin: Option<PathBuf>,
    profiles_dir: Option<PathBuf>,
    /// `FIRST-LAST`: the host uids (and gids) leased to live sandboxes
    /// started by root, one each; `sandbox run --worker-uids`.
    worker_uids: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    dangerously_unsandboxed: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProxy {
    admin_socket: PathBuf,
    ca_cert: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    command: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLimits {
    max_running_jobs: usize,
    default_deadline_secs: u64,
    max_deadline_secs: u64,
    log_cap_bytes: u64,
    cancel_grace_ms: u64,
    max_task_bytes: usize,
    control_connections_per_job: usize,
    control_read_secs: u64,
    control_write_burst: u32,
    control_writes_per_minute: u32,
    reports_per_job: u32,
    report_bytes_per_job: u64,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_running_jobs: 64,
            default_deadline_secs: 3600,
            max_deadline_secs: 24 * 3600,
            log_cap_bytes: 8 << 20,
            cancel_grace_ms: 3000,
            max_task_bytes: 64 << 10,
            control_connections_per_job: ControlLimits::default().connections_per_job,
            control_read_secs: ControlLimits::default().read_secs,
            control_write_burst: ControlLimits::default().write_burst,
            control_writes_per_minute: ControlLimits::default().writes_per_minute,
            reports_per_job: ControlLimits::default().reports_per_job,
            report_bytes_per_job: ControlLimits::default().report_bytes_per_job,
        }
    }
}

/// How jobs are launched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LauncherKind {
    /// `gatehouse sandbox run …` as a child process (the only production mode).
    Sandbox,
    /// The command as a plain child process, with no isolation at all. For
    /// tests and benchmarks of the service logic only.
    DangerouslyUnsandboxed,
}

#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub admin_socket: PathBuf,
    pub ca_cert: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub state_dir: PathBuf,
    /// Each job's control socket, in `<run_dir>/<job>/` (a runtime
    /// directory such as `/run/gatehouse/supervisor`: the sandbox's mount
    /// table shows the socket's path, and names nothing else).
    pub run_dir: PathBuf,
    pub api_socket: PathBuf,
    /// A group whose members (the router's user) may use the job API: the
    /// socket becomes 0660 and owned by that group. `None`: 0600.
    pub api_socket_group: Option<String>,
    pub prompts_dir: PathBuf,
    pub gatehouse_bin: Option<PathBuf>,
    pub profiles_dir: Option<PathBuf>,
    /// The host uids leased to sandboxes started by root; `None`: the
    /// default range of `sandbox run`.
    pub worker_uids: Option<UidRange>,
    pub sandbox_env: BTreeMap<String, String>,
    pub launcher: LauncherKind,
    pub proxy: Option<ProxyConfig>,
    /// The default command inside the sandbox; `None`: the profile's.
    pub worker_command: Option<Vec<String>>,
    pub max_running_jobs: usize,
    pub default_deadline_secs: u64,
    pub max_deadline_secs: u64,
    pub log_cap_bytes: u64,
    pub cancel_grace: Duration,
    pub max_task_bytes: usize,
    /// What one job may take through its control socket.
    pub control: ControlLimits,
    /// Covered at start in the supervisor's own mount namespace (`hide`).
    pub hidden_paths: Vec<PathBuf>,
    /// Where the metrics are served (a loopback port), if at all.
    pub metrics: Option<std::net::SocketAddr>,
}

impl Config {
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
            file: file.into(),
            source,
        })?;
        let base = file.parent().unwrap_or(Path::new("."));
        Config::parse(&text, file, base)
    }

    /// Parses `text` as if read from `file`; relative paths are relative to
    /// `base` (the config file's directory).
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            file: file.into(),
            message: e.to_string(),
        })?;
        let invalid = |key, expected| ConfigError::Invalid {
            file: file.into(),
            key,
            expected,
        };
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        if raw.worker.command.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid(
                "worker.command",
                "a non-empty argv (or no key: the profile's command)",
            ));
        }
        let l = raw.limits;
        check_limits(&l).map_err(|(key, expected)| invalid(key, expected))?;
        check_sandbox_env(&raw.sandbox.env).map_err(|(key, expected)| invalid(key, expected))?;
        if raw.metrics.is_some_and(|m| m.check().is_err()) {
            return Err(invalid(
                "metrics.listen",
                "a loopback address (127.0.0.0/8 or ::1): metrics are served unauthenticated",
            ));
        }
        let worker_uids = match raw.sandbox.worker_uids {
            Some(text) => Some(text.parse::<UidRange>().map_err(|_| {
                invalid(
                    "sandbox.worker_uids",
                    "`FIRST-LAST` host uids, 0 < FIRST <= LAST < 4294967294, without 65534",
                )
            })?),
            None => None,
        };
        let state_dir = abs(raw.state_dir);
        let (run_dir, run_key) = match raw.run_dir {
            Some(dir) => (abs(dir), "run_dir"),
            None => (state_dir.join("run"), "state_dir"),
        };
        // The run dir is swept of job dirs at start: never the state dir or
        // one holding it.
        if run_dir == Path::new("/") || state_dir.starts_with(&run_dir) {
            return Err(invalid(
                "run_dir",
                "a directory of its own, neither the state dir nor one holding it",
            ));
        }
        // A unix socket path is at most 107 bytes: `<run_dir>/<job>/control.sock`.
        if run_dir.as_os_str().len() > 64 {
            return Err(invalid(
                run_key,
                "a path of at most 60 bytes, or a `run_dir` of at most 64 (per-job unix sockets live under it)",
            ));
        }
        Ok(Config {
            state_dir,
            run_dir,
            api_socket: abs(raw.api_socket),
            api_socket_group: raw.api_socket_group,
            prompts_dir: abs(raw.prompts_dir),
            gatehouse_bin: raw.sandbox.gatehouse_bin.map(abs),
            profiles_dir: raw.sandbox.profiles_dir.map(abs),
            worker_uids,
            sandbox_env: raw.sandbox.env,
            launcher: if raw.sandbox.dangerously_unsandboxed {
                LauncherKind::DangerouslyUnsandboxed
            } else {
                LauncherKind::Sandbox
            },
            proxy: raw.proxy.map(|p| ProxyConfig {
                admin_socket: abs(p.admin_socket),
                ca_cert: p.ca_cert.map(abs),
            }),
            worker_command: raw.worker.command,
            max_running_jobs: l.max_running_jobs,
            default_deadline_secs: l.default_deadline_secs,
            max_deadline_secs: l.max_deadline_secs,
            log_cap_bytes: l.log_cap_bytes,
            cancel_grace: Duration::from_millis(l.cancel_grace_ms),
            max_task_bytes: l.max_task_bytes,
            control: ControlLimits {
                connections_per_job: l.control_connections_per_job,
                read_secs: l.control_read_secs,
                write_burst: l.control_write_burst,
                writes_per_minute: l.control_writes_per_minute,
                reports_per_job: l.reports_per_job,
                report_bytes_per_job: l.report_bytes_per_job,
            },
            hidden_paths: raw.hidden_paths.into_iter().map(abs).collect(),
            metrics: raw.metrics.map(|m| m.listen),
        })
    }

    pub fn spec_limits(&self) -> SpecLimits {
        SpecLimits {
            max_task_bytes: self.max_task_bytes,
            default_deadline_secs: self.default_deadline_secs,
            max_deadline_secs: self.max_deadline_secs,
            proxy_configured: self.proxy.is_some(),
        }
    }
}

/// A key and what it should hold.
type Refusal = (&'static str, &'static str);

/// `[limits]`: every bound in its range and consistent with the others.
fn check_limits(l: &RawLimits) -> Result<(), Refusal> {
    if l.max_running_jobs == 0 || l.max_running_jobs > 4096 {
        return Err(("limits.max_running_jobs", "1 to 4096"));
    }
    if l.max_deadline_secs == 0 {
        return Err(("limits.max_deadline_secs", "at least 1"));
    }
    if l.default_deadline_secs == 0 || l.default_deadline_secs > l.max_deadline_secs {
        return Err((
            "limits.default_deadline_secs",
            "1 to limits.max_deadline_secs",
        ));
    }
    if l.log_cap_bytes < 1024 {
        return Err(("limits.log_cap_bytes", "at least 1024"));
    }
    if l.cancel_grace_ms > 600_000 {
        return Err(("limits.cancel_grace_ms", "at most 600000"));
    }
    if l.max_task_bytes == 0 || l.max_task_bytes > 1 << 20 {
        return Err(("limits.max_task_bytes", "1 to 1048576"));
    }
    let at_least_one = [
        (
            "limits.control_connections_per_job",
            l.control_connections_per_job == 0,
        ),
        ("limits.control_read_secs", l.control_read_secs == 0),
        ("limits.control_write_burst", l.control_write_burst == 0),
        (
            "limits.control_writes_per_minute",
            l.control_writes_per_minute == 0,
        ),
        ("limits.reports_per_job", l.reports_per_job == 0),
        ("limits.report_bytes_per_job", l.report_bytes_per_job < 1024),
    ];
    if let Some((key, _)) = at_least_one.iter().find(|(_, bad)| *bad) {
        let expected = if *key == "limits.report_bytes_per_job" {
            "at least 1024"
        } else {
            "at least 1"
        };
        return Err((key, expected));
    }
    Ok(())
}

/// `[sandbox] env`: plain names, none in gatehouse's own `GATEHOUSE_` space.
fn check_sandbox_env(env: &BTreeMap<String, String>) -> Result<(), Refusal> {
    for key in env.keys() {
        let ok = !key.is_empty()
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !key.starts_with(gatehouse_types::env::PREFIX);
        if !ok {
            return Err((
                "sandbox.env",
                "variable names of [A-Za-z0-9_], not starting with GATEHOUSE_",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        state_dir = "state"
        api_socket = "/run/x.sock"
        prompts_dir = "prompts"
        [worker]
        command = ["agent"]
    "#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(
            text,
            Path::new("/etc/g/supervisor.toml"),
            Path::new("/etc/g"),
        )
    }

    #[test]
    fn minimal_config_resolves_relative_paths() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.state_dir, Path::new("/etc/g/state"));
        assert_eq!(c.api_socket, Path::new("/run/x.sock"));
        assert_eq!(c.launcher, LauncherKind::Sandbox);
        assert_eq!(c.max_running_jobs, 64);
        assert!(c.proxy.is_none());
    }

    #[test]
    fn control_sockets_live_in_the_run_dir_or_the_state_dirs_run() {
        assert_eq!(
            parse(MINIMAL).unwrap().run_dir,
            Path::new("/etc/g/state/run")
        );
        let c = parse(&format!(
            "run_dir = \"/run/gatehouse/supervisor\"\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(c.run_dir, Path::new("/run/gatehouse/supervisor"));
        assert_eq!(c.state_dir, Path::new("/etc/g/state"));
        // `<run_dir>/<job>/control.sock` must fit a unix socket's 107 bytes.
        let long = format!("/{}", "r".repeat(64));
        let e = parse(&format!("run_dir = {long:?}\n{MINIMAL}")).unwrap_err();
        assert!(e.to_string().contains("key `run_dir`"), "{e}");
        let e = parse(&MINIMAL.replace("\"state\"", &format!("{long:?}"))).unwrap_err();
        assert!(e.to_string().contains("key `state_dir`"), "{e}");
        for shared in ["/etc/g/state", "/etc/g", "/"] {
            let e = parse(&format!("run_dir = {shared:?}\n{MINIMAL}")).unwrap_err();
            assert!(e.to_string().contains("key `run_dir`"), "{shared}: {e}");
        }
        // A long state dir is fine when the sockets live elsewhere.
        let c = parse(&format!(
            "run_dir = \"/run/g\"\n{}",
            MINIMAL.replace("\"state\"", &format!("{long:?}"))
        ))
        .unwrap();
        assert_eq!(c.run_dir, Path::new("/run/g"));
    }

    #[test]
    fn metrics_are_off_unless_a_loopback_address_is_given() {
        assert_eq!(parse(MINIMAL).unwrap().metrics, None);
        let c = parse(&format!(
            "{MINIMAL}\n[metrics]\nlisten = \"127.0.0.1:9465\""
        ))
        .unwrap();
        assert_eq!(c.metrics, Some("127.0.0.1:9465".parse().unwrap()));
    }

    #[test]
    fn worker_uids_are_a_range_or_the_default() {
        assert_eq!(parse(MINIMAL).unwrap().worker_uids, None);
        let c = parse(&format!(
            "{MINIMAL}\n[sandbox]\nworker_uids = \"200000-200009\""
        ))
        .unwrap();
        assert_eq!(
            c.worker_uids,
            Some(UidRange {
                first: 200_000,
                last: 200_009
            })
        );
    }

    #[test]
    fn the_example_config_parses() {
        let text = include_str!("../../examples/supervisor.toml");
        let c = parse(text).unwrap();
        assert!(c.proxy.is_some());
        assert_eq!(c.launcher, LauncherKind::Sandbox);
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let cases = [
            (format!("{MINIMAL}\nsurprise = 1"), "surprise"),
            (
                format!("{MINIMAL}\n[limits]\nmax_running_jobs = 0"),
                "limits.max_running_jobs",
            ),
            (
                format!("{MINIMAL}\n[limits]\ndefault_deadline_secs = 10\nmax_deadline_secs = 5"),
                "limits.default_deadline_secs",
            ),
            (
                format!("{MINIMAL}\n[sandbox]\nenv = {{ GATEHOUSE_X = \"1\" }}"),
                "sandbox.env",
            ),
            (format!("{MINIMAL}\n[proxy]\nadmin = \"x\""), "admin"),
            (MINIMAL.replace("[\"agent\"]", "[]"), "worker.command"),
            (
                format!("{MINIMAL}\n[metrics]\nlisten = \"0.0.0.0:9465\""),
                "metrics.listen",
            ),
            (format!("{MINIMAL}\n[metrics]\nport = 1"), "port"),
            (
                format!("{MINIMAL}\n[sandbox]\nworker_uids = \"0-10\""),
                "sandbox.worker_uids",
            ),
            (
                format!("{MINIMAL}\n[sandbox]\nworker_uids = \"65000-66000\""),
                "sandbox.worker_uids",
            ),
        ];
        for (text, key) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains("/etc/g/supervisor.toml"), "{err}");
            assert!(err.contains(key), "{key}: {err}");
        }
    }

    /// A change to the default limits, and the key it must be refused under.
    type LimitCase = (fn(&mut RawLimits), &'static str);

    #[test]
    fn limits_table() {
        assert_eq!(check_limits(&RawLimits::default()), Ok(()));
        let cases: [LimitCase; 14] = [
            (|l| l.max_running_jobs = 0, "limits.max_running_jobs"),
            (|l| l.max_running_jobs = 4097, "limits.max_running_jobs"),
            (|l| l.max_deadline_secs = 0, "limits.max_deadline_secs"),
            (
                |l| l.default_deadline_secs = 0,
                "limits.default_deadline_secs",
            ),
            (
                |l| l.default_deadline_secs = l.max_deadline_secs + 1,
                "limits.default_deadline_secs",
            ),
            (|l| l.log_cap_bytes = 1023, "limits.log_cap_bytes"),
            (|l| l.cancel_grace_ms = 600_001, "limits.cancel_grace_ms"),
            (
                |l| l.max_task_bytes = (1 << 20) + 1,
                "limits.max_task_bytes",
            ),
            (
                |l| l.control_connections_per_job = 0,
                "limits.control_connections_per_job",
            ),
            (|l| l.control_read_secs = 0, "limits.control_read_secs"),
            (|l| l.control_write_burst = 0, "limits.control_write_burst"),
            (
                |l| l.control_writes_per_minute = 0,
                "limits.control_writes_per_minute",
            ),
            (|l| l.reports_per_job = 0, "limits.reports_per_job"),
            (
                |l| l.report_bytes_per_job = 1023,
                "limits.report_bytes_per_job",
            ),
        ];
        for (change, key) in cases {
            let mut l = RawLimits::default();
            change(&mut l);
            assert_eq!(check_limits(&l).map_err(|(k, _)| k), Err(key));
        }
        let edges = RawLimits {
            max_running_jobs: 4096,
            default_deadline_secs: 1,
            max_deadline_secs: 1,
            log_cap_bytes: 1024,
            cancel_grace_ms: 600_000,
            max_task_bytes: 1 << 20,
            control_connections_per_job: 1,
            control_read_secs: 1,
            control_write_burst: 1,
            control_writes_per_minute: 1,
            reports_per_job: 1,
            report_bytes_per_job: 1024,
        };
        assert_eq!(check_limits(&edges), Ok(()));
    }

    #[test]
    fn sandbox_env_table() {
        let cases = [
            ("LANG", true),
            ("CI_2", true),
            ("", false),
            ("A-B", false),
            ("A B", false),
            ("GATEHOUSE_JOB", false),
            ("GATEHOUSE_", false),
        ];
        for (name, ok) in cases {
            let env = BTreeMap::from([(name.to_string(), "v".to_string())]);
            assert_eq!(check_sandbox_env(&env).is_ok(), ok, "{name:?}");
        }
    }
}
