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
    /// The level's per-line auxiliary word (L1: design tag; LLC: sharer mask).
    pub aux: u64,
    /// Words of the line changed by stores since PM last received its data (the
    /// hierarchy's sectored dirty mask, kept for data-comparison writes).
    pub words: u8,
}

/// One cache level: flat arrays indexed by `set * ways + way`.
#[derive(Clone, Debug)]
pub struct Cache {
    ways: usize,
    set_mask: u64,
    /// Fold high address bits into the set index (the shared LLC: see [`fold_index`]).
    hashed: bool,
    tags: Vec<u64>,
    stamps: Vec<u64>,
    dirty: Vec<bool>,
    aux: Vec<u64>,
    /// Per line: words changed since PM last received the line's data (see [`Victim`]).
    words: Vec<u8>,
    clock: u64,
}

impl Cache {
    /// An empty cache (the number of sets must be a power of two; `Config::validate` checks).
    pub fn new(cfg: &CacheConfig) -> Self {
        let sets = cfg.sets();
        let n = sets * cfg.ways;
        Cache {
            ways: cfg.ways,
            set_mask: sets as u64 - 1,
            hashed: false,
            tags: vec![INVALID; n],
            stamps: vec![0; n],
            dirty: vec![false; n],
            aux: vec![0; n],
            words: vec![0; n],
            clock: 0,
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
        self.tags[base..base + self.ways]
            .iter()
            .position(|&t| t == line)
            .map(|way| base + way)
    }

    /// Marks a slot most recently used.
    #[inline]
    pub fn touch(&mut self, slot: usize) {
        self.clock += 1;
        self.stamps[slot] = self.clock;
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
        let (mut slot, mut oldest) = (base, u64::MAX);
        for s in base..base + self.ways {
            if self.tags[s] == INVALID {
                slot = s;
                break;
            }
            if self.stamps[s] < oldest {
                (slot, oldest) = (s, self.stamps[s]);
            }
        }
        let victim = (self.tags[slot] != INVALID).then(|| Victim {
            line: self.tags[slot],
            dirty: self.dirty[slot],
            aux: self.aux[slot],
            words: self.words[slot],
        });
        self.tags[slot] = line;
        self.dirty[slot] = dirty;
        self.aux[slot] = aux;
        self.words[slot] = 0;
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
        self.tags[slot] = INVALID;
        let was = self.dirty[slot];
        self.dirty[slot] = false;
        self.aux[slot] = 0;
        Some((was, std::mem::take(&mut self.words[slot])))
    }

    /// Cleans a line: takes its dirty bit and changed words (`(false, 0)` if absent).
    fn take_dirt(&mut self, line: u64) -> (bool, u8) {
        self.find(line).map_or((false, 0), |s| {
            (
                std::mem::take(&mut self.dirty[s]),
                std::mem::take(&mut self.words[s]),
            )
        })
    }

    /// Clears `mask` from the changed words of a present line.
    fn clear_words(&mut self, line: u64, mask: u8) {
        if let Some(s) = self.find(line) {
            self.words[s] &= !mask;
        }
    }

    /// Sets or clears the dirty bit of a present line; returns the previous bit.
    pub fn set_dirty(&mut self, line: u64, dirty: bool) -> Option<bool> {
        let slot = self.find(line)?;
        Some(std::mem::replace(&mut self.dirty[slot], dirty))
    }

    /// Whether `line` is present and dirty.
    pub fn is_dirty(&self, line: u64) -> bool {
        self.find(line).is_some_and(|s| self.dirty[s])
    }

    /// The auxiliary word of slot `slot`.
    pub fn aux_at(&mut self, slot: usize) -> &mut u64 {
        &mut self.aux[slot]
    }

    /// The auxiliary word of a present line.
    pub fn aux(&self, line: u64) -> Option<u64> {
        self.find(line).map(|s| self.aux[s])
    }

    /// Every valid line with its dirty bit and auxiliary word (for design walks such as LAD's
    /// commit-time L1 tag walk).
    pub fn lines(&self) -> impl Iterator<Item = (u64, bool, u64)> + '_ {
        (0..self.tags.len())
            .filter(|&s| self.tags[s] != INVALID)
            .map(|s| (self.tags[s], self.dirty[s], self.aux[s]))
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
                self.l1[core].dirty[slot] = true;
                self.l1[core].words[slot] |= words;
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
        let level = if let Some(slot) = self.l2[core].find(line) {
            self.stats.l2.hits += 1;
            self.l2[core].touch(slot);
            Level::L2
        } else {
            self.stats.l2.misses += 1;
            let level = if let Some(slot) = self.llc.find(line) {
                self.stats.llc.hits += 1;
                self.llc.touch(slot);
                *self.llc.aux_at(slot) |= 1 << core;
                Level::Llc
            } else {
                self.stats.llc.misses += 1;
                let wb = self.fill_llc(core, line);
                writeback = wb.map(|(line, _)| line);
                words_out = wb.map_or(0, |(_, w)| w);
                Level::Memory
            };
            self.fill_l2(core, line);
            level
        };
        self.fill_l1(core, line, write, words);
        Access {
            level,
            writeback,
            writeback_words: words_out,
        }
    }

    fn fill_llc(&mut self, core: usize, line: u64) -> Option<(u64, u8)> {
        let victim = self.llc.insert(line, false, 1 << core)?;
        let (mut dirty, mut words) = (victim.dirty, victim.words);
        for sharer in (0..self.l1.len()).filter(|c| victim.aux & (1 << c) != 0) {
            for cache in [&mut self.l1[sharer], &mut self.l2[sharer]] {
                let (d, w) = cache.remove(victim.line).unwrap_or((false, 0));
                dirty |= d;
                words |= w;
            }
        }
        dirty.then(|| {
            self.stats.writebacks += 1;
            (victim.line, words)
        })
    }

    fn fill_l2(&mut self, core: usize, line: u64) {
        let Some(victim) = self.l2[core].insert(line, false, 0) else {
            return;
        };
        let (d, w) = self.l1[core].remove(victim.line).unwrap_or((false, 0));
        let dirty = victim.dirty | d;
        let slot = self
            .llc
            .find(victim.line)
            .expect("inclusion: L2 line in LLC");
        *self.llc.aux_at(slot) &= !(1 << core);
        if dirty {
            self.llc.dirty[slot] = true;
        }
        self.llc.words[slot] |= victim.words | w;
    }

    fn fill_l1(&mut self, core: usize, line: u64, write: bool, words: u8) {
        let l1 = &mut self.l1[core];
        let (slot, victim) = l1.insert_slot(line, write, 0);
        l1.words[slot] = words;
        if let Some(victim) = victim
            && (victim.dirty || victim.words != 0)
        {
            let l2 = &mut self.l2[core];
            let slot = l2.find(victim.line).expect("inclusion: L1 line in L2");
            l2.dirty[slot] |= victim.dirty;
            l2.words[slot] |= victim.words;
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
        let sharers = self.llc.aux[slot];
        let mut dirty = std::mem::replace(&mut self.llc.dirty[slot], false);
        let mut words = std::mem::take(&mut self.llc.words[slot]);
        for c in (0..self.l1.len()).filter(|c| sharers & (1 << c) != 0) {
            for cache in [&mut self.l1[c], &mut self.l2[c]] {
                let (d, w) = cache.take_dirt(line);
                dirty |= d;
                words |= w;
            }
        }
        (dirty, words)
    }

    /// PM received the newest data of the words in `mask` of `line` by another path (an
    /// in-place update): they are no longer changed in any copy. The line stays dirty.
    pub fn persisted_words(&mut self, line: u64, mask: u8) {
        let Some(slot) = self.llc.find(line) else {
            return;
        };
        self.llc.words[slot] &= !mask;
        let sharers = self.llc.aux[slot];
        for c in (0..self.l1.len()).filter(|c| sharers & (1 << c) != 0) {
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
        self.llc.dirty[slot] = true;
        self.llc.words[slot] |= words;
    }

    /// Core `core`'s L1 (for design hooks that read line tags).
    pub fn l1(&self, core: usize) -> &Cache {
        &self.l1[core]
    }

    /// Core `core`'s L1, mutable (for design hooks that set line tags).
    pub fn l1_mut(&mut self, core: usize) -> &mut Cache {
        &mut self.l1[core]
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
