//! Set-associative, write-back, LRU cache arrays (tags only: values live in the value tracker)
//! and the inclusive three-level hierarchy built from them.

use crate::config::{CacheConfig, Config};
use serde::{Deserialize, Serialize};

const INVALID: u64 = u64::MAX;

/// A line pushed out of a cache level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    /// Line number (byte address / 64).
    pub line: u64,
    /// Whether it held modified data.
    pub dirty: bool,
    /// The level's per-line auxiliary word (L1: the line's L2 slot; L2: its LLC slot; LLC:
    /// its sharer mask).
    pub aux: u64,
    /// Words of the line changed by stores since PM last received its data (the
    /// hierarchy's sectored dirty mask, kept for data-comparison writes).
    pub words: u8,
}

/// Most ways a cache may have: a set's recency order is one `u64` of 4-bit way numbers.
pub const MAX_WAYS: usize = 16;

const NIBBLES: u64 = 0x1111_1111_1111_1111;

/// One cache level: flat arrays indexed by `set * ways + way`, and per set the ways in
/// recency order (true LRU: 4 bits per way, most recently used in the low nibble, so a
/// set's replacement state is one word instead of a timestamp per way).
#[derive(Clone, Debug)]
pub struct Cache {
    ways: usize,
    set_mask: u64,
    /// Fold high address bits into the set index (the shared LLC: see [`fold_index`]).
    hashed: bool,
    /// `log2(ways)` when the ways are a power of two (slot → set without a division).
    way_shift: Option<u32>,
    /// Per slot its line and state, together (one host cache line per access).
    slots: Vec<Way>,
    order: Vec<u64>,
}

/// One way of a set.
#[derive(Clone, Copy, Debug)]
struct Way {
    /// The line, or `INVALID`.
    tag: u64,
    /// The level's auxiliary word (LLC: sharer mask).
    aux: u64,
    dirty: bool,
    /// Words changed since PM last received the line's data (see [`Victim`]).
    words: u8,
}

impl Way {
    const EMPTY: Way = Way {
        tag: INVALID,
        aux: 0,
        dirty: false,
        words: 0,
    };
}

/// `order` with `way` (at nibble position `at`) moved to the front.
#[inline]
fn promote(order: u64, way: u64, at: u32) -> u64 {
    let shift = 4 * at;
    let below = order & ((1u64 << shift) - 1);
    let above = order.checked_shr(shift + 4).unwrap_or(0);
    (above.checked_shl(shift + 4).unwrap_or(0)) | (below << 4) | way
}

/// Nibble position of `way` in `order` (it occurs in the first `ways` nibbles).
#[inline]
fn position(order: u64, way: u64) -> u32 {
    let x = order ^ (way * NIBBLES);
    let zero = x.wrapping_sub(NIBBLES) & !x & (NIBBLES << 3);
    zero.trailing_zeros() / 4
}

impl Cache {
    /// An empty cache (the number of sets must be a power of two; `Config::validate` checks).
    pub fn new(cfg: &CacheConfig) -> Self {
        let sets = cfg.sets();
        let n = sets * cfg.ways;
        let identity = (0..cfg.ways as u64).fold(0, |o, w| o | w << (4 * w));
        Cache {
            ways: cfg.ways,
            set_mask: sets as u64 - 1,
            hashed: false,
            way_shift: cfg
                .ways
                .is_power_of_two()
                .then(|| cfg.ways.trailing_zeros()),
            slots: vec![Way::EMPTY; n],
            order: vec![identity; sets],
        }
    }

    /// The same cache with a hashed set index (see [`fold_index`]).
    pub fn hashed(mut self) -> Self {
        self.hashed = true;
        self
    }

    #[inline]
    fn set_base(&self, line: u64) -> usize {
        let index = if self.hashed { fold_index(line) } else { line };
        (index & self.set_mask) as usize * self.ways
    }

    /// The slot holding `line`, if present.
    #[inline]
    pub fn find(&self, line: u64) -> Option<usize> {
        let base = self.set_base(line);
        self.slots[base..base + self.ways]
            .iter()
            .position(|w| w.tag == line)
            .map(|way| base + way)
    }

    #[inline]
    fn set_of(&self, slot: usize) -> usize {
        match self.way_shift {
            Some(shift) => slot >> shift,
            None => slot / self.ways,
        }
    }

    /// Marks a slot most recently used.
    #[inline]
    pub fn touch(&mut self, slot: usize) {
        let set = self.set_of(slot);
        let way = (slot - set * self.ways) as u64;
        let order = self.order[set];
        self.order[set] = promote(order, way, position(order, way));
    }

    /// Whether `line` is present.
    pub fn contains(&self, line: u64) -> bool {
        self.find(line).is_some()
    }

    /// Inserts `line` (absent) as most recently used, returning the valid line it replaced:
    /// an invalid way if any, otherwise the least recently used one.
    pub fn insert(&mut self, line: u64, dirty: bool, aux: u64) -> Option<Victim> {
        self.insert_slot(line, dirty, aux).1
    }

    /// [`Cache::insert`], also returning the slot the line went to.
    fn insert_slot(&mut self, line: u64, dirty: bool, aux: u64) -> (usize, Option<Victim>) {
        debug_assert!(self.find(line).is_none(), "inserting a present line");
        let base = self.set_base(line);
        // The first invalid way if any, else the least recently used one.
        let slot = match self.slots[base..base + self.ways]
            .iter()
            .position(|w| w.tag == INVALID)
        {
            Some(way) => base + way,
            None => {
                let lru = (self.order[self.set_of(base)] >> (4 * (self.ways - 1))) & 0xF;
                base + lru as usize
            }
        };
        let victim = (self.slots[slot].tag != INVALID).then(|| Victim {
            line: self.slots[slot].tag,
            dirty: self.slots[slot].dirty,
            aux: self.slots[slot].aux,
            words: self.slots[slot].words,
        });
        self.slots[slot].tag = line;
        self.slots[slot].dirty = dirty;
        self.slots[slot].aux = aux;
        self.slots[slot].words = 0;
        self.touch(slot);
        (slot, victim)
    }

    /// Removes `line`; returns whether it was dirty (`None` if absent).
    pub fn invalidate(&mut self, line: u64) -> Option<bool> {
        self.remove(line).map(|(dirty, _)| dirty)
    }

    /// Removes `line`; returns its dirty bit and changed words.
    fn remove(&mut self, line: u64) -> Option<(bool, u8)> {
        let slot = self.find(line)?;
        self.slots[slot].tag = INVALID;
        let was = self.slots[slot].dirty;
        self.slots[slot].dirty = false;
        self.slots[slot].aux = 0;
        Some((was, std::mem::take(&mut self.slots[slot].words)))
    }

    /// Cleans a line: takes its dirty bit and changed words (`(false, 0)` if absent).
    fn take_dirt(&mut self, line: u64) -> (bool, u8) {
        self.find(line).map_or((false, 0), |s| {
            (
                std::mem::take(&mut self.slots[s].dirty),
                std::mem::take(&mut self.slots[s].words),
            )
        })
    }

    /// Clears `mask` from the changed words of a present line.
    fn clear_words(&mut self, line: u64, mask: u8) {
        if let Some(s) = self.find(line) {
            self.slots[s].words &= !mask;
        }
    }

    /// Sets or clears the dirty bit of a present line; returns the previous bit.
    pub fn set_dirty(&mut self, line: u64, dirty: bool) -> Option<bool> {
        let slot = self.find(line)?;
        Some(std::mem::replace(&mut self.slots[slot].dirty, dirty))
    }

    /// Whether `line` is present and dirty.
    pub fn is_dirty(&self, line: u64) -> bool {
        self.find(line).is_some_and(|s| self.slots[s].dirty)
    }

    /// The auxiliary word of slot `slot`.
    pub fn aux_at(&mut self, slot: usize) -> &mut u64 {
        &mut self.slots[slot].aux
    }

    /// The auxiliary word of a present line.
    pub fn aux(&self, line: u64) -> Option<u64> {
        self.find(line).map(|s| self.slots[s].aux)
    }

    /// Every valid line with its dirty bit and auxiliary word (for design walks such as LAD's
    /// commit-time L1 tag walk).
    pub fn lines(&self) -> impl Iterator<Item = (u64, bool, u64)> + '_ {
        (0..self.slots.len())
            .filter(|&s| self.slots[s].tag != INVALID)
            .map(|s| (self.slots[s].tag, self.slots[s].dirty, self.slots[s].aux))
    }
}

/// A line number with its high bits (64 MiB granules and above: the core number of
/// tracegen's `core << 40` address spaces among them) XORed into its low bits.
///
/// Why: every core runs its own instance of a workload at the same offsets of its own
/// address space, so with a plain `line mod sets` index the hot lines of all cores would
/// fight for the same LLC sets (and PCM banks), an artefact real machines do not have, since
/// physical pages are scattered. Lines below 64 MiB map as with the plain index.
#[inline]
pub fn fold_index(line: u64) -> u64 {
    line ^ (line >> 20) ^ (line >> 34)
}

/// Which level served an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// L1 hit.
    L1,
    /// L2 hit.
    L2,
    /// LLC hit.
    Llc,
    /// Missed every level: the line comes from PM.
    Memory,
}

/// Outcome of one access to the hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The level that had the line.
    pub level: Level,
    /// A dirty line that left the LLC and must be written back to PM.
    pub writeback: Option<u64>,
    /// The written-back line's changed words (see [`Victim::words`]).
    pub writeback_words: u8,
}

/// Hit/miss counters of one level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelStats {
    /// Accesses that found the line.
    pub hits: u64,
    /// Accesses that did not.
    pub misses: u64,
}

/// Counters of the whole hierarchy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HierarchyStats {
    /// L1 data caches (all cores).
    pub l1: LevelStats,
    /// L2 caches (all cores).
    pub l2: LevelStats,
    /// Shared LLC.
    pub llc: LevelStats,
    /// Dirty lines written back from the LLC to PM.
    pub writebacks: u64,
}

/// Private L1 and L2 per core and a shared LLC, inclusive (L1 ⊆ L2 ⊆ LLC).
///
/// Inclusion is kept by back-invalidation: an L2 victim is removed from its core's L1, an LLC
/// victim from every sharer's L1 and L2 (the LLC's auxiliary word is its sharer mask, so at most
/// 64 cores). Dirtiness moves down with evictions, so when a line leaves the LLC it is dirty iff
/// some copy was modified, and the data written back is the newest (which is why the value
/// tracker can use the architectural value of the line at that moment). Coherence traffic
/// between private caches is not timed: workloads run one independent instance per core.
#[derive(Clone, Debug)]
pub struct Hierarchy {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    llc: Cache,
    /// Counters.
    pub stats: HierarchyStats,
}

impl Hierarchy {
    /// Empty caches for `cfg.cores` cores.
    pub fn new(cfg: &Config) -> Self {
        Hierarchy {
            l1: (0..cfg.cores).map(|_| Cache::new(&cfg.l1)).collect(),
            l2: (0..cfg.cores).map(|_| Cache::new(&cfg.l2)).collect(),
            llc: Cache::new(&cfg.llc).hashed(),
            stats: HierarchyStats::default(),
        }
    }

    /// Core `core` reads (`write == false`) or writes `line`, allocating it in every level.
    #[inline]
    pub fn access(&mut self, core: usize, line: u64, write: bool) -> Access {
        self.access_words(core, line, write, 0)
    }

    /// [`Hierarchy::access`] for a store that changes the words in `words` (0: a silent
    /// store, or a load): they join the line's changed words.
    #[inline]
    pub fn access_words(&mut self, core: usize, line: u64, write: bool, words: u8) -> Access {
        if let Some(slot) = self.l1[core].find(line) {
            self.stats.l1.hits += 1;
            self.l1[core].touch(slot);
            if write {
                self.l1[core].slots[slot].dirty = true;
                self.l1[core].slots[slot].words |= words;
            }
            return Access {
                level: Level::L1,
                writeback: None,
                writeback_words: 0,
            };
        }
        self.stats.l1.misses += 1;
        let mut writeback = None;
        let mut words_out = 0;
        let (level, l2_slot) = if let Some(slot) = self.l2[core].find(line) {
            self.stats.l2.hits += 1;
            self.l2[core].touch(slot);
            (Level::L2, slot)
        } else {
            self.stats.l2.misses += 1;
            let (level, llc_slot) = if let Some(slot) = self.llc.find(line) {
                self.stats.llc.hits += 1;
                self.llc.touch(slot);
                *self.llc.aux_at(slot) |= 1 << core;
                (Level::Llc, slot)
            } else {
                self.stats.llc.misses += 1;
                let (slot, wb) = self.fill_llc(core, line);
                writeback = wb.map(|(line, _)| line);
                words_out = wb.map_or(0, |(_, w)| w);
                (Level::Memory, slot)
            };
            (level, self.fill_l2(core, line, llc_slot))
        };
        self.fill_l1(core, line, write, words, l2_slot);
        Access {
            level,
            writeback,
            writeback_words: words_out,
        }
    }

    /// Inserts `line` into the LLC for `core`; returns its slot and the dirty victim to
    /// write back, if any.
    fn fill_llc(&mut self, core: usize, line: u64) -> (usize, Option<(u64, u8)>) {
        let (slot, victim) = self.llc.insert_slot(line, false, 1 << core);
        let Some(victim) = victim else {
            return (slot, None);
        };
        let (mut dirty, mut words) = (victim.dirty, victim.words);
        let mut sharers = victim.aux;
        while sharers != 0 {
            let sharer = sharers.trailing_zeros() as usize;
            sharers &= sharers - 1;
            for cache in [&mut self.l1[sharer], &mut self.l2[sharer]] {
                let (d, w) = cache.remove(victim.line).unwrap_or((false, 0));
                dirty |= d;
                words |= w;
            }
        }
        let writeback = dirty.then(|| {
            self.stats.writebacks += 1;
            (victim.line, words)
        });
        (slot, writeback)
    }

    /// Inserts `line` (at LLC slot `llc_slot`) into `core`'s L2; returns its slot. An L2
    /// way's auxiliary word is its line's LLC slot (inclusion keeps it there), so an L2
    /// victim updates the LLC without a lookup.
    fn fill_l2(&mut self, core: usize, line: u64, llc_slot: usize) -> usize {
        let (l2_slot, victim) = self.l2[core].insert_slot(line, false, llc_slot as u64);
        let Some(victim) = victim else {
            return l2_slot;
        };
        let (d, w) = self.l1[core].remove(victim.line).unwrap_or((false, 0));
        let dirty = victim.dirty | d;
        let slot = victim.aux as usize;
        debug_assert_eq!(
            self.llc.slots[slot].tag, victim.line,
            "inclusion: L2 line in LLC"
        );
        *self.llc.aux_at(slot) &= !(1 << core);
        if dirty {
            self.llc.slots[slot].dirty = true;
        }
        self.llc.slots[slot].words |= victim.words | w;
        l2_slot
    }

    /// Inserts `line` (at L2 slot `l2_slot`) into `core`'s L1; an L1 way's auxiliary word is
    /// its line's L2 slot.
    fn fill_l1(&mut self, core: usize, line: u64, write: bool, words: u8, l2_slot: usize) {
        let l1 = &mut self.l1[core];
        let (slot, victim) = l1.insert_slot(line, write, l2_slot as u64);
        l1.slots[slot].words = words;
        if let Some(victim) = victim
            && (victim.dirty || victim.words != 0)
        {
            let l2 = &mut self.l2[core];
            let slot = victim.aux as usize;
            debug_assert_eq!(l2.slots[slot].tag, victim.line, "inclusion: L1 line in L2");
            l2.slots[slot].dirty |= victim.dirty;
            l2.slots[slot].words |= victim.words;
        }
    }

    /// Cleans `line` in every level and core (a `clwb`): returns whether any copy was dirty,
    /// in which case the caller writes the line back. The copies stay valid.
    pub fn clean(&mut self, line: u64) -> bool {
        self.clean_words(line).0
    }

    /// [`Hierarchy::clean`], also taking the line's changed words (they leave with the data).
    pub fn clean_words(&mut self, line: u64) -> (bool, u8) {
        let Some(slot) = self.llc.find(line) else {
            return (false, 0); // inclusion: absent from the LLC means absent everywhere
        };
        let mut sharers = self.llc.slots[slot].aux;
        let mut dirty = std::mem::replace(&mut self.llc.slots[slot].dirty, false);
        let mut words = std::mem::take(&mut self.llc.slots[slot].words);
        while sharers != 0 {
            let c = sharers.trailing_zeros() as usize;
            sharers &= sharers - 1;
            for cache in [&mut self.l1[c], &mut self.l2[c]] {
                let (d, w) = cache.take_dirt(line);
                dirty |= d;
                words |= w;
            }
        }
        (dirty, words)
    }

    /// Cleans every dirty line of the hierarchy and returns them with their changed words
    /// (the end of a run: what the caches still owe PM), in LLC order.
    pub fn take_dirty_lines(&mut self) -> Vec<(u64, u8)> {
        let lines: Vec<u64> = self.llc.lines().map(|(line, _, _)| line).collect();
        lines
            .into_iter()
            .filter_map(|line| {
                let (dirty, words) = self.clean_words(line);
                dirty.then_some((line, words))
            })
            .collect()
    }

    /// PM received the newest data of the words in `mask` of `line` by another path (an
    /// in-place update): they are no longer changed in any copy. The line stays dirty.
    pub fn persisted_words(&mut self, line: u64, mask: u8) {
        let Some(slot) = self.llc.find(line) else {
            return;
        };
        self.llc.slots[slot].words &= !mask;
        let mut sharers = self.llc.slots[slot].aux;
        while sharers != 0 {
            let c = sharers.trailing_zeros() as usize;
            sharers &= sharers - 1;
            self.l1[c].clear_words(line, mask);
            self.l2[c].clear_words(line, mask);
        }
    }

    /// Marks the LLC copy of a present line dirty (its data is newer than PM's).
    pub fn mark_dirty(&mut self, line: u64) {
        self.mark_dirty_words(line, 0);
    }

    /// [`Hierarchy::mark_dirty`] with the words in which the data is newer.
    pub fn mark_dirty_words(&mut self, line: u64, words: u8) {
        let slot = self.llc.find(line).expect("the line was just filled");
        self.llc.slots[slot].dirty = true;
        self.llc.slots[slot].words |= words;
    }

    /// Core `core`'s L1 (for design hooks that read line tags).
    pub fn l1(&self, core: usize) -> &Cache {
        &self.l1[core]
    }

    /// Core `core`'s L1, mutable (for design hooks that set line tags).
    pub fn l1_mut(&mut self, core: usize) -> &mut Cache {
        &mut self.l1[core]
    }

    /// The level an access of core `core` to `line` would be served from (no side effects).
    pub fn level(&self, core: usize, line: u64) -> Level {
        if self.l1[core].contains(line) {
            Level::L1
        } else if self.l2[core].contains(line) {
            Level::L2
        } else if self.llc.contains(line) {
            Level::Llc
        } else {
            Level::Memory
        }
    }

    /// Whether `line` is present in the given level of `core` (tests and assertions).
    pub fn holds(&self, core: usize, level: Level, line: u64) -> bool {
        match level {
            Level::L1 => self.l1[core].contains(line),
            Level::L2 => self.l2[core].contains(line),
            Level::Llc => self.llc.contains(line),
            Level::Memory => true,
        }
    }

    /// Whether any copy of `line` is dirty.
    pub fn is_dirty(&self, line: u64) -> bool {
        self.l1.iter().chain(&self.l2).any(|c| c.is_dirty(line)) || self.llc.is_dirty(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(sets: u64, ways: usize) -> CacheConfig {
        CacheConfig {
            size_bytes: sets * ways as u64 * 64,
            ways,
            latency: 1,
        }
    }

    #[test]
    fn recency_order_moves_a_way_to_the_front() {
        let order = 0x3210; // ways 0..4, way 0 most recent
        assert_eq!(position(order, 2), 2);
        assert_eq!(promote(order, 2, 2), 0x3102);
        assert_eq!(promote(order, 0, 0), order);
        assert_eq!(promote(order, 3, 3), 0x2103);
        // Sixteen ways fill the word: moving the last one to the front.
        let full = 0xFEDC_BA98_7654_3210_u64;
        assert_eq!(position(full, 15), 15);
        assert_eq!(promote(full, 15, 15), 0xEDCB_A987_6543_210F);
        assert_eq!(position(full, 0), 0);
    }

    #[test]
    fn lru_victim_is_the_least_recently_used_way() {
        let mut c = Cache::new(&tiny(1, 4));
        for line in [10, 11, 12, 13] {
            assert_eq!(c.insert(line, false, 0), None, "fills invalid ways first");
        }
        // Touch 10 and 12: LRU order becomes 11, 13, 10, 12.
        let s = c.find(10).unwrap();
        c.touch(s);
        let s = c.find(12).unwrap();
        c.touch(s);
        assert_eq!(c.insert(14, false, 0).map(|v| v.line), Some(11));
        assert_eq!(c.insert(15, false, 0).map(|v| v.line), Some(13));
        assert_eq!(c.insert(16, false, 0).map(|v| v.line), Some(10));
        assert!(c.contains(12) && c.contains(14) && c.contains(15) && c.contains(16));
    }

    #[test]
    fn sets_are_indexed_by_low_line_bits() {
        let mut c = Cache::new(&tiny(4, 1));
        assert_eq!(c.insert(1, true, 0), None);
        assert_eq!(c.insert(2, false, 0), None, "different set");
        let v = c
            .insert(5, false, 0)
            .expect("5 maps to set 1 and evicts line 1");
        assert_eq!((v.line, v.dirty), (1, true));
    }

    fn small_config(cores: usize) -> Config {
        // L1: 2 sets × 2 ways, L2: 4 sets × 2 ways, LLC: 4 sets × 4 ways.
        Config {
            cores,
            l1: tiny(2, 2),
            l2: tiny(4, 2),
            llc: tiny(4, 4),
            ..Config::default()
        }
    }

    #[test]
    fn hits_and_misses_walk_the_levels() {
        let mut h = Hierarchy::new(&small_config(1));
        assert_eq!(h.access(0, 0, false).level, Level::Memory);
        assert_eq!(h.access(0, 0, false).level, Level::L1);
        // Lines 2 and 4 share L1 set 0 with line 0; after both, line 0 left the L1 only.
        h.access(0, 2, false);
        h.access(0, 4, false);
        assert!(!h.holds(0, Level::L1, 0));
        assert_eq!(h.access(0, 0, false).level, Level::L2);
        assert_eq!(h.stats.l1.hits, 1);
        assert_eq!(h.stats.l1.misses, 4);
        assert_eq!(h.stats.llc.misses, 3);
        assert_eq!(h.stats.l2.hits, 1);
    }

    #[test]
    fn dirty_victims_move_down_and_leave_the_llc_as_writebacks() {
        let mut h = Hierarchy::new(&small_config(1));
        // Write line 0; then fill LLC set 0 (lines 0,4,8,12 map there) with 4 more lines.
        assert_eq!(h.access(0, 0, true).writeback, None);
        for line in [4, 8, 12] {
            assert_eq!(h.access(0, line, false).writeback, None);
        }
        // LLC set 0 is full with LRU = line 0, which is still dirty in the L1 (or L2).
        let a = h.access(0, 16, false);
        assert_eq!(a.writeback, Some(0), "the dirty LRU line is written back");
        assert!(
            !h.holds(0, Level::L1, 0) && !h.holds(0, Level::L2, 0),
            "back-invalidated"
        );
        // A clean victim is dropped silently.
        let a = h.access(0, 20, false);
        assert_eq!(a.writeback, None);
        assert_eq!(h.stats.writebacks, 1);
    }

    #[test]
    fn changed_words_follow_the_line_down_and_leave_with_it() {
        let mut h = Hierarchy::new(&small_config(1));
        h.access_words(0, 0, true, 0b01);
        h.access(0, 2, false); // L1 set 0 (2 ways): line 0 stays
        h.access_words(0, 0, true, 0b10);
        h.access(0, 4, false);
        h.access(0, 6, false); // line 0 leaves the L1 for the L2
        assert!(!h.holds(0, Level::L1, 0));
        // An in-place update persisted word 1; a flush would now carry word 0 only.
        h.persisted_words(0, 0b10);
        for line in [8, 12] {
            h.access(0, line, false);
        }
        let a = h.access(0, 16, false);
        assert_eq!((a.writeback, a.writeback_words), (Some(0), 0b01));
        // A silent store dirties a line without changing a word; cleaning takes the words.
        h.access_words(0, 20, true, 0);
        assert_eq!(h.clean_words(20), (true, 0));
        h.access_words(0, 20, true, 0b100);
        assert_eq!(h.clean_words(20), (true, 0b100));
        assert_eq!(h.clean_words(20), (false, 0));
    }

    #[test]
    fn llc_eviction_back_invalidates_every_sharer() {
        let mut h = Hierarchy::new(&small_config(2));
        h.access(0, 0, false);
        h.access(1, 0, true); // core 1 modifies line 0: dirty only in core 1's L1
        for line in [4, 8, 12] {
            h.access(0, line, false);
        }
        assert_eq!(h.access(0, 16, false).writeback, Some(0));
        assert!(!h.holds(1, Level::L1, 0) && !h.holds(0, Level::L1, 0));
    }

    #[test]
    fn clean_reports_dirtiness_once() {
        let mut h = Hierarchy::new(&small_config(1));
        h.access(0, 3, true);
        assert!(h.is_dirty(3));
        assert!(h.clean(3));
        assert!(!h.clean(3));
        assert!(h.holds(0, Level::L1, 3), "clwb keeps the line");
    }
}
