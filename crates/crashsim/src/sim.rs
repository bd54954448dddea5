//! `SimPm`: a backend of the persistence seam that shadows PM under the Px86 model
//! (`docs/crash-model.md`) and captures a snapshot at every crash point.
//!
//! State kept per region:
//! - `volatile`: what loads return (every store applied);
//! - `durable`: bytes guaranteed on the media;
//! - per cache line, the write-back stores not yet durable, in program order, and how many of
//!   them a flush has covered since the last fence;
//! - the non-temporal stores not yet fenced.
//!
//! Every store is split into 8-byte-aligned pieces ("chunks"): only those are failure-atomic.

use crate::image::{PendingChunk, Snapshot, SnapshotKind};
use parking_lot::Mutex;
use pmem::{CACHE_LINE, FlushInstr, Persist, Stats, WriteClass, assert_in_bounds, lines_covering};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which persistence domain the simulated platform has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SimMode {
    /// Caches are volatile: a store is durable only after a flush of its line and a fence;
    /// at a crash each line has persisted some prefix of its pending stores.
    Adr,
    /// Caches are persistent: at a crash the persisted stores are a prefix of the global
    /// store order. Flushes are no-ops; fences still complete non-temporal stores.
    Eadr,
}

impl SimMode {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            SimMode::Adr => "adr",
            SimMode::Eadr => "eadr",
        }
    }
}

/// Configuration of a simulated region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Persistence domain.
    pub mode: SimMode,
    /// Flush instruction the simulated code uses. `clflush` is modelled as a write-back that
    /// is complete when it returns (ordered like a fence for its own line); this is the
    /// conservative simplification of the crash model and can hide bugs that mix it with
    /// `clwb`.
    pub flush: FlushInstr,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            mode: SimMode::Adr,
            flush: FlushInstr::Clwb,
        }
    }
}

/// One 8-byte-aligned piece of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) off: u64,
    pub(crate) len: u8,
    pub(crate) data: [u8; 8],
    pub(crate) seq: u64,
}

impl Chunk {
    pub(crate) fn apply(&self, image: &mut [u8]) {
        let off = self.off as usize;
        image[off..off + self.len as usize].copy_from_slice(&self.data[..self.len as usize]);
    }
}

#[derive(Debug, Default)]
struct Line {
    /// Write-back stores to this line not yet durable, in program order.
    writes: Vec<Chunk>,
    /// How many of `writes` the last flush covered (they become durable at the next fence).
    flushed: usize,
}

#[derive(Debug)]
struct Shadow {
    volatile: Vec<u8>,
    durable: Arc<Vec<u8>>,
    lines: BTreeMap<u64, Line>,
    /// Lines flushed since the last fence.
    flushed: BTreeSet<u64>,
    /// Non-temporal chunks not yet fenced, in program order.
    nt: Vec<Chunk>,
    seq: u64,
    fences: u64,
    clflushes: u64,
    durability_points: u64,
    capture: bool,
    snapshots: Vec<Snapshot>,
}

impl Shadow {
    fn split(&mut self, off: u64, src: &[u8], mut sink: impl FnMut(&mut Self, Chunk)) {
        let mut at = 0usize;
        while at < src.len() {
            let addr = off + at as u64;
            let take = ((8 - addr % 8) as usize).min(src.len() - at);
            let mut data = [0u8; 8];
            data[..take].copy_from_slice(&src[at..at + take]);
            self.seq += 1;
            let chunk = Chunk {
                off: addr,
                len: take as u8,
                data,
                seq: self.seq,
            };
            sink(self, chunk);
            at += take;
        }
        let start = off as usize;
        self.volatile[start..start + src.len()].copy_from_slice(src);
    }

    fn durable_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.durable)
    }

    /// Makes the first `count` pending writes of `line` durable.
    /// Removes the first `count` pending writes of `line` and returns them.
    fn take_pending(&mut self, line: u64, count: usize) -> Vec<Chunk> {
        let Some(entry) = self.lines.get_mut(&line) else {
            return Vec::new();
        };
        let done: Vec<Chunk> = entry
            .writes
            .drain(..count.min(entry.writes.len()))
            .collect();
        entry.flushed = entry.flushed.saturating_sub(done.len());
        if entry.writes.is_empty() {
            self.lines.remove(&line);
        }
        done
    }

    /// Makes `chunks` durable in program order (later stores to the same bytes win).
    fn make_durable(&mut self, mut chunks: Vec<Chunk>) {
        chunks.sort_by_key(|chunk| chunk.seq);
        let durable = self.durable_mut();
        for chunk in &chunks {
            chunk.apply(durable);
        }
    }

    fn apply_fence(&mut self, mode: SimMode) {
        let mut retiring = std::mem::take(&mut self.nt);
        match mode {
            SimMode::Adr => {
                for line in std::mem::take(&mut self.flushed) {
                    let count = self.lines.get(&line).map_or(0, |l| l.flushed);
                    retiring.extend(self.take_pending(line, count));
                }
            }
            SimMode::Eadr => {
                let lines: Vec<u64> = self.lines.keys().copied().collect();
                for line in lines {
                    retiring.extend(self.take_pending(line, usize::MAX));
                }
            }
        }
        self.make_durable(retiring);
    }

    /// A non-temporal store to a line evicts it first: the line's pending write-back stores
    /// then persist no later than the streaming store (at the same fence, in program order).
    fn evict_for_nt(&mut self, off: u64, len: u64) {
        for line in lines_covering(off, len) {
            if let Some(entry) = self.lines.get_mut(&line) {
                entry.flushed = entry.writes.len();
                self.flushed.insert(line);
            }
        }
    }

    fn snapshot(&mut self, kind: SnapshotKind, mode: SimMode) {
        let lines = self
            .lines
            .iter()
            .map(|(&line, entry)| (line, entry.writes.iter().map(PendingChunk::from).collect()))
            .collect();
        let snapshot = Snapshot {
            kind,
            mode,
            durable: Arc::clone(&self.durable),
            lines,
            nt: self.nt.iter().map(PendingChunk::from).collect(),
            fences: self.fences,
            durability_points: self.durability_points,
        };
        self.snapshots.push(snapshot);
    }
}

/// The simulated PM region. Cloning gives another handle to the same region.
#[derive(Clone, Debug)]
pub struct SimPm {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    len: u64,
    config: SimConfig,
    stats: Stats,
    shadow: Mutex<Shadow>,
    /// Seam calls made on this region since the step limit was last set.
    steps: AtomicU64,
    /// Most seam calls allowed (`u64::MAX`: no limit).
    step_limit: AtomicU64,
}

impl SimPm {
    /// A zero-filled region of `len` bytes.
    pub fn new(len: u64, config: SimConfig) -> Self {
        Self::from_image(vec![0; len as usize], config)
    }

    /// A region whose durable and volatile contents are `image` (a crash image), with
    /// nothing pending.
    pub fn from_image(image: Vec<u8>, config: SimConfig) -> Self {
        let shadow = Shadow {
            volatile: image.clone(),
            durable: Arc::new(image),
            lines: BTreeMap::new(),
            flushed: BTreeSet::new(),
            nt: Vec::new(),
            seq: 0,
            fences: 0,
            clflushes: 0,
            durability_points: 0,
            capture: false,
            snapshots: Vec::new(),
        };
        let len = shadow.volatile.len() as u64;
        SimPm {
            inner: Arc::new(Inner {
                len,
                config,
                stats: Stats::new(),
                shadow: Mutex::new(shadow),
                steps: AtomicU64::new(0),
                step_limit: AtomicU64::new(u64::MAX),
            }),
        }
    }

    /// The region's configuration.
    pub fn config(&self) -> SimConfig {
        self.inner.config
    }

    /// Limits the seam calls (reads, stores, flushes, fences, durability points) made on this
    /// region from now on: the call after the `limit`-th panics with a message naming the
    /// limit. The harness sets it on every region it recovers
    /// ([`crate::Config::recovery_step_limit`]), so a recovery that loops forever over PM
    /// (a cycle in a crashed linked structure, a retry loop that never succeeds) is reported
    /// as a panic instead of hanging the test. `None` removes the limit (the default).
    pub fn set_step_limit(&self, limit: Option<u64>) {
        self.inner.steps.store(0, Ordering::Relaxed);
        self.inner
            .step_limit
            .store(limit.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Counts one seam call against the step limit.
    #[track_caller]
    fn step(&self) {
        let limit = self.inner.step_limit.load(Ordering::Relaxed);
        if limit == u64::MAX {
            return;
        }
        let done = self.inner.steps.fetch_add(1, Ordering::Relaxed);
        assert!(
            done < limit,
            "step limit: more than {limit} seam calls on this simulated region \
             (the code under test probably loops forever)"
        );
    }

    /// Starts or stops recording a [`Snapshot`] at every crash point (before each fence
    /// takes effect, and at each durability point).
    pub fn set_capture(&self, on: bool) {
        self.inner.shadow.lock().capture = on;
    }

    /// Removes and returns the snapshots recorded so far.
    pub fn take_snapshots(&self) -> Vec<Snapshot> {
        std::mem::take(&mut self.inner.shadow.lock().snapshots)
    }

    /// A snapshot of the current state, as if the machine crashed now.
    pub fn crash_now(&self) -> Snapshot {
        let mut shadow = self.inner.shadow.lock();
        shadow.snapshot(SnapshotKind::End, self.inner.config.mode);
        shadow.snapshots.pop().expect("snapshot just pushed")
    }

    /// The bytes guaranteed durable now.
    pub fn durable_image(&self) -> Vec<u8> {
        self.inner.shadow.lock().durable.as_ref().clone()
    }

    /// What loads see now.
    pub fn volatile_image(&self) -> Vec<u8> {
        self.inner.shadow.lock().volatile.clone()
    }

    /// Whether any store to `[off, off + len)` is not yet durable. Engines' tests use it to
    /// assert that what an operation declared durable really is. Panics, like every seam
    /// call, if the range is not inside the region (an assertion about bytes outside it
    /// would pass vacuously).
    #[track_caller]
    pub fn is_pending(&self, off: u64, len: u64) -> bool {
        assert_in_bounds(off, len, self.inner.len);
        let shadow = self.inner.shadow.lock();
        let overlaps = |c: &Chunk| c.off < off + len && off < c.off + u64::from(c.len);
        let wb = lines_covering(off, len)
            .filter_map(|line| shadow.lines.get(&line))
            .any(|entry| entry.writes.iter().any(overlaps));
        wb || shadow.nt.iter().any(overlaps)
    }

    /// Number of durability points declared so far.
    pub fn durability_points(&self) -> u64 {
        self.inner.shadow.lock().durability_points
    }

    /// Number of fences executed so far.
    pub fn fences(&self) -> u64 {
        self.inner.shadow.lock().fences
    }
}

impl Persist for SimPm {
    fn len(&self) -> u64 {
        self.inner.len
    }

    fn read(&self, off: u64, dst: &mut [u8]) {
        self.step();
        assert_in_bounds(off, dst.len() as u64, self.inner.len);
        let shadow = self.inner.shadow.lock();
        dst.copy_from_slice(&shadow.volatile[off as usize..off as usize + dst.len()]);
    }

    fn write(&self, off: u64, src: &[u8], class: WriteClass) {
        self.step();
        assert_in_bounds(off, src.len() as u64, self.inner.len);
        self.inner.stats.record_store(class, src.len() as u64);
        let mut shadow = self.inner.shadow.lock();
        shadow.split(off, src, |shadow, chunk| {
            shadow
                .lines
                .entry(chunk.off / CACHE_LINE)
                .or_default()
                .writes
                .push(chunk);
        });
    }

    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass) {
        self.step();
        assert_in_bounds(off, src.len() as u64, self.inner.len);
        self.inner.stats.record_nt_store(class, src.len() as u64);
        let mut shadow = self.inner.shadow.lock();
        shadow.evict_for_nt(off, src.len() as u64);
        shadow.split(off, src, |shadow, chunk| shadow.nt.push(chunk));
    }

    fn flush(&self, off: u64, len: u64) {
        self.step();
        assert_in_bounds(off, len, self.inner.len);
        if self.inner.config.mode == SimMode::Eadr {
            return;
        }
        let lines = lines_covering(off, len);
        self.inner.stats.record_flush(lines.end - lines.start);
        let mut shadow = self.inner.shadow.lock();
        if self.inner.config.flush == FlushInstr::Clflush {
            shadow.clflushes += 1;
            if shadow.capture {
                let n = shadow.clflushes;
                shadow.snapshot(SnapshotKind::Clflush(n), self.inner.config.mode);
            }
        }
        for line in lines {
            let Some(entry) = shadow.lines.get_mut(&line) else {
                continue;
            };
            entry.flushed = entry.writes.len();
            if self.inner.config.flush == FlushInstr::Clflush {
                let done = shadow.take_pending(line, usize::MAX);
                shadow.make_durable(done);
            } else {
                shadow.flushed.insert(line);
            }
        }
    }

    fn fence(&self) {
        self.step();
        self.inner.stats.record_fence();
        let mode = self.inner.config.mode;
        let mut shadow = self.inner.shadow.lock();
        shadow.fences += 1;
        if shadow.capture {
            let fence = shadow.fences;
            shadow.snapshot(SnapshotKind::Fence(fence), mode);
        }
        shadow.apply_fence(mode);
    }

    fn durability_point(&self) {
        self.step();
        self.inner.stats.record_durability_point();
        let mut shadow = self.inner.shadow.lock();
        shadow.durability_points += 1;
        if shadow.capture {
            let point = shadow.durability_points;
            shadow.snapshot(SnapshotKind::Durability(point), self.inner.config.mode);
        }
    }

    fn stats(&self) -> &Stats {
        &self.inner.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adr() -> SimPm {
        SimPm::new(4096, SimConfig::default())
    }

    #[test]
    fn stores_are_volatile_until_flushed_and_fenced() {
        let pm = adr();
        pm.write_u64(64, 7, WriteClass::User);
        assert_eq!(pm.read_u64(64), 7);
        assert!(pm.is_pending(64, 8));
        pm.flush(64, 8);
        assert!(pm.is_pending(64, 8), "a flush alone is not durability");
        pm.fence();
        assert!(!pm.is_pending(64, 8));
        assert_eq!(&pm.durable_image()[64..72], &7u64.to_le_bytes());
    }

    #[test]
    fn a_fence_without_a_flush_persists_nothing() {
        let pm = adr();
        pm.write_u64(0, 1, WriteClass::User);
        pm.fence();
        assert!(pm.is_pending(0, 8));
    }

    #[test]
    fn stores_after_a_flush_stay_pending() {
        let pm = adr();
        pm.write_u64(0, 1, WriteClass::User);
        pm.flush(0, 8);
        pm.write_u64(8, 2, WriteClass::User);
        pm.fence();
        assert!(!pm.is_pending(0, 8));
        assert!(pm.is_pending(8, 8));
    }

    #[test]
    fn nontemporal_stores_are_durable_at_the_fence() {
        let pm = adr();
        pm.write_nt(128, &[1; 20], WriteClass::Log);
        assert!(pm.is_pending(128, 20));
        pm.fence();
        assert!(!pm.is_pending(128, 20));
    }

    #[test]
    fn eadr_fences_make_every_store_durable() {
        let pm = SimPm::new(
            4096,
            SimConfig {
                mode: SimMode::Eadr,
                ..SimConfig::default()
            },
        );
        pm.write_u64(0, 1, WriteClass::User);
        pm.flush(0, 8);
        pm.fence();
        assert!(!pm.is_pending(0, 8));
    }

    #[test]
    fn clflush_is_durable_on_return() {
        let pm = SimPm::new(
            4096,
            SimConfig {
                flush: FlushInstr::Clflush,
                ..SimConfig::default()
            },
        );
        pm.write_u64(0, 1, WriteClass::User);
        pm.flush(0, 8);
        assert!(!pm.is_pending(0, 8));
    }

    #[test]
    fn streaming_and_cached_stores_to_the_same_bytes_persist_in_program_order() {
        // A streaming store, then a newer cached store to the same word, both made durable.
        let pm = adr();
        pm.write_nt(0, &1u64.to_le_bytes(), WriteClass::Log);
        pm.write_u64(0, 2, WriteClass::Log);
        pm.persist(0, 8);
        assert_eq!(&pm.durable_image()[..8], &2u64.to_le_bytes());
        // An older cached store, then a streaming store (which evicts the line first).
        let pm = adr();
        pm.write_u64(0, 1, WriteClass::Log);
        pm.write_nt(0, &2u64.to_le_bytes(), WriteClass::Log);
        pm.fence();
        pm.persist(0, 8);
        assert_eq!(&pm.durable_image()[..8], &2u64.to_le_bytes());
        assert!(!pm.is_pending(0, 8));
    }

    #[test]
    fn unaligned_stores_split_into_aligned_chunks() {
        let pm = adr();
        pm.set_capture(true);
        pm.write(6, &[9; 12], WriteClass::User); // bytes 6..18: chunks 6..8, 8..16, 16..18
        pm.fence();
        let snapshot = pm.take_snapshots().pop().expect("one snapshot");
        let chunks: Vec<_> = snapshot.lines[0].1.iter().map(|c| (c.off, c.len)).collect();
        assert_eq!(chunks, vec![(6, 2), (8, 8), (16, 2)]);
    }
}
