//! Size-class churn for the run-return review (`docs/heap-format.md` §11.1): blocks named by
//! slot tables, each block's bytes derived from its tag so that any overlap, stale replay or
//! write-back into a reused chunk shows up as a wrong byte.
//!
//! A slot is 16 bytes: the block's address and its tag (0 for an empty slot). A tag holds the
//! block's requested size in its low 24 bits and a serial number above them; the block's bytes
//! at the stamped offsets (`stamps`) are a hash of the tag and the offset. Only stamps are
//! written, not whole blocks, so a transaction stays far below every engine's log size.

// Each test binary uses part of this module.
#![allow(dead_code)]

use conformance::{LAYOUT, MvccFactory};
use mvcc::MvccOptions;
use pmem::{MemPm, Pool};
use tx::{EngineOptions, LogMode, NoReplay, Tx, TxError, TxResult};

/// Size of the suites' pool files.
pub const POOL: u64 = 1 << 20;
/// Chunks of 4 KiB: a 1 MiB pool has about 200, so the heap fills and returns runs often.
pub const CHUNK_SHIFT: u32 = 12;
pub const CHUNK: u64 = 1 << CHUNK_SHIFT;
/// Bytes of one slot: address, tag.
pub const SLOT: u64 = 16;
/// Bytes of one stamp.
const STAMP: u64 = 64;
/// Distance between stamps in a large block.
const STAMP_EVERY: u64 = 2048;

/// A tag for a block of `size` bytes with serial number `serial` (both nonzero tags).
pub fn tag(serial: u64, size: u64) -> u64 {
    assert!(size > 0 && size < 1 << 24, "size {size}");
    (serial << 24) | size
}

/// The requested size a tag records.
pub fn size_of(tag: u64) -> u64 {
    tag & ((1 << 24) - 1)
}

/// The `(offset, len)` pieces of a block of `size` bytes that carry its pattern: one stamp
/// every [`STAMP_EVERY`] bytes from the start (the first covers the place where a run's marker
/// and bitmap were), and the block's last bytes.
pub fn stamps(size: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = (0..size)
        .step_by(STAMP_EVERY as usize)
        .map(|off| (off, STAMP.min(size - off)))
        .collect();
    let tail = size.saturating_sub(STAMP);
    if out.last().is_some_and(|&(off, len)| off + len <= tail) {
        out.push((tail, size - tail));
    }
    out
}

/// Byte `at` (offset in the block) of the pattern of `tag`.
fn pattern_byte(tag: u64, at: u64) -> u8 {
    let mut x = tag
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(at.wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 32) as u8
}

fn pattern(tag: u64, off: u64, len: u64) -> Vec<u8> {
    (off..off + len).map(|at| pattern_byte(tag, at)).collect()
}

/// Writes the pattern of `tag` into the block at `addr`.
pub fn fill<T: Tx>(tx: &mut T, addr: u64, tag: u64) -> TxResult<()> {
    for (off, len) in stamps(size_of(tag)) {
        tx.write_raw(addr + off, &pattern(tag, off, len))?;
    }
    Ok(())
}

/// Checks that the block at `addr` still holds the pattern of `tag`.
pub fn verify<T: Tx>(tx: &mut T, addr: u64, tag: u64) -> TxResult<()> {
    for (off, len) in stamps(size_of(tag)) {
        let mut got = vec![0u8; len as usize];
        tx.read_raw(addr + off, &mut got)?;
        let want = pattern(tag, off, len);
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0) as u64;
            return Err(TxError::Corrupted(format!(
                "block at {addr:#x} (tag {tag:#x}, {} bytes): byte {} is {:#04x}, expected \
                 {:#04x}",
                size_of(tag),
                off + at,
                got[at as usize],
                want[at as usize]
            )));
        }
    }
    Ok(())
}

/// Reads slot `slot` of the table at `table`: `(addr, tag)`.
pub fn read_slot<T: Tx>(tx: &mut T, table: u64, slot: u64) -> TxResult<(u64, u64)> {
    let mut bytes = [0u8; SLOT as usize];
    tx.read_raw(table + slot * SLOT, &mut bytes)?;
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    Ok((word(0), word(8)))
}

/// Writes slot `slot` of the table at `table`.
pub fn write_slot<T: Tx>(tx: &mut T, table: u64, slot: u64, addr: u64, tag: u64) -> TxResult<()> {
    let mut bytes = [0u8; SLOT as usize];
    bytes[..8].copy_from_slice(&addr.to_le_bytes());
    bytes[8..].copy_from_slice(&tag.to_le_bytes());
    tx.write_raw(table + slot * SLOT, &bytes)
}

/// Allocates a block for `tag`, fills it and names it in the slot (which must be empty).
pub fn alloc_into<T: Tx>(tx: &mut T, table: u64, slot: u64, tag: u64) -> TxResult<u64> {
    let addr = tx.alloc_raw(size_of(tag))?;
    fill(tx, addr, tag)?;
    write_slot(tx, table, slot, addr, tag)?;
    Ok(addr)
}

/// Checks and frees the block the slot names, and empties the slot.
pub fn free_slot<T: Tx>(tx: &mut T, table: u64, slot: u64) -> TxResult<()> {
    let (addr, tag) = read_slot(tx, table, slot)?;
    if tag == 0 {
        return Err(TxError::Corrupted(format!("slot {slot} is empty")));
    }
    verify(tx, addr, tag)?;
    tx.free_raw(addr)?;
    write_slot(tx, table, slot, 0, 0)
}

/// Rewrites the block the slot names with the pattern of `tag` (of the same size), in place:
/// a multi-version engine gives its lines versions, headers and checkpointed bytes.
pub fn update_slot<T: Tx>(tx: &mut T, table: u64, slot: u64, tag: u64) -> TxResult<()> {
    let (addr, old) = read_slot(tx, table, slot)?;
    if old == 0 || size_of(old) != size_of(tag) {
        return Err(TxError::Corrupted(format!(
            "slot {slot} holds tag {old:#x}, not a block of {} bytes",
            size_of(tag)
        )));
    }
    verify(tx, addr, old)?;
    fill(tx, addr, tag)?;
    write_slot(tx, table, slot, addr, tag)
}

/// Live blocks of every thread by address, to catch two live blocks that overlap. A block is
/// listed after the commit that allocated it and unlisted before the transaction that frees
/// it starts, so a correct heap can never hand out a listed block's bytes.
#[derive(Default)]
pub struct Live {
    blocks: std::sync::Mutex<std::collections::BTreeMap<u64, (u64, u64)>>,
}

impl Live {
    /// Lists `[addr, addr + len)`; fails if it overlaps a listed block.
    pub fn insert(&self, addr: u64, len: u64, tag: u64) -> Result<(), String> {
        let mut blocks = self.blocks.lock().expect("no thread panicked holding it");
        let end = addr + len;
        if let Some((&start, &(other_end, other))) = blocks.range(..end).next_back()
            && other_end > addr
        {
            return Err(format!(
                "block [{addr:#x}, {end:#x}) (tag {tag:#x}) overlaps the live block \
                 [{start:#x}, {other_end:#x}) (tag {other:#x})"
            ));
        }
        blocks.insert(addr, (end, tag));
        Ok(())
    }

    /// Unlists the block at `addr`.
    pub fn remove(&self, addr: u64) {
        self.blocks
            .lock()
            .expect("no thread panicked holding it")
            .remove(&addr);
    }
}

/// A slot-table pool directory: `/dev/shm` where it exists (pools in DRAM, as the project's
/// other `SIGKILL` suites use), else the temporary directory.
pub fn pool_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// Redo and undo options of the slot-table suites: `lanes` lanes of 32 KiB (one a thread),
/// chunks of [`CHUNK`] bytes.
pub fn tx_options(lanes: u32) -> EngineOptions {
    EngineOptions {
        lanes,
        lane_size: 32 << 10,
        chunk_shift: CHUNK_SHIFT,
        log_mode: LogMode::Auto,
    }
}

/// The MVCC engine of the slot-table suites, with the same lanes and chunks as
/// [`tx_options`], logs of 32 KiB and 256 versions a thread log.
pub fn mvcc_factory(lanes: u32) -> MvccFactory<NoReplay> {
    MvccFactory {
        options: MvccOptions {
            lanes,
            olog_size: 32 << 10,
            clog_size: 32 << 10,
            chunk_shift: CHUNK_SHIFT,
            tlog_versions: 256,
            ..MvccOptions::small()
        },
        replay: NoReplay,
    }
}

/// The findings that are damage of the deep check (`conformance::corrupt::check_engine_area`)
/// of the pool file at `path` as it is now, run on a private copy so that the file is left
/// as a kill or a close left it.
pub fn file_damage(path: &std::path::Path) -> Result<Vec<String>, String> {
    let image = std::fs::read(path).map_err(|e| format!("read the pool file: {e}"))?;
    let copy = Pool::attach(MemPm::new(image), LAYOUT).map_err(|e| e.to_string())?;
    Ok(
        conformance::corrupt::check_engine_area(copy.pm(), copy.arena())
            .iter()
            .filter(|f| f.is_damage())
            .map(|f| f.to_string())
            .collect(),
    )
}
