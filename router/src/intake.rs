//! Live intake: platform deliveries become triggers, durably, exactly once.
//!
//! ```text
//! GitHub ──POST──► listener: head ─► body (≤ 25 MB) ─► signature ─► JSON ─► route ─► meaning
//!                     │                                  any refusal: 4xx, nothing stored
//!                     └─► DeliveryLog (own connection): insert unless the delivery id or
//!                         the meaning is stored ─► commit ─► 2xx ─► wake the processor
//! processor (thread): pending deliveries ─► github::map ─► Router::on_trigger_with
//!                     (decision + "delivery processed" in one transaction)
//! ```
//!
//! A Feishu listener is the same with [`feishu::open`] (signature,
//! decryption, token, 2.0 envelope) in place of the GitHub steps, and
//! [`feishu::map`] in the processor.
//!
//! The listener holds only verification secrets, never an API credential.
//! A delivery is acknowledged only once committed, and processed by a
//! transaction that also marks it processed, so after a crash (kill -9
//! included) every acknowledged delivery is processed once on restart.
//!
//! ```text
//! signature  X-Hub-Signature-256 over the raw body; several secrets (rotation)
//! mention    does GitHub Markdown mention the bot (code and quotes excluded)
//! github     route (event + action), meaning (dedup key), map (─► TriggerInput)
//! feishu     open (verify, decrypt, envelope, dedup keys), map (─► TriggerInput)
//!            longconn: the long connection's protocol (pbbp2 frames, endpoint
//!            answer, ping, acks, split payloads, reconnect delays); connect:
//!            the client (its own process, the proxy's user, the app secret)
//! handoff    the router's socket the long-connection client hands events to
//! listener   the HTTP listener: bounded body, connections and time
//! process    stored deliveries ─► engine, each marked in its decision's transaction
//! poll       GitHub's list endpoints ─► the deliveries webhooks would carry (pure)
//! poller     rounds of polling through the router's proxy identities
//! ```

pub mod feishu;
pub mod github;
pub mod handoff;
pub mod listener;
pub mod mention;
pub mod poll;
pub mod poller;
pub mod process;
pub mod recoverer;
pub mod recovery;
pub mod signature;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::engine::Router;
use crate::eval::Judge;
use crate::model::window::Window;
use crate::store::{DeliveryLog, Durability, StoreError};

pub use feishu::FeishuKeys;
pub use handoff::HandoffConfig;
pub use listener::ListenerConfig;
pub use poller::PollConfig;
pub use recoverer::RecoveryConfig;
pub use signature::WebhookSecrets;

/// What a listener verifies requests with, and so which source it serves.
#[derive(Debug)]
pub enum Verifier {
    Github(WebhookSecrets),
    Feishu(FeishuKeys),
}

impl From<WebhookSecrets> for Verifier {
    fn from(s: WebhookSecrets) -> Self {
        Verifier::Github(s)
    }
}

impl From<FeishuKeys> for Verifier {
    fn from(k: FeishuKeys) -> Self {
        Verifier::Feishu(k)
    }
}

/// Failure to start the intake.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// The state database could not be opened for the listener.
    #[error("cannot open the delivery log: {0}")]
    Store(#[from] StoreError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The hand-off socket could not be bound.
    #[error("cannot listen on the hand-off socket {}: {source}", path.display())]
    Handoff {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A thread or the runtime could not be started.
    #[error("cannot start the intake: {0}")]
    Start(std::io::Error),
}

/// How often the processor looks for pending deliveries without being woken
/// (deliveries stored by another process, or left by an earlier run).
const POLL: Duration = Duration::from_millis(500);

/// A running intake (GitHub webhooks or Feishu events, by its [`Verifier`]); [`Intake::stop`] or dropping it stops it.
pub struct Intake {
    /// Each listener's bound address, in the order given.
    addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    servers: Vec<std::thread::JoinHandle<()>>,
    processor: Option<std::thread::JoinHandle<()>>,
    /// Wakes the processor (listeners and the poller send on it).
    wake: std::sync::mpsc::SyncSender<()>,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intake")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch.
pub fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Intake {
    /// Binds `listen`, processes what earlier runs left pending, then serves.
    /// `state` is the database `router`'s store was opened on.
    pub fn start<J: Judge + Send + 'static>(
        router: Router<J>,
        state: &Path,
        durability: Durability,
        secrets: impl Into<Verifier>,
        listen: SocketAddr,
        config: ListenerConfig,
    ) -> Result<Self, IntakeError> {
        Self::start_many(
            router,
            state,
            durability,
            vec![(secrets.into(), listen)],
            config,
            None,
        )
    }

    /// One listener per (verifier, address), e.g. GitHub webhooks and
    /// Feishu events, sharing one processor (one writer of decisions).
    /// `decided` is notified after each batch that recorded a trigger (the
    /// live loop's waker, so that it acts at once).
    pub fn start_many<J: Judge + Send + 'static>(
        router: Router<J>,
        state: &Path,
        durability: Durability,
        listeners: Vec<(Verifier, SocketAddr)>,
        config: ListenerConfig,
        decided: Option<Arc<Notify>>,
    ) -> Result<Self, IntakeError> {
        let (wake, woken) = sync_channel(1);
        let (stop, stopped) = watch::channel(false);
        let mut intake = Self {
            addrs: Vec::new(),
            stop,
            servers: Vec::new(),
            processor: None,
            wake: wake.clone(),
        };
        // Bound before the processor starts: a listener that cannot bind
        // stops the start (dropping `intake` stops those already serving).
        for (verifier, listen) in listeners {
            let (log, std_listener, addr) = open(state, durability, listen)?;
            let server = spawn_server(
                std_listener,
                log,
                verifier,
                config.clone(),
                wake.clone(),
                stopped.clone(),
            )?;
            intake.addrs.push(addr);
            intake.servers.push(server);
        }
        intake.processor = Some(spawn_processor(router, woken, stopped, decided)?);
        Ok(intake)
    }

    /// Receives only: verifies, stores and acknowledges deliveries and
    /// decides none. A router started later on the same state (or running
    /// beside this on it) decides them.
    pub fn store_only(
        state: &Path,
        durability: Durability,
        secrets: impl Into<Verifier>,
        listen: SocketAddr,
        config: ListenerConfig,
    ) -> Result<Self, IntakeError> {
        let (log, std_listener, addr) = open(state, durability, listen)?;
        // Nobody to wake: sending fails and is ignored.
        let (wake, _) = sync_channel(1);
        let (stop, stopped) = watch::channel(false);
        let server = spawn_server(
            std_listener,
            log,
            secrets.into(),
            config,
            wake.clone(),
            stopped,
        )?;
        Ok(Self {
            addrs: vec![addr],
            stop,
            servers: vec![server],
            processor: None,
            wake,
        })
    }

    /// Also polls GitHub (`config`'s repositories, through the router's
    /// identities), storing what it finds as deliveries this intake's
    /// processor decides. Stopped with the intake.
    pub fn poll(
        &mut self,
        state: &Path,
        durability: Durability,
        config: PollConfig,
    ) -> Result<(), IntakeError> {
        let log = DeliveryLog::open(state, durability)?;
        let thread = poller::spawn(log, config, self.wake.clone(), self.stop.subscribe())?;
        self.servers.push(thread);
        Ok(())
    }

    /// Also takes Feishu events over from the long-connection client at
    /// `config.socket` (only from `config.peer_uid`), storing them as the
    /// HTTP listener does; this intake's processor decides them. Stopped
    /// with the intake.
    pub fn handoff(
        &mut self,
        state: &Path,
        durability: Durability,
        keys: FeishuKeys,
        config: &handoff::HandoffConfig,
    ) -> Result<(), IntakeError> {
        let log = DeliveryLog::open(state, durability)?;
        let thread = handoff::spawn(log, keys, config, self.wake.clone(), self.stop.subscribe())?;
        self.servers.push(thread);
        Ok(())
    }

    /// Also runs the webhook recovery loop (through the router's App
    /// identity), asking GitHub to redeliver failed deliveries; what comes
    /// back is stored by the listener and decided once. Stopped with the
    /// intake.
    pub fn recover(
        &mut self,
        state: &Path,
        durability: Durability,
        config: RecoveryConfig,
    ) -> Result<(), IntakeError> {
        let log = DeliveryLog::open(state, durability)?;
        let thread = recoverer::spawn(log, config, self.stop.subscribe())?;
        self.servers.push(thread);
        Ok(())
    }

    /// The first (or only) listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addrs
            .first()
            .copied()
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Every listener's address, in the order they were given.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, cuts open connections, lets the processor finish
    /// the delivery it is on, and waits for both.
    pub fn stop(&mut self) {
        let _ = self.stop.send(true);
        let servers = std::mem::take(&mut self.servers);
        for thread in servers.into_iter().chain(self.processor.take()) {
            if thread.join().is_err() {
                tracing::error!("an intake thread panicked");
            }
        }
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        self.stop();
    }
}

fn open(
    state: &Path,
    durability: Durability,
    listen: SocketAddr,
) -> Result<(DeliveryLog, std::net::TcpListener, SocketAddr), IntakeError> {
    let log = DeliveryLog::open(state, durability)?;
    let bind = |source| IntakeError::Bind {
        addr: listen,
        source,
    };
    let std_listener = std::net::TcpListener::bind(listen).map_err(bind)?;
    let addr = std_listener.local_addr().map_err(bind)?;
    std_listener.set_nonblocking(true).map_err(bind)?;
    Ok((log, std_listener, addr))
}

fn spawn_server(
    std_listener: std::net::TcpListener,
    log: DeliveryLog,
    verifier: Verifier,
    config: ListenerConfig,
    wake: std::sync::mpsc::SyncSender<()>,
    stopped: watch::Receiver<bool>,
) -> Result<std::thread::JoinHandle<()>, IntakeError> {
    let shared = Arc::new(listener::Listener {
        verifier,
        log: Arc::new(Mutex::new(log)),
        wake,
        config,
        clock: wall_clock_ms,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gatehouse-intake")
        .enable_all()
        .build()
        .map_err(IntakeError::Start)?;
    std::thread::Builder::new()
        .name("intake-server".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => listener::serve(l, shared, stopped).await,
                    Err(error) => tracing::error!(%error, "the webhook listener could not start"),
                }
            });
            runtime.shutdown_background();
        })
        .map_err(IntakeError::Start)
}

fn spawn_processor<J: Judge + Send + 'static>(
    mut router: Router<J>,
    woken: Receiver<()>,
    stopped: watch::Receiver<bool>,
    decided: Option<Arc<Notify>>,
) -> Result<std::thread::JoinHandle<()>, IntakeError> {
    std::thread::Builder::new()
        .name("intake-processor".into())
        .spawn(move || {
            let mut window = Window::new(router.judge_window());
            loop {
                let wait = processor_pass(&mut router, &mut window, decided.as_deref());
                if *stopped.borrow() {
                    return;
                }
                match woken.recv_timeout(wait) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        if *stopped.borrow() {
                            return;
                        }
                        std::thread::sleep(wait);
                    }
                }
            }
        })
        .map_err(IntakeError::Start)
}

/// One pass over the pending deliveries; returns how long to wait for the
/// next (until held candidates are due, at most [`POLL`]).
fn processor_pass<J: Judge>(
    router: &mut Router<J>,
    window: &mut Window,
    decided: Option<&Notify>,
) -> Duration {
    match process::process_with_window(router, wall_clock_ms, window) {
        Ok(pass) => {
            if pass.done.total() > 0 {
                tracing::debug!(done = ?pass.done, "deliveries processed");
            }
            if pass.done.triggers > 0 {
                if let Some(n) = decided {
                    n.notify_one();
                }
            }
            match pass.held_until {
                Some(until) => {
                    POLL.min(Duration::from_millis(until.saturating_sub(wall_clock_ms())))
                }
                None => POLL,
            }
        }
        // The delivery stays pending; the next pass retries it.
        Err(error) => {
            tracing::error!(%error, "processing deliveries failed");
            POLL
        }
    }
}
