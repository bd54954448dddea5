//! `MemEngine`: a volatile engine over a DRAM byte array. No persistence and no logging to
//! PM; transactions are serialised by one mutex and rolled back from a DRAM undo list.
//!
//! It is the "no persistence" reference point, the substrate of the Silo trace recorder, and
//! a fast engine for unit-testing workloads.

use crate::api::{
    Engine, Isolation, Lifecycle, Tx, TxError, TxResult, new_engine_id, pool_tag, run_transaction,
};
use crate::bytes::{copy_bytes, extend_bytes};
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;

const ROOT_OFFSET: u64 = 4096;
const ROOT_SIZE: u64 = 4096;
/// Bytes below the bump heap (a header page and the root), for sizing a pool before setup.
pub const HEAP_START: u64 = ROOT_OFFSET + ROOT_SIZE;
/// Alignment of every block the bump heap hands out.
pub const ALIGN: u64 = 16;

/// The volatile engine.
#[derive(Debug)]
pub struct MemEngine {
    state: Mutex<MemState>,
    tag: u16,
    id: u64,
}

#[derive(Debug)]
struct MemState {
    bytes: Vec<u8>,
    /// Next never-used heap offset.
    bump: u64,
    /// Freed blocks by size.
    free: BTreeMap<u64, Vec<u64>>,
    /// Size of every allocated block.
    sizes: BTreeMap<u64, u64>,
    /// The running transaction's undo journal, reused by every transaction (so a
    /// transaction allocates nothing on the heap in the common case).
    journal: Journal,
}

/// What the running transaction changed: the old bytes of each write (in write order, their
/// bytes concatenated), and the blocks it allocated and freed.
#[derive(Debug, Default)]
struct Journal {
    /// (address, length) of each write's old bytes in `old`.
    writes: Vec<(u64, usize)>,
    old: Vec<u8>,
    allocated: Vec<u64>,
    freed: Vec<u64>,
}

impl Journal {
    fn clear(&mut self) {
        self.writes.clear();
        self.old.clear();
        self.allocated.clear();
        self.freed.clear();
    }
}

impl MemEngine {
    /// An engine with `size` bytes of memory (root object at 4 KiB, heap after it).
    pub fn new(size: u64) -> Self {
        match Self::try_new(size) {
            Ok(engine) => engine,
            Err(error) => panic!("MemEngine of {size} bytes: {error}"),
        }
    }

    /// [`Self::new`] that reports memory the host cannot reserve instead of aborting: a
    /// fallible reservation of the whole size is tried (and released) first, so a size the
    /// allocator refuses is an error before the zeroed (lazily touched) allocation.
    pub fn try_new(size: u64) -> Result<Self, std::collections::TryReserveError> {
        assert!(
            size > HEAP_START,
            "MemEngine needs more than {HEAP_START} bytes"
        );
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        Vec::<u8>::new().try_reserve_exact(len)?;
        let state = MemState {
            bytes: vec![0; len],
            bump: HEAP_START,
            free: BTreeMap::new(),
            sizes: BTreeMap::new(),
            journal: Journal::default(),
        };
        Ok(MemEngine {
            state: Mutex::new(state),
            tag: pool_tag(b"ferrite-memengin"),
            id: new_engine_id(),
        })
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.state.lock().sizes.values().sum()
    }
}

/// A transaction of [`MemEngine`].
#[derive(Debug)]
pub struct MemTx<'e> {
    state: MutexGuard<'e, MemState>,
    tag: u16,
    id: u64,
}

impl MemTx<'_> {
    fn range(&self, addr: u64, len: usize) -> TxResult<std::ops::Range<usize>> {
        let end = addr
            .checked_add(len as u64)
            .filter(|&end| end <= self.state.bytes.len() as u64);
        match end {
            Some(end) if addr >= ROOT_OFFSET => Ok(addr as usize..end as usize),
            _ => Err(TxError::OutOfBounds {
                addr,
                len: len as u64,
            }),
        }
    }
}

impl Lifecycle for MemTx<'_> {
    fn abort(&mut self) {
        let state = &mut *self.state;
        let mut end = state.journal.old.len();
        for &(addr, len) in state.journal.writes.iter().rev() {
            let (start, old) = (addr as usize, &state.journal.old[end - len..end]);
            copy_bytes(&mut state.bytes[start..start + len], old);
            end -= len;
        }
        for i in 0..state.journal.allocated.len() {
            let addr = state.journal.allocated[i];
            state.release(addr);
        }
        state.journal.clear();
    }

    fn commit(&mut self) -> TxResult<()> {
        let state = &mut *self.state;
        for i in 0..state.journal.freed.len() {
            let addr = state.journal.freed[i];
            state.release(addr);
        }
        state.journal.clear();
        Ok(())
    }
}

impl MemState {
    fn release(&mut self, addr: u64) {
        if let Some(size) = self.sizes.remove(&addr) {
            self.free.entry(size).or_default().push(addr);
        }
    }

    fn allocate(&mut self, size: u64) -> Option<u64> {
        let size = size.max(1).next_multiple_of(ALIGN);
        let reused = self.free.get_mut(&size).and_then(Vec::pop);
        let addr = match reused {
            Some(addr) => addr,
            None => {
                let addr = self.bump;
                let end = addr
                    .checked_add(size)
                    .filter(|&end| end <= self.bytes.len() as u64)?;
                self.bump = end;
                addr
            }
        };
        self.sizes.insert(addr, size);
        Some(addr)
    }
}

impl Tx for MemTx<'_> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        let range = self.range(addr, dst.len())?;
        copy_bytes(dst, &self.state.bytes[range]);
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        let range = self.range(addr, src.len())?;
        let state = &mut *self.state;
        extend_bytes(&mut state.journal.old, &state.bytes[range.clone()]);
        state.journal.writes.push((addr, src.len()));
        copy_bytes(&mut state.bytes[range], src);
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        let addr = self
            .state
            .allocate(size)
            .ok_or(TxError::OutOfSpace { size })?;
        self.state.journal.allocated.push(addr);
        Ok(addr)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        let state = &mut *self.state;
        if !state.sizes.contains_key(&addr) || state.journal.freed.contains(&addr) {
            return Err(TxError::InvalidFree(addr));
        }
        state.journal.freed.push(addr);
        Ok(())
    }

    fn pool_tag(&self) -> u16 {
        self.tag
    }

    fn root_offset(&self) -> u64 {
        ROOT_OFFSET
    }

    fn engine_id(&self) -> u64 {
        self.id
    }
}

impl Engine for MemEngine {
    type Tx<'e> = MemTx<'e>;

    fn name(&self) -> &'static str {
        "mem"
    }

    fn isolation(&self) -> Isolation {
        Isolation::External
    }

    fn transaction<R, E>(&self, body: impl FnMut(&mut MemTx<'_>) -> Result<R, E>) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let _running = crate::api::enter(self)?;
        let mut state = self.state.lock();
        // A transaction that panicked inside `abort` may have left its journal behind.
        state.journal.clear();
        let tx = MemTx {
            state,
            tag: self.tag,
            id: self.id,
        };
        run_transaction(tx, body)
    }

    fn counters(&self) -> pmem::Counters {
        pmem::Counters::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PPtr;

    #[test]
    fn commit_keeps_and_abort_discards() {
        let engine = MemEngine::new(1 << 16);
        let obj: PPtr = engine
            .transaction(|tx| {
                let obj = tx.alloc(32)?;
                tx.write_u64(obj, 0, 7)?;
                let root = tx.root::<()>();
                tx.write_ptr(root, 0, obj)?;
                Ok::<_, TxError>(obj)
            })
            .expect("commit");
        let result: TxResult<()> = engine.transaction(|tx| {
            tx.write_u64(obj, 0, 8)?;
            tx.free(obj)?;
            Err(TxError::abort("changed my mind"))
        });
        assert!(matches!(result, Err(TxError::Aborted(_))));
        let value = engine.transaction(|tx| {
            let root = tx.root::<()>();
            let obj: PPtr = tx.read_ptr(root, 0)?;
            tx.read_u64(obj, 0)
        });
        assert_eq!(value.expect("read"), 7);
        assert_eq!(engine.allocated_bytes(), 32);
    }

    #[test]
    fn panic_rolls_back_and_engine_stays_usable() {
        let engine = MemEngine::new(1 << 16);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _: TxResult<()> = engine.transaction(|tx| {
                let root = tx.root::<()>();
                tx.write_u64(root, 0, 99)?;
                panic!("boom");
            });
        }));
        assert!(caught.is_err());
        let value = engine.transaction(|tx| {
            let root = tx.root::<()>();
            tx.read_u64(root, 0)
        });
        assert_eq!(value.expect("read"), 0);
    }

    #[test]
    fn foreign_pointers_are_rejected() {
        let engine = MemEngine::new(1 << 16);
        let result = engine.transaction(|tx| tx.read_u64(PPtr::<()>::from_parts(0x1111, 4096), 0));
        assert!(matches!(result, Err(TxError::InvalidPointer(_))));
    }
}
