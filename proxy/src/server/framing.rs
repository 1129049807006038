//! A guard in front of hyper on every client connection that refuses
//! ambiguous request framing hyper would otherwise smooth over: a request
//! with both `Content-Length` and `Transfer-Encoding` (hyper drops the
//! length and reads chunked), repeated `Content-Length` lines (hyper merges
//! equal ones), `Transfer-Encoding` other than exactly `chunked`, bare LF
//! line endings in a head, and heads, chunk lines and trailers over the
//! limits hyper is configured with ([`MAX_HEAD_BYTES`], [`MAX_HEADERS`]).
//!
//! [`Tracker`] is pure: it follows the client's byte stream request by
//! request (heads, fixed-length and chunked bodies), holds each head, chunk
//! line and trailer line back until it is complete and checked, and on a
//! violation emits a head hyper cannot parse, so hyper answers 400 and
//! closes; nothing after it is read. Every verdict depends only on the
//! bytes, never on how the network split them: each limit is a predicate
//! on a quantity that only grows, checked on every piece. After a `CONNECT`
//! head the stream is a tunnel and passes untouched (a refused CONNECT
//! closes the connection).

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};

/// What hyper is given instead of a refused head: not a valid method
/// token, so hyper answers 400 Bad Request and closes the connection.
pub const POISON: &[u8] = b"\x00\r\n\r\n";

/// Largest request head, empty lines before it included: the guard refuses
/// longer ones and hyper's read buffer is configured with the same number,
/// so a head one accepts the other accepts too.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Most header lines in a head, for the guard and hyper alike.
pub const MAX_HEADERS: usize = 100;

/// Longest chunk-size line accepted (size plus extensions, without LF).
const MAX_CHUNK_LINE: usize = 4096;

/// Chunk-extension bytes accepted in one body, all chunks together (hyper
/// refuses a body at 16 KiB of them; the guard decides first).
const MAX_CHUNK_EXTENSIONS: usize = 4096;

/// Trailer bytes accepted after one chunked body (hyper's limit is 16 KiB).
const MAX_TRAILER_BYTES: usize = 4096;

/// Trailer lines accepted after one chunked body: hyper's limit, which is
/// its limit on header lines.
const MAX_TRAILERS: usize = MAX_HEADERS;

/// The most [`Tracker::work`] per byte fed, however the bytes were split:
/// each byte is scanned once and copied once or twice (held in a head, a
/// chunk line or a trailer line, then passed on), a complete head or line
/// is parsed once (a trailer line copied once more for it), and a head's
/// end is looked for at most three bytes back into what was held.
pub const WORK_PER_BYTE: u64 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Collecting a request head, after `blank` bytes of empty lines.
    Head {
        buf: Vec<u8>,
        blank: usize,
    },
    /// Reading a fixed-length body.
    Fixed(u64),
    /// Reading a chunk-size line; `extensions` counts this body's so far.
    ChunkSize {
        line: Vec<u8>,
        extensions: usize,
    },
    /// Reading chunk data, then its CRLF.
    ChunkData {
        left: u64,
        extensions: usize,
    },
    ChunkEnd {
        seen: u8,
        extensions: usize,
    },
    /// Reading trailer lines after the last chunk; `total` counts their
    /// bytes, `lines` the complete ones.
    Trailers {
        line: Vec<u8>,
        total: usize,
        lines: usize,
    },
    /// A tunnel: pass everything.
    Passthrough,
    /// A violation was found: deliver nothing more.
    Refused,
}

impl State {
    fn head() -> Self {
        State::Head {
            buf: Vec::new(),
            blank: 0,
        }
    }
}

/// Why a request was refused (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    ContentLengthAndTransferEncoding,
    RepeatedContentLength,
    TransferEncodingNotChunked,
    BareLineFeed,
    BadChunk,
    HeadTooLarge,
    TooManyHeaders,
    /// A head hyper could not parse either (bad method, bad length, …).
    Malformed,
}

impl Violation {
    /// Why the request was refused, as its audit record says.
    pub fn reason(&self) -> &'static str {
        match self {
            Violation::ContentLengthAndTransferEncoding => {
                "request framing refused: both Content-Length and Transfer-Encoding"
            }
            Violation::RepeatedContentLength => {
                "request framing refused: more than one Content-Length"
            }
            Violation::TransferEncodingNotChunked => {
                "request framing refused: Transfer-Encoding other than exactly chunked"
            }
            Violation::BareLineFeed => "request framing refused: a line ends in a bare LF",
            Violation::BadChunk => {
                "request framing refused: a malformed or oversized chunk line, extension or trailer"
            }
            Violation::HeadTooLarge => "request framing refused: the request head is too large",
            Violation::TooManyHeaders => "request framing refused: too many header lines",
            Violation::Malformed => "request framing refused: the request head cannot be parsed",
        }
    }
}

/// Follows one client connection's request framing.
#[derive(Debug)]
pub struct Tracker {
    state: State,
    violation: Option<Violation>,
    /// The first line of a refused head, as far as it arrived.
    refused_line: Option<Vec<u8>>,
    /// Requests passed on to their end.
    requests: u64,
    /// Body bytes passed on (chunk data without chunk lines).
    body_bytes: u64,
    /// Bytes scanned, copied and parsed: see [`Tracker::work`].
    work: u64,
}

impl Default for Tracker {
    fn default() -> Self {
        Self {
            state: State::head(),
            violation: None,
            refused_line: None,
            requests: 0,
            body_bytes: 0,
            work: 0,
        }
    }
}

/// Longest part of a refused head's first line kept for its record.
const REFUSED_LINE_KEPT: usize = 2048;

/// Where a line-based state stands after a piece of input.
enum Line {
    /// The line is not complete; all input was taken.
    Partial,
    /// The line is complete; this many input bytes were taken.
    Complete(usize),
}

/// Appends `input` up to and including the first LF to `line`, counting
/// the bytes scanned and copied in `work`.
fn take_line(line: &mut Vec<u8>, input: &[u8], work: &mut u64) -> Line {
    match input.iter().position(|b| *b == b'\n') {
        Some(nl) => {
            line.extend_from_slice(&input[..=nl]);
            *work += 2 * (nl as u64 + 1);
            Line::Complete(nl + 1)
        }
        None => {
            line.extend_from_slice(input);
            *work += 2 * input.len() as u64;
            Line::Partial
        }
    }
}

/// Whether a complete trailer line (ending in CRLF) is one header field
/// as hyper reads trailers: httparse's field syntax, then a name and value
/// `http` takes.
fn is_header_field(line: &[u8]) -> bool {
    let mut field = Vec::with_capacity(line.len() + 2);
    field.extend_from_slice(line);
    field.extend_from_slice(b"\r\n");
    let mut headers = [httparse::EMPTY_HEADER; 1];
    match httparse::parse_headers(&field, &mut headers) {
        Ok(httparse::Status::Complete((_, [h]))) => {
            http::HeaderName::from_bytes(h.name.as_bytes()).is_ok()
                && http::HeaderValue::from_bytes(h.value).is_ok()
        }
        _ => false,
    }
}

/// A line's length without its LF: the quantity the line limits bound.
fn without_lf(line: &[u8]) -> usize {
    line.len() - usize::from(line.ends_with(b"\n"))
}

impl Tracker {
    /// The violation found, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    /// The start of a refused head's request line (`None` when the
    /// violation was in a body, or no head had begun).
    pub fn refused_line(&self) -> Option<&[u8]> {
        self.refused_line.as_deref()
    }

    /// How many requests were passed on to their end: a bodiless one at
    /// its head, others at the last byte of their body (a chunked one after
    /// its trailers). A `CONNECT` is not counted: a tunnel follows it.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// How many body bytes were passed on: fixed-length bodies, and chunk
    /// data without its chunk lines, CRLFs and trailers.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Whether a `CONNECT` head made the rest of the stream a tunnel.
    pub fn is_tunnel(&self) -> bool {
        matches!(self.state, State::Passthrough)
    }

    /// The work done so far, in bytes scanned, copied and parsed: at most
    /// [`WORK_PER_BYTE`] for each byte fed, however the bytes were split
    /// (bytes passed through a tunnel are not counted).
    pub fn work(&self) -> u64 {
        self.work
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
                State::Head { buf, blank } => {
                    if buf.is_empty() {
                        // Empty lines before a request are allowed (RFC 9112
                        // §2.2); hyper keeps them in its buffer, so they count.
                        let skip = input
                            .iter()
                            .take_while(|b| **b == b'\r' || **b == b'\n')
                            .count();
                        out.extend_from_slice(&input[..skip]);
                        *blank += skip;
                        self.work += 2 * skip as u64;
                        input = &input[skip..];
                        if *blank >= MAX_HEAD_BYTES {
                            return self.refuse(Violation::HeadTooLarge, out);
                        }
                        if input.is_empty() {
                            return;
                        }
                    }
                    let limit = MAX_HEAD_BYTES - *blank;
                    // The scan looks back at most three bytes held before.
                    self.work += buf.len().min(3) as u64;
                    let end = match scan_head(buf, input, limit) {
                        Err(violation) => {
                            // What the head had within its limit, for the
                            // refused line's record.
                            let kept = limit.saturating_sub(buf.len()).min(input.len());
                            buf.extend_from_slice(&input[..kept]);
                            self.work += 2 * kept as u64;
                            return self.refuse(violation, out);
                        }
                        Ok(None) => {
                            buf.extend_from_slice(input);
                            self.work += 2 * input.len() as u64;
                            return;
                        }
                        Ok(Some(end)) => end,
                    };
                    // Only the head is held: what follows it is read in the
                    // next state, never copied or scanned here.
                    buf.extend_from_slice(&input[..end]);
                    input = &input[end..];
                    let head = std::mem::take(buf);
                    self.work += 2 * end as u64 + 2 * head.len() as u64;
                    match check_head(&head) {
                        Ok(next) => {
                            out.extend_from_slice(&head);
                            if matches!(next, State::Head { .. }) {
                                self.requests += 1;
                            }
                            self.state = next;
                        }
                        Err(violation) => {
                            self.keep_refused_line(&head);
                            return self.refuse(violation, out);
                        }
                    }
                }
                State::Fixed(left) => {
                    let n = (*left).min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    *left -= n as u64;
                    self.work += n as u64;
                    self.body_bytes += n as u64;
                    if *left == 0 {
                        self.requests += 1;
                        self.state = State::head();
                    }
                }
                State::ChunkSize { line, extensions } => {
                    let taken = take_line(line, input, &mut self.work);
                    if without_lf(line) > MAX_CHUNK_LINE {
                        return self.refuse(Violation::BadChunk, out);
                    }
                    let Line::Complete(n) = taken else {
                        return;
                    };
                    input = &input[n..];
                    let Some((size, ext)) = chunk_size(line) else {
                        return self.refuse(Violation::BadChunk, out);
                    };
                    let extensions = *extensions + ext;
                    if extensions > MAX_CHUNK_EXTENSIONS {
                        return self.refuse(Violation::BadChunk, out);
                    }
                    out.extend_from_slice(line);
                    self.work += 2 * line.len() as u64;
                    self.state = match size {
                        0 => State::Trailers {
                            line: Vec::new(),
                            total: 0,
                            lines: 0,
                        },
                        left => State::ChunkData { left, extensions },
                    };
                }
                State::ChunkData { left, extensions } => {
                    let n = (*left).min(input.len() as u64) as usize;
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    *left -= n as u64;
                    self.work += n as u64;
                    self.body_bytes += n as u64;
                    if *left == 0 {
                        let extensions = *extensions;
                        self.state = State::ChunkEnd {
                            seen: 0,
                            extensions,
                        };
                    }
                }
                State::ChunkEnd { seen, extensions } => {
                    let expected = b"\r\n"[usize::from(*seen)];
                    if input[0] != expected {
                        return self.refuse(Violation::BadChunk, out);
                    }
                    out.extend_from_slice(&input[..1]);
                    input = &input[1..];
                    *seen += 1;
                    self.work += 1;
                    if *seen == 2 {
                        let extensions = *extensions;
                        self.state = State::ChunkSize {
                            line: Vec::new(),
                            extensions,
                        };
                    }
                }
                State::Trailers { line, total, lines } => {
                    let taken = take_line(line, input, &mut self.work);
                    if *total + without_lf(line) > MAX_TRAILER_BYTES {
                        return self.refuse(Violation::BadChunk, out);
                    }
                    let Line::Complete(n) = taken else {
                        return;
                    };
                    input = &input[n..];
                    if !line.ends_with(b"\r\n") {
                        return self.refuse(Violation::BareLineFeed, out);
                    }
                    self.work += 2 * line.len() as u64;
                    if line.as_slice() == b"\r\n" {
                        out.extend_from_slice(line);
                        self.requests += 1;
                        self.state = State::head();
                        continue;
                    }
                    // hyper parses the trailers as header fields and fails
                    // the body on any that is not one, or past its count.
                    *lines += 1;
                    self.work += 2 * line.len() as u64;
                    if *lines > MAX_TRAILERS || !is_header_field(line) {
                        return self.refuse(Violation::BadChunk, out);
                    }
                    out.extend_from_slice(line);
                    *total += line.len();
                    line.clear();
                }
            }
        }
    }

    /// The client closed its side: release a partial head so hyper sees it
    /// (and refuses it as incomplete).
    pub fn finish(&mut self, out: &mut BytesMut) {
        if let State::Head { buf, .. } = &mut self.state {
            out.extend_from_slice(buf);
            buf.clear();
        }
    }

    /// Keeps the start of a refused head's request line for its record.
    fn keep_refused_line(&mut self, head: &[u8]) {
        if self.refused_line.is_some() {
            return;
        }
        let line = head.split(|b| *b == b'\r' || *b == b'\n').next();
        self.refused_line = line
            .filter(|l| !l.is_empty())
            .map(|l| l[..l.len().min(REFUSED_LINE_KEPT)].to_vec());
    }

    fn refuse(&mut self, violation: Violation, out: &mut BytesMut) {
        tracing::info!(?violation, "refusing ambiguous request framing");
        if let State::Head { buf, .. } = &mut self.state {
            let head = std::mem::take(buf);
            self.keep_refused_line(&head);
        }
        out.extend_from_slice(POISON);
        self.violation = Some(violation);
        self.state = State::Refused;
    }
}

/// Looks for the end of a head: `before` holds its bytes so far (scanned
/// before), `input` what follows, `limit` is the most bytes the head may
/// have. How many bytes of `input` complete the head (up to its empty
/// line), `None` while it is incomplete, or a violation. Each input byte is
/// looked at once, and at most three bytes of `before`, so work is linear
/// in the bytes over all calls; the verdict is the same however the head
/// arrived: a bare LF within the first `limit` bytes is refused first, then
/// a head not ended within `limit`.
fn scan_head(before: &[u8], input: &[u8], limit: usize) -> Result<Option<usize>, Violation> {
    let room = limit.saturating_sub(before.len());
    let look = &input[..input.len().min(room)];
    // The three bytes before the one looked at; 0 where there is none (an
    // LF at the very start is bare).
    let mut last = [0u8; 3];
    for (slot, b) in last.iter_mut().rev().zip(before.iter().rev()) {
        *slot = *b;
    }
    for (i, &b) in look.iter().enumerate() {
        if b == b'\n' {
            if last[2] != b'\r' {
                return Err(Violation::BareLineFeed);
            }
            if last[..2] == *b"\r\n" {
                return Ok(Some(i + 1));
            }
        }
        last = [last[1], last[2], b];
    }
    if before.len() + input.len() >= limit {
        Err(Violation::HeadTooLarge)
    } else {
        Ok(None)
    }
}

/// Decides a complete head: the state its body puts the stream in, or a
/// violation (a head hyper could not parse either is one too).
fn check_head(head: &[u8]) -> Result<State, Violation> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(Violation::TooManyHeaders),
        _ => return Err(Violation::Malformed),
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
        return Err(Violation::RepeatedContentLength);
    }
    match (length, encoding) {
        (Some(_), Some(_)) => Err(Violation::ContentLengthAndTransferEncoding),
        (None, Some(te)) => {
            if encodings.next().is_some() || !te.value.eq_ignore_ascii_case(b"chunked") {
                return Err(Violation::TransferEncodingNotChunked);
            }
            Ok(State::ChunkSize {
                line: Vec::new(),
                extensions: 0,
            })
        }
        (Some(cl), None) => {
            // Digits only, as hyper requires.
            let digits = cl.value.iter().all(u8::is_ascii_digit);
            let text = std::str::from_utf8(cl.value).map_err(|_| Violation::Malformed)?;
            match text.parse::<u64>() {
                Ok(0) if digits => Ok(State::head()),
                Ok(n) if digits => Ok(State::Fixed(n)),
                _ => Err(Violation::Malformed),
            }
        }
        (None, None) => Ok(State::head()),
    }
}

/// A complete chunk-size line's size and the length of its extensions.
fn chunk_size(line: &[u8]) -> Option<(u64, usize)> {
    let line = line.strip_suffix(b"\r\n")?;
    let hex_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let (digits, rest) = line.split_at(hex_end);
    if digits.is_empty() || digits.len() > 15 || !(rest.is_empty() || rest[0] == b';') {
        return None;
    }
    if rest.iter().any(|b| *b == b'\r' || *b == b'\n') {
        return None;
    }
    let size = u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
    Some((size, rest.len()))
}

/// Told of a refused request once: the violation and the start of the
/// refused head's request line (to put the refusal on the record).
pub type Observer = Box<dyn FnOnce(&Violation, Option<&[u8]>) + Send>;

/// A client connection read through a [`Tracker`].
pub struct Guarded<T> {
    inner: T,
    tracker: Tracker,
    pending: BytesMut,
    scratch: Box<[u8]>,
    eof: bool,
    observer: Option<Observer>,
}

impl<T> Guarded<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            tracker: Tracker::default(),
            pending: BytesMut::new(),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            eof: false,
            observer: None,
        }
    }

    /// A guarded connection whose refusal (if any) is told to `observer`.
    pub fn observed(inner: T, observer: Observer) -> Self {
        let mut guarded = Self::new(inner);
        guarded.observer = Some(observer);
        guarded
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
            if matches!(this.tracker.state, State::Passthrough) {
                // A tunnel: nothing to follow, so no copy through `pending`.
                return Pin::new(&mut this.inner).poll_read(cx, buf);
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
            if let Some(violation) = this.tracker.violation() {
                if let Some(observer) = this.observer.take() {
                    observer(violation, this.tracker.refused_line());
                }
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
mod tests;
