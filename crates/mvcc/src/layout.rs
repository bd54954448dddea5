//! The MVCC engine's area of a pool (byte layout in `docs/mvcc-format.md` §2):
//!
//! ```text
//! arena start ─ engine header (64 B): magic "FERRMVCC", version, lanes, log sizes,
//!               offsets, CRC-32
//!             ─ word at +64 (own cache line): the write-back watermark (a checked word)
//!             ─ lanes (4 KiB aligned): `lane_count` × `olog_size` bytes, each a 64-byte
//!               lane header then the lane's operation log (OLog)
//!             ─ checkpoint log (CLog): `clog_size` bytes
//!             ─ heap (the rest of the arena)
//! ```

use pmem::{Persist, Region, WriteClass};
use tx::{TxError, TxResult};

/// Identifies an MVCC engine area.
pub const MAGIC: [u8; 8] = *b"FERRMVCC";
/// The undo/redo engines' magic: a pool formatted by one of them is `WrongEngine`.
const TX_MAGIC: [u8; 8] = *b"FERRTXEN";
/// Format version of every MVCC structure.
pub const VERSION: u32 = 1;
/// Bytes of the engine header.
pub const HEADER_LEN: u64 = 64;
/// Offset of the write-back watermark from the arena start.
pub const WATERMARK_OFFSET: u64 = 64;
/// Alignment of the lanes, of the CLog and of their sizes.
pub const ALIGN: u64 = 4096;
/// Magic of a lane header.
pub const LANE_MAGIC: [u8; 8] = *b"FMVLANE1";
/// Bytes of a lane header (the OLog starts after it).
pub const LANE_HEADER_LEN: u64 = 64;
/// Most lanes.
pub const MAX_LANES: u32 = 1024;

/// The engine area's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MvccLayout {
    /// Start of the arena (the engine header).
    pub base: u64,
    /// Number of lanes (each with its own operation log).
    pub lane_count: u32,
    /// Bytes per lane, header included (a multiple of 4 KiB).
    pub olog_size: u64,
    /// Bytes of the checkpoint log (a multiple of 4 KiB).
    pub clog_size: u64,
    /// Absolute offset of lane 0.
    pub lanes: u64,
    /// Absolute offset of the checkpoint log.
    pub clog: u64,
    /// The heap's region.
    pub heap: Region,
}

/// A checked word: a 48-bit value and a 16-bit check bound to the word's address.
pub mod checked {
    use tx::{TxError, TxResult};

    const VALUE_BITS: u32 = 48;
    /// Largest value a checked word holds.
    pub const MAX_VALUE: u64 = (1 << VALUE_BITS) - 1;

    fn check(value: u64, addr: u64) -> u64 {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&value.to_le_bytes());
        hasher.update(&addr.to_le_bytes());
        u64::from(hasher.finalize() as u16)
    }

    /// The stored form of `value` at absolute offset `addr`.
    pub fn seal(value: u64, addr: u64) -> u64 {
        assert!(value <= MAX_VALUE, "checked value {value} exceeds 48 bits");
        (check(value, addr) << VALUE_BITS) | value
    }

    /// The value of the stored `word` at `addr`, or `Corrupted` naming `what`.
    pub fn open(word: u64, addr: u64, what: &str) -> TxResult<u64> {
        let value = word & MAX_VALUE;
        if word >> VALUE_BITS != check(value, addr) {
            return Err(TxError::Corrupted(format!(
                "{what} at {addr:#x} fails its check ({word:#x})"
            )));
        }
        Ok(value)
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl MvccLayout {
    /// Plans the area in `arena`.
    pub fn plan(arena: Region, lane_count: u32, olog_size: u64, clog_size: u64) -> TxResult<Self> {
        let round = |n: u64| n.checked_next_multiple_of(ALIGN).unwrap_or(u64::MAX);
        let (olog_size, clog_size) = (round(olog_size), round(clog_size));
        let limit = u64::from(u32::MAX);
        if lane_count == 0
            || lane_count > MAX_LANES
            || olog_size == 0
            || olog_size > limit
            || clog_size == 0
            || clog_size > limit
        {
            return Err(TxError::InvalidArgument(format!(
                "mvcc needs 1..={MAX_LANES} lanes and logs of 4 KiB to 4 GiB, got \
                 {lane_count} × {olog_size} B lanes and a {clog_size} B checkpoint log"
            )));
        }
        let lanes = (arena.offset + WATERMARK_OFFSET + 64).next_multiple_of(ALIGN);
        let clog = lanes + u64::from(lane_count) * olog_size;
        let heap_start = clog + clog_size;
        if heap_start + ALIGN > arena.end() {
            return Err(TxError::OutOfSpace {
                size: heap_start - arena.offset,
            });
        }
        Ok(MvccLayout {
            base: arena.offset,
            lane_count,
            olog_size,
            clog_size,
            lanes,
            clog,
            heap: Region {
                offset: heap_start,
                len: arena.end() - heap_start,
            },
        })
    }

    /// Absolute offset of lane `lane` (its header).
    pub fn lane(&self, lane: usize) -> u64 {
        self.lanes + lane as u64 * self.olog_size
    }

    /// Absolute offset of lane `lane`'s operation log, and its length.
    pub fn olog(&self, lane: usize) -> (u64, u64) {
        (
            self.lane(lane) + LANE_HEADER_LEN,
            self.olog_size - LANE_HEADER_LEN,
        )
    }

    /// Absolute offset of the write-back watermark.
    pub fn watermark(&self) -> u64 {
        self.base + WATERMARK_OFFSET
    }

    fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.lane_count.to_le_bytes());
        b[16..24].copy_from_slice(&self.olog_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.clog_size.to_le_bytes());
        b[32..40].copy_from_slice(&self.lanes.to_le_bytes());
        b[40..48].copy_from_slice(&self.clog.to_le_bytes());
        b[48..56].copy_from_slice(&self.heap.offset.to_le_bytes());
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn lane_header(&self, lane: usize) -> [u8; LANE_HEADER_LEN as usize] {
        let at = self.lane(lane);
        let mut b = [0u8; LANE_HEADER_LEN as usize];
        b[0..8].copy_from_slice(&LANE_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(lane as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.olog_size.to_le_bytes());
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&b[..60]);
        hasher.update(&at.to_le_bytes());
        b[60..64].copy_from_slice(&hasher.finalize().to_le_bytes());
        b
    }

    /// Zeroes the logs, writes the lane headers and persists them (before the heap and the
    /// engine header are written).
    pub fn format_logs<P: Persist>(&self, pm: &P) {
        let logs = self.heap.offset - self.lanes;
        pm.fill(self.lanes, logs, 0, WriteClass::Log);
        for lane in 0..self.lane_count as usize {
            pm.write(self.lane(lane), &self.lane_header(lane), WriteClass::Meta);
        }
        pm.persist(self.lanes, logs);
    }

    /// Writes the header (and a zero watermark) and persists them, magic last.
    pub fn write<P: Persist>(&self, pm: &P) {
        let header = self.encode();
        pm.write_u64(
            self.watermark(),
            checked::seal(0, self.watermark()),
            WriteClass::Meta,
        );
        pm.write(self.base, &[0; 8], WriteClass::Meta);
        pm.write(self.base + 8, &header[8..], WriteClass::Meta);
        pm.persist(self.base, WATERMARK_OFFSET + 8);
        pm.write(self.base, &header[..8], WriteClass::Meta);
        pm.persist(self.base, 8);
    }

    /// Reads and validates the header and the lane headers in `arena`.
    pub fn read<P: Persist>(pm: &P, arena: Region) -> TxResult<Self> {
        let mut b = [0u8; HEADER_LEN as usize];
        pm.read(arena.offset, &mut b);
        if b[0..8] == TX_MAGIC {
            let found = match u32_at(&b, 12) {
                1 => "undo",
                2 => "redo",
                _ => "unknown",
            };
            return Err(TxError::WrongEngine {
                expected: "mvcc",
                found,
            });
        }
        if b[0..8] != MAGIC {
            return Err(TxError::Corrupted(
                "no transaction area in this pool (not formatted by an engine)".into(),
            ));
        }
        let (stored, computed) = (u32_at(&b, 60), crc32fast::hash(&b[..60]));
        if stored != computed {
            return Err(TxError::Corrupted(format!(
                "mvcc header checksum {stored:#x} != {computed:#x}"
            )));
        }
        if u32_at(&b, 8) != VERSION {
            return Err(TxError::Corrupted(format!(
                "unsupported mvcc area version {}",
                u32_at(&b, 8)
            )));
        }
        let layout = Self::plan(arena, u32_at(&b, 12), u64_at(&b, 16), u64_at(&b, 24))
            .map_err(|e| TxError::Corrupted(format!("mvcc header geometry: {e}")))?;
        if (u64_at(&b, 32), u64_at(&b, 40), u64_at(&b, 48))
            != (layout.lanes, layout.clog, layout.heap.offset)
        {
            return Err(TxError::Corrupted(
                "mvcc header geometry does not match the pool".into(),
            ));
        }
        for lane in 0..layout.lane_count as usize {
            let mut got = [0u8; LANE_HEADER_LEN as usize];
            pm.read(layout.lane(lane), &mut got);
            if got != layout.lane_header(lane) {
                return Err(TxError::Corrupted(format!(
                    "mvcc lane header {lane} at {:#x} is damaged",
                    layout.lane(lane)
                )));
            }
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_words_catch_every_single_bit_flip() {
        for (value, addr) in [(0, 64), (1, 4096), (checked::MAX_VALUE, 8)] {
            let word = checked::seal(value, addr);
            assert_eq!(checked::open(word, addr, "w").expect("valid"), value);
            assert!(checked::open(word, addr + 8, "w").is_err());
            for bit in 0..64 {
                assert!(checked::open(word ^ (1 << bit), addr, "w").is_err());
            }
        }
    }
}
