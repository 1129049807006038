//! The job state machine and the small decisions around it, as plain
//! functions over data: no I/O, no clocks, no tokio.

use serde::{Deserialize, Serialize};

/// Where a job is in its life. `Queued` and `Running` are live; the rest are
/// final and never change again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
    TimedOut,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
        JobState::TimedOut,
    ];

    pub fn is_final(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::TimedOut => "timed_out",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the launched process (the `sandbox run` process, or the plain process)
/// ended, as the launcher classifies its wait status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// Exit status 0.
    Success,
    /// Any other exit of the worker, including a death by signal.
    WorkerFailed,
    /// The sandbox's own wall-time limit fired and killed everything.
    WallTimeExceeded,
    /// The sandbox could not be built (a profile or kernel problem).
    SandboxUnavailable,
}

/// Why the supervisor stopped a running process itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Cancel,
    Deadline,
}

/// Everything that can happen to a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEvent {
    /// The process was spawned.
    Started,
    /// Preparing the job (work dir, proxy identity, spawn) failed.
    LaunchFailed,
    /// The process ended on its own.
    Exited(ExitKind),
    /// The supervisor stopped it (or, while queued, never started it).
    Stopped(StopReason),
    /// The supervisor restarted and found the job live: it was killed.
    SupervisorRestarted,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// a job in this state cannot take this event
    #[error("a {from} job cannot take the event {event:?}")]
    Invalid { from: JobState, event: JobEvent },
}

/// The one transition table. Final states accept nothing: whatever happens
/// after a job ended (a late cancel, a late exit) changes nothing.
pub fn next_state(from: JobState, event: JobEvent) -> Result<JobState, StateError> {
    use JobEvent as E;
    use JobState as S;
    let to = match (from, event) {
        (S::Queued, E::Started) => S::Running,
        (S::Queued, E::LaunchFailed) => S::Failed,
        (S::Running, E::LaunchFailed) => S::Failed,
        (S::Running, E::Exited(ExitKind::Success)) => S::Done,
        (S::Running, E::Exited(ExitKind::WallTimeExceeded)) => S::TimedOut,
        (S::Running, E::Exited(ExitKind::WorkerFailed | ExitKind::SandboxUnavailable)) => S::Failed,
        (S::Queued | S::Running, E::Stopped(StopReason::Cancel)) => S::Cancelled,
        (S::Queued | S::Running, E::Stopped(StopReason::Deadline)) => S::TimedOut,
        (S::Queued | S::Running, E::SupervisorRestarted) => S::Failed,
        (from, event) => return Err(StateError::Invalid { from, event }),
    };
    Ok(to)
}

/// What `DELETE /jobs/{id}` does for a job in a given state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelDecision {
    /// The job is live: stop it. The end state is reported when it is reached.
    Stop,
    /// The job already ended in this state; a cancel changes nothing.
    AlreadyEnded(JobState),
}

pub fn cancel_decision(state: JobState) -> CancelDecision {
    if state.is_final() {
        CancelDecision::AlreadyEnded(state)
    } else {
        CancelDecision::Stop
    }
}

/// What a `POST /jobs` does, given what the store holds for its
/// `Idempotency-Key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A new key: create the job.
    Create,
    /// The same key with the same body: answer with the job it created.
    Replay { job_id: String },
    /// The same key with a different body: refuse.
    Conflict { job_id: String },
}

/// `existing` is the (body hash, job id) stored under the request's key.
pub fn admission(existing: Option<(&str, &str)>, body_hash: &str) -> Admission {
    match existing {
        None => Admission::Create,
        Some((hash, job_id)) if hash == body_hash => Admission::Replay {
            job_id: job_id.to_owned(),
        },
        Some((_, job_id)) => Admission::Conflict {
            job_id: job_id.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn transition_table() {
        use ExitKind as K;
        use JobEvent as E;
        use JobState as S;
        let ok = [
            (S::Queued, E::Started, S::Running),
            (S::Queued, E::LaunchFailed, S::Failed),
            (S::Queued, E::Stopped(StopReason::Cancel), S::Cancelled),
            (S::Queued, E::Stopped(StopReason::Deadline), S::TimedOut),
            (S::Queued, E::SupervisorRestarted, S::Failed),
            (S::Running, E::Exited(K::Success), S::Done),
            (S::Running, E::Exited(K::WorkerFailed), S::Failed),
            (S::Running, E::Exited(K::SandboxUnavailable), S::Failed),
            (S::Running, E::Exited(K::WallTimeExceeded), S::TimedOut),
            (S::Running, E::Stopped(StopReason::Cancel), S::Cancelled),
            (S::Running, E::Stopped(StopReason::Deadline), S::TimedOut),
            (S::Running, E::SupervisorRestarted, S::Failed),
            (S::Running, E::LaunchFailed, S::Failed),
        ];
        for (from, event, to) in ok {
            assert_eq!(next_state(from, event), Ok(to), "{from} + {event:?}");
        }
        let refused = [(S::Running, E::Started), (S::Queued, E::Exited(K::Success))];
        for (from, event) in refused {
            assert!(next_state(from, event).is_err(), "{from} + {event:?}");
        }
    }

    fn any_event() -> impl Strategy<Value = JobEvent> {
        let kind = prop_oneof![
            Just(ExitKind::Success),
            Just(ExitKind::WorkerFailed),
            Just(ExitKind::WallTimeExceeded),
            Just(ExitKind::SandboxUnavailable),
        ];
        prop_oneof![
            Just(JobEvent::Started),
            Just(JobEvent::LaunchFailed),
            kind.prop_map(JobEvent::Exited),
            Just(JobEvent::Stopped(StopReason::Cancel)),
            Just(JobEvent::Stopped(StopReason::Deadline)),
            Just(JobEvent::SupervisorRestarted),
        ]
    }

    proptest! {
        /// A final state never changes, whatever comes after.
        #[test]
        fn final_states_are_final(events in proptest::collection::vec(any_event(), 0..20)) {
            let mut state = JobState::Queued;
            let mut ended: Option<JobState> = None;
            for e in events {
                if let Ok(next) = next_state(state, e) {
                    prop_assert!(ended.is_none(), "{state} moved to {next} after ending");
                    state = next;
                    if state.is_final() { ended = Some(state); }
                }
            }
            if let Some(end) = ended { prop_assert_eq!(state, end); }
        }
    }

    #[test]
    fn state_names_round_trip() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(JobState::parse("ended"), None);
    }

    #[test]
    fn cancel_decisions() {
        assert_eq!(cancel_decision(JobState::Queued), CancelDecision::Stop);
        assert_eq!(cancel_decision(JobState::Running), CancelDecision::Stop);
        for s in [
            JobState::Done,
            JobState::Failed,
            JobState::Cancelled,
            JobState::TimedOut,
        ] {
            assert_eq!(cancel_decision(s), CancelDecision::AlreadyEnded(s));
        }
    }

    #[test]
    fn admission_decisions() {
        type Case<'a> = (Option<(&'a str, &'a str)>, &'a str, Admission);
        let cases: [Case; 3] = [
            (None, "h1", Admission::Create),
            (
                Some(("h1", "job_a")),
                "h1",
                Admission::Replay {
                    job_id: "job_a".into(),
                },
            ),
            (
                Some(("h1", "job_a")),
                "h2",
                Admission::Conflict {
                    job_id: "job_a".into(),
                },
            ),
        ];
        for (existing, hash, want) in cases {
            assert_eq!(admission(existing, hash), want);
        }
    }
}
