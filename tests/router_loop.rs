//! The live loop end to end, every part a real process
//! (`gatehouse_testkit::live`): the emulators' events reach `gatehouse
//! router run`, which runs a job on `gatehouse supervisor` (a sandboxed
//! worker where the machine can build one) and replies through `gatehouse
//! proxy` with its own identities.
//!
//! GitHub: alice mentions the bot ─► exactly one ack comment ─► the job
//! runs ─► alice asks a follow-up, which reaches the worker's inbox ─► the
//! worker answers it (and names it a second time: the core refuses that
//! answer and nothing is sent) ─► reports ready with a link ─► exactly one
//! result comment. Again with `kill -9` of the router throughout: no reply
//! twice, none lost. Feishu: a mention in the team's chat ─► one ack reply
//! ─► one result reply. And the router's identity cannot push or merge.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::time::{Duration, Instant};

use gatehouse_router::store::{Durability, OutboxState, Store};
use gatehouse_testkit::live::{LiveWorld, FEISHU_BOT, FEISHU_CHAT};
use serde_json::Value;

/// The worker: says it is working, waits for a message, answers it (twice:
/// the second is refused by the router), then reports ready with a link;
/// with pauses, so that the router can be killed between any two steps.
const WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at the wobble' || exit 90
T=$(gatehouse inbox --wait | sed -n 's/.*"trigger":"\(trg_[0-9a-f]*\)".*/\1/p' | head -1)
test -n "$T" || exit 91
sleep 0.5
gatehouse report --state working --summary 'Yes, the docs get the fix too' --answers "$T" || exit 92
sleep 0.5
gatehouse report --state working --summary 'Yes, really' --answers "$T" || exit 93
sleep 0.5
gatehouse report --state ready --summary 'Fixed the wobble; the docs say so' --link https://github.com/acme/widgets/pull/1 || exit 94
"#;

/// A worker that needs no follow-up.
const SHORT_WORKER: &str = r#"
gatehouse report --state working --summary 'Looking at it' || exit 90
sleep 0.3
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

fn count(said: &[String], prefix: &str) -> usize {
    said.iter().filter(|c| c.starts_with(prefix)).count()
}

/// The ticket's outcome once it has one.
fn wait_ended(w: &LiveWorld) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tickets = Store::open(&w.state(), Durability::Normal)
            .unwrap()
            .read()
            .tickets()
            .unwrap();
        assert_eq!(tickets.len(), 1);
        if let Some(outcome) = tickets[0].outcome {
            return serde_json::to_value(outcome)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the ticket never ended: {}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The GitHub story; `chaos` kills the router with SIGKILL over and over
/// while it runs, restarting it each time.
fn story(chaos: bool) {
    let mut w = LiveWorld::start(WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "Widgets wobble", "They wobble.", "alice")
        .unwrap();
    w.github
        .add_issue_comment(
            "acme/widgets",
            n,
            "@gatehouse-bot please fix the wobble",
            "alice",
        )
        .unwrap();
    let mut kills = 0;
    let mut until = |w: &mut LiveWorld, done: &dyn Fn(&LiveWorld) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut i = 0u64;
        while !done(w) {
            assert!(Instant::now() < deadline, "stuck; router log:\n{}", w.log());
            if chaos {
                // Different points of the loop each time: 0 to 250 ms in.
                std::thread::sleep(Duration::from_millis((i * 37) % 250));
                w.kill_router();
                kills += 1;
                w.start_router();
            }
            std::thread::sleep(Duration::from_millis(50));
            i += 1;
        }
    };
    until(&mut w, &|w| !w.bot_comments(n).is_empty());
    w.wait("the ack", |w| count(&w.bot_comments(n), "On it") == 1);
    // The follow-up is delivered while the router runs (GitHub does not
    // retry a failed delivery by itself).
    w.github
        .add_issue_comment(
            "acme/widgets",
            n,
            "@gatehouse-bot can the docs say so too?",
            "alice",
        )
        .unwrap();
    until(&mut w, &|w| count(&w.bot_comments(n), "Done:") > 0);
    assert_eq!(wait_ended(&w), "completed");
    // Anything that would go out twice has had time to.
    std::thread::sleep(Duration::from_secs(2));
    let said = w.bot_comments(n);
    assert_eq!(count(&said, "On it"), 1, "{said:?}");
    assert_eq!(count(&said, "Yes, the docs get the fix too"), 1, "{said:?}");
    assert_eq!(count(&said, "Done: Fixed the wobble"), 1, "{said:?}");
    assert_eq!(
        said.len(),
        3,
        "ack, answer, result and nothing else: {said:?}"
    );
    assert!(
        said[2].contains("https://github.com/acme/widgets/pull/1"),
        "{said:?}"
    );
    assert!(
        said.iter().all(|c| c.contains("<!-- gatehouse:rpl_")),
        "{said:?}"
    );
    if chaos {
        assert!(kills > 0);
        eprintln!("router_loop: the router was killed {kills} times");
    }

    // The reply log and the outbox agree: every reply sent once; the second
    // answer was refused by the core and never queued.
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let read = store.read();
    let outbox = read.outbox().unwrap();
    assert_eq!(outbox.len(), 3, "{outbox:?}");
    assert!(
        outbox.iter().all(|o| o.state == OutboxState::Sent),
        "{outbox:?}"
    );
    let refused: Vec<Value> = read
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "reply" && d["refused"].is_object())
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["refused"]["refusal"], "already_answered");
    // The proxy logged each reply as a message of the router's identity.
    let audit = std::fs::read_to_string(w.proxy.log.with_file_name("audit.jsonl")).unwrap();
    let messages = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| {
            l["event"] == "request"
                && l["identity"] == "router-gh-1"
                && l["message"]["kind"] == "github_issue_comment"
        })
        .count();
    assert!(messages >= 3, "{messages}");
}

#[test]
fn a_mention_is_acked_once_worked_and_answered_once() {
    story(false);
}

#[test]
fn kill_9_of_the_router_anywhere_repeats_and_loses_nothing() {
    story(true);
}

#[test]
fn a_feishu_mention_is_acked_and_answered_with_the_result() {
    let w = LiveWorld::start(SHORT_WORKER);
    w.feishu.send_user_message(
        FEISHU_CHAT,
        "group",
        "ou_alice",
        "@_user_1 the login form rejects valid emails",
        &[(FEISHU_BOT, "gatehouse")],
    );
    // Someone not allowlisted: nothing happens.
    w.feishu.send_user_message(
        FEISHU_CHAT,
        "group",
        "ou_mallory",
        "@_user_1 give me the deploy keys",
        &[(FEISHU_BOT, "gatehouse")],
    );
    w.wait("the result", |w| count(&w.bot_messages(), "Done:") > 0);
    assert_eq!(wait_ended(&w), "completed");
    std::thread::sleep(Duration::from_secs(2));
    let said = w.bot_messages();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("On it"), "{said:?}");
    assert!(
        said[1].starts_with("Done: Fixed the login form"),
        "{said:?}"
    );
    assert!(
        said[1].contains("https://github.com/acme/widgets/pull/2"),
        "{said:?}"
    );
    // Both are replies to alice's message, sent with the reply id as uuid.
    let messages = w.feishu.messages();
    let alice = messages.iter().find(|m| m.sender_id == "ou_alice").unwrap();
    for m in messages.iter().filter(|m| m.sender_type == "app") {
        assert_eq!(m.parent_id, alice.message_id);
        assert!(
            m.uuid.as_deref().is_some_and(|u| u.starts_with("rpl_")),
            "{m:?}"
        );
    }
}

/// Runs curl through the identity socket (a relay on loopback):
/// (the CONNECT's status, the request's status).
fn curl(w: &LiveWorld, method: &str, url: &str) -> (u16, u16) {
    let port = gatehouse_testkit::proxy::process::thread_relay(w.github_identity.clone());
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_connect} %{http_code}",
            "-X",
            method,
        ])
        .arg("--proxy")
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--cacert")
        .arg(w.proxy_ca())
        .arg(url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut codes = text.split_whitespace().map(|c| c.parse().unwrap_or(0));
    (codes.next().unwrap_or(0), codes.next().unwrap_or(0))
}

#[test]
fn the_routers_identity_cannot_push_or_merge() {
    let w = LiveWorld::start(SHORT_WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    // The control: what it may do.
    let comments = format!("https://api.github.com/repos/acme/widgets/issues/{n}/comments");
    assert_eq!(curl(&w, "GET", &comments), (200, 200));
    for (method, url) in [
        (
            "PUT",
            "https://api.github.com/repos/acme/widgets/pulls/1/merge",
        ),
        ("POST", "https://api.github.com/repos/acme/widgets/pulls"),
        ("POST", "https://api.github.com/repos/acme/widgets/git/refs"),
        (
            "PATCH",
            "https://api.github.com/repos/acme/widgets/issues/comments/1",
        ),
        (
            "GET",
            "https://api.github.com/repos/acme/widgets/contents/README.md",
        ),
        (
            "POST",
            "https://api.github.com/repos/acme/other/issues/1/comments",
        ),
    ] {
        assert_eq!(curl(&w, method, url), (200, 403), "{method} {url}");
    }
    // git push: github.com is not a host the identity may reach at all;
    // the CONNECT itself is refused.
    for url in [
        "https://github.com/acme/widgets.git/git-receive-pack",
        "https://github.com/acme/widgets.git/info/refs?service=git-receive-pack",
    ] {
        assert_eq!(curl(&w, "POST", url).0, 403, "{url}");
    }
}

#[test]
fn a_person_saying_stop_cancels_the_ticket_and_its_job() {
    let w = LiveWorld::start(
        "gatehouse report --state working --summary 'On a long task' && sleep 120",
    );
    let (n, _) = long_running_ticket(&w);
    // Words that only mention stopping are forwarded, not obeyed (the control).
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot don't stop yet", "alice")
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    assert!(store.read().tickets().unwrap()[0].outcome.is_none());
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot stop", "alice")
        .unwrap();
    assert_eq!(wait_ended(&w), "cancelled");
    // The job is cancelled on the supervisor.
    assert_eq!(job_end_state(&w), "cancelled");
    // Nothing but the ack was said.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(w.bot_comments(n).len(), 1, "{:?}", w.bot_comments(n));
}

/// How many times the router's log says `needle`.
fn logged(w: &LiveWorld, needle: &str) -> usize {
    w.log().matches(needle).count()
}

#[test]
fn the_supervisor_down_delays_the_work_and_drops_nothing() {
    let mut w = LiveWorld::start(SHORT_WORKER);
    w.supervisor.stop();
    let n = w
        .github
        .add_issue("acme/widgets", "Later", "b", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix", "alice")
        .unwrap();
    // The ack needs no job; the job waits for the supervisor.
    w.wait("the ack", |w| !w.bot_comments(n).is_empty());
    w.wait("the outage noticed", |w| {
        logged(w, "the supervisor is unreachable") > 0
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(count(&w.bot_comments(n), "Done:") == 0);
    w.supervisor.spawn();
    w.wait("the result", |w| count(&w.bot_comments(n), "Done:") > 0);
    assert_eq!(wait_ended(&w), "completed");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(w.bot_comments(n).len(), 2, "{:?}", w.bot_comments(n));
    // Logged once per outage, not once per try.
    assert_eq!(
        logged(&w, "the supervisor is unreachable"),
        1,
        "{}",
        w.log()
    );
    assert_eq!(
        logged(&w, "the supervisor is reachable again"),
        1,
        "{}",
        w.log()
    );
}

#[test]
fn the_proxy_down_delays_a_reply_and_sends_it_once() {
    let mut w = LiveWorld::start(SHORT_WORKER);
    w.kill_proxy();
    let n = w
        .github
        .add_issue("acme/widgets", "Proxy", "b", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix", "alice")
        .unwrap();
    // The ack is logged and waits: tried, not sent.
    w.wait("a failed attempt", |w| {
        Store::open(&w.state(), Durability::Normal)
            .unwrap()
            .read()
            .outbox()
            .unwrap()
            .first()
            .is_some_and(|o| o.attempts >= 2 && o.state == OutboxState::Pending)
    });
    assert!(w.bot_comments(n).is_empty());
    w.restart_proxy();
    w.wait("the ack", |w| !w.bot_comments(n).is_empty());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        count(&w.bot_comments(n), "On it"),
        1,
        "{:?}",
        w.bot_comments(n)
    );
    assert_eq!(logged(&w, "the proxy is unreachable"), 1, "{}", w.log());
}

/// A live ticket on a new issue whose worker reported once and waits.
fn long_running_ticket(w: &LiveWorld) -> (u64, String) {
    let n = w
        .github
        .add_issue("acme/widgets", "Slow", "b", "alice")
        .unwrap();
    w.github
        .add_issue_comment(
            "acme/widgets",
            n,
            "@gatehouse-bot take a long look",
            "alice",
        )
        .unwrap();
    w.wait("the ack and the job's first report", |w| {
        !w.bot_comments(n).is_empty()
            && Store::open(&w.state(), Durability::Normal)
                .unwrap()
                .read()
                .tickets()
                .unwrap()
                .first()
                .is_some_and(|t| t.latest_report.is_some())
    });
    let ticket = Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .tickets()
        .unwrap()[0]
        .id
        .to_string();
    (n, ticket)
}

/// The ticket's only job, once the supervisor says it ended.
fn job_end_state(w: &LiveWorld) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let jobs = Store::open(&w.state(), Durability::Normal)
        .unwrap()
        .read()
        .live_jobs()
        .unwrap();
    assert_eq!(jobs.len(), 1);
    let id = jobs[0].job_id.clone().unwrap();
    let job = rt.block_on(w.supervisor.wait_ended(&id));
    job["state"].as_str().unwrap().to_owned()
}

#[test]
fn a_person_closing_the_issue_cancels_the_ticket_and_its_job() {
    let w = LiveWorld::start(
        "gatehouse report --state working --summary 'On a long task' && sleep 120",
    );
    let (n, _) = long_running_ticket(&w);
    w.github.close("acme/widgets", n, "alice").unwrap();
    assert_eq!(wait_ended(&w), "cancelled");
    assert_eq!(job_end_state(&w), "cancelled");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(w.bot_comments(n).len(), 1, "{:?}", w.bot_comments(n));
}

#[test]
fn merging_the_bots_pull_request_ends_its_ticket_merged() {
    // The worker reports pull request 4 as its work (the numbers are the
    // emulator's: issue 1, then the pull requests 2, 3 and 4 below).
    let w = LiveWorld::start(
        "gatehouse report --state ready --summary 'Fixed it' \
           --link https://github.com/acme/widgets/pull/4 && sleep 120",
    );
    let (n, ticket) = long_running_ticket(&w);
    assert_eq!(n, 1);
    let branch = format!("gatehouse/{ticket}");
    // A commit on the branch: GitHub opens no pull request without one.
    w.github
        .add_branch("acme/widgets", &branch, "main")
        .unwrap();
    w.wait("the result of the ready report", |w| {
        w.bot_comments(n).len() == 2
    });
    let open_and_merge = |author: &str| {
        let pr = w
            .github
            .add_pull("acme/widgets", "Fix", &branch, "main", author)
            .unwrap();
        w.github.merge_pull("acme/widgets", pr, "alice").unwrap();
        pr
    };
    // Someone else's pull request from a branch of the same name names no
    // ticket; a pull request of the bot's that the ticket's worker did not
    // report (another worker can push any gatehouse/ branch and open one)
    // is not believed either. The work goes on.
    assert_eq!(open_and_merge("mallory"), 2);
    assert_eq!(open_and_merge("gatehouse-bot"), 3);
    std::thread::sleep(Duration::from_secs(2));
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    assert!(store.read().tickets().unwrap()[0].outcome.is_none());
    // The pull request the worker reported, merged by alice, ends the work.
    assert_eq!(open_and_merge("gatehouse-bot"), 4);
    assert_eq!(wait_ended(&w), "merged");
    assert_eq!(job_end_state(&w), "cancelled");
    // The ack and the ready report's result; the merge adds nothing.
    std::thread::sleep(Duration::from_secs(1));
    let said = w.bot_comments(n);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[1].starts_with("Done:"), "{said:?}");
}

/// A worker that cannot go on without a person: blocked, with a question.
const ASKING_WORKER: &str = r#"
gatehouse report --state blocked --summary 'Need a decision' --question 'Should the fix also cover the legacy tables, or only the new ones?' || exit 90
T=$(gatehouse inbox --wait | sed -n 's/.*"trigger":"\(trg_[0-9a-f]*\)".*/\1/p' | head -1)
test -n "$T" || exit 91
gatehouse report --state ready --summary 'Covered both kinds of table' --link https://github.com/acme/widgets/pull/3 || exit 94
"#;

#[test]
fn a_blocked_workers_question_reaches_the_person_word_for_word() {
    const QUESTION: &str = "Should the fix also cover the legacy tables, or only the new ones?";
    let w = LiveWorld::start(ASKING_WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "Tables wobble", "They wobble.", "alice")
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix", "alice")
        .unwrap();
    w.wait("the question", |w| w.bot_comments(n).len() == 2);
    let said = w.bot_comments(n);
    assert!(said[0].starts_with("On it"), "{said:?}");
    // The attention is the worker's question, word for word, then the
    // reply's hidden marker: nothing added, nothing rewritten.
    let (text, marker) = said[1].split_once("\n\n").unwrap();
    assert_eq!(text, QUESTION, "{said:?}");
    assert!(marker.starts_with("<!-- gatehouse:rpl_"), "{said:?}");
    // The person's answer reaches the worker, which finishes.
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot both, please", "alice")
        .unwrap();
    w.wait("the result", |w| {
        count(&w.bot_comments(n), "Done: Covered both") == 1
    });
    assert_eq!(wait_ended(&w), "completed");
    std::thread::sleep(Duration::from_secs(1));
    let said = w.bot_comments(n);
    assert_eq!(said.len(), 3, "ack, attention, result: {said:?}");
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let purposes: Vec<String> = store
        .read()
        .outbox()
        .unwrap()
        .iter()
        .map(|o| format!("{:?}", o.purpose))
        .collect();
    assert_eq!(purposes, ["Ack", "Attention", "Result"], "{purposes:?}");
}

/// A worker that tries the router's own calls: a Feishu reply (the router's
/// `router-feishu`), a comment on another repository (which a router
/// identity of that repository may post) and the router's reply call on
/// the ticket's own issue (#1: the router alone speaks in people's threads).
const PROBING_WORKER: &str = r#"
s=$(curl -s -o /dev/null -w '%{http_connect}:%{http_code}' -X POST -H 'Content-Type: application/json' -d '{"body":"hi"}' https://api.github.com/repos/acme/widgets/issues/1/comments)
f=$(curl -s -o /dev/null -w '%{http_connect}:%{http_code}' -X POST -H 'Content-Type: application/json' -d '{"msg_type":"text","content":"{\"text\":\"hi\"}"}' https://open.feishu.cn/open-apis/im/v1/messages/om_1/reply)
o=$(curl -s -o /dev/null -w '%{http_connect}:%{http_code}' -X POST -H 'Content-Type: application/json' -d '{"body":"hi"}' https://api.github.com/repos/acme/other/issues/1/comments)
gatehouse report --state ready --summary "probes feishu=$f other=$o same=$s" --link https://github.com/acme/widgets/pull/4 || exit 94
"#;

#[test]
fn a_workers_identity_cannot_speak_as_the_router() {
    let w = LiveWorld::start(PROBING_WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    assert_eq!(n, 1, "the worker probes issue #1");
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please probe", "alice")
        .unwrap();
    w.wait("the result", |w| {
        count(&w.bot_comments(n), "Done: probes") == 1
    });
    let said = w.bot_comments(n);
    let result = said.iter().find(|c| c.starts_with("Done: probes")).unwrap();
    // Refused either at the CONNECT (`403:000`, a host none of the ticket's
    // rule sets names) or, the tunnel open, at the request (`200:403`).
    let code = |name: &str| {
        let at = result.find(&format!("{name}=")).unwrap() + name.len() + 1;
        result[at..at + 7].to_owned()
    };
    for probe in ["feishu", "other"] {
        let seen = code(probe);
        assert!(seen == "403:000" || seen == "200:403", "{probe}: {result}");
    }
    // The reply call the router itself just made on this issue, refused at
    // the request: the tunnel to api.github.com is the worker's too.
    assert_eq!(code("same"), "200:403", "{result}");
    // Both refusals are on the proxy's record, as the ticket's identity's.
    let audit = std::fs::read_to_string(w.proxy.log.with_file_name("audit.jsonl")).unwrap();
    let denied: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| {
            l["identity"]
                .as_str()
                .is_some_and(|i| i.starts_with("tkt_"))
                && l["outcome"]["decision"] == "deny"
        })
        .collect();
    let hosts: Vec<&str> = denied.iter().filter_map(|l| l["host"].as_str()).collect();
    assert!(hosts.contains(&"open.feishu.cn"), "{denied:?}");
    assert!(hosts.contains(&"api.github.com"), "{denied:?}");
    // And no comment reached the other repository, nor "hi" the issue.
    assert!(
        w.github.comments().iter().all(|c| c.repo != "acme/other"),
        "a worker commented on another repository"
    );
    assert!(
        w.github.comments().iter().all(|c| c.body != "hi"),
        "a worker spoke in the issue's thread"
    );
}

/// GitHub posts the ack and then answers 502: the router cannot know it
/// was posted. It keeps the reply `unknown`, looks for its marker before
/// trying again, finds the comment, and posts nothing twice.
#[test]
fn a_reply_posted_but_not_confirmed_is_found_not_posted_twice() {
    let w = LiveWorld::start(SHORT_WORKER);
    let n = w
        .github
        .add_issue("acme/widgets", "t", "b", "alice")
        .unwrap();
    w.github.fail_after_creating(1);
    w.github
        .add_issue_comment("acme/widgets", n, "@gatehouse-bot please fix", "alice")
        .unwrap();
    w.wait("the result", |w| count(&w.bot_comments(n), "Done:") == 1);
    assert_eq!(wait_ended(&w), "completed");
    std::thread::sleep(Duration::from_secs(2));
    let said = w.bot_comments(n);
    assert_eq!(count(&said, "On it"), 1, "{said:?}");
    assert_eq!(said.len(), 2, "ack and result, once each: {said:?}");
    // The ack's post was answered 502, then looked for (a GET of the
    // issue's comments) before anything was posted again.
    let requests = w.github.requests();
    let comments = format!("/repos/acme/widgets/issues/{n}/comments");
    let posts: Vec<u16> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == comments)
        .map(|r| r.status)
        .collect();
    assert_eq!(posts[0], 502, "{posts:?}");
    assert_eq!(posts.iter().filter(|s| **s == 201).count(), 1, "{posts:?}");
    assert!(
        requests
            .iter()
            .any(|r| r.method == "GET" && r.path == comments),
        "the router never looked for its reply"
    );
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let outbox = store.read().outbox().unwrap();
    assert!(
        outbox.iter().all(|o| o.state == OutboxState::Sent),
        "{outbox:?}"
    );
}

// === the writer on ===

use gatehouse_emulators::{ModelOptions, ModelReply, ModelScript};
use gatehouse_router::reply::{Purpose, Writer};

/// A worker that raises a question, then finishes (after the ack is out).
const WRITER_ASKING_WORKER: &str = r#"
sleep 1
gatehouse report --state blocked --summary 'Which form?' --question 'Should I fix the signup form too?' || exit 90
sleep 1
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

/// [`SHORT_WORKER`], after the ack is out.
const WRITER_WORKER: &str = r#"
sleep 1
gatehouse report --state working --summary 'Looking at it' || exit 90
sleep 0.3
gatehouse report --state ready --summary 'Fixed the login form' --link https://github.com/acme/widgets/pull/2 || exit 94
"#;

fn draft(text: &str) -> ModelReply {
    ModelReply::Content(serde_json::json!({ "text": text }).to_string())
}

/// (purpose, writer) of each logged reply, in order.
fn reply_log(w: &LiveWorld) -> Vec<(Purpose, Writer)> {
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let replies = store.read().replies().unwrap();
    replies.into_iter().map(|r| (r.purpose, r.writer)).collect()
}

/// The comment without the router's hidden marker.
fn visible(comment: &str) -> &str {
    comment.split("<!-- gatehouse:").next().unwrap_or("").trim()
}

fn mention(w: &LiveWorld, text: &str) -> u64 {
    let n = w
        .github
        .add_issue(
            "acme/widgets",
            "Login",
            "The login form rejects valid emails.",
            "alice",
        )
        .unwrap();
    w.github
        .add_issue_comment("acme/widgets", n, text, "alice")
        .unwrap();
    n
}

/// The model drafts the ack and the result; both reach GitHub as drafted,
/// pass the reply rules, and the reply log says `writer = model`.
#[test]
fn the_writers_drafts_reach_github_and_the_log_says_model() {
    let ack = "Taking this on: the login form and its email check.";
    let result =
        "The login form accepts valid emails again: https://github.com/acme/widgets/pull/2";
    let w = LiveWorld::start_with_writer(
        WRITER_WORKER,
        ModelOptions::default()
            .script(ModelScript::new(&["\"purpose\":\"ack\""], draft(ack)))
            .script(ModelScript::new(&["\"purpose\":\"result\""], draft(result))),
    );
    let n = mention(&w, "@gatehouse-bot the login form rejects valid emails");
    w.wait("the result", |w| w.bot_comments(n).len() >= 2);
    assert_eq!(wait_ended(&w), "completed");
    std::thread::sleep(Duration::from_secs(1));
    let said = w.bot_comments(n);
    let texts: Vec<&str> = said.iter().map(|c| visible(c)).collect();
    assert_eq!(texts, [ack, result], "{said:?}");
    assert_eq!(
        reply_log(&w),
        [
            (Purpose::Ack, Writer::Model),
            (Purpose::Result, Writer::Model)
        ]
    );
    // Each draft was asked for through the proxy with the key it injected,
    // with alice's message as data; the result's with the worker's link.
    let model = w.model.as_ref().unwrap();
    let asked: Vec<String> = model
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(model.requests().iter().all(|r| r
        .authorization()
        .is_some_and(|a| a.starts_with("Bearer sk-loop-"))));
    assert!(asked[0].contains("the login form rejects valid emails"));
    assert!(asked[1].contains("https://github.com/acme/widgets/pull/2"));
    // The router's own record of the drafts: allowed replies, by the model.
    let store = Store::open(&w.state(), Durability::Normal).unwrap();
    let allowed: Vec<Value> = store
        .read()
        .decisions()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|d| d["type"] == "reply")
        .collect();
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    assert!(
        allowed.iter().all(|d| d["allowed"]["writer"] == "model"),
        "{allowed:?}"
    );
}

/// Drafts the rules refuse fall back to the template, and the reply log
/// and the router's log say so: an ack over 100 words, a result that
/// leaves out the worker's link; the attention is the worker's question
/// word for word, never drafted, whatever the model would write.
#[test]
fn refused_drafts_fall_back_to_the_template_and_the_log_says_so() {
    let long = vec!["word"; 120].join(" ");
    let w = LiveWorld::start_with_writer(
        WRITER_ASKING_WORKER,
        ModelOptions::default()
            .script(ModelScript::new(&["\"purpose\":\"ack\""], draft(&long)))
            .script(ModelScript::new(
                &["\"purpose\":\"result\""],
                draft("Fixed the login form."),
            ))
            // Were the attention ever drafted, it would be rewritten.
            .responder(|_| Some(draft("Shall I also do the signup form, or not?"))),
    );
    let n = mention(&w, "@gatehouse-bot please fix the login form");
    w.wait("the result", |w| w.bot_comments(n).len() >= 3);
    assert_eq!(wait_ended(&w), "completed");
    std::thread::sleep(Duration::from_secs(1));
    let said = w.bot_comments(n);
    let texts: Vec<&str> = said.iter().map(|c| visible(c)).collect();
    assert_eq!(texts.len(), 3, "{said:?}");
    assert!(texts[0].starts_with("On it"), "{said:?}");
    assert_eq!(texts[1], "Should I fix the signup form too?", "{said:?}");
    assert!(
        texts[2].starts_with("Done: Fixed the login form"),
        "{said:?}"
    );
    assert!(
        texts[2].contains("https://github.com/acme/widgets/pull/2"),
        "{said:?}"
    );
    assert_eq!(
        reply_log(&w),
        [
            (Purpose::Ack, Writer::Template),
            (Purpose::Attention, Writer::Template),
            (Purpose::Result, Writer::Template)
        ]
    );
    // The ack and the result were asked for and refused; the attention
    // was never asked for.
    let model = w.model.as_ref().unwrap();
    let asked: Vec<String> = model
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked
        .iter()
        .all(|a| !a.contains("\\\"purpose\\\":\\\"attention\\\"")));
    let log = w.log();
    assert!(log.contains("over the limit of 100"), "{log}");
    assert!(log.contains("leaves out the link"), "{log}");
}
