//! A job lost with the supervisor: it restarted and ended every job it had
//! (it kills, never re-attaches; supervisor/SERVICE.md, restarts). The
//! work was not done, nor failed by the worker: the ticket's generation
//! gets a new job, in the same work dir, a bounded number of times
//! ([`plan::after_lost`]); past that the ticket fails.

use super::events::JobEvent;
use super::plan;
use super::runner::{Live, PassError, EVENTS};
use crate::eval::Judge;
use crate::store::LiveJob;
use crate::ticket::Ticket;

impl<J: Judge> Live<J> {
    /// `None` when the event was a lost job of the current generation that
    /// is started again (recorded with the event cursor); otherwise the
    /// event to handle, a lost job past its bound being an ordinary failure.
    pub(super) fn on_lost(
        &mut self,
        seq: u64,
        event: JobEvent,
        current: Option<&(LiveJob, Ticket)>,
        now: u64,
    ) -> Result<Option<JobEvent>, PassError> {
        let JobEvent::Lost { job_id } = event else {
            return Ok(Some(event));
        };
        let failed = |job_id| {
            Some(JobEvent::Ended {
                job_id,
                state: "failed".into(),
            })
        };
        let Some((job, _)) = current else {
            return Ok(failed(job_id));
        };
        match plan::after_lost(job.attempt) {
            Some(attempt) => {
                tracing::warn!(ticket = %job.ticket, job = %job_id, attempt,
                    "the job was lost with the supervisor's restart; starting it again");
                self.router.store.transaction(|tx| {
                    tx.retry_lost_job(&job_id, attempt, now)?;
                    tx.set_live_cursor(EVENTS, seq)
                })?;
                Ok(None)
            }
            None => {
                tracing::error!(ticket = %job.ticket, job = %job_id,
                    "the job was lost with the supervisor again; the ticket fails");
                Ok(failed(job_id))
            }
        }
    }
}
