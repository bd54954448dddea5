//! The on-PM buffer: a small write-combining buffer inside the DIMM (ADR-protected) with
//! 256 B lines, LRU replacement, 8 B-word valid masks. 8 B in-place updates and 64 B line
//! write-backs to the same 256 B line coalesce; a media write happens when a line is evicted
//! (or drained at the end). The media is written in *blocks* (`media_block_bytes`, 64 B by
//! default: the PCM's access unit, 150 ns each): an evicted line costs one block write per
//! block holding a *changed* word. Each line also tracks which of its words carry data the
//! media does not have yet (`dirty`, a subset of `valid`): a block whose written words all
//! repeat the media's contents needs no write pulse (data-comparison write, DCW). The memory
//! controller charges one media read before the write: before every media write when DCW is
//! on (`MemConfig::dcw`, the default: the comparison read), otherwise only when some changed
//! block is partly written (read-modify-write); see `MemCtrl::media_cycles`.

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

/// A media write caused by the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaWrite {
    /// 256 B line number (byte address / 256).
    pub line: u64,
    /// Whether the line was only partly written (some block needs a read-modify-write).
    pub rmw: bool,
    /// Whether some block needs a read (partly written, or redundant). Informational: the
    /// memory controller's timing reads before every media write when `dcw` is on and uses
    /// `rmw` otherwise.
    pub read: bool,
    /// Media blocks written (blocks holding at least one changed word).
    pub blocks: u32,
    /// Of those, blocks only partly written (each read before it is written).
    pub partial: u32,
    /// Blocks whose written words all repeat the media's data: a data-comparison read, no
    /// write.
    pub redundant: u32,
}

impl MediaWrite {
    /// The media write of `line` whose written words are `valid`, `dirty` of them changed, in
    /// blocks of `block_words` words (8: 64 B blocks; 32: the whole 256 B line is one block).
    pub fn of(line: u64, valid: u32, dirty: u32, block_words: u32) -> MediaWrite {
        let block_mask = if block_words >= WORDS {
            FULL
        } else {
            (1u32 << block_words) - 1
        };
        let (mut blocks, mut partial, mut redundant) = (0, 0, 0);
        for b in (0..WORDS).step_by(block_words.clamp(1, WORDS) as usize) {
            let bits = (valid >> b) & block_mask;
            let changed = (dirty >> b) & block_mask != 0;
            blocks += u32::from(changed);
            partial += u32::from(changed && bits != block_mask);
            redundant += u32::from(bits != 0 && !changed);
        }
        MediaWrite {
            line,
            rmw: partial > 0,
            read: partial + redundant > 0,
            blocks,
            partial,
            redundant,
        }
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
    /// Words per media block (8 = 64 B blocks).
    block_words: u32,
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
    /// (at most 64) written in blocks of `block_bytes` (8, 64 or 256).
    pub fn new(capacity: usize, block_bytes: u64, banks: usize) -> Self {
        let banks = banks.clamp(1, 64);
        OnPmBuffer {
            capacity,
            block_words: (block_bytes / 8).clamp(1, u64::from(WORDS)) as u32,
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
            return Some(MediaWrite::of(line, mask, dirty, self.block_words));
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
        Some(MediaWrite::of(
            old.line,
            old.valid,
            old.dirty,
            self.block_words,
        ))
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
            .map(|s| MediaWrite::of(s.line, s.valid, s.dirty, self.block_words))
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
        let mut b = OnPmBuffer::new(1, 64, 4);
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
                rmw: true,
                read: true,
                blocks: 1,
                partial: 1,
                redundant: 0
            })
        );
        assert_eq!(b.residual().count(), 1);
    }

    #[test]
    fn a_fully_written_line_needs_no_read_modify_write() {
        let mut b = OnPmBuffer::new(1, 64, 4);
        for i in 0..4 {
            assert_eq!(b.write_any(0x400 + i * 64, 64), None);
        }
        assert!(b.holds_line64(0x440));
        let mw = b.write_any(0x800, 8).expect("evicts");
        assert_eq!(
            mw,
            MediaWrite {
                line: 4,
                rmw: false,
                read: false,
                blocks: 4,
                partial: 0,
                redundant: 0
            }
        );
    }

    #[test]
    fn lru_line_is_evicted_and_no_buffer_writes_through() {
        let mut b = OnPmBuffer::new(2, 64, 4);
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
        let mut direct = OnPmBuffer::new(0, 64, 4);
        assert_eq!(direct.placement(7), Placement::Direct);
        assert_eq!(
            direct.write_any(0x700, 256),
            Some(MediaWrite {
                line: 7,
                rmw: false,
                read: false,
                blocks: 4,
                partial: 0,
                redundant: 0
            })
        );
    }

    #[test]
    fn media_writes_count_64_byte_blocks() {
        // Words 0 and 1 (block 0, partly) and the whole of block 2.
        let words = 0b11 | 0xFF << 16;
        let mw = MediaWrite::of(9, words, words, 8);
        assert_eq!((mw.blocks, mw.partial, mw.rmw), (2, 1, true));
        // With 256 B blocks the same line is one partly written block.
        let mw = MediaWrite::of(9, words, words, 32);
        assert_eq!((mw.blocks, mw.partial, mw.rmw), (1, 1, true));
        assert_eq!(MediaWrite::of(9, FULL, FULL, 32).blocks, 1);
        assert_eq!(MediaWrite::of(9, FULL, FULL, 8).partial, 0);
        // Block 2 repeats the media's data: a comparison read, no write.
        let mw = MediaWrite::of(9, words, 0b11, 8);
        assert_eq!((mw.blocks, mw.partial, mw.redundant), (1, 1, 1));
    }

    #[test]
    fn unchanged_rewrites_are_redundant_and_keep_buffered_changes() {
        // A 64 B write-back repeating the persistent data: a comparison read only.
        let mut b = OnPmBuffer::new(1, 64, 4);
        b.write_words(0, 0xFF, 0, u64::MAX);
        let mw = b.residual().next().expect("buffered");
        assert_eq!((mw.blocks, mw.partial, mw.redundant), (0, 0, 1));
        // An 8 B change of word 0 still in the buffer, then a write-back carrying the same
        // data (unchanged against the persistence domain): the media still needs word 0, and
        // the block is now whole, so no read-modify-write (Silo's Fig. 9, case 2).
        let mut b = OnPmBuffer::new(1, 64, 4);
        b.write_words(0, 1, 1, u64::MAX);
        b.write_words(0, 0xFF, 0, u64::MAX);
        let mw = b.residual().next().expect("buffered");
        assert_eq!((mw.blocks, mw.partial, mw.redundant), (1, 0, 0));
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
