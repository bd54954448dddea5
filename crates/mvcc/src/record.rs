//! The records of the operation logs (OLog) and of the checkpoint log (CLog): a header with
//! a CRC-32 bound to the record's position, then a payload (`docs/mvcc-format.md` §3 and §4).
//!
//! | Kind | Magic | Payload |
//! |---|---|---|
//! | logical operation | `"FMOL"` | the operation's arguments (padded to 8), then heap actions |
//! | logical operation, compact | tag `0x4C` | the same, in a 16-byte header with 8-byte actions |
//! | physical write set | `"FMOP"` | byte ranges, then heap actions |
//! | checkpoint | `"FMCK"` | byte ranges (the changed bytes of the checkpointed chunks) |
//!
//! The compact form carries the common operations (a map insert, update or delete with its
//! one publish or free) in at most 40 bytes. It keeps every field the full header gives
//! recovery (kind, length, timestamp, op, link, position-bound CRC) but narrows them, so
//! [`encode`] uses it only when every field fits exactly; otherwise the full form is written.
//!
//! A torn or foreign record is simply absent (`Ok(None)`); an intact record whose content
//! is malformed is `Corrupted`.

use heap::{ACTION_LEN, Action};
use pmem::Persist;
use tx::record_search::{LaneChecksums, combine};
use tx::{TxError, TxResult};

/// Bytes of a full record header.
pub const HEADER_LEN: usize = 32;
/// Bytes of a compact logical record's header.
pub const COMPACT_HEADER_LEN: usize = 16;
/// Bytes of a heap action in a compact record.
pub const COMPACT_ACTION_LEN: usize = 8;
/// The first byte of a compact logical record (full headers begin with `'F'`).
pub const COMPACT_TAG: u8 = b'L';
/// Most argument bytes of a compact record.
const COMPACT_MAX_ARGS: usize = u8::MAX as usize;
/// Compact records name ops below this.
const COMPACT_OPS: u16 = 1 << 12;
/// Most heap actions of a compact record.
const COMPACT_MAX_ACTIONS: usize = 15;
/// Compact records carry timestamps below this.
const COMPACT_TS: u64 = 1 << 48;
/// The compact link meaning "too far to name" (the full form's `u32::MAX`).
const COMPACT_FAR: u16 = u16::MAX;
/// Longest byte range of one range entry (longer writes are split).
pub const MAX_RANGE: usize = 0xFFF8;
/// Most heap actions of one record.
pub const MAX_ACTIONS: usize = u16::MAX as usize;
const ADDR_BITS: u32 = 48;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A registered operation and its arguments (re-executed by recovery).
    Logical,
    /// The bytes a transaction wrote (applied by recovery).
    Physical,
    /// A checkpoint: the state of every chunk changed since the previous one.
    Checkpoint,
}

impl Kind {
    const fn magic(self) -> [u8; 4] {
        match self {
            Kind::Logical => *b"FMOL",
            Kind::Physical => *b"FMOP",
            Kind::Checkpoint => *b"FMCK",
        }
    }

    fn from_magic(magic: &[u8]) -> Option<Self> {
        [Kind::Logical, Kind::Physical, Kind::Checkpoint]
            .into_iter()
            .find(|k| k.magic() == magic)
    }
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Kind.
    pub kind: Kind,
    /// Commit timestamp (operations) or checkpoint time.
    pub ts: u64,
    /// Absolute position.
    pub pos: u64,
    /// Encoded length.
    pub len: u64,
    /// The link to the lane's previous live record ([`link`]).
    pub prev: u32,
    /// Logical: the operation id.
    pub op: u16,
    /// Logical: the arguments.
    pub args: Vec<u8>,
    /// Physical and checkpoint: `(addr, bytes)`.
    pub ranges: Vec<(u64, Vec<u8>)>,
    /// Heap actions (operations only).
    pub actions: Vec<Action>,
    /// Whether the record was in the compact form.
    pub compact: bool,
}

/// The range entries `ranges` become (long ranges split), with their encoded size.
fn split<'a>(
    ranges: impl Iterator<Item = (u64, &'a [u8])>,
) -> impl Iterator<Item = (u64, &'a [u8])> {
    ranges.flat_map(|(addr, bytes)| {
        bytes
            .chunks(MAX_RANGE)
            .enumerate()
            .map(move |(i, piece)| (addr + (i * MAX_RANGE) as u64, piece))
    })
}

/// Encoded length and range-entry count of a full-form record with these contents (a
/// compact logical record is shorter, so this bounds every record).
pub fn encoded_len<'a>(
    args: usize,
    ranges: impl Iterator<Item = (u64, &'a [u8])>,
    actions: usize,
) -> (usize, usize) {
    encoded_len_of(args, ranges.map(|(_, bytes)| bytes.len()), actions)
}

/// [`encoded_len`] from the ranges' lengths alone (what a commit reserves before it knows
/// whether its record is logical or physical, without gathering any bytes).
pub fn encoded_len_of(
    args: usize,
    lens: impl Iterator<Item = usize>,
    actions: usize,
) -> (usize, usize) {
    let (mut len, mut count) = (HEADER_LEN + args.next_multiple_of(8), 0);
    for n in lens {
        // `split`: full pieces of `MAX_RANGE` bytes, then the rest.
        let (full, rest) = (n / MAX_RANGE, n % MAX_RANGE);
        len += full * (8 + MAX_RANGE.next_multiple_of(8));
        count += full;
        if rest > 0 {
            len += 8 + rest.next_multiple_of(8);
            count += 1;
        }
    }
    (len + ACTION_LEN * actions, count)
}

/// Encodes a record for absolute position `pos` into `out` (cleared first). `prev` is the
/// link to the lane's previous live record ([`link`]; 0 for none and for checkpoints).
#[allow(clippy::too_many_arguments)]
pub fn encode<'a>(
    pos: u64,
    kind: Kind,
    ts: u64,
    prev: u32,
    op: u16,
    args: &[u8],
    ranges: impl Iterator<Item = (u64, &'a [u8])> + Clone,
    actions: &[Action],
    out: &mut Vec<u8>,
) {
    debug_assert!(kind != Kind::Logical || ranges.clone().next().is_none());
    debug_assert!(kind == Kind::Logical || args.is_empty());
    if kind == Kind::Logical && encode_compact(pos, ts, prev, op, args, actions, out) {
        return;
    }
    out.clear();
    out.resize(HEADER_LEN, 0);
    out.extend_from_slice(args);
    out.resize(out.len().next_multiple_of(8), 0);
    let mut count = 0u32;
    for (addr, piece) in split(ranges) {
        debug_assert!(addr >> ADDR_BITS == 0 && !piece.is_empty());
        let header = addr | ((piece.len() as u64) << ADDR_BITS);
        out.extend_from_slice(&header.to_le_bytes());
        out.extend_from_slice(piece);
        out.resize(out.len().next_multiple_of(8), 0);
        count += 1;
    }
    for action in actions {
        out.extend_from_slice(&action.encode());
    }
    let n = if kind == Kind::Logical {
        args.len() as u32
    } else {
        count
    };
    out[0..4].copy_from_slice(&kind.magic());
    let total = out.len() as u32;
    out[4..8].copy_from_slice(&total.to_le_bytes());
    out[8..16].copy_from_slice(&ts.to_le_bytes());
    out[16..18].copy_from_slice(&op.to_le_bytes());
    out[18..20].copy_from_slice(&(actions.len() as u16).to_le_bytes());
    out[20..24].copy_from_slice(&n.to_le_bytes());
    out[24..28].copy_from_slice(&prev.to_le_bytes());
    let crc = checksum(out, pos);
    out[28..32].copy_from_slice(&crc.to_le_bytes());
}

/// The compact link for a full one, if it fits exactly.
fn compact_link(prev: u32) -> Option<u16> {
    match prev {
        u32::MAX => Some(COMPACT_FAR),
        p => u16::try_from(p).ok().filter(|&p| p != COMPACT_FAR),
    }
}

fn full_link(link: u16) -> u32 {
    if link == COMPACT_FAR {
        u32::MAX
    } else {
        u32::from(link)
    }
}

/// The 8-byte form of a heap action whose operand is implied: a one-bit `Or` (a publish) or
/// `AndNot` (a free), the bit index riding above the address, or a `Set` of 0 (a span's
/// free). Bits 0–55 hold the address, 56–61 the bit index, 62–63 the code (1 `Or`,
/// 2 `AndNot`, 3 `Set` of 0).
fn compact_action(action: &Action) -> Option<u64> {
    let (code, addr, bit) = match *action {
        Action::Or { addr, mask } if mask.count_ones() == 1 => (1, addr, mask.trailing_zeros()),
        Action::AndNot { addr, mask } if mask.count_ones() == 1 => (2, addr, mask.trailing_zeros()),
        Action::Set { addr, value: 0 } => (3, addr, 0),
        _ => return None,
    };
    (addr >> 56 == 0).then(|| code << 62 | u64::from(bit) << 56 | addr)
}

fn expand_action(word: u64, pool_len: u64) -> Result<Action, String> {
    let (code, bit, addr) = (word >> 62, (word >> 56) & 63, word & ((1 << 56) - 1));
    let action = match code {
        1 => Action::Or {
            addr,
            mask: 1 << bit,
        },
        2 => Action::AndNot {
            addr,
            mask: 1 << bit,
        },
        3 if bit == 0 => Action::Set { addr, value: 0 },
        _ => return Err(format!("unknown compact heap action {word:#x}")),
    };
    // The full decoder checks the address (alignment, inside the pool) and the operand.
    Action::decode(&action.encode(), pool_len).map_err(|e| e.to_string())
}

/// Writes the compact form of a logical record into `out` if every field fits exactly;
/// returns whether it did.
fn encode_compact(
    pos: u64,
    ts: u64,
    prev: u32,
    op: u16,
    args: &[u8],
    actions: &[Action],
    out: &mut Vec<u8>,
) -> bool {
    let Some(link) = compact_link(prev) else {
        return false;
    };
    if args.len() > COMPACT_MAX_ARGS
        || op >= COMPACT_OPS
        || actions.len() > COMPACT_MAX_ACTIONS
        || ts >= COMPACT_TS
    {
        return false;
    }
    let mut words = [0u64; COMPACT_MAX_ACTIONS];
    for (word, action) in words.iter_mut().zip(actions) {
        let Some(compact) = compact_action(action) else {
            return false;
        };
        *word = compact;
    }
    out.clear();
    out.push(COMPACT_TAG);
    out.push(args.len() as u8);
    out.extend_from_slice(&(op | (actions.len() as u16) << 12).to_le_bytes());
    out.extend_from_slice(&link.to_le_bytes());
    out.extend_from_slice(&ts.to_le_bytes()[..6]);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(args);
    out.resize(out.len().next_multiple_of(8), 0);
    for word in &words[..actions.len()] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    let crc = compact_checksum(out, pos);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    true
}

/// Length of the compact record a 16-byte header describes.
fn compact_len(head: &[u8]) -> u64 {
    let actions = u16::from_le_bytes([head[2], head[3]]) >> 12;
    (COMPACT_HEADER_LEN + usize::from(head[1]).next_multiple_of(8)) as u64
        + COMPACT_ACTION_LEN as u64 * u64::from(actions)
}

fn compact_ts(head: &[u8]) -> u64 {
    let mut ts = [0u8; 8];
    ts[..6].copy_from_slice(&head[6..12]);
    u64::from_le_bytes(ts)
}

fn compact_checksum(bytes: &[u8], pos: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..12]);
    hasher.update(&bytes[COMPACT_HEADER_LEN..]);
    hasher.update(&pos.to_le_bytes());
    hasher.finalize()
}

/// The link from an operation record of time `ts` to the previous live record of its lane
/// (time `previous`, `None` if the lane's ring held none when the record was placed): their
/// distance, saturated at `u32::MAX` ("too far to name"), 0 for none. Recovery uses it to
/// tell that a record a newer one follows was still needed, so its absence is damage.
pub fn link(ts: u64, previous: Option<u64>) -> u32 {
    previous.map_or(0, |p| {
        u32::try_from(ts.saturating_sub(p).max(1)).unwrap_or(u32::MAX)
    })
}

/// The time of the previous live record a link names, if it names one exactly.
pub fn linked(ts: u64, link: u32) -> Option<u64> {
    (link != 0 && link != u32::MAX).then(|| ts.saturating_sub(u64::from(link)))
}

fn checksum(bytes: &[u8], pos: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..28]);
    hasher.update(&bytes[HEADER_LEN..]);
    hasher.update(&pos.to_le_bytes());
    hasher.finalize()
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn half(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads the record at `pos` (ending before `limit`), if an intact one is there.
pub fn read<P: Persist>(pm: &P, pos: u64, limit: u64) -> TxResult<Option<Record>> {
    if pos + COMPACT_HEADER_LEN as u64 <= limit && is_compact(pm, pos) {
        return read_compact(pm, pos, limit);
    }
    if pos + HEADER_LEN as u64 > limit {
        return Ok(None);
    }
    let mut head = [0u8; HEADER_LEN];
    pm.read(pos, &mut head);
    let Some((kind, len)) = full_header(&head, pos, limit) else {
        return Ok(None);
    };
    let mut bytes = vec![0u8; len as usize];
    pm.read(pos, &mut bytes);
    if checksum(&bytes, pos) != half(&bytes, 28) {
        return Ok(None);
    }
    decode(pm.len(), kind, pos, &bytes).map(Some)
}

/// Whether the line at `pos` of a log read into `log` (checksums of spans starting
/// [`HEADER_LEN`] bytes into a line, `LaneChecksums::read`) can hold an intact
/// record ending by `limit`: false when [`read`] would find none there, computed from the
/// log's prefix checksums in time logarithmic in the length a header claims (a log whose
/// every line claims a record to its end would otherwise cost time quadratic in its size).
/// A compact record is at most a few hundred bytes: it is left to [`read`].
pub fn may_hold_record(log: &LaneChecksums, pos: u64, limit: u64) -> bool {
    let limit = limit.min(log.end());
    if pos + COMPACT_HEADER_LEN as u64 <= limit && log.bytes(pos, 1)[0] == COMPACT_TAG {
        return true;
    }
    if pos + HEADER_LEN as u64 > limit {
        return false;
    }
    let head = log.bytes(pos, HEADER_LEN);
    let Some((_, len)) = full_header(head, pos, limit) else {
        return false;
    };
    let body = log.span_crc(pos + HEADER_LEN as u64, pos + len);
    let crc = combine(crc32fast::hash(&head[..28]), body, len - HEADER_LEN as u64);
    let mut hasher = crc32fast::Hasher::new_with_initial_len(crc, len - 4);
    hasher.update(&pos.to_le_bytes());
    hasher.finalize() == half(head, 28)
}

/// The kind and length a full header at `pos` names, if its magic is a record's and the
/// record it claims fits before `limit`.
fn full_header(head: &[u8], pos: u64, limit: u64) -> Option<(Kind, u64)> {
    let kind = Kind::from_magic(&head[0..4])?;
    let len = u64::from(half(head, 4));
    (len >= HEADER_LEN as u64 && pos + len <= limit).then_some((kind, len))
}

fn is_compact<P: Persist>(pm: &P, pos: u64) -> bool {
    let mut tag = [0u8];
    pm.read(pos, &mut tag);
    tag[0] == COMPACT_TAG
}

fn read_compact<P: Persist>(pm: &P, pos: u64, limit: u64) -> TxResult<Option<Record>> {
    let mut head = [0u8; COMPACT_HEADER_LEN];
    pm.read(pos, &mut head);
    let len = compact_len(&head);
    if pos + len > limit {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len as usize];
    pm.read(pos, &mut bytes);
    if compact_checksum(&bytes, pos) != half(&bytes, 12) {
        return Ok(None);
    }
    decode_compact(pm.len(), pos, &bytes).map(Some)
}

fn decode_compact(pool_len: u64, pos: u64, b: &[u8]) -> TxResult<Record> {
    let bad = |what: &str| TxError::Corrupted(format!("intact mvcc record at {pos:#x}: {what}"));
    let packed = u16::from_le_bytes([b[2], b[3]]);
    let args_end = COMPACT_HEADER_LEN + usize::from(b[1]);
    let padded = args_end.next_multiple_of(8);
    if b[args_end..padded].iter().any(|&x| x != 0) {
        return Err(bad("non-zero padding after the arguments"));
    }
    let actions = b[padded..]
        .chunks_exact(COMPACT_ACTION_LEN)
        .map(|w| expand_action(word(w, 0), pool_len).map_err(|e| bad(&e)))
        .collect::<TxResult<Vec<_>>>()?;
    Ok(Record {
        kind: Kind::Logical,
        ts: compact_ts(b),
        pos,
        len: b.len() as u64,
        prev: full_link(u16::from_le_bytes([b[4], b[5]])),
        op: packed & (COMPACT_OPS - 1),
        args: b[COMPACT_HEADER_LEN..args_end].to_vec(),
        ranges: Vec::new(),
        actions,
        compact: true,
    })
}

/// The kind and timestamp named by a record header at `pos` that carries a record magic,
/// whether or not the record verifies (recovery tells a damaged record from a torn one with
/// it; [`read`] decides whether the record is intact).
pub fn claimed<P: Persist>(pm: &P, pos: u64, limit: u64) -> Option<(Kind, u64)> {
    if pos + COMPACT_HEADER_LEN as u64 <= limit && is_compact(pm, pos) {
        let mut head = [0u8; COMPACT_HEADER_LEN];
        pm.read(pos, &mut head);
        return Some((Kind::Logical, compact_ts(&head)));
    }
    if pos + HEADER_LEN as u64 > limit {
        return None;
    }
    let mut magic = [0u8; 4];
    pm.read(pos, &mut magic);
    Kind::from_magic(&magic).map(|kind| (kind, pm.read_u64(pos + 8)))
}

fn decode(pool_len: u64, kind: Kind, pos: u64, b: &[u8]) -> TxResult<Record> {
    let bad = |what: &str| TxError::Corrupted(format!("intact mvcc record at {pos:#x}: {what}"));
    let op = u16::from_le_bytes([b[16], b[17]]);
    let actions = usize::from(u16::from_le_bytes([b[18], b[19]]));
    let n = half(b, 20) as usize;
    let mut at = HEADER_LEN;
    let mut record = Record {
        kind,
        ts: word(b, 8),
        pos,
        len: b.len() as u64,
        prev: half(b, 24),
        op,
        args: Vec::new(),
        ranges: Vec::new(),
        actions: Vec::with_capacity(actions),
        compact: false,
    };
    if kind == Kind::Checkpoint && actions != 0 {
        return Err(bad("a checkpoint with heap actions"));
    }
    if kind == Kind::Logical {
        let end = at.checked_add(n).filter(|&e| e <= b.len());
        let end = end.ok_or_else(|| bad("arguments past its end"))?;
        record.args = b[at..end].to_vec();
        at = end.next_multiple_of(8);
    } else {
        for _ in 0..n {
            if at + 8 > b.len() {
                return Err(bad("a truncated range"));
            }
            let header = word(b, at);
            let (addr, len) = (
                header & ((1 << ADDR_BITS) - 1),
                (header >> ADDR_BITS) as usize,
            );
            let end = at + 8 + len;
            if len == 0 || end > b.len() || addr + len as u64 > pool_len {
                return Err(bad("a range outside the record or the pool"));
            }
            record.ranges.push((addr, b[at + 8..end].to_vec()));
            at = end.next_multiple_of(8);
        }
    }
    for _ in 0..actions {
        let bytes = b
            .get(at..at + ACTION_LEN)
            .ok_or_else(|| bad("a truncated action"))?;
        let action = Action::decode(bytes.try_into().expect("16 bytes"), pool_len)
            .map_err(|e| bad(&e.to_string()))?;
        record.actions.push(action);
        at += ACTION_LEN;
    }
    if at != b.len() {
        return Err(bad("a length that does not match its contents"));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashsim::SimPm;
    use pmem::WriteClass;

    #[test]
    fn the_length_from_lengths_alone_matches_the_encoded_record() {
        let big = vec![3u8; 2 * MAX_RANGE + 13];
        let cases: [&[usize]; 5] = [
            &[],
            &[1],
            &[8, 64, 3],
            &[MAX_RANGE],
            &[MAX_RANGE + 1, 2 * MAX_RANGE + 13, 40],
        ];
        for lens in cases {
            let ranges: Vec<(u64, &[u8])> = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| (0x10_0000 * (i as u64 + 1), &big[..n]))
                .collect();
            for actions in [0, 2] {
                let mut out = Vec::new();
                encode(
                    0,
                    Kind::Physical,
                    5,
                    0,
                    0,
                    &[],
                    ranges.iter().copied(),
                    &[],
                    &mut out,
                );
                let by_bytes = encoded_len(0, ranges.iter().copied(), actions);
                let by_lens = encoded_len_of(0, lens.iter().copied(), actions);
                assert_eq!(by_lens, by_bytes, "lengths {lens:?}");
                assert_eq!(
                    by_lens.0,
                    out.len() + ACTION_LEN * actions,
                    "lengths {lens:?}"
                );
            }
        }
    }

    fn sample(kind: Kind, pos: u64) -> Vec<u8> {
        let data = [7u8; 100];
        let ranges = [(0x1000u64, &data[..]), (0x2008, &data[..3])];
        let ranges: &[(u64, &[u8])] = if kind == Kind::Logical { &[] } else { &ranges };
        let args: &[u8] = if kind == Kind::Logical { b"args" } else { &[] };
        let actions = [Action::Or {
            addr: 0x3000,
            mask: 4,
        }];
        let actions: &[Action] = if kind == Kind::Checkpoint {
            &[]
        } else {
            &actions
        };
        let mut out = Vec::new();
        encode(
            pos,
            kind,
            42,
            0,
            9,
            args,
            ranges.iter().copied(),
            actions,
            &mut out,
        );
        let (len, _) = encoded_len(args.len(), ranges.iter().copied(), actions.len());
        if kind == Kind::Logical {
            assert!(
                out.len() < len,
                "the compact form is shorter than the bound"
            );
        } else {
            assert_eq!(len, out.len());
        }
        out
    }

    fn logical(ts: u64, prev: u32, op: u16, args: &[u8], actions: &[Action]) -> Vec<u8> {
        let mut out = Vec::new();
        let none = std::iter::empty();
        encode(
            0x3040,
            Kind::Logical,
            ts,
            prev,
            op,
            args,
            none,
            actions,
            &mut out,
        );
        out
    }

    fn read_back(bytes: &[u8]) -> Record {
        let pm = SimPm::new(1 << 16, Default::default());
        pm.write(0x3040, bytes, WriteClass::Log);
        read(&pm, 0x3040, 0x8000).expect("ok").expect("intact")
    }

    const PUBLISH: Action = Action::Or {
        addr: 0x5008,
        mask: 1 << 5,
    };

    #[test]
    fn a_map_insert_is_a_40_byte_compact_record_with_every_field() {
        let bytes = logical(0x1234_5678_9ABC, 3, 2, &[0xAB; 16], &[PUBLISH]);
        assert_eq!(bytes.len(), 40);
        let rec = read_back(&bytes);
        assert!(rec.compact);
        assert_eq!(
            (rec.kind, rec.ts, rec.prev, rec.op),
            (Kind::Logical, 0x1234_5678_9ABC, 3, 2)
        );
        assert_eq!(
            (rec.args, rec.actions, rec.len),
            (vec![0xAB; 16], vec![PUBLISH], 40)
        );
    }

    #[test]
    fn compact_actions_round_trip_and_others_take_the_full_form() {
        let compact = [
            PUBLISH,
            Action::AndNot {
                addr: 0x5010,
                mask: 1 << 47,
            },
            Action::Set {
                addr: 0x6000,
                value: 0,
            },
        ];
        let rec = read_back(&logical(9, 1, 4, b"key", &compact));
        assert!(rec.compact);
        assert_eq!(rec.actions, compact);
        assert_eq!(rec.args, b"key");
        for action in [
            Action::Or {
                addr: 0x5008,
                mask: 3,
            },
            Action::Set {
                addr: 0x6000,
                value: 7,
            },
            Action::Zero {
                addr: 0x6000,
                len: 64,
            },
        ] {
            let rec = read_back(&logical(9, 1, 4, b"key", &[PUBLISH, action]));
            assert!(!rec.compact, "{action:?}");
            assert_eq!(rec.actions, [PUBLISH, action]);
        }
    }

    #[test]
    fn fields_too_wide_for_the_compact_form_take_the_full_form_exactly() {
        let cases: [(u64, u32, u16, usize, usize); 6] = [
            (1 << 48, 1, 1, 8, 1),
            (9, 0xFFFF, 1, 8, 1),
            (9, 0x1_0000, 1, 8, 1),
            (9, 1, 1 << 12, 8, 1),
            (9, 1, 1, 256, 1),
            (9, 1, 1, 8, 16),
        ];
        for (ts, prev, op, args, actions) in cases {
            let (args, actions) = (vec![5u8; args], vec![PUBLISH; actions]);
            let rec = read_back(&logical(ts, prev, op, &args, &actions));
            assert!(!rec.compact, "ts {ts:#x} prev {prev:#x} op {op:#x}");
            assert_eq!((rec.ts, rec.prev, rec.op), (ts, prev, op));
            assert_eq!((rec.args, rec.actions), (args, actions));
        }
        for (prev, kept) in [(0, 0), (0xFFFE, 0xFFFE), (u32::MAX, u32::MAX)] {
            let rec = read_back(&logical(1 << 40, prev, 4095, &[1; 255], &[PUBLISH; 15]));
            assert!(rec.compact);
            assert_eq!((rec.prev, rec.op, rec.args.len()), (kept, 4095, 255));
        }
    }

    /// The example of `docs/mvcc-format.md` §3.
    #[test]
    fn the_documented_compact_example_matches_the_encoder() {
        let args: Vec<u8> = [42u64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let bytes = logical(5, 2, 1, &args, &[PUBLISH]);
        let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex.join(" "),
            "4c 10 01 10 02 00 05 00 00 00 00 00 03 10 0f 11 2a 00 00 00 00 00 00 00 \
             07 00 00 00 00 00 00 00 08 50 00 00 00 00 00 45"
        );
    }

    /// The full-form example of `docs/mvcc-format.md` §3: a link too wide for the compact form.
    #[test]
    fn the_documented_full_example_matches_the_encoder() {
        let args: Vec<u8> = (1u64..=5).flat_map(|v| v.to_le_bytes()).collect();
        let bytes = logical(0x1_0005, 0x1_0000, 7, &args, &[]);
        let hex: Vec<String> = bytes[..32].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex.join(" "),
            "46 4d 4f 4c 48 00 00 00 05 00 01 00 00 00 00 00 07 00 00 00 28 00 00 00 \
             00 00 01 00 29 50 f0 d0"
        );
    }

    #[test]
    fn an_intact_compact_record_with_a_bad_action_or_padding_is_corrupted() {
        let pm = SimPm::new(1 << 16, Default::default());
        let mut bytes = logical(5, 2, 1, b"abc", &[PUBLISH]);
        for (at, value) in [(20usize, 1u8), (31, 0xC0 | 1)] {
            let mut bad = bytes.clone();
            bad[at] = value;
            let crc = compact_checksum(&bad, 0x3040);
            bad[12..16].copy_from_slice(&crc.to_le_bytes());
            pm.write(0x3040, &bad, WriteClass::Log);
            assert!(
                matches!(read(&pm, 0x3040, 0x8000), Err(TxError::Corrupted(_))),
                "byte {at}"
            );
        }
        bytes[31] = 0;
        let crc = compact_checksum(&bytes, 0x3040);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
        pm.write(0x3040, &bytes, WriteClass::Log);
        assert!(matches!(
            read(&pm, 0x3040, 0x8000),
            Err(TxError::Corrupted(_))
        ));
    }

    #[test]
    fn records_round_trip_and_any_damage_makes_them_absent() {
        let pm = SimPm::new(1 << 16, Default::default());
        for kind in [Kind::Logical, Kind::Physical, Kind::Checkpoint] {
            let bytes = sample(kind, 0x4000);
            pm.write(0x4000, &bytes, WriteClass::Log);
            let rec = read(&pm, 0x4000, 0x8000).expect("ok").expect("intact");
            assert_eq!((rec.kind, rec.ts), (kind, 42));

            // The same bytes elsewhere do not verify.
            pm.write(0x6000, &bytes, WriteClass::Log);
            assert!(read(&pm, 0x6000, 0x8000).expect("ok").is_none());
            for at in 0..bytes.len() {
                let mut damaged = bytes.clone();
                damaged[at] ^= 0x20;
                pm.write(0x4000, &damaged, WriteClass::Log);
                assert!(
                    read(&pm, 0x4000, 0x8000).expect("ok").is_none(),
                    "byte {at}"
                );
            }
        }
    }

    #[test]
    fn the_prefix_checksum_search_finds_exactly_the_records_read_finds() {
        use rand::{Rng, SeedableRng};
        const BASE: u64 = 0x4000;
        const LOG: u64 = 64 * 64;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut noise: Vec<u8> = (0..LOG).map(|_| rng.random()).collect();
        // Every line claims a full record of some length: each is a candidate.
        for (k, line) in noise.chunks_exact_mut(64).enumerate() {
            let magic = [Kind::Logical, Kind::Physical, Kind::Checkpoint][k % 3].magic();
            line[..4].copy_from_slice(&magic);
            let room = LOG - 64 * k as u64;
            let len = rng.random_range(HEADER_LEN as u64 / 8..=room / 8) * 8;
            line[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        }
        let pm = SimPm::new(1 << 16, Default::default());
        pm.write(BASE, &noise, WriteClass::Log);
        for (line, kind) in [
            (0, Kind::Physical),
            (9, Kind::Checkpoint),
            (40, Kind::Logical),
        ] {
            let pos = BASE + 64 * line;
            pm.write(pos, &sample(kind, pos), WriteClass::Log);
        }
        let log = LaneChecksums::read(&pm, BASE, LOG, HEADER_LEN);
        let mut found = 0;
        for pos in (BASE..BASE + LOG).step_by(64) {
            let fast = may_hold_record(&log, pos, BASE + LOG);
            let slow = matches!(read(&pm, pos, BASE + LOG), Ok(Some(_)));
            assert!(fast || !slow, "a record the search would skip at {pos:#x}");
            if log.bytes(pos, 1)[0] != COMPACT_TAG {
                assert_eq!(fast, slow, "line {pos:#x}");
            }
            found += usize::from(slow);
        }
        assert_eq!(found, 3);
    }
}
