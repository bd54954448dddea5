//! The engine area of a pool (byte layout in `docs/tx-format.md`):
//!
//! ```text
//! arena start ─ engine header (64 B): magic, version, engine kind, lanes, lane size,
//!               lane and heap offsets, CRC-32
//!             ─ word at +64 (own cache line): redo's applied watermark
//!             ─ lanes (4 KiB aligned): `lane_count` × `lane_size` bytes of log
//!             ─ heap (the rest of the arena)
//! ```

use crate::api::TxError;
use pmem::checked;
use pmem::{Persist, Region, WriteClass};

/// Identifies a Ferrite transaction area.
pub const MAGIC: [u8; 8] = *b"FERRTXEN";
/// The MVCC engine's magic (`docs/mvcc-format.md` §2.1): its pools are `WrongEngine` here,
/// as undo and redo pools are there.
const MVCC_MAGIC: [u8; 8] = *b"FERRMVCC";
/// Format version of an undo area. Version 2 binds each undo entry's CRC to its position (and
/// comes with heap format 2); a version-1 area is refused as `Corrupted("unsupported undo
/// area version 1 …")`.
pub const UNDO_VERSION: u32 = 2;
/// Format version of a redo area. Version 3 is the compact record encoding (8-byte header
/// with the low 16 bits of the sequence number, 4-byte entry tags, records not padded to a
/// line); an older redo area is refused as `Corrupted("unsupported redo area version 2 …")`.
pub const REDO_VERSION: u32 = 3;
const HEADER_LEN: u64 = 64;
/// Offset of the watermark word from the arena start.
pub const WATERMARK_OFFSET: u64 = 64;
const LANES_ALIGN: u64 = 4096;

/// Which engine formatted the pool (their logs differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Undo logging.
    Undo = 1,
    /// Redo logging.
    Redo = 2,
}

impl EngineKind {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            EngineKind::Undo => "undo",
            EngineKind::Redo => "redo",
        }
    }

    /// The format version this build writes and reads for areas of this kind.
    pub const fn version(self) -> u32 {
        match self {
            EngineKind::Undo => UNDO_VERSION,
            EngineKind::Redo => REDO_VERSION,
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(EngineKind::Undo),
            2 => Some(EngineKind::Redo),
            _ => None,
        }
    }
}

/// The engine area's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineLayout {
    /// Engine that owns the pool.
    pub kind: EngineKind,
    /// Start of the arena (the engine header).
    pub base: u64,
    /// Number of lanes.
    pub lane_count: u32,
    /// Bytes per lane (a multiple of 4 KiB).
    pub lane_size: u64,
    /// Absolute offset of lane 0.
    pub lanes: u64,
    /// The heap's region.
    pub heap: Region,
}

impl EngineLayout {
    /// Plans the area for `kind` in `arena`.
    pub fn plan(
        kind: EngineKind,
        arena: Region,
        lane_count: u32,
        lane_size: u64,
    ) -> Result<Self, TxError> {
        let lane_size = lane_size
            .checked_next_multiple_of(LANES_ALIGN)
            .unwrap_or(u64::MAX);
        // Redo records store their length as a u32, so a lane stays below 4 GiB.
        if lane_count == 0 || lane_count > 1024 || lane_size == 0 || lane_size > u64::from(u32::MAX)
        {
            return Err(TxError::InvalidArgument(format!(
                "lanes must be 1..=1024, each of 1 byte to 4 GiB, got {lane_count} × {lane_size} bytes"
            )));
        }
        let lanes = (arena.offset + WATERMARK_OFFSET + 64).next_multiple_of(LANES_ALIGN);
        let heap_start = lanes + u64::from(lane_count) * lane_size;
        if heap_start + LANES_ALIGN > arena.end() {
            return Err(TxError::OutOfSpace {
                size: heap_start - arena.offset,
            });
        }
        let heap = Region {
            offset: heap_start,
            len: arena.end() - heap_start,
        };
        Ok(EngineLayout {
            kind,
            base: arena.offset,
            lane_count,
            lane_size,
            lanes,
            heap,
        })
    }

    /// Absolute offset of lane `lane`.
    pub fn lane(&self, lane: usize) -> u64 {
        self.lanes + lane as u64 * self.lane_size
    }

    /// Absolute offset of the watermark word.
    pub fn watermark(&self) -> u64 {
        self.base + WATERMARK_OFFSET
    }

    fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.kind.version().to_le_bytes());
        b[12..16].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.lane_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.lane_size.to_le_bytes());
        b[32..40].copy_from_slice(&self.lanes.to_le_bytes());
        b[40..48].copy_from_slice(&self.heap.offset.to_le_bytes());
        b[48..56].copy_from_slice(&self.heap.len.to_le_bytes());
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Writes the header (and a zero watermark) and persists them; the lanes must already
    /// be initialised by the engine.
    pub fn write<P: Persist>(&self, pm: &P) -> Result<(), TxError> {
        let header = self.encode();
        let watermark = checked::seal(0, self.watermark(), "engine watermark")?;
        pm.write_u64(self.watermark(), watermark, WriteClass::Meta);
        // Magic last, as for the pool header: an interrupted format is "not formatted".
        pm.write(self.base, &[0; 8], WriteClass::Meta);
        pm.write(self.base + 8, &header[8..], WriteClass::Meta);
        pm.persist(self.base, WATERMARK_OFFSET + 8);
        pm.write(self.base, &header[..8], WriteClass::Meta);
        pm.persist(self.base, 8);
        Ok(())
    }

    /// Reads and validates the header in `arena`, which must belong to `kind`.
    pub fn read<P: Persist>(pm: &P, arena: Region, kind: EngineKind) -> Result<Self, TxError> {
        let mut b = [0u8; HEADER_LEN as usize];
        pm.read(arena.offset, &mut b);
        if b[0..8] == MVCC_MAGIC {
            return Err(TxError::WrongEngine {
                expected: kind.name(),
                found: "mvcc",
            });
        }
        if b[0..8] != MAGIC {
            return Err(not_an_engine_magic("engine", &b[0..8]));
        }
        let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let (stored, computed) = (half(60), crc32fast::hash(&b[..60]));
        if stored != computed {
            return Err(TxError::Corrupted(format!(
                "engine header checksum mismatch (stored {stored:#x}, computed {computed:#x})"
            )));
        }
        let found = EngineKind::from_code(half(12))
            .ok_or_else(|| TxError::Corrupted(format!("unknown engine kind {}", half(12))))?;
        if found != kind {
            return Err(TxError::WrongEngine {
                expected: kind.name(),
                found: found.name(),
            });
        }
        if half(8) != kind.version() {
            return Err(TxError::Corrupted(format!(
                "unsupported {} area version {} (this build reads version {})",
                kind.name(),
                half(8),
                kind.version()
            )));
        }
        let layout = Self::plan(kind, arena, half(16), word(24))
            .map_err(|e| TxError::Corrupted(format!("engine header geometry: {e}")))?;
        let stored_layout = (word(32), word(40), word(48));
        if stored_layout != (layout.lanes, layout.heap.offset, layout.heap.len) {
            return Err(TxError::Corrupted(
                "engine header geometry does not match the pool".into(),
            ));
        }
        Ok(layout)
    }
}

/// Refuses to format `arena` over something: `create` takes a pool whose engine area starts
/// with the zeros [`pmem::Pool::create`] leaves (an interrupted format, which writes the magic
/// last, also reads as fresh). Any engine's magic, or any other bytes there, is
/// `AlreadyFormatted`, and nothing is written.
pub fn refuse_formatted<P: Persist>(pm: &P, arena: Region) -> Result<(), TxError> {
    let mut b = [0u8; HEADER_LEN as usize];
    pm.read(arena.offset, &mut b);
    let found = if b[0..8] == MVCC_MAGIC {
        "the mvcc engine's area"
    } else if b[0..8] == MAGIC {
        let code = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        match EngineKind::from_code(code) {
            Some(EngineKind::Undo) => "the undo engine's area",
            Some(EngineKind::Redo) => "the redo engine's area",
            None => "an engine header of an unknown kind",
        }
    } else if b[0..8].iter().any(|&byte| byte != 0) {
        "data no engine wrote (another program's, or a damaged engine header)"
    } else {
        return Ok(());
    };
    Err(TxError::AlreadyFormatted { found })
}

/// The error for an engine area whose magic (`magic`, its first 8 bytes) is not the
/// engine's: formats write the magic last, so zeros are a pool no engine formatted (or whose
/// format was interrupted), and anything else is a damaged header (`area` names it: "engine",
/// "mvcc").
pub fn not_an_engine_magic(area: &str, magic: &[u8]) -> TxError {
    TxError::Corrupted(if magic.iter().all(|&b| b == 0) {
        "no transaction area in this pool (not formatted by an engine)".into()
    } else {
        format!("{area} header damaged: its magic is {magic:02x?}, which no engine writes")
    })
}
