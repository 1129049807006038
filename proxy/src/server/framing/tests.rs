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
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n", Some(BadChunk)),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n", Some(BareLineFeed)),
        // A trailer line that is not a header field: hyper fails the body.
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a field\r\n\r\n", Some(BadChunk)),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: a\rb\r\n\r\n", Some(BadChunk)),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n folded\r\n\r\n", Some(BadChunk)),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX : 1\r\n\r\n", Some(BadChunk)),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: \x7f\r\n\r\n", Some(BadChunk)),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-A: 1\r\nX-B:\r\n\r\n", None),
        (b"POST / HTTP/1.1\r\nContent-Length: 2x\r\n\r\nab", Some(Malformed)),
        (b"GET / HTTP/1.1\r\nBad Name: 1\r\n\r\n", Some(Malformed)),
        (b"\x01GET / HTTP/1.1\r\n\r\n", Some(Malformed)),
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

/// A head of exactly `len` bytes (`blank` empty-line bytes before it).
fn head_of(len: usize) -> Vec<u8> {
    let mut head = b"GET / HTTP/1.1\r\nX: ".to_vec();
    let fill = len - head.len() - 4;
    head.extend(std::iter::repeat_n(b'a', fill));
    head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(head.len(), len);
    head
}

/// A chunked body whose chunk lines carry `ext` bytes of extension each.
fn chunked_with_extensions(chunks: usize, ext: usize) -> Vec<u8> {
    let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..chunks {
        s.extend_from_slice(b"1;");
        s.extend(std::iter::repeat_n(b'e', ext - 1));
        s.extend_from_slice(b"\r\nx\r\n");
    }
    s.extend_from_slice(b"0\r\n\r\n");
    s
}

#[test]
fn limits_table() {
    use Violation::*;
    let many_headers = |n: usize| {
        let mut h = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..n {
            h.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        h.extend_from_slice(b"\r\n");
        h
    };
    let blank_then = |blank: usize, len: usize| {
        let mut s = b"\r\n".repeat(blank / 2);
        s.extend(head_of(len));
        s
    };
    let long_trailer = {
        let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ".to_vec();
        s.extend(std::iter::repeat_n(b't', MAX_TRAILER_BYTES));
        s.extend_from_slice(b"\r\n\r\n");
        s
    };
    let cases: Vec<(Vec<u8>, Option<Violation>)> = vec![
        (head_of(MAX_HEAD_BYTES), None),
        (head_of(MAX_HEAD_BYTES + 1), Some(HeadTooLarge)),
        (head_of(2 * MAX_HEAD_BYTES), Some(HeadTooLarge)),
        (blank_then(100, MAX_HEAD_BYTES - 100), None),
        (blank_then(100, MAX_HEAD_BYTES - 99), Some(HeadTooLarge)),
        (many_headers(MAX_HEADERS), None),
        (many_headers(MAX_HEADERS + 1), Some(TooManyHeaders)),
        (chunked_with_extensions(1, MAX_CHUNK_LINE - 2), None),
        (
            chunked_with_extensions(1, MAX_CHUNK_LINE - 1),
            Some(BadChunk),
        ),
        (chunked_with_extensions(4, MAX_CHUNK_EXTENSIONS / 4), None),
        (
            chunked_with_extensions(5, MAX_CHUNK_EXTENSIONS / 4),
            Some(BadChunk),
        ),
        (long_trailer, Some(BadChunk)),
    ];
    for (input, want) in cases {
        // Whole, and a byte at a time: the same verdict.
        let (out, got) = run(&[&input]);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        let (out_bytes, got_bytes) = run(&bytes);
        let shown = String::from_utf8_lossy(&input[..input.len().min(40)]).into_owned();
        assert_eq!(got, want, "{shown} ({} bytes)", input.len());
        assert_eq!(got_bytes, want, "{shown}, a byte at a time");
        assert_eq!(out, out_bytes, "{shown}");
        if want.is_none() {
            assert_eq!(out, input);
        }
    }
}

#[test]
fn scanning_a_head_is_linear_and_split_independent() {
    // (buffer, bytes scanned before, limit, verdict)
    type Case<'a> = (&'a [u8], usize, usize, Result<Option<usize>, Violation>);
    let cases: &[Case] = &[
        (b"GET / HTTP/1.1\r\n\r\n", 0, 100, Ok(Some(18))),
        (b"GET / HTTP/1.1\r\n\r\n", 16, 100, Ok(Some(18))),
        (b"GET / HTTP/1.1\r\n\r\nbody", 0, 100, Ok(Some(18))),
        (b"GET / HTTP/1.1\r\n\r\n", 0, 18, Ok(Some(18))),
        (
            b"GET / HTTP/1.1\r\n\r\n",
            0,
            17,
            Err(Violation::HeadTooLarge),
        ),
        (b"GET / HTTP/1.1\r\n", 0, 100, Ok(None)),
        (b"GET / HTTP/1.1\r\n", 0, 16, Err(Violation::HeadTooLarge)),
        (b"GET / HTTP/1.1\n", 0, 100, Err(Violation::BareLineFeed)),
        // The LF at the seam was preceded by a CR scanned before.
        (b"GET / HTTP/1.1\r\n", 15, 100, Ok(None)),
        // A bare LF beyond the limit is not looked at: too large first.
        (
            b"GET / HTTP/1.1 aaaaaaaaaa\n",
            0,
            20,
            Err(Violation::HeadTooLarge),
        ),
        // A bare LF after the head is the next head's business.
        (b"GET / HTTP/1.1\r\n\r\n\n", 0, 100, Ok(Some(18))),
    ];
    for (buf, from, limit, want) in cases {
        // What `scan_head` takes: the bytes held before, then the new ones;
        // it answers how many of the new ones end the head.
        let (before, input) = buf.split_at(*from);
        let want = want.clone().map(|end| end.map(|e| e - from));
        assert_eq!(
            scan_head(before, input, *limit),
            want,
            "{:?} from {from} limit {limit}",
            String::from_utf8_lossy(buf)
        );
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
    input.extend_from_slice(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx");
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

/// Cuts `stream` at `cuts` (taken modulo its length, sorted).
fn split_at<'a>(stream: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut last = 0;
    for p in points {
        chunks.push(&stream[last..p]);
        last = p;
    }
    chunks.push(&stream[last..]);
    chunks
}

/// One request of a generated stream: its kind and a size parameter.
fn piece(kind: u8, size: usize) -> Vec<u8> {
    match kind % 9 {
        0 => GET.to_vec(),
        1 => head_of((MAX_HEAD_BYTES - 8 + size % 16).max(40)),
        2 => format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}",
            size,
            "b".repeat(size)
        )
        .into_bytes(),
        3 => chunked_with_extensions(1 + size % 3, MAX_CHUNK_LINE - 2 + size % 4),
        4 => chunked_with_extensions(3 + size % 3, MAX_CHUNK_EXTENSIONS / 4 - 1 + size % 2),
        5 => b"\r\n".repeat(size % 4),
        6 => b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
        7 => format!("GET / HTTP/1.1\r\nX: {}\n\r\n\r\n", "y".repeat(size)).into_bytes(),
        _ => {
            let mut s = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
            s.extend(
                format!(
                    "T: {}\r\n\r\n",
                    "t".repeat(MAX_TRAILER_BYTES - 8 + size % 16)
                )
                .bytes(),
            );
            s
        }
    }
}

proptest! {
    /// The guard's verdict and what it passes on depend only on the bytes:
    /// a stream of requests near every limit (heads around the size limit,
    /// long chunk extensions, extension totals, trailers, bare LFs), fed
    /// whole and split at arbitrary points, gives the same output.
    #[test]
    fn verdicts_do_not_depend_on_how_the_bytes_are_split(
        pieces in proptest::collection::vec((any::<u8>(), 0usize..64), 1..5),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let stream: Vec<u8> = pieces.iter().flat_map(|(k, n)| piece(*k, *n)).collect();
        let (whole, v_whole) = run(&[&stream]);
        let (split, v_split) = run(&split_at(&stream, &cuts));
        prop_assert_eq!(v_whole, v_split);
        prop_assert!(whole == split, "outputs differ");
    }
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

#[test]
fn a_refused_head_keeps_the_start_of_its_request_line() {
    let big = format!(
        "GET /r6 HTTP/1.1\r\nX: {}\r\n\r\n",
        "x".repeat(MAX_HEAD_BYTES)
    );
    let cases: [(&[u8], Option<&[u8]>); 4] = [
        (
            b"POST /a HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            Some(b"POST /a HTTP/1.1"),
        ),
        (b"GET /b HTTP/1.1\nHost: h\n\n", Some(b"GET /b HTTP/1.1")),
        (big.as_bytes(), Some(b"GET /r6 HTTP/1.1")),
        // A violation in a body names no head.
        (
            b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            None,
        ),
    ];
    for (input, line) in cases {
        for piece in [16 * 1024, 7] {
            let mut tracker = Tracker::default();
            let mut out = BytesMut::new();
            for chunk in input.chunks(piece) {
                tracker.feed(chunk, &mut out);
            }
            assert!(tracker.violation().is_some());
            assert_eq!(tracker.refused_line(), line, "{piece}");
        }
    }
}

#[test]
fn trailer_lines_are_header_fields_within_hyper_s_count() {
    let body = |lines: usize| {
        let mut s =
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n".to_vec();
        for i in 0..lines {
            s.extend_from_slice(format!("T{i}: v\r\n").as_bytes());
        }
        s.extend_from_slice(b"\r\n");
        s
    };
    for (lines, want) in [
        (0, None),
        (1, None),
        (MAX_TRAILERS, None),
        (MAX_TRAILERS + 1, Some(Violation::BadChunk)),
    ] {
        let input = body(lines);
        for piece in [input.len(), 1] {
            let chunks: Vec<&[u8]> = input.chunks(piece).collect();
            let (out, got) = run(&chunks);
            assert_eq!(got, want, "{lines} trailer lines, pieces of {piece}");
            if want.is_none() {
                assert_eq!(out, input);
            }
        }
    }
}

#[test]
fn requests_and_body_bytes_are_counted_at_each_end() {
    let mut stream = GET.to_vec();
    stream.extend_from_slice(b"POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nworld");
    stream.extend_from_slice(b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;e\r\nhello\r\n2\r\n!!\r\n0\r\nT: 1\r\n\r\n");
    let last = b"POST /z HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    stream.extend_from_slice(last);
    let mut t = Tracker::default();
    let mut out = BytesMut::new();
    let mut ends = Vec::new();
    for (i, b) in stream.iter().enumerate() {
        let before = t.requests();
        t.feed(std::slice::from_ref(b), &mut out);
        if t.requests() > before {
            ends.push((i + 1, t.body_bytes()));
        }
    }
    let first = GET.len();
    let second = first + 44;
    assert_eq!(
        ends,
        [
            (first, 0),
            (second, 5),
            (stream.len() - last.len(), 12),
            (stream.len(), 12)
        ]
    );
    assert!(!t.is_tunnel() && t.violation().is_none());
    let mut c = Tracker::default();
    c.feed(
        b"CONNECT a:443 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        &mut BytesMut::new(),
    );
    assert!(c.is_tunnel());
    assert_eq!(c.requests(), 0);
}

#[test]
fn work_is_linear_however_the_bytes_arrive() {
    // Many small pipelined requests in one read: each head is held alone,
    // the rest never copied again (nor a frame per request on the stack).
    let one = b"A / HTTP/1.1\r\n\r\n";
    let stream = one.repeat(200_000);
    let mut t = Tracker::default();
    let mut out = BytesMut::new();
    t.feed(&stream, &mut out);
    assert_eq!(t.requests(), 200_000);
    assert_eq!(out.len(), stream.len());
    assert!(
        t.work() <= WORK_PER_BYTE * stream.len() as u64,
        "{}",
        t.work()
    );
    // Byte at a time, and every other kind of piece of the split tests.
    let mut stream: Vec<u8> = (0..9).flat_map(|k| piece(k, 40)).collect();
    stream.extend_from_slice(&piece(2, 3000));
    for size in [1, 2, 3, 7, 4096, stream.len()] {
        let mut t = Tracker::default();
        let mut out = BytesMut::new();
        for chunk in stream.chunks(size) {
            t.feed(chunk, &mut out);
        }
        assert!(
            t.work() <= WORK_PER_BYTE * (stream.len() as u64 + 1),
            "pieces of {size}: {} for {} bytes",
            t.work(),
            stream.len()
        );
    }
}
