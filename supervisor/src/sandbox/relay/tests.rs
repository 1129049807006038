use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc;
use std::thread;

use super::forward;

/// Voluntary context switches of one of this process's threads: how often
/// it went to sleep, so how often it was woken and found nothing to do.
fn sleeps(tid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A worker's connection through the relay to a stand-in for the proxy:
/// the worker's stream, the proxy's end, and the id of the thread that
/// copies the proxy's answers (the one `forward` runs on).
fn relayed() -> (TcpStream, UnixStream, i32, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sock");
    let proxy = UnixListener::bind(&path).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tid_tx, tid_rx) = mpsc::channel();
    thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        forward(conn, &path);
    });
    let worker = TcpStream::connect(addr).unwrap();
    let (proxy_end, _) = proxy.accept().unwrap();
    (worker, proxy_end, tid_rx.recv().unwrap(), dir)
}

#[test]
fn bytes_cross_both_ways_and_a_close_reaches_the_worker() {
    let (mut worker, mut proxy_end, _, _dir) = relayed();
    worker.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut request = [0u8; 18];
    proxy_end.read_exact(&mut request).unwrap();
    assert_eq!(&request, b"GET / HTTP/1.1\r\n\r\n");
    // An answer larger than the copy's buffer, in one write.
    let answer: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    proxy_end.write_all(&answer).unwrap();
    drop(proxy_end);
    let mut got = Vec::new();
    worker.read_to_end(&mut got).unwrap();
    assert_eq!(got, answer, "the whole answer, then end of stream");
}

#[test]
fn the_answer_thread_sleeps_through_the_proxys_reads() {
    let (mut worker, mut proxy_end, tid, _dir) = relayed();
    // One round trip first, so the answer thread has started and waits.
    worker.write_all(b"x").unwrap();
    proxy_end.read_exact(&mut [0u8; 1]).unwrap();
    proxy_end.write_all(b"y").unwrap();
    worker.read_exact(&mut [0u8; 1]).unwrap();

    // Requests the proxy reads and does not answer: every read frees
    // buffer space on the relay's socket, which wakes whatever waits on
    // it. The answer thread must not be among them.
    let before = sleeps(tid);
    for _ in 0..200 {
        worker.write_all(b"x").unwrap();
        proxy_end.read_exact(&mut [0u8; 1]).unwrap();
    }
    let woken = sleeps(tid) - before;
    assert!(
        woken < 20,
        "the answer thread was woken {woken} times by 200 reads of the proxy"
    );

    // And it still wakes for an answer.
    proxy_end.write_all(b"answer").unwrap();
    let mut answer = [0u8; 6];
    worker.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"answer");
}
