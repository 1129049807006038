//! The supervisor's metrics (Prometheus text, served by `gatehouse
//! supervisor` when its config has `[metrics] listen`): jobs by the state
//! they entered, how long a sandbox took to start, sandboxes live now.
//! No label names a job or a ticket.

use std::sync::LazyLock;
use std::time::Duration;

use gatehouse_types::metrics::{Counter, Gauge, Histogram, LATENCY_BUCKETS};

use super::state::JobState;

/// The supervisor's families.
pub struct SupervisorMetrics {
    pub jobs: Counter,
    pub sandbox_start_seconds: Histogram,
    pub live_sandboxes: Gauge,
}

/// The process's metrics.
pub static METRICS: LazyLock<SupervisorMetrics> = LazyLock::new(|| {
    SupervisorMetrics {
    jobs: Counter::new(
        "gatehouse_supervisor_jobs_total",
        "Jobs that entered each state (queued when created).",
        &["state"],
    ),
    sandbox_start_seconds: Histogram::new(
        "gatehouse_supervisor_sandbox_start_seconds",
        "From a job's start (work dir, control socket, proxy identity) to its sandbox's process running.",
        &[],
        LATENCY_BUCKETS,
    ),
    live_sandboxes: Gauge::new(
        "gatehouse_supervisor_live_sandboxes",
        "Sandboxes running now.",
        &[],
    ),
}
});

/// The exposition of every family.
pub fn render() -> String {
    let m = &*METRICS;
    let mut out = String::new();
    m.jobs.render(&mut out);
    m.sandbox_start_seconds.render(&mut out);
    m.live_sandboxes.render(&mut out);
    out
}

/// A job entered `state`.
pub fn entered(state: JobState) {
    METRICS.jobs.inc(&[state.as_str()]);
}

/// One live sandbox, counted from its start until the guard is dropped
/// (its end, however the job's task ends).
pub struct LiveSandbox(());

impl LiveSandbox {
    /// A sandbox is running; it took `took` to start.
    pub fn started(took: Duration) -> LiveSandbox {
        METRICS
            .sandbox_start_seconds
            .observe(&[], took.as_secs_f64());
        METRICS.live_sandboxes.add(&[], 1);
        LiveSandbox(())
    }
}

impl Drop for LiveSandbox {
    fn drop(&mut self) {
        METRICS.live_sandboxes.add(&[], -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_sandbox_counts_until_dropped() {
        let live = || {
            render()
                .lines()
                .find_map(|l| l.strip_prefix("gatehouse_supervisor_live_sandboxes "))
                .map(|v| v.parse::<i64>().unwrap())
                .unwrap_or(0)
        };
        let before = live();
        let a = LiveSandbox::started(Duration::from_millis(5));
        assert_eq!(live(), before + 1);
        drop(a);
        assert_eq!(live(), before);
        entered(JobState::Done);
        assert!(METRICS.jobs.get(&["done"]) >= 1);
    }
}
