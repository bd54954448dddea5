//! Redo-log records: encoding and validation (`docs/nvthreads.md` §4.3).
//!
//! A record is what one merge of one thread wrote to the shared heap (a *data* record), or
//! the end of a group of sections that commit together (a *close* record). Every thread
//! appends to a lane of its own, so records of different threads are written concurrently;
//! the sequence number orders them for replay.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `"NVTR"` |
//! | 4 | 2 | version (3) |
//! | 6 | 2 | header length (48) |
//! | 8 | 8 | lap (the checkpoint generation the record was written in) |
//! | 16 | 8 | sequence number: replay order across lanes |
//! | 24 | 8 | group: 0 = committed by itself; else the group it commits with |
//! | 32 | 4 | kind: 0 data, 1 close |
//! | 36 | 4 | body length in bytes (a multiple of 8) |
//! | 40 | 4 | CRC-32 of bytes `0..40` followed by the body |
//! | 44 | 4 | reserved (zero) |
//!
//! A data body is a sequence of entries. A *run*: heap offset (`u64`), length (`u32`, > 0),
//! kind `u32` = 0, then the bytes, zero-padded to a multiple of 8. A *masked page*: the
//! page's heap offset (`u64`, page-aligned), the count of changed bytes (`u32`, > 0), kind
//! `u32` = 1, a 512-byte mask (bit `i % 8` of byte `i / 8` set: byte `i` of the page
//! changed), then the changed bytes in address order, zero-padded to a multiple of 8. A
//! close body is the ids (`u64`) of the groups it closes. The record is padded with zeros to
//! a multiple of 64 bytes (not covered by the CRC), so every record starts on a cache line.
//! All integers are little-endian.

#![forbid(unsafe_code)]

use crate::error::NvtError;

/// Record magic.
pub const MAGIC: [u8; 4] = *b"NVTR";
/// Record format version.
pub const VERSION: u16 = 3;
/// Header length.
pub const HEADER_LEN: u64 = 48;
/// Entry header length (offset, length, kind).
pub const ENTRY_HEADER_LEN: u64 = 16;
/// Records start on cache lines.
pub const RECORD_ALIGN: u64 = 64;
/// The page of a masked entry.
pub const MASK_PAGE: usize = 4096;
/// Bytes of a masked entry's mask.
pub const MASK_LEN: usize = MASK_PAGE / 8;
/// Bytes of the header covered by the CRC.
const CRC_COVERED: usize = 40;

/// One byte run of a record: `bytes` go to heap offset `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run<'a> {
    /// Offset in the heap (not in the pool).
    pub offset: u64,
    /// New contents.
    pub bytes: &'a [u8],
}

/// One page's scattered changes: the bytes where `mask` is set, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaskedPage<'a> {
    /// Heap offset of the page (page-aligned).
    pub offset: u64,
    /// Bit `i % 8` of byte `i / 8`: byte `i` of the page changed.
    pub mask: &'a [u8],
    /// The changed bytes, in address order (as many as bits set in `mask`).
    pub bytes: &'a [u8],
}

impl MaskedPage<'_> {
    /// Calls `write(offset in page, byte)` for every changed byte.
    pub fn for_each_byte(&self, mut write: impl FnMut(usize, u8)) {
        let mut next = self.bytes.iter();
        for (index, &bits) in self.mask.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(&byte) = next.next() {
                    write(index * 8 + bit, byte);
                }
            }
        }
    }
}

/// One entry of a data record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// Contiguous bytes.
    Run(Run<'a>),
    /// A page's scattered changed bytes.
    Masked(MaskedPage<'a>),
}

impl<'a> From<Run<'a>> for Entry<'a> {
    fn from(run: Run<'a>) -> Self {
        Entry::Run(run)
    }
}

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Byte changes of one merge.
    Data,
    /// The end of groups: every record of these groups commits.
    Close,
}

impl Kind {
    fn code(self) -> u32 {
        match self {
            Kind::Data => 0,
            Kind::Close => 1,
        }
    }

    fn from_code(code: u32) -> Option<Kind> {
        match code {
            0 => Some(Kind::Data),
            1 => Some(Kind::Close),
            _ => None,
        }
    }
}

/// What a record's header says besides its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Lap the record is written in.
    pub lap: u64,
    /// Replay order.
    pub seq: u64,
    /// The group it commits with (0: itself).
    pub group: u64,
    /// Data or close.
    pub kind: Kind,
}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Lap, sequence number, group, kind.
    pub meta: Meta,
    /// Body length.
    pub body_len: u64,
    /// Stored CRC.
    pub crc: u32,
}

fn pad8(len: u64) -> u64 {
    len.div_ceil(8) * 8
}

/// Encoded size of `entry`.
pub fn entry_len(entry: &Entry<'_>) -> u64 {
    match entry {
        Entry::Run(run) => ENTRY_HEADER_LEN + pad8(run.bytes.len() as u64),
        Entry::Masked(page) => ENTRY_HEADER_LEN + MASK_LEN as u64 + pad8(page.bytes.len() as u64),
    }
}

/// Size of the body holding `entries`.
pub fn body_len(entries: &[Entry<'_>]) -> u64 {
    entries.iter().map(entry_len).sum()
}

/// Size of the whole record, padding included.
pub fn record_len(body_len: u64) -> u64 {
    (HEADER_LEN + body_len).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

fn push_entry(out: &mut Vec<u8>, entry: &Entry<'_>) {
    let (offset, len, kind, payload): (u64, usize, u32, [&[u8]; 2]) = match entry {
        Entry::Run(run) => {
            assert!(
                !run.bytes.is_empty(),
                "empty run at heap offset {:#x}",
                run.offset
            );
            (run.offset, run.bytes.len(), 0, [run.bytes, &[]])
        }
        Entry::Masked(page) => {
            assert_eq!(page.mask.len(), MASK_LEN, "mask of a masked page");
            let set: u32 = page.mask.iter().map(|b| b.count_ones()).sum();
            assert!(
                set as usize == page.bytes.len() && set > 0,
                "masked page at {:#x}: {set} bits for {} bytes",
                page.offset,
                page.bytes.len()
            );
            (page.offset, page.bytes.len(), 1, [page.mask, page.bytes])
        }
    };
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    for part in payload {
        out.extend_from_slice(part);
    }
    out.resize(out.len() + (pad8(len as u64) as usize - len), 0);
}

/// The body of a close record for `groups`.
pub fn close_body(groups: &[u64]) -> Vec<u8> {
    groups.iter().flat_map(|id| id.to_le_bytes()).collect()
}

/// The body of a data record holding `entries`.
pub fn data_body(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    data_body_into(entries, &mut body);
    body
}

/// [`data_body`] into `body` (emptied first; its allocation is reused).
pub fn data_body_into(entries: &[Entry<'_>], body: &mut Vec<u8>) {
    body.clear();
    body.reserve(body_len(entries) as usize);
    for entry in entries {
        push_entry(body, entry);
    }
    debug_assert_eq!(body.len() as u64, body_len(entries));
}

/// Encodes a data record of `entries` (padded to [`RECORD_ALIGN`]).
pub fn encode(meta: Meta, entries: &[Entry<'_>]) -> Vec<u8> {
    encode_with_body(meta, &data_body(entries))
}

/// Encodes a record around an encoded `body` (a data body [`parse_body`] accepts, or a close
/// body), also for moving a record to another lap (a checkpoint keeps the records that are
/// not committed yet).
pub fn encode_with_body(meta: Meta, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(meta, body, &mut out);
    out
}

/// [`encode_with_body`] into `out` (emptied first; its allocation is reused).
pub fn encode_into(meta: Meta, body: &[u8], out: &mut Vec<u8>) {
    let total = record_len(body.len() as u64);
    out.clear();
    out.reserve(total as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    out.extend_from_slice(&meta.lap.to_le_bytes());
    out.extend_from_slice(&meta.seq.to_le_bytes());
    out.extend_from_slice(&meta.group.to_le_bytes());
    out.extend_from_slice(&meta.kind.code().to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(body.len())
            .expect("record body over 4 GiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(&[0; 8]); // CRC (filled below), reserved
    out.extend_from_slice(body);
    let crc = crc_of(&out[..CRC_COVERED], body);
    out[CRC_COVERED..CRC_COVERED + 4].copy_from_slice(&crc.to_le_bytes());
    out.resize(total as usize, 0);
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

/// Decodes a header. `None` if the magic, version, header length, kind or reserved field is
/// wrong (not a record: the end of a lane, or bytes of an older lap).
pub fn decode_header(bytes: &[u8; HEADER_LEN as usize]) -> Option<Header> {
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    let header_len = u16::from_le_bytes([bytes[6], bytes[7]]);
    if bytes[..4] != MAGIC || version != VERSION || u64::from(header_len) != HEADER_LEN {
        return None;
    }
    let body_len = u64::from(u32_at(bytes, 36));
    if body_len % 8 != 0 || u32_at(bytes, 44) != 0 {
        return None;
    }
    Some(Header {
        meta: Meta {
            lap: u64_at(bytes, 8),
            seq: u64_at(bytes, 16),
            group: u64_at(bytes, 24),
            kind: Kind::from_code(u32_at(bytes, 32))?,
        },
        body_len,
        crc: u32_at(bytes, CRC_COVERED),
    })
}

/// Whether `body` matches the CRC of the record whose header bytes are `header_bytes`.
pub fn crc_matches(header_bytes: &[u8; HEADER_LEN as usize], head: &Header, body: &[u8]) -> bool {
    crc_of(&header_bytes[..CRC_COVERED], body) == head.crc
}

fn corrupted(at: usize, offset: u64, len: u64, kind: u32) -> NvtError {
    NvtError::Corrupted(format!(
        "record entry at {at}: offset {offset:#x}, length {len}, kind {kind}"
    ))
}

/// Splits a CRC-valid data body into entries, checking every entry against a heap of
/// `heap_len` bytes. A CRC-valid body that does not parse is corruption, not a torn write.
pub fn parse_body(body: &[u8], heap_len: u64) -> Result<Vec<Entry<'_>>, NvtError> {
    let mut entries = Vec::new();
    parse_body_into(body, heap_len, &mut entries)?;
    Ok(entries)
}

/// [`parse_body`] into `entries` (cleared first), reusing its allocation.
pub fn parse_body_into<'b>(
    body: &'b [u8],
    heap_len: u64,
    entries: &mut Vec<Entry<'b>>,
) -> Result<(), NvtError> {
    entries.clear();
    let mut at = 0usize;
    while at < body.len() {
        if body.len() - at < ENTRY_HEADER_LEN as usize {
            return Err(NvtError::Corrupted(format!(
                "record entry header cut at {at}"
            )));
        }
        let offset = u64_at(body, at);
        let len = u64::from(u32_at(body, at + 8));
        let kind = u32_at(body, at + 12);
        let start = at + ENTRY_HEADER_LEN as usize;
        let (entry, used) = match kind {
            0 => parse_run(body, start, offset, len, heap_len),
            1 => parse_masked(body, start, offset, len, heap_len),
            _ => None,
        }
        .ok_or_else(|| corrupted(at, offset, len, kind))?;
        entries.push(entry);
        at = start + used;
    }
    Ok(())
}

fn parse_run(
    body: &[u8],
    start: usize,
    offset: u64,
    len: u64,
    heap: u64,
) -> Option<(Entry<'_>, usize)> {
    let padded = pad8(len) as usize;
    let fits = offset.checked_add(len).is_some_and(|end| end <= heap);
    if len == 0 || !fits || body.len() - start < padded {
        return None;
    }
    let bytes = &body[start..start + len as usize];
    Some((Entry::Run(Run { offset, bytes }), padded))
}

fn parse_masked(
    body: &[u8],
    start: usize,
    offset: u64,
    len: u64,
    heap: u64,
) -> Option<(Entry<'_>, usize)> {
    let page = MASK_PAGE as u64;
    let used = MASK_LEN + pad8(len) as usize;
    let fits = offset.is_multiple_of(page) && offset.checked_add(page).is_some_and(|e| e <= heap);
    if len == 0 || len > page || !fits || body.len() - start < used {
        return None;
    }
    let mask = &body[start..start + MASK_LEN];
    let set: u64 = mask.iter().map(|b| u64::from(b.count_ones())).sum();
    if set != len {
        return None;
    }
    let bytes = &body[start + MASK_LEN..start + MASK_LEN + len as usize];
    Some((
        Entry::Masked(MaskedPage {
            offset,
            mask,
            bytes,
        }),
        used,
    ))
}

/// The group ids of a CRC-valid close body.
pub fn parse_close(body: &[u8]) -> Vec<u64> {
    body.chunks_exact(8)
        .map(|id| u64::from_le_bytes(id.try_into().expect("8 bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: usize = HEADER_LEN as usize;

    fn header_of(record: &[u8]) -> [u8; H] {
        record[..H].try_into().unwrap()
    }

    fn meta(lap: u64, seq: u64) -> Meta {
        Meta {
            lap,
            seq,
            group: 0,
            kind: Kind::Data,
        }
    }

    #[test]
    fn round_trip() {
        let a = [1u8, 2, 3];
        let b = [9u8; 17];
        let mut mask = vec![0u8; MASK_LEN];
        mask[0] = 0b101;
        mask[511] = 0x80;
        let masked_bytes = [7u8, 8, 9];
        let entries = [
            Entry::Run(Run {
                offset: 10,
                bytes: &a,
            }),
            Entry::Run(Run {
                offset: 4000,
                bytes: &b,
            }),
            Entry::Masked(MaskedPage {
                offset: 4096,
                mask: &mask,
                bytes: &masked_bytes,
            }),
        ];
        let meta = Meta {
            lap: 7,
            seq: 99,
            group: 5,
            kind: Kind::Data,
        };
        let record = encode(meta, &entries);
        assert_eq!(record.len() % 64, 0);
        let head = decode_header(&header_of(&record)).unwrap();
        assert_eq!(head.meta, meta);
        assert_eq!(head.body_len, body_len(&entries));
        let body = &record[H..H + head.body_len as usize];
        assert!(crc_matches(&header_of(&record), &head, body));
        assert_eq!(parse_body(body, 8192).unwrap(), entries);
        let mut seen = Vec::new();
        if let Entry::Masked(page) = &entries[2] {
            page.for_each_byte(|at, byte| seen.push((at, byte)));
        }
        assert_eq!(seen, vec![(0, 7), (2, 8), (4095, 9)]);
    }

    #[test]
    fn close_records_carry_their_groups() {
        let body = close_body(&[3, 17]);
        let meta = Meta {
            lap: 2,
            seq: 40,
            group: 0,
            kind: Kind::Close,
        };
        let record = encode_with_body(meta, &body);
        let head = decode_header(&header_of(&record)).unwrap();
        assert_eq!(head.meta.kind, Kind::Close);
        let body = &record[H..H + head.body_len as usize];
        assert!(crc_matches(&header_of(&record), &head, body));
        assert_eq!(parse_close(body), vec![3, 17]);
    }

    #[test]
    fn any_flipped_byte_is_detected() {
        let data = [0xabu8; 40];
        let entries = [Entry::Run(Run {
            offset: 64,
            bytes: &data,
        })];
        let record = encode(meta(1, 2), &entries);
        let covered = H + body_len(&entries) as usize;
        for at in 0..covered {
            let mut bad = record.clone();
            bad[at] ^= 0x10;
            let ok = decode_header(&header_of(&bad)).is_some_and(|head| {
                let end = H + head.body_len as usize;
                end <= bad.len() && crc_matches(&header_of(&bad), &head, &bad[H..end])
            });
            assert!(!ok, "flip at byte {at} went unnoticed");
        }
    }

    #[test]
    fn entries_outside_the_heap_are_corruption() {
        let data = [1u8; 8];
        let entries = [Entry::Run(Run {
            offset: 8190,
            bytes: &data,
        })];
        let record = encode(meta(1, 1), &entries);
        let body = &record[H..H + body_len(&entries) as usize];
        assert!(parse_body(body, 8192).is_err());
        assert!(parse_body(body, 8198).is_ok());
        let mask = vec![1u8; MASK_LEN];
        let bytes = vec![2u8; MASK_LEN];
        let masked = [Entry::Masked(MaskedPage {
            offset: 4096,
            mask: &mask,
            bytes: &bytes,
        })];
        let record = encode(meta(1, 1), &masked);
        let body = &record[H..H + body_len(&masked) as usize];
        assert!(parse_body(body, 4096).is_err(), "page past the heap");
        assert!(parse_body(body, 8192).is_ok());
    }

    #[test]
    fn a_body_moved_to_another_lap_encodes_the_same() {
        let data = [5u8; 21];
        let entries = [Entry::Run(Run {
            offset: 100,
            bytes: &data,
        })];
        let record = encode(meta(3, 9), &entries);
        let body = &record[H..H + body_len(&entries) as usize];
        assert_eq!(
            encode_with_body(meta(4, 9), body),
            encode(meta(4, 9), &entries)
        );
    }

    #[test]
    fn zeros_and_older_versions_are_not_records() {
        assert_eq!(decode_header(&[0; H]), None);
        let mut old = header_of(&encode(meta(1, 1), &[]));
        old[4..6].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(decode_header(&old), None);
    }
}
