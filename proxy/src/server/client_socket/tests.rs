use std::os::fd::RawFd;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const EPOLLIN: u32 = 0x1;
const EPOLLOUT: u32 = 0x4;

/// The event masks the process's epoll instances hold for descriptor
/// `fd`, from `/proc/self/fdinfo` of each `anon_inode:[eventpoll]`.
/// The runtime holds its epoll instance under two descriptors (a clone of
/// its registry), so a registration is counted once per distinct line.
fn epoll_masks(fd: RawFd) -> Vec<u32> {
    let mut seen = std::collections::BTreeSet::new();
    let mut masks = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let is_epoll = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy() == "anon_inode:[eventpoll]");
        if !is_epoll {
            continue;
        }
        let info = entry.file_name();
        let Ok(text) =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", info.to_string_lossy()))
        else {
            continue;
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("tfd:") {
                continue;
            }
            let target: RawFd = words.next().unwrap().parse().unwrap();
            assert_eq!(words.next(), Some("events:"), "{line}");
            let mask = u32::from_str_radix(words.next().unwrap(), 16).unwrap();
            if target == fd && seen.insert(line.to_string()) {
                masks.push(mask);
            }
        }
    }
    masks
}

/// Our end as a [`ClientSocket`], and the client's as tokio has it.
fn pair() -> (ClientSocket, tokio::net::UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    for end in [&ours, &theirs] {
        end.set_nonblocking(true).unwrap();
    }
    let ours = ClientSocket::new(tokio::net::UnixStream::from_std(ours).unwrap()).unwrap();
    (ours, tokio::net::UnixStream::from_std(theirs).unwrap())
}

#[tokio::test]
async fn the_socket_is_registered_for_reads_and_for_writes_only_once_a_write_blocks() {
    let (mut ours, mut theirs) = pair();
    let fd = ours.socket.as_raw_fd();
    let masks = epoll_masks(fd);
    assert_eq!(masks.len(), 1, "registered once: {masks:x?}");
    assert_ne!(masks[0] & EPOLLIN, 0, "{:x}", masks[0]);
    assert_eq!(
        masks[0] & EPOLLOUT,
        0,
        "registered for writes: {:x}",
        masks[0]
    );

    // Writes that fit the buffer, read by the client: still reads only.
    for _ in 0..10 {
        ours.write_all(b"answer").await.unwrap();
        let mut got = [0u8; 6];
        theirs.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer");
    }
    assert!(ours.writes.is_none());
    assert_eq!(epoll_masks(fd).len(), 1);

    // Written until a write would block (nothing reads meanwhile): then a
    // second descriptor is registered, for writes.
    let big = vec![7u8; 4 << 20];
    let mut written = 0;
    let mut cx = Context::from_waker(std::task::Waker::noop());
    while let Poll::Ready(n) = Pin::new(&mut ours).poll_write(&mut cx, &big[written..]) {
        written += n.unwrap();
        assert!(
            written < big.len(),
            "4 MiB went into the socket's buffer unread"
        );
    }
    let second_fd = ours.writes.as_ref().expect("a write blocked").as_raw_fd();
    let second = epoll_masks(second_fd);
    assert_eq!(second.len(), 1, "{second:x?}");
    assert_ne!(second[0] & EPOLLOUT, 0, "{:x}", second[0]);
    assert_eq!(epoll_masks(fd), masks, "the read registration is unchanged");

    // The client reads it all; then writes that go through at once, many
    // in a row, drop the write registration.
    let mut got = vec![0u8; written];
    theirs.read_exact(&mut got).await.unwrap();
    assert!(got == big[..written], "the answer arrived changed");
    for _ in 1..UNBLOCKED_WRITES_BEFORE_DROPPING {
        ours.write_all(b"small").await.unwrap();
    }
    assert!(ours.writes.is_some(), "dropped before the writes in a row");
    ours.write_all(b"small").await.unwrap();
    assert!(ours.writes.is_none());
}

#[tokio::test]
async fn both_directions_carry_every_byte_in_order_while_the_client_reads_slowly() {
    let (ours, theirs) = pair();
    let pattern = |i: usize| (i % 251) as u8;
    const LEN: usize = 3 << 20;
    let (mut our_read, mut our_write) = tokio::io::split(ours);
    let (mut their_read, mut their_write) = theirs.into_split();
    let sender = tokio::spawn(async move {
        let data: Vec<u8> = (0..LEN).map(pattern).collect();
        for piece in data.chunks(100_000) {
            our_write.write_all(piece).await.unwrap();
        }
        our_write.shutdown().await.unwrap();
    });
    let slow_reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = their_read.read(&mut buf).await.unwrap();
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    });
    let upload: Vec<u8> = (0..LEN).map(|i| pattern(i + 1)).collect();
    let expected = upload.clone();
    let uploader = tokio::spawn(async move {
        their_write.write_all(&upload).await.unwrap();
        their_write.shutdown().await.unwrap();
    });
    let mut received = Vec::new();
    our_read.read_to_end(&mut received).await.unwrap();
    assert!(received == expected, "the upload arrived changed");
    sender.await.unwrap();
    uploader.await.unwrap();
    let got = slow_reader.await.unwrap();
    assert_eq!(
        got.len(),
        LEN,
        "the client got all, then the end of the stream"
    );
    assert!(
        got.iter().enumerate().all(|(i, b)| *b == pattern(i)),
        "the download arrived changed"
    );
}

#[tokio::test]
async fn the_first_byte_is_peeked_and_left_for_the_reader() {
    let (mut ours, mut theirs) = pair();
    theirs.write_all(b"\x16hello").await.unwrap();
    assert_eq!(ours.peek_byte().await.unwrap(), Some(0x16));
    let mut got = [0u8; 6];
    ours.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"\x16hello");
    drop(theirs);
    assert_eq!(
        ours.peek_byte().await.unwrap(),
        None,
        "a closed client has no first byte"
    );
}

#[tokio::test]
async fn a_write_to_a_client_that_went_away_fails_and_does_not_kill_the_process() {
    let (mut ours, theirs) = pair();
    drop(theirs);
    let error = ours.write_all(b"late answer").await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe, "{error}");
}
