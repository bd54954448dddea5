//! Power-failure images for whole C programs (`NVT_PFAIL`, `docs/nvthreads.md` §7).
//!
//! A `SIGKILL` at a persistence step (`NVT_CRASH_AT`) leaves every store in the pool file:
//! it models a process crash. [`PfailPm`] wraps the native backend and keeps, in memory
//! shared by every thread-process of the run, the state of each 64-byte line of the pool
//! under the ADR model of `docs/crash-model.md` §4.1: the line's content when it was last
//! made durable (its *pre-image*), and whether it has been stored to, flushed, or stored to
//! again after a flush since then. At the crash point, [`power_failure`] writes a chosen
//! subset of the pending lines back to their pre-images in the pool file itself, with plain
//! stores through the mapping (they are the simulated failure, not part of the protocol);
//! the process group is killed right after. The next run recovers from that image.
//!
//! **The crash point is just before the fence.** The runtime's steps are counted after each
//! fence of the journal (the fence hook runs immediately after it). A fence here does not
//! retire its lines at once: it only marks itself, and the lines it made durable are
//! dropped from the pending set by the next seam call (any call: store, flush or fence).
//! So at step `n` the pending set is still the one of the moment *before* fence `n` took
//! effect, which is `crashsim`'s `Fence(n)` crash point: every line written since the
//! previous fence (flushed or not), plus any line never flushed at all, may or may not have
//! reached the media. The state right after fence `n - 1` (mode `all`) and every mix of old
//! and new lines in between (mode `random`) are reachable images.
//!
//! Modes (`NVT_PFAIL=<mode>`):
//! - `none`: keep every pending line (the pool file as a `SIGKILL` leaves it);
//! - `all`: revert every pending line (nothing that was not yet durable survives);
//! - `random:<seed>`: each pending line independently kept, reverted, or torn: a prefix of
//!   its 8-byte words in address order kept and the rest reverted. For a line written by one
//!   ascending store, as every log line is, that is a program-order prefix, which the model
//!   allows; a line written several times may also come out as a mix that no order gives,
//!   which the journal never relies on (where it orders stores within a line, a fence
//!   separates them). The seed is mixed with the step number.
//!
//! Every store through the wrapper ends with a `sched_yield`, so that on this machine's two
//! cores other thread-processes still append between one's store and its fence, and crash
//! points fall between two threads' appends (`c_power_failure.rs` checks that they do).
//!
//! Non-temporal stores count as stored and flushed (durable at the next fence of the same
//! process). A fence completes only the flushes of the process that issues it, as `sfence`
//! orders only its own core's `clwb`s: thread-processes append to their log lanes at the
//! same moment, and one's fence must not make another's flushed lines durable. The pending
//! set is shared, so lines a thread-process left pending (only a buggy protocol does: every
//! journal operation ends with a fence over everything it stored) are still rolled back
//! when another process crashes.
//! The last fence is completed lazily (at the next seam call); a crash completes it first
//! unless the crashing process issued it, since another process has returned from it and
//! may have acted on it.
//!
//! The wrapper is only built when `NVT_PFAIL` is set ([`RtPool`], [`RtJournal`]): without it
//! the runtime's journal is a plain `Journal<Native>`, and the only cost is one `match` per
//! journal operation.

use crate::error::NvtError;
use crate::journal::{
    Checkpoint, Config, Geometry, Journal, JournalState, LAYOUT, Mutation, Recovery,
};
use crate::record::Meta;
use pmem::{
    CACHE_LINE, CreateOptions, Native, NativeOptions, Persist, Pool, PoolError, Stats, WriteClass,
    assert_in_bounds, lines_covering,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

const LINE: usize = CACHE_LINE as usize;

/// What a power failure keeps of the pending lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Keep every pending line (a process crash).
    None,
    /// Revert every pending line.
    All,
    /// Keep, revert or tear each pending line, seeded.
    Random(u64),
}

impl Mode {
    /// Parses `none`, `all` or `random:<seed>`.
    pub fn parse(text: &str) -> Option<Mode> {
        match text.trim() {
            "none" => Some(Mode::None),
            "all" => Some(Mode::All),
            other => other
                .strip_prefix("random:")
                .and_then(|seed| seed.trim().parse().ok())
                .map(Mode::Random),
        }
    }
}

/// Line states in the shared table.
mod line {
    /// Durable: not pending.
    pub const CLEAN: u8 = 0;
    /// Stored to since it was last durable, not flushed since.
    pub const DIRTY: u8 = 1;
    /// Flushed after its last store: the next fence makes it durable.
    pub const FLUSHED: u8 = 2;
    /// Flushed, then stored to again: the next fence makes the flushed content durable.
    pub const FLUSHED_DIRTY: u8 = 3;
}

/// The head of the shared table.
#[repr(C)]
struct Control {
    /// Spin lock over the whole table (0 free, 1 held).
    lock: AtomicU32,
    /// The process whose last fence's retirements are not applied yet (0: none).
    unfinalized: AtomicU32,
    /// Entries in the pending list.
    count: AtomicU64,
}

/// What one rollback did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Lines pending at the crash point.
    pub pending: u64,
    /// Pending lines kept as they are.
    pub kept: u64,
    /// Pending lines written back to their pre-images.
    pub reverted: u64,
    /// Pending lines torn (a prefix of their words kept).
    pub torn: u64,
    /// Pending lines last stored to by another process than the one failing (another
    /// thread's append in flight: concurrent commits).
    pub foreign: u64,
}

/// The shared line table of one pool mapping: one `MAP_SHARED | MAP_ANONYMOUS` mapping made
/// when the pool is opened (before any fork), holding the control block, a state byte per
/// line, the list of pending lines, and two images per line (the pre-image, and the
/// content when the line was last flushed). Never unmapped (the runtime's lives as long as
/// the process; tests leak a few small ones).
struct Sim {
    /// The pool mapping (the native backend's; valid in every process of the run).
    base: *mut u8,
    /// Pool length in bytes (a multiple of 64).
    len: u64,
    mode: Mode,
    control: *const Control,
    states: *mut u8,
    list: *mut u32,
    /// Per line: the process that last flushed it (whose fence makes it durable).
    flushers: *mut u32,
    /// Per line: the process that last stored to it.
    writers: *mut u32,
    pre: *mut u8,
    flushed: *mut u8,
}

// SAFETY: the table's mapping is never unmapped. The pool mapping is the native backend's:
// the table is used only through the `PfailPm` that owns that backend, or by
// `power_failure`, which the runtime calls only from the journal's fence hook, while the
// journal (and so the mapping) is alive. Every access to the table is made while holding
// its lock, and the pool mapping is written only by the backend's own operations
// (serialised by the same lock) and by the rollback.
unsafe impl Send for Sim {}
// SAFETY: as for `Send`: all shared mutation happens under the table's lock.
unsafe impl Sync for Sim {}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("len", &self.len)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// The most recently opened table, for [`power_failure`] (which runs inside the fence hook,
/// where the journal is borrowed).
static ACTIVE: AtomicPtr<Sim> = AtomicPtr::new(std::ptr::null_mut());

/// Holds the table's lock.
struct Locked<'a>(&'a Sim);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.0.control().lock.store(0, Ordering::Release);
    }
}

impl Sim {
    fn new(base: *mut u8, len: u64, mode: Mode) -> std::io::Result<&'static Sim> {
        let lines = len / CACHE_LINE;
        if !len.is_multiple_of(CACHE_LINE) || lines > u64::from(u32::MAX) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("pool of {len} bytes: not whole lines, or too large to simulate"),
            ));
        }
        let lines = lines as usize;
        let states_at = std::mem::size_of::<Control>();
        let list_at = (states_at + lines).next_multiple_of(8);
        let flushers_at = list_at + 4 * lines;
        let writers_at = flushers_at + 4 * lines;
        let pre_at = (writers_at + 4 * lines).next_multiple_of(LINE);
        let flushed_at = pre_at + len as usize;
        let total = flushed_at + len as usize;
        // Zeroed: every line CLEAN, an unlocked, empty control block.
        let at = crate::pages::map_shared_zeroed(total)?;
        // SAFETY: all offsets are inside the `total` bytes just mapped.
        let sim = unsafe {
            Sim {
                base,
                len,
                mode,
                control: at.cast::<Control>(),
                states: at.add(states_at),
                list: at.add(list_at).cast::<u32>(),
                flushers: at.add(flushers_at).cast::<u32>(),
                writers: at.add(writers_at).cast::<u32>(),
                pre: at.add(pre_at),
                flushed: at.add(flushed_at),
            }
        };
        Ok(Box::leak(Box::new(sim)))
    }

    fn control(&self) -> &Control {
        // SAFETY: the control block is at the start of the table's mapping, which is never
        // unmapped; all its fields are atomics (zero is a valid value of each).
        unsafe { &*self.control }
    }

    fn lock(&self) -> Locked<'_> {
        let lock = &self.control().lock;
        let mut spins = 0u32;
        while lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 100 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Locked(self)
    }

    fn lines(&self) -> usize {
        (self.len / CACHE_LINE) as usize
    }

    /// The state of line `at` (< `lines()`). Callers hold the lock.
    fn state(&self, _locked: &Locked<'_>, at: usize) -> u8 {
        assert!(at < self.lines());
        // SAFETY: `at` is inside the state array; the lock serialises all accesses.
        unsafe { self.states.add(at).read() }
    }

    fn set_state(&self, _locked: &Locked<'_>, at: usize, state: u8) {
        assert!(at < self.lines());
        // SAFETY: as in `state`.
        unsafe { self.states.add(at).write(state) }
    }

    fn count(&self) -> usize {
        self.control().count.load(Ordering::Relaxed) as usize
    }

    /// Entry `i` (< `count()`) of the pending list.
    fn entry(&self, _locked: &Locked<'_>, i: usize) -> usize {
        assert!(i < self.lines());
        // SAFETY: `i` is inside the list (capacity: one entry per line); the lock
        // serialises all accesses.
        unsafe { self.list.add(i).read() as usize }
    }

    fn set_entry(&self, _locked: &Locked<'_>, i: usize, at: usize) {
        assert!(i < self.lines() && at < self.lines());
        // SAFETY: as in `entry`; `at` fits in u32 (checked in `new`).
        unsafe { self.list.add(i).write(at as u32) }
    }

    /// Copies line `at` of the pool (its current content) into `image` (`pre` or `flushed`).
    fn save(&self, _locked: &Locked<'_>, image: *mut u8, at: usize) {
        assert!(at < self.lines());
        // SAFETY: both lines are inside their mappings (the pool and the image are `len`
        // bytes); they are distinct mappings. The lock excludes concurrent stores through
        // the seam.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(at * LINE), image.add(at * LINE), LINE)
        }
    }

    /// The process that last flushed line `at`. Callers hold the lock.
    fn flusher(&self, _locked: &Locked<'_>, at: usize) -> u32 {
        assert!(at < self.lines());
        // SAFETY: `at` is inside the flusher array; the lock serialises all accesses.
        unsafe { self.flushers.add(at).read() }
    }

    fn set_flusher(&self, _locked: &Locked<'_>, at: usize, process: u32) {
        assert!(at < self.lines());
        // SAFETY: as in `flusher`.
        unsafe { self.flushers.add(at).write(process) }
    }

    /// The process that last stored to line `at`. Callers hold the lock.
    fn writer(&self, _locked: &Locked<'_>, at: usize) -> u32 {
        assert!(at < self.lines());
        // SAFETY: `at` is inside the writer array; the lock serialises all accesses.
        unsafe { self.writers.add(at).read() }
    }

    fn set_writer(&self, _locked: &Locked<'_>, at: usize, process: u32) {
        assert!(at < self.lines());
        // SAFETY: as in `writer`.
        unsafe { self.writers.add(at).write(process) }
    }

    /// Applies the retirements of the last fence, if not done yet: the lines its process
    /// flushed become durable; those stored to again after that flush become durable as
    /// flushed. Lines other processes flushed stay pending until their own fences.
    fn finalize(&self, locked: &Locked<'_>) {
        let control = self.control();
        let fencer = control.unfinalized.load(Ordering::Relaxed);
        if fencer == 0 {
            return;
        }
        let mut kept = 0;
        for i in 0..self.count() {
            let at = self.entry(locked, i);
            let state = self.state(locked, at);
            let retired = matches!(state, line::FLUSHED | line::FLUSHED_DIRTY)
                && self.flusher(locked, at) == fencer;
            match state {
                _ if !retired => {}
                line::FLUSHED => {
                    self.set_state(locked, at, line::CLEAN);
                    continue;
                }
                line::FLUSHED_DIRTY => {
                    assert!(at < self.lines());
                    // SAFETY: line `at` of both images is inside their mappings, which are
                    // distinct; the lock is held.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            self.flushed.add(at * LINE),
                            self.pre.add(at * LINE),
                            LINE,
                        )
                    }
                    self.set_state(locked, at, line::DIRTY);
                }
                _ => {}
            }
            self.set_entry(locked, kept, at);
            kept += 1;
        }
        control.count.store(kept as u64, Ordering::Relaxed);
        control.unfinalized.store(0, Ordering::Relaxed);
    }

    /// Before a store to `[off, off + len)`: records the pre-image of every covered line
    /// that was durable.
    fn before_store(&self, locked: &Locked<'_>, off: u64, len: u64) {
        self.finalize(locked);
        let process = crate::runtime::process::real_pid() as u32;
        for at in lines_covering(off, len) {
            let at = at as usize;
            self.set_writer(locked, at, process);
            match self.state(locked, at) {
                line::CLEAN => {
                    self.save(locked, self.pre, at);
                    let count = self.count();
                    self.set_entry(locked, count, at);
                    self.control()
                        .count
                        .store(count as u64 + 1, Ordering::Relaxed);
                    self.set_state(locked, at, line::DIRTY);
                }
                line::FLUSHED => self.set_state(locked, at, line::FLUSHED_DIRTY),
                _ => {}
            }
        }
    }

    /// A flush of `[off, off + len)` (or the write-back an NT store implies): every covered
    /// pending line's current content is what the next fence makes durable.
    fn flushed(&self, locked: &Locked<'_>, off: u64, len: u64) {
        let process = crate::runtime::process::real_pid() as u32;
        for at in lines_covering(off, len) {
            let at = at as usize;
            if self.state(locked, at) != line::CLEAN {
                self.save(locked, self.flushed, at);
                self.set_state(locked, at, line::FLUSHED);
                self.set_flusher(locked, at, process);
            }
        }
    }

    /// Writes the chosen subset of the pending lines back to their pre-images, through the
    /// plain mapping. The lock stays held when `hold` (the process group is about to die:
    /// nothing may store through the seam any more).
    fn fail(&self, step: u64, hold: bool) -> Outcome {
        let locked = self.lock();
        // The last fence is still unfinalized. The crash stands just before this process's
        // own fence, so that one may be lost; a fence made by another process has returned
        // there, and that process may have acted on it (acknowledged a section), so it is
        // complete. Leaving it pending lost acknowledged ledger transfers now and then.
        if self.control().unfinalized.load(Ordering::Relaxed)
            != (crate::runtime::process::real_pid() as u32)
        {
            self.finalize(&locked);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(match self.mode {
            Mode::Random(seed) => seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            _ => 0,
        });
        let mut outcome = Outcome {
            pending: self.count() as u64,
            ..Outcome::default()
        };
        let me = crate::runtime::process::real_pid() as u32;
        for i in 0..self.count() {
            let at = self.entry(&locked, i);
            if self.writer(&locked, at) != me {
                outcome.foreign += 1;
            }
            // Words [from, 8) of the line go back to the pre-image.
            let from = match self.mode {
                Mode::None => 8,
                Mode::All => 0,
                Mode::Random(_) => match rng.random_range(0..3) {
                    0 => 8,
                    1 => 0,
                    _ => rng.random_range(1..8),
                },
            };
            match from {
                8 => outcome.kept += 1,
                0 => outcome.reverted += 1,
                _ => outcome.torn += 1,
            }
            if from < 8 {
                assert!(at < self.lines());
                // SAFETY: bytes [from * 8, 64) of line `at` lie inside the pool mapping and
                // the pre-image mapping (distinct). These are the simulated failure's own
                // plain stores, made under the table's lock, which no seam call will take
                // again in this run when `hold` is set.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.pre.add(at * LINE + from * 8),
                        self.base.add(at * LINE + from * 8),
                        LINE - from * 8,
                    )
                }
            }
        }
        if hold {
            std::mem::forget(locked);
        }
        outcome
    }
}

/// The native backend with power-failure tracking: every store, flush and fence goes to
/// the native backend and updates the shared line table.
#[derive(Debug)]
pub struct PfailPm {
    native: Native,
    sim: &'static Sim,
}

impl PfailPm {
    /// Wraps `native`; crashes roll back according to `mode`. The table is shared with
    /// every process forked from now on. The most recently wrapped backend is the one
    /// [`power_failure`] acts on.
    pub fn new(native: Native, mode: Mode) -> std::io::Result<PfailPm> {
        let sim = Sim::new(native.base_ptr(), native.len(), mode)?;
        ACTIVE.store(std::ptr::from_ref(sim).cast_mut(), Ordering::Release);
        Ok(PfailPm { native, sim })
    }

    /// The wrapped backend.
    pub fn native(&self) -> &Native {
        &self.native
    }

    /// The lines a crash now could roll back, sorted (tests). Right after a fence these
    /// still include the lines it retires (the crash point is before the fence).
    pub fn pending_lines(&self) -> Vec<u64> {
        let locked = self.sim.lock();
        let mut lines: Vec<u64> = (0..self.sim.count())
            .map(|i| self.sim.entry(&locked, i) as u64)
            .collect();
        lines.sort_unstable();
        lines
    }

    /// Simulates the power failure at crash point `step` on this backend's pool (tests;
    /// the runtime uses [`power_failure`]). The backend stays usable.
    pub fn fail(&self, step: u64) -> Outcome {
        self.sim.fail(step, false)
    }
}

impl Persist for PfailPm {
    fn len(&self) -> u64 {
        self.native.len()
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        self.native.read(off, dst);
    }

    fn read_u64(&self, off: u64) -> u64 {
        self.native.read_u64(off)
    }

    fn write(&self, off: u64, src: &[u8], class: WriteClass) {
        assert_in_bounds(off, src.len() as u64, self.len());
        {
            let locked = self.sim.lock();
            self.sim.before_store(&locked, off, src.len() as u64);
            self.native.write(off, src, class);
        }
        // Lets other thread-processes run between this store and its flush and fence, as
        // they would on a machine with a core each: their appends then interleave with this
        // one, and crash points fall between two threads' appends.
        std::thread::yield_now();
    }

    fn write_u64(&self, off: u64, value: u64, class: WriteClass) {
        assert_in_bounds(off, 8, self.len());
        let locked = self.sim.lock();
        self.sim.before_store(&locked, off, 8);
        self.native.write_u64(off, value, class);
    }

    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass) {
        assert_in_bounds(off, src.len() as u64, self.len());
        let locked = self.sim.lock();
        self.sim.before_store(&locked, off, src.len() as u64);
        self.native.write_nt(off, src, class);
        self.sim.flushed(&locked, off, src.len() as u64);
    }

    fn flush(&self, off: u64, len: u64) {
        assert_in_bounds(off, len, self.len());
        let locked = self.sim.lock();
        self.sim.finalize(&locked);
        self.sim.flushed(&locked, off, len);
        self.native.flush(off, len);
    }

    fn fence(&self) {
        let locked = self.sim.lock();
        self.sim.finalize(&locked);
        self.native.fence();
        self.sim.control().unfinalized.store(
            crate::runtime::process::real_pid() as u32,
            Ordering::Relaxed,
        );
    }

    fn stats(&self) -> &Stats {
        self.native.stats()
    }

    fn durability_point(&self) {
        self.native.durability_point();
    }

    fn is_poisoned(&self) -> bool {
        self.native.is_poisoned()
    }
}

/// The crash point of the runtime (`NVT_CRASH_AT`), called just before it kills the
/// process group: rolls back the pending lines of the pool opened with `NVT_PFAIL` as its
/// mode says, and keeps the table locked so that nothing stores through the seam any more.
/// With `report` (`NVT_STATS=1`) prints what it did. Does nothing without `NVT_PFAIL`.
pub fn power_failure(step: u64, report: bool) {
    let sim = ACTIVE.load(Ordering::Acquire);
    if sim.is_null() {
        return;
    }
    // SAFETY: ACTIVE only ever holds leaked (never freed) tables.
    let sim = unsafe { &*sim };
    let outcome = sim.fail(step, true);
    if report {
        let _ = writeln!(
            std::io::stderr(),
            "nvthreads-pfail step={step} mode={:?} pending={} kept={} reverted={} torn={} \
             foreign={}",
            sim.mode,
            outcome.pending,
            outcome.kept,
            outcome.reverted,
            outcome.torn,
            outcome.foreign
        );
    }
}

/// The runtime's pool: on the native backend, or on [`PfailPm`] when `NVT_PFAIL` is set.
#[derive(Debug)]
pub enum RtPool {
    /// The native backend (always, without `NVT_PFAIL`).
    Native(Pool<Native>),
    /// The native backend with power-failure tracking.
    Pfail(Pool<PfailPm>),
}

impl RtPool {
    /// `Pool::open` with layout [`LAYOUT`], on the wrapped backend when `mode` is given
    /// (`NVT_PFAIL`).
    pub fn open(
        path: &Path,
        native: &NativeOptions,
        mode: Option<Mode>,
    ) -> Result<RtPool, PoolError> {
        Self::wrap(Pool::open(path, LAYOUT, native)?, mode)
    }

    /// `Pool::create`, on the wrapped backend when `mode` is given (`NVT_PFAIL`).
    pub fn create(
        path: &Path,
        options: &CreateOptions,
        mode: Option<Mode>,
    ) -> Result<RtPool, PoolError> {
        Self::wrap(Pool::create(path, options)?, mode)
    }

    /// Every line of the pool starts durable: the wrapper tracks from here on.
    fn wrap(pool: Pool<Native>, mode: Option<Mode>) -> Result<RtPool, PoolError> {
        match mode {
            None => Ok(RtPool::Native(pool)),
            Some(mode) => pool
                .wrap_backend(|native| PfailPm::new(native, mode).map_err(PoolError::from))
                .map(RtPool::Pfail),
        }
    }
}

/// The runtime's journal, over either backend of [`RtPool`].
#[derive(Debug)]
pub enum RtJournal {
    /// On the native backend.
    Native(Journal<Native>),
    /// On the power-failure wrapper.
    Pfail(Journal<PfailPm>),
}

/// Runs `$body` with `$j` bound to the journal, whichever backend it is on.
macro_rules! each {
    ($journal:expr, $j:ident => $body:expr) => {
        match $journal {
            RtJournal::Native($j) => $body,
            RtJournal::Pfail($j) => $body,
        }
    };
}

impl RtJournal {
    /// [`Journal::create_in`].
    pub fn create_in(pool: RtPool, config: &Config) -> Result<(RtJournal, JournalState), NvtError> {
        Ok(match pool {
            RtPool::Native(pool) => {
                let (journal, state) = Journal::create_in(pool, config)?;
                (RtJournal::Native(journal), state)
            }
            RtPool::Pfail(pool) => {
                let (journal, state) = Journal::create_in(pool, config)?;
                (RtJournal::Pfail(journal), state)
            }
        })
    }

    /// [`Journal::open_in`].
    pub fn open_in(
        pool: RtPool,
        mutation: Mutation,
        fence_hook: Option<fn()>,
    ) -> Result<(RtJournal, JournalState, Recovery), NvtError> {
        Ok(match pool {
            RtPool::Native(pool) => {
                let (journal, state, recovery) = Journal::open_in(pool, mutation, fence_hook)?;
                (RtJournal::Native(journal), state, recovery)
            }
            RtPool::Pfail(pool) => {
                let (journal, state, recovery) = Journal::open_in(pool, mutation, fence_hook)?;
                (RtJournal::Pfail(journal), state, recovery)
            }
        })
    }

    /// [`Journal::set_fence_hook`].
    pub fn set_fence_hook(&mut self, hook: Option<fn()>) {
        each!(self, j => j.set_fence_hook(hook))
    }

    /// [`Journal::set_mutation`] (tests only).
    #[doc(hidden)]
    pub fn set_mutation(&mut self, mutation: Mutation) {
        each!(self, j => j.set_mutation(mutation))
    }

    /// [`Journal::geometry`].
    pub fn geometry(&self) -> Geometry {
        each!(self, j => j.geometry())
    }

    /// [`Journal::read_home`].
    pub fn read_home(&self, offset: u64, dst: &mut [u8]) {
        each!(self, j => j.read_home(offset, dst))
    }

    /// [`Journal::append`].
    pub fn append(
        &self,
        lane: usize,
        tail: &mut u64,
        meta: Meta,
        body: &[u8],
    ) -> Result<u64, NvtError> {
        each!(self, j => j.append(lane, tail, meta, body))
    }

    /// [`Journal::checkpoint`].
    pub fn checkpoint(&self, state: &mut JournalState) -> Result<Checkpoint, NvtError> {
        each!(self, j => j.checkpoint(state))
    }

    /// [`Journal::wants_checkpoint`].
    pub fn wants_checkpoint(&self, state: &JournalState) -> bool {
        each!(self, j => j.wants_checkpoint(state))
    }

    /// [`Journal::clear_home`].
    pub fn clear_home(&self, offset: u64, len: u64) {
        each!(self, j => j.clear_home(offset, len))
    }

    /// `Pool::mark_unclean_on_drop` of the journal's pool.
    pub fn mark_unclean_on_drop(&self) {
        each!(self, j => j.pool().mark_unclean_on_drop())
    }

    /// [`Journal::close`].
    pub fn close(self) -> Result<(), NvtError> {
        each!(self, j => j.close())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Run;
    use std::fs::OpenOptions;

    const LEN: u64 = 64 * 1024;

    /// A wrapped backend over a fresh file of `LEN` bytes holding `fill` everywhere.
    fn backend(mode: Mode, fill: u8) -> (tempfile::TempDir, PfailPm) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pool");
        std::fs::write(&path, vec![fill; LEN as usize]).expect("write file");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        let native = Native::map(file, LEN, &NativeOptions::default()).expect("map");
        (dir, PfailPm::new(native, mode).expect("wrap"))
    }

    fn line_bytes(pm: &PfailPm, at: u64) -> [u8; LINE] {
        let mut bytes = [0u8; LINE];
        pm.read(at * CACHE_LINE, &mut bytes);
        bytes
    }

    #[test]
    fn modes_parse() {
        assert_eq!(Mode::parse("all"), Some(Mode::All));
        assert_eq!(Mode::parse("none"), Some(Mode::None));
        assert_eq!(Mode::parse("random:42"), Some(Mode::Random(42)));
        assert_eq!(Mode::parse("random:x"), None);
        assert_eq!(Mode::parse("some"), None);
    }

    #[test]
    fn stores_are_pending_until_flushed_and_fenced() {
        let (_dir, pm) = backend(Mode::All, 0);
        pm.write(70, &[1; 150], WriteClass::Log); // bytes 70..220: lines 1, 2, 3
        pm.write_u64(64 * 9, 7, WriteClass::Meta); // line 9
        assert_eq!(pm.pending_lines(), vec![1, 2, 3, 9]);
        // A fence without a flush persists nothing.
        pm.fence();
        pm.write(0, &[], WriteClass::Log);
        assert_eq!(pm.pending_lines(), vec![1, 2, 3, 9]);
        // Flushed lines stay pending until the fence (the crash point is before it) ...
        pm.flush(64, 128);
        assert_eq!(pm.pending_lines(), vec![1, 2, 3, 9]);
        pm.fence();
        assert_eq!(pm.pending_lines(), vec![1, 2, 3, 9]);
        // ... and are durable from the next seam call on.
        pm.flush(0, 0);
        assert_eq!(pm.pending_lines(), vec![3, 9]);
        pm.persist(64 * 3, 1);
        pm.persist(64 * 9, 8);
        pm.flush(0, 0);
        assert!(pm.pending_lines().is_empty());
    }

    #[test]
    fn a_crash_right_after_a_fence_may_lose_what_it_fenced() {
        let (_dir, pm) = backend(Mode::All, 0xAA);
        pm.write(64, &[1; 64], WriteClass::Log);
        pm.persist(64, 64);
        pm.write(128, &[2; 64], WriteClass::Log);
        pm.persist(128, 64);
        // Line 1 became durable at the first fence; line 2's fence is the crash point.
        let outcome = pm.fail(1);
        assert_eq!((outcome.pending, outcome.reverted), (1, 1));
        assert_eq!(line_bytes(&pm, 1), [1; LINE]);
        assert_eq!(line_bytes(&pm, 2), [0xAA; LINE]);
    }

    #[test]
    fn a_fence_another_process_returned_from_survives_the_crash() {
        let (_dir, pm) = backend(Mode::All, 0xAA);
        // SAFETY: the child only stores, flushes and fences through the wrapper (shared
        // mappings, no allocation) and leaves with _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            pm.write(64, &[1; 64], WriteClass::Log);
            pm.persist(64, 64);
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(0) };
        }
        assert!(child > 0, "fork");
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert_eq!(status, 0);
        // The child's fence returned (it could have acknowledged its record): a crash in
        // this process right now must keep the line, though no seam call has finalized
        // that fence yet.
        let outcome = pm.fail(1);
        assert_eq!((outcome.pending, outcome.reverted), (0, 0));
        assert_eq!(line_bytes(&pm, 1), [1; LINE]);
    }

    #[test]
    fn a_store_after_a_flush_is_not_made_durable_by_the_fence() {
        let (_dir, pm) = backend(Mode::All, 0);
        pm.write(64, &[1; 64], WriteClass::Log);
        pm.flush(64, 64);
        pm.write(64, &[2; 8], WriteClass::Log);
        pm.fence();
        pm.flush(0, 0);
        // The flushed content is durable; the later store is still pending over it.
        assert_eq!(pm.pending_lines(), vec![1]);
        let outcome = pm.fail(1);
        assert_eq!(outcome.reverted, 1);
        assert_eq!(line_bytes(&pm, 1), [1; LINE]);
    }

    #[test]
    fn non_temporal_stores_are_durable_at_the_next_fence() {
        let (_dir, pm) = backend(Mode::All, 0);
        pm.write_nt(256, &[3; 64], WriteClass::Log);
        assert_eq!(pm.pending_lines(), vec![4]);
        pm.fence();
        pm.flush(0, 0);
        assert!(pm.pending_lines().is_empty());
        assert_eq!(pm.fail(1).pending, 0);
        assert_eq!(line_bytes(&pm, 4), [3; LINE]);
    }

    #[test]
    fn mode_none_keeps_everything() {
        let (_dir, pm) = backend(Mode::None, 0);
        pm.write(0, &[9; 640], WriteClass::Log);
        let outcome = pm.fail(1);
        assert_eq!(
            (outcome.pending, outcome.kept, outcome.reverted),
            (10, 10, 0)
        );
        assert_eq!(line_bytes(&pm, 9), [9; LINE]);
    }

    #[test]
    fn mode_all_reverts_every_pending_line_to_its_last_durable_content() {
        let (_dir, pm) = backend(Mode::All, 5);
        pm.write(0, &[1; 4096], WriteClass::Log);
        pm.persist(0, 4096);
        pm.write(0, &[2; 4096], WriteClass::Log);
        pm.write(8192, &[3; 100], WriteClass::Log);
        pm.flush(8192, 100);
        let outcome = pm.fail(7);
        assert_eq!((outcome.pending, outcome.reverted), (64 + 2, 64 + 2));
        for at in 0..64 {
            assert_eq!(line_bytes(&pm, at), [1; LINE], "line {at}");
        }
        assert_eq!(line_bytes(&pm, 128), [5; LINE]);
        assert_eq!(line_bytes(&pm, 129), [5; LINE]);
    }

    #[test]
    fn mode_random_keeps_reverts_and_tears_lines_reproducibly() {
        let run = |seed: u64| {
            let (_dir, pm) = backend(Mode::Random(seed), 0);
            pm.write(0, &[0xFF; 64 * 300], WriteClass::Log);
            let outcome = pm.fail(3);
            let lines: Vec<[u8; LINE]> = (0..300).map(|at| line_bytes(&pm, at)).collect();
            (outcome, lines)
        };
        let (outcome, lines) = run(11);
        assert_eq!(outcome.pending, 300);
        assert_eq!(outcome.kept + outcome.reverted + outcome.torn, 300);
        assert!(outcome.kept > 50 && outcome.reverted > 50 && outcome.torn > 50);
        for line in &lines {
            // Every line is a prefix of new words followed by old ones.
            let new_words = line.chunks(8).take_while(|w| w == &[0xFF; 8]).count();
            assert!(line[new_words * 8..].iter().all(|&b| b == 0), "{line:?}");
        }
        let torn = lines
            .iter()
            .filter(|line| line[0] == 0xFF && line[LINE - 1] == 0)
            .count() as u64;
        assert_eq!(torn, outcome.torn);
        assert_eq!(run(11), (outcome, lines), "same seed, same image");
        assert_ne!(run(12).1, run(11).1, "another seed, another image");
    }

    #[test]
    fn journal_on_the_wrapper_recovers_what_it_committed() {
        // A pool used through the wrapper, failed with mode `all` right after a second
        // record's fence: the first record survives (it was fenced before), the second not.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("j.pool");
        let config = Config {
            heap_len: 8192,
            log_len: 4096,
            lanes: 2,
            base_addr: crate::DEFAULT_BASE_ADDR,
        };
        let mut create = CreateOptions::new(LAYOUT, config.pool_size());
        create.native = NativeOptions::default();
        let pool = Pool::create(&path, &create)
            .expect("create")
            .wrap_backend(|native| PfailPm::new(native, Mode::All))
            .expect("wrap");
        let (journal, mut state) = Journal::create_in(pool, &config).expect("journal");
        let run = Run {
            offset: 100,
            bytes: &[7; 16],
        };
        journal
            .append_data(&mut state, 0, 1, 0, &[run.into()])
            .expect("append");
        let second = Run {
            offset: 200,
            bytes: &[8; 16],
        };
        journal
            .append_data(&mut state, 1, 2, 0, &[second.into()])
            .expect("append");
        // Crash at the second append's fence: its record is reverted, the first holds.
        let outcome = journal.pool().pm().fail(1);
        assert!(outcome.reverted > 0);
        journal.pool().mark_unclean_on_drop();
        drop(journal);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("reopen");
        let native = Native::map(file, config.pool_size(), &create.native).expect("map");
        let (journal, _, recovery) = Journal::open(native).expect("recover");
        assert_eq!((recovery.records, recovery.was_clean), (1, false));
        let mut home = [0u8; 16];
        journal.read_home(100, &mut home);
        assert_eq!(home, [7; 16]);
        journal.read_home(200, &mut home);
        assert_eq!(home, [0; 16]);
    }
}
