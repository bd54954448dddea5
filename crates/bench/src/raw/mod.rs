//! The raw reference: Silo's Array swap and a hash-map upsert written directly against the
//! persistence seam, with no engine, no workload trait and no transaction interface — the
//! floor the engines are measured against (`ferrite bench --engine raw`).
//!
//! - [`Durability::Persistent`]: one redo record streamed to the log, one fence, the new
//!   values stored in place and their lines written back (no second fence: the next
//!   operation's fence completes them). Crash-consistent: recovery replays the newest intact
//!   record ([`log`]), and the crash simulator checks it at every fence (tests below).
//! - [`Durability::Volatile`]: the same loop, record included, without write-backs or fence.
//!
//! It uses the same operation generator and element values as the workloads, so the
//! structures see the same accesses as under an engine.
//!
//! Pool layout (in the arena; byte layout in `docs/tx-format.md`, "The raw reference"):
//! a 64-byte header, the log (a ring of record slots), then the data.

mod array;
mod hash;
mod log;

pub use array::RawArray;
pub use hash::RawHash;

use crate::choice::{LAYOUT, WorkloadChoice};
use crate::runner::{Measurement, RunError, RunSpec, Subject, Turn, measure_subject};
use pmem::{CreateOptions, Native, Persist, Pool, Region, WriteClass};
use tx::{TxError, TxResult};
use workloads::Params;

/// Whether the raw reference persists its operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Durability {
    /// Redo record, one fence, in-place stores written back.
    Persistent,
    /// The same stores, no write-back, no fence.
    Volatile,
}

const MAGIC: u64 = u64::from_le_bytes(*b"FRRAWREF");
const VERSION: u32 = 1;
const HEADER_LEN: u64 = 64;
/// Bytes of the raw reference's header, before its log.
pub(crate) const HEADER_BYTES: u64 = HEADER_LEN;
/// Bytes of log (the redo engine's default lane size).
pub const LOG_BYTES: u64 = 1 << 20;

/// Which structure a raw pool holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Structure {
    Array = 1,
    Hash = 2,
}

/// Where a raw structure's parts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Elements (array) or table slots (hash).
    count: u64,
    /// Bytes per element (array) or per table slot (hash).
    item_len: u64,
    log: Region,
    slot_len: u64,
    data: Region,
}

impl Geometry {
    /// The geometry of `count` items of `item_len` bytes with log records of up to
    /// `record_len` bytes and about `log_bytes` of log, in `region`.
    fn plan(
        region: Region,
        (count, item_len): (u64, u64),
        record_len: usize,
        log_bytes: u64,
    ) -> TxResult<Geometry> {
        let slot_len = (record_len as u64).next_multiple_of(64);
        let log = Region {
            offset: region.offset + HEADER_LEN,
            len: (log_bytes / slot_len).max(2) * slot_len,
        };
        let data_len = count
            .checked_mul(item_len)
            .ok_or_else(|| TxError::abort("raw reference: size overflows"))?;
        let data = Region {
            offset: log.end(),
            len: data_len,
        };
        if data.end() > region.end() {
            return Err(TxError::OutOfSpace {
                size: data.end() - region.offset,
            });
        }
        Ok(Geometry {
            count,
            item_len,
            log,
            slot_len,
            data,
        })
    }

    fn slots(&self) -> u64 {
        self.log.len / self.slot_len
    }

    /// Bytes of the log.
    pub(crate) fn log_bytes(&self) -> u64 {
        self.log.len
    }

    /// Bytes of the data (the array, or the table's slots).
    pub(crate) fn data_bytes(&self) -> u64 {
        self.data.len
    }

    /// Writes the header and a zeroed log, durably.
    fn format<P: Persist>(&self, pm: &P, structure: Structure) {
        let at = self.log.offset - HEADER_LEN;
        pm.write(at, &self.header(structure), WriteClass::Meta);
        pm.fill(self.log.offset, self.log.len, 0, WriteClass::Log);
        pm.persist(at, HEADER_LEN + self.log.len);
    }

    fn header(&self, structure: Structure) -> [u8; HEADER_LEN as usize] {
        let mut bytes = [0u8; HEADER_LEN as usize];
        bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&(structure as u32).to_le_bytes());
        bytes[16..24].copy_from_slice(&self.count.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.item_len.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.slots().to_le_bytes());
        bytes[40..48].copy_from_slice(&self.slot_len.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..48]);
        bytes[48..52].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Checks that `region` holds a raw `structure` laid out as this geometry says.
    fn verify<P: Persist>(&self, pm: &P, structure: Structure) -> TxResult<()> {
        let mut found = [0u8; HEADER_LEN as usize];
        pm.read(self.log.offset - HEADER_LEN, &mut found);
        if found == self.header(structure) {
            return Ok(());
        }
        let magic = u64::from_le_bytes(found[..8].try_into().expect("8 bytes"));
        let version = u32::from_le_bytes(found[8..12].try_into().expect("4 bytes"));
        Err(TxError::Corrupted(match (magic, version) {
            (MAGIC, VERSION) => "raw reference: header of another structure or damaged".into(),
            (MAGIC, other) => format!("raw reference: version {other}, expected {VERSION}"),
            _ => "raw reference: no raw header".into(),
        }))
    }
}

/// The geometry of `workload`'s raw structure with `params` in `arena`, with the log of a
/// measured run ([`LOG_BYTES`]); `OutOfSpace` when it does not fit, `Abort` for a workload
/// the raw reference lacks.
pub(crate) fn plan(workload: WorkloadChoice, arena: Region, params: &Params) -> TxResult<Geometry> {
    match workload {
        WorkloadChoice::Array => array::plan(arena, params, LOG_BYTES),
        WorkloadChoice::Hash => hash::plan(arena, params, LOG_BYTES),
        other => Err(TxError::abort(format!(
            "the raw reference has only array and hash, not {}",
            other.name()
        ))),
    }
}

/// Lays out and loads `workload`'s raw structure in a new pool of `size` bytes at `path` (the
/// setup of a measured run, without the run; for the tests of `crate::space`).
#[cfg(test)]
pub(crate) fn format_only(
    workload: WorkloadChoice,
    path: &std::path::Path,
    size: u64,
    params: &Params,
) -> TxResult<()> {
    let _cleanup = crate::scratch::ScratchFile::new(path.to_owned());
    let pool: Pool<Native> = Pool::create(path, &CreateOptions::new(LAYOUT, size))?;
    let durability = Durability::Persistent;
    match workload {
        WorkloadChoice::Array => RawArray::format(pool, params, durability, LOG_BYTES).map(drop),
        WorkloadChoice::Hash => RawHash::format(pool, params, durability, LOG_BYTES).map(drop),
        other => Err(TxError::abort(format!("no raw {}", other.name()))),
    }
}

/// Runs `spec` on the raw reference with `durability`: Array and Hash only, one thread.
pub(crate) fn run(
    spec: &RunSpec,
    durability: Durability,
    turn: &Turn,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Measurement, RunError> {
    if spec.params.threads > 1 {
        return Err(RunError::Unsupported(
            "the raw reference runs one thread".into(),
        ));
    }
    let name = crate::scratch::unique_name("raw");
    let path = spec.pool_dir.join(name);
    let _cleanup = crate::scratch::ScratchFile::new(path.clone());
    let mut options = CreateOptions::new(LAYOUT, spec.pool_size);
    options.native = crate::choice::native_options(spec.pm_latency)?;
    let pool: Pool<Native> =
        Pool::create(&path, &options).map_err(crate::choice::OpenError::from)?;
    match spec.workload {
        WorkloadChoice::Array => {
            let array = RawArray::format(pool, &spec.params, durability, LOG_BYTES)
                .map_err(RunError::Setup)?;
            let mut measurement = measure_subject(spec, "array".into(), &array, turn, progress)?;
            array
                .check_after(crate::runner::indexes_run(spec))
                .map_err(RunError::Check)?;
            measurement.checked = true;
            Ok(measurement)
        }
        WorkloadChoice::Hash => {
            let table = RawHash::format(pool, &spec.params, durability, LOG_BYTES)
                .map_err(RunError::Setup)?;
            let name = format!("hash-{}%", spec.params.update_percent);
            let mut measurement = measure_subject(spec, name, &table, turn, progress)?;
            table.check().map_err(RunError::Check)?;
            measurement.checked = true;
            Ok(measurement)
        }
        other => Err(RunError::Unsupported(format!(
            "the raw reference has only array and hash, not {}",
            other.name()
        ))),
    }
}

/// Completes the last operation's write-backs (a fence), as the next operation would.
fn finish<P: Persist>(pm: &P, durability: Durability) {
    if durability == Durability::Persistent {
        pm.fence();
    }
}

impl<P: Persist> Subject for RawArray<P> {
    #[inline]
    fn run_op(&self, _thread: usize, index: u64) -> Result<workloads::OpKind, TxError> {
        Ok(self.swap(index))
    }

    fn sync(&self) -> Result<(), TxError> {
        finish(self.pool().pm(), self.durability());
        Ok(())
    }

    fn counters(&self) -> pmem::Counters {
        self.pool().pm().stats().snapshot()
    }
}

impl<P: Persist> Subject for RawHash<P> {
    #[inline]
    fn run_op(&self, _thread: usize, index: u64) -> Result<workloads::OpKind, TxError> {
        Ok(self.upsert(index))
    }

    fn sync(&self) -> Result<(), TxError> {
        finish(self.pool().pm(), self.durability());
        Ok(())
    }

    fn counters(&self) -> pmem::Counters {
        self.pool().pm().stats().snapshot()
    }
}
