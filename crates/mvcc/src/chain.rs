//! The lock / commit / dereference protocol of one chunk, in DRAM: TimeStone's control
//! header (here [`Header`]) and its chain of copy objects ([`Version`]s in the transient
//! version log).
//!
//! A header holds the chunk's write lock, the newest version of its chain, and its *base*:
//! the chunk's content at `base_ts`, older than every version in the chain (the master's
//! bytes when the header is made, the last checkpointed version afterwards). Versions are
//! slots of a fixed slab ([`Versions`]) named by `u32` references (0 is none).
//!
//! A version's timestamp word moves through these states:
//!
//! | Word | Meaning | A reader at snapshot `s` |
//! |---|---|---|
//! | [`UNSTAMPED`] | pushed by a committer that has not taken its timestamp yet | waits |
//! | `t \| PENDING` | stamped `t`, its operation record not yet durable | waits if `t ≤ s`, else skips |
//! | `t` | committed at `t` | copies if `t ≤ s`, else skips |
//! | [`ABORTED`] | the commit failed after pushing | skips |
//!
//! Invariants the engine keeps (and `tests/loom.rs` checks under every interleaving):
//! - only the lock holder pushes, unpushes or cuts; a holder that acquired the lock sees no
//!   pending version (the previous holder published or aborted before unlocking);
//! - a commit pushes all its versions before it takes its timestamp, and the clock gives it
//!   a timestamp above every snapshot read before the push ([`crate::clock`]): a reader that
//!   did not see a version can never need it, and one that sees it unstamped or pending
//!   waits for the few instructions until the committer decides;
//! - a cut happens at a boundary no larger than any active snapshot, so no reader needs a
//!   version older than the newest one at or before the boundary, and no reader reads the
//!   base while it is rewritten (every reader stops at that newest version).

use crate::sync::{AtomicU32, AtomicU64, Backoff, Ordering};

/// Bytes of the versioning unit.
pub const CHUNK: u64 = 64;
/// 8-byte words of a chunk.
pub const WORDS: usize = 8;
/// A chunk's bytes.
pub type Bytes = [u8; CHUNK as usize];
/// No version (the end of a chain).
pub const NIL: u32 = 0;
/// Timestamp word of a version pushed by a committer that has not taken its timestamp.
pub const UNSTAMPED: u64 = u64::MAX;
/// Timestamp word of a version whose commit failed after it was pushed.
pub const ABORTED: u64 = u64::MAX - 1;
/// Flag of a stamped version whose commit is not yet durable.
pub const PENDING: u64 = 1 << 63;
/// Largest timestamp.
pub const MAX_TS: u64 = PENDING - 3;

/// Lock word of a free header.
const UNLOCKED: u64 = 0;
/// Lock word of a header taken out of the table (it is never unlocked again).
pub const RETIRED: u64 = u64::MAX;
/// Lock owner of the checkpointer.
pub const CHECKPOINTER: u64 = u64::MAX - 1;

/// A version's metadata: its timestamp word and the link to the next older version (16
/// bytes, four to a cache line, so a chain walk that skips versions touches no data line).
#[derive(Debug)]
struct Meta {
    ts: AtomicU64,
    older: AtomicU32,
    /// Debug builds: whether the slot is out of its lane's free list (catches a slot freed
    /// twice, or pushed while in use).
    #[cfg(debug_assertions)]
    taken: std::sync::atomic::AtomicBool,
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            ts: AtomicU64::new(ABORTED),
            older: AtomicU32::new(NIL),
            #[cfg(debug_assertions)]
            taken: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// A version's copy of its chunk: exactly one cache line.
#[derive(Debug)]
#[repr(align(64))]
struct Data([AtomicU64; WORDS]);

impl Default for Data {
    fn default() -> Self {
        Data(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// A copy of a chunk in the transient version log: its metadata and its data, which live
/// in two slabs.
#[derive(Clone, Copy, Debug)]
pub struct Version<'a> {
    ts: &'a AtomicU64,
    older: &'a AtomicU32,
    data: &'a [AtomicU64; WORDS],
    #[cfg(debug_assertions)]
    taken: &'a std::sync::atomic::AtomicBool,
}

impl Version<'_> {
    /// The timestamp word.
    pub fn ts_word(&self) -> u64 {
        self.ts.load(Ordering::Acquire)
    }
}

/// The transient version log, references `1..=len`, sized by its data: each version is a
/// 64-byte line in the data slab and 16 bytes in the metadata slab (80 bytes of DRAM).
#[derive(Debug)]
pub struct Versions {
    meta: Box<[Meta]>,
    data: Box<[Data]>,
}

/// Bytes of DRAM per version (data and metadata slabs).
pub const VERSION_BYTES: u64 = (std::mem::size_of::<Meta>() + std::mem::size_of::<Data>()) as u64;

impl Versions {
    /// A log of `len` versions.
    pub fn new(len: usize) -> Self {
        assert!(len < u32::MAX as usize, "version slab of {len} slots");
        Versions {
            meta: (0..len).map(|_| Meta::default()).collect(),
            data: (0..len).map(|_| Data::default()).collect(),
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether the slab has no slot.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Version `r` (`1..=len`).
    #[inline]
    pub fn get(&self, r: u32) -> Version<'_> {
        let i = (r - 1) as usize;
        let meta = &self.meta[i];
        Version {
            ts: &meta.ts,
            older: &meta.older,
            data: &self.data[i].0,
            #[cfg(debug_assertions)]
            taken: &meta.taken,
        }
    }

    /// Debug builds: records that slot `r` leaves (`taken`) or returns to a free list, and
    /// panics if it already was there.
    pub fn check_ownership(&self, r: u32, taken: bool) {
        #[cfg(debug_assertions)]
        {
            let was = self
                .get(r)
                .taken
                .swap(taken, std::sync::atomic::Ordering::SeqCst);
            assert_ne!(
                was,
                taken,
                "version {r} {} twice",
                if taken { "taken" } else { "freed" }
            );
        }
        #[cfg(not(debug_assertions))]
        let _ = (r, taken);
    }

    /// Marks version `r` stamped at `ts`, its commit not yet durable.
    pub fn stamp(&self, r: u32, ts: u64) {
        debug_assert!(ts <= MAX_TS);
        self.get(r).ts.store(ts | PENDING, Ordering::Release);
    }

    /// Marks version `r` committed at `ts`.
    pub fn publish(&self, r: u32, ts: u64) {
        self.get(r).ts.store(ts, Ordering::Release);
    }
}

/// How a read at a snapshot went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Copied; `newest` says no newer version (committed or pending) was skipped.
    Copied {
        /// Whether the copy is of the newest version.
        newest: bool,
    },
    /// The snapshot is older than the base: its versions were reclaimed.
    TooOld,
}

/// What an attempt to lock a header found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// The caller holds the lock now.
    Taken,
    /// Someone else holds it.
    Busy,
    /// The header was taken out of the table: look the chunk up again.
    Retired,
}

/// A chunk's control header.
#[derive(Debug)]
pub struct Header {
    lock: AtomicU64,
    head: AtomicU32,
    base_ts: AtomicU64,
    base: [AtomicU64; WORDS],
}

impl Default for Header {
    fn default() -> Self {
        Header {
            lock: AtomicU64::new(RETIRED),
            head: AtomicU32::new(NIL),
            base_ts: AtomicU64::new(0),
            base: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Always inlined: nearly every read through a header asks for whole aligned words (a
/// pointer, a key, a counter, a node's key and link), and out of line the call cost about as
/// much as those loads. Any other shape goes to `load_line_part`, out of line.
#[inline(always)]
fn load_words(words: &[AtomicU64; WORDS], offset: usize, dst: &mut [u8]) {
    // An aligned word, the most common read.
    if dst.len() == 8 && offset.is_multiple_of(8) {
        dst.copy_from_slice(&words[offset / 8].load(Ordering::Relaxed).to_le_bytes());
        return;
    }
    // Whole aligned words (a node's key and links, a value): just those words.
    if dst.len().is_multiple_of(8) && offset.is_multiple_of(8) {
        let first = offset / 8;
        for (word, out) in words[first..first + dst.len() / 8]
            .iter()
            .zip(dst.chunks_exact_mut(8))
        {
            out.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
        return;
    }
    load_line_part(words, offset, dst);
}

/// [`load_words`] for a range that is not whole aligned words.
#[inline(never)]
fn load_line_part(words: &[AtomicU64; WORDS], offset: usize, dst: &mut [u8]) {
    // The whole line (eight loads, one cache line), then one copy.
    let mut line = [0u8; CHUNK as usize];
    for (word, out) in words.iter().zip(line.chunks_exact_mut(8)) {
        out.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
    }
    dst.copy_from_slice(&line[offset..offset + dst.len()]);
}

fn store_words(words: &[AtomicU64; WORDS], src: &Bytes) {
    for (word, bytes) in words.iter().zip(src.chunks_exact(8)) {
        word.store(
            u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
            Ordering::Relaxed,
        );
    }
}

fn copy_words(dst: &[AtomicU64; WORDS], src: &[AtomicU64; WORDS]) {
    for (d, s) in dst.iter().zip(src) {
        d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

impl Header {
    /// Prepares an unreachable header (taken from the free list) for a chunk whose content
    /// is `master`: unlocked, no versions, the master as its base.
    pub fn reset(&self, master: &Bytes) {
        store_words(&self.base, master);
        self.base_ts.store(0, Ordering::Relaxed);
        self.head.store(NIL, Ordering::Relaxed);
        self.lock.store(UNLOCKED, Ordering::Release);
    }

    /// Tries to take the write lock for `owner` (a lane number plus one, or
    /// [`CHECKPOINTER`]).
    #[inline]
    pub fn lock(&self, owner: u64) -> Lock {
        match self
            .lock
            .compare_exchange(UNLOCKED, owner, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Lock::Taken,
            Err(RETIRED) => Lock::Retired,
            Err(_) => Lock::Busy,
        }
    }

    /// Takes the write lock for `owner` if it is free.
    #[inline]
    pub fn try_lock(&self, owner: u64) -> bool {
        self.lock(owner) == Lock::Taken
    }

    /// Releases the write lock.
    #[inline]
    pub fn unlock(&self) {
        self.lock.store(UNLOCKED, Ordering::Release);
    }

    /// Takes the header out of service if its chain is empty: it stays locked for good, so a
    /// writer that still holds its reference fails to lock it and looks the chunk up again.
    pub fn try_retire(&self) -> bool {
        if !self.try_lock(RETIRED) {
            return false;
        }
        if self.head.load(Ordering::Relaxed) != NIL {
            self.unlock();
            return false;
        }
        true
    }

    /// Whether the chain has no version (the base is the chunk's content).
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == NIL
    }

    /// Copies the base.
    pub fn base(&self, out: &mut Bytes) {
        load_words(&self.base, 0, out);
    }

    /// The common read of a header: copies `dst.len()` bytes at `offset` of the chunk's
    /// current content and returns true when the snapshot sees it — the base when the chain
    /// is empty and `base_ts ≤ snapshot` (most headers most of the time), else the head
    /// version when it is committed at or before `snapshot` (a chunk written a while ago, not
    /// since). That is what [`Header::read_at`] copies then (`Copied`, the newest), with the
    /// same loads in the same order, without its walk, waits and result. Otherwise (a newer,
    /// pending, unstamped or aborted head, or a base newer than the snapshot) returns false
    /// and `read_at` decides.
    #[inline]
    pub fn read_current(
        &self,
        versions: &Versions,
        snapshot: u64,
        offset: usize,
        dst: &mut [u8],
    ) -> bool {
        debug_assert!(snapshot <= MAX_TS);
        let head = self.head.load(Ordering::Acquire);
        let (ts, words) = if head == NIL {
            (self.base_ts.load(Ordering::Acquire), &self.base)
        } else {
            let version = versions.get(head);
            // UNSTAMPED, ABORTED and every PENDING word are above any snapshot (≤ MAX_TS).
            (version.ts.load(Ordering::Acquire), version.data)
        };
        if ts > snapshot {
            return false;
        }
        load_words(words, offset, dst);
        true
    }

    /// Copies `dst.len()` bytes at `offset` of the version snapshot `snapshot` sees: the
    /// newest committed version at or before it, waiting for one that is being committed.
    #[inline]
    pub fn read_at(
        &self,
        versions: &Versions,
        snapshot: u64,
        offset: usize,
        dst: &mut [u8],
    ) -> Seen {
        let mut newest = true;
        let mut r = self.head.load(Ordering::Acquire);
        while r != NIL {
            let version = versions.get(r);
            if visible(version, snapshot) {
                load_words(version.data, offset, dst);
                return Seen::Copied { newest };
            }
            if version.ts.load(Ordering::Relaxed) != ABORTED {
                newest = false;
            }
            r = version.older.load(Ordering::Acquire);
        }
        if self.base_ts.load(Ordering::Acquire) > snapshot {
            return Seen::TooOld;
        }
        load_words(&self.base, offset, dst);
        Seen::Copied { newest }
    }

    /// The whole chunk as a snapshot at `snapshot` sees it (the checkpointer's view: no lock
    /// needed, nothing at or before `snapshot` may be pending).
    pub fn content_at(&self, versions: &Versions, snapshot: u64, out: &mut Bytes) -> Seen {
        self.read_at(versions, snapshot, 0, out)
    }

    /// Debugging: the chain as `(reference, timestamp word, first data word)`, newest first,
    /// then the base's timestamp and first word.
    pub fn describe(&self, versions: &Versions) -> String {
        let mut out = String::new();
        let mut r = self.head.load(Ordering::Acquire);
        let mut n = 0;
        while r != NIL && n < 64 {
            let v = versions.get(r);
            out.push_str(&format!(
                "[{r} ts {:#x} d {}] ",
                v.ts.load(Ordering::Acquire),
                v.data[0].load(Ordering::Relaxed)
            ));
            r = v.older.load(Ordering::Acquire);
            n += 1;
        }
        out.push_str(&format!(
            "base ts {} d {} lock {}",
            self.base_ts.load(Ordering::Acquire),
            self.base[0].load(Ordering::Relaxed),
            self.lock.load(Ordering::Acquire)
        ));
        out
    }

    /// The lock holder's view: the newest committed content and its timestamp (holding the
    /// lock, nothing in the chain is pending).
    pub fn newest(&self, versions: &Versions, out: &mut Bytes) -> u64 {
        match self.head.load(Ordering::Relaxed) {
            NIL => {
                self.base(out);
                self.base_ts.load(Ordering::Relaxed)
            }
            r => {
                let version = versions.get(r);
                load_words(version.data, 0, out);
                version.ts.load(Ordering::Acquire)
            }
        }
    }

    /// Pushes version `r` holding `data` as the unstamped head (lock held).
    pub fn push(&self, versions: &Versions, r: u32, data: &Bytes) {
        let version = versions.get(r);
        version.ts.store(UNSTAMPED, Ordering::Relaxed);
        store_words(version.data, data);
        version
            .older
            .store(self.head.load(Ordering::Relaxed), Ordering::Relaxed);
        self.head.store(r, Ordering::Release);
    }

    /// Removes the pushed head `r` after its commit failed (lock held). Readers that already
    /// reached it skip it; it may be reused only after a grace period.
    pub fn unpush(&self, versions: &Versions, r: u32) {
        let version = versions.get(r);
        debug_assert_eq!(self.head.load(Ordering::Relaxed), r);
        self.head
            .store(version.older.load(Ordering::Relaxed), Ordering::Release);
        version.ts.store(ABORTED, Ordering::Release);
    }

    /// Whether a version stamped in `(snapshot, until]` exists: the chunk changed between a
    /// transaction's snapshot and its commit timestamp `until` (waiting for unstamped
    /// versions and treating pending ones as committed).
    pub fn changed_after(&self, versions: &Versions, snapshot: u64, until: u64) -> bool {
        let mut r = self.head.load(Ordering::Acquire);
        while r != NIL {
            let version = versions.get(r);
            let word = stamped(version);
            if word != ABORTED {
                let t = word & !PENDING;
                if t <= snapshot {
                    return false;
                }
                if t <= until {
                    return true;
                }
            }
            r = version.older.load(Ordering::Acquire);
        }
        false
    }

    /// Makes the newest version at or before `boundary` the base and unlinks it with every
    /// older one (their references are pushed on `retired`); the checkpointer holds the
    /// lock. Returns the new base's timestamp, or `None` if every version is newer.
    pub fn cut(&self, versions: &Versions, boundary: u64, retired: &mut Vec<u32>) -> Option<u64> {
        let (found, pred) = self.newest_at(versions, boundary)?;
        let version = versions.get(found);
        let ts = version.ts.load(Ordering::Acquire);
        // No reader reads the base meanwhile: each stops at `version` or a newer one.
        copy_words(&self.base, version.data);
        self.base_ts.store(ts, Ordering::Relaxed);
        match pred {
            NIL => self.head.store(NIL, Ordering::Release),
            p => versions.get(p).older.store(NIL, Ordering::Release),
        }
        retire_from(versions, found, retired);
        Some(ts)
    }

    /// The checkpointer's single walk over a chain whose lock it holds: copies the content a
    /// snapshot at `last` sees into `old` and the one at `boundary` into `new` (`last` ≤
    /// `boundary`), then cuts at `boundary` as [`Header::cut`] does, touching each version's
    /// lines once while they are hot instead of once per reading. Returns the cut's result,
    /// or `Err(Seen::TooOld)` (nothing changed) if the content at `last` was reclaimed.
    pub fn checkpoint(
        &self,
        versions: &Versions,
        (last, boundary): (u64, u64),
        (old, new): (&mut Bytes, &mut Bytes),
        retired: &mut Vec<u32>,
    ) -> Result<Option<u64>, Seen> {
        debug_assert!(last <= boundary);
        let Some((found, pred)) = self.newest_at(versions, boundary) else {
            // Every version is newer than the boundary: both contents are the base.
            if self.base_ts.load(Ordering::Relaxed) > last {
                return Err(Seen::TooOld);
            }
            self.base(new);
            old.copy_from_slice(new);
            return Ok(None);
        };
        let version = versions.get(found);
        let ts = version.ts.load(Ordering::Acquire);
        load_words(version.data, 0, new);
        match self.newest_from(versions, found, last) {
            Some(r) => load_words(versions.get(r).data, 0, old),
            None if self.base_ts.load(Ordering::Relaxed) > last => return Err(Seen::TooOld),
            None => self.base(old),
        }
        store_words(&self.base, new);
        self.base_ts.store(ts, Ordering::Relaxed);
        match pred {
            NIL => self.head.store(NIL, Ordering::Release),
            p => versions.get(p).older.store(NIL, Ordering::Release),
        }
        retire_from(versions, found, retired);
        Ok(Some(ts))
    }

    /// The newest version at or before `snapshot` among `from` and the older ones (the lock
    /// is held: nothing is pending, aborted versions compare newer than any snapshot).
    fn newest_from(&self, versions: &Versions, from: u32, snapshot: u64) -> Option<u32> {
        let mut r = from;
        while r != NIL {
            let version = versions.get(r);
            if version.ts.load(Ordering::Acquire) <= snapshot {
                return Some(r);
            }
            r = version.older.load(Ordering::Relaxed);
        }
        None
    }

    /// Unlinks every version older than the newest one at or before `boundary` (TimeStone's
    /// best-effort reclamation: nobody can need them); the checkpointer holds the lock.
    pub fn trim(&self, versions: &Versions, boundary: u64, retired: &mut Vec<u32>) {
        if let Some((found, _)) = self.newest_at(versions, boundary) {
            let version = versions.get(found);
            let older = version.older.load(Ordering::Relaxed);
            if older != NIL {
                version.older.store(NIL, Ordering::Release);
                retire_from(versions, older, retired);
            }
        }
    }

    /// The newest committed version at or before `boundary` and its predecessor (NIL if it
    /// is the head).
    fn newest_at(&self, versions: &Versions, boundary: u64) -> Option<(u32, u32)> {
        let mut pred = NIL;
        let mut r = self.head.load(Ordering::Acquire);
        while r != NIL {
            let version = versions.get(r);
            let word = version.ts.load(Ordering::Acquire);
            debug_assert!(word & PENDING == 0, "pending version under the lock");
            if word <= boundary {
                return Some((r, pred));
            }
            pred = r;
            r = version.older.load(Ordering::Relaxed);
        }
        None
    }
}

/// Whether `version` is the one a snapshot at `snapshot` reads (waiting while that is not
/// yet decided).
fn visible(version: Version, snapshot: u64) -> bool {
    let word = stamped(version);
    if word == ABORTED || word & !PENDING > snapshot {
        return false;
    }
    let mut backoff = Backoff::default();
    let mut word = word;
    // Wait while it is pending (ABORTED has the PENDING bit too: it ends the wait).
    while word & PENDING != 0 && word != ABORTED {
        backoff.snooze();
        word = version.ts.load(Ordering::Acquire);
    }
    word != ABORTED
}

/// The version's timestamp word once it is stamped (or aborted).
fn stamped(version: Version) -> u64 {
    let mut backoff = Backoff::default();
    loop {
        let word = version.ts.load(Ordering::Acquire);
        if word != UNSTAMPED {
            return word;
        }
        backoff.snooze();
    }
}

/// Pushes `from` and every version older than it on `retired`.
fn retire_from(versions: &Versions, from: u32, retired: &mut Vec<u32>) {
    let mut r = from;
    while r != NIL {
        retired.push(r);
        r = versions.get(r).older.load(Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn chunk(byte: u8) -> Bytes {
        [byte; CHUNK as usize]
    }

    /// A header over `base` with committed versions at `stamps` (oldest first).
    fn chain(versions: &Versions, stamps: &[u64]) -> Header {
        let header = Header::default();
        header.reset(&chunk(0));
        for (i, &ts) in stamps.iter().enumerate() {
            let r = i as u32 + 1;
            assert!(header.try_lock(1));
            header.push(versions, r, &chunk(ts as u8));
            versions.stamp(r, ts);
            versions.publish(r, ts);
            header.unlock();
        }
        header
    }

    #[test]
    fn a_version_is_one_aligned_data_line_and_its_metadata_apart() {
        let versions = Versions::new(4);
        for r in 1..=4u32 {
            let data = versions.get(r).data.as_ptr() as usize;
            assert_eq!(data % 64, 0, "version {r}'s data starts a cache line");
        }
        let gap = versions.get(2).data.as_ptr() as usize - versions.get(1).data.as_ptr() as usize;
        assert_eq!(gap, 64, "data slots are packed lines");
        assert_eq!(VERSION_BYTES, 80, "a 64-byte line and 16 bytes of metadata");
    }

    #[test]
    fn every_range_of_a_base_reads_as_its_bytes_and_only_while_settled() {
        let versions = Versions::new(4);
        let header = Header::default();
        let line: Bytes = std::array::from_fn(|i| i as u8 + 1);
        header.reset(&line);
        for offset in 0..CHUNK as usize {
            for len in 0..=CHUNK as usize - offset {
                let mut out = vec![0u8; len];
                assert!(header.read_current(&versions, 0, offset, &mut out));
                assert_eq!(out, line[offset..offset + len], "offset {offset} len {len}");
            }
        }
        // A base newer than the snapshot: `read_at` decides.
        let chained = chain(&versions, &[10]);
        let mut retired = Vec::new();
        assert!(chained.try_lock(1));
        assert_eq!(chained.cut(&versions, 10, &mut retired), Some(10));
        chained.unlock();
        assert!(
            !chained.read_current(&versions, 9, 0, &mut [0u8; 8]),
            "base newer than snapshot"
        );
        let mut word = [0u8; 8];
        assert!(chained.read_current(&versions, 10, 8, &mut word));
        assert_eq!(word, [10u8; 8]);
    }

    /// The read of a chain's current content agrees with the walk whenever it answers, and
    /// answers exactly when the walk would copy the head (or the base of an empty chain):
    /// a head committed at or before the snapshot, never a newer, pending, unstamped or
    /// aborted one.
    #[test]
    fn a_current_read_copies_what_the_walk_copies_and_only_the_newest() {
        let versions = Versions::new(8);
        // Head word states: committed 30, pending 30, unstamped, aborted (over 10, 20).
        let heads: [(&str, Option<u64>); 4] = [
            ("committed", Some(30)),
            ("pending", Some(30 | PENDING)),
            ("unstamped", Some(UNSTAMPED)),
            ("aborted", Some(ABORTED)),
        ];
        for (what, word) in heads {
            let header = chain(&versions, &[10, 20, 30]);
            versions.get(3).ts.store(word.unwrap(), Ordering::Release);
            for snapshot in [5, 10, 15, 20, 25, 30, 35, MAX_TS] {
                let mut fast = [0u8; 8];
                let answered = header.read_current(&versions, snapshot, 8, &mut fast);
                let head_visible = word.unwrap() <= snapshot;
                assert_eq!(answered, head_visible, "{what} head, snapshot {snapshot}");
                if answered {
                    let mut walked = [0u8; 8];
                    let seen = header.read_at(&versions, snapshot, 8, &mut walked);
                    assert_eq!(seen, Seen::Copied { newest: true }, "{what}, {snapshot}");
                    assert_eq!(fast, walked, "{what} head, snapshot {snapshot}");
                    assert_eq!(fast, [30u8; 8]);
                }
            }
        }
    }

    #[test]
    fn every_offset_and_length_reads_the_bytes_of_the_line() {
        let line: Bytes = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5a);
        let words: [AtomicU64; WORDS] = std::array::from_fn(|_| AtomicU64::new(0));
        store_words(&words, &line);
        for offset in 0..CHUNK as usize {
            for len in 0..=CHUNK as usize - offset {
                let mut out = vec![0u8; len];
                load_words(&words, offset, &mut out);
                assert_eq!(
                    out,
                    line[offset..offset + len],
                    "offset {offset}, length {len}"
                );
            }
        }
    }

    fn read(header: &Header, versions: &Versions, snapshot: u64) -> (u8, Seen) {
        let mut byte = [0u8; 1];
        let seen = header.read_at(versions, snapshot, 7, &mut byte);
        (byte[0], seen)
    }

    #[test]
    fn snapshots_read_the_newest_version_at_or_before_them() {
        let versions = Versions::new(8);
        let header = chain(&versions, &[10, 20, 30]);
        assert_eq!(
            read(&header, &versions, 25),
            (20, Seen::Copied { newest: false })
        );
        assert_eq!(
            read(&header, &versions, 30),
            (30, Seen::Copied { newest: true })
        );
        assert_eq!(
            read(&header, &versions, 5),
            (0, Seen::Copied { newest: false })
        );
        assert!(header.changed_after(&versions, 15, 25));
        assert!(!header.changed_after(&versions, 30, 40));
        assert!(!header.changed_after(&versions, 5, 9));
    }

    #[test]
    fn cuts_and_trims_keep_what_snapshots_at_the_boundary_need() {
        let versions = Versions::new(8);
        let header = chain(&versions, &[10, 20, 30]);
        let mut retired = Vec::new();
        assert!(header.try_lock(CHECKPOINTER));
        header.trim(&versions, 25, &mut retired);
        assert_eq!(retired, vec![1], "only the version older than 20 goes");
        assert_eq!(header.cut(&versions, 25, &mut retired), Some(20));
        assert_eq!(retired, vec![1, 2]);
        header.unlock();
        assert_eq!(
            read(&header, &versions, 25),
            (20, Seen::Copied { newest: false })
        );
        assert_eq!(
            read(&header, &versions, 35),
            (30, Seen::Copied { newest: true })
        );
        assert_eq!(read(&header, &versions, 15), (0, Seen::TooOld));
        assert!(header.try_lock(CHECKPOINTER));
        assert_eq!(header.cut(&versions, 31, &mut retired), Some(30));
        assert!(header.is_empty());
        header.unlock();
        assert!(header.try_retire(), "an empty chain can be retired");
        assert!(!header.try_lock(1), "a retired header stays locked");
    }

    /// The checkpointer's single walk gives what its two readings and its cut gave: the
    /// same contents, the same base, the same versions retired, for every boundary pair
    /// over chains whose base was cut before (so older snapshots find their content gone).
    #[test]
    fn a_checkpoint_walk_reads_and_cuts_as_two_readings_and_a_cut() {
        let shapes: [&[u64]; 4] = [&[], &[10], &[10, 20, 30], &[5, 15, 25, 35, 45]];
        for stamps in shapes {
            for last in [0, 4, 10, 12, 20, 30, 40, 50] {
                for boundary in [last, last + 3, last + 10, last + 25, 60] {
                    let (a, b) = (Versions::new(16), Versions::new(16));
                    let (one, two) = (chain(&a, stamps), chain(&b, stamps));
                    if let Some(&newest) = stamps.last() {
                        // The base moved on by an earlier cut: older snapshots are gone.
                        let mut gone = Vec::new();
                        for (header, versions) in [(&one, &a), (&two, &b)] {
                            assert!(header.try_lock(CHECKPOINTER));
                            header.cut(versions, newest.min(stamps[0] + 1), &mut gone);
                            header.unlock();
                        }
                    }
                    let mut expected = (chunk(0), chunk(0), Vec::new());
                    let first = two.content_at(&b, last, &mut expected.0);
                    let _ = two.content_at(&b, boundary, &mut expected.1);
                    let mut got = (chunk(1), chunk(1), Vec::new());
                    assert!(one.try_lock(CHECKPOINTER) && two.try_lock(CHECKPOINTER));
                    let walked =
                        one.checkpoint(&a, (last, boundary), (&mut got.0, &mut got.1), &mut got.2);
                    let case = format!("{stamps:?} last {last} boundary {boundary}");
                    if first == Seen::TooOld {
                        assert_eq!(walked, Err(Seen::TooOld), "{case}");
                        assert_eq!(one.describe(&a), two.describe(&b), "untouched: {case}");
                        continue;
                    }
                    let cut = two.cut(&b, boundary, &mut expected.2);
                    assert_eq!(walked, Ok(cut), "{case}");
                    assert_eq!(got, expected, "{case}");
                    assert_eq!(one.describe(&a), two.describe(&b), "{case}");
                }
            }
        }
    }

    #[test]
    fn an_unpushed_version_is_skipped() {
        let versions = Versions::new(8);
        let header = chain(&versions, &[10]);
        assert!(header.try_lock(1));
        header.push(&versions, 2, &chunk(99));
        header.unpush(&versions, 2);
        header.unlock();
        assert_eq!(
            read(&header, &versions, 50),
            (10, Seen::Copied { newest: true })
        );
        let mut out = chunk(0);
        assert!(header.try_lock(1));
        assert_eq!(header.newest(&versions, &mut out), 10);
        assert_eq!(out, chunk(10));
    }
}
