//! The allocator over the simulator backend: allocation, free, rebuild, corruption.

use crashsim::SimPm;
use heap::{Heap, HeapError, Usage};
use pmem::Persist;
use proptest::prelude::*;
use std::collections::BTreeMap;

mod common;
use common::{REGION, alloc, commit, fresh};

fn free(pm: &SimPm, heap: &Heap, addr: u64) {
    let freeing = heap.prepare_free(addr).expect("prepare free");
    commit(pm, &[heap.free_action(&freeing)]).expect("commit free");
    heap.finish_free(&freeing);
}

#[test]
fn blocks_are_distinct_and_survive_reopen() {
    let (pm, heap) = fresh();
    let sizes = [1, 16, 17, 64, 100, 1000, 3000, 20_000, 40_000];
    let blocks: Vec<(u64, u64)> = sizes.iter().map(|&s| (alloc(&pm, &heap, s), s)).collect();
    let mut sorted = blocks.clone();
    sorted.sort_unstable();
    for pair in sorted.windows(2) {
        assert!(pair[0].0 + pair[0].1 <= pair[1].0, "overlap: {pair:?}");
    }
    let before = heap.usage();
    let reopened = Heap::open(&pm, REGION).expect("reopen");
    assert_eq!(reopened.usage(), before);
    for (addr, _) in blocks {
        free(&pm, &reopened, addr);
    }
    assert_eq!(reopened.usage().allocated_blocks, 0);
    assert_eq!(
        Heap::open(&pm, REGION)
            .expect("reopen")
            .usage()
            .allocated_bytes,
        0
    );
}

#[test]
fn cancelled_reservations_and_frees_change_nothing() {
    let (pm, heap) = fresh();
    let kept = alloc(&pm, &heap, 64);
    let usage = heap.usage();
    let reservation = heap.reserve(64, &mut |a| commit(&pm, a)).expect("reserve");
    heap.cancel(&reservation);
    let freeing = heap.prepare_free(kept).expect("prepare");
    heap.cancel_free(&freeing);
    assert_eq!(heap.usage(), usage);
    assert_eq!(Heap::open(&pm, REGION).expect("reopen").usage(), usage);
}

#[test]
fn unpublished_reservations_do_not_survive_a_crash() {
    let (pm, heap) = fresh();
    alloc(&pm, &heap, 64);
    heap.reserve(64, &mut |a| commit(&pm, a)).expect("reserve");
    heap.reserve(50_000, &mut |a| commit(&pm, a))
        .expect("reserve large");
    let recovered = Heap::open(&pm, REGION).expect("reopen");
    assert_eq!(
        recovered.usage().allocated_blocks,
        1,
        "only the published block is allocated"
    );
}

#[test]
fn invalid_frees_are_refused() {
    let (pm, heap) = fresh();
    let block = alloc(&pm, &heap, 64);
    for bad in [block + 8, 0, REGION.end() + 64, block + 64] {
        assert!(
            matches!(heap.prepare_free(bad), Err(HeapError::InvalidFree(_))),
            "{bad:#x}"
        );
    }
    let freeing = heap.prepare_free(block).expect("first free");
    assert!(
        matches!(heap.prepare_free(block), Err(HeapError::BeingFreed(_))),
        "double free"
    );
    heap.cancel_free(&freeing);
}

#[test]
fn running_out_of_space_is_an_error_not_a_panic() {
    let (pm, heap) = fresh();
    assert!(matches!(
        heap.reserve(1 << 30, &mut |a| commit(&pm, a)),
        Err(HeapError::OutOfSpace { .. })
    ));
    let mut count = 0;
    while heap.reserve(4096, &mut |a| commit(&pm, a)).is_ok() {
        count += 1;
        assert!(count < 1000, "the heap never fills");
    }
    assert!(count > 20, "only {count} blocks of 4 KiB fit");
}

#[test]
fn corrupt_descriptors_and_bitmaps_are_detected() {
    let (pm, heap) = fresh();
    alloc(&pm, &heap, 64);
    let layout = *heap.layout();
    let descriptor = layout.descriptor_at(0);
    pm.write_u64(
        descriptor,
        pm.read_u64(descriptor) ^ 0x100,
        pmem::WriteClass::Meta,
    );
    assert!(matches!(
        Heap::open(&pm, REGION),
        Err(HeapError::Corrupted(_))
    ));

    let (pm, heap) = fresh();
    alloc(&pm, &heap, 1536); // 10 units per run: the bitmap word has unused bits
    let run_start = heap.layout().chunk_start(0);
    pm.write_u64(run_start, u64::MAX, pmem::WriteClass::Meta);
    assert!(matches!(
        Heap::open(&pm, REGION),
        Err(HeapError::Corrupted(_))
    ));

    let (pm, _) = fresh();
    pm.write_u64(REGION.offset + 16, 1, pmem::WriteClass::Meta); // header field
    assert!(matches!(
        Heap::open(&pm, REGION),
        Err(HeapError::Corrupted(_))
    ));
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64),
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..5000).prop_map(Op::Alloc),
        (30_000u64..70_000).prop_map(Op::Alloc),
        any::<usize>().prop_map(Op::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn rebuild_matches_the_live_index(ops in proptest::collection::vec(op(), 1..80)) {
        let (pm, heap) = fresh();
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Alloc(size) => {
                    let Ok(r) = heap.reserve(size, &mut |a| commit(&pm, a)) else { continue };
                    prop_assert!(r.size >= size);
                    prop_assert!(live.range(..r.addr + r.size).next_back().is_none_or(|(&a, &s)| a + s <= r.addr));
                    commit(&pm, &[heap.publish_action(&r)]).expect("publish");
                    live.insert(r.addr, r.size);
                }
                Op::Free(pick) if !live.is_empty() => {
                    let addr = *live.keys().nth(pick % live.len()).expect("non-empty");
                    free(&pm, &heap, addr);
                    live.remove(&addr);
                }
                Op::Free(_) => {}
            }
        }
        let usage: Usage = heap.usage();
        prop_assert_eq!(usage.allocated_blocks, live.len() as u64);
        prop_assert_eq!(usage.allocated_bytes, live.values().sum::<u64>());
        prop_assert_eq!(Heap::open(&pm, REGION).expect("reopen").usage(), usage);
    }
}
