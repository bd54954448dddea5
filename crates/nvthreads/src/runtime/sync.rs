//! Mutexes, condition variables, barriers and once-controls (`docs/nvthreads.md` §3.4):
//! slots in the shared control block, keyed by the program object's address, with futex
//! waits; every operation is a synchronisation point of the calling thread.

use super::{LOCAL, Runtime, depth, fatal, me_tag};
use crate::shared::{Clock, SyncSlot, Table, futex_wait, futex_wait_until, futex_wake, mutex_kind};
use std::sync::atomic::Ordering;

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

    /// `pthread_mutex_destroy`: frees the slot (`EBUSY` if the mutex is held).
    pub fn mutex_destroy(&self, key: u64) -> i32 {
        if let Some(slot) = self.shared.find(Table::Mutex, key)
            && slot.word.is_held()
        {
            return libc::EBUSY;
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
        let mut contended = false;
        loop {
            if !self.begin_until(deadline) {
                return libc::ETIMEDOUT;
            }
            if slot.word.try_lock(contended) {
                self.acquired(slot);
                return 0;
            }
            self.release_for_wait();
            let freed = slot.word.wait_free_until(deadline);
            contended = true;
            if depth() > 0 {
                self.take_token();
            }
            if !freed {
                return libc::ETIMEDOUT;
            }
        }
    }

    fn mutex_slot(&self, key: u64, kind_at_first_use: u32) -> &'static SyncSlot {
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

    fn acquired(&self, slot: &SyncSlot) {
        slot.owner.store(me_tag(), Ordering::Release);
        slot.recursion.store(1, Ordering::Relaxed);
        LOCAL.depth.fetch_add(1, Ordering::Relaxed);
    }

    /// `pthread_mutex_trylock`: never blocks on the mutex (only on the commit token).
    pub fn mutex_trylock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if slot.owner.load(Ordering::Acquire) == me_tag() {
            return match self.relock(slot) {
                Some(0) => 0,
                _ => libc::EBUSY,
            };
        }
        self.begin();
        if slot.word.try_lock(false) {
            self.acquired(slot);
            return 0;
        }
        if depth() == 0 {
            self.give_token();
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
            self.end_section();
            slot.word.unlock();
            self.give_token();
        } else {
            slot.word.unlock();
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
        self.begin();
        let seq = cond_slot.seq.load(Ordering::Acquire);
        // A recursive mutex is released entirely and taken back at the same depth.
        let levels = mutex_slot.recursion.swap(0, Ordering::Relaxed).max(1);
        mutex_slot.owner.store(0, Ordering::Release);
        let left = LOCAL.depth.fetch_sub(levels, Ordering::Relaxed) - levels;
        if left == 0 {
            self.end_section();
        } else {
            self.merge_open();
        }
        mutex_slot.word.unlock();
        self.give_token();
        let timed_out = match deadline {
            None => {
                futex_wait(&cond_slot.seq, seq);
                false
            }
            Some((clock, at)) => {
                let clock = clock.unwrap_or_else(|| cond_slot.clock());
                !futex_wait_until(&cond_slot.seq, seq, clock, at)
                    && cond_slot.seq.load(Ordering::Acquire) == seq
            }
        };
        self.mutex_lock(mutex, mutex_kind::NORMAL);
        if levels > 1 {
            mutex_slot.recursion.store(levels, Ordering::Relaxed);
            LOCAL.depth.fetch_add(levels - 1, Ordering::Relaxed);
        }
        if timed_out { libc::ETIMEDOUT } else { 0 }
    }

    /// `pthread_cond_signal` (`all`: broadcast).
    pub fn cond_signal(&self, cond: u64, all: bool) -> i32 {
        let slot = self.sync_slot(Table::Cond, cond);
        if depth() == 0 {
            self.sync_point();
        }
        slot.seq.fetch_add(1, Ordering::AcqRel);
        futex_wake(&slot.seq, if all { i32::MAX } else { 1 });
        0
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

    /// `pthread_barrier_wait`: a synchronisation point, then wait for the generation.
    pub fn barrier_wait(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Barrier, key);
        let count = slot.count.load(Ordering::Acquire);
        if count == 0 {
            return libc::EINVAL;
        }
        self.begin();
        self.release_for_wait();
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
        self.after_wait();
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
                        self.sync_point();
                    } else {
                        self.take_token();
                        self.merge_open();
                    }
                    slot.seq.store(DONE, Ordering::Release);
                    futex_wake(&slot.seq, i32::MAX);
                    return 0;
                }
                Err(DONE) => {
                    self.refresh_kept();
                    return 0;
                }
                Err(_) => {
                    self.begin();
                    self.release_for_wait();
                    futex_wait(&slot.seq, RUNNING);
                    self.after_wait();
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
}
