//! The two store disciplines on every workload: the same operations, and under the PMDK
//! discipline exactly the stores a libpmemobj program adds (allocator headers and bitmap
//! bits, zero-filled red-black nodes, the red-black tree's assignments stored as made).

use std::collections::HashMap;
use trace::{Event, Trace};
use tracegen::pmdk::{BITMAP_OFFSET, HEADER_BYTES};
use tracegen::recorder::core_base;
use tracegen::{SiloWorkload, StoreDiscipline, TraceSpec, generate};

/// Store counts of one trace (all cores).
#[derive(Debug, Default, PartialEq)]
struct Counts {
    stores: u64,
    /// Stores that leave their bytes unchanged.
    silent: u64,
    /// Non-silent stores to a word the transaction already changed.
    repeated: u64,
    /// Stores to the allocator's bitmap region.
    bitmap: u64,
    transactions: u64,
}

fn counts(trace: &Trace) -> Counts {
    let mut c = Counts::default();
    for core in 0..trace.cores() {
        let bitmaps = core_base(trace.stream_core(core)) + BITMAP_OFFSET;
        let mut changed: HashMap<u64, ()> = HashMap::new();
        for event in trace.events(core) {
            match event {
                Event::TxBegin => changed.clear(),
                Event::TxEnd => c.transactions += 1,
                Event::Store { addr, old, new, .. } => {
                    c.stores += 1;
                    c.bitmap += u64::from(addr >= bitmaps);
                    if old == new {
                        c.silent += 1;
                    } else if changed.insert(addr & !7, ()).is_some() {
                        c.repeated += 1;
                    }
                }
                _ => {}
            }
        }
    }
    c
}

fn trace(workload: SiloWorkload, discipline: StoreDiscipline) -> Trace {
    let spec = TraceSpec::new(workload)
        .with_cores(1)
        .with_transactions(400)
        .with_keys(1024)
        .with_discipline(discipline);
    generate(&spec).expect("generates")
}

fn both(workload: SiloWorkload) -> (Counts, Counts) {
    (
        counts(&trace(workload, StoreDiscipline::WriteMinimal)),
        counts(&trace(workload, StoreDiscipline::Pmdk)),
    )
}

#[test]
fn workloads_that_allocate_nothing_store_the_same() {
    // Array swaps, TPC-C New-Orders and YCSB updates of existing records allocate nothing
    // in their transactions: a C program stores what the shared workloads store.
    for workload in [SiloWorkload::Array, SiloWorkload::Tpcc, SiloWorkload::Ycsb] {
        let (minimal, pmdk) = both(workload);
        assert_eq!(minimal, pmdk, "{workload}");
        assert_eq!(pmdk.bitmap, 0, "{workload}");
    }
}

#[test]
fn inserts_store_the_allocators_header_and_bitmap_bit() {
    // A hash insert allocates one chain node: its two header words and its bitmap word.
    let (minimal, pmdk) = both(SiloWorkload::Hash);
    assert_eq!(minimal.bitmap, 0);
    assert!(pmdk.bitmap > 0, "{pmdk:?}");
    // (A block across two bitmap words sets a bit in each.)
    let extra = pmdk.stores - minimal.stores;
    assert!(
        (2 * pmdk.bitmap..=3 * pmdk.bitmap).contains(&extra),
        "{extra} more stores for {pmdk:?}"
    );
    // The queue's dequeues free a node: a bitmap store without a header.
    let (minimal, pmdk) = both(SiloWorkload::Queue);
    assert!(pmdk.bitmap > 0 && pmdk.stores > minimal.stores);
    assert!(pmdk.silent > minimal.silent, "{pmdk:?}");
}

#[test]
fn btree_inserts_move_the_whole_tail_of_a_node() {
    // An insert allocates its value object (header, bitmap) and moves every slot after its
    // position, the empty ones too (silent stores); a split clears the moved slots.
    let (minimal, pmdk) = both(SiloWorkload::Btree);
    assert!(pmdk.bitmap > 0, "{pmdk:?}");
    assert!(
        pmdk.stores > minimal.stores + 3 * pmdk.bitmap,
        "{pmdk:?} {minimal:?}"
    );
    assert!(
        pmdk.silent > 4 * minimal.silent.max(1),
        "{pmdk:?} {minimal:?}"
    );
    // A second allocation in a transaction (a split) may set a bit of the same word.
    assert!(pmdk.repeated >= minimal.repeated);
}

#[test]
fn the_red_black_tree_stores_each_assignment_as_it_is_made() {
    let (minimal, pmdk) = both(SiloWorkload::Rbtree);
    // Staged, each changed link word is written once; in place, the fix-ups' assignments
    // include repeats and values already there, and a new node is zero-filled first.
    assert!(
        pmdk.stores > minimal.stores + minimal.transactions,
        "{pmdk:?} {minimal:?}"
    );
    assert!(pmdk.silent > 2 * minimal.silent, "{pmdk:?} {minimal:?}");
    let share = |c: &Counts| (c.silent + c.repeated) as f64 / c.stores as f64;
    assert!(share(&pmdk) > share(&minimal) + 0.2, "{pmdk:?} {minimal:?}");
    assert_eq!(HEADER_BYTES, 16);
}
