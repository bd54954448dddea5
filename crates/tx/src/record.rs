//! Redo log records, compact encoding (byte layout in `docs/tx-format.md` §6.1).
//!
//! ```text
//! +0  crc32 u32 over bytes [4, len), then the full sequence number and the record's
//!     absolute offset (u64 LE each)
//! +4  meta u32: sequence number bits 0..15 | len / 4 in bits 16..30 (0: long form) |
//!     kind in bit 31 (1 = system)
//! +8  long form only: len u32 (bytes)
//! then entries, each a u32 tag and its bytes:
//!     tag & 15 = n in 1..=15: n words of data at word index tag >> 4 (address < 2 GiB)
//!     tag = 0:    a u64 (addr low 48 bits | len high 16 bits), len data bytes, zeros to 4
//!     tag = 0x10: a heap action (16 bytes, heap::Action encoding)
//! ```
//!
//! Only the low 16 bits of the sequence number are stored: a reader rebuilds the full number
//! as the one nearest the persisted watermark ([`full_seq`]); the engine never lets a record
//! run more than [`SEQ_AHEAD`] past the watermark. The checksum covers the full number, so a
//! record rebuilt to the wrong one does not verify.
//!
//! Longer writes are split into ranges of at most [`MAX_RANGE`] bytes. A record starts on a
//! 64-byte boundary of its lane and is stored byte for byte, never padded. It counts as
//! committed only if its checksum verifies: a torn record is simply absent.

use crate::api::TxError;
use crate::bytes::extend_bytes;
use crate::record_search::LaneChecksums;
use heap::{ACTION_LEN, Action};
use pmem::Persist;

/// Where a record's checksum starts: the bytes after the CRC field itself.
pub const CRC_START: usize = 4;
/// Bytes of the record header (short form).
pub const HEADER_LEN: usize = 8;
const LONG_HEADER_LEN: usize = 12;
/// Longest record the short header's length field holds.
const SHORT_MAX: usize = 0x7FFF * 4;
const TAG_LEN: usize = 4;
const LONG_RANGE_TAG: u32 = 0;
const ACTION_TAG: u32 = 0x10;
/// Most words one short entry carries.
const SHORT_MAX_WORDS: usize = 15;
/// Word indexes a short entry can name (addresses below 2 GiB).
const SHORT_WORD_LIMIT: u64 = 1 << 28;
const RANGE_HEADER_LEN: usize = 8;
/// Longest range one long range header describes (a multiple of 8 below 2^16).
pub const MAX_RANGE: usize = 0xFFF8;
const ADDR_BITS: u32 = 48;
const SEQ_BITS: u32 = 16;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const SEQ_HALF: u64 = 1 << (SEQ_BITS - 1);
const SYSTEM_BIT: u32 = 1 << 31;
/// The engine checkpoints before any record's sequence number runs this far past the
/// persisted watermark (plus at most one in-flight record per lane, 1,024 lanes at most),
/// which keeps every live record, and the record before it in its lane, within the half
/// window [`full_seq`] rebuilds from.
pub const SEQ_AHEAD: u64 = 1 << 14;

/// Why a record was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A user transaction's writes and heap actions.
    Transaction,
    /// A heap-internal change made durable on its own (run creation).
    System,
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Kind.
    pub kind: RecordKind,
    /// Global commit sequence number.
    pub seq: u64,
    /// Byte length (header included).
    pub len: u32,
    /// New contents of written ranges.
    pub ranges: Vec<(u64, Vec<u8>)>,
    /// Heap actions (`Zero` ones are applied before the ranges, the others after).
    pub actions: Vec<Action>,
}

/// The full sequence number whose low 16 bits are `low`: the one in
/// `(reference - 2^15, reference + 2^15]`, where `reference` is the persisted watermark.
pub fn full_seq(low: u64, reference: u64) -> u64 {
    let ahead = low.wrapping_sub(reference) & SEQ_MASK;
    let forward = reference + ahead;
    if ahead > SEQ_HALF {
        forward.checked_sub(SEQ_MASK + 1).unwrap_or(forward)
    } else {
        forward
    }
}

/// The pieces a write is encoded as: at most [`MAX_RANGE`] bytes each.
fn pieces(addr: u64, bytes: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    bytes
        .chunks(MAX_RANGE)
        .enumerate()
        .map(move |(i, piece)| (addr + (i * MAX_RANGE) as u64, piece))
}

/// Whether a piece goes in a short entry: whole words at a word address below 2 GiB.
#[inline]
fn is_short(addr: u64, len: usize) -> bool {
    addr.is_multiple_of(8)
        && len.is_multiple_of(8)
        && (8..=SHORT_MAX_WORDS * 8).contains(&len)
        && addr / 8 < SHORT_WORD_LIMIT
}

/// Encoded bytes of one piece (tag included).
#[inline]
fn piece_size(addr: u64, len: usize) -> usize {
    if is_short(addr, len) {
        TAG_LEN + len
    } else {
        TAG_LEN + RANGE_HEADER_LEN + len.next_multiple_of(4)
    }
}

/// The encoded size of a record with these contents.
pub fn encoded_size<'a>(ranges: impl Iterator<Item = (u64, &'a [u8])>, actions: usize) -> usize {
    let mut body = actions * (TAG_LEN + ACTION_LEN);
    for (addr, data) in ranges {
        if data.len() <= MAX_RANGE {
            body += if data.is_empty() {
                0
            } else {
                piece_size(addr, data.len())
            };
        } else {
            body += pieces(addr, data)
                .map(|(at, piece)| piece_size(at, piece.len()))
                .sum::<usize>();
        }
    }
    body + header_len(HEADER_LEN + body)
}

/// The header length of a record whose short-form length would be `short_len`.
fn header_len(short_len: usize) -> usize {
    if short_len <= SHORT_MAX {
        HEADER_LEN
    } else {
        LONG_HEADER_LEN
    }
}

/// Appends one piece (at most [`MAX_RANGE`] bytes): a short entry when it is whole words at a
/// low word address, a long one (tag, range header, data, zeros to 4 bytes) otherwise.
#[inline]
fn push_range(out: &mut Vec<u8>, addr: u64, piece: &[u8]) {
    debug_assert!(addr >> ADDR_BITS == 0 && piece.len() <= MAX_RANGE);
    if is_short(addr, piece.len()) {
        let tag = ((addr / 8) << 4) as u32 | (piece.len() / 8) as u32;
        out.extend_from_slice(&tag.to_le_bytes());
        extend_bytes(out, piece);
        return;
    }
    out.extend_from_slice(&LONG_RANGE_TAG.to_le_bytes());
    let word = ((piece.len() as u64) << ADDR_BITS) | addr;
    out.extend_from_slice(&word.to_le_bytes());
    extend_bytes(out, piece);
    out.extend_from_slice(&[0u8; 4][..piece.len().next_multiple_of(4) - piece.len()]);
}

/// Encodes the record that will be written at absolute offset `at` into `out` (cleared
/// first).
pub fn encode<'a>(
    at: u64,
    kind: RecordKind,
    seq: u64,
    ranges: impl Iterator<Item = (u64, &'a [u8])> + Clone,
    actions: &[Action],
    out: &mut Vec<u8>,
) {
    let len = encoded_size(ranges.clone(), actions.len());
    let long = len > SHORT_MAX;
    out.clear();
    out.reserve(len.next_multiple_of(64) + 16);
    let kind_bit = match kind {
        RecordKind::Transaction => 0,
        RecordKind::System => SYSTEM_BIT,
    };
    let len_field = if long { 0 } else { (len / 4) as u32 };
    let meta = kind_bit | (len_field << SEQ_BITS) | (seq & SEQ_MASK) as u32;
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&meta.to_le_bytes());
    if long {
        out.extend_from_slice(&(len as u32).to_le_bytes());
    }
    for (addr, data) in ranges {
        if data.is_empty() {
            continue;
        } else if data.len() <= MAX_RANGE {
            push_range(out, addr, data);
        } else {
            pieces(addr, data).for_each(|(at, piece)| push_range(out, at, piece));
        }
    }
    for action in actions {
        out.extend_from_slice(&ACTION_TAG.to_le_bytes());
        out.extend_from_slice(&action.encode());
    }
    debug_assert_eq!(out.len(), len);
    let crc = checksum(out, seq, at);
    out[..4].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32 of `record[4..]`, the full sequence number and the position. The two words are
/// appended to `record` for the duration, so the checksum runs over one buffer: short pieces
/// fed on their own go through the byte-at-a-time path.
fn checksum(record: &mut Vec<u8>, seq: u64, at: u64) -> u32 {
    let len = record.len();
    record.extend_from_slice(&seq.to_le_bytes());
    record.extend_from_slice(&at.to_le_bytes());
    let crc = crc32fast::hash(&record[CRC_START..]);
    record.truncate(len);
    crc
}

/// A header as stored: its kind, length, header length and the full sequence number
/// rebuilt around `reference`. `None` when the bytes at `at` cannot start a record that
/// ends by `limit`.
struct Header {
    kind: RecordKind,
    len: usize,
    header_len: usize,
    seq: u64,
    crc: u32,
}

fn read_header<P: Persist>(pm: &P, at: u64, limit: u64, reference: u64) -> Option<Header> {
    parse_header(|offset| pm.read_u32(offset), at, limit, reference)
}

/// [`read_header`] over any source of little-endian `u32`s at pool offsets.
fn parse_header(
    read_u32: impl Fn(u64) -> u32,
    at: u64,
    limit: u64,
    reference: u64,
) -> Option<Header> {
    if at + HEADER_LEN as u64 > limit {
        return None;
    }
    let meta = read_u32(at + 4);
    let len_field = ((meta & !SYSTEM_BIT) >> SEQ_BITS) as usize;
    let (len, header_len) = if len_field == 0 {
        if at + LONG_HEADER_LEN as u64 > limit {
            return None;
        }
        (read_u32(at + 8) as usize, LONG_HEADER_LEN)
    } else {
        (len_field * 4, HEADER_LEN)
    };
    if len < header_len || !len.is_multiple_of(4) || at + len as u64 > limit {
        return None;
    }
    let kind = if meta & SYSTEM_BIT != 0 {
        RecordKind::System
    } else {
        RecordKind::Transaction
    };
    Some(Header {
        kind,
        len,
        header_len,
        seq: full_seq(u64::from(meta) & SEQ_MASK, reference),
        crc: read_u32(at),
    })
}

/// Reads the record at `at`, which may extend at most to `limit`; `reference` is the
/// persisted watermark its sequence number is rebuilt around. Returns `Ok(None)` when there
/// is no intact record there (a checksum that does not verify), and an error when an intact
/// record is malformed or names bytes outside the pool.
pub fn read<P: Persist>(
    pm: &P,
    at: u64,
    limit: u64,
    reference: u64,
) -> Result<Option<Record>, TxError> {
    let Some(header) = read_header(pm, at, limit, reference) else {
        return Ok(None);
    };
    let mut bytes = Vec::with_capacity(header.len + 16);
    bytes.resize(header.len, 0);
    pm.read(at, &mut bytes);
    if checksum(&mut bytes, header.seq, at) != header.crc {
        return Ok(None);
    }
    decode(&header, &bytes, pm.len()).map(Some)
}

/// Whether the line at `at` of a lane read into `lane` (`LaneChecksums::read` with
/// [`CRC_START`]) can hold an intact record that ends by `limit`, its sequence number
/// rebuilt around `reference`: false when no header is plausible there or its checksum does
/// not match, computed in time logarithmic in the length the header claims. A record
/// [`read`] finds at `at` always gets true.
pub fn may_hold_record(lane: &LaneChecksums, at: u64, limit: u64, reference: u64) -> bool {
    let read_u32 = |offset: u64| u32::from_le_bytes(lane.bytes(offset, 4).try_into().expect("4"));
    let Some(header) = parse_header(read_u32, at, limit.min(lane.end()), reference) else {
        return false;
    };
    let (from, to) = (at + CRC_START as u64, at + header.len as u64);
    let mut hasher = crc32fast::Hasher::new_with_initial_len(lane.span_crc(from, to), to - from);
    hasher.update(&header.seq.to_le_bytes());
    hasher.update(&at.to_le_bytes());
    hasher.finalize() == header.crc
}

/// The sequence number a record header at `at` names (rebuilt around `reference`), whether
/// or not the record verifies (recovery uses it to describe a torn record; `read` decides
/// whether the record is intact).
pub fn claimed_seq<P: Persist>(pm: &P, at: u64, limit: u64, reference: u64) -> Option<u64> {
    read_header(pm, at, limit, reference).map(|header| header.seq)
}

fn decode(header: &Header, bytes: &[u8], pool_len: u64) -> Result<Record, TxError> {
    let corrupt = |what: &str| TxError::Corrupted(format!("intact redo record with {what}"));
    let mut at = header.header_len;
    let (mut ranges, mut actions) = (Vec::new(), Vec::new());
    while at < bytes.len() {
        if at + TAG_LEN > bytes.len() {
            return Err(corrupt("a truncated entry"));
        }
        let tag = u32::from_le_bytes(bytes[at..at + TAG_LEN].try_into().expect("4 bytes"));
        at += TAG_LEN;
        let (addr, len, data_at, end) = match (tag & 15, tag >> 4) {
            (0, 0) => {
                if at + RANGE_HEADER_LEN > bytes.len() {
                    return Err(corrupt("a truncated range"));
                }
                let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
                let len = (word >> ADDR_BITS) as usize;
                let data_at = at + RANGE_HEADER_LEN;
                (
                    word & ((1 << ADDR_BITS) - 1),
                    len,
                    data_at,
                    data_at + len.next_multiple_of(4),
                )
            }
            (0, 1) => {
                let Some(chunk) = bytes.get(at..at + ACTION_LEN) else {
                    return Err(corrupt("a truncated action"));
                };
                let chunk: &[u8; ACTION_LEN] = chunk.try_into().expect("16 bytes");
                let action = Action::decode(chunk, pool_len)
                    .map_err(|e| TxError::Corrupted(e.to_string()))?;
                actions.push(action);
                at += ACTION_LEN;
                continue;
            }
            (0, _) => return Err(corrupt("an entry of unknown kind")),
            (words, index) => {
                let len = words as usize * 8;
                (u64::from(index) * 8, len, at, at + len)
            }
        };
        let in_pool = addr.checked_add(len as u64).is_some_and(|e| e <= pool_len);
        if len == 0 || end > bytes.len() || !in_pool {
            return Err(corrupt("an empty range or one outside the pool"));
        }
        ranges.push((addr, bytes[data_at..data_at + len].to_vec()));
        at = end;
    }
    Ok(Record {
        kind: header.kind,
        seq: header.seq,
        len: bytes.len() as u32,
        ranges,
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashsim::{SimConfig, SimPm};
    use pmem::WriteClass;

    fn slices(ranges: &[(u64, Vec<u8>)]) -> impl Iterator<Item = (u64, &[u8])> + Clone {
        ranges.iter().map(|(a, b)| (*a, b.as_slice()))
    }

    fn sample() -> (Vec<(u64, Vec<u8>)>, Vec<Action>) {
        (
            vec![(4096, vec![1, 2, 3]), (8192, vec![9; 64])],
            vec![Action::Or { addr: 128, mask: 4 }],
        )
    }

    #[test]
    fn round_trips_through_pm() {
        let (ranges, actions) = sample();
        let mut bytes = Vec::new();
        encode(
            1024,
            RecordKind::Transaction,
            77,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        let pm = SimPm::new(16384, SimConfig::default());
        pm.write(1024, &bytes, WriteClass::Log);
        let record = read(&pm, 1024, 4096, 0).expect("valid").expect("present");
        assert_eq!(
            (record.seq, record.ranges, record.actions),
            (77, ranges, actions)
        );
    }

    #[test]
    fn any_damage_makes_the_record_absent_not_an_error() {
        let (ranges, actions) = sample();
        let mut bytes = Vec::new();
        encode(
            0,
            RecordKind::Transaction,
            5,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        for byte in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[byte] ^= 0x40;
            let pm = SimPm::new(16384, SimConfig::default());
            pm.write(0, &damaged, WriteClass::Log);
            assert!(
                read(&pm, 0, 4096, 0).expect("no error").is_none(),
                "flip in byte {byte} accepted"
            );
        }
    }

    #[test]
    fn a_copy_of_a_record_elsewhere_does_not_verify() {
        let (ranges, actions) = sample();
        let mut bytes = Vec::new();
        encode(
            0,
            RecordKind::Transaction,
            9,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        let pm = SimPm::new(16384, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        pm.write(4096, &bytes, WriteClass::Log);
        assert!(read(&pm, 0, 4096, 0).expect("no error").is_some());
        assert!(read(&pm, 4096, 8192, 0).expect("no error").is_none());
    }

    #[test]
    fn long_writes_split_into_ranges_and_round_trip() {
        let big = vec![(
            8192u64,
            (0..200_000u32).map(|i| i as u8).collect::<Vec<u8>>(),
        )];
        let mut bytes = Vec::new();
        encode(0, RecordKind::Transaction, 3, slices(&big), &[], &mut bytes);
        let pm = SimPm::new(1 << 20, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        let record = read(&pm, 0, 1 << 19, 0).expect("valid").expect("present");
        assert_eq!(record.ranges.len(), 200_000usize.div_ceil(MAX_RANGE));
        let joined: Vec<u8> = record.ranges.iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!(joined, big[0].1);
        assert!(
            record
                .ranges
                .windows(2)
                .all(|w| w[0].0 + w[0].1.len() as u64 == w[1].0)
        );
    }

    #[test]
    fn a_record_may_not_cross_its_limit() {
        let (ranges, actions) = sample();
        let mut bytes = Vec::new();
        encode(
            0,
            RecordKind::System,
            1,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        let pm = SimPm::new(16384, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        assert!(
            read(&pm, 0, bytes.len() as u64 - 1, 0)
                .expect("no error")
                .is_none()
        );
    }

    #[test]
    fn a_swap_of_two_words_takes_32_bytes() {
        let ranges = vec![(4096u64, vec![1u8; 8]), (1 << 20, vec![2u8; 8])];
        let mut bytes = Vec::new();
        encode(
            64,
            RecordKind::Transaction,
            0x1_2345,
            slices(&ranges),
            &[],
            &mut bytes,
        );
        assert_eq!(
            bytes.len(),
            32,
            "8-byte header, two 4-byte tags, 16 data bytes"
        );
        assert_eq!(encoded_size(slices(&ranges), 0), 32);
        let pm = SimPm::new(1 << 21, SimConfig::default());
        pm.write(64, &bytes, WriteClass::Log);
        let record = read(&pm, 64, 4096, 0x1_2000)
            .expect("valid")
            .expect("present");
        assert_eq!((record.seq, record.ranges), (0x1_2345, ranges));
    }

    #[test]
    fn unaligned_high_and_long_ranges_use_the_long_form_and_round_trip() {
        let ranges = vec![
            (4097u64, vec![3u8; 5]),
            (8192, vec![5u8; 200]),
            (16384, vec![6u8; 120]),
        ];
        let (_, actions) = sample();
        let mut bytes = Vec::new();
        encode(
            0,
            RecordKind::System,
            7,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        let expected = 8 + (4 + 8 + 8) + (4 + 8 + 200) + (4 + 120) + (4 + 16);
        assert_eq!(bytes.len(), expected);
        let pm = SimPm::new(1 << 16, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        let record = read(&pm, 0, 4096, 0).expect("valid").expect("present");
        assert_eq!(
            (record.kind, record.ranges, record.actions),
            (RecordKind::System, ranges, actions)
        );
        assert!(
            is_short((1 << 31) - 8, 8) && !is_short(1 << 31, 8),
            "2 GiB limit"
        );
        assert!(is_short(0, 120) && !is_short(0, 128) && !is_short(4, 8));
    }

    #[test]
    fn records_past_the_short_length_field_take_the_long_header() {
        let big = vec![(8192u64, vec![9u8; 140_000])];
        let mut bytes = Vec::new();
        encode(0, RecordKind::Transaction, 2, slices(&big), &[], &mut bytes);
        assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()) >> 16, 0);
        assert_eq!(
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            bytes.len()
        );
        let pm = SimPm::new(1 << 20, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        let record = read(&pm, 0, 1 << 19, 0).expect("valid").expect("present");
        assert_eq!(record.ranges.concat_data(), big[0].1);
    }

    trait Concat {
        fn concat_data(&self) -> Vec<u8>;
    }

    impl Concat for Vec<(u64, Vec<u8>)> {
        fn concat_data(&self) -> Vec<u8> {
            self.iter().flat_map(|(_, b)| b.clone()).collect()
        }
    }

    #[test]
    fn sequence_numbers_are_rebuilt_around_the_watermark() {
        assert_eq!(full_seq(5, 0), 5);
        assert_eq!(
            full_seq(0x0005, 0x1_FFF0),
            0x2_0005,
            "just past a wrap of the low bits"
        );
        assert_eq!(
            full_seq(0xFFF0, 0x2_0005),
            0x1_FFF0,
            "just before the watermark"
        );
        assert_eq!(full_seq(0x8000, 0), 0x8000);
        assert_eq!(full_seq(0x8001, 0x1_0000), 0x8001);
        assert_eq!(full_seq(0xFFFF, 3), 0xFFFF, "no number below zero");
        for reference in [0u64, 1, 0x7FFF, 0x8000, 0x1_2345, 1 << 40] {
            for seq in reference.saturating_sub(SEQ_HALF - 1)..=reference + SEQ_HALF {
                if seq % 97 == 0 || seq.abs_diff(reference) < 3 {
                    assert_eq!(full_seq(seq & SEQ_MASK, reference), seq);
                }
            }
        }
    }

    #[test]
    fn a_record_read_around_a_distant_watermark_does_not_verify() {
        let (ranges, actions) = sample();
        let mut bytes = Vec::new();
        encode(
            0,
            RecordKind::Transaction,
            0x3_0007,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        let pm = SimPm::new(16384, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        assert!(read(&pm, 0, 4096, 0x3_0000).expect("no error").is_some());
        assert!(read(&pm, 0, 4096, 0x5_0000).expect("no error").is_none());
        assert_eq!(claimed_seq(&pm, 0, 4096, 0x5_0000), Some(0x5_0007));
    }

    #[test]
    fn an_intact_record_with_an_unknown_entry_is_an_error() {
        let mut bytes = vec![0u8; 16];
        let meta = (16u32 / 4) << SEQ_BITS | 1;
        bytes[4..8].copy_from_slice(&meta.to_le_bytes());
        bytes[8..12].copy_from_slice(&0x20u32.to_le_bytes());
        let crc = checksum(&mut bytes, 1, 0);
        bytes[..4].copy_from_slice(&crc.to_le_bytes());
        let pm = SimPm::new(16384, SimConfig::default());
        pm.write(0, &bytes, WriteClass::Log);
        assert!(matches!(read(&pm, 0, 4096, 0), Err(TxError::Corrupted(_))));
    }

    #[test]
    fn the_documented_example_encodes_byte_for_byte() {
        // docs/tx-format.md §6.1: the transaction record at pool offset 0x3040.
        let ranges = vec![
            (0x1000u64, vec![0x40, 0x80, 0, 0, 0, 0, 0x66, 0xe7]),
            (0x8040, 0x1122_3344_5566_7788u64.to_le_bytes().to_vec()),
        ];
        let actions = [Action::Or {
            addr: 0x8008,
            mask: 1,
        }];
        let mut bytes = Vec::new();
        encode(
            0x3040,
            RecordKind::Transaction,
            2,
            slices(&ranges),
            &actions,
            &mut bytes,
        );
        let expected = [
            0xbf, 0xa8, 0x64, 0xba, 0x02, 0x00, 0x0d, 0x00, 0x01, 0x20, 0x00, 0x00, 0x40, 0x80,
            0x00, 0x00, 0x00, 0x00, 0x66, 0xe7, 0x81, 0x00, 0x01, 0x00, 0x88, 0x77, 0x66, 0x55,
            0x44, 0x33, 0x22, 0x11, 0x10, 0x00, 0x00, 0x00, 0x08, 0x80, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(bytes, expected);
    }
}
