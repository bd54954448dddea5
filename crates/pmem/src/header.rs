//! The on-media pool header (byte layout in `docs/pool-format.md`).
//!
//! The header is split by mutability:
//! - a block of [`HEADER_LEN`] bytes, written at creation (and rewritten only from its
//!   byte-identical copy at [`COPY_OFFSET`], when one of the two is damaged) and protected by
//!   a CRC-32; any flipped bit in it is detected;
//! - one mutable 8-byte *state word* on its own cache line, holding the flags and a CRC-32 of
//!   them. Updating it is a single aligned 8-byte store, which is failure-atomic, so a header
//!   update can never be torn.
//!
//! Invariants kept by every format version (so that version checks work on future pools):
//! the magic is at 0, the version at 8, the checksummed length at 12, and the CRC-32 is in the
//! last 4 bytes of the checksummed block.

use crate::error::PoolError;

/// Identifies a Ferrite pool. Written last at creation, so an interrupted creation leaves a
/// file without it.
pub const MAGIC: [u8; 8] = *b"FERRPOOL";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Length of the immutable, checksummed header block.
pub const HEADER_LEN: usize = 256;
/// Offset of the mutable state word (its own cache line).
pub const STATE_OFFSET: u64 = 256;
/// Bytes reserved at the start of the pool for the header.
pub const HEADER_AREA: u64 = 4096;
/// Smallest pool: header area, one root page and some arena.
pub const MIN_POOL_SIZE: u64 = 32 * 1024;
/// Longest layout name in bytes (the field keeps a terminating NUL).
pub const LAYOUT_MAX: usize = 63;
/// Alignment of the root region and the arena.
pub const REGION_ALIGN: u64 = 4096;

/// State flag: the pool was closed cleanly (no crash since the last close).
pub const FLAG_CLEAN: u32 = 1 << 0;
/// Offset of the header's copy in the header area (cache lines 32–35): byte-identical to the
/// header, written with it at creation, read when the header itself is damaged.
pub const COPY_OFFSET: u64 = 0x800;
/// Compat feature bit: the header area holds the header's copy at [`COPY_OFFSET`]. Pools
/// made before the copy existed lack the bit (and the copy); readers that do not know the
/// bit ignore the copy, which is what a compat feature allows.
pub const COMPAT_HEADER_COPY: u32 = 1 << 0;
const KNOWN_FLAGS: u32 = FLAG_CLEAN;
/// Incompatible feature bits this build understands (none yet).
const KNOWN_INCOMPAT: u32 = 0;

mod at {
    pub const MAGIC: usize = 0x00;
    pub const VERSION: usize = 0x08;
    pub const HEADER_LEN: usize = 0x0C;
    pub const UUID: usize = 0x10;
    pub const POOL_SIZE: usize = 0x20;
    pub const CREATED: usize = 0x28;
    pub const ROOT_OFF: usize = 0x30;
    pub const ROOT_SIZE: usize = 0x38;
    pub const ARENA_OFF: usize = 0x40;
    pub const ARENA_SIZE: usize = 0x48;
    pub const INCOMPAT: usize = 0x50;
    pub const COMPAT: usize = 0x54;
    pub const LAYOUT: usize = 0x58;
    pub const LAYOUT_END: usize = LAYOUT + super::LAYOUT_MAX + 1;
    pub const CHECKSUM: usize = super::HEADER_LEN - 4;
}
const _: () = assert!(at::LAYOUT_END <= at::CHECKSUM);
const _: () = assert!(STATE_OFFSET as usize >= HEADER_LEN && STATE_OFFSET.is_multiple_of(64));

/// The decoded immutable header.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Pool identity, checked by persistent pointers.
    pub uuid: [u8; 16],
    /// Total pool size in bytes.
    pub pool_size: u64,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// Offset of the application's root region.
    pub root_offset: u64,
    /// Size of the root region.
    pub root_size: u64,
    /// Offset of the arena (everything after the root, for upper layers to lay out).
    pub arena_offset: u64,
    /// Size of the arena.
    pub arena_size: u64,
    /// Compatible feature bits (informational).
    pub compat_features: u32,
    /// The application's layout name.
    pub layout: String,
}

impl Header {
    /// A header for a new pool of `pool_size` bytes with a root region of `root_size` bytes.
    pub fn new(layout: &str, pool_size: u64, root_size: u64) -> Result<Self, PoolError> {
        validate_layout_name(layout)?;
        if pool_size < MIN_POOL_SIZE || !pool_size.is_multiple_of(REGION_ALIGN) {
            return Err(PoolError::InvalidArgument(format!(
                "pool size {pool_size} must be a multiple of {REGION_ALIGN} bytes and at least {MIN_POOL_SIZE}"
            )));
        }
        let arena_offset = root_size
            .max(1)
            .checked_next_multiple_of(REGION_ALIGN)
            .and_then(|root| root.checked_add(HEADER_AREA))
            .filter(|&arena| {
                arena
                    .checked_add(REGION_ALIGN)
                    .is_some_and(|end| end <= pool_size)
            });
        let Some(arena_offset) = arena_offset else {
            return Err(PoolError::InvalidArgument(format!(
                "root region of {root_size} bytes does not fit a pool of {pool_size} bytes"
            )));
        };
        let root_size = arena_offset - HEADER_AREA;
        let created_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Header {
            version: FORMAT_VERSION,
            uuid: *uuid::Uuid::new_v4().as_bytes(),
            pool_size,
            created_unix_ns,
            root_offset: HEADER_AREA,
            root_size,
            arena_offset,
            arena_size: pool_size - arena_offset,
            compat_features: COMPAT_HEADER_COPY,
            layout: layout.to_owned(),
        })
    }

    /// The header's bytes, magic and checksum included.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&MAGIC);
        put_u32(&mut b, at::VERSION, self.version);
        put_u32(&mut b, at::HEADER_LEN, HEADER_LEN as u32);
        b[at::UUID..at::UUID + 16].copy_from_slice(&self.uuid);
        put_u64(&mut b, at::POOL_SIZE, self.pool_size);
        put_u64(&mut b, at::CREATED, self.created_unix_ns);
        put_u64(&mut b, at::ROOT_OFF, self.root_offset);
        put_u64(&mut b, at::ROOT_SIZE, self.root_size);
        put_u64(&mut b, at::ARENA_OFF, self.arena_offset);
        put_u64(&mut b, at::ARENA_SIZE, self.arena_size);
        put_u32(&mut b, at::INCOMPAT, 0);
        put_u32(&mut b, at::COMPAT, self.compat_features);
        b[at::LAYOUT..at::LAYOUT + self.layout.len()].copy_from_slice(self.layout.as_bytes());
        let crc = crc32fast::hash(&b[..at::CHECKSUM]);
        put_u32(&mut b, at::CHECKSUM, crc);
        b
    }

    /// Decodes and validates a header from the first bytes of a pool (at least
    /// [`HEADER_LEN`] bytes). Order of checks: magic, length, checksum, version, fields.
    pub fn decode(bytes: &[u8]) -> Result<Self, PoolError> {
        if bytes.len() < at::MAGIC + 8 || bytes[..8] != MAGIC {
            let reason = if bytes.iter().take(8).all(|&b| b == 0) {
                "no magic; empty file or an interrupted creation"
            } else {
                BAD_MAGIC
            };
            return Err(PoolError::NotAPool { reason });
        }
        if bytes.len() < HEADER_LEN {
            // The pool size field cannot be verified (the checksum is past the end) but it
            // is what the creator recorded; without it, at least the header is missing.
            let recorded = (bytes.len() >= at::POOL_SIZE + 8)
                .then(|| get_u64(bytes, at::POOL_SIZE))
                .filter(|&size| size > bytes.len() as u64);
            return Err(PoolError::Truncated {
                actual: bytes.len() as u64,
                expected: recorded.unwrap_or(HEADER_LEN as u64),
            });
        }
        let header_len = get_u32(bytes, at::HEADER_LEN) as usize;
        if !(16..=HEADER_AREA as usize).contains(&header_len) || header_len > bytes.len() {
            return Err(PoolError::Corrupted(format!(
                "header length {header_len} out of range"
            )));
        }
        let stored = get_u32(bytes, header_len - 4);
        let computed = crc32fast::hash(&bytes[..header_len - 4]);
        if stored != computed {
            return Err(PoolError::ChecksumMismatch {
                what: "pool header",
                stored,
                computed,
            });
        }
        let version = get_u32(bytes, at::VERSION);
        if version != FORMAT_VERSION {
            return Err(PoolError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if header_len != HEADER_LEN {
            return Err(PoolError::Corrupted(format!(
                "a version {version} header is {HEADER_LEN} bytes, this one records {header_len}"
            )));
        }
        let incompat = get_u32(bytes, at::INCOMPAT);
        if incompat & !KNOWN_INCOMPAT != 0 {
            return Err(PoolError::UnsupportedFeatures {
                bits: incompat & !KNOWN_INCOMPAT,
            });
        }
        let header = Header {
            version,
            uuid: bytes[at::UUID..at::UUID + 16]
                .try_into()
                .expect("16-byte slice"),
            pool_size: get_u64(bytes, at::POOL_SIZE),
            created_unix_ns: get_u64(bytes, at::CREATED),
            root_offset: get_u64(bytes, at::ROOT_OFF),
            root_size: get_u64(bytes, at::ROOT_SIZE),
            arena_offset: get_u64(bytes, at::ARENA_OFF),
            arena_size: get_u64(bytes, at::ARENA_SIZE),
            compat_features: get_u32(bytes, at::COMPAT),
            layout: decode_layout(&bytes[at::LAYOUT..at::LAYOUT_END])?,
        };
        header.check_geometry()?;
        Ok(header)
    }

    /// Checks that the regions tile the pool as the format requires.
    fn check_geometry(&self) -> Result<(), PoolError> {
        let fail = |what: &str| Err(PoolError::Corrupted(what.to_owned()));
        if self.pool_size < MIN_POOL_SIZE || !self.pool_size.is_multiple_of(REGION_ALIGN) {
            return fail("pool size below the minimum or not a multiple of 4 KiB");
        }
        if self.root_offset != HEADER_AREA || !self.root_size.is_multiple_of(REGION_ALIGN) {
            return fail("root region misplaced");
        }
        if self.root_offset.checked_add(self.root_size) != Some(self.arena_offset) {
            return fail("arena does not follow the root region");
        }
        if self.arena_offset.checked_add(self.arena_size) != Some(self.pool_size)
            || self.arena_size == 0
        {
            return fail("arena does not end at the pool size");
        }
        Ok(())
    }

    /// The UUID in canonical text form.
    pub fn uuid_string(&self) -> String {
        uuid::Uuid::from_bytes(self.uuid).hyphenated().to_string()
    }
}

/// A header read from a header area, and the damage of the header itself when it was read
/// from the copy.
#[derive(Debug)]
pub struct AreaHeader {
    /// The valid header: the header itself, or its copy.
    pub header: Header,
    /// Why the header itself was not used (`None`: it was).
    pub primary_damage: Option<PoolError>,
    /// The header itself was used, and its copy differs from it (the copy is damaged).
    pub copy_damaged: bool,
}

/// Decodes the header at the start of `area` (the header area's bytes, or fewer), falling
/// back to its copy at [`COPY_OFFSET`] when the header is damaged: its checksum fails, its
/// fields are inconsistent, or its magic is wrong but not zero. A zero magic (an empty file,
/// an interrupted creation or re-format) is never taken over by the copy, nor are a truncated
/// area, an unknown version or unknown features. The copy must itself decode, carry
/// [`COMPAT_HEADER_COPY`], and be the header of this pool's state word (the word's check,
/// bound to the pool's UUID, passes under the copy's UUID): a damaged header and a damaged
/// state word at once, a file overwritten from its start, or a copy a re-format by another
/// writer left behind are refused with the header's own error.
pub fn decode_area(area: &[u8]) -> Result<AreaHeader, PoolError> {
    let copy_at = COPY_OFFSET as usize..COPY_OFFSET as usize + HEADER_LEN;
    let damage = match Header::decode(area) {
        Ok(header) => {
            let copy_damaged = header.compat_features & COMPAT_HEADER_COPY != 0
                && area
                    .get(copy_at)
                    .is_some_and(|copy| copy != &area[..HEADER_LEN]);
            return Ok(AreaHeader {
                header,
                primary_damage: None,
                copy_damaged,
            });
        }
        Err(error) => error,
    };
    let copy_may_stand_in = matches!(
        damage,
        PoolError::ChecksumMismatch { .. }
            | PoolError::Corrupted(_)
            | PoolError::NotAPool { reason: BAD_MAGIC }
    );
    let state = area
        .get(STATE_OFFSET as usize..STATE_OFFSET as usize + 8)
        .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")));
    let copy = area
        .get(copy_at)
        .filter(|_| copy_may_stand_in)
        .and_then(|bytes| Header::decode(bytes).ok())
        .filter(|copy| copy.compat_features & COMPAT_HEADER_COPY != 0)
        .filter(|copy| state.is_some_and(|word| decode_state(word, &copy.uuid).is_ok()));
    match copy {
        Some(header) => Ok(AreaHeader {
            header,
            primary_damage: Some(damage),
            copy_damaged: false,
        }),
        None => Err(damage),
    }
}

/// `NotAPool`'s reason for a magic that is neither ours nor zero.
const BAD_MAGIC: &str = "bad magic";

/// Encodes the mutable state word: flags in the low half, CRC-32 of (flags, uuid) in the
/// high half.
pub fn encode_state(flags: u32, uuid: &[u8; 16]) -> u64 {
    (u64::from(state_check(flags, uuid)) << 32) | u64::from(flags)
}

/// Decodes the state word, verifying its check value.
pub fn decode_state(word: u64, uuid: &[u8; 16]) -> Result<u32, PoolError> {
    let flags = word as u32;
    let stored = (word >> 32) as u32;
    let computed = state_check(flags, uuid);
    if stored != computed {
        return Err(PoolError::ChecksumMismatch {
            what: "pool state word",
            stored,
            computed,
        });
    }
    if flags & !KNOWN_FLAGS != 0 {
        return Err(PoolError::Corrupted(format!(
            "unknown state flags {flags:#x}"
        )));
    }
    Ok(flags)
}

fn state_check(flags: u32, uuid: &[u8; 16]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&flags.to_le_bytes());
    hasher.update(uuid);
    hasher.finalize()
}

/// Checks a layout name: 1 to 63 bytes of UTF-8 without NUL.
pub fn validate_layout_name(layout: &str) -> Result<(), PoolError> {
    if layout.is_empty() || layout.len() > LAYOUT_MAX || layout.contains('\0') {
        return Err(PoolError::InvalidArgument(format!(
            "layout name must be 1..={LAYOUT_MAX} bytes without NUL, got {layout:?}"
        )));
    }
    Ok(())
}

fn decode_layout(field: &[u8]) -> Result<String, PoolError> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    if end == field.len() || field[end..].iter().any(|&b| b != 0) || end == 0 {
        return Err(PoolError::Corrupted("layout name not NUL-padded".into()));
    }
    String::from_utf8(field[..end].to_vec())
        .map_err(|_| PoolError::Corrupted("layout name is not UTF-8".into()))
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4-byte slice"))
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8-byte slice"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Header {
        Header::new("ferrite-test", 1 << 20, 4096).expect("valid header")
    }

    /// A header area as a clean close leaves it: header, state word, copy.
    fn sample_area() -> Vec<u8> {
        let header = sample();
        let mut area = vec![0u8; HEADER_AREA as usize];
        area[..HEADER_LEN].copy_from_slice(&header.encode());
        let copy = COPY_OFFSET as usize;
        area[copy..copy + HEADER_LEN].copy_from_slice(&header.encode());
        put_u64(
            &mut area,
            STATE_OFFSET as usize,
            encode_state(FLAG_CLEAN, &header.uuid),
        );
        area
    }

    #[test]
    fn round_trips() {
        let header = sample();
        assert_eq!(Header::decode(&header.encode()).expect("decodes"), header);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let bytes = sample().encode();
        for bit in 0..HEADER_LEN * 8 {
            let mut corrupt = bytes;
            corrupt[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Header::decode(&corrupt).is_err(),
                "flip of bit {bit} went unnoticed"
            );
        }
    }

    #[test]
    fn zeroed_magic_reads_as_interrupted_creation() {
        let mut bytes = sample().encode();
        bytes[..8].fill(0);
        assert!(matches!(
            Header::decode(&bytes),
            Err(PoolError::NotAPool { .. })
        ));
    }

    #[test]
    fn future_version_with_valid_checksum_is_unsupported_not_corrupt() {
        let mut bytes = sample().encode();
        put_u32(&mut bytes, at::VERSION, 2);
        let crc = crc32fast::hash(&bytes[..at::CHECKSUM]);
        put_u32(&mut bytes, at::CHECKSUM, crc);
        assert!(matches!(
            Header::decode(&bytes),
            Err(PoolError::UnsupportedVersion { found: 2, .. })
        ));
    }

    #[test]
    fn a_version_1_header_of_another_length_is_corrupt_not_unsupported() {
        // A 512-byte block with a valid CRC at its end: version 1 defines 256 bytes.
        let mut area = vec![0u8; HEADER_AREA as usize];
        area[..HEADER_LEN].copy_from_slice(&sample().encode());
        put_u32(&mut area, at::HEADER_LEN, 512);
        let crc = crc32fast::hash(&area[..508]);
        put_u32(&mut area, 508, crc);
        let error = Header::decode(&area).expect_err("length 512");
        assert!(matches!(error, PoolError::Corrupted(_)), "{error:?}");
        assert_eq!(error.exit_code(), 14);
    }

    #[test]
    fn inconsistent_geometry_with_valid_checksum_is_corrupt() {
        let mut header = sample();
        header.arena_size += 4096;
        assert!(matches!(
            Header::decode(&header.encode()),
            Err(PoolError::Corrupted(_))
        ));
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(Header::new("", 1 << 20, 4096).is_err());
        assert!(Header::new(&"x".repeat(64), 1 << 20, 4096).is_err());
        assert!(Header::new("ok", 1024, 4096).is_err());
        assert!(Header::new("ok", 1 << 20, 1 << 20).is_err());
        assert!(
            Header::new("ok", (1 << 20) + 3, 4096).is_err(),
            "sizes are whole pages"
        );
        assert!(
            Header::new("ok", 1 << 20, u64::MAX - 10).is_err(),
            "no overflow"
        );
    }

    #[test]
    fn state_word_detects_corruption() {
        let uuid = sample().uuid;
        let word = encode_state(FLAG_CLEAN, &uuid);
        assert_eq!(decode_state(word, &uuid).expect("valid"), FLAG_CLEAN);
        for bit in 0..64 {
            assert!(decode_state(word ^ (1 << bit), &uuid).is_err(), "bit {bit}");
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Header::decode(&bytes);
        }

        #[test]
        fn decode_area_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = decode_area(&bytes);
        }

        /// Random bytes written anywhere in a valid header area (header, state word, copy,
        /// unused bytes), and areas cut short: decoding gives a header or a typed error.
        #[test]
        fn decode_area_never_panics_on_mutated_areas(
            flips in proptest::collection::vec((0usize..HEADER_AREA as usize, any::<u8>()), 1..12),
            cut in 0usize..=HEADER_AREA as usize,
        ) {
            let mut area = sample_area();
            for (at, value) in flips {
                area[at] = value;
            }
            let _ = decode_area(&area);
            let _ = decode_area(&area[..cut]);
        }

        /// What the checksums cover, byte for byte (docs/pool-format.md §1, §4): bytes outside
        /// the header, its copy and the state word are covered by nothing, and changing them
        /// never changes what the area decodes to.
        #[test]
        fn bytes_outside_header_copy_and_state_word_are_not_covered(
            flips in proptest::collection::vec((0usize..HEADER_AREA as usize, any::<u8>()), 1..12),
        ) {
            let mut area = sample_area();
            let expected = decode_area(&area).expect("valid").header;
            let covered = |at: usize| {
                at < HEADER_LEN
                    || (STATE_OFFSET as usize..STATE_OFFSET as usize + 8).contains(&at)
                    || (COPY_OFFSET as usize..COPY_OFFSET as usize + HEADER_LEN).contains(&at)
            };
            for (at, value) in flips.into_iter().filter(|&(at, _)| !covered(at)) {
                area[at] = value;
            }
            let decoded = decode_area(&area).expect("still valid");
            prop_assert_eq!(&decoded.header, &expected);
            prop_assert!(decoded.primary_damage.is_none() && !decoded.copy_damaged);
            let state = decode_state(get_u64(&area, STATE_OFFSET as usize), &decoded.header.uuid);
            prop_assert_eq!(state.ok(), Some(FLAG_CLEAN));
        }

        #[test]
        fn decode_never_panics_on_mutated_headers(flips in proptest::collection::vec((0usize..HEADER_LEN, any::<u8>()), 1..8)) {
            let mut bytes = sample().encode();
            for (at, value) in flips {
                bytes[at] = value;
            }
            let _ = Header::decode(&bytes);
        }
    }
}
