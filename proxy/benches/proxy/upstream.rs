//! The GitHub emulator every route calls, in a process of its own
//! ([`super::children`]), as GitHub is: in the bench's process it shared
//! an allocator and an address space with the proxy, not with nginx.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use gatehouse_emulators::{GithubEmulator, GithubOptions, RateBudgets, RepoSpec};

use super::children::{self, ChildProcess, DIR};

/// The running emulator: its address and the big repository's git
/// directory.
pub struct Upstream {
    process: ChildProcess,
    addr: SocketAddr,
}

impl Upstream {
    /// Start the emulator with `token` (written to `d/token`, where the
    /// proxy's credential reads it); its CA is in `d/upstream-ca.pem`.
    pub fn start(d: &Path, token: &str) -> (Upstream, PathBuf) {
        std::fs::write(d.join("token"), token).unwrap();
        let process = ChildProcess::start("emulator", &[(DIR, d.display().to_string())]);
        let addr = process.announced[0].parse().unwrap();
        (Upstream { process, addr }, d.join("upstream-ca.pem"))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The emulator's process.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The git directory of the big repository the clones fetch.
    pub fn big_repo_git_dir(&self) -> PathBuf {
        PathBuf::from(&self.process.announced[1])
    }
}

/// The emulator's role: one repository and issue, the CA's file, served
/// until the parent is done.
pub fn serve() {
    let d = PathBuf::from(std::env::var_os(DIR).unwrap());
    let token = std::fs::read_to_string(d.join("token")).unwrap();
    let mut options = GithubOptions::new(d.join("git"))
        .token(&token, "gatehouse-bench[bot]")
        .repo(RepoSpec::new("acme", "widgets"))
        .repo(RepoSpec::new("acme", "big"));
    options.worker_threads = 2;
    let github = GithubEmulator::start(options).unwrap();
    // The bench makes far more calls than GitHub's 5000 an hour per token.
    github.set_rate_budgets(RateBudgets {
        core: u64::MAX,
        graphql: u64::MAX,
        ..RateBudgets::default()
    });
    github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    github.write_ca_pem(&d.join("upstream-ca.pem")).unwrap();
    let big = github.repo_git_dir(super::large::BIG_REPO).unwrap();
    children::announce_and_wait(&[github.addr().to_string(), big.display().to_string()]);
}
