//! Deadlines that move on every request and almost never fire.
//!
//! A tokio timer moved to a later deadline is taken out of the runtime's
//! timer wheel and put back, under the wheel's lock; and when its new
//! deadline is nearer than what the runtime last planned to wake for, the
//! runtime's I/O driver is woken as well (a `write(2)` to its eventfd and
//! one more `epoll_wait` through the driver). A client connection's idle
//! clock moves on every request, and hyper makes a new header-read timer
//! for every request head it waits for, so each request paid that trip,
//! and the wake (profiled: every eventfd write of the proxy's workers).
//!
//! [`Deadline`] keeps the deadline apart from its timer: moving it later
//! only stores an `Instant`; the timer, still set for an earlier deadline,
//! fires there, finds the deadline moved, and is set again for it. A busy
//! connection's timer fires about once per limit instead of being moved
//! once per request; a deadline that passes still ends things at that
//! moment, whether or not a byte arrives.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A moment that can be moved freely and is waited for by one timer: a
/// move later leaves the timer, which is set again when it fires early; a
/// move earlier sets it at once.
pub(super) struct Deadline {
    at: Instant,
    timer: Pin<Box<Sleep>>,
}

impl Deadline {
    pub(super) fn new(at: Instant) -> Self {
        Self {
            at,
            timer: Box::pin(tokio::time::sleep_until(at)),
        }
    }

    /// Moves the deadline. Later (the usual case) touches no timer; earlier
    /// sets the timer at once, so it cannot fire late.
    pub(super) fn set(&mut self, at: Instant) {
        self.at = at;
        if at < self.timer.deadline() {
            self.timer.as_mut().reset(at);
        }
    }

    /// Ready once the deadline has passed; until then the task is woken
    /// when it does.
    pub(super) fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while self.timer.as_mut().poll(cx).is_ready() {
            if self.at <= self.timer.deadline() {
                return Poll::Ready(());
            }
            // Fired early: the deadline moved since the timer was set.
            self.timer.as_mut().reset(self.at);
        }
        Poll::Pending
    }
}

/// hyper's timer for one client connection's header-read timeout, built on
/// one [`Deadline`]. hyper makes a new sleep for every request head it
/// waits for (and drops it once the head is in); here each is a handle on
/// the connection's one deadline, which it moves, so a request touches no
/// timer. Build one per connection (the server builder's `timer`): the
/// deadline's timer keeps one waker, which holds because hyper 1's HTTP/1
/// server has one header sleep at a time; two connections, or two sleeps
/// polled at once, on one timer would leave one of them unwoken.
#[derive(Clone, Default)]
pub(super) struct ConnectionTimer {
    /// Made at the first sleep, so it is made inside the runtime.
    deadline: Arc<Mutex<Option<Deadline>>>,
}

impl std::fmt::Debug for ConnectionTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectionTimer")
    }
}

impl ConnectionTimer {
    fn deadline(&self) -> MutexGuard<'_, Option<Deadline>> {
        self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, at: Instant) {
        let mut deadline = self.deadline();
        match deadline.as_mut() {
            Some(deadline) => deadline.set(at),
            None => *deadline = Some(Deadline::new(at)),
        }
    }
}

/// A [`ConnectionTimer`]'s sleep: ready once the connection's deadline,
/// as last moved, has passed.
struct ConnectionSleep(ConnectionTimer);

impl Future for ConnectionSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.0.deadline().as_mut() {
            Some(deadline) => deadline.poll_passed(cx),
            None => Poll::Ready(()),
        }
    }
}

impl hyper::rt::Sleep for ConnectionSleep {}

impl hyper::rt::Timer for ConnectionTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.set(Instant::now() + duration);
        Box::pin(ConnectionSleep(self.clone()))
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.set(Instant::from_std(deadline));
        Box::pin(ConnectionSleep(self.clone()))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        // Every sleep of this timer is a handle on its one deadline.
        match sleep.as_mut().downcast_mut_pin::<ConnectionSleep>() {
            Some(mine) if Arc::ptr_eq(&mine.0.deadline, &self.deadline) => {
                self.set(Instant::from_std(new_deadline))
            }
            _ => *sleep = self.sleep_until(new_deadline),
        }
    }
}

#[cfg(test)]
mod tests;
