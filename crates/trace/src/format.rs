//! The binary trace format (byte layout in `docs/trace-format.md`).
//!
//! ```text
//! file    magic "FERTRACE" (8) | version u32 | stream count u32 | metadata length u32
//!         | crc32 u32 of the metadata | metadata (JSON, `TraceMeta`)
//! stream  core u32 | event count u64 | byte length u64 | crc32 u32 of the bytes | bytes
//! event   tag u8 (kind) then, by kind:
//!           TxBegin, TxEnd   nothing
//!           Load             size u8, address delta (zigzag LEB128, from the stream's previous address)
//!           Store            size u8, address delta, old (LEB128), old ^ new (LEB128)
//!           Compute          instructions (LEB128)
//! ```
//!
//! All integers are little-endian. Loading validates the magic, version, checksums and every
//! event, so decoding a loaded trace cannot fail.

use crate::event::Event;
use std::path::Path;

const MAGIC: [u8; 8] = *b"FERTRACE";
/// Format version.
pub const VERSION: u32 = 1;
const TAG_TX_BEGIN: u8 = 0;
const TAG_TX_END: u8 = 1;
const TAG_LOAD: u8 = 2;
const TAG_STORE: u8 = 3;
const TAG_COMPUTE: u8 = 4;

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Not a trace file.
    #[error("not a Ferrite trace (bad magic)")]
    NotATrace,
    /// Written by another format version.
    #[error("unsupported trace version {0} (this build reads {VERSION})")]
    UnsupportedVersion(u32),
    /// The file ends early.
    #[error("truncated trace: {0}")]
    Truncated(&'static str),
    /// A checksum does not match.
    #[error("trace checksum mismatch in {0}")]
    Checksum(&'static str),
    /// The bytes do not decode.
    #[error("malformed trace: {0}")]
    Malformed(String),
    /// I/O error.
    #[error("trace I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// What a trace holds, for reports.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceMeta {
    /// Workload name.
    pub workload: String,
    /// Generation parameters (workload parameters, seed, compute model).
    pub params: serde_json::Value,
}

/// Encodes one core's events.
#[derive(Clone, Debug, Default)]
pub struct Encoder {
    bytes: Vec<u8>,
    last_addr: u64,
    events: u64,
}

impl Encoder {
    /// Appends an event.
    pub fn push(&mut self, event: &Event) {
        debug_assert!(
            match *event {
                Event::Load { addr, size } =>
                    (1..=64).contains(&size) && addr.checked_add(u64::from(size) - 1).is_some(),
                Event::Store { addr, size, .. } => size >= 1 && addr % 8 + u64::from(size) <= 8,
                _ => true,
            },
            "malformed event {event:?}"
        );
        self.events += 1;
        match *event {
            Event::TxBegin => self.bytes.push(TAG_TX_BEGIN),
            Event::TxEnd => self.bytes.push(TAG_TX_END),
            Event::Load { addr, size } => {
                self.bytes.extend_from_slice(&[TAG_LOAD, size]);
                self.address(addr);
            }
            Event::Store {
                addr,
                size,
                old,
                new,
            } => {
                self.bytes.extend_from_slice(&[TAG_STORE, size]);
                self.address(addr);
                leb128(&mut self.bytes, old);
                leb128(&mut self.bytes, old ^ new);
            }
            Event::Compute { instructions } => {
                self.bytes.push(TAG_COMPUTE);
                leb128(&mut self.bytes, u64::from(instructions));
            }
        }
    }

    fn address(&mut self, addr: u64) {
        let delta = addr.wrapping_sub(self.last_addr) as i64;
        leb128(&mut self.bytes, ((delta << 1) ^ (delta >> 63)) as u64);
        self.last_addr = addr;
    }

    /// Events so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// A decoder over the events encoded so far.
    pub fn decode(&self) -> Decoder<'_> {
        Decoder {
            bytes: &self.bytes,
            at: 0,
            last_addr: 0,
            left: self.events,
        }
    }
}

fn leb128(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7F) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A trace: metadata plus one event stream per core.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Metadata.
    pub meta: TraceMeta,
    streams: Vec<(u32, u64, Vec<u8>)>,
}

impl Trace {
    /// An empty trace.
    pub fn new(meta: TraceMeta) -> Self {
        Trace {
            meta,
            streams: Vec::new(),
        }
    }

    /// Adds core `core`'s stream.
    pub fn add_stream(&mut self, core: u32, encoder: Encoder) {
        self.streams.push((core, encoder.events, encoder.bytes));
    }

    /// Number of streams (cores).
    pub fn cores(&self) -> usize {
        self.streams.len()
    }

    /// Total events of every stream.
    pub fn total_events(&self) -> u64 {
        self.streams.iter().map(|s| s.1).sum()
    }

    /// The core number of stream `index` (as given to [`Trace::add_stream`]).
    pub fn stream_core(&self, index: usize) -> u32 {
        self.streams[index].0
    }

    /// The number of events of stream `index`.
    pub fn stream_events(&self, index: usize) -> u64 {
        self.streams[index].1
    }

    /// Events of stream `index` (in the order streams were added).
    pub fn events(&self, index: usize) -> Decoder<'_> {
        let (_, count, bytes) = &self.streams[index];
        Decoder {
            bytes,
            at: 0,
            last_addr: 0,
            left: *count,
        }
    }

    /// The serialised file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let meta = serde_json::to_vec(&self.meta).expect("trace metadata serialises");
        let mut out = Vec::with_capacity(
            32 + meta.len() + self.streams.iter().map(|s| s.2.len() + 24).sum::<usize>(),
        );
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.streams.len() as u32).to_le_bytes());
        out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&meta).to_le_bytes());
        out.extend_from_slice(&meta);
        for (core, count, bytes) in &self.streams {
            out.extend_from_slice(&core.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }

    /// Parses and fully validates a serialised trace.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TraceError> {
        let mut at = 0usize;
        check_magic_and_version(bytes, &mut at)?;
        let stream_count = u32_at(take(bytes, &mut at, 4, "header")?);
        let meta_len = u32_at(take(bytes, &mut at, 4, "header")?) as usize;
        let meta_crc = u32_at(take(bytes, &mut at, 4, "header")?);
        let meta_bytes = take(bytes, &mut at, meta_len, "metadata")?;
        if crc32fast::hash(meta_bytes) != meta_crc {
            return Err(TraceError::Checksum("metadata"));
        }
        let meta = serde_json::from_slice(meta_bytes)
            .map_err(|e| TraceError::Malformed(format!("metadata: {e}")))?;
        let mut trace = Trace::new(meta);
        for _ in 0..stream_count {
            let core = u32_at(take(bytes, &mut at, 4, "stream header")?);
            let count = u64::from_le_bytes(
                take(bytes, &mut at, 8, "stream header")?
                    .try_into()
                    .expect("8 bytes"),
            );
            let len = u64::from_le_bytes(
                take(bytes, &mut at, 8, "stream header")?
                    .try_into()
                    .expect("8 bytes"),
            );
            let crc = u32_at(take(bytes, &mut at, 4, "stream header")?);
            let len = usize::try_from(len).map_err(|_| TraceError::Truncated("stream"))?;
            let body = take(bytes, &mut at, len, "stream")?;
            if crc32fast::hash(body) != crc {
                return Err(TraceError::Checksum("stream"));
            }
            validate_stream(body, count)?;
            trace.streams.push((core, count, body.to_vec()));
        }
        if at != bytes.len() {
            return Err(TraceError::Malformed(format!(
                "{} bytes after the last stream",
                bytes.len() - at
            )));
        }
        Ok(trace)
    }

    /// Writes the trace to a file.
    pub fn write(&self, path: &Path) -> Result<(), TraceError> {
        Ok(std::fs::write(path, self.to_bytes())?)
    }

    /// Reads and validates a trace file. The magic and version are read and checked first,
    /// so a file that is no trace is refused without reading it whole: `/dev/zero` (or
    /// another device that never ends) was read until memory ran out.
    pub fn read(path: &Path) -> Result<Self, TraceError> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAGIC_AND_VERSION as u64)
            .read_to_end(&mut bytes)?;
        check_magic_and_version(&bytes, &mut 0)?;
        file.read_to_end(&mut bytes)?;
        Self::from_bytes(&bytes)
    }
}

/// The bytes of the magic and the version.
const MAGIC_AND_VERSION: usize = 12;

/// Checks the magic and the version at the start of `bytes`, moving `at` past them.
fn check_magic_and_version(bytes: &[u8], at: &mut usize) -> Result<(), TraceError> {
    let magic = take(bytes, at, MAGIC.len(), "header")?;
    if magic != MAGIC {
        return Err(TraceError::NotATrace);
    }
    let version = u32_at(take(bytes, at, 4, "header")?);
    if version != VERSION {
        return Err(TraceError::UnsupportedVersion(version));
    }
    Ok(())
}

fn take<'a>(
    bytes: &'a [u8],
    at: &mut usize,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], TraceError> {
    let end = at
        .checked_add(len)
        .filter(|&end| end <= bytes.len())
        .ok_or(TraceError::Truncated(what))?;
    let slice = &bytes[*at..end];
    *at = end;
    Ok(slice)
}

fn u32_at(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

fn validate_stream(bytes: &[u8], count: u64) -> Result<(), TraceError> {
    let mut decoder = Decoder {
        bytes,
        at: 0,
        last_addr: 0,
        left: u64::MAX,
    };
    for index in 0..count {
        if decoder.try_next()?.is_none() {
            return Err(TraceError::Malformed(format!(
                "stream ends after {index} of {count} events"
            )));
        }
    }
    if decoder.at != bytes.len() {
        return Err(TraceError::Malformed("bytes after the last event".into()));
    }
    Ok(())
}

/// Decodes one core's stream.
#[derive(Clone, Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
    last_addr: u64,
    left: u64,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<u8, TraceError> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or(TraceError::Truncated("event"))?;
        self.at += 1;
        Ok(byte)
    }

    fn leb128(&mut self) -> Result<u64, TraceError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            // The tenth byte (shift 63) holds bit 63 alone: any higher bit set there is a
            // number above u64::MAX, which the shift would silently drop.
            if shift == 63 && byte & 0x7E != 0 {
                return Err(TraceError::Malformed("integer larger than 64 bits".into()));
            }
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(TraceError::Malformed("integer longer than 64 bits".into()))
    }

    fn address(&mut self) -> Result<u64, TraceError> {
        let zigzag = self.leb128()?;
        let delta = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        self.last_addr = self.last_addr.wrapping_add(delta as u64);
        Ok(self.last_addr)
    }

    fn try_next(&mut self) -> Result<Option<Event>, TraceError> {
        if self.at == self.bytes.len() {
            return Ok(None);
        }
        let event = match self.byte()? {
            TAG_TX_BEGIN => Event::TxBegin,
            TAG_TX_END => Event::TxEnd,
            TAG_LOAD => {
                let size = self.byte()?;
                if !(1..=64).contains(&size) {
                    return Err(TraceError::Malformed(format!("load of {size} bytes")));
                }
                let addr = self.address()?;
                // The last byte must not wrap past the top of the address space: a load is
                // one range of lines, and a simulator computing its last line would wrap too.
                if addr.checked_add(u64::from(size) - 1).is_none() {
                    return Err(TraceError::Malformed(format!(
                        "load of {size} bytes at {addr:#x} wraps past the top of the address space"
                    )));
                }
                Event::Load { addr, size }
            }
            TAG_STORE => {
                let size = self.byte()?;
                let addr = self.address()?;
                if size == 0 || (addr % 8) + u64::from(size) > 8 {
                    return Err(TraceError::Malformed(format!(
                        "store of {size} bytes at {addr:#x}"
                    )));
                }
                let old = self.leb128()?;
                Event::Store {
                    addr,
                    size,
                    old,
                    new: old ^ self.leb128()?,
                }
            }
            TAG_COMPUTE => {
                let n = u32::try_from(self.leb128()?)
                    .map_err(|_| TraceError::Malformed("compute count".into()))?;
                Event::Compute { instructions: n }
            }
            tag => return Err(TraceError::Malformed(format!("unknown event tag {tag}"))),
        };
        Ok(Some(event))
    }
}

/// The 7-bit groups of up to 8 LEB128 bytes (`word`, little-endian), packed together.
#[inline]
fn leb128_groups(word: u64) -> u64 {
    let x = word & 0x7F7F_7F7F_7F7F_7F7F;
    let x = (x & 0x007F_007F_007F_007F) | ((x & 0x7F00_7F00_7F00_7F00) >> 1);
    let x = (x & 0x0000_3FFF_0000_3FFF) | ((x & 0x3FFF_0000_3FFF_0000) >> 2);
    (x & 0x0000_0000_0FFF_FFFF) | ((x & 0x0FFF_FFFF_0000_0000) >> 4)
}

/// Decoding of validated streams: no error paths (a stream is validated when a trace is
/// loaded, and an [`Encoder`] writes only what the decoder reads), about twice as fast as
/// [`Decoder::try_next`]. Indexing still bounds-checks, so damaged bytes panic, never misread
/// memory.
impl Decoder<'_> {
    #[inline]
    fn next_byte(&mut self) -> u8 {
        let byte = self.bytes[self.at];
        self.at += 1;
        byte
    }

    #[inline]
    fn next_leb128(&mut self) -> u64 {
        let first = self.next_byte();
        if first & 0x80 == 0 {
            return u64::from(first);
        }
        self.at -= 1;
        // Fast path: the number's first 8 bytes in one read; its end is the first byte
        // without the continuation bit.
        if let Some(chunk) = self.bytes.get(self.at..self.at + 8) {
            let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let len = ends.trailing_zeros() / 8 + 1;
                self.at += len as usize;
                let keep = u64::MAX >> (64 - 8 * len);
                return leb128_groups(word & keep);
            }
            self.at += 8;
            return self.leb128_tail(leb128_groups(word), 56);
        }
        self.at += 1;
        self.leb128_tail(u64::from(first & 0x7F), 7)
    }

    /// The rest of a LEB128 number whose low `shift` bits are `value`.
    #[inline]
    fn leb128_tail(&mut self, mut value: u64, mut shift: u32) -> u64 {
        loop {
            let byte = self.next_byte();
            value |= u64::from(byte & 0x7F).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }

    #[inline]
    fn next_address(&mut self) -> u64 {
        let zigzag = self.next_leb128();
        let delta = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        self.last_addr = self.last_addr.wrapping_add(delta as u64);
        self.last_addr
    }

    #[inline]
    fn next_validated(&mut self) -> Event {
        match self.next_byte() {
            TAG_TX_BEGIN => Event::TxBegin,
            TAG_TX_END => Event::TxEnd,
            TAG_LOAD => {
                let size = self.next_byte();
                Event::Load {
                    addr: self.next_address(),
                    size,
                }
            }
            TAG_STORE => {
                let size = self.next_byte();
                let addr = self.next_address();
                let old = self.next_leb128();
                Event::Store {
                    addr,
                    size,
                    old,
                    new: old ^ self.next_leb128(),
                }
            }
            _ => Event::Compute {
                instructions: self.next_leb128() as u32,
            },
        }
    }
}

impl Iterator for Decoder<'_> {
    type Item = Event;

    #[inline]
    fn next(&mut self) -> Option<Event> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Streams are validated when the trace is loaded or built by an Encoder.
        Some(self.next_validated())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.left).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::TxBegin),
            Just(Event::TxEnd),
            (any::<u64>(), 1u8..=64).prop_map(|(addr, size)| Event::Load {
                addr: addr.min(u64::MAX - u64::from(size - 1)),
                size
            }),
            (any::<u64>(), 1u8..=8, any::<u64>(), any::<u64>()).prop_map(|(a, s, old, new)| {
                let addr = (a & !7) + u64::from(8 - s) / 2;
                Event::Store {
                    addr,
                    size: s,
                    old,
                    new,
                }
            }),
            any::<u32>().prop_map(|instructions| Event::Compute { instructions }),
        ]
    }

    /// A device that never ends is refused from its first bytes, not read until memory
    /// runs out (the test would not end without the fix).
    #[test]
    fn reading_a_file_that_is_no_trace_stops_at_its_magic() {
        let zero = Trace::read(Path::new("/dev/zero")).expect_err("no trace");
        assert!(matches!(zero, TraceError::NotATrace), "{zero}");
        let dir = std::env::temp_dir().join(format!("trace-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let short = dir.join("short");
        std::fs::write(&short, &MAGIC[..5]).expect("write");
        let error = Trace::read(&short).expect_err("truncated");
        assert!(matches!(error, TraceError::Truncated("header")), "{error}");
        let file = dir.join("t");
        let mut trace = Trace::new(TraceMeta::default());
        trace.add_stream(3, Encoder::default());
        trace.write(&file).expect("write");
        assert_eq!(Trace::read(&file).expect("read").stream_core(0), 3);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// The file of one stream holding `body` as `events` events, with valid checksums.
    fn one_stream(events: u64, body: &[u8]) -> Vec<u8> {
        let meta = br#"{"workload":"x","params":{}}"#;
        let mut out = MAGIC.to_vec();
        for word in [VERSION, 1, meta.len() as u32, crc32fast::hash(meta)] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(meta);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&events.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn a_ten_byte_number_above_u64_max_is_refused() {
        // Compute of u64::MAX in ten bytes (the tenth holds bit 63 only): it fits, so the
        // decoder reads it, and refuses it as a compute count.
        let mut max = vec![4];
        max.extend_from_slice(&[0xFF; 9]);
        max.push(0x01);
        let error = Trace::from_bytes(&one_stream(1, &max)).expect_err("not a u32");
        assert!(error.to_string().contains("compute count"), "{error}");
        // The same with the tenth byte 0x7F: 2^70 - 1, which no u64 holds. As an old value
        // of a store it used to decode (silently as u64::MAX) and load.
        let mut store = vec![0, 3, 8, 0x80, 0x01];
        store.extend_from_slice(&[0xFF; 9]);
        store.extend_from_slice(&[0x7F, 0, 1]);
        let error = Trace::from_bytes(&one_stream(3, &store)).expect_err("over 64 bits");
        assert!(error.to_string().contains("larger than 64 bits"), "{error}");
        *store.get_mut(14).expect("tenth byte") = 0x01;
        let trace = Trace::from_bytes(&one_stream(3, &store)).expect("u64::MAX fits");
        let old = trace.events(0).find_map(|e| match e {
            Event::Store { old, .. } => Some(old),
            _ => None,
        });
        assert_eq!(old, Some(u64::MAX));
    }

    #[test]
    fn a_load_wrapping_past_the_top_of_the_address_space_is_refused() {
        // Load 64 B at u64::MAX - 63 (delta -64, zigzag 127): its last byte is u64::MAX.
        let reaches_top = one_stream(1, &[2, 64, 127]);
        let trace = Trace::from_bytes(&reaches_top).expect("ends at the top");
        assert_eq!(
            trace.events(0).next(),
            Some(Event::Load {
                addr: u64::MAX - 63,
                size: 64
            })
        );
        // One byte further (delta -63, zigzag 125): the range wraps to address 0.
        let error = Trace::from_bytes(&one_stream(1, &[2, 64, 125])).expect_err("wraps");
        assert!(error.to_string().contains("wraps past the top"), "{error}");
    }

    /// The example of `docs/trace-format.md` §3, byte for byte: what the encoder writes and
    /// what the reader reads back.
    #[test]
    fn the_documented_example_is_what_the_encoder_writes() {
        let documented = "
            46 45 52 54 52 41 43 45 01 00 00 00 01 00 00 00
            1c 00 00 00 ef ce 18 67 7b 22 77 6f 72 6b 6c 6f
            61 64 22 3a 22 78 22 2c 22 70 61 72 61 6d 73 22
            3a 7b 7d 7d 01 00 00 00 06 00 00 00 00 00 00 00
            19 00 00 00 00 00 00 00 6c 57 5c 11 04 64 00 02
            40 80 81 81 80 80 80 80 01 03 08 10 05 02 03 04
            0f 82 02 00 01";
        let documented: Vec<u8> = documented
            .split_whitespace()
            .map(|byte| u8::from_str_radix(byte, 16).expect("hex"))
            .collect();
        let base = 0x1_0000_0000_2040;
        let events = [
            Event::Compute { instructions: 100 },
            Event::TxBegin,
            Event::Load {
                addr: base,
                size: 64,
            },
            Event::Store {
                addr: base + 8,
                size: 8,
                old: 5,
                new: 7,
            },
            Event::Store {
                addr: base,
                size: 4,
                old: 0x102,
                new: 0x102,
            },
            Event::TxEnd,
        ];
        let mut encoder = Encoder::default();
        events.iter().for_each(|e| encoder.push(e));
        let mut trace = Trace::new(TraceMeta {
            workload: "x".into(),
            params: serde_json::json!({}),
        });
        trace.add_stream(1, encoder);
        assert_eq!(trace.to_bytes(), documented);
        let read = Trace::from_bytes(&documented).expect("valid");
        assert_eq!(read.stream_core(0), 1);
        assert_eq!(read.events(0).collect::<Vec<_>>(), events);
    }

    proptest! {
        #[test]
        fn round_trips(streams in proptest::collection::vec(proptest::collection::vec(event(), 0..50), 1..4)) {
            let mut trace = Trace::new(TraceMeta { workload: "p".into(), params: serde_json::json!({"k": 1}) });
            for (core, events) in streams.iter().enumerate() {
                let mut encoder = Encoder::default();
                events.iter().for_each(|e| encoder.push(e));
                trace.add_stream(core as u32, encoder);
            }
            let loaded = Trace::from_bytes(&trace.to_bytes()).expect("valid");
            prop_assert_eq!(&loaded.meta, &trace.meta);
            for (core, events) in streams.iter().enumerate() {
                prop_assert_eq!(&loaded.events(core).collect::<Vec<_>>(), events);
                prop_assert_eq!(&trace.events(core).collect::<Vec<_>>(), events);
                prop_assert_eq!(loaded.stream_core(core), core as u32);
                prop_assert_eq!(loaded.stream_events(core), events.len() as u64);
            }
        }

        #[test]
        fn damaged_files_are_errors_not_panics(flip in any::<usize>(), byte in any::<u8>()) {
            let mut encoder = Encoder::default();
            for e in [Event::TxBegin, Event::Store { addr: 64, size: 8, old: 1, new: 2 }, Event::TxEnd] {
                encoder.push(&e);
            }
            let mut trace = Trace::new(TraceMeta::default());
            trace.add_stream(0, encoder);
            let mut bytes = trace.to_bytes();
            let at = flip % bytes.len();
            bytes[at] ^= byte.max(1);
            let _ = Trace::from_bytes(&bytes);
            let _ = Trace::from_bytes(&bytes[..at]);
        }
    }
}
