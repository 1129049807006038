//! A guard in front of hyper on every client connection that refuses
//! ambiguous request framing hyper would otherwise smooth over: a request
//! with both `Content-Length` and `Transfer-Encoding` (hyper drops the
//! length and reads chunked), repeated `Content-Length` lines (hyper merges
//! equal ones), `Transfer-Encoding` other than exactly `chunked`, and bare
//! LF line endings in a head.
//!
//! [`Tracker`] is pure: it follows the client's byte stream request by
//! request (heads, fixed-length and chunked bodies), holds each head back
//! until it is complete and checked, and on a violation emits a head hyper
//! cannot parse, so hyper answers 400 and closes; nothing after it is read.
//! After a `CONNECT` head the stream is a tunnel and passes untouched.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};

/// What hyper is given instead of a refused head: not a valid method
/// token, so hyper answers 400 Bad Request and closes the connection.
pub const POISON: &[u8] = b"\x00\r\n\r\n";

/// Heads longer than this are passed to hyper unchecked, which refuses
/// them (431) against its own, smaller limit.
const MAX_HEAD: usize = 64 * 1024;

/// Longest chunk-size line accepted (size plus extensions).
const MAX_CHUNK_LINE: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Collecting a request head.
    Head(Vec<u8>),
    /// Reading a fixed-length body.
    Fixed(u64),
    /// Reading a chunk-size line.
    ChunkSize(Vec<u8>),
    /// Reading chunk data, then its CRLF.
    ChunkData(u64),
    ChunkEnd(u8),
    /// Reading trailer lines after the last chunk.
    Trailers(Vec<u8>),
    /// A tunnel or a stream hyper will refuse anyway: pass everything.
    Passthrough,
    /// A violation was found: deliver nothing more.
    Refused,
}

/// Why a request was refused (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    ContentLengthAndTransferEncoding,
    RepeatedContentLength,
    TransferEncodingNotChunked,
    BareLineFeed,
    BadChunk,
}

/// Follows one client connection's request framing.
#[derive(Debug)]
pub struct Tracker {
    state: State,
    violation: Option<Violation>,
}

impl Default for Tracker {
    fn default() -> Self {
        Self {
            state: State::Head(Vec::new()),
            violation: None,
        }
    }
}

impl Tracker {
    /// The violation found, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    /// Feeds bytes read from the client; appends what hyper may see to `out`.
    ///
    /// A state machine over [`State`], one arm per state; it is long because
    /// each arm is the whole of one state's transitions, kept side by side.
    pub fn feed(&mut self, mut input: &[u8], out: &mut BytesMut) {
        while !input.is_empty() {
            match &mut self.state {
                State::Refused => return,
                State::Passthrough => {
                    out.extend_from_slice(input);
                    return;
                }
                State::Head(buf) => {
                    if buf.is_empty() {
                        // Empty lines before a request are allowed (RFC 9112 §2.2).
                        let skip = input
                            .iter()
                            .take_while(|b| **b == b'\r' || **b == b'\n')
                            .count();
                        out.extend_from_slice(&input[..skip]);
                        input = &input[skip..];
                        if input.is_empty() {
                            return;
                        }
                    }
                    let start = buf.len().saturating_sub(3);
                    buf.extend_from_slice(input);
                    input = &[];
                    let Some(end) = find(&buf[start..], b"\r\n\r\n").map(|i| start + i + 4) else {
                        // A bare LF would let the head end where hyper
                        // sees it end but this tracker does not.
                        if has_bare_lf(buf) {
                            self.refuse(Violation::BareLineFeed, out);
                            return;
                        }
                        if buf.len() > MAX_HEAD {
                            out.extend_from_slice(buf);
                            self.state = State::Passthrough;
                        }
                        continue;
                    };
                    let rest = buf.split_off(end);
                    let head = std::mem::take(buf);
                    match check_head(&head) {
                        Ok(next) => {
                            out.extend_from_slice(&head);
                            self.state = next;
                            // Re-feed what followed the head in the new state.
                            self.feed(&rest, out);
                        }
                        Err(Some(violation)) => self.refuse(violation, out),
                        // Unparseable: hyper refuses it itself.
                        Err(None) => {
                            out.extend_from_slice(&head);
                            out.extend_from_slice(&rest);
                            self.state = State::Passthrough;
                        }
                    }
                    return;
                }
                State::Fixed(left) => {
                    let n = (*left).min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    *left -= n as u64;
                    if *left == 0 {
                        self.state = State::Head(Vec::new());
                    }
                }
                State::ChunkSize(line) => {
                    let Some(nl) = input.iter().position(|b| *b == b'\n') else {
                        line.extend_from_slice(input);
                        out.extend_from_slice(input);
                        input = &[];
                        if line.len() > MAX_CHUNK_LINE {
                            self.refuse(Violation::BadChunk, out);
                        }
                        continue;
                    };
                    line.extend_from_slice(&input[..=nl]);
                    out.extend_from_slice(&input[..=nl]);
                    input = &input[nl + 1..];
                    match chunk_size(line) {
                        Some(0) => self.state = State::Trailers(Vec::new()),
                        Some(size) => self.state = State::ChunkData(size),
                        None => self.refuse(Violation::BadChunk, out),
                    }
                }
                State::ChunkData(left) => {
                    let n = (*left).min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    *left -= n as u64;
                    if *left == 0 {
                        self.state = State::ChunkEnd(0);
                    }
                }
                State::ChunkEnd(seen) => {
                    let expected = b"\r\n"[usize::from(*seen)];
                    if input[0] != expected {
                        self.refuse(Violation::BadChunk, out);
                        return;
                    }
                    out.extend_from_slice(&input[..1]);
                    input = &input[1..];
                    *seen += 1;
                    if *seen == 2 {
                        self.state = State::ChunkSize(Vec::new());
                    }
                }
                State::Trailers(line) => {
                    let Some(nl) = input.iter().position(|b| *b == b'\n') else {
                        line.extend_from_slice(input);
                        out.extend_from_slice(input);
                        input = &[];
                        if line.len() > MAX_CHUNK_LINE {
                            self.refuse(Violation::BadChunk, out);
                        }
                        continue;
                    };
                    line.extend_from_slice(&input[..=nl]);
                    out.extend_from_slice(&input[..=nl]);
                    input = &input[nl + 1..];
                    if line.as_slice() == b"\r\n" {
                        self.state = State::Head(Vec::new());
                    } else {
                        line.clear();
                    }
                }
            }
        }
    }

    /// The client closed its side: release a partial head so hyper sees it.
    pub fn finish(&mut self, out: &mut BytesMut) {
        if let State::Head(buf) = &mut self.state {
            out.extend_from_slice(buf);
            buf.clear();
        }
    }

    fn refuse(&mut self, violation: Violation, out: &mut BytesMut) {
        tracing::info!(?violation, "refusing ambiguous request framing");
        out.extend_from_slice(POISON);
        self.violation = Some(violation);
        self.state = State::Refused;
    }
}

/// An LF not preceded by CR (the first byte counts as unpreceded).
fn has_bare_lf(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decides a complete head: the state its body puts the stream in, a
/// violation, or `Err(None)` when it does not parse at all.
fn check_head(head: &[u8]) -> Result<State, Option<Violation>> {
    if has_bare_lf(head) {
        return Err(Some(Violation::BareLineFeed));
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(None),
    }
    if req.method == Some("CONNECT") {
        return Ok(State::Passthrough);
    }
    let mut lengths = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"));
    let mut encodings = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    let (length, encoding) = (lengths.next(), encodings.next());
    if lengths.next().is_some() {
        return Err(Some(Violation::RepeatedContentLength));
    }
    match (length, encoding) {
        (Some(_), Some(_)) => Err(Some(Violation::ContentLengthAndTransferEncoding)),
        (None, Some(te)) => {
            if encodings.next().is_some() || !te.value.eq_ignore_ascii_case(b"chunked") {
                return Err(Some(Violation::TransferEncodingNotChunked));
            }
            Ok(State::ChunkSize(Vec::new()))
        }
        (Some(cl), None) => {
            let text = std::str::from_utf8(cl.value).map_err(|_| None)?;
            // Hyper refuses anything but digits; pass those through to it.
            match text.parse::<u64>() {
                Ok(0) => Ok(State::Head(Vec::new())),
                Ok(n) if text.bytes().all(|b| b.is_ascii_digit()) => Ok(State::Fixed(n)),
                _ => Err(None),
            }
        }
        (None, None) => Ok(State::Head(Vec::new())),
    }
}

fn chunk_size(line: &[u8]) -> Option<u64> {
    let line = line.strip_suffix(b"\r\n")?;
    let hex_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let (digits, rest) = line.split_at(hex_end);
    if digits.is_empty() || digits.len() > 15 || !(rest.is_empty() || rest[0] == b';') {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// A client connection read through a [`Tracker`].
pub struct Guarded<T> {
    inner: T,
    tracker: Tracker,
    pending: BytesMut,
    scratch: Box<[u8]>,
    eof: bool,
}

impl<T> Guarded<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            tracker: Tracker::default(),
            pending: BytesMut::new(),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            eof: false,
        }
    }
}

impl<T: Read + Unpin> Read for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let n = buf.remaining().min(this.pending.len());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.eof || this.tracker.violation.is_some() {
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, read.unfilled()))?;
            let filled = read.filled();
            if filled.is_empty() {
                this.eof = true;
                this.tracker.finish(&mut this.pending);
            } else {
                this.tracker.feed(filled, &mut this.pending);
            }
        }
    }
}

impl<T: Write + Unpin> Write for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(chunks: &[&[u8]]) -> (Vec<u8>, Option<Violation>) {
        let mut t = Tracker::default();
        let mut out = BytesMut::new();
        for c in chunks {
            t.feed(c, &mut out);
        }
        (out.to_vec(), t.violation().cloned())
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";

    #[test]
    fn framing_table() {
        use Violation::*;
        let cases: &[(&[u8], Option<Violation>)] = &[
            (GET, None),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", None),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", None),
            (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", None),
            (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", Some(ContentLengthAndTransferEncoding)),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", Some(ContentLengthAndTransferEncoding)),
            (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", Some(RepeatedContentLength)),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", Some(TransferEncodingNotChunked)),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", Some(TransferEncodingNotChunked)),
            (b"GET / HTTP/1.1\nHost: a\r\n\r\n", Some(BareLineFeed)),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", Some(BadChunk)),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY", Some(BadChunk)),
        ];
        for (input, want) in cases {
            let (out, got) = run(&[input]);
            assert_eq!(&got, want, "{}", String::from_utf8_lossy(input));
            if want.is_none() {
                assert_eq!(&out, input);
            } else {
                assert!(out.ends_with(POISON));
            }
        }
    }

    #[test]
    fn a_smuggled_request_after_a_violation_is_never_delivered() {
        let attack = b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: a\r\n\r\n";
        let (out, v) = run(&[attack]);
        assert_eq!(v, Some(Violation::ContentLengthAndTransferEncoding));
        assert_eq!(out, POISON);
    }

    #[test]
    fn pipelined_requests_are_each_checked() {
        let mut input = GET.to_vec();
        input.extend_from_slice(
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        );
        let (out, v) = run(&[&input]);
        assert_eq!(v, Some(Violation::RepeatedContentLength));
        assert!(out.starts_with(GET));
    }

    #[test]
    fn connect_turns_into_a_tunnel() {
        let input = b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n\x16\x03\x01anything\nContent-Length: 1\r\n";
        let (out, v) = run(&[input]);
        assert_eq!(v, None);
        assert_eq!(&out[..], &input[..]);
    }

    proptest! {
        /// However the stream is split, the output is the same.
        #[test]
        fn splitting_does_not_change_the_outcome(cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let mut stream = Vec::new();
            stream.extend_from_slice(b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
            stream.extend_from_slice(b"POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nworld");
            stream.extend_from_slice(GET);
            stream.extend_from_slice(b"POST /c HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
            let (whole, v_whole) = run(&[&stream]);
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut last = 0;
            for p in points { chunks.push(&stream[last..p]); last = p; }
            chunks.push(&stream[last..]);
            let (split, v_split) = run(&chunks);
            prop_assert_eq!(whole, split);
            prop_assert_eq!(v_whole, v_split);
        }
    }
}
