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
//! nobody sleeps on: sleeping readers wait on one sequence (`SyncSlot::wake`), writers on
//! another (`SyncSlot::wake_writers`), which releases bump before they wake, so a state
//! that returns to the value a sleeper saw (readers leaving and others entering) cannot
//! hide a release from it ([`Wake`] gives the argument). Which read locks this thread
//! holds, and how many times, is private to its process.

use super::sync::{deferred, spin_until};
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
                Wake::readers(slot).wake();
                if slot.seq.load(Ordering::SeqCst) == 0 {
                    Wake::writers(slot).wake();
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
        let wake = match mode {
            Mode::Read => Wake::readers(slot),
            Mode::Write => Wake::writers(slot),
        };
        loop {
            self.before_blocking();
            let _blocked = self.shared.profile.time(crate::profile::Step::Blocked);
            let seen = wake.arm();
            if try_take() {
                return Ok(());
            }
            let end = match deadline {
                None => futex_wait_watched(wake.sequence, seen),
                Some((clock, at)) => futex_wait_until_end(wake.sequence, seen, clock, at),
            };
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
            Wake::readers(slot).wake();
            Wake::writers(slot).wake();
        } else {
            self.mark(&slot.dep);
            // Only a writer waits for readers (a reader waits for a writer, or for a
            // waiting writer of a writer-preferring lock, which a writer's release wakes).
            if slot.seq.fetch_sub(1, Ordering::SeqCst) == 1 {
                Wake::writers(slot).wake();
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

/// One class of sleepers of a lock (its readers, or its writers): the sequence they sleep on
/// and the newest value of it that one of them read before going to sleep ("armed").
///
/// A sleeper reads the sequence, arms that value (keeping the newest), tries the lock
/// again, and sleeps while the sequence still has the value it read. A release that may let
/// sleepers in changes the state first, then bumps the sequence and wakes every sleeper of
/// the class, but only if the armed value is the current one: if not, every sleeper armed
/// before the last bump was woken by it or will find the sequence changed, so it needs no
/// system call. (Counting sleepers instead, a sleeper counted but not yet asleep, preempted
/// for a time slice, drew a wake-up system call from every release meanwhile: 254,000 of
/// them for 400,000 sections of `eval/rwlock_lookup.c` on one core.)
///
/// Why no sleeper is missed (all steps sequentially consistent): a release R reads the
/// sequence `s`, then the armed value. If a sleeper S armed before R read it, either S read
/// `s` (armed == `s`: R bumps and wakes, S is woken or its sleep fails) or S read an older
/// value (a bump since then woke S or makes its sleep fail) or a newer one (a bump after R
/// read `s`, which wakes S). If S armed after R read it, S's try of the lock comes after
/// R's release and sees it: it takes the lock, or another thread T took it first, and T's
/// release sees S armed, by the same argument.
struct Wake<'s> {
    sequence: &'s std::sync::atomic::AtomicU32,
    armed: &'s std::sync::atomic::AtomicU32,
}

impl<'s> Wake<'s> {
    fn readers(slot: &'s SyncSlot) -> Self {
        Wake {
            sequence: &slot.wake,
            armed: &slot.arrived,
        }
    }

    fn writers(slot: &'s SyncSlot) -> Self {
        Wake {
            sequence: &slot.wake_writers,
            armed: &slot.writers_armed,
        }
    }

    /// Reads the sequence and arms that value (unless a newer one is armed, in wrapping
    /// order); returns it, the value to sleep on.
    fn arm(&self) -> u32 {
        let seen = self.sequence.load(Ordering::SeqCst);
        let _ = self
            .armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |armed| {
                // `seen` is newer than `armed` when it is ahead by less than half the range.
                (armed != seen && (seen.wrapping_sub(armed) as i32) > 0).then_some(seen)
            });
        seen
    }

    /// After a release that may let this class in: bumps the sequence and wakes every
    /// sleeper if one armed the current value.
    fn wake(&self) {
        let current = self.sequence.load(Ordering::SeqCst);
        if self.armed.load(Ordering::SeqCst) == current {
            self.sequence.fetch_add(1, Ordering::SeqCst);
            futex_wake(self.sequence, i32::MAX);
        }
    }
}
