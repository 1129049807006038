//! gatehouse supervisor: worker sandboxes built from a profile.
//!
//! ```text
//! profile TOML ──► profile::resolve ──► Profile ─┐
//!   (extends chain, deny_unknown_fields,          ├─► plan::Plan::build ──► sandbox::run
//!    validate)                 RunRequest ───────┘    (mounts, Landlock       (clone into namespaces,
//!                              caller env, identity    rules, seccomp denials,  pivot_root, relay,
//!                                                      limits, env, argv)       harden, exec, wait)
//! ```
//!
//! `profile`, `plan` and `doctor` are pure: data in, data out, tested
//! without root. `sandbox` is the only module that touches the kernel and
//! the only one with `unsafe` (each block carries a `// SAFETY:` comment).
//! `bench` measures `sandbox run` against bubblewrap and fork/exec.
//! It fails closed: a protection the profile requires that the kernel does
//! not offer stops the run before anything executes.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod bench;
pub mod doctor;
pub mod plan;
pub mod profile;
pub mod sandbox;
