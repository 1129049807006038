//! What this machine offers the tests: root, the accounts
//! `scripts/setup-debian` creates, the kernel features `gatehouse doctor`
//! checks (decided by the same code), IPv6 loopback.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use gatehouse_supervisor::doctor;
use gatehouse_supervisor::sandbox::probe;

/// The unprivileged account the rootless tests switch to.
pub const TEST_USER: &str = "gatehouse-test";
/// The account a sandbox started by root runs its worker as.
pub const WORKER_USER: &str = "gatehouse-worker";

/// This process's real uid.
pub fn uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
        .unwrap()
}

pub fn is_root() -> bool {
    uid() == 0
}

fn id(flag: &str, name: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, name]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The uid of account `name`, if it exists.
pub fn user_uid(name: &str) -> Option<u32> {
    id("-u", name)
}

/// The primary gid of account `name`, if it exists.
pub fn user_gid(name: &str) -> Option<u32> {
    id("-g", name)
}

/// The gid of group `name`, if it exists.
pub fn group_gid(name: &str) -> Option<u32> {
    let out = Command::new("getent").args(["group", name]).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)?
        .trim()
        .parse()
        .ok()
}

/// A kernel feature `gatehouse doctor` checks and a test may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// A user (+ mount, pid, net) namespace can be created.
    UserNamespaces,
    /// Landlock at any ABI (what the default profile requires).
    Landlock,
    /// seccomp filter mode.
    Seccomp,
    /// Writable cgroups with the memory, pids and cpu controllers.
    CgroupLimits,
}

impl Feature {
    /// The name `gatehouse doctor` prints for it.
    pub fn doctor_name(self) -> &'static str {
        match self {
            Feature::UserNamespaces => "user namespaces",
            Feature::Landlock => "landlock",
            Feature::Seccomp => "seccomp",
            Feature::CgroupLimits => "cgroups",
        }
    }

    /// Whether a check with this status means the feature is there. An old
    /// Landlock ABI is `degraded` and still builds the default sandbox.
    fn present(self, status: &str) -> bool {
        match self {
            Feature::Landlock => status != "missing",
            _ => status == "ok",
        }
    }
}

/// One of `gatehouse doctor`'s checks, as `gatehouse doctor --json` prints it.
#[derive(Debug, Clone)]
pub struct Check {
    pub feature: String,
    pub status: String,
    pub detail: String,
}

fn checks_from_json(json: &serde_json::Value) -> Vec<Check> {
    let field = |c: &serde_json::Value, k: &str| c[k].as_str().unwrap_or_default().to_owned();
    json.as_array()
        .into_iter()
        .flatten()
        .map(|c| Check {
            feature: field(c, "feature"),
            status: field(c, "status"),
            detail: field(c, "detail"),
        })
        .collect()
}

/// `gatehouse doctor`'s checks for this process, computed once by the
/// supervisor library's probe and assessment (what the command runs).
pub fn doctor() -> &'static [Check] {
    static CHECKS: OnceLock<Vec<Check>> = OnceLock::new();
    CHECKS.get_or_init(|| {
        let checks = doctor::assess(&probe::kernel_facts());
        checks_from_json(&serde_json::to_value(checks).unwrap())
    })
}

/// `gatehouse doctor`'s checks for the test user, from `gatehouse doctor
/// --json` run as that user (this process must be root); computed once.
pub fn doctor_for_test_user() -> &'static [Check] {
    static CHECKS: OnceLock<Vec<Check>> = OnceLock::new();
    CHECKS.get_or_init(|| {
        let dir = crate::sandbox::reachable_dir("gatehouse-doctor-");
        let bin = crate::bin::copy_to(dir.path());
        let out = crate::sandbox::as_test_user(&bin)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "gatehouse doctor --json as {TEST_USER} printed no checks ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        checks_from_json(&json)
    })
}

/// Why `feature` is missing according to `checks`, or `None` when it is there.
pub fn feature_missing(checks: &[Check], feature: Feature) -> Option<String> {
    let name = feature.doctor_name();
    match checks.iter().find(|c| c.feature == name) {
        Some(c) if feature.present(&c.status) => None,
        Some(c) => Some(format!(
            "gatehouse doctor: {name} {}: {}",
            c.status, c.detail
        )),
        None => Some(format!("gatehouse doctor reports no {name} check")),
    }
}

/// Why this machine has no IPv6 loopback, or `None` when it has one.
pub fn ipv6_loopback_missing() -> Option<String> {
    std::net::TcpListener::bind("[::1]:0")
        .err()
        .map(|e| format!("no IPv6 loopback: binding [::1] fails: {e}"))
}

/// What a `GET path` over `socket` came to, as `who`: the status line, or
/// `closed` when the connection ended unanswered.
/// The errno a process running as `who` (uid, gid) gets connecting to the
/// unix socket `socket` (`None`: it connected).
pub fn connect_errno_as(who: (u32, u32), socket: &Path) -> Option<i32> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1])\n print('connected')\nexcept OSError as e:\n print(e.errno)",
        ])
        .arg(socket)
        .uid(who.0)
        .gid(who.1)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (said != "connected").then(|| {
        said.parse().unwrap_or_else(|_| {
            panic!(
                "python3 said {said:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    })
}

pub fn http_status_as(who: Option<(u32, u32)>, socket: &Path, path: &str) -> String {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import socket,sys\n\
         s=socket.socket(socket.AF_UNIX)\n\
         s.settimeout(10)\n\
         s.connect(sys.argv[1])\n\
         try:\n s.sendall(('GET '+sys.argv[2]+' HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n').encode())\n\
         except OSError:\n pass\n\
         data=b''\n\
         try:\n while True:\n  b=s.recv(4096)\n  if not b: break\n  data+=b\n\
         except OSError:\n pass\n\
         print(data.split(b'\\r\\n')[0].decode() if data else 'closed')",
    ])
    .arg(socket)
    .arg(path);
    if let Some((uid, gid)) = who {
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
