//! What gatehouse's tests and benchmarks share, in one place (used only as a
//! dev-dependency).
//!
//! - [`skip`]: the one way a test skips. A test names what the machine must
//!   have ([`skip::Need`]); what is missing is decided by [`machine`], the
//!   way `gatehouse doctor` decides it. A skip prints
//!   `SKIP: <test>: <reason>` to stderr, and under `GATEHOUSE_TEST_STRICT=1`
//!   fails the test instead.
//! - [`machine`]: root, the test and worker accounts, the kernel features
//!   (`gatehouse doctor`'s checks), IPv6 loopback.
//! - [`bin`]: the `gatehouse` binaries, found next to the test executable, and
//!   the repository's files.
//! - [`random`], [`procs`]: random tokens and `/proc` scans.
//! - [`rules`]: the rule-set fixture the end-to-end tests run under.
//! - [`smallfs`]: a small tmpfs to fill (root), for full-disk tests.
//! - [`proxy`], [`sandbox`], [`service`], [`router`]: harnesses for each
//!   part's end-to-end tests (an in-process proxy in front of the emulators,
//!   sandboxes in both modes, a `gatehouse supervisor` child and a fake proxy
//!   admin, the router's replay).
//! - [`live`]: the live loop's world, every part a real process (emulators,
//!   `gatehouse proxy`, `gatehouse supervisor`, `gatehouse router run`).

// Test code: a failed set-up step is a failed test, so panicking is the
// intended way to report it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bin;
pub mod live;
pub mod machine;
pub mod metrics;
pub mod model;
pub mod procs;
pub mod proxy;
pub mod random;
pub mod router;
pub mod rules;
pub mod sandbox;
pub mod service;
pub mod skip;
pub mod smallfs;

pub use skip::Need;
