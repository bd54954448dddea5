//! The recording engine: a [`tx::Engine`] over [`MemEngine`] that appends every committed
//! transaction's memory events to one simulated core's trace stream.
//!
//! Rules (also in `docs/trace-format.md`):
//!
//! - Each transaction runs on the inner [`MemEngine`]; every [`Tx`] operation is delegated to
//!   its transaction. Its events are buffered and appended to the stream only if it commits:
//!   `[Compute per_transaction]`, `TxBegin`, the body's events, `TxEnd`. Aborted (or
//!   panicking) transactions leave no trace. Read-only transactions are traced like others.
//! - `read_raw(addr, n)` → `[Compute per_access]` then one [`Event::Load`] per 64-byte line
//!   the range touches (each load stays within one line, so a load is at most 64 bytes).
//! - `write_raw(addr, bytes)` → `[Compute per_access]` then the [`trace::store_pieces`] of the
//!   write: pieces within one 8-byte word, each with the bytes' old contents (read from the
//!   inner transaction just before the write; this read is not a traced load) and new ones.
//! - Allocation and free are not traced under the write-minimal discipline: the inner
//!   allocator is volatile DRAM bookkeeping with no memory accesses to model. Under the PMDK
//!   discipline they make the stores libpmemobj's allocator makes ([`crate::pmdk`]): the
//!   object's 16 B header (through `write_raw`) and its bits in the run bitmap. Zero-filled
//!   allocation (`alloc_zeroed`) uses the default [`Tx`] method, which writes the zeros
//!   through `write_raw`, so the zeroing stores are traced (mostly silent on fresh memory).
//! - Addresses are the inner engine's offsets plus [`core_base`] of the core, so the cores'
//!   address spaces never overlap (one independent workload instance per core).
//! - Recording can be switched off ([`Recorder::set_recording`]); workload setup runs with
//!   recording off and is not traced.

use crate::pmdk::{self, AllocMeta};
use crate::spec::StoreDiscipline;
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use trace::{Encoder, Event, store_pieces};
use tx::{Engine, Isolation, MemEngine, Tx, TxError, TxResult};

/// Bits of an address below the core number: core `c`'s addresses start at `c << 40`.
pub const CORE_SHIFT: u32 = 40;

/// Cache-line size used to split loads.
pub const LINE: u64 = 64;

/// The first address of core `core`'s address space.
pub fn core_base(core: u32) -> u64 {
    u64::from(core) << CORE_SHIFT
}

/// The core an address belongs to.
pub fn core_of(addr: u64) -> u32 {
    (addr >> CORE_SHIFT) as u32
}

/// The assumed non-memory work, since the workloads' real computation is not observable
/// through the transaction interface: `per_access` instructions before every `read_raw` /
/// `write_raw` call (address arithmetic, comparisons, copying loops), and `per_transaction`
/// instructions before each transaction's `TxBegin` (choosing the operation, hashing the
/// key, taking the lock, the transaction call itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ComputeModel {
    /// Instructions before each traced access (`read_raw` or `write_raw` call).
    pub per_access: u32,
    /// Instructions before each committed transaction's `TxBegin`.
    pub per_transaction: u32,
}

impl ComputeModel {
    /// The default assumption: 10 instructions per access, 100 per transaction.
    pub const DEFAULT: ComputeModel = ComputeModel {
        per_access: 10,
        per_transaction: 100,
    };
    /// No compute events at all.
    pub const NONE: ComputeModel = ComputeModel {
        per_access: 0,
        per_transaction: 0,
    };
}

impl Default for ComputeModel {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The recording engine of one simulated core.
#[derive(Debug)]
pub struct Recorder {
    inner: MemEngine,
    core: u32,
    compute: ComputeModel,
    discipline: StoreDiscipline,
    recording: AtomicBool,
    stream: Mutex<Stream>,
    /// The PMDK allocator's metadata (PMDK discipline only).
    meta: Mutex<AllocMeta>,
}

/// The core's stream and counters.
#[derive(Debug, Default)]
struct Stream {
    encoder: Encoder,
    transactions: u64,
    /// A reused event buffer (taken by the running transaction).
    scratch: Vec<Event>,
}

impl Recorder {
    /// A recorder for core `core` over `inner`, recording from the start.
    pub fn new(inner: MemEngine, core: u32, compute: ComputeModel) -> Self {
        Recorder {
            inner,
            core,
            compute,
            discipline: StoreDiscipline::WriteMinimal,
            recording: AtomicBool::new(true),
            stream: Mutex::new(Stream::default()),
            meta: Mutex::new(AllocMeta::default()),
        }
    }

    /// The same recorder with store discipline `discipline` (before any transaction runs).
    pub fn with_discipline(mut self, discipline: StoreDiscipline) -> Self {
        self.discipline = discipline;
        self
    }

    /// The allocator metadata, when the discipline models it.
    fn meta(&self) -> Option<parking_lot::MutexGuard<'_, AllocMeta>> {
        (self.discipline == StoreDiscipline::Pmdk).then(|| self.meta.lock())
    }

    /// Switches recording on or off (off: transactions run but emit nothing).
    pub fn set_recording(&self, on: bool) {
        self.recording.store(on, Ordering::Relaxed);
    }

    /// Whether transactions are being recorded.
    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// The simulated core.
    pub fn core(&self) -> u32 {
        self.core
    }

    /// The compute model.
    pub fn compute(&self) -> ComputeModel {
        self.compute
    }

    /// Committed transactions recorded so far.
    pub fn transactions(&self) -> u64 {
        self.stream.lock().transactions
    }

    /// Events recorded so far.
    pub fn events(&self) -> u64 {
        self.stream.lock().encoder.events()
    }

    /// The inner engine (for checks after a run; its accesses are not traced).
    pub fn inner(&self) -> &MemEngine {
        &self.inner
    }

    /// The recorded stream.
    pub fn into_encoder(self) -> Encoder {
        self.stream.into_inner().encoder
    }

    /// Runs `body` on the inner engine without recording.
    fn run_untraced<R, E: From<TxError>>(
        &self,
        mut body: impl FnMut(&mut RecTx<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let base = core_base(self.core);
        let mut meta = self.meta();
        let result = self.inner.transaction(|mem| {
            if let Some(meta) = meta.as_deref_mut() {
                meta.roll_back(); // a retried body starts over
            }
            let mut tx = RecTx::new(mem, None, base, 0, meta.as_deref_mut());
            body(&mut tx)
        });
        settle(meta.as_deref_mut(), result.is_ok());
        result
    }

    /// Runs `body` on the inner engine, buffering its events; appends them if it commits.
    fn run_traced<R, E: From<TxError>>(
        &self,
        mut body: impl FnMut(&mut RecTx<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let base = core_base(self.core);
        let per_access = self.compute.per_access;
        let mut events = std::mem::take(&mut self.stream.lock().scratch);
        let mut meta = self.meta();
        let result = self.inner.transaction(|mem| {
            // A retried body starts from an empty buffer.
            events.clear();
            if let Some(meta) = meta.as_deref_mut() {
                meta.roll_back();
            }
            let mut tx = RecTx::new(
                mem,
                Some(&mut events),
                base,
                per_access,
                meta.as_deref_mut(),
            );
            body(&mut tx)
        });
        settle(meta.as_deref_mut(), result.is_ok());
        let mut stream = self.stream.lock();
        if result.is_ok() {
            stream.append(self.compute.per_transaction, &events);
        }
        events.clear();
        stream.scratch = events;
        result
    }
}

/// Keeps the allocator metadata's changes of a committed transaction, undoes an aborted
/// one's.
fn settle(meta: Option<&mut AllocMeta>, committed: bool) {
    if let Some(meta) = meta {
        if committed {
            meta.commit();
        } else {
            meta.roll_back();
        }
    }
}

impl Stream {
    /// Appends one committed transaction.
    fn append(&mut self, per_transaction: u32, events: &[Event]) {
        if per_transaction > 0 {
            self.encoder.push(&Event::Compute {
                instructions: per_transaction,
            });
        }
        self.encoder.push(&Event::TxBegin);
        events.iter().for_each(|event| self.encoder.push(event));
        self.encoder.push(&Event::TxEnd);
        self.transactions += 1;
    }
}

impl Engine for Recorder {
    type Tx<'e> = RecTx<'e>;

    fn name(&self) -> &'static str {
        "trace"
    }

    fn isolation(&self) -> Isolation {
        self.inner.isolation()
    }

    fn transaction<R, E>(&self, body: impl FnMut(&mut RecTx<'_>) -> Result<R, E>) -> Result<R, E>
    where
        E: From<TxError>,
    {
        if self.is_recording() {
            self.run_traced(body)
        } else {
            self.run_untraced(body)
        }
    }

    fn counters(&self) -> pmem::Counters {
        self.inner.counters()
    }
}

/// The raw operations of an inner transaction, object-safe so that [`RecTx`] can hold the
/// inner engine's transaction whatever its lifetimes.
trait RawOps {
    fn read(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()>;
    fn write(&mut self, addr: u64, src: &[u8]) -> TxResult<()>;
    fn alloc(&mut self, size: u64) -> TxResult<u64>;
    fn free(&mut self, addr: u64) -> TxResult<()>;
    fn tag(&self) -> u16;
    fn root(&self) -> u64;
}

impl<T: Tx> RawOps for T {
    fn read(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        self.read_raw(addr, dst)
    }
    fn write(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        self.write_raw(addr, src)
    }
    fn alloc(&mut self, size: u64) -> TxResult<u64> {
        self.alloc_raw(size)
    }
    fn free(&mut self, addr: u64) -> TxResult<()> {
        self.free_raw(addr)
    }
    fn tag(&self) -> u16 {
        self.pool_tag()
    }
    fn root(&self) -> u64 {
        self.root_offset()
    }
}

/// A transaction of [`Recorder`]: the inner transaction plus the event buffer.
pub struct RecTx<'e> {
    inner: &'e mut (dyn RawOps + 'e),
    events: Option<&'e mut Vec<Event>>,
    base: u64,
    per_access: u32,
    /// The PMDK allocator's metadata (PMDK discipline only).
    meta: Option<&'e mut AllocMeta>,
}

impl fmt::Debug for RecTx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecTx")
            .field("base", &format_args!("{:#x}", self.base))
            .field("recording", &self.events.is_some())
            .field("buffered", &self.events.as_ref().map_or(0, |e| e.len()))
            .finish_non_exhaustive()
    }
}

impl<'e> RecTx<'e> {
    fn new(
        inner: &'e mut (dyn RawOps + 'e),
        events: Option<&'e mut Vec<Event>>,
        base: u64,
        per_access: u32,
        meta: Option<&'e mut AllocMeta>,
    ) -> Self {
        RecTx {
            inner,
            events,
            base,
            per_access,
            meta,
        }
    }

    /// Records the allocator's bitmap stores (one access).
    fn meta_stores(&mut self, stores: &[pmdk::MetaStore]) {
        let base = self.base;
        if let Some(events) = self.access() {
            for &(addr, old, new) in stores {
                events.extend(store_pieces(
                    base + addr,
                    &old.to_le_bytes(),
                    &new.to_le_bytes(),
                ));
            }
        }
    }

    /// The event buffer with the access's compute gap pushed, if recording.
    fn access(&mut self) -> Option<&mut Vec<Event>> {
        let per_access = self.per_access;
        let events = self.events.as_deref_mut()?;
        if per_access > 0 {
            events.push(Event::Compute {
                instructions: per_access,
            });
        }
        Some(events)
    }
}

/// The line-bounded pieces `(addr, size)` of the byte range `addr..addr + len`.
pub fn line_pieces(addr: u64, len: u64) -> impl Iterator<Item = (u64, u8)> {
    let end = addr.saturating_add(len);
    let mut at = addr;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let line_end = (at | (LINE - 1)).saturating_add(1);
        let piece = (line_end.min(end) - at) as u8;
        let here = at;
        at += u64::from(piece);
        Some((here, piece))
    })
}

impl Tx for RecTx<'_> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        self.inner.read(addr, dst)?;
        let base = self.base;
        if dst.is_empty() {
            return Ok(());
        }
        if let Some(events) = self.access() {
            events.extend(
                line_pieces(base + addr, dst.len() as u64)
                    .map(|(addr, size)| Event::Load { addr, size }),
            );
        }
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        if self.events.is_none() || src.is_empty() {
            return self.inner.write(addr, src);
        }
        let mut old = vec![0u8; src.len()];
        self.inner.read(addr, &mut old)?;
        self.inner.write(addr, src)?;
        let base = self.base;
        if let Some(events) = self.access() {
            events.extend(store_pieces(base + addr, &old, src));
        }
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        if self.meta.is_none() {
            return self.inner.alloc(size);
        }
        let block = self.inner.alloc(size + pmdk::HEADER_BYTES)?;
        let [size_word, type_word] = pmdk::header_words(size);
        let mut header = [0u8; pmdk::HEADER_BYTES as usize];
        header[..8].copy_from_slice(&size_word.to_le_bytes());
        header[8..].copy_from_slice(&type_word.to_le_bytes());
        self.write_raw(block, &header)?;
        let stores = self
            .meta
            .as_deref_mut()
            .expect("checked above")
            .allocated(block, size);
        self.meta_stores(&stores);
        Ok(block + pmdk::HEADER_BYTES)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        let Some(meta) = self.meta.as_deref_mut() else {
            return self.inner.free(addr);
        };
        let Some((block, stores)) = meta.freed(addr) else {
            return self.inner.free(addr);
        };
        self.meta_stores(&stores);
        self.inner.free(block)
    }

    fn pool_tag(&self) -> u16 {
        self.inner.tag()
    }

    fn root_offset(&self) -> u64 {
        self.inner.root()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_split_at_line_boundaries() {
        let pieces: Vec<_> = line_pieces(60, 80).collect();
        assert_eq!(pieces, vec![(60, 4), (64, 64), (128, 12)]);
        assert_eq!(line_pieces(0, 64).collect::<Vec<_>>(), vec![(0, 64)]);
        assert_eq!(line_pieces(5, 0).count(), 0);
    }

    #[test]
    fn core_bases_do_not_overlap() {
        assert_eq!(core_base(3), 3 << 40);
        assert_eq!(core_of(core_base(7) + 12345), 7);
    }
}
