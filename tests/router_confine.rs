//! The router's confinement of its own network (`gatehouse::confine`), in a
//! process of its own: Landlock binds a process for good, so this test has
//! no libtest harness and no other test shares its process. After the
//! confinement, no TCP connect gets out (an address that answered a moment
//! before included, and from a thread started later), only the listener's
//! port can be bound, and unix sockets, the router's way to the proxy and
//! the job API, still work.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};

use gatehouse::confine::{router_network, Confinement};
use gatehouse_testkit::machine::Feature;
use gatehouse_testkit::skip::{available, Need};

fn main() {
    const TEST: &str = "router_confine";
    if !available(TEST, &[Need::Kernel(Feature::Landlock)]) {
        return;
    }
    let open = TcpListener::bind("127.0.0.1:0").unwrap();
    let reachable = open.local_addr().unwrap();
    // Controls, before: the address answers, and a port the test keeps free
    // for the listener can be bound.
    TcpStream::connect(reachable).expect("connect before the confinement");
    let listen_port = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let unix = UnixListener::bind(dir.path().join("proxy.sock")).unwrap();

    assert_eq!(router_network(&[listen_port]).unwrap(), Confinement::Full);

    let mut checks = 0;
    let refused = |what: &str, r: std::io::Result<TcpStream>| {
        let e = r.err().unwrap_or_else(|| panic!("{what}: connected"));
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{what}: {e}");
    };
    refused("the address that answered", TcpStream::connect(reachable));
    checks += 1;
    refused(
        "another port",
        TcpStream::connect(("127.0.0.1", listen_port)),
    );
    checks += 1;
    let from_a_thread = std::thread::spawn(move || TcpStream::connect(reachable))
        .join()
        .unwrap();
    refused("from a thread started after", from_a_thread);
    checks += 1;
    let listener = TcpListener::bind(("127.0.0.1", listen_port));
    assert!(listener.is_ok(), "the listener's own port: {listener:?}");
    checks += 1;
    let other = TcpListener::bind("127.0.0.1:0");
    assert_eq!(
        other.map(drop).unwrap_err().kind(),
        ErrorKind::PermissionDenied,
        "a port the router does not listen on"
    );
    checks += 1;
    UnixStream::connect(dir.path().join("proxy.sock")).expect("a unix socket still connects");
    drop(unix);
    checks += 1;
    println!("{TEST}: {checks} passed, 0 failed");
}
