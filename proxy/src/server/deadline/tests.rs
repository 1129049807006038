use std::convert::Infallible;
use std::future::poll_fn;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::server::connect::http1_server_reading_heads_within;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn passed(deadline: &mut Deadline) {
    poll_fn(|cx| deadline.poll_passed(cx)).await
}

#[tokio::test]
async fn moving_a_deadline_later_leaves_its_timer_and_it_fires_at_the_last_place() {
    let start = Instant::now();
    let mut deadline = Deadline::new(start + ms(100));
    let first = deadline.timer.deadline();
    for step in 1..=5 {
        deadline.set(start + ms(100 + 50 * step));
    }
    // Five moves later, not one of them touched the timer.
    assert_eq!(deadline.timer.deadline(), first);
    passed(&mut deadline).await;
    let waited = start.elapsed();
    assert!(waited >= ms(350), "fired before its deadline: {waited:?}");
    assert!(waited < ms(350) + ms(2000), "fired long after: {waited:?}");
}

#[tokio::test]
async fn moving_a_deadline_earlier_sets_its_timer_so_it_is_not_late() {
    let start = Instant::now();
    let mut deadline = Deadline::new(start + Duration::from_secs(60));
    deadline.set(start + ms(100));
    assert_eq!(deadline.timer.deadline(), start + ms(100));
    passed(&mut deadline).await;
    let waited = start.elapsed();
    assert!(waited >= ms(100) && waited < ms(2100), "{waited:?}");
}

#[test]
fn the_sleeps_hyper_makes_for_one_connection_move_its_one_timer() {
    use hyper::rt::Timer;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let timer = ConnectionTimer::default();
        let timer_deadline = |timer: &ConnectionTimer| {
            let deadline = timer.deadline();
            let deadline = deadline.as_ref().unwrap();
            (deadline.at, deadline.timer.deadline())
        };
        let start = std::time::Instant::now();
        // As hyper does: a sleep per head, dropped when the head is in.
        drop(timer.sleep_until(start + ms(100)));
        let (_, first) = timer_deadline(&timer);
        let mut sleep = timer.sleep_until(start + ms(200));
        timer.reset(&mut sleep, start + ms(300));
        let (at, now_set) = timer_deadline(&timer);
        assert_eq!(at, Instant::from_std(start + ms(300)));
        assert_eq!(now_set, first, "a later deadline must not move the timer");
        // Another connection's sleep is replaced, not moved.
        let other = ConnectionTimer::default();
        let mut foreign = other.sleep_until(start + ms(100));
        timer.reset(&mut foreign, start + ms(400));
        assert_eq!(timer_deadline(&other).0, Instant::from_std(start + ms(100)));
        assert_eq!(timer_deadline(&timer).0, Instant::from_std(start + ms(400)));
    });
}

/// Serves HTTP/1 with a header-read timeout of `timeout` on one end of a
/// pipe; returns the other end and the server's task.
fn serve(timeout: Duration) -> (DuplexStream, tokio::task::JoinHandle<()>) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let service = service_fn(|_req: Request<hyper::body::Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let conn =
        http1_server_reading_heads_within(timeout).serve_connection(TokioIo::new(server), service);
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, task)
}

/// Reads until the server closes; the time it took from `since`. A server
/// that never closes fails the test instead of hanging it.
async fn closed_after(client: &mut DuplexStream, since: Instant) -> Duration {
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut sink));
    assert!(
        read.await.is_ok(),
        "the server did not close the connection"
    );
    since.elapsed()
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";

async fn read_answer(client: &mut DuplexStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok") {
        let n = client.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed before the answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

#[tokio::test]
async fn a_connection_that_sends_no_head_is_closed_at_the_header_timeout() {
    let start = Instant::now();
    let (mut client, task) = serve(ms(300));
    let waited = closed_after(&mut client, start).await;
    assert!(waited >= ms(300) && waited < ms(2300), "{waited:?}");
    task.await.unwrap();
}

#[tokio::test]
async fn a_keep_alive_connection_silent_after_an_answer_is_closed_a_timeout_later() {
    let (mut client, task) = serve(ms(300));
    // Requests every 100 ms for well over the timeout: each moves it.
    let start = Instant::now();
    let answered = loop {
        client.write_all(GET).await.unwrap();
        read_answer(&mut client).await;
        let answered = Instant::now();
        if start.elapsed() >= ms(1000) {
            break answered;
        }
        tokio::time::sleep(ms(100)).await;
    };
    // The server's clock started when it had written the answer, a little
    // before the client had read it.
    let waited = closed_after(&mut client, answered).await;
    assert!(
        waited >= ms(250) && waited < ms(2300),
        "closed {waited:?} after the last answer"
    );
    task.await.unwrap();
}

#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_is_cut_at_the_header_timeout() {
    let (mut client, task) = serve(ms(400));
    let start = Instant::now();
    let writer = async {
        for byte in GET {
            if client.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(ms(50)).await;
        }
    };
    // 28 bytes at 50 ms each would take 1.4 s; the head must be cut first.
    tokio::time::timeout(ms(1300), writer).await.ok();
    let waited = closed_after(&mut client, start).await;
    assert!(waited >= ms(400) && waited < ms(1300), "{waited:?}");
    task.await.unwrap();
}
