//! gatehouse supervisor: worker sandboxes built from a profile, and the
//! service that runs them as jobs.
//!
//! ```text
//! profile TOML ──► profile::resolve ──► Profile ─┐
//!   (extends chain, deny_unknown_fields,          ├─► plan::Plan::build ──► sandbox::run
//!    validate)                 RunRequest ───────┘    (mounts, Landlock       (clone into namespaces,
//!                              caller env, identity    rules, seccomp denials,  pivot_root, relay,
//!                                                      limits, env, argv)       harden, exec, wait)
//!
//! router ──► jobs (job API on a unix socket, SQLite state) ──spawns──► `gatehouse sandbox run`
//!              ├─ service: admits jobs; answers the API and each job's control socket
//!              ├─ runner, one task per job: workspace (work dir, prompt), control
//!              │  socket, proxy identity, worker_env (pure), launch, logs, release
//!              └─ events long-poll (state changes, worker reports)
//!
//! ca_bundle: system roots + the gatehouse CA for `--ca-cert`; a private key is refused
//! bench: `sandbox run` start-up vs bubblewrap and fork/exec; the CLI only prints it
//! ```
//!
//! `profile`, `plan` and `doctor` are pure: data in, data out, tested
//! without root. `sandbox` executes a plan; `sandbox::sys` is the only
//! module with `unsafe` (the workspace denies it everywhere else, and each
//! block carries a `// SAFETY:` comment). `bench` measures `sandbox run`
//! against bubblewrap and fork/exec.
//! It fails closed: a protection the profile requires that the kernel does
//! not offer stops the run before anything executes. `jobs` starts each
//! sandbox as a child process (`gatehouse sandbox run`): its multi-threaded
//! runtime forks only to exec at once, with nothing but async-signal-safe
//! calls in between; the sandbox is built by that single-threaded child.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod accounts;
pub mod bench;
pub mod ca_bundle;
pub mod doctor;
pub mod jobs;
pub mod plan;
pub mod profile;
pub mod sandbox;
pub mod workdir_fs;
