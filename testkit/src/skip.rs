//! The one way a test skips.
//!
//! A test says what it needs ([`Need`]); when the machine lacks it, the
//! test is skipped with `SKIP: <test>: <reason>` on stderr, the reason
//! naming the missing feature as [`crate::machine`] determined it (for
//! kernel features, `gatehouse doctor`'s own check). With
//! `GATEHOUSE_TEST_STRICT=1` (CI) a skip fails the test instead.
//!
//! There is deliberately no "skip because it did not work": a feature that
//! is present makes the test run, and a sandbox that then fails to start is
//! a failed test.

use crate::machine::{self, Feature, TEST_USER, WORKER_USER};

/// The variable that turns every skip into a failure.
pub const STRICT_VAR: &str = "GATEHOUSE_TEST_STRICT";

/// Something of the machine a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The process runs as root.
    Root,
    /// The account exists (`scripts/setup-debian` creates them).
    User(&'static str),
    /// A kernel feature, for this process's user.
    Kernel(Feature),
    /// What `gatehouse sandbox run` needs from this caller: user namespaces,
    /// Landlock, seccomp, and as root the worker account.
    Sandbox,
    /// What a rootless sandbox started by root as the test user needs: root
    /// (to switch), the test account, and the kernel features for that user.
    SandboxAsTestUser,
    /// A listening socket on `[::1]`.
    Ipv6Loopback,
    /// aider, the coding-agent CLI, installed at [`AIDER_PREFIX`]
    /// (`scripts/install-aider`, which `scripts/setup-debian` runs).
    Aider,
}

/// Where `scripts/install-aider` installs aider by default.
pub const AIDER_PREFIX: &str = "/opt/gatehouse/aider";

const SANDBOX_FEATURES: [Feature; 3] =
    [Feature::UserNamespaces, Feature::Landlock, Feature::Seccomp];

fn user_missing(name: &str) -> Option<String> {
    machine::user_uid(name)
        .is_none()
        .then(|| format!("user {name} does not exist (scripts/setup-debian creates it)"))
}

fn root_missing() -> Option<String> {
    (!machine::is_root()).then(|| format!("not root (uid {})", machine::uid()))
}

fn first_missing_feature(checks: &[machine::Check]) -> Option<String> {
    SANDBOX_FEATURES
        .iter()
        .find_map(|f| machine::feature_missing(checks, *f))
}

impl Need {
    /// Why this machine lacks it, or `None` when it has it.
    pub fn missing(self) -> Option<String> {
        match self {
            Need::Root => root_missing(),
            Need::User(name) => user_missing(name),
            Need::Kernel(feature) => machine::feature_missing(machine::doctor(), feature),
            Need::Sandbox => first_missing_feature(machine::doctor()).or_else(|| {
                machine::is_root()
                    .then(|| user_missing(WORKER_USER))
                    .flatten()
            }),
            Need::SandboxAsTestUser => root_missing()
                .map(|r| format!("{r}: switching to {TEST_USER} needs root"))
                .or_else(|| user_missing(TEST_USER))
                .or_else(|| {
                    first_missing_feature(machine::doctor_for_test_user())
                        .map(|r| format!("as {TEST_USER}: {r}"))
                }),
            Need::Ipv6Loopback => machine::ipv6_loopback_missing(),
            Need::Aider => {
                let aider = std::path::Path::new(AIDER_PREFIX).join("bin/aider");
                (!aider.is_file()).then(|| {
                    format!(
                        "{} is missing (scripts/install-aider installs it)",
                        aider.display()
                    )
                })
            }
        }
    }
}

/// Whether `GATEHOUSE_TEST_STRICT=1`.
pub fn strict() -> bool {
    std::env::var(STRICT_VAR).is_ok_and(|v| v == "1")
}

/// The running test's name (libtest names each test's thread after it).
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("(unnamed test)")
        .to_owned()
}

/// What becomes of a test, given the reasons it cannot run here.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Run,
    Skip(String),
    /// A skip under `GATEHOUSE_TEST_STRICT=1`.
    Fail(String),
}

/// Pure: the verdict for `missing` reasons, strict or not.
pub fn verdict(missing: &[String], strict: bool) -> Verdict {
    if missing.is_empty() {
        return Verdict::Run;
    }
    let reason = missing.join("; ");
    if strict {
        Verdict::Fail(reason)
    } else {
        Verdict::Skip(reason)
    }
}

/// Writes the skip line to the process's stderr itself: libtest captures
/// `eprintln!` of passing tests, and a skip must be seen.
fn announce(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIP: {test}: {reason}");
}

/// Whether `test` may run here: true when the machine has all of `needs`.
/// Otherwise prints `SKIP: <test>: <reasons>` and returns false, or, under
/// `GATEHOUSE_TEST_STRICT=1`, prints it and panics.
#[track_caller]
pub fn available(test: &str, needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(|n| n.missing()).collect();
    match verdict(&missing, strict()) {
        Verdict::Run => true,
        Verdict::Skip(reason) => {
            announce(test, &reason);
            false
        }
        Verdict::Fail(reason) => {
            announce(test, &reason);
            panic!("{test} would be skipped ({reason}), and {STRICT_VAR}=1 allows no skip")
        }
    }
}

/// Returns from the calling test (after [`available`] reported the skip)
/// unless the machine has every need: `require!(Need::Root, Need::Sandbox);`.
#[macro_export]
macro_rules! require {
    ($($need:expr),+ $(,)?) => {
        if !$crate::skip::available(&$crate::skip::current_test(), &[$($need),+]) {
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_need_runs_and_prints_nothing() {
        // The account every machine has.
        assert_eq!(Need::User("root").missing(), None);
        assert!(available("kit", &[Need::User("root")]));
        assert!(available("kit", &[]));
    }

    #[test]
    fn a_missing_need_names_what_is_missing() {
        let reason = Need::User("gatehouse-no-such-user").missing().unwrap();
        assert!(reason.contains("gatehouse-no-such-user"), "{reason}");
    }

    #[test]
    fn a_missing_kernel_feature_quotes_doctor() {
        let checks = [machine::Check {
            feature: "cgroups".into(),
            status: "degraded".into(),
            detail: "no writable cgroup".into(),
        }];
        let reason = machine::feature_missing(&checks, Feature::CgroupLimits).unwrap();
        assert_eq!(
            reason,
            "gatehouse doctor: cgroups degraded: no writable cgroup"
        );
        // Landlock at an old ABI is degraded, and still there.
        let old = [machine::Check {
            feature: "landlock".into(),
            status: "degraded".into(),
            detail: "ABI 3".into(),
        }];
        assert_eq!(machine::feature_missing(&old, Feature::Landlock), None);
        assert!(machine::feature_missing(&[], Feature::Seccomp).is_some());
    }

    #[test]
    fn a_skip_fails_under_strict_and_nothing_missing_runs() {
        let missing = vec!["not root (uid 1000)".to_owned(), "no IPv6".to_owned()];
        assert_eq!(verdict(&[], true), Verdict::Run);
        assert_eq!(verdict(&[], false), Verdict::Run);
        assert_eq!(
            verdict(&missing, false),
            Verdict::Skip("not root (uid 1000); no IPv6".into())
        );
        assert_eq!(
            verdict(&missing, true),
            Verdict::Fail("not root (uid 1000); no IPv6".into())
        );
    }
}
