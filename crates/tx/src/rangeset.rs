//! A set of byte ranges, kept merged.

use std::collections::BTreeMap;

/// Disjoint, non-adjacent `[start, end)` ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Adds `[start, end)`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
        }
        let absorbed: Vec<u64> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for s in absorbed {
            let e = self.ranges.remove(&s).expect("key just listed");
            end = end.max(e);
        }
        self.ranges.insert(start, end);
    }

    /// The parts of `[start, end)` not in the set, in order.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut at = start;
        let first = self
            .ranges
            .range(..=start)
            .next_back()
            .map_or(start, |(&s, _)| s);
        for (&s, &e) in self.ranges.range(first..end) {
            if e <= at {
                continue;
            }
            if s > at {
                gaps.push((at, s.min(end)));
            }
            at = at.max(e);
            if at >= end {
                break;
            }
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps
    }

    /// Total bytes covered.
    pub fn total_len(&self) -> u64 {
        self.ranges.iter().map(|(&s, &e)| e - s).sum()
    }

    /// The ranges, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
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
        }
    }
}
