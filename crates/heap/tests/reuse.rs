//! Fragmentation and reuse: after everything is freed the heap allocates its full capacity
//! again, in a size class, in another class and as spans (empty runs go back to the free
//! chunks, docs/heap-format.md §11), and freed spans coalesce with free neighbours (there
//! is no coalescing structure: a span search sees per-chunk state, docs/heap-format.md §12).

use crashsim::SimPm;
use heap::{Heap, HeapError};
use pmem::Persist;

mod common;
use common::{CHUNK_SHIFT, REGION, commit, fresh};

fn try_alloc(pm: &SimPm, heap: &Heap, size: u64) -> Option<u64> {
    match heap.reserve(size, &mut |a| commit(pm, a)) {
        Ok(r) => {
            commit(pm, &[heap.publish_action(&r)]).expect("publish");
            Some(r.addr)
        }
        Err(HeapError::OutOfSpace { .. }) => None,
        Err(other) => panic!("reserve({size}): {other:?}"),
    }
}

fn free(pm: &SimPm, heap: &Heap, addr: u64) {
    let freeing = heap.prepare_free(addr).expect("prepare_free");
    commit(pm, &[heap.free_action(&freeing)]).expect("free");
    heap.finish_free(&freeing);
}

fn fill(pm: &SimPm, heap: &Heap, size: u64) -> Vec<u64> {
    std::iter::from_fn(|| try_alloc(pm, heap, size)).collect()
}

#[test]
fn freed_spans_coalesce_into_the_whole_heap() {
    let (pm, heap) = fresh();
    let count = heap.layout().chunk_count;
    let chunk = heap.layout().chunk_size();
    let whole = count * chunk;
    // Spans of 1, 2 and 3 chunks until full, freed in an interleaved order (each free lands
    // next to free and busy neighbours), then the whole heap as one span, twice (once after
    // a reopen, whose rebuild must coalesce the same way).
    let mut heap = heap;
    for round in 0..2 {
        if round == 1 {
            heap = Heap::open(&pm, REGION).expect("reopen");
        }
        let mut blocks = Vec::new();
        for span in [1u64, 2, 3].iter().cycle() {
            match try_alloc(&pm, &heap, span * chunk) {
                Some(addr) => blocks.push(addr),
                None if heap.usage().free_chunks >= *span => panic!("room for {span} left"),
                None if heap.usage().free_chunks == 0 => break,
                None => {}
            }
        }
        assert_eq!(heap.usage().allocated_bytes, whole, "spans fill the heap");
        let (odd, even): (Vec<_>, Vec<_>) =
            blocks.iter().enumerate().partition(|(i, _)| i % 2 == 1);
        for (_, &addr) in odd.into_iter().chain(even) {
            free(&pm, &heap, addr);
        }
        let all = try_alloc(&pm, &heap, whole).expect("the freed spans coalesce");
        assert_eq!(all, heap.layout().chunk_start(0));
        assert_eq!(try_alloc(&pm, &heap, 1), None, "the heap is one span");
        free(&pm, &heap, all);
    }
}

#[test]
fn a_class_refills_its_runs_after_everything_is_freed() {
    for size in [16u64, 1536, 1000] {
        let (pm, heap) = fresh();
        let first = fill(&pm, &heap, size);
        let runs = heap.usage().runs;
        assert_eq!(heap.usage().free_chunks, 0);
        for &addr in first.iter().rev() {
            free(&pm, &heap, addr);
        }
        assert_eq!(heap.usage().allocated_blocks, 0);
        let second = fill(&pm, &heap, size);
        assert_eq!(second.len(), first.len(), "class of {size} bytes");
        assert_eq!(heap.usage().runs, runs, "no run added");
        // The same after a crash-free reopen with everything freed.
        for &addr in &second {
            free(&pm, &heap, addr);
        }
        let heap = Heap::open(&pm, REGION).expect("reopen");
        assert_eq!(fill(&pm, &heap, size).len(), first.len());
    }
}

#[test]
fn a_cancelled_span_is_free_for_its_neighbours() {
    // A span reserved and cancelled between two published ones: the next span of the
    // combined size fits exactly there (first fit from the lowered hint).
    let (pm, heap) = fresh();
    let chunk = heap.layout().chunk_size();
    let a = try_alloc(&pm, &heap, chunk).expect("a");
    let r = heap
        .reserve(2 * chunk, &mut |x| commit(&pm, x))
        .expect("reserve");
    let b = try_alloc(&pm, &heap, chunk).expect("b");
    assert!(a < r.addr && r.addr < b);
    heap.cancel(&r);
    free(&pm, &heap, a);
    let merged = try_alloc(&pm, &heap, 3 * chunk).expect("three chunks");
    assert_eq!(merged, a, "the freed chunk and the cancelled span coalesce");
}

#[test]
fn space_freed_by_one_class_serves_other_classes_and_spans() {
    for (first_size, then_size) in [(16u64, 1536u64), (1536, 16), (64, 1 << CHUNK_SHIFT)] {
        for reopen in [false, true] {
            let (pm, heap) = fresh();
            let chunks = heap.layout().chunk_count;
            let first = fill(&pm, &heap, first_size);
            assert_eq!(
                heap.usage().free_chunks,
                0,
                "{first_size} bytes fill the heap"
            );
            assert_eq!(heap.usage().runs, chunks, "one run per chunk");
            for &addr in &first {
                free(&pm, &heap, addr);
            }
            let heap = if reopen {
                drop(heap);
                Heap::open(&pm, REGION).expect("reopen")
            } else {
                heap
            };
            let then = fill(&pm, &heap, then_size);
            let (alone_pm, alone) = fresh();
            let expected = fill(&alone_pm, &alone, then_size).len();
            assert_eq!(
                then.len(),
                expected,
                "{then_size}-byte blocks after {first_size}-byte ones (reopen: {reopen}): as many as in a fresh heap"
            );
            let usage = heap.usage();
            assert_eq!(usage.free_chunks, 0, "every chunk reused");
            // What the media says agrees: a reopened heap counts the same blocks.
            let reopened = Heap::open(&pm, REGION).expect("reopen");
            assert_eq!(reopened.usage(), usage);
        }
    }
}

#[test]
fn a_run_with_one_live_unit_is_not_returned() {
    let (pm, heap) = fresh();
    let first = fill(&pm, &heap, 16);
    let keep = first[0];
    pm.write(keep, &[0xa5; 16], pmem::WriteClass::User);
    for &addr in &first[1..] {
        free(&pm, &heap, addr);
    }
    let then = fill(&pm, &heap, 1536);
    assert!(!then.is_empty());
    // Every other run went back to the free chunks and now holds the new class.
    assert_eq!(heap.usage().runs, 1 + then_runs(&heap, &then));
    assert_eq!(heap.usage().free_chunks, 0);
    let mut bytes = [0u8; 16];
    pm.read(keep, &mut bytes);
    assert_eq!(bytes, [0xa5; 16], "the live unit keeps its bytes");
    let reopened = Heap::open(&pm, REGION).expect("reopen");
    let freeing = reopened
        .prepare_free(keep)
        .expect("the live unit is still allocated");
    reopened.cancel_free(&freeing);
}

/// Runs that hold `blocks` (distinct chunks).
fn then_runs(heap: &Heap, blocks: &[u64]) -> u64 {
    let mut chunks: Vec<u64> = blocks
        .iter()
        .map(|&a| heap.layout().chunk_of(a).expect("in the heap"))
        .collect();
    chunks.sort_unstable();
    chunks.dedup();
    chunks.len() as u64
}

#[test]
fn a_request_larger_than_the_heap_returns_no_run() {
    let (pm, heap) = fresh();
    let units = fill(&pm, &heap, 64);
    for &addr in &units {
        free(&pm, &heap, addr);
    }
    let runs = heap.usage().runs;
    let whole = heap.layout().chunk_count << CHUNK_SHIFT;
    let mut system_changes = 0;
    let refused = heap.reserve(whole + 1, &mut |actions| {
        system_changes += 1;
        commit(&pm, actions)
    });
    assert!(
        matches!(refused, Err(HeapError::OutOfSpace { .. })),
        "{refused:?}"
    );
    assert_eq!(
        system_changes, 0,
        "runs returned for a request no return can satisfy"
    );
    assert_eq!(heap.usage().runs, runs);
    // The whole heap, though, fits once every empty run is back.
    assert!(try_alloc(&pm, &heap, whole).is_some());
}
