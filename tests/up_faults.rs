//! The loop survives its parts dying, under `gatehouse up` as root (each
//! part under its own user) and rootless (`gatehouse up` run by an ordinary
//! user, the three parts and the sandboxes under that user) on the demo's
//! world: alice assigns an issue,
//! the worker (the reference worker, held at its start until the test says
//! go) runs in its sandbox, and meanwhile the proxy, the router and the
//! supervisor are each killed with SIGKILL. `up` restarts each; the
//! supervisor's restart loses the job and the router starts it again; the
//! proxy restores the new job's identity; the worker then clones, pushes and opens its
//! pull request through the proxy, and alice hears exactly one ack and one
//! result on the GitHub emulator. No sandbox process is left at the end.
//! Two follow-ups from alice reach the first job's inbox before the
//! supervisor is killed: the one its worker had read (and acknowledged) is
//! not given again, the one it had not is given to the new job, once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gatehouse::demo::world::{Owners, World, BOT_LOGIN, REPO};
use gatehouse::up::config::UpFile;
use gatehouse::up::layout::Layout;
use gatehouse::up::{self, Part};
use gatehouse_router::store::{Durability, Store};
use gatehouse_testkit::machine::{user_gid, user_uid, TEST_USER};
use gatehouse_testkit::{require, Need};

const PROXY_USER: &str = "gatehouse-proxy";
const ROUTER_USER: &str = "gatehouse-router";

/// The demo team's worker, held until `/work/go` exists (each start appends
/// a line to `/work/started`), then the reference worker. While held, start
/// `n` reads its inbox (`gatehouse inbox`, which acknowledges what it
/// printed) into `/work/inbox-<n>` each time `/work/read` appears, adding a
/// line to `/work/reads-<n>`; released, it reads it once more, then works.
const HELD_PROFILE: &str = r#"extends = "default"
description = "faults test: the reference worker, held at its start"
[network]
rule_sets = ["github-worker"]
[worker]
command = ["sh", "-c", "echo started >> /work/started; n=$(wc -l < /work/started); while [ ! -e /work/go ]; do if [ -e /work/read ]; then rm -f /work/read; gatehouse inbox >> /work/inbox-$n; echo read >> /work/reads-$n; fi; sleep 0.1; done; gatehouse inbox >> /work/inbox-$n; exec gatehouse reference-worker"]
"#;

fn wait_for(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every descendant of `pid` (through /proc's parent links).
fn descendants(pid: u32) -> Vec<u32> {
    let mut links = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        if after.starts_with('Z') {
            continue;
        }
        links.push((p, after.split(' ').nth(1).unwrap().parse::<u32>().unwrap()));
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(links.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn started(work: &Path) -> usize {
    std::fs::read_to_string(work.join("started"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

/// The texts worker start `n` printed from its inbox, in order.
fn inbox_texts(work: &Path, n: usize) -> Vec<String> {
    std::fs::read_to_string(work.join(format!("inbox-{n}")))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["text"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Asks the held worker to read its inbox: `/work/read`, owned like the
/// work dir. The test runs as root, and a root-owned file in a dir owned by
/// another user is unmapped in the sandbox's idmapped `/work`: the worker
/// could not remove it (EOVERFLOW) and would read again and again.
fn ask_to_read(work: &Path) {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(work).unwrap();
    let path = work.join("read");
    std::fs::write(&path, "").unwrap();
    std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid())).unwrap();
}

/// Has the held worker start `n` read its inbox until it holds `text`.
fn read_until(work: &Path, n: usize, text: &str) {
    let reads = work.join(format!("reads-{n}"));
    wait_for(&format!("worker {n} to read {text:?}"), 30, || {
        let before = lines(&reads);
        ask_to_read(work);
        wait_for("a read", 10, || lines(&reads) > before);
        // Consumed, so the worker reads again only when asked.
        assert!(
            !work.join("read").exists(),
            "the worker could not remove /work/read"
        );
        inbox_texts(work, n).iter().any(|t| t == text)
    });
}

/// Pass-throughs the router has forwarded to a job's inbox.
fn forwarded(router_db: &Path) -> i64 {
    let db = rusqlite::Connection::open_with_flags(
        router_db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT count(*) FROM live_forwards WHERE state = 'forwarded'",
        [],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

/// Where the test finds `up`'s parts.
trait Parts {
    fn pid(&self, part: Part) -> Option<u32>;
}

/// `up` in this process, as root.
impl Parts for up::Running {
    fn pid(&self, part: Part) -> Option<u32> {
        up::Running::pid(self, part)
    }
}

/// `gatehouse up` run as another user: its children, each known by the
/// part its command line names (`gatehouse <part> …`, the name `up` gives
/// gatehouse-services). Stopped when dropped, so a failed test leaves no
/// `up` running.
struct Spawned(u32, std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        if matches!(self.1.try_wait(), Ok(None)) {
            gatehouse_testkit::procs::signal(self.0, "TERM");
            let _ = self.1.wait();
        }
    }
}

impl Parts for Spawned {
    fn pid(&self, part: Part) -> Option<u32> {
        descendants(self.0).into_iter().find(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let parent = stat
                .rfind(')')
                .and_then(|i| stat[i + 2..].split(' ').nth(1).map(str::to_owned));
            if parent.as_deref() != Some(self.0.to_string().as_str()) {
                return false;
            }
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.len() > 1 && args[0] == b"gatehouse" && args[1] == part.name().as_bytes()
        })
    }
}

fn kill_and_wait_restart(up: &dyn Parts, part: Part) -> u32 {
    let before = up.pid(part).unwrap();
    gatehouse_testkit::procs::signal(before, "KILL");
    wait_for(&format!("the {} restarted", part.name()), 30, || {
        up.pid(part).is_some_and(|p| p != before)
    });
    up.pid(part).unwrap()
}

#[test]
fn kill_9_of_each_part_mid_ticket_under_up_and_the_ticket_finishes_once() {
    require!(Need::Root, Need::User(PROXY_USER), Need::User(ROUTER_USER));
    let dir = gatehouse_testkit::sandbox::reachable_dir("gh-upf-");
    let run = gatehouse_testkit::sandbox::reachable_dir("uf");
    let owners = Owners {
        proxy: (user_uid(PROXY_USER).unwrap(), user_gid(PROXY_USER).unwrap()),
        router: (
            user_uid(ROUTER_USER).unwrap(),
            user_gid(ROUTER_USER).unwrap(),
        ),
    };
    let world = World::create(dir.path(), run.path(), Some(owners)).unwrap();
    std::fs::write(dir.path().join("profiles/demo.toml"), HELD_PROFILE).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    gatehouse_testkit::bin::copy_to(&bin);
    let prepared = up::prepare(&world.config).unwrap();
    let running = up::start(
        &prepared,
        up::Options {
            services: Some(bin.join("gatehouse-services")),
            ..up::Options::default()
        },
    )
    .unwrap();
    story(&world, &prepared.layout, &running, Some(TEST_USER));
    for part in Part::START_ORDER {
        assert_eq!(running.restarts(part), 1, "{} restarts", part.name());
    }
    let stopped = running.stop();
    assert!(
        stopped.iter().all(|s| !s.killed),
        "a part outlived its grace: {stopped:?}"
    );
}

/// The same story, `gatehouse up` run by an ordinary user: the three parts
/// and each sandbox run as that user (rootless).
#[test]
fn rootless_kill_9_of_each_part_mid_ticket_and_the_ticket_finishes_once() {
    // Root only to become the test user and to look at its files.
    require!(Need::Root, Need::SandboxAsTestUser);
    let dir = gatehouse_testkit::sandbox::reachable_dir("gh-upr-");
    let run = gatehouse_testkit::sandbox::reachable_dir("ur");
    let world = World::create(dir.path(), run.path(), None).unwrap();
    std::fs::write(dir.path().join("profiles/demo.toml"), HELD_PROFILE).unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    gatehouse_testkit::bin::copy_to(&bin);
    let me = format!(
        "{}:{}",
        user_uid(TEST_USER).unwrap(),
        user_gid(TEST_USER).unwrap()
    );
    for d in [dir.path(), run.path()] {
        let chown = std::process::Command::new("chown")
            .args(["-R", &me])
            .arg(d)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    let text = std::fs::read_to_string(&world.config).unwrap();
    let file = UpFile::parse(&world.config, &text).unwrap();
    let layout = Layout::new(&file.state_dir, &file.run_dir, &[], file.feishu.is_some());
    let log = dir.path().join("up.log");
    let mut child = gatehouse_testkit::sandbox::as_test_user(&bin.join("gatehouse"))
        .args(["up", "--config"])
        .arg(&world.config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for("gatehouse up to run", 60, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            child.try_wait().unwrap().is_none(),
            "gatehouse up ended: {text}"
        );
        text.contains("gatehouse up: running")
    });
    let mut up = Spawned(child.id(), child);
    let parts: Vec<u32> = Part::START_ORDER
        .iter()
        .map(|p| up.pid(*p).unwrap())
        .collect();
    story(&world, &layout, &up, None);
    let parts: Vec<u32> = parts
        .iter()
        .zip(Part::START_ORDER)
        .map(|(before, p)| {
            let now = up.pid(p).unwrap();
            assert_ne!(*before, now, "the {} was not restarted", p.name());
            now
        })
        .collect();
    gatehouse_testkit::procs::signal(up.0, "TERM");
    let status = up.1.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    for p in parts {
        assert!(
            !gatehouse_testkit::procs::alive(p as i32),
            "pid {p} outlived gatehouse up"
        );
    }
}

/// Every unix socket under `dir`, recursively.
fn sockets(dir: &Path, out: &mut Vec<PathBuf>) {
    use std::os::unix::fs::FileTypeExt;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_socket() {
            out.push(e.path());
        } else if kind.is_dir() {
            sockets(&e.path(), out);
        }
    }
}

/// Whether user `who` can connect to `socket` at all (the kernel's check of
/// the path and the socket's modes, before any peer check).
fn connects_as(who: Option<(u32, u32)>, socket: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("python3");
    cmd.args([
        "-c",
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n\
         try:\n s.connect(sys.argv[1]); print('connected')\n\
         except OSError as e:\n print('refused', e)",
    ])
    .arg(socket);
    if let Some((uid, gid)) = who {
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).starts_with("connected")
}

/// alice assigns an issue; two follow-ups; each part killed with SIGKILL
/// mid-ticket (the supervisor with its sandbox, the proxy while the new
/// job runs, the router between the ack and the result); released, the
/// worker finishes and alice hears one ack and one result. With `other`, while the job runs: that local user can
/// connect to none of the sockets `up` and its job made (the job's control
/// socket, its proxy identity, the job API, the proxy's admin and the
/// router's identities), which root can (the control).
fn story(world: &World, layout: &Layout, up: &dyn Parts, other: Option<&str>) {
    let issue = world
        .github
        .add_issue(REPO, "Widgets wobble", "They wobble on tables.", "alice")
        .unwrap();
    world
        .github
        .assign(REPO, issue, BOT_LOGIN, "alice")
        .unwrap();
    wait_for("the ack", 30, || !world.bot_comments(issue).is_empty());
    let ticket = || -> Option<String> {
        let store = Store::open(&layout.router_db, Durability::Normal).ok()?;
        let tickets = store.read().tickets().ok()?;
        tickets.first().map(|t| t.id.to_string())
    };
    wait_for("the ticket", 30, || ticket().is_some());
    let work: PathBuf = layout
        .supervisor_state
        .join("tickets")
        .join(ticket().unwrap())
        .join("work");
    wait_for("the worker", 30, || started(&work) == 1);
    if let Some(user) = other {
        let mut found = Vec::new();
        sockets(&layout.run_dir, &mut found);
        sockets(&layout.supervisor_state, &mut found);
        let ticket_sockets = found
            .iter()
            .filter(|p| p.to_string_lossy().contains("tkt_") || p.ends_with("control.sock"))
            .count();
        assert!(ticket_sockets >= 2, "no job sockets among {found:?}");
        let who = (user_uid(user).unwrap(), user_gid(user).unwrap());
        for socket in &found {
            assert!(
                connects_as(None, socket),
                "root cannot reach {}",
                socket.display()
            );
            assert!(
                !connects_as(Some(who), socket),
                "{user} connected to {}",
                socket.display()
            );
        }
    }

    // A follow-up the worker reads (and acknowledges), then one the router
    // forwards and the worker has not read when its job is lost.
    const READ: &str = "@gatehouse-bot first note: they wobble on carpet too";
    const UNREAD: &str = "@gatehouse-bot second note: and on tiles";
    world
        .github
        .add_issue_comment(REPO, issue, READ, "alice")
        .unwrap();
    read_until(&work, 1, READ);
    world
        .github
        .add_issue_comment(REPO, issue, UNREAD, "alice")
        .unwrap();
    wait_for("the second note forwarded", 30, || {
        forwarded(&layout.router_db) == 2
    });

    // The supervisor, while the sandbox runs: the sandbox dies with it,
    // the job is lost, and the router starts it again.
    let sandbox = descendants(up.pid(Part::Supervisor).unwrap());
    assert!(!sandbox.is_empty(), "no sandbox under the supervisor");
    kill_and_wait_restart(up, Part::Supervisor);
    wait_for("the old sandbox to die", 10, || {
        sandbox
            .iter()
            .all(|p| !gatehouse_testkit::procs::alive(*p as i32))
    });
    wait_for("the job started again", 60, || started(&work) == 2);
    // The proxy, while the new job's worker runs: its identity comes back
    // in the directory the sandbox holds.
    kill_and_wait_restart(up, Part::Proxy);
    // The router, between the ack and the result.
    kill_and_wait_restart(up, Part::Router);

    std::fs::write(work.join("go"), "").unwrap();
    // The new job's worker gets the note the lost one had not read, once,
    // and not the one it had.
    wait_for("the new worker's inbox read", 30, || {
        !inbox_texts(&work, 2).is_empty()
    });
    assert_eq!(
        inbox_texts(&work, 1),
        [READ],
        "the first worker read one note"
    );
    assert_eq!(
        inbox_texts(&work, 2),
        [UNREAD],
        "carried to the new job once"
    );
    wait_for("the result", 60, || {
        world
            .bot_comments(issue)
            .iter()
            .any(|c| c.starts_with("Done:"))
    });
    // Anything that would go out twice has had the time to.
    std::thread::sleep(Duration::from_secs(2));
    let said = world.bot_comments(issue);
    assert_eq!(said.len(), 2, "one ack and one result: {said:?}");
    assert!(said[0].starts_with("On it"), "{said:?}");
    assert!(
        said[1].contains("/pull/"),
        "the result links the PR: {said:?}"
    );
    let pulls = world
        .github
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == format!("/repos/{REPO}/pulls"))
        .count();
    assert_eq!(pulls, 1, "one pull request opened");
    // No sandbox is left once the ticket ended.
    let supervisor = up.pid(Part::Supervisor).unwrap();
    wait_for("no sandbox left", 20, || descendants(supervisor).is_empty());
}
