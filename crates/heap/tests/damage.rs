//! Damaged metadata whose words all pass their checks but whose meanings disagree: a span
//! running past the heap's end, a run class out of range, markers and bitmaps sealed over
//! any chunk. Rebuild and the deep check must refuse or accept it without panicking or
//! looping, must agree, and a heap they accept must work (distinct blocks until it is full).

use crashsim::SimPm;
use heap::layout::{BITMAP_WORD, MARKER_WORD, run_marker};
use heap::{Descriptor, Heap, HeapError, check_heap};
use pmem::checked::{MAX_VALUE, seal};
use pmem::{Persist, WriteClass};
use proptest::prelude::*;
use std::collections::BTreeMap;

mod common;
use common::{REGION, alloc, commit, fresh};

/// Seam calls a scan of this 31-chunk heap may make: far more than it needs, far fewer than
/// a loop would.
const STEP_LIMIT: u64 = 1_000_000;

/// Opens the heap and runs the deep check with a step limit; they must agree.
fn open_and_check(pm: &SimPm) -> Result<Heap, HeapError> {
    pm.set_step_limit(Some(STEP_LIMIT));
    let check = check_heap(pm, REGION);
    let opened = Heap::open(pm, REGION);
    pm.set_step_limit(None);
    let damaged = check.findings.iter().any(|f| f.is_damage());
    assert_eq!(
        damaged,
        opened.is_err(),
        "the deep check ({:?}) and open ({:?}) disagree",
        check.findings,
        opened.as_ref().err()
    );
    if let Err(error) = &opened {
        assert!(matches!(error, HeapError::Corrupted(_)), "{error:?}");
    }
    opened
}

fn set_descriptor(pm: &SimPm, heap: &Heap, chunk: u64, descriptor: Descriptor) {
    let at = heap.layout().descriptor_at(chunk);
    pm.write_u64(at, descriptor.encode(chunk), WriteClass::Meta);
}

#[test]
fn spans_past_the_end_and_classes_out_of_range_are_refused() {
    let (_, heap) = fresh();
    let count = heap.layout().chunk_count;
    let last = count - 1;
    let cases = [
        (0, Descriptor::Large { span: 0 }),
        (
            0,
            Descriptor::Large {
                span: count as u32 + 1,
            },
        ),
        (last, Descriptor::Large { span: 2 }),
        (1, Descriptor::Large { span: u32::MAX }),
        (last, Descriptor::Large { span: u32::MAX }),
        (0, Descriptor::Run { class: 20 }),
        (3, Descriptor::Run { class: u8::MAX }),
        (3, Descriptor::Run { class: 13 }), // 2048 bytes: unusable with 16 KiB chunks
    ];
    for (chunk, descriptor) in cases {
        let (pm, heap) = fresh();
        set_descriptor(&pm, &heap, chunk, descriptor);
        assert!(
            open_and_check(&pm).is_err(),
            "{descriptor:?} at chunk {chunk} accepted"
        );
    }
    // The whole heap as one span is legitimate.
    let (pm, heap) = fresh();
    set_descriptor(&pm, &heap, 0, Descriptor::Large { span: count as u32 });
    let heap = open_and_check(&pm).expect("a span of every chunk");
    assert_eq!(heap.usage().free_chunks, 0);
}

#[test]
fn a_run_whose_bitmap_marks_every_bit_is_refused_only_past_its_end() {
    // 1536-byte units with 16 KiB chunks: 10 units, so bits 10..48 of the word are past the
    // end; 64-byte units: 255 units in 6 words, the last holding 15.
    for (size, class) in [(1536, 12u8), (64, 3)] {
        let (pm, heap) = fresh();
        let block = alloc(&pm, &heap, size);
        let layout = *heap.layout();
        let chunk = layout.chunk_of(block).expect("chunk");
        let geometry = layout.run_geometry(usize::from(class)).expect("usable");
        let words = geometry.bitmap_words;
        for word in 0..words - 1 {
            let at = layout.bitmap_word_at(chunk, word);
            pm.write_u64(
                at,
                seal(MAX_VALUE, at, BITMAP_WORD).expect("fits"),
                WriteClass::Meta,
            );
        }
        let last = layout.bitmap_word_at(chunk, words - 1);
        let tail = geometry.units - 48 * (words - 1);
        pm.write_u64(
            last,
            seal((1 << tail) - 1, last, BITMAP_WORD).expect("fits"),
            WriteClass::Meta,
        );
        let full = open_and_check(&pm).expect("a full run is valid");
        assert_eq!(full.usage().allocated_blocks, geometry.units);
        pm.write_u64(
            last,
            seal(1 << tail, last, BITMAP_WORD).expect("fits"),
            WriteClass::Meta,
        );
        assert!(
            open_and_check(&pm).is_err(),
            "a unit past the end of class {class}"
        );
    }
}

/// One word of damage that passes its check.
#[derive(Clone, Debug)]
enum Damage {
    Descriptor { chunk: u64, descriptor: Descriptor },
    Marker { chunk: u64, class: u8 },
    Bitmap { chunk: u64, word: u64, bits: u64 },
}

fn damage() -> impl Strategy<Value = Damage> {
    let chunk = 0u64..31;
    prop_oneof![
        (chunk.clone(), any::<u8>()).prop_map(|(chunk, class)| Damage::Descriptor {
            chunk,
            descriptor: Descriptor::Run { class: class % 24 },
        }),
        (
            chunk.clone(),
            prop_oneof![0u32..40, Just(u32::MAX), any::<u32>()]
        )
            .prop_map(|(chunk, span)| Damage::Descriptor {
                chunk,
                descriptor: Descriptor::Large { span },
            }),
        chunk.clone().prop_map(|chunk| Damage::Descriptor {
            chunk,
            descriptor: Descriptor::Free,
        }),
        (chunk.clone(), 0u8..24).prop_map(|(chunk, class)| Damage::Marker { chunk, class }),
        (
            chunk,
            0u64..24,
            prop_oneof![Just(0), Just(1), Just(MAX_VALUE), 0..=MAX_VALUE]
        )
            .prop_map(|(chunk, word, bits)| Damage::Bitmap { chunk, word, bits }),
    ]
}

fn apply(pm: &SimPm, heap: &Heap, damage: &Damage) {
    let layout = heap.layout();
    match *damage {
        Damage::Descriptor { chunk, descriptor } => set_descriptor(pm, heap, chunk, descriptor),
        Damage::Marker { chunk, class } => {
            let at = layout.chunk_start(chunk);
            let word = seal(run_marker(class), at, MARKER_WORD).expect("fits");
            pm.write_u64(at, word, WriteClass::Meta);
        }
        Damage::Bitmap { chunk, word, bits } => {
            let at = layout.bitmap_word_at(chunk, word);
            pm.write_u64(
                at,
                seal(bits, at, BITMAP_WORD).expect("fits"),
                WriteClass::Meta,
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn rebuild_of_checked_but_inconsistent_metadata_never_panics_or_loops(
        sizes in proptest::collection::vec(prop_oneof![1u64..2000, 16_000u64..70_000], 0..12),
        damages in proptest::collection::vec(damage(), 1..6),
    ) {
        let (pm, heap) = fresh();
        for size in sizes {
            if let Ok(r) = heap.reserve(size, &mut |a| commit(&pm, a)) {
                commit(&pm, &[heap.publish_action(&r)]).expect("publish");
            }
        }
        for damage in &damages {
            apply(&pm, &heap, damage);
        }
        drop(heap);
        let Ok(heap) = open_and_check(&pm) else { return Ok(()) };
        // An accepted heap works: its blocks are distinct until it is full.
        let mut blocks = BTreeMap::new();
        for size in [1u64, 100, 1536, 20_000, 64, 16_384].iter().cycle().take(400) {
            let Ok(r) = heap.reserve(*size, &mut |a| commit(&pm, a)) else { continue };
            let before = blocks.range(..r.addr + r.size).next_back();
            prop_assert!(before.is_none_or(|(&a, &s)| a + s <= r.addr), "{r:?} overlaps {before:?}");
            commit(&pm, &[heap.publish_action(&r)]).expect("publish");
            blocks.insert(r.addr, r.size);
        }
        drop(heap);
        open_and_check(&pm).expect("what an accepted heap allocated reopens");
    }
}

#[test]
fn a_rebuilt_heap_frees_what_damage_did_not_touch() {
    // A sanity anchor for the property above: without damage every block survives.
    let (pm, heap) = fresh();
    let blocks: Vec<u64> = [64, 1536, 20_000]
        .iter()
        .map(|&s| alloc(&pm, &heap, s))
        .collect();
    drop(heap);
    let heap = open_and_check(&pm).expect("undamaged");
    for addr in blocks {
        let freeing = heap.prepare_free(addr).expect("allocated");
        commit(&pm, &[heap.free_action(&freeing)]).expect("free");
        heap.finish_free(&freeing);
    }
    assert_eq!(heap.usage().allocated_blocks, 0);
}

/// Rewrites the header's chunk shift and reseals its CRC: a header that passes its checksum
/// but records a geometry no heap of this region can have.
fn reseal_header_with_shift(pm: &SimPm, shift: u32) {
    let mut header = [0u8; 64];
    pm.read(REGION.offset, &mut header);
    header[12..16].copy_from_slice(&shift.to_le_bytes());
    let crc = crc32fast::hash(&header[..60]);
    header[60..64].copy_from_slice(&crc.to_le_bytes());
    pm.write(REGION.offset, &header, WriteClass::Meta);
}

#[test]
fn a_checksummed_header_with_an_impossible_chunk_shift_is_corruption() {
    // Out of 12..=24, and in range but too large for the 512 KiB region: both come from the
    // media, not from the caller, so they are `Corrupted` (an engine reports `InvalidArgument`
    // as a bad call of its own).
    for shift in [0, 11, 25, 64, u32::MAX, 20, 24] {
        let (pm, heap) = fresh();
        drop(heap);
        reseal_header_with_shift(&pm, shift);
        let error = Heap::open(&pm, REGION).expect_err("impossible geometry");
        assert!(
            matches!(error, HeapError::Corrupted(_)),
            "shift {shift}: {error:?}"
        );
        assert!(open_and_check(&pm).is_err());
    }
}

#[test]
fn formatting_over_an_old_heap_gives_an_empty_heap() {
    // The old runs' markers and bitmaps stay in the chunks; a new heap of the same or a
    // smaller chunk size (whose chunks start where old runs started) must not read them as
    // runs whose descriptors were lost.
    for shift in [common::CHUNK_SHIFT, 12] {
        let (pm, heap) = fresh();
        for size in [64, 16, 1536, 20_000] {
            alloc(&pm, &heap, size);
        }
        drop(heap);
        let heap = Heap::format(&pm, REGION, shift).expect("format over an old heap");
        assert_eq!(heap.usage().allocated_blocks, 0, "shift {shift}");
        assert_eq!(heap.usage().free_chunks, heap.layout().chunk_count);
        drop(heap);
        let heap = open_and_check(&pm).expect("reopen");
        alloc(&pm, &heap, 64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]
    /// Actions come back from logs: whatever 16 bytes decode, the action stays inside the
    /// pool, re-encodes to the same bytes, and applies without panicking.
    #[test]
    fn decoded_actions_stay_in_the_pool(
        op in 0u64..8,
        addr in prop_oneof![0u64..8192, any::<u64>()],
        operand in prop_oneof![0u64..4096, Just(MAX_VALUE), any::<u64>()],
    ) {
        const POOL: u64 = 8192;
        let mut bytes = [0u8; heap::ACTION_LEN];
        bytes[..8].copy_from_slice(&((op << 56) | (addr & ((1 << 56) - 1))).to_le_bytes());
        bytes[8..].copy_from_slice(&operand.to_le_bytes());
        if let Ok(action) = heap::Action::decode(&bytes, POOL) {
            prop_assert!(action.addr() + action.len() <= POOL, "{action:?}");
            prop_assert_eq!(action.encode(), bytes);
            let pm = SimPm::new(POOL, Default::default());
            action.apply(&pm);
        }
    }
}
