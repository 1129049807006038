//! What one job may take of the supervisor through its control socket, so
//! that a worker flooding it cannot stall the job API or another job:
//! connections held open at once (more are closed at accept), how long a
//! request may take to arrive, how fast it may write (reports and inbox
//! acknowledgements share one token bucket: a burst, then a steady rate)
//! and how much report state it may leave behind in all. The decisions are
//! plain functions over data; the control server applies them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The control socket limits, from the config's `[limits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlLimits {
    /// Connections one job may hold open on its control socket.
    pub connections_per_job: usize,
    /// Seconds a request's head, and then its body, have to arrive; a
    /// kept-alive connection that sends nothing for this long is closed.
    pub read_secs: u64,
    /// Writes (reports and acknowledgements) a job may make at once.
    pub write_burst: u32,
    /// Writes per minute once the burst is spent.
    pub writes_per_minute: u32,
    /// Reports a job may store in all.
    pub reports_per_job: u32,
    /// Bytes of stored reports (their JSON) a job may leave in all.
    pub report_bytes_per_job: u64,
}

impl Default for ControlLimits {
    fn default() -> Self {
        Self {
            connections_per_job: 8,
            read_secs: 10,
            write_burst: 30,
            writes_per_minute: 60,
            reports_per_job: 500,
            report_bytes_per_job: 1 << 20,
        }
    }
}

impl ControlLimits {
    pub fn read_timeout(&self) -> Duration {
        Duration::from_secs(self.read_secs)
    }
}

/// Descriptors kept out of the control sockets' reach: the job API and
/// its connections, the store, each running job's pipes and sandbox.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// How many control connections the process's descriptors allow (pure):
/// half of what is left after [`RESERVED_DESCRIPTORS`] for all jobs, and
/// one job at most a quarter of that (and never more than its configured
/// cap), so a flooding job leaves room for the others and the job API.
pub fn connection_budget(descriptors: u64, per_job: usize) -> (usize, usize) {
    let usable = descriptors.saturating_sub(RESERVED_DESCRIPTORS) / 2;
    let all = usize::try_from(usable).unwrap_or(usize::MAX).max(1);
    (all, per_job.min((all / 4).max(1)))
}

/// A count of open connections with a cap; [`ConnectionGate::enter`]
/// admits one while below it.
#[derive(Debug)]
pub struct ConnectionGate {
    open: AtomicUsize,
    max: usize,
}

/// An admitted connection; leaving the gate when dropped.
#[derive(Debug)]
pub struct Admitted(Arc<ConnectionGate>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnectionGate {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            open: AtomicUsize::new(0),
            max,
        })
    }

    /// Admits one more connection unless `max` are open.
    pub fn enter(self: &Arc<Self>) -> Option<Admitted> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Admitted(self.clone()))
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

/// Why a write was refused (answered 429).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Too fast: the burst is spent; try again after this many seconds.
    TooFast { retry_after_secs: u64 },
    /// The job's report budget is spent for good.
    Spent { what: &'static str, limit: u64 },
}

impl Refusal {
    pub fn message(&self) -> String {
        match self {
            Refusal::TooFast { retry_after_secs } => format!(
                "too many reports and acknowledgements on this control socket; \
                 try again in {retry_after_secs} s"
            ),
            Refusal::Spent { what, limit } => {
                format!("this job has stored its {limit} {what} allowed; no more reports are taken")
            }
        }
    }
}

/// One job's account: its token bucket and the report state it stored.
/// Times are the caller's clock as a [`Duration`] since any fixed start.
#[derive(Debug, Clone)]
pub struct JobBudget {
    limits: ControlLimits,
    /// Tokens in thousandths, at most `write_burst * 1000`.
    milli_tokens: u64,
    at: Duration,
    reports: u32,
    report_bytes: u64,
}

impl JobBudget {
    pub fn new(limits: ControlLimits, now: Duration) -> Self {
        Self {
            limits,
            milli_tokens: u64::from(limits.write_burst) * 1000,
            at: now,
            reports: 0,
            report_bytes: 0,
        }
    }

    fn refill(&mut self, now: Duration) {
        let elapsed_ms = u64::try_from(now.saturating_sub(self.at).as_millis()).unwrap_or(u64::MAX);
        // writes_per_minute tokens per 60 000 ms: that many thousandths per ms / 60.
        let gained = elapsed_ms.saturating_mul(u64::from(self.limits.writes_per_minute)) / 60;
        let cap = u64::from(self.limits.write_burst) * 1000;
        self.milli_tokens = self.milli_tokens.saturating_add(gained).min(cap);
        if now > self.at {
            self.at = now;
        }
    }

    /// Takes one write from the bucket (a report or an acknowledgement).
    pub fn write(&mut self, now: Duration) -> Result<(), Refusal> {
        self.refill(now);
        if self.milli_tokens >= 1000 {
            self.milli_tokens -= 1000;
            return Ok(());
        }
        let missing = 1000 - self.milli_tokens;
        let per_minute = u64::from(self.limits.writes_per_minute.max(1));
        // ms until the missing thousandths are in: missing * 60 / per_minute.
        let wait_ms = (missing * 60).div_ceil(per_minute);
        Err(Refusal::TooFast {
            retry_after_secs: wait_ms.div_ceil(1000).max(1),
        })
    }

    /// Whether a report of `bytes` still fits the job's budget.
    pub fn report_fits(&self, bytes: u64) -> Result<(), Refusal> {
        if self.reports >= self.limits.reports_per_job {
            return Err(Refusal::Spent {
                what: "reports",
                limit: u64::from(self.limits.reports_per_job),
            });
        }
        if self.report_bytes.saturating_add(bytes) > self.limits.report_bytes_per_job {
            return Err(Refusal::Spent {
                what: "bytes of reports",
                limit: self.limits.report_bytes_per_job,
            });
        }
        Ok(())
    }

    /// A report of `bytes` was stored.
    pub fn stored(&mut self, bytes: u64) {
        self.reports = self.reports.saturating_add(1);
        self.report_bytes = self.report_bytes.saturating_add(bytes);
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (a service manager's
/// default soft limit of 1024 is far below what many jobs may need) and
/// returns the soft limit in force (1024 if it cannot be read).
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_budget_splits_descriptors_between_jobs() {
        // (descriptors, per-job cap) -> (all, one job's)
        let cases = [
            ((1024, 8), (384, 8)),
            ((1_048_576, 8), (524_160, 8)),
            ((512, 8), (128, 8)),
            ((300, 8), (22, 5)),
            ((256, 8), (1, 1)),
            ((0, 8), (1, 1)),
        ];
        for ((descriptors, per_job), want) in cases {
            assert_eq!(
                connection_budget(descriptors, per_job),
                want,
                "{descriptors}"
            );
        }
    }

    #[test]
    fn a_gate_admits_up_to_its_cap_and_a_dropped_admission_leaves() {
        let gate = ConnectionGate::new(2);
        let a = gate.enter().unwrap();
        let _b = gate.enter().unwrap();
        assert!(gate.enter().is_none());
        assert_eq!(gate.open(), 2);
        drop(a);
        assert!(gate.enter().is_some());
        assert_eq!(gate.open(), 1);
    }

    #[test]
    fn the_bucket_allows_a_burst_then_the_steady_rate() {
        let limits = ControlLimits {
            write_burst: 3,
            writes_per_minute: 60,
            ..ControlLimits::default()
        };
        let mut b = JobBudget::new(limits, ms(0));
        for _ in 0..3 {
            assert_eq!(b.write(ms(0)), Ok(()));
        }
        assert_eq!(
            b.write(ms(0)),
            Err(Refusal::TooFast {
                retry_after_secs: 1
            })
        );
        // Half a token later, still refused; a whole one later, one write.
        assert!(b.write(ms(500)).is_err());
        assert_eq!(b.write(ms(1000)), Ok(()));
        assert!(b.write(ms(1000)).is_err());
        // A long pause refills only up to the burst.
        for _ in 0..3 {
            assert_eq!(b.write(ms(3_600_000)), Ok(()));
        }
        assert!(b.write(ms(3_600_000)).is_err());
        // A clock going backwards refills nothing.
        assert!(b.write(ms(10)).is_err());
    }

    #[test]
    fn a_slow_rate_asks_for_a_longer_wait() {
        let limits = ControlLimits {
            write_burst: 1,
            writes_per_minute: 2,
            ..ControlLimits::default()
        };
        let mut b = JobBudget::new(limits, ms(0));
        assert_eq!(b.write(ms(0)), Ok(()));
        assert_eq!(
            b.write(ms(0)),
            Err(Refusal::TooFast {
                retry_after_secs: 30
            })
        );
    }

    #[test]
    fn the_report_budget_counts_reports_and_bytes() {
        let limits = ControlLimits {
            reports_per_job: 3,
            report_bytes_per_job: 100,
            ..ControlLimits::default()
        };
        let mut b = JobBudget::new(limits, ms(0));
        assert_eq!(b.report_fits(40), Ok(()));
        b.stored(40);
        assert_eq!(b.report_fits(60), Ok(()));
        assert_eq!(
            b.report_fits(61),
            Err(Refusal::Spent {
                what: "bytes of reports",
                limit: 100
            })
        );
        b.stored(10);
        b.stored(10);
        assert_eq!(
            b.report_fits(1),
            Err(Refusal::Spent {
                what: "reports",
                limit: 3
            })
        );
        assert!(b
            .report_fits(1)
            .unwrap_err()
            .message()
            .contains("3 reports"));
    }
}
