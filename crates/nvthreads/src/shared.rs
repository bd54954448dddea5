//! State shared by every thread-process of one program run (`docs/nvthreads.md` §3.4): the
//! log's volatile state (lap, sequence numbers, lane tails and locks, the checkpoint gate),
//! the groups of sections that commit together, the thread table and the tables of mutexes,
//! condition variables and barriers, keyed by the address of the program's `pthread_*_t`
//! (the same in every process, since they all descend from one address space by `fork`).
//! Everything lives in one `MAP_SHARED | MAP_ANONYMOUS` mapping made before the first fork,
//! and every field is an atomic; blocking uses process-shared futexes.

use crate::journal::{JournalState, MAX_LANES};
use crate::stats::Stats;
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Most thread-processes alive or unjoined at once (the main thread included).
pub const MAX_THREADS: usize = 256;
/// Most distinct live mutexes (read-write locks and spin locks included). Slots are freed by
/// `*_destroy` and reset by `*_init`.
pub const MAX_MUTEXES: usize = 1 << 16;
/// Most distinct live condition variables.
pub const MAX_CONDS: usize = 1 << 13;
/// Most distinct live barriers.
pub const MAX_BARRIERS: usize = 1024;
/// Most distinct `pthread_once_t` objects.
pub const MAX_ONCES: usize = 1024;

/// A slot key that was released: lookups continue past it, claims may reuse it.
const TOMBSTONE: u64 = u64::MAX;

/// How long a wait of the runtime blocks before it checks that the run's processes still
/// live: a thread-process killed while holding a lock, a lane or the log's gate, or while
/// others wait for it on a condition variable, would otherwise block them forever
/// (`docs/nvthreads.md` §3.7).
pub const WATCHDOG_PERIOD: std::time::Duration = std::time::Duration::from_millis(200);

/// The check a long wait makes every [`WATCHDOG_PERIOD`] (set once by the runtime; it ends
/// the run if one of its processes died without ending).
static WATCHDOG: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets the check long waits make (the first call wins; forked processes inherit it).
pub fn set_watchdog(check: fn()) {
    let _ = WATCHDOG.set(check);
}

/// Runs the watchdog's check (nothing if none is set).
pub fn watchdog() {
    if let Some(check) = WATCHDOG.get() {
        check();
    }
}

/// Runs the watchdog's check every [`WATCHDOG_PERIOD`] of a wait that spins, yields or
/// sleeps instead of blocking on a futex.
#[derive(Debug)]
pub struct Patience {
    next_check: std::time::Instant,
}

impl Patience {
    /// Starts counting the wait.
    pub fn new() -> Patience {
        Patience {
            next_check: std::time::Instant::now() + WATCHDOG_PERIOD,
        }
    }

    /// One more round of the wait: checks the run if a period has passed.
    pub fn tick(&mut self) {
        let now = std::time::Instant::now();
        if now >= self.next_check {
            watchdog();
            self.next_check = now + WATCHDOG_PERIOD;
        }
    }
}

impl Default for Patience {
    fn default() -> Self {
        Patience::new()
    }
}

/// Blocks while `*word == expected` (process-shared futex; spurious wake-ups are possible):
/// at most [`WATCHDOG_PERIOD`], after which it runs the watchdog's check and returns.
pub fn futex_wait(word: &AtomicU32, expected: u32) {
    futex_wait_watched(word, expected);
}

/// [`futex_wait`], telling how the wait ended: never [`WaitEnd::TimedOut`] (a watchdog period
/// that passed ends as [`WaitEnd::Other`], after the watchdog's check).
pub fn futex_wait_watched(word: &AtomicU32, expected: u32) -> WaitEnd {
    match futex_wait_end(word, expected, WATCHDOG_PERIOD) {
        WaitEnd::TimedOut => {
            watchdog();
            WaitEnd::Other
        }
        end => end,
    }
}

/// The clock an absolute deadline is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// `CLOCK_REALTIME` (the default of condition variables and timed locks).
    Realtime,
    /// `CLOCK_MONOTONIC`.
    Monotonic,
}

impl Clock {
    /// The clock of a `clockid_t`, if supported.
    pub fn from_id(id: libc::clockid_t) -> Option<Clock> {
        match id {
            libc::CLOCK_REALTIME => Some(Clock::Realtime),
            libc::CLOCK_MONOTONIC => Some(Clock::Monotonic),
            _ => None,
        }
    }

    fn code(self) -> u32 {
        match self {
            Clock::Realtime => 0,
            Clock::Monotonic => 1,
        }
    }

    fn from_code(code: u32) -> Clock {
        if code == 1 {
            Clock::Monotonic
        } else {
            Clock::Realtime
        }
    }
}

/// How a futex wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// Woken by a `FUTEX_WAKE` (the waker's count of woken threads includes this one; a
    /// wake-up by unrelated code using the same word is possible in principle).
    Woken,
    /// The timeout or deadline passed.
    TimedOut,
    /// Anything else: the word did not hold the expected value, or a signal interrupted.
    Other,
}

/// How a `futex` wait system call's result `rc` ended the wait.
fn wait_end(rc: libc::c_long) -> WaitEnd {
    if rc == 0 {
        return WaitEnd::Woken;
    }
    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        WaitEnd::TimedOut
    } else {
        WaitEnd::Other
    }
}

/// Blocks while `*word == expected`, for `timeout` at most. Returns false if the timeout
/// passed (spurious wake-ups return true).
pub fn futex_wait_for(word: &AtomicU32, expected: u32, timeout: std::time::Duration) -> bool {
    futex_wait_end(word, expected, timeout) != WaitEnd::TimedOut
}

/// [`futex_wait_for`], telling how the wait ended.
pub fn futex_wait_end(word: &AtomicU32, expected: u32, timeout: std::time::Duration) -> WaitEnd {
    let relative = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 in shared memory with a relative timeout
    // read from a valid timespec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &relative as *const libc::timespec,
        )
    };
    wait_end(rc)
}

/// Blocks while `*word == expected` until the absolute time `deadline` on `clock`. Returns
/// false if the deadline passed (spurious wake-ups return true). A deadline further than
/// [`WATCHDOG_PERIOD`] is waited for in periods, with the watchdog's check after each (the
/// call then returns true: the caller checks its condition and waits again).
pub fn futex_wait_until(
    word: &AtomicU32,
    expected: u32,
    clock: Clock,
    deadline: &libc::timespec,
) -> bool {
    futex_wait_until_end(word, expected, clock, deadline) != WaitEnd::TimedOut
}

/// [`futex_wait_until`], telling how the wait ended ([`WaitEnd::TimedOut`] only for the
/// deadline: a watchdog period that passed first ends as [`WaitEnd::Other`]).
pub fn futex_wait_until_end(
    word: &AtomicU32,
    expected: u32,
    clock: Clock,
    deadline: &libc::timespec,
) -> WaitEnd {
    if deadline.tv_sec < 0 {
        // A time before the clock's epoch is a valid deadline, long passed, but the kernel
        // refuses it (`EINVAL`): a caller that waits again on anything but a timeout would
        // spin on the refusal for ever (`pthread_cond_timedwait`, `pthread_timedjoin_np`).
        return WaitEnd::TimedOut;
    }
    if time_left(clock, deadline) > WATCHDOG_PERIOD {
        return futex_wait_watched(word, expected);
    }
    let mut op = libc::FUTEX_WAIT_BITSET;
    if clock == Clock::Realtime {
        op |= libc::FUTEX_CLOCK_REALTIME;
    }
    // SAFETY: FUTEX_WAIT_BITSET on a valid, aligned u32 in shared memory with an absolute
    // timeout read from `deadline` (a valid timespec) and the match-any bitset.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            expected,
            deadline as *const libc::timespec,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        )
    };
    wait_end(rc)
}

/// Whether `deadline` on `clock` has passed.
pub fn deadline_passed(clock: Clock, deadline: &libc::timespec) -> bool {
    let now = clock_now(clock);
    (now.tv_sec, now.tv_nsec) >= (deadline.tv_sec, deadline.tv_nsec)
}

fn clock_now(clock: Clock) -> libc::timespec {
    let id = match clock {
        Clock::Realtime => libc::CLOCK_REALTIME,
        Clock::Monotonic => libc::CLOCK_MONOTONIC,
    };
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`.
    unsafe { libc::clock_gettime(id, &mut now) };
    now
}

/// Time until `deadline` on `clock` (zero once passed).
fn time_left(clock: Clock, deadline: &libc::timespec) -> std::time::Duration {
    let now = clock_now(clock);
    let nanos = |t: &libc::timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    let left = (nanos(deadline) - nanos(&now)).clamp(0, i128::from(u64::MAX));
    std::time::Duration::from_nanos(left as u64)
}

/// Sends `SIGKILL` to the process group `group` (a program started in its own group, its
/// thread-processes included).
pub fn kill_process_group(group: u32) -> io::Result<()> {
    let group = i32::try_from(group).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill has no memory preconditions; a negative pid names a process group.
    if unsafe { libc::syscall(libc::SYS_kill, -group, libc::SIGKILL) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Wakes up to `count` waiters of `word`; returns how many it woke.
pub fn futex_wake(word: &AtomicU32, count: i32) -> u32 {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32; it does not access user memory.
    let woken = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, count) };
    u32::try_from(woken).unwrap_or(0)
}

/// A process-shared lock: a futex word (0 free, 1 held, 2 held with possible sleepers)
/// and, beside it, the number of threads asleep (or about to sleep) on it.
///
/// A thread that sleeps on the word marks it 2 first, and the kernel queues it only while
/// the word still is 2, so the holder at that moment sees 2 when it unlocks and wakes one
/// sleeper. Sleepers that wake-up did not reach sleep on a word that is now 0: whoever takes
/// the lock next must mark it 2 for them. A thread that has waited takes it as 2 only when
/// the count says some thread still sleeps, else as 1 — where it used to take it as 2
/// always, so that its unlock made a futex wake-up system call whether or not anyone was
/// left (the lock-heavy kernel at 4 workers: 11,247 of the work queue mutex's 13,078
/// wake-ups woke nobody, `perf` on the futex system calls; 9,111 with this change alone —
/// most of the rest came from waiters whose mark raced with the unlock, which the spin
/// before sleeping in `Runtime::mutex_lock_until` removes). A fresh locker (one that did
/// not wait) takes it as 1, as before: a sleeper it overtakes was woken by the last unlock
/// and marks the word again if it finds it held.
///
/// Why the count cannot miss a sleeper: a thread counts itself before it marks the word
/// 2 and sleeps, and the waker's load of the count comes after its compare-and-swap that
/// took the lock (both sequentially consistent). A sleeper counted too late for that load
/// finds the word 1 (the new holder's) when the kernel compares it, returns, marks it 2
/// and sleeps again, so the holder wakes it. The thread an unlock woke passes the wake-up
/// on: it takes the lock (as 2 if some thread still sleeps), or sleeps again on a word it
/// marked 2, or — a timed wait whose deadline passed — leaves the word marked 2 if some
/// thread still sleeps (`LockWord::give_up`). Tried and not kept (`docs/nvthreads.md` §10,
/// eighth round): the count of waiting threads in the futex word itself (every arrival
/// changed the value the others slept on: their sleeps failed and retried), and a waiter
/// count the unlock reads instead of the 2 (runnable waiters not yet back on a core stayed
/// counted, so unlocks woke nobody more often and more threads slept).
#[repr(C)]
#[derive(Debug, Default)]
pub struct LockWord {
    /// 0 free, 1 held, 2 held with possible sleepers (the futex word).
    word: AtomicU32,
    /// Threads between counting themselves and returning from their sleep.
    sleepers: AtomicU32,
}

impl LockWord {
    /// Takes the lock, blocking.
    pub fn lock(&self) {
        self.lock_until(None);
    }

    /// Takes the lock, blocking until the absolute `deadline` at most. Returns whether it
    /// was taken.
    pub fn lock_until(&self, deadline: Option<(Clock, &libc::timespec)>) -> bool {
        if self.try_lock(false) {
            return true;
        }
        loop {
            if !self.wait_free_until(deadline) {
                return false;
            }
            if self.try_lock(true) {
                return true;
            }
        }
    }

    /// Takes the lock if free. `contended`: the caller has waited for it, so it may have
    /// overtaken sleepers the last unlock did not wake; it then marks the lock 2 if any
    /// thread still sleeps on it (so that its own unlock wakes the next one).
    pub fn try_lock(&self, contended: bool) -> bool {
        if self
            .word
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if contended && self.sleepers.load(Ordering::SeqCst) != 0 {
            // Only the holder changes a held word's 1 (to 0), and waiters change 1 to 2:
            // a store of 2 over either is what they would have done.
            self.word.store(2, Ordering::SeqCst);
        }
        true
    }

    /// Releases the lock and wakes one waiter if there may be any.
    pub fn unlock(&self) {
        if self.word.swap(0, Ordering::Release) == 2 {
            futex_wake(&self.word, 1);
        }
    }

    /// Blocks until the lock looks free (without taking it).
    pub fn wait_free(&self) {
        self.wait_free_until(None);
    }

    /// Blocks until the lock looks free or the absolute `deadline` passes. Returns false on
    /// timeout.
    pub fn wait_free_until(&self, deadline: Option<(Clock, &libc::timespec)>) -> bool {
        loop {
            let seen = self.word.load(Ordering::Acquire);
            if seen == 0 {
                return true;
            }
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let marked = seen == 2
                || self
                    .word
                    .compare_exchange(1, 2, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok();
            let mut timed_out = false;
            if marked {
                match deadline {
                    None => futex_wait(&self.word, 2),
                    Some((clock, at)) => {
                        timed_out = !futex_wait_until(&self.word, 2, clock, at)
                            || deadline_passed(clock, at);
                    }
                }
            }
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            if timed_out {
                return self.give_up();
            }
        }
    }

    /// The end of a wait whose deadline passed: whether the lock looks free (the caller may
    /// still take it). If not, and other threads sleep on it, the word is left at 2 first.
    /// This waiter may have been the one the last unlock woke, just as its deadline passed,
    /// while a locker that had not waited took the word as 1: the sleepers that wake-up did
    /// not reach would then wait for their watchdog period, since an unlock of 1 wakes
    /// nobody. A sleeper counted after the load of the count marks the word itself.
    fn give_up(&self) -> bool {
        loop {
            match self.word.load(Ordering::SeqCst) {
                0 => return true,
                1 if self.sleepers.load(Ordering::SeqCst) != 0 => {
                    if self
                        .word
                        .compare_exchange(1, 2, Ordering::SeqCst, Ordering::Relaxed)
                        .is_ok()
                    {
                        return false;
                    }
                }
                _ => return false,
            }
        }
    }

    /// Whether the lock is held.
    pub fn is_held(&self) -> bool {
        self.word.load(Ordering::Acquire) != 0
    }

    /// Forces the lock free with no sleeper counted (a slot reset for another object).
    pub fn force_free(&self) {
        self.sleepers.store(0, Ordering::Relaxed);
        self.word.store(0, Ordering::Release);
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
    /// 1 if detached: the thread frees its own slot when it ends (2 once it is being freed).
    pub detached: AtomicU32,
    /// Slot index of the thread that created it (its parent process).
    pub parent: AtomicU32,
    /// A name set by `pthread_setname_np` from another thread (NUL-padded, at most 15
    /// bytes), which the thread applies to itself at its next synchronisation point.
    pub name: [AtomicU64; 2],
    /// 1 while `name` waits to be applied.
    pub name_pending: AtomicU32,
    /// The group not yet durable the thread depended on when it ended: its joiner depends
    /// on it too (0: none).
    pub dep: AtomicU64,
}

impl ThreadSlot {
    /// Records a name for the thread to take (at most 15 bytes).
    pub fn set_pending_name(&self, name: &[u8]) {
        let mut bytes = [0u8; 16];
        bytes[..name.len().min(15)].copy_from_slice(&name[..name.len().min(15)]);
        self.name[0].store(
            u64::from_le_bytes(bytes[..8].try_into().expect("8")),
            Ordering::Relaxed,
        );
        self.name[1].store(
            u64::from_le_bytes(bytes[8..].try_into().expect("8")),
            Ordering::Relaxed,
        );
        self.name_pending.store(1, Ordering::Release);
    }

    /// The name last set from another thread (NUL-padded), if not yet applied.
    pub fn pending_name(&self) -> Option<[u8; 16]> {
        if self.name_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.name[0].load(Ordering::Relaxed).to_le_bytes());
        bytes[8..].copy_from_slice(&self.name[1].load(Ordering::Relaxed).to_le_bytes());
        Some(bytes)
    }
}

/// Mutex kinds (the type of `pthread_mutexattr_settype`).
pub mod mutex_kind {
    /// `PTHREAD_MUTEX_NORMAL` (and the default, and adaptive).
    pub const NORMAL: u32 = 0;
    /// `PTHREAD_MUTEX_RECURSIVE`.
    pub const RECURSIVE: u32 = 1;
    /// `PTHREAD_MUTEX_ERRORCHECK`.
    pub const ERRORCHECK: u32 = 2;
    /// A read-write lock preferring readers (glibc's default,
    /// `PTHREAD_RWLOCK_PREFER_READER_NP`): a reader enters while no writer holds it, even
    /// with writers waiting.
    pub const RWLOCK: u32 = 3;
    /// A read-write lock preferring writers (`PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`):
    /// a reader that holds no read lock on it waits while a writer waits.
    pub const RWLOCK_PREFER_WRITER: u32 = 4;

    /// Whether `kind` is a read-write lock's.
    pub fn is_rwlock(kind: u32) -> bool {
        kind == RWLOCK || kind == RWLOCK_PREFER_WRITER
    }
}

/// A mutex, condition variable, barrier or once-control, keyed by the program's object
/// address.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SyncSlot {
    /// The object's address; 0 if never used, [`TOMBSTONE`] if released.
    pub key: AtomicU64,
    /// Mutex: the lock word.
    pub word: LockWord,
    /// Condition variable: the wake-up sequence. Barrier: the generation. Once: 0 not run,
    /// 1 running, 2 done. Read-write lock: its state (the number of thread-processes
    /// holding it for reading, or `runtime::rwlock::WRITER`).
    pub seq: AtomicU32,
    /// Barrier: threads arrived in this generation. Condition variable: threads waiting
    /// that no wake-up has reached yet (a signal with none makes no system call; see
    /// `Runtime::wait_for_signal`). Read-write lock: the newest value of `wake` a reader
    /// read before going to sleep (its "armed" value; `runtime::rwlock`).
    pub arrived: AtomicU32,
    /// Barrier: threads per generation. Read-write lock: writers waiting.
    pub count: AtomicU32,
    /// Read-write lock: the wake-up sequence its sleeping readers wait on.
    pub wake: AtomicU32,
    /// Read-write lock: the wake-up sequence its sleeping writers wait on.
    pub wake_writers: AtomicU32,
    /// Read-write lock: the newest value of `wake_writers` a writer read before going to
    /// sleep.
    pub writers_armed: AtomicU32,
    /// Mutex: one of [`mutex_kind`]. Condition variable: its clock (0 realtime, 1
    /// monotonic).
    pub kind: AtomicU32,
    /// Mutex: holder's thread slot + 1 (0: free).
    pub owner: AtomicU32,
    /// Mutex: recursion depth of the holder (recursive mutexes).
    pub recursion: AtomicU32,
    /// The group of sections not yet durable that its last releaser (a mutex), signaller
    /// (a condition variable), arrivals (a barrier) or initialiser (a once-control) depended
    /// on: whoever synchronises through it depends on that group too (0: none).
    pub dep: AtomicU64,
}

impl SyncSlot {
    /// Clears the slot for another object of `table`. A condition variable's or barrier's
    /// sequence moves forward instead of back to 0: a waiter that a broadcast (or the last
    /// arrival) woke may not have run yet when the program destroys the object, which POSIX
    /// allows, and it must find the sequence changed from the value it slept on — back at 0,
    /// a waiter of the first generation slept again for ever. Any start value serves them:
    /// their waits compare the sequence for change.
    fn reset(&self, table: Table) {
        self.word.force_free();
        // A read-write lock's sleepers wait for a change of `wake` (destroying a lock that
        // threads wait for is undefined behaviour; none should be asleep).
        if table == Table::Mutex {
            for wake in [&self.wake, &self.wake_writers] {
                wake.fetch_add(1, Ordering::SeqCst);
                futex_wake(wake, i32::MAX);
            }
        }
        match table {
            Table::Cond | Table::Barrier => {
                self.seq.fetch_add(1, Ordering::SeqCst);
                // Only a waiter still counted can be asleep (destroying an object threads
                // are blocked on is undefined behaviour; woken ones are not asleep).
                if self.arrived.load(Ordering::SeqCst) != 0 {
                    futex_wake(&self.seq, i32::MAX);
                }
            }
            // A mutex does not use it; a once-control's 0 is "not run".
            Table::Mutex | Table::Once => self.seq.store(0, Ordering::Relaxed),
        }
        for field in [
            &self.writers_armed,
            &self.arrived,
            &self.count,
            &self.kind,
            &self.owner,
            &self.recursion,
        ] {
            field.store(0, Ordering::Relaxed);
        }
        self.dep.store(0, Ordering::Relaxed);
    }

    /// A condition variable's clock.
    pub fn clock(&self) -> Clock {
        Clock::from_code(self.kind.load(Ordering::Acquire))
    }

    /// Sets a condition variable's clock.
    pub fn set_clock(&self, clock: Clock) {
        self.kind.store(clock.code(), Ordering::Release);
    }
}

/// Sets of counters: a thread adds to the set of its slot modulo this. Each set is a cache
/// line of its own, so thread-processes merging at the same moment do not contend for one
/// line (with one shared line, its five read-modify-writes per record bounced between the
/// cores at every merge).
pub const COUNTER_SETS: usize = 16;

/// The runtime's counters (`NVT_STATS=1`), kept in [`COUNTER_SETS`] sets and summed over
/// all of them (every thread-process of the run) when read.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Counters {
    sets: [CounterSet; COUNTER_SETS],
}

/// One set of counters, added to by the threads whose slot selects it.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct CounterSet {
    /// Commit points (epoch flips).
    pub commits: AtomicU64,
    /// Redo records written.
    pub records: AtomicU64,
    /// Bytes of runs logged.
    pub logged_bytes: AtomicU64,
    /// Dirty pages merged.
    pub merged_pages: AtomicU64,
    /// Checkpoints and compactions of the log.
    pub checkpoints: AtomicU64,
    /// Bytes of records written (headers and padding included).
    pub log_bytes: AtomicU64,
    /// Groups of open sections started.
    pub groups: AtomicU64,
}

impl Counters {
    /// The set the thread in `slot` adds to.
    pub fn of(&self, slot: u32) -> &CounterSet {
        &self.sets[slot as usize % COUNTER_SETS]
    }

    /// Adds `amount` to `counter` (statistics: relaxed).
    pub fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }

    /// The counters now, summed over the sets.
    pub fn snapshot(&self) -> Stats {
        let sum = |field: fn(&CounterSet) -> &AtomicU64| -> u64 {
            self.sets
                .iter()
                .map(|set| field(set).load(Ordering::Relaxed))
                .sum()
        };
        Stats {
            commits: sum(|set| &set.commits),
            records: sum(|set| &set.records),
            logged_bytes: sum(|set| &set.logged_bytes),
            merged_pages: sum(|set| &set.merged_pages),
            checkpoints: sum(|set| &set.checkpoints),
            log_bytes: sum(|set| &set.log_bytes),
            groups: sum(|set| &set.groups),
        }
    }
}

/// One lane of the log: its appender's lock and its tail, a cache line of its own (the
/// appenders of different lanes write their lanes' words at the same moment; four lanes to
/// a line made every append's lock, tail update and unlock contend with three other lanes').
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Lane {
    /// Held while a record is appended to the lane (threads whose slots share the lane
    /// take turns; with no more threads than lanes it is never contended).
    pub lock: LockWord,
    /// Bytes used in the lane in this lap.
    pub tail: AtomicU64,
}

/// Appenders against checkpoints: any number of appenders at once, or one checkpoint.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Gate {
    /// Appenders inside (a futex word the checkpoint waits on).
    appenders: AtomicU32,
    /// 1 while a checkpoint runs or waits for the appenders to leave (a futex word the
    /// appenders wait on).
    closed: AtomicU32,
    /// Serialises checkpoints.
    checkpoint: LockWord,
}

impl Gate {
    /// Enters as an appender, waiting while a checkpoint runs.
    pub fn enter(&self) {
        loop {
            self.appenders.fetch_add(1, Ordering::SeqCst);
            if self.closed.load(Ordering::SeqCst) == 0 {
                return;
            }
            self.leave();
            futex_wait(&self.closed, 1);
        }
    }

    /// Leaves as an appender.
    pub fn leave(&self) {
        if self.appenders.fetch_sub(1, Ordering::SeqCst) == 1
            && self.closed.load(Ordering::SeqCst) != 0
        {
            futex_wake(&self.appenders, 1);
        }
    }

    /// Closes the gate for a checkpoint: waits until no appender is inside. The caller is
    /// not inside itself.
    pub fn close(&self) {
        self.checkpoint.lock();
        self.closed.store(1, Ordering::SeqCst);
        let mut patience = Patience::new();
        loop {
            let inside = self.appenders.load(Ordering::SeqCst);
            if inside == 0 {
                return;
            }
            futex_wait_for(&self.appenders, inside, std::time::Duration::from_millis(1));
            patience.tick();
        }
    }

    /// Opens the gate again after a checkpoint.
    pub fn open(&self) {
        self.closed.store(0, Ordering::SeqCst);
        futex_wake(&self.closed, i32::MAX);
        self.checkpoint.unlock();
    }
}

/// The log's volatile state, shared by every process of the run.
#[repr(C)]
#[derive(Debug)]
pub struct LogShared {
    /// The current lap (mirror of the lap word; changed only by a checkpoint).
    pub lap: AtomicU64,
    /// The next record's sequence number.
    pub next_seq: AtomicU64,
    /// Appenders against checkpoints.
    pub gate: Gate,
    /// The lanes.
    pub lanes: [Lane; MAX_LANES as usize],
}

impl LogShared {
    /// The journal state now (under the closed gate: no appender changes it meanwhile).
    pub fn state(&self, lanes: usize) -> JournalState {
        JournalState {
            lap: self.lap.load(Ordering::Acquire),
            tails: self.lanes[..lanes]
                .iter()
                .map(|lane| lane.tail.load(Ordering::Acquire))
                .collect(),
        }
    }

    /// Stores `state` (under the closed gate, or before any fork).
    pub fn set_state(&self, state: &JournalState) {
        self.lap.store(state.lap, Ordering::Release);
        for (lane, &tail) in self.lanes.iter().zip(&state.tails) {
            lane.tail.store(tail, Ordering::Release);
        }
    }
}

/// The shared control block.
#[repr(C)]
#[derive(Debug)]
pub struct Shared {
    /// Live thread-processes (main included).
    pub live_threads: AtomicU32,
    /// Persistence steps taken (for `NVT_CRASH_AT`).
    pub steps: AtomicU64,
    /// Set by the first process that ends the run because a thread died: only it says so
    /// on stderr (every waiter's watchdog may find the same death).
    pub ending: AtomicU32,
    /// The log's lap, sequence numbers, lanes and checkpoint gate.
    pub log: LogShared,
    /// Groups of sections that commit together.
    pub groups: crate::groups::Groups,
    /// Statistics of the run (`NVT_STATS=1`).
    pub counters: Counters,
    /// Where the time goes (`NVT_PROFILE=1`).
    pub profile: crate::profile::Profile,
    /// Thread table; slot 0 is the main thread.
    pub threads: [ThreadSlot; MAX_THREADS],
    /// The status a thread other than main called `exit` with, plus one (0: none).
    pub exit_status: AtomicU32,
    /// Signal actions the program set while threads existed, for every thread-process.
    pub dispositions: crate::runtime::dispositions::Dispositions,
    /// Signals to the program as a whole: claims, group senders, pulls and discards.
    pub routing: crate::runtime::routing::Routing,
    /// Serialises claims and releases of each table's slots (lookups take no lock).
    table_locks: [LockWord; 4],
    mutexes: [SyncSlot; MAX_MUTEXES],
    conds: [SyncSlot; MAX_CONDS],
    barriers: [SyncSlot; MAX_BARRIERS],
    onces: [SyncSlot; MAX_ONCES],
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
    /// `pthread_once_t` objects.
    Once,
}

impl Table {
    fn index(self) -> usize {
        match self {
            Table::Mutex => 0,
            Table::Cond => 1,
            Table::Barrier => 2,
            Table::Once => 3,
        }
    }
}

impl Shared {
    /// Maps a zeroed control block shared with every future child.
    pub fn map() -> io::Result<&'static Shared> {
        let len = std::mem::size_of::<Shared>();
        let at = crate::pages::map_shared_zeroed(len)?;
        // SAFETY: a fresh anonymous shared mapping; all-zero bytes are a valid `Shared`
        // (every field is an atomic integer); it is never unmapped, so 'static holds.
        Ok(unsafe { &*at.cast::<Shared>() })
    }

    fn table(&self, table: Table) -> &[SyncSlot] {
        match table {
            Table::Mutex => &self.mutexes,
            Table::Cond => &self.conds,
            Table::Barrier => &self.barriers,
            Table::Once => &self.onces,
        }
    }

    /// Probe order of `key` in a table of `len` slots.
    fn probes(key: u64, len: usize) -> impl Iterator<Item = usize> {
        let start = (key >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize;
        (0..len).map(move |probe| (start + probe) % len)
    }

    /// The slot of the object at `key` if it has one (no lock: keys never move, and a slot
    /// being claimed concurrently is found by [`Shared::slot`]'s locked rescan).
    pub fn find(&self, table: Table, key: u64) -> Option<&SyncSlot> {
        let slots = self.table(table);
        for index in Self::probes(key, slots.len()) {
            let slot = &slots[index];
            match slot.key.load(Ordering::Acquire) {
                found if found == key => return Some(slot),
                0 => return None,
                _ => {}
            }
        }
        None
    }

    /// The slot for the object at `key`; on first use it is claimed, every field reset and
    /// `init` run on it before other processes can find it. `None` if the table is full.
    pub fn slot(&self, table: Table, key: u64, init: &dyn Fn(&SyncSlot)) -> Option<&SyncSlot> {
        assert!(
            key != 0 && key != TOMBSTONE,
            "bad synchronisation object {key:#x}"
        );
        if let Some(slot) = self.find(table, key) {
            return Some(slot);
        }
        let lock = &self.table_locks[table.index()];
        lock.lock();
        let claimed = self.claim_locked(table, key, init);
        lock.unlock();
        claimed
    }

    /// [`Shared::slot`], resetting the slot and running `init` even if it exists (`*_init`).
    pub fn reinit(&self, table: Table, key: u64, init: &dyn Fn(&SyncSlot)) -> Option<&SyncSlot> {
        let lock = &self.table_locks[table.index()];
        lock.lock();
        let slot = self.claim_locked(table, key, &|_| {}).inspect(|slot| {
            slot.reset(table);
            init(slot);
        });
        lock.unlock();
        slot
    }

    fn claim_locked(&self, table: Table, key: u64, init: &dyn Fn(&SyncSlot)) -> Option<&SyncSlot> {
        if let Some(slot) = self.find(table, key) {
            return Some(slot);
        }
        let slots = self.table(table);
        let free = Self::probes(key, slots.len()).find(|&index| {
            let seen = slots[index].key.load(Ordering::Acquire);
            seen == 0 || seen == TOMBSTONE
        })?;
        let slot = &slots[free];
        slot.reset(table);
        init(slot);
        slot.key.store(key, Ordering::Release);
        Some(slot)
    }

    /// Releases the slot of the object at `key` (`*_destroy`), so a later object at any
    /// address can use it. Returns whether it had one.
    pub fn release(&self, table: Table, key: u64) -> bool {
        let lock = &self.table_locks[table.index()];
        lock.lock();
        let found = self.find(table, key).inspect(|slot| {
            slot.reset(table);
            slot.key.store(TOMBSTONE, Ordering::Release);
        });
        lock.unlock();
        found.is_some()
    }

    /// Slots in use in `table` (for tests and statistics).
    pub fn slots_in_use(&self, table: Table) -> usize {
        self.table(table)
            .iter()
            .filter(|slot| {
                let key = slot.key.load(Ordering::Acquire);
                key != 0 && key != TOMBSTONE
            })
            .count()
    }
}
