//! Space freed by committed transactions is reusable by any size class and by large objects
//! (docs/heap-format.md §14): a run whose units are all free goes back to free chunks when
//! the heap runs out of them, through the engine's system commit (redo: a system record in
//! the log; undo: applied durably in place). These tests fill a small heap with objects of
//! one class, free them, and fill it again with large spans and objects of another class;
//! they keep one object alive in a run, which must stay a run; and they race an in-flight
//! reservation or free against space pressure from another thread. After each scenario the
//! pool is reopened from its durable image (as a crash leaves it) and the deep check of
//! `ferrite pool check` (`tx::check::check_area`, which ends with `heap::check_heap`) must
//! find no damage and the usage the test expects.
//!
//! Before runs were returned, every one of these tests failed with `OutOfSpace` at the first
//! allocation of another class or of a span.

use crashsim::{SimConfig, SimPm};
use heap::{Heap, Usage};
use pmem::{CreateOptions, Pool};
use std::sync::mpsc;
use tx::check::check_area;
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, LogMode, Redo, Tx, TxError, TxResult, Undo};

const LAYOUT: &str = "run-return";
const POOL: u64 = 512 << 10;
/// The first class: the largest small class of 4 KiB chunks (10 units a run), so the heap
/// holds few enough of them that freeing all in one transaction fits a lane.
const SMALL_A: u64 = 384;
/// The other class (84 units a run).
const SMALL_B: u64 = 48;
/// Blocks allocated per transaction while filling.
const BATCH: usize = 40;

/// 4 KiB chunks (about 75 in the heap of a 512 KiB pool) and lanes large enough for one
/// transaction that frees every block of the first class (undo keeps a quarter of a lane
/// for heap actions: 24 KiB, 16 bytes a free).
fn options(mode: LogMode) -> EngineOptions {
    EngineOptions {
        lanes: 2,
        lane_size: 96 << 10,
        chunk_shift: 12,
        log_mode: mode,
    }
}

/// What these tests need of an engine besides [`Engine`].
trait Subject: Engine + Sized {
    const KIND: EngineKind;
    fn make(pool: Pool<SimPm>, options: &EngineOptions) -> TxResult<Self>;
    fn reopen(pool: Pool<SimPm>, options: &EngineOptions) -> TxResult<Self>;
    fn the_heap(&self) -> &Heap;
}

impl Subject for Redo<SimPm> {
    const KIND: EngineKind = EngineKind::Redo;
    fn make(pool: Pool<SimPm>, options: &EngineOptions) -> TxResult<Self> {
        Redo::create(pool, options)
    }
    fn reopen(pool: Pool<SimPm>, options: &EngineOptions) -> TxResult<Self> {
        Redo::open(pool, options)
    }
    fn the_heap(&self) -> &Heap {
        self.heap()
    }
}

impl Subject for Undo<SimPm> {
    const KIND: EngineKind = EngineKind::Undo;
    fn make(pool: Pool<SimPm>, options: &EngineOptions) -> TxResult<Self> {
        Undo::create(pool, options)
    }
    fn reopen(pool: Pool<SimPm>, options: &EngineOptions) -> TxResult<Self> {
        Undo::open(pool, options)
    }
    fn the_heap(&self) -> &Heap {
        self.heap()
    }
}

/// An engine on a simulated pool, reopened from its durable image when asked.
struct Live<E> {
    pm: SimPm,
    engine: E,
    options: EngineOptions,
}

impl<E: Subject> Live<E> {
    fn fresh(mode: LogMode) -> Self {
        let pm = SimPm::new(POOL, SimConfig::default());
        let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, POOL)).expect("format");
        let options = options(mode);
        let engine = E::make(pool, &options).expect("create");
        Live {
            pm,
            engine,
            options,
        }
    }

    /// The pool as a power failure now leaves it (only durable bytes), recovered; or, with
    /// `clean`, closed and opened again.
    fn reopen(self, clean: bool) -> Self {
        let Live {
            pm,
            engine,
            options,
        } = self;
        if clean {
            drop(engine);
        } else {
            std::mem::forget(engine);
        }
        let pm = SimPm::from_image(pm.durable_image(), SimConfig::default());
        let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
        let engine = E::reopen(pool, &options).expect("reopen");
        Live {
            pm,
            engine,
            options,
        }
    }

    fn usage(&self) -> Usage {
        self.engine.the_heap().usage()
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

/// Allocates blocks of `size` (bytes written: the whole block) in one transaction, at most
/// `max`, stopping at the first `OutOfSpace`; returns them and that error, if space ran out.
fn alloc_batch<E: Engine>(
    engine: &E,
    size: u64,
    max: usize,
    generation: u64,
) -> TxResult<(Vec<Block>, Option<TxError>)> {
    engine.transaction(|tx| {
        let mut got = Vec::new();
        for _ in 0..max {
            match tx.alloc_raw(size) {
                Ok(addr) => {
                    tx.write_raw(addr, &pattern(addr, size, generation))?;
                    got.push(Block {
                        addr,
                        len: size,
                        generation,
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
/// usage the heap's descriptors and bitmaps record once recovery's replay is applied.
fn deep_check<E: Subject>(live: &Live<E>) -> Usage {
    let pm = SimPm::from_image(live.pm.durable_image(), SimConfig::default());
    let pool = Pool::attach(pm, LAYOUT).expect("attach");
    let arena = pool.arena();
    let findings = check_area(pool.pm(), arena, E::KIND);
    let damage: Vec<String> = findings
        .iter()
        .filter(|f| f.is_damage())
        .map(ToString::to_string)
        .collect();
    assert!(damage.is_empty(), "the deep check found damage: {damage:?}");
    let layout = EngineLayout::read(pool.pm(), arena, E::KIND).expect("layout");
    let check = heap::check_heap(pool.pm(), layout.heap);
    assert!(check.findings.iter().all(|f| !f.is_damage()));
    check.usage.expect("the heap's usage")
}

/// Reopens after a crash, checks the usage (live, reopened and on the media) and the bytes
/// of every block the test holds.
fn reopen_and_check<E: Subject>(live: Live<E>, held: &[Block], expected: Usage) -> Live<E> {
    assert_eq!(
        live.usage(),
        expected,
        "{}: usage before reopen",
        live.engine.name()
    );
    let live = live.reopen(false);
    assert_eq!(
        live.usage(),
        expected,
        "{}: usage after reopen",
        live.engine.name()
    );
    assert_eq!(
        deep_check(&live),
        expected,
        "{}: the deep check",
        live.engine.name()
    );
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

/// Fill with class A, free everything, (reopen,) then spans of `k` chunks until none fits,
/// then class B until none fits. Every chunk is reused: the spans take `⌊n/k⌋·k` chunks
/// (all chunks are free and contiguous when the first span is asked for, and first fit packs
/// them), runs of B the `n mod k` left, each run full. The space obtained is therefore the
/// whole chunk area less only the marker, bitmap and tail of those `n mod k` runs of B
/// (`n·chunk − (n mod k)·(chunk − units_B·48)`, 64 bytes a run at 4 KiB chunks), and the
/// heap then has no run of A and no free chunk.
fn refill_with_other_sizes<E: Subject>(mode: LogMode, free: Free, reopen_between: bool) {
    let live = Live::<E>::fresh(mode);
    let name = format!(
        "{}/{mode:?}/{free:?}/reopen {reopen_between}",
        live.engine.name()
    );
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let a = fill(&live.engine, SMALL_A, BATCH, 1);
    assert_eq!(
        a.len() as u64,
        n * live.units_of(SMALL_A),
        "{name}: class A fills the heap"
    );
    assert_eq!(
        live.usage().runs,
        n,
        "{name}: every chunk is a run of class A"
    );
    verify(&live.engine, &a);
    match free {
        Free::InOneTransaction => free_in_one_transaction(&live.engine, &a),
        Free::OneByOne => free_one_by_one(&live.engine, &a),
    }
    assert_eq!(live.usage().allocated_blocks, 0, "{name}");
    let live = if reopen_between {
        live.reopen(true)
    } else {
        live
    };

    let k = span_for(&[n]);
    let spans = fill(&live.engine, k * chunk, 1, 2);
    assert_eq!(spans.len() as u64, n / k, "{name}: spans of {k} chunks");
    let b = fill(&live.engine, SMALL_B, BATCH, 3);
    let (units_b, unit_b) = (live.units_of(SMALL_B), live.unit_of(SMALL_B));
    assert_eq!(
        b.len() as u64,
        (n % k) * units_b,
        "{name}: class B takes the rest"
    );
    let obtained = spans.len() as u64 * k * chunk + b.len() as u64 * unit_b;
    assert_eq!(
        obtained,
        n * chunk - (n % k) * (chunk - units_b * unit_b),
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
        runs: n % k,
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
        refill_with_other_sizes::<Redo<SimPm>>(mode, Free::InOneTransaction, false);
    }
    refill_with_other_sizes::<Redo<SimPm>>(LogMode::Auto, Free::OneByOne, false);
}

#[test]
fn freed_runs_serve_spans_and_another_class_undo() {
    for mode in LogMode::ALL {
        refill_with_other_sizes::<Undo<SimPm>>(mode, Free::InOneTransaction, false);
    }
    refill_with_other_sizes::<Undo<SimPm>>(LogMode::Auto, Free::OneByOne, false);
}

#[test]
fn empty_runs_found_at_open_are_returned() {
    for free in [Free::InOneTransaction, Free::OneByOne] {
        refill_with_other_sizes::<Redo<SimPm>>(LogMode::Auto, free, true);
        refill_with_other_sizes::<Undo<SimPm>>(LogMode::Auto, free, true);
    }
}

/// One block of class A kept alive in the run of the middle chunk `c`, every other block
/// freed: that run is not returned. Spans of `k` chunks then fill the free chunks on both
/// sides of it (first fit: `⌊c/k⌋ + ⌊(n−1−c)/k⌋` spans), runs of class B the chunks left,
/// and class A gets exactly the kept run's other units back. The kept block's bytes survive
/// all of it and a crash.
fn a_partly_used_run_stays<E: Subject>(mode: LogMode, free: Free) {
    let live = Live::<E>::fresh(mode);
    let name = format!("{}/{mode:?}/{free:?}", live.engine.name());
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let units_a = live.units_of(SMALL_A);
    let mut a = fill(&live.engine, SMALL_A, BATCH, 1);
    let kept = a.remove(a.len() / 2);
    let c = live.chunk_of(kept.addr);
    match free {
        Free::InOneTransaction => free_in_one_transaction(&live.engine, &a),
        Free::OneByOne => free_one_by_one(&live.engine, &a),
    }
    let k = span_for(&[c, n - 1 - c]);
    let spans = fill(&live.engine, k * chunk, 1, 2);
    assert_eq!(
        spans.len() as u64,
        c / k + (n - 1 - c) / k,
        "{name}: spans of {k} chunks around the kept run in chunk {c}"
    );
    assert!(
        spans
            .iter()
            .all(|s| !(s.addr..s.addr + s.len).contains(&kept.addr)),
        "{name}: a span covers the kept block"
    );
    let b_runs = n - 1 - spans.len() as u64 * k;
    let b = fill(&live.engine, SMALL_B, BATCH, 3);
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
        "{name}: the kept run after reopen"
    );
    assert!(
        !fits(&live.engine, chunk),
        "{name}: the kept run is not a free chunk"
    );
}

#[test]
fn a_partly_used_run_is_not_returned() {
    for mode in [LogMode::Auto, LogMode::Cacheable] {
        a_partly_used_run_stays::<Redo<SimPm>>(mode, Free::InOneTransaction);
        a_partly_used_run_stays::<Undo<SimPm>>(mode, Free::OneByOne);
    }
}

/// What the in-flight transaction of [`in_flight_against_pressure`] does to its run.
#[derive(Clone, Copy, Debug)]
enum InFlight {
    /// Reserves one unit of class A in a run that is otherwise empty.
    Reserve,
    /// Frees the last allocated unit of a run.
    Free,
}

const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A transaction on another thread reserves (or frees) the one non-free unit of a run and
/// waits; this thread then takes one-chunk spans until none fits, which returns every empty
/// run — but not that one, whose unit is reserved (or being freed): it gets `n − 1` spans,
/// none over the in-flight block. Then the other transaction commits or aborts. If the run
/// ends up with no allocated unit (an aborted reservation, a committed free), the next span
/// takes its chunk; otherwise (a committed reservation, an aborted free) its unit keeps its
/// bytes and the run serves class A only.
fn in_flight_against_pressure<E: Subject>(what: InFlight, commit: bool) {
    let live = Live::<E>::fresh(LogMode::Auto);
    let name = format!("{}/{what:?}/commit {commit}", live.engine.name());
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
    let engine = &live.engine;
    let (ready_tx, ready) = mpsc::channel::<Block>();
    let (go_tx, go) = mpsc::channel::<()>();
    let (spans, outcome) = std::thread::scope(|scope| {
        // Owned by this closure, so a panic here drops it and releases the other thread.
        let go_tx = go_tx;
        let other = scope.spawn(move || {
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
        let spans = fill(engine, chunk, 1, 2);
        go_tx.send(()).expect("release the other transaction");
        (
            (spans, in_flight),
            other.join().expect("the other transaction's thread"),
        )
    });
    let (spans, in_flight) = spans;
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
    let live = if run_emptied {
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
        reopen_and_check(live, &held, expected)
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
        reopen_and_check(live, &held, expected)
    };
    drop(live);
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
fn an_in_flight_free_keeps_its_run() {
    for commit in [false, true] {
        in_flight_against_pressure::<Redo<SimPm>>(InFlight::Free, commit);
        in_flight_against_pressure::<Undo<SimPm>>(InFlight::Free, commit);
    }
}
