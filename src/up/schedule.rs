//! The pure parts of watching the three processes: their start and stop
//! order, and the restart backoff.

use std::time::Duration;

/// One of the processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    Proxy,
    Supervisor,
    Router,
    /// `gatehouse intake feishu-connect`, when `[feishu] long_connection`.
    FeishuConnect,
}

impl Part {
    /// The three parts every deployment runs, in start order: each needs
    /// the sockets of the one before (the supervisor the proxy's admin
    /// socket, the router the job API and its proxy identities).
    pub const START_ORDER: [Part; 3] = [Part::Proxy, Part::Supervisor, Part::Router];

    /// Every part in start order: the long-connection client last, as it
    /// hands events to the router's socket.
    pub const ALL: [Part; 4] = [
        Part::Proxy,
        Part::Supervisor,
        Part::Router,
        Part::FeishuConnect,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::Proxy => "proxy",
            Part::Supervisor => "supervisor",
            Part::Router => "router",
            Part::FeishuConnect => "feishu-connect",
        }
    }
}

/// The parts of `parts` in start order.
pub fn start_order(parts: &[Part]) -> Vec<Part> {
    Part::ALL
        .into_iter()
        .filter(|p| parts.contains(p))
        .collect()
}

/// The reverse: a part stops before what it depends on, so the router
/// stops sending jobs before the supervisor cancels them, and the
/// supervisor revokes its identities before the proxy goes.
pub fn stop_order(parts: &[Part]) -> Vec<Part> {
    let mut order = start_order(parts);
    order.reverse();
    order
}

/// Restart delays: `base`, doubling per consecutive failure, at most `cap`;
/// a process that ran `healthy` or longer before it died starts the count
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub healthy: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
            healthy: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The consecutive-failure count after a process that had `previous`
    /// failures before it died having run for `ran_for`.
    pub fn failures_after(&self, previous: u32, ran_for: Duration) -> u32 {
        if ran_for >= self.healthy {
            1
        } else {
            previous.saturating_add(1)
        }
    }

    /// How long to wait before the restart that follows `failures`
    /// consecutive failures (at least 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders() {
        use Part::*;
        let cases: [(&[Part], &[Part], &[Part]); 5] = [
            (
                &[FeishuConnect, Router, Proxy, Supervisor],
                &[Proxy, Supervisor, Router, FeishuConnect],
                &[FeishuConnect, Router, Supervisor, Proxy],
            ),
            (
                &[Router, Proxy, Supervisor],
                &[Proxy, Supervisor, Router],
                &[Router, Supervisor, Proxy],
            ),
            (
                &[Supervisor, Proxy],
                &[Proxy, Supervisor],
                &[Supervisor, Proxy],
            ),
            (&[Router], &[Router], &[Router]),
            (&[], &[], &[]),
        ];
        for (given, start, stop) in cases {
            assert_eq!(start_order(given), start, "{given:?}");
            assert_eq!(stop_order(given), stop, "{given:?}");
        }
    }

    #[test]
    fn backoff_schedule() {
        let b = Backoff::default();
        let ms = |n| Duration::from_millis(n);
        for (failures, want) in [
            (0, ms(500)),
            (1, ms(500)),
            (2, ms(1000)),
            (3, ms(2000)),
            (4, ms(4000)),
            (6, ms(16_000)),
            (7, ms(30_000)),
            (40, ms(30_000)),
            (u32::MAX, ms(30_000)),
        ] {
            assert_eq!(b.delay(failures), want, "{failures}");
        }
    }

    #[test]
    fn a_healthy_minute_resets_the_count() {
        let b = Backoff::default();
        let s = Duration::from_secs;
        for (previous, ran_for, want) in [
            (0, s(1), 1),
            (3, s(1), 4),
            (3, s(59), 4),
            (3, s(60), 1),
            (9, s(3600), 1),
            (u32::MAX, s(0), u32::MAX),
        ] {
            assert_eq!(
                b.failures_after(previous, ran_for),
                want,
                "{previous} {ran_for:?}"
            );
        }
    }
}
