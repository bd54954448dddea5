//! The atomics of the version-chain protocol ([`crate::chain`]) and the chunk table
//! ([`crate::table`]), and the reclaimer's hand-off ([`crate::handoff`]): the standard library's, or
//! loom's when the crate is built with `--cfg loom` for the model tests (`tests/loom.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex};

/// A wait loop's pacing: pause hints first, then yields (a descheduled committer holds
/// what the waiter needs); under loom every step yields to the model's scheduler.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    steps: u32,
}

impl Backoff {
    /// Spins before this many steps, yields after.
    #[cfg_attr(loom, allow(dead_code))]
    const SPINS: u32 = 64;

    /// Waits one step.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.steps < Self::SPINS {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        self.steps = self.steps.saturating_add(1);
    }
}
