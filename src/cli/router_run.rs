//! `gatehouse router run`: the live router's process. It wires what the
//! router crate provides: the intake listeners (one processor deciding
//! their deliveries) and the live loop (jobs, inbox, events, replies).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use gatehouse_router::engine::Router;
use gatehouse_router::eval::RulesOnlyJudge;
use gatehouse_router::intake::{wall_clock_ms, Intake, ListenerConfig, PollConfig};
use gatehouse_router::live::{LiveLoop, RouterConfig};
use gatehouse_router::model::{ConfiguredJudge, ModelClient, ModelJudge};
use gatehouse_router::policy::Policy;
use gatehouse_router::store::Store;

use super::router::{Source, StopSignals, Sync};
use crate::logging::{self, LogFormat};

pub(super) fn run(
    config_path: &Path,
    sync: Sync,
    log_format: LogFormat,
) -> anyhow::Result<ExitCode> {
    logging::init(log_format);
    let config = RouterConfig::load(config_path)?;
    // Before any thread exists (Landlock binds the threads started after).
    let ports: Vec<u16> = [
        config.github.as_ref().map(|g| g.listen.port()),
        config
            .feishu
            .as_ref()
            .and_then(|f| f.listen.map(|l| l.port())),
        config.metrics.map(|m| m.port()),
    ]
    .into_iter()
    .flatten()
    .collect();
    crate::confine::router_network_logged(&ports).context("confining the router's network")?;
    if let Some(addr) = config.metrics {
        crate::metrics::serve(addr, gatehouse_router::metrics::render)?;
    }
    let policy = Policy::load(&config.policy)?;
    let mut listeners = Vec::new();
    let mut names = Vec::new();
    if let Some(g) = &config.github {
        let source = Source::Github(g.webhook_secret_files.clone());
        listeners.push((
            source.verifier().context("[github] webhook_secret_files")?,
            g.listen,
        ));
        names.push(("github", source.name()));
    }
    if let Some((f, listen)) = config
        .feishu
        .as_ref()
        .and_then(|f| f.listen.map(|l| (f, l)))
    {
        let source = Source::Feishu {
            app_id: f.app_id.clone(),
            encrypt_key_file: f.encrypt_key_file.clone(),
            token_file: f.verification_token_file.clone(),
        };
        listeners.push((source.verifier().context("[feishu]")?, listen));
        names.push(("feishu", source.name()));
    }
    let durability = sync.durability();
    let open_store = || {
        Store::open(&config.state, durability)
            .with_context(|| format!("cannot open the state {}", config.state.display()))
    };
    // Two connections, two writers: the intake's processor decides
    // deliveries, the loop acts on what is decided. The store is built for
    // that (ids and caches follow the other connection's commits).
    let stop = StopSignals::install()?;
    let now = wall_clock_ms();
    // The model judges only when configured (`[model] judge = true`);
    // otherwise the rules-only judge decides, as without a model.
    let judge = match &config.model {
        Some(m) if m.judge => ConfiguredJudge::Model(Box::new(
            ModelJudge::new(ModelClient::new(m.clone(), &config.proxy.ca_cert)?)
                .context("cannot start the model judge")?,
        )),
        _ => ConfiguredJudge::RulesOnly(RulesOnlyJudge),
    };
    let intake_router = Router::new(open_store()?, policy.clone(), judge, now)?;
    let loop_router = Router::new(open_store()?, policy, RulesOnlyJudge, now)?;
    let mut live = LiveLoop::start(loop_router, &config)?;
    let mut intake = Intake::start_many(
        intake_router,
        &config.state,
        durability,
        listeners,
        ListenerConfig::default(),
        Some(live.waker()),
    )?;
    if let Some(l) = config
        .feishu
        .as_ref()
        .and_then(|f| f.long_connection.as_ref().map(|l| (f, l)))
    {
        let (f, handoff) = l;
        let keys = gatehouse_router::intake::FeishuKeys::from_files(
            &f.app_id,
            f.encrypt_key_file.as_deref(),
            f.verification_token_file.as_deref(),
        )
        .context("[feishu]")?;
        intake.handoff(&config.state, durability, keys, handoff)?;
        tracing::info!(
            socket = %handoff.socket.display(),
            peer_uid = handoff.peer_uid,
            "taking Feishu events over from the long connection"
        );
    }
    if let Some(p) = &config.github_poll {
        let poll = PollConfig {
            interval_secs: p.interval_secs,
            repos: config.proxy.github_sockets.clone(),
            ca_cert: config.proxy.ca_cert.clone(),
        };
        intake.poll(&config.state, durability, poll)?;
        tracing::info!(
            repos = config.proxy.github_sockets.len(),
            interval_secs = p.interval_secs,
            "polling GitHub"
        );
    } else if config.github.is_none() && !config.proxy.github_sockets.is_empty() {
        tracing::warn!("GitHub repositories are in scope but neither [github] webhooks nor [github_poll] is configured: nothing from GitHub reaches the router");
    }
    if let (Some(r), Some(socket)) = (&config.github_recovery, &config.proxy.github_app_socket) {
        let recovery = gatehouse_router::intake::RecoveryConfig {
            interval_secs: r.interval_secs,
            socket: socket.clone(),
            ca_cert: config.proxy.ca_cert.clone(),
        };
        intake.recover(&config.state, durability, recovery)?;
        tracing::info!(
            interval_secs = r.interval_secs,
            "recovering failed GitHub webhooks"
        );
    }
    let listening: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .zip(intake.addrs())
        .map(|((key, _), addr)| ((*key).to_owned(), addr.to_string().into()))
        .collect();
    println!("{}", serde_json::json!({ "listening": listening }));
    std::io::stdout().flush()?;
    for ((_, name), addr) in names.iter().zip(intake.addrs()) {
        tracing::info!(%addr, source = name, "gatehouse router listening");
    }
    tracing::info!("gatehouse router running");
    stop.wait();
    tracing::info!("shutting down");
    intake.stop();
    live.stop();
    Ok(ExitCode::SUCCESS)
}
