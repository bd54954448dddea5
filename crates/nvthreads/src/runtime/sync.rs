//! Mutexes, condition variables, barriers and once-controls (`docs/nvthreads.md` §3.4,
//! §3.5): slots in the shared control block, keyed by the program object's address, with
//! futex waits; every operation is a synchronisation point of the calling thread.
//!
//! - Sections under different mutexes run and commit at the same time: acquiring a mutex
//!   takes only that mutex. The writes a thread made outside sections before it are merged
//!   and committed with the section (nobody can see them before its outermost unlock).
//! - An unlock inside a section (depth > 1 → ≥ 1) keeps the mutex held until the section
//!   ends: the section's writes under it are not merged yet, so another thread taking it
//!   would not see them. It is handed back at the outermost unlock, or earlier if the
//!   thread must block (the section then opens: its writes are merged first).
//! - Releasing, signalling, arriving at a barrier or finishing a once-routine records the
//!   group of open sections the thread depends on in the object ([`SyncSlot::dep`]);
//!   whoever synchronises through it next depends on that group too.

use super::{LOCAL, Runtime, depth, fatal, me_tag};
use crate::shared::{
    Clock, SyncSlot, Table, WaitEnd, futex_wait, futex_wait_until_end, futex_wait_watched,
    futex_wake, mutex_kind,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Mutexes this thread unlocked inside its current section, still held until it ends
/// (private to each process).
pub(super) fn deferred() -> MutexGuard<'static, Vec<u64>> {
    static DEFERRED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    DEFERRED.lock().unwrap_or_else(|e| e.into_inner())
}

impl Runtime {
    /// `pthread_mutex_init` (and the lock functions of read-write and spin locks): a fresh,
    /// unlocked slot of `kind` ([`mutex_kind`]) for the object at `key`.
    pub fn mutex_init(&self, key: u64, kind: u32) -> i32 {
        let slot = self.shared.reinit(Table::Mutex, key, &|slot| {
            slot.kind.store(kind, Ordering::Relaxed)
        });
        if slot.is_none() {
            return libc::ENOMEM;
        }
        0
    }

    /// `pthread_mutex_destroy`: frees the slot (`EBUSY` if the mutex is held). A mutex this
    /// thread unlocked inside its section is free to destroy (nobody may use it any more).
    pub fn mutex_destroy(&self, key: u64) -> i32 {
        if let Some(slot) = self.shared.find(Table::Mutex, key) {
            let mut held = deferred();
            if let Some(at) = held.iter().position(|&k| k == key) {
                held.remove(at);
                drop(held);
                if mutex_kind::is_rwlock(slot.kind.load(Ordering::Acquire)) {
                    self.rwlock_release(slot);
                } else {
                    slot.word.unlock();
                }
            } else if slot.word.is_held() || super::rwlock::is_held(slot) {
                return libc::EBUSY;
            }
        }
        self.shared.release(Table::Mutex, key);
        0
    }

    /// `pthread_mutex_lock`. `kind_at_first_use` gives the kind of a mutex never initialised
    /// by `pthread_mutex_init` (from its static initialiser).
    pub fn mutex_lock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        self.mutex_lock_until(key, kind_at_first_use, None)
    }

    /// `pthread_mutex_timedlock` (`deadline`) and `pthread_mutex_lock` (`None`).
    pub fn mutex_lock_until(
        &self,
        key: u64,
        kind_at_first_use: u32,
        deadline: Option<(Clock, &libc::timespec)>,
    ) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if let Some(result) = self.relock(slot) {
            return result;
        }
        if self.take_back(key, slot) {
            return 0;
        }
        if depth() == 0 {
            // The writes made since the last synchronisation point are merged and committed
            // with the section this acquire starts: no other thread can see them before its
            // outermost unlock releases anything.
            self.apply_pending_name();
        }
        let mut contended = false;
        loop {
            if slot.word.try_lock(contended) {
                self.acquired(slot);
                return 0;
            }
            // Once, before the first sleep: a waiter woken from a sleep takes the lock or
            // sleeps again.
            if !contended && spin_until_free(slot) && slot.word.try_lock(false) {
                self.acquired(slot);
                return 0;
            }
            self.before_blocking();
            let blocked = self.shared.profile.time(crate::profile::Step::Blocked);
            if !slot.word.wait_free_until(deadline) {
                return libc::ETIMEDOUT;
            }
            drop(blocked);
            contended = true;
        }
    }

    pub(super) fn mutex_slot(&self, key: u64, kind_at_first_use: u32) -> &'static SyncSlot {
        self.sync_slot_with(Table::Mutex, key, &|slot| {
            slot.kind.store(kind_at_first_use, Ordering::Relaxed)
        })
    }

    /// A lock request by the mutex's holder: counted for a recursive mutex, `EDEADLK` for an
    /// error-checking one; `None` if the caller does not hold it (or it is a normal mutex,
    /// which then deadlocks as with pthreads).
    fn relock(&self, slot: &SyncSlot) -> Option<i32> {
        if slot.owner.load(Ordering::Acquire) != me_tag() {
            return None;
        }
        match slot.kind.load(Ordering::Acquire) {
            mutex_kind::RECURSIVE => {
                slot.recursion.fetch_add(1, Ordering::Relaxed);
                LOCAL.depth.fetch_add(1, Ordering::Relaxed);
                Some(0)
            }
            mutex_kind::ERRORCHECK => Some(libc::EDEADLK),
            _ => None,
        }
    }

    /// Locks again a mutex this thread unlocked inside its current section (it still holds
    /// it); returns whether it was one.
    fn take_back(&self, key: u64, slot: &SyncSlot) -> bool {
        if depth() == 0 {
            // Outside sections nothing is deferred: the outermost unlock handed it all back.
            return false;
        }
        let mut held = deferred();
        let Some(at) = held.iter().position(|&k| k == key) else {
            return false;
        };
        held.remove(at);
        drop(held);
        slot.owner.store(me_tag(), Ordering::Release);
        slot.recursion.store(1, Ordering::Relaxed);
        LOCAL.depth.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn acquired(&self, slot: &SyncSlot) {
        slot.owner.store(me_tag(), Ordering::Release);
        slot.recursion.store(1, Ordering::Relaxed);
        LOCAL.depth.fetch_add(1, Ordering::Relaxed);
        self.after_acquire(slot.dep.load(Ordering::Acquire));
    }

    /// Before blocking inside a section: mutexes unlocked inside it are handed back (the
    /// section opens, so that their next holders see its writes), as a thread that waits
    /// must not keep locks it released.
    pub(super) fn before_blocking(&self) {
        if depth() > 0 && !deferred().is_empty() {
            self.open_section(false);
            self.release_deferred();
        }
    }

    /// Releases `slot` to other threads, recording the group this thread depends on.
    fn release(&self, slot: &SyncSlot) {
        slot.dep.store(self.dependency(), Ordering::Release);
        slot.word.unlock();
    }

    /// Hands back every mutex unlocked inside the section.
    pub(super) fn release_deferred(&self) {
        let mut keys: Vec<u64> = {
            let mut list = deferred();
            if list.is_empty() {
                // The common outermost unlock: no inner unlock was deferred.
                return;
            }
            std::mem::take(&mut *list)
        };
        for &key in &keys {
            if let Some(slot) = self.shared.find(Table::Mutex, key) {
                if mutex_kind::is_rwlock(slot.kind.load(Ordering::Acquire)) {
                    self.rwlock_release(slot);
                } else {
                    self.release(slot);
                }
            }
        }
        // The emptied list goes back, so the next nested section's inner unlocks push into
        // its allocation rather than a new one.
        keys.clear();
        let mut list = deferred();
        if list.is_empty() {
            *list = keys;
        }
    }

    /// `pthread_mutex_trylock`: never blocks.
    pub fn mutex_trylock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if slot.owner.load(Ordering::Acquire) == me_tag() {
            return match self.relock(slot) {
                Some(0) => 0,
                _ => libc::EBUSY,
            };
        }
        if self.take_back(key, slot) {
            return 0;
        }
        if slot.word.try_lock(false) {
            self.acquired(slot);
            return 0;
        }
        libc::EBUSY
    }

    /// `pthread_mutex_unlock`.
    pub fn mutex_unlock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if depth() == 0 || slot.owner.load(Ordering::Acquire) != me_tag() {
            return libc::EPERM;
        }
        if slot.recursion.fetch_sub(1, Ordering::Relaxed) > 1 {
            LOCAL.depth.fetch_sub(1, Ordering::Relaxed);
            return 0;
        }
        slot.owner.store(0, Ordering::Release);
        let left = LOCAL.depth.fetch_sub(1, Ordering::Relaxed) - 1;
        if left == 0 {
            self.end_section_then(|| {
                self.release(slot);
                self.release_deferred();
            });
        } else {
            deferred().push(key);
        }
        0
    }

    /// `pthread_cond_init`: a fresh slot whose deadlines are measured on `clock`.
    pub fn cond_init(&self, key: u64, clock: Clock) -> i32 {
        match self
            .shared
            .reinit(Table::Cond, key, &|slot| slot.set_clock(clock))
        {
            Some(_) => 0,
            None => libc::ENOMEM,
        }
    }

    /// `pthread_cond_destroy`: frees the slot.
    pub fn cond_destroy(&self, key: u64) -> i32 {
        self.shared.release(Table::Cond, key);
        0
    }

    /// `pthread_cond_wait`.
    pub fn cond_wait(&self, cond: u64, mutex: u64) -> i32 {
        self.cond_wait_until(cond, mutex, None)
    }

    /// `pthread_cond_timedwait` / `pthread_cond_clockwait` (`deadline`: an absolute time on
    /// `clock`, or the condition variable's own clock when `clock` is `None`) and
    /// `pthread_cond_wait` (no deadline). The mutex is held again on return, also after a
    /// timeout (`ETIMEDOUT`).
    pub fn cond_wait_until(
        &self,
        cond: u64,
        mutex: u64,
        deadline: Option<(Option<Clock>, &libc::timespec)>,
    ) -> i32 {
        let cond_slot = self.sync_slot(Table::Cond, cond);
        let mutex_slot = self.mutex_slot(mutex, mutex_kind::NORMAL);
        if depth() == 0 || mutex_slot.owner.load(Ordering::Acquire) != me_tag() {
            return libc::EPERM;
        }
        let seq = cond_slot.seq.load(Ordering::Acquire);
        // A recursive mutex is released entirely and taken back at the same depth.
        let levels = mutex_slot.recursion.swap(0, Ordering::Relaxed).max(1);
        mutex_slot.owner.store(0, Ordering::Release);
        let left = LOCAL.depth.fetch_sub(levels, Ordering::Relaxed) - levels;
        let hand_over = || {
            self.release(mutex_slot);
            self.release_deferred();
        };
        if left == 0 {
            self.end_section_then(hand_over);
        } else {
            self.open_section(false);
            hand_over();
        }
        let timed_out = self.wait_for_signal(cond_slot, seq, deadline);
        self.after_acquire(cond_slot.dep.load(Ordering::Acquire));
        self.mutex_lock(mutex, mutex_kind::NORMAL);
        if levels > 1 {
            mutex_slot.recursion.store(levels, Ordering::Relaxed);
            LOCAL.depth.fetch_add(levels - 1, Ordering::Relaxed);
        }
        if timed_out { libc::ETIMEDOUT } else { 0 }
    }

    /// Sleeps while the condition variable's sequence is `seq`; returns whether the deadline
    /// passed with no signal.
    ///
    /// `arrived` counts the waiters that no wake-up has reached: a waiter counts itself
    /// before the kernel first compares the sequence, and a signal that wakes `n` sleepers
    /// takes `n` off the count for them ([`Runtime::cond_signal`]), so a waiter that was
    /// woken and has not run yet no longer draws wake-ups that find nobody asleep. (It used
    /// to stay counted until it ran: with five processes on two cores, the lock-heavy
    /// kernel's signals woke nobody 1.7 times per transfer, each a system call.) A waiter
    /// leaves the count itself when anything but a wake-up ended its sleep; one woken while
    /// the sequence is still `seq` (the wake-up was for a signal older than its wait) counts
    /// itself again before it sleeps again. Before counting itself at all, a waiter watches
    /// the sequence for a moment ([`spin_until`]): a signal made then finds it uncounted and
    /// makes no system call, and the waiter takes no sleep and process switch (the
    /// lock-heavy kernel's producer, waiting on its full queue for each transfer, at 1 and 2
    /// workers). A signal can miss no sleeper: a waiter's count and the kernel's comparison
    /// come after it read `seq`, and a signal bumps the sequence before it reads the count
    /// (both sequentially consistent), so either the signal sees the waiter counted or the
    /// kernel sees the new sequence and does not let it sleep.
    fn wait_for_signal(
        &self,
        slot: &SyncSlot,
        seq: u32,
        deadline: Option<(Option<Clock>, &libc::timespec)>,
    ) -> bool {
        // The futex waits return every watchdog period (to check that the run's processes
        // live): only a signal (a new sequence) or the deadline ends the wait.
        let signalled = || slot.seq.load(Ordering::Acquire) != seq;
        if spin_until(signalled) {
            // Signalled within the spin: never counted, so the signal made no system call.
            return false;
        }
        slot.arrived.fetch_add(1, Ordering::SeqCst);
        loop {
            let end = match deadline {
                None => futex_wait_watched(&slot.seq, seq),
                Some((clock, at)) => {
                    let clock = clock.unwrap_or_else(|| slot.clock());
                    futex_wait_until_end(&slot.seq, seq, clock, at)
                }
            };
            // A waker that woke this thread has taken it off the count already.
            let woken = end == WaitEnd::Woken;
            if signalled() || end == WaitEnd::TimedOut {
                if !woken {
                    leave_count(&slot.arrived, 1);
                }
                return !signalled();
            }
            if woken {
                slot.arrived.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// `pthread_cond_signal` (`all`: broadcast).
    pub fn cond_signal(&self, cond: u64, all: bool) -> i32 {
        let slot = self.sync_slot(Table::Cond, cond);
        if depth() == 0 {
            self.sync_interval();
        }
        self.mark(&slot.dep);
        slot.seq.fetch_add(1, Ordering::SeqCst);
        // A waiter counts itself before it sleeps, and the kernel compares the sequence
        // again when it does: a signal that sees no waiter bumped the sequence before any
        // waiter could sleep on the old value, so it needs no wake-up.
        if slot.arrived.load(Ordering::SeqCst) > 0 {
            let woken = futex_wake(&slot.seq, if all { i32::MAX } else { 1 });
            if woken > 0 {
                // Those woken are no longer waiting for a wake-up (see `wait_for_signal`).
                leave_count(&slot.arrived, woken);
            }
        }
        0
    }

    /// Adds the group this thread depends on to an object's `dep` (several threads may mark
    /// it at once: the groups are merged).
    pub(super) fn mark(&self, dep: &AtomicU64) {
        let mine = self.dependency();
        if mine == 0 {
            return;
        }
        let mut current = dep.load(Ordering::Acquire);
        loop {
            let merged = self
                .shared
                .groups
                .join(mine, current)
                .unwrap_or_else(|e| fatal(&e.to_string()));
            match dep.compare_exchange(current, merged, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => current = now,
            }
        }
    }

    /// `pthread_barrier_init`.
    pub fn barrier_init(&self, key: u64, count: u32) -> i32 {
        if count == 0 {
            return libc::EINVAL;
        }
        match self.shared.reinit(Table::Barrier, key, &|slot| {
            slot.count.store(count, Ordering::Relaxed)
        }) {
            Some(_) => 0,
            None => libc::ENOMEM,
        }
    }

    /// `pthread_barrier_destroy`: frees the slot (`EBUSY` while threads wait at it).
    pub fn barrier_destroy(&self, key: u64) -> i32 {
        if let Some(slot) = self.shared.find(Table::Barrier, key)
            && slot.arrived.load(Ordering::Acquire) > 0
        {
            return libc::EBUSY;
        }
        self.shared.release(Table::Barrier, key);
        0
    }

    /// `pthread_barrier_wait`: a synchronisation point (inside a section, the section opens:
    /// the others read its writes after the barrier), then wait for the generation.
    pub fn barrier_wait(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Barrier, key);
        let count = slot.count.load(Ordering::Acquire);
        if count == 0 {
            return libc::EINVAL;
        }
        if depth() == 0 {
            self.sync_interval();
        } else {
            self.open_section(false);
            self.release_deferred();
        }
        self.mark(&slot.dep);
        let generation = slot.seq.load(Ordering::Acquire);
        let serial = if slot.arrived.fetch_add(1, Ordering::AcqRel) + 1 >= count {
            slot.arrived.store(0, Ordering::Release);
            slot.seq.fetch_add(1, Ordering::AcqRel);
            futex_wake(&slot.seq, i32::MAX);
            libc::PTHREAD_BARRIER_SERIAL_THREAD
        } else {
            while slot.seq.load(Ordering::Acquire) == generation {
                futex_wait(&slot.seq, generation);
            }
            0
        };
        self.after_acquire(slot.dep.load(Ordering::Acquire));
        serial
    }

    /// `pthread_once`: runs `init` once across all threads; its writes are published (and,
    /// outside a section, committed) before any other caller returns.
    pub fn once(&self, key: u64, init: extern "C" fn()) -> i32 {
        const NOT_RUN: u32 = 0;
        const RUNNING: u32 = 1;
        const DONE: u32 = 2;
        let slot = self.sync_slot(Table::Once, key);
        loop {
            match slot
                .seq
                .compare_exchange(NOT_RUN, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    init();
                    if depth() == 0 {
                        self.sync_interval();
                    } else {
                        self.open_section(false);
                    }
                    self.mark(&slot.dep);
                    slot.seq.store(DONE, Ordering::Release);
                    futex_wake(&slot.seq, i32::MAX);
                    return 0;
                }
                Err(DONE) => {
                    self.after_acquire(slot.dep.load(Ordering::Acquire));
                    return 0;
                }
                Err(_) => {
                    if depth() == 0 {
                        self.sync_interval();
                    }
                    self.before_blocking();
                    futex_wait(&slot.seq, RUNNING);
                }
            }
        }
    }

    fn sync_slot(&self, table: Table, key: u64) -> &'static SyncSlot {
        self.sync_slot_with(table, key, &|_| {})
    }

    fn sync_slot_with(
        &self,
        table: Table,
        key: u64,
        init: &dyn Fn(&SyncSlot),
    ) -> &'static SyncSlot {
        self.shared.slot(table, key, init).unwrap_or_else(|| {
            fatal(&format!(
                "too many live {table:?} objects (each needs a slot until it is destroyed)"
            ))
        })
    }

    /// In a process just forked: the mutexes its creator unlocked inside its section stay
    /// the creator's.
    pub(super) fn forget_deferred(&self) {
        deferred().clear();
        super::rwlock::forget_reads();
    }
}

/// Takes `n` off a condition variable's count of waiters, stopping at 0: a waiter counted
/// in a slot that `pthread_cond_destroy` and a new `pthread_cond_init` reset meanwhile (its
/// wait ended by the reset's new sequence) must not wrap the new object's count.
fn leave_count(count: &std::sync::atomic::AtomicU32, n: u32) {
    let _ = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
        Some(now.saturating_sub(n))
    });
}

/// Rounds of [`spin_until`]: about 3 µs on the project's machine (23 ns per `spin_loop`,
/// a `pause`), about twice the work queue's hold in the lock-heavy kernel (its holder's
/// catch-up and merge, about 1.6 µs). Chosen from a sweep of 0 to 1,024 rounds with both
/// spins (`docs/nvthreads.md` §10, eighth round): 64–256 all gained, 128 the most at 4
/// workers; from 512 on, a spinner kept a preempted holder or the producer off a core.
const SPIN_ROUNDS: u32 = 128;

/// Waits a moment, without sleeping, for the held mutex `slot` to be released: returns
/// whether it was seen free. A mutex held for a section's merge is usually released within
/// microseconds, and going to sleep instead costs the waiter a futex sleep and a process
/// switch, and the releaser a wake-up system call (with an inter-processor interrupt for
/// an idle virtual CPU): in the lock-heavy kernel, the work queue's mutex at 4 workers
/// (`docs/nvthreads.md` §10, eighth round). Bounded, because the holder may be preempted
/// (five processes on two cores), and then only sleeping lets it run.
fn spin_until_free(slot: &SyncSlot) -> bool {
    spin_until(|| !slot.word.is_held())
}

/// Spins [`SPIN_ROUNDS`] rounds at most until `done`; returns whether it was.
pub(super) fn spin_until(done: impl Fn() -> bool) -> bool {
    for _ in 0..SPIN_ROUNDS {
        if done() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}
