//! A client stream that fails with `TimedOut` once no byte has moved
//! either way for its idle limit: a connection an identity holds open and
//! silent (before a request, inside a tunnel, spliced) does not hold a
//! descriptor forever. Bytes in either direction count as activity, so a
//! long download or upload is never cut while it moves.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::deadline::Deadline;

pub(super) struct Idle<T> {
    inner: T,
    limit: Duration,
    /// The limit after the last byte that moved; moving it touches no
    /// timer ([`Deadline`]), so a busy connection does not make a trip
    /// through the runtime's timer wheel for every request.
    deadline: Deadline,
}

impl<T> Idle<T> {
    pub(super) fn new(inner: T, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            deadline: Deadline::new(Instant::now() + limit),
        }
    }

    fn touch(&mut self) {
        self.deadline.set(Instant::now() + self.limit);
    }

    /// Called when the inner stream is not ready: `Err` once idle too long.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.deadline.poll_passed(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection was idle too long",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Idle<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.check(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Idle<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.touch();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.check(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_stream_times_out_and_a_busy_one_does_not() {
        let ms = Duration::from_millis;
        let (mut client, server) = tokio::io::duplex(64);
        let mut idle = Idle::new(server, ms(400));
        // A byte every 250 ms keeps it alive well past the limit.
        for _ in 0..4 {
            tokio::time::sleep(ms(250)).await;
            client.write_all(b"x").await.unwrap();
            let mut one = [0u8; 1];
            idle.read_exact(&mut one).await.unwrap();
        }
        // Writes count too.
        tokio::time::sleep(ms(250)).await;
        idle.write_all(b"y").await.unwrap();
        tokio::time::sleep(ms(250)).await;
        // Then silence: the read fails at the limit since the write.
        let started = Instant::now();
        let mut one = [0u8; 1];
        let error = idle.read(&mut one).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(waited >= ms(100) && waited <= ms(400), "{waited:?}");
    }
}
