//! State shared by every thread-process of one program run (`docs/nvthreads.md` §3.4): the
//! commit token, the log's volatile state, the open-section count, the thread table and the
//! tables of mutexes, condition variables and barriers, keyed by the address of the program's
//! `pthread_*_t` (the same in every process, since they all descend from one address space
//! by `fork`). Everything lives in one `MAP_SHARED | MAP_ANONYMOUS` mapping made before the
//! first fork, and every field is an atomic; blocking uses process-shared futexes.

use crate::journal::JournalState;
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Most thread-processes alive or unjoined at once (the main thread included).
pub const MAX_THREADS: usize = 256;
/// Most distinct mutexes.
pub const MAX_MUTEXES: usize = 4096;
/// Most distinct condition variables.
pub const MAX_CONDS: usize = 1024;
/// Most distinct barriers.
pub const MAX_BARRIERS: usize = 256;

/// Blocks while `*word == expected` (process-shared futex; spurious wake-ups are possible).
pub fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 that lives in shared memory for the whole
    // run; no timeout. The kernel only reads the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes up to `count` waiters of `word`.
pub fn futex_wake(word: &AtomicU32, count: i32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; it does not access user memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count);
    }
}

/// A process-shared lock word: 0 free, 1 held, 2 held with (possible) waiters.
#[repr(C)]
#[derive(Debug, Default)]
pub struct LockWord(AtomicU32);

impl LockWord {
    /// Takes the lock, blocking.
    pub fn lock(&self) {
        if self.try_lock(false) {
            return;
        }
        while self.0.swap(2, Ordering::Acquire) != 0 {
            futex_wait(&self.0, 2);
        }
    }

    /// Takes the lock if free. `contended` marks it as having waiters, for a caller that has
    /// waited before (so that its own unlock wakes the next waiter).
    pub fn try_lock(&self, contended: bool) -> bool {
        let held = if contended { 2 } else { 1 };
        self.0
            .compare_exchange(0, held, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the lock and wakes one waiter if there may be any.
    pub fn unlock(&self) {
        if self.0.swap(0, Ordering::Release) == 2 {
            futex_wake(&self.0, 1);
        }
    }

    /// Blocks until the lock looks free (without taking it).
    pub fn wait_free(&self) {
        loop {
            let seen = self.0.load(Ordering::Acquire);
            if seen == 0 {
                return;
            }
            if seen == 1
                && self
                    .0
                    .compare_exchange(1, 2, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            futex_wait(&self.0, 2);
        }
    }

    /// Forces the lock free (after the processes that could hold it were killed).
    pub fn force_free(&self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Thread slot states.
pub mod thread_state {
    /// Unused.
    pub const FREE: u32 = 0;
    /// Running.
    pub const RUNNING: u32 = 1;
    /// Finished, not yet joined.
    pub const DONE: u32 = 2;
}

/// One thread-process.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ThreadSlot {
    /// Process id.
    pub pid: AtomicI32,
    /// One of [`thread_state`]; futex word for joiners.
    pub state: AtomicU32,
    /// The start routine's result.
    pub retval: AtomicU64,
}

/// A mutex, condition variable or barrier, keyed by the program's object address.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SyncSlot {
    /// The object's address, 0 if unused.
    pub key: AtomicU64,
    /// Mutex: the lock word.
    pub word: LockWord,
    /// Condition variable: the wake-up sequence. Barrier: the generation.
    pub seq: AtomicU32,
    /// Barrier: threads arrived in this generation.
    pub arrived: AtomicU32,
    /// Barrier: threads per generation.
    pub count: AtomicU32,
}

/// The shared control block.
#[repr(C)]
#[derive(Debug)]
pub struct Shared {
    /// The commit token: held from a section's first acquire to its last release, and for
    /// every merge and log append.
    pub token: LockWord,
    /// Sections that merged into the shared view while still open; no epoch is committed
    /// while this is non-zero.
    pub open_sections: AtomicU32,
    /// Live thread-processes (main included).
    pub live_threads: AtomicU32,
    /// Persistence steps taken (for `NVT_CRASH_AT`).
    pub steps: AtomicU64,
    /// Merges that published something: a process whose private copies were taken at an
    /// older generation must drop them before it reads shared data again.
    pub merge_gen: AtomicU64,
    journal: [AtomicU64; 4],
    /// Commits, records, logged bytes (statistics).
    pub counters: [AtomicU64; 4],
    /// Thread table; slot 0 is the main thread.
    pub threads: [ThreadSlot; MAX_THREADS],
    mutexes: [SyncSlot; MAX_MUTEXES],
    conds: [SyncSlot; MAX_CONDS],
    barriers: [SyncSlot; MAX_BARRIERS],
}

/// Which table to look in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Mutexes.
    Mutex,
    /// Condition variables.
    Cond,
    /// Barriers.
    Barrier,
}

impl Shared {
    /// Maps a zeroed control block shared with every future child.
    pub fn map() -> io::Result<&'static Shared> {
        let len = std::mem::size_of::<Shared>();
        // SAFETY: a fresh anonymous shared mapping; all-zero bytes are a valid `Shared`
        // (every field is an atomic integer); it is never unmapped, so 'static holds.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if at == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Ok(&*at.cast::<Shared>())
        }
    }

    /// The log state (read only while holding the token).
    pub fn journal_state(&self) -> JournalState {
        let [committed, lap, tail, pending] = &self.journal;
        JournalState {
            committed: committed.load(Ordering::Acquire),
            lap: lap.load(Ordering::Acquire),
            tail: tail.load(Ordering::Acquire),
            pending: pending.load(Ordering::Acquire),
        }
    }

    /// Stores the log state (only while holding the token).
    pub fn set_journal_state(&self, state: &JournalState) {
        let [committed, lap, tail, pending] = &self.journal;
        committed.store(state.committed, Ordering::Release);
        lap.store(state.lap, Ordering::Release);
        tail.store(state.tail, Ordering::Release);
        pending.store(state.pending, Ordering::Release);
    }

    /// The slot for the object at `key`, claimed on first use; `None` if the table is full.
    pub fn slot(&self, table: Table, key: u64) -> Option<&SyncSlot> {
        assert_ne!(key, 0, "null synchronisation object");
        let slots: &[SyncSlot] = match table {
            Table::Mutex => &self.mutexes,
            Table::Cond => &self.conds,
            Table::Barrier => &self.barriers,
        };
        let start = (key >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize;
        for probe in 0..slots.len() {
            let slot = &slots[(start + probe) % slots.len()];
            match slot
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(slot),
                Err(found) if found == key => return Some(slot),
                Err(_) => {}
            }
        }
        None
    }
}
