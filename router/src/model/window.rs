//! The batching window: how long candidates wait for company before the
//! judge is called (pure; times are milliseconds the caller passes in).
//!
//! ```text
//! candidate arrives ─► Arrivals (recent arrival times)
//! each pass: flush(held arrivals, recent count, now, config)
//!   nothing held, window off (bound 0), batch full, oldest held ≥ bound ─► Now
//!   fewer than COMPANY_WINDOWS arrivals in the last COMPANY_WINDOWS bounds ─► Now
//!   otherwise ─► At(oldest + bound): wait for company, never longer
//! ```
//!
//! One call judges a batch for about the price of one candidate (the
//! model's fixed latency dominates), so waiting pays when company is
//! likely: when candidates have been arriving at one per bound or faster.
//! When they are rarer, a lone candidate is judged at once, as it would be
//! unbatched; and no candidate waits longer than the bound.

use std::collections::VecDeque;

/// The rate that makes waiting worth it: at least this many arrivals in
/// the last this-many bounds (one per bound on average).
pub const COMPANY_WINDOWS: u64 = 6;

/// The window's configuration (`[model] batch_window_ms`, `batch_max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowConfig {
    /// The longest a candidate waits for company; 0: never waits.
    pub bound_ms: u64,
    /// A batch this large is judged at once.
    pub batch_max: usize,
}

impl WindowConfig {
    /// Never waits: every pass judges what is pending (batching per turn).
    pub const OFF: Self = Self {
        bound_ms: 0,
        batch_max: usize::MAX,
    };

    /// How far back arrivals are counted.
    pub fn horizon_ms(&self) -> u64 {
        self.bound_ms.saturating_mul(COMPANY_WINDOWS)
    }
}

/// Whether the held candidates are judged now or wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Judge what is held (and decide everything pending) now.
    Now,
    /// Hold the candidates until this time (ms), unless the batch fills.
    At(u64),
}

/// When to judge the held candidates (pure). `held` are their arrival
/// times; `recent` how many candidates arrived within the horizon
/// ([`WindowConfig::horizon_ms`]) before `now`, the held ones included.
pub fn flush(held: &[u64], recent: usize, now: u64, config: &WindowConfig) -> Flush {
    let Some(oldest) = held.iter().copied().min() else {
        return Flush::Now;
    };
    if config.bound_ms == 0 || held.len() >= config.batch_max {
        return Flush::Now;
    }
    let deadline = oldest.saturating_add(config.bound_ms);
    if now >= deadline {
        return Flush::Now;
    }
    if (recent as u64) < COMPANY_WINDOWS {
        return Flush::Now;
    }
    Flush::At(deadline)
}

/// Recent candidate arrivals, each counted once (by a key that grows:
/// a delivery's sequence number), and the window over them.
#[derive(Debug, Clone)]
pub struct Window {
    config: WindowConfig,
    arrivals: VecDeque<u64>,
    last_key: Option<i64>,
}

impl Window {
    pub fn new(config: WindowConfig) -> Self {
        Self {
            config,
            arrivals: VecDeque::new(),
            last_key: None,
        }
    }

    pub fn config(&self) -> &WindowConfig {
        &self.config
    }

    /// Counts an arrival once: a key not above the last one counted is
    /// passed over (a held candidate is seen again on every pass).
    pub fn arrived(&mut self, key: i64, at: u64) {
        if self.last_key.is_some_and(|last| key <= last) {
            return;
        }
        self.last_key = Some(key);
        self.arrivals.push_back(at);
    }

    /// [`flush`] over the arrivals counted, forgetting those past the horizon.
    pub fn flush(&mut self, held: &[u64], now: u64) -> Flush {
        let since = now.saturating_sub(self.config.horizon_ms());
        while self.arrivals.front().is_some_and(|at| *at < since) {
            self.arrivals.pop_front();
        }
        flush(held, self.arrivals.len(), now, &self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: WindowConfig = WindowConfig {
        bound_ms: 10_000,
        batch_max: 4,
    };

    #[test]
    fn flush_table() {
        let off = WindowConfig::OFF;
        // (held arrivals, recent, now, config, expected)
        let cases: &[(&[u64], usize, u64, WindowConfig, Flush)] = &[
            // Nothing held: nothing to wait for.
            (&[], 50, 1_000, W, Flush::Now),
            // Window off: never waits, whatever the rate.
            (&[1_000], 50, 1_000, off, Flush::Now),
            // A lone candidate at a low rate is judged at once.
            (&[1_000], 1, 1_000, W, Flush::Now),
            (&[1_000], 5, 1_000, W, Flush::Now),
            // At one per bound or faster it waits, until the bound.
            (&[1_000], 6, 1_000, W, Flush::At(11_000)),
            (&[1_000, 4_000], 20, 4_000, W, Flush::At(11_000)),
            // The bound is counted from the oldest held, whatever the order.
            (&[4_000, 1_000], 20, 4_000, W, Flush::At(11_000)),
            // The bound reached: now.
            (&[1_000, 4_000], 20, 11_000, W, Flush::Now),
            (&[1_000], 20, 30_000, W, Flush::Now),
            // A full batch goes at once.
            (&[1_000, 2_000, 3_000, 3_500], 20, 3_500, W, Flush::Now),
            (&[1_000, 2_000, 3_000], 20, 3_500, W, Flush::At(11_000)),
            // Arrival times near the end of time do not overflow.
            (&[u64::MAX - 5], 20, u64::MAX - 5, W, Flush::At(u64::MAX)),
        ];
        for (held, recent, now, config, want) in cases {
            assert_eq!(
                flush(held, *recent, *now, config),
                *want,
                "held {held:?} recent {recent} now {now} {config:?}"
            );
        }
    }

    #[test]
    fn the_window_counts_each_arrival_once_within_the_horizon() {
        let mut w = Window::new(W);
        // Five arrivals, then the sixth: company is now likely.
        for (key, at) in [(1, 0), (2, 2_000), (3, 4_000), (4, 6_000), (5, 8_000)] {
            w.arrived(key, at);
        }
        assert_eq!(w.flush(&[8_000], 8_000), Flush::Now);
        // Seen again (held across passes): not counted twice.
        w.arrived(5, 8_000);
        w.arrived(3, 4_000);
        assert_eq!(w.flush(&[8_000], 8_500), Flush::Now);
        w.arrived(6, 9_000);
        assert_eq!(w.flush(&[9_000], 9_000), Flush::At(19_000));
        // Past the horizon (6 bounds) the old arrivals no longer count.
        assert_eq!(w.flush(&[], 70_000), Flush::Now);
        w.arrived(7, 70_000);
        assert_eq!(w.flush(&[70_000], 70_000), Flush::Now);
    }
}
