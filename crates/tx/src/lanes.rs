//! Per-thread log lanes and the options shared by the logging engines.
//!
//! A transaction holds one lane for its whole life. Threads prefer the lane they used last,
//! so in steady state every thread owns a lane and acquisition is one uncontended try-lock.

use crate::logwriter::LogMode;
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use std::cell::Cell;

/// Format-time and run-time options of the logging engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EngineOptions {
    /// Lanes (the most transactions that run at once; more threads wait for a lane).
    pub lanes: u32,
    /// Bytes of log per lane (a transaction's log must fit in it, or the transaction fails
    /// with `LogFull`). `undo` keeps a quarter of each lane (at least 128 bytes) for the
    /// records of the blocks a transaction allocates and frees, so there a `LogFull` may
    /// name that area's capacity rather than the lane's.
    pub lane_size: u64,
    /// log2 of the heap's chunk size.
    pub chunk_shift: u32,
    /// How log bytes are written (run-time; not recorded in the pool).
    pub log_mode: LogMode,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lanes: 16,
            lane_size: 1 << 20,
            chunk_shift: 18,
            log_mode: LogMode::Auto,
        }
    }
}

impl EngineOptions {
    /// Small geometry for crash tests on pools of a few hundred KiB.
    pub fn small() -> Self {
        EngineOptions {
            lanes: 2,
            lane_size: 8 << 10,
            chunk_shift: 12,
            log_mode: LogMode::Auto,
        }
    }

    /// The same options with another log mode.
    pub fn with_log_mode(self, log_mode: LogMode) -> Self {
        EngineOptions { log_mode, ..self }
    }
}

thread_local! {
    static PREFERRED_LANE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// A set of lanes, each holding per-lane state `S`.
#[derive(Debug)]
pub struct Lanes<S> {
    lanes: Box<[CachePadded<Mutex<S>>]>,
}

impl<S> Lanes<S> {
    /// Lanes built from `states`.
    pub fn new(states: impl IntoIterator<Item = S>) -> Self {
        Lanes {
            lanes: states
                .into_iter()
                .map(|s| CachePadded::new(Mutex::new(s)))
                .collect(),
        }
    }

    /// Takes a free lane, preferring the one this thread used last; waits if all are busy.
    pub fn acquire(&self) -> (usize, MutexGuard<'_, S>) {
        let count = self.lanes.len();
        let preferred = PREFERRED_LANE.with(Cell::get);
        let start = if preferred < count {
            preferred
        } else {
            pmem::thread_slot() % count
        };
        let mut spins = 0u32;
        loop {
            for step in 0..count {
                let index = (start + step) % count;
                if let Some(guard) = self.lanes[index].try_lock() {
                    PREFERRED_LANE.with(|p| p.set(index));
                    return (index, guard);
                }
            }
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
