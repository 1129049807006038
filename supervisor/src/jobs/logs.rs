//! Log capture: a job's stdout and stderr, each copied into its own file
//! under the ticket's `logs/`, capped in size. The pipes are always drained
//! to the end, so a chatty worker never blocks on a full pipe.

use std::path::PathBuf;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::task::JoinHandle;

/// Starts copying the child's stdout and stderr into their log files;
/// the tasks end when the pipes close.
pub fn capture(
    child: &mut Child,
    stdout_log: PathBuf,
    stderr_log: PathBuf,
    cap: u64,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![];
    if let Some(out) = child.stdout.take() {
        tasks.push(tokio::spawn(copy_capped(out, stdout_log, cap)));
    }
    if let Some(err) = child.stderr.take() {
        tasks.push(tokio::spawn(copy_capped(err, stderr_log, cap)));
    }
    tasks
}

/// Copies a stream into `path`, keeping at most `cap` bytes and draining the
/// rest so the writer never blocks on a full pipe.
pub async fn copy_capped(mut from: impl AsyncRead + Unpin, path: PathBuf, cap: u64) {
    let file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .await;
    let mut file = match file {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::error!("opening log {}: {e}", path.display());
            None
        }
    };
    let mut written: u64 = 0;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Some(f) = file.as_mut() else { continue };
        let room = cap.saturating_sub(written) as usize;
        let take = n.min(room);
        if take > 0 && f.write_all(&buf[..take]).await.is_err() {
            file = None;
            continue;
        }
        written += take as u64;
        if take < n {
            let note = format!("\n[gatehouse: log truncated at {cap} bytes]\n");
            let _ = f.write_all(note.as_bytes()).await;
            let _ = f.flush().await;
            file = None;
        }
    }
    if let Some(mut f) = file {
        let _ = f.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use tokio::io::AsyncWriteExt;

    use super::*;

    #[tokio::test]
    async fn under_the_cap_everything_is_kept_in_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        copy_capped(&b"hello\nworld\n"[..], path.clone(), 1024).await;
        assert_eq!(std::fs::read(&path).unwrap(), b"hello\nworld\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_log_is_appended_to_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        copy_capped(&b"one\n"[..], path.clone(), 1024).await;
        copy_capped(&b"two\n"[..], path.clone(), 1024).await;
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
    }

    #[tokio::test]
    async fn over_the_cap_the_log_is_cut_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        let input = vec![b'x'; 10_000];
        copy_capped(&input[..], path.clone(), 1000).await;
        let text = std::fs::read_to_string(&path).unwrap();
        let (kept, note) = text.split_at(1000);
        assert!(kept.bytes().all(|b| b == b'x'));
        assert_eq!(note, "\n[gatehouse: log truncated at 1000 bytes]\n");
    }

    #[tokio::test]
    async fn the_writer_is_drained_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        // A pipe far smaller than what is written: the writer finishes only
        // if the copy keeps reading after the cap.
        let (mut writer, reader) = tokio::io::duplex(64);
        let copy = tokio::spawn(copy_capped(reader, path.clone(), 100));
        let chunk = vec![b'y'; 1000];
        for _ in 0..100 {
            writer.write_all(&chunk).await.unwrap();
        }
        drop(writer);
        copy.await.unwrap();
        assert!(std::fs::read(&path).unwrap().len() < 200);
    }

    #[tokio::test]
    async fn an_unwritable_log_still_drains_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("out.log");
        let (mut writer, reader) = tokio::io::duplex(64);
        let copy = tokio::spawn(copy_capped(reader, path.clone(), 100));
        writer.write_all(&[b'z'; 10_000]).await.unwrap();
        drop(writer);
        copy.await.unwrap();
        assert!(!path.exists());
    }
}
