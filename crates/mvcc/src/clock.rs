//! Snapshot and commit timestamps.
//!
//! Two clocks, chosen by [`ClockMode`]:
//!
//! - **TSC** (TimeStone's ORDO clock): the invariant time-stamp counter, read without any
//!   shared write. Cores' counters agree only up to an uncertainty `boundary` (measured once
//!   per process, [`tsc_boundary`]), so a commit takes `ts = t + boundary + 1`, where `t` is
//!   read after it pushed its versions, and waits until its own counter has passed `ts`
//!   before it validates, and passed `ts + boundary` before it returns. Then every snapshot
//!   read before the push (on any core) is below `ts`, and every snapshot read after the
//!   commit returned is above it.
//! - **Counter**: a global counter; a commit's timestamp is one `fetch_add` after its
//!   pushes, a snapshot is a load. Exact and wait-free, one shared cache line.
//!
//! Timestamps of one pool only grow, across opens too: the clock starts above every
//! timestamp recovery found.

use crossbeam_utils::CachePadded;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which clock timestamps come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum ClockMode {
    /// The TSC on machines with [`TSC_MIN_CPUS`] or more CPUs, an invariant TSC and a
    /// measurable boundary; the counter otherwise. (On a few cores the counter's cache line
    /// is never contended, while every TSC commit waits out the boundary twice.)
    #[default]
    Auto,
    /// The invariant time-stamp counter with an uncertainty boundary.
    Tsc,
    /// A global counter.
    Counter,
}

impl ClockMode {
    /// The clock this mode uses on this machine: `Tsc` or `Counter`. `Auto` takes the TSC
    /// only if its cross-core uncertainty could be measured ([`tsc_boundary`]).
    pub fn resolve(self) -> ClockMode {
        match self {
            ClockMode::Auto if many_cpus() && tsc_usable() && tsc_boundary().is_some() => {
                ClockMode::Tsc
            }
            ClockMode::Auto => ClockMode::Counter,
            ClockMode::Tsc if !tsc_usable() => ClockMode::Counter,
            other => other,
        }
    }
}

/// CPUs from which `Auto` prefers the TSC.
pub const TSC_MIN_CPUS: usize = 16;

fn many_cpus() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() >= TSC_MIN_CPUS)
}

fn tsc_usable() -> bool {
    pmem::cpu::has_invariant_tsc() && pmem::cpu::has_rdtscp()
}

/// The engine's clock.
#[derive(Debug)]
pub(crate) struct Clock {
    tsc: bool,
    /// Counter mode, running transactions: an unlinking bumps the counter (see
    /// [`Clock::retire_time`]). Recovery's clock never moves by itself.
    live: bool,
    /// Counter mode: the newest timestamp handed out.
    counter: CachePadded<AtomicU64>,
    /// TSC mode: added (wrapping) to the raw counter.
    offset: u64,
    /// TSC mode: the cross-core uncertainty, in cycles (0 for the counter).
    boundary: u64,
}

impl Clock {
    /// A clock whose snapshots are at least `after` and whose commit stamps are larger.
    pub(crate) fn new(mode: ClockMode, after: u64) -> Self {
        let tsc = mode.resolve() == ClockMode::Tsc;
        let boundary = if tsc {
            tsc_boundary().unwrap_or(FALLBACK_BOUNDARY)
        } else {
            0
        };
        let offset = if tsc {
            // Another core's counter may lag this one's by up to the boundary.
            (after + 2 * boundary + 1).wrapping_sub(pmem::cpu::rdtsc_ordered())
        } else {
            0
        };
        Clock {
            tsc,
            live: true,
            counter: CachePadded::new(AtomicU64::new(after)),
            offset,
            boundary,
        }
    }

    /// Recovery's clock: a counter at `at` that only [`Clock::advance`] moves, so no
    /// checkpoint during re-execution covers a record not yet re-executed.
    pub(crate) fn recovery(at: u64) -> Self {
        Clock {
            live: false,
            ..Clock::new(ClockMode::Counter, at)
        }
    }

    /// Whether this is the TSC clock.
    pub(crate) fn is_tsc(&self) -> bool {
        self.tsc
    }

    /// The uncertainty boundary (0 for the counter).
    pub(crate) fn boundary(&self) -> u64 {
        self.boundary
    }

    /// The current time: a snapshot sees every commit stamped at or before it.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        if self.tsc {
            pmem::cpu::rdtsc_ordered().wrapping_add(self.offset)
        } else {
            self.counter.load(Ordering::SeqCst)
        }
    }

    /// A commit timestamp, taken after the commit pushed its versions: larger than every
    /// snapshot read (on any core) before the pushes.
    #[inline]
    pub(crate) fn stamp(&self) -> u64 {
        if self.tsc {
            // The pushes must be visible to every core before the counter is read: `lfence`
            // orders the read after earlier instructions, not after earlier stores leave
            // the store buffer. Without this fence a reader whose snapshot is past the stamp
            // could still load a chunk's old head, then wait for the version of another
            // chunk of the same commit: a torn read (found by `tests/model.rs` with the TSC
            // clock). The counter's stamp is a locked read-modify-write, a full barrier.
            std::sync::atomic::fence(Ordering::SeqCst);
            self.now() + self.boundary + 1
        } else {
            self.counter.fetch_add(1, Ordering::SeqCst) + 1
        }
    }

    /// How a commit stores its in-flight bound (`Shared::inflight`) before it pushes. With
    /// the counter, the stamp that follows is a `SeqCst` read-modify-write of the clock: a
    /// checkpointer whose (acquiring) clock read sees that stamp or a later one then sees
    /// the bound too, so the store needs no order of its own (model-checked:
    /// `a_checkpoint_that_reads_a_stamp_sees_its_inflight_bound`). The TSC's stamp touches
    /// no memory, so there the store itself is `SeqCst`.
    #[inline]
    pub(crate) fn inflight_order(&self) -> Ordering {
        if self.tsc {
            Ordering::SeqCst
        } else {
            Ordering::Relaxed
        }
    }

    /// Whether a commit stamped `ts` by a transaction whose snapshot is `snapshot` is the
    /// only commit stamped after that snapshot, so that no version can carry a stamp in
    /// `(snapshot, ts)`: with the counter every stamp is a distinct `fetch_add`, and `ts ==
    /// snapshot + 1` means the counter still read `snapshot` when this commit stamped (an
    /// unlinking's [`Clock::retire_time`] also moves it, and only makes this false). Its
    /// reads then cannot have changed, and validation has nothing to look at. Never with
    /// the TSC, whose stamps are not counted.
    #[inline]
    pub(crate) fn only_stamp_since(&self, snapshot: u64, ts: u64) -> bool {
        !self.tsc && ts == snapshot.wrapping_add(1)
    }

    /// Waits until this core's clock has passed `ts` (a commit does so before it validates,
    /// so any commit that pushes later gets a larger timestamp).
    #[inline]
    pub(crate) fn wait_past(&self, ts: u64) {
        while self.tsc && self.now() <= ts {
            std::hint::spin_loop();
        }
    }

    /// Waits until every core's clock has passed `ts` (a commit does so before it returns,
    /// so every later snapshot, on any core, sees it).
    #[inline]
    pub(crate) fn wait_visible(&self, ts: u64) {
        self.wait_past(ts.saturating_add(self.boundary));
    }

    /// The time of an unlinking, for its grace period: every announcement made after it is
    /// larger. (The counter is bumped, so a read-only stretch with no commits cannot keep a
    /// grace period from ending.)
    pub(crate) fn retire_time(&self) -> u64 {
        if self.tsc {
            // As in `stamp`: the unlinking's stores are visible to every core before the
            // time is read, so a reader announced after that time cannot load a pointer to
            // what was unlinked.
            std::sync::atomic::fence(Ordering::SeqCst);
            self.now()
        } else if !self.live {
            self.now()
        } else {
            self.counter.fetch_add(1, Ordering::SeqCst)
        }
    }

    /// Moves a counter clock forward to `to` (recovery follows the re-executed records with
    /// it, so no checkpoint covers a record before it is re-executed).
    pub(crate) fn advance(&self, to: u64) {
        debug_assert!(!self.tsc, "only the recovery clock advances");
        self.counter.fetch_max(to, Ordering::SeqCst);
    }

    /// A time at or before every time another core may read right now (a lower bound to
    /// compare announcements with).
    #[inline]
    pub(crate) fn floor(&self) -> u64 {
        self.now().saturating_sub(self.boundary)
    }
}

/// The TSC's cross-core uncertainty on this machine, in cycles, or `None` if it could not
/// be measured: measured once per process by passing counter values between two threads
/// ([`measure_boundary`]), in batches for at most `CALIBRATION` (the smallest result
/// counts).
pub fn tsc_boundary() -> Option<u64> {
    static BOUNDARY: OnceLock<Option<u64>> = OnceLock::new();
    *BOUNDARY.get_or_init(|| {
        let started = std::time::Instant::now();
        let mut best: Option<u64> = None;
        while started.elapsed() < CALIBRATION {
            if let Some(b) = measure_boundary(200) {
                best = Some(best.map_or(b, |old| old.min(b)));
            }
        }
        best
    })
}

/// Time spent measuring the TSC boundary.
const CALIBRATION: std::time::Duration = std::time::Duration::from_millis(100);
/// Smallest boundary used, in cycles (covers the read's own skew on one core).
const MIN_BOUNDARY: u64 = 64;
/// A measured minimum above this means the two threads never ran at the same time (each
/// hand-over waited for a context switch): the measurement says nothing.
const MAX_CREDIBLE: u64 = 50_000;
/// Boundary of an explicitly requested TSC clock that could not be measured.
const FALLBACK_BOUNDARY: u64 = 20_000;

/// Measures the uncertainty of the TSC between two threads over `rounds` round trips.
///
/// A thread reads its counter and posts the value; the other reads its own on receipt. The
/// difference is the clocks' offset plus the hand-over latency, so the smallest difference
/// in each direction bounds the offset from above (ORDO's method); the boundary is the
/// larger of the two, never below `MIN_BOUNDARY`. `None` if the other thread could not run
/// or never ran at the same time as this one (a loaded machine).
pub fn measure_boundary(rounds: u32) -> Option<u64> {
    let boxes = std::sync::Arc::new([Mailbox::default(), Mailbox::default()]);
    let theirs = std::sync::Arc::clone(&boxes);
    let helper = std::thread::Builder::new()
        .name("tsc-boundary".into())
        .spawn(move || {
            let [to_helper, to_main] = &*theirs;
            let mut smallest = i64::MAX;
            for _ in 0..rounds {
                let sent = to_helper.receive()?;
                smallest = smallest.min(elapsed_since(sent));
                to_main.send();
            }
            Some(smallest)
        });
    let Ok(helper) = helper else {
        return None;
    };
    let [to_helper, to_main] = &*boxes;
    let mut smallest = Some(i64::MAX);
    for _ in 0..rounds {
        to_helper.send();
        match to_main.receive() {
            Some(sent) => smallest = smallest.map(|s| s.min(elapsed_since(sent))),
            None => {
                smallest = None;
                break;
            }
        }
    }
    let (a, b) = (smallest?, helper.join().ok().flatten()?);
    let boundary = (a.max(b).max(0) as u64).max(MIN_BOUNDARY);
    (boundary <= MAX_CREDIBLE).then_some(boundary)
}

/// This thread's counter minus a value read on another thread (negative if this one lags).
fn elapsed_since(sent: u64) -> i64 {
    pmem::cpu::rdtsc_ordered().wrapping_sub(sent) as i64
}

/// A one-value mailbox carrying a counter reading (the top bit marks it full).
#[derive(Debug, Default)]
struct Mailbox {
    slot: AtomicU64,
}

impl Mailbox {
    const FULL: u64 = 1 << 63;

    /// Posts this thread's counter.
    fn send(&self) {
        let t = pmem::cpu::rdtsc_ordered();
        self.slot.store(t | Self::FULL, Ordering::SeqCst);
    }

    /// Takes the posted reading, or `None` if nothing arrives within 20 ms.
    fn receive(&self) -> Option<u64> {
        let started = std::time::Instant::now();
        for spin in 0u64.. {
            let v = self.slot.swap(0, Ordering::SeqCst);
            if v & Self::FULL != 0 {
                return Some(v & !Self::FULL);
            }
            if spin % 4096 == 4095 && started.elapsed().as_millis() >= 20 {
                return None;
            }
            std::hint::spin_loop();
        }
        unreachable!("the loop above returns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_stamps_exceed_earlier_snapshots() {
        let clock = Clock::new(ClockMode::Counter, 41);
        let s = clock.now();
        assert_eq!(s, 41);
        let ts = clock.stamp();
        assert!(ts > s);
        assert!(clock.now() >= ts);
    }

    #[test]
    fn a_stamp_is_the_only_one_since_a_snapshot_only_when_nothing_else_moved_the_counter() {
        let clock = Clock::new(ClockMode::Counter, 41);
        let s = clock.now();
        let ts = clock.stamp();
        assert!(clock.only_stamp_since(s, ts), "nothing else stamped");
        // Another commit stamped between this snapshot and this stamp.
        let s = clock.now();
        let other = clock.stamp();
        let ts = clock.stamp();
        assert!(other > s && other < ts);
        assert!(!clock.only_stamp_since(s, ts));
        // An unlinking moved the counter: the answer is only conservative.
        let s = clock.now();
        clock.retire_time();
        let ts = clock.stamp();
        assert!(!clock.only_stamp_since(s, ts));
        let tsc = Clock::new(ClockMode::Tsc, 1000);
        if tsc.is_tsc() {
            let s = tsc.now();
            assert!(
                !tsc.only_stamp_since(s, s + 1),
                "TSC stamps are not counted"
            );
        }
    }

    #[test]
    fn tsc_stamps_exceed_earlier_snapshots_and_later_snapshots_exceed_them() {
        let clock = Clock::new(ClockMode::Tsc, 1000);
        if !clock.is_tsc() {
            return;
        }
        let s = clock.now();
        assert!(s > 1000, "starts above the recovered time");
        let ts = clock.stamp();
        assert!(ts > s + clock.boundary());
        clock.wait_visible(ts);
        assert!(clock.now() > ts + clock.boundary());
    }

    #[test]
    fn the_boundary_is_credible_or_absent() {
        // On a loaded machine the measurement may be impossible; it never returns a value
        // outside the credible range.
        if let Some(b) = measure_boundary(200) {
            assert!((MIN_BOUNDARY..=MAX_CREDIBLE).contains(&b), "{b}");
        }
    }
}
