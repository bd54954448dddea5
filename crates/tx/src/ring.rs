//! Where records go in a lane's circular log: the live records in ring order, the space
//! between the newest one's end and the oldest one's start, and the wrap to the lane start.
//! The redo lanes and the MVCC engine's operation logs (TimeStone, ASPLOS 2020) place their
//! records with it; each record starts on a cache line.

use pmem::CACHE_LINE;
use std::collections::VecDeque;

/// A live record: its stamp (sequence number or timestamp, increasing in ring order), its
/// offset in the ring and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Sequence number or timestamp.
    pub stamp: u64,
    /// Offset from the ring start.
    pub pos: u64,
    /// Bytes.
    pub len: u64,
}

/// The live records of a circular log of `size` bytes.
#[derive(Clone, Debug)]
pub struct LogRing {
    size: u64,
    records: VecDeque<Placed>,
}

impl LogRing {
    /// An empty ring of `size` bytes.
    pub fn new(size: u64) -> Self {
        LogRing {
            size,
            records: VecDeque::new(),
        }
    }

    /// The ring's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The oldest live record's stamp.
    pub fn oldest(&self) -> Option<u64> {
        self.records.front().map(|r| r.stamp)
    }

    /// The newest live record's stamp.
    pub fn newest(&self) -> Option<u64> {
        self.records.back().map(|r| r.stamp)
    }

    fn end_of(&self, record: Placed) -> u64 {
        (record.pos + record.len)
            .next_multiple_of(CACHE_LINE)
            .min(self.size)
    }

    /// Where a record of `len` bytes fits, if anywhere: after the newest record, or at the
    /// ring start when the space up to the ring end is too short.
    pub fn fit(&self, len: u64) -> Option<u64> {
        let (Some(&first), Some(&last)) = (self.records.front(), self.records.back()) else {
            return (len <= self.size).then_some(0);
        };
        let (tail, head) = (first.pos, self.end_of(last));
        // head == tail only when the ring is exactly full.
        if head > tail {
            if head + len <= self.size {
                return Some(head);
            }
            return (len <= tail).then_some(0);
        }
        (head + len <= tail).then_some(head)
    }

    /// Bytes between the oldest record's start and the newest one's (line-rounded) end.
    pub fn used(&self) -> u64 {
        let (Some(&first), Some(&last)) = (self.records.front(), self.records.back()) else {
            return 0;
        };
        let (tail, head) = (first.pos, self.end_of(last));
        if head > tail {
            head - tail
        } else {
            self.size - tail + head
        }
    }

    /// Records a record written at `pos` (where [`fit`](Self::fit) placed it).
    pub fn push(&mut self, stamp: u64, pos: u64, len: u64) {
        self.records.push_back(Placed { stamp, pos, len });
    }

    /// Forgets the records whose stamp is at most `covered` (their effects are durable
    /// elsewhere, so their space may be reused).
    pub fn drop_covered(&mut self, covered: u64) {
        while self.oldest().is_some_and(|stamp| stamp <= covered) {
            self.records.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_go_after_the_newest_then_wrap_to_the_start() {
        let mut ring = LogRing::new(4096);
        assert_eq!(ring.fit(4097), None);
        assert_eq!(ring.fit(100), Some(0));
        ring.push(1, 0, 100);
        // The next record starts on the next cache line.
        assert_eq!(ring.fit(100), Some(128));
        ring.push(2, 128, 3968);
        assert_eq!(ring.used(), 4096);
        assert_eq!(ring.fit(1), None, "exactly full");
        ring.drop_covered(1);
        assert_eq!(ring.oldest(), Some(2));
        assert_eq!(ring.fit(128), Some(0), "wraps to the freed start");
        assert_eq!(ring.fit(129), None);
        ring.push(3, 0, 64);
        assert_eq!(ring.used(), 4096 - 128 + 64);
        assert_eq!(ring.fit(64), Some(64));
        assert_eq!(ring.fit(65), None, "would reach the oldest record");
        ring.drop_covered(3);
        assert_eq!((ring.used(), ring.oldest()), (0, None));
        assert_eq!(ring.fit(4096), Some(0));
    }
}
