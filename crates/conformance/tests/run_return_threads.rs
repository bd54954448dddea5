//! Run return under several threads (`docs/heap-format.md` §11.1), on each engine: threads
//! fill a small heap with blocks of different size classes until it has no free chunk, free
//! nearly all of them, then churn small, medium and large blocks at once, so that reservations
//! keep finding no free chunk and return empty runs while other threads allocate from and free
//! into runs of every class. Checked throughout: no two live blocks overlap, every live block
//! keeps its bytes; at the end, the allocated-block count equals the live blocks, the pool's
//! deep check finds no damage, and after a reopen every block is still intact. Large blocks
//! must have been allocated after the heap was filled with runs, which only returned runs
//! make possible.

use conformance::{Factory, LAYOUT, RedoFactory, UndoFactory};
use heap::Usage;
use pmem::{CreateOptions, NativeOptions, Pool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use tx::{Engine, Tx, TxError, TxResult};

mod churn;
use churn::{
    CHUNK, Live, POOL, alloc_into, free_slot, mvcc_factory, read_slot, tx_options, update_slot,
    verify, write_slot,
};

const THREADS: usize = 4;
/// One lane a thread.
const LANES: u32 = THREADS as u32;
const CYCLES: u64 = 12;
/// Slots per thread (its table is a large block of `SLOTS * 16` bytes).
const SLOTS: u64 = 1024;
/// Slots `0..KEEP` of each thread keep their first blocks for the whole test: a few runs that
/// never empty.
const KEEP: u64 = 16;
/// Churn operations per thread and cycle.
const CHURN_OPS: u64 = 3000;
/// Slots the churn works on (after the kept ones): few enough that frees keep up.
const CHURN_SLOTS: u64 = 200;
/// The fill sizes (bytes), one per thread at a time, rotated every cycle: classes whose blocks
/// share 64-byte lines (48, 96) and classes of whole lines.
const FILL: [u64; THREADS] = [48, 256, 384, 96];

/// A barrier for the churning threads that a panicking thread breaks (`Drop` of `Breaker`),
/// so the others fail instead of waiting for it forever.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, u64, bool)>,
    changed: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut state = self.state.lock().expect("gate");
        let generation = state.1;
        state.0 += 1;
        if state.0 == THREADS {
            *state = (0, generation + 1, state.2);
            self.changed.notify_all();
            return;
        }
        while state.1 == generation && !state.2 {
            state = self.changed.wait(state).expect("gate");
        }
        let broken = state.2;
        drop(state);
        assert!(!broken, "another churning thread failed");
    }

    fn break_it(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.2 = true;
        }
        self.changed.notify_all();
    }
}

/// Breaks the gate when its thread unwinds.
struct Breaker<'a>(&'a Gate);

impl Drop for Breaker<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.break_it();
        }
    }
}

/// What the threads saw, summed.
#[derive(Default)]
struct Seen {
    allocated: AtomicU64,
    out_of_space: AtomicU64,
    /// Blocks larger than a chunk allocated (each fill leaves no free chunk, so the first in
    /// every cycle needs returned runs).
    large: AtomicU64,
    freed: AtomicU64,
}

struct Shared<'a, E> {
    engine: &'a E,
    live: Live,
    seen: Seen,
    barrier: Gate,
    usage: &'a (dyn Fn(&E) -> Usage + Sync),
    /// Runs between cycles, while no transaction runs: a sync, or for mvcc (which defers
    /// frees until checkpoints and write-backs allow their reuse) a quiesce every other
    /// cycle and nothing in between.
    settle: &'a (dyn Fn(&E) + Sync),
}

/// One thread's view of its slots (`None`: empty) and its table's address.
struct Worker<'s, 'a, E> {
    shared: &'s Shared<'a, E>,
    index: usize,
    table: u64,
    slots: Vec<Option<(u64, u64)>>,
    rng: ChaCha8Rng,
    serial: u64,
}

impl<E: Engine> Worker<'_, '_, E> {
    fn next_tag(&mut self, size: u64) -> u64 {
        self.serial += 1;
        churn::tag((self.serial << 3) | self.index as u64, size)
    }

    /// Allocates `size` bytes into empty slot `slot`; `false` when the heap had no room.
    fn alloc(&mut self, slot: u64, size: u64) -> bool {
        let tag = self.next_tag(size);
        let table = self.table;
        match self
            .shared
            .engine
            .transaction(|tx| alloc_into(tx, table, slot, tag))
        {
            Ok(addr) => {
                self.listed(addr, tag);
                self.slots[slot as usize] = Some((addr, tag));
                self.shared.seen.allocated.fetch_add(1, Ordering::Relaxed);
                if size > CHUNK {
                    self.shared.seen.large.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            Err(TxError::OutOfSpace { .. }) => {
                self.shared
                    .seen
                    .out_of_space
                    .fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(other) => panic!("thread {}: allocating {size} bytes: {other}", self.index),
        }
    }

    fn listed(&self, addr: u64, tag: u64) {
        if let Err(overlap) = self.shared.live.insert(addr, churn::size_of(tag), tag) {
            panic!("thread {}: {overlap}", self.index);
        }
        // The new block reads back as written, outside the transaction that wrote it.
        self.shared
            .engine
            .transaction(|tx| verify(tx, addr, tag))
            .unwrap_or_else(|e| panic!("thread {}: fresh block: {e}", self.index));
    }

    /// Frees the blocks of `slots` in one transaction.
    fn free(&mut self, slots: &[u64]) {
        for &slot in slots {
            let (addr, _) = self.slots[slot as usize].expect("an occupied slot");
            self.shared.live.remove(addr);
        }
        let table = self.table;
        self.shared
            .engine
            .transaction(|tx| {
                slots
                    .iter()
                    .try_for_each(|&slot| free_slot(tx, table, slot))
            })
            .unwrap_or_else(|e| panic!("thread {}: freeing {slots:?}: {e}", self.index));
        for &slot in slots {
            self.slots[slot as usize] = None;
        }
        self.shared
            .seen
            .freed
            .fetch_add(slots.len() as u64, Ordering::Relaxed);
    }

    /// Frees the block of `slot` and allocates `size` bytes into it in one transaction; on
    /// `OutOfSpace` nothing changes.
    fn replace(&mut self, slot: u64, size: u64) {
        let (old, old_tag) = self.slots[slot as usize].expect("an occupied slot");
        let tag = self.next_tag(size);
        let table = self.table;
        self.shared.live.remove(old);
        let result = self.shared.engine.transaction(|tx| {
            free_slot(tx, table, slot)?;
            alloc_into(tx, table, slot, tag)
        });
        match result {
            Ok(addr) => {
                self.slots[slot as usize] = Some((addr, tag));
                self.listed(addr, tag);
                self.shared.seen.freed.fetch_add(1, Ordering::Relaxed);
                self.shared.seen.allocated.fetch_add(1, Ordering::Relaxed);
                if size > CHUNK {
                    self.shared.seen.large.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(TxError::OutOfSpace { .. }) => {
                self.shared
                    .seen
                    .out_of_space
                    .fetch_add(1, Ordering::Relaxed);
                if let Err(overlap) = self
                    .shared
                    .live
                    .insert(old, churn::size_of(old_tag), old_tag)
                {
                    panic!("thread {}: {overlap}", self.index);
                }
            }
            Err(other) => panic!("thread {}: replacing slot {slot}: {other}", self.index),
        }
    }

    /// Rewrites the block of `slot`, if any, in place with a new tag (blocks of small classes
    /// share 64-byte lines, so a multi-version engine gives the line a header and versions).
    fn update(&mut self, slot: u64) {
        let Some((addr, old)) = self.slots[slot as usize] else {
            return;
        };
        let tag = self.next_tag(churn::size_of(old));
        let table = self.table;
        self.shared
            .engine
            .transaction(|tx| update_slot(tx, table, slot, tag))
            .unwrap_or_else(|e| panic!("thread {}: updating slot {slot}: {e}", self.index));
        self.slots[slot as usize] = Some((addr, tag));
    }

    /// Every occupied slot's block still holds its pattern, and the table names it.
    fn verify_all(&self) {
        let table = self.table;
        self.shared
            .engine
            .transaction(|tx| {
                for (slot, entry) in self.slots.iter().enumerate() {
                    let (addr, tag) = entry.unwrap_or((0, 0));
                    let on_pool = read_slot(tx, table, slot as u64)?;
                    if on_pool != (addr, tag) {
                        return Err(TxError::Corrupted(format!(
                            "slot {slot}: the table says {on_pool:x?}, expected {:x?}",
                            (addr, tag)
                        )));
                    }
                    if tag != 0 {
                        verify(tx, addr, tag)?;
                    }
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("thread {}: {e}", self.index));
    }

    fn occupied(&self, range: std::ops::Range<u64>) -> Vec<u64> {
        range
            .filter(|&s| self.slots[s as usize].is_some())
            .collect()
    }

    /// A size from the churn's mix: small units, the largest classes, or spans of up to 3
    /// chunks.
    fn churn_size(&mut self) -> u64 {
        match self.rng.random_range(0..100) {
            0..35 => self.rng.random_range(1..=400),
            35..60 => self.rng.random_range(400..=CHUNK / 2),
            _ => self.rng.random_range(CHUNK / 2..=3 * CHUNK),
        }
    }

    fn run(&mut self) {
        for cycle in 0..CYCLES {
            // Fill: one class per thread, until the heap (or the table) is full.
            let size = FILL[(self.index + cycle as usize) % THREADS];
            for slot in 0..SLOTS {
                if self.slots[slot as usize].is_none() && !self.alloc(slot, size) {
                    break;
                }
            }
            self.shared.barrier.wait();
            if self.index == 0 {
                let usage = (self.shared.usage)(self.shared.engine);
                assert_eq!(
                    usage.free_chunks, 0,
                    "cycle {cycle}: the fill left free chunks ({usage:?}); make the pool \
                     smaller or the tables larger"
                );
            }
            self.shared.barrier.wait();
            self.verify_all();
            // Free all but the kept slots, in random order, up to 3 blocks per transaction.
            let mut occupied = self.occupied(KEEP..SLOTS);
            while !occupied.is_empty() {
                let n = self.rng.random_range(1..=3).min(occupied.len());
                let batch: Vec<u64> = (0..n)
                    .map(|_| occupied.swap_remove(self.rng.random_range(0..occupied.len())))
                    .collect();
                self.free(&batch);
            }
            self.shared.barrier.wait();
            for op in 0..CHURN_OPS {
                let slot = KEEP + self.rng.random_range(0..CHURN_SLOTS);
                if self.rng.random_bool(0.2) {
                    self.update(slot);
                } else if self.slots[slot as usize].is_none() {
                    let size = self.churn_size();
                    self.alloc(slot, size);
                } else if self.rng.random_bool(0.6) {
                    self.free(&[slot]);
                } else {
                    let size = self.churn_size();
                    self.replace(slot, size);
                }
                if op % 200 == 199 {
                    self.verify_all();
                }
            }
            self.verify_all();
            let rest = self.occupied(KEEP..SLOTS);
            for batch in rest.chunks(4) {
                self.free(batch);
            }
            self.shared.barrier.wait();
            if self.index == 0 {
                (self.shared.settle)(self.shared.engine);
            }
            self.shared.barrier.wait();
        }
    }
}

/// Runs the churn on `factory`'s engine over a pool file, then checks the pool closed and
/// reopened.
fn churn_threads<F: Factory>(
    factory: &F,
    usage: &(dyn Fn(&F::Engine<pmem::Native>) -> Usage + Sync),
    settle: &(dyn Fn(&F::Engine<pmem::Native>) + Sync),
) {
    let dir = tempfile::tempdir_in(churn::pool_dir()).expect("tempdir");
    let path = dir.path().join("pool");
    let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, POOL)).expect("create the pool");
    let engine = factory.create(pool).expect("create the engine");
    // One table per transaction: an mvcc commit logs the bytes it wrote in place.
    let tables: Vec<u64> = (0..THREADS as u64)
        .map(|t| {
            engine.transaction(|tx| {
                let table = tx.alloc_zeroed_raw(SLOTS * churn::SLOT)?;
                let root = tx.root_offset();
                tx.write_raw(root + 8 * t, &table.to_le_bytes())?;
                Ok::<_, TxError>(table)
            })
        })
        .collect::<TxResult<Vec<u64>>>()
        .expect("tables");
    let shared = Shared {
        engine: &engine,
        live: Live::default(),
        seen: Seen::default(),
        barrier: Gate::default(),
        usage,
        settle,
    };
    let slots: Vec<Vec<Option<(u64, u64)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = tables
            .iter()
            .enumerate()
            .map(|(index, &table)| {
                let shared = &shared;
                scope.spawn(move || {
                    let _breaker = Breaker(&shared.barrier);
                    let mut worker = Worker {
                        shared,
                        index,
                        table,
                        slots: vec![None; SLOTS as usize],
                        rng: ChaCha8Rng::seed_from_u64(0x5eed + index as u64),
                        serial: 0,
                    };
                    worker.run();
                    worker.slots
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a churning thread panicked"))
            .collect()
    });
    let seen = &shared.seen;
    let live: u64 = slots.iter().flatten().filter(|s| s.is_some()).count() as u64;
    eprintln!(
        "{}: {} allocated, {} freed, {} out of space, {} blocks over a chunk, {live} live",
        factory.name(),
        seen.allocated.load(Ordering::Relaxed),
        seen.freed.load(Ordering::Relaxed),
        seen.out_of_space.load(Ordering::Relaxed),
        seen.large.load(Ordering::Relaxed),
    );
    assert!(
        seen.large.load(Ordering::Relaxed) > 0,
        "no block over a chunk was allocated after the heap was filled with runs"
    );
    assert!(
        seen.out_of_space.load(Ordering::Relaxed) > 0,
        "space never ran out"
    );
    engine.sync().expect("sync");
    assert_eq!(
        factory.blocks(&engine),
        live + THREADS as u64,
        "allocated blocks against the live blocks and the tables"
    );
    drop(engine);
    check_reopened(factory, &path, &tables, &slots);
}

/// The closed pool's deep check finds no damage, and the reopened engine holds exactly the
/// live blocks, intact.
fn check_reopened<F: Factory>(
    factory: &F,
    path: &std::path::Path,
    tables: &[u64],
    slots: &[Vec<Option<(u64, u64)>>],
) {
    let damage = churn::file_damage(path).expect("a copy of the pool file");
    assert!(damage.is_empty(), "deep check: {damage:?}");
    let pool = Pool::open(path, LAYOUT, &NativeOptions::default()).expect("open the pool");
    let engine = factory.open(pool).expect("reopen the engine");
    let live = slots.iter().flatten().filter(|s| s.is_some()).count() as u64;
    assert_eq!(
        factory.blocks(&engine),
        live + tables.len() as u64,
        "blocks after reopen"
    );
    engine
        .transaction(|tx| {
            for (&table, slots) in tables.iter().zip(slots) {
                for (slot, entry) in slots.iter().enumerate() {
                    let (addr, tag) = entry.unwrap_or((0, 0));
                    if read_slot(tx, table, slot as u64)? != (addr, tag) {
                        return Err(TxError::Corrupted(format!("slot {slot} after reopen")));
                    }
                    if tag != 0 {
                        verify(tx, addr, tag)?;
                    }
                }
            }
            Ok(())
        })
        .expect("every live block intact after reopen");
    // A last allocation of every kind still works on the reopened heap.
    engine
        .transaction(|tx| {
            let table = tables[0];
            let spare = SLOTS - 1;
            if read_slot(tx, table, spare)?.1 == 0 {
                alloc_into(tx, table, spare, churn::tag(1, 2 * CHUNK))?;
                free_slot(tx, table, spare)?;
                write_slot(tx, table, spare, 0, 0)?;
            }
            Ok::<_, TxError>(())
        })
        .expect("a span on the reopened heap");
}

#[test]
fn redo_threads_churn_size_classes_with_run_return() {
    let factory = RedoFactory(tx_options(LANES));
    churn_threads(&factory, &|e| e.heap().usage(), &|e| {
        e.sync().expect("sync")
    });
}

#[test]
fn undo_threads_churn_size_classes_with_run_return() {
    let factory = UndoFactory(tx_options(LANES));
    churn_threads(&factory, &|e| e.heap().usage(), &|e| {
        e.sync().expect("sync")
    });
}

#[test]
fn mvcc_threads_churn_size_classes_with_run_return() {
    // Every other cycle ends without a settle: the next fill then finds the frees of the
    // churn deferred (their checkpoint, their lines' write-back) and released by whichever
    // thread's allocation runs out first, while the other threads allocate. An allocation
    // that found no space while another thread was handing released frees to the heap used
    // to fail (about 1 run in 8 under load), and the fill's check then found free chunks.
    // The other cycles end with one `quiesce`, after which no free may be deferred.
    let factory = mvcc_factory(LANES);
    let settles = AtomicU64::new(0);
    churn_threads(&factory, &|e| e.heap().usage(), &|e| {
        if settles.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            return;
        }
        e.quiesce().expect("quiesce");
        let deferred = e.heap().usage().allocated_blocks - e.allocated_blocks();
        assert_eq!(deferred, 0, "frees still deferred after a quiesce");
    });
}
