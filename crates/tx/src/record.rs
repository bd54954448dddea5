//! Redo log records (byte layout in `docs/tx-format.md`).
//!
//! ```text
//! +0  magic u32: "FRT2" (transaction) or "FRS2" (system)
//! +4  len u32 (bytes, header included, padding excluded)
//! +8  seq u64 (global commit order)
//! +16 ranges u16   +18 actions u16
//! +20 crc32 u32 over bytes [0, 20) and [24, len), then the record's absolute offset
//!     (so a copy of a record elsewhere, e.g. inside another record's data, never verifies)
//! +24 ranges: one u64 = addr (low 48 bits) | len (high 16 bits, 1..=65535), then the data
//!     padded to 8 bytes; then actions: 16 bytes each (heap::Action encoding)
//! ```
//!
//! Longer writes are split into ranges of at most [`MAX_RANGE`] bytes. A record starts on a
//! 64-byte boundary of its lane. It counts as committed only if its checksum verifies: a torn
//! record is simply absent.

use crate::api::TxError;
use crate::bytes::extend_bytes;
use heap::{ACTION_LEN, Action};
use pmem::Persist;

const MAGIC_TRANSACTION: u32 = u32::from_le_bytes(*b"FRT2");
const MAGIC_SYSTEM: u32 = u32::from_le_bytes(*b"FRS2");
/// Bytes of the record header.
pub const HEADER_LEN: usize = 24;
const RANGE_HEADER_LEN: usize = 8;
/// Longest range one range header describes (a multiple of 8 below 2^16).
pub const MAX_RANGE: usize = 0xFFF8;
/// Most ranges and most actions in one record.
pub const MAX_ENTRIES: usize = u16::MAX as usize;
const ADDR_BITS: u32 = 48;

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
    /// Byte length (header included, padding excluded).
    pub len: u32,
    /// New contents of written ranges.
    pub ranges: Vec<(u64, Vec<u8>)>,
    /// Heap actions (`Zero` ones are applied before the ranges, the others after).
    pub actions: Vec<Action>,
}

/// The pieces a write is encoded as: at most [`MAX_RANGE`] bytes each.
fn pieces(addr: u64, bytes: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    bytes
        .chunks(MAX_RANGE)
        .enumerate()
        .map(move |(i, piece)| (addr + (i * MAX_RANGE) as u64, piece))
}

/// The encoded size of a record with these contents, and its range count.
pub fn encoded_size<'a>(
    ranges: impl Iterator<Item = (u64, &'a [u8])>,
    actions: usize,
) -> (usize, usize) {
    let (mut bytes, mut count) = (HEADER_LEN + actions * ACTION_LEN, 0);
    for (_, data) in ranges {
        // Every piece but the last is MAX_RANGE bytes, a multiple of 8; nothing is empty.
        let pieces = data.len().div_ceil(MAX_RANGE);
        bytes += pieces * RANGE_HEADER_LEN + data.len().next_multiple_of(8);
        count += pieces;
    }
    (bytes, count)
}

/// Appends one range (a piece of at most [`MAX_RANGE`] bytes): its header word, its data and
/// the zeros padding it to 8 bytes.
#[inline]
fn push_range(out: &mut Vec<u8>, addr: u64, piece: &[u8]) {
    debug_assert!(addr >> ADDR_BITS == 0 && piece.len() <= MAX_RANGE);
    let word = ((piece.len() as u64) << ADDR_BITS) | addr;
    out.extend_from_slice(&word.to_le_bytes());
    extend_bytes(out, piece);
    out.extend_from_slice(&[0u8; 8][..piece.len().next_multiple_of(8) - piece.len()]);
}

/// Whether a record with these contents can be encoded (counts fit their 16-bit fields).
pub fn fits(range_count: usize, actions: usize) -> bool {
    range_count <= MAX_ENTRIES && actions <= MAX_ENTRIES
}

/// Encodes the record that will be written at absolute offset `at` into `out` (cleared
/// first). The caller has checked [`fits`].
pub fn encode<'a>(
    at: u64,
    kind: RecordKind,
    seq: u64,
    ranges: impl Iterator<Item = (u64, &'a [u8])> + Clone,
    actions: &[Action],
    out: &mut Vec<u8>,
) {
    let (len, range_count) = encoded_size(ranges.clone(), actions.len());
    debug_assert!(fits(range_count, actions.len()));
    out.clear();
    out.reserve(len.next_multiple_of(64));
    let magic = match kind {
        RecordKind::Transaction => MAGIC_TRANSACTION,
        RecordKind::System => MAGIC_SYSTEM,
    };
    out.extend_from_slice(&magic.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(range_count as u16).to_le_bytes());
    out.extend_from_slice(&(actions.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
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
        out.extend_from_slice(&action.encode());
    }
    debug_assert_eq!(out.len(), len);
    let crc = checksum(out, at);
    out[20..24].copy_from_slice(&crc.to_le_bytes());
}

fn checksum(record: &[u8], at: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&record[..20]);
    hasher.update(&record[HEADER_LEN..]);
    hasher.update(&at.to_le_bytes());
    hasher.finalize()
}

/// Reads the record at `at`, which may extend at most to `limit`. Returns `Ok(None)` when
/// there is no intact record there (no magic, or a checksum that does not verify), and an
/// error when an intact record names bytes outside the pool.
pub fn read<P: Persist>(pm: &P, at: u64, limit: u64) -> Result<Option<Record>, TxError> {
    if at + HEADER_LEN as u64 > limit {
        return Ok(None);
    }
    let mut header = [0u8; HEADER_LEN];
    pm.read(at, &mut header);
    let half = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
    let kind = match half(0) {
        MAGIC_TRANSACTION => RecordKind::Transaction,
        MAGIC_SYSTEM => RecordKind::System,
        _ => return Ok(None),
    };
    let len = half(4);
    if (len as usize) < HEADER_LEN || at + u64::from(len) > limit {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len as usize];
    pm.read(at, &mut bytes);
    if checksum(&bytes, at) != half(20) {
        return Ok(None);
    }
    decode(kind, &bytes, pm.len()).map(Some)
}

/// The sequence number named by a record header at `at` that carries a record magic,
/// whether or not the record verifies (recovery uses it to tell a damaged record from a torn
/// one; `read` decides whether the record is intact).
pub fn claimed_seq<P: Persist>(pm: &P, at: u64, limit: u64) -> Option<u64> {
    if at + HEADER_LEN as u64 > limit {
        return None;
    }
    let magic = pm.read_u32(at);
    (magic == MAGIC_TRANSACTION || magic == MAGIC_SYSTEM).then(|| pm.read_u64(at + 8))
}

fn decode(kind: RecordKind, bytes: &[u8], pool_len: u64) -> Result<Record, TxError> {
    let corrupt = |what: &str| TxError::Corrupted(format!("intact redo record with {what}"));
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let short = |i: usize| usize::from(u16::from_le_bytes([bytes[i], bytes[i + 1]]));
    let (range_count, action_count) = (short(16), short(18));
    let mut at = HEADER_LEN;
    let mut ranges = Vec::with_capacity(range_count);
    for _ in 0..range_count {
        if at + RANGE_HEADER_LEN > bytes.len() {
            return Err(corrupt("a truncated range"));
        }
        let header = word(at);
        let (addr, len) = (
            header & ((1 << ADDR_BITS) - 1),
            (header >> ADDR_BITS) as usize,
        );
        let data_at = at + RANGE_HEADER_LEN;
        let end = data_at + len.next_multiple_of(8);
        let in_pool = addr.checked_add(len as u64).is_some_and(|e| e <= pool_len);
        if len == 0 || end > bytes.len() || !in_pool {
            return Err(corrupt("an empty range or one outside the pool"));
        }
        ranges.push((addr, bytes[data_at..data_at + len].to_vec()));
        at = end;
    }
    if at + action_count * ACTION_LEN != bytes.len() {
        return Err(corrupt("a length that does not match its contents"));
    }
    let actions = bytes[at..]
        .chunks_exact(ACTION_LEN)
        .map(|chunk| Action::decode(chunk.try_into().expect("16 bytes"), pool_len))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TxError::Corrupted(e.to_string()))?;
    Ok(Record {
        kind,
        seq: word(8),
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
        let record = read(&pm, 1024, 4096).expect("valid").expect("present");
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
                read(&pm, 0, 4096).expect("no error").is_none(),
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
        assert!(read(&pm, 0, 4096).expect("no error").is_some());
        assert!(read(&pm, 4096, 8192).expect("no error").is_none());
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
        let record = read(&pm, 0, 1 << 19).expect("valid").expect("present");
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
            read(&pm, 0, bytes.len() as u64 - 1)
                .expect("no error")
                .is_none()
        );
    }
}
