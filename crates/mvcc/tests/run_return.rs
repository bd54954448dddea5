//! Space freed by committed MVCC transactions is reusable by any size class and by large
//! objects (docs/heap-format.md §14, docs/mvcc-format.md): a run whose units are all free
//! goes back to free chunks when the heap runs out of them. In this engine a freed block
//! waits for the checkpoint that covers its free, and a run may go back only once none of
//! its lines has a version header or live checkpoint-log bytes; an allocation that finds no
//! room meanwhile retries its transaction after a checkpoint and a write-back. Through the
//! public API the allocation therefore succeeds, and these tests only use the public API:
//! they fill a small heap with one class, free it, and fill it again with spans and another
//! class (also with every block updated after its allocation, so its lines have versions
//! when it is freed); they keep one object alive in a run, which must stay a run; and they
//! race an in-flight reservation or free against space pressure from another thread. After
//! each scenario the pool is recovered from what a power failure leaves, and the deep check
//! of `ferrite pool check` (`mvcc::check::check_area`, then `heap::check_heap`) must find
//! no damage and the usage the test expects.
//!
//! Before runs were returned, every one of these tests failed with `OutOfSpace` at the first
//! allocation of another class or of a span.

use crashsim::SimPm;
use heap::Usage;
use mvcc::layout::MvccLayout;
use mvcc::{Mvcc, MvccOptions};
use pmem::{CreateOptions, Pool};
use std::sync::mpsc;
use tx::{Engine, NoReplay, Tx, TxError, TxResult};

const LAYOUT: &str = "mvcc-run-return";
const POOL: u64 = 512 << 10;
/// The first class: the largest small class of 4 KiB chunks (10 units a run).
const SMALL_A: u64 = 384;
/// The other class (84 units a run).
const SMALL_B: u64 = 48;
/// Blocks allocated per transaction while filling.
const BATCH: usize = 40;
const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

type Subject = Mvcc<SimPm, NoReplay>;

/// The crash-test geometry with operation logs large enough for one transaction that frees
/// every block of the first class (16 bytes a free) or writes a whole batch.
fn options() -> MvccOptions {
    MvccOptions {
        olog_size: 96 << 10,
        clog_size: 32 << 10,
        ..MvccOptions::small()
    }
}

struct Live {
    pm: SimPm,
    engine: Subject,
}

impl Live {
    fn fresh() -> Self {
        let pm = SimPm::new(POOL, Default::default());
        let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, POOL)).expect("format");
        let engine = Mvcc::create(pool, &options(), NoReplay).expect("create");
        Live { pm, engine }
    }

    /// Recovered from what a power failure now leaves (nothing pending persisted); or, with
    /// `clean`, closed and opened again.
    fn reopen(self, clean: bool) -> Self {
        let Live { pm, engine } = self;
        let image = if clean {
            drop(engine);
            pm.durable_image()
        } else {
            let snapshot = pm.crash_now();
            std::mem::forget(engine);
            snapshot.image(&snapshot.nothing())
        };
        let pm = SimPm::from_image(image, Default::default());
        let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
        let engine = Mvcc::open(pool, &options(), NoReplay).expect("recover");
        Live { pm, engine }
    }

    /// The heap's usage once every free committed so far is released: what committed
    /// transactions see. (A free waits for a checkpoint that covers it and, when the
    /// block's lines have checkpointed contents, for their write-back: the write-back of
    /// `quiesce`, then the checkpoint of `sync`.)
    fn usage(&self) -> Usage {
        self.engine.quiesce().expect("quiesce");
        self.engine.sync().expect("checkpoint");
        let usage = self.engine.heap().usage();
        assert_eq!(usage.allocated_blocks, self.engine.allocated_blocks());
        usage
    }

    fn chunk_count(&self) -> u64 {
        self.engine.heap().layout().chunk_count
    }

    fn chunk_size(&self) -> u64 {
        self.engine.heap().layout().chunk_size()
    }

    fn units_of(&self, size: u64) -> u64 {
        let layout = self.engine.heap().layout();
        let class = layout.class_for(size).expect("a small class");
        layout.run_geometry(class).expect("usable").units
    }

    fn unit_of(&self, size: u64) -> u64 {
        let layout = self.engine.heap().layout();
        heap::SIZE_CLASSES[layout.class_for(size).expect("a small class")]
    }

    fn chunk_of(&self, addr: u64) -> u64 {
        self.engine
            .heap()
            .layout()
            .chunk_of(addr)
            .expect("in the chunk area")
    }
}

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

/// Allocates blocks of `size` (the whole block written) in one transaction, at most `max`,
/// stopping at the first `OutOfSpace`; returns them and that error, if space ran out. (The
/// engine may run the body again: a retry for space ends its attempt with another error,
/// which is passed on.)
fn alloc_batch(
    engine: &Subject,
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
fn fill(engine: &Subject, size: u64, batch: usize, generation: u64) -> Vec<Block> {
    fill_with(engine, size, batch, Some(generation))
}

/// [`fill`], writing the blocks' bytes only with a `generation` (without, the commits log
/// only their heap actions).
fn fill_with(engine: &Subject, size: u64, batch: usize, generation: Option<u64>) -> Vec<Block> {
    let mut all = Vec::new();
    loop {
        let (got, full) = alloc_batch(engine, size, batch, generation)
            .unwrap_or_else(|e| panic!("allocating {size} bytes: {e}"));
        all.extend(got);
        match full {
            Some(error) if all.is_empty() => {
                panic!("mvcc: not one block of {size} bytes fits: {error:?}")
            }
            Some(_) => return all,
            None => {}
        }
    }
}

/// Whether one more block of `size` fits (it is allocated and the transaction aborted).
fn fits(engine: &Subject, size: u64) -> bool {
    let outcome: TxResult<()> = engine.transaction(|tx| {
        tx.alloc_raw(size)?;
        Err(TxError::abort("probe only"))
    });
    match outcome {
        Err(TxError::Aborted(_)) => true,
        Err(TxError::OutOfSpace { .. }) => false,
        other => panic!("probe of {size} bytes: {other:?}"),
    }
}

/// Writes generation `generation` over every block by later transactions, each writing at
/// most 24 lines (the crash geometry's version log takes 36 a transaction): the blocks'
/// lines get versions (and, later, checkpointed contents), unlike the bytes their allocating
/// transaction wrote in place.
fn rewrite(engine: &Subject, blocks: &mut [Block], generation: u64) {
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
            .expect("rewrite");
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

fn free_in_one_transaction(engine: &Subject, blocks: &[Block]) {
    engine
        .transaction(|tx| blocks.iter().try_for_each(|b| tx.free_raw(b.addr)))
        .unwrap_or_else(|e| panic!("freeing {} blocks: {e}", blocks.len()));
}

fn free_one_by_one(engine: &Subject, blocks: &[Block]) {
    for b in blocks {
        engine
            .transaction(|tx| tx.free_raw(b.addr))
            .unwrap_or_else(|e| panic!("freeing {:#x}: {e}", b.addr));
    }
}

/// Reads every block back and compares it with its pattern; no two blocks overlap.
fn verify(engine: &Subject, blocks: &[Block]) {
    let mut sorted = blocks.to_vec();
    sorted.sort_unstable_by_key(|b| b.addr);
    for pair in sorted.windows(2) {
        assert!(
            pair[0].addr + pair[0].len <= pair[1].addr,
            "blocks overlap: {:?} and {:?}",
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
                        "block {:#x} ({} bytes, generation {}) does not hold its bytes",
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

/// The deep check on a copy of the durable image: no damage, and the usage the heap records
/// once the checkpoints and logged heap actions recovery applies are stored.
fn deep_check(live: &Live) -> Usage {
    let pm = SimPm::from_image(live.pm.durable_image(), Default::default());
    let pool = Pool::attach(pm, LAYOUT).expect("attach");
    let arena = pool.arena();
    let findings = mvcc::check::check_area(pool.pm(), arena);
    let damage: Vec<String> = findings
        .iter()
        .filter(|f| f.is_damage())
        .map(ToString::to_string)
        .collect();
    assert!(damage.is_empty(), "the deep check found damage: {damage:?}");
    let layout = MvccLayout::read(pool.pm(), arena).expect("layout");
    let check = heap::check_heap(pool.pm(), layout.heap);
    assert!(check.findings.iter().all(|f| !f.is_damage()));
    check.usage.expect("the heap's usage")
}

/// Recovers after a power failure, checks the usage (live, recovered and on the media) and
/// the bytes of every block the test holds.
fn reopen_and_check(live: Live, held: &[Block], expected: Usage) -> Live {
    assert_eq!(live.usage(), expected, "usage before the crash");
    let live = live.reopen(false);
    assert_eq!(live.usage(), expected, "usage after recovery");
    assert_eq!(deep_check(&live), expected, "the deep check");
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

/// Fill with class A (with `rewritten`, every block then written again by a later
/// transaction, so its lines have versions and checkpointed contents), free everything
/// (with `checkpointed`, then checkpoint: the frees become reusable before any allocation
/// asks, some blocks' lines still in the checkpoint log), (reopen,) then spans of `k`
/// chunks until none fits, then class B until none fits.
///
/// Every chunk is reused: by a span or by a full run of B, and no run of A is left. Unlike
/// the redo and undo engines (`tx/tests/run_return.rs`), which return every empty run at
/// once, this engine returns a run only once its frees are released and its lines are
/// clean, so runs may come back between spans and the number of spans depends on when; the
/// bound on the space obtained does not: it is the whole chunk area less the marker, bitmap
/// and tail of each run of B (`n·chunk − runs_B·(chunk − units_B·48)`, 64 bytes a run at
/// 4 KiB chunks, so at least 98 % of the chunk area).
fn refill_with_other_sizes(free: Free, rewritten: bool, reopen_between: bool) {
    refill_after(free, rewritten, false, reopen_between);
}

/// [`refill_with_other_sizes`], with a checkpoint between the frees and the allocations.
fn refill_after(free: Free, rewritten: bool, checkpointed: bool, reopen_between: bool) {
    let live = Live::fresh();
    let name = format!(
        "mvcc/{free:?}/rewritten {rewritten}/checkpointed {checkpointed}/reopen {reopen_between}"
    );
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let mut a = fill(&live.engine, SMALL_A, BATCH, 1);
    assert_eq!(
        a.len() as u64,
        n * live.units_of(SMALL_A),
        "{name}: class A fills the heap"
    );
    if rewritten {
        rewrite(&live.engine, &mut a, 5);
    }
    verify(&live.engine, &a);
    match free {
        Free::InOneTransaction => free_in_one_transaction(&live.engine, &a),
        Free::OneByOne => free_one_by_one(&live.engine, &a),
    }
    if checkpointed {
        live.engine.sync().expect("checkpoint");
    }
    let live = if reopen_between {
        live.reopen(true)
    } else {
        live
    };

    let k = span_for(&[n]);
    let spans = fill(&live.engine, k * chunk, 1, 2);
    let b = fill(&live.engine, SMALL_B, BATCH, 3);
    let (units_b, unit_b) = (live.units_of(SMALL_B), live.unit_of(SMALL_B));
    let b_runs = live.usage().runs;
    assert_eq!(
        spans.len() as u64 * k + b_runs,
        n,
        "{name}: every chunk is reused, by a span of {k} chunks or a run of B"
    );
    assert_eq!(
        b.len() as u64,
        b_runs * units_b,
        "{name}: every run of B is full"
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
    reopen_and_check(live, &held, expected);
}

#[test]
fn freed_runs_serve_spans_and_another_class() {
    refill_with_other_sizes(Free::InOneTransaction, false, false);
    refill_with_other_sizes(Free::OneByOne, false, false);
}

#[test]
fn freed_runs_whose_lines_had_versions_serve_spans_and_another_class() {
    refill_with_other_sizes(Free::InOneTransaction, true, false);
    refill_with_other_sizes(Free::OneByOne, true, true);
}

#[test]
fn freed_runs_checkpointed_before_the_pressure_serve_spans_and_another_class() {
    refill_after(Free::InOneTransaction, true, true, false);
}

#[test]
fn empty_runs_found_at_open_are_returned() {
    refill_with_other_sizes(Free::InOneTransaction, false, true);
}

/// One block of class A kept alive (and rewritten, so its run has versions) in the run of
/// the middle chunk, every other block freed: that run is not returned. Spans and runs of
/// class B take every other chunk, class A gets exactly the kept run's other units back,
/// and the kept block's bytes survive all of it and a power failure.
#[test]
fn a_partly_used_run_is_not_returned() {
    let live = Live::fresh();
    let (n, chunk) = (live.chunk_count(), live.chunk_size());
    let units_a = live.units_of(SMALL_A);
    let mut a = fill(&live.engine, SMALL_A, BATCH, 1);
    let mut kept = [a.remove(a.len() / 2)];
    rewrite(&live.engine, &mut kept, 6);
    let kept = kept[0];
    let c = live.chunk_of(kept.addr);
    free_in_one_transaction(&live.engine, &a);
    let k = span_for(&[c, n - 1 - c]);
    let spans = fill(&live.engine, k * chunk, 1, 2);
    assert!(
        spans
            .iter()
            .all(|s| !(s.addr..s.addr + s.len).contains(&kept.addr)),
        "a span covers the kept block"
    );
    let b = fill(&live.engine, SMALL_B, BATCH, 3);
    let b_runs = live.usage().runs - 1;
    assert_eq!(
        spans.len() as u64 * k + b_runs,
        n - 1,
        "every chunk but the kept run's is reused, by a span of {k} chunks or a run of B"
    );
    assert_eq!(b.len() as u64, b_runs * live.units_of(SMALL_B), "class B");
    let more_a = fill(&live.engine, SMALL_A, BATCH, 4);
    assert_eq!(
        more_a.len() as u64,
        units_a - 1,
        "class A gets the kept run's other units"
    );
    assert!(more_a.iter().all(|x| live.chunk_of(x.addr) == c));

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
    free_one_by_one(&live.engine, &more_a);
    assert!(fits(&live.engine, SMALL_A), "the kept run after recovery");
    assert!(
        !fits(&live.engine, chunk),
        "the kept run is not a free chunk"
    );
}

#[derive(Clone, Copy, Debug)]
enum InFlight {
    /// Reserves one unit of class A in a run that is otherwise empty.
    Reserve,
    /// Frees the last allocated unit of a run.
    Free,
}

/// A transaction on another thread reserves (or frees) the one non-free unit of a run and
/// waits; this thread then takes one-chunk spans until none fits, which returns every
/// empty run but that one: `n − 1` spans, none over the in-flight block. Then the other
/// transaction commits or aborts; if the run is left with no allocated unit, the next span
/// takes its chunk, otherwise its unit keeps its bytes and the run serves class A only.
fn in_flight_against_pressure(what: InFlight, commit: bool) {
    let live = Live::fresh();
    let name = format!("mvcc/{what:?}/commit {commit}");
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
    // A running transaction holds back the checkpoints of every later commit, and a lane
    // short of operation-log room or free versions waits for it to end: start with
    // everything checkpointed, and apply the pressure with commits that log only their heap
    // actions (the spans' bytes are written once the other transaction has ended).
    live.engine.quiesce().expect("quiesce");
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
                // An attempt run again after it reported would hold a block the other
                // thread does not know of: fail rather than wait for a word that was sent.
                assert!(!reported, "the in-flight transaction ran twice");
                reported = true;
                ready_tx.send(block).expect("report the block");
                if go.recv_timeout(WAIT).is_err() {
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
        let spans = fill_with(engine, chunk, 1, None);
        go_tx.send(()).expect("release the other transaction");
        (
            (spans, in_flight),
            other.join().expect("the other transaction's thread"),
        )
    });
    let mut spans = spans;
    rewrite(&live.engine, &mut spans, 2);
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
fn an_in_flight_reservation_keeps_its_run() {
    for commit in [false, true] {
        in_flight_against_pressure(InFlight::Reserve, commit);
    }
}

#[test]
fn an_in_flight_free_keeps_its_run() {
    for commit in [false, true] {
        in_flight_against_pressure(InFlight::Free, commit);
    }
}
