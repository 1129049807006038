//! The proxy's body wrappers stacked as a forwarded answer and a replayed
//! request use them: an inspected prefix replayed before the rest
//! (`PrefixedBody`), counted (`CountingBody`), and streamed through the
//! redactor (`RedactingBody`), over frames of any sizes, with trailers or an
//! error where the input says. Besides "no panic": the bytes out are the
//! whole body redacted at once; the count is every byte that passed; the
//! end callback runs exactly once, with the bytes sent and whether the body
//! completed (an error or a drop before the end is not completion); after
//! the end nothing more comes; and the work stays linear in the bytes.
#![no_main]

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use gatehouse_proxy::body::{CountingBody, PrefixedBody, RedactingBody};
use gatehouse_proxy::redact::{redact_all, Redactor, Secrets};
use http::HeaderMap;
use hyper::body::{Body, Frame};
use libfuzzer_sys::fuzz_target;

/// What the upstream body yields, frame by frame.
enum Item {
    Data(Bytes),
    Trailers,
    Error,
    Pending,
}

struct Scripted {
    items: VecDeque<Item>,
}

impl Body for Scripted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut().items.pop_front() {
            None => Poll::Ready(None),
            Some(Item::Data(d)) => Poll::Ready(Some(Ok(Frame::data(d)))),
            Some(Item::Trailers) => Poll::Ready(Some(Ok(Frame::trailers(HeaderMap::new())))),
            Some(Item::Error) => Poll::Ready(Some(Err(std::io::Error::other("upstream reset")))),
            Some(Item::Pending) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // [secrets count][prefix len][drop after n polls][secret \0]... then frames:
    // each [tag][len] + len bytes: tag%8 0..4 data, 5 trailers, 6 error, 7 pending.
    let [count, prefix_len, drop_after, rest @ ..] = data else {
        return;
    };
    let mut fields = rest.splitn(usize::from(*count % 6) + 1, |&b| b == 0);
    let secrets: Vec<Vec<u8>> = fields
        .by_ref()
        .take(usize::from(*count % 6))
        .map(<[u8]>::to_vec)
        .collect();
    let mut tail = fields.next().unwrap_or_default();
    let prefix_len = usize::from(*prefix_len).min(tail.len());
    let prefix = Bytes::copy_from_slice(&tail[..prefix_len]);
    tail = &tail[prefix_len..];
    let mut items = VecDeque::new();
    let mut sent_in = prefix.to_vec();
    let mut failed = false;
    while let [tag, len, more @ ..] = tail {
        let len = usize::from(*len).min(more.len());
        let (chunk, after) = more.split_at(len);
        tail = after;
        match tag % 8 {
            5 => items.push_back(Item::Trailers),
            6 => {
                items.push_back(Item::Error);
                failed = true;
                break;
            }
            7 => items.push_back(Item::Pending),
            _ => {
                sent_in.extend_from_slice(chunk);
                items.push_back(Item::Data(Bytes::copy_from_slice(chunk)));
            }
        }
    }

    let n_items = items.len();
    let counted = Arc::new(AtomicU64::new(0));
    let ends: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
    let record = ends.clone();
    let mut body = RedactingBody::new(
        CountingBody::new(
            PrefixedBody::new(prefix, Scripted { items }),
            counted.clone(),
        ),
        Redactor::new(secrets.clone()),
        Box::new(move |sent, completed| record.lock().unwrap().push((sent, completed))),
    );
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut errored = false;
    let mut ended = false;
    // A client that goes away early drops the body after `drop_after`
    // polls (255: never); a whole body takes one poll per item, the prefix,
    // the redactor's tail and the end.
    let limit = if *drop_after == 255 {
        n_items + 4
    } else {
        usize::from(*drop_after).min(n_items + 4)
    };
    for _ in 0..limit {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Pending => {}
            Poll::Ready(None) => {
                ended = true;
                break;
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(d) = frame.into_data() {
                    out.extend_from_slice(&d);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                errored = true;
                break;
            }
        }
    }
    if *drop_after == 255 {
        assert!(
            ended || errored,
            "a whole body did not end in {limit} polls"
        );
    }
    if ended || errored {
        // Nothing comes after the end.
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        assert!(body.is_end_stream());
    }
    drop(body);
    let ends = ends.lock().unwrap().clone();
    assert_eq!(ends.len(), 1, "the end callback ran {} times", ends.len());
    let (sent, completed) = ends[0];
    assert_eq!(sent, out.len() as u64, "the bytes sent, as reported");
    if ended {
        assert!(completed, "the stream ended but did not complete");
    }
    assert!(
        !(completed && (errored || failed)),
        "an errored body completed"
    );
    assert!(counted.load(Ordering::Relaxed) <= sent_in.len() as u64);
    if completed {
        assert_eq!(counted.load(Ordering::Relaxed), sent_in.len() as u64);
        let whole = redact_all(&Secrets::new(secrets), &sent_in);
        assert_eq!(out, whole, "the wrappers changed what redaction gives");
    }
});
