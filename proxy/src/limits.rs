//! What one identity may hold of the proxy, so that no worker can starve
//! the others or the admin API: open connections and requests in flight per
//! identity, how long a TLS handshake after `CONNECT` may take, and how long
//! a connection (or spliced tunnel) may sit idle. The config's `[limits]`
//! table sets them; the descriptor budget ([`Budget`]) caps them further by
//! what the process may open.

use std::time::Duration;

use serde::Deserialize;

/// The `[limits]` table; every key is optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Client connections one identity may hold open at once (plain,
    /// intercepted and spliced alike); more are closed at accept.
    pub connections_per_identity: usize,
    /// Requests of one identity the proxy works on at once; more are
    /// answered 429.
    pub requests_per_identity: usize,
    /// Seconds a client has to finish its TLS handshake after `CONNECT`.
    pub tls_handshake_secs: u64,
    /// Seconds a client connection or spliced tunnel may pass no byte
    /// either way before it is closed.
    pub idle_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections_per_identity: 256,
            requests_per_identity: 64,
            tls_handshake_secs: 10,
            idle_secs: 600,
        }
    }
}

impl Limits {
    /// Every limit must be at least 1: a 0 would refuse everything.
    pub fn check(&self) -> Result<(), String> {
        let zero = [
            (
                "connections_per_identity",
                self.connections_per_identity == 0,
            ),
            ("requests_per_identity", self.requests_per_identity == 0),
            ("tls_handshake_secs", self.tls_handshake_secs == 0),
            ("idle_secs", self.idle_secs == 0),
        ];
        match zero.iter().find(|(_, z)| *z) {
            Some((key, _)) => Err(format!("limits.{key} must be at least 1")),
            None => Ok(()),
        }
    }

    pub fn tls_handshake(&self) -> Duration {
        Duration::from_secs(self.tls_handshake_secs)
    }

    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_secs)
    }
}

/// Descriptors kept out of every identity's reach: the admin API and its
/// connections, listeners, the audit log, the runtime, the credential issuers' pool.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// How many client connections the descriptors allow (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Client connections of all identities together.
    pub connections: usize,
    /// Client connections of one identity.
    pub per_identity: usize,
    /// Idle upstream connections parked for the identities' next client
    /// connections, all identities together.
    pub parked: usize,
}

impl Budget {
    /// The budget for `descriptors` open files: [`RESERVED_DESCRIPTORS`]
    /// stay free; an eighth of the rest is for parked upstream connections
    /// (one each); a client connection may take three (the client's, a
    /// second of it while a write to the client waits, and its upstream's);
    /// and one identity gets at most a quarter of the connections, so three
    /// others (and the admin API) still find room.
    pub fn of(descriptors: u64, limits: &Limits) -> Self {
        let usable = descriptors.saturating_sub(RESERVED_DESCRIPTORS);
        let parked = usable / 8;
        let connections = usize::try_from((usable - parked) / 3)
            .unwrap_or(usize::MAX)
            .max(1);
        let per_identity = limits
            .connections_per_identity
            .min((connections / 4).max(1));
        Self {
            connections,
            per_identity,
            parked: usize::try_from(parked).unwrap_or(usize::MAX),
        }
    }
}

/// The soft `RLIMIT_NOFILE` in force (1024 if it cannot be read).
pub fn descriptor_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (a service manager's
/// default soft limit of 1024 is far below what the proxy may need) and
/// returns the soft limit in force.
pub fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::info!(from = soft, to = hard, "raised the open-file limit");
        return hard;
    }
    soft
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_splits_descriptors_between_identities() {
        let limits = Limits::default();
        // (descriptors, all connections, one identity's, parked)
        let cases = [
            (1024, 280, 70, 120),
            (1_048_576, 305_816, 256, 131_064),
            (160, 28, 7, 12),
            (64, 1, 1, 0),
            (0, 1, 1, 0),
        ];
        for (descriptors, connections, per_identity, parked) in cases {
            let budget = Budget::of(descriptors, &limits);
            if descriptors > RESERVED_DESCRIPTORS {
                let most = RESERVED_DESCRIPTORS as usize + 3 * budget.connections + budget.parked;
                assert!(most <= descriptors as usize, "{descriptors}: {most}");
            }
            assert_eq!(
                budget,
                Budget {
                    connections,
                    per_identity,
                    parked,
                },
                "{descriptors}"
            );
        }
        let few = Limits {
            connections_per_identity: 5,
            ..Limits::default()
        };
        assert_eq!(Budget::of(1024, &few).per_identity, 5);
    }

    #[test]
    fn limits_parse_with_defaults_and_refuse_zero_and_unknown_keys() {
        let parsed: Limits = toml::from_str("idle_secs = 5").unwrap();
        assert_eq!(parsed.idle(), Duration::from_secs(5));
        assert_eq!(parsed.requests_per_identity, 64);
        parsed.check().unwrap();
        assert!(toml::from_str::<Limits>("idle = 5").is_err());
        let zero: Limits = toml::from_str("requests_per_identity = 0").unwrap();
        assert!(zero.check().unwrap_err().contains("requests_per_identity"));
    }
}
