//! Space freed by committed transactions is reusable by any size class and by large objects
//! (docs/heap-format.md §14), on every engine: a run whose units are all free goes back to
//! free chunks when the heap runs out of them. Redo and undo return it through their system
//! commit (redo: a system record in the log; undo: applied durably in place), every empty
//! run at once. In the MVCC engine a freed block waits for the checkpoint that covers its
//! free, and a run may go back only once none of its lines has a version header or live
//! checkpoint-log bytes; an allocation that finds no room meanwhile retries its transaction
//! after a checkpoint and a write-back, so through the public API it succeeds too.
//!
//! These tests use only the public API. They fill a small heap with objects of one class,
//! free them, and fill it again with large spans and objects of another class (on MVCC also
//! with every block updated after its allocation, so its lines have versions when it is
//! freed); they keep one object alive in a run, which must stay a run; and they race an
//! in-flight reservation or free against space pressure from another thread. After each
//! scenario the pool is recovered from its durable image (what a power failure leaves) and
//! the deep check of `ferrite pool check` (the engine's `check::check_area`, then
//! `heap::check_heap`) must find no damage and the usage the test expects.
//!
//! What differs between the engines is stated once, in [`Subject`]. Before runs were
//! returned, every one of these tests failed with `OutOfSpace` at the first allocation of
//! another class or of a span.

use conformance::CrashEngine;
use crashsim::{SimConfig, SimPm};
use heap::{Heap, Usage};
use mvcc::layout::MvccLayout;
use mvcc::{Mvcc, MvccOptions};
use pmem::{CreateOptions, Pool, Region};
use std::sync::mpsc;
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, LogMode, NoReplay, Redo, Tx, TxError, TxResult, Undo};

const LAYOUT: &str = "run-return";
const POOL: u64 = 512 << 10;
/// The first class: the largest small class of 4 KiB chunks (10 units a run), so the heap
/// holds few enough of them that freeing all in one transaction fits a lane.
const SMALL_A: u64 = 384;
/// The other class (84 units a run).
const SMALL_B: u64 = 48;
/// Blocks allocated per transaction while filling.
const BATCH: usize = 40;
const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Redo and undo: 4 KiB chunks (about 75 in the heap of a 512 KiB pool) and lanes large
/// enough for one transaction that frees every block of the first class (undo keeps a
/// quarter of a lane for heap actions: 24 KiB, 16 bytes a free).
fn tx_options(mode: LogMode) -> EngineOptions {
    EngineOptions {
        lanes: 2,
        lane_size: 96 << 10,
        chunk_shift: 12,
        log_mode: mode,
    }
}

/// MVCC: the crash-test geometry with operation logs large enough for one transaction that
/// frees every block of the first class (16 bytes a free) or writes a whole batch.
fn mvcc_options() -> MvccOptions {
    MvccOptions {
        olog_size: 96 << 10,
        clog_size: 32 << 10,
        ..MvccOptions::small()
    }
}

type MvccSim = Mvcc<SimPm, NoReplay>;

/// What these tests need of an engine besides [`Engine`], and how the engines differ.
trait Subject: Engine + Sized {
    const ENGINE: CrashEngine;
    /// Whether a committed free is reusable at once and the heap returns every empty run
    /// the moment it runs short (redo, undo). Then the number of spans a fill gets is fixed
    /// by the geometry, and the usage may be read at any point. Not so on MVCC: frees wait
    /// for checkpoints and runs for clean lines, so runs may come back between spans (the
    /// count of spans depends on when), and reading the settled usage (a write-back and a
    /// checkpoint) in mid-scenario would change the scenario under test.
    const RETURNS_AT_ONCE: bool;
    /// Whether a running transaction holds back the checkpoints of every later commit, and
    /// a lane short of log room or free versions waits for it to end (MVCC). The pressure
    /// applied while a transaction is in flight then starts with everything checkpointed
    /// and commits that log only their heap actions (the bytes are written afterwards).
    const RUNNING_TX_HOLDS_BACK: bool;
    /// Formats the engine on `pool`; `mode` is the log mode where the engine has one.
    fn make(pool: Pool<SimPm>, mode: LogMode) -> TxResult<Self>;
    /// Opens (recovers) the engine on `pool`.
    fn reopen(pool: Pool<SimPm>, mode: LogMode) -> TxResult<Self>;
    fn the_heap(&self) -> &Heap;
    /// The heap's usage as committed transactions see it.
    fn usage(&self) -> Usage {
        self.the_heap().usage()
    }
    /// Checkpoints and writes back every commit (only where [`Self::RUNNING_TX_HOLDS_BACK`]).
    fn checkpoint_all(&self) {}
    /// The deep check's findings that are damage, and where the heap is, on a pool.
    fn check(pool: &Pool<SimPm>) -> (Vec<String>, Region);
}

/// Redo and undo differ here only in their type and names.
macro_rules! tx_subject {
    ($engine:ident) => {
        impl Subject for $engine<SimPm> {
            const ENGINE: CrashEngine = CrashEngine::$engine;
            const RETURNS_AT_ONCE: bool = true;
            const RUNNING_TX_HOLDS_BACK: bool = false;
            fn make(pool: Pool<SimPm>, mode: LogMode) -> TxResult<Self> {
                $engine::create(pool, &tx_options(mode))
            }
            fn reopen(pool: Pool<SimPm>, mode: LogMode) -> TxResult<Self> {
                $engine::open(pool, &tx_options(mode))
            }
            fn the_heap(&self) -> &Heap {
                self.heap()
            }
            fn check(pool: &Pool<SimPm>) -> (Vec<String>, Region) {
                tx_check(pool, EngineKind::$engine)
            }
        }
    };
}

tx_subject!(Redo);
tx_subject!(Undo);

fn tx_check(pool: &Pool<SimPm>, kind: EngineKind) -> (Vec<String>, Region) {
    let arena = pool.arena();
    let damage = tx::check::check_area(pool.pm(), arena, kind)
        .iter()
        .filter(|f| f.is_damage())
        .map(ToString::to_string)
        .collect();
    let layout = EngineLayout::read(pool.pm(), arena, kind).expect("layout");
    (damage, layout.heap)
}

impl Subject for MvccSim {
    const ENGINE: CrashEngine = CrashEngine::Mvcc;
    const RETURNS_AT_ONCE: bool = false;
    const RUNNING_TX_HOLDS_BACK: bool = true;
    /// MVCC has no log mode.
    fn make(pool: Pool<SimPm>, _mode: LogMode) -> TxResult<Self> {
        Mvcc::create(pool, &mvcc_options(), NoReplay)
    }
    fn reopen(pool: Pool<SimPm>, _mode: LogMode) -> TxResult<Self> {
        Mvcc::open(pool, &mvcc_options(), NoReplay)
    }
    fn the_heap(&self) -> &Heap {
        self.heap()
    }
    /// The usage once every free committed so far is released. (A free waits for a
    /// checkpoint that covers it and, when the block's lines have checkpointed contents,
    /// for their write-back: the write-back of `quiesce`, then the checkpoint of `sync`.)
    fn usage(&self) -> Usage {
        self.quiesce().expect("quiesce");
        self.sync().expect("checkpoint");
        let usage = self.heap().usage();
        assert_eq!(usage.allocated_blocks, self.allocated_blocks());
        usage
    }
    fn checkpoint_all(&self) {
        self.quiesce().expect("quiesce");
    }
    fn check(pool: &Pool<SimPm>) -> (Vec<String>, Region) {
        let arena = pool.arena();
        let damage = mvcc::check::check_area(pool.pm(), arena)
            .iter()
            .filter(|f| f.is_damage())
            .map(ToString::to_string)
            .collect();
        let layout = MvccLayout::read(pool.pm(), arena).expect("layout");
        (damage, layout.heap)
    }
}

/// An engine on a simulated pool, recovered from its durable image when asked.
struct Live<E> {
    pm: SimPm,
    engine: E,
    mode: LogMode,
}

impl<E: Subject> Live<E> {
    fn fresh(mode: LogMode) -> Self {
        let pm = SimPm::new(POOL, SimConfig::default());
        let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, POOL)).expect("format");
        let engine = E::make(pool, mode).expect("create");
        Live { pm, engine, mode }
    }

    /// The pool as a power failure now leaves it (only durable bytes: nothing pending
    /// persisted), recovered; or, with `clean`, closed and opened again.
    fn reopen(self, clean: bool) -> Self {
        let Live { pm, engine, mode } = self;
        if clean {
            drop(engine);
        } else {
            std::mem::forget(engine);
        }
        let pm = SimPm::from_image(pm.durable_image(), SimConfig::default());
        let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
        let engine = E::reopen(pool, mode).expect("reopen");
        Live { pm, engine, mode }
    }

    fn usage(&self) -> Usage {
        self.engine.usage()
    }

    fn chunk_count(&self) -> u64 {
        self.engine.the_heap().layout().chunk_count
    }

    fn chunk_size(&self) -> u64 {
        self.engine.the_heap().layout().chunk_size()
    }

    fn units_of(&self, size: u64) -> u64 {
        let layout = self.engine.the_heap().layout();
        let class = layout.class_for(size).expect("a small class");
        layout.run_geometry(class).expect("usable").units
    }

    fn unit_of(&self, size: u64) -> u64 {
        let layout = self.engine.the_heap().layout();
        heap::SIZE_CLASSES[layout.class_for(size).expect("a small class")]
    }

    fn chunk_of(&self, addr: u64) -> u64 {
        self.engine
            .the_heap()
            .layout()
            .chunk_of(addr)
            .expect("in the chunk area")
    }
}

/// A block the test holds: its address, usable length and the generation of its pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    addr: u64,
    len: u64,
    generation: u64,
}

/// The bytes a block of generation `generation` holds: every word names the block, its
/// offset and the generation, so a stale or misplaced word shows.
fn pattern(addr: u64, len: u64, generation: u64) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|w| {
            (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (w << 8) ^ generation).to_le_bytes()
        })
        .collect()
}

/// Allocates blocks of `size` in one transaction, at most `max`, stopping at the first
/// `OutOfSpace`; returns them and that error, if space ran out. With a `generation`, the
/// whole block is written with its pattern; without, the commit logs only heap actions.
/// (MVCC may run the body again: a retry for space ends its attempt with another error,
/// which is passed on.)
fn alloc_batch<E: Engine>(
    engine: &E,
    size: u64,
    max: usize,
    generation: Option<u64>,
) -> TxResult<(Vec<Block>, Option<TxError>)> {
    engine.transaction(|tx| {
        let mut got = Vec::new();
        for _ in 0..max {
            match tx.alloc_raw(size) {
                Ok(addr) => {
                    if let Some(generation) = generation {
                        tx.write_raw(addr, &pattern(addr, size, generation))?;
                    }
                    got.push(Block {
                        addr,
                        len: size,
                        generation: generation.unwrap_or(0),
                    });
                }
                Err(full @ TxError::OutOfSpace { .. }) => return Ok((got, Some(full))),
                Err(other) => return Err(other),
            }
        }
        Ok((got, None))
    })
}

/// Allocates blocks of `size` until the heap has no room for one more. Every caller expects
/// room for at least one, so `OutOfSpace` at the very first allocation fails here, with the
/// error (what a heap that never returns its runs does).
fn fill<E: Engine>(engine: &E, size: u64, batch: usize, generation: u64) -> Vec<Block> {
    fill_with(engine, size, batch, Some(generation))
}

/// [`fill`], writing the blocks' bytes only with a `generation`.
fn fill_with<E: Engine>(
    engine: &E,
    size: u64,
    batch: usize,
    generation: Option<u64>,
) -> Vec<Block> {
    let mut all = Vec::new();
    loop {
        let (got, full) = alloc_batch(engine, size, batch, generation)
            .unwrap_or_else(|e| panic!("{}: allocating {size} bytes: {e}", engine.name()));
        all.extend(got);
        match full {
            Some(error) if all.is_empty() => panic!(
                "{}: not one block of {size} bytes fits: {error:?}",
                engine.name()
            ),
            Some(_) => return all,
            None => {}
        }
    }
}

/// Whether one more block of `size` fits (it is allocated and the transaction aborted).
fn fits<E: Engine>(engine: &E, size: u64) -> bool {
    let outcome: TxResult<()> = engine.transaction(|tx| {
        tx.alloc_raw(size)?;
        Err(TxError::abort("probe only"))
    });
    match outcome {
        Err(TxError::Aborted(_)) => true,
        Err(TxError::OutOfSpace { .. }) => false,
        other => panic!("{}: probe of {size} bytes: {other:?}", engine.name()),
    }
}

/// Writes generation `generation` over every block by later transactions, each writing at
/// most 24 lines (MVCC's crash geometry's version log takes 36 a transaction): on MVCC the
/// blocks' lines get versions (and, later, checkpointed contents), unlike the bytes their
/// allocating transaction wrote in place.
fn rewrite<E: Engine>(engine: &E, blocks: &mut [Block], generation: u64) {
    const PIECE: u64 = 24 * 64;
    let mut pieces = Vec::new();
    for b in blocks.iter() {
        let bytes = pattern(b.addr, b.len, generation);
        for at in (0..b.len).step_by(PIECE as usize) {
            let end = (at + PIECE).min(b.len);
            pieces.push((b.addr + at, bytes[at as usize..end as usize].to_vec()));
        }
    }
    let mut batch: Vec<(u64, Vec<u8>)> = Vec::new();
    let commit = |batch: &mut Vec<(u64, Vec<u8>)>| {
        engine
            .transaction(|tx| {
                batch
                    .iter()
                    .try_for_each(|(at, bytes)| tx.write_raw(*at, bytes))
            })
            .unwrap_or_else(|e| panic!("{}: rewrite: {e}", engine.name()));
        batch.clear();
    };
    for piece in pieces {
        let lines: u64 = batch.iter().map(|(_, b)| b.len() as u64 / 64).sum();
        if lines + piece.1.len() as u64 / 64 > 24 {
            commit(&mut batch);
        }
        batch.push(piece);
    }
    commit(&mut batch);
    for b in blocks.iter_mut() {
        b.generation = generation;
    }
}

fn free_in_one_transaction<E: Engine>(engine: &E, blocks: &[Block]) {
    engine
        .transaction(|tx| blocks.iter().try_for_each(|b| tx.free_raw(b.addr)))
        .unwrap_or_else(|e| panic!("{}: freeing {} blocks: {e}", engine.name(), blocks.len()));
}

fn free_one_by_one<E: Engine>(engine: &E, blocks: &[Block]) {
    for b in blocks {
        engine
            .transaction(|tx| tx.free_raw(b.addr))
            .unwrap_or_else(|e| panic!("{}: freeing {:#x}: {e}", engine.name(), b.addr));
    }
}

/// Reads every block back and compares it with its pattern; no two blocks overlap.
fn verify<E: Engine>(engine: &E, blocks: &[Block]) {
    let mut sorted = blocks.to_vec();
    sorted.sort_unstable_by_key(|b| b.addr);
    for pair in sorted.windows(2) {
        assert!(
            pair[0].addr + pair[0].len <= pair[1].addr,
            "{}: blocks overlap: {:?} and {:?}",
            engine.name(),
            pair[0],
            pair[1]
        );
    }
    for chunk in blocks.chunks(64) {
        engine
            .read_only(|tx| {
                for b in chunk {
                    let mut back = vec![0u8; b.len as usize];
                    tx.read_raw(b.addr, &mut back)?;
                    assert!(
                        back == pattern(b.addr, b.len, b.generation),
                        "{}: block {:#x} ({} bytes, generation {}) does not hold its bytes",
                        engine.name(),
                        b.addr,
                        b.len,
                        b.generation
                    );
                }
                Ok::<_, TxError>(())
            })
            .expect("read back");
    }
}

/// The deep check of `ferrite pool check` on a copy of the durable image: no damage, and the
/// usage the heap's descriptors and bitmaps record once what recovery replays (redo's log,
/// MVCC's checkpoints and logged heap actions) is applied.
fn deep_check<E: Subject>(live: &Live<E>) -> Usage {
    let pm = SimPm::from_image(live.pm.durable_image(), SimConfig::default());
    let pool = Pool::attach(pm, LAYOUT).expect("attach");
    let (damage, heap) = E::check(&pool);
    assert!(damage.is_empty(), "the deep check found damage: {damage:?}");
    let check = heap::check_heap(pool.pm(), heap);
    assert!(check.findings.iter().all(|f| !f.is_damage()));
    check.usage.expect("the heap's usage")
}

/// Recovers after a power failure, checks the usage (live, recovered and on the media) and
/// the bytes of every block the test holds.
fn reopen_and_check<E: Subject>(live: Live<E>, held: &[Block], expected: Usage) -> Live<E> {
    let name = E::ENGINE.name();
    assert_eq!(live.usage(), expected, "{name}: usage before the crash");
    let live = live.reopen(false);
    assert_eq!(live.usage(), expected, "{name}: usage after recovery");
    assert_eq!(deep_check(&live), expected, "{name}: the deep check");
    verify(&live.engine, held);
    live
}

/// A span length (in chunks) that does not divide the free stretches of `stretches`
/// chunks, so the last chunks go to runs.
fn span_for(stretches: &[u64]) -> u64 {
    (3..8)
        .find(|k| stretches.iter().any(|s| s % k != 0))
        .expect("some k in 3..8")
}

#[derive(Clone, Copy, Debug)]
enum Free {
    InOneTransaction,
    OneByOne,
}

/// How the first class's blocks are treated before the pressure of
/// [`refill_with_other_sizes`].
#[derive(Clone, Copy, Debug)]
struct Before {
    free: Free,
    /// Every block written again by a later transaction before it is freed, so on MVCC its
    /// lines have versions and checkpointed contents.
    rewritten: bool,
    /// A checkpoint after the frees: on MVCC they become reusable before any allocation
    /// asks, some blocks' lines still in the checkpoint log.
    checkpointed: bool,
    /// The pool closed and opened again after the frees: empty runs are found at open.
    reopened: bool,
}

impl Before {
    const fn freed(free: Free) -> Self {
        Before {
            free,
            rewritten: false,
            checkpointed: false,
            reopened: false,
        }
    }
}

/// Fill with class A, free everything (as `before` says), then spans of `k` chunks until
/// none fits, then class B until none fits.
///
/// Every chunk is reused, by a span or by a full run of B, and no run of A is left. The
/// space obtained is therefore the whole chunk area less only the marker, bitmap and tail
/// of each run of B (`n·chunk − runs_B·(chunk − units_B·48)`, 64 bytes a run at 4 KiB
/// chunks, so at least 98 % of the chunk area). Where every empty run is returned at once
/// ([`Subject::RETURNS_AT_ONCE`]) the counts are exact: all chunks are free and contiguous
/// when the first span is asked for and first fit packs them, so the spans take `⌊n/k⌋·k`
/// chunks and runs of B the `n mod k` left. On MVCC runs may come back between spans, so
/// the number of spans depends on when; the bound on the space obtained does not.
///
/// Then everything is freed once more and class A must fill the heap again.
fn refill_with_other_sizes<E: Subject>(mode: LogMode, before: Before) {
    let live = Live::<E>::fresh(mode);
    let name = format!("{}/{mode:?}/{before:?}", E::ENGINE.name());
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let mut a = fill(&live.engine, SMALL_A, BATCH, 1);
    assert_eq!(
        a.len() as u64,
        n * live.units_of(SMALL_A),
        "{name}: class A fills the heap"
    );
    if E::RETURNS_AT_ONCE {
        assert_eq!(
            live.usage().runs,
            n,
            "{name}: every chunk is a run of class A"
        );
    }
    if before.rewritten {
        rewrite(&live.engine, &mut a, 5);
    }
    verify(&live.engine, &a);
    match before.free {
        Free::InOneTransaction => free_in_one_transaction(&live.engine, &a),
        Free::OneByOne => free_one_by_one(&live.engine, &a),
    }
    if E::RETURNS_AT_ONCE {
        assert_eq!(live.usage().allocated_blocks, 0, "{name}");
    }
    if before.checkpointed {
        live.engine.sync().expect("checkpoint");
    }
    let live = if before.reopened {
        live.reopen(true)
    } else {
        live
    };

    let k = span_for(&[n]);
    let spans = fill(&live.engine, k * chunk, 1, 2);
    if E::RETURNS_AT_ONCE {
        assert_eq!(spans.len() as u64, n / k, "{name}: spans of {k} chunks");
    }
    let b = fill(&live.engine, SMALL_B, BATCH, 3);
    let (units_b, unit_b) = (live.units_of(SMALL_B), live.unit_of(SMALL_B));
    let b_runs = if E::RETURNS_AT_ONCE {
        n % k
    } else {
        live.usage().runs
    };
    assert_eq!(
        spans.len() as u64 * k + b_runs,
        n,
        "{name}: every chunk is reused, by a span of {k} chunks or a run of B"
    );
    assert_eq!(
        b.len() as u64,
        b_runs * units_b,
        "{name}: class B takes the rest, every run of B full"
    );
    let obtained = spans.len() as u64 * k * chunk + b.len() as u64 * unit_b;
    assert_eq!(
        obtained,
        n * chunk - b_runs * (chunk - units_b * unit_b),
        "{name}: the space obtained is the whole chunk area less the new runs' metadata"
    );
    assert!(!fits(&live.engine, SMALL_A), "{name}: no run of A is left");
    assert!(!fits(&live.engine, chunk), "{name}: no chunk is left");

    let held: Vec<Block> = spans.iter().chain(&b).copied().collect();
    verify(&live.engine, &held);
    let expected = Usage {
        allocated_bytes: obtained,
        allocated_blocks: held.len() as u64,
        free_chunks: 0,
        runs: b_runs,
    };
    let live = reopen_and_check(live, &held, expected);
    // Everything freed once more, the heap takes class A in full again.
    free_one_by_one(&live.engine, &held);
    let again = fill(&live.engine, SMALL_A, BATCH, 4);
    assert_eq!(
        again.len() as u64,
        n * live.units_of(SMALL_A),
        "{name}: class A again"
    );
    let expected = Usage {
        allocated_bytes: again.len() as u64 * SMALL_A,
        allocated_blocks: again.len() as u64,
        free_chunks: 0,
        runs: n,
    };
    reopen_and_check(live, &again, expected);
}

#[test]
fn freed_runs_serve_spans_and_another_class_redo() {
    for mode in LogMode::ALL {
        refill_with_other_sizes::<Redo<SimPm>>(mode, Before::freed(Free::InOneTransaction));
    }
    refill_with_other_sizes::<Redo<SimPm>>(LogMode::Auto, Before::freed(Free::OneByOne));
}

#[test]
fn freed_runs_serve_spans_and_another_class_undo() {
    for mode in LogMode::ALL {
        refill_with_other_sizes::<Undo<SimPm>>(mode, Before::freed(Free::InOneTransaction));
    }
    refill_with_other_sizes::<Undo<SimPm>>(LogMode::Auto, Before::freed(Free::OneByOne));
}

#[test]
fn freed_runs_serve_spans_and_another_class_mvcc() {
    for free in [Free::InOneTransaction, Free::OneByOne] {
        refill_with_other_sizes::<MvccSim>(LogMode::Auto, Before::freed(free));
    }
}

#[test]
fn freed_runs_whose_lines_had_versions_serve_spans_and_another_class_mvcc() {
    refill_with_other_sizes::<MvccSim>(
        LogMode::Auto,
        Before {
            rewritten: true,
            ..Before::freed(Free::InOneTransaction)
        },
    );
    refill_with_other_sizes::<MvccSim>(
        LogMode::Auto,
        Before {
            rewritten: true,
            reopened: true,
            ..Before::freed(Free::OneByOne)
        },
    );
}

#[test]
fn freed_runs_checkpointed_before_the_pressure_serve_spans_and_another_class_mvcc() {
    refill_with_other_sizes::<MvccSim>(
        LogMode::Auto,
        Before {
            rewritten: true,
            checkpointed: true,
            ..Before::freed(Free::InOneTransaction)
        },
    );
}

#[test]
fn empty_runs_found_at_open_are_returned_redo_undo() {
    for free in [Free::InOneTransaction, Free::OneByOne] {
        let before = Before {
            reopened: true,
            ..Before::freed(free)
        };
        refill_with_other_sizes::<Redo<SimPm>>(LogMode::Auto, before);
        refill_with_other_sizes::<Undo<SimPm>>(LogMode::Auto, before);
    }
}

#[test]
fn empty_runs_found_at_open_are_returned_mvcc() {
    refill_with_other_sizes::<MvccSim>(
        LogMode::Auto,
        Before {
            reopened: true,
            ..Before::freed(Free::InOneTransaction)
        },
    );
}

/// One block of class A kept alive in the run of the middle chunk `c` (with `rewritten`,
/// written again first, so on MVCC its run has versions), every other block freed: that
/// run is not returned. Spans of `k` chunks then fill the free chunks on both sides of it
/// (where runs are returned at once, first fit gives exactly `⌊c/k⌋ + ⌊(n−1−c)/k⌋` spans),
/// runs of class B the chunks left, and class A gets exactly the kept run's other units
/// back. The kept block's bytes survive all of it and a crash.
fn a_partly_used_run_stays<E: Subject>(mode: LogMode, free: Free, rewritten: bool) {
    let live = Live::<E>::fresh(mode);
    let name = format!(
        "{}/{mode:?}/{free:?}/rewritten {rewritten}",
        E::ENGINE.name()
    );
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let units_a = live.units_of(SMALL_A);
    let mut a = fill(&live.engine, SMALL_A, BATCH, 1);
    let mut kept = [a.remove(a.len() / 2)];
    if rewritten {
        rewrite(&live.engine, &mut kept, 6);
    }
    let kept = kept[0];
    let c = live.chunk_of(kept.addr);
    match free {
        Free::InOneTransaction => free_in_one_transaction(&live.engine, &a),
        Free::OneByOne => free_one_by_one(&live.engine, &a),
    }
    let k = span_for(&[c, n - 1 - c]);
    let spans = fill(&live.engine, k * chunk, 1, 2);
    if E::RETURNS_AT_ONCE {
        assert_eq!(
            spans.len() as u64,
            c / k + (n - 1 - c) / k,
            "{name}: spans of {k} chunks around the kept run in chunk {c}"
        );
    }
    assert!(
        spans
            .iter()
            .all(|s| !(s.addr..s.addr + s.len).contains(&kept.addr)),
        "{name}: a span covers the kept block"
    );
    let b = fill(&live.engine, SMALL_B, BATCH, 3);
    let b_runs = if E::RETURNS_AT_ONCE {
        n - 1 - spans.len() as u64 * k
    } else {
        live.usage().runs - 1
    };
    assert_eq!(
        spans.len() as u64 * k + b_runs,
        n - 1,
        "{name}: every chunk but the kept run's is reused, by a span of {k} chunks or a run of B"
    );
    assert_eq!(
        b.len() as u64,
        b_runs * live.units_of(SMALL_B),
        "{name}: class B"
    );
    let more_a = fill(&live.engine, SMALL_A, BATCH, 4);
    assert_eq!(
        more_a.len() as u64,
        units_a - 1,
        "{name}: class A gets the kept run's other units"
    );
    assert!(more_a.iter().all(|x| live.chunk_of(x.addr) == c), "{name}");

    let held: Vec<Block> = [kept]
        .iter()
        .chain(&spans)
        .chain(&b)
        .chain(&more_a)
        .copied()
        .collect();
    verify(&live.engine, &held);
    let expected = Usage {
        allocated_bytes: units_a * SMALL_A
            + spans.len() as u64 * k * chunk
            + b.len() as u64 * live.unit_of(SMALL_B),
        allocated_blocks: held.len() as u64,
        free_chunks: 0,
        runs: 1 + b_runs,
    };
    let live = reopen_and_check(live, &held, expected);
    // The kept run is still a run of A after the crash: its free units serve A only.
    free_one_by_one(&live.engine, &more_a);
    assert!(
        fits(&live.engine, SMALL_A),
        "{name}: the kept run after recovery"
    );
    assert!(
        !fits(&live.engine, chunk),
        "{name}: the kept run is not a free chunk"
    );
}

#[test]
fn a_partly_used_run_is_not_returned_redo_undo() {
    for mode in [LogMode::Auto, LogMode::Cacheable] {
        a_partly_used_run_stays::<Redo<SimPm>>(mode, Free::InOneTransaction, false);
        a_partly_used_run_stays::<Undo<SimPm>>(mode, Free::OneByOne, false);
    }
}

#[test]
fn a_partly_used_run_is_not_returned_mvcc() {
    a_partly_used_run_stays::<MvccSim>(LogMode::Auto, Free::InOneTransaction, true);
}

/// What the in-flight transaction of [`in_flight_against_pressure`] does to its run.
#[derive(Clone, Copy, Debug)]
enum InFlight {
    /// Reserves one unit of class A in a run that is otherwise empty.
    Reserve,
    /// Frees the last allocated unit of a run.
    Free,
}

/// A transaction on another thread reserves (or frees) the one non-free unit of a run and
/// waits; this thread then takes one-chunk spans until none fits, which returns every empty
/// run — but not that one, whose unit is reserved (or being freed): it gets `n − 1` spans,
/// none over the in-flight block. Then the other transaction commits or aborts. If the run
/// ends up with no allocated unit (an aborted reservation, a committed free), the next span
/// takes its chunk; otherwise (a committed reservation, an aborted free) its unit keeps its
/// bytes and the run serves class A only.
fn in_flight_against_pressure<E: Subject>(what: InFlight, commit: bool) {
    let live = Live::<E>::fresh(LogMode::Auto);
    let name = format!("{}/{what:?}/commit {commit}", E::ENGINE.name());
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let a = fill(&live.engine, SMALL_A, BATCH, 1);
    let target = match what {
        InFlight::Reserve => {
            free_in_one_transaction(&live.engine, &a);
            None
        }
        InFlight::Free => {
            let last = a[a.len() / 2];
            let others: Vec<Block> = a.iter().filter(|b| **b != last).copied().collect();
            free_in_one_transaction(&live.engine, &others);
            Some(last)
        }
    };
    if E::RUNNING_TX_HOLDS_BACK {
        live.engine.checkpoint_all();
    }
    let engine = &live.engine;
    let (ready_tx, ready) = mpsc::channel::<Block>();
    let (go_tx, go) = mpsc::channel::<()>();
    let ((spans, in_flight), outcome) = std::thread::scope(|scope| {
        // Owned by this closure, so a panic here drops it and releases the other thread.
        let go_tx = go_tx;
        let other = scope.spawn(move || {
            let mut reported = false;
            engine.transaction(|tx| {
                let block = match target {
                    None => {
                        let addr = tx.alloc_raw(SMALL_A)?;
                        tx.write_raw(addr, &pattern(addr, SMALL_A, 9))?;
                        Block {
                            addr,
                            len: SMALL_A,
                            generation: 9,
                        }
                    }
                    Some(last) => {
                        tx.free_raw(last.addr)?;
                        last
                    }
                };
                // An attempt run again after it reported (MVCC retries a transaction)
                // would hold a block the other thread does not know of: fail rather than
                // wait for a word that was sent.
                assert!(!reported, "the in-flight transaction ran twice");
                reported = true;
                ready_tx.send(block).expect("report the block");
                if go.recv_timeout(WAIT).is_err() {
                    // This thread panicked (its sender is gone) or hung.
                    return Err(TxError::abort("no word from the pressuring thread"));
                }
                if commit {
                    Ok(block)
                } else {
                    Err(TxError::abort("on purpose"))
                }
            })
        });
        let in_flight = ready
            .recv_timeout(WAIT)
            .expect("the other transaction started");
        let spans = if E::RUNNING_TX_HOLDS_BACK {
            fill_with(engine, chunk, 1, None)
        } else {
            fill(engine, chunk, 1, 2)
        };
        go_tx.send(()).expect("release the other transaction");
        (
            (spans, in_flight),
            other.join().expect("the other transaction's thread"),
        )
    });
    let mut spans = spans;
    if E::RUNNING_TX_HOLDS_BACK {
        rewrite(&live.engine, &mut spans, 2);
    }
    let run_chunk = live.chunk_of(in_flight.addr);
    assert_eq!(
        spans.len() as u64,
        n - 1,
        "{name}: every other chunk as a span"
    );
    assert!(
        spans.iter().all(|s| live.chunk_of(s.addr) != run_chunk),
        "{name}: a span took the chunk of the in-flight block's run"
    );
    match outcome {
        Ok(block) => assert_eq!(block, in_flight),
        Err(TxError::Aborted(_)) if !commit => {}
        Err(other) => panic!("{name}: {other}"),
    }
    let run_emptied = matches!(
        (what, commit),
        (InFlight::Reserve, false) | (InFlight::Free, true)
    );
    let mut held = spans.clone();
    if run_emptied {
        let last = fill(&live.engine, chunk, 1, 3);
        assert_eq!(last.len(), 1, "{name}: the emptied run's chunk as a span");
        assert_eq!(live.chunk_of(last[0].addr), run_chunk, "{name}");
        held.extend(last);
        verify(&live.engine, &held);
        let expected = Usage {
            allocated_bytes: n * chunk,
            allocated_blocks: n,
            free_chunks: 0,
            runs: 0,
        };
        reopen_and_check(live, &held, expected);
    } else {
        held.push(in_flight);
        assert!(!fits(&live.engine, chunk), "{name}: no chunk left");
        assert!(
            fits(&live.engine, SMALL_A),
            "{name}: the run serves class A"
        );
        verify(&live.engine, &held);
        let expected = Usage {
            allocated_bytes: (n - 1) * chunk + SMALL_A,
            allocated_blocks: n,
            free_chunks: 0,
            runs: 1,
        };
        reopen_and_check(live, &held, expected);
    }
}

#[test]
fn an_in_flight_reservation_keeps_its_run_redo() {
    for commit in [false, true] {
        in_flight_against_pressure::<Redo<SimPm>>(InFlight::Reserve, commit);
    }
}

#[test]
fn an_in_flight_reservation_keeps_its_run_undo() {
    for commit in [false, true] {
        in_flight_against_pressure::<Undo<SimPm>>(InFlight::Reserve, commit);
    }
}

#[test]
fn an_in_flight_reservation_keeps_its_run_mvcc() {
    for commit in [false, true] {
        in_flight_against_pressure::<MvccSim>(InFlight::Reserve, commit);
    }
}

#[test]
fn an_in_flight_free_keeps_its_run_redo_undo() {
    for commit in [false, true] {
        in_flight_against_pressure::<Redo<SimPm>>(InFlight::Free, commit);
        in_flight_against_pressure::<Undo<SimPm>>(InFlight::Free, commit);
    }
}

#[test]
fn an_in_flight_free_keeps_its_run_mvcc() {
    for commit in [false, true] {
        in_flight_against_pressure::<MvccSim>(InFlight::Free, commit);
    }
}
