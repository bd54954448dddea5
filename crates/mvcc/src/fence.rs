//! An asymmetric fence for the snapshot announcement: transactions (the frequent side) order
//! their announcement before their clock read with a compiler fence only, and reclaimers
//! (the rare side) make every running thread of the process execute a full barrier with
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` before they read the announcements
//! (the asymmetric Dekker pattern of userspace RCU and Folly's `asymmetricHeavyBarrier`).
//!
//! Why it suffices: the frequent side is `store announcement; load clock`, the rare side
//! `load clock; barrier; load announcements`. The kernel runs a full barrier on every CPU
//! that runs a thread of the process while the rare side waits, so the frequent side's
//! store and load are either both before that barrier (the store is then visible to the
//! rare side's later loads) or its load is after it (and then reads a clock at least as new
//! as the rare side's reading, which the rare side's bound already allows for). A thread
//! that is not running has passed a context switch, itself a full barrier.
//!
//! Registration is tried once per process; when the kernel refuses it (too old, seccomp,
//! not Linux, or `FERRITE_MVCC_NO_MEMBARRIER` set) the frequent side falls back to a
//! `SeqCst` fence, as before. Loom has no membarrier: under loom both sides are `SeqCst`
//! fences, which is what the barrier gives (a full barrier on the frequent side's CPU,
//! between its store and its load, or before the store), and `tests/loom.rs` checks the
//! protocol with them.

use crate::sync::{Ordering, fence};
use std::sync::OnceLock;

/// Whether this process registered for expedited private membarriers. Inline: every
/// transaction's begin asks (one load once registered; `init` registers at the first open).
#[inline]
fn expedited() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    match REGISTERED.get() {
        Some(&registered) => registered,
        None => *REGISTERED.get_or_init(register),
    }
}

#[cfg(all(target_os = "linux", not(loom)))]
fn register() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier, membarrier_query};
    if std::env::var_os("FERRITE_MVCC_NO_MEMBARRIER").is_some() {
        return false;
    }
    membarrier_query().contains_command(MembarrierCommand::PrivateExpedited)
        && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
}

#[cfg(not(all(target_os = "linux", not(loom))))]
fn register() -> bool {
    false
}

/// Which fence the frequent side uses (for reports).
pub fn mode() -> &'static str {
    if expedited() { "membarrier" } else { "seqcst" }
}

/// Prepares the process (registration), so the first transaction does not pay for it.
pub fn init() {
    let _ = expedited();
}

/// The frequent side: orders the preceding announcement store before the following
/// loads, given that the rare side runs [`heavy`] before it reads announcements.
#[inline]
pub fn light() {
    #[cfg(not(loom))]
    if expedited() {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        return;
    }
    fence(Ordering::SeqCst);
}

/// The rare side: after it returns, every announcement a frequent side stored before its
/// [`light`] fence (and before the loads that follow it) is visible. Returns `false` if the
/// barrier failed (then nothing may be concluded from announcements read now).
#[must_use]
pub fn heavy() -> bool {
    #[cfg(all(target_os = "linux", not(loom)))]
    if expedited() {
        use rustix::thread::{MembarrierCommand, membarrier};
        return membarrier(MembarrierCommand::PrivateExpedited).is_ok();
    }
    fence(Ordering::SeqCst);
    true
}
