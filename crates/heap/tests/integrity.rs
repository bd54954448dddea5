//! Damage to the heap's metadata is detected at open and by the deep check: every single-bit
//! flip of a run's bitmap or marker, and descriptors rewritten with a valid check that
//! disagree with the chunk they describe.

use crashsim::SimPm;
use heap::{Descriptor, Heap, HeapError, check_heap};
use pmem::{Persist, WriteClass};

mod common;
use common::{REGION, alloc, fresh};

fn refused(pm: &SimPm) -> bool {
    matches!(Heap::open(pm, REGION), Err(HeapError::Corrupted(_)))
}

/// Whether the deep check reports damage; it must agree with `Heap::open`.
fn check_agrees(pm: &SimPm) -> bool {
    let damaged = check_heap(pm, REGION)
        .findings
        .iter()
        .any(|f| f.is_damage());
    assert_eq!(damaged, refused(pm), "the deep check and open disagree");
    damaged
}

fn flip(pm: &SimPm, at: u64, bit: u32) {
    pm.write_u64(at, pm.read_u64(at) ^ (1 << bit), WriteClass::Meta);
}

#[test]
fn every_single_bit_flip_of_a_run_marker_or_bitmap_word_is_detected() {
    let (pm, heap) = fresh();
    // A run of 64-byte units (255 per 16 KiB chunk: 6 bitmap words) with units allocated
    // in its first and last words.
    let first = alloc(&pm, &heap, 64);
    for _ in 0..200 {
        alloc(&pm, &heap, 64);
    }
    let layout = *heap.layout();
    let chunk = layout.chunk_of(first).expect("in a chunk");
    let words = layout.run_geometry(3).expect("class 3").bitmap_words;
    let marker = layout.chunk_start(chunk);
    let bitmap = (0..words).map(|w| layout.bitmap_word_at(chunk, w));
    for at in std::iter::once(marker).chain(bitmap) {
        for bit in 0..64 {
            flip(&pm, at, bit);
            assert!(
                check_agrees(&pm),
                "flip of bit {bit} at {at:#x} went unnoticed"
            );
            flip(&pm, at, bit);
        }
    }
    assert!(!check_agrees(&pm), "the undamaged heap opens");
}

#[test]
fn descriptors_rewritten_with_a_valid_check_are_detected() {
    let (pm, heap) = fresh();
    let small = alloc(&pm, &heap, 64);
    let large = alloc(&pm, &heap, 40_000); // a span of three 16 KiB chunks
    let layout = *heap.layout();
    let run_chunk = layout.chunk_of(small).expect("chunk");
    let span_chunk = layout.chunk_of(large).expect("chunk");
    let free_chunk = span_chunk + 3;
    drop(heap);
    let edits = [
        (run_chunk, Descriptor::Run { class: 4 }, "a run's class"),
        (run_chunk, Descriptor::Free, "a run with units freed"),
        (
            run_chunk,
            Descriptor::Large { span: 1 },
            "a run made a span",
        ),
        (
            free_chunk,
            Descriptor::Run { class: 3 },
            "a free chunk made a run",
        ),
        (
            run_chunk.min(span_chunk),
            Descriptor::Large { span: 8 },
            "a span over other blocks",
        ),
    ];
    for (chunk, edit, what) in edits {
        let at = layout.descriptor_at(chunk);
        let original = pm.read_u64(at);
        pm.write_u64(at, edit.encode(chunk), WriteClass::Meta);
        assert!(check_agrees(&pm), "{what} went unnoticed");
        pm.write_u64(at, original, WriteClass::Meta);
    }
    assert!(!check_agrees(&pm));
}

#[test]
fn a_version_1_heap_is_refused_with_a_typed_error() {
    let (pm, heap) = fresh();
    drop(heap);
    let mut header = [0u8; 64];
    pm.read(REGION.offset, &mut header);
    header[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32fast::hash(&header[..60]);
    header[60..64].copy_from_slice(&crc.to_le_bytes());
    pm.write(REGION.offset, &header, WriteClass::Meta);
    let error = Heap::open(&pm, REGION).expect_err("version 1");
    assert!(
        error.to_string().contains("unsupported heap version 1"),
        "{error}"
    );
    assert!(check_agrees(&pm));
}

#[test]
fn the_deep_check_reports_every_problem_and_the_usage() {
    let (pm, heap) = fresh();
    let a = alloc(&pm, &heap, 16);
    let b = alloc(&pm, &heap, 20_000);
    let layout = *heap.layout();
    let usage = heap.usage();
    drop(heap);
    let clean = check_heap(&pm, REGION);
    assert_eq!(clean.usage, Some(usage));
    assert!(clean.findings.iter().all(|f| !f.is_damage()));
    flip(
        &pm,
        layout.bitmap_word_at(layout.chunk_of(a).expect("a"), 0),
        3,
    );
    flip(
        &pm,
        layout.descriptor_at(layout.chunk_of(b).expect("b")),
        17,
    );
    let damaged = check_heap(&pm, REGION);
    let damage: Vec<_> = damaged.findings.iter().filter(|f| f.is_damage()).collect();
    assert_eq!(damage.len(), 2, "{damage:?}");
}
