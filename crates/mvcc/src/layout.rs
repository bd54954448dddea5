//! The MVCC engine's area of a pool (byte layout in `docs/mvcc-format.md` §2):
//!
//! ```text
//! arena start ─ engine header (64 B): magic "FERRMVCC", version, lanes, log sizes,
//!               offsets, CRC-32
//!             ─ at +64 (own cache line): the write-back watermark, two 16-byte slots
//!               written alternately (the valid one with the larger sequence counts)
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
pub const VERSION: u32 = 4;
/// Bytes of the engine header.
pub const HEADER_LEN: u64 = 64;
/// Offset of the write-back watermark's two slots from the arena start.
pub const WATERMARK_OFFSET: u64 = 64;
/// Bytes of one watermark slot.
pub const WATERMARK_SLOT: u64 = 16;
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

/// The write-back watermark: every checkpoint at or before `value` is written back to the
/// masters. `seq` orders the two slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermark {
    /// Time of the newest written-back checkpoint.
    pub value: u64,
    /// Sequence number of the slot that holds it.
    pub seq: u32,
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
        let lanes = (arena.offset + WATERMARK_OFFSET + 2 * WATERMARK_SLOT).next_multiple_of(ALIGN);
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

    /// Absolute offset of watermark slot `slot` (0 or 1).
    pub fn watermark_slot(&self, slot: u32) -> u64 {
        self.base + WATERMARK_OFFSET + u64::from(slot % 2) * WATERMARK_SLOT
    }

    fn encode_watermark(&self, mark: Watermark) -> [u8; WATERMARK_SLOT as usize] {
        let at = self.watermark_slot(mark.seq);
        let mut b = [0u8; WATERMARK_SLOT as usize];
        b[0..8].copy_from_slice(&mark.value.to_le_bytes());
        b[8..12].copy_from_slice(&mark.seq.to_le_bytes());
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&b[..12]);
        hasher.update(&at.to_le_bytes());
        b[12..16].copy_from_slice(&hasher.finalize().to_le_bytes());
        b
    }

    /// The watermark: the intact slot with the larger sequence number (a slot torn by a
    /// crash fails its CRC, and the other one still holds the previous value).
    pub fn read_watermark<P: Persist>(&self, pm: &P) -> TxResult<Watermark> {
        let intact = (0..2).filter_map(|slot| {
            let mut b = [0u8; WATERMARK_SLOT as usize];
            pm.read(self.watermark_slot(slot), &mut b);
            let mark = Watermark {
                value: u64_at(&b, 0),
                seq: u32_at(&b, 8),
            };
            (mark.seq % 2 == slot && self.encode_watermark(mark) == b).then_some(mark)
        });
        // Sequence numbers wrap: the newer of two slots is the one the other is behind by
        // serial-number arithmetic (two slots hold consecutive numbers).
        intact
            .reduce(|a, b| {
                if (b.seq.wrapping_sub(a.seq) as i32) > 0 {
                    b
                } else {
                    a
                }
            })
            .ok_or_else(|| {
                TxError::Corrupted(format!(
                    "both mvcc write-back watermark slots at {:#x} are damaged",
                    self.watermark_slot(0)
                ))
            })
    }

    /// Persists `value` as the watermark after `current`, in the other slot.
    pub fn write_watermark<P: Persist>(&self, pm: &P, current: Watermark, value: u64) -> Watermark {
        let next = Watermark {
            value,
            seq: current.seq.wrapping_add(1),
        };
        let at = self.watermark_slot(next.seq);
        pm.write(at, &self.encode_watermark(next), WriteClass::Meta);
        pm.persist(at, WATERMARK_SLOT);
        next
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

    /// Writes the header (and a zero watermark in both slots) and persists them, magic last.
    pub fn write<P: Persist>(&self, pm: &P) {
        let header = self.encode();
        for seq in [0, 1] {
            let mark = Watermark { value: 0, seq };
            pm.write(
                self.watermark_slot(seq),
                &self.encode_watermark(mark),
                WriteClass::Meta,
            );
        }
        pm.write(self.base, &[0; 8], WriteClass::Meta);
        pm.write(self.base + 8, &header[8..], WriteClass::Meta);
        pm.persist(self.base, WATERMARK_OFFSET + 2 * WATERMARK_SLOT);
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
            return Err(tx::layout::not_an_engine_magic("mvcc", &b[0..8]));
        }
        let (stored, computed) = (u32_at(&b, 60), crc32fast::hash(&b[..60]));
        if stored != computed {
            return Err(TxError::Corrupted(format!(
                "mvcc header checksum mismatch (stored {stored:#x}, computed {computed:#x})"
            )));
        }
        if u32_at(&b, 8) != VERSION {
            return Err(TxError::Corrupted(format!(
                "unsupported mvcc area version {} (this build reads version {VERSION})",
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
    use crashsim::SimPm;

    fn layout() -> MvccLayout {
        let arena = Region {
            offset: 4096,
            len: 1 << 20,
        };
        MvccLayout::plan(arena, 2, 8192, 8192).expect("plan")
    }

    /// Zeros where the magic goes are an area no engine formatted; other bytes there are a
    /// damaged header, and the error says so.
    #[test]
    fn a_damaged_magic_is_not_called_unformatted() {
        let pm = SimPm::new(1 << 21, Default::default());
        let l = layout();
        let arena = Region {
            offset: 4096,
            len: 1 << 20,
        };
        let blank = MvccLayout::read(&pm, arena).expect_err("blank");
        assert!(blank.to_string().contains("not formatted"), "{blank}");
        l.write(&pm);
        let mut b = [0u8; 1];
        pm.read(arena.offset + 2, &mut b);
        pm.write(arena.offset + 2, &[b[0] ^ 1], WriteClass::Meta);
        let damaged = MvccLayout::read(&pm, arena).expect_err("damaged");
        assert!(
            matches!(damaged, TxError::Corrupted(_))
                && damaged.to_string().contains("damaged")
                && !damaged.to_string().contains("not formatted"),
            "{damaged}"
        );
    }

    #[test]
    fn the_watermark_survives_a_torn_slot_and_catches_every_bit_flip() {
        let pm = SimPm::new(1 << 21, Default::default());
        let l = layout();
        l.write(&pm);
        let zero = l.read_watermark(&pm).expect("fresh");
        assert_eq!(zero.value, 0);
        let one = l.write_watermark(&pm, zero, 1 << 62);
        assert_eq!(l.read_watermark(&pm).expect("written"), one);
        // A torn write of the next slot leaves the previous value readable.
        let at = l.watermark_slot(one.seq + 1);
        for byte in 0..WATERMARK_SLOT {
            let mut b = [0u8; 1];
            pm.read(at + byte, &mut b);
            pm.write(at + byte, &[b[0] ^ 0x10], WriteClass::Meta);
            assert_eq!(l.read_watermark(&pm).expect("other slot"), one);
            pm.write(at + byte, &b, WriteClass::Meta);
        }
        // Damage to both slots is an error, never a guess.
        for slot in [0, 1] {
            pm.write(l.watermark_slot(slot) + 3, &[0xAA], WriteClass::Meta);
        }
        assert!(l.read_watermark(&pm).is_err());
    }

    #[test]
    fn the_newer_watermark_wins_across_sequence_wrap() {
        let pm = SimPm::new(1 << 21, Default::default());
        let l = layout();
        l.write(&pm);
        let last = Watermark {
            value: 7,
            seq: u32::MAX - 1,
        };
        let mut mark = l.write_watermark(&pm, last, 8);
        for value in 9..12 {
            mark = l.write_watermark(&pm, mark, value);
            assert_eq!(l.read_watermark(&pm).expect("intact"), mark, "{mark:?}");
        }
        assert_eq!(mark.seq, 2, "wrapped");
    }

    /// A pool of the previous format (version 3: 32-byte operation records only) is refused
    /// by name, never read with the compact-record rules.
    #[test]
    fn an_older_format_is_a_typed_error_naming_both_versions() {
        let pm = SimPm::new(1 << 21, Default::default());
        let l = layout();
        l.format_logs(&pm);
        l.write(&pm);
        let arena = Region {
            offset: 4096,
            len: 1 << 20,
        };
        assert!(MvccLayout::read(&pm, arena).is_ok());
        let mut b = l.encode();
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        pm.write(l.base, &b, WriteClass::Meta);
        match MvccLayout::read(&pm, arena) {
            Err(TxError::Corrupted(message)) => assert!(
                message.contains("version 3") && message.contains("reads version 4"),
                "{message}"
            ),
            other => panic!("an old format opened: {other:?}"),
        }
    }
}
