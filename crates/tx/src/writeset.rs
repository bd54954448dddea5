//! The redo engine's write set: a transaction's writes buffered in DRAM, overlaid on reads,
//! and coalesced into disjoint ranges at commit.

use crate::bytes::{copy_bytes, extend_bytes};
use smallvec::SmallVec;
use std::collections::BTreeSet;

/// Above this many writes, lookups go through an ordered index instead of a scan.
const INDEX_THRESHOLD: usize = 24;

#[derive(Clone, Copy, Debug)]
struct Write {
    addr: u64,
    len: u32,
    /// Offset of the bytes in `data`.
    at: u32,
}

impl Write {
    fn end(&self) -> u64 {
        self.addr + u64::from(self.len)
    }
}

/// Disjoint written ranges in address order, their bytes in one buffer.
#[derive(Debug, Default)]
pub struct Coalesced {
    /// (address, offset in `data`, length).
    spans: Vec<(u64, usize, usize)>,
    data: Vec<u8>,
    /// Scratch of [`WriteSet::coalesce_into`]: write indexes by address.
    order: Vec<(u64, u32)>,
}

impl Coalesced {
    /// Empties the set, keeping its allocations.
    pub fn clear(&mut self) {
        self.spans.clear();
        self.data.clear();
        self.order.clear();
    }

    /// Whether there is no range.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The ranges and their bytes, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> + Clone + '_ {
        self.spans
            .iter()
            .map(|&(addr, at, len)| (addr, &self.data[at..at + len]))
    }

    /// Total bytes in the ranges.
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64
    }
}

/// Buffered writes in program order; later writes win where they overlap.
#[derive(Debug, Default)]
pub struct WriteSet {
    writes: Vec<Write>,
    data: Vec<u8>,
    /// One bit per (hashed) cache line written: a cheap "certainly not written" test.
    lines: u64,
    /// (start address, write index) of every write, built past [`INDEX_THRESHOLD`].
    index: Option<BTreeSet<(u64, usize)>>,
    /// Length of the longest write (bounds index range queries).
    longest: u64,
}

/// Sorts `items`: by insertion when there are few (a transaction's writes usually are), which
/// beats the general sort's setup at that size.
fn sort_small<T: Ord + Copy>(items: &mut [T]) {
    if items.len() > 16 {
        return items.sort_unstable();
    }
    for i in 1..items.len() {
        let item = items[i];
        let mut j = i;
        while j > 0 && items[j - 1] > item {
            items[j] = items[j - 1];
            j -= 1;
        }
        items[j] = item;
    }
}

fn line_bit(line: u64) -> u64 {
    1 << (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

fn lines_mask(addr: u64, len: u64) -> u64 {
    let (first, last) = (addr / 64, (addr + len.max(1) - 1) / 64);
    if last - first >= 64 {
        return u64::MAX;
    }
    (first..=last).fold(0, |mask, line| mask | line_bit(line))
}

impl WriteSet {
    /// Bytes held in the buffer (writes repeated exactly are counted once).
    pub fn buffered_bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Buffers a write. A write that exactly repeats the newest write touching its range
    /// overwrites it in place, so hot words do not grow the log.
    pub fn write(&mut self, addr: u64, src: &[u8]) {
        let mask = lines_mask(addr, src.len() as u64);
        if self.lines & mask != 0
            && let Some(newest) = self.newest_touching(addr, src.len() as u64)
        {
            let w = self.writes[newest];
            if w.addr == addr && w.len as usize == src.len() {
                let at = w.at as usize;
                copy_bytes(&mut self.data[at..at + src.len()], src);
                return;
            }
        }
        self.lines |= mask;
        let index = self.writes.len();
        self.writes.push(Write {
            addr,
            len: src.len() as u32,
            at: self.data.len() as u32,
        });
        extend_bytes(&mut self.data, src);
        self.longest = self.longest.max(src.len() as u64);
        if let Some(set) = &mut self.index {
            set.insert((addr, index));
        } else if self.writes.len() > INDEX_THRESHOLD {
            self.index = Some(
                self.writes
                    .iter()
                    .enumerate()
                    .map(|(i, w)| (w.addr, i))
                    .collect(),
            );
        }
    }

    /// The newest write overlapping `[addr, addr + len)`.
    fn newest_touching(&self, addr: u64, len: u64) -> Option<usize> {
        let mut newest = None;
        self.for_each_touching(addr, len, |i| newest = Some(i));
        newest
    }

    /// Calls `f` with the index of every write overlapping `[addr, addr + len)`, in program
    /// order.
    fn for_each_touching(&self, addr: u64, len: u64, f: impl FnMut(usize)) {
        let end = addr + len;
        let overlaps = |w: &Write| w.addr < end && addr < w.end();
        match &self.index {
            None => (0..self.writes.len())
                .filter(|&i| overlaps(&self.writes[i]))
                .for_each(f),
            Some(set) => {
                let from = (addr.saturating_sub(self.longest), 0);
                let mut hits: SmallVec<[usize; 16]> = set
                    .range(from..(end, 0))
                    .map(|&(_, i)| i)
                    .filter(|&i| overlaps(&self.writes[i]))
                    .collect();
                hits.sort_unstable();
                hits.into_iter().for_each(f);
            }
        }
    }

    /// Overlays the buffered writes on `dst`, which holds the PM contents at `addr`.
    #[inline]
    pub fn overlay(&self, addr: u64, dst: &mut [u8]) {
        // Reads in transactions that wrote nothing (most of them) stop here, inlined.
        if self.lines != 0 {
            self.overlay_written(addr, dst);
        }
    }

    fn overlay_written(&self, addr: u64, dst: &mut [u8]) {
        let len = dst.len() as u64;
        if self.lines & lines_mask(addr, len) == 0 {
            return;
        }
        let end = addr + len;
        self.for_each_touching(addr, len, |i| {
            let w = self.writes[i];
            let (from, to) = (w.addr.max(addr), w.end().min(end));
            let src = w.at as usize + (from - w.addr) as usize;
            let n = (to - from) as usize;
            let dst_at = (from - addr) as usize;
            copy_bytes(&mut dst[dst_at..dst_at + n], &self.data[src..src + n]);
        });
    }

    /// Forgets every write, keeping the allocations for the next transaction.
    pub fn clear(&mut self) {
        self.writes.clear();
        self.data.clear();
        self.lines = 0;
        self.index = None;
        self.longest = 0;
    }

    /// The final bytes of every written location, as disjoint ranges in address order
    /// (overlapping and adjacent writes merged), into `out` (cleared first). A range made of
    /// one write is copied as it is; the writes of a merged range are laid down in program
    /// order, so later writes win.
    pub fn coalesce_into(&self, out: &mut Coalesced) {
        out.clear();
        let mut order = std::mem::take(&mut out.order);
        order.extend(
            self.writes
                .iter()
                .enumerate()
                .map(|(i, w)| (w.addr, i as u32)),
        );
        sort_small(&mut order);
        let mut first = 0;
        while first < order.len() {
            let start = order[first].0;
            let (mut end, mut next) = (self.writes[order[first].1 as usize].end(), first + 1);
            while next < order.len() && order[next].0 <= end {
                end = end.max(self.writes[order[next].1 as usize].end());
                next += 1;
            }
            let at = out.data.len();
            let group = &mut order[first..next];
            if let [(_, only)] = group {
                let w = self.writes[*only as usize];
                extend_bytes(&mut out.data, &self.data[w.at as usize..][..w.len as usize]);
            } else {
                out.data.resize(at + (end - start) as usize, 0);
                group
                    .iter_mut()
                    .for_each(|(addr, index)| *addr = u64::from(*index));
                sort_small(group);
                for &(_, index) in group.iter() {
                    let w = self.writes[index as usize];
                    let to = at + (w.addr - start) as usize;
                    copy_bytes(
                        &mut out.data[to..to + w.len as usize],
                        &self.data[w.at as usize..][..w.len as usize],
                    );
                }
            }
            out.spans.push((start, at, (end - start) as usize));
            first = next;
        }
        order.clear();
        out.order = order;
    }

    /// [`WriteSet::coalesce_into`] a fresh buffer.
    pub fn coalesce(&self) -> Coalesced {
        let mut out = Coalesced::default();
        self.coalesce_into(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn overlay_and_coalesce_match_a_byte_model(writes in proptest::collection::vec((0u64..400, 1usize..40, any::<u8>()), 1..60)) {
            let mut model = vec![0u8; 512];
            let mut set = WriteSet::default();
            for (addr, len, byte) in writes {
                let bytes: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                set.write(addr, &bytes);
                model[addr as usize..addr as usize + len].copy_from_slice(&bytes);
                let mut view = vec![0u8; 512];
                set.overlay(0, &mut view);
                prop_assert_eq!(&view, &model);
            }
            let mut rebuilt = vec![0u8; 512];
            let coalesced = set.coalesce();
            let ranges: Vec<(u64, &[u8])> = coalesced.iter().collect();
            for pair in ranges.windows(2) {
                prop_assert!(pair[0].0 + pair[0].1.len() as u64 <= pair[1].0);
            }
            for (addr, bytes) in ranges {
                rebuilt[addr as usize..addr as usize + bytes.len()].copy_from_slice(bytes);
            }
            prop_assert_eq!(rebuilt, model);
        }
    }

    #[test]
    fn repeated_writes_to_one_word_keep_one_range() {
        let mut set = WriteSet::default();
        for value in 0..100u64 {
            set.write(64, &value.to_le_bytes());
        }
        assert_eq!(set.writes.len(), 1);
        let coalesced = set.coalesce();
        assert_eq!(
            coalesced.iter().collect::<Vec<_>>(),
            vec![(64, &99u64.to_le_bytes()[..])]
        );
    }
}
