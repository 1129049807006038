//! Backoff for accept loops: when accepting fails (out of descriptors,
//! EMFILE, is the usual cause) retrying at once spins a core and floods the
//! log. Each failure in a row doubles the pause, up to [`MAX`]; the failure
//! is logged once per [`LOG_EVERY`] with how many there were.

use std::time::{Duration, Instant};

const MIN: Duration = Duration::from_millis(5);
const MAX: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct AcceptBackoff {
    what: &'static str,
    pause: Duration,
    unlogged: u64,
    logged: Option<Instant>,
}

impl AcceptBackoff {
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            pause: MIN,
            unlogged: 0,
            logged: None,
        }
    }

    /// An accept succeeded: the next failure pauses briefly again.
    pub(crate) fn succeeded(&mut self) {
        self.pause = MIN;
    }

    /// An accept failed: log (rate-limited) and pause.
    pub(crate) async fn failed(&mut self, error: &std::io::Error) {
        self.unlogged += 1;
        if self.logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
            tracing::warn!(%error, failures = self.unlogged, listener = self.what, "accept failed; backing off");
            self.unlogged = 0;
            self.logged = Some(Instant::now());
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn failures_in_a_row_pause_longer_and_success_resets() {
        let mut backoff = AcceptBackoff::new("test");
        let error = std::io::Error::from_raw_os_error(24);
        for _ in 0..3 {
            backoff.failed(&error).await;
        }
        assert_eq!(backoff.pause, MIN * 8);
        for _ in 0..10 {
            backoff.pause = (backoff.pause * 2).min(MAX);
        }
        assert_eq!(backoff.pause, MAX);
        backoff.succeeded();
        assert_eq!(backoff.pause, MIN);
        // Logged once, the later failures counted for the next line.
        assert_eq!(backoff.unlogged, 2);
    }
}
