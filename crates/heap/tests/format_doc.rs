//! The examples of docs/heap-format.md, byte for byte: the header dump (§3), the plan table
//! (§4), the descriptor words (§5), the run marker and bitmap words (§6), the geometry table
//! (§6) and the action encodings (§8). A format change that the document does not follow
//! fails here.

use crashsim::SimPm;
use heap::layout::{BITMAP_WORD, MARKER_WORD, run_marker};
use heap::{Action, Descriptor, Layout};
use pmem::checked::seal;
use pmem::{Persist, Region};

#[test]
fn the_header_dump_of_section_3() {
    let region = Region {
        offset: 0x7000,
        len: 0xF9000,
    };
    let pm = SimPm::new(region.end(), Default::default());
    Layout::format(&pm, region, 12).expect("format");
    let mut header = [0u8; 64];
    pm.read(0x7000, &mut header);
    // The dump as the document prints it.
    let dump = "46 45 52 52 48 45 41 50 02 00 00 00 0c 00 00 00
                f7 00 00 00 00 00 00 00 40 70 00 00 00 00 00 00
                00 80 00 00 00 00 00 00 00 00 00 00 00 00 00 00
                00 00 00 00 00 00 00 00 00 00 00 00 8b af 70 88";
    let expected: Vec<u8> = dump
        .split_whitespace()
        .map(|byte| u8::from_str_radix(byte, 16).expect("hex"))
        .collect();
    assert_eq!(header.as_slice(), expected.as_slice());
}

#[test]
fn the_plan_table_of_section_4() {
    // (region offset, region length, shift) -> (chunk_count, descriptors, chunks, end)
    let rows = [
        ((4096, 512 * 1024, 14), (31, 4160, 8192, 516_096)),
        ((8192, 1 << 20, 14), (63, 8256, 12_288, 1_044_480)),
        ((28_672, 1_019_904, 12), (247, 28_736, 32_768, 1_044_480)),
    ];
    for ((offset, len, shift), expected) in rows {
        let l = Layout::plan(Region { offset, len }, shift).expect("plan");
        assert_eq!((l.chunk_count, l.descriptors, l.chunks, l.end()), expected);
    }
}

#[test]
fn the_words_of_sections_5_and_6() {
    assert_eq!(
        Descriptor::Run { class: 5 }.encode(0),
        0xb000_0000_0000_0501
    );
    assert_eq!(
        Descriptor::Run { class: 5 }.encode(3),
        0x9f00_0000_0000_0501
    );
    assert_eq!(
        Descriptor::Large { span: 7 }.encode(9),
        0x9000_0000_0007_0002
    );
    assert_eq!(
        Descriptor::Run { class: 0 }.encode(0),
        0xeb00_0000_0000_0001
    );
    assert_eq!(run_marker(0x2a), 0x4e55_5246_002a);
    assert_eq!(
        seal(run_marker(5), 0x8000, MARKER_WORD),
        Ok(0x5d39_4e55_5246_0005)
    );
    assert_eq!(seal(0, 0x8008, BITMAP_WORD), Ok(0xba12_0000_0000_0000));
    assert_eq!(seal(1, 0x8008, BITMAP_WORD), Ok(0x2b83_0000_0000_0001));
}

#[test]
fn the_geometry_table_of_section_6() {
    // units / bitmap words / data offset per class, "-" when unusable.
    let table = [
        (
            12,
            "252/6/64 126/3/64 84/2/64 63/2/64 42/1/64 31/1/64 21/1/64 15/1/64 10/1/64 \
             - - - - - - - - - - -",
        ),
        (
            14,
            "1012/22/192 508/11/128 338/8/128 255/6/64 170/4/64 127/3/64 85/2/64 63/2/64 \
             42/1/64 31/1/64 21/1/64 15/1/64 10/1/64 - - - - - - -",
        ),
        (
            16,
            "4052/85/704 2036/43/384 1360/29/256 1021/22/192 681/15/128 511/11/128 340/8/128 \
             255/6/64 170/4/64 127/3/64 85/2/64 63/2/64 42/1/64 31/1/64 21/1/64 15/1/64 \
             10/1/64 - - -",
        ),
        (
            18,
            "16212/338/2752 8148/170/1408 5441/114/960 4085/86/704 2725/57/512 2045/43/384 \
             1364/29/256 1023/22/192 682/15/128 511/11/128 341/8/128 255/6/64 170/4/64 \
             127/3/64 85/2/64 63/2/64 42/1/64 31/1/64 21/1/64 15/1/64",
        ),
    ];
    for (shift, expected) in table {
        let layout = Layout::plan(
            Region {
                offset: 0,
                len: 64 << shift,
            },
            shift,
        )
        .expect("plan");
        let row: Vec<String> = (0..20)
            .map(|class| match layout.run_geometry(class) {
                Some(g) => format!("{}/{}/{}", g.units, g.bitmap_words, g.data_offset),
                None => "-".into(),
            })
            .collect();
        let expected: Vec<&str> = expected.split_whitespace().collect();
        assert_eq!(row, expected, "chunk shift {shift}");
    }
}

#[test]
fn the_action_encodings_of_section_8() {
    let or = Action::Or {
        addr: 0x8008,
        mask: 1,
    };
    assert_eq!(
        or.encode(),
        [8, 0x80, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0]
    );
    let init = Action::InitRun {
        addr: 0x8000,
        class: 5,
        words: 1,
    };
    assert_eq!(
        init.encode(),
        [0, 0x80, 0, 0, 0, 0, 0, 5, 5, 1, 0, 0, 0, 0, 0, 0]
    );
    // The bound on an InitRun's bitmap words: 2^24 - 1 is accepted, 2^24 refused.
    for (words, ok) in [((1 << 24) - 1, true), (1 << 24, false)] {
        let action = Action::InitRun {
            addr: 0,
            class: 0,
            words,
        };
        assert_eq!(
            Action::decode(&action.encode(), 1 << 30).is_ok(),
            ok,
            "{words}"
        );
    }
}
