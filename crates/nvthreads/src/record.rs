//! Redo-log records: encoding and validation (`docs/nvthreads.md` §4.3).
//!
//! A record holds the byte runs one merge wrote to the shared heap, tagged with the log lap
//! and the epoch it belongs to:
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `"NVTR"` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | header length (32) |
//! | 8 | 8 | lap (the checkpoint generation the record was written in) |
//! | 16 | 8 | epoch (the commit point that makes it durable) |
//! | 24 | 4 | body length in bytes (a multiple of 8) |
//! | 28 | 4 | CRC-32 of bytes `0..28` followed by the body |
//!
//! The body is a sequence of entries: heap offset (`u64`), length (`u32`), reserved `u32`
//! (zero), then the bytes, zero-padded to a multiple of 8. The whole record is padded with
//! zeros to a multiple of 64 bytes (not covered by the CRC), so every record starts on a
//! cache line. All integers are little-endian.

#![forbid(unsafe_code)]

use crate::error::NvtError;

/// Record magic.
pub const MAGIC: [u8; 4] = *b"NVTR";
/// Record format version.
pub const VERSION: u16 = 1;
/// Header length.
pub const HEADER_LEN: u64 = 32;
/// Entry header length (offset, length, reserved).
pub const ENTRY_HEADER_LEN: u64 = 16;
/// Records start on cache lines.
pub const RECORD_ALIGN: u64 = 64;

/// One byte run of a record: `bytes` go to heap offset `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run<'a> {
    /// Offset in the heap (not in the pool).
    pub offset: u64,
    /// New contents.
    pub bytes: &'a [u8],
}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Lap the record was written in.
    pub lap: u64,
    /// Epoch it belongs to.
    pub epoch: u64,
    /// Body length.
    pub body_len: u64,
    /// Stored CRC.
    pub crc: u32,
}

fn pad8(len: u64) -> u64 {
    len.div_ceil(8) * 8
}

/// Size of the body holding `runs`.
pub fn body_len(runs: &[Run<'_>]) -> u64 {
    runs.iter()
        .map(|run| ENTRY_HEADER_LEN + pad8(run.bytes.len() as u64))
        .sum()
}

/// Size of the whole record, padding included.
pub fn record_len(body_len: u64) -> u64 {
    (HEADER_LEN + body_len).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Encodes a record (padded to [`RECORD_ALIGN`]).
pub fn encode(lap: u64, epoch: u64, runs: &[Run<'_>]) -> Vec<u8> {
    let body = body_len(runs);
    let total = record_len(body);
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out.extend_from_slice(&lap.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(body)
            .expect("record body over 4 GiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(&[0; 4]); // CRC, filled below
    for run in runs {
        assert!(
            !run.bytes.is_empty(),
            "empty run at heap offset {:#x}",
            run.offset
        );
        out.extend_from_slice(&run.offset.to_le_bytes());
        out.extend_from_slice(&(run.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(run.bytes);
        let padded = pad8(run.bytes.len() as u64) as usize;
        out.resize(out.len() + padded - run.bytes.len(), 0);
    }
    debug_assert_eq!(out.len() as u64, HEADER_LEN + body);
    let crc = crc_of(&out[..28], &out[HEADER_LEN as usize..]);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out.resize(total as usize, 0);
    out
}

/// Encodes a record around an already encoded `body` (one that [`parse_body`] accepts), for
/// moving a record to another lap (`Journal` compaction).
pub fn encode_with_body(lap: u64, epoch: u64, body: &[u8]) -> Vec<u8> {
    let total = record_len(body.len() as u64);
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out.extend_from_slice(&lap.to_le_bytes());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(body.len())
            .expect("record body over 4 GiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(body);
    let crc = crc_of(&out[..28], body);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
    out.resize(total as usize, 0);
    out
}

fn crc_of(header: &[u8], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header);
    hasher.update(body);
    hasher.finalize()
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes a header. `None` if the magic, version or header length is wrong (not a record:
/// the end of the log, or bytes of an older lap).
pub fn decode_header(bytes: &[u8; HEADER_LEN as usize]) -> Option<Header> {
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    let header_len = u16::from_le_bytes([bytes[6], bytes[7]]);
    if bytes[..4] != MAGIC || version != VERSION || u64::from(header_len) != HEADER_LEN {
        return None;
    }
    let body_len = u64::from(u32_at(bytes, 24));
    if body_len % 8 != 0 {
        return None;
    }
    Some(Header {
        lap: u64_at(bytes, 8),
        epoch: u64_at(bytes, 16),
        body_len,
        crc: u32_at(bytes, 28),
    })
}

/// Whether `body` matches the CRC of the record whose header bytes are `header`.
pub fn crc_matches(header_bytes: &[u8; HEADER_LEN as usize], head: &Header, body: &[u8]) -> bool {
    crc_of(&header_bytes[..28], body) == head.crc
}

/// Splits a CRC-valid body into runs, checking every entry against a heap of `heap_len`
/// bytes. A CRC-valid body that does not parse is corruption, not a torn write.
pub fn parse_body(body: &[u8], heap_len: u64) -> Result<Vec<Run<'_>>, NvtError> {
    let mut runs = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        if body.len() - at < ENTRY_HEADER_LEN as usize {
            return Err(NvtError::Corrupted(format!(
                "record entry header cut at {at}"
            )));
        }
        let offset = u64_at(body, at);
        let len = u64::from(u32_at(body, at + 8));
        let reserved = u32_at(body, at + 12);
        let start = at + ENTRY_HEADER_LEN as usize;
        let padded = pad8(len) as usize;
        let fits = offset.checked_add(len).is_some_and(|end| end <= heap_len);
        if len == 0 || reserved != 0 || !fits || body.len() - start < padded {
            return Err(NvtError::Corrupted(format!(
                "record entry at {at}: offset {offset:#x}, length {len}, reserved {reserved}"
            )));
        }
        runs.push(Run {
            offset,
            bytes: &body[start..start + len as usize],
        });
        at = start + padded;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(record: &[u8]) -> [u8; 32] {
        record[..32].try_into().unwrap()
    }

    #[test]
    fn round_trip() {
        let a = [1u8, 2, 3];
        let b = [9u8; 17];
        let runs = [
            Run {
                offset: 10,
                bytes: &a,
            },
            Run {
                offset: 4000,
                bytes: &b,
            },
        ];
        let record = encode(7, 99, &runs);
        assert_eq!(record.len() % 64, 0);
        let head = decode_header(&header_of(&record)).unwrap();
        assert_eq!((head.lap, head.epoch), (7, 99));
        assert_eq!(head.body_len, body_len(&runs));
        let body = &record[32..32 + head.body_len as usize];
        assert!(crc_matches(&header_of(&record), &head, body));
        assert_eq!(parse_body(body, 8192).unwrap(), runs);
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let data = [0xabu8; 40];
        let runs = [Run {
            offset: 64,
            bytes: &data,
        }];
        let record = encode(1, 2, &runs);
        let covered = 32 + body_len(&runs) as usize;
        for at in 0..covered {
            let mut bad = record.clone();
            bad[at] ^= 0x10;
            let ok = decode_header(&header_of(&bad)).is_some_and(|head| {
                let end = 32 + head.body_len as usize;
                end <= bad.len() && crc_matches(&header_of(&bad), &head, &bad[32..end])
            });
            assert!(!ok, "flip at byte {at} went unnoticed");
        }
    }

    #[test]
    fn entries_outside_the_heap_are_corruption() {
        let data = [1u8; 8];
        let runs = [Run {
            offset: 8190,
            bytes: &data,
        }];
        let record = encode(1, 1, &runs);
        let body = &record[32..32 + body_len(&runs) as usize];
        assert!(parse_body(body, 8192).is_err());
        assert!(parse_body(body, 8198).is_ok());
    }

    #[test]
    fn a_body_moved_to_another_lap_encodes_the_same() {
        let data = [5u8; 21];
        let runs = [Run {
            offset: 100,
            bytes: &data,
        }];
        let record = encode(3, 9, &runs);
        let body = &record[32..32 + body_len(&runs) as usize];
        assert_eq!(encode_with_body(4, 9, body), encode(4, 9, &runs));
    }

    #[test]
    fn zeros_are_not_a_record() {
        assert_eq!(decode_header(&[0; 32]), None);
    }
}
