//! The hand-off from committing lanes to the background reclaimer (TimeStone's design:
//! transactions only append to their logs; one reclaimer thread trims the version log,
//! checkpoints and writes back).
//!
//! A lane asks for work with [`Requests::request`]; the reclaimer takes it with
//! [`Requests::next`]. Requests coalesce: the strongest one pending wins, and a lane that
//! asks while the same or stronger work is pending does not wake anybody. No request is
//! lost: the reclaimer takes the pending work and goes to sleep under one mutex, and a lane
//! that raised the pending work wakes it under the same mutex (model-checked in
//! `tests/loom.rs`).

use crate::sync::{AtomicBool, AtomicU8, Condvar, Mutex, Ordering};
use std::sync::PoisonError;
use std::time::Duration;

/// What a lane asks the reclaimer for (stronger is larger).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Work {
    /// Drop versions no snapshot needs, without a checkpoint.
    Trim = 1,
    /// A checkpoint (which also frees OLog records and may write back).
    Checkpoint = 2,
}

/// Why the reclaimer woke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Work was asked for.
    Work(Work),
    /// The wait timed out with nothing asked for.
    Idle,
    /// The engine is closing and nothing is pending.
    Stop,
}

/// The lanes' requests to the reclaimer, and whether one serves them.
#[derive(Debug)]
pub struct Requests {
    /// The strongest work asked for since the reclaimer last took it (0: none).
    pending: AtomicU8,
    /// Whether a reclaimer serves requests; lanes reclaim by themselves otherwise.
    serving: AtomicBool,
    /// Set when the engine closes; under the mutex the reclaimer sleeps on, so it cannot
    /// miss it.
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Default for Requests {
    fn default() -> Self {
        Requests {
            pending: AtomicU8::new(0),
            serving: AtomicBool::new(false),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        }
    }
}

impl Requests {
    /// Marks a reclaimer as serving (before its thread starts).
    pub fn start(&self) {
        self.serving.store(true, Ordering::Release);
    }

    /// Whether a reclaimer serves requests.
    #[inline]
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }

    /// Asks for `work`; wakes the reclaimer unless the same or stronger work is pending
    /// (whoever raised it wakes it).
    pub fn request(&self, work: Work) {
        if self.pending.fetch_max(work as u8, Ordering::AcqRel) < work as u8 {
            let _stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
            self.wake.notify_one();
        }
    }

    /// Asks the reclaimer to finish the pending work and exit.
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_one();
    }

    /// The reclaimer gives up (its work failed): lanes reclaim by themselves from now on,
    /// and meet the failure themselves.
    pub fn withdraw(&self) {
        self.serving.store(false, Ordering::Release);
    }

    /// The reclaimer's next step: the pending work if any, else [`Wake::Stop`] once
    /// stopped, else a wait for a request (at most `timeout` if given; loom models the
    /// untimed wait).
    pub fn next(&self, timeout: Option<Duration>) -> Wake {
        let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match self.pending.swap(0, Ordering::AcqRel) {
                0 => {}
                1 => return Wake::Work(Work::Trim),
                _ => return Wake::Work(Work::Checkpoint),
            }
            if *stopped {
                self.withdraw();
                return Wake::Stop;
            }
            match timeout {
                #[cfg(not(loom))]
                Some(timeout) => {
                    let (guard, waited) = self
                        .wake
                        .wait_timeout(stopped, timeout)
                        .unwrap_or_else(PoisonError::into_inner);
                    stopped = guard;
                    if waited.timed_out() && self.pending.load(Ordering::Acquire) == 0 {
                        return Wake::Idle;
                    }
                }
                _ => {
                    stopped = self
                        .wake
                        .wait(stopped)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}
