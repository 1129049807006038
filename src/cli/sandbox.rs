//! `gatehouse sandbox run`, `gatehouse doctor`, `gatehouse profile check`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use gatehouse_supervisor::bench::BenchOptions;
use gatehouse_supervisor::ca_bundle;
use gatehouse_supervisor::doctor::{self, Status};
use gatehouse_supervisor::plan::{Plan, RunRequest};
use gatehouse_supervisor::profile::{self, DirSource, Profile};
use gatehouse_supervisor::sandbox::{self, LimitMechanism, Outcome, EXIT_SANDBOX_FAILED};

#[derive(Subcommand)]
pub enum Commands {
    /// Run commands in worker sandboxes
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Report which kernel features gatehouse needs are available
    Doctor {
        /// Print the checks as JSON
        #[arg(long)]
        json: bool,
    },
    /// Inspect sandbox profiles
    #[command(subcommand)]
    Profile(ProfileCommand),
}

#[derive(Subcommand)]
pub enum SandboxCommand {
    /// Run a command in a fresh sandbox built from a profile
    Run(Box<RunArgs>),
    /// Measure sandbox start-up against bubblewrap and fork/exec (build with --release)
    Bench {
        /// Measured runs per contender
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        /// Unmeasured runs per contender first
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        /// Also time another gatehouse binary (e.g. an older build) as the
        /// contender "gatehouse-against", for before/after in one run
        #[arg(long, value_name = "BINARY")]
        against: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum ProfileCommand {
    /// Validate a profile and print it fully resolved
    Check {
        /// A profile name (looked up in the profiles directories) or a path
        profile: String,
        /// Print JSON instead of TOML
        #[arg(long)]
        json: bool,
        /// Look for named profiles here first (default: ./sandbox-profiles, /etc/gatehouse/profiles)
        #[arg(long)]
        profiles_dir: Option<PathBuf>,
    },
}

#[derive(Args)]
pub struct RunArgs {
    /// Profile name or path to a profile TOML file
    #[arg(long)]
    profile: String,
    /// Host directory mounted read-write at /work (the command's cwd). As
    /// root, a directory owned by another user than --worker-user is shown
    /// to the worker as its own (an idmapped mount; its files keep their
    /// owner on disk)
    #[arg(long)]
    workdir: PathBuf,
    /// Unix socket of the proxy; a relay on 127.0.0.1:3128 inside forwards to it
    #[arg(long, conflicts_with = "proxy_dir")]
    proxy_socket: Option<PathBuf>,
    /// Directory holding the proxy identity's socket as `proxy.sock`, bound
    /// at /run/gatehouse/proxy (a socket re-created there by a restarted
    /// proxy is reached); the relay forwards to it
    #[arg(long)]
    proxy_dir: Option<PathBuf>,
    /// Unix socket of the supervisor, bound at /run/gatehouse/control.sock
    #[arg(long)]
    control_socket: Option<PathBuf>,
    /// The gatehouse CA certificate (public PEM) to trust inside, with the system roots
    #[arg(long)]
    ca_cert: Option<PathBuf>,
    /// Extra environment variable for the command (repeatable)
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Wall time in seconds; can only tighten the profile's limit
    #[arg(long, value_name = "SECS")]
    wall_time: Option<u64>,
    /// Look for named profiles here first
    #[arg(long)]
    profiles_dir: Option<PathBuf>,
    /// Started by root, each sandbox's worker gets a host uid (and gid) of
    /// its own from this range, held while the sandbox lives
    #[arg(long, value_name = "FIRST-LAST", default_value = sandbox::worker_uids::DEFAULT_RANGE)]
    worker_uids: String,
    /// Started by root, run the worker as this unprivileged account instead
    /// of a uid of its own (every sandbox given it shares its budgets)
    #[arg(long, conflicts_with = "worker_uids")]
    worker_user: Option<String>,
    /// Do not report limits that could not be enforced by cgroups
    #[arg(long)]
    quiet: bool,
    /// The command and its arguments (default: the profile's worker.command)
    #[arg(last = true)]
    command: Vec<String>,
}

impl Commands {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Commands::Sandbox(SandboxCommand::Run(args)) => Ok(run_sandbox(*args)),
            Commands::Sandbox(SandboxCommand::Bench {
                iterations,
                warmup,
                json,
                against,
            }) => bench(iterations, warmup, json, against),
            Commands::Doctor { json } => doctor(json),
            Commands::Profile(ProfileCommand::Check {
                profile,
                json,
                profiles_dir,
            }) => {
                let p = load_profile(&profile, profiles_dir.as_deref())?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&p)?);
                } else {
                    print!("{}", p.to_toml().context("printing the profile")?);
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn load_profile(arg: &str, dir: Option<&Path>) -> anyhow::Result<Profile> {
    let source = DirSource {
        dirs: match dir {
            Some(d) => vec![d.to_path_buf()],
            None => DirSource::default_dirs(),
        },
    };
    let profile = if profile::is_path_like(arg) {
        let text =
            std::fs::read_to_string(arg).with_context(|| format!("reading profile {arg}"))?;
        let name = Path::new(arg)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| arg.to_string());
        profile::resolve_text(&source, &name, arg, &text)?
    } else {
        profile::resolve(&source, arg)?
    };
    Ok(profile)
}

fn doctor(json: bool) -> anyhow::Result<ExitCode> {
    let checks = doctor::assess(&sandbox::probe::kernel_facts());
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            let status = match c.status {
                Status::Ok => "ok",
                Status::Degraded => "degraded",
                Status::Missing => "missing",
            };
            println!("{status:<9} {:<16} {}", c.feature, c.detail);
        }
    }
    let missing = checks.iter().any(|c| c.status == Status::Missing);
    Ok(if missing {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Everything before the sandbox exists fails with the reserved status, so
/// a caller can tell "not run" from the command's own failure.
fn run_sandbox(args: RunArgs) -> ExitCode {
    let quiet = args.quiet;
    // The worker's leased uid stays the sandbox's until the run is over.
    match prepare(args).and_then(|(plan, _lease)| {
        if !quiet {
            report_work_dir_size(&plan);
        }
        Ok(sandbox::run(&plan)?)
    }) {
        Ok((outcome, limits)) => {
            if !quiet {
                report_limits(&limits);
            }
            match &outcome {
                Outcome::SetupFailed(msg) => eprintln!("gatehouse sandbox: {msg}"),
                Outcome::ParentGone => {
                    eprintln!("gatehouse sandbox: the caller died; the sandbox was killed")
                }
                Outcome::WallTime(d) => eprintln!(
                    "gatehouse sandbox: wall time of {}s exceeded; the sandbox was killed",
                    d.as_secs()
                ),
                _ => {}
            }
            ExitCode::from(outcome.exit_code())
        }
        Err(e) => {
            eprintln!("gatehouse sandbox: {e:#}");
            ExitCode::from(EXIT_SANDBOX_FAILED)
        }
    }
}

/// A line when the profile's work dir size is not enforced and not required
/// (required, the run refuses to start and says why).
fn report_work_dir_size(plan: &Plan) {
    if let Ok(sandbox::SizeStatus::NotEnforced { why }) = sandbox::work_dir_size(plan) {
        if !plan.require.work_dir_size {
            eprintln!(
                "gatehouse sandbox: limits.work_dir_size is not enforced: {why} (see `gatehouse doctor`)"
            );
        }
    }
}

fn report_limits(l: &sandbox::LimitReport) {
    let weak: Vec<String> = [("memory", l.memory), ("pids", l.pids), ("cpu", l.cpu)]
        .iter()
        .filter(|(_, m)| *m == LimitMechanism::Rlimit)
        .map(|(n, _)| format!("{n} by rlimit"))
        .collect();
    if !weak.is_empty() {
        let cpu = if l.cpu == LimitMechanism::None {
            ", cpu not limited"
        } else {
            ""
        };
        eprintln!(
            "gatehouse sandbox: no cgroup available: {}{cpu} (see `gatehouse doctor`)",
            weak.join(", ")
        );
    }
}

fn prepare(args: RunArgs) -> anyhow::Result<(Plan, Option<sandbox::worker_uids::Lease>)> {
    let profile = load_profile(&args.profile, args.profiles_dir.as_deref())?;
    let absolute = |flag: &str, p: &Path| -> anyhow::Result<PathBuf> {
        std::fs::canonicalize(p).with_context(|| format!("{flag} {}", p.display()))
    };
    let workdir = absolute("--workdir", &args.workdir)?;
    if !workdir.is_dir() {
        bail!("--workdir {}: not a directory", workdir.display());
    }
    let proxy_socket = args
        .proxy_socket
        .as_deref()
        .map(|p| absolute("--proxy-socket", p))
        .transpose()?;
    let proxy_dir = args
        .proxy_dir
        .as_deref()
        .map(|p| absolute("--proxy-dir", p))
        .transpose()?;
    let control_socket = args
        .control_socket
        .as_deref()
        .map(|p| absolute("--control-socket", p))
        .transpose()?;
    let ca_bundle = args
        .ca_cert
        .as_deref()
        .map(|ca| ca_bundle::load(ca, Path::new(ca_bundle::SYSTEM_ROOTS)))
        .transpose()
        .map_err(|e| anyhow::anyhow!("--ca-cert {e}"))?;
    let gatehouse_exe = match &control_socket {
        Some(_) => Some(std::env::current_exe().context("locating the gatehouse binary")?),
        None => None,
    };
    let account = match &args.worker_user {
        Some(name) => sandbox::WorkerAccount::User(name),
        None => sandbox::WorkerAccount::Leased(args.worker_uids.parse()?),
    };
    let (identity, lease) = sandbox::worker_identity(account)?;
    let caller_env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let request = RunRequest {
        workdir,
        proxy_socket,
        proxy_dir,
        control_socket,
        ca_bundle,
        gatehouse_exe,
        env: args.env,
        wall_time_secs: args.wall_time,
        command: args.command,
    };
    Ok((
        Plan::build(&profile, &request, identity, &caller_env)?,
        lease,
    ))
}

fn bench(
    iterations: usize,
    warmup: usize,
    json: bool,
    against: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let report = gatehouse_supervisor::bench::run(&BenchOptions {
        iterations,
        warmup,
        launcher: crate::binaries::sibling(crate::binaries::LAUNCHER)?,
        against,
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.table());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use clap::Parser;
    use gatehouse_supervisor::jobs::launcher::{LaunchRequest, Launcher, SandboxLauncher};

    use super::{Commands, RunArgs, SandboxCommand};
    use crate::cli::{LauncherArgs, LauncherCommand};

    /// Parses what a launcher emits with the `gatehouse` binary's own parser.
    fn parse(args: &[OsString]) -> Result<RunArgs, clap::Error> {
        let argv = std::iter::once(OsString::from("gatehouse")).chain(args.iter().cloned());
        match LauncherArgs::try_parse_from(argv)?.command {
            LauncherCommand::Sandbox(Commands::Sandbox(SandboxCommand::Run(run))) => Ok(*run),
            _ => panic!("not `sandbox run`: {args:?}"),
        }
    }

    fn launcher(profiles_dir: Option<&str>, worker_uids: Option<&str>) -> SandboxLauncher {
        SandboxLauncher {
            gatehouse_bin: "/usr/lib/gatehouse/gatehouse".into(),
            profiles_dir: profiles_dir.map(PathBuf::from),
            worker_uids: worker_uids.map(|r| r.parse().unwrap()),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Every field the launcher sets arrives in the field of the same
    /// meaning, and nothing else is set.
    fn assert_parsed_as(
        req: &LaunchRequest<'_>,
        profiles_dir: Option<&str>,
        worker_uids: Option<&str>,
        run: &RunArgs,
    ) {
        assert_eq!(run.profile, req.profile);
        assert_eq!(run.workdir, req.work_dir);
        // An identity's socket alone in its directory goes as the directory.
        match req.proxy_socket {
            Some(p) if p.file_name() == Some("proxy.sock".as_ref()) => {
                assert_eq!(run.proxy_dir.as_deref(), p.parent());
                assert_eq!(run.proxy_socket, None);
            }
            p => {
                assert_eq!(run.proxy_socket.as_deref(), p);
                assert_eq!(run.proxy_dir, None);
            }
        }
        assert_eq!(run.control_socket.as_deref(), Some(req.control_socket));
        assert_eq!(run.ca_cert.as_deref(), req.ca_cert);
        assert_eq!(run.profiles_dir.as_deref(), profiles_dir.map(Path::new));
        let env: Vec<String> = req.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(run.env, env);
        let secs = req.wall_time.as_millis().div_ceil(1000).max(1) as u64;
        assert_eq!(run.wall_time, Some(secs));
        assert_eq!(run.command, req.command);
        // A worker uid of its own from the configured range, or the default.
        assert_eq!(run.worker_user, None);
        assert_eq!(
            run.worker_uids,
            worker_uids.unwrap_or(gatehouse_supervisor::sandbox::worker_uids::DEFAULT_RANGE)
        );
        assert!(!run.quiet);
    }

    #[test]
    fn the_sandbox_launcher_speaks_sandbox_run() {
        let env = [
            ("GATEHOUSE_JOB".to_owned(), "job_1".to_owned()),
            ("MODE".to_owned(), "a=b c".to_owned()),
        ];
        // A worker command whose arguments look like flags of `sandbox run`.
        let command = strings(&["agent", "--profile", "evil", "--", "-x", "--wall-time=1"]);
        let full = LaunchRequest {
            profile: "team/web",
            work_dir: Path::new("/var/lib/gatehouse/tickets/tkt_1/work"),
            proxy_socket: Some(Path::new("/var/lib/gatehouse/proxy/sockets/tkt_1.sock")),
            control_socket: Path::new("/var/lib/gatehouse/run/job_1/control.sock"),
            ca_cert: Some(Path::new("/var/lib/gatehouse/proxy/ca.pem")),
            env: &env,
            wall_time: Duration::from_millis(1500),
            command: &command,
        };
        let bare = LaunchRequest {
            profile: "default",
            proxy_socket: None,
            ca_cert: None,
            env: &[],
            wall_time: Duration::from_millis(200),
            command: &[],
            ..full.clone()
        };
        let in_dir = LaunchRequest {
            proxy_socket: Some(Path::new(
                "/run/gatehouse/proxy/identities/tkt_1/proxy.sock",
            )),
            ..full.clone()
        };
        for (req, profiles_dir, worker_uids) in [
            (
                &full,
                Some("/etc/gatehouse/profiles"),
                Some("200000-265535"),
            ),
            (&full, None, None),
            (&bare, None, None),
            (&in_dir, None, Some("70000-70009")),
        ] {
            let emitted = launcher(profiles_dir, worker_uids).command(req);
            let run = parse(&emitted.args)
                .unwrap_or_else(|e| panic!("{:?} is refused: {e}", emitted.args));
            assert_parsed_as(req, profiles_dir, worker_uids, &run);
        }
    }

    #[test]
    fn a_drifted_flag_or_value_is_refused() {
        let command = strings(&["agent"]);
        let req = LaunchRequest {
            profile: "default",
            work_dir: Path::new("/w"),
            proxy_socket: None,
            control_socket: Path::new("/c.sock"),
            ca_cert: None,
            env: &[],
            wall_time: Duration::from_secs(60),
            command: &command,
        };
        let emitted = launcher(None, None).command(&req).args;
        // The positive control: what is emitted parses.
        assert!(parse(&emitted).is_ok());
        let replace = |from: &str, to: &str| -> Vec<OsString> {
            assert!(emitted.iter().any(|a| a == from), "{from} not emitted");
            emitted
                .iter()
                .map(|a| if a == from { to.into() } else { a.clone() })
                .collect()
        };
        for drifted in [
            replace("--wall-time", "--wall-time-secs"),
            replace("--control-socket", "--control"),
            replace("60", "60s"),
            replace("run", "start"),
        ] {
            assert!(parse(&drifted).is_err(), "{drifted:?} was accepted");
        }
    }
}
