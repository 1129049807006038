//! The bench's other processes: it runs itself again in a role
//! (`GATEHOUSE_BENCH_ROLE`: the emulator, the proxy), so that each part has
//! a process of its own, as in production (a sandboxed worker, the proxy,
//! GitHub) and as nginx has. A child announces what the parent needs on
//! one line of its stdout (tab-separated: paths may hold spaces), then
//! serves until its stdin closes: when the parent drops it, or dies.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

const ROLE: &str = "GATEHOUSE_BENCH_ROLE";

/// The bench's temp dir, which every child works in.
pub const DIR: &str = "GATEHOUSE_BENCH_DIR";

/// A child process of the bench in a role.
pub struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The fields of the line it announced.
    pub announced: Vec<String>,
}

impl ChildProcess {
    /// Runs the bench again as `role` with `envs`, and reads its announcement.
    pub fn start(role: &str, envs: &[(&str, String)]) -> ChildProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("--bench")
            .env(ROLE, role)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        if line.is_empty() {
            let status = child.wait().unwrap();
            panic!("the bench's {role} ended with {status} before it started");
        }
        // Whatever the child prints later goes to stderr, and it never
        // writes into a closed pipe.
        let who = role.to_owned();
        std::thread::spawn(move || {
            for later in stdout.lines().map_while(Result::ok) {
                eprintln!("{who}: {later}");
            }
        });
        ChildProcess {
            child,
            stdin,
            announced: line
                .trim_end_matches('\n')
                .split('\t')
                .map(str::to_owned)
                .collect(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The bench failed: no clean shutdown to wait for.
            let _ = self.child.kill();
            let _ = self.child.wait();
            return;
        }
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "a child of the bench ended with {status}");
    }
}

/// The role this process was started in, if it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// In a child: tell the parent `fields`, then wait until it closes stdin.
pub fn announce_and_wait(fields: &[String]) {
    let mut out = std::io::stdout();
    writeln!(out, "{}", fields.join("\t")).unwrap();
    out.flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
