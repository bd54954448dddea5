//! The heap's persistent format (byte layout in `docs/heap-format.md`).
//!
//! ```text
//! region start ─ header (64 B): magic, version, chunk shift, chunk count, offsets, CRC-32
//!              ─ descriptors: one u64 per chunk (FREE, RUN of a size class, LARGE span head)
//!              ─ chunks (the chunk area starts 4 KiB aligned), each `chunk_size` bytes:
//!                  RUN chunk:   [run marker][allocation bitmap, padded to 64 B]
//!                               [units of the class size]
//!                  LARGE span:  one object covering `span` chunks
//! ```
//!
//! A non-free descriptor carries a check byte (a CRC-7 of its chunk index and value, top bit
//! set): every single-bit flip of any descriptor is detected, and a random word passes about
//! once in 256 tries; `0` is FREE. A run's marker (its size class) and its bitmap words are
//! self-checked words (`pmem::checked`, bound to their offsets; 48 units per bitmap word), so
//! every single-bit flip of a bitmap is detected too, and a descriptor whose class or kind
//! was rewritten (with a valid check) disagrees with the marker of its chunk.

use crate::HeapError;
use pmem::checked;
use pmem::{Persist, Region, WriteClass};

/// Identifies a Ferrite heap.
pub const MAGIC: [u8; 8] = *b"FERRHEAP";
/// Format version. Version 1 had unchecked 64-unit bitmap words and no run marker; it is
/// refused (`Corrupted("unsupported heap version 1")`).
pub const VERSION: u32 = 2;
/// Bytes of the header.
pub const HEADER_LEN: u64 = 64;
/// Alignment of the chunk area.
pub const CHUNK_AREA_ALIGN: u64 = 4096;
/// Smallest chunk size exponent (4 KiB chunks).
pub const CHUNK_SHIFT_MIN: u32 = 12;
/// Largest chunk size exponent.
pub const CHUNK_SHIFT_MAX: u32 = 24;
/// Allocation unit sizes of small objects, in bytes (all multiples of 16).
pub const SIZE_CLASSES: [u64; 20] = [
    16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
    12288, 16384,
];
/// A class is used only if a run of it holds at least this many units.
pub const MIN_UNITS_PER_RUN: u64 = 8;

/// Units per bitmap word: the value bits of a checked word.
pub const UNITS_PER_WORD: u64 = pmem::checked::VALUE_BITS as u64;
/// Bytes before a run's bitmap: the run marker word.
pub const RUN_MARKER_LEN: u64 = 8;
/// The high 32 bits of a run marker's 48-bit value (`"FRUN"`); the low 16 hold the class.
const RUN_MAGIC: u64 = u32::from_le_bytes(*b"FRUN") as u64;
/// Names of the checked words in errors.
pub const MARKER_WORD: &str = "heap run marker";
/// Names of the checked words in errors.
pub const BITMAP_WORD: &str = "heap bitmap word";

/// The value of the run marker of a run of class `class`.
pub fn run_marker(class: u8) -> u64 {
    (RUN_MAGIC << 16) | u64::from(class)
}

/// The class a run marker value names, if it is one.
pub fn marker_class(value: u64) -> Option<u8> {
    (value >> 16 == RUN_MAGIC && value & 0xFF00 == 0).then_some(value as u8)
}

const KIND_RUN: u64 = 1;
const KIND_LARGE: u64 = 2;
const CHECK_SHIFT: u32 = 56;
const VALUE_MASK: u64 = (1 << CHECK_SHIFT) - 1;

/// What a chunk holds, as its descriptor says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Descriptor {
    /// Unused (or the body of a large span).
    Free,
    /// A run of units of size class `class`.
    Run {
        /// Index into [`SIZE_CLASSES`].
        class: u8,
    },
    /// The first chunk of a large object spanning `span` chunks.
    Large {
        /// Chunks in the span.
        span: u32,
    },
}

impl Descriptor {
    /// The descriptor word of chunk `chunk`.
    pub fn encode(self, chunk: u64) -> u64 {
        let value = match self {
            Descriptor::Free => return 0,
            Descriptor::Run { class } => KIND_RUN | (u64::from(class) << 8),
            Descriptor::Large { span } => KIND_LARGE | (u64::from(span) << 16),
        };
        (u64::from(check_byte(chunk, value)) << CHECK_SHIFT) | value
    }

    /// Decodes the descriptor word of chunk `chunk`.
    pub fn decode(word: u64, chunk: u64) -> Result<Self, HeapError> {
        if word == 0 {
            return Ok(Descriptor::Free);
        }
        let value = word & VALUE_MASK;
        if (word >> CHECK_SHIFT) as u8 != check_byte(chunk, value) {
            return Err(HeapError::Corrupted(format!(
                "descriptor of chunk {chunk} fails its check"
            )));
        }
        match value & 0xFF {
            KIND_RUN if value >> 16 == 0 => Ok(Descriptor::Run {
                class: (value >> 8) as u8,
            }),
            KIND_LARGE if value & 0xFF00 == 0 && value >> 48 == 0 => Ok(Descriptor::Large {
                span: (value >> 16) as u32,
            }),
            _ => Err(HeapError::Corrupted(format!(
                "descriptor of chunk {chunk} has kind {word:#x}"
            ))),
        }
    }
}

/// CRC-7 (polynomial x^7 + x^3 + 1, primitive) of (chunk, value) with the top bit set.
/// Chunk and value are 120 bits, shorter than the polynomial's period of 127, so every
/// single-bit error in them changes the check; the set top bit means a non-free descriptor
/// always has two bits set (this one and its kind), so no single flip turns it into FREE (0)
/// and no single flip of FREE decodes as something else.
fn check_byte(chunk: u64, value: u64) -> u8 {
    let bytes = chunk
        .to_le_bytes()
        .into_iter()
        .chain(value.to_le_bytes().into_iter().take(7));
    let mut crc: u8 = 0;
    for byte in bytes {
        for bit in (0..8).rev() {
            let feedback = ((byte >> bit) ^ (crc >> 6)) & 1;
            crc = (crc << 1) & 0x7F;
            if feedback == 1 {
                crc ^= 0x09;
            }
        }
    }
    crc | 0x80
}

/// The geometry of one heap, derived from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Where the heap's region starts (the header).
    pub start: u64,
    /// log2 of the chunk size.
    pub chunk_shift: u32,
    /// Number of chunks.
    pub chunk_count: u64,
    /// Absolute offset of the descriptor array.
    pub descriptors: u64,
    /// Absolute offset of chunk 0.
    pub chunks: u64,
}

/// Where a run's bitmap and units are, for one size class and chunk size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunGeometry {
    /// Unit size.
    pub unit: u64,
    /// Units in the run.
    pub units: u64,
    /// Bitmap words (after the run marker).
    pub bitmap_words: u64,
    /// Offset of unit 0 from the chunk start (marker and bitmap bytes rounded up to 64).
    pub data_offset: u64,
}

impl Layout {
    /// The geometry for a heap in `region` with chunks of `1 << chunk_shift` bytes.
    pub fn plan(region: Region, chunk_shift: u32) -> Result<Self, HeapError> {
        if !(CHUNK_SHIFT_MIN..=CHUNK_SHIFT_MAX).contains(&chunk_shift) {
            return Err(HeapError::InvalidArgument(format!(
                "chunk size 2^{chunk_shift} out of range"
            )));
        }
        let chunk = 1u64 << chunk_shift;
        let descriptors = region.offset + HEADER_LEN;
        // Each chunk costs its size plus an 8-byte descriptor.
        let usable = region.len.saturating_sub(HEADER_LEN + CHUNK_AREA_ALIGN);
        let mut chunk_count = usable / (chunk + 8);
        let chunks_at = |count: u64| (descriptors + 8 * count).next_multiple_of(CHUNK_AREA_ALIGN);
        while chunk_count > 0 && chunks_at(chunk_count) + chunk_count * chunk > region.end() {
            chunk_count -= 1;
        }
        if chunk_count == 0 {
            return Err(HeapError::InvalidArgument(format!(
                "region of {} bytes cannot hold one {chunk}-byte chunk",
                region.len
            )));
        }
        let start = region.offset;
        Ok(Layout {
            start,
            chunk_shift,
            chunk_count,
            descriptors,
            chunks: chunks_at(chunk_count),
        })
    }

    /// Chunk size in bytes.
    pub fn chunk_size(&self) -> u64 {
        1 << self.chunk_shift
    }

    /// Absolute offset of chunk `chunk`.
    pub fn chunk_start(&self, chunk: u64) -> u64 {
        self.chunks + (chunk << self.chunk_shift)
    }

    /// Absolute offset of chunk `chunk`'s descriptor.
    pub fn descriptor_at(&self, chunk: u64) -> u64 {
        self.descriptors + 8 * chunk
    }

    /// Absolute offset of bitmap word `word` of the run in chunk `chunk`.
    pub fn bitmap_word_at(&self, chunk: u64, word: u64) -> u64 {
        self.chunk_start(chunk) + RUN_MARKER_LEN + 8 * word
    }

    /// One past the last byte of the heap's chunks.
    pub fn end(&self) -> u64 {
        self.chunk_start(self.chunk_count)
    }

    /// The chunk containing `addr`, if it is inside the chunk area.
    pub fn chunk_of(&self, addr: u64) -> Option<u64> {
        (addr >= self.chunks && addr < self.end()).then(|| (addr - self.chunks) >> self.chunk_shift)
    }

    /// Run geometry of class `class`, or `None` if runs of it would hold too few units.
    pub fn run_geometry(&self, class: usize) -> Option<RunGeometry> {
        let unit = *SIZE_CLASSES.get(class)?;
        let chunk = self.chunk_size();
        let mut units = chunk / unit;
        loop {
            let bitmap_words = units.div_ceil(UNITS_PER_WORD);
            let data_offset = (RUN_MARKER_LEN + 8 * bitmap_words).next_multiple_of(64);
            if data_offset + units * unit <= chunk {
                return (units >= MIN_UNITS_PER_RUN).then_some(RunGeometry {
                    unit,
                    units,
                    bitmap_words,
                    data_offset,
                });
            }
            units -= 1;
        }
    }

    /// The smallest usable class that fits `size`, or `None` for a large allocation.
    pub fn class_for(&self, size: u64) -> Option<usize> {
        (0..SIZE_CLASSES.len())
            .find(|&class| SIZE_CLASSES[class] >= size && self.run_geometry(class).is_some())
    }

    fn encode_header(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.chunk_shift.to_le_bytes());
        b[16..24].copy_from_slice(&self.chunk_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.descriptors.to_le_bytes());
        b[32..40].copy_from_slice(&self.chunks.to_le_bytes());
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Writes a fresh heap (all chunks free) into `region` and persists it. The region may
    /// hold an old heap: its header is invalidated first and persisted, and the new header
    /// last, so an interrupted format leaves no valid heap (not an old header over half-cleared
    /// metadata).
    pub fn format<P: Persist>(pm: &P, region: Region, chunk_shift: u32) -> Result<Self, HeapError> {
        let layout = Self::plan(region, chunk_shift)?;
        pm.fill(layout.start, HEADER_LEN, 0, WriteClass::Meta);
        pm.persist(layout.start, HEADER_LEN);
        pm.fill(
            layout.descriptors,
            8 * layout.chunk_count,
            0,
            WriteClass::Meta,
        );
        pm.flush(layout.descriptors, 8 * layout.chunk_count);
        // A run marker left by an old heap over a FREE chunk reads, with its bitmap, as a run
        // whose descriptor was lost, and rebuild refuses the heap: clear every valid marker
        // (only those, so formatting a fresh, zeroed region writes no chunk).
        let marked = (0..layout.chunk_count).filter(|&chunk| layout.has_marker(pm, chunk));
        layout.clear_markers(pm, marked);
        pm.fence();
        pm.write(layout.start, &layout.encode_header(), WriteClass::Meta);
        pm.persist(layout.start, HEADER_LEN);
        Ok(layout)
    }

    /// Whether the first word of `chunk` is a valid run marker.
    pub(crate) fn has_marker<P: Persist>(&self, pm: &P, chunk: u64) -> bool {
        let at = self.chunk_start(chunk);
        checked::open(pm.read_u64(at), at, MARKER_WORD)
            .ok()
            .and_then(marker_class)
            .is_some()
    }

    /// Zeroes and flushes the first word of each of `chunks` (chunks that hold no block: a
    /// zeroed word is never a marker). The caller fences.
    pub(crate) fn clear_markers<P: Persist>(&self, pm: &P, chunks: impl IntoIterator<Item = u64>) {
        for chunk in chunks {
            let at = self.chunk_start(chunk);
            pm.write_u64(at, 0, WriteClass::Meta);
            pm.flush(at, 8);
        }
    }

    /// Reads and validates the header of the heap at `region`.
    pub fn read<P: Persist>(pm: &P, region: Region) -> Result<Self, HeapError> {
        if region.len < HEADER_LEN || !pm.check_range(region.offset, region.len) {
            return Err(HeapError::Corrupted("heap region out of the pool".into()));
        }
        let mut b = [0u8; HEADER_LEN as usize];
        pm.read(region.offset, &mut b);
        if b[0..8] != MAGIC {
            return Err(HeapError::Corrupted("heap magic missing".into()));
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let half = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let (stored, computed) = (half(60), crc32fast::hash(&b[..60]));
        if stored != computed {
            return Err(HeapError::Corrupted(format!(
                "heap header checksum mismatch (stored {stored:#x}, computed {computed:#x})"
            )));
        }
        if half(8) != VERSION {
            return Err(HeapError::Corrupted(format!(
                "unsupported heap version {}",
                half(8)
            )));
        }
        // The shift comes from the media: a checksummed header whose shift no heap of this
        // region can have is damage (or another format), not a bad argument of the caller.
        let expected = Self::plan(region, half(12)).map_err(|error| match error {
            HeapError::InvalidArgument(text) => {
                HeapError::Corrupted(format!("heap header geometry: {text}"))
            }
            other => other,
        })?;
        let found = Layout {
            start: region.offset,
            chunk_shift: half(12),
            chunk_count: word(16),
            descriptors: word(24),
            chunks: word(32),
        };
        if found != expected {
            return Err(HeapError::Corrupted(
                "heap geometry does not match its region".into(),
            ));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout::plan(
            Region {
                offset: 8192,
                len: 1 << 20,
            },
            14,
        )
        .expect("plan")
    }

    #[test]
    fn plan_fits_the_region() {
        let l = layout();
        assert!(l.end() <= 8192 + (1 << 20));
        assert!(l.chunks >= l.descriptors + 8 * l.chunk_count);
        assert_eq!(l.chunks % CHUNK_AREA_ALIGN, 0);
    }

    #[test]
    fn run_geometry_fits_in_a_chunk() {
        let l = layout();
        for class in 0..SIZE_CLASSES.len() {
            if let Some(g) = l.run_geometry(class) {
                assert!(g.data_offset + g.units * g.unit <= l.chunk_size());
                assert!(g.bitmap_words * UNITS_PER_WORD >= g.units);
                assert!(g.data_offset >= RUN_MARKER_LEN + 8 * g.bitmap_words);
            }
        }
        assert_eq!(l.class_for(1), Some(0));
        assert_eq!(l.class_for(64), Some(3));
        assert_eq!(l.class_for(1 << 14), None, "a chunk-sized object is large");
    }

    #[test]
    fn descriptors_round_trip_and_detect_garbage() {
        for (chunk, d) in [
            (0, Descriptor::Free),
            (3, Descriptor::Run { class: 5 }),
            (9, Descriptor::Large { span: 7 }),
        ] {
            assert_eq!(
                Descriptor::decode(d.encode(chunk), chunk).expect("decodes"),
                d
            );
        }
        let word = Descriptor::Run { class: 5 }.encode(3);
        assert!(
            Descriptor::decode(word, 4).is_err(),
            "a descriptor is bound to its chunk"
        );
    }

    #[test]
    fn every_single_bit_flip_of_every_descriptor_kind_is_detected() {
        // Including the smallest run class, whose value is a single bit, and FREE (0).
        for chunk in 0..512 {
            let kinds = [
                Descriptor::Free,
                Descriptor::Run { class: 0 },
                Descriptor::Large { span: 1 },
            ];
            for descriptor in kinds {
                let word = descriptor.encode(chunk);
                for bit in 0..64 {
                    assert!(
                        Descriptor::decode(word ^ (1 << bit), chunk).is_err_or(descriptor),
                        "flip of bit {bit} of {descriptor:?} at chunk {chunk} went unnoticed"
                    );
                }
            }
        }
    }

    trait ErrOr {
        fn is_err_or(&self, original: Descriptor) -> bool;
    }

    impl ErrOr for Result<Descriptor, HeapError> {
        /// A flip is caught if decoding fails; it would be silent only if it decoded to a
        /// different descriptor (it can never decode to the same one).
        fn is_err_or(&self, original: Descriptor) -> bool {
            match self {
                Err(_) => true,
                Ok(decoded) => *decoded == original,
            }
        }
    }
}
