//! Adversarial tests of the redo record format 3 (`docs/tx-format.md` §6.1): sequence
//! numbers rebuilt from 16 bits, lanes without a record magic, the short entry's limits.

use crashsim::{SimConfig, SimPm};
use pmem::{Persist, WriteClass};
use proptest::prelude::*;
use rand::{RngCore, SeedableRng};
use tx::record::{self, MAX_RANGE, RecordKind};

const SEQ_SPAN: u64 = 1 << 16;

fn encode(at: u64, seq: u64, ranges: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    record::encode(
        at,
        RecordKind::Transaction,
        seq,
        ranges.iter().map(|(a, b)| (*a, b.as_slice())),
        &[],
        &mut out,
    );
    out
}

fn stored(len: u64, at: u64, bytes: &[u8]) -> SimPm {
    let pm = SimPm::new(len, SimConfig::default());
    pm.write(at, bytes, WriteClass::Log);
    pm
}

/// A deterministic stream of bytes, so a test over "random" lanes is repeatable.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A stale record whose low 16 bits alias a live number is read with its sequence number
    /// rebuilt 2^16·k away from the true one; the CRC covers the full number, and the two
    /// differ only in bits 16..47 (a burst of at most 32 bits), so it never verifies.
    #[test]
    fn a_record_never_verifies_under_an_aliased_sequence_number(
        seq in 0u64..(1 << 47),
        k in 1u64..(1 << 31),
        below in any::<bool>(),
        words in proptest::collection::vec(any::<u64>(), 1..40),
        addr_word in 0u64..1024,
        line in 0u64..16,
    ) {
        let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let at = line * 64;
        let bytes = encode(at, seq, &[(addr_word * 8, data)]);
        let pm = stored(1 << 16, at, &bytes);
        let limit = 1 << 16;
        prop_assert!(record::read(&pm, at, limit, seq).unwrap().is_some());
        let aliased = if below { seq.checked_sub(k * SEQ_SPAN) } else { Some(seq + k * SEQ_SPAN) };
        if let Some(aliased) = aliased.filter(|&a| a < 1 << 48) {
            prop_assert_eq!(record::claimed_seq(&pm, at, limit, aliased), Some(aliased));
            prop_assert!(record::read(&pm, at, limit, aliased).unwrap().is_none());
        }
    }

    /// Every number within the half window around the watermark is rebuilt exactly.
    #[test]
    fn full_seq_rebuilds_every_number_within_half_the_window(
        watermark in 0u64..(1 << 47),
        offset in -(1i64 << 15) + 1..=(1i64 << 15),
    ) {
        if let Some(seq) = watermark.checked_add_signed(offset) {
            prop_assert_eq!(record::full_seq(seq & (SEQ_SPAN - 1), watermark), seq);
        }
    }
}

/// Lanes full of noise, and of noise whose header names a plausible length (so the CRC has
/// to be computed and is the only defence): no line parses as a record, and reading never
/// panics. Deterministic, so it cannot fail now and then: any acceptance is a real hole
/// (the odds of a CRC-32 match over these 64 Ki lines are about 1 in 65 000).
#[test]
fn noise_in_a_lane_never_parses_as_a_record() {
    const LANE: usize = 64 << 10;
    for seed in 0..4u64 {
        let mut lane = noise(seed, LANE);
        if seed % 2 == 1 {
            for line in (0..LANE).step_by(64) {
                // Short form, length 8..=256 bytes, any kind and sequence bits.
                let len_words = 2 + (lane[line + 6] as u32 % 63);
                let meta = u32::from_le_bytes(lane[line + 4..line + 8].try_into().unwrap());
                let meta = (meta & 0x8000_FFFF) | (len_words << 16);
                lane[line + 4..line + 8].copy_from_slice(&meta.to_le_bytes());
            }
        }
        let pm = stored(LANE as u64, 0, &lane);
        for watermark in [0, 0x1234, 1 << 40] {
            for at in (0..LANE as u64).step_by(64) {
                let read = record::read(&pm, at, LANE as u64, watermark);
                assert!(
                    matches!(read, Ok(None)),
                    "seed {seed}, line {at:#x}: {read:?}"
                );
            }
        }
    }
}

fn round_trip(ranges: &[(u64, Vec<u8>)]) -> (usize, Vec<(u64, Vec<u8>)>) {
    let bytes = encode(0, 42, ranges);
    let expected = record::encoded_size(ranges.iter().map(|(a, b)| (*a, b.as_slice())), 0);
    assert_eq!(bytes.len(), expected, "encoded_size agrees with encode");
    let pm = stored(1 << 20, 0, &bytes);
    let record = record::read(&pm, 0, 1 << 19, 0)
        .expect("well formed")
        .expect("intact");
    (bytes.len(), record.ranges)
}

fn word_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn tag_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

#[test]
fn the_short_entry_stops_at_15_whole_aligned_words() {
    let cases: [(u64, usize, usize); 6] = [
        // (address, length, encoded entry bytes)
        (4096, 120, 4 + 120),     // 15 words
        (4096, 128, 4 + 8 + 128), // 16 words: long form
        (4096, 7, 4 + 8 + 8),     // odd length, padded to 4
        (4097, 8, 4 + 8 + 8),     // unaligned word
        (4096, 1, 4 + 8 + 4),     // one byte
        (0, 8, 4 + 8),            // word 0: the tag is the word count alone
    ];
    for (addr, len, entry) in cases {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) | 1).collect();
        let (size, ranges) = round_trip(&[(addr, data.clone())]);
        assert_eq!(size, 8 + entry, "{addr:#x} + {len}");
        assert_eq!(ranges, vec![(addr, data)], "{addr:#x} + {len}");
    }
}

/// Addresses at and past 2 GiB (pools that large do not fit a test's simulator, so the
/// bytes are checked as §6.1 lays them out).
#[test]
fn the_short_entry_stops_at_2_gib_and_the_long_one_carries_48_bit_addresses() {
    let last_short = (1u64 << 31) - 8;
    let bytes = encode(0, 1, &[(last_short, vec![7; 16])]);
    assert_eq!(
        bytes.len(),
        8 + 4 + 16,
        "starts below 2 GiB: short even if it ends above"
    );
    assert_eq!(tag_at(&bytes, 8), (((last_short / 8) << 4) | 2) as u32);
    for addr in [1u64 << 31, (1 << 32) + 8, (1 << 48) - 64] {
        let bytes = encode(0, 1, &[(addr, vec![9; 8])]);
        assert_eq!(bytes.len(), 8 + 4 + 8 + 8, "{addr:#x}");
        assert_eq!(tag_at(&bytes, 8), 0, "{addr:#x}: long range tag");
        assert_eq!(word_at(&bytes, 12), (8 << 48) | addr, "{addr:#x}");
    }
}

#[test]
fn the_largest_entry_and_one_byte_more_round_trip() {
    let largest = vec![(8192u64, vec![0xA5u8; MAX_RANGE])];
    let (size, ranges) = round_trip(&largest);
    assert_eq!((size, ranges.len()), (8 + 4 + 8 + MAX_RANGE, 1));
    assert_eq!(ranges, largest);
    let odd: Vec<u8> = (0..MAX_RANGE + 1).map(|i| i as u8).collect();
    let (size, ranges) = round_trip(&[(8192, odd.clone())]);
    assert_eq!(size, 8 + (4 + 8 + MAX_RANGE) + (4 + 8 + 4));
    assert_eq!(
        ranges,
        vec![
            (8192, odd[..MAX_RANGE].to_vec()),
            (8192 + MAX_RANGE as u64, vec![odd[MAX_RANGE]])
        ]
    );
}

#[test]
fn a_zero_length_range_produces_no_entry() {
    let (size, ranges) = round_trip(&[(4096, vec![]), (8192, vec![1; 8])]);
    assert_eq!((size, ranges), (8 + 12, vec![(8192, vec![1; 8])]));
}
