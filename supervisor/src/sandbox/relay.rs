//! The relay: inside the sandbox's network namespace, 127.0.0.1:3128
//! forwards each TCP connection, byte for byte, to the proxy's unix socket
//! bound in at /run/gatehouse/proxy.sock. The proxy learns the ticket from
//! which socket the connection arrives on; the relay adds nothing. In
//! transparent mode ports 443 and 80 are forwarded the same way to the
//! identity's transparent socket, where the proxy reads the target from
//! the TLS server name or the Host header itself.
//!
//! The sandbox's pid 1 accepts in the same loop that reaps its children (see
//! `init::reap_until`), so a sandbox whose worker never connects starts no
//! thread at all; each accepted connection gets its own.

use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, MsgFlags};

/// Small stacks: a relay thread only copies bytes.
const STACK: usize = 64 * 1024;

/// A listening socket on `port`, non-blocking: pid 1 accepts only when
/// `poll` says a connection is waiting, and never blocks in `accept`.
/// Ports below 1024 need the init's capabilities in its own network
/// namespace, which it still holds when it listens.
pub(crate) fn listen(port: u16) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Accepts every connection waiting on `listener` and forwards each one in
/// a thread of its own.
pub(crate) fn accept_waiting(listener: &TcpListener, target: &Path) {
    // Accepted sockets are blocking (accept4 does not inherit O_NONBLOCK).
    while let Ok((conn, _)) = listener.accept() {
        let target = target.to_path_buf();
        let _ = thread::Builder::new()
            .name("relay".into())
            .stack_size(STACK)
            .spawn(move || forward(conn, &target));
    }
}

fn forward(tcp: TcpStream, target: &PathBuf) {
    let Ok(unix) = UnixStream::connect(target) else {
        // Nothing to say to the client: closing is the honest answer.
        return;
    };
    let (Ok(mut tcp_r), Ok(mut unix_w)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let upstream = thread::Builder::new().stack_size(STACK).spawn(move || {
        let _ = io::copy(&mut tcp_r, &mut unix_w);
        let _ = unix_w.shutdown(Shutdown::Write);
    });
    let (unix_r, mut tcp_w) = (unix, tcp);
    let _ = copy_answers(&unix_r, &mut tcp_w);
    let _ = tcp_w.shutdown(Shutdown::Write);
    if let Ok(h) = upstream {
        let _ = h.join();
    }
}

/// Copies what the proxy sends to the worker until the proxy closes.
///
/// It waits for input in `poll`, never in a blocking `read`. A unix
/// socket wakes everything waiting on it when its peer reads and frees
/// buffer space (the writers' wake-up, `EPOLLOUT`), and a thread asleep in
/// `read` is woken by that too, finds nothing and sleeps again: once for
/// every read the proxy makes of the worker's requests, with the wake-up
/// run in the proxy's own `recvfrom`. `poll` wakes only for the events it
/// asked for. Reads that find data go on without waiting, so a transfer
/// makes one `poll` each time the socket runs dry, not one a read.
fn copy_answers(from: &UnixStream, to: &mut TcpStream) -> io::Result<()> {
    let mut buf = [0u8; 8192];
    loop {
        match recv(from.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Ok(()),
            Ok(n) => to.write_all(&buf[..n])?,
            Err(Errno::EAGAIN) => {
                let mut fds = [PollFd::new(from.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
