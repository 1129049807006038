//! Body plumbing: one boxed body type for everything the proxy sends, a body
//! that replays an inspected prefix before streaming the rest, and a body
//! that redacts secrets and reports its size when it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, SizeHint};

use crate::redact::Redactor;

/// Any error a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every request and response the proxy produces.
pub type ProxyBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// A complete body.
pub fn full(data: impl Into<Bytes>) -> ProxyBody {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed()
}

/// An empty body.
pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

/// Boxes any body whose errors convert to [`BoxError`].
pub fn boxed<B>(body: B) -> ProxyBody
where
    B: Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed()
}

/// Sends `prefix` (already read for inspection) and then the rest of `body`.
pub struct PrefixedBody<B> {
    prefix: Option<Bytes>,
    rest: B,
}

impl<B> PrefixedBody<B> {
    pub fn new(prefix: Bytes, rest: B) -> Self {
        Self {
            prefix: (!prefix.is_empty()).then_some(prefix),
            rest,
        }
    }
}

impl<B> Body for PrefixedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut this.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }
}

/// Counts the bytes of a request body as they are forwarded.
pub struct CountingBody<B> {
    inner: B,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<B> CountingBody<B> {
    pub fn new(inner: B, count: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Self {
        Self { inner, count }
    }
}

impl<B> Body for CountingBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.count
                    .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Called once when a response body ends or is dropped, with the bytes sent
/// and whether it completed.
pub type OnEnd = Box<dyn FnOnce(u64, bool) + Send + Sync>;

/// Streams `inner` through a [`Redactor`], counting bytes.
pub struct RedactingBody<B> {
    inner: B,
    redactor: Redactor,
    sent: u64,
    done: bool,
    on_end: Option<OnEnd>,
}

impl<B> RedactingBody<B> {
    pub fn new(inner: B, redactor: Redactor, on_end: OnEnd) -> Self {
        Self {
            inner,
            redactor,
            sent: 0,
            done: false,
            on_end: Some(on_end),
        }
    }

    fn end(&mut self, completed: bool) {
        if let Some(on_end) = self.on_end.take() {
            on_end(self.sent, completed);
        }
    }
}

impl<B> Body for RedactingBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.redactor.push(&data);
                        if out.is_empty() {
                            continue;
                        }
                        this.sent += out.len() as u64;
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                    // Trailers are dropped: they are where auth-bearing
                    // metadata could hide and nothing the clients use needs them.
                    Err(_trailers) => continue,
                },
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    this.end(false);
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    this.done = true;
                    let tail = this.redactor.finish();
                    this.sent += tail.len() as u64;
                    this.end(true);
                    if tail.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(tail))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        // Redaction may change the length, so never promise one.
        SizeHint::default()
    }
}

impl<B> Drop for RedactingBody<B> {
    fn drop(&mut self) {
        self.end(false);
    }
}
