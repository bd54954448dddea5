//! The ideal reference: the least a redo-logging transaction must do on this machine — one
//! compact log record streamed to PM and one fence — with the new values stored in place but
//! never written back, no allocator (a volatile bump pointer; `free` does nothing; zeroed
//! blocks are cleared without logging), no recovery, no log-space bookkeeping. It marks the
//! machine's limit for a redo design and is **not** crash-consistent; never use it for data.

use parking_lot::MutexGuard;
use pmem::{Persist, Pool, WriteClass};
use std::sync::atomic::{AtomicU64, Ordering};
use tx::api::{Lifecycle, run_transaction};
use tx::lanes::Lanes;
use tx::writeset::{Coalesced, WriteSet};
use tx::{Engine, Isolation, Tx, TxError, TxResult};

/// Log bytes per lane.
pub(crate) const LANE_BYTES: u64 = 1 << 20;
/// Lanes (concurrent transactions).
pub(crate) const LANES: u64 = 16;

/// The ideal reference engine over a pool on backend `P`.
#[derive(Debug)]
pub struct Ideal<P: Persist> {
    pool: Pool<P>,
    lanes: Lanes<Ring>,
    bump: AtomicU64,
    heap_end: u64,
    tag: u16,
}

/// A lane's log and its buffers, kept across transactions so a transaction allocates
/// nothing (as the logging engines keep theirs).
#[derive(Debug)]
struct Ring {
    base: u64,
    head: u64,
    record: Vec<u8>,
    writes: WriteSet,
    ranges: Coalesced,
}

impl<P: Persist> Ideal<P> {
    /// Uses the whole arena of `pool`: lanes first, then a bump-allocated heap.
    pub fn new(pool: Pool<P>) -> TxResult<Self> {
        let arena = pool.arena();
        let lanes_end = arena.offset + LANES * LANE_BYTES;
        if lanes_end + 4096 > arena.end() {
            return Err(TxError::OutOfSpace {
                size: LANES * LANE_BYTES,
            });
        }
        let rings = (0..LANES).map(|lane| Ring {
            base: arena.offset + lane * LANE_BYTES,
            head: 0,
            record: Vec::new(),
            writes: WriteSet::default(),
            ranges: Coalesced::default(),
        });
        // Touch every lane once now, as redo formats its lanes when it creates them: a log
        // page first written inside a timed transaction costs a page fault there (a few µs,
        // one every 128 records of 32 bytes), which put ideal's p99 on the 8-byte Array swap
        // at 9× redo's.
        pool.pm()
            .fill(arena.offset, LANES * LANE_BYTES, 0, WriteClass::Log);
        let tag = tx::pool_tag(&pool.header().uuid);
        Ok(Ideal {
            lanes: Lanes::new(rings),
            bump: AtomicU64::new(lanes_end),
            heap_end: arena.end(),
            tag,
            pool,
        })
    }
}

/// A transaction of the ideal engine.
#[derive(Debug)]
pub struct IdealTx<'e, P: Persist> {
    engine: &'e Ideal<P>,
    ring: MutexGuard<'e, Ring>,
}

impl<P: Persist> Lifecycle for IdealTx<'_, P> {
    /// Nothing was written anywhere before the commit: nothing to undo but the buffered
    /// writes.
    fn abort(&mut self) {
        self.ring.writes.clear();
    }

    fn commit(&mut self) -> TxResult<()> {
        let ring = &mut *self.ring;
        if ring.writes.is_empty() {
            return Ok(());
        }
        let pm = self.engine.pool.pm();
        ring.writes.coalesce_into(&mut ring.ranges);
        ring.record.clear();
        for (addr, bytes) in ring.ranges.iter() {
            // One header word per range: address and length (no length limit is needed, the
            // record is never read back).
            ring.record
                .extend_from_slice(&(addr ^ ((bytes.len() as u64) << 48)).to_le_bytes());
            ring.record.extend_from_slice(bytes);
        }
        let len = ring.record.len() as u64;
        if len > LANE_BYTES {
            return Err(TxError::LogFull {
                needed: len,
                capacity: LANE_BYTES,
            });
        }
        if ring.head + len > LANE_BYTES {
            ring.head = 0;
        }
        pm.write_nt(ring.base + ring.head, &ring.record, WriteClass::Log);
        ring.head = (ring.head + len).next_multiple_of(8);
        pm.fence();
        pm.durability_point();
        for (addr, bytes) in ring.ranges.iter() {
            pm.write(addr, bytes, WriteClass::User);
        }
        let user = ring.ranges.bytes();
        pm.stats().record_user_bytes(user);
        Ok(())
    }
}

impl<P: Persist> Tx for IdealTx<'_, P> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        if !self.engine.pool.pm().check_range(addr, dst.len() as u64) {
            return Err(TxError::OutOfBounds {
                addr,
                len: dst.len() as u64,
            });
        }
        self.engine.pool.pm().read(addr, dst);
        self.ring.writes.overlay(addr, dst);
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        if !self.engine.pool.pm().check_range(addr, src.len() as u64) {
            return Err(TxError::OutOfBounds {
                addr,
                len: src.len() as u64,
            });
        }
        self.ring.writes.write(addr, src);
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        let size = size.max(1).next_multiple_of(16);
        let addr = self.engine.bump.fetch_add(size, Ordering::Relaxed);
        if addr + size > self.engine.heap_end {
            return Err(TxError::OutOfSpace { size });
        }
        Ok(addr)
    }

    fn alloc_zeroed_raw(&mut self, size: u64) -> TxResult<u64> {
        let addr = self.alloc_raw(size)?;
        self.engine.pool.pm().fill(addr, size, 0, WriteClass::User);
        Ok(addr)
    }

    fn free_raw(&mut self, _addr: u64) -> TxResult<()> {
        Ok(())
    }

    fn pool_tag(&self) -> u16 {
        self.engine.tag
    }

    fn root_offset(&self) -> u64 {
        self.engine.pool.root().offset
    }
}

impl<P: Persist> Engine for Ideal<P> {
    type Tx<'e>
        = IdealTx<'e, P>
    where
        Self: 'e;

    fn name(&self) -> &'static str {
        "ideal"
    }

    fn isolation(&self) -> Isolation {
        Isolation::External
    }

    fn transaction<R, E>(
        &self,
        body: impl FnMut(&mut IdealTx<'_, P>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let (_, mut ring) = self.lanes.acquire();
        ring.writes.clear();
        let tx = IdealTx { engine: self, ring };
        run_transaction(tx, body)
    }

    fn counters(&self) -> pmem::Counters {
        self.pool.pm().stats().snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::{CreateOptions, Native};

    /// Minor page faults of the calling thread so far (`/proc/thread-self/stat`, field 10).
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
        let after_name = &stat[stat.rfind(')').expect("name") + 2..];
        after_name
            .split(' ')
            .nth(7)
            .and_then(|field| field.parse().ok())
            .expect("minflt")
    }

    /// The log is touched when the engine is made, not by the measured transactions: 2,000
    /// commits of a 1 KiB write stream 2 MiB of records through a 1 MiB lane, which faulted
    /// in its 256 pages one by one.
    #[test]
    fn timed_transactions_do_not_fault_in_log_pages() {
        let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("dir");
        let pool: Pool<Native> = Pool::create(
            dir.path().join("ideal.pool"),
            &CreateOptions::new("t", 64 << 20),
        )
        .expect("pool");
        let engine = Ideal::new(pool).expect("ideal");
        let block = engine.transaction(|tx| tx.alloc_raw(1024)).expect("alloc");
        let value = [7u8; 1024];
        engine
            .transaction(|tx| tx.write_raw(block, &value))
            .expect("first write");
        let before = minor_faults();
        for _ in 0..2000 {
            engine
                .transaction(|tx| tx.write_raw(block, &value))
                .expect("write");
        }
        let faults = minor_faults() - before;
        assert!(faults < 64, "{faults} page faults in 2,000 commits");
    }
}
