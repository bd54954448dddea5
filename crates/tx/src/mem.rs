//! `MemEngine`: a volatile engine over a DRAM byte array. No persistence and no logging to
//! PM; transactions are serialised by one mutex and rolled back from a DRAM undo list.
//!
//! It is the "no persistence" reference point, the substrate of the Silo trace recorder, and
//! a fast engine for unit-testing workloads.

use crate::api::{Engine, Isolation, Lifecycle, Tx, TxError, TxResult, pool_tag, run_transaction};
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;

const ROOT_OFFSET: u64 = 4096;
const ROOT_SIZE: u64 = 4096;
const HEAP_START: u64 = ROOT_OFFSET + ROOT_SIZE;
const ALIGN: u64 = 16;

/// The volatile engine.
#[derive(Debug)]
pub struct MemEngine {
    state: Mutex<MemState>,
    tag: u16,
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
}

impl MemEngine {
    /// An engine with `size` bytes of memory (root object at 4 KiB, heap after it).
    pub fn new(size: u64) -> Self {
        assert!(
            size > HEAP_START,
            "MemEngine needs more than {HEAP_START} bytes"
        );
        let state = MemState {
            bytes: vec![0; size as usize],
            bump: HEAP_START,
            free: BTreeMap::new(),
            sizes: BTreeMap::new(),
        };
        MemEngine {
            state: Mutex::new(state),
            tag: pool_tag(b"ferrite-memengin"),
        }
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
    undo: Vec<(u64, Vec<u8>)>,
    allocated: Vec<u64>,
    freed: Vec<u64>,
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
        while let Some((addr, old)) = self.undo.pop() {
            let start = addr as usize;
            self.state.bytes[start..start + old.len()].copy_from_slice(&old);
        }
        for addr in std::mem::take(&mut self.allocated) {
            self.state.release(addr);
        }
        self.freed.clear();
    }

    fn commit(&mut self) -> TxResult<()> {
        for addr in std::mem::take(&mut self.freed) {
            self.state.release(addr);
        }
        self.undo.clear();
        self.allocated.clear();
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
        dst.copy_from_slice(&self.state.bytes[range]);
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        let range = self.range(addr, src.len())?;
        let old = self.state.bytes[range.clone()].to_vec();
        self.undo.push((addr, old));
        self.state.bytes[range].copy_from_slice(src);
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        let addr = self
            .state
            .allocate(size)
            .ok_or(TxError::OutOfSpace { size })?;
        self.allocated.push(addr);
        Ok(addr)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        if !self.state.sizes.contains_key(&addr) || self.freed.contains(&addr) {
            return Err(TxError::InvalidFree(addr));
        }
        self.freed.push(addr);
        Ok(())
    }

    fn pool_tag(&self) -> u16 {
        self.tag
    }

    fn root_offset(&self) -> u64 {
        ROOT_OFFSET
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
        let tx = MemTx {
            state: self.state.lock(),
            tag: self.tag,
            undo: Vec::new(),
            allocated: Vec::new(),
            freed: Vec::new(),
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
