//! Reservations, publications and frees from several threads at once, as the engines make
//! them: every block handed out is distinct, no free space is lost, nothing deadlocks (run
//! creation's system commit takes the engine's action lock under the heap's lock, as the
//! engines' callbacks do).

use crashsim::{SimConfig, SimPm};
use heap::{Action, Heap, HeapError, apply_durably};
use parking_lot::Mutex;
use pmem::Region;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

const REGION: Region = Region {
    offset: 4096,
    len: 2 * 1024 * 1024,
};
const THREADS: u64 = 4;
const ROUNDS: u64 = 400;

/// The engine's side: one lock around every action store (bitmap words are
/// read-modify-written, so two blocks sharing a word must not be published at once).
struct Engine {
    pm: SimPm,
    heap: Heap,
    actions: Mutex<()>,
}

impl Engine {
    fn apply(&self, actions: &[Action]) -> Result<(), HeapError> {
        let _serialised = self.actions.lock();
        apply_durably(&self.pm, actions);
        Ok(())
    }

    fn alloc(&self, size: u64) -> Option<(u64, u64)> {
        let r = self.heap.reserve(size, &mut |a| self.apply(a)).ok()?;
        self.apply(&[self.heap.publish_action(&r)])
            .expect("publish");
        Some((r.addr, r.size))
    }

    fn free(&self, addr: u64) {
        let freeing = self.heap.prepare_free(addr).expect("prepare_free");
        self.apply(&[self.heap.free_action(&freeing)])
            .expect("free");
        self.heap.finish_free(&freeing);
    }
}

/// A small deterministic generator per thread (xorshift).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Runs `work` on every thread and waits for all of them, failing instead of hanging if one
/// does not finish in time (a deadlock).
fn on_threads<T: Send + 'static>(
    engine: &Arc<Engine>,
    work: impl Fn(&Engine, u64) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let work = Arc::new(work);
    let (done, results) = mpsc::channel();
    for thread in 0..THREADS {
        let (engine, work, done) = (Arc::clone(engine), Arc::clone(&work), done.clone());
        std::thread::spawn(move || done.send((thread, work(&engine, thread))));
    }
    let mut out: Vec<(u64, T)> = (0..THREADS)
        .map(|_| {
            results
                .recv_timeout(Duration::from_secs(60))
                .expect("a thread finished (no deadlock, no panic)")
        })
        .collect();
    out.sort_by_key(|(thread, _)| *thread);
    out.into_iter().map(|(_, result)| result).collect()
}

/// A freshly formatted heap of 16 KiB chunks over `REGION`, shared by the test's threads.
fn fresh_engine() -> Arc<Engine> {
    let pm = SimPm::new(REGION.end(), SimConfig::default());
    let heap = Heap::format(&pm, REGION, 14).expect("format");
    Arc::new(Engine {
        pm,
        heap,
        actions: Mutex::new(()),
    })
}

#[test]
fn threads_get_distinct_blocks_and_lose_no_space() {
    let engine = fresh_engine();
    let kept = on_threads(&engine, |engine, thread| {
        let mut seed = 0x9E37_79B9_7F4A_7C15 ^ (thread + 1);
        let mut mine: Vec<(u64, u64)> = Vec::new();
        for _ in 0..ROUNDS {
            let roll = next(&mut seed);
            if roll.is_multiple_of(3) && !mine.is_empty() {
                let (addr, _) = mine.swap_remove((roll / 3) as usize % mine.len());
                engine.free(addr);
            } else {
                // Mostly small (several classes share runs' bitmap words across threads),
                // sometimes a span of one to three chunks.
                let size = match roll % 7 {
                    0 => 16_385 + roll % 40_000,
                    _ => 1 + (roll >> 8) % 2048,
                };
                if let Some(block) = engine.alloc(size) {
                    mine.push(block);
                }
            }
        }
        mine
    });
    let mut all = BTreeMap::new();
    for (addr, size) in kept.iter().flatten() {
        assert!(
            all.insert(*addr, *size).is_none(),
            "{addr:#x} handed out twice"
        );
    }
    let mut end = 0;
    for (&addr, &size) in &all {
        assert!(
            addr >= end,
            "the block at {addr:#x} overlaps the one before"
        );
        end = addr + size;
    }
    let usage = engine.heap.usage();
    assert_eq!(usage.allocated_blocks, all.len() as u64);
    assert_eq!(usage.allocated_bytes, all.values().sum::<u64>());
    assert_eq!(
        Heap::open(&engine.pm, REGION).expect("reopen").usage(),
        usage
    );

    // Everyone frees what they kept, concurrently: the heap is empty again, and every chunk
    // not holding a run is free (no span's chunk was lost).
    let kept = Arc::new(kept);
    let shared = Arc::clone(&kept);
    on_threads(&engine, move |engine, thread| {
        for (addr, _) in &shared[thread as usize] {
            engine.free(*addr);
        }
    });
    let usage = engine.heap.usage();
    assert_eq!((usage.allocated_blocks, usage.allocated_bytes), (0, 0));
    assert_eq!(
        usage.free_chunks + usage.runs,
        engine.heap.layout().chunk_count
    );
    assert_eq!(
        Heap::open(&engine.pm, REGION).expect("reopen").usage(),
        usage
    );
}

#[test]
fn concurrent_run_creation_for_one_class_fills_runs_before_making_more() {
    // Every thread takes units of one class until the heap is full: the units are distinct
    // and every run is full (no run was created while another had room).
    let engine = fresh_engine();
    let units = engine.heap.layout().run_geometry(12).expect("1536").units;
    let got = on_threads(&engine, |engine, _| {
        let mut mine = Vec::new();
        while let Some((addr, _)) = engine.alloc(1536) {
            mine.push(addr);
        }
        mine
    });
    let mut all: Vec<u64> = got.into_iter().flatten().collect();
    let count = all.len() as u64;
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len() as u64, count, "a unit handed out twice");
    let usage = engine.heap.usage();
    assert_eq!(usage.free_chunks, 0);
    assert_eq!(count, usage.runs * units, "every run is full");
}
