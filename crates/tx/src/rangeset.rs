//! A set of byte ranges, kept merged.
//!
//! Kept as a sorted vector: a transaction touches a few ranges, so a binary search plus a
//! short shift beats a tree, and a cleared set keeps its buffer for the next transaction.

/// Disjoint, non-adjacent `[start, end)` ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// Sorted by start; since the ranges are disjoint, also by end.
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Empties the set, keeping its buffer.
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // The first range that ends at or after `start` is the first one to merge with.
        let first = self.ranges.partition_point(|&(_, e)| e < start);
        let mut last = first;
        while let Some(&(s, e)) = self.ranges.get(last).filter(|&&(s, _)| s <= end) {
            (start, end) = (start.min(s), end.max(e));
            last += 1;
        }
        if first == last {
            self.ranges.insert(first, (start, end));
        } else {
            self.ranges[first] = (start, end);
            self.ranges.drain(first + 1..last);
        }
    }

    /// The parts of `[start, end)` not in the set, in order.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        self.gaps_into(start, end, &mut gaps);
        gaps
    }

    /// [`RangeSet::gaps`] into `gaps` (cleared first).
    pub fn gaps_into(&self, start: u64, end: u64, gaps: &mut Vec<(u64, u64)>) {
        gaps.clear();
        let mut at = start;
        let first = self.ranges.partition_point(|&(_, e)| e <= start);
        for &(s, e) in &self.ranges[first..] {
            if s >= end || at >= end {
                break;
            }
            if s > at {
                gaps.push((at, s));
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push((at, end));
        }
    }

    /// Whether `[start, end)` is inside the set.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        let first = self.ranges.partition_point(|&(_, e)| e < end);
        start >= end
            || self
                .ranges
                .get(first)
                .is_some_and(|&(s, e)| s <= start && end <= e)
    }

    /// Total bytes covered.
    pub fn total_len(&self) -> u64 {
        self.ranges.iter().map(|&(s, e)| e - s).sum()
    }

    /// The ranges, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_a_bitmap(ops in proptest::collection::vec((0u64..200, 0u64..40), 0..30), probe in (0u64..220, 0u64..60)) {
            let mut set = RangeSet::default();
            let mut bits = [false; 300];
            for (start, len) in ops {
                set.insert(start, start + len);
                (start..start + len).for_each(|i| bits[i as usize] = true);
            }
            let ranges: Vec<_> = set.iter().collect();
            for pair in ranges.windows(2) {
                prop_assert!(pair[0].1 < pair[1].0, "not merged: {:?}", pair);
            }
            let (start, end) = (probe.0, probe.0 + probe.1);
            let gaps = set.gaps(start, end);
            let mut covered_by_gaps = [false; 300];
            for (s, e) in gaps {
                (s..e).for_each(|i| covered_by_gaps[i as usize] = true);
            }
            for i in start..end {
                prop_assert_eq!(covered_by_gaps[i as usize], !bits[i as usize], "byte {}", i);
            }
            prop_assert_eq!(set.covers(start, end), (start..end).all(|i| bits[i as usize]));
        }
    }
}
