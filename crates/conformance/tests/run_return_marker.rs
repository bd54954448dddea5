//! Review of run return (`docs/heap-format.md` §11.1): what a returned run leaves in its chunk.
//!
//! A returned run keeps its marker and its all-zero bitmap on the media. The chunk's next owner
//! may be a large span whose object bytes are written by the application; `Heap::open` (and the
//! deep check) report a FREE or LARGE head chunk that holds a valid marker over bitmap words
//! that pass their checks with a unit set, as a run whose descriptor was lost. With the stale
//! marker in place, one application word at a bitmap word's offset decides it: a plain
//! little-endian integer passes a bitmap word's 16-bit check for about one value in 65 536.
//! An application that stores such a value there and has not written the object's first 8
//! bytes (the marker) must still be able to reopen its pool.

use conformance::{Factory, LAYOUT, MvccFactory, RedoFactory, UndoFactory};
use mvcc::MvccOptions;
use pmem::{CreateOptions, NativeOptions, Pool};
use tx::{Engine, EngineOptions, LogMode, NoReplay, Tx, TxError};

mod churn;
use churn::{CHUNK_SHIFT, POOL};

/// A small class: its runs fill the heap before a span is asked for.
const SMALL: u64 = 256;

fn options() -> EngineOptions {
    EngineOptions {
        lanes: 2,
        lane_size: 16 << 10,
        chunk_shift: CHUNK_SHIFT,
        log_mode: LogMode::Auto,
    }
}

fn mvcc() -> MvccFactory<NoReplay> {
    MvccFactory {
        options: MvccOptions {
            chunk_shift: CHUNK_SHIFT,
            olog_size: 16 << 10,
            clog_size: 16 << 10,
            background: false,
            ..MvccOptions::small()
        },
        replay: NoReplay,
    }
}

/// The smallest integer that, stored as a plain little-endian `u64` at `addr`, reads as a
/// valid heap bitmap word with at least one unit set.
fn integer_that_reads_as_a_bitmap_word(addr: u64) -> u64 {
    (1..1u64 << 24)
        .find(|&v| pmem::checked::seal(v, addr, "probe") == Ok(v))
        .expect("one integer in 65 536 passes")
}

/// Fills the heap with `SMALL` blocks, frees them all, then allocates one chunk-sized span
/// (which returns the empty runs) and stores `value(span)` at byte 8 of it, leaving its first
/// 8 bytes unwritten. Returns the span's address.
fn fill_free_then_span<E: Engine>(engine: &E, value: impl Fn(u64) -> u64) -> u64 {
    let mut blocks = Vec::new();
    loop {
        match engine.transaction(|tx| tx.alloc_raw(SMALL)) {
            Ok(addr) => blocks.push(addr),
            Err(TxError::OutOfSpace { .. }) => break,
            Err(other) => panic!("filling: {other}"),
        }
    }
    assert!(blocks.len() > 100, "the heap held {} blocks", blocks.len());
    for chunk in blocks.chunks(16) {
        engine
            .transaction(|tx| chunk.iter().try_for_each(|&b| tx.free_raw(b)))
            .expect("free");
    }
    engine
        .transaction(|tx| {
            let span = tx.alloc_raw(1 << CHUNK_SHIFT)?;
            tx.write_raw(span + 8, &value(span + 8).to_le_bytes())?;
            Ok::<_, TxError>(span)
        })
        .expect("a span after every small block was freed")
}

fn reopen_after_span<F: Factory>(factory: &F) -> Result<(), String> {
    let dir = tempfile::tempdir_in(churn::pool_dir()).expect("tempdir");
    let path = dir.path().join("pool");
    let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, POOL)).expect("create the pool");
    let engine = factory.create(pool).expect("create the engine");
    let span = fill_free_then_span(&engine, integer_that_reads_as_a_bitmap_word);
    // A clean close: the engine quiesces on drop, nothing is left to recover.
    drop(engine);
    let damage = churn::file_damage(&path).expect("a copy of the pool file");
    let pool = Pool::open(&path, LAYOUT, &NativeOptions::default()).expect("open the pool");
    let reopened = factory.open(pool).map(drop);
    match (reopened, damage.is_empty()) {
        (Ok(()), true) => Ok(()),
        (reopened, _) => Err(format!(
            "span at {span:#x}: reopen {reopened:?}; deep check damage {damage:?}",
            reopened = reopened.map_err(|e| e.to_string())
        )),
    }
}

#[test]
fn a_span_over_a_returned_run_reopens_with_an_integer_where_its_bitmap_was_redo() {
    reopen_after_span(&RedoFactory(options())).expect("redo");
}

#[test]
fn a_span_over_a_returned_run_reopens_with_an_integer_where_its_bitmap_was_undo() {
    reopen_after_span(&UndoFactory(options())).expect("undo");
}

#[test]
fn a_span_over_a_returned_run_reopens_with_an_integer_where_its_bitmap_was_mvcc() {
    reopen_after_span(&mvcc()).expect("mvcc");
}
