//! Any bytes from a client, split anywhere: the request-framing guard in
//! front of hyper never panics, passes on only a prefix of what it was given
//! (followed by the poison head when it refuses), and decides the same
//! whether the bytes arrive at once, in pieces cut at up to 16 points
//! anywhere, or a byte at a time: the same output, verdict, requests ended
//! and body bytes. Cost: its work counter stays within `WORK_PER_BYTE` a
//! byte however the bytes were split.
//!
//! Then what the guard passed on is served by hyper, configured as the
//! proxy configures it (head and header limits) with `half_close` on so
//! that it reads to the end of what was sent: every request hyper serves
//! is the guard's request of the same rank, with the same method and body
//! length, the guard having seen that body end (its end found a byte at a
//! time); a body hyper cannot read to its end is one the guard did not pass
//! on whole (a trailer line that is not a header field, say); and a
//! `CONNECT` hyper serves is where the guard turned to a tunnel. hyper may
//! stop before the guard's last request only for a reason of its own: a
//! head it cannot parse (its error), a body it could not read, or a request
//! that asked to close the connection.
#![no_main]

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use gatehouse_proxy::server::framing::{
    Tracker, MAX_HEADERS, MAX_HEAD_BYTES, POISON, WORK_PER_BYTE,
};
use http::{header::CONNECTION, Method, Request, Response, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::rt::ReadBufCursor;
use libfuzzer_sys::fuzz_target;

/// What the guard made of the bytes.
#[derive(Debug, PartialEq, Eq)]
struct Guarded {
    out: BytesMut,
    violation: Option<String>,
    requests: u64,
    body_bytes: u64,
    tunnel: bool,
}

/// Feeds the reads to one tracker; the input offset where each request
/// ended, with its body length (exact when the reads are single bytes).
fn guard<'a>(reads: impl Iterator<Item = &'a [u8]>) -> (Guarded, u64, Vec<(usize, u64)>) {
    let mut tracker = Tracker::default();
    let mut out = BytesMut::new();
    let mut ends = Vec::new();
    let mut fed = 0;
    // Body bytes when the last request ended.
    let mut body = 0;
    for read in reads {
        let requests = tracker.requests();
        tracker.feed(read, &mut out);
        fed += read.len();
        if tracker.requests() == requests + 1 {
            ends.push((fed, tracker.body_bytes() - body));
            body = tracker.body_bytes();
        }
    }
    let guarded = Guarded {
        out,
        violation: tracker.violation().map(|v| format!("{v:?}")),
        requests: tracker.requests(),
        body_bytes: tracker.body_bytes(),
        tunnel: tracker.is_tunnel(),
    };
    (guarded, tracker.work(), ends)
}

/// The client's side of the connection hyper serves: what the guard passed
/// on, then the end of the stream; answers are dropped.
struct Client {
    data: Bytes,
    at: usize,
}

impl hyper::rt::Read for Client {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = buf.remaining().min(self.data.len() - self.at);
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Client {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// One request hyper handed to the service.
#[derive(Debug)]
struct Served {
    method: Method,
    /// The body's length, `None` when hyper could not read it to its end.
    body: Option<u64>,
    /// HTTP/1.0, or a `Connection` header naming `close`: hyper may close
    /// after it.
    may_close: bool,
}

/// The requests hyper serves from `data`; whether it ended with an error;
/// whether it ended at all within the polls allowed.
fn hyper_serves(data: Bytes) -> (Vec<Served>, bool, bool) {
    let served = Rc::new(RefCell::new(Vec::<Served>::new()));
    let log = served.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let log = log.clone();
        async move {
            let may_close = req.version() != Version::HTTP_11
                || req.headers().get_all(CONNECTION).iter().any(|v| {
                    v.as_bytes()
                        .to_ascii_lowercase()
                        .windows(5)
                        .any(|w| w == b"close")
                });
            let method = req.method().clone();
            let connect = method == Method::CONNECT;
            let rank = {
                let mut log = log.borrow_mut();
                log.push(Served {
                    method,
                    body: None,
                    may_close,
                });
                log.len() - 1
            };
            if !connect {
                let body = req.into_body().collect().await;
                log.borrow_mut()[rank].body = body.ok().map(|b| b.to_bytes().len() as u64);
            }
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    let polls = 10_000 + 4 * data.len();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .keep_alive(true)
        .half_close(true);
    let conn = builder.serve_connection(Client { data, at: 0 }, service);
    let mut conn = std::pin::pin!(conn);
    let mut cx = Context::from_waker(Waker::noop());
    let mut ended = None;
    for _ in 0..polls {
        if let Poll::Ready(result) = conn.as_mut().poll(&mut cx) {
            ended = Some(result.is_err());
            break;
        }
    }
    let served = served.take();
    (served, ended.unwrap_or(false), ended.is_some())
}

/// Whether `FRAMING_TRACE` is set: each input then prints what the guard
/// and hyper made of it (to read a replayed input).
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("FRAMING_TRACE").is_some())
}

/// The method of the request that ends at `end`, begun after `from`.
fn method_of(input: &[u8], from: usize, end: usize) -> &[u8] {
    let span = &input[from..end];
    let start = span
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .unwrap_or(span.len());
    let span = &span[start..];
    &span[..span.iter().position(|b| *b == b' ').unwrap_or(span.len())]
}

fuzz_target!(|data: &[u8]| {
    // The first byte says how many split points (up to 16) follow, two
    // bytes each; the rest is the client's bytes.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 17);
    if rest.len() < 2 * n {
        return;
    }
    let (splits, input) = rest.split_at(2 * n);
    let mut points: Vec<usize> = splits
        .chunks(2)
        .map(|p| usize::from(u16::from_le_bytes([p[0], p[1]])) * (input.len() + 1) / 65_536)
        .collect();
    points.sort_unstable();
    let mut reads = Vec::new();
    let mut from = 0;
    for &to in &points {
        reads.push(&input[from..to]);
        from = to;
    }
    reads.push(&input[from..]);

    let bound = WORK_PER_BYTE * (input.len() as u64 + 1);
    let (whole, whole_work, _) = guard(std::iter::once(input));
    let (parts, parts_work, _) = guard(reads.into_iter());
    let (bytes, bytes_work, ends) = guard(input.chunks(1));
    for work in [whole_work, parts_work, bytes_work] {
        assert!(work <= bound, "work {work} for {} bytes", input.len());
    }
    let passed = match &whole.violation {
        Some(_) => whole
            .out
            .strip_suffix(POISON)
            .expect("a refusal ends with the poison head"),
        None => &whole.out[..],
    };
    assert!(
        input.starts_with(passed),
        "the guard passed on bytes it was not given"
    );
    assert_eq!(whole, parts, "delivery depends on how the bytes were split");
    assert_eq!(whole, bytes, "delivery a byte at a time differs");
    assert_eq!(ends.len() as u64, whole.requests);

    // Where hyper ends each request.
    let (served, hyper_failed, hyper_ended) = hyper_serves(whole.out.clone().freeze());
    if trace() {
        eprintln!(
            "guard: {} requests ended, violation {:?}, tunnel {}; hyper: {} served {served:?}, ended {hyper_ended}, failed {hyper_failed}",
            ends.len(),
            whole.violation,
            whole.tunnel,
            served.len()
        );
    }
    let mut from = 0;
    for (rank, request) in served.iter().enumerate() {
        if request.method == Method::CONNECT {
            assert!(
                whole.tunnel && whole.requests == rank as u64,
                "hyper served a CONNECT as request {rank}; the guard: {} requests, tunnel {}",
                whole.requests,
                whole.tunnel
            );
            return;
        }
        let Some(body) = request.body else {
            // hyper could not read this body to its end: the guard did not
            // pass it on whole either (it stopped inside it, or refused),
            // and nothing after it is served.
            assert!(
                rank >= ends.len(),
                "hyper could not read request {rank}'s body, which the guard passed on whole"
            );
            assert_eq!(rank, served.len() - 1, "hyper served after a failed body");
            return;
        };
        assert!(
            rank < ends.len(),
            "hyper served request {rank} ({} bytes of body) that the guard did not see end",
            body
        );
        let (end, guard_body) = ends[rank];
        assert_eq!(
            request.method.as_str().as_bytes(),
            method_of(input, from, end),
            "request {rank}: the method"
        );
        assert_eq!(body, guard_body, "request {rank}: the body length");
        from = end;
    }
    if hyper_ended && served.len() < ends.len() {
        let closed = served.last().is_some_and(|r| r.may_close);
        assert!(
            hyper_failed || closed,
            "hyper served {} requests and ended cleanly; the guard passed {} on",
            served.len(),
            ends.len()
        );
    }
});
