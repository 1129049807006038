//! A client's connection to an identity socket, registered with the
//! runtime for reads only.
//!
//! tokio registers a unix stream for reads and writes, edge-triggered. A
//! unix socket's writer is woken with `EPOLLOUT` every time its peer reads
//! (the kernel's `unix_write_space` runs on every read that frees buffer
//! space), unlike TCP, which wakes a writer only after a write found the
//! buffer full. So every answer the client read came back to the proxy as
//! one more readiness event: one more `epoll_wait` return a request, for a
//! write nobody was waiting to make (traced: one `EPOLLOUT`-only event per
//! request in the latency phase).
//!
//! Here the socket is registered for reads only, and a write is made
//! straight away: almost every one fits in the socket's buffer. Only when a
//! write would block is a second descriptor of the socket registered for
//! writes, until writes go through at once again (many in a row). While
//! it is, a connection holds a third descriptor (the budget counts three:
//! [`crate::limits::Budget`]).
//!
//! The other end of such a socket has the same wakes the other way round:
//! a tokio client's socket registered for writes is woken every time the
//! proxy reads its request, while it waits for the answer (the proxy's
//! `recvfrom` runs that wake-up). So the bench's load generator connects
//! through this type too, as a client that polls for writes only when one
//! blocks (curl, git) does.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A unix stream registered for reads, written at once.
pub struct ClientSocket {
    /// The socket, registered for reads.
    socket: AsyncFd<UnixStream>,
    /// A second descriptor of it, registered for writes once a write
    /// would have blocked.
    writes: Option<AsyncFd<UnixStream>>,
    /// Writes that went through at once since one last had to wait.
    unblocked: u32,
}

/// Writes in a row that go through at once before the write registration
/// is dropped: a transfer the client reads more slowly than it arrives
/// blocks far more often than this and keeps it (no registering and
/// dropping on every buffer's worth), a keep-alive connection back to
/// small answers drops it.
const UNBLOCKED_WRITES_BEFORE_DROPPING: u32 = 64;

impl ClientSocket {
    /// Takes over a stream, accepted or connected (its runtime
    /// registration is dropped and the socket registered again, for reads
    /// only).
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<Self> {
        let stream = stream.into_std()?;
        Ok(Self {
            socket: register(stream, Interest::READABLE)?,
            writes: None,
            unblocked: 0,
        })
    }

    /// The connection's first byte, left in the socket for whoever reads
    /// it; `None` if the client closed first.
    pub(super) async fn peek_byte(&self) -> io::Result<Option<u8>> {
        let mut byte = [0u8; 1];
        loop {
            let mut ready = self.socket.readable().await?;
            let peeked = ready.try_io(|socket| {
                nix::sys::socket::recv(
                    socket.as_raw_fd(),
                    &mut byte,
                    nix::sys::socket::MsgFlags::MSG_PEEK,
                )
                .map_err(io::Error::from)
            });
            match peeked {
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(_)) => return Ok(Some(byte[0])),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes `data`: at once, and if that would block, again each time
    /// the socket's write registration says it can go. std writes a unix
    /// stream with `send(MSG_NOSIGNAL)`: a closed peer is an error, not a
    /// signal.
    fn poll_write_data(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let write = |mut socket: &UnixStream| socket.write(data);
        loop {
            match write(self.socket.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                done => {
                    // Writes go through again: back to reads only, so a
                    // keep-alive connection that once carried a large
                    // answer does not keep the wakes.
                    if self.writes.is_some() {
                        self.unblocked += 1;
                        if self.unblocked >= UNBLOCKED_WRITES_BEFORE_DROPPING {
                            self.writes = None;
                        }
                    }
                    return Poll::Ready(done);
                }
            }
        }
        self.unblocked = 0;
        let writes = match &mut self.writes {
            Some(writes) => writes,
            None => {
                // Registered after the write failed: if the peer read in
                // between, the registration reports the socket writable
                // at once (epoll checks readiness when a descriptor is
                // added), so no wake is lost.
                let second = self.socket.get_ref().try_clone()?;
                self.writes.insert(register(second, Interest::WRITABLE)?)
            }
        };
        loop {
            let mut ready = ready!(writes.poll_write_ready(cx))?;
            match ready.try_io(|socket| write(socket.get_ref())) {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(done) => return Poll::Ready(done),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Registers `socket` with the runtime for `interest`.
///
/// tokio deprecates its safe constructors because a `T: AsRawFd` could
/// name another descriptor later than it registered, or close it; the
/// replacement is `unsafe` with that as its contract, and this crate has no
/// unsafe code. A std `UnixStream` owned by the `AsyncFd`, never handed out
/// mutably, names one open descriptor for its life: the contract holds.
#[allow(deprecated)]
fn register(socket: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    AsyncFd::with_interest(socket, interest)
}

impl AsyncRead for ClientSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut ready = ready!(this.socket.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            match ready.try_io(|socket| {
                let mut socket: &UnixStream = socket.get_ref();
                socket.read(unfilled)
            }) {
                Ok(Ok(n)) => {
                    // A read that did not fill the buffer emptied the
                    // socket: wait for the next event rather than find
                    // that out with one more read (as tokio's own streams
                    // do; a close stays noted either way).
                    if n > 0 && n < room {
                        ready.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for ClientSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_data(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(Shutdown::Write))
    }
}

#[cfg(test)]
mod tests;
