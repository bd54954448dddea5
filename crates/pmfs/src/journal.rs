//! The fine-grained undo journal (`docs/pmfs-format.md` §4): 64-byte entries whose seal word
//! carries the generation that wrote them, a checked generation word whose 8-byte store is
//! the commit point, and an idempotent rollback.
//!
//! One transaction at a time (the file system serialises metadata operations). A transaction
//! logs the old bytes of every range before writing it in place ([`Tx::log`], one fence per
//! batch), writes in place ([`Tx::write`], checked against what was logged), and commits
//! ([`Tx::commit`]: flush, fence, new generation, flush, fence).

use crate::Mutant;
use crate::error::Corrupt;
use crate::layout::{ENTRY_DATA, ENTRY_SIZE, Superblock};
use pmem::{Persist, WriteClass, checked};

const KIND_UNDO: u8 = 1;

/// The journal's DRAM state: where it is and the current generation.
#[derive(Debug)]
pub struct Journal {
    offset: u64,
    entries: u32,
    word: u64,
    generation: u64,
    mutant: Mutant,
    /// Entries written by the last committed transaction (statistics).
    last_entries: u32,
    /// Entries written since mount (statistics).
    total_entries: u64,
    /// Transactions committed since mount (statistics).
    total_commits: u64,
}

/// An in-place write outside what was logged: a bug in the caller, never a media problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalFull;

fn seal_check(slot: u32, addr: u64, gen32: u32, len: u8, data: &[u8; ENTRY_DATA]) -> u16 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&slot.to_le_bytes());
    hasher.update(&addr.to_le_bytes());
    hasher.update(&gen32.to_le_bytes());
    hasher.update(&[len, KIND_UNDO]);
    hasher.update(data);
    hasher.finalize() as u16
}

fn seal_word(gen32: u32, len: u8, check: u16) -> u64 {
    u64::from(gen32)
        | (u64::from(len) << 32)
        | (u64::from(KIND_UNDO) << 40)
        | (u64::from(check) << 48)
}

/// A decoded valid entry.
#[derive(Debug)]
struct Entry {
    addr: u64,
    len: usize,
    data: [u8; ENTRY_DATA],
}

impl Journal {
    /// Writes an empty journal (zeroed area, generation `generation`) and makes it durable.
    /// `generation` is 1 for a new file system; tests start near the 32-bit wrap.
    pub fn format<B: Persist>(pm: &B, sb: &Superblock, generation: u64) -> Journal {
        assert!(
            generation >= 1 && generation as u32 != 0,
            "journal generation {generation} unusable"
        );
        let bytes = u64::from(sb.journal_entries) * ENTRY_SIZE;
        zero_nt(pm, sb.journal_offset, bytes);
        let word = sb.journal_word();
        let sealed = checked::seal(generation, word, "journal generation")
            .expect("journal generation space exhausted");
        pm.write_u64(word, sealed, WriteClass::Meta);
        pm.flush(word, 8);
        pm.fence();
        Journal::new(sb, generation, Mutant::None)
    }

    fn new(sb: &Superblock, generation: u64, mutant: Mutant) -> Journal {
        Journal {
            offset: sb.journal_offset,
            entries: sb.journal_entries,
            word: sb.journal_word(),
            generation,
            mutant,
            last_entries: 0,
            total_entries: 0,
            total_commits: 0,
        }
    }

    /// Mount-time recovery: rolls back the transaction in flight (if any) and returns the
    /// journal ready for new transactions. Idempotent under a crash at any point.
    pub fn recover<B: Persist>(
        pm: &B,
        sb: &Superblock,
        mutant: Mutant,
    ) -> Result<Journal, Corrupt> {
        let word = sb.journal_word();
        let generation = checked::open(pm.read_u64(word), word, "journal word")?;
        if generation == 0 {
            return Err(Corrupt::new("journal generation 0"));
        }
        let mut journal = Journal::new(sb, generation, mutant);
        let valid = journal.valid_entries(pm, sb)?;
        if !valid.is_empty() {
            let order: Box<dyn Iterator<Item = &Entry>> = if mutant == Mutant::ForwardRollback {
                Box::new(valid.iter())
            } else {
                Box::new(valid.iter().rev())
            };
            for entry in order {
                pm.write(entry.addr, &entry.data[..entry.len], WriteClass::Meta);
                pm.flush(entry.addr, entry.len as u64);
            }
            pm.fence();
            journal.advance(pm);
        }
        journal.ensure_usable(pm);
        Ok(journal)
    }

    /// The entries of the current generation, in slot order, each checked.
    fn valid_entries<B: Persist>(&self, pm: &B, sb: &Superblock) -> Result<Vec<Entry>, Corrupt> {
        let gen32 = self.generation as u32;
        let mut area = vec![0u8; self.entries as usize * ENTRY_SIZE as usize];
        pm.read(self.offset, &mut area);
        let mut valid = Vec::new();
        if gen32 == 0 {
            return Ok(valid);
        }
        for (slot, line) in area.chunks_exact(ENTRY_SIZE as usize).enumerate() {
            let seal = crate::layout::get_u64(line, 8);
            if seal as u32 != gen32 {
                continue;
            }
            let addr = crate::layout::get_u64(line, 0);
            let len = (seal >> 32) as u8;
            let kind = (seal >> 40) as u8;
            let mut data = [0u8; ENTRY_DATA];
            data.copy_from_slice(&line[16..64]);
            let at = self.offset + slot as u64 * ENTRY_SIZE;
            if (seal >> 48) as u16 != seal_check(slot as u32, addr, gen32, len, &data) {
                return Err(Corrupt::new(format!(
                    "journal entry at {at:#x} fails its check"
                )));
            }
            if kind != KIND_UNDO || len == 0 || len as usize > ENTRY_DATA {
                return Err(Corrupt::new(format!(
                    "journal entry at {at:#x}: kind {kind}, length {len}"
                )));
            }
            if !sb.is_loggable(addr, u64::from(len)) {
                return Err(Corrupt::new(format!(
                    "journal entry at {at:#x} logs {addr:#x}+{len}, outside the metadata"
                )));
            }
            valid.push(Entry {
                addr,
                len: len as usize,
                data,
            });
        }
        Ok(valid)
    }

    /// Stores the next generation (the commit point) and persists it.
    fn advance<B: Persist>(&mut self, pm: &B) {
        self.generation += 1;
        let sealed = checked::seal(self.generation, self.word, "journal generation")
            .expect("journal generation space exhausted");
        pm.write_u64(self.word, sealed, WriteClass::Meta);
        pm.flush(self.word, 8);
        pm.fence();
        self.ensure_usable(pm);
    }

    /// A generation whose low 32 bits are 0 cannot mark entries (0 is never valid): zero the
    /// journal so no entry from 2^32 generations ago can look valid, then move on.
    fn ensure_usable<B: Persist>(&mut self, pm: &B) {
        if self.generation as u32 != 0 {
            return;
        }
        zero_nt(pm, self.offset, u64::from(self.entries) * ENTRY_SIZE);
        pm.fence();
        self.advance(pm);
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of entries.
    pub fn capacity(&self) -> u32 {
        self.entries
    }

    /// (entries of the last transaction, entries since mount, commits since mount).
    pub fn counters(&self) -> (u32, u64, u64) {
        (self.last_entries, self.total_entries, self.total_commits)
    }

    /// Starts a transaction.
    pub fn begin<'a, B: Persist>(&'a mut self, pm: &'a B) -> Tx<'a, B> {
        Tx {
            pm,
            journal: self,
            next: 0,
            logged: Vec::new(),
            dirty: Vec::new(),
        }
    }
}

/// Zeroes `[off, off + len)` with non-temporal stores (not fenced).
pub(crate) fn zero_nt<B: Persist>(pm: &B, off: u64, len: u64) {
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(4096);
        pm.write_nt(off + done, &ZEROS[..n as usize], WriteClass::Meta);
        done += n;
    }
}

/// One transaction. Dropping it without [`Tx::commit`] is only allowed before any in-place
/// write ([`Tx::abort`] does that explicitly).
#[derive(Debug)]
pub struct Tx<'a, B: Persist> {
    pm: &'a B,
    journal: &'a mut Journal,
    next: u32,
    logged: Vec<(u64, u64)>,
    dirty: Vec<(u64, u64)>,
}

impl<B: Persist> Tx<'_, B> {
    /// Logs the current bytes of every range (skipping ranges already logged whole), then
    /// fences once: after this, the ranges may be written in place. The fence also completes
    /// every non-temporal store issued before (file data, fresh blocks).
    pub fn log(&mut self, ranges: &[(u64, u64)]) -> Result<(), JournalFull> {
        let needed: u64 = ranges
            .iter()
            .filter(|r| !self.is_logged(r.0, r.1))
            .map(|r| r.1.div_ceil(ENTRY_DATA as u64))
            .sum();
        if u64::from(self.next) + needed > u64::from(self.journal.entries) {
            return Err(JournalFull);
        }
        for &(addr, len) in ranges {
            if len == 0 || self.is_logged(addr, len) {
                continue;
            }
            let mut at = addr;
            while at < addr + len {
                let n = (addr + len - at).min(ENTRY_DATA as u64);
                self.log_piece(at, n as usize);
                at += n;
            }
            self.logged.push((addr, len));
        }
        self.pm.fence();
        Ok(())
    }

    fn log_piece(&mut self, addr: u64, len: usize) {
        let slot = self.next;
        self.next += 1;
        let at = self.journal.offset + u64::from(slot) * ENTRY_SIZE;
        let mut data = [0u8; ENTRY_DATA];
        self.pm.read(addr, &mut data[..len]);
        let gen32 = self.journal.generation as u32;
        let check = seal_check(slot, addr, gen32, len as u8, &data);
        self.pm.write_u64(at, addr, WriteClass::Log);
        self.pm.write(at + 16, &data, WriteClass::Log);
        // The seal goes last: same cache line, so it persists only after the rest.
        self.pm
            .write_u64(at + 8, seal_word(gen32, len as u8, check), WriteClass::Log);
        if self.journal.mutant != Mutant::SkipLogFlush {
            self.pm.flush(at, ENTRY_SIZE);
        }
    }

    fn is_logged(&self, addr: u64, len: u64) -> bool {
        self.logged
            .iter()
            .any(|&(a, l)| a <= addr && addr + len <= a + l)
    }

    /// Writes `bytes` in place at `off`, which must lie inside one logged range.
    ///
    /// # Panics
    /// If the range was not logged: that is a bug in the caller (an unjournaled metadata
    /// store), never something the media can cause.
    #[track_caller]
    pub fn write(&mut self, off: u64, bytes: &[u8]) {
        assert!(
            self.is_logged(off, bytes.len() as u64),
            "unlogged in-place write at {off:#x}+{}",
            bytes.len()
        );
        self.pm.write(off, bytes, WriteClass::Meta);
        self.dirty.push((off, bytes.len() as u64));
    }

    /// [`Tx::write`] of one little-endian word.
    #[track_caller]
    pub fn write_u64(&mut self, off: u64, value: u64) {
        self.write(off, &value.to_le_bytes());
    }

    /// Writes bytes that are unreachable if the transaction rolls back (slack of a directory
    /// block, the cold part of an inode being allocated): flushed at commit, not logged.
    pub fn write_fresh(&mut self, off: u64, bytes: &[u8]) {
        self.pm.write(off, bytes, WriteClass::Meta);
        self.dirty.push((off, bytes.len() as u64));
    }

    /// Entries used so far.
    pub fn entries_used(&self) -> u32 {
        self.next
    }

    /// Makes every in-place write durable, then stores the next generation (the commit
    /// point).
    pub fn commit(self) {
        let skip = self.journal.mutant == Mutant::SkipDirtyFlush;
        for &(off, len) in &self.dirty {
            if !skip {
                self.pm.flush(off, len);
            }
        }
        if self.dirty.is_empty() && self.next == 0 {
            return;
        }
        self.pm.fence();
        self.journal.last_entries = self.next;
        self.journal.total_entries += u64::from(self.next);
        self.journal.total_commits += 1;
        if self.next > 0 {
            self.journal.advance(self.pm);
        }
    }

    /// Abandons a transaction that has not written in place: its entries are invalidated.
    pub fn abort(self) {
        assert!(self.dirty.is_empty(), "abort after an in-place write");
        if self.next > 0 {
            self.journal.advance(self.pm);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LAYOUT, MkfsOptions, ROOT_SIZE};
    use crashsim::{Config, Scenario, SimMode, SimPm, check};
    use pmem::{CreateOptions, Pool};

    const POOL: u64 = 256 * 1024;
    /// The array the scenario's transactions modify: 640 bytes of the data area.
    const ARRAY: u64 = 640;

    fn options() -> MkfsOptions {
        MkfsOptions {
            inodes: Some(64),
            journal_entries: 64,
            ..MkfsOptions::default()
        }
    }

    fn superblock(pool: &Pool<SimPm>) -> Superblock {
        Superblock::plan(pool.header(), &options(), 0).expect("plan")
    }

    /// Operation `i`: the ranges it modifies (relative to the array) and the byte it writes.
    fn plan(i: usize) -> Vec<(u64, u64)> {
        let base = (i as u64 * 40) % 512;
        vec![
            (base, 8),                  // one word
            (base + 100, 60),           // straddles lines, two entries
            (600 - (i as u64 % 3), 24), // unaligned, near the end
            (base, 16),                 // overlaps the first range: logged again
        ]
    }

    struct JournalScenario {
        ops: usize,
        mutant: Mutant,
        start_generation: u64,
    }

    struct Live {
        pool: Pool<SimPm>,
        journal: Journal,
        sb: Superblock,
    }

    impl Scenario for JournalScenario {
        type Model = Vec<u8>;
        type Live = Live;

        fn name(&self) -> String {
            format!(
                "journal/{:?}/generation{}",
                self.mutant, self.start_generation
            )
        }
        fn pool_size(&self) -> u64 {
            POOL
        }
        fn op_count(&self) -> usize {
            self.ops
        }
        fn initial_model(&self) -> Vec<u8> {
            vec![0; ARRAY as usize]
        }
        fn apply_to_model(&self, model: &mut Vec<u8>, op: usize) {
            for (off, len) in plan(op) {
                model[off as usize..(off + len) as usize].fill(op as u8 + 1);
            }
        }
        fn setup(&self, pm: SimPm) -> Live {
            let mut create = CreateOptions::new(LAYOUT, POOL);
            create.root_size = ROOT_SIZE;
            let pool = Pool::format(pm, &create).expect("format");
            let sb = superblock(&pool);
            let mut journal = Journal::format(pool.pm(), &sb, self.start_generation);
            journal.mutant = self.mutant;
            Live { pool, journal, sb }
        }
        fn run_op(&self, live: &mut Live, op: usize) {
            let base = live.sb.data_offset;
            let ranges: Vec<(u64, u64)> = plan(op).iter().map(|&(o, l)| (base + o, l)).collect();
            let mut tx = live.journal.begin(live.pool.pm());
            // Two batches: the last range overlaps the first and is logged after the first
            // was written, so only a newest-first rollback restores the oldest bytes.
            let (first, second) = ranges.split_at(ranges.len() - 1);
            for batch in [first, second] {
                tx.log(batch).expect("fits");
                for &(off, len) in batch {
                    tx.write(off, &vec![op as u8 + 1; len as usize]);
                }
            }
            tx.commit();
            live.pool.pm().durability_point();
        }
        fn recover(&self, pm: SimPm) -> Result<Vec<u8>, String> {
            let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
            let sb = superblock(&pool);
            let journal = Journal::recover(pool.pm(), &sb, self.mutant).map_err(|e| e.0)?;
            if journal.generation as u32 == 0 {
                return Err("recovered journal has an unusable generation".into());
            }
            let mut array = vec![0u8; ARRAY as usize];
            pool.pm().read(sb.data_offset, &mut array);
            Ok(array)
        }
    }

    fn run(mutant: Mutant, start_generation: u64, mode: SimMode) -> crashsim::Report {
        let scenario = JournalScenario {
            ops: 6,
            mutant,
            start_generation,
        };
        check(&scenario, &Config::thorough(mode, 11))
    }

    #[test]
    fn journal_survives_a_crash_at_every_fence_with_double_crash() {
        for mode in [SimMode::Adr, SimMode::Eadr] {
            let report = run(Mutant::None, 1, mode);
            eprintln!("{report}");
            report.assert_passed();
            assert!(report.second_crash_images > 0);
        }
    }

    #[test]
    fn journal_survives_the_generation_wrap() {
        // Generations 2^32 - 3 ..: the wrap (zeroing, skipping low bits 0) happens mid-run.
        let report = run(Mutant::None, (1 << 32) - 3, SimMode::Adr);
        eprintln!("{report}");
        report.assert_passed();
    }

    #[test]
    fn journal_mutants_are_caught() {
        for mutant in [
            Mutant::SkipLogFlush,
            Mutant::SkipDirtyFlush,
            Mutant::ForwardRollback,
        ] {
            let report = run(mutant, 1, SimMode::Adr);
            eprintln!("{report}");
            assert!(!report.passed(), "{mutant:?} was not caught");
        }
    }

    #[test]
    fn a_torn_or_corrupt_entry_is_reported_not_applied() {
        let pm = SimPm::new(POOL, crashsim::SimConfig::default());
        let mut create = CreateOptions::new(LAYOUT, POOL);
        create.root_size = ROOT_SIZE;
        let pool = Pool::format(pm, &create).expect("format");
        let sb = superblock(&pool);
        let mut journal = Journal::format(pool.pm(), &sb, 1);
        let mut tx = journal.begin(pool.pm());
        tx.log(&[(sb.data_offset, 8)]).expect("fits");
        tx.write_u64(sb.data_offset, 7);
        // Crash now: the entry is valid and rolls the word back.
        let image = pool.pm().volatile_image();
        let pm2 = SimPm::from_image(image.clone(), crashsim::SimConfig::default());
        let j = Journal::recover(&pm2, &sb, Mutant::None).expect("recover");
        assert_eq!(pm2.read_u64(sb.data_offset), 0);
        assert_eq!(j.generation(), 2);
        // Flip a data bit of the entry: the check catches it.
        let mut bad = image;
        bad[sb.journal_offset as usize + 20] ^= 1;
        let pm3 = SimPm::from_image(bad, crashsim::SimConfig::default());
        assert!(Journal::recover(&pm3, &sb, Mutant::None).is_err());
        tx.commit();
    }

    #[test]
    fn unlogged_write_panics_and_a_full_journal_is_refused() {
        let pm = SimPm::new(POOL, crashsim::SimConfig::default());
        let mut create = CreateOptions::new(LAYOUT, POOL);
        create.root_size = ROOT_SIZE;
        let pool = Pool::format(pm, &create).expect("format");
        let sb = superblock(&pool);
        let mut journal = Journal::format(pool.pm(), &sb, 1);
        let mut tx = journal.begin(pool.pm());
        assert_eq!(
            tx.log(&[(sb.data_offset, 48 * 65)]),
            Err(JournalFull),
            "65 entries do not fit 64"
        );
        tx.log(&[(sb.data_offset, 48 * 64)]).expect("64 fit");
        assert_eq!(tx.entries_used(), 64);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tx.write(sb.data_offset + 48 * 64, &[1]);
        }));
        assert!(result.is_err());
    }
}
