use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::http1_server;
use crate::server::framing::MAX_HEADERS;

/// The status line hyper's server (as the proxy builds it) answers a GET
/// with `lines` header lines in all with; the guard is not in front.
async fn status_for_header_lines(lines: usize) -> String {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let service = service_fn(|_req: Request<hyper::body::Incoming>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let conn = http1_server().serve_connection(TokioIo::new(server), service);
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut head = String::from("GET / HTTP/1.1\r\nhost: x\r\n");
    // host, these, and connection: `lines` in all.
    for n in 2..lines {
        head.push_str(&format!("x-{n}: v\r\n"));
    }
    head.push_str("connection: close\r\n\r\n");
    client.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    task.await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn hyper_takes_as_many_header_lines_as_the_guard_and_refuses_one_more() {
    let at_limit = status_for_header_lines(MAX_HEADERS).await;
    assert!(at_limit.starts_with("HTTP/1.1 200"), "{at_limit}");
    let over = status_for_header_lines(MAX_HEADERS + 1).await;
    assert!(over.starts_with("HTTP/1.1 431"), "{over}");
}
