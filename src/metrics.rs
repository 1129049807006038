//! Serves a process's metrics: `GET /metrics` on a loopback port answers
//! the Prometheus text exposition its `render` function makes at that
//! moment; any other request is 404, any other method 405. One thread,
//! one connection at a time (a scraper asks every few seconds), each
//! bounded: a request head of at most 8 KiB, read within 5 s.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::Context;
use gatehouse_types::metrics::CONTENT_TYPE;

/// The longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its head and read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `addr` and serves `render`'s output from a thread of its own for
/// as long as the process runs. Returns the bound address.
pub fn serve(addr: SocketAddr, render: fn() -> String) -> anyhow::Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("binding the metrics listener {addr}"))?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("gatehouse-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, render) {
                            tracing::debug!(error = %e, "metrics scrape");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a metrics scrape");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .context("starting the metrics thread")?;
    tracing::info!(addr = %bound, "metrics on http://{bound}/metrics");
    Ok(bound)
}

/// What a request head asks for: its status and body.
fn route(head: &[u8], render: fn() -> String) -> (&'static str, String) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", render()),
        (Some("GET"), Some(_)) => ("404 Not Found", "only /metrics is served\n".into()),
        (Some(_), Some(_)) => ("405 Method Not Allowed", "GET /metrics\n".into()),
        _ => ("400 Bad Request", "a request line is expected\n".into()),
    }
}

fn answer(mut stream: TcpStream, render: fn() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.ends_with(b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            stream.write_all(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            )?;
            return Ok(());
        }
    }
    let (status, body) = route(&head, render);
    let content_type = if status.starts_with("200") {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render() -> String {
        "# TYPE x counter\nx 1\n".into()
    }

    #[test]
    fn routes() {
        for (head, status) in [
            (&b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"[..], "200 OK"),
            (b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", "404 Not Found"),
            (b"GET / HTTP/1.1\r\n\r\n", "404 Not Found"),
            (b"POST /metrics HTTP/1.1\r\n\r\n", "405 Method Not Allowed"),
            (b"\r\n\r\n", "400 Bad Request"),
        ] {
            assert_eq!(route(head, render).0, status, "{head:?}");
        }
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n", render).1, render());
    }
}
