//! Per-lane state: what the lane's transactions own (under the lane's lock) and what every
//! thread can see of the lane.

use crate::chain::Bytes;
use crate::reclaim::NumberHasher;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::AtomicU64;
use tx::ring::LogRing;

/// No timestamp (an idle announcement slot).
pub(crate) const NONE: u64 = u64::MAX;

/// Write sets up to this many chunks are searched linearly; larger ones get a map.
const LINEAR_WRITES: usize = 16;

/// What a lane's transactions own: its operation log, reusable buffers, its share of the
/// transient version log.
#[derive(Debug)]
pub(crate) struct Lane {
    /// The lane's number.
    pub(crate) index: usize,
    /// The OLog's absolute offset.
    pub(crate) base: u64,
    /// Where the OLog's live records are (stamped with their commit timestamps).
    pub(crate) olog: LogRing,
    pub(crate) scratch: Vec<u8>,
    pub(crate) writes: Vec<WriteEntry>,
    /// Chunk → position in `writes`, for large write sets (keyed by the engine's own chunk
    /// numbers: the cheap hash the checkpointer's sets use, not SipHash).
    pub(crate) by_chunk: HashMap<u64, usize, BuildHasherDefault<NumberHasher>>,
    /// Chunks read (when reads are validated).
    pub(crate) reads: Vec<u64>,
    pub(crate) args: Vec<u8>,
    /// Byte ranges this transaction wrote in place (blocks it allocated).
    pub(crate) fresh: Vec<(u64, u64)>,
    /// Scratch: the spans a physical record of the write set would hold.
    pub(crate) spans: Vec<(u64, u64)>,
    /// Scratch: the versions a commit pushed.
    pub(crate) pushed: Vec<u32>,
    /// Scratch: a commit's heap actions (publishes, then frees).
    pub(crate) actions: Vec<heap::Action>,
    /// Kept between transactions so their capacity is reused: a transaction's blocks
    /// reserved and blocks freed (empty outside a transaction).
    pub(crate) reservations: Vec<heap::Reservation>,
    pub(crate) frees: Vec<heap::Freeing>,
    /// Free versions of this lane's share of the TLog.
    pub(crate) free: Vec<u32>,
    /// Versions in this lane's share.
    pub(crate) capacity: u32,
    /// Versions in use after this lane's last reclamation (trims are paced by growth).
    pub(crate) used_at_reclaim: u32,
    /// The checkpoint boundary when this lane last asked the reclaimer for a checkpoint
    /// because of its OLog ([`NONE`]: never); it asks again only once that moved.
    pub(crate) asked_at: u64,
    /// Transactions left before the lane next hands off to the background reclaimer (0:
    /// at the next one above the watermarks).
    pub(crate) hand_off_in: u32,
    /// The snapshot of the lane's previous transaction: a lower bound to announce before the
    /// next one reads the clock.
    pub(crate) last_snapshot: u64,
}

/// A chunk locked by a transaction, with its private copy.
#[derive(Clone, Debug)]
pub(crate) struct WriteEntry {
    pub(crate) chunk: u64,
    /// Its control header.
    pub(crate) header: u32,
    pub(crate) data: Bytes,
    /// Bytes written (bit i = byte i).
    pub(crate) mask: u64,
}

/// What every thread can see of a lane.
#[derive(Debug)]
pub(crate) struct Shared {
    /// A lower bound of the snapshot of the transaction holding the lane, or [`NONE`]: the
    /// quiescence detector's view (no version a snapshot at or after it needs is reclaimed,
    /// and nothing reclaimed after it was announced is reused while it stays).
    pub(crate) active: AtomicU64,
    /// A lower bound of the timestamp of a commit between its first push and its
    /// publication, or [`NONE`].
    pub(crate) inflight: AtomicU64,
    /// Transactions that committed without writing on this lane (stored only by the lane's
    /// holder, so a load and a store count exactly; checkpoints read it to tell a
    /// read-mostly interval).
    pub(crate) reads: AtomicU64,
    /// Headers (and their chunks) that got versions since the last checkpoint.
    pub(crate) dirty: Mutex<Vec<(u32, u64)>>,
    /// Byte ranges written in place by committed transactions since the last checkpoint.
    pub(crate) fresh: Mutex<Vec<(u64, u64)>>,
    /// Versions of this lane back from a grace period.
    pub(crate) returned: Mutex<Vec<u32>>,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            active: AtomicU64::new(NONE),
            inflight: AtomicU64::new(NONE),
            reads: AtomicU64::new(0),
            dirty: Mutex::new(Vec::new()),
            fresh: Mutex::new(Vec::new()),
            returned: Mutex::new(Vec::new()),
        }
    }
}

impl Lane {
    /// State of lane `index` over the OLog at `base` (`size` bytes), owning versions
    /// `versions`.
    pub(crate) fn new(
        index: usize,
        base: u64,
        size: u64,
        versions: std::ops::RangeInclusive<u32>,
    ) -> Self {
        let capacity = versions.end() - versions.start() + 1;
        Lane {
            index,
            base,
            olog: LogRing::new(size),
            scratch: Vec::new(),
            writes: Vec::new(),
            by_chunk: HashMap::default(),
            reads: Vec::new(),
            args: Vec::new(),
            fresh: Vec::new(),
            spans: Vec::new(),
            pushed: Vec::new(),
            actions: Vec::new(),
            reservations: Vec::new(),
            frees: Vec::new(),
            free: versions.rev().collect(),
            capacity,
            used_at_reclaim: 0,
            asked_at: NONE,
            hand_off_in: 0,
            last_snapshot: 0,
        }
    }

    /// Versions of this lane's share in use.
    pub(crate) fn tlog_used(&self) -> u32 {
        self.capacity - self.free.len() as u32
    }

    pub(crate) fn find(&self, chunk: u64) -> Option<usize> {
        if self.writes.len() <= LINEAR_WRITES {
            self.writes.iter().position(|w| w.chunk == chunk)
        } else {
            self.by_chunk.get(&chunk).copied()
        }
    }

    pub(crate) fn push_write(&mut self, entry: WriteEntry) -> usize {
        let at = self.writes.len();
        self.writes.push(entry);
        if self.writes.len() == LINEAR_WRITES + 1 {
            self.by_chunk = self
                .writes
                .iter()
                .enumerate()
                .map(|(i, w)| (w.chunk, i))
                .collect();
        } else if self.writes.len() > LINEAR_WRITES + 1 {
            self.by_chunk.insert(self.writes[at].chunk, at);
        }
        at
    }

    /// Records an in-place write of `[addr, addr + len)`, merging with the previous one.
    pub(crate) fn note_fresh(&mut self, addr: u64, len: u64) {
        match self.fresh.last_mut() {
            Some((at, n)) if *at + *n == addr => *n += len,
            _ => self.fresh.push((addr, len)),
        }
    }

    #[inline]
    pub(crate) fn reset(&mut self) {
        self.writes.clear();
        // A map that has held entries clears its whole control array even when empty again:
        // only a transaction with many writes fills it.
        if !self.by_chunk.is_empty() {
            self.by_chunk.clear();
        }
        self.reads.clear();
        self.args.clear();
        self.fresh.clear();
    }
}

/// Sorts `ranges` and merges overlapping or adjacent ones.
pub(crate) fn merge_ranges(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    // In place: `kept` ranges, merged, precede index `i`.
    let mut kept = 0usize;
    for i in 0..ranges.len() {
        let (addr, len) = ranges[i];
        match kept.checked_sub(1).map(|last| &mut ranges[last]) {
            Some((at, n)) if *at + *n >= addr => *n = (*n).max(addr + len - *at),
            _ => {
                ranges[kept] = (addr, len);
                kept += 1;
            }
        }
    }
    ranges.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::merge_ranges;

    #[test]
    fn ranges_merge_in_place_when_they_overlap_or_touch() {
        let mut ranges = vec![(100, 8), (90, 10), (200, 4), (104, 8), (300, 1), (150, 0)];
        merge_ranges(&mut ranges);
        assert_eq!(ranges, [(90, 22), (150, 0), (200, 4), (300, 1)]);
        let mut nested = vec![(10, 50), (20, 5), (0, 10)];
        merge_ranges(&mut nested);
        assert_eq!(nested, [(0, 60)]);
        let mut none: Vec<(u64, u64)> = Vec::new();
        merge_ranges(&mut none);
        assert!(none.is_empty());
    }
}
