//! The raw reference's redo log: a ring of fixed-size slots, one record per operation.
//!
//! A record (byte layout in `docs/tx-format.md`, "The raw reference"):
//!
//! ```text
//! +0  seq u64 (1, 2, ...; 0 never appears in a record)
//! +8  len u32 (bytes, header included)
//! +12 crc u32: CRC-32 of bytes [0, 12) and [16, len), then the slot's absolute offset
//! +16 ranges: one u64 = addr (low 48 bits) | len (high 16 bits), then the data padded to 8
//! ```
//!
//! An operation streams its record to its slot, fences once (the durability point), then
//! writes the new values in place and writes their lines back without a fence: the next
//! operation's fence completes those write-backs. Streamed stores may reach PM before the
//! fence that orders them, so record `k` can be durable while operation `k - 1`'s write-backs
//! are still in flight; but operation `k - 2`'s were completed by fence `k - 1`, before record
//! `k` was written. Recovery therefore replays the two newest intact records, in order. A
//! slot is reused `slots` operations later, long after its operation is durable in place.

use super::Durability;
use pmem::{Persist, WriteClass};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tx::{TxError, TxResult};

/// Bytes of a record's header.
pub(crate) const HEADER_LEN: usize = 16;
/// Bytes of a range's header word.
const RANGE_HEADER_LEN: usize = 8;
const ADDR_BITS: u32 = 48;
/// Records up to this size are encoded in a stack buffer.
const STACK_RECORD: usize = 512;

/// The encoded size of a record holding ranges of these lengths.
pub(crate) fn record_len(range_lens: impl IntoIterator<Item = usize>) -> usize {
    HEADER_LEN
        + range_lens
            .into_iter()
            .map(|len| RANGE_HEADER_LEN + len.next_multiple_of(8))
            .sum::<usize>()
}

/// The ring: where it is, and (for the one thread that runs operations) where the next
/// record goes. The cursor is kept in relaxed atomics so the reference can be shared with
/// the timing loop; a single thread uses it, so they compile to plain loads and stores.
#[derive(Debug)]
pub(crate) struct RawLog {
    base: u64,
    slot_len: u64,
    slots: u64,
    next_slot: AtomicU64,
    next_seq: AtomicU64,
}

impl RawLog {
    /// A ring of `slots` slots of `slot_len` bytes at `base`, next record in `next_slot`
    /// with sequence number `next_seq`.
    pub(crate) fn new(base: u64, slot_len: u64, slots: u64, next_slot: u64, next_seq: u64) -> Self {
        debug_assert!(slots >= 2 && slot_len.is_multiple_of(64));
        RawLog {
            base,
            slot_len,
            slots,
            next_slot: AtomicU64::new(next_slot),
            next_seq: AtomicU64::new(next_seq),
        }
    }

    /// Makes `ranges` (address, new bytes) one durable operation and writes them in place
    /// (see the module documentation); with [`Durability::Volatile`], the same stores without
    /// write-backs, fence or durability point.
    pub(crate) fn commit<P: Persist>(
        &self,
        pm: &P,
        durability: Durability,
        ranges: &[(u64, &[u8])],
    ) {
        let mut stack = [0u8; STACK_RECORD];
        let mut heap = Vec::new();
        let len = record_len(ranges.iter().map(|r| r.1.len()));
        debug_assert!(len as u64 <= self.slot_len);
        let record = if len <= STACK_RECORD {
            &mut stack[..len]
        } else {
            heap.resize(len, 0);
            &mut heap[..]
        };
        let slot = self.next_slot.load(Relaxed);
        let at = self.base + slot * self.slot_len;
        encode(record, self.next_seq.load(Relaxed), at, ranges);
        self.next_slot.store((slot + 1) % self.slots, Relaxed);
        self.next_seq
            .store(self.next_seq.load(Relaxed) + 1, Relaxed);
        match durability {
            Durability::Persistent => {
                pm.write_nt(at, record, WriteClass::Log);
                pm.fence();
                pm.durability_point();
                for &(addr, bytes) in ranges {
                    pm.write(addr, bytes, WriteClass::User);
                    pm.flush(addr, bytes.len() as u64);
                }
            }
            Durability::Volatile => {
                pm.write(at, record, WriteClass::Log);
                for &(addr, bytes) in ranges {
                    pm.write(addr, bytes, WriteClass::User);
                }
            }
        }
        let user: usize = ranges.iter().map(|r| r.1.len()).sum();
        pm.stats().record_user_bytes(user as u64);
    }

    /// Recovery: replays the two newest intact records in sequence order (their ranges must
    /// lie in `data`), makes them durable in place, and returns the ring positioned after the
    /// newest. Idempotent.
    pub(crate) fn recover<P: Persist>(
        pm: &P,
        base: u64,
        slot_len: u64,
        slots: u64,
        data: pmem::Region,
    ) -> TxResult<Self> {
        let mut intact = Vec::new();
        for slot in 0..slots {
            if let Some((seq, bytes)) = read_record(pm, base + slot * slot_len, slot_len)? {
                intact.push((seq, slot, bytes));
            }
        }
        intact.sort_unstable_by_key(|record| record.0);
        let Some(&(newest, slot, _)) = intact.last() else {
            return Ok(RawLog::new(base, slot_len, slots, 0, 1));
        };
        for (_, _, bytes) in intact.iter().filter(|r| r.0 + 1 >= newest) {
            for (addr, data_bytes) in ranges_of(bytes, data)? {
                pm.write(addr, data_bytes, WriteClass::User);
                pm.flush(addr, data_bytes.len() as u64);
            }
        }
        pm.fence();
        Ok(RawLog::new(
            base,
            slot_len,
            slots,
            (slot + 1) % slots,
            newest + 1,
        ))
    }
}

/// Encodes the record `seq` of `ranges`, to be stored at absolute offset `at`, into `out`
/// (exactly [`record_len`] bytes).
fn encode(out: &mut [u8], seq: u64, at: u64, ranges: &[(u64, &[u8])]) {
    out[..8].copy_from_slice(&seq.to_le_bytes());
    let len = out.len() as u32;
    out[8..12].copy_from_slice(&len.to_le_bytes());
    let mut pos = HEADER_LEN;
    for &(addr, bytes) in ranges {
        debug_assert!(addr >> ADDR_BITS == 0 && bytes.len() < 1 << 16);
        let word = ((bytes.len() as u64) << ADDR_BITS) | addr;
        out[pos..pos + 8].copy_from_slice(&word.to_le_bytes());
        pos += RANGE_HEADER_LEN;
        tx::bytes::copy_bytes(&mut out[pos..pos + bytes.len()], bytes);
        let padded = bytes.len().next_multiple_of(8);
        out[pos + bytes.len()..pos + padded].fill(0);
        pos += padded;
    }
    let crc = checksum(out, at);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
}

fn checksum(record: &[u8], at: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&record[..12]);
    hasher.update(&record[HEADER_LEN..]);
    hasher.update(&at.to_le_bytes());
    hasher.finalize()
}

/// The intact record in the slot at `at` (sequence number and bytes), if there is one.
fn read_record<P: Persist>(pm: &P, at: u64, slot_len: u64) -> TxResult<Option<(u64, Vec<u8>)>> {
    let mut header = [0u8; HEADER_LEN];
    pm.read(at, &mut header);
    let seq = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize;
    if seq == 0 || len < HEADER_LEN || len as u64 > slot_len {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len];
    pm.read(at, &mut bytes);
    let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    Ok((checksum(&bytes, at) == crc).then_some((seq, bytes)))
}

/// The ranges of an intact record, each checked to lie inside `data`.
fn ranges_of(record: &[u8], data: pmem::Region) -> TxResult<Vec<(u64, &[u8])>> {
    let corrupt = |what: &str| TxError::Corrupted(format!("raw reference record: {what}"));
    let mut ranges = Vec::new();
    let mut pos = HEADER_LEN;
    while pos < record.len() {
        let header = record
            .get(pos..pos + RANGE_HEADER_LEN)
            .ok_or_else(|| corrupt("a truncated range"))?;
        let word = u64::from_le_bytes(header.try_into().expect("8 bytes"));
        let (addr, len) = (word & ((1 << ADDR_BITS) - 1), (word >> ADDR_BITS) as usize);
        let start = pos + RANGE_HEADER_LEN;
        let bytes = record
            .get(start..start + len)
            .filter(|_| data.contains(addr, len as u64))
            .ok_or_else(|| corrupt("a range outside the data"))?;
        ranges.push((addr, bytes));
        pos = start + len.next_multiple_of(8);
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashsim::{SimConfig, SimPm};
    use pmem::Region;

    const DATA: Region = Region {
        offset: 8192,
        len: 4096,
    };

    #[test]
    fn the_two_newest_intact_records_are_replayed() {
        let pm = SimPm::new(16384, SimConfig::default());
        let log = RawLog::new(0, 64, 4, 0, 1);
        for round in 1..=6u8 {
            log.commit(
                &pm,
                Durability::Persistent,
                &[(8192, &[round; 8]), (8256, &[round + 100; 16])],
            );
        }
        // Undo the in-place writes of the two newest operations: recovery must redo them.
        pm.write(8192, &[0; 8], WriteClass::User);
        pm.write(8256, &[0; 16], WriteClass::User);
        log.commit(&pm, Durability::Persistent, &[(8320, &[9; 8])]);
        pm.write(8320, &[0; 8], WriteClass::User);
        let log = RawLog::recover(&pm, 0, 64, 4, DATA).expect("recover");
        let mut bytes = [0u8; 32];
        pm.read(8192, &mut bytes[..8]);
        pm.read(8256, &mut bytes[8..24]);
        pm.read(8320, &mut bytes[24..]);
        assert_eq!(
            (&bytes[..8], &bytes[8..24], &bytes[24..]),
            (&[6; 8][..], &[106; 16][..], &[9; 8][..])
        );
        assert_eq!(
            (log.next_slot.load(Relaxed), log.next_seq.load(Relaxed)),
            (3, 8)
        );
    }

    #[test]
    fn damaged_records_are_absent_and_ranges_outside_the_data_are_errors() {
        let pm = SimPm::new(16384, SimConfig::default());
        let log = RawLog::new(0, 64, 2, 0, 1);
        log.commit(&pm, Durability::Persistent, &[(8192, &[7; 8])]);
        for byte in 0..32 {
            let copy = SimPm::new(16384, SimConfig::default());
            let mut image = pm.durable_image();
            image[byte] ^= 0x10;
            copy.write(0, &image, WriteClass::Log);
            let log = RawLog::recover(&copy, 0, 64, 2, DATA).expect("no error");
            assert_eq!(
                log.next_seq.load(Relaxed),
                1,
                "flip in byte {byte} accepted"
            );
        }
        let elsewhere = Region {
            offset: 12288,
            len: 64,
        };
        assert!(matches!(
            RawLog::recover(&pm, 0, 64, 2, elsewhere),
            Err(TxError::Corrupted(_))
        ));
    }
}
