//! The records of the operation logs (OLog) and of the checkpoint log (CLog): one 32-byte
//! header with a CRC-32 bound to the record's position, then a payload
//! (`docs/mvcc-format.md` §3 and §4).
//!
//! | Kind | Magic | Payload |
//! |---|---|---|
//! | logical operation | `"FMOL"` | the operation's arguments (padded to 8), then heap actions |
//! | physical write set | `"FMOP"` | byte ranges, then heap actions |
//! | checkpoint | `"FMCK"` | byte ranges (the changed bytes of the checkpointed chunks) |
//!
//! A torn or foreign record is simply absent (`Ok(None)`); an intact record whose content
//! is malformed is `Corrupted`.

use heap::{ACTION_LEN, Action};
use pmem::Persist;
use tx::{TxError, TxResult};

/// Bytes of a record header.
pub const HEADER_LEN: usize = 32;
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

/// Encoded length and range-entry count of a record with these contents.
pub fn encoded_len<'a>(
    args: usize,
    ranges: impl Iterator<Item = (u64, &'a [u8])>,
    actions: usize,
) -> (usize, usize) {
    let (mut len, mut count) = (HEADER_LEN + args.next_multiple_of(8), 0);
    for (_, piece) in split(ranges) {
        len += 8 + piece.len().next_multiple_of(8);
        count += 1;
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
    if pos + HEADER_LEN as u64 > limit {
        return Ok(None);
    }
    let mut head = [0u8; HEADER_LEN];
    pm.read(pos, &mut head);
    let Some(kind) = Kind::from_magic(&head[0..4]) else {
        return Ok(None);
    };
    let len = u64::from(half(&head, 4));
    if len < HEADER_LEN as u64 || pos + len > limit {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len as usize];
    pm.read(pos, &mut bytes);
    if checksum(&bytes, pos) != half(&bytes, 28) {
        return Ok(None);
    }
    decode(pm.len(), kind, pos, &bytes).map(Some)
}

/// The kind and timestamp named by a record header at `pos` that carries a record magic,
/// whether or not the record verifies (recovery tells a damaged record from a torn one with
/// it; [`read`] decides whether the record is intact).
pub fn claimed<P: Persist>(pm: &P, pos: u64, limit: u64) -> Option<(Kind, u64)> {
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
        assert_eq!(len, out.len());
        out
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
}
