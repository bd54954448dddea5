//! The on-PM buffer: a small write-combining buffer inside the DIMM (ADR-protected) with
//! 256 B lines, LRU replacement, 8 B-word valid masks. 8 B in-place updates and 64 B line
//! write-backs to the same 256 B line coalesce; a media write happens when a line is evicted
//! (or drained at the end), and a line that is not completely written needs a
//! read-modify-write of the media line.

use crate::util::FastMap;

/// Words per 256 B line.
const WORDS: u32 = 32;
const FULL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    line: u64,
    valid: u32,
    stamp: u64,
}

/// A media write caused by the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaWrite {
    /// 256 B line number (byte address / 256).
    pub line: u64,
    /// Whether the line was only partly written (read-modify-write of the media line).
    pub rmw: bool,
}

/// Where a write to a line would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The line is buffered: the write coalesces.
    Hit,
    /// A free slot takes the line.
    Free,
    /// The buffer is full: some line must be written to the media first.
    Full,
    /// No buffer: the write goes to the media by itself.
    Direct,
}

/// The buffer.
///
/// Slots are kept on an intrusive recency list (`prev`/`next`, most recent at `head`), so an
/// eviction walks from the least recently used end and usually stops at once.
#[derive(Clone, Debug)]
pub struct OnPmBuffer {
    capacity: usize,
    slots: Vec<Slot>,
    index: FastMap<u64, usize>,
    clock: u64,
    prev: Vec<usize>,
    next: Vec<usize>,
    head: usize,
    tail: usize,
}

/// No slot (list end).
const NIL: usize = usize::MAX;

impl OnPmBuffer {
    /// A buffer of `capacity` 256 B lines (0 = none).
    pub fn new(capacity: usize) -> Self {
        OnPmBuffer {
            capacity,
            slots: Vec::with_capacity(capacity),
            index: FastMap::default(),
            clock: 0,
            prev: Vec::with_capacity(capacity),
            next: Vec::with_capacity(capacity),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n
        } else {
            self.next[p] = n
        }
        if n == NIL {
            self.tail = p
        } else {
            self.prev[n] = p
        }
    }

    fn push_front(&mut self, i: usize) {
        self.prev[i] = NIL;
        self.next[i] = self.head;
        if self.head != NIL {
            self.prev[self.head] = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Marks slot `i` most recently used.
    fn touch(&mut self, i: usize) {
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// Where a write to 256 B line `line` would go now.
    pub fn placement(&self, line: u64) -> Placement {
        if self.capacity == 0 {
            Placement::Direct
        } else if self.index.contains_key(&line) {
            Placement::Hit
        } else if self.slots.len() < self.capacity {
            Placement::Free
        } else {
            Placement::Full
        }
    }

    /// Whether 256 B line `line` is buffered.
    pub fn contains(&self, line: u64) -> bool {
        self.index.contains_key(&line)
    }

    /// Whether every slot is taken (a new line needs an eviction).
    pub fn is_full(&self) -> bool {
        self.capacity > 0 && self.slots.len() == self.capacity
    }

    /// Buffered 256 B line numbers.
    pub fn lines(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().map(|s| s.line)
    }

    /// Writes `bytes` at byte address `addr` (within one 256 B line). Returns the media write
    /// this causes: with a buffer, the eviction of the least recently used line among those
    /// `evictable` accepts (the LRU line if it accepts none); without, the write itself.
    pub fn write(
        &mut self,
        addr: u64,
        bytes: u64,
        evictable: impl Fn(u64) -> bool,
    ) -> Option<MediaWrite> {
        let line = addr >> 8;
        let mask = word_mask(addr, bytes);
        self.clock += 1;
        if self.capacity == 0 {
            return Some(MediaWrite {
                line,
                rmw: mask != FULL,
            });
        }
        if let Some(&i) = self.index.get(&line) {
            self.slots[i].valid |= mask;
            self.slots[i].stamp = self.clock;
            self.touch(i);
            return None;
        }
        let slot = Slot {
            line,
            valid: mask,
            stamp: self.clock,
        };
        if self.slots.len() < self.capacity {
            let i = self.slots.len();
            self.index.insert(line, i);
            self.slots.push(slot);
            self.prev.push(NIL);
            self.next.push(NIL);
            self.push_front(i);
            return None;
        }
        // Least recently used among the evictable lines, else the least recently used.
        let mut i = self.tail;
        while i != NIL && !evictable(self.slots[i].line) {
            i = self.prev[i];
        }
        let i = if i == NIL { self.tail } else { i };
        let old = std::mem::replace(&mut self.slots[i], slot);
        self.index.remove(&old.line);
        self.index.insert(line, i);
        self.touch(i);
        Some(MediaWrite {
            line: old.line,
            rmw: old.valid != FULL,
        })
    }

    /// Whether the 64 B line at byte address `addr` is completely buffered (a read can be
    /// served from the buffer).
    pub fn holds_line64(&self, addr: u64) -> bool {
        self.index.get(&(addr >> 8)).is_some_and(|&i| {
            self.slots[i].valid & word_mask(addr & !63, 64) == word_mask(addr & !63, 64)
        })
    }

    /// The media writes that draining every buffered line would cost (end of a run).
    pub fn residual(&self) -> impl Iterator<Item = MediaWrite> + '_ {
        self.slots.iter().map(|s| MediaWrite {
            line: s.line,
            rmw: s.valid != FULL,
        })
    }
}

/// Valid-word mask of `bytes` at `addr` within its 256 B line (partial words count whole:
/// the buffer tracks 8 B granules).
fn word_mask(addr: u64, bytes: u64) -> u32 {
    let first = (addr % 256) / 8;
    let last = ((addr % 256) + bytes.max(1) - 1).min(255) / 8;
    let n = (last - first + 1) as u32;
    if n >= WORDS {
        FULL
    } else {
        ((1u32 << n) - 1) << first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl OnPmBuffer {
        fn write_any(&mut self, addr: u64, bytes: u64) -> Option<MediaWrite> {
            self.write(addr, bytes, |_| true)
        }
    }

    #[test]
    fn two_word_writes_to_one_line_make_one_media_write() {
        let mut b = OnPmBuffer::new(1);
        assert_eq!(b.write_any(0x1000, 8), None);
        assert_eq!(
            b.write_any(0x1008, 8),
            None,
            "coalesces into the buffered line"
        );
        assert_eq!(b.placement(0x1000 >> 8), Placement::Hit);
        // A write to another line evicts it: one media write, partial → read-modify-write.
        assert_eq!(
            b.write_any(0x2000, 64),
            Some(MediaWrite {
                line: 0x10,
                rmw: true
            })
        );
        assert_eq!(b.residual().count(), 1);
    }

    #[test]
    fn a_fully_written_line_needs_no_read_modify_write() {
        let mut b = OnPmBuffer::new(1);
        for i in 0..4 {
            assert_eq!(b.write_any(0x400 + i * 64, 64), None);
        }
        assert!(b.holds_line64(0x440));
        let mw = b.write_any(0x800, 8).expect("evicts");
        assert_eq!(
            mw,
            MediaWrite {
                line: 4,
                rmw: false
            }
        );
    }

    #[test]
    fn lru_line_is_evicted_and_no_buffer_writes_through() {
        let mut b = OnPmBuffer::new(2);
        b.write_any(0x000, 8);
        b.write_any(0x100, 8);
        b.write_any(0x008, 8); // line 0 is now most recent
        assert_eq!(b.placement(2), Placement::Full);
        assert_eq!(b.write_any(0x200, 8).map(|m| m.line), Some(1));
        // Only line 0 is evictable (its bank is idle): it goes although line 2 is older.
        b.write_any(0x208, 8);
        assert_eq!(b.write(0x300, 8, |l| l == 0).map(|m| m.line), Some(0));
        let mut direct = OnPmBuffer::new(0);
        assert_eq!(direct.placement(7), Placement::Direct);
        assert_eq!(
            direct.write_any(0x700, 256),
            Some(MediaWrite {
                line: 7,
                rmw: false
            })
        );
    }

    #[test]
    fn masks_cover_the_written_words() {
        assert_eq!(word_mask(0, 8), 1);
        assert_eq!(word_mask(8, 16), 0b110);
        assert_eq!(word_mask(64, 64), 0xFF00);
        assert_eq!(word_mask(0, 256), FULL);
        assert_eq!(word_mask(3, 2), 1, "a partial word marks its granule");
    }
}
