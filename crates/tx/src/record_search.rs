//! Finding log records in time linear in the log's size.
//!
//! Recovery tries every 64-byte line of a log (redo records carry no magic,
//! `docs/tx-format.md` §6.1; mvcc's magic can be forged by user data, which reaches its
//! logs), and a line whose header names a plausible length is a candidate whose CRC-32 runs
//! over everything up to the claimed end. Checked one by one, a log of lines that each claim
//! a record to its end costs time quadratic in its size.
//!
//! CRC-32 is linear, so the checksum of any span follows from two checksums of prefixes:
//! `crc(b) = crc(a ‖ b) ⊕ shift(crc(a), |b|)`, where `shift` appends `|b|` zero bytes to a
//! checksum (a multiplication modulo the CRC polynomial, logarithmic in `|b|`). The log is
//! read once, the checksum of every prefix ending where a record's checksummed span would
//! begin is kept, and each candidate's checksum is then computed from them in logarithmic
//! time (`tx::record::may_hold_record`, `mvcc::record::may_hold_record`). A candidate whose
//! checksum does not match cannot be a record; one that matches is read and decoded by the
//! format's reader as before, so what recovery finds is exactly what it found with the
//! line-by-line check.

use pmem::Persist;

const LINE: u64 = 64;

/// One log's bytes and the CRC-32 of each of its prefixes that end `start` bytes into a
/// line (where the checksummed span of a record starting on that line begins).
pub struct LaneChecksums {
    base: u64,
    start: usize,
    bytes: Vec<u8>,
    /// `prefix[k]` is the CRC-32 of `bytes[..64 k + start]`.
    prefix: Vec<u32>,
}

impl std::fmt::Debug for LaneChecksums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneChecksums")
            .field("base", &self.base)
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

impl LaneChecksums {
    /// Reads the `size` bytes of the log at pool offset `base` and checksums its prefixes
    /// (one pass), for records whose checksummed span begins `start` bytes after their
    /// first byte (`start` < 64).
    pub fn read<P: Persist>(pm: &P, base: u64, size: u64, start: usize) -> Self {
        assert!(
            start < LINE as usize,
            "a span starts in its record's first line"
        );
        let mut bytes = vec![0u8; size as usize];
        pm.read(base, &mut bytes);
        // Every prefix ending `start` bytes into a line, up to the lane's end: any span a
        // candidate names ends at or after the last one at or below its end.
        let starts = bytes
            .len()
            .checked_sub(start)
            .map_or(0, |rest| rest / LINE as usize + 1);
        let mut prefix = Vec::with_capacity(starts);
        let mut hasher = crc32fast::Hasher::new();
        let mut done = 0;
        for k in 0..starts {
            let end = k * LINE as usize + start;
            hasher.update(&bytes[done..end]);
            done = end;
            prefix.push(hasher.clone().finalize());
        }
        LaneChecksums {
            base,
            start,
            bytes,
            prefix,
        }
    }

    /// The lane's bytes at pool offsets `at..at + len` (within the lane).
    pub fn bytes(&self, at: u64, len: usize) -> &[u8] {
        let from = (at - self.base) as usize;
        &self.bytes[from..from + len]
    }

    /// The pool offset just past the lane.
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// CRC-32 of the lane's bytes at pool offsets `from..to`, where `from` lies `start`
    /// bytes into a line of the lane and `to` within the lane; logarithmic in `to - from`.
    pub fn span_crc(&self, from: u64, to: u64) -> u32 {
        let (from, to) = (from - self.base, to - self.base);
        debug_assert_eq!(from % LINE, self.start as u64);
        let first = ((from - self.start as u64) / LINE) as usize;
        shift(self.prefix[first], to - from) ^ self.prefix_crc(to)
    }

    /// CRC-32 of `bytes[..to]`, from the nearest kept prefix at or below `to`.
    fn prefix_crc(&self, to: u64) -> u32 {
        let anchor_line = ((to - self.start as u64) / LINE) as usize;
        let anchor = anchor_line * LINE as usize + self.start;
        let mut hasher = crc32fast::Hasher::new_with_initial_len(self.prefix[anchor_line], 0);
        hasher.combine(&{
            let mut tail = crc32fast::Hasher::new();
            tail.update(&self.bytes[anchor..to as usize]);
            tail
        });
        hasher.finalize()
    }
}

/// The CRC-32 of `a ‖ b` from `crc(a)`, `crc(b)` and `|b|` (logarithmic in `|b|`).
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    shift(crc_a, len_b) ^ crc_b
}

/// Appends `zeros` zero bytes' worth of shift to a CRC-32: `crc(a ‖ b) = shift(crc(a), |b|)
/// ⊕ crc(b)` (the combination rule `crc32fast::Hasher::combine` implements, with `crc(b)`
/// taken as 0).
fn shift(crc: u32, zeros: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial_len(crc, 0);
    hasher.combine(&crc32fast::Hasher::new_with_initial_len(0, zeros));
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{self, CRC_START, RecordKind};
    use crashsim::{SimConfig, SimPm};
    use pmem::WriteClass;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const LANE: u64 = 64 * 64;

    /// Every line of `pm`'s lane at `base`: whether the fast check passes, and whether the
    /// record reader finds an intact record.
    fn verdicts(pm: &SimPm, base: u64, reference: u64) -> Vec<(bool, bool)> {
        let sums = LaneChecksums::read(pm, base, LANE, CRC_START);
        (base..base + LANE)
            .step_by(LINE as usize)
            .map(|at| {
                let fast = record::may_hold_record(&sums, at, base + LANE, reference);
                let slow = matches!(record::read(pm, at, base + LANE, reference), Ok(Some(_)));
                (fast, slow)
            })
            .collect()
    }

    #[test]
    fn the_span_checksum_equals_the_direct_one() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let pm = SimPm::new(2 * LANE, SimConfig::default());
        let noise: Vec<u8> = (0..LANE).map(|_| rng.random()).collect();
        pm.write(LANE, &noise, WriteClass::Log);
        for start in [CRC_START, 32] {
            let sums = LaneChecksums::read(&pm, LANE, LANE, start);
            for _ in 0..500 {
                let line = rng.random_range(0..LANE / LINE);
                let from = line * LINE + start as u64;
                let to = rng.random_range(from / 4..=LANE / 4) * 4;
                let direct = crc32fast::hash(&noise[from as usize..to as usize]);
                assert_eq!(
                    sums.span_crc(LANE + from, LANE + to),
                    direct,
                    "{from}..{to}"
                );
            }
        }
        let (a, b) = (&noise[..100], &noise[100..1000]);
        assert_eq!(
            combine(crc32fast::hash(a), crc32fast::hash(b), b.len() as u64),
            crc32fast::hash(&noise[..1000])
        );
    }

    #[test]
    fn records_are_found_exactly_where_the_record_reader_finds_them() {
        let pm = SimPm::new(2 * LANE, SimConfig::default());
        let base = LANE;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut noise: Vec<u8> = (0..LANE).map(|_| rng.random()).collect();
        // Every line's header names a plausible short-form length, so every line is a
        // candidate whose checksum must be computed.
        for line in noise.chunks_exact_mut(LINE as usize) {
            let meta = rng.random_range(2u32..=256) << 16 | rng.random_range(0u32..0x1_0000);
            line[4..8].copy_from_slice(&meta.to_le_bytes());
        }
        pm.write(base, &noise, WriteClass::Log);
        let mut bytes = Vec::new();
        for (line, seq) in [(0u64, 5u64), (3, 6), (40, 7), (63, 8)] {
            let at = base + line * LINE;
            let data = [line as u8; 16];
            let ranges = [(0x100u64, &data[..])];
            record::encode(
                at,
                RecordKind::Transaction,
                seq,
                ranges.into_iter(),
                &[],
                &mut bytes,
            );
            pm.write(at, &bytes, WriteClass::Log);
        }
        let found = verdicts(&pm, base, 5);
        for (line, &(fast, slow)) in found.iter().enumerate() {
            assert_eq!(fast, slow, "line {line}");
        }
        assert_eq!(found.iter().filter(|v| v.1).count(), 4);
    }

    #[test]
    fn lines_that_each_claim_a_record_to_the_lane_end_are_rejected_without_a_match() {
        // A little-endian u64 below 2^32 followed by a multiple of 4: a long-form header
        // claiming a record to (or past) the lane's end at every line.
        let pm = SimPm::new(2 * LANE, SimConfig::default());
        let mut line = [0u8; LINE as usize];
        for (i, word) in line.chunks_exact_mut(8).enumerate() {
            word[..4].copy_from_slice(&(i as u32 * 0x9E37).to_le_bytes());
            word[4..].copy_from_slice(&0u32.to_le_bytes());
        }
        line[8..12].copy_from_slice(&(LANE as u32 / 2).to_le_bytes());
        for k in 0..LANE / LINE {
            pm.write(LANE + k * LINE, &line, WriteClass::Log);
        }
        assert!(
            record::claimed_seq(&pm, LANE, 2 * LANE, 0).is_some(),
            "a plausible header"
        );
        let found = verdicts(&pm, LANE, 0);
        assert!(found.iter().all(|&(fast, slow)| fast == slow && !slow));
    }
}
