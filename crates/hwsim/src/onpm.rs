//! The on-PM buffer: a small write-combining buffer inside the DIMM (ADR-protected) with
//! 256 B lines, LRU replacement, 8 B-word valid masks. 8 B in-place updates and 64 B line
//! write-backs to the same 256 B line coalesce; a media write happens when a line is evicted
//! (or drained at the end). Each line also tracks which of its words carry data the cells do
//! not have yet (`dirty`, a subset of `valid`). A [`MediaWrite`] hands both masks to the
//! memory controller, whose media model (`MediaModel`) turns them into bank time, and
//! whose counters turn the changed words into bytes programmed.

use crate::util::FastMap;

/// Words per 256 B line.
const WORDS: u32 = 32;
const FULL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    line: u64,
    valid: u32,
    /// Written words whose data differs from the media (⊆ `valid`).
    dirty: u32,
    stamp: u64,
}

/// A media write: one 256 B line (row) leaving for the cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaWrite {
    /// 256 B line number (byte address / 256).
    pub line: u64,
    /// Words written (8 B granules).
    pub valid: u32,
    /// Of those, words whose data differs from the cells.
    pub dirty: u32,
}

/// One 64 B block's words in a 256 B line mask.
const BLOCK: u32 = 0xFF;

impl MediaWrite {
    /// The media write of `line` whose written words are `valid`, `dirty` of them changed.
    pub fn of(line: u64, valid: u32, dirty: u32) -> MediaWrite {
        MediaWrite {
            line,
            valid,
            dirty: dirty & valid,
        }
    }

    /// Words written.
    pub fn written_words(&self) -> u32 {
        self.valid.count_ones()
    }

    /// Words whose data the cells did not have (the bytes programmed, in 8 B words).
    pub fn changed_words(&self) -> u32 {
        self.dirty.count_ones()
    }

    fn blocks(&self, mut f: impl FnMut(u32, u32) -> bool) -> u32 {
        (0..4)
            .filter(|b| {
                f(
                    (self.valid >> (8 * b)) & BLOCK,
                    (self.dirty >> (8 * b)) & BLOCK,
                )
            })
            .count() as u32
    }

    /// 64 B blocks holding a changed word (the blocks a block-granular media programs).
    pub fn changed_blocks(&self) -> u32 {
        self.blocks(|_, dirty| dirty != 0)
    }

    /// Changed blocks only partly written (a block-granular media without data comparison
    /// reads them first: a read-modify-write).
    pub fn partial_blocks(&self) -> u32 {
        self.blocks(|valid, dirty| dirty != 0 && valid != BLOCK)
    }

    /// Written blocks whose words all repeat the cells' data.
    pub fn redundant_blocks(&self) -> u32 {
        self.blocks(|valid, dirty| valid != 0 && dirty == 0)
    }
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
/// Slots are kept on one intrusive recency list per bank (`prev`/`next`, most recent at the
/// head), so the least recently used line of any set of banks is the oldest of those
/// banks' tails: an eviction looks at one line per bank.
#[derive(Clone, Debug)]
pub struct OnPmBuffer {
    capacity: usize,
    slots: Vec<Slot>,
    index: FastMap<u64, usize>,
    clock: u64,
    prev: Vec<usize>,
    next: Vec<usize>,
    /// Per bank: its most and least recently used buffered lines.
    heads: Vec<usize>,
    tails: Vec<usize>,
}

/// No slot (list end).
const NIL: usize = usize::MAX;

impl OnPmBuffer {
    /// A buffer of `capacity` 256 B lines (0 = none) in front of a media of `banks` banks
    /// (at most 64).
    pub fn new(capacity: usize, banks: usize) -> Self {
        let banks = banks.clamp(1, 64);
        OnPmBuffer {
            capacity,
            slots: Vec::with_capacity(capacity),
            index: FastMap::default(),
            clock: 0,
            prev: Vec::with_capacity(capacity),
            next: Vec::with_capacity(capacity),
            heads: vec![NIL; banks],
            tails: vec![NIL; banks],
        }
    }

    fn bank(&self, i: usize) -> usize {
        line_bank(self.slots[i].line, self.heads.len())
    }

    fn unlink(&mut self, i: usize) {
        let bank = self.bank(i);
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.heads[bank] = n
        } else {
            self.next[p] = n
        }
        if n == NIL {
            self.tails[bank] = p
        } else {
            self.prev[n] = p
        }
    }

    fn push_front(&mut self, i: usize) {
        let bank = self.bank(i);
        let head = self.heads[bank];
        self.prev[i] = NIL;
        self.next[i] = head;
        if head != NIL {
            self.prev[head] = i;
        }
        self.heads[bank] = i;
        if self.tails[bank] == NIL {
            self.tails[bank] = i;
        }
    }

    /// Marks slot `i` most recently used.
    fn touch(&mut self, i: usize) {
        if self.heads[self.bank(i)] != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// The least recently used line of the banks in `banks` (a mask), if they hold any.
    fn oldest_in(&self, banks: u64) -> Option<usize> {
        self.tails
            .iter()
            .enumerate()
            .filter(|&(b, &t)| banks & (1 << b) != 0 && t != NIL)
            .map(|(_, &t)| t)
            .min_by_key(|&t| self.slots[t].stamp)
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

    /// Lines the buffer holds at most (0: no buffer).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
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
    /// this causes: with a buffer, the eviction of the least recently used line of the
    /// banks in `idle_banks` (a mask; the least recently used line of all if none of them
    /// holds one); without, the write itself.
    pub fn write(&mut self, addr: u64, bytes: u64, idle_banks: u64) -> Option<MediaWrite> {
        let mask = word_mask(addr, bytes);
        self.write_words(addr >> 8, mask, mask, idle_banks)
    }

    /// Writes the words of 256 B line `line` set in `mask`, `dirty` of them with data the
    /// media does not have (see [`OnPmBuffer::write`]).
    pub fn write_words(
        &mut self,
        line: u64,
        mask: u32,
        dirty: u32,
        idle_banks: u64,
    ) -> Option<MediaWrite> {
        self.clock += 1;
        let dirty = dirty & mask;
        if self.capacity == 0 {
            return Some(MediaWrite::of(line, mask, dirty));
        }
        if let Some(&i) = self.index.get(&line) {
            self.slots[i].valid |= mask;
            // A write whose data repeats the persistence domain's leaves a buffered change
            // of the word in place (the media still lacks it).
            self.slots[i].dirty |= dirty;
            self.slots[i].stamp = self.clock;
            self.touch(i);
            return None;
        }
        let slot = Slot {
            line,
            valid: mask,
            dirty,
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
        // Least recently used among the lines of idle banks, else the least recently used.
        let i = self
            .oldest_in(idle_banks)
            .or_else(|| self.oldest_in(u64::MAX))
            .expect("a full buffer holds lines");
        self.unlink(i);
        let old = std::mem::replace(&mut self.slots[i], slot);
        self.index.remove(&old.line);
        self.index.insert(line, i);
        self.push_front(i);
        Some(MediaWrite::of(old.line, old.valid, old.dirty))
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
        self.slots
            .iter()
            .map(|s| MediaWrite::of(s.line, s.valid, s.dirty))
    }
}

/// The bank of 256 B line `line` among `banks`: interleaved by line, with the high bits
/// folded in (as for the LLC's sets, so that cores' instances at equal offsets spread over
/// the banks); a mask when the bank count is a power of two.
#[inline]
pub fn line_bank(line: u64, banks: usize) -> usize {
    let line = crate::cache::fold_index(line);
    if banks.is_power_of_two() {
        (line & (banks as u64 - 1)) as usize
    } else {
        (line % banks as u64) as usize
    }
}

/// Valid-word mask of `bytes` at `addr` within its 256 B line (partial words count whole:
/// the buffer tracks 8 B granules).
pub fn word_mask(addr: u64, bytes: u64) -> u32 {
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
            self.write(addr, bytes, u64::MAX)
        }
    }

    #[test]
    fn two_word_writes_to_one_line_make_one_media_write() {
        let mut b = OnPmBuffer::new(1, 4);
        assert_eq!(b.write_any(0x1000, 8), None);
        assert_eq!(
            b.write_any(0x1008, 8),
            None,
            "coalesces into the buffered line"
        );
        assert_eq!(b.placement(0x1000 >> 8), Placement::Hit);
        // A write to another line evicts it: one media write of the two words, one
        // partly written block.
        let mw = b.write_any(0x2000, 64).expect("evicts");
        assert_eq!(mw, MediaWrite::of(0x10, 0b11, 0b11));
        assert_eq!((mw.changed_blocks(), mw.partial_blocks()), (1, 1));
        assert_eq!(b.residual().count(), 1);
    }

    #[test]
    fn a_fully_written_line_has_no_partial_block() {
        let mut b = OnPmBuffer::new(1, 4);
        for i in 0..4 {
            assert_eq!(b.write_any(0x400 + i * 64, 64), None);
        }
        assert!(b.holds_line64(0x440));
        let mw = b.write_any(0x800, 8).expect("evicts");
        assert_eq!(mw, MediaWrite::of(4, FULL, FULL));
        assert_eq!((mw.changed_blocks(), mw.partial_blocks()), (4, 0));
        assert_eq!(mw.written_words(), 32);
    }

    #[test]
    fn lru_line_is_evicted_and_no_buffer_writes_through() {
        let mut b = OnPmBuffer::new(2, 4);
        b.write_any(0x000, 8);
        b.write_any(0x100, 8);
        b.write_any(0x008, 8); // line 0 is now most recent
        assert_eq!(b.placement(2), Placement::Full);
        assert_eq!(b.write_any(0x200, 8).map(|m| m.line), Some(1));
        // Only line 0 is evictable (its bank is idle): it goes although line 2 is older.
        b.write_any(0x208, 8);
        assert_eq!(
            b.write(0x300, 8, 1 << line_bank(0, 4)).map(|m| m.line),
            Some(0)
        );
        let mut direct = OnPmBuffer::new(0, 4);
        assert_eq!(direct.placement(7), Placement::Direct);
        assert_eq!(
            direct.write_any(0x700, 256),
            Some(MediaWrite::of(7, FULL, FULL))
        );
    }

    #[test]
    fn media_writes_count_changed_words_and_blocks() {
        // Words 0 and 1 (block 0, partly) and the whole of block 2.
        let words = 0b11 | 0xFF << 16;
        let mw = MediaWrite::of(9, words, words);
        assert_eq!((mw.changed_blocks(), mw.partial_blocks()), (2, 1));
        assert_eq!((mw.written_words(), mw.changed_words()), (10, 10));
        // Block 2 repeats the cells' data: nothing to program there.
        let mw = MediaWrite::of(9, words, 0b11);
        assert_eq!(
            (
                mw.changed_blocks(),
                mw.partial_blocks(),
                mw.redundant_blocks()
            ),
            (1, 1, 1)
        );
        assert_eq!(mw.changed_words(), 2);
    }

    #[test]
    fn unchanged_rewrites_program_nothing_and_keep_buffered_changes() {
        // A 64 B write-back repeating the persistent data: no changed word.
        let mut b = OnPmBuffer::new(1, 4);
        b.write_words(0, 0xFF, 0, u64::MAX);
        let mw = b.residual().next().expect("buffered");
        assert_eq!((mw.changed_words(), mw.redundant_blocks()), (0, 1));
        // An 8 B change of word 0 still in the buffer, then a write-back carrying the same
        // data (unchanged against the persistence domain): the cells still need word 0, and
        // the block is now whole (Silo's Fig. 9, case 2).
        let mut b = OnPmBuffer::new(1, 4);
        b.write_words(0, 1, 1, u64::MAX);
        b.write_words(0, 0xFF, 0, u64::MAX);
        let mw = b.residual().next().expect("buffered");
        assert_eq!(
            (mw.changed_words(), mw.changed_blocks(), mw.partial_blocks()),
            (1, 1, 0)
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
