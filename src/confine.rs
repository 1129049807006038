//! The router's confinement of itself. It parses public input (webhooks)
//! and holds no credential; everything it asks of the world goes through
//! local sockets (its proxy identities, the job API). So once it knows its
//! listeners' ports it gives up TCP: Landlock then refuses every TCP
//! connect, and every bind but to those ports, to the process and to every
//! thread it starts afterwards. A bug or a crafted delivery that takes the
//! router over cannot then reach GitHub, Feishu, a model API or a cloud
//! metadata service around the proxy and its audit log. Abstract unix
//! sockets and signals to processes outside it are scoped away too.
//!
//! Landlock binds the calling thread and the threads it starts later, not
//! ones already running: call [`router_network`] before the first thread.

use landlock::{
    Access, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, ABI,
};

/// How far the kernel enforced the confinement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// TCP and the scopes, all of it.
    Full,
    /// Some of it (a kernel older than Landlock ABI 6).
    Partial,
    /// None (a kernel without Landlock, or with TCP rules unsupported).
    None,
}

/// Refuses this process every TCP connect and every TCP bind except to
/// `listen_ports` (0 for a port the kernel picks), from now on.
pub fn router_network(listen_ports: &[u16]) -> anyhow::Result<Confinement> {
    let status =
        Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessNet::from_all(ABI::V4))?
            .scope(Scope::from_all(ABI::V6))?
            .create()?
            .add_rules(listen_ports.iter().map(|port| {
                Ok::<_, landlock::RulesetError>(NetPort::new(*port, AccessNet::BindTcp))
            }))?
            .restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Confinement::Full,
        RulesetStatus::PartiallyEnforced => Confinement::Partial,
        RulesetStatus::NotEnforced => Confinement::None,
    })
}

/// Confines the router's network, saying on its log how far it went.
pub fn router_network_logged(listen_ports: &[u16]) -> anyhow::Result<()> {
    match router_network(listen_ports)? {
        Confinement::Full => tracing::info!(
            ?listen_ports,
            "the router's network is confined: no TCP connect, no TCP bind but its listeners"
        ),
        Confinement::Partial => tracing::warn!(
            ?listen_ports,
            "the router's network is confined only in part: this kernel's Landlock lacks some scopes"
        ),
        Confinement::None => tracing::warn!(
            "the router's network is NOT confined: this kernel's Landlock cannot restrict TCP \
             (Linux 6.7 or later can); the router still reaches the world only through the proxy \
             by its own code"
        ),
    }
    Ok(())
}
