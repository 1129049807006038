//! The live loop's thread and runtime: started with the process, stopped
//! on SIGTERM after the step in hand is committed.

use tokio::sync::watch;

use super::config::RouterConfig;
use crate::engine::Router;
use crate::eval::Judge;

/// Failure to start the live loop.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The thread or its runtime could not be started.
    #[error("cannot start the live loop: {0}")]
    Start(std::io::Error),
}

/// The running live loop; [`LiveLoop::stop`] or dropping it stops it.
pub struct LiveLoop {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for LiveLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLoop").finish_non_exhaustive()
    }
}

impl LiveLoop {
    /// Starts the loop over `router` (its own connection to the state).
    pub fn start<J: Judge + Send + 'static>(
        router: Router<J>,
        config: &RouterConfig,
    ) -> Result<Self, LiveError> {
        let (stop, mut stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gatehouse-live")
            .enable_all()
            .build()
            .map_err(LiveError::Start)?;
        let _config = config.clone();
        let thread = std::thread::Builder::new()
            .name("live-loop".into())
            .spawn(move || {
                let _router = router;
                runtime.block_on(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                });
                runtime.shutdown_background();
            })
            .map_err(LiveError::Start)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the loop and waits for it.
    pub fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the live loop panicked");
            }
        }
    }
}

impl Drop for LiveLoop {
    fn drop(&mut self) {
        self.stop();
    }
}
