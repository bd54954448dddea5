//! Read-write locks (`docs/nvthreads.md` §3.4): any number of readers hold one at the same
//! time, a writer holds it alone. Every acquire and release is a synchronisation point of
//! the calling thread, as a mutex's is:
//!
//! - an acquire, for reading or writing, catches up with what others published and depends
//!   on the group the lock's last releasers depended on (`dep`), exactly as a mutex's;
//! - a read lock taken at depth 0 starts a durable section, as a mutex does, and the
//!   section ends at the unlock that returns the thread to depth 0. Concurrent readers'
//!   sections are like sections under different mutexes: each merges and commits its own
//!   writes (a reader that writes, a racy program under pthreads, logs exactly its own
//!   bytes as any section does, in its own lane, so the log stays well formed and recovery
//!   replays the racing writes in sequence order);
//! - a writer's release records the group it depends on in `dep`, as a mutex's release
//!   does (it acquired after every reader left, so it depends on what they marked); a
//!   reader's release *adds* its group to `dep` ([`Runtime::mark`]), since readers release
//!   concurrently and a store would lose another reader's group. The next writer thus
//!   depends on every reader before it, as pthreads order each read unlock before the next
//!   write lock. A reader that follows a reader may depend on its group too: more than
//!   pthreads order, which can only delay durability to the bound of `nvthreads.h`;
//! - an inner unlock is deferred to the section's end, as a mutex's: a reader keeps its
//!   share (a writer its exclusion) until the outermost unlock has merged.
//!
//! The lock's state is one word (`SyncSlot::seq`: readers counted, or [`WRITER`]) that
//! nobody sleeps on: sleeping readers wait on one sequence (`SyncSlot::wake`, counted in
//! `SyncSlot::arrived`), writers on another (`SyncSlot::wake_writers`, counted in
//! `SyncSlot::writers_asleep`), which releases bump before they wake, so a state
//! that returns to the value a sleeper saw (readers leaving and others entering) cannot
//! hide a release from it. Which read locks this thread holds, and how many times, is
//! private to its process.

use super::sync::{deferred, leave_count, spin_until};
use super::{LOCAL, Runtime, depth, me_tag};
use crate::shared::{
    Clock, SyncSlot, WaitEnd, deadline_passed, futex_wait_until_end, futex_wait_watched,
    futex_wake, mutex_kind,
};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

/// The state of a lock held for writing (otherwise the state is the number of readers).
pub const WRITER: u32 = 1 << 31;

/// The read locks this thread holds: the lock's key and how many times it took it.
fn reads() -> MutexGuard<'static, Vec<(u64, u32)>> {
    static READS: Mutex<Vec<(u64, u32)>> = Mutex::new(Vec::new());
    READS.lock().unwrap_or_else(|e| e.into_inner())
}

/// In a process just forked as a new thread: its creator's read locks stay the creator's.
pub(super) fn forget_reads() {
    reads().clear();
}

/// Whether the read-write lock `slot` is held by anyone (for `destroy`).
pub(super) fn is_held(slot: &SyncSlot) -> bool {
    mutex_kind::is_rwlock(slot.kind.load(Ordering::Acquire))
        && slot.seq.load(Ordering::Acquire) != 0
}

/// How a lock request is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `rdlock`, `tryrdlock`, `timedrdlock`, `clockrdlock`.
    Read,
    /// `wrlock`, `trywrlock`, `timedwrlock`, `clockwrlock`.
    Write,
}

impl Runtime {
    /// `pthread_rwlock_init`: a fresh, unlocked lock (`prefer_writer`: readers wait while a
    /// writer waits).
    pub fn rwlock_init(&self, key: u64, prefer_writer: bool) -> i32 {
        let kind = if prefer_writer {
            mutex_kind::RWLOCK_PREFER_WRITER
        } else {
            mutex_kind::RWLOCK
        };
        self.mutex_init(key, kind)
    }

    /// `pthread_rwlock_tryrdlock` and `pthread_rwlock_trywrlock`: never block (`EBUSY`).
    pub fn rwlock_trylock(&self, key: u64, kind_at_first_use: u32, mode: Mode) -> i32 {
        self.rwlock_lock(key, kind_at_first_use, mode, None, true)
    }

    /// `pthread_rwlock_rdlock`, `wrlock` (`deadline` `None`) and their timed and clock
    /// variants. `try_only`: fail with `EBUSY` instead of waiting.
    pub fn rwlock_lock(
        &self,
        key: u64,
        kind_at_first_use: u32,
        mode: Mode,
        deadline: Option<(Clock, &libc::timespec)>,
        try_only: bool,
    ) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        let busy = if try_only { libc::EBUSY } else { libc::EDEADLK };
        if slot.owner.load(Ordering::Acquire) == me_tag() {
            // A writer asking again, for either: glibc answers EDEADLK (EBUSY to a try).
            return busy;
        }
        {
            let mut held = reads();
            if let Some(entry) = held.iter_mut().find(|(k, _)| *k == key) {
                if mode == Mode::Write {
                    // A reader asking to write would wait for itself for ever.
                    return busy;
                }
                // Read locks are recursive; the thread is in a section already.
                entry.1 += 1;
                LOCAL.depth.fetch_add(1, Ordering::Relaxed);
                return 0;
            }
        }
        if let Some(result) = self.rwlock_take_back(key, slot, mode) {
            return result;
        }
        if depth() == 0 {
            // As for a mutex: the writes made since the last synchronisation point merge
            // with the section this acquire starts.
            self.apply_pending_name();
        }
        let prefer_writer = slot.kind.load(Ordering::Acquire) == mutex_kind::RWLOCK_PREFER_WRITER;
        let try_take = || match mode {
            Mode::Read => try_read(slot, prefer_writer),
            Mode::Write => try_write(slot),
        };
        if !try_take() {
            if try_only {
                return libc::EBUSY;
            }
            if let Err(error) = self.rwlock_wait(slot, mode, deadline, &try_take) {
                return error;
            }
        }
        match mode {
            Mode::Read => reads().push((key, 1)),
            Mode::Write => slot.owner.store(me_tag(), Ordering::Release),
        }
        LOCAL.depth.fetch_add(1, Ordering::Relaxed);
        self.after_acquire(slot.dep.load(Ordering::Acquire));
        0
    }

    /// Waits until `try_take` took the lock, or the deadline passed (`ETIMEDOUT`). Spins a
    /// moment first, as a mutex's waiter does: a writer's section usually ends within
    /// microseconds.
    fn rwlock_wait(
        &self,
        slot: &SyncSlot,
        mode: Mode,
        deadline: Option<(Clock, &libc::timespec)>,
        try_take: &dyn Fn() -> bool,
    ) -> Result<(), i32> {
        if mode == Mode::Write {
            slot.count.fetch_add(1, Ordering::SeqCst);
        }
        let result = self.rwlock_sleep(slot, mode, deadline, try_take);
        if mode == Mode::Write {
            slot.count.fetch_sub(1, Ordering::SeqCst);
            if result.is_err() {
                // Readers of a writer-preferring lock may have waited for this writer only,
                // and the wake-up of one writer may have been this one's.
                wake_readers(slot);
                if slot.seq.load(Ordering::SeqCst) == 0 {
                    wake_writer(slot);
                }
            }
        }
        result
    }

    fn rwlock_sleep(
        &self,
        slot: &SyncSlot,
        mode: Mode,
        deadline: Option<(Clock, &libc::timespec)>,
        try_take: &dyn Fn() -> bool,
    ) -> Result<(), i32> {
        // Watched with loads only: a compare-and-swap per round would take the lock's line
        // away from the threads that are about to release it.
        let looks_free = || {
            let state = slot.seq.load(Ordering::Relaxed);
            match mode {
                Mode::Read => state & WRITER == 0,
                Mode::Write => state == 0,
            }
        };
        if spin_until(looks_free) && try_take() {
            return Ok(());
        }
        // Sleepers count themselves for each sleep: readers in `arrived`, writers in
        // `writers_asleep` (a writer is also in `count` for its whole wait, `rwlock_wait`,
        // which writer-preferring readers defer to).
        let (sequence, counted) = match mode {
            Mode::Read => (&slot.wake, &slot.arrived),
            Mode::Write => (&slot.wake_writers, &slot.writers_asleep),
        };
        loop {
            self.before_blocking();
            let _blocked = self.shared.profile.time(crate::profile::Step::Blocked);
            // Counted before the sequence is read and the state tried again: a release
            // after the try sees the count and bumps the sequence, so the kernel does not
            // let this thread sleep on the old value (both sides sequentially consistent).
            counted.fetch_add(1, Ordering::SeqCst);
            let seen = sequence.load(Ordering::SeqCst);
            if try_take() {
                counted.fetch_sub(1, Ordering::SeqCst);
                return Ok(());
            }
            let end = match deadline {
                None => futex_wait_watched(sequence, seen),
                Some((clock, at)) => futex_wait_until_end(sequence, seen, clock, at),
            };
            // A waker takes those it woke off the count itself (as a condition variable's
            // signal does): a sleeper woken and not yet running draws no more wake-ups.
            if end != WaitEnd::Woken {
                leave_count(counted, 1);
            }
            if try_take() {
                return Ok(());
            }
            if let Some((clock, at)) = deadline
                && (end == WaitEnd::TimedOut || deadline_passed(clock, at))
            {
                return Err(libc::ETIMEDOUT);
            }
        }
    }

    /// A lock request for a lock this thread unlocked inside its current section and still
    /// holds (deferred): taken back at once in the same mode, `EDEADLK` in the other
    /// (`None` if it is not deferred).
    fn rwlock_take_back(&self, key: u64, slot: &SyncSlot, mode: Mode) -> Option<i32> {
        if depth() == 0 {
            return None;
        }
        let mut held = deferred();
        let at = held.iter().position(|&k| k == key)?;
        let writing = slot.seq.load(Ordering::Acquire) & WRITER != 0;
        if writing != (mode == Mode::Write) {
            return Some(libc::EDEADLK);
        }
        held.remove(at);
        drop(held);
        if writing {
            slot.owner.store(me_tag(), Ordering::Release);
        } else {
            reads().push((key, 1));
        }
        LOCAL.depth.fetch_add(1, Ordering::Relaxed);
        Some(0)
    }

    /// `pthread_rwlock_unlock`: the writer's unlock, or one of this thread's read unlocks
    /// (`EPERM` if it holds the lock neither way).
    pub fn rwlock_unlock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if depth() == 0 {
            return libc::EPERM;
        }
        if slot.owner.load(Ordering::Acquire) == me_tag() {
            slot.owner.store(0, Ordering::Release);
        } else {
            let mut held = reads();
            let Some(at) = held.iter().position(|(k, _)| *k == key) else {
                return libc::EPERM;
            };
            if held[at].1 > 1 {
                held[at].1 -= 1;
                LOCAL.depth.fetch_sub(1, Ordering::Relaxed);
                return 0;
            }
            held.swap_remove(at);
        }
        let left = LOCAL.depth.fetch_sub(1, Ordering::Relaxed) - 1;
        if left == 0 {
            self.end_section_then(|| {
                self.rwlock_release(slot);
                self.release_deferred();
            });
        } else {
            deferred().push(key);
        }
        0
    }

    /// Releases this thread's hold of `slot` (its writer's exclusion, or its reader's
    /// share: a thread never holds both) to other threads, recording the group it depends
    /// on, and wakes the sleepers if the lock became free.
    pub(super) fn rwlock_release(&self, slot: &SyncSlot) {
        if slot.seq.load(Ordering::Acquire) & WRITER != 0 {
            // Alone: every reader before it left, and it depends on what they marked.
            slot.dep.store(self.dependency(), Ordering::Release);
            slot.seq.store(0, Ordering::SeqCst);
            wake_readers(slot);
            wake_writer(slot);
        } else {
            self.mark(&slot.dep);
            // Only a writer waits for readers (a reader waits for a writer, or for a
            // waiting writer of a writer-preferring lock, which a writer's release wakes).
            if slot.seq.fetch_sub(1, Ordering::SeqCst) == 1 {
                wake_writer(slot);
            }
        }
    }
}

/// Takes a read share unless a writer holds the lock (or, preferring writers, waits).
fn try_read(slot: &SyncSlot, prefer_writer: bool) -> bool {
    let mut state = slot.seq.load(Ordering::Relaxed);
    loop {
        if state & WRITER != 0
            || (prefer_writer && slot.count.load(Ordering::SeqCst) != 0)
            || state + 1 >= WRITER
        {
            return false;
        }
        match slot
            .seq
            .compare_exchange_weak(state, state + 1, Ordering::SeqCst, Ordering::Relaxed)
        {
            Ok(_) => return true,
            Err(now) => state = now,
        }
    }
}

/// Takes the lock for writing if nobody holds it.
fn try_write(slot: &SyncSlot) -> bool {
    slot.seq
        .compare_exchange(0, WRITER, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
}

/// After a release that may let readers in: bumps their wake-up sequence and wakes them
/// all, if any is counted asleep.
fn wake_readers(slot: &SyncSlot) {
    if slot.arrived.load(Ordering::SeqCst) != 0 {
        slot.wake.fetch_add(1, Ordering::SeqCst);
        let woken = futex_wake(&slot.wake, i32::MAX);
        if woken > 0 {
            leave_count(&slot.arrived, woken);
        }
    }
}

/// After a release that freed the lock: bumps the writers' wake-up sequence and wakes one,
/// if any sleeps. The one woken takes the lock, or sleeps again if another took it first
/// (whose release wakes the next); one that gives up at its deadline passes the wake-up on.
fn wake_writer(slot: &SyncSlot) {
    if slot.writers_asleep.load(Ordering::SeqCst) != 0 {
        slot.wake_writers.fetch_add(1, Ordering::SeqCst);
        if futex_wake(&slot.wake_writers, 1) > 0 {
            leave_count(&slot.writers_asleep, 1);
        }
    }
}
